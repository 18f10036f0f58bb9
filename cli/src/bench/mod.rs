//! The benchmark behind `redquorum bench`: latency and throughput of the lock, each next to the
//! round trip of one Redis command measured in the same run.
//!
//! Every figure is measured on real masters (started locally, or given). Every benchmark also
//! checks mutual exclusion, and reports the violations it saw (there must be none).

mod bounds;
mod http;
mod report;
mod workloads;

use std::time::Duration;

use redquorum::{Client, Error};
use redquorum_testkit::LocalNodes;

use bounds::{fan_out_bound, floor, wake_bound};
use http::http;
pub use report::Figure;
use report::Report;
use workloads::{handoff, throughput, uncontended};

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
        // The CPU time of the masters in use, where they are this process's own.
        let masters = local.as_ref().map(|nodes| nodes.first_masters_cpu(n));
        floors.push(floor(&urls[0], opts.pairs).await?);
        let (bound, bound_cpu) = fan_out_bound(&urls[..n], opts.pairs, masters.as_ref()).await?;
        report.latency(
            format!("bound N={n}: SET on every master at once, majority answered, p50"),
            bound,
        );
        if let Some(cpu) = bound_cpu {
            report.plain(
                format!("bound N={n}: the masters' CPU per SET on every master"),
                cpu.masters_us,
                "µs",
            );
        }
        let c = client(&urls[..n])?;
        let u = uncontended(&c, opts.pairs, masters.as_ref()).await?;
        report.rate(
            format!("uncontended N={n}: acquire+release pairs"),
            u.pairs_per_second,
            "pairs/s",
        );
        report.latency(format!("uncontended N={n}: acquire p50"), u.acquire_p50_us);
        report.latency(format!("uncontended N={n}: acquire p99"), u.acquire_p99_us);
        report.latency(format!("uncontended N={n}: release p50"), u.release_p50_us);
        // Where the masters share this machine's CPUs with the client, the pairs per second
        // follow what a pair costs them all, more than the round trip.
        if let Some(cpu) = u.cpu_per_pair {
            report.plain(
                format!("uncontended N={n}: the masters' CPU per pair"),
                cpu.masters_us,
                "µs",
            );
            report.plain(
                format!("uncontended N={n}: this process's CPU per pair"),
                cpu.process_us,
                "µs",
            );
            if let Some(set) = bound_cpu.filter(|set| set.masters_us > 0.0) {
                report.plain(
                    format!(
                        "uncontended N={n}: the masters' CPU per pair, in SETs on every master"
                    ),
                    cpu.masters_us / set.masters_us,
                    "share",
                );
            }
        }
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
    let http = http(
        &five,
        opts.pairs.min(2000),
        local.as_ref().map(LocalNodes::masters_cpu).as_ref(),
    )
    .await?;
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
    report.rate(
        format!(
            "HTTP serve N={}: the library's pairs in the blocks between",
            urls.len()
        ),
        http.library_pairs_per_second,
        "pairs/s",
    );
    report.plain(
        format!(
            "HTTP serve N={}: the library's failed operations in the blocks between",
            urls.len()
        ),
        http.library_failed as f64,
        "count",
    );
    // What the service adds to the library, from blocks of each that alternated: the goals
    // are at most one round trip at the median, and at least 0.7 of its pairs per second.
    report.latency(
        format!(
            "HTTP serve N={}: acquire p50 above the library's",
            urls.len()
        ),
        http.acquire_p50_us - http.library_acquire_p50_us,
    );
    // The part of that which is the exchange itself: the same connection, a request that asks
    // no master.
    report.latency(
        format!(
            "HTTP serve N={}: one exchange that asks no master (GET /healthz), p50",
            urls.len()
        ),
        http.exchange_p50_us,
    );
    report.plain(
        format!("HTTP serve N={}: pairs/s over the library's", urls.len()),
        http.pairs_per_second / http.library_pairs_per_second,
        "share",
    );
    // Where the time goes when the CPUs are what bounds the pairs: the service (and the
    // bench's own HTTP client) run in this process, so its CPU per pair is what HTTP adds.
    if let (Some(web), Some(library)) = (http.cpu_per_pair, http.library_cpu_per_pair) {
        for (what, cpu) in [("over HTTP", web), ("through the library", library)] {
            report.plain(
                format!(
                    "HTTP serve N={}: this process's CPU per pair {what}",
                    urls.len()
                ),
                cpu.process_us,
                "µs",
            );
            report.plain(
                format!(
                    "HTTP serve N={}: the masters' CPU per pair {what}",
                    urls.len()
                ),
                cpu.masters_us,
                "µs",
            );
        }
    }

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
    // Where a round trip costs far more across CPUs than on one (a virtual machine's idle CPU
    // can be slow to wake), the readings split between two values, and every ratio to the
    // floor depends on which of them the median fell on.
    let spread = highest / lowest;
    head.plain(FLOOR_SPREAD, spread, "share");
    let mut figures = head.finish(floor_us);
    figures.extend(report.finish(floor_us));
    Ok(figures)
}

/// The figure for how far apart the floor's lowest and highest readings are.
const FLOOR_SPREAD: &str = "floor: highest reading over the lowest";

/// How far apart the floor's lowest and highest readings may be before the run is told that its
/// ratios to the floor are not to be trusted.
const FLOOR_SPREAD_WARNING: f64 = 2.0;

/// What to tell the reader of `figures` when the floor's readings are too far apart for the
/// ratios to it to mean much; `None` when they agree.
pub fn floor_warning(figures: &[Figure]) -> Option<String> {
    let spread = figures.iter().find(|f| f.name == FLOOR_SPREAD)?.value;
    (spread > FLOOR_SPREAD_WARNING).then(|| {
        format!(
            "The floor's readings differ {spread:.1}-fold: a round trip on this machine depends on \
             where the processes run, so the ratios to the floor depend on which reading the \
             median fell on; compare the figures themselves."
        )
    })
}

/// A client on `urls` as every benchmark uses one.
pub(super) fn client(urls: &[String]) -> Result<Client, Error> {
    // Fresh local masters have never held a lock: no reason to quarantine them.
    Client::builder()
        .nodes(urls.iter().cloned())
        .quarantine(Duration::ZERO)
        .build()
}

/// The `p` quantile of `samples` (0.0 to 1.0), in µs.
pub(super) fn percentile(samples: &mut [Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_unstable();
    let i = ((samples.len() - 1) as f64 * p).round() as usize;
    samples[i].as_secs_f64() * 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(value: f64) -> Vec<Figure> {
        let mut head = Report::default();
        head.latency("floor: lowest reading", 10.0);
        head.plain(FLOOR_SPREAD, value, "share");
        head.finish(10.0)
    }

    #[test]
    fn a_floor_whose_readings_split_is_called_out() {
        let warning = floor_warning(&spread(7.4)).expect("a 7.4-fold spread is called out");
        assert!(warning.contains("7.4-fold"), "{warning}");
        assert_eq!(floor_warning(&spread(1.3)), None);
        assert_eq!(floor_warning(&spread(FLOOR_SPREAD_WARNING)), None);
        // A run without the figure says nothing rather than guessing.
        assert_eq!(floor_warning(&spread(7.4)[..1]), None);
    }
}
