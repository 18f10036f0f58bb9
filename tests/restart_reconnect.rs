//! A master that restarts empty between two connections is read again before its vote counts,
//! however the reconnect happened: with RESP3 the old connection is replaced without any call
//! failing, and a `NOSCRIPT` answer alone may be all that shows the restart.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use redquorum::{Client, LockOptions, NodeFailureKind};
use redquorum_testkit::LocalNodes;

/// How long a master that lost its data is quarantined here.
const QUARANTINE: Duration = Duration::from_secs(2);

fn resp3(url: &str) -> String {
    format!("{url}?protocol=resp3")
}

fn rival_client(urls: &[String]) -> Client {
    Client::builder()
        .nodes(urls.iter().cloned())
        .quarantine(QUARANTINE)
        .node_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

/// X holds on {A, B} (C lost its key). A restarts empty; the rival, whose connections were all
/// up and read before, then tries the lock: A is empty and C is free. It must not count A's
/// grant before A's new uptime has been read on the connection the grant came on.
/// `rival_urls` are how the rival reaches A, B and C.
async fn no_second_holder_after_a_restart(
    mut nodes: LocalNodes,
    holder_urls: &[String],
    rival_urls: &[String],
) {
    let rival = rival_client(rival_urls);
    // Every connection of the rival is up and its master read.
    rival
        .try_acquire("warm-up", &LockOptions::new(Duration::from_secs(1)))
        .await
        .expect("all three masters count")
        .release()
        .await
        .unwrap();
    // The release is answered once two masters have; A's answer may still be on its way. A
    // restart hidden behind a proxy loses a command in flight, and with it the order of the
    // replies on that connection (RESP has no request ids), which no client can mend: wait
    // until A has run the release, and its answer has had time to come back.
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            common::stored_token(&nodes, 0, "warm-up").await.is_none()
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(50)).await;

    let holder = Client::builder()
        .nodes(holder_urls.iter().cloned())
        .quarantine(Duration::ZERO)
        .build()
        .unwrap();
    let lock = holder
        .try_acquire("precious", &LockOptions::new(Duration::from_secs(30)))
        .await
        .expect("a fresh lock");
    assert!(common::token_everywhere(&nodes, "precious", lock.token()).await);
    // C loses the key (as if the grant had never reached it), so that A and C would make a
    // quorum for a rival once A forgets it.
    common::delete_lock(&nodes, 2, "precious").await;
    nodes.restart(0).unwrap();
    // Let the rival's connections notice the restart and reconnect on their own, if they do.
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The first try may still meet the old connection to A, which fails; the next ones go
    // through a new connection to the new process.
    let mut quarantined = false;
    for _ in 0..3 {
        let err = rival
            .try_acquire("precious", &LockOptions::new(Duration::from_secs(30)))
            .await
            .expect_err("a second holder while the first holds the lock on {A, B} for 30 s");
        assert!(lock.is_valid());
        quarantined |= common::refusal_failures(&err).iter().any(|f| {
            f.node == rival.nodes()[0] && matches!(f.kind, NodeFailureKind::Quarantined(_))
        });
    }
    assert!(quarantined, "A restarted empty, so it must be quarantined");
}

/// With RESP3, redis-rs's connections learn of a disconnect from the server and can be remade
/// without any call failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_under_a_resp3_connection_is_quarantined() {
    let nodes = common::nodes(3);
    let urls: Vec<String> = nodes.urls().iter().map(|u| resp3(u)).collect();
    no_second_holder_after_a_restart(nodes, &urls, &urls).await;
}

/// The same restart seen only through `NOSCRIPT`: the rival reaches A through a proxy that
/// reconnects to the new process behind it and keeps the client's connection open, as some
/// front ends do; only the emptied script cache shows that the server may be new.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_noscript_answer_reads_the_master_again_before_its_vote_counts() {
    let nodes = common::nodes(3);
    let urls = nodes.urls();
    let mut rival_urls = urls.clone();
    rival_urls[0] = reconnecting_proxy(&urls[0]).await;
    no_second_holder_after_a_restart(nodes, &urls, &rival_urls).await;
}

/// A loopback proxy to `url`'s server that, when the server side closes, connects to the
/// server again (logging in with the URL's password) and goes on passing bytes, so that the
/// client's connection survives a restart of the server. Returns the URL to reach it.
async fn reconnecting_proxy(url: &str) -> String {
    let (credentials, target) = common::split_url(url);
    let password = credentials
        .trim_start_matches(':')
        .trim_end_matches('@')
        .to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(pass_across_restarts(
                client,
                target.clone(),
                password.clone(),
            ));
        }
    });
    format!("redis://{credentials}{addr}")
}

async fn pass_across_restarts(client: TcpStream, target: String, password: String) {
    let (mut from_client, mut to_client) = client.into_split();
    let mut first = true;
    let (mut cbuf, mut sbuf) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    // Bounded: a server that stays away for 10 s ends the connection.
    while let Some(server) = connect_within(&target, Duration::from_secs(10)).await {
        let (mut from_server, mut to_server) = server.into_split();
        if !first {
            // The client logged in on the first server; log in on this one for it.
            let auth = format!("AUTH {password}\r\n");
            let mut ok = [0u8; 5];
            if to_server.write_all(auth.as_bytes()).await.is_err()
                || from_server.read_exact(&mut ok).await.is_err()
            {
                continue;
            }
        }
        first = false;
        loop {
            tokio::select! {
                read = from_client.read(&mut cbuf) => match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => if to_server.write_all(&cbuf[..n]).await.is_err() { break },
                },
                read = from_server.read(&mut sbuf) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) => if to_client.write_all(&sbuf[..n]).await.is_err() { return },
                },
            }
        }
    }
}

async fn connect_within(target: &str, limit: Duration) -> Option<TcpStream> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Ok(stream) = TcpStream::connect(target).await {
            return Some(stream);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

/// Masters that close idle connections (their `timeout` setting, `CLIENT KILL`) leave the
/// client's connections to them closed with no call on them to notice. The next call finds
/// them closed and connects anew before it sends: it used to fail on each such master, and
/// with an idle timeout every master closes its connections at about the same time. With
/// quarantine off and on (where a new connection's votes count only once it is read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_the_masters_closed_while_idle_are_made_anew_before_the_next_call() {
    let nodes = common::nodes(3);
    for quarantine in [Duration::ZERO, QUARANTINE] {
        let client = Client::builder()
            .nodes(nodes.urls())
            .quarantine(quarantine)
            .node_timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        let opts = LockOptions::new(Duration::from_secs(10));
        let first = format!("idle-first-{}", quarantine.as_millis());
        client
            .try_acquire(&first, &opts)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        for i in 0..2 {
            let killed: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("normal")
                .arg("SKIPME")
                .arg("yes")
                .query_async(&mut common::raw(&nodes, i).await)
                .await
                .unwrap();
            assert!(
                killed >= 1,
                "node {i}: no connection of the client's was open"
            );
        }
        // The masters' FINs reach the client's sockets.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let name = format!("idle-next-{}", quarantine.as_millis());
        let lock = client
            .try_acquire(&name, &opts)
            .await
            .unwrap_or_else(|e| panic!("quarantine {quarantine:?}: {e}"));
        assert!(common::token_everywhere(&nodes, &name, lock.token()).await);
        lock.release().await.unwrap();
    }
}
