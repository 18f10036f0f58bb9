//! Release: compare-and-delete on every node, handing the lock to the next waiter.

use std::sync::Arc;
use std::time::Instant;

use tracing::{Instrument, debug, debug_span};

use super::queue::{NextHold, give_up_kept, keep_place_for_next_hold};

use crate::cluster::Cluster;
use crate::config::{LockKind, validate_token};
use crate::error::{Error, Operation, Result};
use crate::fanout::{Hearing, failures, vote_settled};
use crate::node::Keys;
use crate::node::ReleaseReply;
use crate::waiters::{Kept, KeptPlace, LOOP_WINDOW};

/// Releases a lock by name and token, as a stateless caller (the HTTP service) would.
///
/// Compare-and-delete on every node: only keys holding this token are deleted.
///
/// # Errors
///
/// [`Error::NotHeld`] when no node had this token and another token holds the lock (nothing
/// is changed; for a reentrant lock, a read-write lock or a semaphore, another hold, reader or
/// permit); [`Error::QuorumUnavailable`] when fewer than a quorum of nodes answered (keys
/// left behind expire at their TTL); [`Error::InvalidArgument`] for a bad name or token (a
/// token of a shape this library never hands out is refused before any node is asked). A
/// lock that is already gone everywhere counts as released.
pub(crate) async fn release_token(
    cluster: &Arc<Cluster>,
    name: &str,
    kind: &LockKind,
    token: &str,
) -> Result<()> {
    let keys = cluster.keys(name, kind)?;
    validate_token(token)?;
    release_key(cluster, name, &keys, &token.into(), 0, Releaser::Other).await
}

/// Who releases a lock.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Releaser {
    /// A caller that only has the token (the HTTP service).
    Other,
    /// The lock's holder (a [`Lock`](super::Lock) or a guard): nodes where the lock is already
    /// gone hand it over too.
    Holder,
    /// The holder of a mutex that its client takes in a loop: where the release hands the lock
    /// over, it also keeps the client's place in line for the next hold (`lua/release.lua`).
    Looping(NextHold),
}

/// Releases the lock `keys` held with `token` (and `fence`, when known) on every node; done
/// as soon as a quorum no longer has it.
pub(crate) async fn release_key(
    cluster: &Arc<Cluster>,
    name: &str,
    keys: &Arc<Keys>,
    token: &Arc<str>,
    fence: u64,
    releaser: Releaser,
) -> Result<()> {
    let nodes = &cluster.nodes;
    let quorum = cluster.quorum();
    let deadline = Instant::now() + cluster.settings.node_timeout;
    let holder = !matches!(releaser, Releaser::Other);
    let kept = match releaser {
        Releaser::Looping(next) if matches!(keys.kind, LockKind::Mutex) => {
            keep_place_for_next_hold(cluster, keys, next, fence).map(Arc::new)
        }
        _ => None,
    };
    let handed_over = token.contains('/');
    if handed_over {
        // A handed-over lock: a slow master may still hand the same token over after this
        // release has passed it.
        cluster.waiters.released(token);
    }
    // Done as soon as a quorum no longer has the lock; the other nodes finish in the
    // background. A holder that keeps its place in line hears every master out instead: it
    // waits in line next, so answering early gains it nothing, and the last answers would
    // otherwise be read, and acted on, by background work (see `node::detach`).
    let hear_all = kept.is_some();
    let (_, answers) = vote_settled(
        nodes,
        quorum,
        Operation::Release,
        deadline,
        |i| {
            let (cluster, keys, token, kept) =
                (cluster.clone(), keys.clone(), token.clone(), kept.clone());
            async move {
                // Told when the answer is in, or when the deadline drops the call.
                let mut heard = handed_over.then(|| ReleaseHeard {
                    cluster: cluster.clone(),
                    token: token.clone(),
                    node: i,
                    deleted: false,
                });
                let keep = kept.as_deref().map(|k| (&k.place, &k.terms));
                let answer = cluster.nodes[i]
                    .release(
                        &keys,
                        &token,
                        cluster.waiters.wake_prefix(),
                        fence,
                        holder,
                        keep,
                    )
                    .await;
                if let (Some(kept), Ok((_, place_kept))) = (&kept, &answer) {
                    kept.answered(i, *place_kept);
                }
                let answer = answer.map(|(reply, _)| reply);
                if let Some(heard) = heard.as_mut() {
                    heard.deleted = matches!(answer, Ok(ReleaseReply::Deleted));
                }
                answer
            }
        },
        |reply| matches!(reply, ReleaseReply::Deleted | ReleaseReply::Absent),
        Hearing {
            settled: |_: &ReleaseReply| true,
            refusals_out: false,
            every_answer: hear_all,
        },
    )
    .instrument(debug_span!("release", lock = ?name))
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
        if holder && matches!(keys.kind, LockKind::Mutex) {
            cluster.waiters.kept_places.note_release(&keys.lock);
        }
        if let Some(kept) = kept {
            keep_for_next_acquire(cluster, kept);
        }
        crate::metrics::release(&keys.kind, "released");
        return Ok(());
    }
    if let Some(kept) = kept {
        give_up_kept(cluster, &kept, kept.may_be_on());
    }
    if deleted == 0 && foreign > 0 {
        crate::metrics::release(&keys.kind, "not_held");
        return Err(Error::NotHeld {
            name: name.to_owned(),
        });
    }
    crate::metrics::release(&keys.kind, "unavailable");
    Err(cluster.unavailable(Operation::Release, name, quorum, failures(nodes, &answers)))
}

