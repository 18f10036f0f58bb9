//! One client's subscriptions to the masters' wake channels, and the keeper task that makes
//! them, makes them again when they break, and reads them when no waiter does.
//!
//! A waiter reads the subscriptions itself while it waits (see `woken.rs`), so that a release's
//! messages wake the waiter they are for, and no task in between. When no waiter reads, the
//! keeper does: so that a grant for a waiter that is gone is given back at once rather than
//! left until its TTL. The last waiter to stop reading leaves the keeper's waker with the
//! socket rather than wake it (see `node/wire/state`): the keeper is woken only when something
//! comes that no waiter reads.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use redis::Value;
use tokio::sync::watch;

use super::{Grant, State};
use crate::node::{Dialer, Listening, Wire};

/// Pause before making a subscription again after it failed, doubled up to the maximum.
const RESUBSCRIBE_MIN: Duration = Duration::from_millis(50);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(2);

/// Reads a message from master `node`'s process `sender`: `<waiter id>`, or `<waiter id>
/// <token> <fence> <lock key>` when the release handed the lock to the waiter there. Ids and
/// tokens have no spaces; the key, last, may.
pub(super) fn parse_message(
    payload: &str,
    node: usize,
    sender: Option<Arc<str>>,
) -> (&str, Option<(Grant, String)>) {
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
                sender,
            },
            key.to_owned(),
        )),
        _ => None,
    };
    (waiter, grant)
}

/// The payload of a pub/sub message (`message <channel> <payload>`); `None` for anything else
/// a subscription says.
pub(super) fn payload(message: &Value) -> Option<String> {
    let Value::Array(parts) = message else {
        return None;
    };
    match parts.as_slice() {
        [Value::BulkString(kind), _, Value::BulkString(payload)] if kind == b"message" => {
            Some(String::from_utf8_lossy(payload).into_owned())
        }
        _ => None,
    }
}

/// Reads what each of `listening` (with its master's number) has heard, as the task `cx`
/// wakes, and delivers it: the waiters named are woken (this task is being polled already),
/// and grants for waiters that are gone go to be given back. The masters whose subscription
/// broke.
pub(super) fn hear<'a>(
    state: &State,
    listening: impl IntoIterator<Item = (usize, &'a mut Listening)>,
    cx: &mut Context<'_>,
) -> Vec<usize> {
    let mut broken = Vec::new();
    let mut wake = Vec::new();
    for (node, listening) in listening {
        let heard = listening.poll_heard(cx);
        if heard.broken {
            broken.push(node);
        }
        for message in heard.messages {
            let Some(payload) = payload(&message) else {
                continue;
            };
            let (waiter, grant) = parse_message(&payload, node, listening.identity());
            match state.deliver(waiter, grant) {
                Delivered::Wake(waker) => wake.push(waker),
                Delivered::Orphan(orphan) => {
                    let _ = state.orphans.send(orphan);
                }
                Delivered::Done => {}
            }
        }
    }
    for waker in wake {
        if !waker.will_wake(cx.waker()) {
            waker.wake();
        }
    }
    broken
}

/// What a delivered message calls for.
pub(super) enum Delivered {
    /// Wake the waiter it named.
    Wake(std::task::Waker),
    /// A lock handed to a waiter that is gone, to be given back.
    Orphan(super::Orphan),
    Done,
}

/// One client's subscriptions, one per master.
#[derive(Debug)]
pub(super) struct Subscriptions {
    /// The connection to each master, replaced by the keeper when it breaks.
    wires: Vec<Mutex<Option<Wire>>>,
    /// How many are subscribed and read.
    ready: watch::Sender<usize>,
}

impl Subscriptions {
    pub(super) fn new(masters: usize) -> Self {
        Subscriptions {
            wires: (0..masters).map(|_| Mutex::new(None)).collect(),
            ready: watch::channel(0).0,
        }
    }

    /// A waiter's listener on each subscription that is up, by master.
    pub(super) fn listen(&self) -> Vec<(usize, Listening)> {
        self.wires
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| {
                let wire = slot.lock().unwrap_or_else(PoisonError::into_inner);
                wire.as_ref().map(|w| (i, w.listen(false)))
            })
            .collect()
    }

    /// How many subscriptions are up.
    pub(super) fn ready(&self) -> watch::Receiver<usize> {
        self.ready.subscribe()
    }
}

/// One master's subscription, as the keeper sees it.
struct Kept {
    dialer: Dialer,
    /// The keeper's own listener on the current connection.
    listening: Option<Listening>,
    /// When to make the subscription again, and the pause after that.
    retry_at: Instant,
    pause: Duration,
    made_at: Instant,
}

