//! What one coordinator takes on at once: sessions, and acquires that wait, in all and per
//! name. Past a limit a request is refused at once, with a stable code, and counted.
//!
//! Each waiting acquire polls every master until it gets the lock, and each session renews
//! its lock on every master every third of its TTL: without a bound, a thousand waiters kept
//! each master at tens of thousands of commands a second and the coordinator's CPU busy, and
//! sessions held a descriptor and memory each until the process ran out.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::http::StatusCode;

use super::error::ApiError;

/// Counter, label `limit` (`connections`, `sessions`, `waiting`, `waiting_per_name`): requests
/// (or connections) refused at a limit.
pub const HTTP_REFUSED: &str = "redquorum_http_refused_total";

/// The limits' names, as the metric labels them.
pub(crate) const LIMITS: [&str; 4] = ["connections", "sessions", "waiting", "waiting_per_name"];

/// Default for [`ServiceLimits::sessions`].
pub const DEFAULT_MAX_SESSIONS: usize = 1_000;
/// Default for [`ServiceLimits::waiting`].
pub const DEFAULT_MAX_WAITING: usize = 1_000;
/// Default for [`ServiceLimits::waiting_per_name`].
pub const DEFAULT_MAX_WAITING_PER_NAME: usize = 100;

/// How many requests of each sort one coordinator serves at once.
#[derive(Clone, Copy, Debug)]
pub struct ServiceLimits {
    /// Sessions open.
    pub sessions: usize,
    /// Acquires waiting (`wait_ms` above 0), sessions' and multi-locks' included.
    pub waiting: usize,
    /// Acquires waiting for one name (a multi-lock waits for each of its names).
    pub waiting_per_name: usize,
}

impl Default for ServiceLimits {
    fn default() -> Self {
        ServiceLimits {
            sessions: DEFAULT_MAX_SESSIONS,
            waiting: DEFAULT_MAX_WAITING,
            waiting_per_name: DEFAULT_MAX_WAITING_PER_NAME,
        }
    }
}

/// The requests under way that count against the limits.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    limits: ServiceLimits,
    sessions: AtomicUsize,
    waiting: AtomicUsize,
    per_name: Mutex<HashMap<String, usize>>,
}

/// A place taken under a limit, given back when dropped.
#[derive(Debug)]
pub(crate) struct Admitted {
    admission: Arc<Admission>,
    session: bool,
    /// The names waited for, when the request waits.
    names: Option<Vec<String>>,
}

/// Counts a refusal at `limit`.
pub(crate) fn refused(limit: &'static str) {
    metrics::counter!(HTTP_REFUSED, "limit" => limit).increment(1);
}

/// Takes one of `limit`'s places in `count`, or says that none is left.
fn take(count: &AtomicUsize, limit: usize) -> bool {
    count
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < limit).then_some(n + 1)
        })
        .is_ok()
}

impl Admission {
    pub(crate) fn new(limits: ServiceLimits) -> Arc<Self> {
        Arc::new(Admission {
            limits,
            ..Admission::default()
        })
    }

    /// Admits a request: a session if `session`, waiting for `names` if it waits. Refused
    /// with `503 too_many_sessions` or `503 too_many_waiting` when the coordinator has all it
    /// takes of them, and `429 too_many_waiting_for_name` when one of `names` has.
    pub(crate) fn admit(
        self: &Arc<Self>,
        session: bool,
        waits: bool,
        names: &[&str],
    ) -> Result<Admitted, ApiError> {
        let mut admitted = Admitted {
            admission: self.clone(),
            session: false,
            names: None,
        };
        if session {
            if !take(&self.sessions, self.limits.sessions) {
                refused("sessions");
                return Err(at_capacity(
                    "too_many_sessions",
                    format!(
                        "this server holds its most sessions ({})",
                        self.limits.sessions
                    ),
                ));
            }
            admitted.session = true;
        }
        if waits {
            self.admit_waiting(names)?;
            admitted.names = Some(names.iter().map(|n| (*n).to_owned()).collect());
        }
        Ok(admitted)
    }

    fn admit_waiting(&self, names: &[&str]) -> Result<(), ApiError> {
        if !take(&self.waiting, self.limits.waiting) {
            refused("waiting");
            return Err(at_capacity(
                "too_many_waiting",
                format!(
                    "this server has its most acquires waiting ({}); retry, or ask without wait_ms",
                    self.limits.waiting
                ),
            ));
        }
        let mut per_name = self.per_name.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(full) = names
            .iter()
            .find(|n| per_name.get(**n).copied().unwrap_or(0) >= self.limits.waiting_per_name)
        {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            refused("waiting_per_name");
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_waiting_for_name",
                format!(
                    "{} acquires already wait for {full:?} on this server; retry later",
                    self.limits.waiting_per_name
                ),
            ));
        }
        for name in names {
            *per_name.entry((*name).to_owned()).or_default() += 1;
        }
        Ok(())
    }
}

impl Admitted {
    /// Stops counting as waiting (the acquire is over), and keeps counting as a session.
    pub(crate) fn done_waiting(&mut self) {
        let Some(names) = self.names.take() else {
            return;
        };
        let admission = &self.admission;
        admission.waiting.fetch_sub(1, Ordering::AcqRel);
        let mut per_name = admission
            .per_name
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for name in names {
            if let Some(count) = per_name.get_mut(&name) {
                *count -= 1;
                if *count == 0 {
                    per_name.remove(&name);
                }
            }
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.done_waiting();
        if self.session {
            self.admission.sessions.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// `503` with `code`: the server has all it takes of something; another instance may not.
fn at_capacity(code: &str, message: String) -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
}
