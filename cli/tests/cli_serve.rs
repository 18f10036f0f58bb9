//! `redquorum serve` as a user runs it: `--dev`, a curl-like client, SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The harness the library's tests use (local masters, test-tuned clients), shared as is.
#[path = "../../tests/common/mod.rs"]
mod common;
mod processes;

use std::process::Stdio;
use std::time::Duration;

use processes::{alive, children, serving_address, serving_address_and_log, start};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_redquorum");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_dev_serves_locks_and_cleans_up_its_masters_on_sigterm() {
    let (mut server, pid) = start_serve_dev();
    let addr = serving_address(&mut server, Duration::from_secs(60)).await;
    let http = reqwest::Client::new();
    let base = format!("http://{addr}");
    up_within_10_s(&http, &base).await;
    let masters = children(pid, "redis-server");
    assert_eq!(masters.len(), 3, "{masters:?}");

    let lock: Value = http
        .post(format!("{base}/v1/locks/demo"))
        .json(&json!({"ttl_ms": 30_000}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = lock["token"].as_str().expect("a token");
    let released = http
        .post(format!("{base}/v1/locks/demo/release"))
        .json(&json!({"token": token}))
        .send()
        .await
        .unwrap();
    assert_eq!(released.status(), 200);
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("redquorum_acquire_duration_seconds"));

    sigterm(pid);
    let status = tokio::time::timeout(Duration::from_secs(10), server.wait())
        .await
        .expect("exited")
        .unwrap();
    assert_eq!(status.code(), Some(0));
    for m in masters {
        assert!(!alive(m), "redis-server {m} outlived serve --dev");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_name_cannot_forge_a_log_line() {
    let (mut server, pid) = start_serve_dev();
    let (addr, log) = serving_address_and_log(&mut server, Duration::from_secs(60)).await;
    let http = reqwest::Client::new();
    let base = format!("http://{addr}");
    up_within_10_s(&http, &base).await;
    // "a", a line break, a line of its own, and a terminal's colour escape: any UTF-8 is a
    // valid lock name, and a session's name is logged at the default level.
    let mut session = http
        .post(format!(
            "{base}/v1/locks/a%0AERROR%20forged%1B%5B31m/session"
        ))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(session.status(), 200);
    let acquired = session.chunk().await.unwrap().expect("the acquired event");
    assert!(String::from_utf8_lossy(&acquired).contains("acquired"));
    // The client goes away: the session is released, and that is logged too.
    drop(session);
    tokio::time::sleep(Duration::from_millis(500)).await;
    sigterm(pid);
    tokio::time::timeout(Duration::from_secs(10), server.wait())
        .await
        .expect("exited")
        .unwrap();
    let lines = tokio::time::timeout(Duration::from_secs(5), log)
        .await
        .expect("the log ended")
        .unwrap();
    assert!(
        lines.iter().any(|l| l.contains("session opened")),
        "{lines:#?}"
    );
    for line in &lines {
        assert!(
            !line.starts_with("ERROR forged"),
            "a forged line: {lines:#?}"
        );
        assert!(!line.contains('\u{1b}'), "a raw escape: {line:?}");
    }
}

/// `serve --dev` with three masters on a port of its choosing, and its pid.
fn start_serve_dev() -> (tokio::process::Child, u32) {
    let server = start(&[
        "serve",
        "--dev",
        "--dev-nodes",
        "3",
        "--listen",
        "127.0.0.1:0",
    ]);
    let pid = server.id().unwrap();
    (server, pid)
}

/// Waits until the `serve` at `base` answers `/healthz`, at most 10 s.
async fn up_within_10_s(http: &reqwest::Client, base: &str) {
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            http.get(format!("{base}/healthz"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        })
        .await,
        "serve --dev did not come up"
    );
}

fn sigterm(pid: u32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
}

/// Runs `serve` on `listen` with `REDQUORUM_AUTH_TOKEN` set to `token` (unset for `None`).
async fn serve_output(listen: &str, token: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "serve",
        "--nodes",
        "redis://127.0.0.1:1",
        "--listen",
        listen,
    ])
    .stdin(Stdio::null());
    match token {
        Some(t) => cmd.env("REDQUORUM_AUTH_TOKEN", t),
        None => cmd.env_remove("REDQUORUM_AUTH_TOKEN"),
    };
    cmd.output().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_a_public_address_without_auth() {
    let out = serve_output("0.0.0.0:0", None).await;
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("without authentication"), "{stderr}");
    // An empty token is refused too, rather than taken for "no auth".
    let out = serve_output("127.0.0.1:0", Some("  ")).await;
    assert_eq!(out.status.code(), Some(64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_an_idle_timeout_out_of_range() {
    for (timeout, said) in [
        ("0s", "not 0s"),
        ("500ms", "not 500ms"),
        ("2days", "not 2days"),
        ("soon", "invalid value"),
    ] {
        let out = Command::new(BIN)
            .args([
                "serve",
                "--nodes",
                "redis://127.0.0.1:1",
                "--listen",
                "127.0.0.1:0",
                "--idle-timeout",
                timeout,
            ])
            .env_remove("REDQUORUM_AUTH_TOKEN")
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{timeout}: {stderr}");
        assert!(stderr.contains(said), "{timeout}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_dev_without_redis_server_says_how_to_install_it() {
    for env in [
        vec![("PATH", "/nonexistent".to_owned())],
        vec![(
            "REDQUORUM_REDIS_SERVER",
            "/nonexistent/redis-server".to_owned(),
        )],
    ] {
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--dev", "--listen", "127.0.0.1:0"])
            .env_remove("REDQUORUM_REDIS_SERVER")
            .stdin(Stdio::null());
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let out = tokio::time::timeout(Duration::from_secs(10), cmd.output())
            .await
            .unwrap()
            .unwrap();
        assert!(!out.status.success(), "{env:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("apt-get install -y redis-server"),
            "{env:?}: {stderr}"
        );
    }
}

/// How many clients `master` has connected, as its `INFO clients` says.
async fn connected_clients(nodes: &redquorum_testkit::LocalNodes, master: usize) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("clients")
        .query_async(&mut common::raw(nodes, master).await)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

/// `serve` connects to its masters as it starts, before any request, and says which cannot be
/// used: the first request does not pay for the connections (with a short TTL, a per-node
/// deadline of a few milliseconds that a connect could overrun), and a master that is down is
/// in the log at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_connects_to_its_masters_before_the_first_request() {
    let nodes = common::nodes(3);
    // The test's own connection, made for each reading, is one of those counted.
    let before: Vec<u64> =
        futures::future::join_all((0..3).map(|i| connected_clients(&nodes, i))).await;
    let down = "redis://127.0.0.1:1";
    let urls = format!("{},{down}", nodes.urls().join(","));
    let mut server = start(&[
        "serve",
        "--nodes",
        &urls,
        "--quarantine",
        "0s",
        "--listen",
        "127.0.0.1:0",
    ]);
    let pid = server.id().unwrap();
    // The log up to the line that says how many masters can vote, written once every master
    // was read, before any request.
    let mut lines = BufReader::new(server.stderr.take().unwrap()).lines();
    let log = tokio::time::timeout(Duration::from_secs(30), async {
        let mut log = Vec::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            let last = line.contains("masters usable");
            log.push(line);
            if last {
                return log;
            }
        }
        panic!("the log ended without saying how many masters are usable: {log:#?}");
    })
    .await
    .expect("serve read its masters as it started");
    for (i, before) in before.into_iter().enumerate() {
        assert!(
            connected_clients(&nodes, i).await > before,
            "master {i}: no connection from serve before any request"
        );
    }
    assert!(
        log.iter()
            .any(|l| l.contains("master not usable at start") && l.contains("127.0.0.1:1")),
        "{log:#?}"
    );
    assert!(
        log.iter().any(|l| l.contains("3 of 4 masters usable")),
        "{log:#?}"
    );
    sigterm(pid);
    tokio::time::timeout(Duration::from_secs(10), server.wait())
        .await
        .expect("exited")
        .unwrap();
}
