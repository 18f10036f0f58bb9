//! Holding a lock over time: background renewal on a quorum, the holder's state, release on drop.
//!
//! A [`LockGuard`] owns a background task that extends the lock every `interval` (TTL/3 by
//! default), each extension with its own deadline inside the remaining validity. Renewals are
//! also timed by the validity left (one is due once it falls to TTL − interval at the latest),
//! so a lock handed over with less than that left is renewed at once rather than after an
//! interval. The holder's state goes Held → Suspect (a renewal failed; the lock is still
//! valid) → Lost (validity ran out without a quorum renewal, or the nodes said the lock is
//! gone), and is published on a watch channel that [`LockWatch`] reads. A hold limit
//! ([`RenewOptions::max_hold`]) ends the hold like a loss, and the task then releases the
//! lock. Renewal never deletes the lock and never recreates it on a node that lost it: it is
//! [`Lock::extend`]'s compare-and-expire.
//!
//! The task holds only a weak reference to the client, so a guard never keeps a client alive.

mod renewal;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};
use tracing::{Instrument, debug, info_span};

use crate::config::limits;
use crate::error::{Error, Result};
use crate::lock::Lock;
use renewal::Renewal;

/// Where the holder of a guarded lock stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockState {
    /// The last renewal (or the acquire) reached a quorum; the lock is valid.
    Held,
    /// A renewal failed but the lock is still valid; renewal keeps trying.
    Suspect,
    /// The lock's validity ran out without a quorum renewal, or a quorum no longer has it.
    /// The holder must stop acting on it.
    Lost,
}

impl LockState {
    /// A short lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            LockState::Held => "held",
            LockState::Suspect => "suspect",
            LockState::Lost => "lost",
        }
    }
}

/// Why a guard stopped renewing while its lock was still held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RenewalStop {
    /// [`RenewOptions::max_renewals`] renewals were made.
    MaxRenewals,
    /// [`RenewOptions::max_hold`] is reached, or its last renewal is made: the lock's validity
    /// ends at the limit, where the guard releases it (see [`RenewOptions::max_hold`]).
    MaxHold,
    /// Every [`Client`](crate::Client) handle was dropped, so there is nothing to renew with.
    ClientDropped,
}

/// A snapshot of a guarded lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GuardStatus {
    /// Where the holder stands.
    pub state: LockState,
    /// Until when (monotonic clock) the lock is certainly held.
    pub valid_until: Instant,
    /// Successful renewals so far.
    pub renewals: u64,
    /// Set when renewal stopped by itself; the lock then runs out at `valid_until` (and with
    /// [`RenewalStop::MaxHold`] the guard releases it then).
    pub stopped: Option<RenewalStop>,
}

/// How a [`LockGuard`] renews its lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct RenewOptions {
    interval: Option<Duration>,
    max_renewals: Option<u64>,
    max_hold: Option<Duration>,
}

impl RenewOptions {
    /// Time between renewals. Default: a third of the lock's TTL, so that two renewals in a
    /// row can fail (each taking at most the per-node deadline) before the lock runs out.
    ///
    /// A renewal is due once the lock's remaining validity falls to TTL − `interval`, and,
    /// after a renewal, no sooner than `interval` after it began (nor than half the validity
    /// it left, if that is less). So a lock is renewed every `interval` in the normal case, a
    /// lock handed to [`Lock::into_guard`] (or taken) with less validity left than TTL −
    /// `interval` is renewed at once, and an interval close to the TTL still renews inside
    /// the validity, though leaving each renewal little time to reach a quorum.
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }

    /// Stop renewing after this many successful renewals. Default: no limit.
    pub fn max_renewals(mut self, max: u64) -> Self {
        self.max_renewals = Some(max);
        self
    }

    /// Never hold the lock longer than this from the moment the guard is made. Default: no
    /// limit.
    ///
    /// The guard's validity never reaches past the limit, and renewals ask for no more TTL than
    /// is left of it. Renewals are timed by that validity, so a lock whose TTL reaches past the
    /// limit gets a shortening renewal before it, and the masters' keys expire then. When the
    /// validity ends at the limit, the state turns [`LockState::Lost`] with
    /// [`RenewalStop::MaxHold`] and the guard releases the lock, so that another client can
    /// take it at once; a later [`LockGuard::release`] has nothing left to do. A reentrant
    /// lock's renewals never shorten its TTL (the owner's other holds count on it), so there
    /// the release gives up this hold, and the lock stays held only while the owner has other
    /// holds. Should the release fail, the keys expire at their TTL.
    pub fn max_hold(mut self, max: Duration) -> Self {
        self.max_hold = Some(max);
        self
    }

    /// Checks the options against a lock's TTL; nothing is sent.
    pub(crate) fn validate(&self, ttl: Duration) -> Result<()> {
        if let Some(interval) = self.interval {
            if interval < Duration::from_millis(1) || interval >= ttl {
                return Err(Error::invalid(
                    "renew_interval",
                    format!(
                        "{} must be at least 1ms and below the lock's TTL of {}, or the lock expires between renewals",
                        humantime::format_duration(interval),
                        humantime::format_duration(ttl)
                    ),
                ));
            }
        }
        if self.max_hold.is_some_and(|m| m > limits::MAX_WAIT) {
            return Err(Error::invalid("max_hold", "must be at most 24h"));
        }
        Ok(())
    }
}

