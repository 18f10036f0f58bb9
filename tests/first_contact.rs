//! First contact with plain masters: a new deployment locks at once with default options, a
//! master that loses its data is quarantined for the longest TTL granted (by its own clock, the
//! same for every client) and then counts again, and an acquire that no quorum can serve says
//! why at once. `redquorum run` on new masters is `cli/tests/first_contact.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redquorum::{Client, Error, LockOptions, NodeFailureKind};

/// How long `client` says each master is quarantined (after reading them all).
async fn quarantines(client: &Client) -> Vec<Option<Duration>> {
    client
        .node_health()
        .await
        .into_iter()
        .map(|h| h.quarantined_for)
        .collect()
}

fn quarantined_nodes(err: &Error) -> Vec<(String, Duration)> {
    common::refusal_failures(err)
        .iter()
        .filter_map(|f| match f.kind {
            NodeFailureKind::Quarantined(left) => Some((f.node.clone(), left)),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_deployment_of_five_plain_masters_locks_on_the_first_attempt() {
    let nodes = common::nodes(5);
    // Default options: no quarantine setting, the default per-node deadline.
    let client = Client::new(nodes.urls()).unwrap();
    let lock = client
        .try_acquire("first", &LockOptions::default())
        .await
        .expect("a new deployment counts at once");
    lock.release().await.unwrap();
    for health in client.node_health().await {
        assert_eq!(health.marked, Some(true), "{health:?}");
        assert_eq!(health.quarantined_for, None, "{health:?}");
    }
}

/// A lock with a 1.5 s TTL is the longest granted; master A then loses its data (`lose`). The
/// next acquire notices and puts A in quarantine for 1.5 s; B then goes down, so that a quorum
/// needs A: no lock until A's quarantine ends, and then A counts again.
async fn lost_data_is_quarantined_for_the_longest_ttl(
    lose: impl AsyncFnOnce(&mut redquorum_testkit::LocalNodes),
) {
    let mut nodes = common::nodes(3);
    let client = Client::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let ttl = Duration::from_millis(1500);
    client
        .try_acquire("longest", &LockOptions::new(ttl))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    lose(&mut nodes).await;
    let lost_at = Instant::now();
    // The next acquires notice (the first may still meet the old connection to A) and put A
    // in quarantine; B and C make their quorum meanwhile.
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            client
                .try_acquire("noticed", &LockOptions::new(Duration::from_millis(500)))
                .await
                .expect("B and C make a quorum")
                .release()
                .await
                .unwrap();
            quarantines(&client).await[0].is_some()
        })
        .await,
        "A was not put in quarantine"
    );
    nodes.kill(1).unwrap();
    let err = client
        .try_acquire("after", &LockOptions::new(Duration::from_millis(500)))
        .await
        .expect_err("A lost its data and B is down");
    let quarantined = quarantined_nodes(&err);
    assert_eq!(quarantined.len(), 1, "{err}");
    assert_eq!(quarantined[0].0, client.nodes()[0]);
    assert!(
        quarantined[0].1 <= ttl && quarantined[0].1 > ttl / 2,
        "quarantined for {:?}, the longest TTL being {ttl:?}",
        quarantined[0].1
    );
    // A client started now sees the same quarantine: it is kept on the master.
    let newcomer = Client::new(nodes.urls()).unwrap();
    let seen = quarantines(&newcomer).await;
    assert!(
        seen[0].is_some_and(|left| left <= ttl),
        "a new client must see A's quarantine: {seen:?}"
    );
    let lock = client
        .acquire(
            "after",
            &LockOptions::new(Duration::from_millis(500)).wait(Duration::from_secs(5)),
        )
        .await
        .expect("A counts again once its quarantine ends");
    assert!(
        lost_at.elapsed() >= ttl - Duration::from_millis(100),
        "A counted again after {:?}, before the longest TTL of {ttl:?}",
        lost_at.elapsed()
    );
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_empty_is_quarantined_for_the_longest_ttl_then_counts_again() {
    lost_data_is_quarantined_for_the_longest_ttl(async |nodes| nodes.restart(0).unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_master_is_quarantined_for_the_longest_ttl_then_counts_again() {
    lost_data_is_quarantined_for_the_longest_ttl(async |nodes| {
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut common::raw(nodes, 0).await)
            .await
            .unwrap();
    })
    .await;
}

/// An evicted or deleted marker fails safe: the master is quarantined, never counted blindly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_marker_fails_safe() {
    let nodes = common::nodes(3);
    let client = Client::new(nodes.urls()).unwrap();
    client
        .try_acquire("marked", &LockOptions::new(Duration::from_secs(20)))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let _: () = common::raw(&nodes, 2)
        .await
        .del("redquorum:deployment")
        .await
        .unwrap();
    let lock = client
        .try_acquire("marked", &LockOptions::new(Duration::from_secs(1)))
        .await
        .expect("A and B still make a quorum");
    lock.release().await.unwrap();
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            quarantines(&client).await[2].is_some()
        })
        .await,
        "C lost its marker while the deployment was in use: it must be quarantined"
    );
}

/// Two of three masters lose their data after a 60 s lock: no quorum can be had for a minute.
/// An acquire willing to wait 10 s says so at once, naming the quarantined masters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_blocked_by_quarantine_returns_at_once_naming_the_masters() {
    let mut nodes = common::nodes(3);
    let client = Client::new(nodes.urls()).unwrap();
    client
        .try_acquire("long", &LockOptions::new(Duration::from_secs(60)))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    nodes.restart(0).unwrap();
    nodes.restart(1).unwrap();
    let started = Instant::now();
    let err = client
        .acquire(
            "blocked",
            &LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(10)),
        )
        .await
        .expect_err("two of three masters are quarantined for a minute");
    let took = started.elapsed();
    assert!(matches!(err, Error::QuorumUnavailable { .. }), "{err}");
    let quarantined = quarantined_nodes(&err);
    assert_eq!(quarantined.len(), 2, "{err}");
    assert!(
        quarantined
            .iter()
            .all(|(_, left)| *left > Duration::from_secs(50))
    );
    assert!(
        err.to_string().contains(&client.nodes()[0]) && err.to_string().contains("quarantined"),
        "{err}"
    );
    // Not the 10 s wait: a few round trips (the attempt, reading and marking the masters, and
    // the attempt again), each bounded by the per-node deadline.
    assert!(took < Duration::from_secs(2), "returned after {took:?}");
}
