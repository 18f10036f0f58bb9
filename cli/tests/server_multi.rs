//! Multi-locks over HTTP against real redis-server processes: all or nothing, one fence per
//! name, extended and released as a set, of any kind; a name given twice counts once toward the
//! limit; bad input changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The harness the library's tests use (local masters, test-tuned clients), shared as is.
#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "http_common/mod.rs"]
mod http;

use std::time::Duration;

use axum::http::StatusCode;
use http::{app, error, marked_client, members, post, settled, token};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_is_all_or_nothing_with_one_fence_per_name() {
    let nodes = common::nodes(3);
    let app = app(marked_client(&nodes).await);
    let (status, set) = post(
        &app,
        "/v1/multi",
        json!({"names": ["b", "a", "b"], "ttl_ms": 10_000, "owner": "ci"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{set}");
    assert_eq!(
        set["names"],
        json!(["a", "b"]),
        "deduplicated, in byte order"
    );
    assert_eq!(
        (&set["kind"], &set["owner"]),
        (&json!("mutex"), &json!("ci"))
    );
    let (fa, fb) = (
        set["fences"]["a"].as_u64().unwrap(),
        set["fences"]["b"].as_u64().unwrap(),
    );
    assert!(fa > 0 && fb > 0);
    assert!(set["validity_ms"].as_u64().unwrap() > 9_000);
    let tokens = set["tokens"].clone();
    for name in ["a", "b"] {
        let t = tokens[name].as_str().unwrap();
        assert!(common::token_on_quorum(&nodes, name, t).await, "{name}");
        // Each name is an ordinary lock: a single acquire is refused.
        assert_eq!(
            error(&post(&app, &format!("/v1/locks/{name}"), json!({})).await),
            (409, "contended")
        );
    }

    // A set that overlaps a held name gets nothing, and leaves nothing behind.
    let overlap = post(
        &app,
        "/v1/multi",
        json!({"names": ["c", "b"], "wait_ms": 100}),
    )
    .await;
    assert_eq!(error(&overlap), (409, "contended"), "{}", overlap.1);
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            for i in 0..3 {
                if common::stored_token(&nodes, i, "c").await.is_some() {
                    return false;
                }
            }
            true
        })
        .await,
        "c was kept"
    );

    let (status, extended) = post(
        &app,
        "/v1/multi/extend",
        json!({"tokens": tokens, "ttl_ms": 60_000}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{extended}");
    assert_eq!(extended["fences"], json!({"a": fa, "b": fb}));
    assert!(extended["validity_ms"].as_u64().unwrap() > 50_000);
    assert!(extended.get("tokens").is_none());
    let mut extended_on = 0;
    for i in 0..3 {
        extended_on += usize::from(common::pttl(&nodes, i, "a").await > 50_000);
    }
    assert!(extended_on >= 2, "extended on {extended_on} masters");

    let (status, released) = post(&app, "/v1/multi/release", json!({"tokens": tokens})).await;
    assert_eq!(status, StatusCode::OK, "{released}");
    assert_eq!(
        (&released["names"], &released["released"]),
        (&json!(["a", "b"]), &json!(true))
    );
    let both = post(&app, "/v1/multi", json!({"names": ["a", "b", "c"]})).await;
    assert_eq!(both.0, StatusCode::OK, "{}", both.1);
    // Extending a set with a name no longer held fails for that name, saying which.
    let mut stale = both.1["tokens"].clone();
    stale["a"] = tokens["a"].clone();
    let refused = post(&app, "/v1/multi/extend", json!({"tokens": stale})).await;
    assert_eq!(error(&refused), (409, "not_held"), "{}", refused.1);
    assert_eq!(refused.1["name"], "a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_locks_of_other_kinds_and_bad_input() {
    let nodes = common::nodes(3);
    let app = app(marked_client(&nodes).await);
    let readers = json!({"names": ["x", "y"], "kind": "read"});
    let (s1, first) = post(&app, "/v1/multi", readers.clone()).await;
    let (s2, _) = post(&app, "/v1/multi", readers).await;
    assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK), "{first}");
    assert_eq!(first["kind"], "read");
    assert!(first["tokens"]["x"].as_str().unwrap().starts_with("read:"));
    let writer = post(&app, "/v1/multi", json!({"names": ["y"], "kind": "write"})).await;
    assert_eq!(error(&writer), (409, "contended"));
    let permits = json!({"names": ["p", "q"], "kind": "semaphore", "permits": 1});
    let sem = post(&app, "/v1/multi", permits.clone()).await;
    assert_eq!(sem.0, StatusCode::OK, "{}", sem.1);
    assert_eq!(sem.1["permits"], 1);
    assert_eq!(
        error(&post(&app, "/v1/multi", permits).await),
        (409, "contended")
    );
    let reentrant = json!({"names": ["r", "s"], "kind": "reentrant", "owner": "job-2"});
    let first_hold = post(&app, "/v1/multi", reentrant.clone()).await;
    let second_hold = post(&app, "/v1/multi", reentrant).await;
    assert_eq!(
        second_hold.0,
        StatusCode::OK,
        "the owner re-enters: {}",
        second_hold.1
    );
    // The lock's fence per name (higher only where a master of the fresh deployment missed
    // the first hold and granted the second a fresh lock).
    for name in ["r", "s"] {
        let (a, b) = (
            &first_hold.1["fences"][name],
            &second_hold.1["fences"][name],
        );
        assert!(a.as_u64().unwrap() <= b.as_u64().unwrap(), "{a} {b}");
    }

    let held_keys = || async {
        let mut seen = Vec::new();
        for i in 0..3 {
            seen.push(members(&nodes, i, "redquorum:rw:lock:x").await);
            seen.push(members(&nodes, i, "redquorum:sem:lock:p").await);
        }
        seen
    };
    let before = settled(held_keys).await;
    let read_tokens = first["tokens"].clone();
    let cases = [
        (json!({}), "/v1/multi", "invalid_names"),
        (json!({"names": []}), "/v1/multi", "invalid_names"),
        (json!({"names": "a"}), "/v1/multi", "invalid_names"),
        (json!({"names": ["a", 1]}), "/v1/multi", "invalid_names"),
        (json!({"names": ["a", ""]}), "/v1/multi", "invalid_name"),
        (
            json!({"names": (0..65).map(|i| i.to_string()).collect::<Vec<_>>()}),
            "/v1/multi",
            "invalid_names",
        ),
        (
            json!({"names": ["a"], "kind": "semaphore"}),
            "/v1/multi",
            "invalid_permits",
        ),
        (
            json!({"names": ["a"], "name": "b"}),
            "/v1/multi",
            "unknown_field",
        ),
        (
            json!({"tokens": read_tokens}),
            "/v1/multi/release",
            "wrong_kind",
        ),
        (
            json!({"tokens": read_tokens, "kind": "write"}),
            "/v1/multi/extend",
            "wrong_kind",
        ),
        // One made-up token, or one bad name, refuses the whole request before any master is
        // asked: the other names are neither extended nor released.
        (
            json!({"tokens": {"x": read_tokens["x"], "y": "made-up"}, "kind": "read"}),
            "/v1/multi/release",
            "invalid_token",
        ),
        (
            json!({"tokens": {"x": read_tokens["x"], "": read_tokens["y"]}, "kind": "read"}),
            "/v1/multi/extend",
            "invalid_name",
        ),
        (json!({"tokens": {}}), "/v1/multi/release", "invalid_tokens"),
        (
            json!({"tokens": ["x"]}),
            "/v1/multi/release",
            "invalid_tokens",
        ),
        (
            json!({"tokens": {"x": 1}, "kind": "read"}),
            "/v1/multi/release",
            "invalid_tokens",
        ),
        (
            json!({"kind": "read"}),
            "/v1/multi/extend",
            "invalid_tokens",
        ),
    ];
    for (body, route, code) in cases {
        let answer = post(&app, route, body.clone()).await;
        assert_eq!(error(&answer), (400, code), "{route} {body}: {}", answer.1);
    }
    assert_eq!(held_keys().await, before, "bad input changed the masters");
    let released = post(
        &app,
        "/v1/multi/release",
        json!({"tokens": read_tokens, "kind": "read"}),
    )
    .await;
    assert_eq!(released.0, StatusCode::OK, "{}", released.1);
    let hold = token(&post(&app, "/v1/locks/x", json!({"kind": "read"})).await);
    assert!(hold.starts_with("read:"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_given_more_than_once_count_once_toward_the_limit() {
    let nodes = common::nodes(3);
    let app = app(marked_client(&nodes).await);
    // 65 copies of one name: one name.
    let copies = post(&app, "/v1/multi", json!({"names": vec!["dup"; 65]})).await;
    assert_eq!(copies.0, StatusCode::OK, "{}", copies.1);
    assert_eq!(copies.1["names"], json!(["dup"]));
    assert!(
        common::token_on_quorum(&nodes, "dup", copies.1["tokens"]["dup"].as_str().unwrap()).await
    );
    // The limit's 64 distinct names, with more copies of some: taken, each once.
    let mut names: Vec<String> = (0..64).map(|i| format!("n{i:02}")).collect();
    names.extend((0..10).map(|i| format!("n{i:02}")));
    let many = post(&app, "/v1/multi", json!({"names": names})).await;
    assert_eq!(many.0, StatusCode::OK, "{}", many.1);
    assert_eq!(many.1["names"].as_array().unwrap().len(), 64);
    assert_eq!(many.1["tokens"].as_object().unwrap().len(), 64);
    // One more distinct name is over the limit, copies or not.
    names.push("n64".to_owned());
    let over = post(&app, "/v1/multi", json!({"names": names})).await;
    assert_eq!(error(&over), (400, "invalid_names"), "{}", over.1);
    assert_eq!(common::nodes_holding(&nodes, "n64").await, 0);
    for set in [&copies.1, &many.1] {
        let released = post(&app, "/v1/multi/release", json!({"tokens": set["tokens"]})).await;
        assert_eq!(released.0, StatusCode::OK, "{}", released.1);
    }
}
