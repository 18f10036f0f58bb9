//! Every acquire is timed under an outcome, one whose caller stopped waiting too. In a file of
//! its own because a metrics recorder is global to the process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use redquorum::metrics::ACQUIRE_DURATION;

/// The acquires timed since the last look: each outcome's times in seconds (a snapshot takes
/// the histograms' samples it reads).
fn timed(snapshotter: &Snapshotter) -> BTreeMap<String, Vec<f64>> {
    let mut timed: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let outcome = key.labels().find(|l| l.key() == "outcome");
        if let (true, Some(outcome), DebugValue::Histogram(samples)) =
            (key.name() == ACQUIRE_DURATION, outcome, value)
            && !samples.is_empty()
        {
            timed
                .entry(outcome.value().to_owned())
                .or_default()
                .extend(samples.iter().map(|s| s.into_inner()));
        }
    }
    timed
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
    let first = timed(&snapshotter);
    assert_eq!(first.keys().collect::<Vec<_>>(), ["acquired"], "{first:?}");
    // A caller that gives up after 300 ms on an acquire that would wait 20 s.
    let patient = common::opts(5_000).wait(Duration::from_secs(20));
    let waiting = waiter.acquire("busy", &patient);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), waiting)
            .await
            .is_err()
    );
    let dropped = timed(&snapshotter);
    let cancelled = dropped.get("cancelled").cloned().unwrap_or_default();
    assert_eq!(
        cancelled.len(),
        1,
        "the cancelled acquire was not timed: {dropped:?}"
    );
    assert!(
        (0.25..20.0).contains(&cancelled[0]),
        "timed to the drop, not to the end of its wait: {cancelled:?} s"
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
    let last = timed(&snapshotter);
    assert_eq!(
        last.iter()
            .map(|(o, t)| (o.as_str(), t.len()))
            .collect::<Vec<_>>(),
        [("acquired", 1)]
    );
}
