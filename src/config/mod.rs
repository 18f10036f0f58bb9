//! Settings, their defaults and their limits, in one place: client-wide settings and per-lock
//! options, and the checks of every value that comes from outside.
//!
//! Every default the library uses is a constant in [`defaults`], and every bound it enforces is a
//! constant in [`limits`]; nothing else in the crate invents a number of its own.

use std::time::Duration;

use crate::error::{Error, Result};

pub(crate) mod kind;
pub(crate) mod options;

pub(crate) use kind::random_token;
pub use kind::{LockKind, Owner};
pub(crate) use options::LockOptions;

/// The values used when a setting is not given.
pub mod defaults {
    use std::time::Duration;

    /// How long a lock lives on each node unless extended: 10 s.
    pub const TTL: Duration = Duration::from_secs(10);
    /// Clock-drift allowance as a fraction of the TTL: 0.01.
    ///
    /// Validity is shortened by `TTL × DRIFT_FACTOR + DRIFT_MIN` to allow for nodes' clocks
    /// running faster than the client's.
    pub const DRIFT_FACTOR: f64 = 0.01;
    /// Fixed part of the clock-drift allowance: 2 ms (timer granularity on the nodes).
    pub const DRIFT_MIN: Duration = Duration::from_millis(2);
    /// How long one node may take to answer one call before it counts as failed: 50 ms.
    ///
    /// It is small next to the TTL so that a dead or paused node costs little; it is also what
    /// a reconnecting node can cost at most.
    pub const NODE_TIMEOUT: Duration = Duration::from_millis(50);
    /// How long a TCP (and TLS) connect to a node may take in the background: 1 s.
    ///
    /// Calls never wait for this: they are cut off at the per-node deadline. It is also how
    /// long (at least 1 s) an open connection may leave bytes unacknowledged by the node before
    /// it is closed and made again, as when the network cuts the node off (Linux).
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
    /// Fixed part of the pause between two acquire attempts: 25 ms.
    pub const RETRY_DELAY: Duration = Duration::from_millis(25);
    /// Random part added to the retry delay, uniform in `0..RETRY_JITTER`: 50 ms.
    ///
    /// It spreads competing clients apart so that they do not split the votes again.
    pub const RETRY_JITTER: Duration = Duration::from_millis(50);
    /// How long [`Client::acquire`](crate::Client::acquire) keeps trying: 10 s.
    pub const WAIT: Duration = Duration::from_secs(10);
    /// Whether waiters take a lock in the order they came (see
    /// [`LockOptions::fair`](crate::LockOptions::fair)): `true`.
    pub const FAIR: bool = true;
    /// The least validity an acquire must leave to count as a success: 5 ms.
    pub const MIN_VALIDITY: Duration = Duration::from_millis(5);
    /// Prefix of every key redquorum writes: `redquorum:`. Locks are kept under
    /// `{prefix}lock:{name}` and fencing counters under `{prefix}fence:{name}`.
    pub const KEY_PREFIX: &str = "redquorum:";
    /// Longest TTL a client accepts: 24 h. (A node that loses its data is quarantined until
    /// the latest expiry of the locks the other nodes granted, never longer than the longest
    /// TTL actually asked for in the deployment; the nodes record both.)
    pub const MAX_TTL: Duration = super::limits::MAX_TTL;
    /// How long [`Client::doctor`](crate::Client::doctor) gives each master, unless the
    /// per-node deadline is longer: 2 s. Doctor connects anew and makes a few round trips.
    pub const DOCTOR_DEADLINE: Duration = Duration::from_secs(2);
    /// A master clock further than this from the local clock is reported: 1 s.
    pub const CLOCK_OFFSET_WARNING: Duration = Duration::from_secs(1);
}

/// The bounds enforced on input; anything outside them is an
/// [`Error::InvalidArgument`] and touches no node.
pub mod limits {
    use std::time::Duration;

