//! `redquorum_quorum_failures_total` counts operations, not attempts: an acquire that retries
//! before it gives up without a quorum counts once, as a release, an extend and an inspect do.
//! In a file of its own because a metrics recorder is global to the process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use redquorum::Error;
use redquorum::metrics::QUORUM_FAILURES;

/// The quorum failures counted since the last look, by operation (a snapshot takes the
/// counts it reads).
fn counted(snapshotter: &Snapshotter) -> BTreeMap<String, u64> {
    let mut counted = BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let operation = key.labels().find(|l| l.key() == "operation");
        if let (true, Some(operation), DebugValue::Counter(n)) =
            (key.name() == QUORUM_FAILURES, operation, value)
            && n > 0
        {
            *counted.entry(operation.value().to_owned()).or_default() += n;
        }
    }
    counted
}

/// `(operation, count)` pairs, as `counted` gives them.
fn expected(counts: &[(&str, u64)]) -> BTreeMap<String, u64> {
    counts.iter().map(|(o, n)| ((*o).to_owned(), *n)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_operation_without_a_quorum_counts_once() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");
    let mut nodes = common::nodes(3);
    let client = common::client(&nodes);
    // A token to extend and release later, taken while every master is up.
    let held = client
        .try_acquire("held", &common::opts(30_000))
        .await
        .unwrap();
    let token = held.token().to_owned();
    drop(counted(&snapshotter));
    nodes.kill(1).unwrap();
    nodes.kill(2).unwrap();
    // A waiting acquire makes more than one attempt (a refused connection keeps a master out
    // only once it has repeated) and ends without a quorum: one operation.
    let waiting = common::opts(5_000).wait(Duration::from_secs(10));
    let result = client.acquire("free", &waiting).await;
    assert!(
        matches!(result, Err(Error::QuorumUnavailable { .. })),
        "{result:?}"
    );
    assert_eq!(counted(&snapshotter), expected(&[("acquire", 1)]));
    // One attempt only: one more.
    let result = client.try_acquire("free", &common::opts(5_000)).await;
    assert!(
        matches!(result, Err(Error::QuorumUnavailable { .. })),
        "{result:?}"
    );
    assert_eq!(counted(&snapshotter), expected(&[("acquire", 1)]));
    // The other operations count once each, as before.
    let extended = client
        .extend_token("held", &token, Duration::from_secs(30))
        .await;
    assert!(
        matches!(extended, Err(Error::ExtendUncertain { .. })),
        "{extended:?}"
    );
    let released = client.release_token("held", &token).await;
    assert!(
        matches!(released, Err(Error::QuorumUnavailable { .. })),
        "{released:?}"
    );
    let inspected = client.inspect("held").await;
    assert!(
        matches!(inspected, Err(Error::QuorumUnavailable { .. })),
        "{inspected:?}"
    );
    assert_eq!(
        counted(&snapshotter),
        expected(&[("extend", 1), ("inspect", 1), ("release", 1)])
    );
}
