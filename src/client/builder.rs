//! The client builder: node URLs and client-wide settings, checked when the client is built.

use std::time::Duration;

use super::Client;
use crate::cluster::Cluster;
use crate::config::ClientSettings;
use crate::error::Result;

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
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct ClientBuilder {
    nodes: Vec<String>,
    settings: ClientSettings,
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

    /// Prefix of every key written on the nodes. Default: [`defaults::KEY_PREFIX`](crate::config::defaults::KEY_PREFIX).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.settings.key_prefix = prefix.into();
        self
    }

    /// Longest TTL this client accepts. Default: [`defaults::MAX_TTL`](crate::config::defaults::MAX_TTL); at most
    /// [`limits::MAX_TTL`](crate::config::limits::MAX_TTL).
    pub fn max_ttl(mut self, max: Duration) -> Self {
        self.settings.max_ttl = max;
        self
    }

    /// How long a node that lost its data (a restart without persistence or from an older
    /// snapshot, a flush) grants nothing, from when a client notices. Default: until the latest
    /// expiry of the locks the other nodes granted, which every node records, and never longer
    /// than the longest TTL asked for in the deployment, so that every lock the node forgot has
    /// expired on the other nodes before it grants again; nodes of a new deployment, and nodes
    /// that kept their data (AOF with `appendfsync always`), are never quarantined.
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

    /// Per-node deadline for one call. Default: [`defaults::NODE_TIMEOUT`](crate::config::defaults::NODE_TIMEOUT).
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.settings.node_timeout = timeout;
        self
    }

    /// Background connect deadline, and how long (at least 1 s) a connection may go without
    /// the node acknowledging what was sent before it is remade. Default:
    /// [`defaults::CONNECT_TIMEOUT`](crate::config::defaults::CONNECT_TIMEOUT).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = timeout;
        self
    }

    /// Clock-drift factor. Default: [`defaults::DRIFT_FACTOR`](crate::config::defaults::DRIFT_FACTOR).
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.settings.drift_factor = factor;
        self
    }

    /// The authorities (PEM certificates) that `rediss://` nodes' certificates must chain to,
    /// instead of the web's root authorities (webpki-roots, the default): a private CA, say.
    /// Needs the `tls` feature (on by default).
    pub fn tls_root_certificates(mut self, pem: impl AsRef<[u8]>) -> Self {
        self.settings.tls_root_certificates = Some(pem.as_ref().into());
        self
    }

    /// **Unsafe; for testing a checker only.** Grants semaphore permits on a bare majority of
    /// the masters instead of the quorum [`LockKind::quorum`](crate::LockKind::quorum) gives,
    /// which lets more holders in than there are permits. The chaos suite uses it as a
    /// positive control: its checker must catch the over-admission.
    #[doc(hidden)]
    pub fn unsafe_majority_semaphores(mut self) -> Self {
        self.settings.unsafe_majority_semaphores = true;
        self
    }

    /// Builds the client. Nothing is connected yet: each node connects on first use, so a node
    /// that is down at start-up blocks nothing.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when there are no nodes or too many, when a URL is malformed
    /// or not `redis://`/`rediss://`, when two URLs name the same `host:port`, when a
    /// setting is out of its bounds, or when the TLS root certificates cannot be read (or are
    /// given, or a node is `rediss://`, in a build without the `tls` feature).
    pub fn build(self) -> Result<Client> {
        self.settings.validate()?;
        Ok(Client {
            cluster: Cluster::new(&self.nodes, self.settings)?,
        })
    }
}