/// A cheap, cloneable view of a guarded lock: its name, token and state, and a signal that
/// fires when it is lost. Hand it to the code that works under the lock.
#[derive(Debug, Clone)]
pub struct LockWatch {
    name: Arc<str>,
    token: Arc<str>,
    fence: u64,
    status: watch::Receiver<GuardStatus>,
}

impl LockWatch {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The holder's token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The lock's fencing token; renewals keep it.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The latest status.
    pub fn status(&self) -> GuardStatus {
        self.status.borrow().clone()
    }

    /// The holder's state. A lock whose validity has run out reads as Lost even before the
    /// renewal task has noticed.
    pub fn state(&self) -> LockState {
        let status = self.status.borrow();
        if Instant::now() >= status.valid_until {
            LockState::Lost
        } else {
            status.state
        }
    }

    /// How much longer the lock is certainly held.
    pub fn remaining(&self) -> Duration {
        self.status
            .borrow()
            .valid_until
            .saturating_duration_since(Instant::now())
    }

    /// Waits for the next change of status (a renewal, a failed renewal, the loss) and returns
    /// it; `None` once the guard has been released or dropped.
    pub async fn changed(&mut self) -> Option<GuardStatus> {
        self.status.changed().await.ok()?;
        Some(self.status.borrow_and_update().clone())
    }

    /// Resolves when the lock is `margin` or less from the end of its certain validity (at
    /// once if it already is), or lost: the moment to stop the work, so that it has stopped
    /// before the lock can be someone else's. While renewals succeed, the validity moves on and
    /// this keeps waiting; it fires when they have been failing long enough. If the guard is
    /// released or dropped first, it never resolves.
    ///
    /// Choose `margin` below two thirds of the TTL: a renewal is made every third of it (by
    /// default), so a healthy lock always has about two thirds of its TTL left, and a larger
    /// margin fires while renewals succeed. Work already under way when it fires (a write in
    /// flight) is what fencing tokens protect the resource from.
    pub async fn expiring(&self, margin: Duration) {
        let mut status = self.status.clone();
        loop {
            let (state, valid_until) = {
                let now = status.borrow_and_update();
                (now.state, now.valid_until)
            };
            let at = valid_until.checked_sub(margin).unwrap_or(valid_until);
            if state == LockState::Lost || Instant::now() >= at {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep_until(at.into()) => {}
                changed = status.changed() => {
                    if changed.is_err() {
                        // Released or dropped: it will never expire as this guard's.
                        std::future::pending::<()>().await;
                    }
                }
            }
        }
    }

    /// Resolves when the lock is lost (at once if it already is). If the guard is released or
    /// dropped first, it never resolves.
    pub async fn lost(&self) {
        // The renewal task wakes at the validity deadline itself and publishes Lost then.
        let mut status = self.status.clone();
        if status
            .wait_for(|s| s.state == LockState::Lost)
            .await
            .is_err()
        {
            // The guard was released or dropped: this lock will never be reported lost.
            std::future::pending::<()>().await;
        }
    }
}

#[derive(Debug)]
pub(crate) enum Command {
    Release(oneshot::Sender<Result<()>>),
}

/// A lock renewed in the background until it is released or dropped.
///
/// Dropping the guard stops renewal and releases the lock in the background; without a runtime
/// the lock expires at its TTL.
#[must_use = "dropping a LockGuard releases the lock at once"]
#[derive(Debug)]
pub struct LockGuard {
    watch: LockWatch,
    // Dropping the sender is the task's signal to release and stop.
    commands: Option<oneshot::Sender<Command>>,
}

