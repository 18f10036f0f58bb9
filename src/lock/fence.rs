//! The fencing token of an attempt that a quorum granted, where grants keep the lock's token
//! (a reader's, another hold's of a reentrant lock) instead of taking the proposal.

use crate::fanout::Answer;
use crate::node::AcquireReply;

/// The fencing token of an attempt that a quorum granted: `Ok(None)` for the proposal,
/// `Ok(Some(fence))` for a token the grants kept, `Err(highest)` when grants that keep the
/// lock's token disagree on it and the lock needs a new one above `highest`.
///
/// Fresh grants record the proposal. Grants that keep the lock's token (a reader's, the
/// writers' counter; another hold's of a reentrant lock) report it as each master has it;
/// it is the grant's token when a quorum of them agree on it: any two quorums share a
/// master, so it is at least the token of every acquisition before, and every later one
/// must exceed it on that quorum. Anything else (counters that a failed writer's attempt
/// raised on some masters; a hold that a master missed and granted afresh) leaves no token
/// that a quorum records: the attempt then refuses a hold beside the owner's earlier holds,
/// or gives the lock a new token (see `lua/reentrant_acquire.lua`).
pub(super) fn fence_of(
    answers: &[Option<Answer<AcquireReply>>],
    quorum: usize,
) -> std::result::Result<Option<u64>, u64> {
    let (mut fresh, mut kept) = (Vec::new(), Vec::new());
    for answer in answers {
        match answer {
            Some(Ok(AcquireReply::Granted(fence))) => fresh.push(*fence),
            Some(Ok(AcquireReply::Kept(fence, _))) => kept.push(*fence),
            _ => {}
        }
    }
    let Some(&lock_fence) = kept.first() else {
        return Ok(fresh.into_iter().max());
    };
    if let Some(agreed) = agreed_by_quorum(&kept, quorum) {
        return Ok(Some(agreed));
    }
    Err(fresh.into_iter().chain(kept).max().unwrap_or(lock_fence))
}

/// The fencing token that at least `quorum` of `fences` are, if one is (two cannot: that
/// would take more answers than masters): the token a quorum of grants kept, or a quorum of a
/// reader's masters recorded for it.
///
/// The grants outside that quorum do not matter, whatever they say: a master that lost the
/// owner's lock and took it again (for a later hold, say) has a new, higher counter, and
/// one whose counter a failed writer raised has too. The agreed token is still above that
/// of every acquisition before (each shared a master of the quorum with it, whose counter
/// then would be above that acquisition's, and is at the token), and every later one must
/// exceed it on that quorum. Nor was a higher token that only a minority has ever granted:
/// a grant of it on a quorum would have left it on a master of this quorum.
pub(super) fn agreed_by_quorum(fences: &[u64], quorum: usize) -> Option<u64> {
    fences
        .iter()
        .copied()
        .find(|f| fences.iter().filter(|g| *g == f).count() >= quorum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_fence_counts_only_where_a_quorum_agrees_on_it() {
        let fresh = |f| Some(Ok(AcquireReply::Granted(f)));
        let again = |f| Some(Ok(AcquireReply::Kept(f, true)));
        let none = || None;
        // Fresh grants: the proposal.
        assert_eq!(fence_of(&[fresh(7), fresh(7), none()], 2), Ok(Some(7)));
        // A quorum of masters had the lock, with one token: that one, whatever the others.
        assert_eq!(fence_of(&[again(4), again(4), fresh(9)], 2), Ok(Some(4)));
        // Too few had it, or they disagree: a new token above them all.
        assert_eq!(
            fence_of(&[again(4), again(4), fresh(9), fresh(9), none()], 3),
            Err(9)
        );
        assert_eq!(fence_of(&[again(4), again(6), none()], 2), Err(6));
        // A quorum agrees, whatever the others say: a master that lost the lock and took it
        // again with a new token, answering first or last.
        assert_eq!(fence_of(&[again(9), again(4), again(4)], 2), Ok(Some(4)));
        assert_eq!(fence_of(&[again(4), again(4), again(9)], 2), Ok(Some(4)));
        assert_eq!(
            fence_of(&[again(4), again(9), again(4), again(2), again(4)], 3),
            Ok(Some(4))
        );
        assert_eq!(fence_of(&[again(4), again(9), again(2)], 2), Err(9));
    }
}
