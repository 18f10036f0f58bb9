//! A master that does not keep every write may come back from older data with its deployment
//! marker: a plain `redis-server` (Redis's default save points, no AOF) reloads its last
//! snapshot after a crash, marker included, but not the locks it granted since. Its marker
//! records the process it was made for, so a client that reads another process takes it as one
//! that lost its data: it counts none of its votes and marks it again, in quarantine, so that no
//! second holder takes a lock it forgot while that lock is valid. Markers made before the
//! process was recorded are taken as made for the process read.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::kinds::kind_opts;
use redis::AsyncCommands;
use redquorum::{Client, LockKind, LockOptions};
use redquorum_testkit::LocalNodes;

/// Redis's own default save points, instead of the harness's `--save ""`.
const SAVE_POINTS: [&str; 2] = ["--save", "3600 1 300 100 60 10000"];

/// A client with the default quarantine (the longest TTL the masters recorded).
fn client(nodes: &LocalNodes) -> Client {
    Client::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_millis(200))
        .build()
        .unwrap()
}

/// The periodic snapshot the save points take (here at once rather than after an hour).
async fn snapshot(nodes: &LocalNodes, i: usize) {
    let _: () = redis::cmd("SAVE")
        .query_async(&mut common::raw(nodes, i).await)
        .await
        .expect("SAVE");
}

/// Master 0's marker and quarantine (its PTTL in ms, -2 for none).
async fn marker_and_quarantine(nodes: &LocalNodes) -> (Option<String>, i64) {
    let mut raw = common::raw(nodes, 0).await;
    let marker: Option<String> = raw.get("redquorum:deployment").await.unwrap();
    let quarantine: i64 = raw.pttl("redquorum:quarantine").await.unwrap();
    (marker, quarantine)
}

/// X holds "precious" on masters 0 and 1 (master 2 lost its key). Master 0 crashes and comes
/// back from a snapshot taken before X's grant: marker there, lock gone. A rival must not take
/// the lock on 0 and 2 while X's is valid, and master 0 ends up quarantined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_back_from_an_older_snapshot_is_quarantined() {
    let mut nodes = LocalNodes::start_with(3, &SAVE_POINTS).expect("masters");
    let holder = client(&nodes);
    holder
        .try_acquire("warm-up", &LockOptions::new(Duration::from_secs(1)))
        .await
        .expect("a new deployment")
        .release()
        .await
        .unwrap();
    snapshot(&nodes, 0).await;
    let lock = holder
        .try_acquire("precious", &LockOptions::new(Duration::from_secs(30)))
        .await
        .expect("a fresh lock");
    assert!(common::token_everywhere(&nodes, "precious", lock.token()).await);
    common::delete_lock(&nodes, 2, "precious").await;
    nodes.restart(0).unwrap();
    let (marker, _) = marker_and_quarantine(&nodes).await;
    assert!(marker.is_some(), "the snapshot kept the marker");
    assert!(
        common::stored_token(&nodes, 0, "precious").await.is_none(),
        "the snapshot lost X's grant"
    );

    let rival = client(&nodes);
    for _ in 0..5 {
        if let Ok(second) = rival
            .try_acquire("precious", &LockOptions::new(Duration::from_secs(30)))
            .await
        {
            panic!(
                "two holders: the rival took \"precious\" (fence {}) while X counts {:?} of its \
                 lock (fence {}); master 0 lost X's grant in its restart but kept its marker",
                second.fence(),
                lock.remaining(),
                lock.fence()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(lock.is_valid());
    let (_, quarantine) = marker_and_quarantine(&nodes).await;
    assert!(
        quarantine > 20_000,
        "master 0 is quarantined for the longest TTL (30 s): {quarantine} ms"
    );
    // X's lock is still there on a quorum for the rest of its life, and released.
    lock.release().await.unwrap();
}

/// The same for a read-write lock: a reader on masters 0 and 1, master 1 back from an older
/// snapshot; no writer gets in beside the reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_gets_no_quorum_from_a_master_back_from_an_older_snapshot() {
    let mut nodes = LocalNodes::start_with(3, &SAVE_POINTS).expect("masters");
    let readers = client(&nodes);
    common::kinds::warm(&readers).await;
    snapshot(&nodes, 1).await;
    let reader = readers
        .try_acquire("shared", &kind_opts(LockKind::Read, 10_000))
        .await
        .expect("a reader");
    // The reader's hold is on masters 0 and 1 only.
    let _: () = common::raw(&nodes, 2)
        .await
        .del("redquorum:rw:lock:shared")
        .await
        .unwrap();
    nodes.restart(1).unwrap();
    let writers = client(&nodes);
    for _ in 0..5 {
        if let Ok(writer) = writers
            .try_acquire("shared", &kind_opts(LockKind::Write, 2_000))
            .await
        {
            panic!(
                "a writer (fence {}) got in beside a valid reader ({:?} left)",
                writer.fence(),
                reader.remaining()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(reader.is_valid());
}

/// Markers made before the process they were made for was recorded (no `marked-run` key): the
/// process read is taken as the marked one, with no quarantine, and recorded, so that the next
/// restart from older data is seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marker_that_records_no_process_is_taken_for_the_one_read() {
    let nodes = LocalNodes::start_with(3, &SAVE_POINTS).expect("masters");
    let first = client(&nodes);
    first
        .try_acquire("warm-up", &LockOptions::new(Duration::from_secs(1)))
        .await
        .expect("a new deployment")
        .release()
        .await
        .unwrap();
    for i in 0..3 {
        let mut raw = common::raw(&nodes, i).await;
        let recorded: Option<String> = raw.get("redquorum:marked-run").await.unwrap();
        assert!(
            recorded.is_some(),
            "master {i}: the marking records its process"
        );
        let _: () = raw.del("redquorum:marked-run").await.unwrap();
    }
    let later = client(&nodes);
    later
        .try_acquire("after", &LockOptions::new(Duration::from_secs(5)))
        .await
        .expect("masters whose marker records no process still grant")
        .release()
        .await
        .unwrap();
    for i in 0..3 {
        let mut raw = common::raw(&nodes, i).await;
        let recorded: Option<String> = raw.get("redquorum:marked-run").await.unwrap();
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut raw)
            .await
            .unwrap();
        let run_id = info
            .lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .map(|r| r.trim().to_owned());
        assert_eq!(recorded, run_id, "master {i}: the process read is recorded");
        let quarantine: i64 = raw.pttl("redquorum:quarantine").await.unwrap();
        assert_eq!(quarantine, -2, "master {i}: no quarantine");
    }
}
