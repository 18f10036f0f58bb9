//! Options for one acquire: TTL, how long to wait, how to pace retries.

use std::time::Duration;

use super::{ClientSettings, LockKind, check_range, defaults, fmt, limits};
use crate::error::{Error, Result};

/// Options for one acquire: TTL, how long to wait, how to pace retries.
///
/// ```
/// use std::time::Duration;
/// use redquorum::LockOptions;
///
/// let opts = LockOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(5));
/// assert_eq!(opts, LockOptions::default().ttl(Duration::from_secs(30)).wait(Duration::from_secs(5)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct LockOptions {
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    pub(crate) retry_delay: Duration,
    pub(crate) retry_jitter: Duration,
    pub(crate) min_validity: Duration,
    pub(crate) fair: bool,
    pub(crate) kind: LockKind,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: defaults::TTL,
            wait: defaults::WAIT,
            retry_delay: defaults::RETRY_DELAY,
            retry_jitter: defaults::RETRY_JITTER,
            min_validity: defaults::MIN_VALIDITY,
            fair: defaults::FAIR,
            kind: LockKind::Mutex,
        }
    }
}

impl LockOptions {
    /// Default options with the given TTL.
    pub fn new(ttl: Duration) -> Self {
        LockOptions::default().ttl(ttl)
    }

    /// How long the lock lives on each node unless extended. Default: [`defaults::TTL`];
    /// bounds: [`limits::MIN_TTL`]..=[`limits::MAX_TTL`].
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long [`Client::acquire`](crate::Client::acquire) keeps retrying. Zero makes one attempt.
    /// Default: [`defaults::WAIT`]; at most [`limits::MAX_WAIT`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Fixed part of the pause between attempts. Default: [`defaults::RETRY_DELAY`].
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// Random part of the pause between attempts. Default: [`defaults::RETRY_JITTER`].
    pub fn retry_jitter(mut self, jitter: Duration) -> Self {
        self.retry_jitter = jitter;
        self
    }

    /// Whether waiters take the lock in the order they came (`true`), or a free lock goes to
    /// whoever asks first (`false`). Default: [`defaults::FAIR`].
    ///
    /// Fair: waiters queue on the masters in the order they started waiting; a free lock goes
    /// only to the first, and a release hands the lock straight to it. No waiter is passed
    /// over, and each hand-over costs a message to the next waiter.
    ///
    /// Not fair: waiters still queue, but only to be woken: a release wakes the first, and a
    /// free lock goes to whichever attempt reaches a quorum first, which is often the holder
    /// that just released it. More critical sections per second under contention; a waiter
    /// can lose several races in a row, though never all of them (every retry has its
    /// chance), and the wait still bounds it. Fair callers of the same name still go before
    /// each other in order, but not before unfair ones.
    pub fn fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// The kind of lock to take: a mutex (the default), a hold of a reentrant lock, a reader's
    /// or the writer's share of a read-write lock, or a semaphore's permit. The kinds other
    /// than the mutex are never fair (see [`LockKind`]).
    pub fn kind(mut self, kind: LockKind) -> Self {
        self.kind = kind;
        self
    }

    /// Whether this acquire queues fairly: asked for, and possible for its kind.
    pub(crate) fn is_fair(&self) -> bool {
        self.fair && self.kind.may_be_fair()
    }

    /// Least validity an attempt must leave to succeed. Default: [`defaults::MIN_VALIDITY`].
    pub fn min_validity(mut self, min: Duration) -> Self {
        self.min_validity = min;
        self
    }

    /// Checks every option against [`limits`] and against the client's drift allowance.
    pub(crate) fn validate(&self, settings: &ClientSettings) -> Result<()> {
        settings.validate_ttl(self.ttl)?;
        self.kind.validate()?;
        if self.wait > limits::MAX_WAIT {
            return Err(Error::invalid(
                "wait",
                format!(
                    "{} is above the maximum of {}",
                    fmt(self.wait),
                    fmt(limits::MAX_WAIT)
                ),
            ));
        }
        check_range(
            "retry_delay",
            self.retry_delay,
            Duration::ZERO,
            limits::MAX_RETRY_DELAY,
        )?;
        check_range(
            "retry_jitter",
            self.retry_jitter,
            Duration::ZERO,
            limits::MAX_RETRY_DELAY,
        )?;
        if self.retry_delay + self.retry_jitter < Duration::from_millis(1) && !self.wait.is_zero() {
            return Err(Error::invalid(
                "retry_delay",
                "retry delay plus jitter must be at least 1ms, or retries would hammer the nodes",
            ));
        }
        let usable = self.ttl.saturating_sub(settings.drift(self.ttl));
        if self.min_validity >= usable {
            return Err(Error::invalid(
                "min_validity",
                format!(
                    "{} leaves nothing of a {} TTL after the {} drift allowance; use a longer TTL or a smaller minimum validity",
                    fmt(self.min_validity),
                    fmt(self.ttl),
                    fmt(settings.drift(self.ttl))
                ),
            ));
        }
        Ok(())
    }
}
