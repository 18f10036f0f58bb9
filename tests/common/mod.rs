//! Shared test harness: local masters, clients tuned for tests, and raw access to each node.
#![allow(dead_code, unreachable_pub, missing_docs)]

pub mod kinds;

use std::net::Ipv4Addr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redquorum::{Client, LockOptions};
use redquorum_testkit::LocalNodes;

pub const NODE_TIMEOUT: Duration = Duration::from_millis(50);

/// Fails the test unless `result` is [`redquorum::Error::InvalidArgument`] naming `field`, with a
/// reason given.
pub fn expect_invalid<T: std::fmt::Debug>(result: redquorum::Result<T>, field: &str) {
    match result {
        Err(redquorum::Error::InvalidArgument {
            field: f, reason, ..
        }) => {
            assert_eq!(f, field, "{reason}");
            assert!(!reason.is_empty());
        }
        other => panic!("expected InvalidArgument for {field}, got {other:?}"),
    }
}

/// A loopback URL where nothing listens, so that connections to it are refused at once. Its
/// port stays bound for the rest of the test process, without listening and without
/// `SO_REUSEADDR`: a port bound and let go at once could be handed out again, to the next call
/// (a client given the same address twice is refused) or to a listener another test opens.
pub fn refusing_url() -> String {
    static HELD: Mutex<Vec<tokio::net::TcpSocket>> = Mutex::new(Vec::new());
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind((Ipv4Addr::LOCALHOST, 0).into())
        .expect("bind a loopback port");
    let port = socket.local_addr().expect("the bound address").port();
    HELD.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(socket);
    format!("redis://127.0.0.1:{port}")
}

/// Starts `n` local masters, or fails the test with the reason.
pub fn nodes(n: usize) -> LocalNodes {
    LocalNodes::start(n).expect("start local redis-server processes")
}

/// A client on all of `nodes` with the default per-node deadline written out. Quarantine is
/// off: the harness's nodes have all just started, and tests of quarantine turn it on.
pub fn client(nodes: &LocalNodes) -> Client {
    Client::builder()
        .nodes(nodes.urls())
        .node_timeout(NODE_TIMEOUT)
        .quarantine(Duration::ZERO)
        .build()
        .expect("build client")
}

/// A client with the default quarantine (worked out from what the masters record), for tests
/// of masters that lose their data, and a per-node deadline generous enough for a loaded
/// machine.
pub fn quarantining_client(nodes: &LocalNodes) -> Client {
    Client::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_millis(300))
        .build()
        .expect("build client")
}

/// Options for short-lived test locks that retry quickly.
pub fn opts(ttl_ms: u64) -> LockOptions {
    LockOptions::new(Duration::from_millis(ttl_ms))
        .retry_delay(Duration::from_millis(2))
        .retry_jitter(Duration::from_millis(8))
}

/// A plain connection to node `i`, bypassing redquorum, to look at what is really there.
pub async fn raw(nodes: &LocalNodes, i: usize) -> redis::aio::MultiplexedConnection {
    redis::Client::open(nodes.url(i))
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("raw connection")
}

/// The key a mutex `name` is held under on a master, as the library writes it.
pub fn lock_key(name: &str) -> String {
    format!("redquorum:lock:{name}")
}

/// The key of `name`'s fencing counter on a master, as the library writes it.
pub fn fence_key(name: &str) -> String {
    format!("redquorum:fence:{name}")
}

/// The key of a mutex `name`'s queue of waiters (a sorted set of waiter ids) on a master.
pub fn queue_key(name: &str) -> String {
    format!("redquorum:queue:{name}")
}

/// How many places mutex `name`'s queue has on each node.
pub async fn places(nodes: &LocalNodes, name: &str) -> Vec<usize> {
    let mut counts = Vec::new();
    for i in 0..nodes.len() {
        let count: usize = redis::cmd("ZCARD")
            .arg(queue_key(name))
            .query_async(&mut raw(nodes, i).await)
            .await
            .expect("ZCARD");
        counts.push(count);
    }
    counts
}

/// The key of the terms of each place in `name`'s queue (a hash by waiter id) on a master.
pub fn queue_terms_key(name: &str) -> String {
    format!("redquorum:queue-terms:{name}")
}

/// The key of `name`'s queue's live mark on a master (present while a place may be live).
pub fn queue_live_key(name: &str) -> String {
    format!("redquorum:queue-live:{name}")
}

/// The value of the lock key `name` on node `i` (the holder's token), if any.
pub async fn stored_token(nodes: &LocalNodes, i: usize, name: &str) -> Option<String> {
    raw(nodes, i).await.get(lock_key(name)).await.expect("GET")
}

