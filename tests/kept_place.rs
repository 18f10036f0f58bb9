//! The place in line that a looping holder's release keeps for its client's next acquire of
//! the same lock: taken up without an attempt and handed the lock in its turn, given up when
//! the client does not come back (the line moves on), and not taken up on other terms.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redquorum::{Client, Lock, LockOptions};
use redquorum_testkit::LocalNodes;

const NAME: &str = "looping";

/// A fair caller that waits.
fn waiting(ttl_ms: u64) -> LockOptions {
    common::opts(ttl_ms).wait(Duration::from_secs(10))
}

/// Waiter ids in the queue of [`NAME`] on the node of `conn`, first first.
async fn queued(conn: &redis::aio::MultiplexedConnection) -> Vec<String> {
    let mut conn = conn.clone();
    redis::cmd("ZRANGE")
        .arg(common::queue_key(NAME))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// Releases `lock`, which nobody waits for, and fails if a place is left in the line (on the
/// node of `conn`) a second later.
async fn released_leaving_no_place(lock: Lock, conn: &redis::aio::MultiplexedConnection) {
    lock.release().await.unwrap();
    assert!(
        common::eventually(Duration::from_secs(1), || async {
            queued(conn).await.is_empty()
        })
        .await,
        "a place was left behind"
    );
}

/// A caller on its own client that waits for the lock, holds it for `hold`, and releases it.
fn takes_a_turn(nodes: &LocalNodes, hold: Duration) -> tokio::task::JoinHandle<u64> {
    let client = common::client(nodes);
    tokio::spawn(async move {
        let lock = client.acquire(NAME, &waiting(10_000)).await.unwrap();
        let fence = lock.fence();
        tokio::time::sleep(hold).await;
        lock.release().await.unwrap();
        fence
    })
}

/// Client `a` takes the lock in a loop: it holds it, releases it to a waiter, and at once
/// waits for it again, which it is then handed; meanwhile another caller, which holds the lock
/// for `next_hold`, has queued behind it. The lock returned is `a`'s second hold, taken by a
/// client that is now seen looping, so its release keeps `a`'s place in line.
async fn looping_holder(nodes: &LocalNodes, a: &Client, next_hold: Duration) -> Lock {
    let first = a.acquire(NAME, &waiting(10_000)).await.unwrap();
    let other = takes_a_turn(nodes, Duration::from_millis(50));
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.release().await.unwrap();
    let second = a.acquire(NAME, &waiting(10_000)).await.unwrap();
    other.await.unwrap();
    assert!(
        second.token().contains('/'),
        "handed over: {}",
        second.token()
    );
    // The caller that holds the lock next, queued behind `a`.
    drop(takes_a_turn(nodes, next_hold));
    tokio::time::sleep(Duration::from_millis(100)).await;
    second
}

/// What a master shows of [`NAME`]: who holds it, and the line behind.
async fn master_view(conn: &redis::aio::MultiplexedConnection) -> (Option<String>, Vec<String>) {
    let mut c = conn.clone();
    let holder: Option<String> = redis::cmd("GET")
        .arg(common::lock_key(NAME))
        .query_async(&mut c)
        .await
        .unwrap();
    (holder, queued(conn).await)
}

/// The one place in line behind a holder other than `released` on a quorum of masters, once
/// there is one (within a second).
async fn line_on_a_quorum(
    conns: &[redis::aio::MultiplexedConnection],
    released: &str,
) -> Option<String> {
    let quorum = conns.len() / 2 + 1;
    let end = std::time::Instant::now() + Duration::from_secs(1);
    while std::time::Instant::now() < end {
        let mut places = Vec::new();
        for conn in conns {
            if let (Some(holder), line) = master_view(conn).await {
                if holder != released && line.len() == 1 {
                    places.push(line[0].clone());
                }
            }
        }
        if let Some(place) = places
            .iter()
            .find(|p| places.iter().filter(|q| q == p).count() >= quorum)
        {
            return Some(place.clone());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// One try of the test below: whether the lock was handed over to the place the release kept.
/// Everything else is asserted.
async fn looping_holder_takes_up_its_kept_place() -> bool {
    let nodes = common::nodes(5);
    let a = common::client(&nodes);
    let mut conns = Vec::new();
    for i in 0..nodes.len() {
        conns.push(common::raw(&nodes, i).await);
    }
    let held = looping_holder(&nodes, &a, Duration::from_millis(200)).await;
    let (before, released) = (held.fence(), held.token().to_owned());
    held.release().await.unwrap();
    // Asked again at once, as a loop does (in this task: a spawned one may start late on a
    // busy machine): the place the release kept is taken up.
    let opts = waiting(10_000);
    let again = tokio::time::timeout(Duration::from_secs(3), a.acquire(NAME, &opts));
    // The other caller holds the lock now; behind it, on a quorum of masters (the release
    // returned at a quorum: the others may not have run it yet), only the place kept for `a`.
    let (lock, kept) = tokio::join!(again, line_on_a_quorum(&conns, &released));
    let lock = lock
        .expect("handed the lock when the other caller released it")
        .unwrap();
    assert!(lock.fence() > before + 1, "{} after {before}", lock.fence());
    // Handed over on the terms of the kept place, not on those of an attempt of its own.
    let handed_to_kept = kept
        .as_ref()
        .is_some_and(|kept| lock.token().starts_with(&format!("{kept}/")));
    if !handed_to_kept {
        let mut all = Vec::new();
        for conn in &conns {
            all.push(master_view(conn).await);
        }
        eprintln!(
            "not handed over to a kept place: the place on a quorum was {kept:?}, the lock is {}; the masters now: {all:?}",
            lock.token()
        );
    }
    released_leaving_no_place(lock, &conns[0]).await;
    handed_to_kept
}

/// A looping holder's release keeps its place, and its next acquire waits there. The kept place
/// is an optimisation that a busy machine can defeat (a master that answers the release late
/// leaves the place kept on too few, and it is given up; the acquire then queues on its own):
/// each try holds every other check, and one of three must be handed the lock in the place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_holder_waits_in_the_place_its_release_kept() {
    for _ in 0..3 {
        if looping_holder_takes_up_its_kept_place().await {
            return;
        }
    }
    panic!("in three tries, no looping holder was handed the lock in the place its release kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_place_that_nobody_takes_up_is_given_up() {
    let nodes = common::nodes(5);
    let a = common::client(&nodes);
    let held = looping_holder(&nodes, &a, Duration::from_millis(300)).await;
    held.release().await.unwrap();
    // A try that does not wait, refused while the other caller holds the lock, does not take
    // the place up.
    assert!(a.try_acquire(NAME, &common::opts(5_000)).await.is_err());
    // `a` does not come back to wait: its place goes from every master, while the other caller
    // still holds the lock (a place that only lapsed would stay in the queue until a script met
    // it).
    for i in 0..nodes.len() {
        let conn = common::raw(&nodes, i).await;
        assert!(
            common::eventually(Duration::from_millis(250), || async {
                queued(&conn).await.is_empty()
            })
            .await,
            "master {i} kept the place: {:?}",
            queued(&conn).await
        );
    }
    // And the lock, once released, is free for anyone at once.
    let c = common::client(&nodes);
    let taken = common::eventually(Duration::from_secs(2), || async {
        match c.try_acquire(NAME, &common::opts(5_000)).await {
            Ok(lock) => {
                lock.release().await.unwrap();
                true
            }
            Err(_) => false,
        }
    })
    .await;
    assert!(taken, "the lock was not free after its holder released it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_acquire_on_other_terms_does_not_take_the_kept_place() {
    let nodes = common::nodes(5);
    let a = common::client(&nodes);
    let conn = common::raw(&nodes, 0).await;
    let held = looping_holder(&nodes, &a, Duration::from_millis(100)).await;
    held.release().await.unwrap();
    // Asked again at once, but for a shorter TTL than the kept place's terms.
    let lock = a.acquire(NAME, &waiting(4_000)).await.unwrap();
    assert_eq!(lock.ttl(), Duration::from_millis(4_000));
    let mut within = 0;
    for i in 0..nodes.len() {
        let pttl = common::pttl(&nodes, i, NAME).await;
        if (1..=4_000).contains(&pttl) {
            within += 1;
        }
    }
    assert!(
        within >= 3,
        "the lock is held with its own TTL on {within} masters"
    );
    released_leaving_no_place(lock, &conn).await;
}

/// A master whose line was lost (here: its lock and its line deleted behind the clients'
/// backs) has a line again while holders keep taking the lock in a loop: their releases keep
/// their places there too, where a holder's release can hand the free lock to the first of them.
/// Without that, no place is ever queued there again (each looping holder waits in the place its
/// release kept on the other masters, and sends no attempt), and no release hands that master's
/// lock over for good. And it is soon back in step: a waiter woken there while the lock is free
/// there may have its attempt granted there and given back, and the next hand-over there must
/// still go above that attempt's fencing token (`lua/release.lua`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_lost_its_line_has_a_line_again() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let nodes = common::nodes(5);
    let stop = Arc::new(AtomicBool::new(false));
    let mut loops = Vec::new();
    for _ in 0..3 {
        let (client, stop) = (common::client(&nodes), stop.clone());
        loops.push(tokio::spawn(async move {
            let mut holds = 0u32;
            while !stop.load(Ordering::Relaxed) && holds < 500 {
                let lock = client.acquire(NAME, &waiting(10_000)).await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
                lock.release().await.unwrap();
                holds += 1;
            }
            holds
        }));
    }
    let mut conns = Vec::new();
    for i in 0..nodes.len() {
        conns.push(common::raw(&nodes, i).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut last = conns[4].clone();
    let _: () = redis::cmd("DEL")
        .arg(common::lock_key(NAME))
        .arg(common::queue_key(NAME))
        .arg(common::queue_terms_key(NAME))
        .arg(common::queue_live_key(NAME))
        .query_async(&mut last)
        .await
        .unwrap();
    // Places kept there again, by the releases that find the lock gone there.
    let has_a_line = common::eventually(Duration::from_secs(3), || async {
        !master_view(&conns[4]).await.1.is_empty()
    })
    .await;
    let view = master_view(&conns[4]).await;
    // And that master is back in step: it holds the lock for the holder the others hold it for.
    // (Read one master after another, so a hand-over between two readings can hide it once.)
    let in_step = common::eventually(Duration::from_secs(3), || async {
        let holder = master_view(&conns[0]).await.0;
        let mut same = holder.is_some();
        for conn in &conns[1..] {
            same &= master_view(conn).await.0 == holder;
        }
        same
    })
    .await;
    let mut views = Vec::new();
    for conn in &conns {
        views.push(master_view(conn).await);
    }
    stop.store(true, Ordering::Relaxed);
    for held in loops {
        assert!(held.await.unwrap() > 0);
    }
    assert!(
        has_a_line,
        "no place was kept on the master that lost its line: {view:?}"
    );
    assert!(
        in_step,
        "the master that lost its line is not back in step: {views:?}"
    );
}
