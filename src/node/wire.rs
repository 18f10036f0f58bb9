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
//! to be read and dropped by the next reader; nothing sent is lost. One waiting call reads at
//! a time (`reader`), so that the socket's single read wake-up goes to it; when it has its
//! reply, or is dropped, it wakes the next waiting call to read in its place. A task's call
//! takes the reading from a detached one (see `detached.rs`), never the other way round.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use redis::{RedisError, RedisResult, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::detached::{Polling, marked, polling, run_ready};
use super::resp::reply_len;
use crate::error::Operation;
use crate::metrics::NodeMetrics;

/// A byte stream to a master: plain TCP or TLS.
pub(super) trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

/// The read buffer's size to begin with, and the least room a read is given.
const READ_CHUNK: usize = 16 * 1024;

/// A connection to one master; clones share it.
#[derive(Clone)]
pub(crate) struct Wire {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wire").finish_non_exhaustive()
    }
}

struct State {
    /// `None` while the connection is being made.
    stream: Option<Box<dyn Stream>>,
    /// Bytes of commands not yet written, from `written` on.
    unsent: Vec<u8>,
    written: usize,
    /// While the login's answers are not in: how many bytes at the front of `unsent` (the
    /// login's) may be written. A command must not reach a master the client has not logged
    /// in to, nor the database 0 of one whose `SELECT` failed.
    gate: Option<usize>,
    /// Bytes read and not yet parsed: `input[parsed..filled]`.
    input: Vec<u8>,
    parsed: usize,
    filled: usize,
    /// Calls whose replies have not all come, in the order their commands were sent.
    waiting: VecDeque<Waiting>,
    /// Calls answered whose callers have not taken the answer yet.
    answered: Vec<(u64, RedisResult<Vec<Value>>)>,
    next_call: u64,
    /// The call that reads replies now.
    reader: Option<Reader>,
    /// Why the connection is unusable, once it is.
    broken: Option<RedisError>,
    /// Wake-ups to make once the lock is let go.
    to_wake: Vec<Waker>,
    metrics: Arc<NodeMetrics>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reader {
    call: u64,
    detached: bool,
}

struct Waiting {
    call: u64,
    /// How many replies the call's commands get.
    expected: usize,
    replies: Vec<Value>,
    waker: Option<Waker>,
    /// Polled by a detached future, not a task.
    detached: bool,
    /// Dropped by its caller: its replies are read and dropped.
    abandoned: bool,
    /// For the node's request duration metric.
    op: Option<Operation>,
    sent: Instant,
}

impl Wire {
    /// A connection still being made: commands sent now go out once [`Wire::attach`] gives it
    /// a stream and the `login` commands (sent first) have been answered without error, which
    /// the returned call (when there is a login) says; see [`Wire::open`].
    pub(super) fn connecting(
        metrics: Arc<NodeMetrics>,
        login: &[redis::Cmd],
    ) -> (Self, Option<Call>) {
        let wire = Wire {
            state: Arc::new(Mutex::new(State {
                stream: None,
                unsent: Vec::new(),
                written: 0,
                gate: None,
                input: vec![0; READ_CHUNK],
                parsed: 0,
                filled: 0,
                waiting: VecDeque::new(),
                answered: Vec::new(),
                next_call: 0,
                reader: None,
                broken: None,
                to_wake: Vec::new(),
                metrics,
            })),
        };
        if login.is_empty() {
            return (wire, None);
        }
        let call = wire.call(None, login.len(), |out| {
            for cmd in login {
                cmd.write_packed_command(out);
            }
        });
        {
            let mut state = lock(&wire.state);
            state.gate = Some(state.unsent.len());
        }
        (wire, Some(call))
    }

    /// Gives the connection its stream: the login goes out, and the calls sent so far wait
    /// for it.
    pub(super) fn attach(&self, stream: Box<dyn Stream>) {
        self.with_state(|state| {
            if state.broken.is_none() {
                state.stream = Some(stream);
                state.flush(&mut Context::from_waker(Waker::noop()), None);
                state.wake_next(None);
            }
        });
    }

    /// The login was answered without error: every command sent goes out.
    pub(super) fn open(&self) {
        self.with_state(|state| {
            state.gate = None;
            state.flush(&mut Context::from_waker(Waker::noop()), None);
            state.wake_next(None);
        });
    }

    /// Breaks the connection: every call waiting, and every later one, is answered with `e`.
    pub(super) fn fail(&self, e: RedisError) {
        self.with_state(|state| {
            if state.broken.is_none() {
                state.fail(e, None);
            }
        });
    }

    /// Whether the connection is broken (every call on it fails).
    pub(super) fn is_broken(&self) -> bool {
        lock(&self.state).broken.is_some()
    }

    fn with_state(&self, f: impl FnOnce(&mut State)) {
        let mut state = lock(&self.state);
        f(&mut state);
        let to_wake = std::mem::take(&mut state.to_wake);
        drop(state);
        to_wake.into_iter().for_each(Waker::wake);
    }

