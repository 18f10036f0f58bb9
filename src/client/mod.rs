//! The client: the set of nodes, client-wide settings, and read-only inspection of a lock.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use crate::config::{ClientBuilder, ClientSettings, limits, validate_name};
use crate::error::{Error, NodeFailure, NodeFailureKind, Operation, Result};
use crate::fanout::fan_out;
use crate::node::{Node, NodeHealth, NodeSettings};
use crate::quorum::{Decision, quorum};
use crate::waiters::Waiters;

/// Where one lock name lives on every node. Lock keys, counters and queues live under different
/// sub-prefixes, so no name can collide with another's counter or queue.
#[derive(Debug)]
pub(crate) struct Keys {
    /// `{prefix}lock:{name}`: the holder's token, with the lock's TTL.
    pub(crate) lock: String,
    /// `{prefix}fence:{name}`: the highest fencing token granted, with no expiry.
    pub(crate) fence: String,
    /// `{prefix}queue:{name}`: waiter ids by priority.
    pub(crate) queue: String,
    /// `{prefix}queue-terms:{name}`: when each waiter's place lapses, and on what terms a
    /// release may hand the lock to it.
    pub(crate) terms: String,
    /// The keys every name shares: the deployment's marker, longest TTL and quarantine.
    pub(crate) deployment: Arc<DeploymentKeys>,
}

/// Where a node keeps what it knows of its deployment (see `lua/mark.lua`).
#[derive(Debug)]
pub(crate) struct DeploymentKeys {
    /// `{prefix}deployment`: the marker, with the deployment's id; no expiry.
    pub(crate) marker: String,
    /// `{prefix}longest-ttl`: the longest TTL asked for on the node, in ms; no expiry.
    pub(crate) longest_ttl: String,
    /// `{prefix}quarantine`: present, with its TTL, while the node is quarantined.
    pub(crate) quarantine: String,
}

impl DeploymentKeys {
    pub(crate) fn new(prefix: &str) -> Self {
        DeploymentKeys {
            marker: format!("{prefix}deployment"),
            longest_ttl: format!("{prefix}longest-ttl"),
            quarantine: format!("{prefix}quarantine"),
        }
    }

    /// The keys of the deployment scripts (read and mark).
    pub(crate) fn all(&self) -> [&str; 3] {
        [&self.marker, &self.longest_ttl, &self.quarantine]
    }
}

impl Keys {
    /// The keys of the acquire script.
    pub(crate) fn for_acquire(&self) -> [&str; 7] {
        let d = &self.deployment;
        [
            &self.lock,
            &self.fence,
            &self.queue,
            &self.terms,
            &d.marker,
            &d.longest_ttl,
            &d.quarantine,
        ]
    }

    /// The keys of the extend script.
    pub(crate) fn for_extend(&self) -> [&str; 3] {
        [&self.lock, &self.fence, &self.deployment.longest_ttl]
    }

    /// The keys of the release script.
    pub(crate) fn for_release(&self) -> [&str; 6] {
        let d = &self.deployment;
        [
            &self.lock,
            &self.queue,
            &self.terms,
            &self.fence,
            &d.marker,
            &d.quarantine,
        ]
    }

    /// The keys of the scripts that act on a waiter's place (dequeue, give back).
    pub(crate) fn for_place(&self) -> [&str; 3] {
        [&self.lock, &self.queue, &self.terms]
    }
}

/// A handle on N independent Redis masters; cheap to clone (all clones share the connections).
///
/// Build one with [`Client::builder`]; take locks with [`Client::acquire`] or
/// [`Client::try_acquire`].
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) nodes: Vec<Node>,
    pub(crate) settings: ClientSettings,
    /// The highest fencing token this client has seen granted or reported, on any name: the
    /// floor of its next proposal, so that one client's tokens keep rising even if the clock
    /// steps back.
    pub(crate) highest_fence: AtomicU64,
    pub(crate) waiters: Waiters,
    pub(crate) deployment_keys: Arc<DeploymentKeys>,
    /// Set while a marking of the deployment runs in the background.
    pub(crate) marking: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("nodes", &self.nodes())
            .field("quorum", &self.quorum())
            .field("key_prefix", &self.inner.settings.key_prefix)
            .finish()
    }
}

