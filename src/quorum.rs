//! Vote counting and validity maths: pure functions with no I/O, so every rule is unit-tested.

use std::time::{Duration, Instant};

/// How many of `n` nodes make a majority: `n / 2 + 1`.
pub(crate) fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// The clock-drift allowance for a TTL: `ttl × factor + min`.
pub(crate) fn drift(ttl: Duration, factor: f64, min: Duration) -> Duration {
    // `mul_f64` panics on negative or non-finite input; the factor is validated to be in
    // 0..=0.5 when the client is built, but saturate anyway rather than trust that.
    let scaled = if factor.is_finite() && factor > 0.0 {
        Duration::try_from_secs_f64(ttl.as_secs_f64() * factor).unwrap_or(Duration::MAX)
    } else {
        Duration::ZERO
    };
    scaled.saturating_add(min)
}

/// What is left of a TTL once `elapsed` (since the attempt began, on the monotonic clock) and
/// the drift allowance are taken off; `None` when nothing is left.
pub(crate) fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift)
        .filter(|v| !v.is_zero())
}

/// Where a vote stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Not enough answers yet either way.
    Pending,
    /// A quorum said yes.
    Reached,
    /// Too many said no or failed for a quorum to be possible.
    Impossible,
}

/// Counts the answers of `n` nodes to one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    nodes: usize,
    needed: usize,
    yes: usize,
    no: usize,
    failed: usize,
}

impl Tally {
    /// A tally for `nodes` nodes with no answer yet, decided by a majority.
    #[cfg(test)]
    pub(crate) fn new(nodes: usize) -> Self {
        Tally::needing(nodes, quorum(nodes))
    }

    /// A tally for `nodes` nodes with no answer yet, decided by `needed` of them.
    pub(crate) fn needing(nodes: usize, needed: usize) -> Self {
        Tally {
            nodes,
            needed,
            yes: 0,
            no: 0,
            failed: 0,
        }
    }

    /// A node agreed.
    pub(crate) fn yes(&mut self) {
        self.yes += 1;
    }

    /// A node answered that it will not agree (held by another token, say).
    pub(crate) fn no(&mut self) {
        self.no += 1;
    }

    /// A node did not answer usefully.
    pub(crate) fn failed(&mut self) {
        self.failed += 1;
    }

    /// How many said yes.
    #[cfg(test)]
    pub(crate) fn yes_count(&self) -> usize {
        self.yes
    }

    /// How many said no.
    pub(crate) fn no_count(&self) -> usize {
        self.no
    }

    /// How many failed.
    #[cfg(test)]
    pub(crate) fn failed_count(&self) -> usize {
        self.failed
    }

    /// How many have not answered.
    pub(crate) fn pending(&self) -> usize {
        self.nodes.saturating_sub(self.yes + self.no + self.failed)
    }

    /// Whether the vote is decided: reached as soon as a quorum said yes, impossible as soon as
    /// the yes votes plus those still pending cannot make a quorum.
    pub(crate) fn decision(&self) -> Decision {
        let needed = self.needed;
        if self.yes >= needed {
            Decision::Reached
        } else if self.yes + self.pending() < needed {
            Decision::Impossible
        } else {
            Decision::Pending
        }
    }
}

/// When a quorum of nodes may grant again, from what keeps some of them out for a while.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outlook {
    /// Enough nodes may grant now (they answered, or failed in a way that may pass at once).
    Open,
    /// Not before this instant, when enough of the nodes kept out are back.
    At(Instant),
    /// Not in sight: too many nodes are out for no known time.
    Closed,
}

/// The outlook for a quorum: `out[i]` is `None` when node `i` may grant now, `Some(Some(t))`
/// when it cannot before `t` (a quarantine that ends then), `Some(None)` when it cannot for
/// no known time (a replica, a refused login, a server that is not there). `needed` nodes
/// make a quorum.
pub(crate) fn outlook(out: &[Option<Option<Instant>>], needed: usize) -> Outlook {
    let open = out.iter().filter(|o| o.is_none()).count();
    if open >= needed {
        return Outlook::Open;
    }
    let mut back: Vec<Instant> = out.iter().filter_map(|o| o.flatten()).collect();
    back.sort_unstable();
    match back.get(needed - open - 1) {
        Some(t) => Outlook::At(*t),
        None => Outlook::Closed,
    }
}

