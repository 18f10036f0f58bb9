//! The benchmark behind `redquorum bench`: latency and throughput of the lock, each next to the
//! round trip of one Redis command measured in the same run.
//!
//! Every figure is measured on real masters (started locally, or given). Every benchmark also
//! checks mutual exclusion, and reports the violations it saw (there must be none).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::{Value, json};

use redquorum::{Client, Error, LockOptions};
use redquorum_testkit::LocalNodes;

/// What to measure, and for how long.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Masters to use; empty: start five local ones.
    pub nodes: Vec<String>,
    /// Sequential pairs (and round trips for the floor) per uncontended figure.
    pub pairs: usize,
    /// Concurrent tasks for the throughput figure.
    pub tasks: usize,
    /// How long the throughput figure runs.
    pub throughput_for: Duration,
    /// Workers contending for one name in the handoff figure.
    pub workers: usize,
    /// Critical section of each handoff worker.
    pub critical_section: Duration,
    /// How long the handoff figure runs.
    pub handoff_for: Duration,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            nodes: Vec::new(),
            pairs: 3000,
            tasks: 64,
            throughput_for: Duration::from_secs(3),
            workers: 8,
            critical_section: Duration::from_millis(1),
            handoff_for: Duration::from_secs(5),
        }
    }
}

/// One measured figure.
#[derive(Debug, Clone)]
pub struct Figure {
    /// What was measured, e.g. `uncontended N=5 acquire p50`.
    pub name: String,
    /// The value, in `unit`.
    pub value: f64,
    /// `µs`, `pairs/s`, `sections/s`, `share`, `count`.
    pub unit: &'static str,
    /// For latencies: value ÷ the floor round trip. For rates: value ÷ the floor's rate (one
    /// round trip after another). `None` where a ratio means nothing (fairness, counts).
    pub ratio: Option<f64>,
}

impl Figure {
    /// The figure as one JSON object (a line of the JSON-lines output).
    pub fn to_json(&self) -> Value {
        json!({"name": self.name, "value": self.value, "unit": self.unit, "ratio_to_floor": self.ratio})
    }
}

/// How a figure relates to the floor.
#[derive(Clone, Copy)]
enum Scale {
    Latency,
    Rate,
    Plain,
}

/// Collects figures; their ratios are worked out at the end, against the floor of the whole run.
#[derive(Default)]
struct Report {
    figures: Vec<(Figure, Scale)>,
}

impl Report {
    fn push(&mut self, name: impl Into<String>, value: f64, unit: &'static str, scale: Scale) {
        let figure = Figure {
            name: name.into(),
            value,
            unit,
            ratio: None,
        };
        self.figures.push((figure, scale));
    }

    fn latency(&mut self, name: impl Into<String>, us: f64) {
        self.push(name, us, "µs", Scale::Latency);
    }

    fn rate(&mut self, name: impl Into<String>, per_second: f64, unit: &'static str) {
        self.push(name, per_second, unit, Scale::Rate);
    }

    fn plain(&mut self, name: impl Into<String>, value: f64, unit: &'static str) {
        self.push(name, value, unit, Scale::Plain);
    }

    /// The figures with their ratios to `floor_us`.
    fn finish(self, floor_us: f64) -> Vec<Figure> {
        self.figures
            .into_iter()
            .map(|(mut figure, scale)| {
                figure.ratio = match scale {
                    Scale::Latency => Some(figure.value / floor_us),
                    Scale::Rate => Some(figure.value * floor_us / 1e6),
                    Scale::Plain => None,
                };
                figure
            })
            .collect()
    }
}

