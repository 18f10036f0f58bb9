//! Contention on healthy masters never waits out the per-node deadline: no call times out, and
//! no lock handed to a waiter is given back for want of a quorum. (It used to: releases handed
//! the lock over on different attempts' terms on different masters, and the waiter waited out
//! the deadline for a quorum of one token.) Counted with the library's own metrics.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use metrics_util::CompositeKey;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use redquorum::LockOptions;
use redquorum::metrics::{HANDOVERS, NODE_ERRORS};

/// What a snapshot holds: each metric's key and value.
type Snapshot = Vec<(CompositeKey, DebugValue)>;

/// The sum of a counter's values whose labels include `label`.
fn counted(snapshot: &Snapshot, name: &str, label: (&str, &str)) -> u64 {
    snapshot
        .iter()
        .filter(|(key, _)| {
            key.key().name() == name
                && key
                    .key()
                    .labels()
                    .any(|l| l.key() == label.0 && l.value() == label.1)
        })
        .map(|(_, value)| match value {
            DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_acquires_on_healthy_masters_never_wait_out_the_per_node_deadline() {
    const WORKERS: usize = 8;
    const RUN: Duration = Duration::from_secs(3);
    const MAX_SECTIONS: u64 = 20_000;
    const WARM_UP: Duration = Duration::from_millis(500);
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");
    let nodes = common::nodes(5);
    let total = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        // A deadline well above any stall of a loaded test machine (a debug build, two cores
        // shared with five masters), so that what runs into it is the protocol waiting for
        // what will not come, as handovers on different attempts' terms did, not the machine.
        let client = redquorum::Client::builder()
            .nodes(nodes.urls())
            .node_timeout(Duration::from_millis(200))
            .quarantine(Duration::ZERO)
            .build()
            .unwrap();
        let total = total.clone();
        workers.push(tokio::spawn(async move {
            let opts = LockOptions::new(Duration::from_secs(10))
                .wait(Duration::from_secs(10))
                .retry_delay(Duration::ZERO)
                .retry_jitter(Duration::from_millis(10));
            while started.elapsed() < RUN && total.load(Ordering::SeqCst) < MAX_SECTIONS {
                let lock = client.acquire("hot", &opts).await.expect("acquire");
                tokio::task::yield_now().await;
                lock.release().await.expect("release");
                total.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    // The first moments are a scramble: eight waiters join an empty queue at once, in
    // different orders on different masters, and a release may hand the lock to one waiter
    // on some masters and to another on the rest. What is counted is the steady contention
    // after that (taking a snapshot empties the recorder).
    tokio::time::sleep(WARM_UP).await;
    drop(snapshotter.snapshot());
    for w in workers {
        w.await.unwrap();
    }
    // One snapshot: taking one drains what it read.
    let snapshot: Snapshot = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| (key, value))
        .collect();
    let handed = counted(&snapshot, HANDOVERS, ("outcome", "taken"))
        + counted(&snapshot, HANDOVERS, ("outcome", "adopted"));
    eprintln!(
        "handovers: taken {} adopted {} given back {}; node timeouts {}; sections {}",
        counted(&snapshot, HANDOVERS, ("outcome", "taken")),
        counted(&snapshot, HANDOVERS, ("outcome", "adopted")),
        counted(&snapshot, HANDOVERS, ("outcome", "given_back")),
        counted(&snapshot, NODE_ERRORS, ("kind", "timeout")),
        total.load(Ordering::SeqCst)
    );
    assert!(
        handed > 0,
        "the run must hand locks over to waiters to say anything"
    );
    assert_eq!(
        counted(&snapshot, NODE_ERRORS, ("kind", "timeout")),
        0,
        "a call to a healthy master ran into the per-node deadline"
    );
    assert_eq!(
        counted(&snapshot, HANDOVERS, ("outcome", "given_back")),
        0,
        "a waiter gave a handed-over lock back ({handed} were taken)"
    );
}
