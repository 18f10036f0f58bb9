//! Acquire, extend and release on a quorum, and the [`Lock`] handle a holder keeps.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rand::TryRng;
use tokio::task::JoinHandle;
use tracing::{Instrument, debug, debug_span};

use crate::client::{Client, Keys};
use crate::config::{LockOptions, validate_token};
use crate::deployment::{is_unmarked, mark_in_background};
use crate::error::{Error, NodeFailure, NodeFailureKind, Operation, Result};
use crate::fanout::{Answer, send_and_detach, vote};
use crate::metrics::HeldGauge;
use crate::node::{AcquireReply, Node, Place, ReleaseReply, Terms};
use crate::quorum::{Decision, Outlook, outlook, validity};
use crate::waiters::Grant;

/// Bytes of OS randomness in a holder token (hex-encoded, so tokens are 32 characters).
const TOKEN_BYTES: usize = 16;

/// Fencing tokens stay below 2^53: Lua numbers on the nodes are doubles.
pub const MAX_FENCE: u64 = (1 << 53) - 1;

/// How widely retries after a split vote are spread (uniformly from zero).
const SPLIT_RETRY_SPREAD: Duration = Duration::from_millis(2);

/// Stale proposals answered at once before an attempt counts as failed.
const MAX_PROPOSAL_ROUNDS: u32 = 4;

/// Attempts whose terms a waiter remembers. A node keeps only the latest refused attempt's
/// terms, and only for the place's life; a grant on older terms is given back.
const ATTEMPTS_KEPT: usize = 32;

/// Bounds on how long a node keeps a waiter's place in the queue without hearing from it.
const PLACE_LIFE_MIN: Duration = Duration::from_millis(100);
const PLACE_LIFE_MAX: Duration = Duration::from_secs(2);

/// A lock held on a quorum of nodes.
///
/// The lock is only safe to act on while [`Lock::remaining`] is above zero; extend it with
/// [`Lock::extend`] and give it up with [`Lock::release`]. Dropping it does not release it:
/// the nodes expire it at its TTL.
#[must_use = "a lock that is dropped stays held on the nodes until its TTL expires; call release()"]
pub struct Lock {
    pub(crate) client: Client,
    pub(crate) name: String,
    pub(crate) keys: Arc<Keys>,
    pub(crate) token: Arc<str>,
    pub(crate) fence: u64,
    pub(crate) ttl: Duration,
    pub(crate) valid_until: Instant,
    pub(crate) held: HeldGauge,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The token is a capability: whoever has it can release the lock. Keep it out of logs.
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("ttl", &self.ttl)
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}

