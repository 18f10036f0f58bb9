//! A connection to one master that the tasks calling it drive themselves: a command is written
//! by the task that sends it, and replies are read by one of the tasks waiting for them, which
//! hands each reply to its caller.
//!
//! There is no connection task and no channel to one. With one (redis-rs's multiplexed
//! connection), each command goes from the caller's task to the connection's and its reply
//! back: two wake-ups per call, and on a multi-thread runtime a task woken behind another
//! wakes an idle worker thread too (a futex call and a context switch each). Here a caller
//! with one command on each of five masters is woken by the masters' replies alone.
//!
//! Commands go out in the order they are sent: each is appended under the connection's lock,
//! also while the connection is still being made (then after the login, whose answers must be
//! in first). A call dropped before its reply leaves its command to be written and its reply
//! to be read and dropped by the next reader; nothing sent is lost.
//!
//! One waiter reads at a time (the reader), so that the socket's single read wake-up goes to
//! it; when it has what it waited for, or is dropped, it wakes the next one to read in its
//! place. A task waits on the socket in preference to background work (a detached future, see
//! `detached.rs`, or the keeper of a subscription): a task's call or listener takes the
//! reading from background work, never the other way round.
//!
//! A subscription connection is one whose values, once its login and `SUBSCRIBE` are
//! answered, are messages: [`Listening`] reads them.

mod state;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};

use redis::{RedisError, RedisResult, Value};
use tokio::io::{AsyncRead, AsyncWrite};

use super::detached::{Background, Polling, marked, polling};
use crate::error::Operation;
use crate::metrics::NodeMetrics;
use state::State;

/// A byte stream to a master: plain TCP or TLS.
pub(super) trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

/// A connection to one master; clones share it.
#[derive(Clone)]
pub(crate) struct Wire {
    shared: Arc<Shared>,
}

/// What a connection's handles share.
struct Shared {
    state: Mutex<State>,
    /// The master's process (`run_id`), when the login read it (a subscription's does): every
    /// value read on the connection comes from that process, since a connection does not
    /// outlive the process it was made to.
    identity: OnceLock<Arc<str>>,
    /// The client's detached futures, which its tasks' calls finish (see `detached.rs`).
    background: Arc<Background>,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wire").finish_non_exhaustive()
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    // A panic while holding the lock leaves bytes half parsed at worst; the next read that
    // finds them malformed breaks the connection, which is then made anew.
    shared.state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `f` on the state, then makes the wake-ups it asked for, once the lock is let go.
fn with_state<T>(shared: &Shared, f: impl FnOnce(&mut State) -> T) -> T {
    let mut guard = lock(shared);
    let out = f(&mut guard);
    let to_wake = guard.take_wakes();
    drop(guard);
    let wake_all = || to_wake.into_iter().for_each(Waker::wake);
    if polling() == Polling::Task {
        marked(Polling::Handover, wake_all);
    } else {
        wake_all();
    }
    out
}

impl Wire {
    /// A connection still being made: commands sent now go out once [`Wire::attach`] gives it
    /// a stream and the `login` commands (sent first) have been answered without error, which
    /// the returned call (when there is a login) says; see [`Wire::open`]. On a subscriber,
    /// every value after the login's answers is a message.
    pub(super) fn connecting(
        metrics: Arc<NodeMetrics>,
        background: Arc<Background>,
        login: &[redis::Cmd],
        subscriber: bool,
    ) -> (Self, Option<Call>) {
        let wire = Wire {
            shared: Arc::new(Shared {
                state: Mutex::new(State::new(metrics, subscriber)),
                identity: OnceLock::new(),
                background,
            }),
        };
        if login.is_empty() {
            return (wire, None);
        }
        let call = wire.call(None, login.len(), |out| {
            for cmd in login {
                cmd.write_packed_command(out);
            }
        });
        lock(&wire.shared).close_gate();
        (wire, Some(call))
    }

    /// Gives the connection its stream: the login goes out, and the calls sent so far wait
    /// for it.
    pub(super) fn attach(&self, stream: Box<dyn Stream>) {
        with_state(&self.shared, |state| state.attach(stream));
    }

    /// Books the master's process as the login read it, before [`Wire::open`].
    pub(super) fn identify(&self, run_id: &str) {
        let _ = self.shared.identity.set(run_id.into());
    }

    /// The login was answered without error: every command sent goes out.
    pub(super) fn open(&self) {
        with_state(&self.shared, State::open);
    }

