//! Acquire+release pairs through the HTTP coordinator (`serve`) on loopback, over one
//! keep-alive connection.
//!
//! The client is a minimal HTTP/1.1 one: a request is one write, and a response is read up to
//! its `content-length`. The figure is what the service adds to the library, and a general
//! client adds its own cost to it: hyper's hands each request and response between its request
//! handle and its connection through channels, which wakes the task again on every request.
//! In three runs in one process, this client made 3 to 10% more pairs per second than hyper's.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use redquorum::{Client, LockOptions};
use redquorum_testkit::{CpuMeter, CpuPer, MastersCpu};
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::percentile;

/// Acquire+release pairs through the HTTP API, and through the library alongside.
pub(super) struct Http {
    pub(super) failed: u64,
    pub(super) pairs_per_second: f64,
    pub(super) acquire_p50_us: f64,
    pub(super) acquire_p99_us: f64,
    /// One exchange on the same connection that asks no master (`GET /healthz`): what the
    /// transport, hyper and axum cost a request, with none of the lock's work.
    pub(super) exchange_p50_us: f64,
    /// The library's figures, from the blocks that alternated with these.
    pub(super) library_failed: u64,
    pub(super) library_pairs_per_second: f64,
    pub(super) library_acquire_p50_us: f64,
    /// With the bench's own masters: what a pair cost their CPUs and this process's, over
    /// HTTP (the service and the bench's client both run here) and through the library.
    pub(super) cpu_per_pair: Option<CpuPer>,
    pub(super) library_cpu_per_pair: Option<CpuPer>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long the whole run may take: the loop is bounded in time as well as in count.
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// Largest response head or body the client takes.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// One keep-alive connection to the service, sending one request at a time.
struct Connection {
    stream: TcpStream,
    host: String,
    buf: Vec<u8>,
}

impl Connection {
    async fn open(addr: SocketAddr) -> Result<Self, BoxError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream,
            host: addr.to_string(),
            buf: Vec::with_capacity(4096),
        })
    }

    /// POSTs `body` to `path`: a 2xx answer read as `T`, or the status and body of another.
    /// An error is the connection's (or an answer that is not the JSON `T` expects): it is not
    /// fit for another request.
    async fn post<T: DeserializeOwned>(
        &mut self,
        path: &str,
        body: &str,
    ) -> Result<Result<T, String>, BoxError> {
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            self.host,
            body.len()
        );
        self.exchange(&request).await
    }

    /// GETs `path`, as [`post`](Self::post).
    async fn get<T: DeserializeOwned>(
        &mut self,
        path: &str,
    ) -> Result<Result<T, String>, BoxError> {
        let request = format!("GET {path} HTTP/1.1\r\nhost: {}\r\n\r\n", self.host);
        self.exchange(&request).await
    }

    /// Sends `request` and reads its response, as [`post`](Self::post).
    async fn exchange<T: DeserializeOwned>(
        &mut self,
        request: &str,
    ) -> Result<Result<T, String>, BoxError> {
        self.stream.write_all(request.as_bytes()).await?;
        self.buf.clear();
        let (head_len, status, content_length) = loop {
            if let Some(head) = parse_head(&self.buf)? {
                break head;
            }
            self.fill().await?;
        };
        while self.buf.len() < head_len + content_length {
            self.fill().await?;
        }
        if self.buf.len() > head_len + content_length {
            return Err("the server sent more than one response".into());
        }
        let body = &self.buf[head_len..];
        if !(200..300).contains(&status) {
            return Ok(Err(format!("{status}: {}", String::from_utf8_lossy(body))));
        }
        Ok(Ok(serde_json::from_slice(body)?))
    }

    /// Reads what the socket has into the buffer.
    async fn fill(&mut self) -> Result<(), BoxError> {
        if self.buf.len() >= MAX_RESPONSE_BYTES {
            return Err("the response is too large".into());
        }
        if self.stream.read_buf(&mut self.buf).await? == 0 {
            return Err("the server closed the connection".into());
        }
        Ok(())
    }
}

