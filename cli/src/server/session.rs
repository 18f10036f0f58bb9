//! Sessions: a lock held for as long as the client keeps a streaming response open.
//!
//! The response is newline-delimited JSON: an `acquired` event, a `renewed` event after each
//! background renewal (`suspect` when one fails), a `heartbeat` whenever a third of the TTL
//! passed without an event, and a last `lost` or `released` event. When the client goes away
//! (its connection closes, or the stream's receiver is dropped), the session task releases the
//! lock at once.
//!
//! Every event that says the lock is held carries `deadline_ms`: when its validity ends,
//! counted from the moment the server took the request up. The client's own deadline is when
//! it sent the request plus that, less a margin for the two clocks' rates: an event that comes
//! late (a stalled coordinator, a full socket buffer) then moves no deadline past the lock's
//! end, which `validity_ms`, counted from when the event was made, would.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::AppState;
use super::departure::Departure;
use super::error::ApiError;
use super::http_metrics::SESSIONS_OPEN;
use super::limits::Admitted;
use super::request::Fields;
use super::routes::{
    ACQUIRE_FIELDS, PathName, acquire_params, expires_at, lock_json, lock_name, owner_to_log,
    unless_shutting_down, watched,
};
use super::units::millis_of;
use redquorum::{LockGuard, LockState, LockWatch, RenewOptions};

/// The shortest TTL a session takes: each session renews its lock every third of its TTL on
/// every master, and a few sessions of tens of milliseconds kept masters busy with nothing else.
pub(crate) const MIN_SESSION_TTL: Duration = Duration::from_millis(500);

