//! The renewal task behind a [`LockGuard`](super::LockGuard): extends the lock on a quorum
//! in time, publishes the holder's state, and releases the lock when told or when dropped.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};
use tracing::{debug, info, warn};

use super::{Command, GuardStatus, LockState, RenewOptions, RenewalStop};
use crate::cluster::Cluster;
use crate::config::limits;
use crate::error::Error;
use crate::lock::{Releaser, extend_key, release_key};
use crate::metrics::HeldGauge;
use crate::node::Keys;

/// The background renewal of one lock.
pub(super) struct Renewal {
    pub(super) cluster: Weak<Cluster>,
    pub(super) name: Arc<str>,
    pub(super) keys: Arc<Keys>,
    pub(super) token: Arc<str>,
    /// The lock's fencing token: a release hands the lock to a waiter above it.
    pub(super) fence: u64,
    pub(super) ttl: Duration,
    pub(super) opts: RenewOptions,
    pub(super) status: watch::Sender<GuardStatus>,
    /// When [`RenewOptions::max_hold`] runs out (counted from the guard's making), if set.
    pub(super) hold_end: Option<Instant>,
    /// Set once the guard released the lock at its hold limit: a release asked for later has
    /// nothing left to do.
    pub(super) released: bool,
    pub(super) _held: HeldGauge,
}

