//! Reentrant locks against real redis-server processes: owners exclude each other (and the
//! mutex), holds are counted per owner and keep one fencing token, the lock goes with the last
//! hold, and crashes, lost masters and empty restarts leave it as safe as a mutex.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::kinds::{Overlap, holds, kind_opts, race, reaching};
use redquorum::{Client, Error, LockKind, LockState, Owner, RenewOptions};

fn reentrant(owner: &Owner) -> LockKind {
    LockKind::Reentrant(owner.clone())
}

/// Whether `name` is refused to a new owner and to a plain mutex, on one attempt each.
async fn refused_to_others(client: &Client, name: &str) -> bool {
    let other = client
        .try_acquire(
            name,
            &kind_opts(reentrant(&Owner::random().unwrap()), 2_000),
        )
        .await;
    let mutex = client.try_acquire(name, &common::opts(2_000)).await;
    matches!(other, Err(Error::Contended { .. })) && matches!(mutex, Err(Error::Contended { .. }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_and_a_mutex_never_overlap_and_each_gets_in() {
    let nodes = common::nodes(3);
    let overlap = Arc::new(Overlap::default());
    let owners: Vec<Owner> = (0..4).map(|_| Owner::random().unwrap()).collect();
    let seen = overlap.clone();
    // Four owners and one plain mutex on the same name: they share one lock key.
    let got = race(
        &nodes,
        "shared",
        5,
        15,
        Duration::from_secs(20),
        move |w| owners.get(w).map_or(LockKind::Mutex, reentrant),
        move |_, entering| {
            if entering {
                assert!(seen.enter() <= 1, "two holders inside at once");
            } else {
                seen.leave();
            }
        },
    )
    .await;
    assert!(overlap.most() <= 1);
    assert!(
        got.iter().all(|&n| n >= 1),
        "a worker never got in: {got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_of_one_owner_are_counted_and_the_lock_goes_with_the_last() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    common::kinds::warm(&client).await;
    let owner = Owner::random().unwrap();
    let opts = kind_opts(reentrant(&owner), 5_000);
    let first = client.try_acquire("nested", &opts).await.unwrap();
    let second = client.try_acquire("nested", &opts).await.unwrap();
    let third = client.acquire("nested", &opts).await.unwrap();
    assert_eq!(first.kind(), &reentrant(&owner));
    // One lock, one fencing token for all its holds; each hold has its own token.
    assert_eq!(second.fence(), first.fence());
    assert_eq!(third.fence(), first.fence());
    assert_ne!(first.token(), second.token());
    // The lock's value is the owner's (its id after a prefix no token has); the holds are
    // counted on every master.
    let value = format!("owner:{}", owner.id());
    assert!(common::token_everywhere(&nodes, "nested", &value).await);
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            for i in 0..3 {
                if holds(&nodes, i, "nested").await != 3 {
                    return false;
                }
            }
            true
        })
        .await
    );
    assert!(refused_to_others(&client, "nested").await);
    first.release().await.unwrap();
    third.release().await.unwrap();
    assert!(
        refused_to_others(&client, "nested").await,
        "freed before its last hold"
    );
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            holds(&nodes, 0, "nested").await == 1
        })
        .await
    );
    let last_fence = second.fence();
    second.release().await.unwrap();
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            common::lock_count(&nodes, 0).await == 0 && holds(&nodes, 0, "nested").await == 0
        })
        .await,
        "the last hold's release leaves the lock on node 0"
    );
    let next = client
        .try_acquire(
            "nested",
            &kind_opts(reentrant(&Owner::random().unwrap()), 2_000),
        )
        .await
        .expect("free after the last hold");
    assert!(next.fence() > last_fence);
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_owner_waits_for_the_last_hold() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let owner = Owner::random().unwrap();
    let opts = kind_opts(reentrant(&owner), 10_000);
    let outer = client.try_acquire("waited", &opts).await.unwrap();
    let inner = client.try_acquire("waited", &opts).await.unwrap();
    let waiter = {
        let client = common::client(&nodes);
        let opts = kind_opts(reentrant(&Owner::random().unwrap()), 5_000)
            .wait(Duration::from_secs(10))
            .retry_delay(Duration::from_millis(20));
        tokio::spawn(async move { client.acquire("waited", &opts).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "got in beside the holder");
    inner.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "got in before the last hold went");
    let fence = outer.fence();
    outer.release().await.unwrap();
    let lock = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter gets the freed lock within its wait")
        .unwrap()
        .unwrap();
    assert!(lock.fence() > fence);
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_id_handed_to_another_client_reenters() {
    let nodes = common::nodes(3);
    // Two clients, as two processes would have, with the same owner id.
    let (parent, child) = (common::client(&nodes), common::client(&nodes));
    let (a, b) = (
        Owner::from_id("job-42:step.1").unwrap(),
        Owner::from_id("job-42:step.1").unwrap(),
    );
    let outer = parent
        .try_acquire("handed", &kind_opts(reentrant(&a), 5_000))
        .await
        .unwrap();
    let inner = child
        .try_acquire("handed", &kind_opts(reentrant(&b), 5_000))
        .await
        .expect("the same owner id re-enters from another client");
    assert_eq!(inner.fence(), outer.fence());
    assert!(refused_to_others(&common::client(&nodes), "handed").await);
    // A stateless release of the parent's hold, by token, from the child's client.
    child
        .release_token_as("handed", &reentrant(&b), outer.token())
        .await
        .unwrap();
    drop(outer);
    assert!(
        refused_to_others(&parent, "handed").await,
        "the child's hold keeps it"
    );
    inner.release().await.unwrap();
    let other = Owner::random().unwrap();
    parent
        .try_acquire("handed", &kind_opts(reentrant(&other), 2_000))
        .await
        .expect("free once both holds are gone")
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_hold_renews_and_outlives_another_holds_release() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let owner = Owner::random().unwrap();
    let opts = kind_opts(reentrant(&owner), 900);
    let guard = client
        .acquire_guard("renewed", &opts, RenewOptions::default())
        .await
        .unwrap();
    let other = client.try_acquire("renewed", &opts).await.unwrap();
    other.release().await.unwrap();
    // Three TTLs later the guard has kept the lock.
    tokio::time::sleep(Duration::from_millis(2_700)).await;
    assert_eq!(guard.state(), LockState::Held);
    assert!(guard.status().renewals >= 3, "{:?}", guard.status());
    assert!(refused_to_others(&client, "renewed").await);
    guard.release().await.unwrap();
    let rival = Owner::random().unwrap();
    client
        .try_acquire("renewed", &kind_opts(reentrant(&rival), 2_000))
        .await
        .expect("free once the guarded hold is released")
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_owner_frees_the_lock_at_its_ttl() {
    let nodes = common::nodes(3);
    let ttl = Duration::from_millis(1_500);
    let started = Instant::now();
    {
        let crashed = common::client(&nodes);
        let owner = Owner::random().unwrap();
        let opts = kind_opts(reentrant(&owner), 1_500);
        let a = crashed.try_acquire("crash", &opts).await.unwrap();
        let b = crashed.try_acquire("crash", &opts).await.unwrap();
        // Neither hold is released: the process is gone.
        drop((a, b, crashed));
    }
    let client = common::client(&nodes);
    let opts = kind_opts(reentrant(&Owner::random().unwrap()), 2_000);
    assert!(matches!(
        client.try_acquire("crash", &opts).await,
        Err(Error::Contended { .. })
    ));
    let lock = client
        .acquire("crash", &opts.clone().wait(Duration::from_secs(5)))
        .await
        .expect("free at the TTL");
    assert!(
        started.elapsed() >= ttl - Duration::from_millis(50),
        "taken after {:?}, before the crashed owner's TTL",
        started.elapsed()
    );
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_extend_and_release_with_a_minority_of_masters_down() {
    let mut nodes = common::nodes(5);
    let client = common::client(&nodes);
    common::kinds::mark(&nodes).await;
    nodes.kill(0).unwrap();
    nodes.kill(3).unwrap();
    let owner = Owner::random().unwrap();
    let opts = kind_opts(reentrant(&owner), 2_000);
    let mut outer = client.acquire("minority", &opts).await.unwrap();
    let mut inner = client.acquire("minority", &opts).await.unwrap();
    assert_eq!(inner.fence(), outer.fence());
    outer.extend(Duration::from_secs(3)).await.unwrap();
    inner.extend(Duration::from_secs(3)).await.unwrap();
    assert!(refused_to_others(&client, "minority").await);
    outer.release().await.unwrap();
    assert!(refused_to_others(&client, "minority").await);
    inner.release().await.unwrap();
    let rival = Owner::random().unwrap();
    client
        .try_acquire("minority", &kind_opts(reentrant(&rival), 2_000))
        .await
        .expect("free with two of five masters down")
        .release()
        .await
        .unwrap();
}

/// An owner holds on masters 0 and 1 only (master 2 is out of its reach), first for a short
/// TTL, then re-entering for a long one; master 1 then restarts empty. Returns the long hold.
async fn held_on_a_bare_majority(nodes: &mut redquorum_testkit::LocalNodes) -> redquorum::Lock {
    common::kinds::mark(nodes).await;
    let holder = reaching(nodes, &[0, 1]).build().unwrap();
    let owner = Owner::random().unwrap();
    let short = holder
        .try_acquire("amnesia", &kind_opts(reentrant(&owner), 1_000))
        .await
        .unwrap();
    // The re-entry is the only acquire that asks for ten seconds.
    let long = holder
        .try_acquire("amnesia", &kind_opts(reentrant(&owner), 10_000))
        .await
        .unwrap();
    short.release().await.unwrap();
    nodes.restart(1).unwrap();
    long
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_restart_lets_another_owner_in_without_quarantine() {
    let mut nodes = common::nodes(3);
    let long = held_on_a_bare_majority(&mut nodes).await;
    let rival = reaching(&nodes, &[0, 1, 2])
        .quarantine(Duration::ZERO)
        .build()
        .unwrap();
    let second = rival
        .try_acquire(
            "amnesia",
            &kind_opts(reentrant(&Owner::random().unwrap()), 2_000),
        )
        .await
        .expect("without quarantine the restarted master votes for a second owner");
    assert!(long.is_valid() && second.is_valid(), "two valid owners");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_keeps_another_owner_out_for_a_reentered_ttl() {
    let mut nodes = common::nodes(3);
    let long = held_on_a_bare_majority(&mut nodes).await;
    // Default quarantine: the longest TTL the masters recorded, which must count the
    // re-entry's ten seconds, not only the first hold's one.
    let rival = reaching(&nodes, &[0, 1, 2]).build().unwrap();
    let opts = kind_opts(reentrant(&Owner::random().unwrap()), 2_000);
    let deadline = Instant::now() + Duration::from_millis(2_500);
    while Instant::now() < deadline {
        if let Ok(second) = rival.try_acquire("amnesia", &opts).await {
            panic!(
                "a second owner got in while the first is valid ({:?} left, second {:?})",
                long.remaining(),
                second.remaining()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let health = rival.node_health().await;
    assert!(health[1].quarantined_for.is_some(), "{health:?}");
    assert!(long.is_valid());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_id_is_no_mutex_token() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    // A random owner id has a token's very shape, so it passes every client-side check.
    let owner = Owner::random().unwrap();
    let opts = kind_opts(reentrant(&owner), 10_000);
    let outer = client.try_acquire("owner-id", &opts).await.unwrap();
    let inner = client.try_acquire("owner-id", &opts).await.unwrap();
    // As a mutex's token, the id holds nothing: no extend (which would shorten the lock under
    // its holds), no release (which would delete it with both holds in it).
    assert!(matches!(
        client
            .extend_token("owner-id", owner.id(), Duration::from_millis(20))
            .await,
        Err(Error::NotHeld { .. })
    ));
    assert!(matches!(
        client.release_token("owner-id", owner.id()).await,
        Err(Error::NotHeld { .. })
    ));
    for i in 0..3 {
        assert!(
            common::pttl(&nodes, i, "owner-id").await > 5_000,
            "master {i}: the lock was cut short"
        );
        assert_eq!(holds(&nodes, i, "owner-id").await, 2, "master {i}");
    }
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(outer.is_valid() && refused_to_others(&client, "owner-id").await);
    inner.release().await.unwrap();
    outer.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_holds_nothing_neither_releases_nor_extends() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let owner = Owner::random().unwrap();
    let kind = reentrant(&owner);
    let opts = kind_opts(kind.clone(), 5_000);
    let outer = client.try_acquire("no-hold", &opts).await.unwrap();
    let inner = client.try_acquire("no-hold", &opts).await.unwrap();
    let released = inner.token().to_owned();
    inner.release().await.unwrap();
    // Of the issued shape, never a hold of this lock.
    let bogus = "0123456789abcdef0123456789abcdef";
    for token in [bogus, &released] {
        assert!(
            matches!(
                client.release_token_as("no-hold", &kind, token).await,
                Err(Error::NotHeld { .. })
            ),
            "a release by {token}"
        );
        assert!(
            matches!(
                client
                    .extend_token_as("no-hold", &kind, token, Duration::from_secs(30))
                    .await,
                Err(Error::NotHeld { .. })
            ),
            "an extend by {token}"
        );
    }
    // Nothing changed: the outer hold is there, the lock's TTL not pushed back.
    for i in 0..3 {
        assert_eq!(holds(&nodes, i, "no-hold").await, 1, "master {i}");
        assert!(
            common::pttl(&nodes, i, "no-hold").await <= 5_000,
            "master {i}"
        );
    }
    assert!(refused_to_others(&client, "no-hold").await);
    // The outer hold still extends and releases, freeing the lock.
    let extended = client
        .extend_token_as("no-hold", &kind, outer.token(), Duration::from_secs(6))
        .await
        .unwrap();
    assert_eq!(extended.fence(), outer.fence());
    drop(extended);
    client
        .release_token_as("no-hold", &kind, outer.token())
        .await
        .unwrap();
    drop(outer);
    client
        .try_acquire(
            "no-hold",
            &kind_opts(reentrant(&Owner::random().unwrap()), 2_000),
        )
        .await
        .expect("free once the last hold is released")
        .release()
        .await
        .unwrap();
}
