//! What a scenario is: the situation it builds, how its masters and clients are set up, and
//! what the checker must find in its history. The catalogue, and the steps each scenario
//! takes, are in `scenarios`.

use std::time::Duration;

use serde::Serialize;

use crate::checker::Expectation;
use crate::settings::Size;
use crate::worker::Mix;

/// Which fault a load scenario injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LoadFault {
    /// Kill two masters; start them again (empty) after more than a TTL.
    KillMinority,
    /// Kill three masters: no quorum; start them again after more than a TTL.
    KillMajority,
    /// Freeze two masters (docker pause).
    PauseMinority,
    /// Cut two masters off the network.
    PartitionMinority,
    /// Rolling kills of two masters, each started again (empty) only after a TTL.
    DelayedRestart,
    /// Restart (SIGKILL) a majority of durable masters one after the other, at once.
    AofRestart,
    /// A different fault each round, in this order (again from the start when there are more
    /// rounds), on `masters` masters (a restart: on one).
    Rotating {
        /// How many masters a kill, pause or partition takes.
        masters: usize,
        /// The faults, one per round.
        faults: &'static [RoundFault],
    },
}

/// One round's fault in a [`LoadFault::Rotating`] schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RoundFault {
    /// Killed; started again (empty, so quarantined) after more than a TTL.
    Kill,
    /// Frozen (docker pause), then thawed.
    Pause,
    /// Cut off the network, then reconnected.
    Partition,
    /// One master killed and started again at once, empty: the quarantine keeps it out.
    Restart,
}

/// What a scenario does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// Workers loop while faults come and go.
    Load(LoadFault),
    /// A holder with a bare majority; one of its masters restarts at once; another worker
    /// tries to take the lock.
    EmptyRestart,
    /// As [`Kind::EmptyRestart`], then a worker started only after the restart (a new
    /// client, which never saw the masters before) tries too.
    EmptyRestartNewcomer,
    /// As [`Kind::EmptyRestart`] with durable masters, then a load with immediate restarts.
    DurableRestart,
    /// A holder with a bare majority; the lock expires early on one of its masters; another
    /// worker takes the lock; the first one writes.
    ClockJump,
    /// A holder frozen between its validity check and its write for longer than its TTL.
    PausedHolder,
    /// Three holders of a two-permit semaphore, each taking it while partitions leave it a
    /// different three of the five masters.
    SemaphorePartitions,
}

/// One scenario.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Scenario {
    /// Its name on the command line.
    pub(crate) name: &'static str,
    /// One line on what it does.
    pub(crate) about: &'static str,
    /// What it does.
    pub(crate) kind: Kind,
    /// Masters run AOF with `appendfsync always`.
    pub(crate) durable: bool,
    /// Workers write with `fenced_set`.
    pub(crate) fencing: bool,
    /// The clients' restart quarantine.
    pub(crate) quarantine: Duration,
    /// The clients' max TTL.
    pub(crate) max_ttl: Duration,
    /// What the workers' critical sections take in a load.
    pub(crate) mix: Mix,
    /// The clients grant semaphores on a bare majority (unsafe: a positive control).
    pub(crate) unsafe_semaphores: bool,
    /// What the checker must find.
    pub(crate) expect: Expectation,
}

impl Scenario {
    /// The masters' extra arguments (`REDIS_ARGS`).
    pub(crate) fn redis_args(&self) -> &'static str {
        if self.durable {
            "--appendonly yes --appendfsync always"
        } else {
            r#"--save "" --appendonly no"#
        }
    }

    /// How many workers it runs.
    pub(crate) fn workers(&self, size: &Size) -> u32 {
        match self.kind {
            Kind::Load(_) | Kind::DurableRestart => size.load_workers.max(3),
            _ => 3,
        }
    }
}
