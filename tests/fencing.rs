//! Fencing tokens across the quorum, the resource-side check, and restart quarantine.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop
)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redquorum::fencing::{FencedWrite, fenced_set};
use redquorum::{Client, Error, LockOptions, NodeFailureKind};
use tokio::sync::Mutex;

/// One write as the protected resource received it.
#[derive(Debug, Clone)]
struct Write {
    fence: u64,
    written: bool,
    /// The writer slept past its lock's validity on purpose before writing.
    overran: bool,
    /// The writer's lock was still valid after the write returned.
    valid_after: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_grow_in_grant_order_and_stale_holders_are_refused() {
    fencing_property(true).await;
}

/// Without clock-based proposals, independent clients propose the same small numbers, and
/// only the nodes' check keeps tokens distinct and growing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_grow_without_any_clock() {
    fencing_property(false).await;
}

async fn fencing_property(fence_clock: bool) {
    const WORKERS: usize = 12;
    const ROUNDS: usize = 6;
    let nodes = common::nodes(5);
    let resource = common::nodes(1);
    let resource_conn = common::raw(&resource, 0).await;
    // Writes reach the resource one at a time, in the order of this log.
    let log: Arc<Mutex<(redis::aio::MultiplexedConnection, Vec<Write>)>> =
        Arc::new(Mutex::new((resource_conn, Vec::new())));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut tasks = Vec::new();
    for worker in 0..WORKERS {
        let client = Client::builder()
            .nodes(nodes.urls())
            .node_timeout(common::NODE_TIMEOUT)
            .quarantine(Duration::ZERO)
            .fence_clock(fence_clock)
            .build()
            .unwrap();
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                if Instant::now() > deadline {
                    break;
                }
                let ttl = Duration::from_millis(rand::random_range(80..160));
                let opts = LockOptions::new(ttl)
                    .wait(Duration::from_secs(20))
                    .retry_delay(Duration::from_millis(1))
                    .retry_jitter(Duration::from_millis(5));
                let lock = client.acquire("account", &opts).await.expect("acquire");
                // One holder in three overruns its validity before writing, as a paused
                // process would; the others write at once or after a short random delay.
                let overran = (worker + round) % 3 == 0;
                let pause = if overran {
                    ttl + Duration::from_millis(rand::random_range(20..80))
                } else {
                    Duration::from_millis(rand::random_range(0..10))
                };
                tokio::time::sleep(pause).await;
                let fence = lock.fence();
                let mut guard = log.lock().await;
                let value = format!("worker {worker} round {round}");
                let result = fenced_set(&mut guard.0, "account", value.as_bytes(), fence)
                    .await
                    .unwrap();
                let valid_after = lock.is_valid();
                guard.1.push(Write {
                    fence,
                    written: result == FencedWrite::Written,
                    overran,
                    valid_after,
                });
                drop(guard);
                let _ = lock.release().await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let writes = log.lock().await.1.clone();
    assert_eq!(writes.len(), WORKERS * ROUNDS);

    let mut fences: Vec<u64> = writes.iter().map(|w| w.fence).collect();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(
        fences.len(),
        writes.len(),
        "two acquisitions got the same fencing token"
    );

    let mut highest = 0;
    let mut stale_refused = 0;
    for (i, w) in writes.iter().enumerate() {
        if w.fence < highest {
            // A newer holder wrote first: this holder's lock had passed on.
            assert!(
                !w.written,
                "write {i} with token {} accepted after {highest}",
                w.fence
            );
            stale_refused += 1;
        } else {
            assert!(
                w.written,
                "write {i} with the highest token so far was refused"
            );
            // Accepted writes arrive with strictly growing tokens, one per grant.
            assert!(
                w.fence > highest,
                "write {i}: token {} not above {highest}",
                w.fence
            );
            highest = w.fence;
        }
        // A holder whose lock was valid through its write was never refused: no later grant
        // happened while it held the lock.
        if w.valid_after {
            assert!(
                w.written,
                "write {i} refused while its lock was valid: {w:?}"
            );
        }
    }
    let overran = writes.iter().filter(|w| w.overran).count();
    assert!(overran > 0);
    assert!(
        stale_refused > 0,
        "no stale write arrived after a newer one: the test exercised nothing"
    );
    // The resource holds the last accepted value and the highest token.
    let mut conn = common::raw(&resource, 0).await;
    let stored: u64 = conn.get("account:fence").await.unwrap();
    assert_eq!(stored, highest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_proposals_are_raised_within_one_attempt() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    // Two of three counters far above any clock reading: the first proposal is refused by a
    // quorum as stale.
    let seeded: u64 = 8_000_000_000_000_000;
    for i in 0..2 {
        common::set_fence_counter(&nodes, i, "seeded", seeded).await;
    }
    // One attempt (no wait, so no retry): the re-proposal happens inside it.
    let lock = client
        .try_acquire("seeded", &common::opts(5_000))
        .await
        .expect("acquire despite the stale first proposal");
    assert!(lock.fence() > seeded, "{} <= {seeded}", lock.fence());
    let first = lock.fence();
    lock.release().await.unwrap();
    // A fresh client (which has seen nothing) also gets a larger token.
    let other = common::client(&nodes);
    let lock = other
        .try_acquire("seeded", &common::opts(5_000))
        .await
        .unwrap();
    assert!(lock.fence() > first);
    // Every node that granted recorded the token.
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            let mut n = 0;
            for i in 0..3 {
                if common::fence_counter(&nodes, i, "seeded").await == lock.fence() {
                    n += 1;
                }
            }
            n >= 2
        })
        .await
    );
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_keeps_the_fence_and_a_stateless_extend_reports_it() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let mut lock = client
        .try_acquire("kept", &common::opts(5_000))
        .await
        .unwrap();
    let fence = lock.fence();
    lock.extend(Duration::from_secs(5)).await.unwrap();
    assert_eq!(lock.fence(), fence);
    let again = client
        .extend_token("kept", lock.token(), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(again.fence(), fence, "the nodes report the holder's token");
    lock.release().await.unwrap();
}