    /// Breaks the connection: every call waiting, and every later one, is answered with `e`.
    pub(super) fn fail(&self, e: RedisError) {
        with_state(&self.shared, |state| state.fail(e, None));
    }

    /// Whether the connection is broken (every call on it fails).
    pub(crate) fn is_broken(&self) -> bool {
        lock(&self.shared).is_broken()
    }

    /// Whether the connection is broken, or was closed by its master while nothing waited on
    /// it (which breaks it now; see `State::closed_while_idle`).
    pub(crate) fn is_broken_or_closed(&self) -> bool {
        with_state(&self.shared, State::closed_while_idle)
    }

    /// Whether the connection is up and logged in.
    pub(crate) fn is_open(&self) -> bool {
        lock(&self.shared).is_open()
    }

    /// Sends the commands that `write` packs (RESP) and answers with their `expected`
    /// replies. The commands are queued, and written if the socket takes them, before this
    /// returns: dropping the call does not unsend them. `op`, when given, is what the reply's
    /// time is booked under in the node's request duration metric.
    pub(super) fn call(
        &self,
        op: Option<Operation>,
        expected: usize,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Call {
        let id = with_state(&self.shared, |state| state.send(op, expected, write));
        Call {
            wire: self.shared.clone(),
            id,
            done: false,
        }
    }

    /// Sends a pipeline of `count` commands and answers with their replies.
    pub(super) async fn send_pipeline(
        &self,
        op: Operation,
        pipe: &redis::Pipeline,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.call(Some(op), count, |out| {
            out.extend_from_slice(&pipe.get_packed_pipeline());
        })
        .await
    }

    /// Reads this subscriber's messages: a task's listener (`background` false) reads in
    /// preference to background work, and is handed the reading when the reader leaves.
    pub(crate) fn listen(&self, background: bool) -> Listening {
        let id = with_state(&self.shared, |state| state.add_listener(background));
        Listening {
            wire: self.shared.clone(),
            id,
        }
    }
}

/// The answer to one [`Wire::call`].
pub(super) struct Call {
    wire: Arc<Shared>,
    id: u64,
    done: bool,
}

impl Future for Call {
    type Output = RedisResult<Vec<Value>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let background = polling() == Polling::Detached;
        let me = self.id;
        let answer = polled(&self.wire, cx, background, |state, cx| {
            state.poll_call(cx, me, background)
        });
        if answer.is_ready() {
            self.done = true;
        }
        answer
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if !self.done {
            with_state(&self.wire, |state| state.abandon(self.id));
        }
    }
}

/// Runs one poll of the state for a waiter whose task (or detached future, when `background`)
/// is woken by `cx`, then makes the wake-ups asked for, other than this task's own. A task's
/// poll then finishes the detached futures whose answers it read.
fn polled<T>(
    wire: &Shared,
    cx: &mut Context<'_>,
    background: bool,
    f: impl FnOnce(&mut State, &mut Context<'_>) -> T,
) -> T {
    let mark = if background {
        Polling::Detached
    } else {
        Polling::TaskCall
    };
    let out = marked(mark, || {
        let mut state = lock(wire);
        let out = f(&mut state, cx);
        let to_wake = state.take_wakes();
        drop(state);
        for waker in to_wake {
            // The task being polled needs no wake-up.
            if !waker.will_wake(cx.waker()) {
                waker.wake();
            }
        }
        out
    });
    if !background {
        wire.background.run_ready();
    }
    out
}

/// A listener to a subscriber's messages (see [`Wire::listen`]).
pub(crate) struct Listening {
    wire: Arc<Shared>,
    id: u64,
}

/// What a listener found.
#[derive(Debug, Default)]
pub(crate) struct Heard {
    /// Messages read since any listener last looked.
    pub(crate) messages: Vec<Value>,
    /// The connection is broken: no message comes on it any more.
    pub(crate) broken: bool,
}

impl Listening {
    /// The process of the master whose messages these are, if the login read it (see
    /// [`Wire::identify`]); known before any message is handed out.
    pub(crate) fn identity(&self) -> Option<Arc<str>> {
        self.wire.identity.get().cloned()
    }

    /// The messages read so far, reading what the socket has when no one else reads; `cx` is
    /// woken when more may be read (or this listener is handed the reading).
    pub(crate) fn poll_heard(&mut self, cx: &mut Context<'_>) -> Heard {
        let me = self.id;
        polled(&self.wire, cx, false, |state, cx| {
            state.poll_listener(cx, me)
        })
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        with_state(&self.wire, |state| state.remove_listener(self.id));
    }
}
