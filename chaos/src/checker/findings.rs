//! What the checker finds in a history: holds and their windows, overlapping holds, writes to
//! the resource, per-phase acquire figures, faults, and the [`Analysis`] that gathers them.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::history::{HeldKind, PhaseKind, Section, WorkerId};

/// One successful acquisition and what its holder did with it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Hold {
    /// The worker holding it.
    pub(crate) worker: WorkerId,
    /// The holder token.
    pub(crate) token: String,
    /// The fencing token.
    pub(crate) fence: u64,
    /// When the acquire was called.
    pub(crate) invoked: u64,
    /// When the acquire returned the lock.
    pub(crate) ok: u64,
    /// End of validity, after the last successful extend.
    pub(crate) valid_until: u64,
    /// When the holder called release, if it did.
    pub(crate) release_invoked: Option<u64>,
    /// Whether the release succeeded (`None`: not released, or outcome unknown).
    pub(crate) released: Option<bool>,
    /// The last time the holder did something under this lock (read, write, extend, release).
    pub(crate) last_action: u64,
    /// What it holds: kind, names, a multi-lock's fences per name.
    pub(crate) section: Section,
}

impl Hold {
    /// `[ok, min(valid_until, release invoked)]`.
    pub(crate) fn certain(&self) -> (u64, u64) {
        let end = self
            .release_invoked
            .map_or(self.valid_until, |r| r.min(self.valid_until));
        (self.ok, end.max(self.ok))
    }

    /// `[ok, max(certain end, last action)]`.
    pub(crate) fn action(&self) -> (u64, u64) {
        let (start, end) = self.certain();
        (start, end.max(self.last_action))
    }

    /// The kind of lock held.
    pub(crate) fn kind(&self) -> HeldKind {
        self.section.kind
    }

    /// The names held: those recorded, or the history's one lock (`""`).
    pub(crate) fn names(&self) -> Vec<&str> {
        if self.section.names.is_empty() {
            vec![""]
        } else {
            self.section.names.iter().map(String::as_str).collect()
        }
    }

    /// The fencing token on `name`: a multi-lock's for that name, else the hold's.
    pub(crate) fn fence_on(&self, name: &str) -> u64 {
        self.section.fences.get(name).copied().unwrap_or(self.fence)
    }
}

/// Two holds whose windows overlap.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Overlap {
    /// The earlier hold's worker and fencing token.
    pub(crate) first: (WorkerId, u64),
    /// The later hold's worker and fencing token.
    pub(crate) second: (WorkerId, u64),
    /// The name both held (empty: the history's one lock).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) name: String,
    /// Start of the overlap (ns).
    pub(crate) from: u64,
    /// Length of the overlap in milliseconds.
    pub(crate) overlap_ms: f64,
}

/// More holders of a semaphore at once than it has permits: the hold `admitted` was granted
/// while `permits` others already held it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Crowd {
    /// The semaphore's name (empty: the history's one lock).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) name: String,
    /// Its permits.
    pub(crate) permits: u32,
    /// The hold admitted one too many (worker, fencing token).
    pub(crate) admitted: (WorkerId, u64),
    /// Every holder at that moment, the admitted one included.
    pub(crate) holders: Vec<(WorkerId, u64)>,
    /// When it was admitted (ns).
    pub(crate) from: u64,
    /// How long more than `permits` held it at once, in milliseconds.
    pub(crate) overlap_ms: f64,
}

/// A write to the protected resource.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Write {
    /// The writer.
    pub(crate) worker: WorkerId,
    /// The writer's fencing token.
    pub(crate) fence: u64,
    /// The value written.
    pub(crate) value: i64,
    /// Sent at.
    pub(crate) invoked: u64,
    /// Answered at (`None`: no answer).
    pub(crate) done: Option<u64>,
    /// Accepted, rejected by fencing, or unknown.
    pub(crate) outcome: WriteOutcome,
    /// Whether it was a fenced write.
    pub(crate) fenced: bool,
    /// The resource key (empty: the one counter).
    pub(crate) key: String,
}

/// What became of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WriteOutcome {
    /// The resource accepted it.
    Accepted,
    /// The resource refused it (a higher fencing token had written).
    Rejected,
    /// No answer.
    Unknown,
}

/// Counts of one operation's outcomes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct OpCounts {
    /// Calls.
    pub(crate) invoked: u64,
    /// Succeeded.
    pub(crate) ok: u64,
    /// Failed (the caller knows nothing changed in its favour).
    pub(crate) fail: u64,
    /// Outcome unknown (no answer, or a release that could not reach a quorum).
    pub(crate) unknown: u64,
}

