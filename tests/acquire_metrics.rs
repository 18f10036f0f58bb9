//! Every acquire is timed under an outcome, one whose caller stopped waiting too. In a file of
//! its own because a metrics recorder is global to the process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use redquorum::metrics::ACQUIRE_DURATION;

/// How many acquires were timed with `outcome` since the last look, and their longest time in
/// seconds (a snapshot takes the histograms' samples it reads).
fn timed(snapshotter: &Snapshotter, outcome: &str) -> (usize, f64) {
    let mut count = 0;
    let mut longest: f64 = 0.0;
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        if key.name() == ACQUIRE_DURATION
            && key
                .labels()
                .any(|l| l.key() == "outcome" && l.value() == outcome)
            && let DebugValue::Histogram(samples) = value
        {
            count += samples.len();
            longest = samples
                .iter()
                .map(|s| s.into_inner())
                .fold(longest, f64::max);
        }
    }
    (count, longest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_caller_stops_waiting_is_timed_as_cancelled() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");
    let nodes = common::nodes(3);
    let (holder, waiter) = (common::client(&nodes), common::client(&nodes));
    let held = holder
        .try_acquire("busy", &common::opts(30_000))
        .await
        .unwrap();
    assert_eq!(timed(&snapshotter, "acquired").0, 1);
    // A caller that gives up after 300 ms on an acquire that would wait 20 s.
    let patient = common::opts(5_000).wait(Duration::from_secs(20));
    let waiting = waiter.acquire("busy", &patient);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), waiting)
            .await
            .is_err()
    );
    let (cancelled, seconds) = timed(&snapshotter, "cancelled");
    assert_eq!(cancelled, 1, "the cancelled acquire was not timed");
    assert!(
        (0.25..20.0).contains(&seconds),
        "timed to the drop, not to the end of its wait: {seconds} s"
    );
    held.release().await.unwrap();
    // An acquire that ends is timed under its result only.
    waiter
        .try_acquire("busy", &common::opts(5_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let snapshot = snapshotter.snapshot().into_vec();
    let outcomes: Vec<String> = snapshot
        .iter()
        .filter(|(key, _, _, value)| {
            key.key().name() == ACQUIRE_DURATION
                && matches!(value, DebugValue::Histogram(samples) if !samples.is_empty())
        })
        .filter_map(|(key, _, _, _)| {
            key.key()
                .labels()
                .find(|l| l.key() == "outcome")
                .map(|l| l.value().to_owned())
        })
        .collect();
    assert_eq!(outcomes, ["acquired"]);
}
