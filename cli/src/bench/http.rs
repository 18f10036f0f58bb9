//! Acquire+release pairs through the HTTP coordinator (`serve`) on loopback, over one
//! keep-alive connection.

use std::time::Instant;

use redquorum::Client;
use serde_json::{Value, json};

use super::percentile;

/// Acquire+release pairs through the HTTP API.
pub(super) struct Http {
    pub(super) failed: u64,
    pub(super) pairs_per_second: f64,
    pub(super) acquire_p50_us: f64,
    pub(super) acquire_p99_us: f64,
}

/// Sequential acquire+release pairs through `serve` on loopback, over one keep-alive connection.
pub(super) async fn http(
    client: &Client,
    pairs: usize,
) -> Result<Http, Box<dyn std::error::Error + Send + Sync>> {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let stop = tokio_util::sync::CancellationToken::new();
    let router = crate::server::app(client.clone(), crate::server::AppOptions::default());
    let server = {
        let stop = stop.clone();
        tokio::spawn(async move {
            axum::serve(crate::server::without_delay(listener), router)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await
        })
    };
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    // The connection is driven by the task that sends on it, as one task of a client would:
    // spawned, it would add two wake-ups between tasks to every request. Fused: once the
    // server has closed it, later requests fail on the sender rather than poll it again.
    let mut conn = std::pin::pin!(futures::FutureExt::fuse(conn));
    let mut post = async |path: String,
                          body: String|
           -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let req = hyper::Request::post(path)
            .header("host", addr.to_string())
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))?;
        let exchange = async {
            sender.ready().await?;
            let response = sender.send_request(req).await?;
            let status = response.status();
            let bytes = response.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>((status, bytes))
        };
        let (status, bytes) = tokio::select! {
            exchange = exchange => exchange?,
            closed = conn.as_mut() => {
                closed?;
                return Err("the server closed the connection".into());
            }
        };
        if !status.is_success() {
            return Err(format!("{status}: {}", String::from_utf8_lossy(&bytes)).into());
        }
        Ok(serde_json::from_slice(&bytes)?)
    };
    const WARM_UP: usize = 100;
    let mut failed = 0u64;
    let mut acquires = Vec::with_capacity(pairs);
    let mut started = Instant::now();
    for i in 0..pairs + WARM_UP {
        if i == WARM_UP {
            started = Instant::now();
        }
        let t = Instant::now();
        // A 503 from a stall of the machine is counted, not fatal.
        let Ok(lock) = post(format!("/v1/locks/bench-http-{i}"), "{}".to_owned()).await else {
            failed += 1;
            continue;
        };
        if i >= WARM_UP {
            acquires.push(t.elapsed());
        }
        let token = lock["token"].as_str().unwrap_or_default();
        let release = post(
            format!("/v1/locks/bench-http-{i}/release"),
            json!({"token": token}).to_string(),
        );
        if release.await.is_err() {
            failed += 1;
        }
    }
    let took = started.elapsed();
    drop(sender);
    let _ = conn.await;
    stop.cancel();
    let _ = server.await;
    Ok(Http {
        failed,
        pairs_per_second: acquires.len() as f64 / took.as_secs_f64(),
        acquire_p50_us: percentile(&mut acquires, 0.5),
        acquire_p99_us: percentile(&mut acquires, 0.99),
    })
}