/// Runs every benchmark and returns the figures, floor first.
///
/// # Errors
///
/// When local masters cannot be started, or a lock operation fails where none may (the masters
/// are up and nothing else uses them).
pub async fn run(
    opts: &BenchOptions,
) -> Result<Vec<Figure>, Box<dyn std::error::Error + Send + Sync>> {
    let local = if opts.nodes.is_empty() {
        Some(tokio::task::spawn_blocking(|| LocalNodes::start(5)).await??)
    } else {
        None
    };
    let urls = match &local {
        Some(nodes) => nodes.urls(),
        None => opts.nodes.clone(),
    };
    // The floor is read before every benchmark, and the median of those readings is what
    // every ratio is taken against: on a shared machine one reading can be far off the others
    // (the scheduler placing client and master on the same core, or on idle ones).
    let mut floors = Vec::new();
    let mut report = Report::default();

    let five = client(&urls)?;
    // N = 3 (the first three masters) and N = all of them.
    let mut sizes = vec![3.min(urls.len()), urls.len()];
    sizes.dedup();
    for n in sizes {
        floors.push(floor(&urls[0], opts.pairs).await?);
        report.latency(
            format!("bound N={n}: SET on every master at once, majority answered, p50"),
            fan_out_bound(&urls[..n], opts.pairs).await?,
        );
        let c = client(&urls[..n])?;
        let u = uncontended(&c, opts.pairs).await?;
        report.rate(
            format!("uncontended N={n}: acquire+release pairs"),
            u.pairs_per_second,
            "pairs/s",
        );
        report.latency(format!("uncontended N={n}: acquire p50"), u.acquire_p50_us);
        report.latency(format!("uncontended N={n}: acquire p99"), u.acquire_p99_us);
        report.latency(format!("uncontended N={n}: release p50"), u.release_p50_us);
        report.plain(
            format!("uncontended N={n}: failed operations"),
            u.failed as f64,
            "count",
        );
    }

    floors.push(floor(&urls[0], opts.pairs).await?);
    let t = throughput(&five, opts.tasks, opts.throughput_for).await?;
    report.rate(
        format!(
            "throughput N={}: {} tasks, distinct names",
            urls.len(),
            opts.tasks
        ),
        t.pairs_per_second,
        "pairs/s",
    );
    report.plain(
        format!("throughput N={}: failed operations", urls.len()),
        t.failed as f64,
        "count",
    );
    let mut violations = t.violations;

    floors.push(floor(&urls[0], opts.pairs).await?);
    report.latency(
        format!(
            "bound N={}: PUBLISH on every master after {:?} idle, majority heard, p50",
            urls.len(),
            opts.critical_section
        ),
        wake_bound(&urls, opts.critical_section, opts.pairs.min(1000)).await?,
    );
    let h = handoff(&urls, opts.workers, opts.critical_section, opts.handoff_for).await?;
    let label = format!(
        "contended N={}: {} workers, one name, {:?} sections",
        urls.len(),
        opts.workers,
        opts.critical_section
    );
    report.rate(
        format!("{label}: critical sections"),
        h.sections_per_second,
        "sections/s",
    );
    report.latency(format!("{label}: handoff p50"), h.handoff_p50_us);
    report.latency(format!("{label}: handoff p99"), h.handoff_p99_us);
    report.plain(
        format!("{label}: fairness min/max share"),
        h.fairness,
        "share",
    );
    violations += h.violations;

    floors.push(floor(&urls[0], opts.pairs).await?);
    let http = http(&five, opts.pairs.min(2000)).await?;
    report.rate(
        format!(
            "HTTP serve N={}: acquire+release pairs (keep-alive)",
            urls.len()
        ),
        http.pairs_per_second,
        "pairs/s",
    );
    report.latency(
        format!("HTTP serve N={}: acquire p50", urls.len()),
        http.acquire_p50_us,
    );
    report.latency(
        format!("HTTP serve N={}: acquire p99", urls.len()),
        http.acquire_p99_us,
    );
    report.plain(
        format!("HTTP serve N={}: failed requests", urls.len()),
        http.failed as f64,
        "count",
    );

    report.plain(
        "mutual-exclusion violations (all benchmarks)",
        violations as f64,
        "count",
    );
    drop(local);
    floors.sort_by(f64::total_cmp);
    let (Some(&floor_us), Some(&lowest), Some(&highest)) =
        (floors.get(floors.len() / 2), floors.first(), floors.last())
    else {
        return Err("no floor reading was taken".into());
    };
    let mut head = Report::default();
    head.latency(
        format!(
            "floor: one SET round trip on one master, p50 (median of {} readings)",
            floors.len()
        ),
        floor_us,
    );
    head.latency("floor: lowest reading", lowest);
    head.latency("floor: highest reading", highest);
    let mut figures = head.finish(floor_us);
    figures.extend(report.finish(floor_us));
    Ok(figures)
}

fn client(urls: &[String]) -> Result<Client, Error> {
    // Fresh local masters have never held a lock: no reason to quarantine them.
    Client::builder()
        .nodes(urls.iter().cloned())
        .quarantine(Duration::ZERO)
        .build()
}

