//! Many waiters on one lock for a few seconds: with masters cut off, and checking that no
//! released lock comes back. A file of their own, so that they do not share the machine with
//! the other contended tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redquorum::{Client, LockOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_keep_taking_turns_with_two_of_five_masters_cut_off() {
    const WORKERS: usize = 3;
    const SECTIONS: usize = 40;
    let nodes = common::nodes(5);
    let mut clients = Vec::new();
    for _ in 0..WORKERS {
        // Each worker its own client, connected before the cut: the paused masters then hang
        // mid-conversation, as masters behind a partition do.
        let client = Client::builder()
            .nodes(nodes.urls())
            .node_timeout(Duration::from_millis(100))
            .quarantine(Duration::ZERO)
            .build()
            .unwrap();
        client
            .try_acquire("cut-off-warm", &common::opts(1_000))
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        clients.push(client);
    }
    nodes.pause(3).unwrap();
    nodes.pause(4).unwrap();
    // Only the three live masters can grant, and only all three together make a quorum: when
    // the masters disagree on whose turn it is, a release hands the lock to different waiters
    // on different masters and nobody has it. Waiters whose grants fell short used to drop
    // out of line on the masters that granted, and such rounds went on for seconds.
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|client| {
            tokio::spawn(async move {
                let opts = LockOptions::new(Duration::from_millis(1_500))
                    .wait(Duration::from_millis(1_500));
                let mut failed = Vec::new();
                for _ in 0..SECTIONS {
                    match client.acquire("cut-off", &opts).await {
                        Ok(lock) => {
                            tokio::time::sleep(Duration::from_millis(rand::random_range(5..30)))
                                .await;
                            lock.release().await.unwrap();
                        }
                        Err(e) => failed.push(e.to_string()),
                    }
                    tokio::time::sleep(Duration::from_millis(rand::random_range(5..40))).await;
                }
                failed
            })
        })
        .collect();
    let mut failed = Vec::new();
    for t in tasks {
        failed.extend(t.await.unwrap());
    }
    nodes.resume(3).unwrap();
    nodes.resume(4).unwrap();
    assert!(
        failed.is_empty(),
        "{} of {} acquires failed within their 1.5 s wait; the first: {}",
        failed.len(),
        WORKERS * SECTIONS,
        failed[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_released_lock_comes_back_under_contention() {
    const WORKERS: usize = 8;
    let nodes = common::nodes(5);
    let run_for = Duration::from_secs(4);
    let started = Instant::now();
    // Each released token, with when its release returned.
    let released: Arc<std::sync::Mutex<std::collections::HashMap<String, Instant>>> =
        Arc::default();
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        // A patient deadline: a loaded machine must not turn a slow release into a lock left
        // behind, which would look like one that came back.
        let client = common::patient_client(&nodes);
        let released = released.clone();
        tasks.push(tokio::spawn(async move {
            let opts = LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(10));
            let mut sections = 0u32;
            while started.elapsed() < run_for {
                let Ok(lock) = client.acquire("come-back", &opts).await else {
                    continue;
                };
                tokio::time::sleep(Duration::from_millis(1)).await;
                let token = lock.token().to_owned();
                if lock.release().await.is_ok() {
                    released.lock().unwrap().insert(token, Instant::now());
                    sections += 1;
                }
            }
            sections
        }));
    }
    // Meanwhile, every node's lock key: a token seen well after its release is a lock handed
    // over again under a token its waiter had used already, which that waiter's client took
    // for the lock it had, and left on the node until its TTL. Nobody can release it.
    let mut resurrected = Vec::new();
    let mut conns = Vec::new();
    for i in 0..5 {
        conns.push(common::raw(&nodes, i).await);
    }
    while started.elapsed() < run_for {
        for (i, conn) in conns.iter_mut().enumerate() {
            let token: Option<String> = redis::cmd("GET")
                .arg(common::lock_key("come-back"))
                .query_async(conn)
                .await
                .unwrap();
            let Some(token) = token else { continue };
            let since = released.lock().unwrap().get(&token).map(Instant::elapsed);
            if since.is_some_and(|s| s > Duration::from_millis(500)) {
                resurrected.push((i, token));
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert!(total > 0);
    assert!(
        resurrected.is_empty(),
        "{} sightings of released locks back on a node ({total} sections), the first: {:?}",
        resurrected.len(),
        resurrected[0]
    );
}
