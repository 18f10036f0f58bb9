//! What a worker holds in a critical section (one lock of any kind, or a multi-lock), how it is
//! asked for, and how it is described in the history.

use std::time::Duration;

use redquorum::{Client, Lock, LockKind, LockOptions, MultiLock, Owner};

use super::command::LockSpec;
use crate::history::{HeldKind, Section};

/// A critical section's locks.
pub(super) enum Held {
    /// One lock (any kind).
    One(Lock),
    /// Several names, all at once.
    All(MultiLock),
}

impl Held {
    /// Takes what `spec` asks for on `name` (or on the spec's names), as `owner` for a
    /// reentrant lock.
    pub(super) async fn take(
        client: &Client,
        name: &str,
        spec: &LockSpec,
        owner: &Owner,
        opts: LockOptions,
    ) -> redquorum::Result<Held> {
        let kind = match spec {
            LockSpec::Mutex | LockSpec::Multi { .. } => LockKind::Mutex,
            LockSpec::Reentrant => LockKind::Reentrant(owner.clone()),
            LockSpec::Read => LockKind::Read,
            LockSpec::Write => LockKind::Write,
            LockSpec::Semaphore { permits } => LockKind::semaphore(*permits),
        };
        let opts = opts.kind(kind);
        match spec {
            LockSpec::Multi { names } => {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                client.acquire_all(&names, &opts).await.map(Held::All)
            }
            _ => client.acquire(name, &opts).await.map(Held::One),
        }
    }

    /// The holder's token: a multi-lock's is its locks' tokens, comma-separated.
    pub(super) fn token(&self) -> String {
        match self {
            Held::One(l) => l.token().to_owned(),
            Held::All(m) => m
                .locks()
                .iter()
                .map(Lock::token)
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    /// The fencing token: a multi-lock's largest.
    pub(super) fn fence(&self) -> u64 {
        match self {
            Held::One(l) => l.fence(),
            Held::All(m) => m.locks().iter().map(Lock::fence).max().unwrap_or(0),
        }
    }

    /// The fencing token of `name`; for a single lock, its own whatever the name.
    pub(super) fn fence_of(&self, name: &str) -> Option<u64> {
        match self {
            Held::One(l) => Some(l.fence()),
            Held::All(m) => m.fence_of(name),
        }
    }

    /// How much longer it is certainly held (a multi-lock: its shortest-lived name).
    pub(super) fn remaining(&self) -> Duration {
        match self {
            Held::One(l) => l.remaining(),
            Held::All(m) => m.remaining(),
        }
    }

    pub(super) async fn extend(&mut self, ttl: Duration) -> redquorum::Result<()> {
        match self {
            Held::One(l) => l.extend(ttl).await,
            Held::All(m) => m.extend(ttl).await,
        }
    }

    pub(super) async fn release(self) -> redquorum::Result<()> {
        match self {
            Held::One(l) => l.release().await,
            Held::All(m) => m.release().await,
        }
    }

    /// What was taken, for the history: `asked` with the fences of a multi-lock's names.
    pub(super) fn section(&self, asked: &Section) -> Section {
        let mut section = asked.clone();
        if let Held::All(m) = self {
            section.fences = m
                .locks()
                .iter()
                .map(|l| (l.name().to_owned(), l.fence()))
                .collect();
        }
        section
    }
}

/// What `spec` asks for on `name`, for the history.
pub(super) fn asked(name: &str, spec: &LockSpec, owner: &Owner) -> Section {
    let one = |kind| Section {
        kind,
        names: vec![name.to_owned()],
        ..Section::default()
    };
    match spec {
        LockSpec::Mutex => one(HeldKind::Mutex),
        LockSpec::Reentrant => Section {
            owner: Some(owner.id().to_owned()),
            ..one(HeldKind::Reentrant)
        },
        LockSpec::Read => one(HeldKind::Read),
        LockSpec::Write => one(HeldKind::Write),
        LockSpec::Semaphore { permits } => Section {
            permits: Some(*permits),
            ..one(HeldKind::Semaphore)
        },
        LockSpec::Multi { names } => {
            // As the library takes them: deduplicated, in byte order.
            let mut names = names.clone();
            names.sort_unstable();
            names.dedup();
            Section {
                names,
                multi: true,
                ..Section::default()
            }
        }
    }
}
