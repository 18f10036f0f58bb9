//! Multi-locks over HTTP: several names taken all or nothing (`POST /v1/multi`), then extended
//! or released together with the tokens the acquire gave, one per name.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use futures::future::join_all;
use redquorum::config::defaults;
use redquorum::{Lock, LockKind};
use serde_json::{Map, Value};

use super::AppState;
use super::departure::Departure;
use super::error::ApiError;
use super::kind::{OwnerUse, inward, kind_fields, outward};
use super::request::Fields;
use super::routes::{
    ACQUIRE_FIELDS, acquire_params, body_kind, expires_at, millis, owner_to_log,
    unless_shutting_down, watched,
};
use super::units::millis_of;

/// `POST /v1/multi`: take every one of `names` (each on its own quorum, of one kind), all or
/// nothing, waiting up to `wait_ms` in all.
pub(crate) async fn acquire(
    State(state): State<AppState>,
    departure: Departure,
    body: Fields,
) -> Result<Json<Value>, ApiError> {
    let mut allowed = ACQUIRE_FIELDS.to_vec();
    allowed.push("names");
    let body = body.only(&allowed)?;
    let names = body
        .strings("names", "invalid_names")?
        .ok_or_else(|| ApiError::bad_request("invalid_names", "names is required"))?;
    let params = acquire_params(&body)?;
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let _admitted = state
        .admission
        .admit(false, !params.wait.is_zero(), &names)?;
    let multi = unless_shutting_down(
        &state,
        watched(&departure, params.wait),
        state.client.acquire_all(&names, &params.opts),
    )
    .await?;
    tracing::debug!(
        locks = multi.locks().len(),
        kind = params.kind.kind.as_str(),
        owner = owner_to_log(&params.kind),
        "acquired all"
    );
    let mut answer = set_json(multi.locks(), &params.kind.kind, true);
    if let Some(owner) = params.kind.owner {
        answer.insert("owner".to_owned(), owner.into());
    }
    // The caller holds the locks now; this process keeps nothing of them.
    drop(multi);
    Ok(Json(Value::Object(answer)))
}

/// `POST /v1/multi/extend`: set a new TTL on every name of `tokens`, all at once.
pub(crate) async fn extend(
    State(state): State<AppState>,
    body: Fields,
) -> Result<Json<Value>, ApiError> {
    let body = body.only(&["tokens", "ttl_ms", "kind", "permits", "owner"])?;
    let ttl = millis(body.u64("ttl_ms", "invalid_ttl")?, defaults::TTL);
    let (kind, tokens) = kind_and_tokens(&body)?;
    let client = &state.client;
    let results = join_all(
        tokens
            .iter()
            .map(|(name, token)| client.extend_token_as(name, &kind, token, ttl)),
    )
    .await;
    let locks = first_error(&tokens, results)?;
    Ok(Json(Value::Object(set_json(&locks, &kind, false))))
}

/// `POST /v1/multi/release`: release every name of `tokens`, all at once.
pub(crate) async fn release(
    State(state): State<AppState>,
    body: Fields,
) -> Result<Json<Value>, ApiError> {
    let body = body.only(&["tokens", "kind", "permits", "owner"])?;
    let (kind, tokens) = kind_and_tokens(&body)?;
    let client = &state.client;
    let results = join_all(
        tokens
            .iter()
            .map(|(name, token)| client.release_token_as(name, &kind, token)),
    )
    .await;
    first_error(&tokens, results)?;
    let mut answer = Map::new();
    let names: Vec<&str> = tokens.iter().map(|(n, _)| n.as_str()).collect();
    answer.insert("names".to_owned(), names.into());
    kind_fields(&kind, &mut answer);
    answer.insert("released".to_owned(), true.into());
    Ok(Json(Value::Object(answer)))
}

/// The kind named in the body, and each name's library token, checked to be of that kind
/// before anything is sent to the masters.
fn kind_and_tokens(body: &Fields) -> Result<(LockKind, Vec<(String, String)>), ApiError> {
    let kind = body_kind(body, OwnerUse::IdOnly)?.kind;
    let tokens = body
        .string_map("tokens", "invalid_tokens")?
        .ok_or_else(|| {
            ApiError::bad_request(
                "invalid_tokens",
                "tokens is required: {name: token} as the acquire gave them",
            )
        })?;
    if tokens.is_empty() || tokens.len() > redquorum::config::limits::MAX_MULTI_NAMES {
        return Err(ApiError::bad_request(
            "invalid_tokens",
            format!(
                "tokens must name 1 to {} locks",
                redquorum::config::limits::MAX_MULTI_NAMES
            ),
        ));
    }
    // Every name and token is checked before any is used: the names are extended or released
    // one by one, and a bad one found by the library would leave the others done.
    let tokens = tokens
        .into_iter()
        .map(|(name, token)| {
            redquorum::config::validate_name(&name)?;
            Ok((name, inward(&kind, &token)?.to_owned()))
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok((kind, tokens))
}

/// Every result, or the first error with the name it is about (the other names were done).
fn first_error<T>(
    tokens: &[(String, String)],
    results: Vec<redquorum::Result<T>>,
) -> Result<Vec<T>, ApiError> {
    let mut done = Vec::with_capacity(results.len());
    for ((name, _), result) in tokens.iter().zip(results) {
        match result {
            Ok(value) => done.push(value),
            Err(e) => return Err(ApiError::from(e).with_name(name)),
        }
    }
    Ok(done)
}

/// A set of locks as the answer gives them: `names`, the kind, `fences` (and `tokens` when
/// `with_tokens`) by name, and the validity of the set (the shortest).
fn set_json(locks: &[Lock], kind: &LockKind, with_tokens: bool) -> Map<String, Value> {
    let mut answer = Map::new();
    let names: Vec<&str> = locks.iter().map(Lock::name).collect();
    answer.insert("names".to_owned(), names.into());
    kind_fields(kind, &mut answer);
    if with_tokens {
        let tokens: Map<String, Value> = locks
            .iter()
            .map(|l| (l.name().to_owned(), outward(kind, l.token()).into()))
            .collect();
        answer.insert("tokens".to_owned(), tokens.into());
    }
    let fences: Map<String, Value> = locks
        .iter()
        .map(|l| (l.name().to_owned(), l.fence().into()))
        .collect();
    answer.insert("fences".to_owned(), fences.into());
    let ttl = locks.iter().map(Lock::ttl).min().unwrap_or(Duration::ZERO);
    let validity = locks
        .iter()
        .map(Lock::remaining)
        .min()
        .unwrap_or(Duration::ZERO);
    answer.insert("ttl_ms".to_owned(), millis_of(ttl).into());
    answer.insert("validity_ms".to_owned(), millis_of(validity).into());
    answer.insert("expires_at".to_owned(), expires_at(validity).into());
    answer
}