/// Whether the mutex (or reentrant lock) `name` is held on a quorum, as a client inspects it.
pub async fn held(nodes: &LocalNodes, name: &str) -> bool {
    client(nodes).inspect(name).await.expect("inspect").held
}

/// On how many of the nodes `name` is held, by anyone.
pub async fn nodes_holding(nodes: &LocalNodes, name: &str) -> usize {
    let mut held = 0;
    for i in 0..nodes.len() {
        held += usize::from(stored_token(nodes, i, name).await.is_some());
    }
    held
}

/// The fencing counter of `name` on node `i` (0 when it has none yet).
pub async fn fence_counter(nodes: &LocalNodes, i: usize, name: &str) -> u64 {
    let counter: Option<u64> = raw(nodes, i).await.get(fence_key(name)).await.expect("GET");
    counter.unwrap_or(0)
}

/// Sets the fencing counter of `name` on node `i` behind the client's back (a master whose
/// counter is ahead of the others').
pub async fn set_fence_counter(nodes: &LocalNodes, i: usize, name: &str, counter: u64) {
    let _: () = raw(nodes, i)
        .await
        .set(fence_key(name), counter)
        .await
        .expect("SET");
}

/// Deletes the lock key `name` on node `i` behind the client's back (a lost or expired lock).
pub async fn delete_lock(nodes: &LocalNodes, i: usize, name: &str) {
    let _: () = raw(nodes, i).await.del(lock_key(name)).await.expect("DEL");
}

/// The remaining TTL of the lock key on node `i` in ms (-2 when absent).
pub async fn pttl(nodes: &LocalNodes, i: usize, name: &str) -> i64 {
    raw(nodes, i)
        .await
        .pttl(lock_key(name))
        .await
        .expect("PTTL")
}

/// Number of lock keys on node `i` (fencing counters, which never expire, are not counted).
pub async fn lock_count(nodes: &LocalNodes, i: usize) -> i64 {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*lock:*")
        .query_async(&mut raw(nodes, i).await)
        .await
        .expect("KEYS");
    keys.len() as i64
}

/// One field of `INFO section` on node `i`.
pub async fn info_field(
    nodes: &LocalNodes,
    i: usize,
    section: &str,
    field: &str,
) -> Option<String> {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query_async(&mut raw(nodes, i).await)
        .await
        .expect("INFO");
    text.lines().find_map(|l| {
        l.strip_prefix(&format!("{field}:"))
            .map(|v| v.trim().to_owned())
    })
}

/// Polls `cond` every 10 ms until it holds or `limit` passes; returns whether it held.
pub async fn eventually<F, Fut>(limit: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = Instant::now() + limit;
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits (up to 2 s) until every node stores `token` for `name`. An operation returns as soon
/// as a quorum answered, so the other nodes may still be running their command.
pub async fn token_everywhere(nodes: &LocalNodes, name: &str, token: &str) -> bool {
    eventually(Duration::from_secs(2), || async {
        for i in 0..nodes.len() {
            if stored_token(nodes, i, name).await.as_deref() != Some(token) {
                return false;
            }
        }
        true
    })
    .await
}

/// A client with a generous per-node deadline, for tests of mechanisms other than deadlines:
/// on a loaded machine a node needing two round trips may miss the default 50 ms, which is
/// the deadline working as meant, not what such a test is about.
pub fn patient_client(nodes: &LocalNodes) -> Client {
    Client::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_secs(1))
        .quarantine(Duration::ZERO)
        .build()
        .expect("build client")
}

/// Waits (up to 2 s) until at least a quorum of nodes stores `token` for `name`.
pub async fn token_on_quorum(nodes: &LocalNodes, name: &str, token: &str) -> bool {
    eventually(Duration::from_secs(2), || async {
        let mut holding = 0;
        for i in 0..nodes.len() {
            if stored_token(nodes, i, name).await.as_deref() == Some(token) {
                holding += 1;
            }
        }
        holding > nodes.len() / 2
    })
    .await
}

/// A node URL split for a proxy in front of the node: `(credentials, host:port)`, where
/// `credentials` is `[user]:password@` or empty. The credentials stay in the proxy's URL; only
/// the address changes.
pub fn split_url(url: &str) -> (String, String) {
    let rest = url.trim_start_matches("redis://");
    match rest.rsplit_once('@') {
        Some((credentials, target)) => (format!("{credentials}@"), target.to_owned()),
        None => (String::new(), rest.to_owned()),
    }
}

/// The per-node failures of an acquire that was refused (`Contended` or `QuorumUnavailable`);
/// fails the test for any other error.
pub fn refusal_failures(err: &redquorum::Error) -> &[redquorum::NodeFailure] {
    match err {
        redquorum::Error::Contended { failures, .. }
        | redquorum::Error::QuorumUnavailable { failures, .. } => failures,
        other => panic!("expected a refusal, got {other}"),
    }
}
