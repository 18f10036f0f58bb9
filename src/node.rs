//! One Redis master: its address, a lazily built multiplexed connection, and the Lua scripts.
//!
//! A node never waits on its own: the caller (the fan-out) puts a deadline on every call.
//! The connection is a redis-rs `ConnectionManager` made on first use, with one reconnect
//! retry and a bounded connect time, so a node that is down at start-up blocks nothing and a
//! reconnecting node costs a call no more than its deadline.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{LazyLock, OnceLock};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};

use crate::error::{Error, NodeFailureKind, Operation, Result};
use crate::metrics::NodeMetrics;

/// A Lua script run on the nodes, with its SHA1 for `EVALSHA`.
#[derive(Debug)]
pub(crate) struct LuaScript {
    /// Bit of this script in a node's loaded-scripts mask.
    bit: u8,
    body: &'static str,
    sha: String,
}

impl LuaScript {
    fn new(bit: u8, body: &'static str) -> Self {
        LuaScript {
            bit,
            body,
            sha: redis::Script::new(body).get_hash().to_owned(),
        }
    }
}

/// The scripts, one per node-side operation.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: LuaScript,
    pub(crate) extend: LuaScript,
    pub(crate) release: LuaScript,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: LuaScript::new(1, include_str!("../lua/acquire.lua")),
    extend: LuaScript::new(2, include_str!("../lua/extend.lua")),
    release: LuaScript::new(4, include_str!("../lua/release.lua")),
});

/// A node's answer to an acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    Granted,
    /// Held by another token, which expires in this long (if the node said).
    Held(Option<Duration>),
}

/// A node's answer to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    Deleted,
    Absent,
    Foreign,
}

/// One master.
#[derive(Debug)]
pub(crate) struct Node {
    /// `host:port`, safe to log and to use as a metric label: it never carries credentials.
    addr: String,
    client: redis::Client,
    connection: OnceLock<ConnectionManager>,
    connect_timeout: Duration,
    /// Scripts this node is known to have cached since the connection was made; a script whose
    /// bit is clear is sent whole with `EVAL`, which runs and caches it in one round trip.
    loaded: AtomicU8,
    metrics: NodeMetrics,
}

