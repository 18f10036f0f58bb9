//! Taking a lock that releases handed to a waiting caller, once a quorum of masters did.

use std::sync::Arc;
use std::time::Instant;

use tracing::debug;

use super::Lock;
use super::queue::Queued;
use crate::cluster::{Cluster, GiveBack};
use crate::config::LockOptions;
use crate::error::Operation;
use crate::fanout::fan_out;
use crate::node::Keys;
use crate::quorum::{Decision, quorum_handover};
use crate::waiters::Grant;

/// The lock, if releases handed it to this waiter on a quorum (see `lua/release.lua`).
///
/// Grants come one message per master; after the first, the others are waited for, up to
/// the per-node deadline. A lock is only taken from nodes whose votes count, with validity
/// counted from the start of the earliest attempt whose terms the grants used (they came
/// after it). A release hands the lock over on the terms of the waiter's latest attempt each
/// master has seen, so when an attempt was under way during the release, masters may have
/// used different attempts' terms: the waiter then holds the lock under one token and the
/// highest of the fencing tokens on every master (`lua/adopt.lua`), instead of waiting out
/// the deadline for a quorum of one token that will not come. Anything short of a quorum is
/// given back before the next attempt, which the waiter, first in line, makes at once.
pub(super) async fn handed_over(
    cluster: &Arc<Cluster>,
    name: &str,
    q: &mut Queued<'_>,
    opts: &LockOptions,
) -> Option<Lock> {
    let waiters = &cluster.waiters;
    let grants = waiters.take_grants(&q.place.waiter);
    if grants.is_empty() {
        return None;
    }
    let mut taken = TakenGrants {
        cluster,
        keys: q.keys.clone(),
        grants,
        adopting: Vec::new(),
    };
    let until = Instant::now() + cluster.settings.node_timeout;
    let ttl = opts.ttl;
    let drift = cluster.settings.drift(ttl);
    let gave_back = loop {
        if let Some(held) = holding(cluster, q, &taken.grants) {
            let valid_until = held.started + ttl - drift;
            if valid_until.saturating_duration_since(Instant::now()) < opts.min_validity {
                break taken.hand_back();
            }
            let Some(held) = adopt(cluster, q, held, &mut taken).await else {
                break taken.hand_back();
            };
            let grants = taken.hand_back();
            waiters.remember_taken(&held.token);
            cluster.note_fence(held.fence);
            let (ours, others): (Vec<Grant>, Vec<Grant>) = grants
                .into_iter()
                .partition(|g| held.on.contains(&g.node) && g.token == held.token);
            for g in &ours {
                // The grant took the place off that node's queue.
                if let Some(on) = q.may_be_queued_on.get_mut(g.node) {
                    *on = false;
                }
            }
            // The other nodes' grants may simply not be in yet: their dequeue waits for them.
            q.taken_with = Some(held.token.clone());
            if !others.is_empty() {
                waiters.gave_back(&q.place.waiter, &others);
                let _ = cluster.release_grants(&q.keys, others, GiveBack::Silently);
            }
            debug!(
                fence = held.fence,
                "the lock was handed over by its release"
            );
            return Some(Lock::new(
                cluster,
                name,
                q.keys.clone(),
                held.token.into(),
                held.fence,
                ttl,
                valid_until,
            ));
        }
        if Instant::now() >= until {
            break taken.hand_back();
        }
        let woken = waiters.listen(&q.place.waiter);
        // Grants heard between taking and listening did not wake anyone.
        let late = waiters.take_grants(&q.place.waiter);
        if late.is_empty() {
            tokio::select! {
                _ = woken => {}
                () = cluster.sleep_until(until) => {}
            }
        }
        taken.grants.extend(late);
        taken.grants.extend(waiters.take_grants(&q.place.waiter));
    };
    waiters.gave_back(&q.place.waiter, &gave_back);
    crate::metrics::handover("given_back");
    debug!(
        grants = gave_back.len(),
        "handed over on too few nodes; giving it back"
    );
    // Still first in line: back in the queue where the grants took the place, or the next
    // release there would hand the lock to someone else. Without terms, so that a release
    // there only wakes this waiter: the terms these grants were made on must not hand the
    // same token over twice, or a second handover could pass for the lock it already had.
    if !q.in_line {
        let _ = cluster.release_grants(&q.keys, gave_back, GiveBack::PassingOn);
        return None;
    }
    for g in &gave_back {
        if let Some(on) = q.may_be_queued_on.get_mut(g.node) {
            *on = true;
        }
    }
    let _ = cluster.release_grants(
        &q.keys,
        gave_back,
        GiveBack::KeepingPlace(q.place.clone(), None),
    );
    None
}

