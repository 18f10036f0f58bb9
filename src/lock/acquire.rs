//! Acquire: attempts on every node at once, retries, and waiting in line until the lock is
//! taken, handed over, or the wait runs out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{Instrument, debug, debug_span};

use super::Lock;
use super::attempt::{FailedAttempt, attempt};
use super::handover::handed_over;
use super::queue::{NextHold, Queued, give_up_kept};
use crate::cluster::{Cluster, GiveBack};
use crate::config::random_token;
use crate::config::{LockKind, LockOptions};
use crate::error::{Error, Result};
use crate::quorum::{Outlook, outlook};

/// How often a fair waiter in line polls while a quorum of its subscriptions is up: the
/// release that makes it first wakes it, and most often hands it the lock, so polling is only
/// the fallback for a lost message or a holder that died. Polling at the retry delay instead
/// sends every waiter's attempts at the masters many times per hand-over, and slows the
/// hand-overs themselves.
pub(super) const WAKE_FALLBACK: Duration = Duration::from_millis(50);

/// How long an unfair caller only polls before it queues to be woken by releases. Queued
/// waiters are woken by a release and race the caller that released, which, in a loop, is
/// already asking again: under contention that race costs more hand-overs than it saves.
const UNFAIR_QUEUE_AFTER: Duration = Duration::from_millis(20);

/// How widely retries after a split vote are spread (uniformly from zero).
const SPLIT_RETRY_SPREAD: Duration = Duration::from_millis(2);

/// Takes the lock `name` on a quorum, retrying with jittered delays until `wait` runs out
/// (zero: one attempt). The public face, with the whole story, is `Client::acquire`.
///
/// Each attempt asks every node at once and decides as soon as a quorum granted or could no
/// longer grant; a failed attempt releases what it got on every node before the next one,
/// and a failed acquire returns once its last attempt's releases are answered. While it
/// waits, the caller keeps a place in the lock's queue on the nodes: a free lock goes to the
/// caller that has waited longest, and a release hands it straight to that caller (its
/// token then reads `<waiter id>/<token>`). Dropping the returned future cancels: grants of
/// an attempt under way are released and the place is given up in the background (or they
/// expire when there is no runtime).
///
/// # Errors
///
/// [`Error::InvalidArgument`] (no node is contacted, except for a semaphore held with
/// another number of permits, which the masters refuse); otherwise the last attempt's error:
/// [`Error::Contended`], [`Error::QuorumUnavailable`], or [`Error::Timeout`] when a quorum
/// granted too slowly to leave the minimum validity. [`Error::QuorumUnavailable`] comes
/// before the wait is over when the nodes kept out (quarantined for longer than the wait,
/// refusing, or failing to connect twice in a row) leave no quorum; when quarantines that
/// end within the wait would, the acquire waits for them instead of retrying.
pub(crate) async fn acquire(
    cluster: &Arc<Cluster>,
    name: &str,
    opts: &LockOptions,
    wait: Duration,
) -> Result<Lock> {
    acquire_waiting_since(cluster, name, opts, wait, Instant::now()).await
}

