//! The lock API's handlers: acquire, extend and release of a lock of any kind, the deployment
//! check, and the health probes.

use std::convert::Infallible;
use std::future::Future;
use std::time::{Duration, SystemTime};

use axum::Json;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::AppState;
use super::departure::Departure;
use super::error::ApiError;
use super::health::SharedHealth;
use super::kind::{OwnerUse, RequestKind, inward, kind_fields, outward, request_kind};
use super::request::Fields;
use super::units::millis_of;
use redquorum::config::defaults;
use redquorum::{DoctorReport, Lock, LockKind, LockOptions, Problem};

/// Longest wait one HTTP request may ask for: 10 min. Longer waits belong in a retry loop.
pub const MAX_HTTP_WAIT: Duration = Duration::from_secs(600);

/// The lock name from the path, percent-decoded and valid, or why the path holds no valid
/// name. It is an extractor that never refuses: the handler reads it after the body has been
/// read (so that a refused name leaves the connection usable) and before the body's fields.
pub(crate) struct PathName(Result<String, ApiError>);

impl<S: Send + Sync> FromRequestParts<S> for PathName {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Infallible> {
        // The routes with a name have no other segment that may hold a `%`, so the path's
        // escapes are the name's. Axum decodes a `%` without two hex digits after it as
        // itself: `%2` would be the name `%2`, which `%252` names too.
        if has_malformed_escape(parts.uri.path()) {
            return Ok(PathName(Err(ApiError::bad_request(
                "invalid_name",
                "the lock name in the path is not valid percent-encoding: each `%` must be \
                 followed by two hex digits (a `%` in a name is written `%25`)",
            ))));
        }
        let name = Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(name)| name)
            .map_err(|e| {
                ApiError::bad_request(
                    "invalid_name",
                    format!("the lock name in the path is not valid: {e}"),
                )
            })
            // Checked here, before the body's fields, as the library checks it: otherwise
            // `/v1/locks//extend` with no token was answered about the token.
            .and_then(|name| {
                redquorum::config::validate_name(&name)?;
                Ok(name)
            });
        Ok(PathName(name))
    }
}

/// The lock name, or the error that refuses it.
pub(crate) fn lock_name(path: PathName) -> Result<String, ApiError> {
    path.0
}

/// Whether a `%` in `path` is not followed by two hex digits.
fn has_malformed_escape(path: &str) -> bool {
    let bytes = path.as_bytes();
    bytes.iter().enumerate().any(|(i, &b)| {
        b == b'%'
            && !matches!(
                bytes.get(i + 1..i + 3),
                Some([high, low]) if high.is_ascii_hexdigit() && low.is_ascii_hexdigit()
            )
    })
}

/// Milliseconds as a duration, or the default when absent.
pub(crate) fn millis(ms: Option<u64>, default: Duration) -> Duration {
    ms.map_or(default, Duration::from_millis)
}

/// What an acquire asks for, shared by plain acquires, sessions and multi-locks.
pub(crate) struct AcquireParams {
    pub(crate) opts: LockOptions,
    /// The TTL asked for (also in `opts`).
    pub(crate) ttl: Duration,
    /// How long it may wait (also in `opts`).
    pub(crate) wait: Duration,
    /// The kind asked for (also in `opts`) and the owner given.
    pub(crate) kind: RequestKind,
}

/// The fields every acquire takes; a route may take more (`names` for a multi-lock).
pub(crate) const ACQUIRE_FIELDS: [&str; 6] =
    ["ttl_ms", "wait_ms", "owner", "fair", "kind", "permits"];

/// Reads an acquire's fields (see [`ACQUIRE_FIELDS`]); the caller refuses unknown ones.
pub(crate) fn acquire_params(body: &Fields) -> Result<AcquireParams, ApiError> {
    let ttl = millis(body.u64("ttl_ms", "invalid_ttl")?, defaults::TTL);
    let wait = millis(body.u64("wait_ms", "invalid_wait")?, Duration::ZERO);
    if wait > MAX_HTTP_WAIT {
        return Err(ApiError::bad_request(
            "invalid_wait",
            format!(
                "wait_ms is at most {} ({} min)",
                MAX_HTTP_WAIT.as_millis(),
                MAX_HTTP_WAIT.as_secs() / 60
            ),
        ));
    }
    let kind = body_kind(body, OwnerUse::IdOrLabel)?;
    let fair = body.bool("fair", "invalid_fair")?.unwrap_or(defaults::FAIR);
    Ok(AcquireParams {
        opts: LockOptions::new(ttl)
            .wait(wait)
            .fair(fair)
            .kind(kind.kind.clone()),
        ttl,
        wait,
        kind,
    })
}

