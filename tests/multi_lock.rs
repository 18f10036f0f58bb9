//! Multi-lock (`Client::acquire_all`): several names all or nothing, in one order so that
//! overlapping multi-locks cannot deadlock, one validity, extended, renewed and released
//! together; and what a crashed holder, lost masters and a master restarted empty leave.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redquorum::{Client, Error, LockOptions, LockState, NodeFailureKind, RenewOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_cannot_be_had_gives_back_the_others() {
    let nodes = common::nodes(3);
    let (holder, multi) = (common::client(&nodes), common::client(&nodes));
    let b = holder.try_acquire("b", &common::opts(5_000)).await.unwrap();

    let err = multi
        .try_acquire_all(&["c", "a", "b"], &common::opts(5_000))
        .await
        .expect_err("b is held");
    assert!(
        matches!(err, Error::Contended { ref name, .. } if name == "b"),
        "{err}"
    );
    // "a" was taken first and given back; "c" comes after "b" and was never taken.
    for i in 0..3 {
        assert!(common::stored_token(&nodes, i, "a").await.is_none());
        assert!(common::stored_token(&nodes, i, "c").await.is_none());
    }
    b.release().await.unwrap();

    let all = multi
        .try_acquire_all(&["c", "a", "b", "a"], &common::opts(5_000))
        .await
        .unwrap();
    assert_eq!(all.names().collect::<Vec<_>>(), ["a", "b", "c"]);
    let fences: Vec<u64> = ["a", "b", "c"]
        .iter()
        .map(|n| all.fence_of(n).unwrap())
        .collect();
    assert!(fences.iter().all(|f| *f > 0));
    assert_eq!(all.fence_of("d"), None);
    let shortest = all.locks().iter().map(|l| l.valid_until()).min().unwrap();
    assert_eq!(all.valid_until(), shortest);
    assert!(holder.try_acquire("c", &common::opts(5_000)).await.is_err());
    all.release().await.unwrap();
    for name in ["a", "b", "c"] {
        let lock = holder
            .try_acquire(name, &common::opts(5_000))
            .await
            .unwrap();
        lock.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_multi_locks_neither_deadlock_nor_overlap() {
    let nodes = common::nodes(3);
    // Every worker asks for its names in its own order; they are taken in one order.
    let sets: [&[&str]; 4] = [&["x", "y"], &["y", "x"], &["z", "y"], &["x", "z", "y"]];
    let inside: Arc<HashMap<&str, AtomicI64>> =
        Arc::new(["x", "y", "z"].map(|n| (n, AtomicI64::new(0))).into());
    let overlaps = Arc::new(AtomicU64::new(0));
    let opts = common::opts(2_000).wait(Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut workers = Vec::new();
    for names in sets {
        let (client, inside, overlaps, opts) = (
            common::client(&nodes),
            inside.clone(),
            overlaps.clone(),
            opts.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut done = 0u32;
            while done < 15 && Instant::now() < deadline {
                let all = client.acquire_all(names, &opts).await.expect("no deadlock");
                for n in names {
                    if inside[n].fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                for n in names {
                    inside[n].fetch_sub(1, Ordering::SeqCst);
                }
                all.release().await.unwrap();
                done += 1;
            }
            done
        }));
    }
    for w in workers {
        assert_eq!(w.await.unwrap(), 15, "every worker finished its rounds");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_held_stay_alive_while_a_later_one_is_waited_for() {
    let nodes = common::nodes(3);
    let (holder, multi, rival) = (
        common::client(&nodes),
        common::client(&nodes),
        common::client(&nodes),
    );
    let b = holder
        .try_acquire("later", &common::opts(5_000))
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        // A 300 ms TTL, and "later" is free only after a second.
        let opts = common::opts(300).wait(Duration::from_secs(5));
        multi.acquire_all(&["earlier", "later"], &opts).await
    });
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(125)).await;
        let err = rival
            .try_acquire("earlier", &common::opts(300))
            .await
            .expect_err("held by the waiting multi-lock, kept alive past its TTL");
        assert!(matches!(err, Error::Contended { .. }), "{err}");
    }
    b.release().await.unwrap();
    let all = waiting.await.unwrap().unwrap();
    assert!(all.is_valid());
    all.release().await.unwrap();
}

