//! Detached work: polled at once, then where it is woken, by a task's call, the I/O driver or
//! the poller, and never spun on for ever.

use super::*;
use std::sync::atomic::AtomicUsize;

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

/// A gate, and the handles to open it, to take its waker, and to count its polls.
type Handles = (Arc<AtomicBool>, Arc<Mutex<Option<Waker>>>, Arc<AtomicUsize>);

fn gate() -> (Gate, Handles) {
    let open = Arc::new(AtomicBool::new(false));
    let waker = Arc::new(Mutex::new(None::<Waker>));
    let polls = Arc::new(AtomicUsize::new(0));
    let gate = Gate {
        open: open.clone(),
        waker: waker.clone(),
        polls: polls.clone(),
    };
    (gate, (open, waker, polls))
}

/// Wakes the future that left its waker in `waker`, as the runtime's I/O driver would.
fn wake(waker: &Mutex<Option<Waker>>) {
    if let Some(w) = lock(waker).take() {
        w.wake();
    }
}

/// Wakes it as a task handing it a connection outside any call would.
fn hand_over(waker: &Mutex<Option<Waker>>) {
    marked(Polling::Handover, || wake(waker));
}

/// Waits until the detached future behind `finished` has finished, within 5 s.
async fn until_finished(finished: oneshot::Receiver<()>) {
    tokio::time::timeout(std::time::Duration::from_secs(5), finished)
        .await
        .expect("finished in time")
        .expect("finished");
}

/// A gate detached and then handed over outside any call, which spawns the poller to poll it:
/// the gate's handles, and what says it finished.
async fn left_to_the_poller(background: &Arc<Background>) -> (Handles, oneshot::Receiver<()>) {
    let (gate, handles) = gate();
    let finished = background.detach(gate);
    hand_over(&handles.1);
    tokio::task::yield_now().await;
    assert!(background.poller.is_spawned(), "the poller polls the gate");
    (handles, finished)
}

/// Lets the poller run, if it is to, long enough to end.
async fn let_the_poller_run() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn detached_work_is_polled_at_once_then_when_woken() {
    let background = Arc::new(Background::default());
    let (gate, (open, waker, polls)) = gate();
    let mut finished = background.detach(gate);
    assert_eq!(polls.load(Ordering::SeqCst), 1, "polled once when detached");
    assert!(finished.try_recv().is_err());
    open.store(true, Ordering::SeqCst);
    // Woken from a task's call: queued, then polled on the call's way out.
    marked(Polling::TaskCall, || {
        wake(&waker);
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "not polled inside the wake-up"
        );
        background.run_ready();
    });
    assert_eq!(polls.load(Ordering::SeqCst), 2);
    assert!(finished.try_recv().is_ok(), "done, and said so");
    assert!(!background.poller.is_spawned(), "no task was needed");
}

/// A future that wakes itself at every poll, and is done after `left` more polls.
struct Restless {
    left: usize,
    polls: Arc<AtomicUsize>,
}

impl Future for Restless {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        if self.left == 0 {
            return Poll::Ready(());
        }
        self.left -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[tokio::test]
async fn work_that_wakes_itself_as_it_is_polled_is_left_to_the_poller() {
    let background = Arc::new(Background::default());
    let polls = Arc::new(AtomicUsize::new(0));
    let finished = background.detach(Restless {
        left: 10 * ROUNDS_IN_PLACE,
        polls: polls.clone(),
    });
    // Polled once, then a bounded number of rounds in place: the caller gets on.
    assert_eq!(polls.load(Ordering::SeqCst), 1 + ROUNDS_IN_PLACE);
    assert!(background.poller.is_spawned(), "the rest is the poller's");
    until_finished(finished).await;
    assert_eq!(polls.load(Ordering::SeqCst), 1 + 10 * ROUNDS_IN_PLACE);
}

#[test]
fn work_detached_by_a_task_that_spent_its_budget_still_finishes() {
    let (told, heard) = std::sync::mpsc::channel();
    // On a thread of its own, so that a detach that never returns fails the test rather
    // than hanging it.
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let background = Arc::new(Background::default());
            // The task's cooperative budget, spent: the runtime's resources now ask it
            // to yield, by waking it and answering Pending.
            while futures::FutureExt::now_or_never(tokio::task::consume_budget()).is_some() {}
            let finished = background.detach(tokio::task::consume_budget());
            let _ = told.send(finished);
        });
    });
    let mut finished = heard
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("the detach returned");
    assert!(finished.try_recv().is_ok(), "finished in its first poll");
}

