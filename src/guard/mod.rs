//! Holding a lock over time: background renewal on a quorum, the holder's state, release on drop.
//!
//! A [`LockGuard`] owns a background task that extends the lock every `interval` (TTL/3 by
//! default), each extension with its own deadline inside the remaining validity. The holder's
//! state goes Held → Suspect (a renewal failed; the lock is still valid) → Lost (validity ran
//! out without a quorum renewal, or the nodes said the lock is gone), and is published on a
//! watch channel that [`LockWatch`] reads. Renewal never deletes the lock and never recreates it
//! on a node that lost it: it is [`Lock::extend`]'s compare-and-expire.
//!
//! The task holds only a weak reference to the client, so a guard never keeps a client alive.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};
use tracing::{Instrument, debug, info_span, warn};

use crate::client::{Client, Inner, Keys};
use crate::config::{LockOptions, limits};
use crate::error::{Error, Result};
use crate::lock::Lock;
use crate::metrics::HeldGauge;

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
    /// [`RenewOptions::max_hold`] was reached: the lock now expires at that point.
    MaxHold,
    /// Every [`Client`] handle was dropped, so there is nothing to renew with.
    ClientDropped,
}

/// A snapshot of a guarded lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardStatus {
    /// Where the holder stands.
    pub state: LockState,
    /// Until when (monotonic clock) the lock is certainly held.
    pub valid_until: Instant,
    /// Successful renewals so far.
    pub renewals: u64,
    /// Set when renewal stopped by itself; the lock then runs out at `valid_until`.
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
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }

    /// Stop renewing after this many successful renewals. Default: no limit.
    pub fn max_renewals(mut self, max: u64) -> Self {
        self.max_renewals = Some(max);
        self
    }

    /// Never hold the lock longer than this from the moment the guard is made: renewals are
    /// shortened so the lock expires then. Default: no limit.
    pub fn max_hold(mut self, max: Duration) -> Self {
        self.max_hold = Some(max);
        self
    }

    fn validate(&self, ttl: Duration) -> Result<()> {
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
enum Command {
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
    /// [`Error::InvalidArgument`] for bad renewal options, or when called outside a Tokio runtime.
    pub fn into_guard(self, opts: RenewOptions) -> Result<LockGuard> {
        opts.validate(self.ttl)?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::invalid(
                "runtime",
                "a LockGuard renews from a Tokio runtime; create it inside one",
            )
        })?;
        let Lock {
            client,
            name,
            keys,
            token,
            fence,
            ttl,
            valid_until,
            held,
        } = self;
        let (status_tx, status_rx) = watch::channel(GuardStatus {
            state: LockState::Held,
            valid_until,
            renewals: 0,
            stopped: None,
        });
        let (commands_tx, commands_rx) = oneshot::channel();
        let name: Arc<str> = name.into();
        let task = Renewal {
            client: Arc::downgrade(&client.inner),
            name: name.clone(),
            keys,
            token: token.clone(),
            fence,
            ttl,
            opts,
            status: status_tx,
            _held: held,
        };
        let span = info_span!("guard", lock = %name);
        runtime.spawn(task.run(commands_rx).instrument(span));
        Ok(LockGuard {
            watch: LockWatch {
                name,
                token,
                fence,
                status: status_rx,
            },
            commands: Some(commands_tx),
        })
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

impl Client {
    /// Acquires a lock and hands it to a renewing [`LockGuard`].
    ///
    /// # Errors
    ///
    /// As [`Client::acquire`] and [`Lock::into_guard`].
    pub async fn acquire_guard(
        &self,
        name: &str,
        opts: &LockOptions,
        renew: RenewOptions,
    ) -> Result<LockGuard> {
        self.acquire(name, opts).await?.into_guard(renew)
    }

    /// Runs `work` while holding the lock `name`, renewed in the background, and releases it
    /// afterwards. If the lock is lost first, `work` is stopped (its future dropped) and the
    /// result is [`Error::LockLost`].
    ///
    /// ```no_run
    /// # async fn f(client: redquorum::Client) -> Result<(), redquorum::Error> {
    /// use std::time::Duration;
    /// let opts = redquorum::LockOptions::new(Duration::from_secs(10));
    /// let rows = client
    ///     .with_lock("compaction", &opts, |lock| async move {
    ///         // ... work; lock.remaining() and lock.token() are at hand ...
    ///         42
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Client::acquire`]; [`Error::LockLost`] when the lock was lost while `work` ran.
    pub async fn with_lock<T, F, Fut>(&self, name: &str, opts: &LockOptions, work: F) -> Result<T>
    where
        F: FnOnce(LockWatch) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self
            .acquire_guard(name, opts, RenewOptions::default())
            .await?;
        let watch = guard.watch();
        let outcome = tokio::select! {
            // A loss that is noticed together with the work's end still counts as a loss: the
            // work may have run its last part without the lock.
            biased;
            () = watch.lost() => None,
            value = work(guard.watch()) => Some(value),
        };
        match outcome {
            Some(value) => {
                if let Err(e) = guard.release().await {
                    warn!(
                        lock = name,
                        "the work finished but the release failed (the lock expires at its TTL): {e}"
                    );
                }
                Ok(value)
            }
            None => Err(Error::LockLost {
                name: name.to_owned(),
            }),
        }
    }
}

/// The background renewal of one lock.
struct Renewal {
    client: Weak<Inner>,
    name: Arc<str>,
    keys: Arc<Keys>,
    token: Arc<str>,
    /// The lock's fencing token: a release hands the lock to a waiter above it.
    fence: u64,
    ttl: Duration,
    opts: RenewOptions,
    status: watch::Sender<GuardStatus>,
    _held: HeldGauge,
}

impl Renewal {
    async fn run(self, mut commands: oneshot::Receiver<Command>) {
        let started = Instant::now();
        let interval = self.opts.interval.unwrap_or(self.ttl / 3);
        // After a failed renewal, try again sooner than the interval, but not in a tight loop.
        let retry = (interval / 4).max(Duration::from_millis(10));
        let mut next = started + interval;
        loop {
            let status = self.status.borrow().clone();
            let wake = match (status.state, status.stopped) {
                (LockState::Lost, _) => None,
                (_, Some(_)) => Some(status.valid_until),
                _ => Some(next.min(status.valid_until)),
            };
            tokio::select! {
                command = &mut commands => {
                    self.finish(command.ok()).await;
                    return;
                }
                () = sleep_until(wake) => {}
            }
            let now = Instant::now();
            if now >= status.valid_until {
                if status.state != LockState::Lost {
                    self.lose("its validity ran out without a quorum renewal");
                }
                continue;
            }
            if status.stopped.is_some() || now < next {
                continue;
            }
            let Some((ttl, last)) = self.next_ttl(&status, started, now) else {
                continue;
            };
            let Some(inner) = self.client.upgrade() else {
                self.stop(RenewalStop::ClientDropped);
                continue;
            };
            let client = Client { inner };
            // A renewal to a shorter TTL can end the lock early from the moment it is sent,
            // whatever comes back: whoever watches must not be told of more validity than that.
            let new_ttl_ends = Instant::now() + ttl - client.inner.settings.drift(ttl);
            if new_ttl_ends < status.valid_until {
                self.status
                    .send_modify(|s| s.valid_until = s.valid_until.min(new_ttl_ends));
            }
            let extended = client
                .extend_key(
                    &self.name,
                    &self.keys,
                    &self.token,
                    ttl,
                    Some(status.valid_until.min(new_ttl_ends)),
                )
                .await;
            drop(client);
            match extended.outcome {
                Ok(_fence) => {
                    crate::metrics::renewal("renewed");
                    debug!(valid_for = ?extended.valid_until.saturating_duration_since(Instant::now()), "renewed");
                    self.status.send_modify(|s| {
                        s.state = LockState::Held;
                        s.valid_until = extended.valid_until;
                        s.renewals += 1;
                    });
                    next = now + interval;
                    if last {
                        self.stop(RenewalStop::MaxHold);
                    }
                }
                Err(Error::NotHeld { .. }) => {
                    self.status
                        .send_modify(|s| s.valid_until = s.valid_until.min(extended.valid_until));
                    self.lose("a quorum of nodes no longer has it");
                }
                Err(e) => {
                    crate::metrics::renewal("failed");
                    warn!("renewal failed, retrying while the lock is valid: {e}");
                    self.status.send_modify(|s| {
                        s.state = LockState::Suspect;
                        s.valid_until = s.valid_until.min(extended.valid_until);
                    });
                    next = now + retry;
                }
            }
        }
    }

    /// The TTL for the next renewal and whether it is the last one (it reaches the hold
    /// limit), or `None` when a limit says to stop renewing now.
    fn next_ttl(
        &self,
        status: &GuardStatus,
        started: Instant,
        now: Instant,
    ) -> Option<(Duration, bool)> {
        if self
            .opts
            .max_renewals
            .is_some_and(|max| status.renewals >= max)
        {
            self.stop(RenewalStop::MaxRenewals);
            return None;
        }
        let Some(max_hold) = self.opts.max_hold else {
            return Some((self.ttl, false));
        };
        let left = (started + max_hold).saturating_duration_since(now);
        if left < limits::MIN_TTL {
            self.stop(RenewalStop::MaxHold);
            return None;
        }
        Some((self.ttl.min(left), left <= self.ttl))
    }

    fn stop(&self, reason: RenewalStop) {
        crate::metrics::renewal("limit");
        warn!(
            ?reason,
            "renewal stopped; the lock runs out at the end of its validity"
        );
        self.status.send_modify(|s| s.stopped = Some(reason));
    }

    fn lose(&self, why: &str) {
        crate::metrics::renewal("lost");
        crate::metrics::lock_lost();
        warn!("lock lost: {why}");
        self.status.send_modify(|s| s.state = LockState::Lost);
    }

    /// Releases the lock: on request (with a reply) or because the guard was dropped.
    async fn finish(self, command: Option<Command>) {
        let result = match self.client.upgrade() {
            Some(inner) => {
                Client { inner }
                    .release_key(&self.name, &self.keys, &self.token, self.fence)
                    .await
            }
            None => Err(Error::invalid(
                "client",
                "every Client handle was dropped, so nothing could be sent; the lock expires at its TTL",
            )),
        };
        match command {
            Some(Command::Release(reply)) => {
                let _ = reply.send(result);
            }
            None => {
                if let Err(e) = result {
                    debug!("release of a dropped guard failed (the lock expires at its TTL): {e}");
                }
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}