/// `kind`, `permits` and `owner` from a body.
pub(crate) fn body_kind(body: &Fields, owner_use: OwnerUse) -> Result<RequestKind, ApiError> {
    let kind = body.string("kind", "invalid_kind")?;
    let permits = body.whole("permits", "invalid_permits", "a whole number")?;
    let owner = body.string("owner", "invalid_owner")?;
    request_kind(kind.as_deref(), permits, owner, owner_use)
}

/// `acquiring`, unless the server shuts down first, or the client goes away while it waits
/// (watched when `departure` is given: only a wait gives a client the time to leave). Either
/// way, a waiting acquire would otherwise hold on: the shutdown up for as long as it may wait,
/// and a place in line, then the lock it is handed, for nobody. Given up, it gives back what
/// an attempt under way got and its place in the queue, as every dropped acquire does.
pub(crate) async fn unless_shutting_down<T>(
    state: &AppState,
    departure: Option<&Departure>,
    acquiring: impl Future<Output = redquorum::Result<T>>,
) -> Result<T, ApiError> {
    let departed = async {
        match departure {
            Some(departure) => departure.departed().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        // A request that comes in while the server stops asks no master.
        biased;
        () = state.shutdown.cancelled() => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the server is shutting down; ask another instance, or this one once it is back",
        )),
        () = departed => {
            tracing::info!("a client went away while it waited; its acquire gave up");
            Err(client_gone())
        }
        result = acquiring => Ok(result?),
    }
}

/// The answer to a request whose client has gone: nobody reads it, but the request metrics
/// count it, under the status proxies give it.
fn client_gone() -> ApiError {
    ApiError::new(
        StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        "client_gone",
        "the client closed the connection while the request waited",
    )
}

/// The departure to watch for a request that waits up to `wait`: none when it does not wait.
pub(crate) fn watched(departure: &Departure, wait: Duration) -> Option<&Departure> {
    (!wait.is_zero()).then_some(departure)
}

/// The fields every answer about a held lock carries.
pub(crate) fn lock_json(
    lock_name: &str,
    kind: &LockKind,
    token: Option<&str>,
    fence: u64,
    ttl: Duration,
    validity: Duration,
) -> Value {
    let mut map = Map::new();
    map.insert("name".to_owned(), lock_name.into());
    kind_fields(kind, &mut map);
    if let Some(token) = token {
        map.insert("token".to_owned(), outward(kind, token).into());
    }
    map.insert("fence".to_owned(), fence.into());
    map.insert("ttl_ms".to_owned(), millis_of(ttl).into());
    map.insert("validity_ms".to_owned(), millis_of(validity).into());
    map.insert("expires_at".to_owned(), expires_at(validity).into());
    Value::Object(map)
}

/// When the validity ends, on the wall clock, for people and logs (the server's clock).
pub(crate) fn expires_at(validity: Duration) -> String {
    humantime::format_rfc3339_millis(SystemTime::now() + validity).to_string()
}

/// A held lock as the answer gives it, token included, with the owner the request gave.
pub(crate) fn held(lock: &Lock, owner: Option<&str>) -> Value {
    let mut body = lock_json(
        lock.name(),
        lock.kind(),
        Some(lock.token()),
        lock.fence(),
        lock.ttl(),
        lock.remaining(),
    );
    if let (Some(owner), Value::Object(map)) = (owner, &mut body) {
        map.insert("owner".to_owned(), owner.into());
    }
    body
}

/// The owner to log: a label, never a reentrant lock's id (whoever has it can re-enter).
pub(crate) fn owner_to_log(kind: &RequestKind) -> &str {
    match kind.kind {
        LockKind::Reentrant(_) => "",
        _ => kind.owner.as_deref().unwrap_or(""),
    }
}

/// `POST /v1/locks/{name}`: take a lock of any kind, waiting up to `wait_ms`.
pub(crate) async fn acquire(
    State(state): State<AppState>,
    departure: Departure,
    path: PathName,
    body: Fields,
) -> Result<Json<Value>, ApiError> {
    let name = lock_name(path)?;
    let params = acquire_params(&body.only(&ACQUIRE_FIELDS)?)?;
    let _admitted = state
        .admission
        .admit(false, !params.wait.is_zero(), &[&name])?;
    let lock = unless_shutting_down(
        &state,
        watched(&departure, params.wait),
        state.client.acquire(&name, &params.opts),
    )
    .await?;
    tracing::debug!(lock = ?name, kind = lock.kind().as_str(), owner = owner_to_log(&params.kind), fence = lock.fence(), "acquired");
    let body = held(&lock, params.kind.owner.as_deref());
    // The caller holds the lock now; this process keeps nothing of it.
    drop(lock);
    Ok(Json(body))
}