/// What one node answered to an acquire, as far as telling a split vote goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireVote {
    /// It granted this attempt.
    Granted,
    /// Another holder has the lock there, with this fencing token.
    HeldBy(u64),
    /// The lock is free there but promised to another waiter first.
    Reserved,
    /// Anything else: a failure, no answer, a handover to this waiter, a stale proposal.
    Other,
}

/// Whether the votes were split: nobody on a quorum of the answers, and evidence that several
/// contenders shared them (two holders, told apart by their fencing tokens; another holder
/// besides our own grants; or our own grants where other nodes had another waiter first, so the
/// nodes' queues did not agree yet). One holder seen among failures is not a split: when
/// unreachable nodes fail fast, a single refusal can decide the vote, and that holder may well
/// have the lock; the waiter must then wait for its release, not retry in a tight loop. Nor is
/// a holder seen beside "another waiter first": that waiter is most likely the holder, still
/// taking the remaining nodes.
pub(crate) fn is_split(votes: impl IntoIterator<Item = AcquireVote>, quorum: usize) -> bool {
    let mut holders: Vec<(u64, usize)> = Vec::new();
    let (mut granted, mut reserved) = (0, 0);
    for vote in votes {
        match vote {
            AcquireVote::HeldBy(fence) => match holders.iter_mut().find(|(f, _)| *f == fence) {
                Some((_, n)) => *n += 1,
                None => holders.push((fence, 1)),
            },
            AcquireVote::Granted => granted += 1,
            AcquireVote::Reserved => reserved += 1,
            AcquireVote::Other => {}
        }
    }
    let others = if holders.is_empty() {
        usize::from(reserved > 0)
    } else {
        holders.len()
    };
    let contenders = others + usize::from(granted > 0);
    others > 0 && contenders >= 2 && holders.iter().all(|(_, n)| *n < quorum)
}

