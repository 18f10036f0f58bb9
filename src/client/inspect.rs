//! Read-only views of the nodes: each node's health, and what the nodes know of a lock.

use std::time::{Duration, Instant};

use super::Client;
use crate::error::{NodeFailure, NodeFailureKind, Operation, Result};
use crate::fanout::fan_out;
use crate::node::NodeHealth;
use crate::quorum::Decision;

/// One node's view of a lock, from [`Client::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeLockState {
    /// The node's address, `host:port`.
    pub node: String,
    /// How long the node will keep the lock: `Ok(None)` when it does not have it.
    pub ttl: Result<Option<Duration>, NodeFailureKind>,
}

/// What the nodes know of a lock, without saying who holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name.
    pub name: String,
    /// Whether a quorum of nodes has the lock (by any holder).
    pub held: bool,
    /// Each node's view, in the order the nodes were given.
    pub nodes: Vec<NodeLockState>,
}

impl Client {
    /// Reads every node's health now (uptime, persistence, marker, quarantine), in node order. A node
    /// that cannot be read says why in [`NodeHealth::error`].
    pub async fn node_health(&self) -> Vec<NodeHealth> {
        self.cluster.node_health().await
    }

    /// Reads each node's remaining TTL for a lock. It never reveals the holder's token.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name;
    /// [`Error::QuorumUnavailable`](crate::Error::QuorumUnavailable) when fewer than
    /// a quorum of nodes answered, so whether the lock is held cannot be told.
    pub async fn inspect(&self, name: &str) -> Result<LockInfo> {
        let keys = self.cluster.keys(name)?;
        let deadline = Instant::now() + self.cluster.settings.node_timeout;
        let answers = fan_out(
            &self.cluster.nodes,
            Operation::Inspect,
            deadline,
            |i| {
                let (cluster, keys) = (self.cluster.clone(), keys.clone());
                async move { cluster.nodes[i].pttl(&keys.lock).await }
            },
            |_, _| Decision::Pending,
        )
        .await;
        let nodes: Vec<NodeLockState> = self
            .cluster
            .nodes
            .iter()
            .zip(answers)
            .map(|(node, answer)| NodeLockState {
                node: node.addr().to_owned(),
                ttl: answer.unwrap_or(Err(NodeFailureKind::Timeout)),
            })
            .collect();
        let answered = nodes.iter().filter(|n| n.ttl.is_ok()).count();
        if answered < self.quorum() {
            return Err(self
                .cluster
                .unavailable(Operation::Inspect, name, failures_of(&nodes)));
        }
        let holding = nodes
            .iter()
            .filter(|n| matches!(n.ttl, Ok(Some(_))))
            .count();
        Ok(LockInfo {
            name: name.to_owned(),
            held: holding >= self.quorum(),
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
