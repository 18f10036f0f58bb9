//! What each wake-up of a runtime thread brought the contended scenario's clients: how often the
//! runtime's I/O driver made two or more clients' tasks runnable at once, and how often a
//! thread woke and ran none of them.
//!
//! One release makes two clients' tasks runnable at the same moment: the releaser's, woken by
//! the masters' answers, and the next holder's, woken by the masters' messages, which the
//! masters send in the same step. A current-thread runtime runs the two in turn. A multi-thread
//! runtime, finding two tasks after a park, wakes another worker thread to take one; on a
//! machine with few CPUs that thread often wakes to find both already run, and its trip through
//! the kernel is time the masters do not get. The counts here make both visible with tokio's
//! stable API: the runtime's `on_thread_park` and `on_thread_unpark` hooks ([`parking`],
//! [`unparked`]), and each client's task polled through [`Watched`], whose waker notes which
//! thread woke it and when.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// Wake-ups of every runtime thread in the process. The comparison runs one runtime at a time,
/// so the difference between two readings is that runtime's.
static WAKE_UPS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static THREAD: Cell<ThreadState> = const { Cell::new(ThreadState::NEW) };
}

/// What one runtime thread last saw. A run is told apart by the address of its counts, so that
/// a thread that served an earlier run (the current-thread runtime's) starts afresh.
#[derive(Clone, Copy)]
struct ThreadState {
    /// This thread's wake-ups so far.
    wake_ups: u64,
    /// Between `on_thread_park` and `on_thread_unpark`: wakes made now come from the driver.
    parked: bool,
    /// The last park in which the driver on this thread woke a client's task.
    woke: DriverWoke,
    /// The run and wake-up after which this thread last ran a client's task.
    ran: (usize, u64),
}

/// A park in which the driver woke a client's task: of which run and after which wake-up of the
/// thread, the first client it woke, and whether it woke another client's task too.
#[derive(Clone, Copy)]
struct DriverWoke {
    run: usize,
    park: u64,
    first: usize,
    another: bool,
}

impl ThreadState {
    const NEW: ThreadState = ThreadState {
        wake_ups: 0,
        parked: false,
        woke: DriverWoke {
            run: 0,
            park: 0,
            first: 0,
            another: false,
        },
        ran: (0, 0),
    };
}

fn with_thread(f: impl FnOnce(&mut ThreadState)) {
    THREAD.with(|cell| {
        let mut state = cell.get();
        f(&mut state);
        cell.set(state);
    });
}

/// For a runtime's `on_thread_park`.
pub(crate) fn parking() {
    with_thread(|t| t.parked = true);
}

/// For a runtime's `on_thread_unpark`.
pub(crate) fn unparked() {
    WAKE_UPS.fetch_add(1, Relaxed);
    with_thread(|t| {
        t.parked = false;
        t.wake_ups += 1;
    });
}

/// One run's counts, shared by its clients' tasks.
#[derive(Debug, Default)]
pub(crate) struct WakeCounts {
    /// Parks in which the driver woke at least one client's task.
    driver_woke_any: AtomicU64,
    /// Parks in which it woke two or more clients' tasks.
    driver_woke_two: AtomicU64,
    /// Wake-ups after which the thread ran at least one client's task.
    ran_a_client: AtomicU64,
}

impl WakeCounts {
    fn run(self: &Arc<Self>) -> usize {
        Arc::as_ptr(self) as usize
    }

    /// The counts now, to subtract from later ones.
    pub(crate) fn read(self: &Arc<Self>) -> WakeReading {
        WakeReading {
            counts: self.clone(),
            wake_ups: WAKE_UPS.load(Relaxed),
            driver_woke_any: self.driver_woke_any.load(Relaxed),
            driver_woke_two: self.driver_woke_two.load(Relaxed),
            ran_a_client: self.ran_a_client.load(Relaxed),
        }
    }
}

/// The counts at one moment.
#[derive(Debug)]
pub(crate) struct WakeReading {
    counts: Arc<WakeCounts>,
    wake_ups: u64,
    driver_woke_any: u64,
    driver_woke_two: u64,
    ran_a_client: u64,
}