/// How the waiter holds, or will hold, a lock handed over on a quorum.
struct Holding {
    /// The token and fencing token it holds the lock with on every node in `on`.
    token: String,
    fence: u64,
    /// The start of the earliest attempt whose terms the grants used.
    started: Instant,
    /// The nodes it holds the lock on.
    on: Vec<usize>,
    /// Grants on other terms (another attempt's token, or a lower fencing token) that must be
    /// held under `token` and `fence` first.
    to_adopt: Vec<Grant>,
}

/// The lock the grants make, if they come from a quorum of distinct nodes whose votes count,
/// each made on the terms of an attempt this waiter remembers. One token on a quorum is taken
/// as it is; otherwise the token on most nodes, with the highest fencing token among them.
fn holding(cluster: &Cluster, q: &Queued<'_>, grants: &[Grant]) -> Option<Holding> {
    // A grant counts only by a reading of the master's process that made it.
    let counts = |g: &Grant| {
        cluster
            .nodes
            .get(g.node)
            .is_some_and(|n| n.grant_counts(g.sender.as_deref()).is_ok())
    };
    // The token is `<waiter id>/<attempt token>`.
    let started_of = |token: &str| {
        let (_, base) = token.split_once('/')?;
        q.attempts
            .iter()
            .find(|(t, _)| **t == *base)
            .map(|(_, at)| *at)
    };
    let quorum = cluster.quorum();
    let handovers: Vec<(usize, &str, u64)> = grants
        .iter()
        .map(|g| (g.node, g.token.as_str(), g.fence))
        .collect();
    if let Some((token, fence)) =
        quorum_handover(&handovers, |i| grants.get(i).is_some_and(counts), quorum)
        && let Some(started) = started_of(token)
    {
        let mut on: Vec<usize> = grants
            .iter()
            .filter(|g| g.token == token && g.fence == fence && counts(g))
            .map(|g| g.node)
            .collect();
        on.sort_unstable();
        on.dedup();
        return Some(Holding {
            token: token.to_owned(),
            fence,
            started,
            on,
            to_adopt: Vec::new(),
        });
    }
    // The latest grant heard from each node: a node holds one key, and a later handover there
    // came after the earlier one was given back.
    let mut latest: Vec<&Grant> = Vec::new();
    for g in grants.iter().rev() {
        if counts(g) && started_of(&g.token).is_some() && !latest.iter().any(|l| l.node == g.node) {
            latest.push(g);
        }
    }
    if latest.len() < quorum {
        return None;
    }
    let on_most = latest.iter().max_by_key(|g| {
        let on = latest.iter().filter(|l| l.token == g.token).count();
        (on, started_of(&g.token))
    })?;
    let token = on_most.token.clone();
    let fence = latest.iter().map(|g| g.fence).max()?;
    let started = latest.iter().filter_map(|g| started_of(&g.token)).min()?;
    let to_adopt = latest
        .iter()
        .filter(|g| g.token != token || g.fence != fence)
        .map(|g| (*g).clone())
        .collect();
    Some(Holding {
        token,
        fence,
        started,
        on: latest.iter().map(|g| g.node).collect(),
        to_adopt,
    })
}

