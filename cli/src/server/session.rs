//! Sessions: a lock held for as long as the client keeps a streaming response open.
//!
//! The response is newline-delimited JSON: an `acquired` event, a `renewed` event after each
//! background renewal (`suspect` when one fails), and a last `lost` or `released` event. When
//! the client goes away the stream's receiver is dropped, which the session task notices at
//! once and answers by releasing the lock.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::AppState;
use super::error::ApiError;
use super::http_metrics::SESSIONS_OPEN;
use super::request::Fields;
use super::routes::{
    ACQUIRE_FIELDS, PathName, acquire_params, expires_at, lock_json, lock_name, owner_to_log,
    unless_shutting_down,
};
use super::units::millis_of;
use redquorum::{LockGuard, LockState, RenewOptions};

/// `POST /v1/locks/{name}/session`: acquire (waiting up to `wait_ms`), then stream events
/// while the server renews the lock, until the client disconnects or the lock is lost.
pub(crate) async fn session(
    State(state): State<AppState>,
    path: PathName,
    body: Fields,
) -> Result<Response, ApiError> {
    let name = lock_name(path)?;
    let params = acquire_params(&body.only(&ACQUIRE_FIELDS)?)?;
    let guard = unless_shutting_down(
        &state,
        state
            .client
            .acquire_guard(&name, &params.opts, RenewOptions::default()),
    )
    .await?;
    tracing::info!(lock = ?name, kind = params.kind.kind.as_str(), owner = owner_to_log(&params.kind), fence = guard.fence(), "session opened");
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let mut first = lock_json(
        &name,
        &params.kind.kind,
        Some(guard.token()),
        guard.fence(),
        params.ttl,
        guard.remaining(),
    );
    if let Value::Object(map) = &mut first {
        map.insert("event".to_owned(), Value::String("acquired".to_owned()));
        if let Some(owner) = params.kind.owner {
            map.insert("owner".to_owned(), Value::String(owner));
        }
    }
    // The channel has room: the first event cannot fail to queue.
    let _ = tx.try_send(line(&first));
    tokio::spawn(run(guard, tx, state.shutdown.clone()));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|bytes| (Ok::<_, Infallible>(bytes), rx))
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

/// Counts one open session in [`SESSIONS_OPEN`] while it lives.
struct OpenSession;

impl OpenSession {
    fn new() -> Self {
        metrics::gauge!(SESSIONS_OPEN).increment(1.0);
        OpenSession
    }
}

impl Drop for OpenSession {
    fn drop(&mut self) {
        metrics::gauge!(SESSIONS_OPEN).decrement(1.0);
    }
}

/// Follows the guard and writes its events until the client leaves, the lock is lost, or the
/// server shuts down; then releases the lock (unless it was lost).
async fn run(
    guard: LockGuard,
    tx: mpsc::Sender<Bytes>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let _open = OpenSession::new();
    let name = guard.name().to_owned();
    let mut watch = guard.watch();
    let mut renewals = 0;
    loop {
        tokio::select! {
            () = tx.closed() => {
                tracing::info!(lock = ?name, "session client went away; releasing");
                break;
            }
            () = shutdown.cancelled() => {
                // Released first, then said: a client told `released` may let other work
                // start, and a release no quorum confirmed leaves the lock held until its TTL.
                let event = match guard.release().await {
                    Ok(()) => json!({"event": "released", "reason": SHUTTING_DOWN}),
                    Err(e) => {
                        tracing::warn!(lock = ?name, "session release at shutdown failed (the lock expires at its TTL): {e}");
                        json!({
                            "event": "release_failed",
                            "reason": SHUTTING_DOWN,
                            "message": format!("the release was not confirmed by a quorum ({e}); the lock may stay held until its TTL runs out"),
                        })
                    }
                };
                let _ = tx.send(line(&event)).await;
                return;
            }
            status = watch.changed() => {
                let Some(status) = status else { break };
                let event = match status.state {
                    LockState::Lost => {
                        let _ = tx
                            .send(line(&json!({"event": "lost", "message": "the lock expired without a quorum renewal, or a quorum no longer has it; stop the work it protects"})))
                            .await;
                        tracing::warn!(lock = ?name, "session lock lost");
                        return;
                    }
                    LockState::Suspect => {
                        let validity_ms = millis_of(watch.remaining());
                        // With no validity left the lock is as good as lost, and `lost`
                        // follows: `suspect` says that the lock is still valid.
                        if validity_ms == 0 {
                            continue;
                        }
                        json!({"event": "suspect", "validity_ms": validity_ms})
                    }
                    _ if status.renewals > renewals => {
                        renewals = status.renewals;
                        json!({
                            "event": "renewed",
                            "renewals": renewals,
                            "validity_ms": millis_of(watch.remaining()),
                            "expires_at": expires_at(watch.remaining()),
                        })
                    }
                    _ => continue,
                };
                if tx.send(line(&event)).await.is_err() {
                    break;
                }
            }
        }
    }
    if let Err(e) = guard.release().await {
        tracing::warn!(lock = ?name, "session release failed (the lock expires at its TTL): {e}");
    }
}

/// Why a session ends when the server stops.
const SHUTTING_DOWN: &str = "the server is shutting down";

fn line(event: &Value) -> Bytes {
    let mut bytes = event.to_string().into_bytes();
    bytes.push(b'\n');
    Bytes::from(bytes)
}
