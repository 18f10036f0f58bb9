//! The state of one connection, under its lock: what is to be written, what was read, who
//! waits for which reply, and who reads.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use redis::{RedisError, RedisResult, Value};

mod io;

use super::{Heard, Stream};
use crate::error::Operation;
use crate::metrics::NodeMetrics;

/// The read buffer's size to begin with, and the least room a read is given.
const READ_CHUNK: usize = 16 * 1024;

pub(super) struct State {
    /// `None` while the connection is being made, and once it is broken.
    stream: Option<Box<dyn Stream>>,
    /// Bytes of commands not yet written, from `written` on.
    unsent: Vec<u8>,
    written: usize,
    /// While the login's answers are not in: how many bytes at the front of `unsent` (the
    /// login's) may be written. A command must not reach a master the client has not logged
    /// in to, nor the database 0 of one whose `SELECT` failed.
    gate: Option<usize>,
    /// Whether the login was answered without error.
    opened: bool,
    /// Bytes read and not yet parsed: `input[parsed..filled]`.
    input: Vec<u8>,
    parsed: usize,
    filled: usize,
    /// Calls whose replies have not all come, in the order their commands were sent.
    waiting: VecDeque<Waiting>,
    /// Calls answered whose callers have not taken the answer yet.
    answered: Vec<(u64, RedisResult<Vec<Value>>)>,
    /// Whether values that no call waits for are messages (a subscription) rather than a
    /// broken stream.
    subscriber: bool,
    /// Messages read and not yet taken by a listener.
    messages: Vec<Value>,
    listeners: Vec<Listener>,
    /// Numbers calls and listeners alike.
    next_id: u64,
    /// The call or listener that reads now.
    reader: Option<Reader>,
    /// Why the connection is unusable, once it is.
    broken: Option<RedisError>,
    /// Wake-ups to make once the lock is let go.
    to_wake: Vec<Waker>,
    metrics: Arc<NodeMetrics>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reader {
    id: u64,
    /// Background work (a detached future, a subscription's keeper), which a task's call or
    /// listener takes the reading from.
    background: bool,
}

struct Waiting {
    id: u64,
    /// How many replies the call's commands get.
    expected: usize,
    replies: Vec<Value>,
    waker: Option<Waker>,
    /// Polled by a detached future, not a task.
    background: bool,
    /// Dropped by its caller: its replies are read and dropped.
    abandoned: bool,
    /// For the node's request duration metric.
    op: Option<Operation>,
    sent: Instant,
}

struct Listener {
    id: u64,
    waker: Option<Waker>,
    background: bool,
}

impl State {
    pub(super) fn new(metrics: Arc<NodeMetrics>, subscriber: bool) -> Self {
        State {
            stream: None,
            unsent: Vec::new(),
            written: 0,
            gate: None,
            opened: false,
            input: vec![0; READ_CHUNK],
            parsed: 0,
            filled: 0,
            waiting: VecDeque::new(),
            answered: Vec::new(),
            subscriber,
            messages: Vec::new(),
            listeners: Vec::new(),
            next_id: 0,
            reader: None,
            broken: None,
            to_wake: Vec::new(),
            metrics,
        }
    }

    pub(super) fn take_wakes(&mut self) -> Vec<Waker> {
        std::mem::take(&mut self.to_wake)
    }

    /// Lets only what was sent so far (the login) go out until [`State::open`].
    pub(super) fn close_gate(&mut self) {
        self.gate = Some(self.unsent.len());
    }

    pub(super) fn attach(&mut self, stream: Box<dyn Stream>) {
        if self.broken.is_some() {
            return;
        }
        self.stream = Some(stream);
        self.flush(&mut Context::from_waker(Waker::noop()), None);
        self.wake_next(None);
    }

    pub(super) fn open(&mut self) {
        if self.broken.is_some() {
            return;
        }
        self.gate = None;
        self.opened = true;
        self.flush(&mut Context::from_waker(Waker::noop()), None);
        self.wake_next(None);
        // Listeners, the keeper among them, count the subscriptions that are up.
        for l in &self.listeners {
            self.to_wake.extend(l.waker.clone());
        }
    }

    pub(super) fn is_broken(&self) -> bool {
        self.broken.is_some()
    }

    pub(super) fn is_open(&self) -> bool {
        self.opened && self.broken.is_none()
    }