    /// Shortest TTL accepted: 10 ms.
    pub const MIN_TTL: Duration = Duration::from_millis(10);
    /// Longest TTL accepted: 24 h.
    pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);
    /// Longest wait accepted: 24 h.
    pub const MAX_WAIT: Duration = Duration::from_secs(24 * 60 * 60);
    /// Longest retry delay or jitter accepted: 1 min.
    pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);
    /// Longest per-node deadline accepted: 10 s.
    pub const MAX_NODE_TIMEOUT: Duration = Duration::from_secs(10);
    /// Longest lock name accepted, in bytes of UTF-8: 512.
    pub const MAX_NAME_BYTES: usize = 512;
    /// Longest key prefix accepted, in bytes: 128.
    pub const MAX_PREFIX_BYTES: usize = 128;
    /// Longest holder token accepted, in bytes: 128.
    pub const MAX_TOKEN_BYTES: usize = 128;
    /// Most permits a semaphore may have: 1024.
    pub const MAX_PERMITS: u32 = 1024;
    /// Most names one multi-lock may take: 64.
    pub const MAX_MULTI_NAMES: usize = 64;
    /// Most nodes a client may have: 31.
    pub const MAX_NODES: usize = 31;
    /// Largest drift factor accepted: 0.5.
    pub const MAX_DRIFT_FACTOR: f64 = 0.5;
}

/// Client-wide settings, fixed when the client is built.
#[derive(Debug, Clone)]
pub(crate) struct ClientSettings {
    pub(crate) key_prefix: String,
    pub(crate) max_ttl: Duration,
    /// `None`: from what the nodes recorded (the latest expiry of their locks, at most the
    /// longest TTL asked).
    pub(crate) quarantine: Option<Duration>,
    pub(crate) require_durable: bool,
    pub(crate) fence_clock: bool,
    pub(crate) node_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) drift_min: Duration,
    /// Semaphores granted by a bare majority: unsafe, for the chaos suite's positive control.
    pub(crate) unsafe_majority_semaphores: bool,
    /// PEM certificates of the authorities that `rediss://` nodes' certificates must chain to,
    /// instead of the web's root authorities.
    pub(crate) tls_root_certificates: Option<std::sync::Arc<[u8]>>,
}

impl Default for ClientSettings {
    fn default() -> Self {
        ClientSettings {
            key_prefix: defaults::KEY_PREFIX.to_owned(),
            max_ttl: defaults::MAX_TTL,
            quarantine: None,
            require_durable: false,
            fence_clock: true,
            node_timeout: defaults::NODE_TIMEOUT,
            connect_timeout: defaults::CONNECT_TIMEOUT,
            drift_factor: defaults::DRIFT_FACTOR,
            drift_min: defaults::DRIFT_MIN,
            unsafe_majority_semaphores: false,
            tls_root_certificates: None,
        }
    }
}

impl ClientSettings {
    /// Checks every setting against [`limits`].
    pub(crate) fn validate(&self) -> Result<()> {
        let s = self;
        if s.key_prefix.len() > limits::MAX_PREFIX_BYTES {
            return Err(Error::invalid(
                "key_prefix",
                format!(
                    "is {} bytes; at most {} are allowed",
                    s.key_prefix.len(),
                    limits::MAX_PREFIX_BYTES
                ),
            ));
        }
        check_range("max_ttl", s.max_ttl, limits::MIN_TTL, limits::MAX_TTL)?;
        if s.quarantine.is_some_and(|q| q > limits::MAX_TTL) {
            return Err(Error::invalid(
                "quarantine",
                format!("must be at most {}", fmt(limits::MAX_TTL)),
            ));
        }
        check_range(
            "node_timeout",
            s.node_timeout,
            Duration::from_millis(1),
            limits::MAX_NODE_TIMEOUT,
        )?;
        check_range(
            "connect_timeout",
            s.connect_timeout,
            Duration::from_millis(1),
            limits::MAX_NODE_TIMEOUT,
        )?;
        if !(0.0..=limits::MAX_DRIFT_FACTOR).contains(&s.drift_factor) {
            return Err(Error::invalid(
                "drift_factor",
                format!(
                    "is {}; it must be between 0 and {}",
                    s.drift_factor,
                    limits::MAX_DRIFT_FACTOR
                ),
            ));
        }
        Ok(())
    }

    /// The clock-drift allowance for a TTL.
    pub(crate) fn drift(&self, ttl: Duration) -> Duration {
        crate::quorum::drift(ttl, self.drift_factor, self.drift_min)
    }