/// [`acquire`] for a caller that has waited for the lock since `waiting_since` already, in an
/// earlier acquire: its place in line goes where that earlier wait put it, not at the back.
pub(crate) async fn acquire_waiting_since(
    cluster: &Arc<Cluster>,
    name: &str,
    opts: &LockOptions,
    wait: Duration,
    waiting_since: Instant,
) -> Result<Lock> {
    let started = Instant::now();
    let waiting_since = waiting_since.min(started);
    let mut timed = Timed {
        kind: &opts.kind,
        started,
        finished: false,
    };
    let result = async {
        let keys = cluster.keys(name, &opts.kind)?;
        opts.validate(&cluster.settings)?;
        let wait_until = started + wait;
        let waiters = &cluster.waiters;
        // A caller that waits queues on the nodes under one id for all its attempts, so it
        // keeps its turn from one attempt to the next.
        let mut queued = if wait.is_zero() || !opts.is_fair() {
            None
        } else {
            // Subscribed before the first attempt, so that no release is missed.
            cluster.subscribe(cluster.settings.node_timeout).await;
            Some(Queued::new(cluster, keys.clone(), opts, waiting_since))
        };
        // A client that takes this lock in a loop: its last release may have kept its place in
        // line (see `lua/release.lua`), and this lock's release keeps it again if the lock is
        // contended (handed over, or taken after a refusal); uncontended, there is no line.
        let next_hold = (queued.is_some()
            && matches!(keys.kind, LockKind::Mutex)
            && waiters.kept_places.released_lately(&keys.lock, started))
        .then(|| NextHold::new(cluster, opts));
        // In line already: the first turn waits to be handed the lock instead of attempting.
        let mut in_line_already = false;
        // Only a caller that waits in line takes it out; otherwise it is left to be given up.
        let kept = queued
            .as_ref()
            .and_then(|_| waiters.kept_places.take(&keys.lock));
        if let (Some(q), Some(kept)) = (queued.as_mut(), kept) {
            if next_hold.is_some_and(|next| next.kept(&kept)) {
                debug!("taking up the place in line that the last release kept");
                *q = Queued::from_kept(cluster, &kept, kept.may_be_on());
                in_line_already = true;
            } else {
                give_up_kept(cluster, &kept, kept.may_be_on());
            }
        }
        let mut attempts = 0u32;
        // Per node: whether its last failure kept it out for no known time.
        let mut down_before = vec![false; cluster.nodes.len()];
        loop {
            attempts += 1;
            // An unfair caller polls at first, as its own retries are what win it a free
            // lock; once it has waited a while, it queues too, to be woken by releases.
            if queued.is_none()
                && !opts.is_fair()
                && !wait.is_zero()
                && waiting_since.elapsed() >= UNFAIR_QUEUE_AFTER
            {
                cluster.subscribe(cluster.settings.node_timeout).await;
                queued = Some(Queued::new(cluster, keys.clone(), opts, waiting_since));
            }
            if let Some(q) = queued.as_mut() {
                if let Some(lock) = handed_over(cluster, name, q, opts).await {
                    return Ok(lock.with_next_hold(next_hold));
                }
            }
            // Listening before the attempt: a release during it wakes us right after.
            let woken = queued.as_ref().map(|q| waiters.listen(&q.place.waiter));
            if let (true, Some(q)) = (in_line_already, &queued) {
                in_line_already = false;
                // Grants heard before listening woke nobody: they are taken at once.
                let heard = waiters.take_grants(&q.place.waiter);
                if heard.is_empty() {
                    let fallback = WAKE_FALLBACK.min(wait_until.saturating_duration_since(Instant::now()));
                    if let Some(woken) = woken {
                        tokio::select! {
                            () = woken => debug!("woken by a release"),
                            () = cluster.sleep(fallback) => {}
                        }
                    }
                } else {
                    waiters.add_grants(&q.place.waiter, heard);
                }
                continue;
            }
            // A fresh token for every attempt: the previous attempt's cleanup may reach a
            // node after this attempt's grant (its connection still being made, or a
            // script resent after NOSCRIPT), and must then find nothing of its own to
            // delete rather than this attempt's grant.
            let token: Arc<str> = random_token()?.into();
            if let Some(q) = queued.as_mut() {
                q.book_attempt(&token);
            }
            let FailedAttempt {
                error,
                split,
                granted,
                took,
                released,
                handed_over,
                out,
            } = match attempt(
                cluster,name, &keys, &token, queued.as_mut(), opts)
                .instrument(debug_span!("attempt", attempt = attempts))
                .await
            {
                Ok((valid_until, fence)) => {
                    if let Some(q) = &queued {
                        // Handed over on some nodes too, too late: not this lock.
                        let grants = waiters.take_grants(&q.place.waiter);
                        if !grants.is_empty() {
                            let _ = cluster.release_grants(&keys, grants, GiveBack::Silently);
                        }
                    }
                    return Ok(Lock::new(
                        cluster,
                        name,
                        keys,
                        token,
                        fence,
                        opts.ttl,
                        valid_until,
                    )
                    .with_next_hold(next_hold.filter(|_| attempts > 1)));
                }
                Err(e) => e,
            };
            if matches!(error, Error::InvalidArgument { .. }) {
                // Another number of permits than the semaphore is held with: no retry mends it.
                if let Some(released) = released {
                    released.answered().await;
                }
                return Err(error);
            }
            let now = Instant::now();
            // Masters kept out for longer than the caller waits (quarantined, replicas,
            // refusing, or down: a connection failure counts once it has repeated) make
            // a quorum impossible: say so now rather than at the end of the wait, or wait
            // only until enough quarantines end.
            let out: Vec<Option<Option<Instant>>> = out
                .into_iter()
                .enumerate()
                .map(|(i, o)| match o {
                    Some(None) if !down_before.get(i).copied().unwrap_or(false) => {
                        down_before[i] = true;
                        None
                    }
                    other => {
                        if let Some(d) = down_before.get_mut(i) {
                            *d = other == Some(None);
                        }
                        other
                    }
                })
                .collect();
            let reopens = match outlook(&out, keys.quorum(cluster.nodes.len())) {
                Outlook::Open => None,
                Outlook::At(t) if t <= wait_until => Some(t),
                Outlook::At(_) | Outlook::Closed => {
                    if let Some(released) = released {
                        released.answered().await;
                    }
                    return Err(error);
                }
            };
            if now >= wait_until {
                // Giving up: wait (at most the per-node deadline) for this attempt's grants
                // to be released, so that a failed acquire leaves nothing behind on the
                // nodes that answered. Earlier attempts' releases went ahead of this
                // attempt on the same connections, so where it was answered they are done.
                if let Some(released) = released {
                    released.answered().await;
                }
                return Err(error);
            }
            if handed_over {
                // Perhaps on a quorum already: look before anything else.
                continue;
            }
            // A fair waiter in line that its masters can wake: the release that makes it first
            // hands it the lock. Votes split between other holders (a hand-over that its
            // attempt met half-way across the masters) are not its to settle: retrying at
            // once only sends more attempts at the masters, and slows the hand-overs.
            let waiting_in_line = queued.as_ref().is_some_and(|q| q.in_line)
                && opts.is_fair()
                && matches!(error, Error::Contended { .. })
                && waiters.subscribed_count() >= cluster.quorum();
            let delay = if let Some(t) = reopens {
                debug!(attempt = attempts, error = %error, "a quorum is kept out until quarantines end; waiting for them");
                t.saturating_duration_since(now)
            } else if split && (granted || !waiting_in_line) {
                // Nobody won: contenders arrived together and split the votes, or the
                // nodes did not yet agree on whose turn it is (each refused attempt queues
                // its caller, so they do now). Spread the retries over a short window so
                // that the earliest takes the lock before the next arrives, instead of all
                // falling back to the retry delay.
                // The window grows with the attempt's length: an attempt that waited out
                // silent nodes held its grants that long, and contenders retrying within
                // 2 ms of each other would only split again.
                let window = SPLIT_RETRY_SPREAD.max(took * 2);
                let spread = u64::try_from(window.as_micros()).unwrap_or(1).max(1);
                let delay =
                    Duration::from_micros(rand::random_range(0..spread)).min(wait_until - now);
                debug!(attempt = attempts, delay = ?delay, "split vote; retrying soon");
                delay
            } else if waiting_in_line {
                let delay = retry_delay(opts).max(WAKE_FALLBACK).min(wait_until - now);
                debug!(attempt = attempts, delay = ?delay, "in line; waiting to be woken");
                delay
            } else {
                let mut delay = retry_delay(opts).min(wait_until - now);
                if queued.is_none() && !opts.is_fair() {
                    // Not yet queued, so no release can wake it: its next attempt comes when
                    // it queues, not a whole retry delay later (a delay longer than the
                    // holder's remaining time would have it sleep through the release).
                    delay = delay.min(UNFAIR_QUEUE_AFTER.saturating_sub(waiting_since.elapsed()));
                }
                debug!(attempt = attempts, error = %error, delay = ?delay, "attempt failed; retrying");
                delay
            };
            match woken {
                // The release wakes the first waiter at once (and may have handed it the
                // lock, even while it sat out a split vote); the delay is the fallback for
                // lost messages and masters whose subscription is down.
                Some(woken) => tokio::select! {
                    () = woken => debug!("woken by a release"),
                    () = cluster.sleep(delay) => {}
                },
                None => cluster.sleep(delay).await,
            }
        }
    }
    .instrument(debug_span!("acquire", lock = ?name))
    .await;
    let outcome = match &result {
        Ok(_) => "acquired",
        Err(e) => e.code(),
    };
    timed.finished = true;
    crate::metrics::acquire_done(&opts.kind, outcome, started.elapsed().as_secs_f64());
    // Once per acquire, whatever number of its attempts found no quorum.
    if let Err(Error::QuorumUnavailable { operation, .. }) = &result {
        crate::metrics::quorum_failure(*operation);
    }
    result
}