    /// Queues a call's commands, written at once if the socket takes them; its number.
    pub(super) fn send(
        &mut self,
        op: Option<Operation>,
        expected: usize,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> u64 {
        let id = self.new_id();
        if let Some(e) = &self.broken {
            let e = e.clone();
            self.answered.push((id, Err(e)));
            return id;
        }
        let idle = self.unsent.is_empty();
        write(&mut self.unsent);
        self.waiting.push_back(Waiting {
            id,
            expected,
            replies: Vec::with_capacity(expected),
            waker: None,
            background: false,
            abandoned: false,
            op,
            sent: Instant::now(),
        });
        // Written at once, unless earlier bytes wait for the socket: the waker a stalled
        // write registered must stay the one that is woken.
        if idle {
            self.flush(&mut Context::from_waker(Waker::noop()), None);
        }
        id
    }

    fn new_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// One poll of call `me`: its answer, or `Pending` with `cx` woken when there may be one.
    pub(super) fn poll_call(
        &mut self,
        cx: &mut Context<'_>,
        me: u64,
        background: bool,
    ) -> Poll<RedisResult<Vec<Value>>> {
        loop {
            if let Some(i) = self.answered.iter().position(|(id, _)| *id == me) {
                self.stop_reading(me);
                return Poll::Ready(self.answered.swap_remove(i).1);
            }
            self.flush(cx, Some(me));
            if self.answered.iter().any(|(id, _)| *id == me) {
                continue;
            }
            if let Some(w) = self.waiting.iter_mut().find(|w| w.id == me) {
                w.background = background;
                set_waker(&mut w.waker, cx.waker());
            }
            if !self.take_reading(me, background) {
                return Poll::Pending;
            }
            if !self.read(cx, me) {
                return Poll::Pending;
            }
        }
    }

    /// Whether `me` reads now: it does if it did, or if no one reads, or if it is a task's and
    /// the reader is background work (whose waker would wake no task).
    fn take_reading(&mut self, me: u64, background: bool) -> bool {
        if self.stream.is_none() {
            return false;
        }
        match self.reader {
            // A task's call, now polled by its detached future: it reads on, as background
            // work that a task's call may take the reading from.
            Some(r) if r.id == me => {
                self.reader = Some(Reader { id: me, background });
                true
            }
            Some(r) if !r.background || background => false,
            _ => {
                self.reader = Some(Reader { id: me, background });
                true
            }
        }
    }

    fn stop_reading(&mut self, me: u64) {
        if self.reader.is_some_and(|r| r.id == me) {
            self.reader = None;
            self.wake_next(Some(me));
        }
    }

    /// Call `id` was dropped before its answer was taken: its replies are read and dropped,
    /// and if it was reading, someone else reads.
    pub(super) fn abandon(&mut self, id: u64) {
        if let Some(i) = self.answered.iter().position(|(c, _)| *c == id) {
            drop(self.answered.swap_remove(i));
        } else if let Some(w) = self.waiting.iter_mut().find(|w| w.id == id) {
            w.abandoned = true;
            w.waker = None;
        }
        self.leave(id);
    }

    /// `id` waits no more: if it read, someone else reads; if bytes wait for the socket, the
    /// reader, polled again, waits for the socket to take them too.
    fn leave(&mut self, id: u64) {
        let stalled_write = self.written < self.unsent.len();
        if self.reader.is_some_and(|r| r.id == id) {
            self.reader = None;
            self.wake_next(Some(id));
        } else if stalled_write {
            match self.reader {
                Some(r) => {
                    let waker = self
                        .waiting
                        .iter()
                        .find(|w| w.id == r.id)
                        .and_then(|w| w.waker.clone())
                        .or_else(|| {
                            self.listeners
                                .iter()
                                .find(|l| l.id == r.id)
                                .and_then(|l| l.waker.clone())
                        });
                    self.to_wake.extend(waker);
                }
                None => self.wake_next(Some(id)),
            }
        }
    }

    /// A new listener to the messages; its number.
    pub(super) fn add_listener(&mut self, background: bool) -> u64 {
        let id = self.new_id();
        self.listeners.push(Listener {
            id,
            waker: None,
            background,
        });
        id
    }

    pub(super) fn remove_listener(&mut self, id: u64) {
        self.listeners.retain(|l| l.id != id);
        self.leave(id);
    }

    /// One poll of listener `me`: the messages read so far, reading what the socket has when
    /// `me` may read.
    pub(super) fn poll_listener(&mut self, cx: &mut Context<'_>, me: u64) -> Heard {
        let mut background = false;
        if let Some(l) = self.listeners.iter_mut().find(|l| l.id == me) {
            set_waker(&mut l.waker, cx.waker());
            background = l.background;
        }
        self.flush(cx, None);
        if self.take_reading(me, background) {
            self.read(cx, me);
        }
        // Messages are handed out once the login is answered and the connection open: by then
        // what the login read of the master (see `Wire::identify`) is known.
        let messages = if self.opened {
            std::mem::take(&mut self.messages)
        } else {
            Vec::new()
        };
        Heard {
            messages,
            broken: self.broken.is_some(),
        }
    }

    /// Wakes the one who should read next, unless someone reads: a task's call, else a task's
    /// listener, else a detached call (never `except`). A subscription's keeper is not woken:
    /// it is made the reader with its waker left with the socket, which wakes it when more
    /// comes (or woken at once if something has come already).
    fn wake_next(&mut self, except: Option<u64>) {
        if self.reader.is_some() {
            return;
        }
        let calls = |background: bool| {
            self.waiting.iter().position(|w| {
                !w.abandoned
                    && w.background == background
                    && Some(w.id) != except
                    && w.waker.is_some()
            })
        };
        if let Some(i) = calls(false) {
            self.to_wake.extend(self.waiting[i].waker.take());
        } else if let Some(l) = self
            .listeners
            .iter()
            .find(|l| !l.background && Some(l.id) != except && l.waker.is_some())
        {
            self.to_wake.extend(l.waker.clone());
        } else if let Some(i) = calls(true) {
            self.to_wake.extend(self.waiting[i].waker.take());
        } else if let Some((id, waker)) = self
            .listeners
            .iter()
            .find(|l| l.background && Some(l.id) != except)
            .and_then(|l| Some((l.id, l.waker.clone()?)))
        {
            self.reader = Some(Reader {
                id,
                background: true,
            });
            let before = self.messages.len();
            if self.read(&mut Context::from_waker(&waker), id) || self.messages.len() > before {
                self.to_wake.push(waker);
            }
        }
    }
}

fn set_waker(slot: &mut Option<Waker>, waker: &Waker) {
    match slot {
        Some(old) => old.clone_from(waker),
        None => *slot = Some(waker.clone()),
    }
}