/// One node's view of a lock, from [`Client::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLockState {
    /// The node's address, `host:port`.
    pub node: String,
    /// How long the node will keep the lock: `Ok(None)` when it does not have it.
    pub ttl: Result<Option<Duration>, NodeFailureKind>,
}

/// What the nodes know of a lock, without saying who holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// The lock's name.
    pub name: String,
    /// Whether a quorum of nodes has the lock (by any holder).
    pub held: bool,
    /// Each node's view, in the order the nodes were given.
    pub nodes: Vec<NodeLockState>,
}

impl Client {
    /// Starts building a client.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// Builds a client with default settings from node URLs.
    ///
    /// # Errors
    ///
    /// As [`ClientBuilder::build`].
    pub fn new<I, S>(urls: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientBuilder::default().nodes(urls).build()
    }

    pub(crate) fn from_builder(builder: ClientBuilder) -> Result<Self> {
        if builder.nodes.is_empty() {
            return Err(Error::invalid(
                "node",
                "no nodes given; give at least one redis:// URL (three or five for fault tolerance)",
            ));
        }
        if builder.nodes.len() > limits::MAX_NODES {
            return Err(Error::invalid(
                "node",
                format!(
                    "{} nodes given; at most {} are supported",
                    builder.nodes.len(),
                    limits::MAX_NODES
                ),
            ));
        }
        crate::metrics::describe();
        let mut seen = HashSet::new();
        let mut nodes = Vec::with_capacity(builder.nodes.len());
        let node_settings = NodeSettings {
            connect_timeout: builder.settings.connect_timeout,
            verify_votes: builder.settings.require_durable
                || builder.settings.quarantine != Some(Duration::ZERO),
            require_durable: builder.settings.require_durable,
        };
        for url in &builder.nodes {
            let node = Node::new(url, node_settings)?;
            if !seen.insert(node.addr().to_owned()) {
                return Err(Error::invalid(
                    "node",
                    format!(
                        "{} is given twice; each node must be a separate Redis server (another database on the same server is not independent)",
                        node.addr()
                    ),
                ));
            }
            nodes.push(node);
        }
        Ok(Client {
            inner: Arc::new(Inner {
                nodes,
                waiters: Waiters::new(&builder.settings.key_prefix),
                deployment_keys: Arc::new(DeploymentKeys::new(&builder.settings.key_prefix)),
                marking: std::sync::atomic::AtomicBool::new(false),
                settings: builder.settings,
                highest_fence: AtomicU64::new(0),
            }),
        })
    }

    /// The nodes' addresses (`host:port`, never a password), in the order given.
    pub fn nodes(&self) -> Vec<String> {
        self.inner
            .nodes
            .iter()
            .map(|n| n.addr().to_owned())
            .collect()
    }

    /// How many nodes must agree: a strict majority.
    pub fn quorum(&self) -> usize {
        quorum(self.inner.nodes.len())
    }

    /// The keys and the release channel of a lock name on the nodes, once the name is checked.
    pub(crate) fn keys(&self, name: &str) -> Result<Arc<Keys>> {
        validate_name(name)?;
        let prefix = &self.inner.settings.key_prefix;
        Ok(Arc::new(Keys {
            lock: format!("{prefix}lock:{name}"),
            fence: format!("{prefix}fence:{name}"),
            queue: format!("{prefix}queue:{name}"),
            terms: format!("{prefix}queue-terms:{name}"),
            deployment: self.inner.deployment_keys.clone(),
        }))
    }

