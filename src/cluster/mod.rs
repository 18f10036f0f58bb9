//! The shared state of a client and the quorum operations every lock kind builds on: the nodes
//! and settings, the keys of a name, fencing-token proposals, the waiters and their
//! subscriptions, and giving grants back in the background.

mod give_back;
mod marking;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

pub(crate) use give_back::GiveBack;
pub(crate) use marking::MarkingRequests;

use crate::config::{ClientSettings, LockKind, limits, validate_name};
use crate::error::{Error, NodeFailure, NodeFailureKind, Operation, Result};
use crate::fanout::fan_out;
use crate::node::{DeploymentKeys, Keys};
use crate::node::{Node, NodeHealth, NodeSettings, Shared, Tls};
use crate::quorum::{Decision, quorum};
use crate::waiters::{Orphan, Waiters};

/// The least time a reading of every node's health may take: it is a diagnosis, not a vote.
const HEALTH_DEADLINE_MIN: Duration = Duration::from_millis(500);

/// Fencing tokens stay below 2^53: Lua numbers on the nodes are doubles.
pub(crate) const MAX_FENCE: u64 = (1 << 53) - 1;

/// The nodes of one client and what its locks share.
pub(crate) struct Cluster {
    pub(crate) nodes: Vec<Node>,
    pub(crate) settings: ClientSettings,
    /// The highest fencing token this client has seen granted or reported, on any name: the
    /// floor of its next proposal, so that one client's tokens keep rising even if the clock
    /// steps back.
    highest_fence: AtomicU64,
    pub(crate) waiters: Waiters,
    pub(crate) deployment_keys: Arc<DeploymentKeys>,
    /// Markings of the deployment asked for in the background.
    pub(crate) marking: MarkingRequests,
    /// Held by the marking that runs: one at a time, so that an attempt that marks waits for
    /// one under way in the background and then reads the masters as it left them, instead of
    /// reading them half-marked.
    pub(crate) marking_turn: tokio::sync::Mutex<()>,
    /// Grants for waiters that are gone, until the task that gives them back takes them (on
    /// the first wait, from a runtime).
    orphans: Mutex<Option<mpsc::UnboundedReceiver<Orphan>>>,
}