/// The kind and library token of an extend or release: the kind named in the body, and the
/// token checked to be of that kind.
fn kind_and_token(body: &Fields) -> Result<(LockKind, String), ApiError> {
    let kind = body_kind(body, OwnerUse::IdOnly)?.kind;
    let token = body.required_string("token", "invalid_token")?;
    let token = inward(&kind, &token)?.to_owned();
    Ok((kind, token))
}

/// `POST /v1/locks/{name}/extend`: set a new TTL with the holder's token.
pub(crate) async fn extend(
    State(state): State<AppState>,
    path: PathName,
    body: Fields,
) -> Result<Json<Value>, ApiError> {
    let name = lock_name(path)?;
    let body = body.only(&["token", "ttl_ms", "kind", "permits", "owner"])?;
    let ttl = millis(body.u64("ttl_ms", "invalid_ttl")?, defaults::TTL);
    let (kind, token) = kind_and_token(&body)?;
    let lock = state
        .client
        .extend_token_as(&name, &kind, &token, ttl)
        .await?;
    Ok(Json(lock_json(
        lock.name(),
        lock.kind(),
        None,
        lock.fence(),
        lock.ttl(),
        lock.remaining(),
    )))
}

/// `POST /v1/locks/{name}/release`: give the lock (or one hold of it) up with the holder's
/// token.
pub(crate) async fn release(
    State(state): State<AppState>,
    path: PathName,
    body: Fields,
) -> Result<Json<Value>, ApiError> {
    let name = lock_name(path)?;
    let body = body.only(&["token", "kind", "permits", "owner"])?;
    let (kind, token) = kind_and_token(&body)?;
    state.client.release_token_as(&name, &kind, &token).await?;
    let mut map = Map::new();
    map.insert("name".to_owned(), name.into());
    kind_fields(&kind, &mut map);
    map.insert("released".to_owned(), true.into());
    Ok(Json(Value::Object(map)))
}

/// `GET /v1/doctor`: the deployment check; 200 whether it is safe or not (the body says).
pub(crate) async fn doctor(State(state): State<AppState>) -> Json<Value> {
    Json(doctor_json(&state.client.doctor().await))
}

/// A [`DoctorReport`] as JSON, as `GET /v1/doctor` and `redquorum doctor --json` give it.
/// Durations are whole milliseconds, the round trip and the clock offset microseconds.
pub fn doctor_json(report: &DoctorReport) -> Value {
    let problems = |list: &[Problem]| -> Vec<Value> { list.iter().map(problem_json).collect() };
    let nodes: Vec<Value> = report
        .nodes
        .iter()
        .map(|n| {
            json!({
                "node": n.node,
                "reachable": n.reachable,
                "error": n.error,
                "redis_version": n.redis_version,
                "role": n.role,
                "run_id": n.run_id,
                "aof_enabled": n.aof_enabled,
                "appendfsync": n.appendfsync,
                "durable": n.durable,
                "maxmemory_policy": n.maxmemory_policy,
                "acl_user": n.acl_user,
                "acl_missing": n.acl_missing,
                "rtt_us": n.rtt.map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
                "clock_offset_us": n.clock_offset_micros,
                "quarantined_for_ms": n.quarantined_for.map(millis_of),
                "problems": problems(&n.problems),
            })
        })
        .collect();
    json!({
        "safe": report.safe,
        "quorum": report.quorum,
        "usable": report.usable,
        "nodes": nodes,
        "problems": problems(&report.problems),
    })
}

fn problem_json(p: &Problem) -> Value {
    json!({"severity": p.severity.as_str(), "code": p.code, "message": p.message})
}

/// `GET /healthz`: the process is up.
pub(crate) async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: a quorum of nodes can vote (reachable, not quarantined, and durable when
/// durable nodes are required), as an acquire needs.
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    readiness(&state.health).await
}

/// What `/readyz` answers, from the shared reading of the masters.
pub(crate) async fn readiness(shared: &SharedHealth) -> Response {
    let health = shared.read().await;
    let quorum = shared.quorum();
    let usable = health.iter().filter(|h| h.usable).count();
    let ready = usable >= quorum;
    let nodes: Vec<Value> = health
        .iter()
        .map(|h| {
            json!({
                "node": h.node,
                "reachable": h.error.is_none(),
                "durable": h.durable,
                "usable": h.usable,
                "quarantined_for_ms": h.quarantined_for.map(millis_of),
                "error": h.error,
            })
        })
        .collect();
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = json!({"ready": ready, "usable": usable, "quorum": quorum, "nodes": nodes});
    (status, Json(body)).into_response()
}

/// Any other path.
pub(crate) async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route; see the API reference",
    )
}

/// A known path with another method.
pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take that method",
    )
}
