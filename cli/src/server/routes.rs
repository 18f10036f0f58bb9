//! The lock API's handlers: acquire, extend, release, inspect, the deployment check, and the
//! health probes.

use std::time::{Duration, SystemTime};

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::AppState;
use super::error::ApiError;
use super::request::Fields;
use super::units::millis_of;
use redquorum::config::defaults;
use redquorum::{DoctorReport, Lock, LockOptions, Problem};

/// Longest wait one HTTP request may ask for: 10 min. Longer waits belong in a retry loop.
pub const MAX_HTTP_WAIT: Duration = Duration::from_secs(600);
/// Longest owner label accepted, in bytes.
pub const MAX_OWNER_BYTES: usize = 128;

/// The lock name from the path, percent-decoded.
pub(crate) fn lock_name(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    path.map(|Path(name)| name).map_err(|e| {
        ApiError::bad_request(
            "invalid_name",
            format!("the lock name in the path is not valid: {e}"),
        )
    })
}

/// Milliseconds as a duration, with the field's error code when absent and required.
fn millis(ms: Option<u64>, default: Duration) -> Duration {
    ms.map_or(default, Duration::from_millis)
}

/// What an acquire asks for, shared by plain acquires and sessions.
pub(crate) struct AcquireParams {
    pub(crate) opts: LockOptions,
    /// The TTL asked for (also in `opts`).
    pub(crate) ttl: Duration,
    pub(crate) owner: Option<String>,
}

pub(crate) fn acquire_params(body: Fields) -> Result<AcquireParams, ApiError> {
    let body = body.only(&["ttl_ms", "wait_ms", "owner", "fair"])?;
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
    let owner = body.string("owner", "invalid_owner")?;
    if owner.as_ref().is_some_and(|o| o.len() > MAX_OWNER_BYTES) {
        return Err(ApiError::bad_request(
            "invalid_owner",
            format!("owner is at most {MAX_OWNER_BYTES} bytes"),
        ));
    }
    let fair = body.bool("fair", "invalid_fair")?.unwrap_or(defaults::FAIR);
    Ok(AcquireParams {
        opts: LockOptions::new(ttl).wait(wait).fair(fair),
        ttl,
        owner,
    })
}

/// The fields every answer about a held lock carries.
pub(crate) fn lock_json(
    lock_name: &str,
    token: Option<&str>,
    fence: u64,
    ttl: Duration,
    validity: Duration,
) -> Value {
    let mut body = json!({
        "name": lock_name,
        "fence": fence,
        "ttl_ms": millis_of(ttl),
        "validity_ms": millis_of(validity),
        "expires_at": expires_at(validity),
    });
    if let (Some(token), Value::Object(map)) = (token, &mut body) {
        map.insert("token".to_owned(), Value::String(token.to_owned()));
    }
    body
}

/// When the validity ends, on the wall clock, for people and logs (the server's clock).
pub(crate) fn expires_at(validity: Duration) -> String {
    humantime::format_rfc3339_millis(SystemTime::now() + validity).to_string()
}

fn held(lock: &Lock) -> Value {
    lock_json(
        lock.name(),
        Some(lock.token()),
        lock.fence(),
        lock.ttl(),
        lock.remaining(),
    )
}

/// `POST /v1/locks/{name}`: take a lock, waiting up to `wait_ms`.
pub(crate) async fn acquire(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    body: Fields,
) -> Result<Json<Value>, ApiError> {
    let name = lock_name(path)?;
    let params = acquire_params(body)?;
    let lock = state.client.acquire(&name, &params.opts).await?;
    tracing::debug!(lock = %name, owner = params.owner.as_deref().unwrap_or(""), fence = lock.fence(), "acquired");
    let mut body = held(&lock);
    if let (Some(owner), Value::Object(map)) = (params.owner, &mut body) {
        map.insert("owner".to_owned(), Value::String(owner));
    }
    // The caller holds the lock now; this process keeps nothing of it.
    drop(lock);
    Ok(Json(body))
}

/// `POST /v1/locks/{name}/extend`: set a new TTL with the holder's token.
pub(crate) async fn extend(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    body: Fields,
) -> Result<Json<Value>, ApiError> {
    let name = lock_name(path)?;
    let body = body.only(&["token", "ttl_ms"])?;
    let token = body.required_string("token", "invalid_token")?;
    let ttl = millis(body.u64("ttl_ms", "invalid_ttl")?, defaults::TTL);
    let lock = state.client.extend_token(&name, &token, ttl).await?;
    Ok(Json(lock_json(
        lock.name(),
        None,
        lock.fence(),
        lock.ttl(),
        lock.remaining(),
    )))
}

/// `POST /v1/locks/{name}/release`: give the lock up with the holder's token.
pub(crate) async fn release(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    body: Fields,
) -> Result<Json<Value>, ApiError> {
    let name = lock_name(path)?;
    let body = body.only(&["token"])?;
    let token = body.required_string("token", "invalid_token")?;
    state.client.release_token(&name, &token).await?;
    Ok(Json(json!({"name": name, "released": true})))
}

/// `GET /v1/locks/{name}`: held or not, and each node's remaining TTL; never the token.
pub(crate) async fn inspect(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let name = lock_name(path)?;
    let info = state.client.inspect(&name).await?;
    let nodes: Vec<Value> = info
        .nodes
        .iter()
        .map(|n| match &n.ttl {
            Ok(ttl) => json!({"node": n.node, "ttl_ms": ttl.map(millis_of)}),
            Err(e) => json!({"node": n.node, "ttl_ms": null, "error": e.to_string()}),
        })
        .collect();
    Ok(Json(
        json!({"name": info.name, "held": info.held, "nodes": nodes}),
    ))
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

/// `GET /readyz`: a quorum of nodes is reachable and not quarantined.
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    let health = state.client.node_health().await;
    let usable = health
        .iter()
        .filter(|h| h.error.is_none() && h.quarantined_for.is_none())
        .count();
    let ready = usable >= state.client.quorum();
    let nodes: Vec<Value> = health
        .iter()
        .map(|h| {
            json!({
                "node": h.node,
                "reachable": h.error.is_none(),
                "durable": h.durable,
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
    let body =
        json!({"ready": ready, "usable": usable, "quorum": state.client.quorum(), "nodes": nodes});
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
