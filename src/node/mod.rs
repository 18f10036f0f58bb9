//! One Redis master: its address, its connection, the Lua scripts, and what the client knows
//! of its health (uptime, persistence, deployment marker, quarantine).
//!
//! A node never waits on its own: the caller (the fan-out) puts a deadline on every call.
//! The connection (`wire`) is written and read by the tasks that call it, with no task of its
//! own; it is made on first use and made again, on the next call, once it is broken. The
//! connect runs in the background with a bounded time, and commands sent meanwhile go out in
//! order once it is up, so a node that is down at start-up blocks nothing and a reconnecting
//! node costs a call no more than its deadline. A reconnect is always seen (a new connection
//! has a new number), since the master behind the new connection may have restarted. redis-rs
//! packs the commands and parses the replies.
//!
//! Health is read with `INFO` (and `CONFIG GET appendfsync` where allowed) pipelined in front
//! of a script call: on every new connection, after a `NOSCRIPT` answer, and when the last
//! reading is older than [`PROBE_INTERVAL`](health::PROBE_INTERVAL). Connections are numbered,
//! and a reading belongs to the connection it was read on: a vote counts only when it came on
//! the connection whose master's identity and uptime were read on that same connection. A
//! master can only restart between two connections, never inside one, so a restarted master is
//! never counted before its new uptime is known, at no extra round trip. A grant heard on a
//! subscription (a hand-over) counts by the same rule: the subscription reads its master's
//! identity before it subscribes, and the grant counts only when the node's reading is of that
//! same process. The scripts that grant are told the reading of the connection they are sent on
//! (or ask the master), so that a master back from older data grants nothing whatever a client
//! knows (`lua/marked.lua`).

mod calls;
mod deadlines;
mod detached;
mod dial;
mod encode;
mod health;
mod keys;
mod link;
mod on_demand;
mod replies;
mod resp;
mod scripts;
mod servers;
#[cfg(feature = "tls")]
mod tls;
mod view;
mod wire;

use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{Error, NodeFailureKind, Operation, Result};
use crate::metrics::NodeMetrics;

pub(crate) use calls::{Place, Proposal, Terms};
pub(crate) use deadlines::Deadlines;
pub(crate) use detached::Background;
use health::Health;
pub use health::NodeHealth;
pub(crate) use keys::{DeploymentKeys, Keys};
use link::Link;
pub(crate) use link::{Dialer, LinkId};
pub(crate) use replies::{
    AcquireReply, DeploymentState, Info, PlaceKept, ReleaseReply, config_value, is_durable,
};
#[cfg(feature = "tls")]
pub(crate) use tls::Tls;
pub(crate) use view::LockView;
pub(crate) use wire::{Listening, Wire};

/// Without the `tls` feature there are no TLS settings, and no `rediss://` node.
#[cfg(not(feature = "tls"))]
#[derive(Debug, Clone)]
pub(crate) enum Tls {}

#[cfg(not(feature = "tls"))]
impl Tls {
    pub(crate) fn from_settings(_: &crate::config::ClientSettings) -> Result<Self> {
        Err(Error::invalid(
            "node",
            "rediss:// (TLS) needs the `tls` feature of redquorum, which this build leaves out",
        ))
    }
}

/// Settings a node needs from the client.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeSettings {
    pub(crate) connect_timeout: Duration,
    /// Whether votes count only from a connection whose node was read on it (unless neither
    /// quarantine nor durability is asked for, nothing depends on the reading).
    pub(crate) verify_votes: bool,
    /// Votes of a node that is not durable are not counted.
    pub(crate) require_durable: bool,
}

/// One master.
#[derive(Debug)]
pub(crate) struct Node {
    /// `host:port`, safe to log and to use as a metric label: it never carries credentials.
    addr: String,
    client: redis::Client,
    /// The current connection (or its connect); cleared after it fails, so that the next call
    /// makes a new one with a new number.
    link: Mutex<Option<Link>>,
    last_link: AtomicU64,
    settings: NodeSettings,
    /// Scripts this node is known to have cached since the connection was made; a script whose
    /// bit is clear is sent whole with `EVAL`, which runs and caches it in one round trip.
    loaded: AtomicU32,
    health: Mutex<Health>,
    metrics: Arc<NodeMetrics>,
    /// What the client's nodes share.
    shared: Shared,
    /// For a `rediss://` node.
    tls: Option<Tls>,
}

/// What the nodes of one client share: its detached futures, its deadlines, its TLS
/// settings, which server each node was read to be, and where the masters keep what they
/// know of the deployment (read with each node's identity).
#[derive(Debug, Clone, Default)]
pub(crate) struct Shared {
    pub(crate) background: Arc<Background>,
    pub(crate) deadlines: Arc<Deadlines>,
    pub(crate) tls: Option<Tls>,
    pub(crate) servers: Arc<servers::Servers>,
    pub(crate) deployment: Arc<DeploymentKeys>,
}

