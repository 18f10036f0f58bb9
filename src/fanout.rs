//! Sends one operation to every node at once and collects answers until the vote is decided.
//!
//! No task is spawned per call: each node's call is detached (see `node::Background`), sent at
//! once, and polled where its answer is read; the answer waits in an inbox for the caller's
//! task, which is woken only once enough answers are in to decide. When the vote is decided
//! early, the stragglers finish in the background: what each does with its answer is done when
//! the answer is read. A key on more nodes than the quorum is what lets a lock survive a node
//! that restarts empty, and a straggler's answer still counts for what the client knows of its
//! node (health, the scripts it has, request durations).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Instant;

use futures::task::AtomicWaker;
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
    decide: impl FnMut(usize, &Answer<T>) -> Decision,
) -> Vec<Option<Answer<T>>>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Answer<T>> + Send + 'static,
    T: Send + 'static,
{
    fan_out_deciding_from(nodes, op, deadline, call, 1, decide).await
}

/// A [`fan_out`] whose `decide` can return something other than [`Decision::Pending`] only
/// once `first_decision` nodes have answered: the caller's task is woken then, and after that
/// at each answer, rather than at every answer.
///
/// Every node's call is detached from the start (see `node::Background`): it is polled where
/// its answer is read (on a multi-thread runtime, often on the thread that read the socket's
/// event), and leaves the answer in an [`Inbox`]. A task woken at each answer, only to find the
/// vote still open, costs a trip through the runtime's queue each time; on a multi-thread
/// runtime, with another task made ready by the same events (the next holder that a release
/// hands the lock to), it also wakes the runtime's other worker thread.
pub(crate) async fn fan_out_deciding_from<T, F, Fut>(
    nodes: &[Node],
    op: Operation,
    deadline: Instant,
    call: F,
    first_decision: usize,
    mut decide: impl FnMut(usize, &Answer<T>) -> Decision,
) -> Vec<Option<Answer<T>>>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Answer<T>> + Send + 'static,
    T: Send + 'static,
{
    let mut answers: Vec<Option<Answer<T>>> = nodes.iter().map(|_| None).collect();
    // On the client's watcher rather than a timer of the runtime's own (see `Deadlines`).
    let mut timer = match nodes.first() {
        Some(node) => node.deadlines().sleep_until(deadline),
        None => return answers,
    };
    let inbox = Arc::new(Inbox::new(first_decision.clamp(1, nodes.len())));
    for (i, node) in nodes.iter().enumerate() {
        let (inbox, call) = (inbox.clone(), call(i));
        drop(node.background().detach(async move {
            let answer = call.await;
            inbox.deliver(i, answer);
        }));
    }
    let mut heard = 0;
    let decided = std::future::poll_fn(|cx| {
        inbox.waker.register(cx.waker());
        for (i, answer) in inbox.take() {
            heard += 1;
            let decision = decide(i, &answer);
            answers[i] = Some(answer);
            if decision != Decision::Pending {
                return Poll::Ready(true);
            }
        }
        // Answers that are in count before the deadline does.
        if heard == nodes.len() {
            return Poll::Ready(true);
        }
        Pin::new(&mut timer).poll(cx).map(|()| false)
    })
    .await;
    // Later answers are dropped where they arrive; each call has done all else with its own.
    let late = inbox.close();
    if !decided {
        for (i, answer) in late {
            if answers[i].is_none() {
                decide(i, &answer);
                answers[i] = Some(answer);
            }
        }
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

/// The answers of a [`fan_out_deciding_from`], left where each is read, in arrival order.
struct Inbox<T> {
    state: Mutex<InboxState<T>>,
    waker: AtomicWaker,
}

struct InboxState<T> {
    arrived: Vec<(usize, Answer<T>)>,
    /// Answers delivered in all.
    delivered: usize,
    /// How many answers wake the caller.
    wake_at: usize,
    /// The caller is done: answers are dropped.
    closed: bool,
}

impl<T> Inbox<T> {
    fn new(wake_at: usize) -> Self {
        Inbox {
            state: Mutex::new(InboxState {
                arrived: Vec::new(),
                delivered: 0,
                wake_at,
                closed: false,
            }),
            waker: AtomicWaker::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, InboxState<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn deliver(&self, node: usize, answer: Answer<T>) {
        let wake = {
            let mut state = self.lock();
            if state.closed {
                return;
            }
            state.arrived.push((node, answer));
            state.delivered += 1;
            state.delivered >= state.wake_at
        };
        if wake {
            self.waker.wake();
        }
    }

    fn take(&self) -> Vec<(usize, Answer<T>)> {
        std::mem::take(&mut self.lock().arrived)
    }

    /// Stops taking answers; those delivered but not taken yet.
    fn close(&self) -> Vec<(usize, Answer<T>)> {
        let mut state = self.lock();
        state.closed = true;
        std::mem::take(&mut state.arrived)
    }
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

/// How long a [`vote_settled`] listens beyond its decision.
pub(crate) struct Hearing<S> {
    /// Whether the yes votes so far settle the outcome (see [`vote_settled`]).
    pub(crate) settled: S,
    /// Whether a lost vote still waits for the other nodes' answers.
    pub(crate) refusals_out: bool,
    /// Whether the vote waits for every node's answer (or the deadline), whatever they say:
    /// the caller's task is then woken once, when the last answer is in.
    pub(crate) every_answer: bool,
}

/// A [`fan_out`] that counts votes: an answer `Ok(v)` is a yes when `grants(&v)`, a no
/// otherwise, and an `Err` is a failure. Stops as soon as `needed` said yes or can no longer
/// say so; each node's answer is logged at debug level. Once `needed` said yes, it goes on
/// collecting answers while `settled` says the yes votes so far leave the outcome open
/// (grants that disagree on a lock's kept fencing token, a reader's masters that disagree on
/// its recorded one, which later answers may settle), until every node has answered or the
/// deadline.
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
        every_answer,
    } = hearing;
    let mut tally = Tally::needing(nodes.len(), needed);
    let mut open = false;
    // A vote is decided no sooner than `needed` answers said yes, or enough said anything else
    // that `needed` no longer can.
    let first_decision = if every_answer {
        nodes.len()
    } else {
        needed.min((nodes.len() + 1).saturating_sub(needed))
    };
    let answers = fan_out_deciding_from(nodes, op, deadline, call, first_decision, |i, answer| {
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
            _ if every_answer && tally.pending() > 0 => Decision::Pending,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct CountingWaker(AtomicUsize);

    impl futures::task::ArcWake for CountingWaker {
        fn wake_by_ref(arc_self: &Arc<Self>) {
            arc_self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_caller_is_woken_once_enough_answers_are_in_and_at_each_one_after() {
        let inbox: Inbox<u8> = Inbox::new(3);
        let wakes = Arc::new(CountingWaker(AtomicUsize::new(0)));
        inbox.waker.register(&futures::task::waker(wakes.clone()));
        inbox.deliver(4, Ok(1));
        inbox.deliver(0, Err(NodeFailureKind::Timeout));
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            0,
            "woken before a decision was possible"
        );
        inbox.deliver(2, Ok(3));
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        let taken: Vec<usize> = inbox.take().into_iter().map(|(node, _)| node).collect();
        assert_eq!(taken, [4, 0, 2], "answers in arrival order");
        inbox.waker.register(&futures::task::waker(wakes.clone()));
        inbox.deliver(1, Ok(5));
        assert_eq!(wakes.0.load(Ordering::SeqCst), 2);
        // Once the caller is done, answers are dropped where they arrive, and wake nobody.
        let late: Vec<usize> = inbox.close().into_iter().map(|(node, _)| node).collect();
        assert_eq!(late, [1]);
        inbox.waker.register(&futures::task::waker(wakes.clone()));
        inbox.deliver(3, Ok(6));
        assert_eq!(wakes.0.load(Ordering::SeqCst), 2);
        assert!(inbox.take().is_empty());
    }
}