/// A multi-lock waits for a later name in turns, extending the names it holds between them.
/// Each turn keeps the place in line the first one took: four callers taking the name in a
/// loop, each for longer than the multi-lock's turn, would otherwise pass it over every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_keeps_its_place_in_line_from_turn_to_turn() {
    let nodes = common::nodes(3);
    let busy = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let mut loopers = Vec::new();
    for _ in 0..4 {
        let (client, busy) = (common::client(&nodes), busy.clone());
        loopers.push(tokio::spawn(async move {
            let opts = common::opts(5_000).wait(Duration::from_secs(10));
            // Bounded: the test ends the loop within its own 10 s.
            let end = Instant::now() + Duration::from_secs(20);
            while busy.load(Ordering::SeqCst) && Instant::now() < end {
                if let Ok(lock) = client.acquire("busy", &opts).await {
                    tokio::time::sleep(Duration::from_millis(150)).await;
                    let _ = lock.release().await;
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A TTL of 600 ms: the multi-lock waits for "busy" in turns of about 300 ms, while the
    // line ahead of it takes four holds of 150 ms.
    let multi = common::client(&nodes);
    let got = multi
        .acquire_all(
            &["another", "busy"],
            &common::opts(600).wait(Duration::from_secs(10)),
        )
        .await;
    busy.store(false, Ordering::SeqCst);
    let all = got.expect("the multi-lock got its turn");
    all.release().await.unwrap();
    for looper in loopers {
        looper.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_dropped_while_it_waits_gives_back_the_names_it_took() {
    let nodes = common::nodes(3);
    let (holder, multi, rival) = (
        common::client(&nodes),
        common::client(&nodes),
        common::client(&nodes),
    );
    let later = holder
        .try_acquire("later", &common::opts(30_000))
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        // A TTL far longer than the test: only a release frees "earlier".
        let opts = common::opts(30_000).wait(Duration::from_secs(30));
        multi.acquire_all(&["earlier", "later"], &opts).await
    });
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            common::nodes_holding(&nodes, "earlier").await == 3
        })
        .await,
        "the multi-lock took \"earlier\" and waits for \"later\""
    );
    // The caller stops waiting: the future is dropped half-way.
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            common::nodes_holding(&nodes, "earlier").await == 0
        })
        .await,
        "\"earlier\" is still held by the dropped multi-lock, until its TTL"
    );
    let earlier = rival
        .try_acquire("earlier", &common::opts(5_000))
        .await
        .expect("free again");
    earlier.release().await.unwrap();
    // The name waited for was never the dropped multi-lock's.
    assert!(common::token_everywhere(&nodes, "later", later.token()).await);
    later.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_multi_lock_renews_every_name_and_is_lost_with_one() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let mut all = client
        .try_acquire_all(&["g1", "g2"], &common::opts(400))
        .await
        .unwrap();
    all.extend(Duration::from_millis(600)).await.unwrap();
    let guard = all
        .into_guard(RenewOptions::default().interval(Duration::from_millis(100)))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(guard.state(), LockState::Held, "renewed past the TTL");
    assert!(guard.remaining() > Duration::ZERO);
    // g2 disappears from every master: its renewal finds it gone.
    for i in 0..3 {
        common::delete_lock(&nodes, i, "g2").await;
    }
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("the multi-lock is lost with one of its names");
    assert_eq!(guard.state(), LockState::Lost);
    // Releasing still releases the name that is left.
    let _ = guard.release().await;
    let g1 = client.try_acquire("g1", &common::opts(400)).await.unwrap();
    g1.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holder_frees_every_name_at_the_ttl() {
    let nodes = common::nodes(3);
    let crashed = common::client(&nodes);
    let all = crashed
        .try_acquire_all(&["c1", "c2"], &common::opts(500))
        .await
        .unwrap();
    let taken = Instant::now();
    drop(all);
    drop(crashed);
    let next = common::client(&nodes);
    let opts = common::opts(500).wait(Duration::from_secs(3));
    let again = next.acquire_all(&["c2", "c1"], &opts).await.unwrap();
    assert!(
        taken.elapsed() >= Duration::from_millis(450),
        "not before the TTL"
    );
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_of_masters_down_changes_nothing() {
    let mut nodes = common::nodes(5);
    nodes.kill(1).unwrap();
    nodes.kill(3).unwrap();
    let (a, b) = (common::client(&nodes), common::client(&nodes));
    let mut all = a
        .try_acquire_all(&["m1", "m2"], &common::opts(5_000))
        .await
        .unwrap();
    assert!(
        b.try_acquire_all(&["m2", "m3"], &common::opts(5_000))
            .await
            .is_err()
    );
    all.extend(Duration::from_secs(5)).await.unwrap();
    all.release().await.unwrap();
    b.try_acquire_all(&["m2", "m3"], &common::opts(5_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// A master restarted empty would let a rival in on {restarted, the two without the lock};
/// quarantine keeps its votes out until the lock has expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_empty_is_quarantined_under_a_multi_lock() {
    let mut nodes = common::nodes(5);
    let quarantining = |nodes: &redquorum_testkit::LocalNodes| {
        Client::builder()
            .nodes(nodes.urls())
            .node_timeout(common::NODE_TIMEOUT)
            .build()
            .unwrap()
    };
    let (holder, rival) = (quarantining(&nodes), quarantining(&nodes));
    let opts = LockOptions::new(Duration::from_secs(30));
    let all = holder.try_acquire_all(&["q1", "q2"], &opts).await.unwrap();
    // Every master has both names; two of them lose them, and a third restarts empty.
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            for i in 0..5 {
                for n in ["q1", "q2"] {
                    if common::stored_token(&nodes, i, n).await.is_none() {
                        return false;
                    }
                }
            }
            true
        })
        .await
    );
    for i in [3, 4] {
        let mut raw = common::raw(&nodes, i).await;
        let _: () =
            redis::AsyncCommands::del(&mut raw, &[common::lock_key("q1"), common::lock_key("q2")])
                .await
                .unwrap();
    }
    nodes.restart(0).unwrap();
    let mut quarantined = false;
    for _ in 0..3 {
        let err = rival
            .try_acquire_all(&["q1", "q2"], &opts)
            .await
            .expect_err("a second holder while the first holds both names on {B, C}");
        quarantined |= common::refusal_failures(&err)
            .iter()
            .any(|f| matches!(f.kind, NodeFailureKind::Quarantined(_)));
    }
    assert!(all.is_valid());
    assert!(quarantined, "the restarted master is quarantined");
    all.release().await.unwrap();
}
