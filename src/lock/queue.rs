//! A waiting caller's place in the lock's queue on the nodes: where it may be, the terms a
//! release may hand the lock over on, and leaving the line.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::debug;

use super::acquire::WAKE_FALLBACK;
use crate::cluster::{Cluster, GiveBack, MAX_FENCE};
use crate::config::random_token;
use crate::config::{LockKind, LockOptions};
use crate::error::NodeFailureKind;
use crate::fanout::{Answer, send_and_detach};
use crate::node::Keys;
use crate::node::{AcquireReply, Place, Terms};
use crate::waiters::KeptPlace;

/// Attempts whose terms a waiter remembers. A node keeps only the latest refused attempt's
/// terms, and only for the place's life; a grant on older terms is given back.
const ATTEMPTS_KEPT: usize = 32;

/// How long a waiter that releases handed the lock on a quorum waits for the other nodes'
/// messages before it gives its place up there: those nodes were most likely sent the same
/// release, whose message is on its way.
const LATE_HANDOVER_GRACE: Duration = Duration::from_millis(5);

/// Bounds on how long a node keeps a waiter's place in the queue without hearing from it.
const PLACE_LIFE_MIN: Duration = Duration::from_millis(100);
const PLACE_LIFE_MAX: Duration = Duration::from_secs(2);

/// A waiting caller's place in the lock's queue on the nodes, given up when the acquire ends
/// (with the lock, with an error, or cancelled) wherever the place may still be.
pub(super) struct Queued<'a> {
    cluster: &'a Arc<Cluster>,
    pub(super) keys: Arc<Keys>,
    pub(super) place: Place,
    /// Per node: whether the place may be there. Refusals queue the caller; a grant removes
    /// its place, and giving the grant back puts it back; a node that did not answer may have
    /// done either.
    pub(super) may_be_queued_on: Vec<bool>,
    /// The latest attempts' tokens, with when each started: the terms a release may hand the
    /// lock over on.
    pub(super) attempts: VecDeque<(Arc<str>, Instant)>,
    /// Whether the waiter keeps its place in the queue. A waiter whose attempts reach fewer
    /// nodes than a quorum could never take the lock, and its places on the nodes it reaches
    /// would only hold up callers that can: it leaves the line until an attempt reaches a
    /// quorum again, and then takes its place back with the same priority.
    pub(super) in_line: bool,
    /// The handover token, once releases handed this waiter the lock on a quorum.
    pub(super) taken_with: Option<String>,
}

impl<'a> Queued<'a> {
    pub(super) fn new(
        cluster: &'a Arc<Cluster>,
        keys: Arc<Keys>,
        opts: &LockOptions,
        started: Instant,
    ) -> Self {
        Queued {
            cluster,
            keys,
            place: Place {
                waiter: cluster.waiters.new_waiter(),
                priority: priority_since(started),
                life: place_life(cluster, opts),
            },
            may_be_queued_on: vec![false; cluster.nodes.len()],
            attempts: VecDeque::with_capacity(ATTEMPTS_KEPT),
            in_line: true,
            taken_with: None,
        }
    }

    /// The waiter of the place a release of this client kept for it (see
    /// [`keep_place_for_next_hold`]), in line already, on `on` the masters where it may be.
    pub(super) fn from_kept(cluster: &'a Arc<Cluster>, kept: &KeptPlace, on: Vec<bool>) -> Self {
        let mut attempts = VecDeque::with_capacity(ATTEMPTS_KEPT);
        attempts.push_back((kept.terms.token.clone(), kept.sent));
        Queued {
            cluster,
            keys: kept.keys.clone(),
            place: kept.place.clone(),
            may_be_queued_on: on,
            attempts,
            in_line: true,
            taken_with: None,
        }
    }

    /// The place an attempt sends: the waiter's own, or, out of line, one with no life, which
    /// the nodes do not queue (a release may still hand over a lock to the waiter's id, and
    /// the attempt must recognise it).
    pub(super) fn place_for_attempt(&self) -> Place {
        let mut place = self.place.clone();
        if !self.in_line {
            place.life = Duration::ZERO;
        }
        place
    }

    /// Leaves the line when an attempt's answers show that fewer than `quorum` nodes can be
    /// reached (connection failures and timeouts), and comes back when a quorum can.
    pub(super) fn keep_in_line_if_reaching(
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
        if !self.may_be_queued_on.contains(&true) {
            return;
        }
        let cluster = self.cluster;
        let selected =
            std::mem::replace(&mut self.may_be_queued_on, vec![false; cluster.nodes.len()]);
        let (keys, waiter) = (self.keys.clone(), self.place.waiter.clone());
        let Some(token) = self.taken_with.take() else {
            dequeue(cluster, keys, waiter, &selected);
            return;
        };
        // Releases handed this waiter the lock on a quorum, and the release that did so was
        // most likely sent to the other nodes too, where it takes the place off as it hands
        // the lock over: their messages are on their way. A dequeue sent now would most often
        // find nothing (one more script per node and hand-over under contention); sent a
        // moment later, it goes only where no such message came.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            dequeue(cluster, keys, waiter, &selected);
            return;
        };
        let cluster = cluster.clone();
        runtime.spawn(async move {
            cluster.sleep(LATE_HANDOVER_GRACE).await;
            let mut selected = selected;
            for i in cluster.waiters.heard_late_on(&token) {
                if let Some(on) = selected.get_mut(i) {
                    *on = false;
                }
            }
            dequeue(&cluster, keys, waiter, &selected);
        });
    }

    /// Books an attempt about to start with `token`: a handover on its terms counts from its start.
    pub(super) fn book_attempt(&mut self, token: &Arc<str>) {
        if self.attempts.len() == ATTEMPTS_KEPT {
            self.attempts.pop_front();
        }
        self.attempts.push_back((token.clone(), Instant::now()));
    }

    /// Books where an attempt's answers may have left the place; `won` when a quorum granted.
    pub(super) fn book_answers(&mut self, answers: &[Option<Answer<AcquireReply>>], won: bool) {
        if !self.in_line {
            // Out of line, refusals queue nothing.
            return;
        }
        for (on, answer) in self.may_be_queued_on.iter_mut().zip(answers) {
            match answer {
                // A grant, or a release's handover, takes the place off the queue.
                Some(Ok(
                    AcquireReply::Granted(_)
                    | AcquireReply::Kept(..)
                    | AcquireReply::HandedOver(..),
                )) => *on = false,
                // A stale proposal is answered before the queue is touched.
                Some(Ok(AcquireReply::Stale(_))) => {}
                // Not yet answered when a quorum granted: most likely a grant too, which
                // takes no place. Counting it as a place would send every acquire that won
                // at a quorum a dequeue to the slower masters; a refusal there queues a place
                // that lapses within its life.
                None if won => {}
                _ => *on = true,
            }
        }
    }
}

