//! `lua/acquire.lua`: take a mutex on this master if it is free, with a fencing token above
//! every earlier one, in the order waiters queued for it.

use super::{Here, Refusal};
use crate::ids::{Fence, Token, Value};
use crate::master::{Keys, Place, Terms};

/// The arguments of one call.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct AcquireArgs {
    /// The attempt's token (`ARGV[1]`).
    pub token: Token,
    /// The proposed fencing token (`ARGV[3]`).
    pub proposal: Fence,
    /// The caller's priority when it waits in line (`ARGV[4]` to `ARGV[6]`); `None` for a
    /// caller that does not wait.
    pub priority: Option<u8>,
    /// `ARGV[7]`: a fair caller takes a free lock only when it is first in line.
    pub fair: bool,
}

/// What the master answers.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum AcquireReply {
    /// `{1, fence}`.
    Granted(Fence),
    /// `{0, fence}`: another token holds it.
    Held(Fence),
    /// `{2, counter}`: the proposal is not above the counter.
    Stale(Fence),
    /// `{3}`: free, but an earlier waiter goes first.
    Reserved,
    /// `{4, token, fence}`: a release handed the lock to this waiter.
    HandedOver(Value, Fence),
    /// `{5}` or `{6, pttl}`.
    Refused(Refusal),
    /// `{8, fence, others}` of the read-write lock's reader (`lua/rw_acquire.lua`).
    Kept(Fence),
}

/// Runs the script on `keys`.
pub fn acquire(keys: &mut Keys, here: Here<'_>, args: &AcquireArgs) -> AcquireReply {
    if let Some(refusal) = here.gate(keys) {
        return AcquireReply::Refused(refusal);
    }
    let mine = Value::Attempt(args.token);
    let waiter = args.token.waiter();
    if let Some(current) = keys.lock
        && current != mine
    {
        if args.priority.is_some()
            && let Value::Handover(token) = current
            && token.of(waiter)
        {
            return AcquireReply::HandedOver(current, keys.counter);
        }
        queue_caller(keys, args);
        return AcquireReply::Held(keys.counter);
    }
    if keys.lock.is_none()
        && args.fair
        && keys
            .queue
            .first()
            .is_some_and(|first| first.waiter != waiter)
    {
        queue_caller(keys, args);
        if keys.queue.first().is_some_and(|p| p.waiter != waiter) {
            return AcquireReply::Reserved;
        }
    }
    let proposed = args.proposal;
    if keys.counter > proposed || (keys.counter == proposed && keys.lock != Some(mine)) {
        return AcquireReply::Stale(keys.counter);
    }
    keys.counter = proposed;
    keys.lock = Some(mine);
    keys.record(args.token.window);
    if args.priority.is_some() {
        keys.dequeue(waiter);
    }
    AcquireReply::Granted(proposed)
}

/// Takes or refreshes a waiting caller's place: with its attempt's terms when it is fair.
fn queue_caller(keys: &mut Keys, args: &AcquireArgs) {
    if let Some(priority) = args.priority {
        keys.queue_place(Place {
            priority,
            waiter: args.token.waiter(),
            terms: args.fair.then_some(Terms {
                token: args.token,
                proposal: args.proposal,
            }),
        });
    }
}
