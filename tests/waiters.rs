//! Waiters woken by releases (pub/sub), the polling fallback, and fairness under contention.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop
)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redquorum::{Client, LockOptions};

/// A waiter whose fallback poll is slow, so that only a wake-up can make it prompt.
fn slow_poller(ttl: Duration, wait: Duration, poll: Duration) -> LockOptions {
    LockOptions::new(ttl)
        .wait(wait)
        .retry_delay(poll)
        .retry_jitter(Duration::ZERO)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_release() {
    let nodes = common::nodes(5);
    let holder = common::client(&nodes);
    let waiter = common::client(&nodes);
    let lock = holder
        .try_acquire("handoff", &common::opts(30_000))
        .await
        .unwrap();
    let poll = Duration::from_secs(3);
    let task = tokio::spawn(async move {
        let lock = waiter
            .acquire(
                "handoff",
                &slow_poller(Duration::from_secs(5), Duration::from_secs(20), poll),
            )
            .await
            .unwrap();
        let at = Instant::now();
        lock.release().await.unwrap();
        at
    });
    // Let the waiter fail its first attempt and settle into waiting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    lock.release().await.unwrap();
    let acquired = task.await.unwrap();
    let took = acquired - released;
    // Polling alone would have taken up to three seconds more.
    assert!(
        took < Duration::from_millis(500),
        "the waiter took {took:?} after the release"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_messages_waiters_still_acquire_by_polling() {
    let mut nodes = common::nodes(5);
    let holder = common::client(&nodes);
    let waiter = common::client(&nodes);
    let lock = holder
        .try_acquire("quiet", &common::opts(30_000))
        .await
        .unwrap();
    assert!(common::token_everywhere(&nodes, "quiet", lock.token()).await);
    let poll = Duration::from_millis(200);
    let task = tokio::spawn(async move {
        let lock = waiter
            .acquire(
                "quiet",
                &slow_poller(Duration::from_secs(5), Duration::from_secs(20), poll),
            )
            .await
            .unwrap();
        let at = Instant::now();
        lock.release().await.unwrap();
        at
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A master is down, and the lock goes away without a release message (as if the messages
    // were lost): the keys are deleted behind redquorum's back.
    nodes.kill(4).unwrap();
    for i in 0..4 {
        let _: () =
            redis::AsyncCommands::del(&mut common::raw(&nodes, i).await, "redquorum:lock:quiet")
                .await
                .unwrap();
    }
    let gone = Instant::now();
    let acquired = task.await.unwrap();
    let took = acquired - gone;
    // Within a poll or two, not the 20 s wait.
    assert!(
        took < poll * 4,
        "the waiter took {took:?} to notice without a message"
    );
    drop(lock);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_subscriptions_come_back_and_polling_covers_the_gap() {
    let nodes = common::nodes(3);
    let waiter = common::client(&nodes);
    let holder = common::client(&nodes);
    for round in 0..3 {
        let lock = holder
            .try_acquire("resubscribed", &common::opts(30_000))
            .await
            .unwrap();
        let w = waiter.clone();
        let task = tokio::spawn(async move {
            w.acquire(
                "resubscribed",
                &slow_poller(
                    Duration::from_secs(5),
                    Duration::from_secs(20),
                    Duration::from_millis(300),
                ),
            )
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Cut every subscription: the next release may go unheard until they are back.
        for i in 0..3 {
            let _: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("pubsub")
                .query_async(&mut common::raw(&nodes, i).await)
                .await
                .unwrap();
        }
        lock.release().await.unwrap();
        tokio::time::timeout(Duration::from_secs(3), task)
            .await
            .unwrap_or_else(|_| panic!("round {round}: the waiter never got the lock"))
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_waiter_starves_in_a_thirty_second_contended_run() {
    const WORKERS: usize = 8;
    let nodes = common::nodes(5);
    let run_for = Duration::from_secs(30);
    let started = Instant::now();
    let inside = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        // Each worker its own client, as separate processes would be.
        let client: Client = common::client(&nodes);
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            let opts = LockOptions::new(Duration::from_secs(2)).wait(Duration::from_secs(30));
            let (mut sections, mut longest_wait) = (0u32, Duration::ZERO);
            while started.elapsed() < run_for {
                let asked = Instant::now();
                let lock = client
                    .acquire("fair", &opts)
                    .await
                    .expect("a waiter gave up after 30 s");
                longest_wait = longest_wait.max(asked.elapsed());
                assert!(
                    !inside.swap(true, std::sync::atomic::Ordering::SeqCst),
                    "two holders"
                );
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.store(false, std::sync::atomic::Ordering::SeqCst);
                lock.release().await.unwrap();
                sections += 1;
            }
            (sections, longest_wait)
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    let total: u32 = results.iter().map(|(s, _)| s).sum();
    let fair_share = total / WORKERS as u32;
    for (i, (sections, longest)) in results.iter().enumerate() {
        assert!(
            *sections >= fair_share / 4,
            "worker {i} got {sections} of {total} sections: {results:?}"
        );
        assert!(
            *longest < Duration::from_secs(10),
            "worker {i} once waited {longest:?}: {results:?}"
        );
    }
}
