//! The one error type of the library: what went wrong, on which nodes, and why.

use std::fmt;
use std::time::Duration;

/// What the library was doing when an error happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Taking a lock.
    Acquire,
    /// Pushing back a lock's expiry.
    Extend,
    /// Giving a lock up.
    Release,
    /// Reading a lock's state without changing it.
    Inspect,
}

impl Operation {
    /// A short lowercase name, also used as a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Acquire => "acquire",
            Operation::Extend => "extend",
            Operation::Release => "release",
            Operation::Inspect => "inspect",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why one node did not answer usefully.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeFailureKind {
    /// No reply within the per-node deadline (a slow, paused or unreachable node).
    Timeout,
    /// The connection could not be made or was dropped.
    Connection(String),
    /// The node answered with an error (out of memory, read-only replica, auth...).
    Server(String),
    /// The node answered something the scripts never return.
    Protocol(String),
    /// The node restarted recently without durable persistence, so it may have forgotten
    /// locks it held; its votes are not counted for this much longer.
    Quarantined(Duration),
    /// The client requires durable nodes and this one does not run AOF with `appendfsync always`.
    NotDurable,
}

impl fmt::Display for NodeFailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeFailureKind::Timeout => f.write_str("no reply within the per-node deadline"),
            NodeFailureKind::Connection(m) => write!(f, "connection failed: {m}"),
            NodeFailureKind::Server(m) => write!(f, "server error: {m}"),
            NodeFailureKind::Protocol(m) => write!(f, "unexpected reply: {m}"),
            NodeFailureKind::Quarantined(left) => write!(
                f,
                "restarted recently without durable persistence; its votes count again in {}",
                humantime::format_duration(Duration::from_secs(left.as_secs().max(1)))
            ),
            NodeFailureKind::NotDurable => {
                f.write_str("not durable (needs appendonly yes and appendfsync always), and durable nodes are required")
            }
        }
    }
}

impl NodeFailureKind {
    /// A short stable name, used as a metric label.
    pub fn as_str(&self) -> &'static str {
        match self {
            NodeFailureKind::Timeout => "timeout",
            NodeFailureKind::Connection(_) => "connection",
            NodeFailureKind::Server(_) => "server",
            NodeFailureKind::Protocol(_) => "protocol",
            NodeFailureKind::Quarantined(_) => "quarantined",
            NodeFailureKind::NotDurable => "not_durable",
        }
    }
}

/// One node's failure: its address (never its password) and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFailure {
    /// The node's address as `host:port`.
    pub node: String,
    /// What went wrong.
    pub kind: NodeFailureKind,
}

impl fmt::Display for NodeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.node, self.kind)
    }
}

/// Everything that can go wrong in redquorum.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument was rejected before any node was contacted.
    #[error("invalid {field}: {reason}")]
    InvalidArgument {
        /// Which argument: `name`, `ttl`, `wait`, `node`, `token`...
        field: &'static str,
        /// Why it was rejected, and what is accepted.
        reason: String,
    },

    /// Another holder has the lock, or earlier waiters go first, on enough nodes that no
    /// quorum could be had.
    #[error(
        "lock {name:?} is held by someone else on {} of {total} nodes ({}){}{}; wait for it or retry later",
        holders.len(),
        holders.join(", "),
        reserved_suffix(reserved),
        failures_suffix(failures)
    )]
    Contended {
        /// The lock's name.
        name: String,
        /// Addresses of the nodes where another token holds the lock.
        holders: Vec<String>,
        /// Addresses of the nodes where the lock is free but another caller, waiting longer,
        /// goes first.
        reserved: Vec<String>,
        /// Nodes that failed in the same attempt.
        failures: Vec<NodeFailure>,
        /// How many nodes the client has.
        total: usize,
    },

    /// Too many nodes failed to reach a quorum.
    #[error(
        "{operation} of {name:?} could not reach a quorum: {needed} of {total} nodes needed, {} failed ({}); check that a majority of masters is up and reachable",
        failures.len(),
        join_failures(failures)
    )]
    QuorumUnavailable {
        /// What was being done.
        operation: Operation,
        /// The lock's name.
        name: String,
        /// How many nodes had to agree.
        needed: usize,
        /// How many nodes the client has.
        total: usize,
        /// The nodes that failed and why.
        failures: Vec<NodeFailure>,
    },

    /// A quorum answered, but too late for the result to be of use.
    #[error(
        "{operation} of {name:?} timed out after {}: {detail}",
        humantime::format_duration(*elapsed)
    )]
    Timeout {
        /// What was being done.
        operation: Operation,
        /// The lock's name.
        name: String,
        /// How long it took.
        elapsed: Duration,
        /// What ran out.
        detail: String,
    },

    /// The lock expired or was taken over; its holder must stop acting on it.
    #[error(
        "lock {name:?} was lost: it expired or is no longer held on a quorum; stop the work it protects"
    )]
    LockLost {
        /// The lock's name.
        name: String,
    },

    /// The token given does not hold the lock on any node; nothing was changed.
    #[error("lock {name:?} is not held with this token; nothing was changed")]
    NotHeld {
        /// The lock's name.
        name: String,
    },

    /// A protected resource refused or failed a fenced write's I/O (see [`crate::fencing`]).
    #[error("the protected resource failed: {0}")]
    Resource(String),

    /// The operating system could not supply random bytes for a token.
    #[error("the operating system's random number generator failed: {0}")]
    Entropy(String),
}

impl Error {
    /// A short stable name for the kind of error, used as a metric label and
    /// by the HTTP service as its error code.
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidArgument { .. } => "invalid_argument",
            Error::Contended { .. } => "contended",
            Error::QuorumUnavailable { .. } => "quorum_unavailable",
            Error::Timeout { .. } => "timeout",
            Error::LockLost { .. } => "lock_lost",
            Error::NotHeld { .. } => "not_held",
            Error::Resource(_) => "resource",
            Error::Entropy(_) => "entropy",
        }
    }

    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            field,
            reason: reason.into(),
        }
    }
}

fn join_failures(failures: &[NodeFailure]) -> String {
    let parts: Vec<String> = failures.iter().map(ToString::to_string).collect();
    parts.join("; ")
}

fn reserved_suffix(reserved: &[String]) -> String {
    if reserved.is_empty() {
        String::new()
    } else {
        format!(
            ", and free but promised to an earlier waiter on {} ({})",
            reserved.len(),
            reserved.join(", ")
        )
    }
}

fn failures_suffix(failures: &[NodeFailure]) -> String {
    if failures.is_empty() {
        String::new()
    } else {
        format!(
            ", and {} failed ({})",
            failures.len(),
            join_failures(failures)
        )
    }
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