/// Acquire success within one phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PhaseStats {
    /// The phase's name.
    pub(crate) name: String,
    /// Its kind.
    pub(crate) kind: PhaseKind,
    /// Start (ns).
    pub(crate) from: u64,
    /// End (ns): the next phase's start, or the end of the history.
    pub(crate) to: u64,
    /// Acquires invoked in the phase.
    pub(crate) invoked: u64,
    /// Acquires judged: those invoked, less (after a heal) those that failed only once the next
    /// fault was under way.
    pub(crate) acquires: u64,
    /// Of which succeeded.
    pub(crate) acquired: u64,
    /// For a heal phase: ms from its start to the first success of an acquire invoked in it.
    pub(crate) recovery_ms: Option<f64>,
}

impl PhaseStats {
    /// Successes over attempts; `None` without attempts.
    pub(crate) fn success_rate(&self) -> Option<f64> {
        (self.acquires > 0).then(|| self.acquired as f64 / self.acquires as f64)
    }
}

/// A fault the runner injected.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct FaultRecord {
    /// Its number.
    pub(crate) id: u32,
    /// What was done.
    pub(crate) action: String,
    /// To what.
    pub(crate) targets: Vec<String>,
    /// When it was started.
    pub(crate) invoked: u64,
    /// When it was confirmed, if it was.
    pub(crate) confirmed: Option<u64>,
    /// How it was confirmed, or why not.
    pub(crate) detail: String,
}

/// Everything the checker found in a history.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Analysis {
    /// End of the history (ns).
    pub(crate) end: u64,
    /// Acquire outcomes.
    pub(crate) acquire: OpCounts,
    /// Acquire outcomes per kind of lock asked for (`mutex`, `read`, `multi`...).
    pub(crate) by_kind: BTreeMap<String, OpCounts>,
    /// Extend outcomes.
    pub(crate) extend: OpCounts,
    /// Release outcomes.
    pub(crate) release: OpCounts,
    /// Every hold, in order of acquisition.
    pub(crate) holds: Vec<Hold>,
    /// Every write, in order of sending.
    pub(crate) writes: Vec<Write>,
    /// Holds whose certain windows overlap.
    pub(crate) definite: Vec<Overlap>,
    /// Holds whose action windows overlap, certain windows not.
    pub(crate) possible: Vec<Overlap>,
    /// Accepted writes overwritten by a writer that had not seen them.
    pub(crate) lost_updates: u64,
    /// Accepted writes sent after a higher fencing token's write was accepted.
    pub(crate) stale_accepted: u64,
    /// Writes the resource refused because of fencing.
    pub(crate) rejected: u64,
    /// Semaphore holds admitted beyond the permits, by certain windows.
    pub(crate) crowded: Vec<Crowd>,
    /// Semaphore holds admitted beyond the permits by action windows only.
    pub(crate) possibly_crowded: Vec<Crowd>,
    /// Multi-lock sections that did not hold every one of their names.
    pub(crate) partial_sections: u64,
    /// Holds whose fencing token is out of order with an earlier hold of the same name (see
    /// the `exclusion` module for each kind's rule).
    pub(crate) fence_order_violations: u64,
    /// Acquires invoked while a majority was out that succeeded anyway.
    pub(crate) false_acquires: u64,
    /// Per phase.
    pub(crate) phases: Vec<PhaseStats>,
    /// Whether an acquire in the final phase succeeded (`None`: there was no final phase).
    pub(crate) final_acquire: Option<bool>,
    /// The faults.
    pub(crate) faults: Vec<FaultRecord>,
    /// The resource's final counter, as the runner read it.
    pub(crate) resource_final: Option<i64>,
}

impl Analysis {
    /// Faults confirmed to have taken effect.
    pub(crate) fn faults_confirmed(&self) -> usize {
        self.faults.iter().filter(|f| f.confirmed.is_some()).count()
    }

    /// The longest definite overlap in ms.
    pub(crate) fn max_definite_ms(&self) -> f64 {
        self.definite
            .iter()
            .map(|o| o.overlap_ms)
            .fold(0.0, f64::max)
    }

    /// The longest definite over-admission of a semaphore in ms.
    pub(crate) fn max_crowded_ms(&self) -> f64 {
        self.crowded
            .iter()
            .map(|c| c.overlap_ms)
            .fold(0.0, f64::max)
    }

    /// The lowest success rate among phases of the given kind that had attempts.
    pub(crate) fn min_success(&self, kind: PhaseKind) -> Option<f64> {
        self.phases
            .iter()
            .filter(|p| p.kind == kind)
            .filter_map(PhaseStats::success_rate)
            .reduce(f64::min)
    }

    /// The slowest recovery after a heal, in ms; `None` when there were no heal phases.
    /// A heal phase with attempts but no success counts as infinitely slow.
    pub(crate) fn max_recovery_ms(&self) -> Option<f64> {
        self.phases
            .iter()
            .filter(|p| p.kind == PhaseKind::Heal && p.invoked > 0)
            .map(|p| p.recovery_ms.unwrap_or(f64::INFINITY))
            .reduce(f64::max)
    }
}
