//! Waiters leave nothing in the way: a waiter that reaches only a minority of masters gives its
//! place up, and a hand-over that reaches a released lock's token late is given back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use redquorum::Client;

/// Five masters, E dead. A waiter that reaches only A and B (the other three are out of its
/// reach) waits for a lock, refreshing its place on A and B. Without bounds its place there
/// would make A and B refuse everyone else for its whole wait, though a rival that reaches
/// A, B, C and D could otherwise have a quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_reaches_a_minority_gives_its_place_up() {
    let mut nodes = common::nodes(5);
    nodes.kill(4).unwrap();
    let rival = common::client(&nodes);
    let holder = common::client(&nodes);
    let cut_off = Client::builder()
        .nodes([
            nodes.url(0),
            nodes.url(1),
            common::refusing_url(),
            common::refusing_url(),
            common::refusing_url(),
        ])
        .quarantine(Duration::ZERO)
        .build()
        .unwrap();
    let lock = holder
        .try_acquire("minority", &common::opts(30_000))
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        cut_off
            .acquire(
                "minority",
                &common::opts(30_000).wait(Duration::from_secs(4)),
            )
            .await
    });
    // The cut-off waiter is attempting, on A and B, when the lock is released.
    tokio::time::sleep(Duration::from_millis(300)).await;
    lock.release().await.unwrap();
    let started = Instant::now();
    let taken = rival
        .acquire(
            "minority",
            &common::opts(30_000).wait(Duration::from_secs(2)),
        )
        .await
        .expect("A, B, C and D make a quorum for the rival");
    eprintln!("the rival waited {:?}", started.elapsed());
    let err = waiter
        .await
        .unwrap()
        .expect_err("the cut-off waiter can never reach a quorum");
    assert!(
        err.code() == "quorum_unavailable" || err.code() == "contended",
        "{err}"
    );
    taken.release().await.unwrap();
}

/// A hand-over that reaches a master only after the lock it hands over has been taken (on the
/// other masters) and released again is nobody's lock: its client gives it back at once
/// instead of leaving a key until the TTL. Which master runs which command first is up to the
/// masters, so the order is made here by hand on C: the lock is taken off C before the release
/// (C had not run the hand-over yet, so the release finds nothing there), and the late
/// hand-over is then made exactly as `lua/release.lua` makes one: the key with the waiter's
/// token, and the message on its client's channel. (A release that found the lock on a master
/// ran after the hand-over there: a message from that master coming late needs no give-back.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_hand_over_to_a_released_lock_is_given_back() {
    let nodes = common::nodes(3);
    let holder = common::patient_client(&nodes);
    let waiters = common::patient_client(&nodes);
    let lock = holder
        .try_acquire("late", &common::opts(30_000))
        .await
        .unwrap();
    let waiting = waiters.clone();
    let waiter = tokio::spawn(async move {
        waiting
            .acquire("late", &common::opts(30_000).wait(Duration::from_secs(5)))
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    lock.release().await.unwrap();
    let handed = waiter
        .await
        .unwrap()
        .expect("the release hands the lock over");
    let (token, fence) = (handed.token().to_owned(), handed.fence());
    let (waiter_id, _) = token.split_once('/').expect("a handed-over token");
    let (client_id, _) = waiter_id.split_once('.').expect("<client id>.<n>");
    let key = common::lock_key("late");
    let mut c = common::raw(&nodes, 2).await;
    // Whatever C got from the release (the hand-over, or one on another attempt's terms that
    // the waiter gave back) has landed by now.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut c)
        .await
        .unwrap();
    handed.release().await.unwrap();
    for i in 0..3 {
        assert!(
            common::eventually(Duration::from_secs(2), || async {
                common::stored_token(&nodes, i, "late").await.is_none()
            })
            .await,
            "node {i} kept the released lock"
        );
    }

    // C runs the hand-over now, late.
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(&token)
        .arg("PX")
        .arg(30_000)
        .query_async(&mut c)
        .await
        .unwrap();
    let heard: i64 = redis::cmd("PUBLISH")
        .arg(format!("redquorum:wake:{client_id}"))
        .arg(format!("{waiter_id} {token} {fence} {key}"))
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(heard, 1, "the waiter's client listens on C");
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            common::stored_token(&nodes, 2, "late").await.is_none()
        })
        .await,
        "C kept the late hand-over of {token}, whose lock was released, until its TTL"
    );
}
