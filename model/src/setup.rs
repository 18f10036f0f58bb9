//! What one check covers: how many masters and which keep every write, what each client does,
//! how many faults of each kind may happen, and the rules in force.

use crate::rules::Rules;
use crate::scripts::holders::Share;

/// Which lock a session takes.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Kind {
    /// A mutex.
    Mutex,
    /// A read-write lock's reader.
    Reader,
    /// A read-write lock's writer.
    Writer,
    /// One of a semaphore's permits (the number).
    Permit(u8),
}

impl Kind {
    /// Whether a holder of this kind excludes every other holder.
    pub fn exclusive(self) -> bool {
        matches!(self, Kind::Mutex | Kind::Writer)
    }

    /// The share a read-write lock's or a semaphore's script is asked for.
    pub fn share(self) -> Option<Share> {
        match self {
            Kind::Mutex => None,
            Kind::Reader => Some(Share::Reader),
            Kind::Writer => Some(Share::Writer),
            Kind::Permit(p) => Some(Share::Permit(p)),
        }
    }

    /// How many masters must grant (`LockKind::quorum`): a majority, or for `P` permits
    /// `⌊N·P/(P+1)⌋ + 1`, so that `P + 1` holders would need more grants than the masters have.
    pub fn quorum(self, masters: usize) -> usize {
        match self {
            Kind::Permit(p) if p > 1 => {
                let p = usize::from(p);
                masters * p / (p + 1) + 1
            }
            _ => masters / 2 + 1,
        }
    }
}

/// One acquire of a client, then its hold and release.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Session {
    /// The lock it takes.
    pub kind: Kind,
    /// Whether it waits in line (`acquire` with a wait) or tries once (`try_acquire`).
    pub waits: bool,
    /// Whether it takes a free lock only in its turn (`fair`, the default).
    pub fair: bool,
    /// Whether it releases the lock it got (at any time, valid or not); otherwise it keeps it.
    pub releases: bool,
}

impl Session {
    /// A fair mutex acquire that waits in line.
    pub const fn waiting() -> Self {
        Session {
            kind: Kind::Mutex,
            waits: true,
            fair: true,
            releases: true,
        }
    }

    /// An unfair mutex `try_acquire`.
    pub const fn unfair_try() -> Self {
        Session {
            kind: Kind::Mutex,
            waits: false,
            fair: false,
            releases: true,
        }
    }

    /// One try of `kind` (not a mutex: these kinds are not fair).
    pub const fn try_kind(kind: Kind) -> Self {
        Session {
            kind,
            waits: false,
            fair: false,
            releases: true,
        }
    }

    /// The same session, whose holder keeps the lock instead of releasing it.
    pub const fn keeping(self) -> Self {
        Session {
            releases: false,
            ..self
        }
    }
}

/// How many faults of each kind may happen in one run.
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq)]
pub struct Faults {
    /// Master crashes (each comes back empty, from its snapshot, or durable, as it is set up).
    pub crashes: u8,
    /// Snapshots a plain master takes.
    pub snapshots: u8,
    /// Command connections that break with calls on them (which the master may still run).
    pub breaks: u8,
    /// Pub/sub messages delivered twice.
    pub duplicates: u8,
    /// Script calls left in the network past other events (late, or lost with their
    /// connection); every other call runs as it is sent.
    pub delays: u8,
}

/// One configuration to check.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Per master: whether it keeps every write (AOF with `appendfsync always`).
    pub durable: Vec<bool>,
    /// Per client: its sessions, one after the other.
    pub programs: Vec<Vec<Session>>,
    /// Attempts per waiting session.
    pub attempts: u8,
    /// How many faults may happen.
    pub faults: Faults,
    /// The protocol's version.
    pub rules: Rules,
}

impl Setup {
    /// How many masters there are.
    pub fn masters(&self) -> usize {
        self.durable.len()
    }
}