impl Lock {
    fn new(
        client: &Client,
        name: &str,
        keys: Arc<Keys>,
        token: Arc<str>,
        fence: u64,
        ttl: Duration,
        valid_until: Instant,
    ) -> Self {
        Lock {
            held: HeldGauge::new(),
            client: client.clone(),
            name: name.to_owned(),
            keys,
            token,
            fence,
            ttl,
            valid_until,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The holder's token: 128 random bits from the operating system, hex-encoded, after
    /// `<waiter id>/` when a release handed the lock over to a waiting caller. Only this token
    /// can extend or release the lock.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The fencing token of this acquisition: larger than that of every earlier acquisition of
    /// the same name, whatever the clocks did. Send it with every write to the protected
    /// resource, which must refuse a token lower than the highest it has seen (see
    /// [`crate::fencing`]).
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The TTL the lock was last set with.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The instant (monotonic clock) until which the lock is certainly held.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// How much longer the lock is certainly held; zero once it may have expired.
    pub fn remaining(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// Whether the lock is still certainly held.
    pub fn is_valid(&self) -> bool {
        self.remaining() > Duration::ZERO
    }

    /// Sets the lock's TTL to `ttl` on a quorum, counting from now.
    ///
    /// It only succeeds while the lock is valid, never deletes the lock, and never recreates it
    /// on a node that has lost it.
    ///
    /// An extend that fails may still have been applied on some nodes, or be applied later by
    /// a node that runs it late: whatever the outcome, the lock's validity afterwards is at
    /// most the new TTL counted from the start of the call (less the drift allowance), so a
    /// failed extend to a shorter TTL shortens [`Lock::valid_until`] too. A longer TTL that
    /// fails leaves the validity as it was.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when the lock has expired or a quorum no longer has it;
    /// [`Error::ExtendUncertain`] when too many nodes failed to answer in time;
    /// [`Error::InvalidArgument`] for a TTL out of bounds.
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        self.client.inner.settings.validate_ttl(ttl)?;
        if !self.is_valid() {
            crate::metrics::extension("lost");
            crate::metrics::lock_lost();
            return Err(Error::LockLost {
                name: self.name.clone(),
            });
        }
        let extended = self
            .client
            .extend_key(
                &self.name,
                &self.keys,
                &self.token,
                ttl,
                Some(self.valid_until),
            )
            .await;
        self.valid_until = extended.valid_until;
        match extended.outcome {
            Ok(_fence) => {
                self.ttl = ttl;
                Ok(())
            }
            Err(Error::NotHeld { name }) => {
                crate::metrics::lock_lost();
                Err(Error::LockLost { name })
            }
            Err(e) => Err(e),
        }
    }

    /// Deletes the lock on every node where this token still holds it.
    ///
    /// # Errors
    ///
    /// As [`Client::release_token`]. A lock that has already expired is released successfully.
    pub async fn release(self) -> Result<()> {
        self.client
            .release_key(&self.name, &self.keys, &self.token, self.fence)
            .await
    }
}

impl Client {
    /// Takes the lock `name` on a quorum, retrying with jittered delays until `opts.wait` runs out.
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
    /// [`Error::InvalidArgument`] (no node is contacted); otherwise the last attempt's error:
    /// [`Error::Contended`], [`Error::QuorumUnavailable`], or [`Error::Timeout`] when a quorum
    /// granted too slowly to leave the minimum validity. [`Error::QuorumUnavailable`] comes
    /// before the wait is over when the nodes kept out (quarantined for longer than the wait,
    /// refusing, or failing to connect twice in a row) leave no quorum; when quarantines that
    /// end within the wait would, the acquire waits for them instead of retrying.
    pub async fn acquire(&self, name: &str, opts: &LockOptions) -> Result<Lock> {
        self.acquire_with(name, opts, opts.get_wait()).await
    }

    /// Makes a single attempt to take the lock `name` (the options' wait is ignored).
    ///
    /// # Errors
    ///
    /// As [`Client::acquire`].
    pub async fn try_acquire(&self, name: &str, opts: &LockOptions) -> Result<Lock> {
        self.acquire_with(name, opts, Duration::ZERO).await
    }

    async fn acquire_with(&self, name: &str, opts: &LockOptions, wait: Duration) -> Result<Lock> {
        let started = Instant::now();
        let result = async {
            let keys = self.keys(name)?;
            opts.validate(&self.inner.settings)?;
            let wait_until = started + wait;
            let waiters = &self.inner.waiters;
            // A caller that waits queues on the nodes under one id for all its attempts, so it
            // keeps its turn from one attempt to the next.
            let mut queued = if wait.is_zero() {
                None
            } else {
                // Subscribed before the first attempt, so that no release is missed.
                waiters
                    .subscribe(&self.inner, self.inner.settings.node_timeout)
                    .await;
                Some(Queued::new(self, keys.clone(), opts, started)?)
            };
            let mut attempt = 0u32;
            // Per node: whether its last failure kept it out for no known time.
            let mut down_before = vec![false; self.inner.nodes.len()];
            loop {
                attempt += 1;
                if let Some(q) = queued.as_mut() {
                    if let Some(lock) = self.handed_over(name, q, opts).await {
                        return Ok(lock);
                    }
                }
                // Listening before the attempt: a release during it wakes us right after.
                let woken = queued.as_ref().map(|q| waiters.listen(&q.place.waiter));
                // A fresh token for every attempt: the previous attempt's cleanup may reach a
                // node after this attempt's grant (its connection still being made, or a
                // script resent after NOSCRIPT), and must then find nothing of its own to
                // delete rather than this attempt's grant.
                let token: Arc<str> = new_token()?.into();
                if let Some(q) = queued.as_mut() {
                    q.tried(&token);
                }
                let Refused {
                    error,
                    split,
                    took,
                    released,
                    handed_over,
                    out,
                } = match self
                    .attempt(name, &keys, &token, queued.as_mut(), opts)
                    .instrument(debug_span!("attempt", attempt))
                    .await
                {
                    Ok((valid_until, fence)) => {
                        if let Some(q) = &queued {
                            // Handed over on some nodes too, too late: not this lock.
                            let grants = waiters.take_grants(&q.place.waiter);
                            if !grants.is_empty() {
                                let _ = self.release_grants(&keys, grants, GiveBack::Silently);
                            }
                        }
                        return Ok(Lock::new(
                            self,
                            name,
                            keys,
                            token,
                            fence,
                            opts.get_ttl(),
                            valid_until,
                        ));
                    }
                    Err(e) => e,
                };
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
                let reopens = match outlook(&out) {
                    Outlook::Open => None,
                    Outlook::At(t) if t <= wait_until => Some(t),
                    Outlook::At(_) | Outlook::Closed => {
                        if let Some(released) = released {
                            let _ = released.await;
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
                        let _ = released.await;
                    }
                    return Err(error);
                }
                if handed_over {
                    // Perhaps on a quorum already: look before anything else.
                    continue;
                }
                let delay = if let Some(t) = reopens {
                    debug!(attempt, error = %error, "a quorum is kept out until quarantines end; waiting for them");
                    t.saturating_duration_since(now)
                } else if split {
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
                    debug!(attempt, delay = ?delay, "split vote; retrying soon");
                    delay
                } else {
                    let delay = retry_delay(opts).min(wait_until - now);
                    debug!(attempt, error = %error, delay = ?delay, "attempt failed; retrying");
                    delay
                };
                match woken {
                    // The release wakes the first waiter at once (and may have handed it the
                    // lock, even while it sat out a split vote); the delay is the fallback for
                    // lost messages and masters whose subscription is down.
                    Some(woken) => tokio::select! {
                        Ok(()) = woken => debug!("woken by a release"),
                        () = tokio::time::sleep(delay) => {}
                    },
                    None => tokio::time::sleep(delay).await,
                }
            }
        }
        .instrument(debug_span!("acquire", lock = %name))
        .await;
        let outcome = match &result {
            Ok(_) => "acquired",
            Err(e) => e.code(),
        };
        crate::metrics::acquire_done(outcome, started.elapsed().as_secs_f64());
        result
    }

    /// The lock, if releases handed it to this waiter on a quorum (see `lua/release.lua`).
    ///
    /// Grants come one message per master; after the first, the others are waited for, up to
    /// the per-node deadline. A lock is only taken with a quorum of one token and fencing token
    /// from nodes whose votes count, and validity counted from the start of the attempt that
    /// left those terms on the nodes (the grants came after it). Anything short of that is
    /// given back before the next attempt, which the waiter, first in line, makes at once.
    async fn handed_over(
        &self,
        name: &str,
        q: &mut Queued<'_>,
        opts: &LockOptions,
    ) -> Option<Lock> {
        let waiters = &self.inner.waiters;
        let nodes = &self.inner.nodes;
        let mut grants = waiters.take_grants(&q.place.waiter);
        if grants.is_empty() {
            return None;
        }
        let until = Instant::now() + self.inner.settings.node_timeout;
        let ttl = opts.get_ttl();
        let drift = self.inner.settings.drift(ttl);
        loop {
            if let Some((token, fence)) = quorum_grant(&grants, nodes, self.quorum()) {
                // The token is `<waiter id>/<attempt token>`.
                let started = token
                    .split_once('/')
                    .and_then(|(_, base)| q.attempts.iter().find(|(t, _)| **t == *base))
                    .map(|(_, at)| *at);
                let valid_until = started.map(|at| at + ttl - drift);
                if let Some(valid_until) = valid_until.filter(|v| {
                    v.saturating_duration_since(Instant::now()) >= opts.get_min_validity()
                }) {
                    waiters.keep(&token);
                    self.note_fence(fence);
                    let (ours, others): (Vec<Grant>, Vec<Grant>) = grants
                        .into_iter()
                        .partition(|g| g.token == token && g.fence == fence);
                    for g in &ours {
                        // The grant took the place off that node's queue.
                        if let Some(on) = q.maybe_on.get_mut(g.node) {
                            *on = false;
                        }
                    }
                    if !others.is_empty() {
                        let _ = self.release_grants(&q.keys, others, GiveBack::Silently);
                    }
                    debug!(fence, "the lock was handed over by its release");
                    return Some(Lock::new(
                        self,
                        name,
                        q.keys.clone(),
                        token.into(),
                        fence,
                        ttl,
                        valid_until,
                    ));
                }
                break;
            }
            if Instant::now() >= until {
                break;
            }
            let woken = waiters.listen(&q.place.waiter);
            // Grants heard between taking and listening did not wake anyone.
            let late = waiters.take_grants(&q.place.waiter);
            if late.is_empty() {
                tokio::select! {
                    _ = woken => {}
                    () = tokio::time::sleep_until(until.into()) => {}
                }
            }
            grants.extend(late);
            grants.extend(waiters.take_grants(&q.place.waiter));
        }
        debug!(
            grants = grants.len(),
            "handed over on too few nodes; giving it back"
        );
        // Still first in line: back in the queue where the grants took the place, or the next
        // release there would hand the lock to someone else. Without terms, so that a release
        // there only wakes this waiter: the terms these grants were made on must not hand the
        // same token over twice, or a second handover could pass for the lock it already had.
        if !q.in_line {
            let _ = self.release_grants(&q.keys, grants, GiveBack::PassingOn);
            return None;
        }
        for g in &grants {
            if let Some(on) = q.maybe_on.get_mut(g.node) {
                *on = true;
            }
        }
        let _ = self.release_grants(
            &q.keys,
            grants,
            GiveBack::KeepingPlace(q.place.clone(), None),
        );
        None
    }

    /// One attempt: ask every node, count the votes, release on failure. Returns the validity
    /// deadline and the fencing token.
    ///
    /// A proposal that a quorum refuses only as stale (their counters are not below it) is
    /// raised above the highest counter reported and sent again at once: that is not
    /// contention, so it costs no retry delay, and nodes that granted the lower proposal take
    /// the higher one (they see their own token).
    async fn attempt(
        &self,
        name: &str,
        keys: &Arc<Keys>,
        token: &Arc<str>,
        mut queued: Option<&mut Queued<'_>>,
        opts: &LockOptions,
    ) -> Result<(Instant, u64), Refused> {
        let settings = &self.inner.settings;
        let nodes = &self.inner.nodes;
        let ttl = opts.get_ttl();
        let drift = settings.drift(ttl);
        let place = queued.as_ref().map(|q| q.place_for_attempt());
        let mut cleanup = ReleaseOnDrop {
            client: self,
            keys,
            token,
            armed: true,
        };
        let attempt_started = Instant::now();
        let refused = |error| Refused {
            error,
            split: false,
            took: attempt_started.elapsed(),
            released: None,
            handed_over: false,
            out: Vec::new(),
        };
        let mut proposal = self.propose(0).map_err(refused)?;
        let mut round = 0;
        let mut marked = false;
        let (error, answers) = loop {
            round += 1;
            let start = Instant::now();
            // A node answering at the very deadline must still leave the minimum validity.
            let budget = ttl
                .saturating_sub(drift)
                .saturating_sub(opts.get_min_validity());
            let deadline = start + settings.node_timeout.min(budget);
            let (tally, answers) = vote(
                nodes,
                Operation::Acquire,
                deadline,
                |i| {
                    let (inner, keys, token, place) = (
                        self.inner.clone(),
                        keys.clone(),
                        token.clone(),
                        place.clone(),
                    );
                    async move {
                        let answer = inner.nodes[i]
                            .acquire(keys.for_acquire(), &token, ttl, proposal, place.as_ref())
                            .await;
                        if matches!(answer, Err(NodeFailureKind::Unmarked)) {
                            // Heard after the vote was decided, perhaps: mark it anyway, so
                            // that its quarantine starts now.
                            mark_in_background(&inner);
                        }
                        answer
                    }
                },
                |reply| matches!(reply, AcquireReply::Granted(_)),
            )
            .await;
            let elapsed = start.elapsed();
            if let Some(q) = queued.as_mut() {
                q.note(&answers);
                q.keep_in_line_if_reaching(&answers, self.quorum());
            }

            let unmarked = answers.iter().any(is_unmarked);
            if tally.decision() == Decision::Reached {
                match validity(ttl, elapsed, drift) {
                    Some(v) if v >= opts.get_min_validity() => {
                        cleanup.armed = false;
                        self.note_fence(proposal);
                        return Ok((start + ttl - drift, proposal));
                    }
                    _ => {
                        let error = Error::Timeout {
                            operation: Operation::Acquire,
                            name: name.to_owned(),
                            elapsed,
                            detail: format!(
                                "a quorum granted, but too late to leave the minimum validity of {}",
                                humantime::format_duration(opts.get_min_validity())
                            ),
                        };
                        break (error, answers);
                    }
                }
            }
            // A lock handed to this waiter counts as held here: the attempt did not get it,
            // and the waiter looks at handed-over locks before its next attempt.
            let holders = addrs_where(nodes, &answers, |a| {
                matches!(a, Ok(AcquireReply::Held(..) | AcquireReply::HandedOver(..)))
            });
            let reserved =
                addrs_where(nodes, &answers, |a| matches!(a, Ok(AcquireReply::Reserved)));
            let stale = answers
                .iter()
                .filter_map(|a| match a {
                    Some(Ok(AcquireReply::Stale(counter))) => Some(*counter),
                    _ => None,
                })
                .max();
            if unmarked && !marked {
                // Masters without the deployment's marker: a new deployment, marked now and
                // counted at once, or masters that lost their data, marked in quarantine.
                // Either way the attempt goes on at once, on the masters as they now are.
                marked = true;
                self.mark_deployment().await;
                continue;
            }
            if let Some(counter) = stale.filter(|_| {
                holders.is_empty() && reserved.is_empty() && round < MAX_PROPOSAL_ROUNDS
            }) {
                debug!(
                    proposal,
                    counter, "proposal was stale; proposing higher at once"
                );
                self.note_fence(counter);
                proposal = self.propose(counter).map_err(refused)?;
                continue;
            }
            let failures = failures(nodes, &answers);
            let error = if holders.is_empty() && reserved.is_empty() {
                self.unavailable(Operation::Acquire, name, failures)
            } else {
                Error::Contended {
                    name: name.to_owned(),
                    holders,
                    reserved,
                    failures,
                    total: nodes.len(),
                }
            };
            break (error, answers);
        };
        let split = is_split(&answers, self.quorum());
        // Locks that releases handed to this waiter, whose messages may have been lost: booked
        // as if heard.
        let handed: Vec<Grant> = answers
            .iter()
            .enumerate()
            .filter_map(|(node, a)| match a {
                Some(Ok(AcquireReply::HandedOver(token, fence))) => Some(Grant {
                    node,
                    token: token.to_string(),
                    fence: *fence,
                }),
                _ => None,
            })
            .collect();
        let handed_over = !handed.is_empty();
        if let Some(q) = &queued {
            self.inner.waiters.add_grants(&q.place.waiter, handed);
        }
        // A node that refused ("held by another", "another waiter first") has nothing of ours;
        // every other node may. No need to wait: the next attempt queues behind these on every
        // connection.
        let ours = |i: usize| {
            !matches!(
                answers[i],
                Some(Ok(AcquireReply::Held(..)
                    | AcquireReply::Reserved
                    | AcquireReply::HandedOver(..)))
            )
        };
        let how = match queued {
            // A waiter out of line has no place to keep: its grants go back as a release
            // does, passing the turn on.
            Some(q) if !q.in_line => GiveBack::PassingOn,
            // A waiter gives its grants back keeping its place there, on the terms the
            // refusing nodes queued it with, so that all the nodes agree on who goes next.
            Some(q) => {
                let terms = Terms {
                    token: token.clone(),
                    ttl,
                    proposal,
                };
                for (i, on) in q.maybe_on.iter_mut().enumerate() {
                    *on |= ours(i);
                }
                GiveBack::KeepingPlace(q.place.clone(), Some(terms))
            }
            None => GiveBack::Silently,
        };
        let released = self.release_in_background(keys, token, how, ours);
        cleanup.armed = false;
        Err(Refused {
            error,
            split,
            took: attempt_started.elapsed(),
            released,
            handed_over,
            out: answers.iter().map(kept_out).collect(),
        })
    }

    /// A fencing token to propose: above `floor`, above every token this client has seen, and
    /// (unless turned off) at least the current time in microseconds, so that clients that have
    /// never met still tend to propose fresh values. Safety does not rest on it: the nodes check.
    fn propose(&self, floor: u64) -> Result<u64> {
        let clock = if self.inner.settings.fence_clock {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        } else {
            0
        };
        let seen = self.inner.highest_fence.load(Ordering::Relaxed);
        let proposal = clock
            .max(seen.saturating_add(1))
            .max(floor.saturating_add(1));
        if proposal > MAX_FENCE {
            return Err(Error::Timeout {
                operation: Operation::Acquire,
                name: String::new(),
                elapsed: Duration::ZERO,
                detail: format!(
                    "fencing counters on the nodes have reached the limit of {MAX_FENCE} (2^53 - 1)"
                ),
            });
        }
        Ok(proposal)
    }

    fn note_fence(&self, fence: u64) {
        self.inner.highest_fence.fetch_max(fence, Ordering::Relaxed);
    }

    /// Extends a lock by name and token, as a stateless caller (the HTTP service) would.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the token does not hold the lock on a quorum (wrong token, or the
    /// lock expired); otherwise as [`Lock::extend`].
    pub async fn extend_token(&self, name: &str, token: &str, ttl: Duration) -> Result<Lock> {
        let keys = self.keys(name)?;
        validate_token(token)?;
        self.inner.settings.validate_ttl(ttl)?;
        let token: Arc<str> = token.into();
        let extended = self.extend_key(name, &keys, &token, ttl, None).await;
        let fence = extended.outcome?;
        Ok(Lock::new(
            self,
            name,
            keys,
            token,
            fence,
            ttl,
            extended.valid_until,
        ))
    }

    /// Sets a lock's TTL on a quorum. `held_until` is the validity the holder had before, if
    /// it knows it (a stateless caller does not).
    ///
    /// The command may be applied on any node from the moment it is sent, and by a slow node
    /// long after this returns; so from the start, the lock is certain only until the new TTL
    /// runs out (less drift), if that comes before `held_until`. The returned validity is that
    /// bound on success, the lesser of it and `held_until` when the outcome is uncertain, and
    /// the start of the call when a quorum says the lock is gone.
    pub(crate) async fn extend_key(
        &self,
        name: &str,
        keys: &Arc<Keys>,
        token: &Arc<str>,
        ttl: Duration,
        held_until: Option<Instant>,
    ) -> Extended {
        let settings = &self.inner.settings;
        let nodes = &self.inner.nodes;
        let start = Instant::now();
        let new_ttl_ends = start + ttl - settings.drift(ttl);
        let certain_until = held_until.map_or(new_ttl_ends, |held| held.min(new_ttl_ends));
        // Answers after that are of no use: the lock may be gone by then.
        let deadline = certain_until.min(start + settings.node_timeout);
        let (tally, answers) = vote(
            nodes,
            Operation::Extend,
            deadline,
            |i| {
                let (inner, keys, token) = (self.inner.clone(), keys.clone(), token.clone());
                async move { inner.nodes[i].extend(keys.for_extend(), &token, ttl).await }
            },
            Option::is_some,
        )
        .instrument(debug_span!("extend", lock = %name))
        .await;
        let in_time = Instant::now() < certain_until;
        if tally.decision() == Decision::Reached && in_time {
            crate::metrics::extension("extended");
            // Every node that has the lock has the holder's token as its counter.
            let fence = answers
                .iter()
                .filter_map(|a| a.as_ref()?.as_ref().ok().copied().flatten())
                .max();
            return Extended {
                valid_until: new_ttl_ends,
                outcome: Ok(fence.unwrap_or(0)),
            };
        }
        // Refusals alone rule a quorum out: the lock is gone, whatever the failed nodes say.
        let quorum = self.quorum();
        if !in_time || nodes.len() - tally.no_count() < quorum {
            crate::metrics::extension("lost");
            return Extended {
                valid_until: start.min(certain_until),
                outcome: Err(Error::NotHeld {
                    name: name.to_owned(),
                }),
            };
        }
        crate::metrics::extension("unavailable");
        crate::metrics::quorum_failure(Operation::Extend);
        Extended {
            valid_until: certain_until,
            outcome: Err(Error::ExtendUncertain {
                name: name.to_owned(),
                valid_for: certain_until.saturating_duration_since(Instant::now()),
                needed: quorum,
                total: nodes.len(),
                failures: failures(nodes, &answers),
            }),
        }
    }

    /// Releases a lock by name and token, as a stateless caller (the HTTP service) would.
    ///
    /// Compare-and-delete on every node: only keys holding this token are deleted.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when no node had this token and another token holds the lock (nothing
    /// is changed); [`Error::QuorumUnavailable`] when fewer than a quorum of nodes answered (keys
    /// left behind expire at their TTL); [`Error::InvalidArgument`] for a bad name or token.
    /// A lock that is already gone everywhere counts as released.
    pub async fn release_token(&self, name: &str, token: &str) -> Result<()> {
        let keys = self.keys(name)?;
        validate_token(token)?;
        self.release_key(name, &keys, &token.into(), 0).await
    }

    pub(crate) async fn release_key(
        &self,
        name: &str,
        keys: &Arc<Keys>,
        token: &Arc<str>,
        fence: u64,
    ) -> Result<()> {
        let nodes = &self.inner.nodes;
        let quorum = self.quorum();
        let deadline = Instant::now() + self.inner.settings.node_timeout;
        if token.contains('/') {
            // A handed-over lock: a slow master may still hand the same token over after this
            // release has passed it.
            self.inner.waiters.released(token);
        }
        // Done as soon as a quorum no longer has the lock; the other nodes finish in the
        // background.
        let (_, answers) = vote(
            nodes,
            Operation::Release,
            deadline,
            |i| {
                let (inner, keys, token) = (self.inner.clone(), keys.clone(), token.clone());
                async move {
                    inner.nodes[i]
                        .release(
                            keys.for_release(),
                            &token,
                            inner.waiters.wake_prefix(),
                            fence,
                        )
                        .await
                }
            },
            |reply| matches!(reply, ReleaseReply::Deleted | ReleaseReply::Absent),
        )
        .instrument(debug_span!("release", lock = %name))
        .await;
        let count = |reply: ReleaseReply| {
            answers
                .iter()
                .filter(|a| matches!(a, Some(Ok(r)) if *r == reply))
                .count()
        };
        let (deleted, absent, foreign) = (
            count(ReleaseReply::Deleted),
            count(ReleaseReply::Absent),
            count(ReleaseReply::Foreign),
        );
        if deleted + absent >= quorum || (deleted > 0 && deleted + absent + foreign >= quorum) {
            crate::metrics::release("released");
            return Ok(());
        }
        if deleted == 0 && foreign > 0 {
            crate::metrics::release("not_held");
            return Err(Error::NotHeld {
                name: name.to_owned(),
            });
        }
        crate::metrics::release("unavailable");
        Err(self.unavailable(Operation::Release, name, failures(nodes, &answers)))
    }

    /// Compare-and-delete of an attempt's grants on the nodes `which` selects, without waiting
    /// for the answers, which are awaited in the background. Safe because every attempt has
    /// its own token: should a cleanup reach a node only after the next attempt's command (a
    /// connection still being made, a script resent after NOSCRIPT), it finds nothing of its
    /// own there and deletes nothing. Waiters are not woken: the lock was never held.
    fn release_in_background(
        &self,
        keys: &Arc<Keys>,
        token: &Arc<str>,
        how: GiveBack,
        which: impl Fn(usize) -> bool,
    ) -> Option<JoinHandle<()>> {
        let grants = (0..self.inner.nodes.len())
            .filter(|&i| which(i))
            .map(|node| Grant {
                node,
                token: token.to_string(),
                fence: 0,
            })
            .collect();
        self.release_grants(keys, grants, how)
    }

    /// Releases each of `grants` (a token on one node) without waiting for the answers, which
    /// are awaited in the background: an attempt's grants, or locks that releases handed to a
    /// waiter of this client.
    pub(crate) fn release_grants(
        &self,
        keys: &Arc<Keys>,
        grants: Vec<Grant>,
        how: GiveBack,
    ) -> Option<JoinHandle<()>> {
        let deadline = Instant::now() + self.inner.settings.node_timeout;
        let (grants, how) = (Arc::new(grants), Arc::new(how));
        send_and_detach(self.inner.nodes.len(), deadline, |i| {
            let (inner, keys, grants, how) = (
                self.inner.clone(),
                keys.clone(),
                grants.clone(),
                how.clone(),
            );
            async move {
                let node = &inner.nodes[i];
                let wake = inner.waiters.wake_prefix();
                for grant in grants.iter().filter(|g| g.node == i) {
                    let answer = match &*how {
                        GiveBack::Silently => {
                            node.release(keys.for_release(), &grant.token, "", grant.fence)
                                .await
                        }
                        GiveBack::PassingOn => {
                            node.release(keys.for_release(), &grant.token, wake, grant.fence)
                                .await
                        }
                        GiveBack::KeepingPlace(place, terms) => {
                            node.give_back(
                                keys.for_place(),
                                &grant.token,
                                place,
                                terms.as_ref(),
                                wake,
                            )
                            .await
                        }
                    };
                    debug!(node = node.addr(), answer = ?answer, "release in the background");
                }
            }
        })
    }
}

/// What else a release in the background does.
#[derive(Debug)]
pub(crate) enum GiveBack {
    /// Nothing more: nobody is woken and no queue changes (an attempt's grants when the
    /// caller does not wait, or grants left over once a waiter has the lock).
    Silently,
    /// Hands the lock on to the next waiter, as any release does.
    PassingOn,
    /// Puts this waiter back in line, with these terms (as on the nodes that refused it) or
    /// with none, so that a release there only wakes it (see `lua/give_back.lua`).
    KeepingPlace(Place, Option<Terms>),
}

/// Releases an attempt's grants if the attempt's future is dropped half-way.
struct ReleaseOnDrop<'a> {
    client: &'a Client,
    keys: &'a Arc<Keys>,
    token: &'a Arc<str>,
    armed: bool,
}

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Without a runtime the answers are not awaited, and grants not reached expire at
        // their TTL.
        let _ =
            self.client
                .release_in_background(self.keys, self.token, GiveBack::Silently, |_| true);
    }
}

