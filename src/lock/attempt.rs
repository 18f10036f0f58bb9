//! One acquire attempt: the vote on every node, fencing-token proposals, and giving back what
//! a failed attempt got.

use std::sync::Arc;

use std::time::{Duration, Instant};

use tracing::debug;

use super::fence::{agreed_by_quorum, fence_of};
use super::queue::Queued;
use crate::cluster::{Cluster, GiveBack};
use crate::config::LockOptions;
use crate::deployment::{is_unmarked, mark_in_background};
use crate::error::{Error, NodeFailureKind, Operation, Result};
use crate::fanout::{Answer, Hearing, Sent, addrs_where, failures, vote_settled};
use crate::node::Keys;
use crate::node::{AcquireReply, Proposal, Terms};
use crate::quorum::{AcquireVote, Decision, is_split, validity};
use crate::waiters::Grant;

/// Stale proposals answered at once before an attempt counts as failed.
const MAX_PROPOSAL_ROUNDS: u32 = 4;

/// One attempt: ask every node, count the votes, release on failure. Returns the validity
/// deadline and the fencing token.
///
/// A proposal that a quorum refuses only as stale (their counters are not below it) is
/// raised above the highest counter reported and sent again at once: that is not
/// contention, so it costs no retry delay, and nodes that granted the lower proposal take
/// the higher one (they see their own token).
pub(super) async fn attempt(
    cluster: &Arc<Cluster>,
    name: &str,
    keys: &Arc<Keys>,
    token: &Arc<str>,
    mut queued: Option<&mut Queued<'_>>,
    opts: &LockOptions,
) -> Result<(Instant, u64), FailedAttempt> {
    let settings = &cluster.settings;
    let nodes = &cluster.nodes;
    let ttl = opts.ttl;
    let drift = settings.drift(ttl);
    let fair = opts.is_fair();
    let quorum = keys.quorum(nodes.len());
    let place = queued.as_ref().map(|q| q.place_for_attempt());
    let mut cleanup = ReleaseOnDrop {
        cluster,
        keys,
        token,
        armed: true,
    };
    let attempt_started = Instant::now();
    let refused = |error| FailedAttempt {
        error,
        split: false,
        granted: false,
        took: attempt_started.elapsed(),
        released: None,
        handed_over: false,
        out: Vec::new(),
    };
    let mut proposal = cluster.propose(name, 0).map_err(refused)?;
    let mut round = 0;
    let mut marked = false;
    // Set once grants that keep the lock's fencing token (a reader's, a reentrant hold's)
    // disagreed on it.
    let mut refence = false;
    let (error, answers) = loop {
        round += 1;
        let start = Instant::now();
        // A node answering at the very deadline must still leave the minimum validity.
        let budget = ttl.saturating_sub(drift).saturating_sub(opts.min_validity);
        let deadline = start + settings.node_timeout.min(budget);
        let offer = Proposal {
            fence: proposal,
            refence,
        };
        // Grants that keep the lock's fencing token, as they come: while they disagree, the
        // vote waits for the other masters, whose grants may settle it (see `fence_of`).
        let mut kept: Vec<u64> = Vec::new();
        let (tally, answers) = vote_settled(
            nodes,
            quorum,
            Operation::Acquire,
            deadline,
            |i| {
                let (cluster, keys, token, place) =
                    (cluster.clone(), keys.clone(), token.clone(), place.clone());
                async move {
                    let answer = cluster.nodes[i]
                        .acquire(&keys, &token, ttl, offer, place.as_ref(), fair)
                        .await;
                    if matches!(answer, Err(NodeFailureKind::Unmarked)) {
                        // Heard after the vote was decided, perhaps: mark it anyway, so
                        // that its quarantine starts now.
                        mark_in_background(&cluster);
                    }
                    answer
                }
            },
            |reply| matches!(reply, AcquireReply::Granted(_) | AcquireReply::Kept(..)),
            Hearing {
                settled: |reply: &AcquireReply| {
                    if let AcquireReply::Kept(fence, _) = reply {
                        kept.push(*fence);
                    }
                    kept.is_empty() || agreed_by_quorum(&kept, quorum).is_some()
                },
                // A waiter hears every master out, even once the vote is lost: a master
                // whose refusal came after the decision would otherwise be sent a give-back,
                // one more script call on every master for each refused attempt under
                // contention. The waiter waits anyway; the deadline still bounds a silent
                // master.
                refusals_out: queued.is_some(),
                every_answer: false,
            },
        )
        .await;
        let elapsed = start.elapsed();

        if let Some(q) = queued.as_mut() {
            q.book_answers(&answers, tally.decision() == Decision::Reached);
            q.keep_in_line_if_reaching(&answers, quorum);
        }

        let unmarked = answers.iter().any(is_unmarked);
        if tally.decision() == Decision::Reached {
            match validity(ttl, elapsed, drift) {
                Some(v) if v >= opts.min_validity => {
                    let fence = match fence_of(&answers, quorum) {
                        Ok(fence) => fence.unwrap_or(proposal),
                        Err(_)
                            if answers
                                .iter()
                                .any(|a| matches!(a, Some(Ok(AcquireReply::Kept(_, true))))) =>
                        {
                            // The owner holds the lock on masters too few to confirm its
                            // token (one of them is silent, or lost it): another hold now
                            // would carry another token than the owner's holds carry. Refused,
                            // to be asked again once a quorum of them answers.
                            debug!("too few masters confirm the owner's lock; refusing the hold");
                            let failures = with_disagreeing_fences(nodes, &answers);
                            break (
                                cluster.attempt_unavailable(
                                    Operation::Acquire,
                                    name,
                                    quorum,
                                    failures,
                                ),
                                answers,
                            );
                        }
                        Err(highest) if round < MAX_PROPOSAL_ROUNDS => {
                            // Grants that keep the lock's fencing token but do not agree
                            // on it (a reader's; a reentrant lock that only this attempt
                            // holds, granted in an earlier round on some masters): a new one
                            // above them all, on every master that has the lock, at once.
                            debug!(highest, "the grants disagree on the fence; refencing");
                            refence = true;
                            cluster.note_fence(highest);
                            proposal = cluster.propose(name, highest).map_err(refused)?;
                            continue;
                        }
                        Err(_) => {
                            // Refenced as often as allowed, and still no quorum agrees.
                            let failures = with_disagreeing_fences(nodes, &answers);
                            break (
                                cluster.attempt_unavailable(
                                    Operation::Acquire,
                                    name,
                                    quorum,
                                    failures,
                                ),
                                answers,
                            );
                        }
                    };
                    cleanup.armed = false;
                    cluster.note_fence(fence);
                    return Ok((start + ttl - drift, fence));
                }
                _ => {
                    let error = Error::Timeout {
                        operation: Operation::Acquire,
                        name: name.to_owned(),
                        elapsed,
                        detail: format!(
                            "a quorum granted, but too late to leave the minimum validity of {}",
                            humantime::format_duration(opts.min_validity)
                        ),
                    };
                    break (error, answers);
                }
            }
        }
        // A lock handed to this waiter counts as held here: the attempt did not get it,
        // and the waiter looks at handed-over locks before its next attempt.
        let holders = addrs_where(nodes, &answers, |a| {
            matches!(a, Ok(AcquireReply::Held(..) | AcquireReply::HandedOver(..)))
        });
        let reserved = addrs_where(nodes, &answers, |a| matches!(a, Ok(AcquireReply::Reserved)));
        let stale = answers
            .iter()
            .filter_map(|a| match a {
                Some(Ok(AcquireReply::Stale(counter))) => Some(*counter),
                _ => None,
            })
            .max();
        if unmarked && !marked {
            // Masters without the deployment's marker: a new deployment, marked now and
            // counted at once, or masters that lost their data, marked in quarantine.
            // Either way the attempt goes on at once, on the masters as they now are.
            marked = true;
            cluster.mark_deployment().await;
            continue;
        }
        if let Some(counter) = stale
            .filter(|_| holders.is_empty() && reserved.is_empty() && round < MAX_PROPOSAL_ROUNDS)
        {
            debug!(
                proposal,
                counter, "proposal was stale; proposing higher at once"
            );
            cluster.note_fence(counter);
            proposal = cluster.propose(name, counter).map_err(refused)?;
            continue;
        }
        let failures = failures(nodes, &answers);
        let error = if let Some(error) = super::other_permits(nodes, &answers) {
            error
        } else if holders.is_empty() && reserved.is_empty() {
            cluster.attempt_unavailable(Operation::Acquire, name, quorum, failures)
        } else {
            Error::Contended {
                name: name.to_owned(),
                holders,
                reserved,
                failures,
                unheard: tally.pending(),
                total: nodes.len(),
            }
        };
        break (error, answers);
    };
    let split = split(&answers, quorum);
    // Locks that releases handed to this waiter, whose messages may have been lost: booked
    // as if heard.
    let handed: Vec<Grant> = answers
        .iter()
        .enumerate()
        .filter_map(|(node, a)| match a {
            Some(Ok(AcquireReply::HandedOver(token, fence, sender))) => Some(Grant {
                node,
                token: token.to_string(),
                fence: *fence,
                sender: sender.clone(),
            }),
            _ => None,
        })
        .collect();
    let handed_over = !handed.is_empty();
    if let Some(q) = &queued {
        cluster.waiters.add_grants(&q.place.waiter, handed);
    }
    // A node that refused ("held by another", "another waiter first") has nothing of ours;
    // every other node may. No need to wait: the next attempt queues behind these on every
    // connection.
    let ours = |i: usize| {
        !matches!(
            answers[i],
            Some(Ok(AcquireReply::Held(..)
                | AcquireReply::Reserved
                | AcquireReply::HandedOver(..)))
        )
    };
    let how = match queued {
        // A waiter out of line has no place to keep: its grants go back as a release
        // does, passing the turn on.
        Some(q) if !q.in_line => GiveBack::PassingOn,
        // A waiter gives its grants back keeping its place there, on the terms the
        // refusing nodes queued it with, so that all the nodes agree on who goes next.
        Some(q) => {
            let terms = Terms {
                token: token.clone(),
                ttl,
                proposal,
            };
            for (i, on) in q.may_be_queued_on.iter_mut().enumerate() {
                *on |= ours(i);
            }
            GiveBack::KeepingPlace(q.place.clone(), Some(terms))
        }
        None => GiveBack::Silently,
    };
    let released = Some(cluster.release_in_background(keys, token, how, ours));
    cleanup.armed = false;
    let granted = answers.iter().any(|a| {
        matches!(
            a,
            Some(Ok(AcquireReply::Granted(_) | AcquireReply::Kept(..)))
        )
    });
    Err(FailedAttempt {
        error,
        split,
        granted,
        took: attempt_started.elapsed(),
        released,
        handed_over,
        out: answers.iter().map(kept_out).collect(),
    })
}

