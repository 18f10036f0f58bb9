//! Bad input about lock kinds over HTTP: each case gets its 400 and its code, and changes
//! nothing on the real redis-server processes behind the coordinator; a release by a token that
//! holds nothing is refused while another holds the lock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The harness the library's tests use (local masters, test-tuned clients), shared as is.
#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "http_common/mod.rs"]
mod http;

use axum::http::StatusCode;
use http::{app, call, error, get, marked_client, members, post, settled, token};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_kinds_permits_owners_and_tokens_get_400_and_change_nothing() {
    let nodes = common::nodes(3);
    let app = app(marked_client(&nodes).await);
    // Held locks of each kind, which no bad request may touch.
    let mutex = token(&post(&app, "/v1/locks/m", json!({"ttl_ms": 30_000})).await);
    let reader = token(
        &post(
            &app,
            "/v1/locks/rw",
            json!({"kind": "read", "ttl_ms": 30_000}),
        )
        .await,
    );
    let permit = token(
        &post(
            &app,
            "/v1/locks/sem",
            json!({"kind": "semaphore", "permits": 2, "ttl_ms": 30_000}),
        )
        .await,
    );
    let hold = token(
        &post(
            &app,
            "/v1/locks/re",
            json!({"kind": "reentrant", "owner": "o-1", "ttl_ms": 30_000}),
        )
        .await,
    );
    assert!(common::token_on_quorum(&nodes, "m", &mutex).await);
    let snapshot = || async {
        let mut seen = Vec::new();
        for i in 0..3 {
            seen.push((
                common::stored_token(&nodes, i, "m").await,
                common::stored_token(&nodes, i, "re").await,
                members(&nodes, i, "redquorum:rw:lock:rw").await,
                members(&nodes, i, "redquorum:sem:lock:sem").await,
            ));
        }
        seen
    };
    let before = settled(snapshot).await;
    let pttl_before = common::pttl(&nodes, 0, "m").await;

    let acquire = |body: &str| ("POST", "/v1/locks/new".to_owned(), body.to_owned());
    let on = |route: &str, body: Value| ("POST", route.to_owned(), body.to_string());
    let cases: Vec<((&str, String, String), &str)> = vec![
        (acquire(r#"{"kind": "spinlock"}"#), "invalid_kind"),
        (acquire(r#"{"kind": "READ"}"#), "invalid_kind"),
        (acquire(r#"{"kind": 3}"#), "invalid_kind"),
        (acquire(r#"{"kind": "semaphore"}"#), "invalid_permits"),
        (
            acquire(r#"{"kind": "semaphore", "permits": 0}"#),
            "invalid_permits",
        ),
        (
            acquire(r#"{"kind": "semaphore", "permits": 1025}"#),
            "invalid_permits",
        ),
        (
            acquire(r#"{"kind": "semaphore", "permits": 1e30}"#),
            "invalid_permits",
        ),
        (
            acquire(r#"{"kind": "semaphore", "permits": -2}"#),
            "invalid_permits",
        ),
        (
            acquire(r#"{"kind": "semaphore", "permits": "2"}"#),
            "invalid_permits",
        ),
        (
            acquire(r#"{"kind": "write", "permits": 2}"#),
            "invalid_permits",
        ),
        (acquire(r#"{"permits": 1}"#), "invalid_permits"),
        (acquire(r#"{"kind": "reentrant"}"#), "invalid_owner"),
        (
            acquire(r#"{"kind": "reentrant", "owner": "cron@web1"}"#),
            "invalid_owner",
        ),
        (
            acquire(r#"{"kind": "reentrant", "owner": ""}"#),
            "invalid_owner",
        ),
        (
            acquire(r#"{"kind": "reentrant", "owner": 7}"#),
            "invalid_owner",
        ),
        (acquire(r#"{"kind": "read""#), "invalid_json"),
        (acquire(r#"["kind", "read"]"#), "invalid_json"),
        (
            (
                "POST",
                "/v1/locks/new/session".to_owned(),
                r#"{"kind": "semaphore"}"#.to_owned(),
            ),
            "invalid_permits",
        ),
        // A made-up token is that, with any kind named: not a mutex's token of the wrong kind.
        (
            on(
                "/v1/locks/rw/release",
                json!({"kind": "read", "token": "made-up"}),
            ),
            "invalid_token",
        ),
        (
            on(
                "/v1/locks/sem/extend",
                json!({"kind": "semaphore", "permits": 1, "token": "semaphore.0:made-up"}),
            ),
            "invalid_token",
        ),
        // A token of one kind offered as another's.
        (
            on(
                "/v1/locks/rw/extend",
                json!({"kind": "write", "token": reader}),
            ),
            "wrong_kind",
        ),
        (
            on("/v1/locks/rw/release", json!({"token": reader})),
            "wrong_kind",
        ),
        (
            on(
                "/v1/locks/m/release",
                json!({"kind": "read", "token": mutex}),
            ),
            "wrong_kind",
        ),
        (
            on(
                "/v1/locks/sem/release",
                json!({"kind": "semaphore", "permits": 3, "token": permit}),
            ),
            "wrong_kind",
        ),
        (
            on(
                "/v1/locks/sem/extend",
                json!({"kind": "semaphore", "token": permit}),
            ),
            "invalid_permits",
        ),
        (
            on(
                "/v1/locks/re/release",
                json!({"kind": "reentrant", "token": hold}),
            ),
            "invalid_owner",
        ),
        (
            on("/v1/locks/re/release", json!({"token": hold})),
            "wrong_kind",
        ),
        (
            on(
                "/v1/locks/m/release",
                json!({"owner": "ci", "token": mutex}),
            ),
            "invalid_owner",
        ),
        (
            ("GET", "/v1/locks/m?kind=spinlock".to_owned(), String::new()),
            "invalid_kind",
        ),
        (
            (
                "GET",
                "/v1/locks/m?kind=semaphore".to_owned(),
                String::new(),
            ),
            "invalid_permits",
        ),
        (
            (
                "GET",
                "/v1/locks/m?kind=semaphore&permits=x".to_owned(),
                String::new(),
            ),
            "invalid_permits",
        ),
        (
            (
                "GET",
                "/v1/locks/m?kind=read&kind=write".to_owned(),
                String::new(),
            ),
            "unknown_field",
        ),
        (
            (
                "GET",
                "/v1/locks/m?owner=a&kind=mutex".to_owned(),
                String::new(),
            ),
            "invalid_owner",
        ),
        (
            ("GET", "/v1/locks/m?holder=1".to_owned(), String::new()),
            "unknown_field",
        ),
    ];
    for ((method, uri, body), code) in &cases {
        let answer = call(&app, method, uri, body.clone()).await;
        assert_eq!(
            error(&answer),
            (400, *code),
            "{method} {uri} {body}: {}",
            answer.1
        );
        assert!(!answer.1["message"].as_str().unwrap().is_empty());
    }
    // Nothing was taken, extended or released.
    assert_eq!(snapshot().await, before);
    assert!(
        common::pttl(&nodes, 0, "m").await <= pttl_before,
        "extended"
    );
    let (status, info) = get(&app, "/v1/locks/new").await;
    assert_eq!((status, &info["held"]), (StatusCode::OK, &json!(false)));
    // The holders still have their locks, each of its own kind.
    for (route, body) in [
        ("/v1/locks/m/release", json!({"token": mutex})),
        (
            "/v1/locks/rw/release",
            json!({"kind": "read", "token": reader}),
        ),
        (
            "/v1/locks/sem/release",
            json!({"kind": "semaphore", "permits": 2, "token": permit}),
        ),
        (
            "/v1/locks/re/release",
            json!({"kind": "reentrant", "owner": "o-1", "token": hold}),
        ),
    ] {
        let answer = post(&app, route, body).await;
        assert_eq!(answer.0, StatusCode::OK, "{route}: {}", answer.1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_by_a_token_that_holds_nothing_is_not_held_while_another_holds_the_lock() {
    let nodes = common::nodes(3);
    let app = app(marked_client(&nodes).await);
    for (kind, key) in [
        (json!({"kind": "read"}), "redquorum:rw:lock:held"),
        (json!({"kind": "write"}), "redquorum:rw:lock:held"),
        (
            json!({"kind": "semaphore", "permits": 2}),
            "redquorum:sem:lock:held",
        ),
    ] {
        let with = |extra: Value| {
            let mut body = kind.clone();
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            body
        };
        // A token of the kind that holds nothing: released already, on another name.
        let stale = token(&post(&app, "/v1/locks/elsewhere", with(json!({}))).await);
        let released = post(
            &app,
            "/v1/locks/elsewhere/release",
            with(json!({"token": stale})),
        )
        .await;
        assert_eq!(released.0, StatusCode::OK, "{kind}: {}", released.1);
        let holder = token(&post(&app, "/v1/locks/held", with(json!({"ttl_ms": 30_000}))).await);
        let snapshot = || async {
            let mut seen = Vec::new();
            for i in 0..3 {
                seen.push(members(&nodes, i, key).await);
            }
            seen
        };
        let before = settled(snapshot).await;
        let refused = post(
            &app,
            "/v1/locks/held/release",
            with(json!({"token": stale})),
        )
        .await;
        assert_eq!(error(&refused), (409, "not_held"), "{kind}: {}", refused.1);
        assert_eq!(
            snapshot().await,
            before,
            "{kind}: the refused release changed the masters"
        );
        let released = post(
            &app,
            "/v1/locks/held/release",
            with(json!({"token": holder})),
        )
        .await;
        assert_eq!(released.0, StatusCode::OK, "{kind}: {}", released.1);
        // Nobody holds the lock now: the same token's release is answered released.
        let free = post(
            &app,
            "/v1/locks/held/release",
            with(json!({"token": stale})),
        )
        .await;
        assert_eq!(free.0, StatusCode::OK, "{kind}: {}", free.1);
        assert_eq!(free.1["released"], true, "{kind}: {}", free.1);
    }
}
