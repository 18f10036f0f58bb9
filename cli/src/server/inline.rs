//! A connection's future polled again at once when it wakes itself while it is being polled,
//! instead of being queued again by the runtime.
//!
//! hyper wakes a connection's task from inside that task's own poll on every request with a
//! body: the handler, taking the body's bytes, wakes the connection's reader (the same task),
//! which is waiting to hand over more. A task woken while it runs is queued again once its poll
//! returns, and on a multi-thread runtime a task queued that way wakes an idle worker thread to
//! come and take it: a futex call and a context switch per request, and often the connection
//! moved to the other thread. With requests that fail validation (no master is asked) on the
//! default runtime of two workers, serving connections through axum's own loop made 3,400 to
//! 4,200 pairs of requests per second and one or two futex calls per request; through this
//! wrapper, 7,400 to 10,800 and almost none.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// How many times a poll may go round before the task yields to the runtime's other tasks.
const MAX_POLLS_IN_PLACE: usize = 8;

/// Not being polled: a wake-up wakes the task.
const IDLE: u8 = 0;
/// Being polled: a wake-up asks for another poll, made before this one returns.
const POLLING: u8 = 1;
/// Being polled, and woken meanwhile.
const WOKEN: u8 = 2;

/// `future`, polled again in place when it wakes itself during a poll (see the module's
/// comment).
pub(crate) struct Inline<F> {
    future: Pin<Box<F>>,
    shared: Arc<Shared>,
    /// The waker the future is polled with, made once: the same waker every time lets the
    /// future's resources keep their registration.
    waker: Waker,
}

struct Shared {
    state: AtomicU8,
    task: AtomicWaker,
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut state = self.state.load(Ordering::Acquire);
        loop {
            match state {
                POLLING => match self.state.compare_exchange_weak(
                    POLLING,
                    WOKEN,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return,
                    Err(now) => state = now,
                },
                WOKEN => return,
                _ => {
                    self.task.wake();
                    return;
                }
            }
        }
    }
}

impl<F: Future> Inline<F> {
    pub(crate) fn new(future: F) -> Self {
        let shared = Arc::new(Shared {
            state: AtomicU8::new(IDLE),
            task: AtomicWaker::new(),
        });
        Inline {
            future: Box::pin(future),
            waker: Waker::from(shared.clone()),
            shared,
        }
    }
}

impl<F: Future> Future for Inline<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        this.shared.task.register(cx.waker());
        let mut inner = Context::from_waker(&this.waker);
        for _ in 0..MAX_POLLS_IN_PLACE {
            this.shared.state.store(POLLING, Ordering::Release);
            if let Poll::Ready(out) = this.future.as_mut().poll(&mut inner) {
                this.shared.state.store(IDLE, Ordering::Release);
                return Poll::Ready(out);
            }
            if this
                .shared
                .state
                .compare_exchange(POLLING, IDLE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Poll::Pending;
            }
        }
        // Woken on every round: let the runtime run its other tasks, then come back.
        this.shared.state.store(IDLE, Ordering::Release);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts the wake-ups of the task that polls.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn context_counting() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        (count, waker)
    }

    #[test]
    fn a_wake_during_the_poll_is_a_poll_in_place_not_a_wake_of_the_task() {
        let mut polls = 0;
        let mut future = Inline::new(std::future::poll_fn(|cx| {
            polls += 1;
            if polls < 3 {
                // Woken by itself, as hyper's body hand-over does.
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(polls)
            }
        }));
        let (count, waker) = context_counting();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(Pin::new(&mut future).poll(&mut cx), Poll::Ready(3));
        assert_eq!(count.0.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_wake_after_the_poll_wakes_the_task() {
        let slot: Arc<std::sync::Mutex<Option<Waker>>> = Arc::default();
        let kept = slot.clone();
        let mut future = Inline::new(std::future::poll_fn(move |cx| {
            *kept.lock().unwrap() = Some(cx.waker().clone());
            Poll::<()>::Pending
        }));
        let (count, waker) = context_counting();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut future).poll(&mut cx).is_pending());
        assert_eq!(count.0.load(Ordering::Relaxed), 0);
        let inner = slot.lock().unwrap().take().unwrap();
        inner.wake_by_ref();
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        // Woken once, the task is queued: another wake-up before its poll adds nothing.
        inner.wake();
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        // Polled again, it is woken again by the next wake-up.
        assert!(Pin::new(&mut future).poll(&mut cx).is_pending());
        slot.lock().unwrap().take().unwrap().wake();
        assert_eq!(count.0.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_future_that_always_wakes_itself_yields_to_the_runtime() {
        let mut polls = 0;
        let mut future = Inline::new(std::future::poll_fn(|cx| {
            polls += 1;
            cx.waker().wake_by_ref();
            Poll::<()>::Pending
        }));
        let (count, waker) = context_counting();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut future).poll(&mut cx).is_pending());
        drop(future);
        assert_eq!(polls, MAX_POLLS_IN_PLACE);
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
    }
}
