//! Read-only views of the nodes: each node's health, and what the nodes know of a lock of any
//! kind.

use std::time::{Duration, Instant};

use super::Client;
use crate::config::LockKind;
use crate::error::{NodeFailure, NodeFailureKind, Operation, Result};
use crate::fanout::fan_out;
use crate::node::{LockView, NodeHealth};
use crate::quorum::Decision;

/// One node's view of a lock, from [`Client::inspect`] or [`Client::inspect_as`]. It says how
/// many hold the lock, never who: no token, no owner.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeLockState {
    /// The node's address, `host:port`.
    pub node: String,
    /// How long the node will keep the lock (its last holder's, for a read-write lock or a
    /// semaphore): `Ok(None)` when nobody holds it here; the failure when the node could not
    /// be read (the counts below are then zero).
    pub ttl: Result<Option<Duration>, NodeFailureKind>,
    /// How many hold the lock here: 0 or 1 for a mutex or a reentrant lock, the readers and
    /// the writer of a read-write lock, the permits taken of a semaphore.
    pub holders: u32,
    /// A read-write lock's readers here.
    pub readers: u32,
    /// A read-write lock's writers here (0 or 1).
    pub writers: u32,
    /// A reentrant lock's holds here (each acquire by its owner is one, until released).
    pub holds: u32,
    /// The number of permits a semaphore's holders asked for, as this node records it.
    pub permits: Option<u32>,
    /// Whether a writer of a read-write lock waits here, which keeps new readers out.
    pub writer_waiting: bool,
}

/// What the nodes know of a lock, without saying who holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name.
    pub name: String,
    /// The kind it was read as ([`LockKind::as_str`]). A reader's and a writer's share are
    /// the same read-write lock, and a mutex and a reentrant lock of one name share their
    /// key, so either reads the other's holders.
    pub kind: &'static str,
    /// Whether the kind's quorum of nodes (see [`LockKind::quorum`]) has at least one holder.
    pub held: bool,
    /// Each node's view, in the order the nodes were given.
    pub nodes: Vec<NodeLockState>,
}

impl NodeLockState {
    fn new(node: &str, view: std::result::Result<LockView, NodeFailureKind>) -> Self {
        let (ttl, view) = match view {
            Ok(view) => (Ok(view.ttl), view),
            Err(kind) => (Err(kind), LockView::default()),
        };
        NodeLockState {
            node: node.to_owned(),
            ttl,
            holders: view.holders,
            readers: view.readers,
            writers: view.writers,
            holds: view.holds,
            permits: view.permits,
            writer_waiting: view.writer_waiting,
        }
    }
}

impl Client {
    /// Reads every node's health now (uptime, persistence, marker, quarantine), in node order. A node
    /// that cannot be read says why in [`NodeHealth::error`].
    pub async fn node_health(&self) -> Vec<NodeHealth> {
        self.cluster.node_health().await
    }

    /// Reads each node's remaining TTL for a mutex: [`Client::inspect_as`] with
    /// [`LockKind::Mutex`]. It never reveals the holder's token.
    ///
    /// # Errors
    ///
    /// As [`Client::inspect_as`].
    pub async fn inspect(&self, name: &str) -> Result<LockInfo> {
        self.inspect_as(name, &LockKind::Mutex).await
    }

    /// Reads what each node holds of the lock `name` of `kind`: its remaining TTL and how
    /// many hold it (readers and writers, a reentrant lock's holds, a semaphore's permits
    /// taken). It never reveals a holder's token or a reentrant lock's owner.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name or kind (no
    /// node is contacted); [`Error::QuorumUnavailable`](crate::Error::QuorumUnavailable) when
    /// fewer than the kind's quorum of nodes answered, so whether the lock is held cannot be
    /// told.
    pub async fn inspect_as(&self, name: &str, kind: &LockKind) -> Result<LockInfo> {
        let keys = self.cluster.keys(name, kind)?;
        let deadline = Instant::now() + self.cluster.settings.node_timeout;
        let answers = fan_out(
            &self.cluster.nodes,
            Operation::Inspect,
            deadline,
            |i| {
                let (cluster, keys) = (self.cluster.clone(), keys.clone());
                async move { cluster.nodes[i].view(&keys).await }
            },
            |_, _| Decision::Pending,
        )
        .await;
        let nodes: Vec<NodeLockState> = self
            .cluster
            .nodes
            .iter()
            .zip(answers)
            .map(|(node, answer)| {
                NodeLockState::new(node.addr(), answer.unwrap_or(Err(NodeFailureKind::Timeout)))
            })
            .collect();
        let quorum = keys.quorum(nodes.len());
        let answered = nodes.iter().filter(|n| n.ttl.is_ok()).count();
        if answered < quorum {
            return Err(self.cluster.unavailable(
                Operation::Inspect,
                name,
                quorum,
                failures_of(&nodes),
            ));
        }
        let holding = nodes
            .iter()
            .filter(|n| matches!(n.ttl, Ok(Some(_))))
            .count();
        Ok(LockInfo {
            name: name.to_owned(),
            kind: kind.as_str(),
            held: holding >= quorum,
            nodes,
        })
    }
}

fn failures_of(nodes: &[NodeLockState]) -> Vec<NodeFailure> {
    nodes
        .iter()
        .filter_map(|n| match &n.ttl {
            Err(kind) => Some(NodeFailure {
                node: n.node.clone(),
                kind: kind.clone(),
            }),
            Ok(_) => None,
        })
        .collect()
}
