//! What the async runtime's worker threads did during a run, from tokio's own counters: how
//! often they parked and how long they ran tasks.
//!
//! Each park is a trip through the kernel: a worker with nothing to run waits for socket
//! events, or for another worker to wake it. On a machine whose few CPUs the masters share,
//! every such trip, and every wake-up of an idle CPU it leads to, is time the masters do not
//! get; the counts per critical section show how a multi-thread runtime spends more of them
//! than a current-thread one for the same work.

use std::time::Duration;

/// The counters of the current runtime's workers, summed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RuntimeCounters {
    workers: usize,
    parks: u64,
    busy: Duration,
}

/// What the workers did per critical section (or per any unit of work) between two readings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RuntimePer {
    pub(crate) workers: usize,
    /// Times a worker parked.
    pub(crate) parks: f64,
    /// Time the workers spent running tasks, in µs, all workers together.
    pub(crate) busy_us: f64,
}

impl RuntimeCounters {
    /// The counters now, of the runtime this is called on.
    pub(crate) fn read() -> Self {
        let metrics = tokio::runtime::Handle::current().metrics();
        let workers = metrics.num_workers();
        RuntimeCounters {
            workers,
            parks: (0..workers).map(|w| metrics.worker_park_count(w)).sum(),
            busy: (0..workers)
                .map(|w| metrics.worker_total_busy_duration(w))
                .sum(),
        }
    }

    /// What the workers did since `self` was read, per each of `units`; `None` for no units.
    pub(crate) fn per(&self, units: u64) -> Option<RuntimePer> {
        if units == 0 {
            return None;
        }
        let now = Self::read();
        let units = units as f64;
        Some(RuntimePer {
            workers: now.workers,
            parks: now.parks.saturating_sub(self.parks) as f64 / units,
            busy_us: now.busy.saturating_sub(self.busy).as_secs_f64() * 1e6 / units,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_that_waits_on_a_timer_counts_its_parks() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("runtime: {e}"));
        let per = rt.block_on(async {
            let before = RuntimeCounters::read();
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            (before.per(10), before.per(0))
        });
        let (Some(per), None) = per else {
            panic!("{per:?}");
        };
        assert_eq!(per.workers, 1);
        // Each sleep parks the one worker at least once.
        assert!(per.parks >= 1.0, "{per:?}");
    }
}