impl Node {
    /// Parses and checks a node URL; nothing is connected.
    pub(crate) fn new(url: &str, connect_timeout: Duration) -> Result<Self> {
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
        let client = redis::Client::open(url)
            .map_err(|e| Error::invalid("node", format!("{shown:?} was rejected: {e}")))?;
        let addr = client.get_connection_info().addr().to_string();
        if parsed.scheme() == "rediss" {
            // redis-rs brings rustls without a crypto provider; install one once. An error only
            // means a provider is installed already, which is as good.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        Ok(Node {
            metrics: NodeMetrics::new(&addr),
            addr,
            client,
            connection: OnceLock::new(),
            connect_timeout,
            loaded: AtomicU8::new(0),
        })
    }

    /// `host:port`.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// Records a call that the caller gave up on at its deadline.
    pub(crate) fn record_timeout(&self, op: Operation) {
        self.metrics.failure(op, NodeFailureKind::Timeout.as_str());
    }

    /// The connection, made on first use. Building the manager is synchronous and connects
    /// nothing; the first command drives the connect, under the caller's deadline.
    fn connection(&self) -> std::result::Result<ConnectionManager, NodeFailureKind> {
        if let Some(manager) = self.connection.get() {
            return Ok(manager.clone());
        }
        let config = ConnectionManagerConfig::new()
            // One retry after a short pause, then the error goes back to the callers, who have
            // their own deadlines; the next call starts a new connect. The redis-rs default
            // (six retries, growing delays) would hold every call to a dead node for seconds.
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(100))
            .set_connection_timeout(Some(self.connect_timeout))
            // Deadlines are the fan-out's business; a response timeout here would only make a
            // second, competing one.
            .set_response_timeout(None);
        let manager = ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            .map_err(|e| NodeFailureKind::Connection(e.to_string()))?;
        // Two racing first calls may both build one; the loser's is dropped unused.
        Ok(self.connection.get_or_init(|| manager).clone())
    }

    /// Runs a script with one key, using `EVALSHA` when the node is known to have the script and
    /// `EVAL` (which also caches it) otherwise, or after the node answers `NOSCRIPT` because its
    /// cache was flushed or it restarted.
    async fn eval(
        &self,
        op: Operation,
        script: &LuaScript,
        key: &str,
        args: impl Fn(&mut Cmd),
    ) -> std::result::Result<Value, NodeFailureKind> {
        let started = Instant::now();
        let mut conn = self
            .connection()
            .inspect_err(|k| self.metrics.failure(op, k.as_str()))?;
        let known = self.loaded.load(Ordering::Relaxed) & script.bit != 0;
        let build = |by_hash: bool| {
            let mut cmd = if by_hash {
                let mut c = redis::cmd("EVALSHA");
                c.arg(&script.sha);
                c
            } else {
                let mut c = redis::cmd("EVAL");
                c.arg(script.body);
                c
            };
            cmd.arg(1).arg(key);
            args(&mut cmd);
            cmd
        };
        // redis-rs hands server errors back as values; turn them into errors to match on.
        let mut result = conn
            .send_packed_command(&build(known))
            .await
            .and_then(Value::extract_error);
        if known
            && matches!(&result, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript))
        {
            self.loaded.fetch_and(!script.bit, Ordering::Relaxed);
            result = conn
                .send_packed_command(&build(false))
                .await
                .and_then(Value::extract_error);
        }
        match result {
            Ok(value) => {
                self.loaded.fetch_or(script.bit, Ordering::Relaxed);
                self.metrics.success(op, started.elapsed().as_secs_f64());
                Ok(value)
            }
            Err(e) => {
                let kind = classify(&e);
                if matches!(kind, NodeFailureKind::Connection(_)) {
                    // A new connection may be to a restarted node with an empty script cache.
                    self.loaded.store(0, Ordering::Relaxed);
                }
                self.metrics.failure(op, kind.as_str());
                Err(kind)
            }
        }
    }

    /// Asks the node to take the lock for `token`.
    pub(crate) async fn acquire(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
    ) -> std::result::Result<AcquireReply, NodeFailureKind> {
        let value = self
            .eval(Operation::Acquire, &SCRIPTS.acquire, key, |c| {
                c.arg(token).arg(millis(ttl));
            })
            .await?;
        match value {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(1), _] => Ok(AcquireReply::Granted),
                [Value::Int(0), Value::Int(pttl)] => Ok(AcquireReply::Held(
                    u64::try_from(*pttl).ok().map(Duration::from_millis),
                )),
                _ => Err(unexpected("acquire", &items)),
            },
            other => Err(unexpected("acquire", &other)),
        }
    }

    /// Asks the node to push back the lock's expiry if `token` holds it; `true` when it did.
    pub(crate) async fn extend(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
    ) -> std::result::Result<bool, NodeFailureKind> {
        let value = self
            .eval(Operation::Extend, &SCRIPTS.extend, key, |c| {
                c.arg(token).arg(millis(ttl));
            })
            .await?;
        match value {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(unexpected("extend", &other)),
        }
    }

    /// Asks the node to delete the lock if `token` holds it.
    pub(crate) async fn release(
        &self,
        key: &str,
        token: &str,
    ) -> std::result::Result<ReleaseReply, NodeFailureKind> {
        let value = self
            .eval(Operation::Release, &SCRIPTS.release, key, |c| {
                c.arg(token);
            })
            .await?;
        match value {
            Value::Int(1) => Ok(ReleaseReply::Deleted),
            Value::Int(0) => Ok(ReleaseReply::Absent),
            Value::Int(-1) => Ok(ReleaseReply::Foreign),
            other => Err(unexpected("release", &other)),
        }
    }

    /// The key's remaining time to live: `None` when there is no such key.
    pub(crate) async fn pttl(
        &self,
        key: &str,
    ) -> std::result::Result<Option<Duration>, NodeFailureKind> {
        let started = Instant::now();
        let mut conn = self.connection()?;
        let mut cmd = redis::cmd("PTTL");
        cmd.arg(key);
        match conn
            .send_packed_command(&cmd)
            .await
            .and_then(Value::extract_error)
        {
            Ok(Value::Int(ms)) => {
                self.metrics
                    .success(Operation::Inspect, started.elapsed().as_secs_f64());
                // -2: no key; -1: a key without expiry, which redquorum never writes.
                Ok(u64::try_from(ms).ok().map(Duration::from_millis))
            }
            Ok(other) => Err(unexpected("PTTL", &other)),
            Err(e) => {
                let kind = classify(&e);
                self.metrics.failure(Operation::Inspect, kind.as_str());
                Err(kind)
            }
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn unexpected(what: &str, value: &dyn std::fmt::Debug) -> NodeFailureKind {
    NodeFailureKind::Protocol(format!("{what} returned {value:?}"))
}

fn classify(e: &RedisError) -> NodeFailureKind {
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
        NodeFailureKind::Connection(e.to_string())
    } else if matches!(
        e.kind(),
        ErrorKind::Server(_) | ErrorKind::AuthenticationFailed | ErrorKind::Extension
    ) {
        NodeFailureKind::Server(e.to_string())
    } else {
        NodeFailureKind::Protocol(e.to_string())
    }
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

    #[test]
    fn passwords_never_show() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert!(!redact("redis://u:sec ret@h:x").contains("sec"));
    }

    #[test]
    fn urls_are_checked() {
        let t = Duration::from_secs(1);
        assert!(Node::new("redis://127.0.0.1:6379", t).is_ok());
        assert!(Node::new("rediss://user:pw@example.com:6380/2", t).is_ok());
        for bad in [
            "",
            "127.0.0.1:6379",
            "http://h:1",
            "redis://",
            "redis://h:notaport",
            "unix:///tmp/s",
        ] {
            let err = Node::new(bad, t).unwrap_err();
            assert!(
                matches!(err, Error::InvalidArgument { field: "node", .. }),
                "{bad:?} gave {err}"
            );
        }
        let err = Node::new("redis://u:hunter2@h:99999", t).unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn script_hashes_are_distinct() {
        let s = &*SCRIPTS;
        assert_ne!(s.acquire.sha, s.extend.sha);
        assert_ne!(s.extend.sha, s.release.sha);
        assert_eq!(s.acquire.sha.len(), 40);
    }
}
