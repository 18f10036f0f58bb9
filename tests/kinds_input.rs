//! Bad input to the lock kinds (permits out of bounds, bad owner ids) is refused with
//! InvalidArgument before any node is contacted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redquorum::config::limits;
use redquorum::{LockKind, LockOptions, Owner, RenewOptions};

/// Commands ever run by a node, read over one kept connection.
async fn commands(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let text: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(conn)
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

#[test]
fn bad_owner_ids_are_refused() {
    let too_long = "o".repeat(limits::MAX_TOKEN_BYTES + 1);
    for id in ["", "a/b", "a b", "tab\there", "é", "new\nline", &too_long] {
        common::expect_invalid(Owner::from_id(id), "owner");
    }
    let longest = "o".repeat(limits::MAX_TOKEN_BYTES);
    for id in ["job-42:worker.1_a", "x", &longest] {
        assert_eq!(Owner::from_id(id).unwrap().id(), id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_out_of_bounds_touch_no_node() {
    let nodes = common::nodes(3);
    let mut conns = Vec::new();
    for i in 0..3 {
        conns.push(common::raw(&nodes, i).await);
    }
    // Two reads in a row tell what one INFO adds to the count.
    let mut before = Vec::new();
    let mut info_cost = 0;
    for conn in &mut conns {
        let first = commands(conn).await;
        let second = commands(conn).await;
        info_cost = second - first;
        before.push(second);
    }
    let client = common::client(&nodes);
    let ttl = Duration::from_secs(1);
    for permits in [0, limits::MAX_PERMITS + 1, u32::MAX] {
        let kind = LockKind::semaphore(permits);
        let opts = LockOptions::new(ttl).kind(kind.clone());
        common::expect_invalid(client.acquire("s", &opts).await, "permits");
        common::expect_invalid(client.try_acquire("s", &opts).await, "permits");
        common::expect_invalid(
            client
                .acquire_guard("s", &opts, RenewOptions::default())
                .await,
            "permits",
        );
        common::expect_invalid(client.with_lock("s", &opts, |_| async {}).await, "permits");
        common::expect_invalid(
            client.extend_token_as("s", &kind, "t", ttl).await,
            "permits",
        );
        common::expect_invalid(client.release_token_as("s", &kind, "t").await, "permits");
        common::expect_invalid(client.inspect_as("s", &kind).await, "permits");
    }
    // The other checks still apply to every kind.
    let owner = LockKind::Reentrant(Owner::random().unwrap());
    for kind in [
        owner,
        LockKind::Read,
        LockKind::Write,
        LockKind::semaphore(2),
    ] {
        let opts = LockOptions::new(Duration::ZERO).kind(kind.clone());
        common::expect_invalid(client.acquire("s", &opts).await, "ttl");
        common::expect_invalid(client.release_token_as("s", &kind, "").await, "token");
        common::expect_invalid(client.extend_token_as("", &kind, "t", ttl).await, "name");
        common::expect_invalid(client.inspect_as("", &kind).await, "name");
    }
    for (i, conn) in conns.iter_mut().enumerate() {
        assert_eq!(
            commands(conn).await,
            before[i] + info_cost,
            "node {i} was contacted by an invalid call"
        );
    }
}