/// `POST /v1/locks/{name}/session`: acquire (waiting up to `wait_ms`), then stream events
/// while the server renews the lock, until the client disconnects or the lock is lost.
pub(crate) async fn session(
    State(state): State<AppState>,
    departure: Departure,
    path: PathName,
    body: Fields,
) -> Result<Response, ApiError> {
    // Before anything else: the client sent the request before this moment.
    let asked = Instant::now();
    let name = lock_name(path)?;
    let params = acquire_params(&body.only(&ACQUIRE_FIELDS)?)?;
    if params.ttl < MIN_SESSION_TTL {
        return Err(ApiError::bad_request(
            "invalid_ttl",
            format!(
                "a session's ttl_ms is at least {} (it is renewed every third of it)",
                MIN_SESSION_TTL.as_millis()
            ),
        ));
    }
    let mut admitted = state
        .admission
        .admit(true, !params.wait.is_zero(), &[&name])?;
    let guard = unless_shutting_down(
        &state,
        watched(&departure, params.wait),
        state
            .client
            .acquire_guard(&name, &params.opts, RenewOptions::default()),
    )
    .await?;
    admitted.done_waiting();
    tracing::info!(lock = ?name, kind = params.kind.kind.as_str(), owner = owner_to_log(&params.kind), fence = guard.fence(), "session opened");
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    // No token: a session's lock changes only through its session. With the token, a call to
    // `/extend` or `/release` (on any coordinator) could cut the lock on the masters while the
    // session, not told, went on saying it was held until its next renewal.
    let mut first = lock_json(
        &name,
        &params.kind.kind,
        None,
        guard.fence(),
        params.ttl,
        guard.remaining(),
    );
    if let Value::Object(map) = &mut first {
        map.insert("event".to_owned(), Value::String("acquired".to_owned()));
        map.insert(
            "deadline_ms".to_owned(),
            deadline_ms(asked, guard.remaining()).into(),
        );
        if let Some(owner) = params.kind.owner {
            map.insert("owner".to_owned(), Value::String(owner));
        }
    }
    // The channel has room: the first event cannot fail to queue.
    let _ = tx.try_send(line(&first));
    let session = Session {
        tx,
        shutdown: state.shutdown.clone(),
        asked,
        heartbeat: params.ttl / 3,
    };
    tokio::spawn(session.run(guard, departure, admitted));
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

/// When a lock with `remaining` validity now stops being valid, in whole milliseconds after
/// `asked`, rounded down.
fn deadline_ms(asked: Instant, remaining: Duration) -> u64 {
    millis_of((Instant::now() + remaining).saturating_duration_since(asked))
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

/// One session's stream, and what its events are measured against.
struct Session {
    tx: mpsc::Sender<Bytes>,
    shutdown: tokio_util::sync::CancellationToken,
    /// When the server took the request up (see [`deadline_ms`]).
    asked: Instant,
    /// The longest the stream goes without an event.
    heartbeat: Duration,
}

/// Why a session ends, other than by losing its lock.
enum End {
    /// The client went away: the lock is released, and nobody is told.
    Left,
    /// The server stops: the lock is released, and the client told.
    ShuttingDown,
}

/// What became of an event sent.
enum Sent {
    Sent,
    Ended(End),
}

impl Session {
    /// Follows the guard and writes its events until the client leaves, the lock is lost, or
    /// the server shuts down; then releases the lock (unless it was lost).
    async fn run(self, guard: LockGuard, departure: Departure, admitted: Admitted) {
        // Counted against the limit until the lock is released.
        let _admitted = admitted;
        let _open = OpenSession::new();
        let name = guard.name().to_owned();
        let mut watch = guard.watch();
        let departed = departure.departed();
        let mut departed = std::pin::pin!(departed);
        let mut renewals = 0;
        let mut quiet_until = Instant::now() + self.heartbeat;
        let end = loop {
            let event = tokio::select! {
                () = self.tx.closed() => break End::Left,
                () = &mut departed => break End::Left,
                () = self.shutdown.cancelled() => break End::ShuttingDown,
                () = tokio::time::sleep_until(quiet_until.into()) => {
                    // With no validity left, `lost` follows: a heartbeat says the lock is held.
                    if watch.remaining().is_zero() {
                        quiet_until = Instant::now() + self.heartbeat;
                        continue;
                    }
                    self.held("heartbeat", &watch)
                }
                status = watch.changed() => {
                    let Some(status) = status else { break End::Left };
                    match status.state {
                        LockState::Lost => {
                            tracing::warn!(lock = ?name, "session lock lost");
                            let lost = json!({"event": "lost", "message": "the lock expired without a quorum renewal, or a quorum no longer has it; stop the work it protects"});
                            let _ = self.send(&lost, departed.as_mut()).await;
                            return;
                        }
                        // With no validity left the lock is as good as lost, and `lost`
                        // follows: `suspect` says that the lock is still valid.
                        LockState::Suspect if watch.remaining().is_zero() => continue,
                        LockState::Suspect => self.held("suspect", &watch),
                        _ if status.renewals > renewals => {
                            renewals = status.renewals;
                            let mut event = self.held("renewed", &watch);
                            event["renewals"] = renewals.into();
                            event
                        }
                        _ => continue,
                    }
                }
            };
            quiet_until = Instant::now() + self.heartbeat;
            if let Sent::Ended(end) = self.send(&event, departed.as_mut()).await {
                break end;
            }
        };
        match end {
            End::Left => {
                tracing::info!(lock = ?name, "session client went away; releasing");
                if let Err(e) = guard.release().await {
                    tracing::warn!(lock = ?name, "session release failed (the lock expires at its TTL): {e}");
                }
            }
            End::ShuttingDown => self.release_at_shutdown(guard, &name).await,
        }
    }

    /// An event that says the lock is held: its validity now, and its deadline.
    fn held(&self, event: &str, watch: &LockWatch) -> Value {
        let remaining = watch.remaining();
        json!({
            "event": event,
            "validity_ms": millis_of(remaining),
            "deadline_ms": deadline_ms(self.asked, remaining),
            "expires_at": expires_at(remaining),
        })
    }

    /// Sends `event`, unless the client goes (`departed`) or the server stops first: a client
    /// that reads nothing fills the stream's buffers, and a send that waited for it would miss
    /// both and keep the lock renewed.
    async fn send(
        &self,
        event: &Value,
        departed: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
    ) -> Sent {
        tokio::select! {
            sent = self.tx.send(line(event)) => match sent {
                Ok(()) => Sent::Sent,
                Err(_) => Sent::Ended(End::Left),
            },
            () = departed => Sent::Ended(End::Left),
            () = self.shutdown.cancelled() => Sent::Ended(End::ShuttingDown),
        }
    }

    /// Releases the lock, then says so: a client told `released` may let other work start,
    /// and a release no quorum confirmed leaves the lock held until its TTL.
    async fn release_at_shutdown(&self, guard: LockGuard, name: &str) {
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
        // Waits for room at most until the shutdown's grace closes the connection, which
        // drops the stream's receiver.
        let _ = self.tx.send(line(&event)).await;
    }
}

/// Why a session ends when the server stops.
const SHUTTING_DOWN: &str = "the server is shutting down";

fn line(event: &Value) -> Bytes {
    let mut bytes = event.to_string().into_bytes();
    bytes.push(b'\n');
    Bytes::from(bytes)
}
