//! Waking waiters when a lock is released, instead of leaving them to poll.
//!
//! A release publishes the released token on `{prefix}released:{name}` on every master where it
//! deleted the lock. Each client keeps one pattern subscription per master, shared by all of its
//! waiters, started on the first wait. Waiters queue per name, first come first served, and a
//! release wakes exactly one of them (the same release heard from several masters counts once):
//! waking all would send every waiter at the nodes for a lock only one can win. The woken
//! waiter retries at once; every waiter also keeps its jittered retry delay, which is what
//! carries it when a message is lost or a master's subscription is down.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::{oneshot, watch};

use crate::client::Inner;

/// Released tokens remembered per name, to wake once per release however many masters say so.
const RECENT_RELEASES: usize = 8;
/// Pause before resubscribing to a master whose subscription failed, doubled up to the maximum.
const RESUBSCRIBE_MIN: Duration = Duration::from_millis(50);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(2);

#[derive(Debug, Default)]
struct NameQueue {
    waiting: VecDeque<oneshot::Sender<()>>,
    recent: VecDeque<String>,
}

/// The waiters of one client, and its subscriptions.
#[derive(Debug)]
pub(crate) struct Waiters {
    channel_prefix: String,
    queues: Mutex<HashMap<String, NameQueue>>,
    /// One flag per master: whether its subscription is confirmed and reading.
    subscribed: OnceLock<Vec<watch::Receiver<bool>>>,
    /// Dropped with the client, which stops the subscription tasks.
    _alive: watch::Sender<()>,
    alive: watch::Receiver<()>,
}

impl Waiters {
    pub(crate) fn new(key_prefix: &str) -> Self {
        let (alive_tx, alive_rx) = watch::channel(());
        Waiters {
            channel_prefix: format!("{key_prefix}released:"),
            queues: Mutex::new(HashMap::new()),
            subscribed: OnceLock::new(),
            _alive: alive_tx,
            alive: alive_rx,
        }
    }

    /// The channel a release of `name` is published on.
    pub(crate) fn channel(&self, name: &str) -> String {
        format!("{}{}", self.channel_prefix, name)
    }

    fn queues(&self) -> std::sync::MutexGuard<'_, HashMap<String, NameQueue>> {
        self.queues
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Joins the queue for `name`; the receiver fires when a release wakes this waiter. Join
    /// before each attempt, so that a release during the attempt is not missed.
    pub(crate) fn enqueue(&self, name: &str) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let mut queues = self.queues();
        let queue = queues.entry(name.to_owned()).or_default();
        // Waiters that gave up (got the lock, or were cancelled) leave closed senders behind.
        queue.waiting.retain(|w| !w.is_closed());
        queue.waiting.push_back(tx);
        rx
    }

    /// A release of `name` by `token` was heard: wake the first live waiter, once per release.
    fn released(&self, name: &str, token: &str) {
        let mut queues = self.queues();
        let Some(queue) = queues.get_mut(name) else {
            return;
        };
        if queue.recent.iter().any(|t| t == token) {
            return;
        }
        if queue.recent.len() == RECENT_RELEASES {
            queue.recent.pop_front();
        }
        queue.recent.push_back(token.to_owned());
        while let Some(waiter) = queue.waiting.pop_front() {
            if waiter.send(()).is_ok() {
                break;
            }
        }
        if queue.waiting.is_empty() {
            queues.remove(name);
        }
    }

    /// Starts the subscriptions (once) and waits until at least one is confirmed, for at most
    /// `patience`: a waiter should not miss a release that happens right after it starts, but
    /// if no master can be subscribed to, polling still works.
    pub(crate) async fn subscribe(&self, inner: &Arc<Inner>, patience: Duration) {
        let flags = self.subscribed.get_or_init(|| {
            let runtime = tokio::runtime::Handle::try_current();
            (0..inner.nodes.len())
                .map(|i| {
                    let (tx, rx) = watch::channel(false);
                    if let Ok(runtime) = &runtime {
                        runtime.spawn(subscription(
                            Arc::downgrade(inner),
                            i,
                            tx,
                            self.alive.clone(),
                        ));
                    }
                    rx
                })
                .collect()
        });
        if flags.iter().any(|f| *f.borrow()) {
            return;
        }
        let any = futures::future::select_all(flags.iter().map(|f| {
            let mut f = f.clone();
            Box::pin(async move {
                let _ = f.wait_for(|ready| *ready).await;
            })
        }));
        let _ = tokio::time::timeout(patience, any).await;
    }
}

/// Keeps one master's pattern subscription up until the client is dropped.
async fn subscription(
    inner: Weak<Inner>,
    node: usize,
    ready: watch::Sender<bool>,
    mut alive: watch::Receiver<()>,
) {
    let mut pause = RESUBSCRIBE_MIN;
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let client = strong.nodes[node].redis_client().clone();
        let pattern = format!("{}*", strong.waiters.channel_prefix);
        let connect_timeout = strong.settings.connect_timeout;
        drop(strong);
        let started = Instant::now();
        let connected = tokio::time::timeout(connect_timeout, async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.psubscribe(&pattern).await?;
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
                            let Some(strong) = inner.upgrade() else { return };
                            let waiters = &strong.waiters;
                            if let Some(name) = message.get_channel_name().strip_prefix(&waiters.channel_prefix) {
                                let token = String::from_utf8_lossy(message.get_payload_bytes());
                                waiters.released(name, &token);
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
    fn a_release_wakes_one_waiter_once_in_arrival_order() {
        let waiters = Waiters::new("p:");
        assert_eq!(waiters.channel("job"), "p:released:job");
        let mut first = waiters.enqueue("job");
        let mut second = waiters.enqueue("job");
        let mut other = waiters.enqueue("other");
        waiters.released("job", "t1");
        // Heard again from another master: no second wake.
        waiters.released("job", "t1");
        assert!(first.try_recv().is_ok());
        assert!(second.try_recv().is_err());
        assert!(other.try_recv().is_err());
        waiters.released("job", "t2");
        assert!(second.try_recv().is_ok());
    }

    #[test]
    fn waiters_that_left_are_skipped() {
        let waiters = Waiters::new("p:");
        let gone = waiters.enqueue("job");
        let mut next = waiters.enqueue("job");
        drop(gone);
        waiters.released("job", "t1");
        assert!(
            next.try_recv().is_ok(),
            "the wake passed over the waiter that left"
        );
        // Nobody waits any more: the queue is gone, and memory with it.
        assert!(waiters.queues().is_empty());
    }
}