/// A waiting caller's place in the lock's queue on the nodes, given up when the acquire ends
/// (with the lock, with an error, or cancelled) wherever the place may still be.
struct Queued<'a> {
    client: &'a Client,
    keys: Arc<Keys>,
    place: Place,
    /// Per node: whether the place may be there. Refusals queue the caller; a grant removes
    /// its place, and giving the grant back puts it back; a node that did not answer may have
    /// done either.
    maybe_on: Vec<bool>,
    /// The latest attempts' tokens, with when each started: the terms a release may hand the
    /// lock over on.
    attempts: VecDeque<(Arc<str>, Instant)>,
    /// Whether the waiter keeps its place in the queue. A waiter whose attempts reach fewer
    /// nodes than a quorum could never take the lock, and its places on the nodes it reaches
    /// would only hold up callers that can: it leaves the line until an attempt reaches a
    /// quorum again, and then takes its place back with the same priority.
    in_line: bool,
}

impl<'a> Queued<'a> {
    fn new(
        client: &'a Client,
        keys: Arc<Keys>,
        opts: &LockOptions,
        started: Instant,
    ) -> Result<Self> {
        // First come, first served: the time the caller started waiting, from the wall clock
        // so that every client's waiters compare (a skewed clock only costs fairness).
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_sub(started.elapsed());
        let pause = opts.get_retry_delay() + opts.get_retry_jitter();
        Ok(Queued {
            client,
            keys,
            place: Place {
                waiter: client.inner.waiters.new_waiter(),
                priority: u64::try_from(since_epoch.as_micros())
                    .unwrap_or(MAX_FENCE)
                    .min(MAX_FENCE),
                // Refreshed by every attempt, and attempts come at least this often, so a live
                // waiter keeps its place and a dead one holds nobody up for long.
                life: (pause * 2 + client.inner.settings.node_timeout)
                    .clamp(PLACE_LIFE_MIN, PLACE_LIFE_MAX),
            },
            maybe_on: vec![false; client.inner.nodes.len()],
            attempts: VecDeque::with_capacity(ATTEMPTS_KEPT),
            in_line: true,
        })
    }