    /// Sends the commands that `write` packs (RESP) and answers with their `expected`
    /// replies. The commands are queued, and written if the socket takes them, before this
    /// returns: dropping the call does not unsend them.
    pub(super) fn call(
        &self,
        op: Option<Operation>,
        expected: usize,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Call {
        let mut state = lock(&self.state);
        let call = state.next_call;
        state.next_call += 1;
        if let Some(e) = &state.broken {
            let e = e.clone();
            state.answered.push((call, Err(e)));
        } else {
            let idle = state.unsent.is_empty();
            write(&mut state.unsent);
            state.waiting.push_back(Waiting {
                call,
                expected,
                replies: Vec::with_capacity(expected),
                waker: None,
                detached: false,
                abandoned: false,
                op,
                sent: Instant::now(),
            });
            // Written at once, unless earlier bytes wait for the socket: the waker a stalled
            // write registered must stay the one that is woken.
            if idle {
                state.flush(&mut Context::from_waker(Waker::noop()), None);
            }
        }
        let to_wake = std::mem::take(&mut state.to_wake);
        drop(state);
        to_wake.into_iter().for_each(Waker::wake);
        Call {
            wire: self.state.clone(),
            id: call,
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
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock leaves bytes half parsed at worst; the next read that
    // finds them malformed breaks the connection, which is then made anew.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The answer to one [`Wire::call`].
pub(super) struct Call {
    wire: Arc<Mutex<State>>,
    id: u64,
    done: bool,
}

impl Future for Call {
    type Output = RedisResult<Vec<Value>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let detached = polling() == Polling::Detached;
        let me = self.id;
        let (answer, to_wake) = marked(
            if detached {
                Polling::Detached
            } else {
                Polling::TaskCall
            },
            || {
                let mut state = lock(&self.wire);
                let answer = state.poll_call(cx, me, detached);
                (answer, std::mem::take(&mut state.to_wake))
            },
        );
        if answer.is_ready() {
            self.done = true;
        }
        if detached {
            to_wake.into_iter().for_each(Waker::wake);
        } else {
            marked(Polling::TaskCall, || {
                for waker in to_wake {
                    // This task is being polled already.
                    if !waker.will_wake(cx.waker()) {
                        waker.wake();
                    }
                }
            });
            // Detached futures whose answers this task read: finished on its way out.
            run_ready();
        }
        answer
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = lock(&self.wire);
        if let Some(i) = state.answered.iter().position(|(call, _)| *call == self.id) {
            drop(state.answered.swap_remove(i));
        } else if let Some(w) = state.waiting.iter_mut().find(|w| w.call == self.id) {
            w.abandoned = true;
            w.waker = None;
        }
        let stalled_write = state.written < state.unsent.len();
        let was_reader = state.reader.is_some_and(|r| r.call == self.id);
        if was_reader {
            state.reader = None;
        }
        if was_reader || stalled_write {
            // Someone else must read (and write what is left): the reader, polled again, also
            // waits for the socket to take the rest.
            match state.reader {
                Some(r) => {
                    if let Some(waker) = state
                        .waiting
                        .iter()
                        .find(|w| w.call == r.call)
                        .and_then(|w| w.waker.clone())
                    {
                        state.to_wake.push(waker);
                    }
                }
                None => state.wake_next(Some(self.id)),
            }
        }
        let to_wake = std::mem::take(&mut state.to_wake);
        drop(state);
        to_wake.into_iter().for_each(Waker::wake);
    }
}

impl State {
    /// One poll of call `me`: its answer, or `Pending` with `cx` woken when there may be one.
    fn poll_call(
        &mut self,
        cx: &mut Context<'_>,
        me: u64,
        detached: bool,
    ) -> Poll<RedisResult<Vec<Value>>> {
        loop {
            if let Some(answer) = self.take_answer(me) {
                if self.reader.is_some_and(|r| r.call == me) {
                    self.reader = None;
                    self.wake_next(Some(me));
                }
                return Poll::Ready(answer);
            }
            self.flush(cx, Some(me));
            if self.answered.iter().any(|(call, _)| *call == me) {
                continue;
            }
            if let Some(w) = self.waiting.iter_mut().find(|w| w.call == me) {
                w.detached = detached;
                match &mut w.waker {
                    Some(old) => old.clone_from(cx.waker()),
                    None => w.waker = Some(cx.waker().clone()),
                }
            }
            let others_read = match self.reader {
                Some(r) if r.call == me => false,
                // A task's call reads in a detached one's place: the detached future's waker
                // would wake no task.
                Some(r) => !r.detached || detached,
                None => false,
            };
            if others_read || self.stream.is_none() {
                return Poll::Pending;
            }
            self.reader = Some(Reader { call: me, detached });
            if !self.read(cx, me) {
                return Poll::Pending;
            }
        }
    }

    fn take_answer(&mut self, call: u64) -> Option<RedisResult<Vec<Value>>> {
        let i = self.answered.iter().position(|(c, _)| *c == call)?;
        Some(self.answered.swap_remove(i).1)
    }

    /// Wakes the call that should read next (one of a task before a detached one), other than
    /// `except`, unless one reads already.
    fn wake_next(&mut self, except: Option<u64>) {
        if self.reader.is_some() {
            return;
        }
        let candidates = || {
            self.waiting
                .iter()
                .filter(|w| !w.abandoned && Some(w.call) != except && w.waker.is_some())
        };
        let next = candidates()
            .find(|w| !w.detached)
            .or_else(|| candidates().next())
            .map(|w| w.call);
        if let Some(w) = self.waiting.iter_mut().find(|w| Some(w.call) == next)
            && let Some(waker) = w.waker.take()
        {
            self.to_wake.push(waker);
        }
    }

    /// Writes what may go out, as far as the socket takes it now.
    fn flush(&mut self, cx: &mut Context<'_>, me: Option<u64>) {
        let Some(stream) = self.stream.as_mut() else {
            return;
        };
        let limit = self.gate.unwrap_or(self.unsent.len());
        while self.written < limit {
            match Pin::new(&mut *stream).poll_write(cx, &self.unsent[self.written..limit]) {
                Poll::Ready(Ok(0)) => {
                    let e = std::io::Error::from(std::io::ErrorKind::WriteZero);
                    return self.fail(e.into(), me);
                }
                Poll::Ready(Ok(n)) => self.written += n,
                Poll::Ready(Err(e)) => return self.fail(e.into(), me),
                Poll::Pending => return,
            }
        }
        if self.gate.is_none() {
            self.unsent.clear();
            self.written = 0;
        }
        // A TLS stream holds records back until flushed; a TCP socket has nothing to flush.
        if let Poll::Ready(Err(e)) = Pin::new(&mut *stream).poll_flush(cx) {
            self.fail(e.into(), me);
        }
    }

    /// Reads and hands out replies until `me` has its answer (`true`) or the socket has
    /// nothing more for now (`false`, with `cx` woken when it has).
    fn read(&mut self, cx: &mut Context<'_>, me: u64) -> bool {
        loop {
            self.parse(me);
            if self.broken.is_some() || self.answered.iter().any(|(c, _)| *c == me) {
                return true;
            }
            if self.parsed == self.filled {
                self.parsed = 0;
                self.filled = 0;
            }
            if self.input.len() - self.filled < READ_CHUNK / 4 {
                // Move the unparsed part to the front, and grow when that is not room enough
                // (a reply longer than the buffer).
                self.input.copy_within(self.parsed..self.filled, 0);
                self.filled -= self.parsed;
                self.parsed = 0;
                if self.input.len() - self.filled < READ_CHUNK / 4 {
                    let len = self.input.len();
                    self.input.resize(len * 2, 0);
                }
            }
            let Some(stream) = self.stream.as_mut() else {
                return false;
            };
            let mut buf = ReadBuf::new(&mut self.input[self.filled..]);
            match Pin::new(&mut **stream).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) => {
                    let n = buf.filled().len();
                    if n == 0 {
                        let e = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
                        self.fail(e.into(), Some(me));
                        return true;
                    }
                    self.filled += n;
                }
                Poll::Ready(Err(e)) => {
                    self.fail(e.into(), Some(me));
                    return true;
                }
                Poll::Pending => return false,
            }
        }
    }

    /// Hands every complete reply read to the call it answers.
    fn parse(&mut self, me: u64) {
        while self.broken.is_none() && self.parsed < self.filled {
            let bytes = &self.input[self.parsed..self.filled];
            let len = match reply_len(bytes) {
                Ok(Some(len)) => len,
                Ok(None) => return,
                Err(e) => return self.fail(broken_stream(e.0), Some(me)),
            };
            let value = match redis::parse_redis_value(&bytes[..len]) {
                Ok(value) => value,
                Err(e) => return self.fail(broken_stream(e.to_string()), Some(me)),
            };
            self.parsed += len;
            let Some(first) = self.waiting.front_mut() else {
                let e = broken_stream("a reply to no command".to_owned());
                return self.fail(e, Some(me));
            };
            first.replies.push(value);
            if first.replies.len() < first.expected {
                continue;
            }
            let Some(w) = self.waiting.pop_front() else {
                continue;
            };
            if let Some(op) = w.op {
                self.metrics.success(op, w.sent.elapsed().as_secs_f64());
            }
            if w.abandoned {
                continue;
            }
            self.answered.push((w.call, Ok(w.replies)));
            if w.call != me
                && let Some(waker) = w.waker
            {
                self.to_wake.push(waker);
            }
        }
    }

    /// Breaks the connection: every waiting call is answered with `e`, and so is every later
    /// one.
    fn fail(&mut self, e: RedisError, me: Option<u64>) {
        for w in std::mem::take(&mut self.waiting) {
            if w.abandoned {
                continue;
            }
            self.answered.push((w.call, Err(e.clone())));
            if Some(w.call) != me
                && let Some(waker) = w.waker
            {
                self.to_wake.push(waker);
            }
        }
        self.unsent = Vec::new();
        self.written = 0;
        self.reader = None;
        self.stream = None;
        self.broken = Some(e);
    }
}

/// A stream that no longer makes sense: the connection is broken, like one that failed.
fn broken_stream(what: String) -> RedisError {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what).into()
}
