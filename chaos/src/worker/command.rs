//! What the runner tells a worker, one JSON line on its stdin each: commands, the kind of lock
//! they take, and the settings of a load loop.

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
        /// What to take (absent: the mutex).
        #[serde(default)]
        lock: LockSpec,
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

/// What an acquire takes: the worker's lock name as one kind, or several names at once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum LockSpec {
    /// The mutex.
    #[default]
    Mutex,
    /// One hold of a reentrant lock, as the worker's own owner (which re-enters).
    Reentrant,
    /// A reader's share.
    Read,
    /// The writer's share.
    Write,
    /// One permit of a semaphore.
    Semaphore {
        /// Its permits.
        permits: u32,
    },
    /// These names all at once, each a mutex (all-or-nothing).
    Multi {
        /// The names.
        names: Vec<String>,
    },
}

/// What a load loop's critical sections take, iteration after iteration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mix", rename_all = "snake_case")]
pub(crate) enum Mix {
    /// The mutex; the holder reads, writes, may extend and write again.
    #[default]
    Mutex,
    /// The read-write lock: a writer `write_percent` of the time (it reads and writes, fenced
    /// with its token), a reader otherwise (it reads and holds a while).
    ReadWrite {
        /// Chance in percent of taking the writer's share.
        write_percent: u64,
    },
    /// A semaphore permit: the holder reads and holds a while (holders share the resource, so
    /// they do not write it).
    Semaphore {
        /// The semaphore's permits.
        permits: u32,
    },
    /// The reentrant lock, held `depth` times by the worker's owner (nested, a write under
    /// each hold); `mutex_percent` of the time a plain mutex of the same name instead.
    Reentrant {
        /// Holds per section.
        depth: u32,
        /// Chance in percent of taking the mutex instead.
        mutex_percent: u64,
    },
    /// Between `min` and `max` of `names`, picked at random, all at once; the holder reads and
    /// writes each name's own counter, fenced with that name's token.
    Multi {
        /// The names to pick from.
        names: Vec<String>,
        /// Fewest names per section.
        min: u64,
        /// Most names per section.
        max: u64,
    },
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
    /// What each critical section takes (absent: the mutex).
    #[serde(default)]
    pub(crate) mix: Mix,
}