    /// The place an attempt sends: the waiter's own, or, out of line, one with no life, which
    /// the nodes do not queue (a release may still hand over a lock to the waiter's id, and
    /// the attempt must recognise it).
    fn place_for_attempt(&self) -> Place {
        let mut place = self.place.clone();
        if !self.in_line {
            place.life = Duration::ZERO;
        }
        place
    }

    /// Leaves the line when an attempt's answers show that fewer than `quorum` nodes can be
    /// reached (connection failures and timeouts), and comes back when a quorum can.
    fn keep_in_line_if_reaching(
        &mut self,
        answers: &[Option<Answer<AcquireReply>>],
        quorum: usize,
    ) {
        let unreachable = answers
            .iter()
            .filter(|a| {
                matches!(
                    a,
                    Some(Err(
                        NodeFailureKind::Timeout | NodeFailureKind::Connection(_)
                    ))
                )
            })
            .count();
        let reaching = answers.len() - unreachable >= quorum;
        if reaching == self.in_line {
            return;
        }
        self.in_line = reaching;
        if !reaching {
            debug!(
                unreachable,
                "too few nodes reachable for a quorum; leaving the line"
            );
            self.leave_line();
        }
    }

    /// Gives the place up wherever it may be, in the background, passing the turn on where the
    /// lock is free (this waiter may have been woken for a release it will not use).
    fn leave_line(&mut self) {
        if !self.maybe_on.contains(&true) {
            return;
        }
        let inner = &self.client.inner;
        let deadline = Instant::now() + inner.settings.node_timeout;
        let selected = std::mem::replace(&mut self.maybe_on, vec![false; inner.nodes.len()]);
        let _ = send_and_detach(inner.nodes.len(), deadline, |i| {
            let (inner, keys, waiter) =
                (inner.clone(), self.keys.clone(), self.place.waiter.clone());
            let selected = selected[i];
            async move {
                if selected {
                    let answer = inner.nodes[i]
                        .dequeue(keys.for_place(), &waiter, inner.waiters.wake_prefix())
                        .await;
                    debug!(node = inner.nodes[i].addr(), answer = ?answer, "dequeue");
                }
            }
        });
    }

