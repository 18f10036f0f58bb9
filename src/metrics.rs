//! Metric names and recording helpers: what the library reports through the `metrics` facade.
//!
//! Every name starts with `redquorum_` and carries its unit; labels are bounded (operation,
//! outcome, node address, error kind, lock kind), never a lock name. Handles are looked up when a client
//! is built, so install a recorder (for example `metrics-exporter-prometheus`) before building
//! the [`Client`](crate::Client) whose metrics it should see. Building a client also creates
//! the counters whose labels are known beforehand at 0 (see `create_counters`), so that a
//! counter's first event shows in Prometheus' `increase()` and `rate()`.

use metrics::{Gauge, Histogram, Unit};

use crate::config::LockKind;
use crate::error::Operation;

/// Histogram, labels `kind`, `outcome`: time from the start of an acquire to its result,
/// retries included (`cancelled`: to when its future was dropped, before any result).
///
/// The `kind` label, here and on the other per-lock metrics, is
/// [`LockKind::as_str`](crate::config::LockKind::as_str): `mutex`, `reentrant`, `read`, `write`
/// or `semaphore` (each lock of a multi-lock counts as its own kind).
pub const ACQUIRE_DURATION: &str = "redquorum_acquire_duration_seconds";
/// Histogram, labels `node`, `operation`: time of one call to one node.
pub const NODE_REQUEST_DURATION: &str = "redquorum_node_request_duration_seconds";
/// Counter, labels `node`, `operation`, `kind`: calls to a node that failed.
pub const NODE_ERRORS: &str = "redquorum_node_errors_total";
/// Counter, label `operation`: operations that could not reach a quorum. An acquire counts
/// once, when it ends with [`Error::QuorumUnavailable`](crate::Error::QuorumUnavailable),
/// however many of its attempts found no quorum; an extend (explicit, or a guard's renewal)
/// when it ends uncertain, a release or an inspect when it ends without a quorum.
pub const QUORUM_FAILURES: &str = "redquorum_quorum_failures_total";
/// Counter, labels `kind`, `outcome`: extends asked for explicitly
/// ([`Lock::extend`](crate::Lock::extend), [`Client::extend_token`](crate::Client::extend_token)
/// and [`Client::extend_token_as`](crate::Client::extend_token_as)): extended, lost,
/// unavailable. A guard's background renewals are counted in [`RENEWALS`] only.
pub const EXTENSIONS: &str = "redquorum_extensions_total";
/// Counter, labels `kind`, `outcome`: releases.
pub const RELEASES: &str = "redquorum_releases_total";
/// Counter, label `kind`: locks that a [`Lock`](crate::Lock) or a
/// [`LockGuard`](crate::LockGuard) of this process found lost while holding them:
/// [`Lock::extend`](crate::Lock::extend) (a multi-lock's too, per name) on a lock whose
/// validity had run out or that a quorum no longer has, and a guard's renewal (a `serve`
/// session's too) that finds it so, or whose validity runs out without a quorum renewal.
///
/// Not counted: an extend by token ([`Client::extend_token`](crate::Client::extend_token),
/// [`Client::extend_token_as`](crate::Client::extend_token_as), the HTTP API's `/extend`) that
/// finds the lock gone, which counts only as `lost` in [`EXTENSIONS`], since a token that never
/// held the lock cannot be told apart from one whose lock expired; a release that finds the
/// lock gone; and a guard that ends its hold at [`RenewOptions::max_hold`](crate::RenewOptions::max_hold)
/// (a `limit` renewal).
pub const LOCKS_LOST: &str = "redquorum_locks_lost_total";
/// Counter, labels `kind`, `outcome`: background renewals by a [`LockGuard`](crate::LockGuard):
/// renewed, failed (no quorum this time), lost, limit (a renewal limit was reached). They are
/// not counted in [`EXTENSIONS`].
pub const RENEWALS: &str = "redquorum_renewals_total";
/// Counter, label `outcome`: locks that releases handed to a waiter of this process: taken
/// (one token on a quorum), adopted (different attempts' tokens, held under one), given_back
/// (too few masters within the per-node deadline, or too little validity left).
pub const HANDOVERS: &str = "redquorum_handovers_total";
/// Gauge, label `kind`: locks this process holds now.
pub const LOCKS_HELD: &str = "redquorum_locks_held";
/// Gauge, label `node`: 1 when the node's last call or health reading got an answer, 0 when it
/// got none (a failed connection, or no answer within the per-node deadline).
pub const NODE_UP: &str = "redquorum_node_up";
/// Gauge, label `node`: 1 while the node grants nothing because it lost its data (quarantined,
/// or not yet marked again; see "Deployment marker and quarantine" in docs/safety.md). A
/// reading of every node ([`Client::node_health`](crate::Client::node_health)) sets it to 0 for
/// the unmarked masters of a new deployment, which the next acquire marks at once.
pub const NODE_QUARANTINED: &str = "redquorum_node_quarantined";
/// Gauge, label `node`: 1 when the node keeps every write across a restart (AOF with
/// `appendfsync always`), 0 when it cannot keep fencing counters.
pub const NODE_DURABLE: &str = "redquorum_node_durable";