/// Of locks handed over on single nodes, `(node, token, fence)`, the token and fencing token
/// that a quorum of distinct nodes handed over, counting only the handovers whose index
/// `counts` holds for (their votes count: one node's handovers may come from two of its
/// processes, one before a restart and one after).
pub(crate) fn quorum_handover<'g>(
    handovers: &[(usize, &'g str, u64)],
    counts: impl Fn(usize) -> bool,
    quorum: usize,
) -> Option<(&'g str, u64)> {
    handovers.iter().find_map(|&(_, token, fence)| {
        let mut on: Vec<usize> = handovers
            .iter()
            .enumerate()
            .filter(|&(i, &(_, t, f))| t == token && f == fence && counts(i))
            .map(|(_, &(node, _, _))| node)
            .collect();
        on.sort_unstable();
        on.dedup();
        (on.len() >= quorum).then_some((token, fence))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn quorum_is_a_strict_majority_for_odd_and_even_n() {
        let expected = [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)];
        for (n, q) in expected {
            assert_eq!(quorum(n), q, "n = {n}");
            // Two quorums always share a node: that is what makes the lock exclusive.
            assert!(2 * quorum(n) > n, "n = {n}");
        }
    }

    #[test]
    fn drift_is_factor_times_ttl_plus_minimum() {
        assert_eq!(drift(Duration::from_secs(10), 0.01, 2 * MS), 102 * MS);
        assert_eq!(drift(Duration::from_secs(10), 0.0, 2 * MS), 2 * MS);
        assert_eq!(drift(Duration::from_secs(10), f64::NAN, 2 * MS), 2 * MS);
        assert_eq!(drift(Duration::from_secs(10), -1.0, 2 * MS), 2 * MS);
    }

    #[test]
    fn validity_takes_off_elapsed_time_and_drift() {
        let ttl = Duration::from_secs(10);
        let d = drift(ttl, 0.01, 2 * MS);
        assert_eq!(validity(ttl, Duration::ZERO, d), Some(ttl - 102 * MS));
        assert_eq!(validity(ttl, 400 * MS, d), Some(ttl - 502 * MS));
        // Exactly nothing left, and less than nothing, are both no validity.
        assert_eq!(validity(ttl, ttl - d, d), None);
        assert_eq!(validity(ttl, ttl, d), None);
        assert_eq!(validity(ttl, 2 * ttl, d), None);
    }

    #[test]
    fn three_nodes_decide_early() {
        let mut t = Tally::new(3);
        assert_eq!(t.decision(), Decision::Pending);
        t.yes();
        assert_eq!(t.decision(), Decision::Pending);
        t.yes();
        assert_eq!(
            t.decision(),
            Decision::Reached,
            "two of three is enough, the third need not answer"
        );

        let mut t = Tally::new(3);
        t.no();
        assert_eq!(t.decision(), Decision::Pending);
        t.failed();
        assert_eq!(
            t.decision(),
            Decision::Impossible,
            "one no and one failure leave at most one yes"
        );
    }

    #[test]
    fn five_nodes_need_three() {
        let mut t = Tally::new(5);
        t.yes();
        t.yes();
        t.no();
        t.failed();
        assert_eq!(t.decision(), Decision::Pending);
        assert_eq!(t.pending(), 1);
        t.yes();
        assert_eq!(t.decision(), Decision::Reached);

        let mut t = Tally::new(5);
        t.yes();
        t.yes();
        t.no();
        t.no();
        assert_eq!(t.decision(), Decision::Pending);
        t.failed();
        assert_eq!(t.decision(), Decision::Impossible);
        assert_eq!((t.yes_count(), t.no_count(), t.failed_count()), (2, 2, 1));
    }

    #[test]
    fn even_n_needs_more_than_half() {
        let mut t = Tally::new(4);
        t.yes();
        t.yes();
        t.no();
        assert_eq!(t.decision(), Decision::Pending, "2 of 4 is not a majority");
        t.no();
        assert_eq!(
            t.decision(),
            Decision::Impossible,
            "a 2-2 split is no quorum for anyone"
        );

        let mut t = Tally::new(2);
        t.yes();
        t.failed();
        assert_eq!(
            t.decision(),
            Decision::Impossible,
            "with two nodes both must agree"
        );
    }

    #[test]
    fn a_single_node_decides_alone() {
        let mut t = Tally::new(1);
        t.yes();
        assert_eq!(t.decision(), Decision::Reached);
        let mut t = Tally::new(1);
        t.no();
        assert_eq!(t.decision(), Decision::Impossible);
    }

    #[test]
    fn the_outlook_waits_for_the_quarantines_that_make_a_quorum() {
        let outlook = |out: &[Option<Option<Instant>>]| outlook(out, quorum(out.len()));
        let now = Instant::now();
        let (t1, t2) = (now + 2 * MS, now + 5 * MS);
        assert_eq!(outlook(&[None, None, Some(Some(t1))]), Outlook::Open);
        // One open of three: the earlier of the two quarantines brings the second vote.
        assert_eq!(
            outlook(&[None, Some(Some(t2)), Some(Some(t1))]),
            Outlook::At(t1)
        );
        // Five nodes, one open: two must come back, so the later of the first two.
        assert_eq!(
            outlook(&[
                None,
                Some(Some(t2)),
                Some(Some(t1)),
                Some(None),
                Some(Some(now + 9 * MS))
            ]),
            Outlook::At(t2)
        );
        // Out for good beyond what a quorum can spare.
        assert_eq!(
            outlook(&[None, Some(None), Some(Some(t1)), Some(None), Some(None)]),
            Outlook::Closed
        );
    }

    #[test]
    fn a_handover_counts_once_per_node_and_only_where_votes_count() {
        let h = [
            (0, "w/a", 7),
            (0, "w/a", 7),
            (1, "w/a", 7),
            (2, "w/b", 8),
            (3, "w/a", 7),
        ];
        // Node 0 heard twice is one node: with node 3 not counting, "w/a" is on two of five.
        assert_eq!(quorum_handover(&h, |i| h[i].0 != 3, 3), None);
        assert_eq!(quorum_handover(&h, |_| true, 3), Some(("w/a", 7)));
        // The same token with another fencing token is another handover.
        let mixed = [(0, "w/a", 7), (1, "w/a", 8), (2, "w/a", 7)];
        assert_eq!(quorum_handover(&mixed, |_| true, 3), None);
    }
}
