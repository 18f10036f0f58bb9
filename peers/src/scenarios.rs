//! The two scenarios, the same for every contender: sequential acquire+release pairs on
//! distinct names, and workers that each take one name in a loop.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use redquorum_testkit::{CpuMeter, CpuPer, MastersCpu};

use crate::contenders::Contender;
use crate::runtime_counts::{RuntimeCounters, RuntimePer};
use crate::wake_ups::{WakeCounts, WakeUpsPer, Watched};

/// Sequential pairs on distinct names: warm-up pairs, then `pairs` timed ones.
#[derive(Debug, Clone)]
pub(crate) struct Uncontended {
    pub(crate) pairs_per_second: f64,
    pub(crate) errors: u64,
    /// CPU time per timed pair: the masters' and this process's, where they could be read.
    pub(crate) cpu_per_pair: Option<CpuPer>,
}

/// Workers taking one name in turn.
#[derive(Debug, Clone)]
pub(crate) struct Contended {
    pub(crate) sections_per_second: f64,
    pub(crate) acquire_p50_us: f64,
    pub(crate) acquire_p99_us: f64,
    pub(crate) per_worker: (u64, u64),
    /// The shared counter equals the critical sections, and no two were inside at once.
    pub(crate) mutual_exclusion: bool,
    pub(crate) stuck_workers: u64,
    pub(crate) errors: u64,
    /// CPU time per critical section: the masters' and this process's (every worker's),
    /// where they could be read.
    pub(crate) cpu_per_section: Option<CpuPer>,
    /// What the runtime's workers did per critical section.
    pub(crate) runtime_per_section: Option<RuntimePer>,
    /// What the runtime threads' wake-ups brought the clients, per critical section.
    pub(crate) wake_ups_per_section: Option<WakeUpsPer>,
}

/// A worker whose acquire is still pending this long after the end is counted as stuck.
const GRACE: Duration = Duration::from_secs(2);

fn unique(prefix: &str, i: usize) -> String {
    format!("{prefix}:{i}:{:016x}", rand::random::<u64>())
}

/// One contender's acquire+release pairs on distinct names, and what the timed ones cost the
/// masters' CPUs and this process's (nothing else uses the masters meanwhile, and the process
/// runs only this contender).
pub(crate) async fn uncontended(
    contender: Contender,
    warm_up: usize,
    pairs: usize,
    masters: MastersCpu,
) -> Uncontended {
    let prefix = format!("peers:unc:{:016x}", rand::random::<u64>());
    let mut errors = 0u64;
    for i in 0..warm_up {
        if let Ok(held) = contender.acquire(&unique(&prefix, i)).await {
            let _ = contender.release(held).await;
        }
    }
    let names: Vec<String> = (0..pairs).map(|i| unique(&prefix, warm_up + i)).collect();
    let meter = CpuMeter::start(&masters);
    let started = Instant::now();
    for name in &names {
        match contender.acquire(name).await {
            Ok(held) => errors += u64::from(contender.release(held).await.is_err()),
            Err(_) => errors += 1,
        }
    }
    let took = started.elapsed();
    let cpu_per_pair = meter.per(pairs);
    Uncontended {
        pairs_per_second: pairs as f64 / took.as_secs_f64(),
        errors,
        cpu_per_pair,
    }
}

/// What the workers share: the lock's name, a counter incremented without atomicity inside
/// the critical section, and how many are inside it.
struct Shared {
    name: String,
    counter: AtomicU64,
    inside: AtomicI64,
    overlaps: AtomicU64,
    errors: AtomicU64,
}