/// Registers the descriptions and units of the metrics above with the installed recorder, if
/// any. Building a [`Client`](crate::Client) does this too; an exporter that describes its own
/// metrics when it is installed calls it so that the library's are described alongside.
pub fn describe() {
    metrics::describe_histogram!(
        ACQUIRE_DURATION,
        Unit::Seconds,
        "Acquire latency by lock kind and outcome, retries included"
    );
    metrics::describe_histogram!(
        NODE_REQUEST_DURATION,
        Unit::Seconds,
        "Latency of one call to one node"
    );
    metrics::describe_counter!(NODE_ERRORS, "Calls to a node that failed, by kind");
    metrics::describe_counter!(QUORUM_FAILURES, "Operations that could not reach a quorum");
    metrics::describe_counter!(
        EXTENSIONS,
        "Explicit extends of held locks (not renewals) by lock kind and outcome"
    );
    metrics::describe_counter!(RELEASES, "Releases by lock kind and outcome");
    metrics::describe_counter!(LOCKS_LOST, "Locks found lost by their holder, by lock kind");
    metrics::describe_counter!(RENEWALS, "Background renewals by lock kind and outcome");
    metrics::describe_counter!(HANDOVERS, "Locks handed to a waiting caller, by outcome");
    metrics::describe_gauge!(LOCKS_HELD, "Locks held by this process, by lock kind");
    metrics::describe_gauge!(NODE_UP, "Whether the node answered its last call");
    metrics::describe_gauge!(
        NODE_QUARANTINED,
        "Whether the node's votes are held back after a restart"
    );
    metrics::describe_gauge!(
        NODE_DURABLE,
        "Whether the node keeps every write across a restart"
    );
}

/// The `kind` label of the per-lock metrics: every [`LockKind::as_str`].
const LOCK_KINDS: [&str; 5] = ["mutex", "reentrant", "read", "write", "semaphore"];
/// The `outcome` label of [`EXTENSIONS`], as [`extension`] is called with.
const EXTENSION_OUTCOMES: [&str; 3] = ["extended", "lost", "unavailable"];
/// The `outcome` label of [`RELEASES`], as [`release`] is called with.
const RELEASE_OUTCOMES: [&str; 3] = ["released", "not_held", "unavailable"];
/// The `outcome` label of [`RENEWALS`], as [`renewal`] is called with.
const RENEWAL_OUTCOMES: [&str; 4] = ["renewed", "failed", "lost", "limit"];
/// The `outcome` label of [`HANDOVERS`], as [`handover`] is called with.
const HANDOVER_OUTCOMES: [&str; 3] = ["taken", "adopted", "given_back"];
/// The `kind`s of [`NODE_ERRORS`] that an outage brings: created at 0 with each node, so that
/// the first one shows. The others (a server's error reply, a quarantined master) appear
/// when they first happen.
const NODE_OUTAGE_KINDS: [&str; 2] = ["timeout", "connection"];

/// Creates the counters whose labels are all known beforehand, at 0, when a client is built.
///
/// A counter series exists only once it is touched, and Prometheus' `increase()` and `rate()`
/// need a sample before an event to see it: without this, the first lost lock or the first
/// quorum failure of a process would count for nothing on a dashboard. A few dozen series,
/// once per client; touching one that exists already leaves its value as it is.
pub(crate) fn create_counters() {
    for kind in LOCK_KINDS {
        metrics::counter!(LOCKS_LOST, "kind" => kind).increment(0);
        for outcome in EXTENSION_OUTCOMES {
            metrics::counter!(EXTENSIONS, "kind" => kind, "outcome" => outcome).increment(0);
        }
        for outcome in RELEASE_OUTCOMES {
            metrics::counter!(RELEASES, "kind" => kind, "outcome" => outcome).increment(0);
        }
        for outcome in RENEWAL_OUTCOMES {
            metrics::counter!(RENEWALS, "kind" => kind, "outcome" => outcome).increment(0);
        }
    }
    for op in OPERATIONS {
        metrics::counter!(QUORUM_FAILURES, "operation" => op.as_str()).increment(0);
    }
    for outcome in HANDOVER_OUTCOMES {
        metrics::counter!(HANDOVERS, "outcome" => outcome).increment(0);
    }
}

const OPERATIONS: [Operation; 4] = [
    Operation::Acquire,
    Operation::Extend,
    Operation::Release,
    Operation::Inspect,
];

