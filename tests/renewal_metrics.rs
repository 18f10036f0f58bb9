//! A guard's background renewals are counted in `redquorum_renewals_total` only, and
//! `redquorum_extensions_total` counts the extends asked for (`Lock::extend`, an extend by
//! token). In a file of its own because a metrics recorder is global to the process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use redquorum::RenewOptions;
use redquorum::metrics::{EXTENSIONS, RENEWALS};

/// Each `(metric, outcome)` counted since the last look (a snapshot takes the counts it reads).
fn counted(snapshotter: &Snapshotter) -> BTreeMap<(String, String), u64> {
    let mut counted = BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let outcome = key.labels().find(|l| l.key() == "outcome");
        if let (true, Some(outcome), DebugValue::Counter(n)) = (
            key.name() == EXTENSIONS || key.name() == RENEWALS,
            outcome,
            value,
        ) && n > 0
        {
            *counted
                .entry((key.name().to_owned(), outcome.value().to_owned()))
                .or_default() += n;
        }
    }
    counted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_are_not_counted_as_extensions() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    // A guard renewed a few times, then released.
    let guard = client
        .acquire_guard("renewed", &common::opts(900), RenewOptions::default())
        .await
        .unwrap();
    let mut watch = guard.watch();
    let renewed = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(status) = watch.changed().await {
            if status.renewals >= 2 {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(renewed, Ok(true), "two renewals: {:?}", guard.status());
    guard.release().await.unwrap();
    let after_renewals = counted(&snapshotter);
    let renewals = after_renewals
        .get(&(RENEWALS.to_owned(), "renewed".to_owned()))
        .copied()
        .unwrap_or(0);
    assert!(renewals >= 2, "{after_renewals:?}");
    assert_eq!(
        after_renewals.keys().collect::<Vec<_>>(),
        [&(RENEWALS.to_owned(), "renewed".to_owned())],
        "renewals counted as anything else"
    );
    // Extends asked for, by a lock and by token, are extensions.
    let mut lock = client
        .try_acquire("extended", &common::opts(30_000))
        .await
        .unwrap();
    lock.extend(Duration::from_secs(30)).await.unwrap();
    let token = lock.token().to_owned();
    let by_token = client
        .extend_token("extended", &token, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(by_token.token(), token);
    lock.release().await.unwrap();
    assert_eq!(
        counted(&snapshotter),
        BTreeMap::from([((EXTENSIONS.to_owned(), "extended".to_owned()), 2)])
    );
}
