//! What the runner tells a worker, one JSON line on its stdin each: commands, and the settings
//! of a load loop.

use serde::{Deserialize, Serialize};

/// An order from the runner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub(crate) enum Command {
    /// Take the lock (retrying for `wait_ms`) and keep it.
    Acquire {
        /// Command number, echoed in `done`.
        id: u64,
        /// TTL in ms.
        ttl_ms: u64,
        /// How long to keep trying, in ms.
        wait_ms: u64,
    },
    /// Read the counter.
    Read {
        /// Command number.
        id: u64,
    },
    /// Check the lock, pause `pause_ms`, then write the value last read plus one.
    Write {
        /// Command number.
        id: u64,
        /// Pause between the check and the write.
        pause_ms: u64,
    },
    /// Extend the lock.
    Extend {
        /// Command number.
        id: u64,
        /// New TTL in ms.
        ttl_ms: u64,
    },
    /// Release the lock.
    Release {
        /// Command number.
        id: u64,
    },
    /// Loop acquire / read / write / (extend, read, write) / release until `stop`.
    Load {
        /// Command number.
        id: u64,
        /// The loop's settings.
        params: LoadParams,
    },
    /// End a `load` after its current iteration.
    Stop,
    /// Exit the process.
    Exit,
}

/// Settings of a load loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LoadParams {
    /// TTL of each acquisition, ms.
    pub(crate) ttl_ms: u64,
    /// How long each acquire keeps trying, ms.
    pub(crate) wait_ms: u64,
    /// Time spent between the read and the write, ms (uniform in the range).
    pub(crate) hold_ms: (u64, u64),
    /// Pause between iterations, ms (uniform in the range).
    pub(crate) think_ms: (u64, u64),
    /// Chance in percent that a holder extends its lock and does a second read-write.
    pub(crate) extend_percent: u64,
    /// Bound on iterations.
    pub(crate) max_iterations: u64,
    /// Bound on the loop's duration, ms.
    pub(crate) max_ms: u64,
    /// Seed of the loop's jitter.
    pub(crate) seed: u64,
}
