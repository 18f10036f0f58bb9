//! The history of a chaos run: every operation's invocation and outcome, every resource write,
//! every fault and phase, on one clock.
//!
//! The clock is `CLOCK_MONOTONIC`, which is system-wide on Linux: the runner and the worker
//! processes read the same clock, and every time in a history is in nanoseconds since the
//! run's epoch (a reading the runner took at start and passed to the workers). The library's
//! `Instant` is the same clock, so a lock's validity converts exactly.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Nanoseconds on `CLOCK_MONOTONIC` (absolute, not relative to any epoch).
///
/// # Errors
///
/// When the clock cannot be read (never on Linux).
pub(crate) fn monotonic_ns() -> Result<u64, String> {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_err(|e| format!("cannot read CLOCK_MONOTONIC: {e}"))?;
    let secs = u64::try_from(now.tv_sec()).map_err(|e| e.to_string())?;
    let nanos = u64::try_from(now.tv_nsec()).map_err(|e| e.to_string())?;
    Ok(secs * 1_000_000_000 + nanos)
}

/// A reading of the shared clock, relative to a run's epoch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    epoch_ns: u64,
}

impl Clock {
    /// A clock whose zero is `epoch_ns` on `CLOCK_MONOTONIC`.
    pub(crate) fn new(epoch_ns: u64) -> Self {
        Clock { epoch_ns }
    }

    /// A clock whose zero is now.
    pub(crate) fn starting_now() -> Result<Self, String> {
        Ok(Clock::new(monotonic_ns()?))
    }

    /// The epoch, to pass to worker processes.
    pub(crate) fn epoch_ns(&self) -> u64 {
        self.epoch_ns
    }

    /// Nanoseconds since the epoch (0 if the clock cannot be read, which Linux never does).
    pub(crate) fn now(&self) -> u64 {
        monotonic_ns()
            .unwrap_or(self.epoch_ns)
            .saturating_sub(self.epoch_ns)
    }
}

/// Who recorded an event: a worker process (by number) or the runner.
pub(crate) type WorkerId = u32;

/// The runner's own id in [`Event::src`]: workers are numbered from 1.
pub(crate) const RUNNER: WorkerId = 0;

/// One entry of a history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Event {
    /// Nanoseconds since the run's epoch.
    pub(crate) t: u64,
    /// The worker that recorded it, or [`RUNNER`].
    pub(crate) src: WorkerId,
    /// What happened.
    #[serde(flatten)]
    pub(crate) kind: EventKind,
}

