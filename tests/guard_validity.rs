//! A guard's validity: `with_lock` reports a lock whose validity ran out during the work as
//! lost.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use redquorum::{Client, Error};

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
