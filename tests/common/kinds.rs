//! Helpers for the tests of the lock kinds: overlap detectors, clients that reach only some
//! masters, racing workers, and raw reads of each kind's keys on one master.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redquorum::{Client, ClientBuilder, LockKind, LockOptions};
use redquorum_testkit::LocalNodes;

use super::raw;

/// Counts the holders inside a critical section and remembers the most seen at once: the
/// checks are made inside the section, by whoever enters.
#[derive(Debug, Default)]
pub struct Overlap {
    current: AtomicUsize,
    most: AtomicUsize,
}

impl Overlap {
    /// Enters the section; returns how many are inside now, this one included.
    pub fn enter(&self) -> usize {
        let now = self.current.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        now
    }

    pub fn leave(&self) {
        self.current.fetch_sub(1, Ordering::SeqCst);
    }

    /// The most holders that were ever inside at once.
    pub fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }
}

/// Readers and writers inside a read-write critical section; any writer beside anyone else is
/// a violation. Sequentially consistent counters: of a reader and a writer that overlap, the
/// second to enter sees the first.
#[derive(Debug, Default)]
pub struct RwOverlap {
    readers: Overlap,
    writers: Overlap,
    violated: AtomicBool,
}

impl RwOverlap {
    pub fn enter(&self, write: bool) {
        let bad = if write {
            self.writers.enter() > 1 || self.readers.current.load(Ordering::SeqCst) > 0
        } else {
            self.readers.enter();
            self.writers.current.load(Ordering::SeqCst) > 0
        };
        if bad {
            self.violated.store(true, Ordering::SeqCst);
        }
    }

    pub fn leave(&self, write: bool) {
        if write {
            self.writers.leave();
        } else {
            self.readers.leave();
        }
    }

    pub fn violated(&self) -> bool {
        self.violated.load(Ordering::SeqCst)
    }

    /// The most readers seen inside at once.
    pub fn most_readers(&self) -> usize {
        self.readers.most()
    }
}

/// Runs `workers` tasks, each with its own client, each taking `kind(w)` on `name` until it
/// has been inside `rounds` times or `limit` passes; inside, `inside(w, true)` on entering and
/// `inside(w, false)` on leaving. Returns how many times each worker got in.
pub async fn race(
    nodes: &LocalNodes,
    name: &str,
    workers: usize,
    rounds: usize,
    limit: Duration,
    kind: impl Fn(usize) -> LockKind + Send + Sync + 'static,
    inside: impl Fn(usize, bool) + Send + Sync + 'static,
) -> Vec<usize> {
    let (kind, inside) = (Arc::new(kind), Arc::new(inside));
    let end = Instant::now() + limit;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let client = super::client(nodes);
        let (name, kind, inside) = (name.to_owned(), kind.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            let opts = super::opts(5_000)
                .wait(Duration::from_millis(500))
                .kind(kind(w));
            let mut got = 0;
            while got < rounds && Instant::now() < end {
                let Ok(lock) = client.acquire(&name, &opts).await else {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                inside(w, true);
                tokio::time::sleep(Duration::from_millis(2)).await;
                assert!(lock.is_valid(), "the section outlived the lock's validity");
                inside(w, false);
                got += 1;
                lock.release().await.expect("release");
            }
            got
        }));
    }
    let mut got = Vec::new();
    for t in tasks {
        got.push(t.await.expect("worker"));
    }
    got
}

/// A builder on all of `nodes`' slots, where the masters not in `reach` are replaced by
/// addresses where nothing listens: a client that reaches only some masters, as if
/// partitioned from the others, while counting all N for its quorum. Default quarantine (the
/// longest TTL the masters recorded).
pub fn reaching(nodes: &LocalNodes, reach: &[usize]) -> ClientBuilder {
    let urls: Vec<String> = (0..nodes.len())
        .map(|i| {
            if reach.contains(&i) {
                nodes.url(i)
            } else {
                super::refusing_url()
            }
        })
        .collect();
    Client::builder().nodes(urls).node_timeout(REACH_TIMEOUT)
}

/// Options of a lock of `kind` with a `ttl_ms` TTL, quick retries.
pub fn kind_opts(kind: LockKind, ttl_ms: u64) -> LockOptions {
    super::opts(ttl_ms).kind(kind)
}

/// The members of a read-write lock's or a semaphore's holders set on node `i`, with their
/// scores (`space` is `rw` or `sem`).
pub async fn holders(nodes: &LocalNodes, i: usize, space: &str, name: &str) -> Vec<(String, f64)> {
    raw(nodes, i)
        .await
        .zrange_withscores(format!("redquorum:{space}:lock:{name}"), 0, -1)
        .await
        .expect("ZRANGE")
}

/// How many hold a semaphore's permit on node `i` (records not counted).
pub async fn permits_held(nodes: &LocalNodes, i: usize, name: &str) -> usize {
    holders(nodes, i, "sem", name)
        .await
        .iter()
        .filter(|(m, _)| !m.starts_with('#'))
        .count()
}

/// A reentrant lock's holds on node `i`.
pub async fn holds(nodes: &LocalNodes, i: usize, name: &str) -> usize {
    raw(nodes, i)
        .await
        .hlen(format!("redquorum:holds:{name}"))
        .await
        .expect("HLEN")
}

/// Connects `client` to every master it reaches and has the deployment marked there (a
/// throwaway lock, then health readings until every master it reaches is marked), so that
/// its first operation meets live connections and marked masters. An operation returns at a
/// quorum: on fresh masters, one still being marked refuses the first grant, and a straggler
/// still connecting at its deadline is dropped before its command is sent, which tests that
/// read every master afterwards must not meet.
pub async fn warm(client: &Client) -> &Client {
    if let Ok(lock) = client.try_acquire("warm-up", &super::opts(1_000)).await {
        let _ = lock.release().await;
    }
    super::eventually(Duration::from_secs(2), || async {
        client
            .node_health()
            .await
            .iter()
            .all(|h| h.marked == Some(true) || h.error.is_some())
    })
    .await;
    client
}

/// Marks fresh masters as one deployment (see [`warm`]), so that clients reaching only some
/// of them find a marked deployment.
pub async fn mark(nodes: &LocalNodes) {
    warm(&super::client(nodes)).await;
}

/// The per-node deadline of clients built by [`reaching`].
pub const REACH_TIMEOUT: Duration = Duration::from_millis(500);
