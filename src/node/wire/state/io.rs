//! The connection's reading and writing: what is unsent goes out, what comes in is parsed and
//! handed to the calls it answers (or kept as messages), and a broken stream breaks it all.

use std::pin::Pin;
use std::task::{Context, Poll};

use redis::RedisError;
use tokio::io::{AsyncWrite, ReadBuf};

use super::{READ_CHUNK, State};
use crate::node::resp::{plain_value, reply_len};

impl State {
    /// Writes what may go out, as far as the socket takes it now.
    pub(super) fn flush(&mut self, cx: &mut Context<'_>, me: Option<u64>) {
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

    /// Reads and hands out what comes until `me` has its answer (`true`) or the socket has
    /// nothing more for now (`false`, with `cx` woken when it has).
    pub(super) fn read(&mut self, cx: &mut Context<'_>, me: u64) -> bool {
        loop {
            self.parse(me);
            if self.broken.is_some() || self.answered.iter().any(|(id, _)| *id == me) {
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

    /// Whether a command connection that waits for nothing was closed by its master while idle
    /// (its `timeout` setting, `CLIENT KILL`, a restart): one [`read`](Self::read) that does not
    /// wait finds the end of the stream, or bytes that no command asked for, either of which
    /// breaks the connection, so that the next call makes a new one instead of failing on this
    /// one. A connection that is being read, waited on or made is left to its readers.
    pub(in crate::node::wire) fn closed_while_idle(&mut self) -> bool {
        let idle = self.opened
            && !self.subscriber
            && self.broken.is_none()
            && self.waiting.is_empty()
            && self.reader.is_none();
        if idle {
            // For no call: nothing is answered, and nothing is to be woken (whoever reads
            // next registers its own waker).
            let nobody = self.new_id();
            self.read(&mut Context::from_waker(std::task::Waker::noop()), nobody);
        }
        self.broken.is_some()
    }

    /// Hands every complete value read to the call it answers, or to the messages.
    fn parse(&mut self, me: u64) {
        while self.broken.is_none() && self.parsed < self.filled {
            let bytes = &self.input[self.parsed..self.filled];
            let (value, len) = match plain_value(bytes) {
                Some(plain) => plain,
                None => {
                    let len = match reply_len(bytes) {
                        Ok(Some(len)) => len,
                        Ok(None) => return,
                        Err(e) => return self.fail(broken_stream(e.0), Some(me)),
                    };
                    match redis::parse_redis_value(&bytes[..len]) {
                        Ok(value) => (value, len),
                        Err(e) => return self.fail(broken_stream(e.to_string()), Some(me)),
                    }
                }
            };
            self.parsed += len;
            let Some(first) = self.waiting.front_mut() else {
                if self.subscriber {
                    self.messages.push(value);
                    continue;
                }
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
            self.answered.push((w.id, Ok(w.replies)));
            if w.id != me {
                self.to_wake.extend(w.waker);
            }
        }
    }

    /// Breaks the connection: every waiting call is answered with `e`, and so is every later
    /// one; listeners are woken to see it.
    pub(in crate::node::wire) fn fail(&mut self, e: RedisError, me: Option<u64>) {
        if self.broken.is_some() {
            return;
        }
        for w in std::mem::take(&mut self.waiting) {
            if w.abandoned {
                continue;
            }
            self.answered.push((w.id, Err(e.clone())));
            if Some(w.id) != me {
                self.to_wake.extend(w.waker);
            }
        }
        for l in &self.listeners {
            if Some(l.id) != me {
                self.to_wake.extend(l.waker.clone());
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
