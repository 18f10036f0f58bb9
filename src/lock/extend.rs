//! Extend: a new TTL for a held lock on a quorum, and the validity its holder may count on
//! afterwards, whatever the outcome.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{Instrument, debug_span};

use super::Lock;
use crate::cluster::Cluster;
use crate::config::{LockKind, validate_token};
use crate::error::{Error, Operation, Result};
use crate::fanout::{failures, vote};
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
    let (tally, answers) = vote(
        nodes,
        quorum,
        Operation::Extend,
        deadline,
        |i| {
            let (cluster, keys, token) = (cluster.clone(), keys.clone(), token.clone());
            async move { cluster.nodes[i].extend(&keys, &token, ttl).await }
        },
        Option::is_some,
    )
    .instrument(debug_span!("extend", lock = ?name))
    .await;
    let in_time = Instant::now() < certain_until;
    if tally.decision() == Decision::Reached && in_time {
        crate::metrics::extension(&keys.kind, "extended");
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
    if !in_time || nodes.len() - tally.no_count() < quorum {
        crate::metrics::extension(&keys.kind, "lost");
        return Extended {
            valid_until: start.min(certain_until),
            outcome: Err(Error::NotHeld {
                name: name.to_owned(),
            }),
        };
    }
    crate::metrics::extension(&keys.kind, "unavailable");
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

/// What an extend leaves its holder with.
pub(crate) struct Extended {
    /// Until when the lock is certainly held now (see [`extend_key`]).
    pub(crate) valid_until: Instant,
    /// The holder's fencing token, or why the extend failed.
    pub(crate) outcome: Result<u64>,
}