    /// Books an attempt about to start with `token`.
    fn tried(&mut self, token: &Arc<str>) {
        if self.attempts.len() == ATTEMPTS_KEPT {
            self.attempts.pop_front();
        }
        self.attempts.push_back((token.clone(), Instant::now()));
    }

    /// Books an attempt's answers.
    fn note(&mut self, answers: &[Option<Answer<AcquireReply>>]) {
        if !self.in_line {
            // Out of line, refusals queue nothing.
            return;
        }
        for (on, answer) in self.maybe_on.iter_mut().zip(answers) {
            match answer {
                // A grant, or a release's handover, takes the place off the queue.
                Some(Ok(AcquireReply::Granted(_) | AcquireReply::HandedOver(..))) => *on = false,
                // A stale proposal is answered before the queue is touched.
                Some(Ok(AcquireReply::Stale(_))) => {}
                _ => *on = true,
            }
        }
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let inner = &self.client.inner;
        // Locks handed over to this waiter that it did not take are nobody's: give them back,
        // passing the turn on.
        let grants = inner.waiters.forget(&self.place.waiter);
        if !grants.is_empty() {
            let _ = self
                .client
                .release_grants(&self.keys, grants, GiveBack::PassingOn);
        }
        self.leave_line();
    }
}

/// What an extend leaves its holder with.
pub(crate) struct Extended {
    /// Until when the lock is certainly held now (see [`Client::extend_key`]).
    pub(crate) valid_until: Instant,
    /// The holder's fencing token, or why the extend failed.
    pub(crate) outcome: Result<u64>,
}

