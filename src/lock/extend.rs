//! Extend: a new TTL for a held lock on a quorum, and the validity its holder may count on
//! afterwards, whatever the outcome.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{Instrument, debug_span};

use super::Lock;
use super::fence::agreed_by_quorum;
use crate::cluster::Cluster;
use crate::config::{LockKind, validate_token};
use crate::error::{Error, Operation, Result};
use crate::fanout::{Hearing, failures, vote_settled};
use crate::node::Keys;
use crate::quorum::Decision;

/// Extends a lock by name and token, as a stateless caller (the HTTP service) would.
///
/// # Errors
///
/// [`Error::NotHeld`] when the token does not hold the lock on a quorum (wrong token, or the
/// lock expired); [`Error::InvalidArgument`] for a token of a shape this library never hands
/// out (nothing is sent); otherwise as [`Lock::extend`].
pub(crate) async fn extend_token(
    cluster: &Arc<Cluster>,
    name: &str,
    kind: &LockKind,
    token: &str,
    ttl: Duration,
) -> Result<Lock> {
    let keys = cluster.keys(name, kind)?;
    validate_token(token)?;
    cluster.settings.validate_ttl(ttl)?;
    let token: Arc<str> = token.into();
    let extended = extend_key(cluster, name, &keys, &token, ttl, None).await;
    count_extension(&keys.kind, &extended.outcome);
    let fence = extended.outcome?;
    Ok(Lock::new(
        cluster,
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
///
/// It counts a quorum failure, but not in `redquorum_extensions_total`: a guard's renewals
/// call it too, and are counted as renewals; explicit extends count with [`count_extension`].
pub(crate) async fn extend_key(
    cluster: &Arc<Cluster>,
    name: &str,
    keys: &Arc<Keys>,
    token: &Arc<str>,
    ttl: Duration,
    held_until: Option<Instant>,
) -> Extended {
    let settings = &cluster.settings;
    let nodes = &cluster.nodes;
    let start = Instant::now();
    let new_ttl_ends = start + ttl - settings.drift(ttl);
    let certain_until = held_until.map_or(new_ttl_ends, |held| held.min(new_ttl_ends));
    // Answers after that are of no use: the lock may be gone by then.
    let deadline = certain_until.min(start + settings.node_timeout);
    let quorum = keys.quorum(nodes.len());
    // A reader's masters may record different fencing tokens for it (see `reader_fence`); a
    // caller that does not know the reader's token (a stateless one) hears them until a
    // quorum agrees. The others have theirs at the first quorum.
    let reader_fence_wanted = held_until.is_none() && matches!(keys.kind, LockKind::Read);
    let mut heard: Vec<u64> = Vec::new();
    let (tally, answers) = vote_settled(
        nodes,
        quorum,
        Operation::Extend,
        deadline,
        |i| {
            let (cluster, keys, token) = (cluster.clone(), keys.clone(), token.clone());
            async move { cluster.nodes[i].extend(&keys, &token, ttl).await }
        },
        Option::is_some,
        Hearing {
            settled: |fence: &Option<u64>| {
                if !reader_fence_wanted {
                    return true;
                }
                heard.extend(*fence);
                agreed_by_quorum(&heard, quorum).is_some()
            },
            refusals_out: false,
            every_answer: false,
        },
    )
    .instrument(debug_span!("extend", lock = ?name))
    .await;
    let in_time = Instant::now() < certain_until;
    if tally.decision() == Decision::Reached && in_time {
        let fences: Vec<u64> = answers
            .iter()
            .filter_map(|a| a.as_ref()?.as_ref().ok().copied().flatten())
            .collect();
        return Extended {
            valid_until: new_ttl_ends,
            outcome: Ok(holder_fence(&keys.kind, &fences, quorum)),
        };
    }
    if let Some(error) = super::other_permits(nodes, &answers) {
        // Asked with another number of permits than the semaphore's: nothing was extended,
        // and the lock is not the caller's to count lost.
        return Extended {
            valid_until: certain_until,
            outcome: Err(error),
        };
    }
    // Refusals alone rule a quorum out: the lock is gone, whatever the failed nodes say.
    if !in_time || nodes.len() - tally.no_count() < quorum {
        return Extended {
            valid_until: start.min(certain_until),
            outcome: Err(Error::NotHeld {
                name: name.to_owned(),
            }),
        };
    }
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

/// Counts an explicit extend ([`Lock::extend`], an extend by token) in
/// `redquorum_extensions_total` by its outcome. A semaphore extended with another number of
/// permits is refused before anything is extended, and counted in no outcome.
pub(crate) fn count_extension(kind: &LockKind, outcome: &Result<u64>) {
    let outcome = match outcome {
        Ok(_) => "extended",
        Err(Error::NotHeld { .. }) => "lost",
        Err(Error::ExtendUncertain { .. }) => "unavailable",
        Err(_) => return,
    };
    crate::metrics::extension(kind, outcome);
}

/// What an extend leaves its holder with.
pub(crate) struct Extended {
    /// Until when the lock is certainly held now (see [`extend_key`]).
    pub(crate) valid_until: Instant,
    /// The holder's fencing token, or why the extend failed.
    pub(crate) outcome: Result<u64>,
}

/// The holder's own fencing token, from the tokens that the masters which extended the lock
/// say it holds with.
///
/// A mutex's or a reentrant lock's masters answer with their counter, which nobody can raise
/// while the lock is held there: the holder's token, on every one of them. A writer's or a
/// permit's masters answer with the token they recorded for that holder (its grant's), and
/// the holder's token is the highest of them: a master that granted only an earlier, lower
/// proposal of the same attempt keeps that one, and the masters that extended include one of
/// the quorum that granted the last (any two quorums share a master). For a reader, see
/// [`reader_fence`].
fn holder_fence(kind: &LockKind, fences: &[u64], quorum: usize) -> u64 {
    if matches!(kind, LockKind::Read) {
        return reader_fence(fences, quorum);
    }
    fences.iter().copied().max().unwrap_or(0)
}

/// A reader's fencing token: the one a quorum of its masters recorded, which is the one its
/// acquire took (see `lock::fence`); the masters outside that quorum may have recorded
/// another, higher or lower. When the answers show no quorum agreeing (masters that did not
/// answer), the lowest. One of the masters that answered is of the reader's quorum and has its
/// token, and every later writer's token is above that, so the lowest is below every later
/// writer's too, which is what fencing needs. The highest could be a counter that a writer's
/// failed attempt raised on one master, above the token of a writer that came after the
/// reader. The lowest may be below an earlier writer's token: a fenced resource then refuses
/// the reader, the safe side.
fn reader_fence(fences: &[u64], quorum: usize) -> u64 {
    agreed_by_quorum(fences, quorum).unwrap_or_else(|| fences.iter().copied().min().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_gets_its_own_fence_back() {
        // A mutex: every master's counter is the holder's.
        assert_eq!(holder_fence(&LockKind::Mutex, &[7, 7], 2), 7);
        // A permit: a master that granted only an earlier proposal has a lower one.
        assert_eq!(holder_fence(&LockKind::semaphore(2), &[5, 9, 9], 2), 9);
        // A reader: the token of a quorum, whatever the others recorded.
        assert_eq!(holder_fence(&LockKind::Read, &[8, 4, 4], 2), 4);
        assert_eq!(holder_fence(&LockKind::Read, &[4, 2, 8, 4, 4], 3), 4);
        // No quorum agrees (a master did not answer): the lowest, which no later writer's
        // token is below.
        assert_eq!(holder_fence(&LockKind::Read, &[4, 8], 2), 4);
        assert_eq!(holder_fence(&LockKind::Read, &[23, 2], 2), 2);
    }
}
