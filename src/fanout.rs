//! Sends one operation to every node at once and collects answers until the vote is decided.
//!
//! The per-node futures are polled together on the caller's task: no task is spawned per call.
//! When the vote is decided early, the stragglers' futures are dropped; their commands are
//! already written to the nodes' connections, so they still run there, in order with whatever
//! the caller sends next on the same connections (a release after a failed acquire, say).

use std::future::Future;
use std::time::Instant;

use futures::StreamExt;
use futures::stream::FuturesUnordered;

use crate::error::{NodeFailureKind, Operation};
use crate::node::Node;
use crate::quorum::Decision;

/// One node's answer; `None` in a [`fan_out`] result means the vote was decided before it came.
pub(crate) type Answer<T> = Result<T, NodeFailureKind>;

/// Calls `call` (with each node's index) on every node at once and feeds each answer to `decide`, in arrival order,
/// until it returns something other than [`Decision::Pending`], every node has answered, or
/// `deadline` passes. A node still silent at the deadline is answered with
/// [`NodeFailureKind::Timeout`] (and fed to `decide` too).
pub(crate) async fn fan_out<'a, T, F, Fut>(
    nodes: &'a [Node],
    op: Operation,
    deadline: Instant,
    call: F,
    mut decide: impl FnMut(usize, &Answer<T>) -> Decision,
) -> Vec<Option<Answer<T>>>
where
    F: Fn(usize, &'a Node) -> Fut,
    Fut: Future<Output = Answer<T>>,
{
    let mut answers: Vec<Option<Answer<T>>> = nodes.iter().map(|_| None).collect();
    let mut pending: FuturesUnordered<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let fut = call(i, node);
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
