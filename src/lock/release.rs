//! Release: compare-and-delete on every node, handing the lock to the next waiter.

use std::sync::Arc;
use std::time::Instant;

use tracing::{Instrument, debug_span};

use crate::cluster::Cluster;
use crate::config::{LockKind, validate_token};
use crate::error::{Error, Operation, Result};
use crate::fanout::{failures, vote};
use crate::node::Keys;
use crate::node::ReleaseReply;

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
pub(crate) async fn release_token(
    cluster: &Arc<Cluster>,
    name: &str,
    kind: &LockKind,
    token: &str,
) -> Result<()> {
    let keys = cluster.keys(name, kind)?;
    validate_token(token)?;
    release_key(cluster, name, &keys, &token.into(), 0, false).await
}

/// Releases the lock `keys` held with `token` (and `fence`, when known) on every node; done
/// as soon as a quorum no longer has it. `holder` when the caller holds the lock itself (a
/// [`Lock`](super::Lock) or a guard): nodes where it is already gone hand it over too.
pub(crate) async fn release_key(
    cluster: &Arc<Cluster>,
    name: &str,
    keys: &Arc<Keys>,
    token: &Arc<str>,
    fence: u64,
    holder: bool,
) -> Result<()> {
    let nodes = &cluster.nodes;
    let quorum = cluster.quorum();
    let deadline = Instant::now() + cluster.settings.node_timeout;
    let handed_over = token.contains('/');
    if handed_over {
        // A handed-over lock: a slow master may still hand the same token over after this
        // release has passed it.
        cluster.waiters.released(token);
    }
    // Done as soon as a quorum no longer has the lock; the other nodes finish in the
    // background.
    let (_, answers) = vote(
        nodes,
        quorum,
        Operation::Release,
        deadline,
        |i| {
            let (cluster, keys, token) = (cluster.clone(), keys.clone(), token.clone());
            async move {
                // Told when the answer is in, or when the deadline drops the call.
                let mut heard = handed_over.then(|| ReleaseHeard {
                    cluster: cluster.clone(),
                    token: token.clone(),
                    node: i,
                    deleted: false,
                });
                let answer = cluster.nodes[i]
                    .release(&keys, &token, cluster.waiters.wake_prefix(), fence, holder)
                    .await;
                if let Some(heard) = heard.as_mut() {
                    heard.deleted = matches!(answer, Ok(ReleaseReply::Deleted));
                }
                answer
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
        crate::metrics::release(&keys.kind, "released");
        return Ok(());
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
