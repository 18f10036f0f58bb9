//! `lua/rw_acquire.lua`, `lua/semaphore_acquire.lua` and `lua/holders_release.lua` (with
//! `lua/holders.lua`): a read-write lock's and a semaphore's holders on one master. These
//! kinds hand nothing over (a release only wakes waiters), so their queue is left out.

use super::Here;
use super::acquire::AcquireReply;
use crate::ids::{Fence, Token};
use crate::master::{Hold, Keys};

/// The arguments of one acquire of a read-write lock or a semaphore.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct HoldArgs {
    /// The attempt's token.
    pub token: Token,
    /// The proposed fencing token.
    pub proposal: Fence,
    /// A read-write lock's reader, or its writer, or one of a semaphore's permits.
    pub share: Share,
}

/// Which share of the lock an acquire asks for.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Share {
    /// A read-write lock's reader.
    Reader,
    /// A read-write lock's writer.
    Writer,
    /// One of this many permits.
    Permit(u8),
}

/// `lua/rw_acquire.lua` and `lua/semaphore_acquire.lua`.
pub fn hold_acquire(keys: &mut Keys, here: Here<'_>, args: &HoldArgs) -> AcquireReply {
    if let Some(refusal) = here.gate(keys) {
        return AcquireReply::Refused(refusal);
    }
    let reader = args.share == Share::Reader;
    let mine = keys.holders.iter().any(|h| h.token == args.token);
    if !mine {
        let free = match args.share {
            Share::Reader => !keys.holders.iter().any(|h| !h.reader),
            Share::Writer => keys.holders.is_empty(),
            Share::Permit(permits) => keys.holders.len() < usize::from(permits),
        };
        if !free {
            return AcquireReply::Held(keys.counter);
        }
    }
    if reader {
        // A reader shares the last writer's fencing token.
        let fence = keys.counter;
        grant(keys, args.token, true, fence);
        return AcquireReply::Kept(fence);
    }
    let proposed = args.proposal;
    if keys.counter > proposed || (keys.counter == proposed && !mine) {
        return AcquireReply::Stale(keys.counter);
    }
    keys.counter = proposed;
    grant(keys, args.token, false, proposed);
    AcquireReply::Granted(proposed)
}

fn grant(keys: &mut Keys, token: Token, reader: bool, fence: Fence) {
    keys.holders.retain(|h| h.token != token);
    keys.holders.push(Hold {
        token,
        reader,
        fence,
    });
    keys.holders.sort();
    keys.record(token.window);
}

/// `lua/holders_release.lua`: whether the hold was there.
pub fn holders_release(keys: &mut Keys, token: Token) -> bool {
    let before = keys.holders.len();
    keys.holders.retain(|h| h.token != token);
    keys.holders.len() != before
}
