//! The coordinator against clients that misuse it, on a real socket against real redis-server
//! processes: a session's lock changes only through its session, its stream says how long the
//! lock is held in a way a late event cannot stretch, and a client that leaves while it waits
//! (bytes after its request or not) leaves no place and takes no lock; the API asks for its
//! token before it says which routes exist, and the open probes share their readings.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../tests/common/mod.rs"]
mod common;
mod http_common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use http_common::read_events;
use redquorum::LockOptions;
use redquorum_cli::server::{AppOptions, BearerToken, ConnectionLimits};
use redquorum_testkit::LocalNodes;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower::ServiceExt;

async fn serve(
    nodes: &LocalNodes,
) -> (
    SocketAddr,
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    http_common::spawn_server(common::patient_client(nodes), ConnectionLimits::default()).await
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
                common::places(&nodes, "busy").await.iter().sum::<usize>() > 0
            })
            .await;
            assert!(queued, "{path}: the waiter queued");
            drop(conn);
            // Gone with its client: its place is given back, not refreshed.
            let gone = common::eventually(Duration::from_secs(5), || async {
                common::places(&nodes, "busy").await.iter().all(|n| *n == 0)
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

/// The router on `nodes` with a bearer token.
fn app_with_token(nodes: &LocalNodes) -> axum::Router {
    redquorum_cli::server::app(
        common::patient_client(nodes),
        AppOptions {
            auth: BearerToken::new("s3cret"),
            ..AppOptions::default()
        },
    )
}

/// `(status, error code)` of one request, with the token or without.
async fn status_of(app: &axum::Router, method: &str, uri: &str, token: bool) -> (u16, Value) {
    let mut request = Request::builder().method(method).uri(uri);
    if token {
        request = request.header("authorization", "Bearer s3cret");
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, body["error"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_asks_for_the_token_before_it_says_which_routes_exist() {
    let nodes = common::nodes(3);
    let app = app_with_token(&nodes);
    for (method, uri) in [
        ("GET", "/v1/nothing-here"),
        ("GET", "/v1"),
        ("DELETE", "/v1/locks/job"),
        ("GET", "/v1/multi"),
        ("POST", "/v1/locks/job"),
    ] {
        assert_eq!(
            status_of(&app, method, uri, false).await,
            (401, json!("unauthorized")),
            "{method} {uri}"
        );
    }
    assert_eq!(
        status_of(&app, "GET", "/v1/nothing-here", true).await,
        (404, json!("not_found"))
    );
    assert_eq!(
        status_of(&app, "DELETE", "/v1/locks/job", true).await,
        (405, json!("method_not_allowed"))
    );
    // The probes stay open; so do paths outside the API.
    assert_eq!(status_of(&app, "GET", "/healthz", false).await.0, 200);
    assert_eq!(status_of(&app, "GET", "/readyz", false).await.0, 200);
    assert_eq!(status_of(&app, "GET", "/elsewhere", false).await.0, 404);
}

/// Commands master `i` has processed so far.
async fn commands_processed(nodes: &LocalNodes, i: usize) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut common::raw(nodes, i).await)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_probes_share_one_reading_of_the_masters() {
    let nodes = common::nodes(3);
    let app = app_with_token(&nodes);
    // The client's connections made, so that what is counted is readings.
    assert_eq!(status_of(&app, "GET", "/readyz", false).await.0, 200);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let before = commands_processed(&nodes, 0).await;
    let probes = (0..100).map(|_| status_of(&app, "GET", "/readyz", false));
    let answers = futures::future::join_all(probes).await;
    assert!(answers.iter().all(|(status, _)| *status == 200));
    // The test's own two INFO commands, and one or two readings of a few commands each:
    // never one reading per probe.
    let spent = commands_processed(&nodes, 0).await - before;
    assert!(spent <= 30, "100 probes cost master 0 {spent} commands");
}
