//! How the coordinator treats its connections, on a real socket against real redis-server
//! processes: idle, silent and slow clients are closed after the idle timeout while requests
//! under way outlive it, a body declared over the limit is refused before it is sent, and a
//! shutdown refuses new connections, answers waiting acquires at once and closes what is
//! still busy after its grace.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The harness the library's tests use (local masters, test-tuned clients), shared as is.
#[path = "../../tests/common/mod.rs"]
mod common;
mod http_common;

use std::net::SocketAddr;
use std::time::Duration;

use redquorum_cli::server::ConnectionLimits;
use redquorum_testkit::LocalNodes;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Everything `conn` sends until it closes, or `None` if it is still open after `limit`.
async fn read_until_closed(conn: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut bytes = Vec::new();
    let reading = async {
        let mut chunk = [0u8; 4096];
        loop {
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(limit, reading).await.ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Two connections to `addr`: one that sends nothing, and one that sends half the head of a
/// `POST` to `path`.
async fn silent_and_half_a_head(addr: SocketAddr, path: &str) -> (TcpStream, TcpStream) {
    let silent = TcpStream::connect(addr).await.unwrap();
    let mut half_head = TcpStream::connect(addr).await.unwrap();
    half_head
        .write_all(format!("POST {path} HTTP/1.1\r\nHost: test\r\n").as_bytes())
        .await
        .unwrap();
    (silent, half_head)
}

/// Whether `conn` is open with nothing to read: the server has neither answered nor closed it.
fn open_and_unanswered(conn: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(conn.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// One `GET /healthz` on a kept-alive connection; the answer's head and body.
async fn healthz(conn: &mut TcpStream) -> String {
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 1024];
    while !answer.ends_with(b"}") {
        let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut chunk))
            .await
            .expect("answered")
            .unwrap();
        assert!(n > 0, "closed instead of answering");
        answer.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// The coordinator on `nodes`, closing connections idle for a second.
async fn serve_with_an_idle_timeout_of_a_second(
    nodes: &LocalNodes,
) -> (
    SocketAddr,
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    let limits = ConnectionLimits {
        idle_timeout: Duration::from_secs(1),
        ..ConnectionLimits::default()
    };
    http_common::spawn_server(common::patient_client(nodes), limits).await
}

/// Waits for a server told to stop, at most 5 s.
async fn stopped_within_5_s(server: tokio::task::JoinHandle<()>) {
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server stopped")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_slow_and_idle_connections_are_closed_after_the_idle_timeout() {
    let nodes = common::nodes(3);
    let (addr, stop, task) = serve_with_an_idle_timeout_of_a_second(&nodes).await;

    let (mut silent, mut half_head) = silent_and_half_a_head(addr, "/v1/locks/slow").await;
    let mut half_body = TcpStream::connect(addr).await.unwrap();
    half_body
        .write_all(
            b"POST /v1/locks/slow HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n{\"ttl_ms\"",
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (what, conn) in [
        ("silent", &silent),
        ("half a head", &half_head),
        ("half a body", &half_body),
    ] {
        assert!(
            open_and_unanswered(conn),
            "{what}: closed or answered before the idle timeout"
        );
    }

    // A connection in use stays open past the idle timeout: each answer starts it anew.
    let mut kept = TcpStream::connect(addr).await.unwrap();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let answer = healthz(&mut kept).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    for (what, conn) in [
        ("silent", &mut silent),
        ("half a head", &mut half_head),
        ("kept alive, then idle", &mut kept),
    ] {
        let sent = read_until_closed(conn, Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("{what}: still open 5 s after the idle timeout"));
        assert_eq!(sent, "", "{what}: closed without an answer");
    }
    let answer = read_until_closed(&mut half_body, Duration::from_secs(5))
        .await
        .expect("half a body: still open 5 s after the idle timeout");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains(r#""error":"body_timeout""#), "{answer}");
    // The request whose body never came asked no master for anything.
    assert_eq!(common::nodes_holding(&nodes, "slow").await, 0);

    stop.cancel();
    stopped_within_5_s(task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_under_way_outlive_the_idle_timeout() {
    let nodes = common::nodes(3);
    let (addr, stop, task) = serve_with_an_idle_timeout_of_a_second(&nodes).await;
    let (status, held) =
        http_common::post_to(addr, "/v1/locks/busy", json!({"ttl_ms": 30_000})).await;
    assert_eq!(status, 200, "{held}");
    let waiter = tokio::spawn(http_common::post_to(
        addr,
        "/v1/locks/busy",
        json!({"wait_ms": 10_000}),
    ));
    // A session's stream says nothing between renewals, and the client sends nothing.
    let mut session = reqwest::Client::new()
        .post(format!("http://{addr}/v1/locks/streamed/session"))
        .json(&json!({"ttl_ms": 1_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(session.status(), 200);
    let started = std::time::Instant::now();
    let mut events = String::new();
    while started.elapsed() < Duration::from_millis(2_500) {
        let chunk = tokio::time::timeout(Duration::from_secs(2), session.chunk())
            .await
            .expect("the session streams on")
            .unwrap()
            .expect("the session's stream is open past the idle timeout");
        events.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(events.contains(r#""event":"renewed""#), "{events}");
    assert!(!waiter.is_finished(), "the waiting acquire was cut short");
    let (status, released) = http_common::post_to(
        addr,
        "/v1/locks/busy/release",
        json!({"token": held["token"]}),
    )
    .await;
    assert_eq!(status, 200, "{released}");
    let (status, body) = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter is answered once the lock is free")
        .unwrap();
    assert_eq!(
        status, 200,
        "after waiting longer than the idle timeout: {body}"
    );
    drop(session);
    stop.cancel();
    stopped_within_5_s(task).await;
}

/// The first answer `conn` gets, head and JSON body, read for at most `limit`; panics with
/// what came if no whole answer did.
async fn answer_within(conn: &mut TcpStream, limit: Duration) -> String {
    let mut answer = Vec::new();
    let reading = async {
        let mut chunk = [0u8; 4096];
        while !answer.ends_with(b"}") {
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
            }
        }
    };
    let finished = tokio::time::timeout(limit, reading).await.is_ok();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(
        finished && answer.ends_with('}'),
        "no whole answer within {limit:?}: {answer:?}"
    );
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_declared_over_the_limit_is_refused_before_it_is_sent() {
    let nodes = common::nodes(3);
    // The default idle timeout (75 s): a refusal that waited for the body would come after it.
    let (addr, stop, task) =
        http_common::spawn_server(common::patient_client(&nodes), ConnectionLimits::default())
            .await;
    let too_large = redquorum_cli::server::MAX_BODY_BYTES + 1;
    // Asked to confirm first: refused without `100 Continue`, so the body is never sent.
    let mut expecting = TcpStream::connect(addr).await.unwrap();
    expecting
        .write_all(
            format!(
                "POST /v1/locks/big HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {too_large}\r\nExpect: 100-continue\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let answer = answer_within(&mut expecting, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
    assert!(answer.contains(r#""error":"body_too_large""#), "{answer}");
    // The body that was declared is not waited for: the connection ends with the answer.
    let after = read_until_closed(&mut expecting, Duration::from_secs(5)).await;
    assert_eq!(after.as_deref(), Some(""), "open after the refusal");
    // Not asked to confirm, and sending the start of the body only: refused at once too.
    let mut sending = TcpStream::connect(addr).await.unwrap();
    sending
        .write_all(
            format!(
                "POST /v1/locks/big/session HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {too_large}\r\n\r\n{{\"ttl_ms\": 10000,   "
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let answer = answer_within(&mut sending, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains(r#""error":"body_too_large""#), "{answer}");
    let after = read_until_closed(&mut sending, Duration::from_secs(5)).await;
    assert_eq!(after.as_deref(), Some(""), "open after the refusal");
    assert_eq!(common::nodes_holding(&nodes, "big").await, 0);
    // A body of the limit itself is read and served.
    let fields = r#"{"ttl_ms": 10000}"#;
    let body = format!(
        "{fields}{}",
        " ".repeat(redquorum_cli::server::MAX_BODY_BYTES - fields.len())
    );
    let mut at_limit = TcpStream::connect(addr).await.unwrap();
    at_limit
        .write_all(
            format!(
                "POST /v1/locks/big HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let answer = answer_within(&mut at_limit, Duration::from_secs(5)).await;
    assert!(answer.contains("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""name":"big""#), "{answer}");
    stop.cancel();
    stopped_within_5_s(task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_waiting_acquires_and_closes_connections_still_busy() {
    let nodes = common::nodes(3);
    let client = http_common::marked_client(&nodes).await;
    // The idle timeout (75 s) is not what closes anything here.
    let limits = ConnectionLimits {
        shutdown_grace: Duration::from_secs(1),
        ..ConnectionLimits::default()
    };
    let (addr, stop, task) = http_common::spawn_server(client, limits).await;

    let (status, held) =
        http_common::post_to(addr, "/v1/locks/held", json!({"ttl_ms": 30_000})).await;
    assert_eq!(status, 200, "{held}");
    let token = held["token"].as_str().unwrap().to_owned();
    let waiting = [
        (
            "/v1/locks/held",
            json!({"wait_ms": 60_000, "ttl_ms": 30_000}),
        ),
        // Takes "a-free" first (names in byte order), then waits for "held".
        (
            "/v1/multi",
            json!({"names": ["held", "a-free"], "wait_ms": 60_000, "ttl_ms": 30_000}),
        ),
        ("/v1/locks/held/session", json!({"wait_ms": 60_000})),
    ]
    .map(|(path, body)| tokio::spawn(http_common::post_to(addr, path, body)));
    let (mut silent, mut half_head) = silent_and_half_a_head(addr, "/v1/locks/held").await;
    if let Err(now) = comes_to(&nodes, 3, 3).await {
        panic!("the three requests did not come to wait: {now}");
    }

    stop.cancel();
    for (i, request) in waiting.into_iter().enumerate() {
        let (status, body) = tokio::time::timeout(Duration::from_secs(3), request)
            .await
            .unwrap_or_else(|_| panic!("waiting request {i} still waits after the stop signal"))
            .unwrap();
        assert_eq!(status, 503, "waiting request {i}: {body}");
        assert_eq!(
            body["error"], "shutting_down",
            "waiting request {i}: {body}"
        );
    }
    // The connections still busy have their grace, and the port is closed meanwhile: a new
    // client is refused at once. It used to be accepted by the kernel, never answered, and
    // reset when the server ended.
    let refused = common::eventually(Duration::from_millis(500), || async {
        TcpStream::connect(addr).await.is_err()
    })
    .await;
    assert!(
        !task.is_finished(),
        "the server ended before the connections still busy had their grace"
    );
    assert!(
        refused,
        "connections made while the server stopped were accepted"
    );
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the server stopped, past the connections still busy")
        .unwrap();
    for (what, conn) in [("silent", &mut silent), ("half a head", &mut half_head)] {
        let sent = read_until_closed(conn, Duration::from_secs(1))
            .await
            .unwrap_or_else(|| panic!("{what}: open after the server stopped"));
        assert_eq!(sent, "", "{what}");
    }

    // Nothing changed: the holder keeps the lock; the waiters' places and the name the
    // multi-lock had taken are given back, not left to their TTL.
    assert!(common::token_everywhere(&nodes, "held", &token).await);
    if let Err(now) = comes_to(&nodes, 0, 0).await {
        panic!("left behind: {now}");
    }
}

/// Waits up to 5 s until every node has `places_each` places in the queue of "held" and
/// "a-free" is held on `a_free_on` nodes; else what there is.
async fn comes_to(nodes: &LocalNodes, places_each: usize, a_free_on: usize) -> Result<(), String> {
    let reached = common::eventually(Duration::from_secs(5), || async {
        common::places(nodes, "held").await == vec![places_each; nodes.len()]
            && common::nodes_holding(nodes, "a-free").await == a_free_on
    })
    .await;
    if reached {
        return Ok(());
    }
    Err(format!(
        "{:?} places, \"a-free\" on {} nodes",
        common::places(nodes, "held").await,
        common::nodes_holding(nodes, "a-free").await
    ))
}

/// A chunked body is read as any other: over the limit it is `413 body_too_large`, and broken
/// (a chunk size that is not hex) it is `400 invalid_body`. Every failure to read a body was
/// answered `413 body_too_large`, a 2-byte broken one too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_is_refused_for_what_is_wrong_with_it() {
    let nodes = common::nodes(3);
    let (addr, stop, task) =
        http_common::spawn_server(common::patient_client(&nodes), ConnectionLimits::default())
            .await;
    let chunked = |path: &str, chunks: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{chunks}"
        )
    };
    let exchange = |request: String| async move {
        let mut conn = TcpStream::connect(addr).await.unwrap();
        conn.write_all(request.as_bytes()).await.unwrap();
        answer_within(&mut conn, Duration::from_secs(5)).await
    };

    let fields = r#"{"ttl_ms": 10000}"#;
    let served = exchange(chunked(
        "/v1/locks/chunked",
        &format!("{:x}\r\n{fields}\r\n0\r\n\r\n", fields.len()),
    ))
    .await;
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");

    let broken = exchange(chunked("/v1/locks/broken", "zz\r\n{}\r\n0\r\n\r\n")).await;
    assert!(broken.starts_with("HTTP/1.1 400"), "{broken}");
    assert!(broken.contains(r#""error":"invalid_body""#), "{broken}");

    let chunk = " ".repeat(4096);
    let first = format!("{:x}\r\n{fields}\r\n", fields.len());
    let filler = format!("{:x}\r\n{chunk}\r\n", chunk.len()).repeat(5);
    let over = format!("{first}{filler}0\r\n\r\n");
    let too_large = exchange(chunked("/v1/locks/too-large", &over)).await;
    assert!(too_large.starts_with("HTTP/1.1 413"), "{too_large}");
    assert!(
        too_large.contains(r#""error":"body_too_large""#),
        "{too_large}"
    );
    assert_eq!(common::nodes_holding(&nodes, "broken").await, 0);
    assert_eq!(common::nodes_holding(&nodes, "too-large").await, 0);
    stop.cancel();
    stopped_within_5_s(task).await;
}
