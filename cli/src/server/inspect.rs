//! `GET /v1/locks/{name}`: what the masters know of a lock of one kind (`?kind=read`, ...),
//! never a holder's token.

use axum::Json;
use axum::extract::{RawQuery, State};
use redquorum::{Client, LockKind, NodeLockState, Owner};
use serde_json::{Map, Value, json};

use super::AppState;
use super::error::ApiError;
use super::kind::{OwnerUse, kind_fields, request_kind};
use super::routes::{PathName, lock_name};
use super::units::millis_of;

/// The query parameters inspect takes.
const PARAMS: [&str; 3] = ["kind", "permits", "owner"];

/// `GET /v1/locks/{name}?kind=...&permits=...`: held or not, and each node's view.
pub(crate) async fn inspect(
    State(state): State<AppState>,
    path: PathName,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let name = lock_name(path)?;
    let params = query_params(query.as_deref().unwrap_or(""))?;
    let get = |key: &str| {
        params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let permits = get("permits")
        .map(|p| {
            p.parse::<u64>().map_err(|_| {
                ApiError::bad_request(
                    "invalid_permits",
                    format!("permits must be a whole number, not {p:?}"),
                )
            })
        })
        .transpose()?;
    let kind_name = get("kind");
    // Who owns a reentrant lock changes neither where it lives nor what inspect shows (never
    // the owner), so inspect does not ask for one.
    let kind = match (kind_name.as_deref(), get("owner"), permits) {
        (Some("reentrant"), None, None) => LockKind::Reentrant(Owner::from_id("inspect")?),
        (kind, owner, permits) => request_kind(kind, permits, owner, OwnerUse::IdOnly)?.kind,
    };
    let view = view(&state.client, &name, &kind).await?;
    let nodes: Vec<Value> = view.nodes.iter().map(|n| node_json(&kind, n)).collect();
    let mut body = Map::new();
    body.insert("name".to_owned(), name.into());
    kind_fields(&kind, &mut body);
    body.insert("held".to_owned(), view.held.into());
    body.insert("nodes".to_owned(), nodes.into());
    Ok(Json(Value::Object(body)))
}

/// The query's parameters, each at most once, none unknown.
fn query_params(query: &str) -> Result<Vec<(String, String)>, ApiError> {
    let mut params: Vec<(String, String)> = Vec::new();
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        if !PARAMS.contains(&&*key) {
            return Err(ApiError::bad_request(
                "unknown_field",
                format!(
                    "unknown query parameter {key:?}; expected one of: {}",
                    PARAMS.join(", ")
                ),
            ));
        }
        if params.iter().any(|(k, _)| *k == key) {
            return Err(ApiError::bad_request(
                "unknown_field",
                format!("query parameter {key:?} is given twice"),
            ));
        }
        params.push((key.into_owned(), value.into_owned()));
    }
    Ok(params)
}

/// What the masters know of a lock of one kind.
struct KindView {
    /// Whether the kind's quorum of masters has the lock (by any holder).
    held: bool,
    /// Each master's view, in the order the masters were given.
    nodes: Vec<NodeLockState>,
}

/// Reads a lock of `kind` on the masters: a reentrant lock and a mutex of one name share
/// their key, and a reader's and a writer's share are one read-write lock.
async fn view(client: &Client, name: &str, kind: &LockKind) -> Result<KindView, ApiError> {
    let info = client.inspect_as(name, kind).await?;
    Ok(KindView {
        held: info.held,
        nodes: info.nodes,
    })
}

/// One master's view: its TTL and, by kind, how many hold the lock there; never a token.
fn node_json(kind: &LockKind, n: &NodeLockState) -> Value {
    let mut node = json!({"node": n.node});
    match &n.ttl {
        Ok(ttl) => node["ttl_ms"] = json!(ttl.map(millis_of)),
        Err(e) => {
            node["ttl_ms"] = Value::Null;
            node["error"] = json!(e.to_string());
            return node;
        }
    }
    match kind {
        LockKind::Mutex => {}
        LockKind::Reentrant(_) => node["holds"] = json!(n.holds),
        LockKind::Read | LockKind::Write => {
            node["readers"] = json!(n.readers);
            node["writers"] = json!(n.writers);
            node["writer_waiting"] = json!(n.writer_waiting);
        }
        LockKind::Semaphore { .. } => {
            node["holders"] = json!(n.holders);
            node["permits"] = json!(n.permits);
        }
        _ => node["holders"] = json!(n.holders),
    }
    node
}