    /// Reads every node's health now (uptime, persistence, marker, quarantine), in node order. A node
    /// that cannot be read says why in [`NodeHealth::error`].
    pub async fn node_health(&self) -> Vec<NodeHealth> {
        let deadline = Instant::now()
            + self
                .inner
                .settings
                .node_timeout
                .max(Duration::from_millis(500));
        let answers = fan_out(
            &self.inner.nodes,
            Operation::Inspect,
            deadline,
            |i| {
                let inner = self.inner.clone();
                async move {
                    let node = &inner.nodes[i];
                    let read = async || {
                        node.probe().await?;
                        node.deployment(inner.deployment_keys.all()).await.map(drop)
                    };
                    match read().await {
                        // The connection was found dead (the master may have restarted): the
                        // reading is about the master as it is now, so read on a new one.
                        Err(NodeFailureKind::Connection(_)) => read().await,
                        other => other,
                    }
                }
            },
            |_, _| Decision::Pending,
        )
        .await;
        self.inner
            .nodes
            .iter()
            .zip(answers)
            .map(|(node, answer)| {
                let mut report = node.report();
                if let Some(Err(kind)) = answer {
                    report.error = Some(kind.to_string());
                }
                report
            })
            .collect()
    }

    /// Reads each node's remaining TTL for a lock. It never reveals the holder's token.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; [`Error::QuorumUnavailable`] when fewer than
    /// a quorum of nodes answered, so whether the lock is held cannot be told.
    pub async fn inspect(&self, name: &str) -> Result<LockInfo> {
        let keys = self.keys(name)?;
        let deadline = Instant::now() + self.inner.settings.node_timeout;
        let answers = fan_out(
            &self.inner.nodes,
            Operation::Inspect,
            deadline,
            |i| {
                let (inner, keys) = (self.inner.clone(), keys.clone());
                async move { inner.nodes[i].pttl(&keys.lock).await }
            },
            |_, _| Decision::Pending,
        )
        .await;
        let nodes: Vec<NodeLockState> = self
            .inner
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
            return Err(self.unavailable(Operation::Inspect, name, failures_of(&nodes)));
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

    pub(crate) fn unavailable(
        &self,
        operation: Operation,
        name: &str,
        failures: Vec<NodeFailure>,
    ) -> Error {
        crate::metrics::quorum_failure(operation);
        Error::QuorumUnavailable {
            operation,
            name: name.to_owned(),
            needed: self.quorum(),
            total: self.inner.nodes.len(),
            failures,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn building_checks_the_node_list() {
        let none: [&str; 0] = [];
        assert!(matches!(
            Client::new(none),
            Err(Error::InvalidArgument { field: "node", .. })
        ));
        let dup = Client::new(["redis://127.0.0.1:7000", "redis://127.0.0.1:7000/3"]).unwrap_err();
        assert!(dup.to_string().contains("given twice"), "{dup}");
        let bad = Client::new(["redis://127.0.0.1:7000", "redis//oops"]).unwrap_err();
        assert!(matches!(bad, Error::InvalidArgument { field: "node", .. }));
        let many: Vec<String> = (0..32)
            .map(|i| format!("redis://127.0.0.1:{}", 7000 + i))
            .collect();
        assert!(Client::new(many).is_err());
        let ok = Client::new(["redis://127.0.0.1:7000", "redis://:pw@127.0.0.1:7001"]).unwrap();
        assert_eq!(ok.nodes(), ["127.0.0.1:7000", "127.0.0.1:7001"]);
        assert_eq!(ok.quorum(), 2);
        assert!(!format!("{ok:?}").contains("pw"));
    }

    #[test]
    fn settings_are_checked() {
        let b = || Client::builder().node("redis://127.0.0.1:7000");
        assert!(b().node_timeout(Duration::ZERO).build().is_err());
        assert!(b().drift_factor(-0.1).build().is_err());
        assert!(b().drift_factor(f64::NAN).build().is_err());
        assert!(b().key_prefix("x".repeat(200)).build().is_err());
        assert!(b().key_prefix("").build().is_ok());
    }
}