/// What happened. Operation events pair up by `op` (unique per worker): one `*Invoke`, then one
/// outcome, or none when the worker died first (the outcome is then unknown).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub(crate) enum EventKind {
    /// An acquire was called.
    AcquireInvoke {
        /// Operation number.
        op: u64,
        /// The TTL asked for, in milliseconds.
        ttl_ms: u64,
        /// What is asked for (no `fences` yet).
        #[serde(flatten)]
        section: Section,
    },
    /// An acquire returned a lock: a critical section is entered (it is left at the release's
    /// invocation, or at the end of validity).
    AcquireOk {
        /// Operation number.
        op: u64,
        /// The holder's token (a multi-lock's: its locks' tokens, comma-separated).
        token: String,
        /// The fencing token (a multi-lock's: the largest of its names').
        fence: u64,
        /// Until when the lock is certainly held (ns since the epoch; a multi-lock's: its
        /// shortest-lived lock's).
        valid_until: u64,
        /// What was taken: kind, names, a multi-lock's fences per name.
        #[serde(flatten)]
        section: Section,
    },
    /// An acquire returned an error: the caller does not hold the lock.
    AcquireFail {
        /// Operation number.
        op: u64,
        /// The error's code (`contended`, `quorum_unavailable`...).
        error: String,
    },
    /// An extend was called.
    ExtendInvoke {
        /// Operation number.
        op: u64,
        /// The holder's token.
        token: String,
    },
    /// An extend succeeded.
    ExtendOk {
        /// Operation number.
        op: u64,
        /// The new end of validity (ns since the epoch).
        valid_until: u64,
    },
    /// An extend failed; validity is unchanged.
    ExtendFail {
        /// Operation number.
        op: u64,
        /// The error's code.
        error: String,
    },
    /// A release was called: the holder stops acting on the lock from here.
    ReleaseInvoke {
        /// Operation number.
        op: u64,
        /// The holder's token.
        token: String,
    },
    /// A release succeeded.
    ReleaseOk {
        /// Operation number.
        op: u64,
    },
    /// A release failed: whether the nodes still have the lock is unknown (or, for `not_held`,
    /// they had no longer got it).
    ReleaseFail {
        /// Operation number.
        op: u64,
        /// The error's code.
        error: String,
    },
    /// The holder read the protected resource.
    Read {
        /// The holder's token.
        token: String,
        /// The counter's value.
        value: i64,
    },
    /// The holder checked its lock before a write and found it expired: it did not write.
    WriteSkipped {
        /// The holder's token.
        token: String,
    },
    /// The holder checked its lock, which was valid, and is about to write (after an optional
    /// pause: the moment a process can be frozen between its check and its write).
    WriteReady {
        /// The holder's token.
        token: String,
    },
    /// A write to the protected resource was sent.
    WriteInvoke {
        /// Operation number.
        op: u64,
        /// The writer's token.
        token: String,
        /// The writer's fencing token.
        fence: u64,
        /// The value written (the value read plus one).
        value: i64,
        /// Whether the write was fenced (`fenced_set`) or a plain `SET`.
        fenced: bool,
        /// The resource key written (absent: the one counter, `chaos:counter`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
    },
    /// The resource accepted the write.
    WriteOk {
        /// Operation number.
        op: u64,
    },
    /// The resource refused the write: a higher fencing token had written.
    WriteRejected {
        /// Operation number.
        op: u64,
        /// The highest token the resource had accepted.
        highest: u64,
    },
    /// The write's outcome is unknown (the resource did not answer).
    WriteFail {
        /// Operation number.
        op: u64,
        /// What went wrong.
        detail: String,
    },
    /// A fault (or its healing) was started by the runner.
    FaultInvoke {
        /// Fault number, shared with its confirmation.
        id: u32,
        /// `kill`, `stop`, `start`, `restart`, `pause`, `unpause`, `disconnect`, `connect`,
        /// `expire` (keys expire early), `sigstop`, `sigcont`.
        action: String,
        /// The containers' services (`redis3`) or workers (`worker1`) it applies to.
        targets: Vec<String>,
    },
    /// The fault was checked and has taken effect.
    FaultConfirmed {
        /// Fault number.
        id: u32,
        /// How it was checked.
        detail: String,
    },
    /// The fault could not be confirmed: the run is inconclusive.
    FaultUnconfirmed {
        /// Fault number.
        id: u32,
        /// What was seen instead.
        detail: String,
    },
    /// A phase of the run starts (and the previous one ends).
    Phase {
        /// A short name for reports.
        name: String,
        /// What the phase expects of the lock service.
        kind: PhaseKind,
    },
    /// The protected resource's final value, read by the runner at the end.
    ResourceFinal {
        /// The counter.
        value: i64,
    },
    /// A free-form remark (set-up, a step of a scripted scenario).
    Note {
        /// The remark.
        text: String,
    },
    /// A worker finished a command from the runner (control; not part of the checked history).
    Done {
        /// The command's number.
        cmd: u64,
        /// Whether it did what was asked (an acquire that got the lock, a write accepted...).
        ok: bool,
        /// Details for the runner's log.
        detail: String,
    },
}

/// The kind of lock a critical section holds, as the library names it.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub(crate) enum HeldKind {
    /// One holder at a time.
    #[default]
    Mutex,
    /// One owner at a time, whose holds may nest (and overlap one another).
    Reentrant,
    /// A reader's share of a read-write lock.
    Read,
    /// The writer's share of a read-write lock.
    Write,
    /// One of a semaphore's permits.
    Semaphore,
}

