//! The library's workloads: uncontended acquire+release pairs, throughput over many names, and
//! handoffs between workers contending for one name, each checking mutual exclusion.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redquorum::{Client, Error, LockOptions};
use redquorum_testkit::{CpuMeter, CpuPer, MastersCpu};

use super::{client, percentile};

/// Sequential acquire+release pairs on distinct names, with nobody else asking.
pub(super) struct Uncontended {
    pub(super) failed: u64,
    pub(super) pairs_per_second: f64,
    pub(super) acquire_p50_us: f64,
    pub(super) acquire_p99_us: f64,
    pub(super) release_p50_us: f64,
    /// What a timed pair cost the masters' CPUs and this process's, where they were read.
    pub(super) cpu_per_pair: Option<CpuPer>,
}

/// With `masters`, also reads what the timed pairs cost their CPUs and this process's (nothing
/// else asks anything of the masters meanwhile).
pub(super) async fn uncontended(
    client: &Client,
    pairs: usize,
    masters: Option<&MastersCpu>,
) -> Result<Uncontended, Error> {
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
    let meter = masters.map(CpuMeter::start);
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
        cpu_per_pair: meter.and_then(|m| m.per(pairs)),
    })
}

/// Many tasks taking and giving back locks on their own names at once.
pub(super) struct Throughput {
    pub(super) failed: u64,
    pub(super) pairs_per_second: f64,
    pub(super) violations: u64,
}

pub(super) async fn throughput(
    client: &Client,
    tasks: usize,
    run_for: Duration,
) -> Result<Throughput, Error> {
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

/// Workers taking turns on one name.
pub(super) struct Handoff {
    pub(super) sections_per_second: f64,
    pub(super) handoff_p50_us: f64,
    pub(super) handoff_p99_us: f64,
    pub(super) fairness: f64,
    pub(super) violations: u64,
}

/// Workers (each with its own client, as separate processes would have) take turns on one
/// name. Handoff latency runs from the moment a holder starts its release to the moment the
/// next holder has the lock.
pub(super) async fn handoff(
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
