//! Markings of the deployment asked for in the background: one runs at a time, and one asked
//! for while it runs makes it read the masters again once it ends.
//!
//! An answer that finds a master without its marker may come while a marking is already
//! reading the masters, after it read that master: that marking then finds nothing to do, and
//! if the request were simply dropped the master would stay unmarked, out of quarantine, until
//! some later attempt happened to meet it before its vote was decided.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

/// Whether a background marking runs, and whether one was asked for since it last read.
#[derive(Debug, Default)]
pub(crate) struct MarkingRequests {
    running: AtomicBool,
    asked: AtomicBool,
}

impl MarkingRequests {
    /// Asks for a marking; `true` when none runs, so that the caller is to start it.
    pub(crate) fn ask(&self) -> bool {
        self.asked.store(true, SeqCst);
        !self.running.swap(true, SeqCst)
    }

    /// Taken by the running marking before it reads the masters: whether a marking was asked
    /// for since its last reading.
    pub(crate) fn take(&self) -> bool {
        self.asked.swap(false, SeqCst)
    }

    /// Called by the running marking when [`take`](Self::take) found nothing: `true` when a
    /// request came in between and it is to go on. (A request whose [`ask`](Self::ask) saw it
    /// running set `asked` before this clears `running`, so it is seen here.)
    pub(crate) fn finish(&self) -> bool {
        self.running.store(false, SeqCst);
        self.asked.load(SeqCst) && !self.running.swap(true, SeqCst)
    }

    /// Gives up the turn of a marking that could not be started.
    pub(crate) fn abandon(&self) {
        self.running.store(false, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_marking_runs_and_requests_meanwhile_are_read_by_it() {
        let requests = MarkingRequests::default();
        assert!(requests.ask(), "none runs: the first asker starts it");
        assert!(
            !requests.ask(),
            "one runs: a second asker leaves it to that one"
        );
        assert!(requests.take());
        assert!(!requests.take(), "both requests are served by one reading");
        assert!(!requests.finish(), "nothing asked since: it ends");
        assert!(requests.ask(), "it ended: the next asker starts another");
    }

    #[test]
    fn a_request_after_the_last_reading_makes_the_marking_go_on() {
        let requests = MarkingRequests::default();
        assert!(requests.ask());
        assert!(requests.take());
        // The reading is done and found nothing asked; a request comes before it ends.
        assert!(!requests.take());
        assert!(!requests.ask());
        assert!(requests.finish(), "the request must not be lost");
        assert!(requests.take());
        assert!(!requests.take());
        assert!(!requests.finish());
    }

    #[test]
    fn an_abandoned_start_lets_the_next_asker_start() {
        let requests = MarkingRequests::default();
        assert!(requests.ask());
        requests.abandon();
        assert!(requests.ask());
    }
}