impl Renewal {
    pub(super) async fn run(mut self, mut commands: oneshot::Receiver<Command>) {
        let interval = self.opts.interval.unwrap_or(self.ttl / 3);
        // After a failed renewal, try again sooner than the interval, but not in a tight loop.
        let retry = (interval / 4).max(MIN_RETRY);
        // Counted from the validity, not from the guard's making: a lock handed over with
        // less than an interval left would otherwise run out before its first renewal.
        let mut next = renew_at(self.status.borrow().valid_until, self.ttl, interval);
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
                let at_hold_limit = status.stopped == Some(RenewalStop::MaxHold)
                    || self.hold_end.is_some_and(|end| now >= end);
                if status.state != LockState::Lost {
                    if at_hold_limit {
                        self.end_hold().await;
                    } else {
                        self.lose("its validity ran out without a quorum renewal");
                    }
                }
                continue;
            }
            if status.stopped.is_some() || now < next {
                continue;
            }
            let Some((ttl, last)) = self.next_ttl(&status, now) else {
                continue;
            };
            let Some(cluster) = self.cluster.upgrade() else {
                self.stop(RenewalStop::ClientDropped);
                continue;
            };
            // A renewal to a shorter TTL can end the lock early from the moment it is sent,
            // whatever comes back: whoever watches must not be told of more validity than that.
            let new_ttl_ends = Instant::now() + ttl - cluster.settings.drift(ttl);
            if new_ttl_ends < status.valid_until {
                self.status
                    .send_modify(|s| s.valid_until = s.valid_until.min(new_ttl_ends));
            }
            let extended = extend_key(
                &cluster,
                &self.name,
                &self.keys,
                &self.token,
                ttl,
                Some(status.valid_until.min(new_ttl_ends)),
            )
            .await;
            drop(cluster);
            match extended.outcome {
                Ok(_fence) => {
                    crate::metrics::renewal(&self.keys.kind, "renewed");
                    debug!(valid_for = ?extended.valid_until.saturating_duration_since(Instant::now()), "renewed");
                    self.status.send_modify(|s| {
                        s.state = LockState::Held;
                        s.valid_until = extended.valid_until;
                        s.renewals += 1;
                    });
                    next = renew_after(now, extended.valid_until, self.ttl, interval);
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
                    crate::metrics::renewal(&self.keys.kind, "failed");
                    warn!("renewal failed, retrying while the lock is valid: {e}");
                    self.status.send_modify(|s| {
                        s.state = LockState::Suspect;
                        s.valid_until = s.valid_until.min(extended.valid_until);
                    });
                    // Soon enough that a retry still fits in what is left of the validity
                    // (when that is more than the least pause between tries).
                    let now = Instant::now();
                    let left = self
                        .status
                        .borrow()
                        .valid_until
                        .saturating_duration_since(now);
                    next = now + retry.min(left / 2).max(MIN_RETRY);
                }
            }
        }
    }

    /// The TTL for the next renewal and whether it is the last one (it reaches the hold
    /// limit), or `None` when a limit says to stop renewing now.
    fn next_ttl(&self, status: &GuardStatus, now: Instant) -> Option<(Duration, bool)> {
        if self
            .opts
            .max_renewals
            .is_some_and(|max| status.renewals >= max)
        {
            self.stop(RenewalStop::MaxRenewals);
            return None;
        }
        let Some(hold_end) = self.hold_end else {
            return Some((self.ttl, false));
        };
        let left = hold_end.saturating_duration_since(now);
        if left < limits::MIN_TTL {
            self.stop(RenewalStop::MaxHold);
            return None;
        }
        Some((self.ttl.min(left), left <= self.ttl))
    }

    fn stop(&self, reason: RenewalStop) {
        crate::metrics::renewal(&self.keys.kind, "limit");
        warn!(
            ?reason,
            "renewal stopped; the lock runs out at the end of its validity"
        );
        self.status.send_modify(|s| s.stopped = Some(reason));
    }

    /// The hold limit is reached: the holder is told the lock is gone, and then it is
    /// released, so that nobody waits for its TTL (which a reentrant lock's renewals never
    /// shorten, and which the acquire may have set past the limit).
    async fn end_hold(&mut self) {
        // Counted once per guard: the last renewal before the limit has counted it already.
        if self.status.borrow().stopped != Some(RenewalStop::MaxHold) {
            crate::metrics::renewal(&self.keys.kind, "limit");
        }
        // Lost first: the holder must stop before anyone else can have the lock.
        self.status.send_modify(|s| {
            s.state = LockState::Lost;
            s.stopped = Some(RenewalStop::MaxHold);
        });
        match self.release().await {
            Ok(()) => {
                info!("the hold limit is reached; the lock is released");
                self.released = true;
            }
            Err(e) => warn!(
                "the hold limit is reached, but the release failed (the lock expires at its TTL): {e}"
            ),
        }
    }

    fn lose(&self, why: &str) {
        crate::metrics::renewal(&self.keys.kind, "lost");
        crate::metrics::lock_lost(&self.keys.kind);
        warn!("lock lost: {why}");
        self.status.send_modify(|s| s.state = LockState::Lost);
    }

    /// Releases the lock on every node, as its holder.
    async fn release(&self) -> crate::error::Result<()> {
        match self.cluster.upgrade() {
            Some(cluster) => {
                release_key(
                    &cluster,
                    &self.name,
                    &self.keys,
                    &self.token,
                    self.fence,
                    Releaser::Holder,
                )
                .await
            }
            None => Err(Error::invalid(
                "client",
                "every Client handle was dropped, so nothing could be sent; the lock expires at its TTL",
            )),
        }
    }

    /// Releases the lock: on request (with a reply) or because the guard was dropped.
    async fn finish(self, command: Option<Command>) {
        let result = if self.released {
            Ok(())
        } else {
            self.release().await
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

/// When to renew a lock that a renewal begun at `began` left valid until `valid_until`: as
/// [`renew_at`], but no sooner than an interval after `began` (or half the validity left, if
/// that is less). Without that floor an interval shorter than the drift allowance would make
/// every renewal due as soon as the last one ended. In the normal case (an interval well
/// below the TTL) the floor is what times it: a renewal every interval.
fn renew_after(began: Instant, valid_until: Instant, ttl: Duration, interval: Duration) -> Instant {
    let half_left = valid_until.saturating_duration_since(began) / 2;
    renew_at(valid_until, ttl, interval).max(began + interval.min(half_left))
}

/// The least time between two tries of a renewal that failed.
const MIN_RETRY: Duration = Duration::from_millis(10);

/// When to renew a lock valid until `valid_until`: once what is left of its validity falls to
/// `ttl - interval`, so that a fresh lock (valid for about `ttl`) is renewed every `interval`
/// less the drift allowance, and a lock with less than that left at once.
fn renew_at(valid_until: Instant, ttl: Duration, interval: Duration) -> Instant {
    valid_until
        .checked_sub(ttl.saturating_sub(interval))
        .unwrap_or_else(Instant::now)
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewals_are_due_by_the_validity_left() {
        let now = Instant::now();
        let ttl = Duration::from_millis(900);
        let interval = ttl / 3;
        // A fresh lock: an interval from its start, less the drift allowance.
        let fresh = now + ttl - Duration::from_millis(11);
        assert_eq!(
            renew_at(fresh, ttl, interval),
            now + interval - Duration::from_millis(11)
        );
        // Less than ttl - interval left: due already.
        let late = now + Duration::from_millis(287);
        assert!(renew_at(late, ttl, interval) <= now);
        // An interval close to the TTL still renews inside the validity.
        let ttl = Duration::from_secs(1);
        let valid_until = now + ttl - Duration::from_millis(12);
        let due = renew_at(valid_until, ttl, Duration::from_millis(990));
        assert!(due > now && due < valid_until);
        assert_eq!(
            renew_after(now, valid_until, ttl, Duration::from_millis(990)),
            due
        );
    }

    #[test]
    fn renewals_are_no_more_frequent_than_the_interval() {
        let now = Instant::now();
        let ttl = Duration::from_secs(10);
        // The drift allowance of a 10 s TTL is 102 ms, more than this interval.
        let valid_until = now + ttl - Duration::from_millis(102);
        let interval = Duration::from_millis(50);
        assert!(renew_at(valid_until, ttl, interval) < now);
        assert_eq!(renew_after(now, valid_until, ttl, interval), now + interval);
        // The default interval: every interval from the renewal's start.
        let interval = ttl / 3;
        assert_eq!(renew_after(now, valid_until, ttl, interval), now + interval);
    }
}
