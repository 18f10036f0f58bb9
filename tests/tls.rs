//! `rediss://` masters: locks and hand-overs over TLS with a private certificate authority,
//! and a certificate the client does not trust refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redquorum::{Client, Error, LockOptions, NodeFailureKind};
use redquorum_testkit::LocalNodes;

fn tls_nodes(n: usize) -> LocalNodes {
    LocalNodes::start_tls(n).expect("start local redis-server processes with TLS")
}

fn tls_client(nodes: &LocalNodes, trusted: Option<Vec<u8>>) -> Client {
    let mut builder = Client::builder()
        .nodes((0..nodes.len()).map(|i| nodes.tls_url(i).expect("a TLS port")))
        .node_timeout(Duration::from_millis(500))
        .quarantine(Duration::ZERO);
    if let Some(pem) = trusted {
        builder = builder.tls_root_certificates(pem);
    }
    builder.build().expect("build client")
}

#[tokio::test]
async fn locks_are_taken_and_handed_over_over_tls() {
    let nodes = tls_nodes(3);
    let ca = nodes.ca_pem().expect("the CA");
    let holder = tls_client(&nodes, Some(ca.clone()));
    let waiter = tls_client(&nodes, Some(ca));
    let opts = LockOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(5));
    let mut lock = holder.acquire("over-tls", &opts).await.expect("acquire");
    // Really there, as seen over plain connections.
    assert!(common::token_on_quorum(&nodes, "over-tls", lock.token()).await);
    lock.extend(Duration::from_secs(10)).await.expect("extend");
    // A second client waits in line; the release hands it the lock, which it hears on its
    // subscriptions (over TLS too).
    let waiting = tokio::spawn(async move { waiter.acquire("over-tls", &opts).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 0..nodes.len() {
        let channels: Vec<String> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg("redquorum:wake:*")
            .query_async(&mut common::raw(&nodes, i).await)
            .await
            .expect("PUBSUB CHANNELS");
        assert!(
            !channels.is_empty(),
            "the waiter's client subscribed on master {i}"
        );
    }
    let first_fence = lock.fence();
    lock.release().await.expect("release");
    let next = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter got the lock in time")
        .expect("task")
        .expect("acquire by the waiter");
    assert!(next.fence() > first_fence);
    next.release().await.expect("release");
}

#[tokio::test]
async fn a_master_whose_certificate_is_not_trusted_grants_nothing() {
    let nodes = tls_nodes(3);
    // The web's root authorities only: the masters' private CA is not among them.
    let client = tls_client(&nodes, None);
    let opts = LockOptions::new(Duration::from_secs(10));
    let err = client
        .try_acquire("untrusted", &opts)
        .await
        .expect_err("no master can be trusted");
    let Error::QuorumUnavailable { failures, .. } = &err else {
        panic!("expected QuorumUnavailable, got {err}");
    };
    assert!(!failures.is_empty(), "{err}");
    for failure in failures {
        assert!(
            matches!(&failure.kind, NodeFailureKind::Connection(m) if m.contains("certificate")),
            "{failure:?}"
        );
    }
    for i in 0..nodes.len() {
        assert_eq!(common::stored_token(&nodes, i, "untrusted").await, None);
    }
}

#[test]
fn root_certificates_that_are_not_pem_are_refused_when_building() {
    common::expect_invalid(
        Client::builder()
            .node("rediss://127.0.0.1:1")
            .tls_root_certificates("not a certificate")
            .build(),
        "tls_root_certificates",
    );
}
