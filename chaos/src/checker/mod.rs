//! The checker: reads a history and says what happened to mutual exclusion, to the protected
//! resource and to liveness, then compares that with what the scenario expected.
//!
//! Pure: no I/O, no clock. Everything is computed from the events.
//!
//! - A **hold** is one successful acquisition (one holder token). Its *certain window* is
//!   `[ok, min(valid_until, release invoked)]`: the time the library promised the lock was held
//!   and the holder meant to use it (`valid_until` moves with each successful extend). Its
//!   *action window* is `[ok, last thing the holder did]`, which runs past the certain window
//!   when a holder acts after its validity (it was paused between its check and its write).
//! - A **definite violation** is two holds whose certain windows overlap: the lock was granted
//!   to a second holder while the first still held it by the library's own account.
//! - A **possible violation** is two holds whose action windows overlap although their certain
//!   windows do not: a holder acted on an expired lock while another held it.
//! - A **lost update** is an accepted write that another accepted write overwrote without
//!   having seen it: every write stores the value it read plus one, so two accepted writes of
//!   the same value mean one of them was lost.
//! - A **stale write** is a write accepted although a write with a higher fencing token had
//!   been accepted before it was sent. With fencing on there must be none.
//! - **Fence order**: a lock acquired after another was granted must carry a larger fencing token
//!   on each name they share (a reader: at least the last writer's; nested reentrant holds:
//!   the lock's).
//! - **Kinds** (in `exclusion`): two holds conflict only where their kinds exclude each other
//!   (readers share, a reentrant owner's holds nest, a multi-lock conflicts on each of its
//!   names); a semaphore is **crowded** when more holders than its permits hold it at once
//!   (certain windows: definite; action windows only: possible); a multi-lock section must
//!   hold every one of its names.
//! - **Liveness**: acquire success per phase, time from a heal to the first success, the final
//!   acquire, and acquires that succeeded while a majority was out (there must be none).
//!
//! `analysis` reads a history into [`Analysis`], whose parts are in `findings`; `verdict`
//! compares those figures with a scenario's [`Expectation`].

mod analysis;
mod exclusion;
mod findings;
#[cfg(test)]
mod test_history;
mod verdict;

pub(crate) use analysis::analyse;
pub(crate) use findings::{Analysis, Crowd, Overlap, PhaseStats, WriteOutcome};
pub(crate) use verdict::{Expectation, Verdict, Want, judge};
