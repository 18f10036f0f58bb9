//! Reentrant locks' fencing tokens against real redis-server processes: every hold carries the
//! lock's token where a quorum of masters confirms it, a hold is refused where too few do, and
//! a later owner's token is above every hold's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::kinds::{holds, kind_opts, reaching};
use redquorum::{Error, LockKind, Owner};

fn reentrant(owner: &Owner) -> LockKind {
    LockKind::Reentrant(owner.clone())
}

/// Holds `name` as `owner_id` through a client reaching `first`, then takes a second hold as
/// the same owner through a client reaching `second`; then a later owner, whose client has
/// no clock to propose from (`fence_clock(false)`), takes the lock through `later`. Returns
/// the fences of the first hold, the second hold and the later owner.
async fn fences_across_reach(
    nodes: &redquorum_testkit::LocalNodes,
    first: &[usize],
    second: &[usize],
    later: &[usize],
) -> (u64, u64, u64) {
    common::kinds::mark(nodes).await;
    let id = "fenced-owner";
    let opts = |reach: &[usize]| {
        let client = reaching(nodes, reach).build().unwrap();
        let opts = kind_opts(reentrant(&Owner::from_id(id).unwrap()), 5_000);
        (client, opts)
    };
    let (a, a_opts) = opts(first);
    let outer = a.try_acquire("missed", &a_opts).await.unwrap();
    let (b, b_opts) = opts(second);
    let inner = b
        .try_acquire("missed", &b_opts)
        .await
        .expect("the owner re-enters");
    let fences = (outer.fence(), inner.fence());
    outer.release().await.unwrap();
    inner.release().await.unwrap();
    let lagging = reaching(nodes, later).fence_clock(false).build().unwrap();
    let rival = Owner::random().unwrap();
    let next = lagging
        .try_acquire("missed", &kind_opts(reentrant(&rival), 5_000))
        .await
        .expect("free after both holds");
    let later = next.fence();
    next.release().await.unwrap();
    (fences.0, fences.1, later)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_keeps_the_fence_when_a_master_missed_the_first() {
    let nodes = common::nodes(3);
    // Master 2 missed the first hold and grants the second afresh.
    let (first, second, later) = fences_across_reach(&nodes, &[0, 1], &[0, 1, 2], &[0, 1]).await;
    assert_eq!(second, first, "a quorum kept the owner's lock: same fence");
    assert!(
        later > second,
        "a later owner got {later}, not above {second}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_is_refused_while_too_few_masters_confirm_the_owners_lock() {
    let nodes = common::nodes(5);
    common::kinds::mark(&nodes).await;
    let owner = || reentrant(&Owner::from_id("fenced-owner").unwrap());
    let first = reaching(&nodes, &[0, 1, 2]).build().unwrap();
    let outer = first
        .try_acquire("confirm", &kind_opts(owner(), 5_000))
        .await
        .unwrap();
    // Masters 0 and 1 have the owner's lock, 3 and 4 are free, 2 is out of reach: 3 and 4
    // would grant afresh, with another token than the owner's first hold carries.
    let second = reaching(&nodes, &[0, 1, 3, 4]).build().unwrap();
    match second
        .try_acquire("confirm", &kind_opts(owner(), 5_000))
        .await
    {
        Err(Error::QuorumUnavailable { .. }) => {}
        other => panic!("expected QuorumUnavailable, got {other:?}"),
    }
    // Its fresh grants were given back; the first hold's masters keep one hold each.
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            common::lock_count(&nodes, 3).await == 0 && common::lock_count(&nodes, 4).await == 0
        })
        .await
    );
    assert_eq!(holds(&nodes, 0, "confirm").await, 1);
    // Once master 2 answers again, the hold is granted with the lock's token.
    let all = reaching(&nodes, &[0, 1, 2, 3, 4]).build().unwrap();
    let inner = all
        .try_acquire("confirm", &kind_opts(owner(), 5_000))
        .await
        .unwrap();
    assert_eq!(inner.fence(), outer.fence());
    inner.release().await.unwrap();
    outer.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_lock_granted_over_two_rounds_gets_one_fence_a_quorum_records() {
    let nodes = common::nodes(5);
    common::kinds::mark(&nodes).await;
    // Counters far above any clock on masters 2, 3 and 4: the first proposal takes 0 and 1
    // only, and the higher one finds the owner's lock there, with the first proposal.
    let seeded: u64 = 8_000_000_000_000_000;
    for i in 2..5 {
        common::set_fence_counter(&nodes, i, "rounds", seeded).await;
    }
    let client = common::patient_client(&nodes);
    common::kinds::warm(&client).await;
    let owner = Owner::random().unwrap();
    let lock = client
        .try_acquire("rounds", &kind_opts(reentrant(&owner), 5_000))
        .await
        .expect("one attempt, with a raised proposal");
    assert!(lock.fence() > seeded);
    // A quorum of masters records its token, and none a higher one.
    let counters = || async {
        let mut counters = Vec::new();
        for i in 0..5 {
            counters.push(common::fence_counter(&nodes, i, "rounds").await);
        }
        counters
    };
    let recorded = |c: &[u64]| c.iter().filter(|&&c| c == lock.fence()).count() >= 3;
    common::eventually(Duration::from_secs(2), || async {
        recorded(&counters().await)
    })
    .await;
    let seen = counters().await;
    assert!(
        recorded(&seen) && seen.iter().all(|&c| c <= lock.fence()),
        "fence {}, counters {seen:?}",
        lock.fence()
    );
    let fence = lock.fence();
    lock.release().await.unwrap();
    let lagging = reaching(&nodes, &[0, 1, 2, 3, 4])
        .fence_clock(false)
        .build()
        .unwrap();
    let next = lagging
        .try_acquire(
            "rounds",
            &kind_opts(reentrant(&Owner::random().unwrap()), 5_000),
        )
        .await
        .unwrap();
    assert!(next.fence() > fence);
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_go_on_when_a_minority_of_masters_has_another_fence() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    common::kinds::warm(&client).await;
    let owner = Owner::random().unwrap();
    let opts = kind_opts(reentrant(&owner), 5_000);
    let outer = client.try_acquire("apart", &opts).await.unwrap();
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            holds(&nodes, 2, "apart").await == 1
        })
        .await
    );
    // Master 2's counter moves above the lock's token, as when it lost the owner's lock (paused
    // past its TTL) and a later hold took it again there with a new one.
    common::set_fence_counter(&nodes, 2, "apart", outer.fence() + 1_000).await;
    // Every master answers, and two of three agree on the token: every hold is granted, with
    // it, whichever master answers first.
    for _ in 0..10 {
        let hold = client
            .try_acquire("apart", &opts)
            .await
            .expect("a quorum agrees on the lock's fencing token");
        assert_eq!(hold.fence(), outer.fence());
        hold.release().await.unwrap();
    }
    // With no two masters agreeing, the hold is refused, and the error says why.
    common::set_fence_counter(&nodes, 1, "apart", outer.fence() + 2_000).await;
    match client.try_acquire("apart", &opts).await {
        Err(Error::QuorumUnavailable { failures, .. }) => {
            let disagreeing = failures
                .iter()
                .filter(|f| matches!(f.kind, redquorum::NodeFailureKind::FenceDisagrees(_)))
                .count();
            assert!(disagreeing >= 2, "{failures:?}");
        }
        other => panic!("expected a refusal naming the fences, got {other:?}"),
    }
    outer.release().await.unwrap();
}
