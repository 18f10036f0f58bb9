//! `expiring(margin)`: the signal to stop work before a guarded lock's validity ends, against
//! real redis-server processes. It stays quiet while renewals succeed, and fires a margin
//! before the end, ahead of `lost`, when they fail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use redquorum::{LockState, RenewOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiring_stays_quiet_while_renewals_succeed() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let guard = client
        .acquire_guard("steady", &common::opts(600), RenewOptions::default())
        .await
        .unwrap();
    // Three TTLs: a healthy lock keeps about two thirds of its TTL left, above the margin.
    let fired = tokio::time::timeout(
        Duration::from_millis(1_800),
        guard.expiring(Duration::from_millis(100)),
    )
    .await;
    assert!(
        fired.is_err(),
        "fired while renewals succeed: {:?}",
        guard.status()
    );
    assert_eq!(guard.state(), LockState::Held);
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiring_fires_a_margin_before_the_end_when_renewals_fail() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let margin = Duration::from_millis(300);
    let guard = client
        .acquire_guard("failing", &common::opts(1_200), RenewOptions::default())
        .await
        .unwrap();
    let watch = guard.watch();
    // A majority silent: no renewal reaches a quorum, and the validity runs down.
    nodes.pause(0).unwrap();
    nodes.pause(1).unwrap();
    let expiring = tokio::time::timeout(Duration::from_secs(5), watch.expiring(margin)).await;
    let at_expiring = (Instant::now(), watch.remaining(), watch.state());
    let lost = tokio::time::timeout(Duration::from_secs(5), watch.lost()).await;
    let at_lost = Instant::now();
    nodes.resume(0).unwrap();
    nodes.resume(1).unwrap();
    assert!(expiring.is_ok() && lost.is_ok(), "{:?}", watch.status());
    let (fired, left, state) = at_expiring;
    assert!(left <= margin, "fired with {left:?} left");
    assert_ne!(state, LockState::Lost, "fired only once the lock was lost");
    assert!(at_lost > fired, "lost came before expiring");
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiring_fires_at_once_for_a_margin_past_the_validity_left() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let guard = client
        .acquire_guard("short", &common::opts(600), RenewOptions::default())
        .await
        .unwrap();
    let fired = tokio::time::timeout(
        Duration::from_millis(100),
        guard.expiring(Duration::from_secs(60)),
    )
    .await;
    assert!(fired.is_ok(), "a margin longer than the TTL fires at once");
    guard.release().await.unwrap();
}
