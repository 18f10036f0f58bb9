//! Unfair acquisition (`LockOptions::fair(false)`): a free lock goes to whoever asks first,
//! waiters are still woken by releases, and mutual exclusion holds under contention.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redquorum::{Error, LockOptions};

/// A waiter that never polls within the test: only a release's wake-up makes it try again.
fn sleepy_waiter(fair: bool) -> LockOptions {
    LockOptions::new(Duration::from_secs(5))
        .wait(Duration::from_secs(20))
        .retry_delay(Duration::from_secs(10))
        .retry_jitter(Duration::ZERO)
        .fair(fair)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfair_caller_takes_a_free_lock_that_a_fair_one_must_leave_to_the_queue() {
    let nodes = common::nodes(3);
    let holder = common::client(&nodes);
    let held = holder
        .try_acquire("free-for-all", &common::opts(300))
        .await
        .unwrap();
    // A fair waiter queues behind the holder and sleeps: its place lasts 2 s on the masters.
    let waiting = common::client(&nodes);
    let waiter =
        tokio::spawn(async move { waiting.acquire("free-for-all", &sleepy_waiter(true)).await });
    // The holder's lock expires (nobody releases it, so nobody is woken).
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            common::pttl(&nodes, 0, "free-for-all").await < 0
                && common::pttl(&nodes, 1, "free-for-all").await < 0
        })
        .await
    );
    drop(held);

    let other = common::client(&nodes);
    let fair = other
        .try_acquire("free-for-all", &common::opts(5_000))
        .await
        .unwrap_err();
    assert!(
        matches!(fair, Error::Contended { ref reserved, .. } if !reserved.is_empty()),
        "a fair caller leaves a free lock to the waiter queued first: {fair}"
    );
    let unfair = other
        .try_acquire("free-for-all", &common::opts(5_000).fair(false))
        .await
        .expect("an unfair caller takes a free lock whatever the queue says");

    // Its release wakes the queued waiter, which takes the lock long before its next poll.
    let released = Instant::now();
    unfair.release().await.unwrap();
    let lock = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the release")
        .unwrap()
        .unwrap();
    assert!(released.elapsed() < Duration::from_secs(5));
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfair_contenders_keep_mutual_exclusion_and_all_make_progress() {
    const WORKERS: usize = 6;
    const RUN: Duration = Duration::from_secs(3);
    const MAX_SECTIONS: u64 = 20_000;
    let nodes = common::nodes(5);
    let inside = Arc::new(AtomicI64::new(0));
    let overlaps = Arc::new(AtomicU64::new(0));
    let total = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let client = common::patient_client(&nodes);
        let (inside, overlaps, total) = (inside.clone(), overlaps.clone(), total.clone());
        workers.push(tokio::spawn(async move {
            let opts = LockOptions::new(Duration::from_secs(5))
                .wait(Duration::from_secs(10))
                .retry_delay(Duration::ZERO)
                .retry_jitter(Duration::from_millis(10))
                .fair(false);
            let mut mine = 0u64;
            while started.elapsed() < RUN && total.load(Ordering::SeqCst) < MAX_SECTIONS {
                let lock = client.acquire("unfair", &opts).await.expect("acquire");
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                lock.release().await.expect("release");
                mine += 1;
                total.fetch_add(1, Ordering::SeqCst);
            }
            mine
        }));
    }
    let mut per_worker = Vec::new();
    for w in workers {
        per_worker.push(w.await.unwrap());
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    assert!(
        per_worker.iter().all(|&n| n > 0),
        "every contender got the lock at least once: {per_worker:?}"
    );
}