/// The head's length, the status and the `content-length` once `buf` holds the whole head.
fn parse_head(buf: &[u8]) -> Result<Option<(usize, u16, usize)>, BoxError> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..end])?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.strip_prefix("HTTP/1.1 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or("the response has no HTTP/1.1 status line")?;
    let mut content_length = None;
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                content_length = Some(value.trim().parse::<usize>()?);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                return Err("the response is not sized by content-length".into());
            }
        }
    }
    let content_length = content_length.ok_or("the response has no content-length")?;
    if content_length > MAX_RESPONSE_BYTES {
        return Err("the response is too large".into());
    }
    Ok(Some((end + 4, status, content_length)))
}

/// Sequential acquire+release pairs through `serve` on loopback, over one keep-alive
/// connection, in blocks that alternate with blocks of the same pairs through the library:
/// the machine's speed drifts over a run, and the figures compared are taken side by side.
pub(super) async fn http(
    client: &Client,
    pairs: usize,
    masters: Option<&MastersCpu>,
) -> Result<Http, BoxError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let stop = tokio_util::sync::CancellationToken::new();
    let router = crate::server::app(client.clone(), crate::server::AppOptions::default());
    let server = tokio::spawn(crate::server::serve_http(
        listener,
        router,
        stop.clone(),
        crate::server::ConnectionLimits::default(),
    ));
    let result = tokio::time::timeout(RUN_LIMIT, alternating(client, addr, pairs, masters)).await;
    stop.cancel();
    let _ = server.await;
    result.map_err(|_| format!("the HTTP pairs took longer than {RUN_LIMIT:?}"))?
}

/// How many blocks each side's pairs are split into.
const BLOCKS: usize = 10;

/// Bare exchanges in each block, between the blocks of pairs.
const EXCHANGES_PER_BLOCK: usize = 100;

/// Pairs made one after the other, and how long they took in all.
#[derive(Default)]
struct Pairs {
    acquires: Vec<Duration>,
    took: Duration,
    failed: u64,
    /// What each block cost the CPUs in all, in µs; `None` for a block it could not be read
    /// for.
    cpu_by_block: Vec<Option<CpuPer>>,
}

impl Pairs {
    fn per_second(&self) -> f64 {
        self.acquires.len() as f64 / self.took.as_secs_f64()
    }

    /// What the pairs cost the CPUs, over all blocks; `None` unless every block was read.
    fn cpu_per_pair(&self) -> Option<CpuPer> {
        let blocks: Vec<CpuPer> = self.cpu_by_block.iter().copied().collect::<Option<_>>()?;
        if blocks.is_empty() {
            return None;
        }
        let pairs = self.acquires.len().max(1) as f64;
        Some(CpuPer {
            masters_us: blocks.iter().map(|b| b.masters_us).sum::<f64>() / pairs,
            process_us: blocks.iter().map(|b| b.process_us).sum::<f64>() / pairs,
        })
    }
}

async fn alternating(
    client: &Client,
    addr: SocketAddr,
    pairs: usize,
    masters: Option<&MastersCpu>,
) -> Result<Http, BoxError> {
    let mut conn = Connection::open(addr).await?;
    let opts = LockOptions::new(Duration::from_secs(10)).wait(Duration::ZERO);
    const WARM_UP: usize = 100;
    over_http(&mut conn, "warm", WARM_UP, &mut Pairs::default()).await?;
    through_library(client, &opts, "warm", WARM_UP, &mut Pairs::default()).await;
    let mut web = Pairs::default();
    let mut library = Pairs::default();
    let mut exchanges = Vec::with_capacity(EXCHANGES_PER_BLOCK * BLOCKS);
    let per_block = pairs.div_ceil(BLOCKS);
    for block in 0..BLOCKS {
        let label = block.to_string();
        bare_exchanges(&mut conn, EXCHANGES_PER_BLOCK, &mut exchanges).await?;
        let meter = masters.map(CpuMeter::start);
        over_http(&mut conn, &label, per_block, &mut web).await?;
        web.cpu_by_block.push(meter.and_then(|m| m.spent()));
        let meter = masters.map(CpuMeter::start);
        through_library(client, &opts, &label, per_block, &mut library).await;
        library.cpu_by_block.push(meter.and_then(|m| m.spent()));
    }
    Ok(Http {
        failed: web.failed,
        pairs_per_second: web.per_second(),
        acquire_p50_us: percentile(&mut web.acquires, 0.5),
        acquire_p99_us: percentile(&mut web.acquires, 0.99),
        exchange_p50_us: percentile(&mut exchanges, 0.5),
        library_failed: library.failed,
        library_pairs_per_second: library.per_second(),
        library_acquire_p50_us: percentile(&mut library.acquires, 0.5),
        cpu_per_pair: web.cpu_per_pair(),
        library_cpu_per_pair: library.cpu_per_pair(),
    })
}