impl HeldKind {
    /// The kind's name, as the library's `LockKind::as_str` gives it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            HeldKind::Mutex => "mutex",
            HeldKind::Reentrant => "reentrant",
            HeldKind::Read => "read",
            HeldKind::Write => "write",
            HeldKind::Semaphore => "semaphore",
        }
    }

    fn is_mutex(&self) -> bool {
        *self == HeldKind::Mutex
    }
}

/// What a critical section takes, beyond what the first histories knew (every field absent:
/// a mutex on the history's one lock, so older histories read unchanged).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Section {
    /// The kind of lock (of each name, for a multi-lock).
    #[serde(default, skip_serializing_if = "HeldKind::is_mutex")]
    pub(crate) kind: HeldKind,
    /// The lock names (absent: the history's one lock).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) names: Vec<String>,
    /// A semaphore's permits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) permits: Option<u32>,
    /// A reentrant lock's owner id: the holds of one owner may overlap one another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) owner: Option<String>,
    /// Several names taken all-or-nothing (`Client::acquire_all`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) multi: bool,
    /// A multi-lock's fencing token per name it holds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) fences: BTreeMap<String, u64>,
}

impl Section {
    /// A short label for per-kind figures: the kind's name, or `multi` for a multi-lock
    /// (`multi-read`... when its names are not mutexes).
    pub(crate) fn label(&self) -> String {
        match (self.multi, self.kind) {
            (true, HeldKind::Mutex) => "multi".to_owned(),
            (true, k) => format!("multi-{}", k.as_str()),
            (false, k) => k.as_str().to_owned(),
        }
    }
}

/// What a phase expects, for the liveness checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PhaseKind {
    /// No fault in effect.
    Normal,
    /// A fault a quorum survives is in effect: acquires should mostly succeed.
    Fault,
    /// A majority is out: no acquire invoked in this phase may succeed.
    Unavailable,
    /// The fault has been healed: the time to the first success is measured.
    Heal,
    /// Not checked (set-up, scripted steps).
    Other,
    /// The final acquire, which must succeed.
    Final,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_histories_read_as_the_one_mutex() {
        // A line as the first histories wrote it.
        let line =
            r#"{"t":5,"src":1,"ev":"acquire_ok","op":1,"token":"a","fence":3,"valid_until":9}"#;
        let e: Event = serde_json::from_str(line).unwrap();
        let EventKind::AcquireOk { section, .. } = &e.kind else {
            panic!("{e:?}");
        };
        assert_eq!(section, &Section::default());
        // A mutex section on the one lock is written as before.
        assert_eq!(serde_json::to_string(&e).unwrap(), line);
        let write = r#"{"t":5,"src":1,"ev":"write_invoke","op":2,"token":"a","fence":3,"value":1,"fenced":true}"#;
        let e: Event = serde_json::from_str(write).unwrap();
        assert_eq!(serde_json::to_string(&e).unwrap(), write);
    }

    #[test]
    fn sections_round_trip() {
        let section = Section {
            kind: HeldKind::Read,
            names: vec!["a".into(), "b".into()],
            permits: None,
            owner: Some("o".into()),
            multi: true,
            fences: [("a".to_owned(), 4), ("b".to_owned(), 7)].into(),
        };
        assert_eq!(section.label(), "multi-read");
        let e = Event {
            t: 1,
            src: 2,
            kind: EventKind::AcquireOk {
                op: 1,
                token: "x,y".into(),
                fence: 7,
                valid_until: 10,
                section,
            },
        };
        let line = serde_json::to_string(&e).unwrap();
        assert!(
            line.contains(
                r#""kind":"read","names":["a","b"],"owner":"o","multi":true,"fences":{"a":4,"b":7}"#
            ),
            "{line}"
        );
        assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), e);
    }
}
