//! Guards' renewal options: bad options give the lock back, and the hold limit ends the hold on
//! the masters.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redquorum::RenewOptions;

/// Long enough that a lock seen free again was released, not expired.
const LONG_TTL_MS: u64 = 30_000;

/// An interval as long as the TTL, which `into_guard` refuses.
fn bad_renewal() -> RenewOptions {
    RenewOptions::default().interval(Duration::from_millis(LONG_TTL_MS))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_renewal_options_are_refused_before_any_lock_is_taken() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let opts = common::opts(LONG_TTL_MS);
    common::expect_invalid(
        client.acquire_guard("one", &opts, bad_renewal()).await,
        "renew_interval",
    );
    common::expect_invalid(
        client
            .acquire_all_guard(&["two", "three"], &opts, bad_renewal())
            .await,
        "renew_interval",
    );
    // Refused before any node was contacted: no name was ever taken, nor its counter raised.
    for name in ["one", "two", "three"] {
        assert_eq!(common::nodes_holding(&nodes, name).await, 0, "{name} held");
        for i in 0..3 {
            assert_eq!(common::fence_counter(&nodes, i, name).await, 0, "{name}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_refused_a_guard_is_given_back() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let opts = common::opts(LONG_TTL_MS);
    let lock = client.try_acquire("refused", &opts).await.unwrap();
    common::expect_invalid(lock.into_guard(bad_renewal()), "renew_interval");
    let multi = client
        .try_acquire_all(&["refused-a", "refused-b"], &opts)
        .await
        .unwrap();
    common::expect_invalid(multi.into_guard(bad_renewal()), "renew_interval");
    // Released in the background, long before the TTL.
    for name in ["refused", "refused-a", "refused-b"] {
        assert!(
            common::eventually(Duration::from_secs(2), || async {
                common::nodes_holding(&nodes, name).await == 0
            })
            .await,
            "{name} still held after the refusal"
        );
    }
    // And someone else can take them.
    let other = common::client(&nodes);
    let all = other
        .try_acquire_all(&["refused", "refused-a", "refused-b"], &opts)
        .await
        .expect("free once given back");
    all.release().await.unwrap();
}
