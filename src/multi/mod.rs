//! Multi-lock: several names taken all or nothing, each on its own quorum, in one fixed order,
//! with one validity (the shortest), extended and released together.
//!
//! Names are taken one after the other in byte order: two multi-locks over overlapping names
//! both take their shared names in the same order, so neither can hold one the other waits for
//! while waiting for one the other holds. While it waits for a later name, a multi-lock keeps
//! the names it holds alive (it extends them before they run low) and gives them all back if
//! the wait runs out or the caller stops waiting.

mod guard;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use tracing::debug;

pub use guard::MultiGuard;

use crate::cluster::Cluster;
use crate::config::{LockOptions, fmt, limits, validate_name};
use crate::error::{Error, Operation, Result};
use crate::lock::{self, Lock};

/// Several locks held together, all or nothing: one [`Lock`] per name, in the order they were
/// taken (the names' byte order).
#[derive(Debug)]
#[must_use = "locks that are dropped stay held on the nodes until their TTL expires; call release()"]
pub struct MultiLock {
    locks: Vec<Lock>,
}

impl MultiLock {
    /// The locks, one per name, in the order they were taken.
    pub fn locks(&self) -> &[Lock] {
        &self.locks
    }

    /// The names, in the order they were taken.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.locks.iter().map(Lock::name)
    }

    /// The fencing token of `name`, if it is one of this multi-lock's names.
    pub fn fence_of(&self, name: &str) -> Option<u64> {
        self.locks
            .iter()
            .find(|l| l.name() == name)
            .map(Lock::fence)
    }

    /// Until when (monotonic clock) every name is certainly held: the shortest validity.
    pub fn valid_until(&self) -> Instant {
        shortest(self.locks.iter().map(Lock::valid_until))
    }

    /// How much longer every name is certainly held; zero once one may have expired.
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// Whether every name is still certainly held.
    pub fn is_valid(&self) -> bool {
        self.remaining() > Duration::ZERO
    }

    /// Sets every name's TTL to `ttl` on its quorum, all at once.
    ///
    /// # Errors
    ///
    /// The first error of [`Lock::extend`] among the names (the others were extended, and
    /// [`MultiLock::valid_until`] says what is certain now).
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        extend_all(&mut self.locks, ttl).await
    }

    /// Releases every name on every node, all at once.
    ///
    /// # Errors
    ///
    /// The first error of [`Lock::release`] among the names; the others were released.
    pub async fn release(self) -> Result<()> {
        release_all(self.locks).await
    }

    pub(crate) fn into_locks(self) -> Vec<Lock> {
        self.locks
    }
}

/// Takes every one of `names` (deduplicated) with `opts`, in byte order, waiting at most
/// `wait` in all; on failure, gives back the names already taken.
pub(crate) async fn acquire_all(
    cluster: &Arc<Cluster>,
    names: &[&str],
    opts: &LockOptions,
    wait: Duration,
) -> Result<MultiLock> {
    let names = ordered(names)?;
    opts.validate(&cluster.settings)?;
    let started = Instant::now();
    let wait_until = started + wait;
    let mut taken = Taken(Vec::with_capacity(names.len()));
    for name in names {
        match take_keeping_alive(cluster, name, opts, wait_until, &mut taken.0).await {
            Ok(lock) => taken.0.push(lock),
            Err(e) => {
                give_back(taken.finish()).await;
                return Err(e);
            }
        }
    }
    // The first names' validity ran down while the last were taken.
    let all = MultiLock {
        locks: taken.finish(),
    };
    if all.remaining() < opts.min_validity {
        let name = all.locks.first().map(|l| l.name().to_owned());
        give_back(all.into_locks()).await;
        return Err(Error::Timeout {
            operation: Operation::Acquire,
            name: name.unwrap_or_default(),
            elapsed: started.elapsed(),
            detail: format!(
                "every name was taken, but too late to leave the minimum validity of {}",
                fmt(opts.min_validity)
            ),
        });
    }
    Ok(all)
}

