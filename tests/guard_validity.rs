//! A guard's validity: renewals come before the validity that is left runs out, and
//! `with_lock` reports a lock whose validity ran out during the work as lost.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use redquorum::{Client, Error, LockState, RenewOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_made_late_renews_before_its_validity_runs_out() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let rival = common::client(&nodes);
    let opts = common::opts(900);
    let lock = client.try_acquire("late", &opts).await.unwrap();
    // Two thirds of the TTL gone: less validity left than the renewal interval (TTL/3).
    tokio::time::sleep(Duration::from_millis(600)).await;
    let first_valid_until = lock.valid_until();
    assert!(lock.is_valid(), "the test's sleep overran the lock");
    let guard = lock.into_guard(RenewOptions::default()).unwrap();
    let mut watch = guard.watch();
    let renewed = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(status) = watch.changed().await {
            if status.renewals > 0 || status.state == LockState::Lost {
                return status;
            }
        }
        panic!("the guard went away")
    })
    .await
    .expect("the guard renews or loses the lock");
    assert_eq!(renewed.state, LockState::Held, "{renewed:?}");
    assert!(renewed.valid_until > first_valid_until, "{renewed:?}");
    // Past the validity the lock had when it was handed over, it is still held.
    tokio::time::sleep_until((first_valid_until + Duration::from_millis(100)).into()).await;
    assert_eq!(guard.state(), LockState::Held, "{:?}", guard.status());
    let err = rival.try_acquire("late", &opts).await.unwrap_err();
    assert!(matches!(err, Error::Contended { .. }), "{err}");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_renews_a_lock_acquired_slowly() {
    let nodes = common::nodes(3);
    // A deadline long enough to wait for masters that answer late.
    let client = Client::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_millis(900))
        .quarantine(Duration::ZERO)
        .build()
        .unwrap();
    common::kinds::warm(&client).await;
    let opts = common::opts(1_000);
    let interval = Duration::from_millis(1_000 / 3);
    // A round counts when the lock came with less validity than the interval; a loaded
    // machine can make the acquire miss its deadline and succeed afresh, so a few rounds.
    let mut tested = 0;
    for round in 0..3 {
        // Two of three masters answer the acquire after most of its TTL: the lock comes with
        // less validity left than the renewal interval.
        nodes.pause(1).unwrap();
        nodes.pause(2).unwrap();
        let resume = async {
            tokio::time::sleep(Duration::from_millis(700)).await;
            nodes.resume(1).unwrap();
            nodes.resume(2).unwrap();
        };
        let name = format!("slow-{round}");
        let work = client.with_lock(&name, &opts, |lock| async move {
            let left = lock.remaining();
            // Longer than the validity the lock came with: only a renewal keeps it.
            tokio::time::sleep(left + Duration::from_millis(300)).await;
            (left, lock.status().renewals)
        });
        let (result, ()) = tokio::join!(work, resume);
        let (left, renewals) = result.expect("every master is up: the lock is renewed, not lost");
        if left < interval {
            assert!(renewals > 0);
            tested += 1;
        }
    }
    assert!(tested > 0, "no acquire left less than the interval");
}

/// Work that blocks its runtime's only thread past the lock's validity: no loss can be
/// published while it runs, and meanwhile a rival takes the lock.
#[test]
fn with_lock_reports_a_lock_that_ran_out_during_the_work() {
    let nodes = common::nodes(3);
    let urls = nodes.urls();
    let taken = Arc::new(Barrier::new(2));
    let rival_fence = Arc::new(AtomicU64::new(0));
    let rival = std::thread::spawn({
        let (taken, rival_fence) = (taken.clone(), rival_fence.clone());
        move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let client = Client::builder()
                    .nodes(urls)
                    .node_timeout(common::NODE_TIMEOUT)
                    .quarantine(Duration::ZERO)
                    .build()
                    .unwrap();
                taken.wait();
                let opts = common::opts(5_000).wait(Duration::from_secs(5));
                let lock = client.acquire("paused", &opts).await.unwrap();
                rival_fence.store(lock.fence(), Ordering::SeqCst);
                lock.release().await.unwrap();
            });
        }
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = common::client(&nodes);
    let result = runtime.block_on(client.with_lock("paused", &common::opts(400), |lock| {
        let taken = taken.clone();
        let rival_fence = rival_fence.clone();
        async move {
            // The rival starts waiting once the lock is ours.
            taken.wait();
            let end = Instant::now() + Duration::from_secs(5);
            // Blocks the thread (a long computation, a paused process) until the rival has
            // had the lock, so long after the 400 ms TTL.
            while rival_fence.load(Ordering::SeqCst) == 0 && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(20));
            }
            lock.fence()
        }
    }));
    rival.join().unwrap();
    assert!(
        rival_fence.load(Ordering::SeqCst) > 0,
        "the rival never had the lock"
    );
    assert!(
        matches!(result, Err(Error::LockLost { .. })),
        "the rival held the lock during the work, yet with_lock returned {result:?}"
    );
}
