//! The deadlines of a client's calls and waits, kept by one timer: a [`Sleep`] is done at its
//! instant, and a task of the client (the watcher) wakes it then.
//!
//! Each of the runtime's own timers, set earlier than any other it has, wakes the runtime's
//! I/O driver to recompute how long it may sleep: a system call, and on a multi-thread runtime
//! often a worker thread woken for nothing. A vote set one for its deadline and dropped it a
//! round trip later, so every vote paid that. Here the watcher's one timer is set to the
//! earliest deadline and moved only when a deadline comes before it; deadlines that are later
//! (the next vote's, a round trip on) cost a look at the clock and a place in a list.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use super::on_demand::{OnDemand, Running};

/// The deadlines of one client.
#[derive(Debug, Default)]
pub(crate) struct Deadlines {
    inner: Mutex<Inner>,
    watcher: OnDemand,
}

#[derive(Debug, Default)]
struct Inner {
    waiting: Vec<Waiting>,
    next_id: u64,
    /// The instant the watcher's timer is set for; `None` when it is not set.
    timer_at: Option<Instant>,
}

#[derive(Debug)]
struct Waiting {
    id: u64,
    at: Instant,
    waker: Waker,
}

fn lock(m: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Deadlines {
    /// Done at `at`.
    pub(crate) fn sleep_until(self: &Arc<Self>, at: Instant) -> Sleep {
        Sleep {
            deadlines: self.clone(),
            at,
            id: None,
            waker: None,
        }
    }

    fn wake_watcher(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        self.watcher.wake(|| watch(weak));
    }
}

impl Drop for Deadlines {
    fn drop(&mut self) {
        // The watcher, if any, finds the client gone and ends.
        self.watcher.nudge();
    }
}

/// A wait until an instant, on the client's watcher (see the module's comment).
#[derive(Debug)]
pub(crate) struct Sleep {
    deadlines: Arc<Deadlines>,
    at: Instant,
    /// Its place among the waiting, once it has one, and the waker left there: polled again
    /// by the same task (each answer to a vote polls its deadline), it needs no lock.
    id: Option<u64>,
    waker: Option<Waker>,
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.at {
            self.leave();
            return Poll::Ready(());
        }
        let this = &mut *self;
        if this.id.is_some() && this.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            return Poll::Pending;
        }
        this.waker = Some(cx.waker().clone());
        let at = this.at;
        let mut inner = lock(&this.deadlines.inner);
        match this
            .id
            .and_then(|id| inner.waiting.iter_mut().find(|w| w.id == id))
        {
            Some(w) => {
                if !w.waker.will_wake(cx.waker()) {
                    w.waker.clone_from(cx.waker());
                }
            }
            None => {
                let id = inner.next_id;
                inner.next_id += 1;
                inner.waiting.push(Waiting {
                    id,
                    at,
                    waker: cx.waker().clone(),
                });
                this.id = Some(id);
            }
        }
        // The watcher's timer is set for later than this (or not at all): set it sooner.
        let sooner = inner.timer_at.is_none_or(|t| at < t);
        if sooner {
            inner.timer_at = Some(at);
        }
        drop(inner);
        if sooner {
            this.deadlines.wake_watcher();
        }
        Poll::Pending
    }
}

impl Sleep {
    fn leave(&mut self) {
        if let Some(id) = self.id.take() {
            let mut inner = lock(&self.deadlines.inner);
            if let Some(i) = inner.waiting.iter().position(|w| w.id == id) {
                inner.waiting.swap_remove(i);
            }
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.leave();
    }
}

/// The watcher: wakes every sleep whose instant has come, with one timer set for the earliest
/// of the others, until the client is gone.
async fn watch(deadlines: Weak<Deadlines>) {
    let mut running = Running::new(deadlines.clone(), |d: &Deadlines| &d.watcher);
    let timer = tokio::time::sleep_until(Instant::now().into());
    tokio::pin!(timer);
    // The instant the timer is set for.
    let mut set_for: Option<Instant> = None;
    std::future::poll_fn(|cx| {
        loop {
            let Some(deadlines) = deadlines.upgrade() else {
                running.ended = true;
                return Poll::Ready(());
            };
            deadlines.watcher.register(cx.waker());
            let now = Instant::now();
            let mut due = Vec::new();
            let next = {
                let mut inner = lock(&deadlines.inner);
                inner.waiting.retain(|w| {
                    if w.at <= now {
                        due.push(w.waker.clone());
                        false
                    } else {
                        true
                    }
                });
                let next = inner.waiting.iter().map(|w| w.at).min();
                inner.timer_at = next;
                next
            };
            due.into_iter().for_each(Waker::wake);
            let Some(next) = next else {
                // Nothing waits: no timer until a sleep sets it (and wakes this task).
                return Poll::Pending;
            };
            if set_for != Some(next) {
                timer.as_mut().reset(next.into());
                set_for = Some(next);
            }
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            set_for = None;
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn sleeps_end_at_their_instant_in_any_order() {
        let deadlines = Arc::new(Deadlines::default());
        let start = Instant::now();
        let late = deadlines.sleep_until(start + Duration::from_millis(80));
        let early = deadlines.sleep_until(start + Duration::from_millis(20));
        let (late, early) = (
            tokio::spawn(async move {
                late.await;
                Instant::now()
            }),
            tokio::spawn(async move {
                early.await;
                Instant::now()
            }),
        );
        let (late, early) = (late.await.unwrap(), early.await.unwrap());
        assert!(early >= start + Duration::from_millis(20));
        assert!(late >= start + Duration::from_millis(80));
        assert!(early < late);
    }

    #[tokio::test]
    async fn a_dropped_sleep_leaves_no_trace() {
        let deadlines = Arc::new(Deadlines::default());
        let mut sleep = deadlines.sleep_until(Instant::now() + Duration::from_millis(10));
        assert!(futures::poll!(&mut sleep).is_pending());
        assert_eq!(lock(&deadlines.inner).waiting.len(), 1);
        drop(sleep);
        assert!(lock(&deadlines.inner).waiting.is_empty());
    }

    #[tokio::test]
    async fn a_sleep_past_its_instant_is_done_at_once() {
        let deadlines = Arc::new(Deadlines::default());
        let mut sleep = deadlines.sleep_until(Instant::now());
        assert!(futures::poll!(&mut sleep).is_ready());
        assert!(!deadlines.watcher.is_spawned());
    }
}
