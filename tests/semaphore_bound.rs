//! The semaphore's bound under partitions and empty restarts: with N = 5 masters and P = 2
//! permits, a bare majority (3) lets three holders in with 9 grants in the 10 slots, and the
//! semaphore's quorum (4) does not; restarted masters are kept out by quarantine where they
//! would otherwise vote for one holder too many.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::kinds::{kind_opts, mark, permits_held, reaching, warm};
use redquorum::{Client, Error, Lock, LockKind};
use redquorum_testkit::LocalNodes;

fn permit(ttl_ms: u64) -> redquorum::LockOptions {
    kind_opts(LockKind::semaphore(2), ttl_ms)
}

/// Clients that each reach only some of the five masters, as partitioned callers would,
/// connected to those.
async fn partitioned(
    nodes: &LocalNodes,
    reaches: &[&[usize]],
    unsafe_majority: bool,
) -> Vec<Client> {
    let mut clients = Vec::new();
    for reach in reaches {
        let builder = reaching(nodes, reach);
        let builder = if unsafe_majority {
            builder.unsafe_majority_semaphores()
        } else {
            builder
        };
        let client = builder.build().unwrap();
        warm(&client).await;
        clients.push(client);
    }
    clients
}

/// Each master's permits taken, once they are `expected` (up to 2 s: the grants and
/// give-backs that came after a quorum's answer may still be landing).
async fn slots(nodes: &LocalNodes, name: &str, expected: &[usize]) -> Vec<usize> {
    let read = || async {
        let mut seen = Vec::new();
        for i in 0..nodes.len() {
            seen.push(permits_held(nodes, i, name).await);
        }
        seen
    };
    common::eventually(Duration::from_secs(2), || async {
        read().await == expected
    })
    .await;
    read().await
}

/// Reaches {0,1,2}, {0,3,4} and {1,2,3}: three holders fit in with three grants each, and no
/// master holds more than its two permits.
const OVER_ADMITTING: [&[usize]; 3] = [&[0, 1, 2], &[0, 3, 4], &[1, 2, 3]];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_majority_admits_three_holders_of_two_permits() {
    let nodes = common::nodes(5);
    mark(&nodes).await;
    let clients = partitioned(&nodes, &OVER_ADMITTING, true).await;
    let mut held = Vec::new();
    for client in &clients {
        held.push(
            client
                .try_acquire("bound", &permit(10_000))
                .await
                .expect("a bare majority grants"),
        );
    }
    assert!(
        held.iter().all(Lock::is_valid),
        "three valid holders of two permits"
    );
    assert_eq!(
        slots(&nodes, "bound", &[2, 2, 2, 2, 1]).await,
        [2, 2, 2, 2, 1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_semaphore_quorum_refuses_the_third_holder() {
    let nodes = common::nodes(5);
    mark(&nodes).await;
    // The same partitions cannot even make one holder: three masters are not a quorum of 4.
    for client in partitioned(&nodes, &OVER_ADMITTING, false).await {
        match client.try_acquire("bound", &permit(10_000)).await {
            Err(Error::QuorumUnavailable { needed: 4, .. }) => {}
            other => panic!("expected QuorumUnavailable, got {other:?}"),
        }
    }
    // The most room two holders can leave: four grants each, overlapping on three masters,
    // which leaves a permit on masters 0 and 4 only.
    let two = partitioned(&nodes, &[&[0, 1, 2, 3], &[1, 2, 3, 4]], false).await;
    let a = two[0].try_acquire("bound", &permit(10_000)).await.unwrap();
    let b = two[1].try_acquire("bound", &permit(10_000)).await.unwrap();
    assert_eq!(
        slots(&nodes, "bound", &[1, 2, 2, 2, 1]).await,
        [1, 2, 2, 2, 1]
    );
    // A third caller reaching every master gets two grants, not four.
    let third = common::client(&nodes);
    warm(&third).await;
    match third.try_acquire("bound", &permit(10_000)).await {
        // Decided once two full masters made four grants impossible.
        Err(Error::Contended { holders, .. }) => assert!(holders.len() >= 2, "{holders:?}"),
        other => panic!("expected Contended, got {other:?}"),
    }
    assert!(a.is_valid() && b.is_valid());
    // Its grants on masters 0 and 4 were given back.
    assert_eq!(
        slots(&nodes, "bound", &[1, 2, 2, 2, 1]).await,
        [1, 2, 2, 2, 1]
    );
}

/// Two holders on {0,1,2,3} and {1,2,3,4}; masters 1 and 2 then restart empty, so that the
/// slots they held are forgotten. Returns the two holders.
async fn two_holders_then_two_empty_restarts(nodes: &mut LocalNodes) -> (Lock, Lock) {
    mark(nodes).await;
    let two = partitioned(nodes, &[&[0, 1, 2, 3], &[1, 2, 3, 4]], false).await;
    let a = two[0]
        .try_acquire("amnesia", &permit(10_000))
        .await
        .unwrap();
    let b = two[1]
        .try_acquire("amnesia", &permit(10_000))
        .await
        .unwrap();
    slots(nodes, "amnesia", &[1, 2, 2, 2, 1]).await;
    nodes.restart(1).unwrap();
    nodes.restart(2).unwrap();
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_restarts_let_a_third_holder_in_without_quarantine() {
    let mut nodes = common::nodes(5);
    let (a, b) = two_holders_then_two_empty_restarts(&mut nodes).await;
    let rival = reaching(&nodes, &[0, 1, 2, 3, 4])
        .quarantine(Duration::ZERO)
        .build()
        .unwrap();
    let c = rival
        .try_acquire("amnesia", &permit(2_000))
        .await
        .expect("without quarantine, masters 0, 1, 2 and 4 grant a third holder");
    assert!(
        a.is_valid() && b.is_valid() && c.is_valid(),
        "three holders"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_keeps_the_third_holder_out() {
    let mut nodes = common::nodes(5);
    let (a, b) = two_holders_then_two_empty_restarts(&mut nodes).await;
    // Default quarantine: the longest TTL recorded, ten seconds.
    let rival = reaching(&nodes, &[0, 1, 2, 3, 4]).build().unwrap();
    let err = rival
        .acquire("amnesia", &permit(2_000).wait(Duration::from_millis(1_500)))
        .await
        .expect_err("a third holder beside two valid ones");
    assert!(
        matches!(
            err,
            Error::Contended { .. } | Error::QuorumUnavailable { .. }
        ),
        "{err}"
    );
    let health = rival.node_health().await;
    assert!(
        health[1].quarantined_for.is_some() && health[2].quarantined_for.is_some(),
        "{health:?}"
    );
    assert!(a.is_valid() && b.is_valid());
}
