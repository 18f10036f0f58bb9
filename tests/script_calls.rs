//! What an uncontended acquire and release cost each master: one acquire script and one release
//! script, nothing more (no dequeue, give-back or second release), counted by the masters
//! themselves (`INFO commandstats`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis::AsyncCommands;
use redquorum_testkit::LocalNodes;

/// Scripts run on master `i` since its statistics were reset (`EVALSHA`, and `EVAL` when a
/// script had to be sent whole).
async fn scripts_run(nodes: &LocalNodes, i: usize) -> u64 {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut common::raw(nodes, i).await)
        .await
        .expect("INFO commandstats");
    text.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_pair_runs_one_acquire_and_one_release_on_each_master() {
    // Quarantine is off (common::client): these masters have just started.
    let nodes = common::nodes(5);
    let client = common::client(&nodes);
    common::kinds::warm(&client).await;
    // A waiting acquire queues on the masters when refused, so it would have a place to give
    // up: the case where a vote won at a quorum used to send the slower masters a dequeue.
    let opts = common::opts(5_000).wait(Duration::from_secs(2));
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 0..nodes.len() {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut common::raw(&nodes, i).await)
            .await
            .expect("CONFIG RESETSTAT");
    }
    const PAIRS: u64 = 40;
    for n in 0..PAIRS {
        let lock = client.acquire(&format!("pair-{n}"), &opts).await.unwrap();
        lock.release().await.unwrap();
    }
    // The slower masters answer after the quorum; give them time to run all they were sent.
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            let mut all = true;
            for i in 0..nodes.len() {
                all &= scripts_run(&nodes, i).await >= 2 * PAIRS;
            }
            all
        })
        .await,
        "every master ran every acquire and release"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..nodes.len() {
        assert_eq!(
            scripts_run(&nodes, i).await,
            2 * PAIRS,
            "master {i}: scripts beyond one acquire and one release per pair"
        );
        let left: Vec<String> = common::raw(&nodes, i)
            .await
            .keys("redquorum:queue*")
            .await
            .unwrap();
        assert!(left.is_empty(), "master {i}: a queue was left: {left:?}");
    }
}
