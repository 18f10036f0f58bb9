//! Read-write locks against real redis-server processes: many readers at once, never a
//! reader beside a writer, waiting writers not starved by readers, fencing tokens ordered
//! with the writers, and crashes, lost masters and empty restarts leaving it safe.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::kinds::{RwOverlap, holders, kind_opts, race, reaching};
use redis::AsyncCommands;
use redquorum::{Client, Error, LockKind, LockState, RenewOptions};

fn read(ttl_ms: u64) -> redquorum::LockOptions {
    kind_opts(LockKind::Read, ttl_ms)
}

fn write(ttl_ms: u64) -> redquorum::LockOptions {
    kind_opts(LockKind::Write, ttl_ms)
}

/// Whether a writer and a reader are both refused `name`, on one attempt each.
async fn refused_to_all(client: &Client, name: &str) -> bool {
    let w = client.try_acquire(name, &write(2_000)).await;
    let r = client.try_acquire(name, &read(2_000)).await;
    matches!(w, Err(Error::Contended { .. })) && matches!(r, Err(Error::Contended { .. }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_writers_exclude_and_everyone_gets_in() {
    let nodes = common::nodes(3);
    let overlap = Arc::new(RwOverlap::default());
    let seen = overlap.clone();
    // Workers 0 and 1 write, 2 to 5 read.
    let writes = |w: usize| w < 2;
    let got = race(
        &nodes,
        "shared",
        6,
        12,
        Duration::from_secs(25),
        move |w| {
            if writes(w) {
                LockKind::Write
            } else {
                LockKind::Read
            }
        },
        move |w, entering| {
            if entering {
                seen.enter(writes(w));
            } else {
                seen.leave(writes(w));
            }
        },
    )
    .await;
    assert!(!overlap.violated(), "a writer was inside beside someone");
    assert!(
        got.iter().all(|&n| n >= 1),
        "a worker never got in: {got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_readers_hold_at_once_and_keep_the_last_writers_fence() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let w1 = client.try_acquire("doc", &write(5_000)).await.unwrap();
    let first = w1.fence();
    assert!(refused_to_all(&client, "doc").await);
    w1.release().await.unwrap();
    let w2 = client.try_acquire("doc", &write(5_000)).await.unwrap();
    assert!(w2.fence() > first, "writers' fences grow");
    let last = w2.fence();
    w2.release().await.unwrap();
    let mut readers = Vec::new();
    for _ in 0..6 {
        let reader = common::client(&nodes);
        let reader = common::kinds::warm(&reader).await;
        readers.push(reader.try_acquire("doc", &read(5_000)).await.unwrap());
    }
    assert!(
        readers.iter().all(|r| r.fence() == last),
        "readers carry the last writer's fence"
    );
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            // Holders, not records (a holder's fencing token is one of those).
            holders(&nodes, 0, "rw", "doc")
                .await
                .iter()
                .filter(|(member, _)| !member.starts_with('#'))
                .count()
                == 6
        })
        .await
    );
    assert!(matches!(
        client.try_acquire("doc", &write(2_000)).await,
        Err(Error::Contended { .. })
    ));
    for r in readers {
        r.release().await.unwrap();
    }
    let w3 = client.try_acquire("doc", &write(2_000)).await.unwrap();
    assert!(w3.fence() > last);
    w3.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_keeps_new_readers_out() {
    let nodes = common::nodes(3);
    let client = common::patient_client(&nodes);
    common::kinds::warm(&client).await;
    let reader = client.try_acquire("queued", &read(10_000)).await.unwrap();
    // A second reader is welcome while no writer waits.
    client
        .try_acquire("queued", &read(2_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let writer = {
        let client = common::client(&nodes);
        let opts = write(2_000).wait(Duration::from_secs(10));
        tokio::spawn(async move { client.acquire("queued", &opts).await })
    };
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            let info = client.inspect_as("queued", &LockKind::Read).await.unwrap();
            info.nodes.iter().filter(|n| n.writer_waiting).count() >= 2
        })
        .await
    );
    assert!(
        matches!(
            client.try_acquire("queued", &read(2_000)).await,
            Err(Error::Contended { .. })
        ),
        "a new reader got in while a writer waits"
    );
    assert!(!writer.is_finished());
    let fence = reader.fence();
    reader.release().await.unwrap();
    let w = writer
        .await
        .unwrap()
        .expect("the writer gets in after the reader");
    assert!(w.fence() > fence);
    w.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_is_not_starved_by_a_stream_of_readers() {
    let nodes = common::nodes(3);
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::new();
    // Four readers, each re-acquiring as soon as it released, so that some reader always
    // holds: without the writer's wait being recorded, no writer would ever get in.
    for _ in 0..4 {
        let client = common::client(&nodes);
        let (stop, reads) = (stop.clone(), reads.clone());
        readers.push(tokio::spawn(async move {
            let end = Instant::now() + Duration::from_secs(20);
            let opts = read(2_000).wait(Duration::from_secs(2));
            while !stop.load(Ordering::SeqCst) && Instant::now() < end {
                if let Ok(lock) = client.acquire("busy", &opts).await {
                    reads.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    lock.release().await.unwrap();
                }
            }
        }));
    }
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            reads.load(Ordering::SeqCst) >= 8
        })
        .await
    );
    let writer = common::client(&nodes);
    let lock = writer
        .acquire("busy", &write(2_000).wait(Duration::from_secs(8)))
        .await
        .expect("the writer gets in while readers keep coming");
    let during = reads.load(Ordering::SeqCst);
    lock.release().await.unwrap();
    // And the readers go on afterwards.
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            reads.load(Ordering::SeqCst) > during
        })
        .await
    );
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readers_fence_is_ordered_with_the_writers() {
    let nodes = common::nodes(3);
    common::kinds::mark(&nodes).await;
    let client = common::client(&nodes);
    let w1 = client.try_acquire("ordered", &write(5_000)).await.unwrap();
    let writer_fence = w1.fence();
    w1.release().await.unwrap();
    // A writer reaching master 2 only fails, but leaves its proposal as master 2's counter.
    let alone = reaching(&nodes, &[2]).build().unwrap();
    assert!(alone.try_acquire("ordered", &write(5_000)).await.is_err());
    let counter: u64 = common::raw(&nodes, 2)
        .await
        .get("redquorum:rw:fence:ordered")
        .await
        .unwrap();
    assert!(counter > writer_fence);
    // A reader on masters 1 and 2, then a writer on 0 and 1 whose client proposes from
    // nothing (no clock): the writer comes later, so its fence must be above the reader's.
    let reader = reaching(&nodes, &[1, 2]).build().unwrap();
    let r = reader.try_acquire("ordered", &read(5_000)).await.unwrap();
    assert!(r.fence() >= writer_fence);
    let r_fence = r.fence();
    r.release().await.unwrap();
    let lagging = reaching(&nodes, &[0, 1])
        .fence_clock(false)
        .build()
        .unwrap();
    let w2 = lagging.try_acquire("ordered", &write(5_000)).await.unwrap();
    assert!(
        w2.fence() > r_fence,
        "a later writer got {}, not above the reader's {r_fence}",
        w2.fence()
    );
    w2.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_writer_frees_the_lock_at_its_ttl_and_a_reader_too() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    for (kind, name) in [(LockKind::Write, "crash-w"), (LockKind::Read, "crash-r")] {
        let started = Instant::now();
        {
            let crashed = common::client(&nodes);
            let lock = crashed
                .try_acquire(name, &kind_opts(kind, 1_500))
                .await
                .unwrap();
            drop((lock, crashed));
        }
        assert!(matches!(
            client.try_acquire(name, &write(2_000)).await,
            Err(Error::Contended { .. })
        ));
        let lock = client
            .acquire(name, &write(2_000).wait(Duration::from_secs(5)))
            .await
            .expect("free at the TTL");
        assert!(
            started.elapsed() >= Duration::from_millis(1_450),
            "{name} taken after {:?}, before the crashed holder's TTL",
            started.elapsed()
        );
        lock.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_work_with_a_minority_of_masters_down() {
    let mut nodes = common::nodes(5);
    let client = common::client(&nodes);
    common::kinds::mark(&nodes).await;
    nodes.kill(1).unwrap();
    nodes.kill(4).unwrap();
    let mut w = client.acquire("minority", &write(2_000)).await.unwrap();
    w.extend(Duration::from_secs(3)).await.unwrap();
    assert!(refused_to_all(&client, "minority").await);
    let wf = w.fence();
    w.release().await.unwrap();
    let mut a = client.acquire("minority", &read(2_000)).await.unwrap();
    let b = client.acquire("minority", &read(2_000)).await.unwrap();
    assert_eq!((a.fence(), b.fence()), (wf, wf));
    a.extend(Duration::from_secs(3)).await.unwrap();
    a.release().await.unwrap();
    b.release().await.unwrap();
    let guard = client
        .acquire_guard("minority", &write(600), RenewOptions::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(guard.state(), LockState::Held);
    assert!(guard.fence() > wf);
    guard.release().await.unwrap();
}

/// A reader holds on masters 0 and 1 only (master 2 out of its reach); master 1 then restarts
/// empty. Returns the reader's lock.
async fn reader_on_a_bare_majority(nodes: &mut redquorum_testkit::LocalNodes) -> redquorum::Lock {
    common::kinds::mark(nodes).await;
    let reader = reaching(nodes, &[0, 1]).build().unwrap();
    let lock = reader.try_acquire("amnesia", &read(10_000)).await.unwrap();
    nodes.restart(1).unwrap();
    lock
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_restart_lets_a_writer_beside_a_reader_without_quarantine() {
    let mut nodes = common::nodes(3);
    let reader = reader_on_a_bare_majority(&mut nodes).await;
    let rival = reaching(&nodes, &[0, 1, 2])
        .quarantine(Duration::ZERO)
        .build()
        .unwrap();
    let writer = rival
        .try_acquire("amnesia", &write(2_000))
        .await
        .expect("without quarantine the restarted master votes for a writer");
    assert!(
        reader.is_valid() && writer.is_valid(),
        "a writer beside a reader"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_keeps_a_writer_out_while_a_reader_may_hold() {
    let mut nodes = common::nodes(3);
    let reader = reader_on_a_bare_majority(&mut nodes).await;
    let rival = reaching(&nodes, &[0, 1, 2]).build().unwrap();
    let deadline = Instant::now() + Duration::from_millis(1_500);
    while Instant::now() < deadline {
        if rival.try_acquire("amnesia", &write(2_000)).await.is_ok() {
            panic!("a writer got in beside a valid reader");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(rival.node_health().await[1].quarantined_for.is_some());
    // Readers may still share it: master 0 and the free master 2 grant.
    let other = rival.try_acquire("amnesia", &read(2_000)).await.unwrap();
    assert!(reader.is_valid());
    other.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_by_token_gives_the_readers_own_fence() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    let reader = client.try_acquire("own", &read(5_000)).await.unwrap();
    // The counters move on under the reader (another reader's refence raises them so).
    for i in 0..3 {
        let _: () = common::raw(&nodes, i)
            .await
            .set("redquorum:rw:fence:own", reader.fence() + 1_000)
            .await
            .unwrap();
    }
    let extended = client
        .extend_token_as(
            "own",
            &LockKind::Read,
            reader.token(),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(extended.fence(), reader.fence());
    reader.release().await.unwrap();
    for i in 0..3 {
        assert!(holders(&nodes, i, "rw", "own").await.is_empty(), "node {i}");
    }
}

/// A reader's masters that record different tokens for it (a writer's failed attempt raised
/// one master's counter, from a client that had proposed high on another name), one of them
/// silent during an extend by token: no quorum agrees on the reader's token, and the extend
/// reported the highest it heard, the raised counter, above the token of a writer that came
/// after the reader. It reports the lowest: below every later writer's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_by_token_that_hears_no_quorum_agree_reports_below_later_writers() {
    let nodes = common::nodes(3);
    let build = |reach: &[usize]| reaching(&nodes, reach).fence_clock(false).build().unwrap();
    let client = build(&[0, 1, 2]);
    common::kinds::warm(&client).await;
    client
        .try_acquire("apart", &write(2_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // X has held another name many times: it proposes above those tokens.
    let x = build(&[0, 1, 2]);
    for _ in 0..20 {
        x.try_acquire("elsewhere", &write(2_000))
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    // A reader on masters 1 and 2 only: X's writer is refused there, granted on master 0 and
    // given back, which leaves master 0's counter above the others'.
    let blocker = build(&[1, 2])
        .try_acquire("apart", &read(5_000))
        .await
        .unwrap();
    assert!(x.try_acquire("apart", &write(2_000)).await.is_err());
    blocker.release().await.unwrap();
    let reader = client.try_acquire("apart", &read(10_000)).await.unwrap();
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            let mut on = 0;
            for i in 0..3 {
                on += usize::from(
                    holders(&nodes, i, "rw", "apart")
                        .await
                        .iter()
                        .any(|(m, _)| !m.starts_with('#')),
                );
            }
            on == 3
        })
        .await,
        "the reader holds on every master"
    );
    nodes.pause(2).unwrap();
    let extended = client
        .extend_token_as(
            "apart",
            &LockKind::Read,
            reader.token(),
            Duration::from_secs(10),
        )
        .await;
    nodes.resume(2).unwrap();
    let reported = extended.unwrap().fence();
    let own = reader.fence();
    reader.release().await.unwrap();
    let later = build(&[1, 2])
        .try_acquire("apart", &write(2_000))
        .await
        .unwrap();
    assert!(
        reported < later.fence(),
        "the reader's token as the extend reported it, {reported}, is not below the later \
         writer's {} (the reader's own: {})",
        later.fence(),
        own
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_gives_up_its_wait_lets_new_readers_in() {
    let nodes = common::nodes(3);
    let client = common::client(&nodes);
    common::kinds::warm(&client).await;
    let reader = client.try_acquire("left", &read(10_000)).await.unwrap();
    // A long retry delay gives the writer's place (and its record that it waits) a life of
    // seconds; it gives up long before.
    let opts = write(2_000)
        .wait(Duration::from_millis(300))
        .retry_delay(Duration::from_secs(1));
    assert!(matches!(
        client.acquire("left", &opts).await,
        Err(Error::Contended { .. })
    ));
    // Its place is given up on the masters ahead of anything sent after it: no writer waits,
    // and the next reader is welcome at once.
    client
        .try_acquire("left", &read(2_000))
        .await
        .expect("no writer waits")
        .release()
        .await
        .unwrap();
    // No master keeps a record that a writer waits (each has run the give-up by now, or soon:
    // far sooner than the place's life).
    assert!(
        common::eventually(Duration::from_millis(500), || async {
            for i in 0..3 {
                let waits = holders(&nodes, i, "rw", "left")
                    .await
                    .iter()
                    .any(|(member, _)| member.starts_with("#writer-waiting"));
                if waits {
                    return false;
                }
            }
            true
        })
        .await
    );
    reader.release().await.unwrap();
}
