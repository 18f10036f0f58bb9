//! One master listed under two addresses (a host name and its IP address) casts one vote: the
//! address read first keeps it, and the other's grants do not count. Counted twice, one
//! master and a paused other would make a quorum of three.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redquorum::{Client, Error, LockOptions, NodeFailureKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_master_under_two_addresses_casts_one_vote() {
    let nodes = common::nodes(2);
    let alias = nodes.url(0).replace("127.0.0.1", "localhost");
    // Quarantine on (the default): every vote's server is read first, which tells the two
    // addresses apart. The masters are new: the first acquire marks them, none in quarantine.
    let client = Client::builder()
        .nodes([nodes.url(0), alias, nodes.url(1)])
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let opts = LockOptions::new(Duration::from_secs(10));
    // Both masters up: a quorum of two independent masters.
    client
        .try_acquire("listed-twice", &opts)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    nodes.pause(1).unwrap();
    let alone = client.try_acquire("listed-twice-alone", &opts).await;
    nodes.resume(1).unwrap();
    match alone {
        Err(Error::QuorumUnavailable { failures, .. }) => assert!(
            failures
                .iter()
                .any(|f| matches!(f.kind, NodeFailureKind::SameServer(_))),
            "{failures:?}"
        ),
        other => panic!("one master and a paused one made a quorum: {other:?}"),
    }
    // Its health says so as well.
    let health = client.node_health().await;
    assert_eq!(health.iter().filter(|h| h.usable).count(), 2, "{health:?}");
}
