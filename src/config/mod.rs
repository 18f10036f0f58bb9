//! Settings, their defaults and their limits, in one place: the client builder and per-lock options.
//!
//! Every default the library uses is a constant in [`defaults`], and every bound it enforces is a
//! constant in [`limits`]; nothing else in the crate invents a number of its own.

use std::time::Duration;

use crate::client::Client;
use crate::error::{Error, Result};

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
    /// The least validity an acquire must leave to count as a success: 5 ms.
    pub const MIN_VALIDITY: Duration = Duration::from_millis(5);
    /// Prefix of every key redquorum writes: `redquorum:`. Locks are kept under
    /// `{prefix}lock:{name}` and fencing counters under `{prefix}fence:{name}`.
    pub const KEY_PREFIX: &str = "redquorum:";
    /// Longest TTL a client accepts: 24 h. (A node that loses its data is quarantined for the
    /// longest TTL actually asked for in the deployment, which the nodes record; this bound
    /// is used instead only when some node cannot be asked.)
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
    /// `None`: the longest TTL the nodes recorded.
    pub(crate) quarantine: Option<Duration>,
    pub(crate) require_durable: bool,
    pub(crate) fence_clock: bool,
    pub(crate) node_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) drift_min: Duration,
}

impl ClientSettings {
    /// The clock-drift allowance for a TTL.
    pub(crate) fn drift(&self, ttl: Duration) -> Duration {
        crate::quorum::drift(ttl, self.drift_factor, self.drift_min)
    }

    /// Checks a TTL against [`limits::MIN_TTL`] and this client's max TTL.
    pub(crate) fn validate_ttl(&self, ttl: Duration) -> Result<()> {
        check_range("ttl", ttl, limits::MIN_TTL, self.max_ttl)
    }
}

/// Builds a [`Client`] from a list of node URLs.
///
/// ```
/// use std::time::Duration;
///
/// let client = redquorum::Client::builder()
///     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .node_timeout(Duration::from_millis(30))
///     .build()?;
/// assert_eq!(client.quorum(), 2);
/// # Ok::<(), redquorum::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct ClientBuilder {
    pub(crate) nodes: Vec<String>,
    pub(crate) settings: ClientSettings,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            nodes: Vec::new(),
            settings: ClientSettings {
                key_prefix: defaults::KEY_PREFIX.to_owned(),
                max_ttl: defaults::MAX_TTL,
                quarantine: None,
                require_durable: false,
                fence_clock: true,
                node_timeout: defaults::NODE_TIMEOUT,
                connect_timeout: defaults::CONNECT_TIMEOUT,
                drift_factor: defaults::DRIFT_FACTOR,
                drift_min: defaults::DRIFT_MIN,
            },
        }
    }
}

impl ClientBuilder {
    /// Adds one node: `redis://[user:password@]host[:port][/db]` or `rediss://...` for TLS.
    pub fn node(mut self, url: impl Into<String>) -> Self {
        self.nodes.push(url.into());
        self
    }

