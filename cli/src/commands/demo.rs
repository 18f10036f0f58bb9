//! `redquorum demo`: local masters, one lock's life on them, and a first measurement.

use std::process::Command;
use std::time::{Duration, Instant};

use redquorum::{Client, Error, LockOptions};
use redquorum_testkit::LocalNodes;

use super::out::say;
use super::stop::stop_requested;
use super::{EXIT_OK, EXIT_SOFTWARE};

pub(super) async fn run(masters: usize, pairs: u32) -> u8 {
    // A signal drops the demo, and with it the masters it started.
    let result = tokio::select! {
        result = demo(masters, pairs) => result,
        stop = stop_requested() => {
            tracing::error!("{}: the demo and the masters it started were stopped", stop.name());
            return stop.exit_code();
        }
    };
    match result {
        Ok(()) => EXIT_OK,
        Err(e) => {
            tracing::error!("{e}");
            EXIT_SOFTWARE
        }
    }
}

async fn demo(masters: usize, pairs: u32) -> Result<(), Box<dyn std::error::Error>> {
    // Starting processes blocks; keep it off the async workers.
    let nodes = tokio::task::spawn_blocking(move || LocalNodes::start(masters)).await??;
    say!(
        "started {masters} local redis-server masters on ports {:?}",
        (0..nodes.len()).map(|i| nodes.port(i)).collect::<Vec<_>>()
    )?;
    // These masters have just started and keep nothing across a restart, so a client with
    // default settings would quarantine them (not count their votes) for the max TTL. The
    // demo knows they have held no locks before, and turns quarantine off.
    let client = || {
        Client::builder()
            .nodes(nodes.urls())
            .quarantine(Duration::ZERO)
            .build()
    };
    let alice = client()?;
    let bob = client()?;
    let opts = LockOptions::new(Duration::from_secs(10)).wait(Duration::from_millis(200));

    let mut lock = alice.acquire("demo", &opts).await?;
    say!(
        "alice acquired \"demo\" with fencing token {} on a quorum of {} of {}: valid for {}",
        lock.fence(),
        alice.quorum(),
        masters,
        ms(lock.remaining())
    )?;
    match bob.acquire("demo", &opts).await {
        // The error's own message: it also counts the masters the refusal did not wait for,
        // which a list of the holders heard from would leave out.
        Err(refused @ Error::Contended { .. }) => {
            say!("bob waited 200ms and was refused: {refused}")?
        }
        other => return Err(format!("bob should have been refused, got {other:?}").into()),
    }
    lock.extend(Duration::from_secs(20)).await?;
    say!("alice extended it: valid for {}", ms(lock.remaining()))?;
    lock.release().await?;
    say!("alice released it")?;
    let lock = bob.acquire("demo", &opts).await?;
    say!("bob acquired it with fencing token {}", lock.fence())?;
    lock.release().await?;

    // Sequential pairs on distinct names: one client, nothing contended.
    let opts = LockOptions::new(Duration::from_secs(10)).wait(Duration::ZERO);
    for i in 0..100 {
        alice
            .acquire(&format!("warm-{i}"), &opts)
            .await?
            .release()
            .await?;
    }
    let started = Instant::now();
    for i in 0..pairs {
        alice
            .acquire(&format!("pair-{i}"), &opts)
            .await?
            .release()
            .await?;
    }
    let took = started.elapsed();
    let per_sec = f64::from(pairs) / took.as_secs_f64();
    say!(
        "{pairs} uncontended acquire+release pairs on {masters} masters: {per_sec:.0} pairs/s ({:.1} µs per pair)",
        took.as_secs_f64() * 1e6 / f64::from(pairs)
    )?;
    match redis_benchmark_rtt(&nodes) {
        Some(rtt_us) => say!(
            "one Redis round trip (redis-benchmark -c 1 -P 1 -t set on one master): {rtt_us:.1} µs; a pair costs {:.1} round trips",
            took.as_secs_f64() * 1e6 / f64::from(pairs) / rtt_us
        ),
        None => say!("(redis-benchmark not found: no round-trip floor measured)"),
    }?;
    Ok(())
}

/// Mean time of one unpipelined SET from a single client, by `redis-benchmark`, in µs.
fn redis_benchmark_rtt(nodes: &LocalNodes) -> Option<f64> {
    let url = url::Url::parse(&nodes.url(0)).ok()?;
    let output = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &nodes.port(0).to_string(),
            "-c",
            "1",
            "-P",
            "1",
            "-t",
            "set",
            "-n",
            "20000",
            "-q",
        ])
        .args(
            url.password()
                .map(|p| vec!["-a".to_owned(), p.to_owned()])
                .unwrap_or_default(),
        )
        .output()
        .ok()?;
    // Progress lines come first (separated by '\r'), then the summary:
    // "SET: 31250.00 requests per second, p50=0.031 msec"
    let text = String::from_utf8_lossy(&output.stdout);
    let rps: f64 = text
        .rsplit("SET:")
        .next()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(1e6 / rps)
}

/// A duration rounded to whole milliseconds, for people.
fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}
