//! A token that holds nothing, of the issued shape, releases and extends nothing, whatever the
//! kind: `NotHeld`, and the lock stays as it was.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redquorum::{Error, LockKind, Owner};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_holds_nothing_is_not_held_for_every_kind() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let bogus = "0123456789abcdef0123456789abcdef";
    let kinds = [
        LockKind::Mutex,
        LockKind::Reentrant(Owner::random().unwrap()),
        LockKind::Read,
        LockKind::Write,
        LockKind::semaphore(2),
    ];
    for (i, kind) in kinds.into_iter().enumerate() {
        let name = format!("held-{i}");
        let lock = client
            .try_acquire(&name, &common::opts(5_000).kind(kind.clone()))
            .await
            .unwrap();
        assert!(
            matches!(
                client.release_token_as(&name, &kind, bogus).await,
                Err(Error::NotHeld { .. })
            ),
            "{kind:?}: a release"
        );
        assert!(
            matches!(
                client
                    .extend_token_as(&name, &kind, bogus, Duration::from_secs(30))
                    .await,
                Err(Error::NotHeld { .. })
            ),
            "{kind:?}: an extend"
        );
        let info = client.inspect_as(&name, &kind).await.unwrap();
        assert!(
            info.held,
            "{kind:?}: released by a token that holds nothing"
        );
        for node in &info.nodes {
            let ttl = node.ttl.clone().unwrap().unwrap_or_default();
            assert!(
                ttl <= Duration::from_secs(5),
                "{kind:?}: extended: {node:?}"
            );
        }
        lock.release().await.unwrap();
        // Once the lock is gone, releasing it again counts as released, as for a mutex.
        client.release_token_as(&name, &kind, bogus).await.unwrap();
    }
}
