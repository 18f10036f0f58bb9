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
    /// The node lost its data (restarted without persistence, or was flushed) while the
    /// deployment was in use, so it may have forgotten locks that are still held elsewhere; it
    /// grants nothing for this much longer (the longest TTL asked for in the deployment, by
    /// the node's own clock).
    Quarantined(Duration),
    /// The node carries no deployment marker: it is new, or lost its data. It grants nothing
    /// until a client has marked it, which the client does at once, in quarantine if other
    /// nodes show that the deployment was in use. Also a node that does not keep every write
    /// and carries a marker made for an earlier process (it came back from older data, a
    /// snapshot): its votes do not count until it is marked again.
    Unmarked,
    /// The client requires durable nodes and this one does not run AOF with `appendfsync always`.
    NotDurable,
    /// The answer came on a connection on which the node's identity and uptime have not been
    /// read (a new connection whose reading failed or was overtaken): it may be a restarted
    /// node, so its vote is not counted.
    Unverified,
    /// The node is the same server (one `run_id`) as this other node of the client, read
    /// before it (two addresses of one server): the server casts one vote, the other node's.
    SameServer(String),
    /// The node granted a hold of a reentrant lock its owner holds there (or a reader's share)
    /// with this fencing token, but no quorum of the masters that granted agrees on one: a
    /// hold now would not carry a token that a quorum records (the owner's other holds
    /// carry theirs), so it is refused, to be asked again. Seen when masters lost the
    /// owner's lock and took it again with new tokens.
    FenceDisagrees(u64),
    /// The node holds this semaphore with this other number of permits than asked: every
    /// holder of a semaphore must ask for the same number, and nothing was changed.
    OtherPermits(i64),
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
                "quarantined: it lost its data (restart without persistence, or flush) while locks may still be held elsewhere; it counts again in {}",
                humantime::format_duration(Duration::from_millis(
                    u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1)
                ))
            ),
            NodeFailureKind::Unmarked => f.write_str(
                "carries no deployment marker for the process it is now (new, restarted without persistence or from an older snapshot, or flushed); it is not counted until it is marked",
            ),
            NodeFailureKind::NotDurable => {
                f.write_str("not durable (needs appendonly yes and appendfsync always), and durable nodes are required")
            }
            NodeFailureKind::SameServer(other) => write!(
                f,
                "the same server as {other} (one run_id): two addresses of one server are one vote"
            ),
            NodeFailureKind::Unverified => f.write_str(
                "answered on a connection whose server has not been identified yet (INFO failed, or the connection was just replaced); not counted",
            ),
            NodeFailureKind::FenceDisagrees(fence) => write!(
                f,
                "granted with fencing token {fence}, which no quorum of the granting masters shares (masters that lost the lock and took it again hold it with new tokens)"
            ),
            NodeFailureKind::OtherPermits(held) => write!(
                f,
                "this semaphore is held here with {held} permits; every holder of a semaphore must ask for the same number"
            ),
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
            NodeFailureKind::Unmarked => "unmarked",
            NodeFailureKind::NotDurable => "not_durable",
            NodeFailureKind::Unverified => "unverified",
            NodeFailureKind::SameServer(_) => "same_server",
            NodeFailureKind::FenceDisagrees(_) => "fence_disagrees",
            NodeFailureKind::OtherPermits(_) => "other_permits",
        }
    }
}

/// One node's failure: its address (never its password) and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
///
/// Variants and their fields may be added: match with a wildcard arm and `..` in each pattern.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument was rejected before any node was contacted; or, with `field` `permits`,
    /// the masters refused a semaphore asked (to acquire or extend) with another number of
    /// permits than it is held with, and nothing changed.
    #[error("invalid {field}: {reason}")]
    #[non_exhaustive]
    InvalidArgument {
        /// Which argument: `name`, `ttl`, `wait`, `node`, `token`...
        field: &'static str,
        /// Why it was rejected, and what is accepted.
        reason: String,
    },

    /// Another holder has the lock, or earlier waiters go first, on enough nodes that no
    /// quorum could be had.
    #[error(
        "lock {name:?} is held by someone else on {} of {total} nodes ({}){}{}{}; wait for it or retry later",
        holders.len(),
        holders.join(", "),
        reserved_suffix(reserved),
        failures_suffix(failures),
        unheard_suffix(*unheard)
    )]
    #[non_exhaustive]
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
        /// How many nodes' answers the attempt was refused without: those in already left no
        /// quorum to be had, so the lock may be held on more nodes than `holders` lists.
        unheard: usize,
        /// How many nodes the client has.
        total: usize,
    },

    /// Too many nodes failed to reach a quorum.
    #[error(
        "{operation} of {name:?} could not reach a quorum: {needed} of {total} nodes needed, {} failed ({}); check that a majority of masters is up and reachable",
        failures.len(),
        join_failures(failures)
    )]
    #[non_exhaustive]
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

    /// An extend was not confirmed by a quorum (too many nodes failed to answer in time), but
    /// it may have been applied on some of them, and may still be by a node that runs it late.
    /// A new TTL shorter than what was left can therefore end the lock early: the lock is
    /// certain for `valid_for` at most, counted from when the error was made.
    #[error(
        "extend of {name:?} could not reach a quorum: {needed} of {total} nodes needed, {} failed ({}); it may have been applied on some nodes, so the lock is certain for at most {} more",
        failures.len(),
        join_failures(failures),
        humantime::format_duration(Duration::from_millis(u64::try_from(valid_for.as_millis()).unwrap_or(u64::MAX)))
    )]
    #[non_exhaustive]
    ExtendUncertain {
        /// The lock's name.
        name: String,
        /// How much longer, at most, the lock is certainly held: the lesser of what was left
        /// before the extend and the new TTL counted from the extend's start, less the drift
        /// allowance. Zero when nothing is certain any more.
        valid_for: Duration,
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
    #[non_exhaustive]
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
    #[non_exhaustive]
    LockLost {
        /// The lock's name.
        name: String,
    },

    /// The token given does not hold the lock on any node; nothing was changed.
    #[error("lock {name:?} is not held with this token; nothing was changed")]
    #[non_exhaustive]
    NotHeld {
        /// The lock's name.
        name: String,
    },

    /// A protected resource refused or failed a fenced write's I/O (see the `fencing` module).
    #[error("the protected resource failed: {0}")]
    Resource(String),

    /// The fencing counters on the nodes have reached their limit, 2^53 − 1 (Lua numbers on
    /// the nodes are doubles): no larger fencing token can be granted for this name.
    #[error("lock {name:?}: the fencing counters on the nodes have reached the limit of 2^53 - 1")]
    #[non_exhaustive]
    FencesExhausted {
        /// The lock's name.
        name: String,
    },

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
            Error::ExtendUncertain { .. } => "extend_uncertain",
            Error::Timeout { .. } => "timeout",
            Error::LockLost { .. } => "lock_lost",
            Error::NotHeld { .. } => "not_held",
            Error::Resource(_) => "resource",
            Error::FencesExhausted { .. } => "fences_exhausted",
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

fn unheard_suffix(unheard: usize) -> String {
    match unheard {
        0 => String::new(),
        n => format!(", and {n} not waited for (the answers in already settle it)"),
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
