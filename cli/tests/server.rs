//! The HTTP coordinator: through the router without a socket, and through a real socket,
//! against real redis-server processes.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop
)]

// The harness the library's tests use (local masters, test-tuned clients), shared as is.
#[path = "../../tests/common/mod.rs"]
mod common;
mod http_common;

use http_common::read_events;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use redquorum::Client;
use redquorum_cli::server::{AppOptions, BearerToken, ConnectionLimits};
use redquorum_testkit::LocalNodes;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

fn client(nodes: &LocalNodes) -> Client {
    common::patient_client(nodes)
}

fn app(nodes: &LocalNodes, auth: Option<&str>) -> Router {
    redquorum_cli::server::app(
        client(nodes),
        AppOptions {
            auth: auth.and_then(BearerToken::new),
            ..AppOptions::default()
        },
    )
}

/// One request through the router, no socket: (status, JSON body).
async fn call(
    app: &Router,
    method: &str,
    uri: &str,
    body: impl Into<Body>,
    token: Option<&str>,
) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let response = app
        .clone()
        .oneshot(req.body(body.into()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    };
    (status, value)
}

async fn post(app: &Router, uri: &str, body: Value) -> (StatusCode, Value) {
    call(app, "POST", uri, body.to_string(), None).await
}

/// Waits until the probes' shared reading of the masters (at most a second old) has aged out,
/// so that the next `/readyz` reads the masters as they are now.
async fn a_fresh_reading_is_due() {
    tokio::time::sleep(Duration::from_millis(1_100)).await;
}