fn percentile(samples: &mut [Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_unstable();
    let i = ((samples.len() - 1) as f64 * p).round() as usize;
    samples[i].as_secs_f64() * 1e6
}

/// p50 of one unpipelined SET from a single client, in µs.
async fn floor(url: &str, rounds: usize) -> Result<f64, redis::RedisError> {
    let mut conn = connections(&[url.to_owned()]).await?.remove(0);
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds + 200 {
        let started = Instant::now();
        let () = redis::cmd("SET")
            .arg("redquorum-bench:floor")
            .arg(i)
            .query_async(&mut conn)
            .await?;
        if i >= 200 {
            samples.push(started.elapsed());
        }
    }
    Ok(percentile(&mut samples, 0.5))
}

/// Connections to every master, made before anything is timed.
async fn connections(
    urls: &[String],
) -> Result<Vec<redis::aio::MultiplexedConnection>, redis::RedisError> {
    let mut conns = Vec::with_capacity(urls.len());
    for url in urls {
        conns.push(
            redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?,
        );
    }
    Ok(conns)
}

/// p50, in µs, of one unpipelined SET sent to every master at once, until a majority has
/// answered: the least an acquire can take here, with no lock and no script.
async fn fan_out_bound(urls: &[String], rounds: usize) -> Result<f64, redis::RedisError> {
    let conns = connections(urls).await?;
    let majority = urls.len() / 2 + 1;
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds + 200 {
        let started = Instant::now();
        let mut replies: FuturesUnordered<_> = conns
            .iter()
            .map(|conn| {
                let mut conn = conn.clone();
                async move {
                    redis::cmd("SET")
                        .arg("redquorum-bench:fan-out")
                        .arg(i)
                        .query_async::<()>(&mut conn)
                        .await
                }
            })
            .collect();
        let mut answered = 0;
        // Every reply is awaited, so that no round overlaps the next; the time is taken at
        // the majority.
        while let Some(reply) = replies.next().await {
            reply?;
            answered += 1;
            if answered == majority && i >= 200 {
                samples.push(started.elapsed());
            }
        }
    }
    Ok(percentile(&mut samples, 0.5))
}

/// p50, in µs, of a wake-up through every master: after `idle` with nothing to do (as a
/// waiter's client idles through a holder's critical section), one PUBLISH sent to every
/// master at once, until a subscriber on every master has heard a majority of them. This is
/// the least a handoff woken by a release can take here, with no lock and no script.
async fn wake_bound(
    urls: &[String],
    idle: Duration,
    rounds: usize,
) -> Result<f64, Box<dyn std::error::Error + Send + Sync>> {
    const CHANNEL: &str = "redquorum-bench:wake";
    let conns = connections(urls).await?;
    let mut streams = Vec::with_capacity(urls.len());
    for url in urls {
        let mut pubsub = redis::Client::open(url.as_str())?
            .get_async_pubsub()
            .await?;
        pubsub.subscribe(CHANNEL).await?;
        streams.push(pubsub.into_on_message());
    }
    let mut heard = futures::stream::select_all(streams);
    let majority = urls.len() / 2 + 1;
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds + 20 {
        tokio::time::sleep(idle).await;
        let started = Instant::now();
        let publish = futures::future::try_join_all(conns.iter().map(|conn| {
            let mut conn = conn.clone();
            async move {
                redis::cmd("PUBLISH")
                    .arg(CHANNEL)
                    .arg(i)
                    .query_async::<i64>(&mut conn)
                    .await
            }
        }));
        // Messages of earlier rounds still on their way are skipped: each names its round.
        let hear = async {
            let mut count = 0;
            while count < majority {
                let message = heard.next().await.ok_or("a subscription ended")?;
                if message.get_payload::<usize>().ok() == Some(i) {
                    count += 1;
                }
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(started.elapsed())
        };
        let (published, took) =
            tokio::join!(publish, tokio::time::timeout(Duration::from_secs(1), hear));
        published?;
        let took = took.map_err(|_| "a published message was not heard within 1 s")??;
        if i >= 20 {
            samples.push(took);
        }
    }
    Ok(percentile(&mut samples, 0.5))
}

struct Uncontended {
    failed: u64,
    pairs_per_second: f64,
    acquire_p50_us: f64,
    acquire_p99_us: f64,
    release_p50_us: f64,
}

async fn uncontended(client: &Client, pairs: usize) -> Result<Uncontended, Error> {
    let opts = LockOptions::new(Duration::from_secs(10)).wait(Duration::ZERO);
    // Warm-up: connections made, scripts cached. A stall here is of no interest.
    for i in 0..200 {
        if let Ok(lock) = client.acquire(&format!("bench-warm-{i}"), &opts).await {
            let _ = lock.release().await;
        }
    }
    let mut acquires = Vec::with_capacity(pairs);
    let mut releases = Vec::with_capacity(pairs);
    let mut failed = 0;
    let started = Instant::now();
    for i in 0..pairs {
        let t = Instant::now();
        // A stall of the machine longer than the per-node deadline fails an attempt; count it
        // rather than stop.
        let Ok(lock) = client.acquire(&format!("bench-seq-{i}"), &opts).await else {
            failed += 1;
            continue;
        };
        acquires.push(t.elapsed());
        let t = Instant::now();
        if lock.release().await.is_err() {
            failed += 1;
        }
        releases.push(t.elapsed());
    }
    let took = started.elapsed();
    Ok(Uncontended {
        failed,
        pairs_per_second: acquires.len() as f64 / took.as_secs_f64(),
        acquire_p50_us: percentile(&mut acquires, 0.5),
        acquire_p99_us: percentile(&mut acquires, 0.99),
        release_p50_us: percentile(&mut releases, 0.5),
    })
}

struct Throughput {
    failed: u64,
    pairs_per_second: f64,
    violations: u64,
}

async fn throughput(client: &Client, tasks: usize, run_for: Duration) -> Result<Throughput, Error> {
    let held: Arc<Mutex<HashSet<String>>> = Arc::default();
    let violations = Arc::new(AtomicU64::new(0));
    let pairs = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let end = started + run_for;
    let mut handles = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let (client, held, violations, pairs, failed) = (
            client.clone(),
            held.clone(),
            violations.clone(),
            pairs.clone(),
            failed.clone(),
        );
        handles.push(tokio::spawn(async move {
            let opts = LockOptions::new(Duration::from_secs(10)).wait(Duration::ZERO);
            let mut i = 0u64;
            while Instant::now() < end {
                let name = format!("bench-tp-{task}-{}", i % 16);
                i += 1;
                let Ok(lock) = client.acquire(&name, &opts).await else {
                    failed.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                if !held
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(name.clone())
                {
                    violations.fetch_add(1, Ordering::Relaxed);
                }
                held.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .remove(&name);
                if lock.release().await.is_ok() {
                    pairs.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok::<(), Error>(())
        }));
    }
    for h in handles {
        h.await
            .map_err(|e| Error::Resource(format!("a benchmark task failed: {e}")))??;
    }
    Ok(Throughput {
        failed: failed.load(Ordering::Relaxed),
        pairs_per_second: pairs.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64(),
        violations: violations.load(Ordering::Relaxed),
    })
}

struct Handoff {
    sections_per_second: f64,
    handoff_p50_us: f64,
    handoff_p99_us: f64,
    fairness: f64,
    violations: u64,
}

/// Workers (each with its own client, as separate processes would have) take turns on one
/// name. Handoff latency runs from the moment a holder starts its release to the moment the
/// next holder has the lock.
async fn handoff(
    urls: &[String],
    workers: usize,
    section: Duration,
    run_for: Duration,
) -> Result<Handoff, Error> {
    let inside = Arc::new(AtomicBool::new(false));
    let violations = Arc::new(AtomicU64::new(0));
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let handoffs: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let started = Instant::now();
    let end = started + run_for;
    let mut handles = Vec::with_capacity(workers);
    for _ in 0..workers {
        let client = client(urls)?;
        let (inside, violations, released_at, handoffs) = (
            inside.clone(),
            violations.clone(),
            released_at.clone(),
            handoffs.clone(),
        );
        handles.push(tokio::spawn(async move {
            let opts = LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(30));
            let mut sections = 0u64;
            while Instant::now() < end {
                let lock = client.acquire("bench-contended", &opts).await?;
                if let Some(at) = released_at
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take()
                {
                    handoffs
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(at.elapsed());
                }
                if inside.swap(true, Ordering::SeqCst) {
                    violations.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(section).await;
                inside.store(false, Ordering::SeqCst);
                sections += 1;
                *released_at
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
                lock.release().await?;
            }
            Ok::<u64, Error>(sections)
        }));
    }
    let mut shares = Vec::with_capacity(workers);
    for h in handles {
        shares.push(
            h.await
                .map_err(|e| Error::Resource(format!("a benchmark task failed: {e}")))??,
        );
    }
    let total: u64 = shares.iter().sum();
    let (min, max) = (
        shares.iter().copied().min().unwrap_or(0),
        shares.iter().copied().max().unwrap_or(0),
    );
    let mut samples = handoffs
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    Ok(Handoff {
        sections_per_second: total as f64 / started.elapsed().as_secs_f64(),
        handoff_p50_us: percentile(&mut samples, 0.5),
        handoff_p99_us: percentile(&mut samples, 0.99),
        fairness: if max == 0 {
            0.0
        } else {
            min as f64 / max as f64
        },
        violations: violations.load(Ordering::Relaxed),
    })
}

struct Http {
    failed: u64,
    pairs_per_second: f64,
    acquire_p50_us: f64,
    acquire_p99_us: f64,
}

/// Sequential acquire+release pairs through `serve` on loopback, over one keep-alive connection.
async fn http(
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
            axum::serve(listener, router)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await
        })
    };
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    let connection = tokio::spawn(conn);
    let mut post = async |path: String,
                          body: String|
           -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let req = hyper::Request::post(path)
            .header("host", addr.to_string())
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))?;
        sender.ready().await?;
        let response = sender.send_request(req).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
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
    let _ = connection.await;
    stop.cancel();
    let _ = server.await;
    Ok(Http {
        failed,
        pairs_per_second: acquires.len() as f64 / took.as_secs_f64(),
        acquire_p50_us: percentile(&mut acquires, 0.5),
        acquire_p99_us: percentile(&mut acquires, 0.99),
    })
}