/// Why an attempt failed, and whether it was a split vote.
struct Refused {
    error: Error,
    /// Other holders answered, but no one holder on a quorum of the nodes that answered:
    /// contenders arrived together and split the votes (or the answers were too few to tell).
    split: bool,
    /// How long the attempt took.
    took: Duration,
    /// The release of the attempt's grants, finishing in the background.
    released: Option<JoinHandle<()>>,
    /// Some nodes said a release had handed the lock to this waiter.
    handed_over: bool,
    /// Per node, what keeps it from granting for a while (see [`kept_out`]).
    out: Vec<Option<Option<Instant>>>,
}

/// What keeps a node from granting beyond the next attempt: a quarantine, until it ends; for
/// no known time, a refusal no retry changes (a replica, a refused login, no permission, not
/// durable, unreadable) or a connection refused or dropped; `None` when it may grant at the
/// next attempt (it answered, timed out, or was just marked).
fn kept_out<T>(answer: &Option<Answer<T>>) -> Option<Option<Instant>> {
    match answer {
        Some(Err(NodeFailureKind::Quarantined(left))) => Some(Some(Instant::now() + *left)),
        // A master loading its data, or busy with a script, answers again soon.
        Some(Err(NodeFailureKind::Server(message)))
            if ["LOADING", "BUSY", "TRYAGAIN"]
                .iter()
                .any(|transient| message.contains(transient)) =>
        {
            None
        }
        Some(Err(
            NodeFailureKind::Server(_)
            | NodeFailureKind::Protocol(_)
            | NodeFailureKind::NotDurable
            | NodeFailureKind::Unverified
            | NodeFailureKind::Connection(_),
        )) => Some(None),
        _ => None,
    }
}

