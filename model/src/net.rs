//! What travels between clients and masters: script calls on a client's connection (answered
//! in order, lost with the connection), and the messages a master publishes to a waiter's
//! client.

use crate::ids::{ClientId, Fence, MasterId, Process, Value};
use crate::scripts::acquire::AcquireArgs;
use crate::scripts::give_back::GiveBackArgs;
use crate::scripts::holders::HoldArgs;
use crate::scripts::mark::MarkArgs;
use crate::scripts::release::ReleaseArgs;

/// One script call. The answers of acquires go to the attempt (and round) they came from, if
/// it is still the client's current one; the rest are not waited for.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Request {
    /// `lua/acquire.lua`, for round `round` of the attempt.
    Acquire {
        /// The script's arguments.
        args: AcquireArgs,
        /// Which round of the attempt.
        round: u8,
    },
    /// `lua/rw_acquire.lua` or `lua/semaphore_acquire.lua`.
    HoldAcquire {
        /// The script's arguments.
        args: HoldArgs,
        /// Which round of the attempt.
        round: u8,
    },
    /// `lua/release.lua`.
    Release(ReleaseArgs),
    /// `lua/holders_release.lua`, for this token.
    HoldersRelease(crate::ids::Token),
    /// `lua/give_back.lua`.
    GiveBack(GiveBackArgs),
    /// `lua/mark.lua`.
    Mark(MarkArgs),
}

/// A message a master published on a client's channel: a lock handed to one of its waiters.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Message {
    /// The client whose channel it was published on.
    pub client: ClientId,
    /// The master that published it.
    pub master: MasterId,
    /// The lock handed over.
    pub value: Value,
    /// Its fencing token.
    pub fence: Fence,
    /// The process of the master that published it, which the subscription that carried it
    /// read before subscribing.
    pub sender: Process,
}

/// A script call sent on a connection that broke before its answer: the master may still
/// run it, as long as it is the same process.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Orphan {
    /// The client whose connection broke.
    pub client: ClientId,
    /// The master it was to.
    pub master: MasterId,
    /// The master's process it was sent to: the call dies with it.
    pub process: Process,
    /// The call.
    pub request: Request,
}
