//! `lua/release.lua`: compare-and-delete, and hand the lock to the first waiter on the terms
//! of its last refused attempt.

use super::{Here, Publish};
use crate::ids::{Fence, Value};
use crate::master::Keys;

/// The arguments of one call.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct ReleaseArgs {
    /// What the releaser holds the lock with (`ARGV[1]`).
    pub value: Value,
    /// The released lock's fencing token (0 when unknown).
    pub fence: Fence,
    /// `ARGV[4]`: the lock's own holder releases it, so a lock already gone here is handed
    /// over too.
    pub holder: bool,
    /// `ARGV[2]` not empty: the release wakes (and may hand the lock to) the first waiter;
    /// cleaning up after a failed attempt does not.
    pub wake: bool,
}

/// What the master answers.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ReleaseReply {
    /// `1`: deleted (or replaced by a hand-over).
    Deleted,
    /// `0`: already gone.
    Absent,
    /// `-1`: another token holds it.
    Foreign,
}

/// Runs the script on `keys`; the hand-over to publish, if any.
pub fn release(
    keys: &mut Keys,
    here: Here<'_>,
    args: &ReleaseArgs,
) -> (ReleaseReply, Option<Publish>) {
    let mine = keys.lock == Some(args.value);
    if !mine && keys.lock.is_some() {
        return (ReleaseReply::Foreign, None);
    }
    let released = if mine {
        ReleaseReply::Deleted
    } else {
        ReleaseReply::Absent
    };
    if !mine && !args.holder {
        return (released, None);
    }
    if args.wake
        && let Some(first) = keys.queue.first().copied()
        && let Some(terms) = first.terms
    {
        let fence = (terms.proposal + 1).max(args.fence + 1);
        // The deployment check a grant makes (see `Here::gate`): a master whose grants would
        // not count hands nothing over.
        if fence > keys.counter && here.gate(keys).is_none() {
            keys.counter = fence;
            let value = Value::Handover(terms.token);
            keys.lock = Some(value);
            keys.record(terms.token.window);
            keys.dequeue(first.waiter);
            let publish = Publish {
                to: first.waiter,
                value,
                fence,
            };
            return (released, Some(publish));
        }
        // Otherwise only a wake-up, which changes no key.
    }
    if mine {
        keys.lock = None;
    }
    (released, None)
}
