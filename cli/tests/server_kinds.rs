//! The HTTP API's lock kinds against real redis-server processes: each kind's acquire, extend,
//! release and inspect, reentrant re-entry across requests and sessions, a semaphore's
//! permits, and a read-write lock's writer beside readers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The harness the library's tests use (local masters, test-tuned clients), shared as is.
#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "http_common/mod.rs"]
mod http;

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http::{app, error, get, marked_client, members, post, token};
use http_body_util::BodyExt;
use redquorum_testkit::LocalNodes;
use serde_json::{Value, json};
use tower::ServiceExt;

/// Whether a quorum of masters has (`want`), or none has (`!want`), the hold `inner` of a lock
/// of `kind`: where each kind lives on the masters.
async fn on_masters(nodes: &LocalNodes, kind: &str, name: &str, inner: &str, want: bool) -> bool {
    let mut holding = 0;
    for node in 0..nodes.len() {
        let has = match kind {
            "mutex" => common::stored_token(nodes, node, name).await.as_deref() == Some(inner),
            "reentrant" => {
                common::stored_token(nodes, node, name).await.as_deref() == Some("owner:job-1")
            }
            "read" | "write" => members(nodes, node, &format!("redquorum:rw:lock:{name}"))
                .await
                .contains(&format!("{}:{inner}", &kind[..1])),
            _ => members(nodes, node, &format!("redquorum:sem:lock:{name}"))
                .await
                .contains(&inner.to_owned()),
        };
        holding += usize::from(has);
    }
    // An acquire answers once a quorum granted; a master that was slow to connect may have
    // missed it.
    if want {
        holding > nodes.len() / 2
    } else {
        holding == 0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_is_acquired_extended_released_and_inspected() {
    let nodes = common::nodes(3);
    let app = app(marked_client(&nodes).await);
    let kinds = [
        json!({"kind": "mutex"}),
        json!({"kind": "reentrant", "owner": "job-1"}),
        json!({"kind": "read"}),
        json!({"kind": "write"}),
        json!({"kind": "semaphore", "permits": 2}),
    ];
    for (i, kind) in kinds.iter().enumerate() {
        let name = format!("k{i}");
        let with = |extra: Value| {
            let mut body = kind.clone();
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            body
        };
        let kind_name = kind["kind"].as_str().unwrap();
        let acquired = post(
            &app,
            &format!("/v1/locks/{name}"),
            with(json!({"ttl_ms": 10_000})),
        )
        .await;
        let held = token(&acquired);
        let body = &acquired.1;
        assert_eq!(body["kind"], kind_name, "{body}");
        assert_eq!(body["name"], name.as_str());
        // A reader's fence is the last writer's: none yet.
        let fence = body["fence"].as_u64().unwrap();
        assert_eq!(fence == 0, kind_name == "read", "{body}");
        assert_eq!(body.get("permits"), kind.get("permits"), "{body}");
        if kind_name != "mutex" {
            let prefix = match kind_name {
                "semaphore" => "semaphore.2:".to_owned(),
                other => format!("{other}:"),
            };
            assert!(held.starts_with(&prefix), "{held}");
        }

        let inner = held.split_once(':').map_or(held.as_str(), |(_, t)| t);
        assert!(
            common::eventually(Duration::from_secs(2), || on_masters(
                &nodes, kind_name, &name, inner, true
            ))
            .await,
            "{kind_name} not on a quorum of masters"
        );

        let extended = post(
            &app,
            &format!("/v1/locks/{name}/extend"),
            with(json!({"token": held, "ttl_ms": 30_000})),
        )
        .await;
        assert_eq!(extended.0, StatusCode::OK, "{kind_name}: {}", extended.1);
        assert_eq!(extended.1["kind"], kind_name);
        assert!(extended.1["validity_ms"].as_u64().unwrap() > 20_000);
        assert_eq!(
            extended.1["fence"], body["fence"],
            "extending keeps the fence"
        );
        assert!(extended.1.get("token").is_none());

        let query = match kind_name {
            "semaphore" => "?kind=semaphore&permits=2".to_owned(),
            other => format!("?kind={other}"),
        };
        let inspected = get(&app, &format!("/v1/locks/{name}{query}")).await;
        assert_eq!(inspected.0, StatusCode::OK, "{}", inspected.1);
        assert_eq!(inspected.1["kind"], kind_name);
        assert_eq!(inspected.1["held"], true);
        let first = &inspected.1["nodes"][0];
        assert!(first["ttl_ms"].as_u64().unwrap() > 20_000, "{first}");
        assert!(!inspected.1.to_string().contains(inner));
        match kind_name {
            "reentrant" => assert_eq!(first["holds"], 1, "{first}"),
            "read" => assert_eq!(
                (&first["readers"], &first["writers"]),
                (&json!(1), &json!(0))
            ),
            "write" => assert_eq!(
                (&first["readers"], &first["writers"]),
                (&json!(0), &json!(1))
            ),
            "semaphore" => assert_eq!(
                (&first["holders"], &first["permits"]),
                (&json!(1), &json!(2))
            ),
            _ => assert!(first.get("holders").is_none(), "{first}"),
        }

        let released = post(
            &app,
            &format!("/v1/locks/{name}/release"),
            with(json!({"token": held})),
        )
        .await;
        assert_eq!(released.0, StatusCode::OK, "{kind_name}: {}", released.1);
        assert_eq!(
            (&released.1["kind"], &released.1["released"]),
            (&json!(kind_name), &json!(true))
        );
        assert!(
            common::eventually(Duration::from_secs(2), || on_masters(
                &nodes, kind_name, &name, inner, false
            ))
            .await,
            "{kind_name} still on a master after its release"
        );
        // Free again: a writer (or a mutex) takes it at once.
        let exclusive = match kind_name {
            "read" | "write" => json!({"kind": "write"}),
            "semaphore" => json!({"kind": "semaphore", "permits": 2}),
            _ => json!({}),
        };
        let again = post(&app, &format!("/v1/locks/{name}"), exclusive).await;
        assert_eq!(again.0, StatusCode::OK, "{kind_name}: {}", again.1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentrant_owner_re_enters_across_requests_and_sessions() {
    let nodes = common::nodes(3);
    let app = app(marked_client(&nodes).await);
    let as_owner = |owner: &str| json!({"kind": "reentrant", "owner": owner, "ttl_ms": 10_000});
    let first = post(&app, "/v1/locks/job", as_owner("job-7")).await;
    // Holds share the lock's fence, even where a master of the fresh deployment missed the
    // first hold (it answers once a quorum granted) and grants the next one a fresh lock: the
    // masters that had the owner's lock form a quorum and agree on it.
    let same_fence = |a: &Value, b: &Value| {
        assert_eq!(a["fence"], b["fence"], "holds share the lock's fence");
    };
    let second = post(&app, "/v1/locks/job", as_owner("job-7")).await;
    let (t1, t2) = (token(&first), token(&second));
    assert_ne!(t1, t2, "each acquire is a hold of its own");
    same_fence(&first.1, &second.1);
    assert_eq!(second.1["owner"], "job-7");
    // Another owner, and a mutex of the same name, are refused.
    assert_eq!(
        error(&post(&app, "/v1/locks/job", as_owner("job-8")).await),
        (409, "contended")
    );
    assert_eq!(
        error(&post(&app, "/v1/locks/job", json!({})).await),
        (409, "contended")
    );

    // A session of the same owner is one more hold, while it stays open.
    let request = Request::builder()
        .method("POST")
        .uri("/v1/locks/job/session")
        .body(Body::from(as_owner("job-7").to_string()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut stream = response.into_body();
    let frame = stream.frame().await.unwrap().unwrap().into_data().unwrap();
    let event: Value = serde_json::from_slice(&frame).unwrap();
    assert_eq!(
        (&event["event"], &event["kind"]),
        (&json!("acquired"), &json!("reentrant"))
    );
    same_fence(&first.1, &event);

    // Releasing holds one by one keeps the lock until the last.
    let release = |t: &str| json!({"kind": "reentrant", "owner": "job-7", "token": t});
    for t in [&t1, &t2] {
        let released = post(&app, "/v1/locks/job/release", release(t)).await;
        assert_eq!(released.0, StatusCode::OK, "{}", released.1);
        assert_eq!(
            error(&post(&app, "/v1/locks/job", as_owner("job-8")).await),
            (409, "contended")
        );
    }
    // The session's client goes away: its hold, the last, is released.
    drop(stream);
    let other = common::eventually(Duration::from_secs(5), || async {
        post(&app, "/v1/locks/job", as_owner("job-8")).await.0 == StatusCode::OK
    })
    .await;
    assert!(other, "the lock was not freed with its last hold");
    // A wrong owner cannot release the new holder's hold.
    let foreign = post(&app, "/v1/locks/job/release", release(&t1)).await;
    assert_eq!(error(&foreign), (409, "not_held"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_admits_at_most_its_permits() {
    let nodes = common::nodes(3);
    let app = app(marked_client(&nodes).await);
    let permit = json!({"kind": "semaphore", "permits": 2, "ttl_ms": 10_000});
    let a = token(&post(&app, "/v1/locks/pool", permit.clone()).await);
    let _b = token(&post(&app, "/v1/locks/pool", permit.clone()).await);
    assert_eq!(
        error(&post(&app, "/v1/locks/pool", permit.clone()).await),
        (409, "contended")
    );
    let key = "redquorum:sem:lock:pool";
    for i in 0..3 {
        let holders = members(&nodes, i, key).await;
        assert!(
            holders.iter().filter(|m| !m.starts_with('#')).count() <= 2,
            "{holders:?}"
        );
    }
    // A different number of permits for the same name is refused while it is held.
    let other = post(
        &app,
        "/v1/locks/pool",
        json!({"kind": "semaphore", "permits": 3}),
    )
    .await;
    // (Decided by the first master to refuse: one that says so, or one that says it is held.)
    let refused = error(&other);
    assert!(
        refused == (409, "permits_mismatch") || refused == (409, "contended"),
        "{}",
        other.1
    );
    // A permit given back lets the next one in, and it waits for it.
    let waiter = {
        let app = app.clone();
        let mut body = permit.clone();
        body["wait_ms"] = json!(5_000);
        tokio::spawn(async move { post(&app, "/v1/locks/pool", body).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = post(
        &app,
        "/v1/locks/pool/release",
        json!({"kind": "semaphore", "permits": 2, "token": a}),
    )
    .await;
    assert_eq!(released.0, StatusCode::OK, "{}", released.1);
    let third = waiter.await.unwrap();
    assert_eq!(third.0, StatusCode::OK, "{}", third.1);
    assert_eq!(
        error(&post(&app, "/v1/locks/pool", permit).await),
        (409, "contended")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_is_refused_beside_a_reader_and_readers_beside_a_writer() {
    let nodes = common::nodes(3);
    let app = app(marked_client(&nodes).await);
    let read = json!({"kind": "read", "ttl_ms": 10_000});
    let write = json!({"kind": "write", "ttl_ms": 10_000});
    let r1 = token(&post(&app, "/v1/locks/doc", read.clone()).await);
    let r2 = token(&post(&app, "/v1/locks/doc", read.clone()).await);
    assert_eq!(
        error(&post(&app, "/v1/locks/doc", write.clone()).await),
        (409, "contended")
    );
    // A mutex of the same name is another lock.
    assert_eq!(
        post(&app, "/v1/locks/doc", json!({})).await.0,
        StatusCode::OK
    );
    for t in [r1, r2] {
        let released = post(
            &app,
            "/v1/locks/doc/release",
            json!({"kind": "read", "token": t}),
        )
        .await;
        assert_eq!(released.0, StatusCode::OK, "{}", released.1);
    }
    let w = token(&post(&app, "/v1/locks/doc", write.clone()).await);
    assert_eq!(
        error(&post(&app, "/v1/locks/doc", read.clone()).await),
        (409, "contended")
    );
    assert_eq!(
        error(&post(&app, "/v1/locks/doc", write).await),
        (409, "contended")
    );
    let released = post(
        &app,
        "/v1/locks/doc/release",
        json!({"kind": "write", "token": w}),
    )
    .await;
    assert_eq!(released.0, StatusCode::OK, "{}", released.1);
    assert_eq!(post(&app, "/v1/locks/doc", read).await.0, StatusCode::OK);
}