    /// Adds several nodes.
    pub fn nodes<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.nodes.extend(urls.into_iter().map(Into::into));
        self
    }

    /// Prefix of every key written on the nodes. Default: [`defaults::KEY_PREFIX`].
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.settings.key_prefix = prefix.into();
        self
    }

    /// Longest TTL this client accepts. Default: [`defaults::MAX_TTL`]; at most
    /// [`limits::MAX_TTL`]. It is also the quarantine of a node that lost its data when some
    /// other node cannot be asked for the longest TTL it recorded.
    pub fn max_ttl(mut self, max: Duration) -> Self {
        self.settings.max_ttl = max;
        self
    }

    /// How long a node that lost its data (a restart without persistence, a flush) grants
    /// nothing, from when a client notices. Default: the longest TTL asked for in the
    /// deployment, which every node records, so that every lock the node forgot has expired
    /// on the other nodes before it grants again; nodes of a new deployment, and nodes that
    /// kept their data (AOF with `appendfsync always`), are never quarantined.
    /// `Duration::ZERO` turns quarantine off (the known Redlock weakness: a node that restarts
    /// empty can vote for a second holder).
    pub fn quarantine(mut self, period: Duration) -> Self {
        self.settings.quarantine = Some(period);
        self
    }

    /// When `true`, only nodes that run AOF with `appendfsync always` vote; others are reported
    /// as not durable. Default: `false` (they vote, and a warning is logged).
    pub fn require_durable(mut self, required: bool) -> Self {
        self.settings.require_durable = required;
        self
    }

    /// Whether fencing-token proposals start from the clock (microseconds since the epoch).
    /// Default: `true`, so that a client's first proposal is usually above every counter and
    /// an acquire costs one round trip. With `false` no clock is read: a client proposes one
    /// above the highest token it has seen and, when the nodes report higher counters,
    /// proposes above those at once (a round trip more). Safety is the same either way: it
    /// rests on the nodes' check alone.
    pub fn fence_clock(mut self, enabled: bool) -> Self {
        self.settings.fence_clock = enabled;
        self
    }

    /// Per-node deadline for one call. Default: [`defaults::NODE_TIMEOUT`].
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.settings.node_timeout = timeout;
        self
    }

    /// Background connect deadline, and how long (at least 1 s) a connection may go without
    /// the node acknowledging what was sent before it is remade. Default:
    /// [`defaults::CONNECT_TIMEOUT`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = timeout;
        self
    }

    /// Clock-drift factor. Default: [`defaults::DRIFT_FACTOR`].
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.settings.drift_factor = factor;
        self
    }

    /// Builds the client. Nothing is connected yet: each node connects on first use, so a node
    /// that is down at start-up blocks nothing.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when there are no nodes or too many, when a URL is malformed
    /// or not `redis://`/`rediss://`, when two URLs name the same `host:port`, or when a
    /// setting is out of its bounds.
    pub fn build(self) -> Result<Client> {
        let s = &self.settings;
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
        Client::from_builder(self)
    }
}

/// Options for one acquire: TTL, how long to wait, how to pace retries.
///
/// ```
/// use std::time::Duration;
/// use redquorum::LockOptions;
///
/// let opts = LockOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(5));
/// assert_eq!(opts.get_ttl(), Duration::from_secs(30));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct LockOptions {
    ttl: Duration,
    wait: Duration,
    retry_delay: Duration,
    retry_jitter: Duration,
    min_validity: Duration,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: defaults::TTL,
            wait: defaults::WAIT,
            retry_delay: defaults::RETRY_DELAY,
            retry_jitter: defaults::RETRY_JITTER,
            min_validity: defaults::MIN_VALIDITY,
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

    /// How long [`Client::acquire`] keeps retrying. Zero makes one attempt.
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

    /// Least validity an attempt must leave to succeed. Default: [`defaults::MIN_VALIDITY`].
    pub fn min_validity(mut self, min: Duration) -> Self {
        self.min_validity = min;
        self
    }

    /// The TTL.
    pub fn get_ttl(&self) -> Duration {
        self.ttl
    }

    /// The wait.
    pub fn get_wait(&self) -> Duration {
        self.wait
    }

    /// The fixed retry delay.
    pub fn get_retry_delay(&self) -> Duration {
        self.retry_delay
    }

    /// The random retry jitter.
    pub fn get_retry_jitter(&self) -> Duration {
        self.retry_jitter
    }

    /// The minimum validity.
    pub fn get_min_validity(&self) -> Duration {
        self.min_validity
    }

    /// Checks every option against [`limits`] and against the client's drift allowance.
    pub(crate) fn validate(&self, settings: &ClientSettings) -> Result<()> {
        settings.validate_ttl(self.ttl)?;
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

/// Checks a lock name: non-empty and at most [`limits::MAX_NAME_BYTES`] bytes.
pub(crate) fn validate_name(name: &str) -> Result<()> {
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

/// Checks a holder token given back by a caller: non-empty and bounded.
pub(crate) fn validate_token(token: &str) -> Result<()> {
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
    Ok(())
}

fn check_range(field: &'static str, value: Duration, min: Duration, max: Duration) -> Result<()> {
    if value < min || value > max {
        return Err(Error::invalid(
            field,
            format!("{} is outside {} ..= {}", fmt(value), fmt(min), fmt(max)),
        ));
    }
    Ok(())
}

fn fmt(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ClientSettings {
        ClientBuilder::default().settings
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
