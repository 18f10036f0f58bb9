//! Sends one operation to every node at once and collects answers until the vote is decided.
//!
//! The per-node futures are polled together on the caller's task: no task is spawned per call.
//! When the vote is decided early, the stragglers are detached (see `node::Background`): their
//! commands are sent already, and what each does with its answer is done when the answer is
//! read, by whichever task reads that connection. A key on more nodes than the quorum is what
//! lets a lock survive a node that restarts empty, and a straggler's answer still counts for
//! what the client knows of its node (health, the scripts it has, request durations).

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Instant;

use tokio::sync::oneshot;

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
    // Every node's call, polled in turn on each wake-up of the caller's task: with a handful
    // of nodes that costs less than keeping a ready queue (`FuturesUnordered`, which also
    // wakes its task again after polling every future once, a second trip through the
    // runtime's queue on each fan-out).
    let mut pending: Vec<Option<(usize, Pin<Box<Fut>>)>> = (0..nodes.len())
        .map(|i| Some((i, Box::pin(call(i)))))
        .collect();
    // On the client's watcher rather than a timer of the runtime's own (see `Deadlines`).
    let mut timer = match nodes.first() {
        Some(node) => node.deadlines().sleep_until(deadline),
        None => return answers,
    };
    let decided = std::future::poll_fn(|cx| {
        for slot in pending.iter_mut() {
            let Some((i, fut)) = slot else { continue };
            if let Poll::Ready(answer) = fut.as_mut().poll(cx) {
                let i = *i;
                *slot = None;
                let decision = decide(i, &answer);
                answers[i] = Some(answer);
                if decision != Decision::Pending {
                    return Poll::Ready(true);
                }
            }
        }
        // Answers that are ready count before the deadline does.
        if pending.iter().all(Option::is_none) {
            return Poll::Ready(true);
        }
        Pin::new(&mut timer).poll(cx).map(|()| false)
    })
    .await;
    if decided {
        for (i, straggler) in pending.into_iter().flatten() {
            drop(nodes[i].background().detach(straggler));
        }
    } else {
        for (i, slot) in answers.iter_mut().enumerate() {
            if slot.is_none() {
                nodes[i].record_timeout(op);
                let answer = Err(NodeFailureKind::Timeout);
                decide(i, &answer);
                *slot = Some(answer);
            }
        }
    }
    answers
}

/// Sends `call` to every node and returns without waiting for the answers, which are
/// awaited in the background (see [`Background::detach`](crate::node::Background::detach)):
/// each command is sent before this returns.
pub(crate) fn send_and_detach<F, Fut>(nodes: &[Node], deadline: Instant, call: F) -> Sent
where
    F: Fn(usize) -> Fut,
    Fut: Future + Send + 'static,
    Fut::Output: Send,
{
    let all = futures::future::join_all((0..nodes.len()).map(call));
    let answered = match nodes.first() {
        Some(node) => node.background().detach(all),
        None => oneshot::channel().1,
    };
    Sent { answered, deadline }
}

/// Commands sent to the nodes whose answers are awaited in the background.
#[derive(Debug)]
pub(crate) struct Sent {
    answered: oneshot::Receiver<()>,
    deadline: Instant,
}

impl Sent {
    /// Waits until every answer is in, or until the deadline.
    pub(crate) async fn answered(self) {
        let _ = tokio::time::timeout_at(self.deadline.into(), self.answered).await;
    }
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