/// Sets up the classic failure: a holder on a bare majority {0, 1} (node 2 down), then node 1
/// restarts empty and node 2 comes back empty. Returns the holder's lock.
async fn holder_on_a_bare_majority(
    nodes: &mut redquorum_testkit::LocalNodes,
    ttl: Duration,
) -> redquorum::Lock {
    nodes.kill(2).unwrap();
    let holder = common::patient_client(nodes);
    let lock = holder
        .try_acquire("precious", &LockOptions::new(ttl))
        .await
        .unwrap();
    nodes.restart(1).unwrap();
    nodes.restart(2).unwrap();
    assert_eq!(
        common::stored_token(nodes, 0, "precious").await.as_deref(),
        Some(lock.token())
    );
    assert_eq!(
        common::lock_count(nodes, 1).await,
        0,
        "node 1 came back empty"
    );
    lock
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_restart_lets_a_second_holder_in_without_quarantine() {
    let mut nodes = common::nodes(3);
    let lock = holder_on_a_bare_majority(&mut nodes, Duration::from_secs(10)).await;
    // Quarantine off: the two amnesiac nodes vote for a second holder while the first one's
    // lock is valid. This is the known Redlock failure, shown here on purpose.
    let rival = Client::builder()
        .nodes(nodes.urls())
        .quarantine(Duration::ZERO)
        .node_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let second = rival
        .try_acquire("precious", &LockOptions::new(Duration::from_secs(10)))
        .await
        .expect("without quarantine the restarted nodes grant a second holder");
    assert!(
        lock.is_valid() && second.is_valid(),
        "two valid holders at once"
    );
    // Fencing still orders them: the second token is larger, so a fenced resource would
    // refuse the first holder from here on.
    assert!(second.fence() > lock.fence());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_keeps_restarted_nodes_out_until_it_ends() {
    let mut nodes = common::nodes(3);
    let ttl = Duration::from_millis(1500);
    let quarantine = Duration::from_secs(3);
    let lock = holder_on_a_bare_majority(&mut nodes, ttl).await;
    let restarted_at = Instant::now();
    let rival = Client::builder()
        .nodes(nodes.urls())
        .quarantine(quarantine)
        .node_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let err = rival
        .try_acquire("precious", &LockOptions::new(ttl))
        .await
        .unwrap_err();
    let quarantined = match &err {
        Error::Contended { failures, .. } | Error::QuorumUnavailable { failures, .. } => failures
            .iter()
            .filter(|f| matches!(f.kind, NodeFailureKind::Quarantined(_)))
            .count(),
        other => panic!("expected a refusal, got {other}"),
    };
    assert!(quarantined >= 1, "{err}");
    let health = rival.node_health().await;
    assert!(
        health[1].quarantined_for.is_some() && health[2].quarantined_for.is_some(),
        "{health:?}"
    );
    // The first holder's lock runs out while the restarted nodes are still quarantined.
    drop(lock);
    let opts = LockOptions::new(ttl)
        .wait(Duration::from_secs(10))
        .retry_delay(Duration::from_millis(50));
    let second = rival
        .acquire("precious", &opts)
        .await
        .expect("acquire once the quarantine ends");
    let waited = restarted_at.elapsed();
    // Uptime is read in whole seconds, so the quarantine may end up to a second late, never early.
    assert!(
        waited >= quarantine - Duration::from_millis(100),
        "acquired after {waited:?}"
    );
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aof_always_nodes_keep_counters_and_are_not_quarantined() {
    let mut nodes = redquorum_testkit::LocalNodes::start_with(
        3,
        &["--appendonly", "yes", "--appendfsync", "always"],
    )
    .unwrap();
    // Default settings: a 24 h quarantine for nodes that are not durable. These are, so the
    // freshly started nodes vote at once. Only the per-node deadline is longer: every write on
    // these nodes waits for an fsync, and under a loaded disk all three once took longer than
    // the 50 ms default at the same moment. What is tested here is durability, not latency.
    let client = Client::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let health = client.node_health().await;
    for h in &health {
        assert!(h.durable, "{h:?}");
        assert_eq!(h.appendfsync.as_deref(), Some("always"));
        assert_eq!(h.quarantined_for, None);
    }
    // Every master marked first: on a fresh deployment, one still being marked refuses the
    // first grant after the quorum has answered, and would have no counter to keep.
    common::kinds::warm(&client).await;
    let lock = client
        .try_acquire("durable", &common::opts(5_000))
        .await
        .unwrap();
    let first = lock.fence();
    // The release below returns at a quorum too: the counter is on every master already.
    assert!(common::token_everywhere(&nodes, "durable", lock.token()).await);
    let held = client
        .try_acquire("held-across", &common::opts(30_000))
        .await
        .unwrap();
    lock.release().await.unwrap();
    // The acquire returned once a quorum granted; the last node's grant may still be on its
    // way, and a restart must not cut it off: what is tested is that stored locks survive.
    assert!(
        common::token_everywhere(&nodes, "held-across", held.token()).await,
        "the lock reached every node before the restarts"
    );
    for i in 0..3 {
        nodes.restart(i).unwrap();
    }
    for i in 0..3 {
        let counter = common::fence_counter(&nodes, i, "durable").await;
        assert_eq!(counter, first, "node {i} kept its counter");
    }
    assert!(
        common::token_everywhere(&nodes, "held-across", held.token()).await,
        "locks survive too"
    );
    let lock = client
        .acquire("durable", &common::opts(5_000).wait(Duration::from_secs(5)))
        .await
        .expect("durable nodes vote right after a restart");
    assert!(lock.fence() > first);
    lock.release().await.unwrap();
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_cannot_keep_counters_are_reported_and_can_be_refused() {
    // CONFIG is disabled on these, as on some managed services: the report must still work.
    let nodes =
        redquorum_testkit::LocalNodes::start_with(3, &["--rename-command", "CONFIG", ""]).unwrap();
    let client = Client::builder()
        .nodes(nodes.urls())
        .quarantine(Duration::ZERO)
        .build()
        .unwrap();
    let health = client.node_health().await;
    for h in &health {
        assert_eq!(h.error, None, "{h:?}");
        assert!(!h.durable);
        assert_eq!(h.aof_enabled, Some(false));
        assert_eq!(h.appendfsync, None, "CONFIG is refused");
        assert!(h.uptime.is_some());
    }
    // They still serve locks...
    let lock = client
        .try_acquire("lenient", &common::opts(5_000))
        .await
        .unwrap();
    lock.release().await.unwrap();
    // ...unless durable nodes are required.
    let strict = Client::builder()
        .nodes(nodes.urls())
        .quarantine(Duration::ZERO)
        .require_durable(true)
        .build()
        .unwrap();
    match strict
        .try_acquire("strict", &common::opts(5_000))
        .await
        .unwrap_err()
    {
        Error::QuorumUnavailable { failures, .. } => {
            assert!(
                failures
                    .iter()
                    .all(|f| f.kind == NodeFailureKind::NotDurable),
                "{failures:?}"
            );
        }
        other => panic!("expected QuorumUnavailable, got {other}"),
    }
    // The default client does not quarantine these freshly started, non-durable nodes: they
    // lost nothing, being a new deployment (quarantine follows a loss of data, see
    // tests/first_contact.rs); it reports them as not durable.
    let default = Client::builder().nodes(nodes.urls()).build().unwrap();
    let health = default.node_health().await;
    assert!(
        health
            .iter()
            .all(|h| h.quarantined_for.is_none() && !h.durable),
        "{health:?}"
    );
}
