//! How a run is set up: how big its schedule is, and what every scenario of it shares.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

/// How big a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Size {
    /// Fault rounds per load scenario.
    pub(crate) rounds: u32,
    /// Workers in load scenarios.
    pub(crate) load_workers: u32,
    /// Load before the first fault.
    pub(crate) baseline: Duration,
    /// How long each fault lasts.
    pub(crate) fault_for: Duration,
    /// Load after each heal.
    pub(crate) heal_for: Duration,
}

impl Size {
    /// The CI schedule: the whole suite in a few minutes on two cores.
    pub(crate) const CI: Size = Size {
        rounds: 2,
        load_workers: 3,
        baseline: Duration::from_millis(1500),
        fault_for: Duration::from_millis(2500),
        heal_for: Duration::from_millis(1500),
    };

    /// The full schedule: more rounds, more workers, longer faults.
    pub(crate) const FULL: Size = Size {
        rounds: 5,
        load_workers: 5,
        baseline: Duration::from_secs(3),
        fault_for: Duration::from_secs(4),
        heal_for: Duration::from_secs(3),
    };
}

/// What every scenario of a run shares.
#[derive(Debug, Clone)]
pub(crate) struct RunSettings {
    /// The repository root (compose files).
    pub(crate) root: PathBuf,
    /// The Redis image for masters and resource.
    pub(crate) redis_image: String,
    /// The run's seed.
    pub(crate) seed: u64,
    /// CI-sized or full schedule.
    pub(crate) size: Size,
    /// Where this run's files go.
    pub(crate) out_dir: PathBuf,
    /// This executable, started again as `worker`.
    pub(crate) exe: PathBuf,
    /// A short unique tag for project names.
    pub(crate) tag: String,
}
