//! Guards: background renewal, the lost-lock signal, release on drop, and `with_lock`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop
)]

mod common;

use std::time::{Duration, Instant};

use redquorum::{Error, LockState, RenewOptions, RenewalStop};

const TTL_MS: u64 = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_holds_the_lock_across_several_ttls() {
    for n in [3, 5] {
        let nodes = common::nodes(n);
        let client = common::client(&nodes);
        let rival = common::client(&nodes);
        let guard = client
            .acquire_guard("renewed", &common::opts(TTL_MS), RenewOptions::default())
            .await
            .unwrap();
        let started = Instant::now();
        // Four TTLs: without renewal the lock would have expired three times over.
        while started.elapsed() < Duration::from_millis(4 * TTL_MS) {
            let err = rival
                .try_acquire("renewed", &common::opts(TTL_MS))
                .await
                .unwrap_err();
            assert!(matches!(err, Error::Contended { .. }), "{err}");
            assert_eq!(guard.state(), LockState::Held);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let status = guard.status();
        // Renewing every TTL/3 for 4 TTLs makes about 12 renewals.
        assert!(status.renewals >= 8, "only {} renewals", status.renewals);
        assert!(status.stopped.is_none());
        guard.release().await.unwrap();
        let lock = rival
            .try_acquire("renewed", &common::opts(TTL_MS))
            .await
            .expect("free once released");
        lock.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_majority_fires_lost_within_the_remaining_validity() {
    for n in [3, 5] {
        let mut nodes = common::nodes(n);
        let client = common::client(&nodes);
        let guard = client
            .acquire_guard("doomed", &common::opts(TTL_MS), RenewOptions::default())
            .await
            .unwrap();
        let watch = guard.watch();
        tokio::time::sleep(Duration::from_millis(150)).await;
        for i in 0..n / 2 + 1 {
            nodes.kill(i).unwrap();
        }
        let valid_until = guard.status().valid_until;
        let killed_at = Instant::now();
        tokio::time::timeout(Duration::from_secs(2), watch.lost())
            .await
            .expect("lost() must fire once the validity runs out");
        let fired_at = Instant::now();
        assert_eq!(guard.state(), LockState::Lost);
        assert_eq!(watch.state(), LockState::Lost);
        // It fires when the validity it had ends, not later (a little slack for scheduling),
        // and never before the lock could actually have expired on the nodes.
        assert!(
            fired_at <= valid_until + Duration::from_millis(60),
            "{:?} late",
            fired_at - valid_until
        );
        assert!(fired_at >= killed_at);
        assert!(guard.remaining().is_zero());
        // Releasing a lost lock is refused because no quorum answers; it does not panic or hang.
        let err = guard.release().await.unwrap_err();
        assert!(matches!(err, Error::QuorumUnavailable { .. }), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_down_does_not_stop_renewals() {
    let mut nodes = common::nodes(5);
    let client = common::client(&nodes);
    let guard = client
        .acquire_guard("sturdy", &common::opts(TTL_MS), RenewOptions::default())
        .await
        .unwrap();
    nodes.kill(0).unwrap();
    nodes.pause(1).unwrap();
    let before = guard.status().renewals;
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(4 * TTL_MS) {
        assert_ne!(guard.state(), LockState::Lost);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(guard.state(), LockState::Held);
    assert!(
        guard.status().renewals >= before + 8,
        "{:?}",
        guard.status()
    );
    // The live majority still has the key with a fresh TTL.
    for i in 2..5 {
        assert!(common::pttl(&nodes, i, "sturdy").await > 0, "node {i}");
    }
    nodes.resume(1).unwrap();
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_releases_the_lock() {
    let nodes = common::nodes(3);
    let client = common::patient_client(&nodes);
    // Every master marked first, so that the lock is on each of them (see `warm`).
    common::kinds::warm(&client).await;
    let guard = client
        .acquire_guard("dropped", &common::opts(60_000), RenewOptions::default())
        .await
        .unwrap();
    assert!(common::token_everywhere(&nodes, "dropped", guard.token()).await);
    drop(guard);
    // Released in the background, long before the 60 s TTL.
    assert!(
        common::eventually(Duration::from_millis(500), || async {
            let mut left = 0;
            for i in 0..3 {
                left += common::lock_count(&nodes, i).await;
            }
            left == 0
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_does_not_keep_its_client_alive() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let guard = client
        .acquire_guard("orphan", &common::opts(TTL_MS), RenewOptions::default())
        .await
        .unwrap();
    drop(client);
    // With no client left, renewal stops and the lock runs out.
    tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("lost once unrenewed");
    assert_eq!(guard.status().stopped, Some(RenewalStop::ClientDropped));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_limits_stop_renewing_and_say_so() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let guard = client
        .acquire_guard(
            "limited",
            &common::opts(TTL_MS),
            RenewOptions::default().max_renewals(2),
        )
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lost after the last renewal");
    let status = guard.status();
    assert_eq!(
        (status.renewals, status.stopped),
        (2, Some(RenewalStop::MaxRenewals))
    );

    let started = Instant::now();
    let guard = client
        .acquire_guard(
            "capped",
            &common::opts(TTL_MS),
            RenewOptions::default().max_hold(Duration::from_millis(500)),
        )
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lost at the hold limit");
    let held_for = started.elapsed();
    assert_eq!(guard.status().stopped, Some(RenewalStop::MaxHold));
    assert!(
        held_for >= Duration::from_millis(400) && held_for < Duration::from_millis(700),
        "{held_for:?}"
    );
    // The nodes' keys expire at the hold limit too, so someone else can take it.
    let other = common::client(&nodes);
    assert!(
        common::eventually(Duration::from_millis(300), || async {
            match other.try_acquire("capped", &common::opts(TTL_MS)).await {
                Ok(lock) => lock.release().await.is_ok(),
                Err(_) => false,
            }
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_runs_the_work_and_releases() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let value = client
        .with_lock("job", &common::opts(TTL_MS), |lock| async move {
            assert_eq!(lock.name(), "job");
            // Longer than the TTL: renewal keeps it.
            tokio::time::sleep(Duration::from_millis(2 * TTL_MS)).await;
            assert_eq!(lock.state(), LockState::Held);
            lock.token().len()
        })
        .await
        .unwrap();
    assert_eq!(value, 32);
    for i in 0..3 {
        assert_eq!(
            common::lock_count(&nodes, i).await,
            0,
            "released after the work"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_stops_the_work_when_the_lock_is_lost() {
    let mut nodes = common::nodes(3);
    let client = common::client(&nodes);
    let finished = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = finished.clone();
    let opts = common::opts(TTL_MS);
    let work = client.with_lock("fragile", &opts, |_lock| async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let killer = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        nodes.kill(0).unwrap();
        nodes.kill(1).unwrap();
    };
    let started = Instant::now();
    let (result, ()) = tokio::join!(work, killer);
    assert!(matches!(result, Err(Error::LockLost { .. })), "{result:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "stopped at the loss, not at the end of the work"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !finished.load(std::sync::atomic::Ordering::SeqCst),
        "the work was not stopped"
    );
}