/// Counts an acquire whose future is dropped before it ends (a caller's timeout around it, an
/// HTTP client that left) as `cancelled`: otherwise it would be in no outcome at all.
struct Timed<'a> {
    kind: &'a LockKind,
    started: Instant,
    finished: bool,
}

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        if !self.finished {
            let seconds = self.started.elapsed().as_secs_f64();
            crate::metrics::acquire_done(self.kind, "cancelled", seconds);
        }
    }
}

/// The pause before the next attempt: the fixed delay plus a uniform random part.
fn retry_delay(opts: &LockOptions) -> Duration {
    let jitter = u64::try_from(opts.retry_jitter.as_micros()).unwrap_or(u64::MAX);
    let extra = if jitter == 0 {
        0
    } else {
        rand::random_range(0..jitter)
    };
    opts.retry_delay + Duration::from_micros(extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays_stay_within_delay_plus_jitter() {
        let opts = LockOptions::default()
            .retry_delay(Duration::from_millis(10))
            .retry_jitter(Duration::from_millis(5));
        let delays: Vec<Duration> = (0..200).map(|_| retry_delay(&opts)).collect();
        assert!(
            delays
                .iter()
                .all(|d| *d >= Duration::from_millis(10) && *d < Duration::from_millis(15))
        );
        // Jitter really varies the delay (200 equal draws from 5000 values is impossible in practice).
        assert!(delays.iter().any(|d| *d != delays[0]));
        let fixed = LockOptions::default().retry_jitter(Duration::ZERO);
        assert_eq!(retry_delay(&fixed), fixed.retry_delay);
    }
}
