//! Bad input is refused with InvalidArgument before any node is contacted.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop
)]

mod common;

use std::time::Duration;

use redquorum::config::limits;
use redquorum::{Client, LockOptions};

/// Connections ever accepted and commands ever run by node `i`, read over one kept connection.
async fn touched(conn: &mut redis::aio::MultiplexedConnection) -> (u64, u64) {
    let text: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(conn)
        .await
        .unwrap();
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    };
    (
        field("total_connections_received"),
        field("total_commands_processed"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_inputs_touch_no_node() {
    for n in [3, 5] {
        let nodes = common::nodes(n);
        // The masters marked as one deployment first (by another client), so that the valid
        // lock below is on each of them (see `warm`).
        common::kinds::mark(&nodes).await;
        let mut conns = Vec::new();
        for i in 0..n {
            conns.push(common::raw(&nodes, i).await);
        }
        // Two reads in a row tell what one INFO adds to the command count.
        let mut before = Vec::new();
        let mut info_cost = 0;
        for conn in &mut conns {
            let first = touched(conn).await;
            let second = touched(conn).await;
            info_cost = second.1 - first.1;
            before.push(second);
        }

        let client = common::client(&nodes);
        let ok = LockOptions::new(Duration::from_secs(1));
        let long_name = "n".repeat(limits::MAX_NAME_BYTES + 1);
        common::expect_invalid(client.acquire("", &ok).await, "name");
        common::expect_invalid(client.try_acquire(&long_name, &ok).await, "name");
        common::expect_invalid(
            client.acquire("x", &LockOptions::new(Duration::ZERO)).await,
            "ttl",
        );
        common::expect_invalid(
            client
                .acquire("x", &LockOptions::new(limits::MAX_TTL * 2))
                .await,
            "ttl",
        );
        common::expect_invalid(
            client
                .acquire("x", &ok.clone().wait(limits::MAX_WAIT * 2))
                .await,
            "wait",
        );
        common::expect_invalid(
            client
                .acquire("x", &ok.clone().min_validity(Duration::from_secs(5)))
                .await,
            "min_validity",
        );
        common::expect_invalid(
            client.extend_token("x", "", Duration::from_secs(1)).await,
            "token",
        );
        let well_formed = "0123456789abcdef0123456789abcdef";
        common::expect_invalid(
            client.extend_token("x", well_formed, Duration::ZERO).await,
            "ttl",
        );
        // Tokens of a shape the library never hands out: refused, where a release of a free
        // lock would count a well-formed one as released.
        for made_up in [
            "t",
            "wrong-token",
            "0123456789ABCDEF0123456789ABCDEF",
            "waiter/0123456789abcdef0123456789abcdef",
        ] {
            common::expect_invalid(client.release_token("x", made_up).await, "token");
            common::expect_invalid(
                client
                    .extend_token("x", made_up, Duration::from_secs(1))
                    .await,
                "token",
            );
        }
        common::expect_invalid(
            client
                .release_token("x", &"t".repeat(limits::MAX_TOKEN_BYTES + 1))
                .await,
            "token",
        );
        common::expect_invalid(client.release_token("", "t").await, "name");
        common::expect_invalid(client.inspect(&long_name).await, "name");
        let none: [&str; 0] = [];
        common::expect_invalid(Client::new(none), "node");
        let mut bad_url = nodes.urls();
        bad_url.push("redis://127.0.0.1:notaport".into());
        common::expect_invalid(Client::new(bad_url), "node");
        let mut dup = nodes.urls();
        dup.push(nodes.url(0));
        common::expect_invalid(Client::new(dup), "node");

        for (i, conn) in conns.iter_mut().enumerate() {
            let now = touched(conn).await;
            assert_eq!(
                now,
                (before[i].0, before[i].1 + info_cost),
                "node {i} was contacted by an invalid call"
            );
        }

        // A lock taken with a valid name can't be extended with a bad TTL.
        let mut lock = client.try_acquire("fine", &ok).await.unwrap();
        // The acquire returns at a quorum; let node 0's part arrive before counting.
        assert!(common::token_everywhere(&nodes, "fine", lock.token()).await);
        let (_, commands_after_acquire) = touched(&mut conns[0]).await;
        common::expect_invalid(lock.extend(Duration::ZERO).await, "ttl");
        common::expect_invalid(lock.extend(limits::MAX_TTL * 2).await, "ttl");
        let (_, commands_now) = touched(&mut conns[0]).await;
        // Only the INFO that read the count ran in between.
        assert_eq!(
            commands_now,
            commands_after_acquire + info_cost,
            "an invalid extend reached node 0"
        );
        lock.release().await.unwrap();
    }
}
