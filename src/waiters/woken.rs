//! Waiting for a release to name a waiter: the waiter's task reads the client's subscriptions
//! itself while it waits, and hands what it reads to the waiters named (itself, mostly).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::State;
use super::subscription::{Subscriptions, hear};
use crate::node::Listening;

/// Done when a master names the waiter after [`Waiters::listen`](super::Waiters::listen).
pub(crate) struct Woken {
    pub(super) state: Arc<State>,
    pub(super) waiter: String,
    pub(super) subscriptions: Option<Arc<Subscriptions>>,
    /// A listener on each subscription that was up, with its master's number, from the first
    /// poll on: a waiter whose attempt takes the lock never waits, and never reads.
    pub(super) listening: Option<Vec<(usize, Listening)>>,
}

impl Future for Woken {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let subscriptions = &this.subscriptions;
        let listening = this.listening.get_or_insert_with(|| {
            subscriptions
                .as_ref()
                .map(|s| s.listen())
                .unwrap_or_default()
        });
        // A broken subscription is the keeper's to make again; this wait has its fallback.
        hear(
            &this.state,
            listening.iter_mut().map(|(node, l)| (*node, l)),
            cx,
        );
        if this.state.woken(&this.waiter, cx.waker()) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}
