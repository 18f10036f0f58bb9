//! Inspecting locks of every kind: each node's remaining TTL and how many hold the lock
//! (readers and writers, holds, permits taken), never a token or an owner.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::kinds::kind_opts;
use redquorum::{Client, Error, LockInfo, LockKind, Owner};

/// Reads `name` as `kind` until every node shows `check` (up to 2 s: an operation returns at a
/// quorum, and the other nodes may still be running it); returns the last reading.
async fn settled(
    client: &Client,
    name: &str,
    kind: &LockKind,
    check: impl Fn(&redquorum::NodeLockState) -> bool,
) -> LockInfo {
    let read = || async { client.inspect_as(name, kind).await.unwrap() };
    common::eventually(Duration::from_secs(2), || async {
        read().await.nodes.iter().all(&check)
    })
    .await;
    read().await
}

fn shows_no_secret(info: &LockInfo, secrets: &[&str]) {
    let text = format!("{info:?}");
    for secret in secrets {
        assert!(!text.contains(secret), "{text} shows {secret}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_and_a_reentrant_lock_show_their_holder_and_holds() {
    let nodes = common::nodes(3);
    let client = common::patient_client(&nodes);
    common::kinds::warm(&client).await;
    let free = client.inspect("m").await.unwrap();
    assert_eq!((free.kind, free.held), ("mutex", false));
    assert!(
        free.nodes
            .iter()
            .all(|n| n.ttl == Ok(None) && n.holders == 0)
    );

    let lock = client.try_acquire("m", &common::opts(5_000)).await.unwrap();
    let info = settled(&client, "m", &LockKind::Mutex, |n| n.holders == 1).await;
    assert!(info.held);
    for n in &info.nodes {
        assert!(
            matches!(n.ttl, Ok(Some(t)) if t <= Duration::from_secs(5)),
            "{n:?}"
        );
        assert_eq!((n.holders, n.holds, n.readers, n.permits), (1, 0, 0, None));
    }
    shows_no_secret(&info, &[lock.token()]);
    lock.release().await.unwrap();

    let owner = Owner::random().unwrap();
    let kind = LockKind::Reentrant(owner.clone());
    let a = client
        .try_acquire("r", &kind_opts(kind.clone(), 5_000))
        .await
        .unwrap();
    let b = client
        .try_acquire("r", &kind_opts(kind.clone(), 5_000))
        .await
        .unwrap();
    let info = settled(&client, "r", &kind, |n| n.holds == 2).await;
    assert_eq!((info.kind, info.held), ("reentrant", true));
    assert!(
        info.nodes.iter().all(|n| n.holders == 1 && n.holds == 2),
        "{info:?}"
    );
    shows_no_secret(&info, &[owner.id(), a.token(), b.token()]);
    // Another owner's view of the same name reads the same lock.
    let other = LockKind::Reentrant(Owner::random().unwrap());
    assert!(client.inspect_as("r", &other).await.unwrap().held);
    a.release().await.unwrap();
    let info = settled(&client, "r", &kind, |n| n.holds == 1).await;
    assert!(info.held && info.nodes.iter().all(|n| n.holds == 1));
    b.release().await.unwrap();
    let info = settled(&client, "r", &kind, |n| n.ttl == Ok(None)).await;
    assert!(!info.held && info.nodes.iter().all(|n| n.holds == 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_lock_shows_readers_writers_and_a_waiting_writer() {
    let nodes = common::nodes(3);
    let client = common::patient_client(&nodes);
    common::kinds::warm(&client).await;
    let mut readers = Vec::new();
    for _ in 0..3 {
        readers.push(
            client
                .try_acquire("rw", &kind_opts(LockKind::Read, 5_000))
                .await
                .unwrap(),
        );
    }
    let info = settled(&client, "rw", &LockKind::Read, |n| n.readers == 3).await;
    assert_eq!((info.kind, info.held), ("read", true));
    assert!(
        info.nodes
            .iter()
            .all(|n| (n.holders, n.readers, n.writers) == (3, 3, 0) && !n.writer_waiting),
        "{info:?}"
    );
    let tokens: Vec<&str> = readers.iter().map(redquorum::Lock::token).collect();
    shows_no_secret(&info, &tokens);
    // A writer waits: it is recorded, and keeps new readers out.
    let writer = {
        let client = common::patient_client(&nodes);
        common::kinds::warm(&client).await;
        let opts = kind_opts(LockKind::Write, 5_000).wait(Duration::from_secs(10));
        tokio::spawn(async move { client.acquire("rw", &opts).await })
    };
    let info = settled(&client, "rw", &LockKind::Write, |n| n.writer_waiting).await;
    assert_eq!(info.kind, "write");
    assert!(info.nodes.iter().all(|n| n.writer_waiting), "{info:?}");
    for r in readers {
        r.release().await.unwrap();
    }
    let w = writer.await.unwrap().unwrap();
    // The writer's attempt may reach a master before a reader's release does (they come from
    // different clients): it holds on a quorum, and wherever it holds, alone.
    let info = client.inspect_as("rw", &LockKind::Read).await.unwrap();
    assert!(info.held);
    let writing: Vec<_> = info.nodes.iter().filter(|n| n.writers == 1).collect();
    assert!(writing.len() >= 2, "{info:?}");
    assert!(
        writing
            .iter()
            .all(|n| (n.holders, n.readers) == (1, 0) && !n.writer_waiting),
        "{info:?}"
    );
    shows_no_secret(&info, &[w.token()]);
    w.release().await.unwrap();
    let info = settled(&client, "rw", &LockKind::Read, |n| n.holders == 0).await;
    assert!(!info.held && info.nodes.iter().all(|n| n.ttl == Ok(None)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_shows_its_permits_and_needs_its_quorum_to_answer() {
    let mut nodes = common::nodes(5);
    let client = common::patient_client(&nodes);
    common::kinds::warm(&client).await;
    let kind = LockKind::semaphore(2);
    let a = client
        .try_acquire("s", &kind_opts(kind.clone(), 5_000))
        .await
        .unwrap();
    let b = client
        .try_acquire("s", &kind_opts(kind.clone(), 8_000))
        .await
        .unwrap();
    let info = settled(&client, "s", &kind, |n| n.holders == 2).await;
    assert_eq!((info.kind, info.held), ("semaphore", true));
    for n in &info.nodes {
        assert_eq!((n.holders, n.permits), (2, Some(2)), "{n:?}");
        // The last holder's TTL: the longer one.
        assert!(
            matches!(n.ttl, Ok(Some(t)) if t > Duration::from_secs(5)),
            "{n:?}"
        );
    }
    shows_no_secret(&info, &[a.token(), b.token()]);
    a.release().await.unwrap();
    let info = settled(&client, "s", &kind, |n| n.holders == 1).await;
    assert!(info.held && info.nodes.iter().all(|n| n.holders == 1));
    // Four of five answer: the semaphore's quorum. Three do not.
    nodes.kill(0).unwrap();
    let info = client.inspect_as("s", &kind).await.unwrap();
    assert!(info.held);
    assert!(info.nodes[0].ttl.is_err() && info.nodes[0].holders == 0);
    nodes.kill(1).unwrap();
    match client.inspect_as("s", &kind).await {
        Err(Error::QuorumUnavailable { needed, .. }) => assert_eq!(needed, 4),
        other => panic!("expected QuorumUnavailable, got {other:?}"),
    }
    // A mutex's view still has its majority.
    assert!(!client.inspect("s").await.unwrap().held);
    drop(b);
}