impl Lock {
    /// Hands the lock to a background task that renews it; see [`LockGuard`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for bad renewal options, in which case the lock is released
    /// in the background, or when called outside a Tokio runtime, in which case nothing can be
    /// sent and the lock expires at its TTL.
    pub fn into_guard(self, opts: RenewOptions) -> Result<LockGuard> {
        let runtime = guard_runtime()?;
        if let Err(e) = opts.validate(self.ttl) {
            // Refused, but the lock is held: give it back rather than leave it held by nobody
            // until its TTL.
            runtime.spawn(give_back(self));
            return Err(e);
        }
        Ok(self.guard_on(&runtime, opts))
    }

    /// The guard itself, once the options are checked and a runtime is at hand.
    pub(crate) fn guard_on(
        self,
        runtime: &tokio::runtime::Handle,
        opts: RenewOptions,
    ) -> LockGuard {
        let Lock {
            cluster,
            name,
            keys,
            token,
            fence,
            ttl,
            valid_until,
            held,
            next_hold: _,
        } = self;
        // The holder is never told of validity past the hold limit, and the first renewal,
        // timed by that validity, shortens a TTL that reaches past it.
        let hold_end = opts.max_hold.map(|max| Instant::now() + max);
        let valid_until = hold_end.map_or(valid_until, |end| valid_until.min(end));
        let (status_tx, status_rx) = watch::channel(GuardStatus {
            state: LockState::Held,
            valid_until,
            renewals: 0,
            stopped: None,
        });
        let (commands_tx, commands_rx) = oneshot::channel();
        let name: Arc<str> = name.into();
        let task = Renewal {
            cluster: Arc::downgrade(&cluster),
            name: name.clone(),
            keys,
            token: token.clone(),
            fence,
            ttl,
            opts,
            status: status_tx,
            hold_end,
            released: false,
            _held: held,
        };
        let span = info_span!("guard", lock = ?name);
        runtime.spawn(task.run(commands_rx).instrument(span));
        LockGuard {
            watch: LockWatch {
                name,
                token,
                fence,
                status: status_rx,
            },
            commands: Some(commands_tx),
        }
    }
}

/// The runtime a guard renews from: the caller's.
pub(crate) fn guard_runtime() -> Result<tokio::runtime::Handle> {
    tokio::runtime::Handle::try_current().map_err(|_| {
        Error::invalid(
            "runtime",
            "a LockGuard renews from a Tokio runtime; create it inside one",
        )
    })
}

/// Releases a lock that was not handed to a guard after all; what cannot be released expires
/// at its TTL.
async fn give_back(lock: Lock) {
    if let Err(e) = lock.release().await {
        debug!("giving back a lock refused a guard: {e} (it expires at its TTL)");
    }
}

impl LockGuard {
    /// The lock's name.
    pub fn name(&self) -> &str {
        self.watch.name()
    }

    /// The holder's token.
    pub fn token(&self) -> &str {
        self.watch.token()
    }

    /// The lock's fencing token; renewals keep it.
    pub fn fence(&self) -> u64 {
        self.watch.fence()
    }

    /// The holder's state.
    pub fn state(&self) -> LockState {
        self.watch.state()
    }

    /// The latest status.
    pub fn status(&self) -> GuardStatus {
        self.watch.status()
    }

    /// How much longer the lock is certainly held.
    pub fn remaining(&self) -> Duration {
        self.watch.remaining()
    }

    /// Resolves when the lock is lost.
    pub async fn lost(&self) {
        self.watch.lost().await;
    }

    /// Resolves `margin` before the end of the lock's certain validity, or when it is lost:
    /// see [`LockWatch::expiring`].
    pub async fn expiring(&self, margin: Duration) {
        self.watch.expiring(margin).await;
    }

    /// A cloneable view of this lock, for the code working under it.
    pub fn watch(&self) -> LockWatch {
        self.watch.clone()
    }

    /// Stops renewal and releases the lock on every node.
    ///
    /// # Errors
    ///
    /// As [`Lock::release`]; [`Error::LockLost`] when the renewal task is gone (its runtime
    /// shut down), in which case the lock expires at its TTL.
    pub async fn release(mut self) -> Result<()> {
        let lost = || Error::LockLost {
            name: self.watch.name.to_string(),
        };
        let Some(commands) = self.commands.take() else {
            return Err(lost());
        };
        let (reply_tx, reply_rx) = oneshot::channel();
        if commands.send(Command::Release(reply_tx)).is_err() {
            return Err(lost());
        }
        reply_rx.await.unwrap_or_else(|_| Err(lost()))
    }
}