#[tokio::test]
async fn a_wake_up_from_the_runtime_is_polled_where_it_happens() {
    let background = Arc::new(Background::default());
    for _ in 0..3 {
        let (gate, (open, waker, polls)) = gate();
        let mut finished = background.detach(gate);
        open.store(true, Ordering::SeqCst);
        // As the I/O driver wakes it: outside any call, on a runtime's thread.
        wake(&waker);
        assert_eq!(polls.load(Ordering::SeqCst), 2, "polled inside the wake-up");
        assert!(finished.try_recv().is_ok(), "done, and said so");
    }
    assert!(!background.poller.is_spawned(), "no task was needed");
}

#[tokio::test]
async fn a_connection_handed_over_outside_any_call_is_polled_by_the_poller() {
    let background = Arc::new(Background::default());
    for _ in 0..3 {
        let (gate, (open, waker, polls)) = gate();
        let finished = background.detach(gate);
        open.store(true, Ordering::SeqCst);
        hand_over(&waker);
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "not polled inside the wake-up"
        );
        // The poller polled it.
        until_finished(finished).await;
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }
}

#[test]
fn a_wake_up_with_no_runtime_is_left_for_one() {
    let background = Arc::new(Background::default());
    let (gate, (open, waker, polls)) = gate();
    let mut finished = background.detach(gate);
    open.store(true, Ordering::SeqCst);
    wake(&waker);
    assert_eq!(polls.load(Ordering::SeqCst), 1, "not polled off a runtime");
    assert!(finished.try_recv().is_err());
    // The next task's call on the client polls it.
    marked(Polling::TaskCall, || background.run_ready());
    assert_eq!(polls.load(Ordering::SeqCst), 2);
    assert!(finished.try_recv().is_ok());
}

#[tokio::test]
async fn the_poller_ends_when_the_last_work_is_finished_elsewhere() {
    let background = Arc::new(Background::default());
    let ((open, waker, polls), finished) = left_to_the_poller(&background).await;
    assert_eq!(polls.load(Ordering::SeqCst), 2, "the poller polled it");
    // Finished by a wake-up from the runtime, not by the poller.
    open.store(true, Ordering::SeqCst);
    wake(&waker);
    assert_eq!(polls.load(Ordering::SeqCst), 3);
    until_finished(finished).await;
    let_the_poller_run().await;
    assert!(
        !background.poller.is_spawned(),
        "the poller was left waiting"
    );
}

#[tokio::test]
async fn the_poller_ends_with_its_client() {
    let background = Arc::new(Background::default());
    // The future is left unfinished, and nobody waits for it.
    let (_handles, finished) = left_to_the_poller(&background).await;
    drop(finished);
    let weak = Arc::downgrade(&background);
    drop(background);
    // The poller held the client weakly and ended; the future held it weakly too.
    tokio::task::yield_now().await;
    assert!(weak.upgrade().is_none());
}

#[tokio::test]
async fn the_poller_ends_once_every_detached_future_is_finished() {
    let background = Arc::new(Background::default());
    let ((open, waker, _polls), finished) = left_to_the_poller(&background).await;
    open.store(true, Ordering::SeqCst);
    hand_over(&waker);
    until_finished(finished).await;
    let_the_poller_run().await;
    assert!(!background.poller.is_spawned());
}
