//! A multi-lock renewed in the background: one renewing guard per name, watched and released
//! together.

use std::time::{Duration, Instant};

use futures::future::{join_all, select_all};

use super::{MultiLock, give_back};
use crate::error::Result;
use crate::guard::{LockGuard, LockState, RenewOptions, guard_runtime};

/// Several locks renewed in the background until they are released or dropped; see
/// [`LockGuard`], which each name has. The multi-lock is lost as soon as one name is.
///
/// Dropping it stops renewal and releases every name in the background.
#[must_use = "dropping a MultiGuard releases its locks at once"]
#[derive(Debug)]
pub struct MultiGuard {
    guards: Vec<LockGuard>,
}

impl MultiLock {
    /// Hands every name to a renewing [`LockGuard`]; see [`MultiGuard`].
    ///
    /// # Errors
    ///
    /// As [`Lock::into_guard`](crate::Lock::into_guard): for bad renewal options every name
    /// is released in the background; outside a Tokio runtime nothing can be sent and the
    /// names expire at their TTL.
    pub fn into_guard(self, opts: RenewOptions) -> Result<MultiGuard> {
        let runtime = guard_runtime()?;
        // Every name is checked before any is handed over, so that a refusal gives back all of
        // them, not only those not yet guarded.
        if let Err(e) = self.locks().iter().try_for_each(|l| opts.validate(l.ttl())) {
            runtime.spawn(give_back(self.into_locks()));
            return Err(e);
        }
        let guards = self
            .into_locks()
            .into_iter()
            .map(|lock| lock.guard_on(&runtime, opts.clone()))
            .collect();
        Ok(MultiGuard { guards })
    }
}

impl MultiGuard {
    /// The guards, one per name, in the order the names were taken.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The fencing token of `name`, if it is one of this multi-lock's names.
    pub fn fence_of(&self, name: &str) -> Option<u64> {
        self.guards
            .iter()
            .find(|g| g.name() == name)
            .map(LockGuard::fence)
    }

    /// Where the multi-lock stands: lost if one name is, suspect if one is, held otherwise.
    pub fn state(&self) -> LockState {
        let states = self.guards.iter().map(LockGuard::state);
        states.fold(LockState::Held, |worst, s| match (worst, s) {
            (LockState::Lost, _) | (_, LockState::Lost) => LockState::Lost,
            (LockState::Suspect, _) | (_, LockState::Suspect) => LockState::Suspect,
            _ => LockState::Held,
        })
    }

    /// How much longer every name is certainly held.
    pub fn remaining(&self) -> Duration {
        let until = self
            .guards
            .iter()
            .map(|g| g.status().valid_until)
            .min()
            .unwrap_or_else(Instant::now);
        until.saturating_duration_since(Instant::now())
    }

    /// Resolves when one of the names is lost.
    pub async fn lost(&self) {
        if self.guards.is_empty() {
            return std::future::pending().await;
        }
        select_all(self.guards.iter().map(|g| Box::pin(g.lost()))).await;
    }

    /// Stops renewal and releases every name on every node.
    ///
    /// # Errors
    ///
    /// The first error of [`LockGuard::release`] among the names; the others were released.
    pub async fn release(self) -> Result<()> {
        let results = join_all(self.guards.into_iter().map(LockGuard::release)).await;
        results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
    }
}
