//! Node faults: killed, paused and restarted masters, against real redis-server processes.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop
)]

mod common;

use std::time::{Duration, Instant};

use common::NODE_TIMEOUT;
use redquorum::{Error, NodeFailureKind};

/// Acquire and release `rounds` distinct names; every one must succeed.
async fn round_trips(client: &redquorum::Client, prefix: &str, rounds: usize) {
    for i in 0..rounds {
        let lock = client
            .acquire(&format!("{prefix}-{i}"), &common::opts(2_000))
            .await
            .unwrap_or_else(|e| panic!("acquire {prefix}-{i}: {e}"));
        assert!(lock.is_valid());
        lock.release().await.expect("release");
    }
}

async fn minority_killed(n: usize, killed: usize) {
    let mut nodes = common::nodes(n);
    let client = common::client(&nodes);
    round_trips(&client, "before", 3).await;
    for i in 0..killed {
        nodes.kill(i).unwrap();
    }
    round_trips(&client, "after", 10).await;
    // The surviving majority holds the keys while a lock is held.
    let lock = client
        .try_acquire("held", &common::opts(5_000))
        .await
        .unwrap();
    for i in killed..n {
        assert_eq!(
            common::stored_token(&nodes, i, "held").await.as_deref(),
            Some(lock.token())
        );
    }
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_three_killed_still_acquires() {
    minority_killed(3, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_killed_still_acquires() {
    minority_killed(5, 2).await;
}

async fn minority_paused(n: usize, paused: usize) {
    let nodes = common::nodes(n);
    let client = common::client(&nodes);
    round_trips(&client, "warm", 2).await;
    for i in 0..paused {
        nodes.pause(i).unwrap();
    }
    for round in 0..10 {
        let started = Instant::now();
        let lock = client
            .try_acquire(&format!("paused-{round}"), &common::opts(2_000))
            .await
            .unwrap_or_else(|e| panic!("acquire with a paused minority: {e}"));
        let took = started.elapsed();
        // The vote is decided by the live majority; a paused node can cost at most its deadline.
        assert!(
            took < 3 * NODE_TIMEOUT,
            "acquire took {took:?} with a paused minority"
        );
        let started = Instant::now();
        lock.release().await.unwrap();
        let took = started.elapsed();
        assert!(
            took < 3 * NODE_TIMEOUT,
            "release took {took:?} with a paused minority"
        );
    }
    for i in 0..paused {
        nodes.resume(i).unwrap();
    }
    // Once resumed, the paused nodes run their queued commands: each acquire was followed by a
    // release on the same connection, so nothing is left behind.
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            let mut total = 0;
            for i in 0..n {
                total += common::lock_count(&nodes, i).await;
            }
            total == 0
        })
        .await,
        "keys left behind on resumed nodes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_three_paused_costs_at_most_the_node_deadline() {
    minority_paused(3, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_paused_costs_at_most_the_node_deadline() {
    minority_paused(5, 2).await;
}

async fn majority_down_then_back(n: usize) {
    let mut nodes = common::nodes(n);
    let client = common::client(&nodes);
    round_trips(&client, "warm", 2).await;
    let majority = n / 2 + 1;
    for i in 0..majority {
        nodes.kill(i).unwrap();
    }
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    let err = client
        .acquire("down", &common::opts(2_000).wait(wait))
        .await
        .unwrap_err();
    let took = started.elapsed();
    match &err {
        Error::QuorumUnavailable {
            failures,
            needed,
            total,
            ..
        } => {
            assert_eq!((*needed, *total), (majority, n));
            assert_eq!(failures.len(), majority, "{err}");
            assert!(failures.iter().all(|f| matches!(
                f.kind,
                NodeFailureKind::Connection(_) | NodeFailureKind::Timeout
            )));
        }
        other => panic!("expected QuorumUnavailable, got {other}"),
    }
    // Bounded by the wait plus one last attempt and its cleanup, not by reconnect back-off.
    assert!(
        took < wait + 3 * NODE_TIMEOUT + Duration::from_millis(100),
        "gave up after {took:?}"
    );
    // The one live node must not keep the failed attempts' grant: a failed acquire returns
    // only once its last attempt's grants are released.
    assert_eq!(
        common::lock_count(&nodes, n - 1).await,
        0,
        "the live node kept a failed attempt's grant"
    );

    for i in 0..majority {
        nodes.restart(i).unwrap();
    }
    let lock = client
        .acquire("down", &common::opts(2_000).wait(Duration::from_secs(5)))
        .await
        .expect("acquire once the majority is back");
    lock.release().await.unwrap();
    round_trips(&client, "back", 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_three_down_is_unavailable_then_recovers() {
    majority_down_then_back(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_of_five_down_is_unavailable_then_recovers() {
    majority_down_then_back(5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn majority_paused_is_unavailable_within_the_wait() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    round_trips(&client, "warm", 1).await;
    nodes.pause(0).unwrap();
    nodes.pause(1).unwrap();
    let wait = Duration::from_millis(200);
    let started = Instant::now();
    let err = client
        .acquire("stalled", &common::opts(2_000).wait(wait))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, Error::QuorumUnavailable { .. }), "{err}");
    assert!(
        took < wait + 3 * NODE_TIMEOUT + Duration::from_millis(100),
        "gave up after {took:?}"
    );
    nodes.resume(0).unwrap();
    nodes.resume(1).unwrap();
    let lock = client
        .acquire("stalled", &common::opts(2_000))
        .await
        .expect("acquire after resume");
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_down_at_start_up_block_nothing() {
    let mut nodes = common::nodes(3);
    nodes.kill(0).unwrap();
    // The client is built while a node is down; it connects lazily and that node only costs
    // its own failures.
    let client = common::client(&nodes);
    round_trips(&client, "lazy", 5).await;
    nodes.restart(0).unwrap();
    // Once it is back, the restarted node takes part in locks again.
    assert!(
        common::eventually(Duration::from_secs(3), || async {
            let lock = client
                .acquire("lazy-back", &common::opts(2_000))
                .await
                .unwrap();
            let on_restarted = common::stored_token(&nodes, 0, "lazy-back").await;
            let held_there = on_restarted.as_deref() == Some(lock.token());
            lock.release().await.unwrap();
            held_there
        })
        .await,
        "the restarted node never held a lock again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_acquire_leaves_no_keys_and_no_tasks() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    round_trips(&client, "warm", 2).await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let baseline = metrics.num_alive_tasks();

    // Two paused nodes hold the attempt open; the live one grants at once. Dropping the future
    // mid-attempt must release that grant now, not at the TTL.
    nodes.pause(1).unwrap();
    nodes.pause(2).unwrap();
    let dropped = tokio::time::timeout(
        Duration::from_millis(20),
        client.acquire("cancelled", &common::opts(60_000)),
    )
    .await;
    assert!(
        dropped.is_err(),
        "the acquire should still be running when dropped"
    );
    assert!(
        common::eventually(Duration::from_millis(500), || async {
            common::stored_token(&nodes, 0, "cancelled").await.is_none()
        })
        .await,
        "the live node kept the cancelled attempt's grant"
    );

    // Resumed nodes run the queued acquire and then the queued release.
    nodes.resume(1).unwrap();
    nodes.resume(2).unwrap();
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            common::lock_count(&nodes, 1).await + common::lock_count(&nodes, 2).await == 0
        })
        .await,
        "resumed nodes kept the cancelled attempt's key: node 1 {:?} ttl {}, node 2 {:?} ttl {}",
        common::stored_token(&nodes, 1, "cancelled").await,
        common::pttl(&nodes, 1, "cancelled").await,
        common::stored_token(&nodes, 2, "cancelled").await,
        common::pttl(&nodes, 2, "cancelled").await,
    );
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            metrics.num_alive_tasks() <= baseline
        })
        .await,
        "tasks left running: {} > {baseline}",
        metrics.num_alive_tasks()
    );
    // And the name is free.
    let lock = client
        .try_acquire("cancelled", &common::opts(2_000))
        .await
        .unwrap();
    lock.release().await.unwrap();
}