/// What the wake-ups brought per critical section (or per any unit of work).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WakeUpsPer {
    /// Times a runtime thread woke from a park.
    pub(crate) wake_ups: f64,
    /// Wake-ups after which the thread ran no client's task.
    pub(crate) ran_none: f64,
    /// Parks in which the driver woke exactly one client's task, and two or more clients' at
    /// once.
    pub(crate) driver_woke_one: f64,
    pub(crate) driver_woke_two: f64,
}

impl WakeReading {
    /// What happened since this reading, per each of `units`; `None` for no units.
    pub(crate) fn per(&self, units: u64) -> Option<WakeUpsPer> {
        if units == 0 {
            return None;
        }
        let now = self.counts.read();
        let units = units as f64;
        let wake_ups = now.wake_ups.saturating_sub(self.wake_ups);
        let ran = now.ran_a_client.saturating_sub(self.ran_a_client);
        let two = now.driver_woke_two.saturating_sub(self.driver_woke_two);
        let any = now.driver_woke_any.saturating_sub(self.driver_woke_any);
        Some(WakeUpsPer {
            wake_ups: wake_ups as f64 / units,
            ran_none: wake_ups.saturating_sub(ran) as f64 / units,
            driver_woke_one: any.saturating_sub(two) as f64 / units,
            driver_woke_two: two as f64 / units,
        })
    }
}

/// A client's task, polled with a waker that notes, before waking the task, whether the driver
/// woke it in the same park as another client's.
pub(crate) struct Watched<F> {
    task: Pin<Box<F>>,
    probe: Arc<Probe>,
    waker: Waker,
}

struct Probe {
    client: usize,
    counts: Arc<WakeCounts>,
    /// The waker of the task this runs in, as of its latest poll.
    task_waker: AtomicWaker,
}

impl<F: Future> Watched<F> {
    pub(crate) fn new(client: usize, counts: Arc<WakeCounts>, task: F) -> Self {
        let probe = Arc::new(Probe {
            client,
            counts,
            task_waker: AtomicWaker::new(),
        });
        Watched {
            task: Box::pin(task),
            waker: Waker::from(probe.clone()),
            probe,
        }
    }
}

impl<F: Future> Future for Watched<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.probe.task_waker.register(cx.waker());
        let (counts, run) = (&self.probe.counts, self.probe.counts.run());
        with_thread(|t| {
            if t.ran != (run, t.wake_ups) {
                t.ran = (run, t.wake_ups);
                counts.ran_a_client.fetch_add(1, Relaxed);
            }
        });
        let this = &mut *self;
        this.task
            .as_mut()
            .poll(&mut Context::from_waker(&this.waker))
    }
}

impl Wake for Probe {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let run = self.counts.run();
        with_thread(|t| {
            if !t.parked {
                return;
            }
            if (t.woke.run, t.woke.park) != (run, t.wake_ups) {
                t.woke = DriverWoke {
                    run,
                    park: t.wake_ups,
                    first: self.client,
                    another: false,
                };
                self.counts.driver_woke_any.fetch_add(1, Relaxed);
            } else if !t.woke.another && t.woke.first != self.client {
                t.woke.another = true;
                self.counts.driver_woke_two.fetch_add(1, Relaxed);
            }
        });
        self.task_waker.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Two clients' tasks woken by one timer (the driver's, in one park), then one woken
    /// alone: one park that woke two, one that woke one.
    #[test]
    fn counts_the_parks_that_woke_two_clients_at_once() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .on_thread_park(parking)
            .on_thread_unpark(unparked)
            .build()
            .unwrap_or_else(|e| panic!("runtime: {e}"));
        let per = rt.block_on(async {
            let counts = Arc::new(WakeCounts::default());
            let before = counts.read();
            let at = tokio::time::Instant::now() + Duration::from_millis(20);
            let together = |client| {
                tokio::spawn(Watched::new(client, counts.clone(), async move {
                    tokio::time::sleep_until(at).await;
                }))
            };
            let (a, b) = (together(0), together(1));
            let _ = (a.await, b.await);
            tokio::spawn(Watched::new(0, counts.clone(), async {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }))
            .await
            .unwrap_or_else(|e| panic!("task: {e}"));
            before.per(1)
        });
        let Some(per) = per else {
            panic!("no reading");
        };
        assert_eq!(per.driver_woke_two, 1.0, "{per:?}");
        assert_eq!(per.driver_woke_one, 1.0, "{per:?}");
        assert!(per.wake_ups >= 2.0, "{per:?}");
    }
}
