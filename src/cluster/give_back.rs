//! Releasing grants in the background: an attempt's grants once it failed, locks handed over
//! to a waiter that did not take them, and locks handed to waiters that are gone.

use std::sync::{Arc, Weak};
use std::time::Instant;

use tokio::sync::mpsc;
use tracing::debug;

use super::Cluster;
use crate::config::LockKind;
use crate::fanout::{Sent, send_and_detach};
use crate::node::Keys;
use crate::node::{Place, Terms};
use crate::waiters::{Grant, Orphan};

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

impl Cluster {
    /// Compare-and-delete of an attempt's grants on the nodes `which` selects, without waiting
    /// for the answers, which are awaited in the background. Safe because every attempt has
    /// its own token: should a cleanup reach a node only after the next attempt's command (a
    /// connection still being made, a script resent after NOSCRIPT), it finds nothing of its
    /// own there and deletes nothing.
    pub(crate) fn release_in_background(
        self: &Arc<Self>,
        keys: &Arc<Keys>,
        token: &Arc<str>,
        how: GiveBack,
        which: impl Fn(usize) -> bool,
    ) -> Sent {
        let grants = (0..self.nodes.len())
            .filter(|&i| which(i))
            .map(|node| Grant {
                node,
                token: token.to_string(),
                fence: 0,
                sender: None,
            })
            .collect();
        self.release_grants(keys, grants, how)
    }

    /// Releases each of `grants` (a token on one node) without waiting for the answers, which
    /// are awaited in the background: an attempt's grants, or locks that releases handed to a
    /// waiter of this client.
    pub(crate) fn release_grants(
        self: &Arc<Self>,
        keys: &Arc<Keys>,
        grants: Vec<Grant>,
        how: GiveBack,
    ) -> Sent {
        let deadline = Instant::now() + self.settings.node_timeout;
        // Only a mutex has places with terms; other kinds' waiters are woken, as by a release.
        let how = match how {
            GiveBack::KeepingPlace(..) if !keys.kind.may_be_fair() => GiveBack::PassingOn,
            how => how,
        };
        let (grants, how) = (Arc::new(grants), Arc::new(how));
        send_and_detach(&self.nodes, deadline, |i| {
            let (cluster, keys, grants, how) =
                (self.clone(), keys.clone(), grants.clone(), how.clone());
            async move {
                let node = &cluster.nodes[i];
                let wake = cluster.waiters.wake_prefix();
                for grant in grants.iter().filter(|g| g.node == i) {
                    let answer = match &*how {
                        GiveBack::Silently => node
                            .release(&keys, &grant.token, "", grant.fence, false, None)
                            .await
                            .map(|(reply, _)| reply),
                        GiveBack::PassingOn => node
                            .release(&keys, &grant.token, wake, grant.fence, false, None)
                            .await
                            .map(|(reply, _)| reply),
                        GiveBack::KeepingPlace(place, terms) => {
                            node.give_back(
                                keys.for_give_back(),
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

/// Gives back, passing the turn on, every lock a master handed to a waiter of this client that
/// is gone, until the client is dropped.
pub(super) async fn orphans(cluster: Weak<Cluster>, mut orphans: mpsc::UnboundedReceiver<Orphan>) {
    while let Some(Orphan { lock_key, grant }) = orphans.recv().await {
        let Some(cluster) = cluster.upgrade() else {
            return;
        };
        let Some(keys) = Keys::name_of_lock_key(&cluster.settings.key_prefix, &lock_key)
            .and_then(|name| cluster.keys(name, &LockKind::Mutex).ok())
        else {
            continue;
        };
        debug!(
            node = grant.node,
            "giving back a lock handed to a waiter that left"
        );
        let _ = cluster.release_grants(&keys, vec![grant], GiveBack::PassingOn);
    }
}
