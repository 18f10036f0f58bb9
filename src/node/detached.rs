//! Work that finishes after its caller has moved on (the last answers of a vote decided early,
//! releases sent in the background), driven without a task of its own.
//!
//! A detached future waits only for replies on node connections. When a reply it waits for is
//! read, by whichever task reads that connection, the future is queued, and that task polls it
//! on its way out of the read ([`run_ready`]): the future finishes on a thread that was awake
//! anyway. Spawning a task instead would cost a wake-up of another task for each answer, and
//! on a multi-thread runtime a wake-up of the other worker thread too. Only when no task is
//! reading (a client gone quiet) does a wake-up start a task to poll what is ready.
//!
//! Calls polled by a detached future never take the connection's reading from a task's call,
//! and hand it to one (see `wire.rs`): a task waits on the socket in preference.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Wake, Waker};

use tokio::sync::oneshot;

type Work = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One detached future.
struct Detached {
    work: Mutex<Option<Work>>,
    /// Whether it is in [`READY`] already.
    queued: AtomicBool,
}

/// Detached futures woken and not yet polled.
static READY: Mutex<Vec<Arc<Detached>>> = Mutex::new(Vec::new());
static ANY_READY: AtomicBool = AtomicBool::new(false);
/// Whether a task to poll [`READY`] is spawned and has not started yet.
static TASK_SPAWNED: AtomicBool = AtomicBool::new(false);

/// What the current thread is polling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Polling {
    /// Whatever the runtime runs: a task's futures.
    Task,
    /// A connection call of a task, which runs [`run_ready`] on its way out.
    TaskCall,
    /// A detached future.
    Detached,
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

impl Wake for Detached {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        lock(&READY).push(self.clone());
        ANY_READY.store(true, Ordering::Release);
        // A task's call polls what is ready on its way out, and so does a detached future's
        // poller; a wake-up from anywhere else (the runtime's I/O driver, for a detached call
        // left reading a quiet connection) needs a task to do it.
        if polling() == Polling::Task {
            spawn_poller();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn spawn_poller() {
    if TASK_SPAWNED.swap(true, Ordering::AcqRel) {
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(async {
                TASK_SPAWNED.store(false, Ordering::Release);
                run_ready();
            });
        }
        // No runtime to spawn on: the next task's call on any connection polls it.
        Err(_) => TASK_SPAWNED.store(false, Ordering::Release),
    }
}

/// Polls every detached future that is ready, until none is.
pub(super) fn run_ready() {
    if !ANY_READY.load(Ordering::Acquire) || polling() == Polling::Detached {
        return;
    }
    marked(Polling::Detached, || {
        loop {
            let ready = {
                let mut ready = lock(&READY);
                ANY_READY.store(false, Ordering::Release);
                std::mem::take(&mut *ready)
            };
            if ready.is_empty() {
                return;
            }
            for detached in ready {
                detached.queued.store(false, Ordering::Release);
                detached.poll();
            }
        }
    });
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
        }
    }
}

/// Finishes `work` in the background: it is polled once now, and then whenever what it waits
/// for is ready. The receiver hears when it is done (or dropped with its connections).
pub(crate) fn detach<F>(work: F) -> oneshot::Receiver<()>
where
    F: Future + Send + 'static,
{
    let (done, finished) = oneshot::channel();
    let detached = Arc::new(Detached {
        work: Mutex::new(Some(Box::pin(async move {
            work.await;
            let _ = done.send(());
        }))),
        queued: AtomicBool::new(false),
    });
    marked(Polling::Detached, || detached.poll());
    finished
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Poll;

    /// A future that is pending until its flag is set, counting its polls.
    struct Gate {
        open: Arc<AtomicBool>,
        waker: Arc<Mutex<Option<Waker>>>,
        polls: Arc<AtomicUsize>,
    }

    impl Future for Gate {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            assert_eq!(polling(), Polling::Detached);
            if self.open.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *lock(&self.waker) = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn detached_work_is_polled_at_once_then_when_woken() {
        let open = Arc::new(AtomicBool::new(false));
        let waker = Arc::new(Mutex::new(None::<Waker>));
        let polls = Arc::new(AtomicUsize::new(0));
        let mut finished = detach(Gate {
            open: open.clone(),
            waker: waker.clone(),
            polls: polls.clone(),
        });
        assert_eq!(polls.load(Ordering::SeqCst), 1, "polled once when detached");
        assert!(finished.try_recv().is_err());
        open.store(true, Ordering::SeqCst);
        // Woken from a task's call: queued, then polled on the call's way out.
        marked(Polling::TaskCall, || {
            if let Some(w) = lock(&waker).take() {
                w.wake();
            }
            assert_eq!(
                polls.load(Ordering::SeqCst),
                1,
                "not polled inside the wake-up"
            );
            run_ready();
        });
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        assert!(finished.try_recv().is_ok(), "done, and said so");
    }

    #[tokio::test]
    async fn a_wake_up_outside_any_call_is_polled_by_a_task() {
        let open = Arc::new(AtomicBool::new(false));
        let waker = Arc::new(Mutex::new(None::<Waker>));
        let polls = Arc::new(AtomicUsize::new(0));
        let finished = detach(Gate {
            open: open.clone(),
            waker: waker.clone(),
            polls: polls.clone(),
        });
        open.store(true, Ordering::SeqCst);
        if let Some(w) = lock(&waker).take() {
            w.wake();
        }
        tokio::time::timeout(std::time::Duration::from_secs(5), finished)
            .await
            .expect("a task polled it")
            .expect("finished");
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }
}
