//! Requests through the coordinator's router without a socket, for the HTTP tests of lock
//! kinds and multi-locks, and the coordinator on a real socket.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use redquorum_cli::server::{AppOptions, ConnectionLimits};
use redquorum_testkit::LocalNodes;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The router on a client with a generous per-node deadline (see `common::patient_client`).
pub fn app(client: redquorum::Client) -> Router {
    redquorum_cli::server::app(client, AppOptions::default())
}

/// The coordinator on `client`, on a real loopback socket, with `limits`. It stops when the
/// returned token is cancelled, and the handle is finished once it has.
pub async fn spawn_server(
    client: redquorum::Client,
    limits: ConnectionLimits,
) -> (SocketAddr, CancellationToken, tokio::task::JoinHandle<()>) {
    let server = spawn_server_with(client, AppOptions::default(), limits, None).await;
    (server.addr, server.stop, server.task)
}

/// A coordinator spawned by [`spawn_server_with`].
pub struct Spawned {
    /// The API's address.
    pub addr: SocketAddr,
    /// The metrics listener's, when it has one.
    pub metrics_addr: Option<SocketAddr>,
    /// Cancelled, stops the server.
    pub stop: CancellationToken,
    /// Finished once the server has stopped.
    pub task: tokio::task::JoinHandle<()>,
}

/// The coordinator on `client` with `options` (its shutdown token replaced by the server's)
/// and `limits`, on a loopback socket, and `metrics` on a listener of its own when given.
pub async fn spawn_server_with(
    client: redquorum::Client,
    options: AppOptions,
    limits: ConnectionLimits,
    metrics: Option<Router>,
) -> Spawned {
    let sessions = CancellationToken::new();
    let router = redquorum_cli::server::app(
        client,
        AppOptions {
            shutdown: sessions.clone(),
            ..options
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut metrics_addr = None;
    let mut metrics_side = None;
    if let Some(metrics) = metrics {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        metrics_addr = Some(listener.local_addr().unwrap());
        metrics_side = Some((listener, metrics));
    }
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let task = tokio::spawn(redquorum_cli::server::serve(
        listener,
        router,
        metrics_side,
        sessions,
        async move {
            stopped.cancelled().await;
        },
        limits,
    ));
    Spawned {
        addr,
        metrics_addr,
        stop,
        task,
    }
}

/// A `POST` of `body` to `path` on the server at `addr`: (status, JSON body, or `Null`).
pub async fn post_to(addr: SocketAddr, path: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// One request: (status, JSON body, or `Null` when the body is not JSON).
pub async fn call(
    app: &Router,
    method: &str,
    uri: &str,
    body: impl Into<Body>,
) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap();
    let response = app.clone().oneshot(req).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

pub async fn post(app: &Router, uri: &str, body: Value) -> (StatusCode, Value) {
    call(app, "POST", uri, body.to_string()).await
}

pub async fn get(app: &Router, uri: &str) -> (StatusCode, Value) {
    call(app, "GET", uri, Body::empty()).await
}

/// The token in an answer, which must be a 200 with one.
pub fn token(answer: &(StatusCode, Value)) -> String {
    assert_eq!(answer.0, StatusCode::OK, "{}", answer.1);
    answer.1["token"].as_str().expect("a token").to_owned()
}

/// The error code of an answer, with its status.
pub fn error(answer: &(StatusCode, Value)) -> (u16, &str) {
    (answer.0.as_u16(), answer.1["error"].as_str().unwrap_or(""))
}

/// The members of the sorted set `key` on node `i` (a read-write lock's or a semaphore's
/// holders, and its records).
pub async fn members(nodes: &LocalNodes, i: usize, key: &str) -> Vec<String> {
    let mut conn = redis::Client::open(nodes.url(i))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// What `read` reads once two readings 100 ms apart agree (up to 2 s): an operation answers
/// once a quorum of masters did, and a slow master may still be applying it.
pub async fn settled<T, F, Fut>(mut read: F) -> T
where
    T: PartialEq,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut last = read().await;
    for _ in 0..20 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let now = read().await;
        if now == last {
            break;
        }
        last = now;
    }
    last
}

/// A client on `nodes` (see `common::patient_client`) once every master carries the deployment
/// marker. The first acquire on fresh masters marks them as they answer "unmarked", and a
/// master that answers after the vote was decided misses that acquire's grant; tests that look
/// at every master start from marked ones.
pub async fn marked_client(nodes: &LocalNodes) -> redquorum::Client {
    let client = crate::common::patient_client(nodes);
    let opts = redquorum::LockOptions::new(std::time::Duration::from_secs(1));
    client
        .try_acquire("warm-up", &opts)
        .await
        .expect("a first lock")
        .release()
        .await
        .expect("released");
    let marked = crate::common::eventually(std::time::Duration::from_secs(5), || async {
        for i in 0..nodes.len() {
            let mut conn = crate::common::raw(nodes, i).await;
            let exists: bool = redis::cmd("EXISTS")
                .arg("redquorum:deployment")
                .query_async(&mut conn)
                .await
                .unwrap();
            if !exists {
                return false;
            }
        }
        true
    })
    .await;
    assert!(marked, "the masters were not marked");
    client
}

/// The value of the Prometheus series whose line in `text` starts with `prefix` (name and
/// labels).
pub fn metric_value(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Reads NDJSON events from a streaming response until `stop` says so or `limit` passes.
pub async fn read_events(
    response: &mut reqwest::Response,
    limit: Duration,
    mut stop: impl FnMut(&[Value]) -> bool,
) -> Vec<Value> {
    let mut events = Vec::new();
    let mut pending = Vec::new();
    let end = Instant::now() + limit;
    while Instant::now() < end && !stop(&events) {
        let Ok(chunk) = tokio::time::timeout_at(end.into(), response.chunk()).await else {
            break;
        };
        let Some(chunk) = chunk.unwrap() else { break };
        pending.extend_from_slice(&chunk);
        while let Some(pos) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=pos).collect();
            events.push(serde_json::from_slice(&line).unwrap());
        }
    }
    events
}
