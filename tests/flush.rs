//! `Client::flush`: the commands an operation leaves on their way once its vote is decided (a
//! release's to the slowest master) have been answered when it returns, so that a process that
//! exits right after leaves no key behind on a master that answers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redquorum::{Client, LockOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_returns_once_the_slowest_master_has_the_release() {
    let nodes = common::nodes(3);
    let holder = common::patient_client(&nodes);
    let lock = holder
        .try_acquire("flushed", &LockOptions::new(Duration::from_secs(60)))
        .await
        .unwrap();
    let token = lock.token().to_owned();
    assert!(common::token_everywhere(&nodes, "flushed", &token).await);
    // A process of its own: no connection yet, as a command-line tool starts.
    let releaser = Client::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_secs(2))
        .quarantine(Duration::ZERO)
        .build()
        .unwrap();
    nodes.pause(2).unwrap();
    releaser.release_token("flushed", &token).await.unwrap();
    // The release was decided by the two others; master 2 has not even answered the login.
    let resumed = AtomicBool::new(false);
    let resume_later = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        resumed.store(true, Ordering::SeqCst);
        nodes.resume(2).unwrap();
    };
    let flushed = async {
        releaser.flush().await;
        resumed.load(Ordering::SeqCst)
    };
    let (resumed_before_flush_returned, ()) = tokio::join!(flushed, resume_later);
    assert!(
        resumed_before_flush_returned,
        "flush returned while master 2 had not answered"
    );
    assert_eq!(
        common::stored_token(&nodes, 2, "flushed").await,
        None,
        "master 2 still holds the lock"
    );
    drop(lock);
}
