//! Taking a lock that releases handed to a waiting caller, once a quorum of masters did.

use std::sync::Arc;
use std::time::Instant;

use tracing::debug;

use super::Lock;
use super::queue::Queued;
use crate::cluster::{Cluster, GiveBack};
use crate::config::LockOptions;
use crate::quorum::quorum_handover;
use crate::waiters::Grant;

/// The lock, if releases handed it to this waiter on a quorum (see `lua/release.lua`).
///
/// Grants come one message per master; after the first, the others are waited for, up to
/// the per-node deadline. A lock is only taken with a quorum of one token and fencing token
/// from nodes whose votes count, and validity counted from the start of the attempt that
/// left those terms on the nodes (the grants came after it). Anything short of that is
/// given back before the next attempt, which the waiter, first in line, makes at once.
pub(super) async fn handed_over(
    cluster: &Arc<Cluster>,
    name: &str,
    q: &mut Queued<'_>,
    opts: &LockOptions,
) -> Option<Lock> {
    let waiters = &cluster.waiters;
    let nodes = &cluster.nodes;
    let mut grants = waiters.take_grants(&q.place.waiter);
    if grants.is_empty() {
        return None;
    }
    let until = Instant::now() + cluster.settings.node_timeout;
    let ttl = opts.ttl;
    let drift = cluster.settings.drift(ttl);
    loop {
        let handovers: Vec<(usize, &str, u64)> = grants
            .iter()
            .map(|g| (g.node, g.token.as_str(), g.fence))
            .collect();
        let counts = |i: usize| nodes.get(i).is_some_and(|n| n.vote_counts(None).is_ok());
        if let Some((token, fence)) = quorum_handover(&handovers, counts, cluster.quorum())
            .map(|(token, fence)| (token.to_owned(), fence))
        {
            // The token is `<waiter id>/<attempt token>`.
            let started = token
                .split_once('/')
                .and_then(|(_, base)| q.attempts.iter().find(|(t, _)| **t == *base))
                .map(|(_, at)| *at);
            let valid_until = started.map(|at| at + ttl - drift);
            if let Some(valid_until) = valid_until
                .filter(|v| v.saturating_duration_since(Instant::now()) >= opts.min_validity)
            {
                waiters.remember_taken(&token);
                cluster.note_fence(fence);
                let (ours, others): (Vec<Grant>, Vec<Grant>) = grants
                    .into_iter()
                    .partition(|g| g.token == token && g.fence == fence);
                for g in &ours {
                    // The grant took the place off that node's queue.
                    if let Some(on) = q.may_be_queued_on.get_mut(g.node) {
                        *on = false;
                    }
                }
                if !others.is_empty() {
                    let _ = cluster.release_grants(&q.keys, others, GiveBack::Silently);
                }
                debug!(fence, "the lock was handed over by its release");
                return Some(Lock::new(
                    cluster,
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
        let _ = cluster.release_grants(&q.keys, grants, GiveBack::PassingOn);
        return None;
    }
    for g in &grants {
        if let Some(on) = q.may_be_queued_on.get_mut(g.node) {
            *on = true;
        }
    }
    let _ = cluster.release_grants(
        &q.keys,
        grants,
        GiveBack::KeepingPlace(q.place.clone(), None),
    );
    None
}