impl Cluster {
    /// Checks the node URLs and connects nothing yet: each node connects on first use.
    pub(crate) fn new(urls: &[String], settings: ClientSettings) -> Result<Arc<Self>> {
        if urls.is_empty() {
            return Err(Error::invalid(
                "node",
                "no nodes given; give at least one redis:// URL (three or five for fault tolerance)",
            ));
        }
        if urls.len() > limits::MAX_NODES {
            return Err(Error::invalid(
                "node",
                format!(
                    "{} nodes given; at most {} are supported",
                    urls.len(),
                    limits::MAX_NODES
                ),
            ));
        }
        crate::metrics::describe();
        crate::metrics::create_counters();
        let mut seen = HashSet::new();
        let mut nodes = Vec::with_capacity(urls.len());
        let node_settings = NodeSettings {
            connect_timeout: settings.connect_timeout,
            verify_votes: settings.require_durable || settings.quarantine != Some(Duration::ZERO),
            require_durable: settings.require_durable,
        };
        let tls = if settings.tls_root_certificates.is_some()
            || urls.iter().any(|url| {
                url.get(..7)
                    .is_some_and(|s| s.eq_ignore_ascii_case("rediss:"))
            }) {
            Some(Tls::from_settings(&settings)?)
        } else {
            None
        };
        let deployment_keys = Arc::new(DeploymentKeys::new(&settings.key_prefix));
        let shared = Shared {
            tls,
            deployment: deployment_keys.clone(),
            ..Shared::default()
        };
        for url in urls {
            let node = Node::new(url, node_settings, &shared)?;
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
        let (waiters, orphans) = Waiters::new(&settings.key_prefix);
        Ok(Arc::new(Cluster {
            nodes,
            waiters,
            deployment_keys,
            marking: MarkingRequests::default(),
            marking_turn: tokio::sync::Mutex::new(()),
            settings,
            highest_fence: AtomicU64::new(0),
            orphans: Mutex::new(Some(orphans)),
        }))
    }

    /// Done after `delay`, on the client's one timer rather than one of the runtime's own
    /// (see `node::Deadlines`).
    pub(crate) fn sleep(&self, delay: Duration) -> impl Future<Output = ()> + use<> {
        self.sleep_until(Instant::now() + delay)
    }

    /// Done at `at` (see [`Cluster::sleep`]).
    pub(crate) fn sleep_until(&self, at: Instant) -> impl Future<Output = ()> + use<> {
        let sleep = self
            .nodes
            .first()
            .map(|node| node.deadlines().sleep_until(at));
        async move {
            match sleep {
                Some(sleep) => sleep.await,
                None => tokio::time::sleep_until(at.into()).await,
            }
        }
    }

    /// How many nodes must agree: a strict majority.
    pub(crate) fn quorum(&self) -> usize {
        quorum(self.nodes.len())
    }

    /// The nodes' addresses (`host:port`, never a password), in the order given.
    pub(crate) fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.addr().to_owned()).collect()
    }

    /// The keys of a lock name of `kind` on the nodes, once the name and kind are checked.
    pub(crate) fn keys(&self, name: &str, kind: &LockKind) -> Result<Arc<Keys>> {
        validate_name(name)?;
        kind.validate()?;
        let mut keys = Keys::new(
            &self.settings.key_prefix,
            name,
            kind.clone(),
            self.deployment_keys.clone(),
        );
        keys.majority_only = self.settings.unsafe_majority_semaphores;
        Ok(Arc::new(keys))
    }

    /// The error for an operation that fewer than a quorum (`needed`) of nodes answered,
    /// counted in `redquorum_quorum_failures_total`.
    pub(crate) fn unavailable(
        &self,
        operation: Operation,
        name: &str,
        needed: usize,
        failures: Vec<NodeFailure>,
    ) -> Error {
        crate::metrics::quorum_failure(operation);
        self.attempt_unavailable(operation, name, needed, failures)
    }

    /// [`Cluster::unavailable`] for one attempt of an acquire, not counted: the acquire counts
    /// once, when it ends with it, however many of its attempts found no quorum.
    pub(crate) fn attempt_unavailable(
        &self,
        operation: Operation,
        name: &str,
        needed: usize,
        failures: Vec<NodeFailure>,
    ) -> Error {
        Error::QuorumUnavailable {
            operation,
            name: name.to_owned(),
            needed,
            total: self.nodes.len(),
            failures,
        }
    }

    /// A fencing token to propose for lock `name`: above `floor`, above every token this
    /// client has seen, and (unless turned off) at least the current time in microseconds, so
    /// that clients that have never met still tend to propose fresh values. Safety does not
    /// rest on it: the nodes check.
    pub(crate) fn propose(&self, name: &str, floor: u64) -> Result<u64> {
        let clock = if self.settings.fence_clock {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        } else {
            0
        };
        let seen = self.highest_fence.load(Ordering::Relaxed);
        let proposal = clock
            .max(seen.saturating_add(1))
            .max(floor.saturating_add(1));
        if proposal > MAX_FENCE {
            return Err(Error::FencesExhausted {
                name: name.to_owned(),
            });
        }
        Ok(proposal)
    }

    /// Books a fencing token granted or reported by the nodes.
    pub(crate) fn note_fence(&self, fence: u64) {
        self.highest_fence.fetch_max(fence, Ordering::Relaxed);
    }

    /// Starts the waiters' subscriptions and the giving back of orphaned grants (once), and
    /// waits up to `patience` for a subscription to be confirmed.
    pub(crate) async fn subscribe(self: &Arc<Self>, patience: Duration) {
        let orphans = self
            .orphans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(orphans) = orphans {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(give_back::orphans(Arc::downgrade(self), orphans));
                }
                Err(_) => {
                    *self.orphans.lock().unwrap_or_else(PoisonError::into_inner) = Some(orphans);
                }
            }
        }
        self.waiters.subscribe(&self.nodes, patience).await;
    }

    /// Waits, within the per-node deadline, until every node's connection has answered what was
    /// sent on it (see [`Node::flush`]).
    pub(crate) async fn flush(self: &Arc<Self>) {
        let deadline = Instant::now() + self.settings.node_timeout;
        fan_out(
            &self.nodes,
            Operation::Inspect,
            deadline,
            |i| {
                let cluster = self.clone();
                async move { cluster.nodes[i].flush().await }
            },
            |_, _| Decision::Pending,
        )
        .await;
    }

    /// Reads every node's health now (uptime, persistence, marker, quarantine), in node order. A node
    /// that cannot be read says why in `NodeHealth::error`.
    pub(crate) async fn node_health(self: &Arc<Self>) -> Vec<NodeHealth> {
        let deadline = Instant::now() + self.settings.node_timeout.max(HEALTH_DEADLINE_MIN);
        let answers = fan_out(
            &self.nodes,
            Operation::Inspect,
            deadline,
            |i| {
                let cluster = self.clone();
                async move {
                    let node = &cluster.nodes[i];
                    let read = async || {
                        node.probe().await?;
                        node.deployment(cluster.deployment_keys.all())
                            .await
                            .map(drop)
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
        let mut reports: Vec<NodeHealth> = self
            .nodes
            .iter()
            .zip(answers)
            .map(|(node, answer)| {
                let mut report = node.report();
                if let Some(Err(kind)) = answer {
                    // Silent or failing now, whatever the stored reading says: a master that
                    // does not answer casts no vote.
                    report.error = Some(kind.to_string());
                    report.usable = false;
                }
                report
            })
            .collect();
        self.judge_unmarked(&mut reports);
        reports
    }

    /// What the next acquire makes of the masters without the deployment's marker (see
    /// `deployment.rs`), which one master's reading alone cannot tell: where another master
    /// carries it, they lost their data and are put in quarantine (no vote, unless quarantine
    /// is off); where none does, the deployment is new and every master is marked at once, none
    /// in quarantine.
    fn judge_unmarked(&self, reports: &mut [NodeHealth]) {
        let in_use = reports.iter().any(|r| r.marked == Some(true));
        let quarantine_off = self.settings.quarantine == Some(Duration::ZERO);
        for (node, report) in self.nodes.iter().zip(reports.iter_mut()) {
            if report.marked != Some(false) {
                continue;
            }
            if in_use {
                report.usable &= quarantine_off;
            } else {
                node.marked_as_new();
            }
        }
    }
}
