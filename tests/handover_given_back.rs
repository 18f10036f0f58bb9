//! A lock handed over by releases is held only where a quorum of masters holds its token, for
//! no longer than they keep it: a grant the waiter gave back is no grant when its message comes
//! late, and a handed-over lock's validity never outlasts a quorum's keys.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redquorum::{Client, LockOptions};
use redquorum_testkit::LocalNodes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A loopback proxy in front of one master that can hold back, in order, (a) what the client
/// sends on its command connections, and (b) what the master sends on subscriber connections
/// (pub/sub messages): a TCP flow delayed in the network, nothing more.
struct HoldProxy {
    url: String,
    hold_commands: watch::Sender<bool>,
    hold_messages: watch::Sender<bool>,
}

impl HoldProxy {
    async fn start(master_url: &str) -> Self {
        let (credentials, target) = common::split_url(master_url);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (hold_commands, hc) = watch::channel(false);
        let (hold_messages, hm) = watch::channel(false);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&target).await else {
                    continue;
                };
                let subscriber = Arc::new(AtomicBool::new(false));
                let (from_client, to_client) = client.into_split();
                let (from_server, to_server) = server.into_split();
                tokio::spawn(up(from_client, to_server, subscriber.clone(), hc.clone()));
                tokio::spawn(down(from_server, to_client, subscriber, hm.clone()));
            }
        });
        HoldProxy {
            url: format!("redis://{credentials}{addr}"),
            hold_commands,
            hold_messages,
        }
    }
}

