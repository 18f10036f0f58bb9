//! One master: the keys the scripts keep for one lock name and for the deployment, its
//! process, its last snapshot, and how it restarts.

use crate::ids::{Fence, Process, Token, Waiter, Window};

/// A waiter's place in the lock's queue (`lua/queue.lua`), by priority.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Place {
    /// Lower goes first; the same on every master.
    pub priority: u8,
    /// Whose place it is.
    pub waiter: Waiter,
    /// The terms a release may hand the lock over on; none for a place that is only woken.
    pub terms: Option<Terms>,
}

/// The terms of a waiter's attempt, kept with its place (`lua/acquire.lua`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Terms {
    /// The attempt's token.
    pub token: Token,
    /// The fencing token it proposed.
    pub proposal: Fence,
}

/// A read-write lock's or a semaphore's holder on one master (`lua/holders.lua`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Hold {
    /// The holder's token.
    pub token: Token,
    /// A read-write lock's reader (else a writer or a permit).
    pub reader: bool,
    /// The holder's fencing token.
    pub fence: Fence,
}

/// What a master stores: one lock name's keys and the deployment's.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct Keys {
    /// A mutex's key (`{prefix}lock:NAME`).
    pub lock: Option<crate::ids::Value>,
    /// A read-write lock's or a semaphore's holders, sorted.
    pub holders: Vec<Hold>,
    /// The fencing counter as the scripts read it: the name's counter while a hold of the name
    /// may live, else the floor of its slot (`lua/marked.lua`). Both are raised to every token
    /// granted, and a snapshot or a restart keeps or loses them together, so for one name they
    /// are one value, which never expires.
    pub counter: Fence,
    /// The waiters' queue, sorted by priority.
    pub queue: Vec<Place>,
    /// The deployment's marker.
    pub marker: bool,
    /// The process the marker was made for (`{prefix}marked-run`).
    pub marked_run: Option<Process>,
    /// The master is quarantined until this window has ended: the quarantine key's TTL, set
    /// from the kept masters' records. `None` once it has.
    pub quarantine: Option<Window>,
    /// The latest expiry of anything this master granted (`{prefix}latest-expiry`): the last
    /// window a lock it granted belongs to. `None` once that window has ended.
    pub record: Option<Window>,
}

impl Keys {
    /// The keys of a master of a deployment in use, marked for `process`.
    pub fn marked(process: Process) -> Self {
        Keys {
            marker: true,
            marked_run: Some(process),
            ..Keys::default()
        }
    }

    /// Whether the master carries a marker made for another process than `process` while it
    /// does not keep every write: it came back from older data.
    pub fn restarted(&self, process: Process, durable: bool) -> bool {
        self.marker && !durable && self.marked_run != Some(process)
    }

    /// Records that a lock of window `w` was granted here.
    pub fn record(&mut self, w: Window) {
        self.record = self.record.max(Some(w));
    }

    /// Forgets what ended before window `ended`: the record and the quarantine expire.
    pub fn expire_before(&mut self, ended: Window) {
        if self.record.is_some_and(|w| w < ended) {
            self.record = None;
        }
        if self.quarantine.is_some_and(|w| w < ended) {
            self.quarantine = None;
        }
    }

    /// Takes or refreshes a place (`queue_place` in `lua/queue.lua`).
    pub fn queue_place(&mut self, place: Place) {
        self.queue.retain(|p| p.waiter != place.waiter);
        self.queue.push(place);
        self.queue.sort();
    }

    /// Takes a waiter's place off the queue.
    pub fn dequeue(&mut self, waiter: Waiter) {
        self.queue.retain(|p| p.waiter != waiter);
    }
}

/// How a master comes back after a crash.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Restart {
    /// No persistence: everything is gone.
    Empty,
    /// Its last snapshot (RDB) is reloaded: what it held then, marker included.
    FromSnapshot,
    /// AOF with `appendfsync always`: every write is kept.
    Durable,
}

/// One master.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Master {
    /// The current process: a crash starts the next.
    pub process: Process,
    /// What it stores now.
    pub keys: Keys,
    /// The last snapshot a plain master took.
    pub snapshot: Option<Keys>,
    /// Whether it keeps every write (AOF with `appendfsync always`), as it is set up.
    pub durable: bool,
}

impl Master {
    /// A master whose first process stores `keys`.
    pub fn new(keys: Keys, durable: bool) -> Self {
        Master {
            process: 0,
            keys,
            snapshot: None,
            durable,
        }
    }

    /// Crashes and comes back as a new process.
    pub fn restart(&mut self, how: Restart) {
        self.process += 1;
        match how {
            Restart::Empty => self.keys = Keys::default(),
            Restart::FromSnapshot => self.keys = self.snapshot.clone().unwrap_or_default(),
            Restart::Durable => {}
        }
    }
}