/// A server on a real loopback socket, with the default connection limits; cancelled (and
/// awaited) by the returned token and handle.
async fn spawn_server(
    nodes: &LocalNodes,
) -> (SocketAddr, CancellationToken, tokio::task::JoinHandle<()>) {
    http_common::spawn_server(client(nodes), ConnectionLimits::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_extend_release_and_inspect_without_a_socket() {
    let nodes = common::nodes(3);
    let app = app(&nodes, None);
    let (status, body) = post(
        &app,
        "/v1/locks/report",
        json!({"ttl_ms": 10_000, "owner": "cron@web1"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let token = body["token"].as_str().unwrap().to_owned();
    let fence = body["fence"].as_u64().unwrap();
    assert_eq!(body["name"], "report");
    assert_eq!(body["owner"], "cron@web1");
    assert_eq!(body["ttl_ms"], 10_000);
    assert!(body["validity_ms"].as_u64().unwrap() > 9_000);
    assert!(body["expires_at"].as_str().unwrap().ends_with('Z'));
    assert!(common::token_everywhere(&nodes, "report", &token).await);

    let (status, info) = call(&app, "GET", "/v1/locks/report", Body::empty(), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(info["held"], true);
    assert_eq!(info["nodes"].as_array().unwrap().len(), 3);
    assert!(info["nodes"][0]["ttl_ms"].as_u64().unwrap() > 9_000);
    assert!(
        !info.to_string().contains(&token),
        "inspect must never show the token"
    );

    let (status, body) = post(
        &app,
        "/v1/locks/report/extend",
        json!({"token": token, "ttl_ms": 60_000}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["fence"].as_u64(),
        Some(fence),
        "extending keeps the fencing token"
    );
    assert!(body.get("token").is_none());
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            common::pttl(&nodes, 2, "report").await > 50_000
        })
        .await
    );

    let (status, body) = post(&app, "/v1/locks/report/release", json!({"token": token})).await;
    assert_eq!((status, &body["released"]), (StatusCode::OK, &json!(true)));
    let (_, info) = call(&app, "GET", "/v1/locks/report", Body::empty(), None).await;
    assert_eq!(info["held"], false);
    // Names travel percent-encoded in the path, slashes and all.
    let (status, body) = post(&app, "/v1/locks/deploy%2Fprod%20eu", json!({})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["name"], "deploy/prod eu");
    // Unfair waiting is asked for per acquire; a held lock still refuses an unfair caller.
    let (status, body) = post(&app, "/v1/locks/barging", json!({"fair": false})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = post(&app, "/v1/locks/barging", json!({"fair": false})).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("contended"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_wrong_tokens_and_waits_over_a_socket() {
    let nodes = common::nodes(3);
    let (addr, stop, task) = spawn_server(&nodes).await;
    let http = reqwest::Client::new();
    let url = |p: &str| format!("http://{addr}{p}");
    let a: Value = http
        .post(url("/v1/locks/shared"))
        .json(&json!({"ttl_ms": 5_000}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = a["token"].as_str().unwrap().to_owned();
    assert!(common::token_everywhere(&nodes, "shared", &token).await);
    let pttl_before = common::pttl(&nodes, 0, "shared").await;

    // A second client is refused at once, and after waiting.
    let r = http
        .post(url("/v1/locks/shared"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "contended");
    assert!(body["holders"].as_u64().unwrap() >= 2);
    assert_eq!(body["reserved"], 0, "{body}");
    // Held on all three masters: those not waited for make up the rest.
    assert_eq!(
        body["holders"].as_u64().unwrap() + body["unheard"].as_u64().unwrap(),
        3,
        "{body}"
    );
    let started = Instant::now();
    let r = http
        .post(url("/v1/locks/shared"))
        .json(&json!({"wait_ms": 300}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "gave up before the wait ran out"
    );

    // Wrong tokens change nothing.
    let r = http
        .post(url("/v1/locks/shared/extend"))
        .json(&json!({"token": "0".repeat(32), "ttl_ms": 60_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "not_held");
    let r = http
        .post(url("/v1/locks/shared/release"))
        .json(&json!({"token": "0".repeat(32)}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "not_held");
    for i in 0..3 {
        assert_eq!(
            common::stored_token(&nodes, i, "shared").await.as_deref(),
            Some(token.as_str())
        );
    }
    assert!(common::pttl(&nodes, 0, "shared").await <= pttl_before);

    // Once released, a waiting client gets it: handed over by the release itself, as to any
    // waiter of the library.
    let waiter = {
        let http = http.clone();
        let u = url("/v1/locks/shared");
        tokio::spawn(async move {
            let r = http
                .post(u)
                .json(&json!({"wait_ms": 5_000}))
                .send()
                .await
                .unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = http
        .post(url("/v1/locks/shared/release"))
        .json(&json!({"token": token}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (status, body) = waiter.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let handed = body["token"].as_str().unwrap();
    assert!(handed.contains('/'), "not handed over: {body}");
    assert!(common::token_on_quorum(&nodes, "shared", handed).await);
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_down_is_503_and_readyz_recovers() {
    let mut nodes = common::nodes(3);
    let (addr, stop, task) = spawn_server(&nodes).await;
    let http = reqwest::Client::new();
    let url = |p: &str| format!("http://{addr}{p}");
    assert_eq!(http.get(url("/readyz")).send().await.unwrap().status(), 200);
    nodes.kill(0).unwrap();
    nodes.kill(1).unwrap();
    let r = http
        .post(url("/v1/locks/down"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "quorum_unavailable");
    assert_eq!(body["failures"].as_array().unwrap().len(), 2);
    a_fresh_reading_is_due().await;
    let r = http.get(url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        (body["ready"].clone(), body["usable"].clone()),
        (json!(false), json!(1))
    );
    assert_eq!(
        http.get(url("/healthz")).send().await.unwrap().status(),
        200,
        "the process is still up"
    );

    nodes.restart(0).unwrap();
    nodes.restart(1).unwrap();
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            http.get(url("/readyz")).send().await.unwrap().status() == 200
        })
        .await
    );
    let r = http
        .post(url("/v1/locks/down"))
        .json(&json!({"wait_ms": 2_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_get_their_documented_status_and_code_and_change_nothing() {
    let nodes = common::nodes(3);
    let app = app(&nodes, None);
    // A lock held by someone, to check that wrong-token calls leave it alone.
    let (_, held) = post(&app, "/v1/locks/held", json!({"ttl_ms": 30_000})).await;
    let token = held["token"].as_str().unwrap().to_owned();
    assert!(common::token_everywhere(&nodes, "held", &token).await);
    let long_name = "n".repeat(600);
    let huge_body = format!("{{\"owner\": \"{}\"}}", "x".repeat(20_000));
    let cases: Vec<(&str, String, String, u16, &str)> = vec![
        ("POST", "/v1/locks/".into(), "{}".into(), 404, "not_found"),
        // An empty name is refused before the body's fields are looked at.
        (
            "POST",
            "/v1/locks//extend".into(),
            "{}".into(),
            400,
            "invalid_name",
        ),
        (
            "POST",
            "/v1/locks//extend".into(),
            r#"{"token": 12, "ttl_ms": 0}"#.into(),
            400,
            "invalid_name",
        ),
        (
            "POST",
            "/v1/locks//release".into(),
            "{}".into(),
            400,
            "invalid_name",
        ),
        // So is a name too long.
        (
            "POST",
            format!("/v1/locks/{long_name}/extend"),
            "{}".into(),
            400,
            "invalid_name",
        ),
        (
            "POST",
            "/v1/locks//session".into(),
            r#"{"ttl_ms": 5}"#.into(),
            400,
            "invalid_name",
        ),
        (
            "POST",
            format!("/v1/locks/{long_name}"),
            "{}".into(),
            400,
            "invalid_name",
        ),
        (
            "POST",
            "/v1/locks/%FF%FE".into(),
            "{}".into(),
            400,
            "invalid_name",
        ),
        (
            "POST",
            "/v1/locks/x".into(),
            r#"{"ttl_ms": 0}"#.into(),
            400,
            "invalid_ttl",
        ),
        (
            "POST",
            "/v1/locks/x".into(),
            r#"{"ttl_ms": 100000000000}"#.into(),
            400,
            "invalid_ttl",
        ),
        (
            "POST",
            "/v1/locks/x".into(),
            r#"{"ttl_ms": "30s"}"#.into(),
            400,
            "invalid_ttl",
        ),
        (
            "POST",
            "/v1/locks/x".into(),
            r#"{"ttl_ms": 1.5}"#.into(),
            400,
            "invalid_ttl",
        ),
        (
            "POST",
            "/v1/locks/x".into(),
            r#"{"wait_ms": -1}"#.into(),
            400,
            "invalid_wait",
        ),
        (
            "POST",
            "/v1/locks/x".into(),
            r#"{"wait_ms": "soon"}"#.into(),
            400,
            "invalid_wait",
        ),
        (
            "POST",
            "/v1/locks/x".into(),
            r#"{"wait_ms": 86400000}"#.into(),
            400,
            "invalid_wait",
        ),
        (
            "POST",
            "/v1/locks/x".into(),
            r#"{"owner": 7}"#.into(),
            400,
            "invalid_owner",
        ),
        (
            "POST",
            "/v1/locks/x".into(),
            format!(r#"{{"owner": "{}"}}"#, "o".repeat(200)),
            400,
            "invalid_owner",
        ),
        (
            "POST",
            "/v1/locks/x".into(),
            r#"{"fair": "yes"}"#.into(),
            400,
            "invalid_fair",
        ),
        (
            "POST",
            "/v1/locks/x".into(),
            r#"{"ttl_ms": 1000,"#.into(),
            400,
            "invalid_json",
        ),
        (
            "POST",
            "/v1/locks/x".into(),
            "[1, 2]".into(),
            400,
            "invalid_json",
        ),
        (
            "POST",
            "/v1/locks/x".into(),
            r#"{"ttl": 1000}"#.into(),
            400,
            "unknown_field",
        ),
        // A field named twice is refused, not read as its last value: the held lock's own
        // token, given last, must not release it.
        (
            "POST",
            "/v1/locks/x".into(),
            r#"{"ttl_ms": 10000, "ttl_ms": 20}"#.into(),
            400,
            "invalid_json",
        ),
        (
            "POST",
            "/v1/locks/held/release".into(),
            format!(r#"{{"token": "{}", "token": "{token}"}}"#, "f".repeat(32)),
            400,
            "invalid_json",
        ),
        (
            "POST",
            "/v1/multi/release".into(),
            format!(
                r#"{{"tokens": {{"held": "{}", "held": "{token}"}}}}"#,
                "f".repeat(32)
            ),
            400,
            "invalid_json",
        ),
        // Fields go in the body: one given in the query would be ignored without a word.
        (
            "POST",
            "/v1/locks/x?ttl_ms=100".into(),
            "{}".into(),
            400,
            "unknown_field",
        ),
        (
            "POST",
            "/v1/locks/held/extend?ttl_ms=60000".into(),
            format!(r#"{{"token": "{token}"}}"#),
            400,
            "unknown_field",
        ),
        (
            "POST",
            format!("/v1/locks/held/release?token={token}"),
            "{}".into(),
            400,
            "unknown_field",
        ),
        (
            "POST",
            "/v1/multi?wait_ms=1000".into(),
            r#"{"names": ["x"]}"#.into(),
            400,
            "unknown_field",
        ),
        (
            "POST",
            "/v1/locks/x".into(),
            huge_body,
            413,
            "body_too_large",
        ),
        (
            "POST",
            "/v1/locks/x/session".into(),
            r#"{"ttl_ms": 5}"#.into(),
            400,
            "invalid_ttl",
        ),
        (
            "POST",
            "/v1/locks/held/extend".into(),
            "{}".into(),
            400,
            "invalid_token",
        ),
        (
            "POST",
            "/v1/locks/held/extend".into(),
            format!(r#"{{"token": "{}"}}"#, "t".repeat(200)),
            400,
            "invalid_token",
        ),
        (
            "POST",
            "/v1/locks/held/extend".into(),
            format!(r#"{{"token": "{token}", "ttl_ms": 0}}"#),
            400,
            "invalid_ttl",
        ),
        (
            "POST",
            "/v1/locks/held/extend".into(),
            r#"{"token": "wrong-token"}"#.into(),
            400,
            "invalid_token",
        ),
        (
            "POST",
            "/v1/locks/held/release".into(),
            r#"{"token": "wrong-token"}"#.into(),
            400,
            "invalid_token",
        ),
        (
            "POST",
            "/v1/locks/held/extend".into(),
            format!(r#"{{"token": "{}"}}"#, "f".repeat(32)),
            409,
            "not_held",
        ),
        (
            "POST",
            "/v1/locks/held/release".into(),
            format!(r#"{{"token": "{}"}}"#, "f".repeat(32)),
            409,
            "not_held",
        ),
        // On a free lock, a release with a well-formed token counts as released; one of a
        // shape never handed out is refused.
        (
            "POST",
            "/v1/locks/free/release".into(),
            r#"{"token": "abc"}"#.into(),
            400,
            "invalid_token",
        ),
        (
            "POST",
            "/v1/locks/held/release".into(),
            r#"{"token": 12}"#.into(),
            400,
            "invalid_token",
        ),
        (
            "PUT",
            "/v1/locks/x".into(),
            "{}".into(),
            405,
            "method_not_allowed",
        ),
        (
            "GET",
            "/v2/anything".into(),
            String::new(),
            404,
            "not_found",
        ),
    ];
    for (method, uri, body, status, code) in &cases {
        let (got, answer) = call(&app, method, uri, body.clone(), None).await;
        assert_eq!(got.as_u16(), *status, "{method} {uri} {body:.60}: {answer}");
        assert_eq!(
            answer["error"], *code,
            "{method} {uri} {body:.60}: {answer}"
        );
        assert!(
            !answer["message"].as_str().unwrap_or("").is_empty(),
            "{answer}"
        );
    }
    // Nothing but the held lock, its fencing counter and its slot's floor (and the deployment's
    // marker, the process it was made for, the latest expiry and the longest TTL) exists; no
    // other lock or fencing counter was written.
    for i in 0..3 {
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut common::raw(&nodes, i).await)
            .await
            .unwrap();
        keys.sort();
        assert_eq!(
            keys,
            [
                "redquorum:deployment",
                "redquorum:fence-floor:3823",
                "redquorum:fence:held",
                "redquorum:latest-expiry",
                "redquorum:lock:held",
                "redquorum:longest-ttl",
                "redquorum:marked-run",
            ],
            "node {i}"
        );
        assert_eq!(
            common::stored_token(&nodes, i, "held").await.as_deref(),
            Some(token.as_str())
        );
        assert!(common::pttl(&nodes, i, "held").await <= 30_000);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_percent_without_two_hex_digits_is_an_invalid_name_on_every_route() {
    let nodes = common::nodes(3);
    let app = app(&nodes, None);
    for bad in ["%2", "a%", "%zz", "%%41", "x%2Fy%"] {
        for (method, suffix) in [
            ("POST", ""),
            ("GET", ""),
            ("POST", "/extend"),
            ("POST", "/release"),
            ("POST", "/session"),
        ] {
            let uri = format!("/v1/locks/{bad}{suffix}");
            let (status, answer) = call(&app, method, &uri, "{}", None).await;
            assert_eq!(
                (status, &answer["error"]),
                (StatusCode::BAD_REQUEST, &json!("invalid_name")),
                "{method} {uri}: {answer}"
            );
        }
    }
    // No lock "%2" was taken above: `%252` is its one spelling, and finds it free.
    let (status, body) = post(&app, "/v1/locks/%252", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["name"], "%2");
    let (status, body) = post(&app, "/v1/locks/%252", json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_token_guards_the_api_but_not_the_probes() {
    let nodes = common::nodes(3);
    let app = app(&nodes, Some("s3cret-token\n"));
    for token in [
        None,
        Some("wrong"),
        Some("s3cret-token-but-longer"),
        Some(""),
    ] {
        let (status, body) = call(&app, "POST", "/v1/locks/x", "{}", token).await;
        assert_eq!(
            (status.as_u16(), body["error"].as_str()),
            (401, Some("unauthorized")),
            "{token:?}"
        );
    }
    let (status, body) = call(&app, "GET", "/v1/locks/x", Body::empty(), None).await;
    assert_eq!(
        (status.as_u16(), body["error"].as_str()),
        (401, Some("unauthorized"))
    );
    assert_eq!(
        common::lock_count(&nodes, 0).await,
        0,
        "refused requests touched nothing"
    );
    let (status, _) = call(&app, "POST", "/v1/locks/x", "{}", Some("s3cret-token")).await;
    assert_eq!(status, StatusCode::OK);
    // The scheme's name is case-insensitive; the token is not.
    for (header, expected) in [
        ("bearer s3cret-token", StatusCode::OK),
        ("BEARER s3cret-token", StatusCode::OK),
        ("Bearer S3CRET-TOKEN", StatusCode::UNAUTHORIZED),
        ("Basic s3cret-token", StatusCode::UNAUTHORIZED),
    ] {
        let req = Request::builder()
            .method("GET")
            .uri("/v1/locks/x")
            .header("authorization", header)
            .body(Body::empty())
            .unwrap();
        let status = app.clone().oneshot(req).await.unwrap().status();
        assert_eq!(status, expected, "{header}");
    }
    let (status, _) = call(&app, "GET", "/healthz", Body::empty(), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call(&app, "GET", "/readyz", Body::empty(), None).await;
    assert_eq!(status, StatusCode::OK);
}

/// A server that requires durable masters, in front of masters that are not (the test
/// harness's, without AOF), can take no lock: it is not ready either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_counts_only_masters_whose_votes_count() {
    let nodes = common::nodes(3);
    let durable_only = Client::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_secs(1))
        .quarantine(Duration::ZERO)
        .require_durable(true)
        .build()
        .unwrap();
    let strict = redquorum_cli::server::app(durable_only, AppOptions::default());
    let (status, body) = post(&strict, "/v1/locks/durable-only", json!({})).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("quorum_unavailable")),
        "{body}"
    );
    let (status, body) = call(&strict, "GET", "/readyz", Body::empty(), None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(
        (body["ready"].clone(), body["usable"].clone()),
        (json!(false), json!(0))
    );
    for node in body["nodes"].as_array().unwrap() {
        assert_eq!(
            (
                node["reachable"].clone(),
                node["durable"].clone(),
                node["usable"].clone()
            ),
            (json!(true), json!(false), json!(false)),
            "{node}"
        );
    }
    // The same masters serve a server that does not require durability.
    let (status, body) = call(&app(&nodes, None), "GET", "/readyz", Body::empty(), None).await;
    assert_eq!((status, body["usable"].clone()), (StatusCode::OK, json!(3)));
}

/// A paused master (its connection open, no answer) is not usable: with a majority paused the
/// server is not ready, as every acquire then fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_counts_a_silent_master_out() {
    let nodes = common::nodes(3);
    let app = app(&nodes, None);
    let (status, body) = call(&app, "GET", "/readyz", Body::empty(), None).await;
    assert_eq!((status, body["usable"].clone()), (StatusCode::OK, json!(3)));
    nodes.pause(1).unwrap();
    a_fresh_reading_is_due().await;
    let (status, one_paused) = call(&app, "GET", "/readyz", Body::empty(), None).await;
    nodes.pause(2).unwrap();
    a_fresh_reading_is_due().await;
    let (majority_status, majority_paused) =
        call(&app, "GET", "/readyz", Body::empty(), None).await;
    let (acquire_status, acquire) = post(&app, "/v1/locks/paused", json!({})).await;
    nodes.resume(1).unwrap();
    nodes.resume(2).unwrap();
    assert_eq!(
        (status, one_paused["usable"].clone()),
        (StatusCode::OK, json!(2)),
        "{one_paused}"
    );
    let silent = &one_paused["nodes"][1];
    assert_eq!(
        (silent["reachable"].clone(), silent["usable"].clone()),
        (json!(false), json!(false)),
        "{silent}"
    );
    assert_eq!(
        (majority_status, majority_paused["ready"].clone()),
        (StatusCode::SERVICE_UNAVAILABLE, json!(false)),
        "{majority_paused}"
    );
    assert_eq!(acquire_status, StatusCode::SERVICE_UNAVAILABLE, "{acquire}");
    a_fresh_reading_is_due().await;
    let (status, body) = call(&app, "GET", "/readyz", Body::empty(), None).await;
    assert_eq!(
        (status, body["usable"].clone()),
        (StatusCode::OK, json!(3)),
        "{body}"
    );
}

/// Masters that lost their data (flushed) while the deployment was in use carry no marker: the
/// next acquire puts them in quarantine, so `/readyz` counts them out already, as doctor does.
/// With quarantine off they are marked again at once and vote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_counts_out_masters_that_lost_their_data() {
    let nodes = common::nodes(3);
    let with_quarantine = Client::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let strict = redquorum_cli::server::app(with_quarantine, AppOptions::default());
    // A new deployment: every master is marked by the first acquire, none quarantined.
    let (status, body) = call(&strict, "GET", "/readyz", Body::empty(), None).await;
    assert_eq!(
        (status, body["usable"].clone()),
        (StatusCode::OK, json!(3)),
        "{body}"
    );
    let (status, body) = post(&strict, "/v1/locks/before-the-loss", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for i in 1..3 {
        let () = redis::cmd("FLUSHALL")
            .query_async(&mut common::raw(&nodes, i).await)
            .await
            .unwrap();
    }
    a_fresh_reading_is_due().await;
    let (status, body) = call(&strict, "GET", "/readyz", Body::empty(), None).await;
    assert_eq!(
        (status, body["ready"].clone(), body["usable"].clone()),
        (StatusCode::SERVICE_UNAVAILABLE, json!(false), json!(1)),
        "{body}"
    );
    // A client with quarantine off counts them: its next acquire would mark them, and they
    // would vote.
    let (status, body) = call(&app(&nodes, None), "GET", "/readyz", Body::empty(), None).await;
    assert_eq!(
        (status, body["usable"].clone()),
        (StatusCode::OK, json!(3)),
        "{body}"
    );
    // The acquire finds what /readyz said: it puts them in quarantine, and fails.
    let (status, body) = post(&strict, "/v1/locks/after-the-loss", json!({})).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
}

/// JSON has one number type: `10000.0` and `1e4` are the whole number 10000, where `1.5` is
/// not whole (refused in the bad-input test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_numbers_may_be_written_with_a_fraction_or_an_exponent() {
    let nodes = common::nodes(3);
    let app = app(&nodes, None);
    for (name, body) in [
        ("decimal", r#"{"ttl_ms": 10000.0}"#),
        ("exponent", r#"{"ttl_ms": 1e4, "wait_ms": 0.0}"#),
    ] {
        let uri = format!("/v1/locks/{name}");
        let (status, answer) = call(&app, "POST", &uri, body, None).await;
        assert_eq!(status, StatusCode::OK, "{body}: {answer}");
        assert_eq!(answer["ttl_ms"], 10_000, "{answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_holds_the_lock_until_the_client_disconnects() {
    let nodes = common::nodes(3);
    let (addr, stop, task) = spawn_server(&nodes).await;
    let http = reqwest::Client::new();
    let url = |p: &str| format!("http://{addr}{p}");
    let mut stream = http
        .post(url("/v1/locks/job/session"))
        .json(&json!({"ttl_ms": 600}))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["content-type"], "application/x-ndjson");
    // Four TTLs: the server renews while we only read.
    let events = read_events(&mut stream, Duration::from_millis(2_400), |_| false).await;
    assert_eq!(events[0]["event"], "acquired");
    let token = common::stored_token(&nodes, 0, "job").await.unwrap();
    let renewed = events.iter().filter(|e| e["event"] == "renewed").count();
    assert!(renewed >= 5, "{events:?}");
    let r = http
        .post(url("/v1/locks/job"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        409,
        "the session's lock is held across several TTLs"
    );
    assert!(common::token_everywhere(&nodes, "job", &token).await);

    drop(stream);
    let gone = Instant::now();
    assert!(
        common::eventually(Duration::from_millis(500), || async {
            common::lock_count(&nodes, 0).await
                + common::lock_count(&nodes, 1).await
                + common::lock_count(&nodes, 2).await
                == 0
        })
        .await,
        "the lock was not released promptly after the client left"
    );
    assert!(gone.elapsed() < Duration::from_millis(600));
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_says_lost_when_a_majority_dies() {
    let mut nodes = common::nodes(3);
    let (addr, stop, task) = spawn_server(&nodes).await;
    let http = reqwest::Client::new();
    let mut stream = http
        .post(format!("http://{addr}/v1/locks/fragile/session"))
        .json(&json!({"ttl_ms": 600}))
        .send()
        .await
        .unwrap();
    let first = read_events(&mut stream, Duration::from_secs(2), |e| !e.is_empty()).await;
    assert_eq!(first[0]["event"], "acquired");
    nodes.kill(0).unwrap();
    nodes.kill(1).unwrap();
    let killed = Instant::now();
    let events = read_events(&mut stream, Duration::from_secs(3), |e| {
        e.iter().any(|e| e["event"] == "lost")
    })
    .await;
    assert!(events.iter().any(|e| e["event"] == "lost"), "{events:?}");
    // `suspect` says the lock is still valid: never with no validity left.
    assert!(
        events
            .iter()
            .all(|e| e["event"] != "suspect" || e["validity_ms"].as_u64() > Some(0)),
        "{events:?}"
    );
    assert!(
        killed.elapsed() < Duration::from_millis(900),
        "lost reported after {:?}",
        killed.elapsed()
    );
    // The stream ends after the loss.
    assert!(
        read_events(&mut stream, Duration::from_secs(1), |_| false)
            .await
            .is_empty()
    );
    assert!(stream.chunk().await.unwrap().is_none());
    stop.cancel();
    task.await.unwrap();
}

/// A session on `name` (TTL 30 s) through the server at `addr`, once its `acquired` event is
/// in and every master holds its token.
async fn session_held_everywhere(
    nodes: &LocalNodes,
    addr: SocketAddr,
    name: &str,
) -> reqwest::Response {
    let mut stream = reqwest::Client::new()
        .post(format!("http://{addr}/v1/locks/{name}/session"))
        .json(&json!({"ttl_ms": 30_000}))
        .send()
        .await
        .unwrap();
    let first = read_events(&mut stream, Duration::from_secs(2), |e| !e.is_empty()).await;
    assert_eq!(first[0]["event"], "acquired");
    let token = common::stored_token(nodes, 0, name).await.unwrap();
    assert!(common::token_everywhere(nodes, name, &token).await);
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_sessions_by_releasing_their_locks() {
    let nodes = common::nodes(3);
    let (addr, stop, task) = spawn_server(&nodes).await;
    let mut stream = session_held_everywhere(&nodes, addr, "until-shutdown").await;
    stop.cancel();
    let events = read_events(&mut stream, Duration::from_secs(3), |_| false).await;
    assert_eq!(events.last().unwrap()["event"], "released", "{events:?}");
    tokio::time::timeout(Duration::from_secs(3), task)
        .await
        .expect("server stopped")
        .unwrap();
    for i in 0..3 {
        assert_eq!(
            common::lock_count(&nodes, i).await,
            0,
            "node {i}: released before exit, not left to the TTL"
        );
    }
}

/// A session's lock that the shutdown cannot release (a majority of masters silent) ends its
/// stream with `release_failed`, not `released`: a client told `released` may let other work
/// start while the lock stays held until its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_says_when_a_sessions_release_failed() {
    let nodes = common::nodes(3);
    let (addr, stop, task) = spawn_server(&nodes).await;
    let mut stream = session_held_everywhere(&nodes, addr, "unreleasable").await;
    nodes.pause(0).unwrap();
    nodes.pause(1).unwrap();
    stop.cancel();
    let events = read_events(&mut stream, Duration::from_secs(4), |e| {
        e.iter().any(|e| e["event"] != "acquired")
    })
    .await;
    // Resumed, they run the release they were sent: the failure was that no quorum confirmed
    // it in time.
    nodes.resume(0).unwrap();
    nodes.resume(1).unwrap();
    let last = events.last().unwrap();
    assert_eq!(last["event"], "release_failed", "{events:?}");
    assert_eq!(last["reason"], "the server is shutting down");
    assert!(
        last["message"].as_str().unwrap().contains("until its TTL"),
        "{last}"
    );
    tokio::time::timeout(Duration::from_secs(3), task)
        .await
        .expect("server stopped")
        .unwrap();
}

/// An `/extend` that no quorum confirms may still have been applied on some masters: the
/// answer says how much validity is certain, at most the new TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_extend_says_how_long_the_lock_is_certain() {
    let mut nodes = common::nodes(3);
    nodes.kill(2).unwrap();
    let app = redquorum_cli::server::app(common::client(&nodes), AppOptions::default());
    let (status, body) = call(&app, "POST", "/v1/locks/job", r#"{"ttl_ms": 10000}"#, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let token = body["token"].as_str().unwrap().to_owned();
    nodes.pause(1).unwrap();
    let (status, body) = call(
        &app,
        "POST",
        "/v1/locks/job/extend",
        json!({"token": token, "ttl_ms": 300}).to_string(),
        None,
    )
    .await;
    nodes.resume(1).unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"], "extend_uncertain", "{body}");
    assert!(body["validity_ms"].as_u64().unwrap() <= 300, "{body}");
    assert_eq!(body["needed"], 2, "{body}");
}
