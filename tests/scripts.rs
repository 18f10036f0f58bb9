//! Lua script caching: a cold node costs one round trip, and a flushed or restarted one still works.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop
)]

mod common;

/// `calls` and `rejected_calls` of one command from `INFO commandstats`.
async fn calls(nodes: &redquorum::dev::LocalNodes, i: usize, command: &str) -> (u64, u64) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_node_costs_one_round_trip() {
    let nodes = common::nodes(3);
    let client = common::patient_client(&nodes);
    let lock = client
        .try_acquire("cold", &common::opts(5_000))
        .await
        .unwrap();
    // A release waits for every node, and each node runs its commands in order, so once it is
    // done every node has run both scripts.
    lock.release().await.unwrap();
    for i in 0..3 {
        // Each script's first run used EVAL (which also caches it): one command each, no
        // NOSCRIPT round trip and no separate SCRIPT LOAD.
        assert_eq!(calls(&nodes, i, "eval").await, (2, 0), "node {i}");
        assert_eq!(calls(&nodes, i, "evalsha").await.0, 0, "node {i}");
        assert_eq!(calls(&nodes, i, "script|load").await.0, 0, "node {i}");
    }
    let lock = client
        .try_acquire("warm", &common::opts(5_000))
        .await
        .unwrap();
    lock.release().await.unwrap();
    for i in 0..3 {
        // Once cached, the scripts go by hash.
        assert_eq!(calls(&nodes, i, "eval").await, (2, 0), "node {i}");
        assert_eq!(calls(&nodes, i, "evalsha").await, (2, 0), "node {i}");
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
    let lock = client
        .acquire(
            "restarted",
            &common::opts(5_000).wait(std::time::Duration::from_secs(5)),
        )
        .await
        .expect("acquire after every node restarted");
    assert!(common::token_everywhere(&nodes, "restarted", lock.token()).await);
    lock.release().await.unwrap();
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
