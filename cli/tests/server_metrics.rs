//! `/metrics` after real traffic: the documented series, with values that match the traffic.
//! In a file of its own because the Prometheus recorder is global to the process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The harness the library's tests use (local masters, test-tuned clients), shared as is.
#[path = "../../tests/common/mod.rs"]
mod common;
mod http_common;

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use http_common::metric_value as value;
use redquorum_cli::server::AppOptions;
use serde_json::json;
use tower::ServiceExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_the_traffic() {
    // The recorder goes in before the client is built, as the service does.
    let handle = redquorum_cli::server::install_metrics().expect("recorder installed");
    let nodes = common::nodes(3);
    let app = redquorum_cli::server::app(
        common::patient_client(&nodes),
        AppOptions {
            metrics: Some(handle),
            ..AppOptions::default()
        },
    );
    let send = |method: &str, uri: &str, body: String| {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::from(body))
            .unwrap();
        let app = app.clone();
        async move {
            let r = app.oneshot(req).await.unwrap();
            let status = r.status();
            (status, r.into_body().collect().await.unwrap().to_bytes())
        }
    };
    // Other kinds are counted under their own kind: two readers, one extended, one released;
    // a permit of a semaphore, released. (First: a release answers once a quorum did, and the
    // last node's answer is counted soon after.)
    let mut read_tokens = Vec::new();
    for _ in 0..2 {
        let (status, body) = send("POST", "/v1/locks/shelf", r#"{"kind": "read"}"#.into()).await;
        assert_eq!(status, 200);
        let body = serde_json::from_slice::<serde_json::Value>(&body).unwrap();
        read_tokens.push(body["token"].clone());
    }
    let (status, _) = send(
        "POST",
        "/v1/locks/shelf/extend",
        json!({"kind": "read", "token": read_tokens[0], "ttl_ms": 20_000}).to_string(),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = send(
        "POST",
        "/v1/locks/shelf/release",
        json!({"kind": "read", "token": read_tokens[1]}).to_string(),
    )
    .await;
    assert_eq!(status, 200);
    let (status, body) = send(
        "POST",
        "/v1/locks/pool",
        r#"{"kind": "semaphore", "permits": 2}"#.into(),
    )
    .await;
    assert_eq!(status, 200);
    let token = serde_json::from_slice::<serde_json::Value>(&body).unwrap()["token"].clone();
    let (status, _) = send(
        "POST",
        "/v1/locks/pool/release",
        json!({"kind": "semaphore", "permits": 2, "token": token}).to_string(),
    )
    .await;
    assert_eq!(status, 200);

    for i in 0..5 {
        let (status, body) = send("POST", &format!("/v1/locks/m{i}"), "{}".into()).await;
        assert_eq!(status, 200);
        let token = serde_json::from_slice::<serde_json::Value>(&body).unwrap()["token"].clone();
        let (status, _) = send(
            "POST",
            &format!("/v1/locks/m{i}/release"),
            json!({"token": token}).to_string(),
        )
        .await;
        assert_eq!(status, 200);
    }
    let (held, _) = send("POST", "/v1/locks/busy", "{}".into()).await;
    assert_eq!(held, 200);
    let (refused, _) = send("POST", "/v1/locks/busy", "{}".into()).await;
    assert_eq!(refused, 409);
    let (bad, _) = send("POST", "/v1/locks/x", r#"{"ttl_ms": 0}"#.into()).await;
    assert_eq!(bad, 400);
    // Methods of the clients' own making are counted under one label, not one each.
    for i in 0..3 {
        let (status, _) = send(&format!("BOGUS{i}"), "/healthz", String::new()).await;
        assert_eq!(status, 405);
    }
    let (status, body) = send("GET", "/metrics", String::new()).await;
    assert_eq!(status, 200);
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert!(!text.contains("BOGUS"), "{text}");
    assert_eq!(
        value(
            &text,
            r#"redquorum_http_requests_total{route="/healthz",method="other",status="405"}"#
        ),
        Some(3.0),
        "{text}"
    );
    let route = r#"route="/v1/locks/{name}",method="POST""#;
    assert_eq!(
        value(
            &text,
            &format!(r#"redquorum_http_requests_total{{{route},status="200"}}"#)
        ),
        Some(9.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            &format!(r#"redquorum_http_requests_total{{{route},status="409"}}"#)
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            &format!(r#"redquorum_http_requests_total{{{route},status="400"}}"#)
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            r#"redquorum_http_requests_total{route="/v1/locks/{name}/release",method="POST",status="200"}"#
        ),
        Some(7.0)
    );
    // Latency histograms with sub-millisecond buckets; counts match the traffic.
    assert!(
        text.contains(
            r#"redquorum_acquire_duration_seconds_bucket{kind="mutex",outcome="acquired",le="0.0005"}"#
        ),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            r#"redquorum_acquire_duration_seconds_count{kind="mutex",outcome="acquired"}"#
        ),
        Some(6.0)
    );
    assert_eq!(
        value(
            &text,
            r#"redquorum_acquire_duration_seconds_count{kind="mutex",outcome="contended"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            r#"redquorum_acquire_duration_seconds_count{kind="mutex",outcome="invalid_argument"}"#
        ),
        Some(1.0)
    );
    let sum = value(
        &text,
        r#"redquorum_acquire_duration_seconds_sum{kind="mutex",outcome="acquired"}"#,
    )
    .unwrap();
    assert!(
        sum > 0.0 && sum < 6.0,
        "six loopback acquires took {sum}s in all"
    );
    for node in common::client(&nodes).nodes() {
        let requests = value(
            &text,
            &format!(
                r#"redquorum_node_request_duration_seconds_count{{node="{node}",operation="release"}}"#
            ),
        );
        // Seven releases (five of mutexes, a reader's and a permit's) reach every node; the
        // refused acquire also releases on any node that had not said "held" when the vote
        // was decided.
        let requests = requests.unwrap();
        assert!(
            (7.0..=8.0).contains(&requests),
            "{node}: {requests} releases"
        );
        assert_eq!(
            value(&text, &format!(r#"redquorum_node_up{{node="{node}"}}"#)),
            Some(1.0)
        );
        assert_eq!(
            value(
                &text,
                &format!(r#"redquorum_node_quarantined{{node="{node}"}}"#)
            ),
            Some(0.0)
        );
        assert_eq!(
            value(
                &text,
                &format!(r#"redquorum_node_durable{{node="{node}"}}"#)
            ),
            Some(0.0)
        );
    }
    assert_eq!(
        value(
            &text,
            r#"redquorum_releases_total{kind="mutex",outcome="released"}"#
        ),
        Some(5.0)
    );
    assert_eq!(
        value(
            &text,
            r#"redquorum_acquire_duration_seconds_count{kind="read",outcome="acquired"}"#
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            r#"redquorum_acquire_duration_seconds_count{kind="semaphore",outcome="acquired"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            r#"redquorum_extensions_total{kind="read",outcome="extended"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            r#"redquorum_releases_total{kind="read",outcome="released"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            r#"redquorum_releases_total{kind="semaphore",outcome="released"}"#
        ),
        Some(1.0)
    );
    // Every series of the lock metrics says its kind, and only a kind of lock.
    let lock_metrics = [
        "redquorum_acquire_duration_seconds",
        "redquorum_extensions_total",
        "redquorum_releases_total",
        "redquorum_locks_held",
    ];
    let kinds = ["mutex", "reentrant", "read", "write", "semaphore"];
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        if lock_metrics.iter().any(|m| line.starts_with(m)) {
            assert!(
                kinds
                    .iter()
                    .any(|k| line.contains(&format!(r#"kind="{k}""#))),
                "no lock kind: {line}"
            );
        }
    }
    for kind in ["mutex", "read", "semaphore"] {
        assert_eq!(
            value(&text, &format!(r#"redquorum_locks_held{{kind="{kind}"}} "#)),
            Some(0.0),
            "HTTP callers hold their locks, not the server"
        );
    }
    assert!(text.contains("# TYPE redquorum_acquire_duration_seconds histogram"));
    assert!(
        !text.contains("m0") && !text.contains("busy") && !text.contains("shelf"),
        "lock names must never be labels"
    );
}
