//! A master that lost its data is quarantined until the locks it may have granted have
//! expired, by the latest expiry the masters that kept their data record, never for the
//! longest TTL ever asked when nothing lives that long. Before, one 10-minute lock asked once
//! made every later restart a 10-minute outage, however long ago that lock was released.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis::AsyncCommands;
use redquorum::LockOptions;
use redquorum_testkit::LocalNodes;

/// As if a 10-minute lock had been asked of every master long ago.
async fn a_long_ttl_was_asked_once(nodes: &LocalNodes) {
    for i in 0..nodes.len() {
        let _: () = common::raw(nodes, i)
            .await
            .set("redquorum:longest-ttl", 600_000)
            .await
            .unwrap();
    }
}

/// Master 0's quarantine: its PTTL in ms, -2 for none, once it is marked again (after a
/// client met it).
async fn quarantine_once_marked(nodes: &LocalNodes) -> i64 {
    let marked = common::eventually(Duration::from_secs(5), || async {
        let marker: Option<String> = common::raw(nodes, 0)
            .await
            .get("redquorum:deployment")
            .await
            .unwrap();
        marker.is_some()
    })
    .await;
    assert!(marked, "master 0 was never marked again");
    common::raw(nodes, 0)
        .await
        .pttl("redquorum:quarantine")
        .await
        .unwrap()
}

/// Waits until a quarantine of `pttl` ms has run out.
async fn past(pttl: i64) {
    let left = u64::try_from(pttl).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(left + 100)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_is_quarantined_only_while_a_lock_it_granted_may_live() {
    let mut nodes = common::nodes(3);
    let holder = common::quarantining_client(&nodes);
    holder
        .try_acquire("warm-up", &LockOptions::new(Duration::from_secs(1)))
        .await
        .expect("a new deployment")
        .release()
        .await
        .unwrap();
    a_long_ttl_was_asked_once(&nodes).await;
    let lock = holder
        .try_acquire("held", &LockOptions::new(Duration::from_secs(4)))
        .await
        .unwrap();

    nodes.restart(0).unwrap();
    let other = common::quarantining_client(&nodes);
    // Taken on masters 1 and 2; master 0, unmarked, is marked again in quarantine.
    let _ = other
        .try_acquire("elsewhere", &LockOptions::new(Duration::from_secs(1)))
        .await;
    let quarantine = quarantine_once_marked(&nodes).await;
    // The 4 s lock held, recorded up to a second late, with the drift allowance: about 5 s.
    assert!(
        (1..=5_200).contains(&quarantine),
        "quarantined for {quarantine} ms: not until the last lock granted expires (about 5 s)"
    );
    assert!(lock.is_valid());
    lock.release().await.unwrap();

    // Once the quarantine has run out, master 0 grants again.
    past(quarantine).await;
    let again = other
        .try_acquire("held", &LockOptions::new(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(common::token_everywhere(&nodes, "held", again.token()).await);
    again.release().await.unwrap();
}

/// The deployment was idle (its last lock expired long ago) when master 0 lost its data: it is
/// quarantined only for the lock the client that meets it takes meanwhile on the others (the
/// masters cannot tell a lock granted after the loss from one granted before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_lost_its_data_while_the_deployment_was_idle_is_not_kept_out() {
    let mut nodes = common::nodes(3);
    let first = common::quarantining_client(&nodes);
    first
        .try_acquire("brief", &LockOptions::new(Duration::from_millis(500)))
        .await
        .expect("a new deployment")
        .release()
        .await
        .unwrap();
    a_long_ttl_was_asked_once(&nodes).await;
    // The brief lock's expiry, recorded up to half a second late, has passed.
    tokio::time::sleep(Duration::from_millis(1_200)).await;

    nodes.restart(0).unwrap();
    let other = common::quarantining_client(&nodes);
    let meets_it = other
        .try_acquire("meets-it", &LockOptions::new(Duration::from_secs(1)))
        .await
        .expect("masters 1 and 2 grant");
    let quarantine = quarantine_once_marked(&nodes).await;
    // That 1 s lock, recorded up to a second late, with the drift allowance: about 2 s.
    assert!(
        quarantine <= 2_100,
        "quarantined for {quarantine} ms: not only for the lock granted since (about 2 s)"
    );
    meets_it.release().await.unwrap();
    past(quarantine).await;
    let lock = other
        .try_acquire("next", &LockOptions::new(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(common::token_everywhere(&nodes, "next", lock.token()).await);
}