/// What the client reads of an acquire's answer: the token its release gives back. The rest
/// of the answer is parsed as JSON and skipped, as a typed client does, rather than built into
/// a tree of values that nothing reads.
#[derive(Deserialize)]
struct Held {
    token: String,
}

/// A release's body.
#[derive(Serialize)]
struct Release<'a> {
    token: &'a str,
}

/// `GET /healthz` exchanges, one after the other, each timed into `took`.
async fn bare_exchanges(
    conn: &mut Connection,
    count: usize,
    took: &mut Vec<Duration>,
) -> Result<(), BoxError> {
    for _ in 0..count {
        let t = Instant::now();
        if let Err(answer) = conn.get::<IgnoredAny>("/healthz").await? {
            return Err(format!("GET /healthz answered {answer}").into());
        }
        took.push(t.elapsed());
    }
    Ok(())
}

async fn over_http(
    conn: &mut Connection,
    label: &str,
    count: usize,
    pairs: &mut Pairs,
) -> Result<(), BoxError> {
    let started = Instant::now();
    for i in 0..count {
        let t = Instant::now();
        // A 503 from a stall of the machine is counted, not fatal.
        let name = format!("bench-http-{label}-{i}");
        let Ok(lock) = conn
            .post::<Held>(&format!("/v1/locks/{name}"), "{}")
            .await?
        else {
            pairs.failed += 1;
            continue;
        };
        pairs.acquires.push(t.elapsed());
        let release = conn
            .post::<IgnoredAny>(
                &format!("/v1/locks/{name}/release"),
                &serde_json::to_string(&Release { token: &lock.token })?,
            )
            .await?;
        if release.is_err() {
            pairs.failed += 1;
        }
    }
    pairs.took += started.elapsed();
    Ok(())
}

async fn through_library(
    client: &Client,
    opts: &LockOptions,
    label: &str,
    count: usize,
    pairs: &mut Pairs,
) {
    let started = Instant::now();
    for i in 0..count {
        let t = Instant::now();
        // As over HTTP: a stall of the machine fails an attempt, and is counted.
        let Ok(lock) = client
            .acquire(&format!("bench-lib-{label}-{i}"), opts)
            .await
        else {
            pairs.failed += 1;
            continue;
        };
        pairs.acquires.push(t.elapsed());
        if lock.release().await.is_err() {
            pairs.failed += 1;
        }
    }
    pairs.took += started.elapsed();
}

#[cfg(test)]
mod tests {
    use super::parse_head;

    #[test]
    fn a_head_is_read_once_whole() {
        let response =
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(
            parse_head(response).unwrap(),
            Some((response.len() - 2, 200, 2))
        );
        assert_eq!(parse_head(&response[..20]).unwrap(), None);
        let refused = b"HTTP/1.1 409 Conflict\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(parse_head(refused).unwrap(), Some((refused.len(), 409, 0)));
    }

    #[test]
    fn a_response_it_cannot_size_is_an_error() {
        for response in [
            &b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{}"[..],
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 2\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: many\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 999999999\r\n\r\n",
            b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\n{}",
            b"SSH-2.0-OpenSSH\r\n\r\n",
        ] {
            assert!(
                parse_head(response).is_err(),
                "{}",
                String::from_utf8_lossy(response)
            );
        }
    }
}
