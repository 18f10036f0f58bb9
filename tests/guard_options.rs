//! Guards' renewal options: bad options give the lock back, and the hold limit ends the hold on
//! the masters.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use redquorum::{LockKind, Owner, RenewOptions, RenewalStop};

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

/// Guards with a hold limit far below the TTL: at the limit the guard says the lock is gone,
/// and the masters no longer hold it either, long before the TTL would have freed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hold_limit_frees_the_lock_on_the_masters() {
    let nodes = common::nodes(3);
    let holder = common::client(&nodes);
    let rival = common::client(&nodes);
    let reentrant = || LockKind::Reentrant(Owner::random().unwrap());
    let kinds = [
        ("capped-mutex", LockKind::Mutex, LockKind::Mutex),
        ("capped-reentrant", reentrant(), reentrant()),
    ];
    for (name, kind, rival_kind) in kinds {
        let opts = common::opts(3_000).kind(kind);
        let started = Instant::now();
        let guard = holder
            .acquire_guard(
                name,
                &opts,
                RenewOptions::default().max_hold(Duration::from_millis(500)),
            )
            .await
            .unwrap();
        // Never told of validity past the limit, which runs from the guard's making.
        let made_by = Instant::now();
        assert!(guard.status().valid_until <= made_by + Duration::from_millis(500));
        tokio::time::timeout(Duration::from_secs(2), guard.lost())
            .await
            .expect("lost at the hold limit");
        assert_eq!(guard.status().stopped, Some(RenewalStop::MaxHold), "{name}");
        // Another owner has it well before the 3 s TTL could have run out on the masters.
        let rival_opts = common::opts(3_000).kind(rival_kind);
        let until = started + Duration::from_millis(2_000);
        let mut taken = None;
        while taken.is_none() && Instant::now() < until {
            match rival.try_acquire(name, &rival_opts).await {
                Ok(lock) => taken = Some(lock),
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        let mut taken = taken.unwrap_or_else(|| panic!("{name} still held past the hold limit"));
        // The guard's own release afterwards leaves the rival's lock alone.
        guard.release().await.unwrap();
        taken
            .extend(Duration::from_secs(3))
            .await
            .unwrap_or_else(|e| panic!("{name}: the rival's lock is gone: {e}"));
        taken.release().await.unwrap();
    }
}
