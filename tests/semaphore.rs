//! Semaphores against real redis-server processes: never more holders than permits, permits
//! that renew, waiters woken by releases, holders that must agree on the number of permits,
//! and the availability that the larger quorum costs when masters are lost.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::kinds::{Overlap, holders, kind_opts, permits_held, race};
use redquorum::{Error, LockKind, LockState, RenewOptions};

fn permit(permits: u32, ttl_ms: u64) -> redquorum::LockOptions {
    kind_opts(LockKind::semaphore(permits), ttl_ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_holders_than_permits_and_everyone_gets_in() {
    let nodes = common::nodes(5);
    let overlap = Arc::new(Overlap::default());
    let seen = overlap.clone();
    let got = race(
        &nodes,
        "pool",
        6,
        10,
        Duration::from_secs(25),
        |_| LockKind::semaphore(2),
        move |_, entering| {
            if entering {
                assert!(seen.enter() <= 2, "three holders of two permits");
            } else {
                seen.leave();
            }
        },
    )
    .await;
    assert!(overlap.most() <= 2);
    assert!(
        got.iter().all(|&n| n >= 1),
        "a worker never got in: {got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_shared_up_to_their_number() {
    let nodes = common::nodes(5);
    let client = common::client(&nodes);
    common::kinds::warm(&client).await;
    let a = client.try_acquire("pair", &permit(2, 5_000)).await.unwrap();
    let other = common::client(&nodes);
    let b = common::kinds::warm(&other)
        .await
        .try_acquire("pair", &permit(2, 5_000))
        .await
        .unwrap();
    assert_eq!(a.kind(), &LockKind::semaphore(2));
    assert!(
        b.fence() > a.fence(),
        "each holder has its own, growing fence"
    );
    assert!(matches!(
        client.try_acquire("pair", &permit(2, 2_000)).await,
        Err(Error::Contended { .. })
    ));
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            permits_held(&nodes, 4, "pair").await == 2
        })
        .await
    );
    a.release().await.unwrap();
    let c = client.try_acquire("pair", &permit(2, 2_000)).await.unwrap();
    b.release().await.unwrap();
    c.release().await.unwrap();
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            holders(&nodes, 0, "sem", "pair").await.is_empty()
        })
        .await,
        "the last release leaves nothing behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_number_of_permits_is_refused_and_changes_nothing() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    common::kinds::warm(&client).await;
    let held = client
        .try_acquire("sized", &permit(2, 5_000))
        .await
        .unwrap();
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            permits_held(&nodes, 2, "sized").await == 1
        })
        .await
    );
    let mut before = Vec::new();
    for i in 0..3 {
        before.push(holders(&nodes, i, "sem", "sized").await);
    }
    for wait in [Duration::ZERO, Duration::from_millis(300)] {
        // The caller's argument is at fault, not the masters: said so, at once.
        let err = client
            .acquire("sized", &permit(3, 2_000).wait(wait))
            .await
            .expect_err("three permits asked of a two-permit semaphore");
        common::expect_invalid(Err::<(), _>(err), "permits");
    }
    // Nor does the permit extend with another number (with one permit, it would count two
    // masters of three, not all three).
    let err = client
        .extend_token_as(
            "sized",
            &LockKind::semaphore(1),
            held.token(),
            Duration::from_secs(30),
        )
        .await
        .map(|_| ())
        .expect_err("one permit asked of a two-permit semaphore's holder");
    assert!(err.to_string().contains("2 permits"), "{err}");
    common::expect_invalid(Err::<(), _>(err), "permits");
    for (i, before) in before.iter().enumerate() {
        let now = holders(&nodes, i, "sem", "sized").await;
        let (a, b): (Vec<_>, Vec<_>) = (
            before.iter().map(|(m, _)| m).collect(),
            now.iter().map(|(m, _)| m).collect(),
        );
        assert_eq!(a, b, "node {i} changed");
        // Nor was the permit's expiry pushed back.
        assert_eq!(before, &now, "node {i} changed");
        assert!(now.iter().any(|(m, s)| m == "#permits" && *s == -2.0));
    }
    held.release().await.unwrap();
    // Once no one holds it, another number is fine.
    client
        .try_acquire("sized", &permit(3, 2_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_guard_renews() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let guard = client
        .acquire_guard("renewed", &permit(1, 600), RenewOptions::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    assert_eq!(guard.state(), LockState::Held);
    assert!(guard.status().renewals >= 3);
    assert!(matches!(
        client.try_acquire("renewed", &permit(1, 600)).await,
        Err(Error::Contended { .. })
    ));
    guard.release().await.unwrap();
    client
        .try_acquire("renewed", &permit(1, 600))
        .await
        .expect("free once the guard is released")
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_with_a_long_retry_delay_is_woken_by_a_release() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let a = client
        .try_acquire("woken", &permit(2, 20_000))
        .await
        .unwrap();
    let b = client
        .try_acquire("woken", &permit(2, 20_000))
        .await
        .unwrap();
    let waiter = {
        let client = common::client(&nodes);
        // Its own retries come ten seconds apart: only a wake-up gets it in sooner.
        let opts = permit(2, 5_000)
            .wait(Duration::from_secs(15))
            .retry_delay(Duration::from_secs(10))
            .retry_jitter(Duration::ZERO);
        tokio::spawn(async move {
            let lock = client.acquire("woken", &opts).await;
            (lock, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "got in beside two holders");
    let released = Instant::now();
    a.release().await.unwrap();
    let (lock, at) = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .unwrap()
        .unwrap();
    let lock = lock.expect("the waiter gets the freed permit");
    assert!(
        at.duration_since(released) < Duration::from_secs(5),
        "the waiter slept out its retry delay instead of being woken ({:?})",
        at.duration_since(released)
    );
    lock.release().await.unwrap();
    b.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_holders_free_their_permits_at_their_ttl() {
    let nodes = common::nodes(3);
    let started = Instant::now();
    {
        let crashed = common::client(&nodes);
        let a = crashed
            .try_acquire("crash", &permit(2, 1_500))
            .await
            .unwrap();
        let b = crashed
            .try_acquire("crash", &permit(2, 1_500))
            .await
            .unwrap();
        drop((a, b, crashed));
    }
    let client = common::client(&nodes);
    assert!(matches!(
        client.try_acquire("crash", &permit(2, 2_000)).await,
        Err(Error::Contended { .. })
    ));
    let lock = client
        .acquire("crash", &permit(2, 2_000).wait(Duration::from_secs(5)))
        .await
        .expect("a permit frees at the TTL");
    assert!(
        started.elapsed() >= Duration::from_millis(1_450),
        "taken after {:?}, before the crashed holders' TTL",
        started.elapsed()
    );
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_permits_of_five_masters_survive_one_lost_master_not_two() {
    let mut nodes = common::nodes(5);
    let client = common::client(&nodes);
    common::kinds::mark(&nodes).await;
    assert_eq!(LockKind::semaphore(2).quorum(5), 4);
    nodes.kill(2).unwrap();
    let mut a = client.acquire("costly", &permit(2, 2_000)).await.unwrap();
    let b = client.acquire("costly", &permit(2, 2_000)).await.unwrap();
    a.extend(Duration::from_secs(3)).await.unwrap();
    assert!(matches!(
        client.try_acquire("costly", &permit(2, 2_000)).await,
        Err(Error::Contended { .. })
    ));
    a.release().await.unwrap();
    b.release().await.unwrap();
    // A mutex still has its majority with two of five down; the semaphore does not.
    nodes.kill(0).unwrap();
    client
        .try_acquire("costly-mutex", &common::opts(2_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    match client
        .acquire("costly", &permit(2, 2_000).wait(Duration::from_millis(500)))
        .await
    {
        Err(Error::QuorumUnavailable { needed, total, .. }) => assert_eq!((needed, total), (4, 5)),
        other => panic!("expected QuorumUnavailable, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_by_token_gives_the_permits_own_fence() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let kind = LockKind::semaphore(2);
    let a = client.try_acquire("own", &permit(2, 5_000)).await.unwrap();
    let b = client.try_acquire("own", &permit(2, 5_000)).await.unwrap();
    assert!(b.fence() > a.fence());
    // B's grant raised every master's counter above A's token: A's extend still says A's.
    for held in [&a, &b] {
        let extended = client
            .extend_token_as("own", &kind, held.token(), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(extended.fence(), held.fence());
    }
    a.release().await.unwrap();
    b.release().await.unwrap();
    // Released holders take their records with them: nothing is left on the masters.
    for i in 0..3 {
        assert!(
            holders(&nodes, i, "sem", "own").await.is_empty(),
            "node {i}"
        );
    }
}
