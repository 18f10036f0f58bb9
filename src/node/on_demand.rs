//! A long-lived task of a client's that runs only when it has something to do: spawned when it
//! is first woken, and spawned again after it ended or its runtime dropped it (the deadline
//! watcher, the poller of detached work).

use std::future::Future;
use std::sync::Weak;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Waker;

use futures::task::AtomicWaker;

/// The task's waker, and whether it runs.
#[derive(Debug, Default)]
pub(super) struct OnDemand {
    waker: AtomicWaker,
    spawned: AtomicBool,
}

impl OnDemand {
    /// Wakes the task, spawning `start()` on the current runtime first when none runs.
    pub(super) fn wake<F>(&self, start: impl FnOnce() -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if !self.spawned.swap(true, Ordering::AcqRel) {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(start());
                }
                // No runtime to spawn on: the next wake-up from one spawns it.
                Err(_) => self.spawned.store(false, Ordering::Release),
            }
        }
        self.waker.wake();
    }

    /// The running task's waker, which [`OnDemand::wake`] wakes.
    pub(super) fn register(&self, waker: &Waker) {
        self.waker.register(waker);
    }

    /// The task is about to end when nothing is left to do. `still_idle`, asked once the next
    /// wake-up would spawn another, says whether that holds: work that came in between found
    /// the task running and spawned none. Returns whether the task ends; if not, it goes on.
    pub(super) fn end_if(&self, still_idle: impl FnOnce() -> bool) -> bool {
        self.spawned.store(false, Ordering::Release);
        // Another task may have been spawned since the store: then this one ends anyway.
        still_idle() || self.spawned.swap(true, Ordering::AcqRel)
    }

    /// Wakes the task, if it runs, without spawning one.
    pub(super) fn nudge(&self) {
        self.waker.wake();
    }

    #[cfg(test)]
    pub(super) fn is_spawned(&self) -> bool {
        self.spawned.load(Ordering::Acquire)
    }
}

/// Held by the running task: should its runtime drop it before it ends, the next wake-up
/// spawns another.
pub(super) struct Running<T> {
    owner: Weak<T>,
    on_demand: fn(&T) -> &OnDemand,
    /// Set once the task ends by itself (or finds its owner gone).
    pub(super) ended: bool,
}

impl<T> Running<T> {
    pub(super) fn new(owner: Weak<T>, on_demand: fn(&T) -> &OnDemand) -> Self {
        Running {
            owner,
            on_demand,
            ended: false,
        }
    }
}

impl<T> Drop for Running<T> {
    fn drop(&mut self) {
        if let (false, Some(owner)) = (self.ended, self.owner.upgrade()) {
            (self.on_demand)(&owner)
                .spawned
                .store(false, Ordering::Release);
        }
    }
}
