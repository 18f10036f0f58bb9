//! One client: its connections to the masters with what it read on each, its subscriptions,
//! and the operation it is in (an attempt, waiting in line, holding).

use crate::ids::{Fence, MasterId, Process, Token, Value, Waiter};
use crate::net::Request;
use crate::rules::{HeardGrants, Rules};
use crate::scripts::acquire::AcquireReply;

/// What the client read of a master on one connection (`INFO` and the marker, pipelined in
/// front of the first script call on it).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Reading {
    /// The master carries a marker made for another process than the one read, and does not
    /// keep every write: none of its votes count until it is marked again.
    pub restarted: bool,
}

/// A command connection to one master's process: a restart breaks it, and the calls still on
/// it are lost.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Conn {
    /// The process it connects to.
    pub process: Process,
    /// What was read on it, once its first call ran.
    pub reading: Option<Reading>,
    /// Calls sent and not yet run, in order.
    pub pending: Vec<Request>,
}

/// A grant a waiter heard: on a subscription, or in an attempt's answer `{4}`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    /// The master that granted.
    pub master: MasterId,
    /// What the master holds the lock with.
    pub value: Value,
    /// The fencing token it granted.
    pub fence: Fence,
    /// The process that sent it (read on the connection that carried it).
    pub sender: Process,
}

/// An attempt under way: its token and proposal, and the answers in so far.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Attempt {
    /// The attempt's token.
    pub token: Token,
    /// The fencing token it proposes (this round's).
    pub proposal: Fence,
    /// Raised proposals are sent again at once, as a new round of the same attempt.
    pub round: u8,
    /// The highest fencing token held before the attempt started: a permit's must be above.
    pub floor: Fence,
    /// Per master: the answer, and whether the vote counts by the reading of the connection
    /// it came on; with the process it came from.
    pub answers: Vec<Option<(AcquireReply, bool, Process)>>,
}

/// A lock held.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Held {
    /// What the masters hold the lock with.
    pub value: Value,
    /// Its fencing token (0 for a reader).
    pub fence: Fence,
}

/// What the client is doing.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Op {
    /// Before its next session, or done.
    Idle,
    /// An attempt is out.
    Trying(Attempt),
    /// In line between attempts: it polls, or counts the hand-overs it heard.
    Waiting,
    /// Holds a lock, valid or not (it may release late).
    Holding(Held),
}

/// One client.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Client {
    /// Per master: the command connection, if one was made.
    pub conns: Vec<Option<Conn>>,
    /// The process each subscription is connected to.
    pub subs: Vec<Option<Process>>,
    /// The current session (or the next one, when idle).
    pub session: u8,
    /// Attempts made in the current session.
    pub attempts: u8,
    /// The current session's place in line: when it started waiting.
    pub priority: u8,
    /// What it is doing now.
    pub op: Op,
    /// Grants heard for the current session, not yet counted.
    pub heard: Vec<Grant>,
    /// Grants the current session gave back: no grant when heard again.
    pub given_back: Vec<(MasterId, Value)>,
    /// An answer showed a master that is unmarked or marked for another process.
    pub marking_due: bool,
}

impl Client {
    /// A client that has made no connection yet, subscribed to every master's first process.
    pub fn new(masters: usize) -> Self {
        Client {
            conns: vec![None; masters],
            subs: vec![Some(0); masters],
            session: 0,
            attempts: 0,
            priority: 0,
            op: Op::Idle,
            heard: Vec::new(),
            given_back: Vec::new(),
            marking_due: false,
        }
    }

    /// The current session's waiter id.
    pub fn waiter(&self, me: u8) -> Waiter {
        Waiter {
            client: me,
            session: self.session,
        }
    }

    /// Whether a grant heard from master `g.master` counts towards a quarantine-safe quorum,
    /// by the rule in force (see [`HeardGrants`]).
    pub fn grant_counts(&self, g: &Grant, rules: &Rules) -> bool {
        if self.given_back.contains(&(g.master, g.value)) {
            return false;
        }
        let Some(conn) = &self.conns[g.master] else {
            return false;
        };
        let read_ok = conn.reading.is_some_and(|r| !r.restarted);
        match rules.heard_grants {
            HeardGrants::ByCurrentConnection => read_ok,
            HeardGrants::ByProcess => read_ok && conn.process == g.sender,
        }
    }
}
