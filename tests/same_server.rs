//! One master listed under two addresses (a host name and its IP address) casts one vote: the
//! address read first keeps it, and the other's grants do not count, also after the master
//! restarts, whichever address is read first then; and it is one answer when the masters are
//! checked for a loss of data. Counted twice, one master and a paused other would make a
//! quorum of three, and two masters of four that lost their data would pass for a new
//! deployment.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::{Client, Error, LockOptions, NodeFailureKind};
use redquorum_testkit::LocalNodes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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

/// A proxy to `url`'s master whose answers are held back `delay` ms each, so that a test can
/// choose which of two addresses of one master is read first. When either side closes, both
/// do.
async fn delaying_proxy(url: &str, delay: Arc<AtomicU64>) -> String {
    let (credentials, target) = common::split_url(url);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (target, delay) = (target.clone(), delay.clone());
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(&target).await else {
                    return;
                };
                let (mut from_client, mut to_client) = client.into_split();
                let (mut from_server, mut to_server) = server.into_split();
                let up = async {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n @ 1..) = from_client.read(&mut buf).await {
                        if to_server.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                };
                let down = async {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n @ 1..) = from_server.read(&mut buf).await {
                        let ms = delay.load(Ordering::SeqCst);
                        if ms > 0 {
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                        }
                        if to_client.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                };
                tokio::select! {
                    () = up => {},
                    () = down => {},
                }
            });
        }
    });
    format!("redis://{credentials}{addr}")
}

/// Master X behind two proxies (two addresses), and master Y. X keeps its data across a
/// restart (AOF, fsync always), so it is not quarantined after it and votes at once; its
/// restart gives it a new `run_id`, which each address learns as it is read again. Which is
/// read first decides nothing: X is one vote, and with Y paused no quorum. Counted by comparing
/// each reading with the others' (stale) readings, the address read first after the restart
/// was no duplicate of the other's old reading, and then the other none of a later one's: both
/// voted, and X alone made a quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_under_two_addresses_casts_one_vote_after_it_restarts() {
    for later_address_first in [true, false] {
        let mut nodes =
            LocalNodes::start_with(2, &["--appendonly", "yes", "--appendfsync", "always"])
                .expect("start local redis-server processes");
        let first_delay = Arc::new(AtomicU64::new(0));
        let second_delay = Arc::new(AtomicU64::new(150));
        let first = delaying_proxy(&nodes.url(0), first_delay.clone()).await;
        let second = delaying_proxy(&nodes.url(0), second_delay.clone()).await;
        // Quarantine on (the default): every vote's server is read first.
        let client = Client::builder()
            .nodes([first, second, nodes.url(1)])
            .node_timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        let opts = LockOptions::new(Duration::from_secs(10));
        // The first address is read first: the second is its alias.
        client
            .try_acquire("warm", &opts)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;

        nodes.restart(0).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (slow, fast) = if later_address_first {
            (&first_delay, &second_delay)
        } else {
            (&second_delay, &first_delay)
        };
        slow.store(300, Ordering::SeqCst);
        fast.store(0, Ordering::SeqCst);
        nodes.pause(1).unwrap();
        let alone = client.try_acquire("after-restart", &opts).await;
        nodes.resume(1).unwrap();
        match alone {
            Err(Error::QuorumUnavailable { failures, .. }) => assert!(
                failures
                    .iter()
                    .any(|f| matches!(f.kind, NodeFailureKind::SameServer(_))),
                "later address first: {later_address_first}: {failures:?}"
            ),
            Ok(lock) => panic!(
                "later address first: {later_address_first}: X alone, listed twice, made a \
                 quorum after its restart with Y paused: fence {}",
                lock.fence()
            ),
            Err(other) => panic!("later address first: {later_address_first}: {other}"),
        }
    }
}

/// Masters X, Y, Z and W without persistence; X listed twice, so five addresses and a quorum of
/// three. H holds L on X, Y and Z. X and Y restart empty, and with Z and W out of reach a
/// second client meets them unmarked. Two unmarked masters of four are no quorum: the check
/// waits, and once the others answer, X and Y are marked in quarantine, so that nobody takes
/// L while H's hold is valid. Counted by address, X's two answers and Y's made three of five
/// unmarked and none marked, which passed for a new deployment: X and Y were marked with no
/// quarantine and gave the second client L beside H.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_under_two_addresses_is_one_answer_to_the_deployment_check() {
    let mut nodes = common::nodes(4);
    let mut urls = nodes.urls();
    urls.insert(1, nodes.url(0).replace("127.0.0.1", "localhost"));
    let client = |urls: &[String]| {
        Client::builder()
            .nodes(urls.iter().cloned())
            .node_timeout(Duration::from_millis(300))
            .build()
            .unwrap()
    };
    let holder = client(&urls);
    let ttl = LockOptions::new(Duration::from_secs(30));
    // Every master marked, as a new deployment's, and each address read.
    holder
        .try_acquire("warm", &ttl)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // H takes L while W is paused, then L is taken off W (which ran the queued acquire as it
    // resumed): L is on X, Y and Z.
    nodes.pause(3).unwrap();
    let lock = holder.try_acquire("L", &ttl).await.expect("H takes L");
    nodes.resume(3).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    common::delete_lock(&nodes, 3, "L").await;
    for i in 0..3 {
        assert_eq!(
            common::stored_token(&nodes, i, "L").await.as_deref(),
            Some(lock.token()),
            "node {i}"
        );
    }

    nodes.restart(0).unwrap();
    nodes.restart(1).unwrap();
    nodes.pause(2).unwrap();
    nodes.pause(3).unwrap();
    let rival = client(&urls);
    let _ = rival.try_acquire("L", &ttl).await;
    let mut states = Vec::new();
    for i in 0..2 {
        let mut raw = common::raw(&nodes, i).await;
        let marked: bool = raw.exists("redquorum:deployment").await.unwrap();
        let quarantine: i64 = raw.pttl("redquorum:quarantine").await.unwrap();
        states.push((marked, quarantine));
    }
    nodes.resume(3).unwrap();
    let second = rival.try_acquire("L", &ttl).await;
    nodes.resume(2).unwrap();
    if let Ok(rival_lock) = &second {
        assert!(
            !lock.is_valid(),
            "two holders of L: H (fence {}, valid for {:?}) and the rival (fence {}); X and Y \
             (marked, quarantine ms): {states:?}",
            lock.fence(),
            lock.remaining(),
            rival_lock.fence(),
        );
    }
    for (i, (marked, quarantine)) in states.iter().enumerate() {
        assert!(
            !*marked || *quarantine > 0,
            "master {i} lost its data and was marked with no quarantine while L was held"
        );
    }
}