/// First come, first served: the time a caller started waiting, from the wall clock so that
/// every client's waiters compare (a skewed clock only costs fairness).
fn priority_since(started: Instant) -> u64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_sub(started.elapsed());
    u64::try_from(since_epoch.as_micros())
        .unwrap_or(MAX_FENCE)
        .min(MAX_FENCE)
}

/// How long the nodes keep a place of a caller waiting with `opts` without hearing from it.
/// Refreshed by every attempt, and attempts come at least every pause, so a live waiter keeps
/// its place and a dead one holds nobody up for long.
fn place_life(cluster: &Cluster, opts: &LockOptions) -> Duration {
    // A fair waiter in line may poll only every WAKE_FALLBACK (see acquire.rs).
    let pause = if opts.is_fair() {
        (opts.retry_delay + opts.retry_jitter).max(WAKE_FALLBACK)
    } else {
        opts.retry_delay + opts.retry_jitter
    };
    (pause * 2 + cluster.settings.node_timeout).clamp(PLACE_LIFE_MIN, PLACE_LIFE_MAX)
}

/// What a lock's release needs to keep its client's place in line for the next hold: that
/// hold's TTL and the place's life, from the options of the acquire that took the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NextHold {
    pub(super) ttl: Duration,
    pub(super) life: Duration,
}

impl NextHold {
    pub(super) fn new(cluster: &Cluster, opts: &LockOptions) -> Self {
        NextHold {
            ttl: opts.ttl,
            life: place_life(cluster, opts),
        }
    }

    /// Whether `kept` was kept on these terms.
    pub(super) fn kept(&self, kept: &KeptPlace) -> bool {
        kept.terms.ttl == self.ttl && kept.place.life == self.life
    }
}

/// The place a release of the lock with fencing token `fence` keeps for its client's next hold
/// (`lua/release.lua`): at the back of the line, on the terms of `next`, and listened for
/// before the release is sent, since a hand-over to it may come before the release's answer.
/// `None` when no token can be had.
pub(super) fn keep_place_for_next_hold(
    cluster: &Cluster,
    keys: &Arc<Keys>,
    next: NextHold,
    fence: u64,
) -> Option<KeptPlace> {
    let token = random_token().ok()?;
    let waiter = cluster.waiters.new_waiter();
    drop(cluster.waiters.listen(&waiter));
    Some(KeptPlace::new(
        keys.clone(),
        Place {
            waiter,
            priority: priority_since(Instant::now()),
            life: next.life,
        },
        Terms {
            token: token.into(),
            ttl: next.ttl,
            // One above this lock, though a hand-over goes one above the proposal anyway
            // (`lua/release.lua`): a release that does not know the lock it releases (by
            // token alone) hands over one above the proposal only, and must still go above
            // the hold after this one, which may have this lock's fence plus one.
            proposal: fence.saturating_add(1).min(MAX_FENCE),
        },
        cluster.nodes.len(),
    ))
}

/// Gives up a kept place that no acquire took up, on `on` the masters where it is, as a waiter
/// that gives up its place does: hand-overs it got are given back, passing the turn on.
pub(crate) fn give_up_kept(cluster: &Arc<Cluster>, kept: &KeptPlace, on: Vec<bool>) {
    drop(Queued::from_kept(cluster, kept, on));
}

/// Sends `waiter`'s dequeue to the `selected` nodes, in the background.
fn dequeue(cluster: &Arc<Cluster>, keys: Arc<Keys>, waiter: Arc<str>, selected: &[bool]) {
    if !selected.contains(&true) {
        return;
    }
    let deadline = Instant::now() + cluster.settings.node_timeout;
    let _ = send_and_detach(&cluster.nodes, deadline, |i| {
        let (cluster, keys, waiter) = (cluster.clone(), keys.clone(), waiter.clone());
        let selected = selected.get(i).copied().unwrap_or(false);
        async move {
            if selected {
                let writer = matches!(keys.kind, LockKind::Write);
                let answer = cluster.nodes[i]
                    .dequeue(
                        keys.for_place(),
                        &waiter,
                        cluster.waiters.wake_prefix(),
                        writer,
                    )
                    .await;
                debug!(node = cluster.nodes[i].addr(), answer = ?answer, "dequeue");
            }
        }
    });
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let cluster = self.cluster;
        // Locks handed over to this waiter that it did not take are nobody's: give them back,
        // passing the turn on.
        let grants = cluster.waiters.leave(&self.place.waiter);
        if !grants.is_empty() {
            let _ = self
                .cluster
                .release_grants(&self.keys, grants, GiveBack::PassingOn);
        }
        self.leave_line();
    }
}