/// Whether the votes were split: nobody on a quorum of the answers, and evidence that several
/// contenders shared them (two holders, told apart by their fencing tokens; another holder
/// besides our own grants; or our own grants where other nodes had another waiter first, so the
/// nodes' queues did not agree yet). One holder seen among failures is not a split: when
/// unreachable nodes fail fast, a single refusal can decide the vote, and that holder may well
/// have the lock; the waiter must then wait for its release, not retry in a tight loop. Nor is
/// a holder seen beside "another waiter first": that waiter is most likely the holder, still
/// taking the remaining nodes.
fn is_split(answers: &[Option<Answer<AcquireReply>>], quorum: usize) -> bool {
    let mut holders: Vec<(u64, usize)> = Vec::new();
    let (mut granted, mut reserved) = (0, 0);
    for answer in answers {
        match answer {
            Some(Ok(AcquireReply::Held(_, fence))) => {
                match holders.iter_mut().find(|(f, _)| f == fence) {
                    Some((_, n)) => *n += 1,
                    None => holders.push((*fence, 1)),
                }
            }
            Some(Ok(AcquireReply::Granted(_))) => granted += 1,
            Some(Ok(AcquireReply::Reserved)) => reserved += 1,
            _ => {}
        }
    }
    let others = if holders.is_empty() {
        usize::from(reserved > 0)
    } else {
        holders.len()
    };
    let contenders = others + usize::from(granted > 0);
    others > 0 && contenders >= 2 && holders.iter().all(|(_, n)| *n < quorum)
}

