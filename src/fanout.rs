//! Sends one operation to every node at once and collects answers until the vote is decided.
//!
//! The per-node futures are polled together on the caller's task: no task is spawned per call.
//! When the vote is decided early, the stragglers are handed to one background task that
//! drives them to their answer or to the deadline, whichever comes first. Dropping them instead
//! would lose any command not yet queued on its connection (a node still connecting, or a full
//! send queue), and a key on more nodes than the quorum is what lets a lock survive a node
//! that restarts empty.

use std::future::Future;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::task::JoinHandle;

use crate::error::{NodeFailure, NodeFailureKind, Operation};
use crate::node::Node;
use crate::quorum::{Decision, Tally};

/// One node's answer; `None` in a [`fan_out`] result means the vote was decided before it came.
pub(crate) type Answer<T> = Result<T, NodeFailureKind>;

/// Calls `call` with each node's index, on every node at once, and feeds each answer to `decide`, in arrival order,
/// until it returns something other than [`Decision::Pending`], every node has answered, or
/// `deadline` passes. A node still silent at the deadline is answered with
/// [`NodeFailureKind::Timeout`] (and fed to `decide` too).
pub(crate) async fn fan_out<T, F, Fut>(
    nodes: &[Node],
    op: Operation,
    deadline: Instant,
    call: F,
    mut decide: impl FnMut(usize, &Answer<T>) -> Decision,
) -> Vec<Option<Answer<T>>>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Answer<T>> + Send + 'static,
    T: Send + 'static,
{
    let mut answers: Vec<Option<Answer<T>>> = nodes.iter().map(|_| None).collect();
    let mut pending: FuturesUnordered<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, _)| {
            let fut = call(i);
            async move { (i, fut.await) }
        })
        .collect();
    let timer = tokio::time::sleep_until(deadline.into());
    tokio::pin!(timer);
    loop {
        tokio::select! {
            // Answers that are ready count before the deadline does.
            biased;
            next = pending.next() => {
                let Some((i, answer)) = next else { break };
                let decision = decide(i, &answer);
                answers[i] = Some(answer);
                if decision != Decision::Pending {
                    let _ = finish_in_background(pending, deadline);
                    break;
                }
            }
            () = &mut timer => {
                for (i, slot) in answers.iter_mut().enumerate() {
                    if slot.is_none() {
                        nodes[i].record_timeout(op);
                        let answer = Err(NodeFailureKind::Timeout);
                        decide(i, &answer);
                        *slot = Some(answer);
                    }
                }
                break;
            }
        }
    }
    answers
}

/// Sends `call` to every node and returns without waiting for the answers, which are awaited
/// in the background until `deadline` (see [`finish_in_background`]: each command is sent
/// before this returns, when its connection is up). The handle, when there is one, finishes
/// when every answer is in or the deadline has passed.
pub(crate) fn send_and_detach<F, Fut>(
    nodes: usize,
    deadline: Instant,
    call: F,
) -> Option<JoinHandle<()>>
where
    F: Fn(usize) -> Fut,
    Fut: Future + Send + 'static,
    Fut::Output: Send,
{
    finish_in_background((0..nodes).map(call).collect(), deadline)
}

/// Drives the stragglers of a decided vote to their answers, for at most until `deadline`.
///
/// Each straggler is polled once here, before this returns. `FuturesUnordered` hands back the
/// first answer it gets without polling the rest, so a vote decided by fast failures (a dead
/// node refuses at once) may leave futures that have not sent their command yet; sending it
/// later, from the background task, would put it behind whatever the caller sends next (the
/// cleanup release of a failed attempt), and a grant would land after its own release.
fn finish_in_background<S>(
    mut stragglers: FuturesUnordered<S>,
    deadline: Instant,
) -> Option<JoinHandle<()>>
where
    S: Future + Send + 'static,
    S::Output: Send,
{
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    while let Poll::Ready(Some(_)) = stragglers.poll_next_unpin(&mut cx) {}
    if stragglers.is_empty() {
        return None;
    }
    // Without a runtime there is nothing to drive them; their keys expire at the TTL.
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    Some(runtime.spawn(async move {
        let drain = stragglers.for_each(|_| async {});
        let _ = tokio::time::timeout_at(deadline.into(), drain).await;
    }))
}