impl Node {
    /// Parses and checks a node URL; nothing is connected.
    pub(crate) fn new(url: &str, settings: NodeSettings, shared: &Shared) -> Result<Self> {
        let shown = redact(url);
        let parsed = url::Url::parse(url).map_err(|e| {
            Error::invalid(
                "node",
                format!("{shown:?} is not a valid URL ({e}); expected redis://[user:password@]host[:port][/db]"),
            )
        })?;
        if !matches!(parsed.scheme(), "redis" | "rediss") {
            return Err(Error::invalid(
                "node",
                format!(
                    "{shown:?} has scheme {:?}; only redis:// and rediss:// (TLS) are supported",
                    parsed.scheme()
                ),
            ));
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(Error::invalid("node", format!("{shown:?} has no host")));
        }
        let tls = match (parsed.scheme(), shared.tls.as_ref()) {
            ("rediss", None) => {
                return Err(Error::invalid(
                    "node",
                    format!("{shown:?} is rediss:// but the client has no TLS settings"),
                ));
            }
            ("rediss", tls) => tls.cloned(),
            _ => None,
        };
        let client = redis::IntoConnectionInfo::into_connection_info(url)
            .and_then(|info| {
                let info = info.set_tcp_settings(tcp_settings(settings.connect_timeout));
                redis_client(info, tls.as_ref())
            })
            .map_err(|e| Error::invalid("node", format!("{shown:?} was rejected: {e}")))?;
        let addr = client.get_connection_info().addr().to_string();
        if tls.is_some() {
            // redis-rs brings rustls without a crypto provider; install one once. An error only
            // means a provider is installed already, which is as good.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        Ok(Node {
            metrics: Arc::new(NodeMetrics::new(&addr)),
            shared: shared.clone(),
            addr,
            client,
            link: Mutex::new(None),
            last_link: AtomicU64::new(0),
            settings,
            loaded: AtomicU32::new(0),
            health: Mutex::new(Health::default()),
            tls,
        })
    }

    /// `host:port`.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// The redis-rs client, for connections of other kinds (the release subscription).
    pub(crate) fn redis_client(&self) -> &redis::Client {
        &self.client
    }

    /// The client's detached futures: work on this node that finishes after its caller moved
    /// on (see [`Background::detach`]).
    pub(crate) fn background(&self) -> &Arc<Background> {
        &self.shared.background
    }

    /// The client's deadlines (see [`Deadlines`]).
    pub(crate) fn deadlines(&self) -> &Arc<Deadlines> {
        &self.shared.deadlines
    }

    /// Records a call that the caller gave up on at its deadline.
    pub(crate) fn record_timeout(&self, op: Operation) {
        self.metrics.failure(op, NodeFailureKind::Timeout.as_str());
    }
}

/// The redis-rs client for the connections it makes to a node (the deployment check's), which
/// trusts the same authorities as the node's own connections.
fn redis_client(
    info: redis::ConnectionInfo,
    tls: Option<&Tls>,
) -> redis::RedisResult<redis::Client> {
    #[cfg(feature = "tls")]
    if let Some(pem) = tls.and_then(Tls::pem) {
        let certificates = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem.to_vec()),
        };
        return redis::Client::build_with_tls(info, certificates);
    }
    let _ = tls;
    redis::Client::open(info)
}

/// TCP options of every connection to a node, the node's own (see `dial.rs`) and those
/// redis-rs makes for the deployment check: `stall` is the connect timeout, at least 1 s.
///
/// Commands and replies are small writes that someone waits for: Nagle's algorithm would hold
/// one back while an earlier one is unacknowledged.
///
/// A node cut off by the network neither answers nor says so: the commands sent sit in the
/// socket while TCP resends them at ever longer intervals, and after the network comes back the
/// connection can stay silent for seconds more. Commands past their deadline do not close it,
/// and must not: a paused node runs the commands it was sent when it resumes, the release
/// after the grant. `TCP_USER_TIMEOUT` closes it once sent bytes have gone unacknowledged by
/// the node's kernel (which acknowledges for a paused process too) for `stall`, and the next
/// command connects anew; keepalive probes do the same for a connection that only listens,
/// like the release subscription.
fn tcp_settings(stall: Duration) -> redis::io::tcp::TcpSettings {
    let settings = redis::io::tcp::TcpSettings::default().set_nodelay(true);
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "fuchsia"))]
    let settings = {
        let stall = stall.max(Duration::from_secs(1));
        settings.set_user_timeout(stall).set_keepalive(
            redis::io::tcp::socket2::TcpKeepalive::new()
                .with_time(stall)
                .with_interval(stall),
        )
    };
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "fuchsia")))]
    let _ = stall;
    settings
}

/// The URL with its password (and anything that could be one) replaced by `***`, for messages.
pub(crate) fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            // Setting a password only fails on URLs that cannot have one, which this one has.
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        Ok(parsed) => parsed.to_string(),
        // Unparsable: hide everything between the scheme and the last '@', if there is one.
        Err(_) => match (url.find("://"), url.rfind('@')) {
            (Some(s), Some(at)) if at > s => format!("{}***{}", &url[..s + 3], &url[at..]),
            _ => url.to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> NodeSettings {
        NodeSettings {
            connect_timeout: Duration::from_secs(1),
            verify_votes: true,
            require_durable: false,
        }
    }

    fn tls() -> Option<Tls> {
        #[cfg(feature = "tls")]
        return Tls::new(None).ok();
        #[cfg(not(feature = "tls"))]
        return None;
    }

    #[test]
    fn passwords_never_show() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert!(!redact("redis://u:sec ret@h:x").contains("sec"));
    }

    #[test]
    fn urls_are_checked() {
        assert!(Node::new("redis://127.0.0.1:6379", settings(), &Shared::default()).is_ok());
        let with_tls = Shared {
            tls: tls(),
            ..Shared::default()
        };
        let rediss = Node::new("rediss://user:pw@example.com:6380/2", settings(), &with_tls);
        // A TLS node needs the client's TLS settings, which need the `tls` feature.
        assert_eq!(rediss.is_ok(), cfg!(feature = "tls"));
        for bad in [
            "",
            "127.0.0.1:6379",
            "http://h:1",
            "redis://",
            "redis://h:notaport",
            "unix:///tmp/s",
        ] {
            let err = Node::new(bad, settings(), &Shared::default()).unwrap_err();
            assert!(
                matches!(err, Error::InvalidArgument { field: "node", .. }),
                "{bad:?} gave {err}"
            );
        }
        let err =
            Node::new("redis://u:hunter2@h:99999", settings(), &Shared::default()).unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}
