//! The coordinator against clients that misuse it, on a real socket against real redis-server
//! processes: a session's lock changes only through its session, its stream says how long the
//! lock is held in a way a late event cannot stretch, and a client that leaves while it waits
//! (bytes after its request or not) leaves no place and takes no lock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../tests/common/mod.rs"]
mod common;
mod http_common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http_common::read_events;
use redquorum::LockOptions;
use redquorum_cli::server::ConnectionLimits;
use redquorum_testkit::LocalNodes;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn serve(
    nodes: &LocalNodes,
) -> (
    SocketAddr,
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    http_common::spawn_server(common::patient_client(nodes), ConnectionLimits::default()).await
}

/// How many places `name`'s queue has on each node.
async fn places(nodes: &LocalNodes, name: &str) -> usize {
    let mut count = 0;
    for i in 0..nodes.len() {
        let here: usize = redis::cmd("ZCARD")
            .arg(common::queue_key(name))
            .query_async(&mut common::raw(nodes, i).await)
            .await
            .unwrap();
        count += here;
    }
    count
}

/// A `POST` of `body` to `path` on a connection of its own, followed by `trailing` bytes (an
/// old client's `\r\n`, or the next request of a pipeline).
async fn post_raw(addr: SocketAddr, path: &str, body: &Value, trailing: &str) -> TcpStream {
    let body = body.to_string();
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}{trailing}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_hands_out_no_token_and_says_how_long_it_holds() {
    let nodes = common::nodes(3);
    let (addr, stop, task) = serve(&nodes).await;
    let sent = Instant::now();
    let mut stream = reqwest::Client::new()
        .post(format!("http://{addr}/v1/locks/job/session"))
        .json(&json!({"ttl_ms": 900}))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let events = read_events(&mut stream, Duration::from_millis(2_000), |_| false).await;
    assert_eq!(events[0]["event"], "acquired", "{events:?}");
    assert!(events.len() >= 4, "renewed as it went: {events:?}");
    for event in &events {
        // With the token, `/extend` or `/release` could cut the lock behind the session.
        assert!(event.get("token").is_none(), "{event}");
        // The client's deadline (sent + deadline_ms) never passes the lock's end on the
        // masters, as they count it now.
        let deadline = sent + Duration::from_millis(event["deadline_ms"].as_u64().unwrap());
        let validity = event["validity_ms"].as_u64().unwrap();
        assert!(validity <= 900, "{event}");
        assert!(
            deadline > sent + Duration::from_millis(validity / 2),
            "{event}"
        );
    }
    let last =
        sent + Duration::from_millis(events.last().unwrap()["deadline_ms"].as_u64().unwrap());
    let now = Instant::now();
    let mut longest = 0;
    for i in 0..nodes.len() {
        let pttl: i64 = redis::cmd("PTTL")
            .arg(common::lock_key("job"))
            .query_async(&mut common::raw(&nodes, i).await)
            .await
            .unwrap();
        longest = longest.max(pttl);
    }
    let end = now + Duration::from_millis(u64::try_from(longest).unwrap());
    assert!(
        last <= end,
        "the client's deadline is past the lock's end by {:?}",
        last - end
    );
    drop(stream);
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_renewals_stall_keeps_a_heartbeat_with_its_deadline() {
    let nodes = common::nodes(3);
    let (addr, stop, task) = serve(&nodes).await;
    let mut stream = reqwest::Client::new()
        .post(format!("http://{addr}/v1/locks/stalled/session"))
        .json(&json!({"ttl_ms": 1_500}))
        .send()
        .await
        .unwrap();
    let first = read_events(&mut stream, Duration::from_secs(2), |e| !e.is_empty()).await;
    assert_eq!(first[0]["event"], "acquired");
    // A majority silent: each renewal waits out its per-node deadline (1 s), longer than a
    // third of the TTL, so the stream would say nothing meanwhile but for its heartbeat.
    nodes.pause(0).unwrap();
    nodes.pause(1).unwrap();
    let events = read_events(&mut stream, Duration::from_secs(4), |e| {
        e.iter().any(|e| e["event"] == "lost")
    })
    .await;
    nodes.resume(0).unwrap();
    nodes.resume(1).unwrap();
    let beats: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "heartbeat")
        .collect();
    assert!(!beats.is_empty(), "{events:?}");
    for beat in &beats {
        assert!(beat["validity_ms"].as_u64().unwrap() <= 1_500, "{beat}");
        assert!(beat["deadline_ms"].as_u64().is_some(), "{beat}");
    }
    assert_eq!(events.last().unwrap()["event"], "lost", "{events:?}");
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ttl_below_the_floor_is_refused() {
    let nodes = common::nodes(3);
    let (addr, stop, task) = serve(&nodes).await;
    let answer = reqwest::Client::new()
        .post(format!("http://{addr}/v1/locks/short/session"))
        .json(&json!({"ttl_ms": 60}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 400);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"], "invalid_ttl", "{body}");
    assert!(!common::held(&nodes, "short").await);
    stop.cancel();
    task.await.unwrap();
}

/// Waiting requests whose clients leave, with bytes after the request that hide the close
/// from the HTTP layer: each gives up its place and takes no lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_client_that_leaves_takes_nothing_whatever_it_sent_after() {
    let nodes = common::nodes(3);
    let (addr, stop, task) = serve(&nodes).await;
    let holder = common::patient_client(&nodes);
    let waits = [
        (
            "/v1/locks/busy",
            json!({"wait_ms": 30_000, "ttl_ms": 30_000}),
        ),
        (
            "/v1/locks/busy/session",
            json!({"wait_ms": 30_000, "ttl_ms": 30_000}),
        ),
        (
            "/v1/multi",
            json!({"names": ["busy"], "wait_ms": 30_000, "ttl_ms": 30_000}),
        ),
    ];
    for (path, body) in &waits {
        for trailing in ["\r\n", "GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n"] {
            let lock = holder
                .acquire("busy", &LockOptions::new(Duration::from_secs(30)))
                .await
                .unwrap();
            let conn = post_raw(addr, path, body, trailing).await;
            let queued = common::eventually(Duration::from_secs(5), || async {
                places(&nodes, "busy").await > 0
            })
            .await;
            assert!(queued, "{path}: the waiter queued");
            drop(conn);
            // Gone with its client: its place is given back, not refreshed.
            let gone = common::eventually(Duration::from_secs(5), || async {
                places(&nodes, "busy").await == 0
            })
            .await;
            assert!(
                gone,
                "{path} {trailing:?}: a departed client kept its place"
            );
            lock.release().await.unwrap();
            // Nobody was handed the lock: a live client takes it at once.
            let live = reqwest::Client::new()
                .post(format!("http://{addr}/v1/locks/busy"))
                .json(&json!({"ttl_ms": 1_000}))
                .send()
                .await
                .unwrap();
            assert_eq!(
                live.status(),
                200,
                "{path} {trailing:?}: {:?}",
                live.text().await
            );
            let token = live.json::<Value>().await.unwrap()["token"].clone();
            let released = reqwest::Client::new()
                .post(format!("http://{addr}/v1/locks/busy/release"))
                .json(&json!({ "token": token }))
                .send()
                .await
                .unwrap();
            assert_eq!(released.status(), 200);
        }
    }
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_client_that_leaves_with_bytes_unread_ends_it_at_once() {
    let nodes = common::nodes(3);
    let (addr, stop, task) = serve(&nodes).await;
    let mut conn = post_raw(
        addr,
        "/v1/locks/streamed/session",
        &json!({"ttl_ms": 30_000}),
        "\r\n",
    )
    .await;
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !String::from_utf8_lossy(&head).contains("\"acquired\"") {
        let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut chunk))
            .await
            .expect("the session answered")
            .unwrap();
        assert!(n > 0);
        head.extend_from_slice(&chunk[..n]);
    }
    assert!(common::held(&nodes, "streamed").await);
    drop(conn);
    // The next renewal (10 s away) would have found the client gone; the close itself does.
    let released = common::eventually(Duration::from_secs(3), || async {
        !common::held(&nodes, "streamed").await
    })
    .await;
    assert!(released, "the session outlived its client");
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_half_closes_after_its_request_is_answered() {
    let nodes = common::nodes(3);
    let (addr, stop, task) = serve(&nodes).await;
    let mut conn = post_raw(addr, "/v1/locks/half", &json!({"ttl_ms": 5_000}), "").await;
    conn.shutdown().await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), conn.read_to_string(&mut answer))
        .await
        .expect("answered and closed")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"token\""), "{answer}");
    stop.cancel();
    task.await.unwrap();
}
