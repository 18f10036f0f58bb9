//! What fencing costs the masters in keys, against real redis-server processes: a name's
//! counter lives only as long as a hold of it may, and a floor per slot (16,384 at most) keeps
//! every name's tokens growing after its counter is gone, so many names leave few keys.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redquorum::{Client, LockOptions};
use redquorum_testkit::LocalNodes;

/// `count` names whose slots are among `slots`.
fn names_in(slots: &[u16], count: usize) -> Vec<String> {
    (0u64..)
        .map(|i| format!("job-{i}"))
        .filter(|name| slots.contains(&redquorum::slot::of(name)))
        .take(count)
        .collect()
}

/// A client whose fencing tokens come from the counters alone (no clock): a token that went
/// back would show.
fn counting_client(nodes: &LocalNodes) -> Client {
    Client::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_secs(1))
        .quarantine(Duration::ZERO)
        .fence_clock(false)
        .build()
        .unwrap()
}

async fn keys_on(nodes: &LocalNodes, i: usize) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut common::raw(nodes, i).await)
        .await
        .unwrap();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_names_leave_a_key_per_slot_not_per_name() {
    let nodes = common::nodes(3);
    let client = counting_client(&nodes);
    let slots = [7, 4_242, 16_000];
    let names = names_in(&slots, 300);
    let opts = LockOptions::new(Duration::from_millis(300));
    for name in &names {
        client
            .try_acquire(name, &opts)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    // The counters go with the locks' TTL; the floors stay.
    let settled = common::eventually(Duration::from_secs(5), || async {
        keys_on(&nodes, 0)
            .await
            .iter()
            .all(|k| !k.starts_with("redquorum:fence:"))
    })
    .await;
    for i in 0..nodes.len() {
        let keys = keys_on(&nodes, i).await;
        assert!(
            settled,
            "node {i}: counters outlived their locks: {} keys",
            keys.len()
        );
        let floors: Vec<&String> = keys
            .iter()
            .filter(|k| k.starts_with("redquorum:fence-floor:"))
            .collect();
        assert_eq!(
            floors,
            [
                "redquorum:fence-floor:16000",
                "redquorum:fence-floor:4242",
                "redquorum:fence-floor:7"
            ],
            "node {i}"
        );
        // The rest is the deployment's: marker, process, longest TTL, latest expiry.
        assert!(
            keys.len() <= floors.len() + 5,
            "node {i}: {} names left {keys:?}",
            names.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_names_tokens_grow_after_its_counter_is_gone() {
    let nodes = common::nodes(3);
    let names = names_in(&[1_234], 2);
    let (a, b) = (&names[0], &names[1]);
    let opts = LockOptions::new(Duration::from_millis(200));
    let first = counting_client(&nodes).try_acquire(a, &opts).await.unwrap();
    let first_fence = first.fence();
    first.release().await.unwrap();
    // Another name of the slot, from a client that has seen no token: above the slot's floor.
    let other = counting_client(&nodes).try_acquire(b, &opts).await.unwrap();
    assert!(
        other.fence() > first_fence,
        "{} after {first_fence}",
        other.fence()
    );
    let other_fence = other.fence();
    other.release().await.unwrap();
    // Once the counter of `a` has gone with its lock's TTL, a client that has seen no token
    // (and proposes from 1) still gets one above every token `a` had.
    let gone = common::eventually(Duration::from_secs(5), || async {
        common::fence_counter(&nodes, 0, a).await == 0
    })
    .await;
    assert!(gone, "the counter of {a} outlived its lock");
    let again = counting_client(&nodes).try_acquire(a, &opts).await.unwrap();
    assert!(
        again.fence() > other_fence && other_fence > first_fence,
        "{a}: {first_fence}, then {} after {b}'s {other_fence}",
        again.fence()
    );
    again.release().await.unwrap();
}

/// A counter an earlier version left with no expiry, above its slot's floor: a reader given a
/// hold on the name gives it the holders' life, and the floor its value first, so the writer
/// after its end still gets a token above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_left_by_an_earlier_version_lifts_the_floor_before_it_goes() {
    let nodes = common::nodes(3);
    let left_behind: u64 = 1_000_000;
    for i in 0..nodes.len() {
        let _: () = redis::AsyncCommands::set(
            &mut common::raw(&nodes, i).await,
            "redquorum:rw:fence:report",
            left_behind,
        )
        .await
        .unwrap();
    }
    let opts = |kind| LockOptions::new(Duration::from_millis(200)).kind(kind);
    let reader = counting_client(&nodes)
        .try_acquire("report", &opts(redquorum::LockKind::Read))
        .await
        .unwrap();
    reader.release().await.unwrap();
    let gone = common::eventually(Duration::from_secs(5), || async {
        let counter: Option<u64> = redis::AsyncCommands::get(
            &mut common::raw(&nodes, 0).await,
            "redquorum:rw:fence:report",
        )
        .await
        .unwrap();
        counter.is_none()
    })
    .await;
    assert!(gone, "the counter took the holders' life");
    let writer = counting_client(&nodes)
        .try_acquire("report", &opts(redquorum::LockKind::Write))
        .await
        .unwrap();
    assert!(
        writer.fence() > left_behind,
        "a writer's token {} is not above the counter left behind ({left_behind})",
        writer.fence()
    );
    writer.release().await.unwrap();
}