async fn up(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    subscriber: Arc<AtomicBool>,
    mut hold: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(n @ 1..) => n,
            _ => {
                let _ = to.shutdown().await;
                return;
            }
        };
        if buf[..n].windows(9).any(|w| w == b"SUBSCRIBE") {
            subscriber.store(true, Ordering::SeqCst);
        }
        if !subscriber.load(Ordering::SeqCst) {
            let _ = hold.wait_for(|h| !*h).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

async fn down(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    subscriber: Arc<AtomicBool>,
    mut hold: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(n @ 1..) => n,
            _ => return,
        };
        if subscriber.load(Ordering::SeqCst) {
            let _ = hold.wait_for(|h| !*h).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

fn client_via(proxies: &[HoldProxy]) -> Client {
    Client::builder()
        .nodes(proxies.iter().map(|p| p.url.clone()))
        .node_timeout(common::NODE_TIMEOUT)
        .quarantine(Duration::ZERO)
        .build()
        .unwrap()
}

/// The waiter ids queued for `name` on node `i`, and the token of each one's terms.
async fn places(nodes: &LocalNodes, i: usize, name: &str) -> Vec<(String, String)> {
    let mut c = common::raw(nodes, i).await;
    let terms: Vec<(String, String)> = c.hgetall(common::queue_terms_key(name)).await.unwrap();
    terms
        .into_iter()
        .filter_map(|(w, t)| t.split(' ').nth(1).map(|tok| (w, tok.to_owned())))
        .collect()
}

/// Masters 0, 1, 2. Holder H holds the lock; waiter W waits in line with the same terms (its
/// attempt t_k) on every master. Then:
///  1. H's release reaches master 0 at once, masters 1 and 2 only later (held in the network),
///     and so do W's commands to master 1; W's pub/sub message from master 0 is late too.
///  2. Master 0 hands the lock to W as W/t_k. W's next attempt hears of it ({4}), no quorum
///     comes within the per-node deadline, and W gives the grant back: master 0 deletes W/t_k.
///  3. H's release reaches master 1, which hands over W/t_k too; W hears of it, and about then
///     the late message of step 2 from master 0 comes in.
///  4. Counted again, master 0's grant made a quorum with master 1's: W held a lock that only
///     master 1 held, and a second client took masters 0 and 2 while W's lock was valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_given_back_is_not_counted_again_when_its_message_comes_late() {
    const NAME: &str = "given-back";
    let nodes = common::nodes(3);
    let mut hp = Vec::new();
    let mut wp = Vec::new();
    for i in 0..3 {
        hp.push(HoldProxy::start(&nodes.url(i)).await);
        wp.push(HoldProxy::start(&nodes.url(i)).await);
    }
    let h = client_via(&hp);
    let w = client_via(&wp);
    let z = common::client(&nodes);

    let h_lock = h.try_acquire(NAME, &common::opts(5_000)).await.unwrap();
    let w_opts = LockOptions::new(Duration::from_secs(10))
        .wait(Duration::from_secs(10))
        .retry_delay(Duration::from_millis(300))
        .retry_jitter(Duration::ZERO);
    let waiting = tokio::spawn(async move {
        let got = w.acquire(NAME, &w_opts).await;
        (got, w)
    });

    // Wait until W is queued on masters 0 and 1 with the same, freshly made terms.
    let mut last = None;
    let (waiter, t_k) = loop {
        let a = places(&nodes, 0, NAME).await;
        let b = places(&nodes, 1, NAME).await;
        if a.len() == 1 && b == a {
            if last.as_ref().is_some_and(|l| *l != a[0].1) {
                break a[0].clone();
            }
            last = Some(a[0].1.clone());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let handover_token = format!("{waiter}/{t_k}");

    // Step 1: H's release is late to masters 1 and 2, W's commands to master 1 and W's
    // messages from master 0 are late too.
    hp[1].hold_commands.send_replace(true);
    hp[2].hold_commands.send_replace(true);
    wp[1].hold_commands.send_replace(true);
    wp[0].hold_messages.send_replace(true);
    let releasing = tokio::spawn(async move { h_lock.release().await });

    // Step 2: master 0 hands W/t_k over, and W gives it back.
    let mut seen = false;
    let end = Instant::now() + Duration::from_secs(2);
    loop {
        let on_0 = common::stored_token(&nodes, 0, NAME).await;
        if on_0.as_deref() == Some(handover_token.as_str()) {
            seen = true;
        } else if seen {
            break;
        }
        assert!(
            Instant::now() < end,
            "master 0 never handed over and took back {handover_token}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }

    // Step 3: H's release reaches master 1; W's late message from master 0 comes in.
    hp[1].hold_commands.send_replace(false);
    wp[0].hold_messages.send_replace(false);
    let (got, _w) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("W never got the lock")
        .unwrap();
    let lock = got.unwrap();
    let _ = releasing.await;
    let mut holding = Vec::new();
    for i in 0..3 {
        if common::stored_token(&nodes, i, NAME).await.as_deref() == Some(lock.token()) {
            holding.push(i);
        }
    }

    // Let the rest through (H's release to master 2, W's late commands to master 1) and see
    // whether a second client takes the lock while W's is valid.
    hp[2].hold_commands.send_replace(false);
    wp[1].hold_commands.send_replace(false);
    let mut second = None;
    let end = Instant::now() + Duration::from_secs(2);
    while second.is_none() && Instant::now() < end {
        if let Ok(l) = z.try_acquire(NAME, &common::opts(5_000)).await {
            second = Some(l);
        } else {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    assert!(
        holding.len() >= 2,
        "W believes it holds {} (valid {:?}) but only masters {holding:?} hold it",
        lock.token(),
        lock.remaining()
    );
    if let Some(z_lock) = &second {
        assert!(
            !lock.is_valid(),
            "two holders at once: W ({}, fence {}, valid for {:?}) and another ({}, fence {})",
            lock.token(),
            lock.fence(),
            lock.remaining(),
            z_lock.token(),
            z_lock.fence()
        );
    }
}

/// Every lock two looping clients take (handed over by releases, in places their releases
/// kept, or by an attempt) is valid for no longer than a quorum of masters still keeps its
/// token: validity counts from an instant no later than any master's key was set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handed_over_validity_never_outlasts_the_keys() {
    const NAME: &str = "validity";
    let nodes = Arc::new(common::nodes(3));
    let quorum = 2;
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let nodes = nodes.clone();
        tasks.push(tokio::spawn(async move {
            let c = common::client(&nodes);
            let opts = LockOptions::new(Duration::from_millis(400)).wait(Duration::from_secs(5));
            let end = Instant::now() + Duration::from_secs(3);
            let mut handed = 0u32;
            while Instant::now() < end {
                let lock = c.acquire(NAME, &opts).await.unwrap();
                let mut pttls = Vec::new();
                for i in 0..3 {
                    if common::stored_token(&nodes, i, NAME).await.as_deref() == Some(lock.token())
                    {
                        pttls.push(common::pttl(&nodes, i, NAME).await);
                    }
                }
                let left = lock.remaining().as_millis() as i64;
                pttls.sort_unstable_by(|a, b| b.cmp(a));
                let kth = pttls.get(quorum - 1).copied().unwrap_or(-2);
                if lock.token().contains('/') {
                    handed += 1;
                }
                assert!(
                    left <= kth + 1,
                    "{} valid for {left} ms, but a quorum keeps it only {kth} ms ({pttls:?})",
                    lock.token()
                );
                tokio::time::sleep(Duration::from_millis(3)).await;
                let _ = lock.release().await;
            }
            handed
        }));
    }
    let mut handed = 0;
    for t in tasks {
        handed += t.await.unwrap();
    }
    assert!(
        handed > 0,
        "no lock was handed over: the test saw none of the path it checks"
    );
}
