//! A master back from an older snapshot hands nothing over, and a hand-over heard on a
//! subscription counts only by a reading of the process that sent it.
//!
//! The interleaving (masters A, B, C; clients P, W, X): W waits in line, refused on A and B,
//! granted on C and given back there keeping its place and terms; C takes a snapshot; X takes
//! the lock on {A, C}; C crashes and reloads the snapshot (marker and W's place, no lock of X);
//! P, whose lock has expired, releases it, and B and C hand the lock over to W. Counting C's
//! grant by a reading of the process before the crash, W held the lock on {B, C} while X held
//! it on {A, C}, with a lower fencing token than X's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redquorum::LockOptions;
use redquorum_testkit::LocalNodes;

const NAME: &str = "snapshot-handover";
const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

/// Redis's own default save points, instead of the harness's `--save ""`: a plain master.
const SAVE_POINTS: [&str; 2] = ["--save", "3600 1 300 100 60 10000"];

/// The terms W's place carries on master `i`: the token of the attempt they came from, if
/// W has a place with terms there.
async fn terms_token(nodes: &LocalNodes, i: usize) -> Option<String> {
    let mut raw = common::raw(nodes, i).await;
    let terms: Vec<(String, String)> = raw.hgetall(common::queue_terms_key(NAME)).await.unwrap();
    terms
        .into_iter()
        .find_map(|(_, t)| t.split(' ').nth(1).map(str::to_owned))
}

/// Waits until master C has W's place with terms and no lock: between two of W's polls.
async fn between_polls(nodes: &LocalNodes) -> String {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(token) = terms_token(nodes, C).await
            && common::stored_token(nodes, C, NAME).await.is_none()
        {
            return token;
        }
        assert!(Instant::now() < end, "W never queued on C with its terms");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_from_a_master_back_from_its_snapshot_is_not_counted() {
    let mut nodes = LocalNodes::start_with(3, &SAVE_POINTS).expect("masters");
    let (p, w, x) = (
        common::quarantining_client(&nodes),
        common::quarantining_client(&nodes),
        common::quarantining_client(&nodes),
    );
    // Every client's connections are made (and the deployment marked) before the story starts.
    for c in [&p, &w, &x] {
        common::kinds::warm(c).await;
    }

    // 1. P holds L on A and B; C lost its key. P's key on B outlives the rest, as an expiry
    //    that comes later on one master than on another.
    let p_lock = p
        .try_acquire(NAME, &LockOptions::new(Duration::from_millis(1500)))
        .await
        .expect("P takes the lock");
    common::delete_lock(&nodes, C, NAME).await;
    let _: () = common::raw(&nodes, B)
        .await
        .pexpire(common::lock_key(NAME), 60_000)
        .await
        .unwrap();

    // 2. W waits in line, fair: refused on A and B, granted on C and given back there, with
    //    its place and terms kept. It polls every 3 s.
    let w_opts = LockOptions::new(Duration::from_secs(10))
        .wait(Duration::from_secs(40))
        .retry_delay(Duration::from_secs(3))
        .retry_jitter(Duration::ZERO);
    let waiting = tokio::spawn(async move {
        let got = w.acquire(NAME, &w_opts).await;
        (got, Instant::now(), w)
    });

    // P stalls past its validity.
    while p_lock.is_valid() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // 3. Right after one of W's polls, C takes a snapshot: W's place and terms, no lock.
    let (x_lock, terms) = loop {
        let before = between_polls(&nodes).await;
        let _: () = redis::cmd("SAVE")
            .query_async(&mut common::raw(&nodes, C).await)
            .await
            .unwrap();
        // 4. P's key on A is gone (expired), and X, unfair, takes {A, C} at once.
        common::delete_lock(&nodes, A, NAME).await;
        let x_lock = x
            .try_acquire(NAME, &LockOptions::new(Duration::from_secs(6)).fair(false))
            .await;
        let after = terms_token(&nodes, C).await;
        match x_lock {
            // No poll of W's came in between: the snapshot holds W's place, no lock.
            Ok(lock) if after.as_ref() == Some(&before) => break (lock, before),
            Ok(lock) => lock.release().await.unwrap(),
            Err(e) => panic!("X could not take the lock on A and C: {e}"),
        }
    };
    let x_until = Instant::now() + x_lock.remaining();
    assert_eq!(
        common::stored_token(&nodes, C, NAME).await.as_deref(),
        Some(x_lock.token())
    );

    // 5. C crashes and reloads the snapshot: the marker and W's place, not X's lock.
    nodes.restart(C).unwrap();
    assert!(common::stored_token(&nodes, C, NAME).await.is_none());
    assert_eq!(terms_token(&nodes, C).await, Some(terms.clone()));
    let marker: Option<String> = common::raw(&nodes, C)
        .await
        .get("redquorum:deployment")
        .await
        .unwrap();
    assert!(marker.is_some(), "the snapshot kept the marker");
    // W's subscription to C is made again (its keeper notices the broken connection at once).
    tokio::time::sleep(Duration::from_millis(300)).await;

    // 6. P, stalled, releases its expired lock: B hands it over to W, first in line. C, back
    //    from its snapshot and not marked again, hands nothing over: its script checks the
    //    process its marker was made for, whatever P read of it.
    let released = p_lock.release().await;
    assert_eq!(
        terms_token(&nodes, A).await,
        Some(terms.clone()),
        "W did not poll since the snapshot"
    );
    let on_c = common::stored_token(&nodes, C, NAME).await;
    assert!(
        on_c.as_ref().is_none_or(|t| !t.ends_with(&terms)),
        "C, back from its snapshot, handed the lock over: {on_c:?}"
    );

    // 7. W must not hold the lock while X's is valid.
    let (got, at, _w) = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("W's acquire ends within its wait")
        .unwrap();
    let w_lock = got.expect("W takes the lock once X's has expired");
    assert!(
        at >= x_until,
        "two holders: W took the lock (fence {}) while X held it on A and C (fence {}, {:?} \
         left); P's release answered {released:?}",
        w_lock.fence(),
        x_lock.fence(),
        x_until - at
    );
    assert!(
        w_lock.fence() > x_lock.fence(),
        "fencing tokens grow: W's {} after X's {}",
        w_lock.fence(),
        x_lock.fence()
    );
    // C was quarantined rather than counted.
    let quarantine: i64 = common::raw(&nodes, C)
        .await
        .pttl("redquorum:quarantine")
        .await
        .unwrap();
    assert!(quarantine != -1, "a quarantine has an end");
}
