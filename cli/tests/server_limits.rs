//! The coordinator's limits, on a real socket against real redis-server processes: past each,
//! a request (or a connection) is refused at once with its code, counted in
//! `redquorum_http_refused_total`, and what is under way goes on. In a file of its own because
//! the Prometheus recorder is global to the process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../tests/common/mod.rs"]
mod common;
mod http_common;

use std::net::SocketAddr;
use std::time::Duration;

use http_common::{metric_value, post_to, read_events};
use metrics_exporter_prometheus::PrometheusHandle;
use redquorum::LockOptions;
use redquorum_cli::server::{AppOptions, ConnectionLimits, ServiceLimits};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn refused(handle: &PrometheusHandle, limit: &str) -> f64 {
    let text = handle.render();
    metric_value(
        &text,
        &format!(r#"redquorum_http_refused_total{{limit="{limit}"}} "#),
    )
    .unwrap_or_else(|| panic!("no series for {limit}: {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_limit_refuses_at_once_with_its_code_and_is_counted() {
    let handle = redquorum_cli::server::install_metrics().expect("recorder installed");
    let nodes = common::nodes(3);
    let limits = ServiceLimits {
        sessions: 1,
        waiting: 2,
        waiting_per_name: 1,
    };
    let connections = ConnectionLimits {
        max_connections: 6,
        ..ConnectionLimits::default()
    };
    let server = http_common::spawn_server_with(
        common::patient_client(&nodes),
        AppOptions {
            limits,
            ..AppOptions::default()
        },
        connections,
        None,
    )
    .await;
    let (addr, stop, task) = (server.addr, server.stop, server.task);
    // There from the start, at 0 (connections aside: the other test of this file may have
    // refused some already).
    for limit in ["sessions", "waiting", "waiting_per_name"] {
        assert_eq!(refused(&handle, limit), 0.0, "{limit}");
    }
    let connections_refused = refused(&handle, "connections");

    // Sessions: one open, the next refused; the first goes on.
    let mut session = reqwest::Client::new()
        .post(format!("http://{addr}/v1/locks/kept/session"))
        .json(&json!({"ttl_ms": 2_000}))
        .send()
        .await
        .unwrap();
    let first = read_events(&mut session, Duration::from_secs(2), |e| !e.is_empty()).await;
    assert_eq!(first[0]["event"], "acquired");
    let (status, body) = post_to(addr, "/v1/locks/other/session", json!({"ttl_ms": 2_000})).await;
    assert_eq!(
        (status, &body["error"]),
        (503, &json!("too_many_sessions")),
        "{body}"
    );
    assert!(
        !common::held(&nodes, "other").await,
        "a refused session took nothing"
    );
    assert_eq!(refused(&handle, "sessions"), 1.0);
    drop(session);

    // Waiting acquires: one per name, two in all. Held names make them wait.
    let holder = common::patient_client(&nodes);
    let opts = LockOptions::new(Duration::from_secs(30));
    let held_a = holder.acquire("a", &opts).await.unwrap();
    let held_b = holder.acquire("b", &opts).await.unwrap();
    let waiting = json!({"wait_ms": 20_000, "ttl_ms": 1_000});
    let on_a = tokio::spawn(post_to(addr, "/v1/locks/a", waiting.clone()));
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            common::places(&nodes, "a").await.iter().sum::<usize>() > 0
        })
        .await
    );
    let (status, body) = post_to(addr, "/v1/locks/a", waiting.clone()).await;
    assert_eq!(
        (status, &body["error"]),
        (429, &json!("too_many_waiting_for_name")),
        "{body}"
    );
    assert_eq!(refused(&handle, "waiting_per_name"), 1.0);
    // One that does not wait is not limited: it is answered, contended.
    let (status, body) = post_to(addr, "/v1/locks/a", json!({})).await;
    assert_eq!(
        (status, &body["error"]),
        (409, &json!("contended")),
        "{body}"
    );
    let on_b = tokio::spawn(post_to(
        addr,
        "/v1/multi",
        json!({"names": ["b"], "wait_ms": 20_000}),
    ));
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            common::places(&nodes, "b").await.iter().sum::<usize>() > 0
        })
        .await
    );
    let (status, body) = post_to(addr, "/v1/locks/c", waiting.clone()).await;
    assert_eq!(
        (status, &body["error"]),
        (503, &json!("too_many_waiting")),
        "{body}"
    );
    assert_eq!(refused(&handle, "waiting"), 1.0);
    // The waiters admitted get their locks when they are released.
    held_a.release().await.unwrap();
    held_b.release().await.unwrap();
    assert_eq!(on_a.await.unwrap().0, 200);
    assert_eq!(on_b.await.unwrap().0, 200);
    // Their places are free again.
    let (status, body) = post_to(addr, "/v1/locks/c", json!({"wait_ms": 1_000})).await;
    assert_eq!(status, 200, "{body}");

    // Connections: up to six served at once; one more is answered 503 and closed at once.
    let mut open = Vec::new();
    let mut refusal = None;
    for _ in 0..20 {
        let mut conn = TcpStream::connect(addr).await.unwrap();
        conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        let mut answer = vec![0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut answer))
            .await
            .expect("answered")
            .unwrap();
        let answer = String::from_utf8_lossy(&answer[..n]).into_owned();
        if answer.starts_with("HTTP/1.1 503") {
            refusal = Some(answer);
            break;
        }
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        open.push(conn);
    }
    let refusal = refusal.expect("a connection past the limit is refused");
    assert!(refusal.contains("too_many_connections"), "{refusal}");
    assert!(open.len() <= 6, "{} connections served", open.len());
    assert!(refused(&handle, "connections") > connections_refused);
    drop(open);
    stop.cancel();
    task.await.unwrap();
}

/// With the API's connections at their limit, the probes still answer on the metrics
/// listener, which has connections of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probes_answer_on_the_metrics_listener_when_the_api_is_full() {
    let handle = redquorum_cli::server::install_metrics().expect("recorder installed");
    let nodes = common::nodes(3);
    let client = common::patient_client(&nodes);
    let side = redquorum_cli::server::metrics_router(handle, client.clone());
    let limits = ConnectionLimits {
        max_connections: 2,
        ..ConnectionLimits::default()
    };
    let server =
        http_common::spawn_server_with(client, AppOptions::default(), limits, Some(side)).await;
    let (api_addr, stop, task) = (server.addr, server.stop, server.task);
    let metrics_addr = server.metrics_addr.unwrap();
    // The API full: two idle connections, served (each answered once).
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut conn = TcpStream::connect(api_addr).await.unwrap();
        conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        let mut answer = vec![0u8; 512];
        let n = conn.read(&mut answer).await.unwrap();
        assert!(answer[..n].starts_with(b"HTTP/1.1 200"));
        open.push(conn);
    }
    let (status, _) = get(api_addr, "/healthz").await;
    assert_eq!(status, 503, "the API is full");
    for path in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(get(metrics_addr, path).await.0, 200, "{path}");
    }
    drop(open);
    stop.cancel();
    task.await.unwrap();
}

/// One `GET` on a connection of its own: the status and the body.
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    conn.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), conn.read_to_string(&mut answer))
        .await
        .expect("answered")
        .unwrap();
    let status = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, answer)
}