    /// Checks a TTL against [`limits::MIN_TTL`] and this client's max TTL.
    pub(crate) fn validate_ttl(&self, ttl: Duration) -> Result<()> {
        check_range("ttl", ttl, limits::MIN_TTL, self.max_ttl)
    }
}

/// Checks a lock name as every operation does: non-empty and at most
/// [`limits::MAX_NAME_BYTES`] bytes. For callers that refuse a bad name before anything else
/// (the HTTP service, before a request's body fields).
///
/// # Errors
///
/// [`Error::InvalidArgument`] for the field `name`, saying what is wrong with it.
pub fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("name", "must not be empty"));
    }
    if name.len() > limits::MAX_NAME_BYTES {
        return Err(Error::invalid(
            "name",
            format!(
                "is {} bytes; at most {} are allowed",
                name.len(),
                limits::MAX_NAME_BYTES
            ),
        ));
    }
    Ok(())
}

/// Checks a holder token given back by a caller: non-empty, bounded, and of the shape this
/// library hands tokens out in, so that a mistyped or made-up one is refused before any master
/// is asked (on a free lock, a release would otherwise count it as released). Every operation
/// by token checks it; it is public for callers that refuse a bad token before anything else
/// (the HTTP service, before it reads the kind a token says it is of).
///
/// # Errors
///
/// [`Error::InvalidArgument`] for the field `token`, saying what is wrong with it.
pub fn validate_token(token: &str) -> Result<()> {
    if token.is_empty() {
        return Err(Error::invalid("token", "must not be empty"));
    }
    if token.len() > limits::MAX_TOKEN_BYTES {
        return Err(Error::invalid(
            "token",
            format!(
                "is {} bytes; at most {} are allowed",
                token.len(),
                limits::MAX_TOKEN_BYTES
            ),
        ));
    }
    if !kind::is_issued_token(token) {
        return Err(Error::invalid(
            "token",
            "is not one redquorum hands out: 32 lowercase hex digits, or for a lock handed \
             over to a waiter, the waiter's id, '/' and 32 lowercase hex digits",
        ));
    }
    Ok(())
}

pub(crate) fn check_range(
    field: &'static str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<()> {
    if value < min || value > max {
        return Err(Error::invalid(
            field,
            format!("{} is outside {} ..= {}", fmt(value), fmt(min), fmt(max)),
        ));
    }
    Ok(())
}

pub(crate) fn fmt(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ClientSettings {
        ClientSettings::default()
    }

    #[test]
    fn default_options_are_valid() {
        assert!(LockOptions::default().validate(&settings()).is_ok());
    }

    #[test]
    fn ttl_bounds_are_enforced() {
        let s = settings();
        for bad in [
            Duration::ZERO,
            Duration::from_millis(9),
            limits::MAX_TTL + Duration::from_millis(1),
        ] {
            let err = LockOptions::new(bad).validate(&s).unwrap_err();
            assert!(
                matches!(err, Error::InvalidArgument { field: "ttl", .. }),
                "{bad:?}: {err}"
            );
        }
        assert!(LockOptions::new(limits::MAX_TTL).validate(&s).is_ok());
        assert!(
            LockOptions::new(limits::MIN_TTL)
                .min_validity(Duration::from_millis(1))
                .validate(&s)
                .is_ok()
        );
    }

    #[test]
    fn min_validity_must_leave_room() {
        // 10 ms TTL: drift is 2.1 ms, so the default 5 ms minimum fits but 8 ms does not.
        let s = settings();
        assert!(LockOptions::new(limits::MIN_TTL).validate(&s).is_ok());
        let err = LockOptions::new(limits::MIN_TTL)
            .min_validity(Duration::from_millis(8))
            .validate(&s)
            .unwrap_err();
        assert!(matches!(
            err,
            Error::InvalidArgument {
                field: "min_validity",
                ..
            }
        ));
    }

    #[test]
    fn names_are_checked() {
        assert!(validate_name("").is_err());
        assert!(validate_name(&"x".repeat(limits::MAX_NAME_BYTES)).is_ok());
        assert!(validate_name(&"x".repeat(limits::MAX_NAME_BYTES + 1)).is_err());
        // Limits are in bytes: 171 three-byte characters are 513 bytes.
        assert!(validate_name(&"€".repeat(171)).is_err());
        assert!(validate_name("deploy/ünïcode ✓").is_ok());
    }
}
