//! Which version of the protocol the model runs: today's, or an earlier one whose flaw the
//! model must find (the checks' positive controls).

/// How a waiter tells whether a grant it heard (on a subscription, or in an attempt's answer
/// `{4}`) counts towards a quorum.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum HeardGrants {
    /// By the reading of the client's current command connection to that master, whichever
    /// process it was read on (before the fix: a connection broken by a restart, not yet
    /// replaced, kept the reading of the process before the restart).
    ByCurrentConnection,
    /// By a reading of the process that sent the grant: the subscription reads its master's
    /// identity before it subscribes, an answer comes on a connection read before it, and the
    /// grant counts only when the client's reading of the master is of that same process.
    ByProcess,
}

/// The rules the model's masters and clients follow.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Rules {
    /// How a waiter counts the grants it heard.
    pub heard_grants: HeardGrants,
    /// Whether the scripts themselves refuse to grant, hand over or take a place where the
    /// marker was made for another process and the master does not keep every write.
    pub scripts_check_process: bool,
}

impl Rules {
    /// The protocol as the library and the scripts implement it today.
    pub const fn current() -> Self {
        Rules {
            heard_grants: HeardGrants::ByProcess,
            scripts_check_process: true,
        }
    }

    /// The protocol before hand-overs were judged by their sender's process (fe8ed07): a grant
    /// heard from a master back from its snapshot counted by a reading of its process before
    /// the crash, and the scripts did not check the process the marker was made for.
    pub const fn before_process_checks() -> Self {
        Rules {
            heard_grants: HeardGrants::ByCurrentConnection,
            scripts_check_process: false,
        }
    }
}