/// The nodes that failed, and those that granted with a kept fencing token that no quorum
/// shares (see `NodeFailureKind::FenceDisagrees`): why a hold was refused, although every
/// master may have answered.
fn with_disagreeing_fences(
    nodes: &[crate::node::Node],
    answers: &[Option<Answer<AcquireReply>>],
) -> Vec<crate::error::NodeFailure> {
    let mut all = failures(nodes, answers);
    for (node, answer) in nodes.iter().zip(answers) {
        if let Some(Ok(AcquireReply::Kept(fence, _))) = answer {
            all.push(crate::error::NodeFailure {
                node: node.addr().to_owned(),
                kind: NodeFailureKind::FenceDisagrees(*fence),
            });
        }
    }
    all
}

/// Releases an attempt's grants if the attempt's future is dropped half-way.
struct ReleaseOnDrop<'a> {
    cluster: &'a Arc<Cluster>,
    keys: &'a Arc<Keys>,
    token: &'a Arc<str>,
    armed: bool,
}

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Without a runtime the answers are not awaited, and grants not reached expire at
        // their TTL.
        let _ =
            self.cluster
                .release_in_background(self.keys, self.token, GiveBack::Silently, |_| true);
    }
}

/// Why an attempt failed, and whether it was a split vote.
pub(super) struct FailedAttempt {
    pub(super) error: Error,
    /// Other holders answered, but no one holder on a quorum of the nodes that answered:
    /// contenders arrived together and split the votes (or the answers were too few to tell).
    pub(super) split: bool,
    /// Some node granted this attempt: the caller was one of the contenders, not a waiter
    /// that only saw others' locks.
    pub(super) granted: bool,
    /// How long the attempt took.
    pub(super) took: Duration,
    /// The release of the attempt's grants, finishing in the background.
    pub(super) released: Option<Sent>,
    /// Some nodes said a release had handed the lock to this waiter.
    pub(super) handed_over: bool,
    /// Per node, what keeps it from granting for a while (see [`kept_out`]).
    pub(super) out: Vec<Option<Option<Instant>>>,
}

