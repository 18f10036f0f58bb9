//! Lua script caching: a cold node costs one round trip, and a flushed or restarted one still works.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop
)]

mod common;

use redis::AsyncCommands;

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::time::Instant;

/// `calls` and `rejected_calls` of one command from `INFO commandstats`.
async fn calls(nodes: &redquorum_testkit::LocalNodes, i: usize, command: &str) -> (u64, u64) {
    let Some(stats) =
        common::info_field(nodes, i, "commandstats", &format!("cmdstat_{command}")).await
    else {
        return (0, 0);
    };
    let field = |name: &str| -> u64 {
        stats
            .split(',')
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (
        field("calls"),
        field("rejected_calls") + field("failed_calls"),
    )
}

/// Waits (up to 2 s) until node `i` has run `command` at least `count` times in all: an
/// operation returns at a quorum, and the other nodes run their command just after.
async fn ran_at_least(nodes: &redquorum_testkit::LocalNodes, i: usize, command: &str, count: u64) {
    common::eventually(Duration::from_secs(2), || async {
        calls(nodes, i, command).await.0 >= count
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_node_costs_one_round_trip() {
    let nodes = common::nodes(3);
    // A new deployment is marked once, by the first client to meet it (a reading and a mark
    // on each master); this test is about a client meeting masters already in use.
    common::patient_client(&nodes)
        .try_acquire("first", &common::opts(5_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // Calls since the marking, per node: (EVAL, EVALSHA), each as (calls, failed).
    let mut before = Vec::new();
    for i in 0..3 {
        before.push((
            calls(&nodes, i, "eval").await,
            calls(&nodes, i, "evalsha").await,
        ));
    }
    let since = |(now, then): ((u64, u64), (u64, u64))| (now.0 - then.0, now.1 - then.1);
    let client = common::patient_client(&nodes);
    let lock = client
        .try_acquire("cold", &common::opts(5_000))
        .await
        .unwrap();
    // A release returns at a quorum; the other nodes run theirs just after, so each node's
    // count is read once it has run both scripts.
    lock.release().await.unwrap();
    for i in 0..3 {
        // Each script's first run used EVAL (which also caches it): one command each, no
        // NOSCRIPT round trip and no separate SCRIPT LOAD.
        ran_at_least(&nodes, i, "eval", before[i].0.0 + 2).await;
        let eval = since((calls(&nodes, i, "eval").await, before[i].0));
        assert_eq!(eval, (2, 0), "node {i}");
        let evalsha = since((calls(&nodes, i, "evalsha").await, before[i].1));
        assert_eq!(evalsha.0, 0, "node {i}");
        assert_eq!(calls(&nodes, i, "script|load").await.0, 0, "node {i}");
    }
    let lock = client
        .try_acquire("warm", &common::opts(5_000))
        .await
        .unwrap();
    lock.release().await.unwrap();
    for i in 0..3 {
        ran_at_least(&nodes, i, "evalsha", before[i].1.0 + 2).await;
        // Once cached, the scripts go by hash.
        let eval = since((calls(&nodes, i, "eval").await, before[i].0));
        assert_eq!(eval, (2, 0), "node {i}");
        let evalsha = since((calls(&nodes, i, "evalsha").await, before[i].1));
        assert_eq!(evalsha, (2, 0), "node {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_on_every_node_is_survived() {
    for n in [3, 5] {
        let nodes = common::nodes(n);
        let client = common::patient_client(&nodes);
        let lock = client
            .try_acquire("flushed", &common::opts(5_000))
            .await
            .unwrap();
        lock.release().await.unwrap();
        for i in 0..n {
            let _: () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut common::raw(&nodes, i).await)
                .await
                .unwrap();
        }
        let mut lock = client
            .try_acquire("flushed", &common::opts(5_000))
            .await
            .expect("acquire after SCRIPT FLUSH");
        // A quorum, not every node: a release that was still finishing in the background
        // when the cache was flushed may reach a straggler only after this acquire's retry.
        assert!(common::token_on_quorum(&nodes, "flushed", lock.token()).await);
        for i in 0..n {
            let _: () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut common::raw(&nodes, i).await)
                .await
                .unwrap();
        }
        lock.extend(std::time::Duration::from_secs(5))
            .await
            .expect("extend after SCRIPT FLUSH");
        lock.release().await.expect("release after SCRIPT FLUSH");
        for i in 0..n {
            assert!(
                common::eventually(std::time::Duration::from_secs(2), || async {
                    common::lock_count(&nodes, i).await == 0
                })
                .await
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_nodes_with_empty_script_caches_still_work() {
    let mut nodes = common::nodes(3);
    let client = common::patient_client(&nodes);
    let lock = client
        .try_acquire("restarted", &common::opts(5_000))
        .await
        .unwrap();
    lock.release().await.unwrap();
    for i in 0..3 {
        nodes.restart(i).unwrap();
    }
    // An acquire returns at a quorum: on a loaded machine the third node's connection may
    // still be being made again, and the grant never sent there. Every node must take the
    // script in one of a few acquires.
    let mut everywhere = false;
    for _ in 0..5 {
        let lock = client
            .acquire(
                "restarted",
                &common::opts(5_000).wait(std::time::Duration::from_secs(5)),
            )
            .await
            .expect("acquire after every node restarted");
        everywhere = common::token_everywhere(&nodes, "restarted", lock.token()).await;
        lock.release().await.unwrap();
        if everywhere {
            break;
        }
    }
    assert!(
        everywhere,
        "every restarted node granted one of the acquires"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_right_after_a_cold_acquire_leaves_nothing_behind() {
    let nodes = common::nodes(5);
    for round in 0..30 {
        // A new client: every connection is still to be made when the acquire returns at a
        // quorum, so the release is issued while the stragglers' grants are still connecting.
        let client = common::patient_client(&nodes);
        let name = format!("cold-{round}");
        let lock = client
            .try_acquire(&name, &common::opts(30_000))
            .await
            .unwrap();
        lock.release().await.unwrap();
        for i in 0..5 {
            assert!(
                common::eventually(std::time::Duration::from_millis(500), || async {
                    common::stored_token(&nodes, i, &name).await.is_none()
                })
                .await,
                "round {round}: node {i} kept the released lock"
            );
        }
    }
}

/// A TCP proxy on loopback that passes bytes each way `delay` after they arrive, as the path to
/// a distant node would; returns the URL to reach `url`'s node through it.
async fn distant(url: &str, delay: Duration) -> String {
    let (credentials, target) = common::split_url(url);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
                continue;
            };
            let (from_client, to_client) = inbound.into_split();
            let (from_node, to_node) = outbound.into_split();
            tokio::spawn(pass_on(from_client, to_node, delay));
            tokio::spawn(pass_on(from_node, to_client, delay));
        }
    });
    format!("redis://{credentials}{addr}")
}

/// Copies `from` to `to`, each chunk `delay` after it was read: latency, not a slower link.
async fn pass_on(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n @ 1..) = from.read(&mut buf).await {
        if tx
            .send((Instant::now() + delay, buf[..n].to_vec()))
            .is_err()
        {
            break;
        }
    }
    drop(tx);
    let _ = writer.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_callers_on_a_new_client_waits_for_the_connect_not_for_each_other() {
    let nodes = common::nodes(5);
    let mut urls = Vec::new();
    for url in nodes.urls() {
        urls.push(distant(&url, Duration::from_millis(20)).await);
    }
    // 40 ms round trips. Connecting and one command take a few of them, well inside the
    // per-node deadline of 1 s; 64 commands one after another, each waiting for the answer to
    // the one before, would take 2.5 s.
    let client = redquorum::Client::builder()
        .nodes(urls)
        .node_timeout(Duration::from_secs(1))
        .quarantine(Duration::ZERO)
        .build()
        .unwrap();
    let results = futures::future::join_all((0..64).map(|i| {
        let client = client.clone();
        async move {
            let lock = client
                .try_acquire(&format!("burst-{i}"), &common::opts(30_000))
                .await?;
            lock.release().await
        }
    }))
    .await;
    let failed: Vec<String> = results
        .into_iter()
        .filter_map(|r| r.err().map(|e| e.to_string()))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of 64 callers failed, the first with: {}",
        failed.len(),
        failed[0]
    );
    for i in 0..5 {
        assert!(
            common::eventually(Duration::from_secs(2), || async {
                common::lock_count(&nodes, i).await == 0
            })
            .await,
            "node {i} kept a released lock"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adopting_a_handed_over_lock_keeps_its_ttl_and_never_lowers_a_counter() {
    let nodes = common::nodes(1);
    let mut conn = common::raw(&nodes, 0).await;
    let adopt = redis::Script::new(include_str!("../lua/adopt.lua"));
    let run = |from: &'static str, to: &'static str, fence: u64| {
        let mut invocation = adopt.key("rq:lock:x");
        invocation
            .key("rq:fence:x")
            .key("rq:fence-floor:16287")
            .arg(from)
            .arg(to)
            .arg(fence);
        invocation
    };
    let _: () = redis::pipe()
        .cmd("SET")
        .arg("rq:lock:x")
        .arg("w.1/a")
        .arg("PX")
        .arg(60_000)
        .ignore()
        .cmd("SET")
        .arg("rq:fence:x")
        .arg(5)
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
    // Not held with that token here: nothing changes.
    let missed: i64 = run("w.1/z", "w.1/b", 7)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(missed, 0);
    // Held: the token and the counter change, the expiry does not.
    let adopted: i64 = run("w.1/a", "w.1/b", 7)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(adopted, 1);
    let token: String = conn.get("rq:lock:x").await.unwrap();
    assert_eq!(token, "w.1/b");
    let pttl: i64 = conn.pttl("rq:lock:x").await.unwrap();
    assert!((1..=60_000).contains(&pttl), "{pttl}");
    let counter: u64 = conn.get("rq:fence:x").await.unwrap();
    assert_eq!(counter, 7);
    // The counter lives as long as the lock, and the floor of the name's slot is raised.
    let counter_pttl: i64 = conn.pttl("rq:fence:x").await.unwrap();
    assert!(
        counter_pttl >= pttl - 50 && counter_pttl <= 60_000,
        "{counter_pttl} {pttl}"
    );
    let floor: u64 = conn.get("rq:fence-floor:16287").await.unwrap();
    assert_eq!(floor, 7);
    // A fencing token below the counter is refused: the counter never goes back.
    let lower: i64 = run("w.1/b", "w.1/c", 6)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(lower, 0);
    let token: String = conn.get("rq:lock:x").await.unwrap();
    assert_eq!(token, "w.1/b");
}
