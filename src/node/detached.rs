//! Work that finishes after its caller has moved on (the last answers of a vote decided early,
//! releases sent in the background), driven without a task of its own.
//!
//! A detached future waits only for replies on node connections. When a reply it waits for is
//! read, by whichever task reads that connection, the future is queued, and that task polls it
//! on its way out of the read ([`Background::run_ready`]): the future finishes on a thread that
//! was awake anyway. A task per detached future would cost a wake-up of another task for each
//! answer, and on a multi-thread runtime often of the other worker thread too. When no task
//! reads (a detached call left reading a quiet connection), the runtime's I/O driver wakes the
//! detached future, which is polled right there, on the thread that read the socket's event.
//! One long-lived task per client (the poller) polls those that a task hands a connection to
//! outside any call (see [`Polling::Handover`]), or that are woken with no runtime about.
//!
//! Calls polled by a detached future never take the connection's reading from a task's call,
//! and hand it to one (see `wire/mod.rs`): a task waits on the socket in preference.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};

use tokio::sync::oneshot;

use super::on_demand::{OnDemand, Running};

type Work = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What the current thread is polling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Polling {
    /// Whatever the runtime runs: a task's futures, or the I/O driver's wake-ups.
    Task,
    /// A connection call of a task, which runs [`Background::run_ready`] on its way out.
    TaskCall,
    /// A detached future.
    Detached,
    /// A connection's reading handed on to the next waiter by a task outside any call (a call
    /// dropped, a command sent): the code around it may hold anything, so a detached future
    /// woken here is left to the poller.
    Handover,
}

thread_local! {
    static POLLING: Cell<Polling> = const { Cell::new(Polling::Task) };
}

/// What the current thread is polling.
pub(super) fn polling() -> Polling {
    POLLING.with(Cell::get)
}

/// Runs `f` with the thread marked as polling `what`, as it was afterwards.
pub(super) fn marked<T>(what: Polling, f: impl FnOnce() -> T) -> T {
    let before = POLLING.with(|p| p.replace(what));
    let out = f();
    POLLING.with(|p| p.set(before));
    out
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One client's detached futures that are ready to be polled, and its poller.
#[derive(Debug, Default)]
pub(crate) struct Background {
    ready: Mutex<Vec<Arc<Detached>>>,
    any_ready: AtomicBool,
    /// Detached futures not finished yet: the poller ends when there are none.
    unfinished: AtomicUsize,
    poller: OnDemand,
}

/// One detached future.
struct Detached {
    work: Mutex<Option<Work>>,
    /// Whether it is queued in its [`Background`] already.
    queued: AtomicBool,
    background: Weak<Background>,
}

impl std::fmt::Debug for Detached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detached").finish_non_exhaustive()
    }
}

impl Wake for Detached {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let Some(background) = self.background.upgrade() else {
            return;
        };
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        lock(&background.ready).push(self.clone());
        background.any_ready.store(true, Ordering::Release);
        match polling() {
            // A task's call polls what is ready on its way out, and so does whatever polls a
            // detached future.
            Polling::TaskCall | Polling::Detached => {}
            // The runtime's I/O driver, for a detached call left reading a quiet connection
            // (an answer that came after its vote was decided, when no task calls that
            // connection): polled here, on the thread that read the socket's event. Queued
            // for a task instead, it would be a second task made ready by that event beside
            // the one the event is for, and the multi-thread runtime wakes its other worker
            // thread for it. Nothing of the client's is locked here.
            Polling::Task if tokio::runtime::Handle::try_current().is_ok() => {
                background.run_ready();
            }
            // A connection handed to the detached call by a task outside any call, or a
            // wake-up with no runtime to poll on: the poller polls it.
            Polling::Task | Polling::Handover => {
                let weak = Arc::downgrade(&background);
                background.poller.wake(|| poller(weak));
            }
        }
    }
}

/// Rounds of polling that one [`Background::run_ready`] makes before it leaves what is still
/// ready to the poller: a detached future that wakes itself as it is polled would otherwise be
/// polled there for ever, and the task or thread that called it never get on.
const ROUNDS_IN_PLACE: usize = 16;

