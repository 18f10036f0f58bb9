//! `lua/give_back.lua`: give back a grant that did not make a quorum, and put the waiter back
//! in line, where the grant was still there to delete.

use super::Here;
use super::release::ReleaseReply;
use crate::ids::Value;
use crate::master::{Keys, Place, Terms};

/// The arguments of one call.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct GiveBackArgs {
    /// The grant given back.
    pub value: Value,
    /// The waiter's priority.
    pub priority: u8,
    /// The terms of the waiter's attempt, or none (after a hand-over that fell short).
    pub terms: Option<Terms>,
}

/// Runs the script on `keys`.
pub fn give_back(keys: &mut Keys, here: Here<'_>, args: &GiveBackArgs) -> ReleaseReply {
    match keys.lock {
        None => return ReleaseReply::Absent,
        Some(v) if v != args.value => return ReleaseReply::Foreign,
        Some(_) => keys.lock = None,
    }
    // A master back from older data takes no place: a place with terms is a hand-over to come.
    if !here.rules.scripts_check_process || here.gate(keys).is_none() {
        keys.queue_place(Place {
            priority: args.priority,
            waiter: args.value.token().waiter(),
            terms: args.terms,
        });
    }
    ReleaseReply::Deleted
}