/// Keeps the client's subscriptions up, and reads them when no waiter does, until the client
/// is dropped.
pub(super) async fn keep(
    state: Weak<State>,
    subscriptions: std::sync::Arc<Subscriptions>,
    dialers: Vec<Dialer>,
    channel: String,
    mut alive: watch::Receiver<()>,
) {
    let now = Instant::now();
    let mut kept: Vec<Kept> = dialers
        .into_iter()
        .map(|dialer| Kept {
            dialer,
            listening: None,
            retry_at: now,
            pause: RESUBSCRIBE_MIN,
            made_at: now,
        })
        .collect();
    loop {
        // Make what is missing or broken, and count what is up.
        let now = Instant::now();
        let mut ready = 0;
        let mut next_retry: Option<Instant> = None;
        for (i, k) in kept.iter_mut().enumerate() {
            let mut slot = subscriptions.wires[i]
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match slot.as_ref() {
                Some(wire) if !wire.is_broken() => {
                    if wire.is_open() {
                        ready += 1;
                        // A subscription that lived a while was healthy: start the back-off over.
                        if now.duration_since(k.made_at) > RESUBSCRIBE_MAX {
                            k.pause = RESUBSCRIBE_MIN;
                        }
                    }
                }
                _ if now >= k.retry_at => {
                    if slot.is_some() {
                        tracing::debug!(node = i, "release subscription lost; resubscribing");
                    }
                    let wire = k.dialer.subscribe(&channel);
                    k.listening = Some(wire.listen(true));
                    *slot = Some(wire);
                    k.made_at = now;
                    k.retry_at = now + k.pause;
                    k.pause = (k.pause * 2).min(RESUBSCRIBE_MAX);
                }
                _ => next_retry = Some(next_retry.map_or(k.retry_at, |t| t.min(k.retry_at))),
            }
        }
        subscriptions.ready.send_if_modified(|n| {
            let changed = *n != ready;
            *n = ready;
            changed
        });
        // Woken by what comes (messages nobody else reads, a connection that opens or breaks);
        // a timer only to make a failed subscription again.
        let retry = next_retry.map(|at| tokio::time::sleep_until(at.into()));
        // The client's end of `alive` is dropped with the client.
        let dropped = alive.changed();
        tokio::pin!(retry, dropped);
        let stop = std::future::poll_fn(|cx| {
            let Some(state) = state.upgrade() else {
                return Poll::Ready(true);
            };
            let listening = kept
                .iter_mut()
                .enumerate()
                .filter_map(|(i, k)| Some((i, k.listening.as_mut()?)));
            let broken = hear(&state, listening, cx);
            for &i in &broken {
                // Made again once its pause is over; heard from no more until then.
                kept[i].listening = None;
            }
            let broken = !broken.is_empty();
            if let Poll::Ready(Err(_)) = dropped.as_mut().poll(cx) {
                return Poll::Ready(true);
            }
            let retry_due = retry
                .as_mut()
                .as_pin_mut()
                .is_some_and(|retry| retry.poll(cx).is_ready());
            // A subscription that came up since is counted on the next round.
            let up = subscriptions
                .wires
                .iter()
                .filter(|slot| {
                    let wire = slot.lock().unwrap_or_else(PoisonError::into_inner);
                    wire.as_ref().is_some_and(Wire::is_open)
                })
                .count();
            if broken || retry_due || up != ready {
                return Poll::Ready(false);
            }
            Poll::Pending
        })
        .await;
        if stop {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_read_as_wakes_or_grants() {
        assert_eq!(parse_message("ab.1", 2, None), ("ab.1", None));
        let sender: Option<Arc<str>> = Some("0123abcd".into());
        let (waiter, grant) = parse_message(
            "ab.1 ab.1/f00d 42 rq:lock:a name with spaces",
            3,
            sender.clone(),
        );
        assert_eq!(waiter, "ab.1");
        let (grant, key) = grant.unwrap();
        assert_eq!(
            grant,
            Grant {
                node: 3,
                token: "ab.1/f00d".to_owned(),
                fence: 42,
                sender,
            }
        );
        assert_eq!(key, "rq:lock:a name with spaces");
        // Anything malformed is at most a wake.
        assert_eq!(
            parse_message("ab.1 tok notanumber key", 0, None),
            ("ab.1", None)
        );
    }

    #[test]
    fn only_messages_carry_a_payload() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let message = Value::Array(vec![bulk("message"), bulk("ch"), bulk("ab.1")]);
        assert_eq!(payload(&message).as_deref(), Some("ab.1"));
        let confirmation = Value::Array(vec![bulk("subscribe"), bulk("ch"), Value::Int(1)]);
        assert_eq!(payload(&confirmation), None);
        assert_eq!(payload(&Value::Int(1)), None);
    }
}