/// The token and fencing token that a quorum of distinct nodes, each of whose votes counts,
/// handed over.
fn quorum_grant(grants: &[Grant], nodes: &[Node], quorum: usize) -> Option<(String, u64)> {
    grants.iter().find_map(|candidate| {
        let mut on: Vec<usize> = grants
            .iter()
            .filter(|g| g.token == candidate.token && g.fence == candidate.fence)
            .map(|g| g.node)
            .filter(|&i| nodes.get(i).is_some_and(|n| n.vote_counts(None).is_ok()))
            .collect();
        on.sort_unstable();
        on.dedup();
        (on.len() >= quorum).then(|| (candidate.token.clone(), candidate.fence))
    })
}

/// The addresses of the nodes whose answer matches.
fn addrs_where<T>(
    nodes: &[Node],
    answers: &[Option<Answer<T>>],
    pred: impl Fn(&Answer<T>) -> bool,
) -> Vec<String> {
    nodes
        .iter()
        .zip(answers)
        .filter(|(_, a)| a.as_ref().is_some_and(&pred))
        .map(|(n, _)| n.addr().to_owned())
        .collect()
}

/// The nodes that failed, and how.
fn failures<T>(nodes: &[Node], answers: &[Option<Answer<T>>]) -> Vec<NodeFailure> {
    nodes
        .iter()
        .zip(answers)
        .filter_map(|(n, a)| match a {
            Some(Err(kind)) => Some(NodeFailure {
                node: n.addr().to_owned(),
                kind: kind.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// A fresh holder token: [`TOKEN_BYTES`] bytes from the OS generator, hex-encoded.
fn new_token() -> Result<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    rand::rngs::SysRng
        .try_fill_bytes(&mut bytes)
        .map_err(|e| Error::Entropy(e.to_string()))?;
    let mut token = String::with_capacity(TOKEN_BYTES * 2);
    for b in bytes {
        use std::fmt::Write;
        let _ = write!(token, "{b:02x}");
    }
    Ok(token)
}

/// The pause before the next attempt: the fixed delay plus a uniform random part.
fn retry_delay(opts: &LockOptions) -> Duration {
    let jitter = u64::try_from(opts.get_retry_jitter().as_micros()).unwrap_or(u64::MAX);
    let extra = if jitter == 0 {
        0
    } else {
        rand::random_range(0..jitter)
    };
    opts.get_retry_delay() + Duration::from_micros(extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_votes_are_told_from_one_holder() {
        let held = |f| Some(Ok(AcquireReply::Held(None, f)));
        let granted = Some(Ok(AcquireReply::Granted(9)));
        // One holder on three of five: held, not split.
        assert!(!is_split(&[held(1), held(1), held(1), None, None], 3));
        // Two holders and our own grant, nobody on three: split.
        assert!(is_split(
            &[held(1), held(2), held(1), granted.clone(), held(2)],
            3
        ));
        // No refusal from a holder at all (failures): not a split.
        let failed = || Some(Err(crate::NodeFailureKind::Timeout));
        assert!(!is_split(&[granted.clone(), failed(), None], 2));
        // One holder seen among failures (nodes that fail fast decided the vote): it may hold
        // the lock, so not a split.
        assert!(!is_split(&[failed(), failed(), held(4), None, None], 3));
        // One other holder and our own grant, neither on a quorum: split.
        assert!(is_split(
            &[held(4), granted.clone(), held(4), None, None],
            3
        ));
        // Our grants where other nodes have another waiter first: the queues disagree, split.
        let reserved = || Some(Ok(AcquireReply::Reserved));
        assert!(is_split(
            &[granted.clone(), granted, reserved(), reserved(), None],
            3
        ));
        // Another waiter first everywhere: our turn has not come, not a split.
        assert!(!is_split(
            &[reserved(), reserved(), reserved(), None, None],
            3
        ));
        // A holder taking the nodes where it was first: not a split either.
        assert!(!is_split(
            &[held(4), held(4), reserved(), reserved(), None],
            3
        ));
    }

    #[test]
    fn what_keeps_a_master_out_beyond_the_next_attempt() {
        let failed = |kind| Some(Err::<AcquireReply, _>(kind));
        let in_a_minute = kept_out(&failed(NodeFailureKind::Quarantined(Duration::from_secs(
            60,
        ))));
        assert!(in_a_minute.is_some_and(|until| until.is_some()));
        // A replica, a refused login: no known end.
        let replica =
            NodeFailureKind::Server("READONLY You can't write against a read only replica.".into());
        assert_eq!(kept_out(&failed(replica)), Some(None));
        assert_eq!(kept_out(&failed(NodeFailureKind::NotDurable)), Some(None));
        // Passing states: loading, busy, a missed deadline, a marking under way, an answer.
        let loading =
            NodeFailureKind::Server("LOADING Redis is loading the dataset in memory".into());
        assert_eq!(kept_out(&failed(loading)), None);
        assert_eq!(kept_out(&failed(NodeFailureKind::Timeout)), None);
        assert_eq!(kept_out(&failed(NodeFailureKind::Unmarked)), None);
        assert_eq!(kept_out(&Some(Ok(AcquireReply::Reserved))), None);
        assert_eq!(kept_out::<AcquireReply>(&None), None);
    }

    #[test]
    fn tokens_are_128_bit_hex_and_distinct() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

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
        assert_eq!(retry_delay(&fixed), fixed.get_retry_delay());
    }
}