/// What keeps a node from granting beyond the next attempt: a quarantine, until it ends; for
/// no known time, a refusal no retry changes (a replica, a refused login, no permission, not
/// durable, unreadable) or a connection refused or dropped; `None` when it may grant at the
/// next attempt (it answered, timed out, or was just marked).
fn kept_out<T>(answer: &Option<Answer<T>>) -> Option<Option<Instant>> {
    match answer {
        Some(Err(NodeFailureKind::Quarantined(left))) => Some(Some(Instant::now() + *left)),
        // A master loading its data, or busy with a script, answers again soon.
        Some(Err(NodeFailureKind::Server(message)))
            if ["LOADING", "BUSY", "TRYAGAIN"]
                .iter()
                .any(|transient| message.contains(transient)) =>
        {
            None
        }
        Some(Err(
            NodeFailureKind::Server(_)
            | NodeFailureKind::Protocol(_)
            | NodeFailureKind::NotDurable
            | NodeFailureKind::Unverified
            | NodeFailureKind::SameServer(_)
            | NodeFailureKind::Connection(_),
        )) => Some(None),
        _ => None,
    }
}

/// What one node's answer says about a split vote.
fn vote_of(answer: &Option<Answer<AcquireReply>>) -> AcquireVote {
    match answer {
        Some(Ok(AcquireReply::Held(fence))) => AcquireVote::HeldBy(*fence),
        Some(Ok(AcquireReply::Granted(_) | AcquireReply::Kept(..))) => AcquireVote::Granted,
        Some(Ok(AcquireReply::Reserved)) => AcquireVote::Reserved,
        _ => AcquireVote::Other,
    }
}

