//! [`Client::doctor`](crate::Client::doctor): checks a deployment before anyone trusts it with locks.
//!
//! Quorum locks are only as safe as the masters under them. A replica, or one server listed
//! twice, is counted as an independent vote it is not; an eviction policy that may drop keys
//! with a TTL may drop a lock; a master that restarts without durable persistence forgets the
//! locks it held; a user the ACL denies a command the scripts need fails every call. Doctor
//! reads each master over its own plain connection (so it never disturbs the client's
//! connections), in parallel and each under a bounded deadline, and reports what it found as
//! data: an unreachable master is a finding, not an error.
//!
//! Permissions are checked without admin rights: with `ACL DRYRUN` where the user may run it,
//! and otherwise by running each command the library uses, harmlessly, on a scratch key under
//! the key prefix (deleted afterwards, and with a TTL in case the delete is refused) and on a
//! scratch channel, and collecting the ones the server refuses with `NOPERM`.

mod acl;
mod checks;
mod verdict;

use std::fmt;
use std::time::Duration;

use std::sync::Arc;

use crate::cluster::Cluster;
use crate::config::defaults;
use checks::check;
use verdict::assess;

/// How bad a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Severity {
    /// The deployment is not safe (or not able) to hold locks as configured.
    Error,
    /// Degraded but safe: worth fixing, locks still hold.
    Warning,
}

impl Severity {
    /// `error` or `warning`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing doctor found wrong, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Problem {
    /// Whether it makes the deployment unsafe.
    pub severity: Severity,
    /// A short stable name scripts may match on: `unreachable`, `replica`, `same_server`,
    /// `eviction`, `not_durable`, `acl`, `clock`, `quarantined`, `unmarked`, `quorum`.
    pub code: &'static str,
    /// What is wrong and what to do, for people.
    pub message: String,
}

impl Problem {
    fn new(severity: Severity, code: &'static str, message: impl Into<String>) -> Self {
        Problem {
            severity,
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.severity, self.message)
    }
}

/// What doctor found on one master.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeCheck {
    /// The master's address, `host:port` (never a password).
    pub node: String,
    /// Whether doctor could connect and read the master.
    pub reachable: bool,
    /// Why it could not, when it could not.
    pub error: Option<String>,
    /// `redis_version` from `INFO`.
    pub redis_version: Option<String>,
    /// `role` from `INFO replication`: `master`, or `slave` for a replica.
    pub role: Option<String>,
    /// The server process's `run_id` from `INFO`: two addresses with the same one are one
    /// server.
    pub run_id: Option<String>,
    /// Whether AOF is on.
    pub aof_enabled: Option<bool>,
    /// The `appendfsync` policy, when `CONFIG GET` is allowed.
    pub appendfsync: Option<String>,
    /// AOF with `appendfsync always`: every write survives a restart. `false` when it cannot
    /// be confirmed.
    pub durable: bool,
    /// `maxmemory_policy` from `INFO memory`.
    pub maxmemory_policy: Option<String>,
    /// The ACL user the client connects as (`ACL WHOAMI`), when the user may ask.
    pub acl_user: Option<String>,
    /// What the ACL denies that the library needs: command names (`EVALSHA`), `~{prefix}*`
    /// for key access and `&{prefix}*` for channel access.
    pub acl_missing: Vec<String>,
    /// The shortest of a few round trips.
    pub rtt: Option<Duration>,
    /// The master's clock (`TIME`) minus the local wall clock at the midpoint of the round
    /// trip, in microseconds: positive when the master is ahead.
    pub clock_offset_micros: Option<i64>,
    /// Whether the master carries the deployment's marker (see the README's "Deployment
    /// marker and quarantine"): `Some(false)` for a master of a new deployment (marked by the
    /// first acquire) or one that lost its data (put in quarantine by the first acquire).
    pub marked: Option<bool>,
    /// How much longer the master grants nothing because it lost its data while the
    /// deployment was in use: its quarantine, by its own clock.
    pub quarantined_for: Option<Duration>,
    /// What is wrong with this master.
    pub problems: Vec<Problem>,
}

impl NodeCheck {
    fn unchecked(node: &str) -> Self {
        NodeCheck {
            node: node.to_owned(),
            reachable: false,
            error: None,
            redis_version: None,
            role: None,
            run_id: None,
            aof_enabled: None,
            appendfsync: None,
            durable: false,
            maxmemory_policy: None,
            acl_user: None,
            acl_missing: Vec::new(),
            rtt: None,
            clock_offset_micros: None,
            marked: None,
            quarantined_for: None,
            problems: Vec::new(),
        }
    }
}

/// What [`Client::doctor`](crate::Client::doctor) found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DoctorReport {
    /// One check per master, in the order the masters were given.
    pub nodes: Vec<NodeCheck>,
    /// Problems of the deployment as a whole (too few usable masters).
    pub problems: Vec<Problem>,
    /// How many masters must agree on a lock.
    pub quorum: usize,
    /// How many masters can vote now: reachable, independent masters the ACL lets the client
    /// use, not quarantined, and durable when durability is required.
    pub usable: usize,
    /// Whether no problem anywhere is an [`Severity::Error`].
    pub safe: bool,
}

impl DoctorReport {
    /// The same report for a deployment that accepts masters without durable persistence:
    /// their `not_durable` problems become warnings (locks stay safe through quarantine;
    /// fencing tokens may go back once a master that lost its counters counts again), and
    /// [`DoctorReport::safe`] is decided again.
    #[must_use]
    pub fn allowing_non_durable(mut self) -> Self {
        for problem in self
            .nodes
            .iter_mut()
            .flat_map(|n| n.problems.iter_mut())
            .filter(|p| p.code == "not_durable")
        {
            problem.severity = Severity::Warning;
        }
        let unsafe_anywhere = self
            .all_problems()
            .any(|(_, p)| p.severity == Severity::Error);
        self.safe = !unsafe_anywhere;
        self
    }

    /// Every problem, each with the master it is about (`None` for the deployment's own).
    pub fn all_problems(&self) -> impl Iterator<Item = (Option<&str>, &Problem)> {
        self.nodes
            .iter()
            .flat_map(|n| n.problems.iter().map(move |p| (Some(n.node.as_str()), p)))
            .chain(self.problems.iter().map(|p| (None, p)))
    }
}

/// Checks every master of `cluster` (see `Client::doctor`).
pub(crate) async fn run(cluster: &Arc<Cluster>) -> DoctorReport {
    let settings = &cluster.settings;
    let deadline = settings.node_timeout.max(defaults::DOCTOR_DEADLINE);
    let prefix = settings.key_prefix.as_str();
    let checks = futures::future::join_all(cluster.nodes.iter().map(|node| async move {
        match tokio::time::timeout(deadline, check(node, prefix, deadline)).await {
            Ok(check) => check,
            Err(_) => {
                let mut check = NodeCheck::unchecked(node.addr());
                check.error = Some(format!(
                    "no answer within {}",
                    humantime::format_duration(deadline)
                ));
                check
            }
        }
    }));
    // The client's own reading says what each master keeps of the deployment: its marker
    // and its quarantine.
    let (mut nodes, health) = tokio::join!(checks, cluster.node_health());
    for (check, health) in nodes.iter_mut().zip(health) {
        check.marked = health.marked;
        check.quarantined_for = health.quarantined_for;
    }
    assess(
        nodes,
        cluster.quorum(),
        settings.require_durable,
        settings.quarantine == Some(Duration::ZERO),
    )
}