/// Holds every grant of `held.to_adopt` under `held`'s token and fencing token. Returns the
/// lock if a quorum of nodes now holds it so; `taken`'s grants are left as they now are on the
/// nodes (adopted ones under the new token), to keep or give back.
async fn adopt(
    cluster: &Arc<Cluster>,
    q: &Queued<'_>,
    mut held: Holding,
    taken: &mut TakenGrants<'_>,
) -> Option<Holding> {
    if held.to_adopt.is_empty() {
        crate::metrics::handover("taken");
        return Some(held);
    }
    let deadline = Instant::now() + cluster.settings.node_timeout;
    let to_adopt = Arc::new(std::mem::take(&mut held.to_adopt));
    let (token, fence): (Arc<str>, u64) = (held.token.as_str().into(), held.fence);
    // Dropped while the adoptions are under way, the nodes that adopted hold the grant under
    // the new token, the others under the old one: both are given back.
    taken.adopting = to_adopt
        .iter()
        .map(|g| Grant {
            node: g.node,
            token: held.token.clone(),
            fence,
            sender: g.sender.clone(),
        })
        .collect();
    let answers = fan_out(
        &cluster.nodes,
        Operation::Acquire,
        deadline,
        |i| {
            let (cluster, keys, to_adopt, token) = (
                cluster.clone(),
                q.keys.clone(),
                to_adopt.clone(),
                token.clone(),
            );
            async move {
                let Some(grant) = to_adopt.iter().find(|g| g.node == i) else {
                    return Ok(false);
                };
                cluster.nodes[i]
                    .adopt(keys.for_adopt(), &grant.token, &token, fence)
                    .await
            }
        },
        |_, _| Decision::Pending,
    )
    .await;
    taken.adopting.clear();
    let adopted: Vec<usize> = to_adopt
        .iter()
        .filter(|g| matches!(answers.get(g.node), Some(Some(Ok(true)))))
        .map(|g| g.node)
        .collect();
    // What each adopted node holds now.
    for g in &mut taken.grants {
        if adopted.contains(&g.node)
            && to_adopt
                .iter()
                .any(|a| a.node == g.node && a.token == g.token)
        {
            g.token = held.token.clone();
            g.fence = fence;
        }
    }
    held.on
        .retain(|n| adopted.contains(n) || !to_adopt.iter().any(|a| a.node == *n));
    if held.on.len() < cluster.quorum() {
        debug!(
            adopted = adopted.len(),
            "could not hold a handed-over lock under one token"
        );
        return None;
    }
    crate::metrics::handover("adopted");
    debug!(
        adopted = adopted.len(),
        "a lock handed over on different attempts' terms is held under one token"
    );
    Some(held)
}

/// The grants a waiter has taken from its client's waiters while it decides whether they make
/// the lock. If the acquire is dropped before it decides (a caller's timeout around it), they
/// are given back, passing the turn on, as those still with the waiters are when it leaves;
/// otherwise they would stay held, by nobody, until their TTL.
struct TakenGrants<'a> {
    cluster: &'a Arc<Cluster>,
    keys: Arc<Keys>,
    grants: Vec<Grant>,
    /// While grants are being adopted under one token (see [`adopt`]): the same grants under
    /// that token, which the nodes that adopted them hold by then.
    adopting: Vec<Grant>,
}

impl TakenGrants<'_> {
    /// The grants, decided on: to keep or give back by the caller, no longer by the drop.
    fn hand_back(&mut self) -> Vec<Grant> {
        self.adopting.clear();
        std::mem::take(&mut self.grants)
    }
}

impl Drop for TakenGrants<'_> {
    fn drop(&mut self) {
        if self.grants.is_empty() && self.adopting.is_empty() {
            return;
        }
        let mut grants = std::mem::take(&mut self.grants);
        grants.append(&mut self.adopting);
        let _ = self
            .cluster
            .release_grants(&self.keys, grants, GiveBack::PassingOn);
    }
}
