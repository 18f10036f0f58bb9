//! The renewal task behind a [`LockGuard`](super::LockGuard): extends the lock on a quorum
//! in time, publishes the holder's state, and releases the lock when told or when dropped.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};
use tracing::{debug, warn};

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
    pub(super) _held: HeldGauge,
}

impl Renewal {
    pub(super) async fn run(self, mut commands: oneshot::Receiver<Command>) {
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
                    crate::metrics::renewal(&self.keys.kind, "failed");
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
        crate::metrics::renewal(&self.keys.kind, "limit");
        warn!(
            ?reason,
            "renewal stopped; the lock runs out at the end of its validity"
        );
        self.status.send_modify(|s| s.stopped = Some(reason));
    }

    fn lose(&self, why: &str) {
        crate::metrics::renewal(&self.keys.kind, "lost");
        crate::metrics::lock_lost(&self.keys.kind);
        warn!("lock lost: {why}");
        self.status.send_modify(|s| s.state = LockState::Lost);
    }

    /// Releases the lock: on request (with a reply) or because the guard was dropped.
    async fn finish(self, command: Option<Command>) {
        let result = match self.cluster.upgrade() {
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
