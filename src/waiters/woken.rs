//! Waiting for a release to name a waiter: the waiter's task reads the client's subscriptions
//! itself while it waits, and hands what it reads to the waiters named (itself, mostly).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::State;
use super::subscription::deliver_all;
use crate::node::Listening;

/// Done when a master names the waiter after [`Waiters::listen`](super::Waiters::listen).
pub(crate) struct Woken {
    pub(super) state: Arc<State>,
    pub(super) waiter: String,
    /// A listener on each subscription that was up, with its master's number.
    pub(super) listening: Vec<(usize, Listening)>,
}

impl Future for Woken {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let mut wake = Vec::new();
        for (node, listening) in &mut this.listening {
            let heard = listening.poll_heard(cx);
            deliver_all(&this.state, *node, heard.messages, &mut wake);
        }
        for waker in wake {
            // This task is being polled already, and looks below.
            if !waker.will_wake(cx.waker()) {
                waker.wake();
            }
        }
        if this.state.woken(&this.waiter, cx.waker()) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}
