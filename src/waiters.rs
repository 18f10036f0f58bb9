//! Waking waiters when a lock is released, instead of leaving them to poll.
//!
//! Waiters queue on the masters themselves (see `lua/acquire.lua`): a refused attempt of a
//! caller that waits leaves its waiter id in the name's queue, in an order every master agrees
//! on, and only the first waiter may take a free lock. A waiter id is `<client id>.<n>`. A
//! release publishes the first waiter's id on that waiter's client's channel,
//! `{prefix}wake:<client id>`, on every master where it deleted the lock, so exactly one waiter
//! in all the clients wakes (waking all would send every waiter at the nodes for a lock only
//! one may take), and no other client even hears of it. Each client keeps one subscription per
//! master, shared by all of its waiters and started on the first wait.
//!
//! The same release heard from several masters may wake the waiter more than once, on purpose:
//! the first master to announce it may be well ahead of the others, and an attempt made then
//! finds the lock still held on a quorum; the next announcement is what says to try again. At
//! most one wake per master per release, and only for that one waiter.
//!
//! The woken waiter retries at once; every
//! waiter also keeps its jittered retry delay, which is what carries it when a message is lost
//! or a master's subscription is down.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::{oneshot, watch};

use crate::client::Inner;

/// Pause before resubscribing to a master whose subscription failed, doubled up to the maximum.
const RESUBSCRIBE_MIN: Duration = Duration::from_millis(50);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(2);

/// The waiters of one client, and its subscriptions.
#[derive(Debug)]
pub(crate) struct Waiters {
    /// `{prefix}wake:`; a client's channel is this and its id.
    wake_prefix: String,
    /// Random, so that clients that never met do not share waiter ids.
    client_id: String,
    next_waiter: AtomicU64,
    /// By waiter id: what fires on the next wake of a waiter that is listening.
    listeners: Mutex<HashMap<String, oneshot::Sender<()>>>,
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
            wake_prefix: format!("{key_prefix}wake:"),
            client_id: format!("{:016x}", rand::random::<u64>()),
            next_waiter: AtomicU64::new(0),
            listeners: Mutex::new(HashMap::new()),
            subscribed: OnceLock::new(),
            _alive: alive_tx,
            alive: alive_rx,
        }
    }

    /// What the scripts prepend to a waiter's client id to name the channel that wakes it.
    pub(crate) fn wake_prefix(&self) -> &str {
        &self.wake_prefix
    }

    /// An id for a new waiter of this client: `<client id>.<n>`.
    pub(crate) fn new_waiter(&self) -> Arc<str> {
        let n = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        format!("{}.{n}", self.client_id).into()
    }

    fn listeners(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<()>>> {
        self.listeners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Listens for the next release that names `waiter`. Listen before each attempt, so that
    /// a release during the attempt is not missed.
    pub(crate) fn listen(&self, waiter: &str) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.listeners().insert(waiter.to_owned(), tx);
        rx
    }

    /// The waiter is done waiting (it has the lock, gave up, or was cancelled).
    pub(crate) fn forget(&self, waiter: &str) {
        self.listeners().remove(waiter);
    }

    /// A master said that `waiter` goes next (after a release, or the departure of the waiter
    /// before it): wake it if it is listening. One that is not is about to attempt anyway.
    fn wake(&self, waiter: &str) {
        if let Some(wake) = self.listeners().remove(waiter) {
            let _ = wake.send(());
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

/// Keeps the client's subscription on one master up until the client is dropped.
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
        let channel = format!("{}{}", strong.waiters.wake_prefix, strong.waiters.client_id);
        let connect_timeout = strong.settings.connect_timeout;
        drop(strong);
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
                            let Some(strong) = inner.upgrade() else { return };
                            strong.waiters.wake(&String::from_utf8_lossy(message.get_payload_bytes()));
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
    fn a_wake_reaches_only_the_named_waiter() {
        let waiters = Waiters::new("p:");
        assert_eq!(waiters.wake_prefix(), "p:wake:");
        let (a, b) = (waiters.new_waiter(), waiters.new_waiter());
        assert_ne!(a, b);
        assert_eq!(a.split_once('.').map(|(c, _)| c), Some(&*waiters.client_id));
        let mut first = waiters.listen("w1");
        let mut second = waiters.listen("w2");
        waiters.wake("w1");
        assert!(first.try_recv().is_ok());
        assert!(second.try_recv().is_err(), "only the named waiter wakes");
        // Another master announcing the same release, before the waiter listens again: it is
        // attempting anyway. After it listens again: woken again, to retry.
        waiters.wake("w1");
        let mut again = waiters.listen("w1");
        assert!(again.try_recv().is_err());
        waiters.wake("w1");
        assert!(again.try_recv().is_ok());
    }

    #[test]
    fn waiters_that_left_are_forgotten() {
        let waiters = Waiters::new("p:");
        let _rx = waiters.listen("w1");
        waiters.forget("w1");
        // Named after it left (another client's master still had its place): nothing to wake.
        waiters.wake("w1");
        assert!(waiters.listeners().is_empty());
    }
}