/// One node's metric handles, looked up once so the hot path does no registry lookups.
#[derive(Debug)]
pub(crate) struct NodeMetrics {
    node: String,
    durations: [Histogram; 4],
    up: Gauge,
    quarantined: Gauge,
    durable: Gauge,
}

impl NodeMetrics {
    pub(crate) fn new(node: &str) -> Self {
        let durations = OPERATIONS.map(|op| {
            metrics::histogram!(NODE_REQUEST_DURATION, "node" => node.to_owned(), "operation" => op.as_str())
        });
        // Created at 0, so that the first outage shows (see `create_counters`).
        for op in OPERATIONS {
            for kind in NODE_OUTAGE_KINDS {
                metrics::counter!(NODE_ERRORS, "node" => node.to_owned(), "operation" => op.as_str(), "kind" => kind)
                    .increment(0);
            }
        }
        NodeMetrics {
            node: node.to_owned(),
            durations,
            up: metrics::gauge!(NODE_UP, "node" => node.to_owned()),
            quarantined: metrics::gauge!(NODE_QUARANTINED, "node" => node.to_owned()),
            durable: metrics::gauge!(NODE_DURABLE, "node" => node.to_owned()),
        }
    }

    pub(crate) fn success(&self, op: Operation, seconds: f64) {
        self.durations[op_index(op)].record(seconds);
        self.up.set(1.0);
    }

    /// The node answered a health probe.
    pub(crate) fn reachable(&self) {
        self.up.set(1.0);
    }

    pub(crate) fn quarantined(&self, yes: bool) {
        self.quarantined.set(if yes { 1.0 } else { 0.0 });
    }

    pub(crate) fn durable(&self, yes: bool) {
        self.durable.set(if yes { 1.0 } else { 0.0 });
    }

    pub(crate) fn failure(&self, op: Operation, kind: &'static str) {
        metrics::counter!(NODE_ERRORS, "node" => self.node.clone(), "operation" => op.as_str(), "kind" => kind)
            .increment(1);
        // No answer, or none in time: the node is down until it answers again (a paused
        // master keeps its connections, so only its silence says so). A node that answered with
        // an error is up.
        if matches!(kind, "connection" | "timeout") {
            self.up.set(0.0);
        }
    }
}

fn op_index(op: Operation) -> usize {
    match op {
        Operation::Acquire => 0,
        Operation::Extend => 1,
        Operation::Release => 2,
        Operation::Inspect => 3,
    }
}

pub(crate) fn acquire_done(kind: &LockKind, outcome: &'static str, seconds: f64) {
    metrics::histogram!(ACQUIRE_DURATION, "kind" => kind.as_str(), "outcome" => outcome)
        .record(seconds);
}

pub(crate) fn quorum_failure(op: Operation) {
    metrics::counter!(QUORUM_FAILURES, "operation" => op.as_str()).increment(1);
}

pub(crate) fn extension(kind: &LockKind, outcome: &'static str) {
    metrics::counter!(EXTENSIONS, "kind" => kind.as_str(), "outcome" => outcome).increment(1);
}

pub(crate) fn release(kind: &LockKind, outcome: &'static str) {
    metrics::counter!(RELEASES, "kind" => kind.as_str(), "outcome" => outcome).increment(1);
}

pub(crate) fn handover(outcome: &'static str) {
    metrics::counter!(HANDOVERS, "outcome" => outcome).increment(1);
}

pub(crate) fn lock_lost(kind: &LockKind) {
    metrics::counter!(LOCKS_LOST, "kind" => kind.as_str()).increment(1);
}

/// Counts one lock in [`LOCKS_HELD`] for as long as it lives, wherever it moves; the kind is
/// kept so that the drop takes it off the same series.
#[derive(Debug)]
pub(crate) struct HeldGauge(&'static str);

impl HeldGauge {
    pub(crate) fn new(kind: &LockKind) -> Self {
        let kind = kind.as_str();
        metrics::gauge!(LOCKS_HELD, "kind" => kind).increment(1.0);
        HeldGauge(kind)
    }
}

impl Drop for HeldGauge {
    fn drop(&mut self) {
        metrics::gauge!(LOCKS_HELD, "kind" => self.0).decrement(1.0);
    }
}

pub(crate) fn renewal(kind: &LockKind, outcome: &'static str) {
    metrics::counter!(RENEWALS, "kind" => kind.as_str(), "outcome" => outcome).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Owner;

    #[test]
    fn every_lock_kind_has_its_counters_created() {
        let kinds = [
            LockKind::Mutex,
            LockKind::Reentrant(Owner::from_id("owner").unwrap()),
            LockKind::Read,
            LockKind::Write,
            LockKind::semaphore(2),
        ];
        let named: Vec<&str> = kinds.iter().map(LockKind::as_str).collect();
        assert_eq!(named, LOCK_KINDS);
    }
}