/// The names a multi-lock has taken so far. Should its future be dropped before it finishes (a
/// caller that stopped waiting, a request whose client left), they are given back in the
/// background instead of staying held, by nobody, until their TTL.
struct Taken(Vec<Lock>);

impl Taken {
    /// The names, which the caller now answers for.
    fn finish(&mut self) -> Vec<Lock> {
        std::mem::take(&mut self.0)
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let locks = self.finish();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(give_back(locks));
            }
            Err(_) => {
                debug!("a multi-lock dropped without a runtime: its names expire at their TTL")
            }
        }
    }
}

/// Takes `name`, in turns short enough that the names in `held` never run low meanwhile:
/// between turns they are extended to the full TTL. Each turn waits in line where the first
/// put it: a turn that went to the back of the line could be passed over for as long as
/// others keep the name busy.
async fn take_keeping_alive(
    cluster: &Arc<Cluster>,
    name: &str,
    opts: &LockOptions,
    wait_until: Instant,
    held: &mut [Lock],
) -> Result<Lock> {
    let waiting_since = Instant::now();
    loop {
        let left = wait_until.saturating_duration_since(Instant::now());
        // Half of what the held names have left, so that there is time to extend them after.
        let turn = if held.is_empty() {
            left
        } else {
            left.min(shortest_remaining(held) / 2)
        };
        match lock::acquire_waiting_since(cluster, name, opts, turn, waiting_since).await {
            Ok(lock) => return Ok(lock),
            Err(e @ (Error::Contended { .. } | Error::Timeout { .. })) if turn < left => {
                debug!(lock = name, "{e}");
                debug!(lock = name, "still waiting; keeping the names held alive");
                extend_all(held, opts.ttl).await?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Names checked, deduplicated and in byte order.
fn ordered<'n>(names: &[&'n str]) -> Result<Vec<&'n str>> {
    if names.is_empty() {
        return Err(Error::invalid(
            "names",
            "a multi-lock needs at least one name",
        ));
    }
    let mut names = names.to_vec();
    names.sort_unstable();
    names.dedup();
    // Counted once deduplicated: a name given twice is taken once, and costs the masters once.
    if names.len() > limits::MAX_MULTI_NAMES {
        return Err(Error::invalid(
            "names",
            format!(
                "{} distinct names; a multi-lock takes at most {}",
                names.len(),
                limits::MAX_MULTI_NAMES
            ),
        ));
    }
    for name in &names {
        validate_name(name)?;
    }
    Ok(names)
}

fn shortest(instants: impl Iterator<Item = Instant>) -> Instant {
    instants.min().unwrap_or_else(Instant::now)
}

fn shortest_remaining(locks: &[Lock]) -> Duration {
    shortest(locks.iter().map(Lock::valid_until)).saturating_duration_since(Instant::now())
}

async fn extend_all(locks: &mut [Lock], ttl: Duration) -> Result<()> {
    let results = join_all(locks.iter_mut().map(|l| l.extend(ttl))).await;
    results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
}

async fn release_all(locks: Vec<Lock>) -> Result<()> {
    let results = join_all(locks.into_iter().map(Lock::release)).await;
    results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
}

/// Gives back names taken by a multi-lock that failed, or that was refused a guard; what
/// cannot be released expires.
pub(super) async fn give_back(locks: Vec<Lock>) {
    if let Err(e) = release_all(locks).await {
        debug!("giving back a failed multi-lock's names: {e} (they expire at their TTL)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_taken_once_each_in_byte_order() {
        assert_eq!(ordered(&["b", "a", "b", "C"]).unwrap(), vec!["C", "a", "b"]);
        assert!(ordered(&[]).is_err());
        assert!(ordered(&["a", ""]).is_err());
        let many: Vec<String> = (0..=limits::MAX_MULTI_NAMES)
            .map(|i| i.to_string())
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(ordered(&many).is_err());
        // The limit counts names, not copies.
        let copies = vec!["same"; limits::MAX_MULTI_NAMES + 1];
        assert_eq!(ordered(&copies).unwrap(), vec!["same"]);
    }
}
