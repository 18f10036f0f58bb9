//! Tokens own locks: only the holder extends or releases; expiry and loss are reported right.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop
)]

mod common;

use std::time::Duration;

use redquorum::Error;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_token_can_neither_extend_nor_release() {
    for n in [3, 5] {
        let nodes = common::nodes(n);
        let client = common::patient_client(&nodes);
        // Every master marked first: on fresh masters, one still being marked when the first
        // attempt reaches it refuses that grant, and the lock would not be on every master.
        common::kinds::warm(&client).await;
        let lock = client
            .try_acquire("owned", &common::opts(10_000))
            .await
            .unwrap();
        assert!(common::token_everywhere(&nodes, "owned", lock.token()).await);
        let before: Vec<i64> =
            futures::future::join_all((0..n).map(|i| common::pttl(&nodes, i, "owned"))).await;

        let forged = "0123456789abcdef0123456789abcdef";
        let err = client
            .extend_token("owned", forged, Duration::from_secs(60))
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::NotHeld { .. }),
            "extend with a foreign token: {err}"
        );
        let err = client.release_token("owned", forged).await.unwrap_err();
        assert!(
            matches!(err, Error::NotHeld { .. }),
            "release with a foreign token: {err}"
        );
        // A second client cannot take it either.
        let other = common::client(&nodes);
        let err = other
            .try_acquire("owned", &common::opts(10_000))
            .await
            .unwrap_err();
        match err {
            // The attempt stops as soon as enough refusals rule a quorum out.
            Error::Contended {
                ref holders,
                unheard,
                total,
                ..
            } => {
                assert_eq!(holders.len(), n - (n / 2 + 1) + 1, "{holders:?}");
                // The nodes not waited for are counted, and the message says so rather than
                // leaving the lock looking held on fewer nodes than it is.
                assert_eq!(holders.len() + unheard, total, "{err}");
                assert!(
                    err.to_string()
                        .contains(&format!("and {unheard} not waited for")),
                    "{err}"
                );
            }
            other => panic!("expected Contended, got {other}"),
        }

        // Nothing changed: same token everywhere, TTL not pushed back to 60 s.
        for i in 0..n {
            assert_eq!(
                common::stored_token(&nodes, i, "owned").await.as_deref(),
                Some(lock.token())
            );
            let now = common::pttl(&nodes, i, "owned").await;
            assert!(
                now <= before[i] && now > 9_000,
                "node {i}: pttl {now} (was {})",
                before[i]
            );
        }
        // The holder still can.
        let mut lock = lock;
        lock.extend(Duration::from_secs(20)).await.unwrap();
        assert!(
            common::eventually(Duration::from_secs(2), || async {
                common::pttl(&nodes, 0, "owned").await > 10_000
            })
            .await
        );
        lock.release().await.unwrap();
        for i in 0..n {
            assert_eq!(common::stored_token(&nodes, i, "owned").await, None);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_after_expiry_succeeds_and_extend_after_expiry_is_lost() {
    let nodes = common::nodes(3);
    let client = common::patient_client(&nodes);
    let lock = client
        .try_acquire("short", &common::opts(100))
        .await
        .unwrap();
    let mut second = client
        .try_acquire("short-2", &common::opts(100))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!lock.is_valid());
    lock.release()
        .await
        .expect("releasing an expired lock is a success");

    let err = second.extend(Duration::from_secs(10)).await.unwrap_err();
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    // Extending never recreates the key.
    for i in 0..3 {
        assert_eq!(common::lock_count(&nodes, i).await, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_of_a_lock_gone_from_the_nodes_is_lost_and_recreates_nothing() {
    let nodes = common::nodes(3);
    let client = common::patient_client(&nodes);
    common::kinds::warm(&client).await;
    let mut lock = client
        .try_acquire("vanishing", &common::opts(10_000))
        .await
        .unwrap();
    assert!(common::token_everywhere(&nodes, "vanishing", lock.token()).await);
    // The keys vanish on two nodes (a restart without persistence would do this).
    for i in 0..2 {
        common::delete_lock(&nodes, i, "vanishing").await;
    }
    assert!(lock.is_valid(), "the client cannot know yet");
    let err = lock.extend(Duration::from_secs(10)).await.unwrap_err();
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    assert_eq!(common::stored_token(&nodes, 0, "vanishing").await, None);
    assert_eq!(common::stored_token(&nodes, 1, "vanishing").await, None);
    // The one node that still had it keeps it (extend never deletes) until its TTL; give its
    // extend time to run, then check it is there and was not deleted.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        common::stored_token(&nodes, 2, "vanishing")
            .await
            .as_deref(),
        Some(lock.token())
    );
    assert!(common::pttl(&nodes, 2, "vanishing").await > 9_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_pushes_back_expiry_on_the_quorum() {
    let nodes = common::nodes(5);
    let client = common::patient_client(&nodes);
    let mut lock = client
        .try_acquire("extended", &common::opts(300))
        .await
        .unwrap();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        lock.extend(Duration::from_millis(300))
            .await
            .expect("extend within validity");
        assert!(lock.remaining() > Duration::from_millis(250));
    }
    // 600 ms after acquiring with a 300 ms TTL, the lock still exists thanks to extensions.
    assert!(client.inspect("extended").await.unwrap().held);
    lock.extend(Duration::from_secs(30)).await.unwrap();
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            common::pttl(&nodes, 4, "extended").await > 29_000
        })
        .await
    );
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reports_ttls_but_never_the_token() {
    let mut nodes = common::nodes(3);
    let client = common::patient_client(&nodes);
    common::kinds::warm(&client).await;
    let info = client.inspect("watched").await.unwrap();
    assert!(!info.held);
    assert!(info.nodes.iter().all(|n| n.ttl == Ok(None)));

    let lock = client
        .try_acquire("watched", &common::opts(5_000))
        .await
        .unwrap();
    assert!(common::token_everywhere(&nodes, "watched", lock.token()).await);
    let info = client.inspect("watched").await.unwrap();
    assert!(info.held);
    for node in &info.nodes {
        let ttl = node.ttl.clone().unwrap().expect("each node has the key");
        assert!(
            ttl > Duration::from_secs(4) && ttl <= Duration::from_secs(5),
            "{ttl:?}"
        );
    }
    assert!(!format!("{info:?}").contains(lock.token()));
    assert!(
        !format!("{lock:?}").contains(lock.token()),
        "Debug output must not leak the token"
    );

    nodes.kill(0).unwrap();
    let info = client.inspect("watched").await.unwrap();
    assert!(info.held, "two of three still hold it");
    assert!(info.nodes[0].ttl.is_err());
    nodes.kill(1).unwrap();
    assert!(matches!(
        client.inspect("watched").await,
        Err(Error::QuorumUnavailable { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_keeps_clients_apart() {
    let nodes = common::nodes(3);
    let a = redquorum::Client::builder()
        .nodes(nodes.urls())
        .quarantine(Duration::ZERO)
        .key_prefix("app-a:")
        .build()
        .unwrap();
    let b = redquorum::Client::builder()
        .nodes(nodes.urls())
        .quarantine(Duration::ZERO)
        .key_prefix("app-b:")
        .build()
        .unwrap();
    let la = a
        .try_acquire("same-name", &common::opts(5_000))
        .await
        .unwrap();
    let lb = b
        .try_acquire("same-name", &common::opts(5_000))
        .await
        .expect("another prefix is another lock");
    // Each lock is on a quorum of the three, and two quorums share a master: that one holds
    // both. (Any one master may miss a grant: one that answered too late to be marked with
    // the new deployment grants nothing until a later client marks it.)
    let mut both = None;
    for i in 0..3 {
        if common::lock_count(&nodes, i).await == 2 {
            both = Some(i);
            break;
        }
    }
    let both = both.expect("a master shared by both quorums holds both locks");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*lock:*")
        .query_async(&mut common::raw(&nodes, both).await)
        .await
        .unwrap();
    let mut keys = keys;
    keys.sort();
    assert_eq!(keys, ["app-a:lock:same-name", "app-b:lock:same-name"]);
    la.release().await.unwrap();
    lb.release().await.unwrap();
}