/// Leaves a place the release kept on a quorum for the client's next acquire of the lock, which
/// takes it up if it comes within [`LOOP_WINDOW`]; otherwise, and where too few masters kept
/// it, it is given up wherever it may be: also on masters whose answer to the release is not in
/// yet, since the give-up follows the release on the same connection and so finds the place
/// that a slower master queued (left there, it would hold the line until it lapsed).
fn keep_for_next_acquire(cluster: &Arc<Cluster>, kept: Arc<KeptPlace>) {
    let runtime = tokio::runtime::Handle::try_current();
    let (Ok(runtime), true) = (runtime, kept.queued_count() >= cluster.quorum()) else {
        give_up_kept(cluster, &kept, kept.may_be_on());
        return;
    };
    let Kept {
        replaced,
        start_sweeping,
    } = cluster.waiters.kept_places.keep(kept);
    if let Some(replaced) = replaced {
        give_up_kept(cluster, &replaced, replaced.may_be_on());
    }
    if start_sweeping {
        runtime.spawn(give_up_stale_places(cluster.clone()));
    }
}

/// Gives up, every [`LOOP_WINDOW`], the places kept for longer than that, for as long as places
/// are kept: one task per client rather than a timer per hand-over.
async fn give_up_stale_places(cluster: Arc<Cluster>) {
    /// Should the task be dropped (its runtime shut down), the next place kept starts another.
    struct Stopped<'c>(&'c Cluster);
    impl Drop for Stopped<'_> {
        fn drop(&mut self) {
            self.0.waiters.kept_places.sweeping_stopped();
        }
    }
    let _stopped = Stopped(&cluster);
    loop {
        tokio::time::sleep(LOOP_WINDOW).await;
        let (stale, going_on) = cluster.waiters.kept_places.take_stale();
        for kept in stale {
            debug!("the place kept for a next hold was not taken up; giving it up");
            give_up_kept(&cluster, &kept, kept.may_be_on());
        }
        if !going_on {
            return;
        }
    }
}

/// Tells the waiters how one master answered the release of a handed-over lock (see
/// `Waiters::release_answered`): whether a handover message from it that comes late is part
/// of this lock, which the release deleted there, or a lock the release missed, to be given
/// back.
struct ReleaseHeard {
    cluster: Arc<Cluster>,
    token: Arc<str>,
    node: usize,
    deleted: bool,
}

impl Drop for ReleaseHeard {
    fn drop(&mut self) {
        self.cluster
            .waiters
            .release_answered(&self.token, self.node, self.deleted);
    }
}