/// A [`fan_out`] that counts votes: an answer `Ok(v)` is a yes when `grants(&v)`, a no
/// otherwise, and an `Err` is a failure. Stops as soon as `needed` said yes or can no longer
/// say so; each node's answer is logged at debug level.
pub(crate) async fn vote<T, F, Fut>(
    nodes: &[Node],
    needed: usize,
    op: Operation,
    deadline: Instant,
    call: F,
    grants: impl Fn(&T) -> bool,
) -> (Tally, Vec<Option<Answer<T>>>)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Answer<T>> + Send + 'static,
    T: Send + std::fmt::Debug + 'static,
{
    let hearing = Hearing {
        settled: |_: &T| true,
        refusals_out: false,
    };
    vote_settled(nodes, needed, op, deadline, call, grants, hearing).await
}

/// How long a [`vote_settled`] listens beyond its decision.
pub(crate) struct Hearing<S> {
    /// Whether the yes votes so far settle the outcome (see [`vote_settled`]).
    pub(crate) settled: S,
    /// Whether a lost vote still waits for the other nodes' answers.
    pub(crate) refusals_out: bool,
}

/// A [`vote`] that, once `needed` said yes, goes on collecting answers while `settled` says the
/// yes votes so far leave the outcome open (grants that disagree on a lock's kept fencing
/// token, which later answers may settle), until every node has answered or the deadline.
/// `hearing.settled` is fed every yes vote in arrival order and says whether the outcome is
/// settled with it. With `hearing.refusals_out`, a vote that can no longer pass also waits for
/// the other answers (until the deadline), so that the caller knows which nodes refused.
pub(crate) async fn vote_settled<T, F, Fut>(
    nodes: &[Node],
    needed: usize,
    op: Operation,
    deadline: Instant,
    call: F,
    grants: impl Fn(&T) -> bool,
    hearing: Hearing<impl FnMut(&T) -> bool>,
) -> (Tally, Vec<Option<Answer<T>>>)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Answer<T>> + Send + 'static,
    T: Send + std::fmt::Debug + 'static,
{
    let Hearing {
        mut settled,
        refusals_out,
    } = hearing;
    let mut tally = Tally::needing(nodes.len(), needed);
    let mut open = false;
    let answers = fan_out(nodes, op, deadline, call, |i, answer| {
        tracing::debug!(node = nodes[i].addr(), operation = op.as_str(), answer = ?answer);
        match answer {
            Ok(v) if grants(v) => {
                tally.yes();
                open = !settled(v);
            }
            Ok(_) => tally.no(),
            Err(_) => tally.failed(),
        }
        match tally.decision() {
            Decision::Reached if open && tally.pending() > 0 => Decision::Pending,
            Decision::Impossible if refusals_out && tally.pending() > 0 => Decision::Pending,
            decision => decision,
        }
    })
    .await;
    (tally, answers)
}

/// The addresses of the nodes whose answer matches.
pub(crate) fn addrs_where<T>(
    nodes: &[Node],
    answers: &[Option<Answer<T>>],
    pred: impl Fn(&Answer<T>) -> bool,
) -> Vec<String> {
    nodes
        .iter()
        .zip(answers)
        .filter(|(_, a)| a.as_ref().is_some_and(&pred))
        .map(|(n, _)| n.addr().to_owned())
        .collect()
}

/// The nodes that failed, and how.
pub(crate) fn failures<T>(nodes: &[Node], answers: &[Option<Answer<T>>]) -> Vec<NodeFailure> {
    nodes
        .iter()
        .zip(answers)
        .filter_map(|(n, a)| match a {
            Some(Err(kind)) => Some(NodeFailure {
                node: n.addr().to_owned(),
                kind: kind.clone(),
            }),
            _ => None,
        })
        .collect()
}