impl Background {
    /// Polls every detached future that is ready, until none is, or leaves them to the poller
    /// after [`ROUNDS_IN_PLACE`] rounds.
    pub(super) fn run_ready(self: &Arc<Self>) {
        if !self.any_ready.load(Ordering::Acquire) || polling() == Polling::Detached {
            return;
        }
        let all_polled = marked(Polling::Detached, || {
            for _ in 0..ROUNDS_IN_PLACE {
                let ready = {
                    let mut ready = lock(&self.ready);
                    self.any_ready.store(false, Ordering::Release);
                    std::mem::take(&mut *ready)
                };
                if ready.is_empty() {
                    return true;
                }
                for detached in ready {
                    detached.queued.store(false, Ordering::Release);
                    detached.poll();
                }
            }
            !self.any_ready.load(Ordering::Acquire)
        });
        if !all_polled {
            let weak = Arc::downgrade(self);
            self.poller.wake(|| poller(weak));
        }
    }

    /// Finishes `work` in the background: it is polled once now, and then whenever what it
    /// waits for is ready. The receiver hears when it is done (or dropped with its
    /// connections).
    pub(crate) fn detach<F>(self: &Arc<Self>, work: F) -> oneshot::Receiver<()>
    where
        F: Future + Send + 'static,
    {
        let (done, finished) = oneshot::channel();
        self.unfinished.fetch_add(1, Ordering::AcqRel);
        // Outside the cooperative budget of whatever task polls it: with that task's budget
        // spent, the runtime's resources would answer each poll by waking the future again,
        // and it would be queued anew at every round of `run_ready`.
        let detached = Arc::new(Detached {
            work: Mutex::new(Some(Box::pin(tokio::task::unconstrained(async move {
                work.await;
                let _ = done.send(());
            })))),
            queued: AtomicBool::new(false),
            background: Arc::downgrade(self),
        });
        marked(Polling::Detached, || detached.poll());
        // Work that its first poll made ready (answers already read) is finished now.
        self.run_ready();
        finished
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // The poller, if any, finds the client gone and ends.
        self.poller.nudge();
    }
}

impl Detached {
    fn poll(self: &Arc<Self>) {
        let waker = Waker::from(self.clone());
        let mut cx = Context::from_waker(&waker);
        let mut work = lock(&self.work);
        if let Some(future) = work.as_mut()
            && future.as_mut().poll(&mut cx).is_ready()
        {
            *work = None;
            self.finished();
        }
    }

    fn finished(&self) {
        if let Some(background) = self.background.upgrade()
            && background.unfinished.fetch_sub(1, Ordering::AcqRel) == 1
        {
            // The poller ends once nothing is left unfinished; the last one may have been
            // finished by a task's call or where the I/O driver woke it, and the poller, if it
            // runs, would otherwise wait on until the next hand-over.
            background.poller.nudge();
        }
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        // Dropped unfinished: its connections are gone, and with them every waker of it.
        if lock(&self.work).is_some() {
            self.finished();
        }
    }
}

/// Polls the client's ready detached futures whenever one is woken by the I/O driver, until
/// none is left unfinished (the next wake-up from the I/O driver starts another), or the client
/// is gone.
async fn poller(background: Weak<Background>) {
    let mut running = Running::new(background.clone(), |b: &Background| &b.poller);
    std::future::poll_fn(|cx| {
        let Some(background) = background.upgrade() else {
            running.ended = true;
            return Poll::Ready(());
        };
        background.poller.register(cx.waker());
        background.run_ready();
        let idle = || {
            background.unfinished.load(Ordering::Acquire) == 0
                && !background.any_ready.load(Ordering::Acquire)
        };
        if idle() && background.poller.end_if(idle) {
            running.ended = true;
            return Poll::Ready(());
        }
        Poll::Pending
    })
    .await;
}

#[cfg(test)]
mod tests;
