//! One client's subscription to one master's wake channel: kept up (resubscribing with
//! back-off) for as long as the client lives, each message read and delivered to its waiter.

use std::sync::Weak;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::watch;

use super::{Grant, State};

/// Pause before resubscribing to a master whose subscription failed, doubled up to the maximum.
const RESUBSCRIBE_MIN: Duration = Duration::from_millis(50);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(2);

/// Reads a message from master `node`: `<waiter id>`, or `<waiter id> <token> <fence> <lock
/// key>` when the release handed the lock to the waiter there. Ids and tokens have no spaces;
/// the key, last, may.
fn parse_message(payload: &str, node: usize) -> (&str, Option<(Grant, String)>) {
    let mut parts = payload.splitn(4, ' ');
    let waiter = parts.next().unwrap_or_default();
    let grant = match (
        parts.next(),
        parts.next().map(str::parse::<u64>),
        parts.next(),
    ) {
        (Some(token), Some(Ok(fence)), Some(key)) => Some((
            Grant {
                node,
                token: token.to_owned(),
                fence,
            },
            key.to_owned(),
        )),
        _ => None,
    };
    (waiter, grant)
}

/// Where one subscription goes.
pub(super) struct Subscribed {
    pub(super) node: usize,
    pub(super) client: redis::Client,
    /// The client's wake channel.
    pub(super) channel: String,
    pub(super) connect_timeout: Duration,
}

/// Keeps the client's subscription on one master up until the client is dropped.
pub(super) async fn subscription(
    state: Weak<State>,
    to: Subscribed,
    ready: watch::Sender<bool>,
    mut alive: watch::Receiver<()>,
) {
    let Subscribed {
        node,
        client,
        channel,
        connect_timeout,
    } = to;
    let mut pause = RESUBSCRIBE_MIN;
    loop {
        let started = Instant::now();
        let connected = tokio::time::timeout(connect_timeout, async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(pubsub)
        })
        .await;
        match connected {
            Ok(Ok(pubsub)) => {
                let _ = ready.send(true);
                let mut messages = pubsub.into_on_message();
                loop {
                    tokio::select! {
                        message = messages.next() => {
                            let Some(message) = message else { break };
                            let Some(state) = state.upgrade() else { return };
                            let payload = String::from_utf8_lossy(message.get_payload_bytes());
                            let (waiter, grant) = parse_message(&payload, node);
                            if let Some(orphan) = state.deliver(waiter, grant) {
                                let _ = state.orphans.send(orphan);
                            }
                        }
                        changed = alive.changed() => if changed.is_err() { return },
                    }
                }
                let _ = ready.send(false);
                tracing::debug!(node, "release subscription lost; resubscribing");
            }
            Ok(Err(e)) => tracing::debug!(node, "release subscription failed: {e}"),
            Err(_) => tracing::debug!(node, "release subscription timed out"),
        }
        // A subscription that lived a while was healthy: start the back-off over.
        if started.elapsed() > RESUBSCRIBE_MAX {
            pause = RESUBSCRIBE_MIN;
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            changed = alive.changed() => if changed.is_err() { return },
        }
        pause = (pause * 2).min(RESUBSCRIBE_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_read_as_wakes_or_grants() {
        assert_eq!(parse_message("ab.1", 2), ("ab.1", None));
        let (waiter, grant) = parse_message("ab.1 ab.1/f00d 42 rq:lock:a name with spaces", 3);
        assert_eq!(waiter, "ab.1");
        let (grant, key) = grant.unwrap();
        assert_eq!(
            grant,
            Grant {
                node: 3,
                token: "ab.1/f00d".to_owned(),
                fence: 42
            }
        );
        assert_eq!(key, "rq:lock:a name with spaces");
        // Anything malformed is at most a wake.
        assert_eq!(parse_message("ab.1 tok notanumber key", 0), ("ab.1", None));
    }
}