/// Each contender a worker with its own connections, all taking one name for `run`; and what
/// the run cost the masters' CPUs and this process's.
pub(crate) async fn contended(
    contenders: Vec<Contender>,
    run: Duration,
    masters: MastersCpu,
) -> Contended {
    let shared = Arc::new(Shared {
        name: format!("peers:cont:{:016x}", rand::random::<u64>()),
        counter: AtomicU64::new(0),
        inside: AtomicI64::new(0),
        overlaps: AtomicU64::new(0),
        errors: AtomicU64::new(0),
    });
    let start = Arc::new(tokio::sync::Barrier::new(contenders.len() + 1));
    let wakes = Arc::new(WakeCounts::default());
    let mut workers = Vec::new();
    for (w, contender) in contenders.into_iter().enumerate() {
        let (shared, start) = (shared.clone(), start.clone());
        workers.push(tokio::spawn(Watched::new(w, wakes.clone(), async move {
            // Connections made and scripts loaded before the clock starts.
            for i in 0..5 {
                if let Ok(held) = contender
                    .acquire(&format!("{}:warm:{w}:{i}", shared.name))
                    .await
                {
                    let _ = contender.release(held).await;
                }
            }
            start.wait().await;
            worker(&contender, &shared, Instant::now() + run).await
        })));
    }
    start.wait().await;
    let meter = CpuMeter::start(&masters);
    let runtime = RuntimeCounters::read();
    let woken = wakes.read();
    let started = Instant::now();
    let (mut done, mut latencies, mut stuck) = (Vec::new(), Vec::new(), 0u64);
    for handle in workers {
        match handle.await {
            Ok((sections, lat, was_stuck)) => {
                done.push(sections);
                latencies.extend(lat);
                stuck += u64::from(was_stuck);
            }
            Err(_) => stuck += 1,
        }
    }
    let elapsed = started.elapsed();
    latencies.sort_by(f64::total_cmp);
    let sections: u64 = done.iter().sum();
    let cpu_per_section = meter.per(usize::try_from(sections).unwrap_or(usize::MAX));
    let runtime_per_section = runtime.per(sections);
    let wake_ups_per_section = woken.per(sections);
    Contended {
        sections_per_second: sections as f64 / elapsed.as_secs_f64(),
        acquire_p50_us: percentile(&latencies, 0.50),
        acquire_p99_us: percentile(&latencies, 0.99),
        per_worker: (
            done.iter().copied().min().unwrap_or(0),
            done.iter().copied().max().unwrap_or(0),
        ),
        mutual_exclusion: shared.counter.load(SeqCst) == sections
            && shared.overlaps.load(SeqCst) == 0,
        stuck_workers: stuck,
        errors: shared.errors.load(SeqCst),
        cpu_per_section,
        runtime_per_section,
        wake_ups_per_section,
    }
}

/// One worker's loop: its critical sections, acquire latencies (µs), and whether it was stuck.
async fn worker(contender: &Contender, shared: &Shared, until: Instant) -> (u64, Vec<f64>, bool) {
    let hard = tokio::time::Instant::from_std(until + GRACE);
    let (mut sections, mut latencies) = (0u64, Vec::new());
    while Instant::now() < until {
        let asked = Instant::now();
        let held = match tokio::time::timeout_at(hard, contender.acquire(&shared.name)).await {
            Ok(Ok(held)) => held,
            Ok(Err(_)) => {
                shared.errors.fetch_add(1, SeqCst);
                continue;
            }
            Err(_) => return (sections, latencies, true),
        };
        latencies.push(asked.elapsed().as_secs_f64() * 1e6);
        // The critical section: a read-modify-write with a yield in between, and a count of
        // who else is inside.
        if shared.inside.fetch_add(1, SeqCst) != 0 {
            shared.overlaps.fetch_add(1, SeqCst);
        }
        let value = shared.counter.load(SeqCst);
        tokio::task::yield_now().await;
        shared.counter.store(value + 1, SeqCst);
        shared.inside.fetch_sub(1, SeqCst);
        if contender.release(held).await.is_err() {
            shared.errors.fetch_add(1, SeqCst);
        }
        sections += 1;
    }
    (sections, latencies, false)
}

/// Nearest rank over sorted values: index ceil(q·n) − 1.
pub(crate) fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.saturating_sub(1).min(sorted.len() - 1)]
}