/// Whether an attempt's answers show a split vote (see [`is_split`]).
fn split(answers: &[Option<Answer<AcquireReply>>], quorum: usize) -> bool {
    is_split(answers.iter().map(vote_of), quorum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_votes_are_told_from_one_holder() {
        let held = |f| Some(Ok(AcquireReply::Held(f)));
        let granted = Some(Ok(AcquireReply::Granted(9)));
        // One holder on three of five: held, not split.
        assert!(!split(&[held(1), held(1), held(1), None, None], 3));
        // Two holders and our own grant, nobody on three: split.
        assert!(split(
            &[held(1), held(2), held(1), granted.clone(), held(2)],
            3
        ));
        // No refusal from a holder at all (failures): not a split.
        let failed = || Some(Err(crate::NodeFailureKind::Timeout));
        assert!(!split(&[granted.clone(), failed(), None], 2));
        // One holder seen among failures (nodes that fail fast decided the vote): it may hold
        // the lock, so not a split.
        assert!(!split(&[failed(), failed(), held(4), None, None], 3));
        // One other holder and our own grant, neither on a quorum: split.
        assert!(split(&[held(4), granted.clone(), held(4), None, None], 3));
        // Our grants where other nodes have another waiter first: the queues disagree, split.
        let reserved = || Some(Ok(AcquireReply::Reserved));
        assert!(split(
            &[granted.clone(), granted, reserved(), reserved(), None],
            3
        ));
        // Another waiter first everywhere: our turn has not come, not a split.
        assert!(!split(&[reserved(), reserved(), reserved(), None, None], 3));
        // A holder taking the nodes where it was first: not a split either.
        assert!(!split(&[held(4), held(4), reserved(), reserved(), None], 3));
    }

    #[test]
    fn what_keeps_a_master_out_beyond_the_next_attempt() {
        let failed = |kind| Some(Err::<AcquireReply, _>(kind));
        let in_a_minute = kept_out(&failed(NodeFailureKind::Quarantined(Duration::from_secs(
            60,
        ))));
        assert!(in_a_minute.is_some_and(|until| until.is_some()));
        // A replica, a refused login: no known end.
        let replica =
            NodeFailureKind::Server("READONLY You can't write against a read only replica.".into());
        assert_eq!(kept_out(&failed(replica)), Some(None));
        assert_eq!(kept_out(&failed(NodeFailureKind::NotDurable)), Some(None));
        // Passing states: loading, busy, a missed deadline, a marking under way, an answer.
        let loading =
            NodeFailureKind::Server("LOADING Redis is loading the dataset in memory".into());
        assert_eq!(kept_out(&failed(loading)), None);
        assert_eq!(kept_out(&failed(NodeFailureKind::Timeout)), None);
        assert_eq!(kept_out(&failed(NodeFailureKind::Unmarked)), None);
        assert_eq!(kept_out(&Some(Ok(AcquireReply::Reserved))), None);
        assert_eq!(kept_out::<AcquireReply>(&None), None);
    }
}
