//! One Redis master: its address, a lazily built multiplexed connection, the Lua scripts, and
//! what the client knows of its health (uptime, persistence, deployment marker, quarantine).
//!
//! A node never waits on its own: the caller (the fan-out) puts a deadline on every call.
//! The connection is a redis-rs multiplexed connection made on first use and made again, on
//! the next call, after it fails; the connect runs in the background with a bounded time, so
//! a node that is down at start-up blocks nothing and a reconnecting node costs a call no
//! more than its deadline. The connection is managed here rather than by redis-rs's
//! `ConnectionManager`, which reconnects silently (with RESP3, without any call failing): a
//! reconnect must be seen, since the master behind the new connection may have restarted.
//!
//! Health is read with `INFO` (and `CONFIG GET appendfsync` where allowed) pipelined in front
//! of a script call: on every new connection, after a `NOSCRIPT` answer, and when the last
//! reading is older than [`PROBE_INTERVAL`]. Connections are numbered, and a reading belongs to
//! the connection it was read on: a vote counts only when it came on the connection whose
//! master's identity and uptime were read on that same connection. A master can only restart
//! between two connections, never inside one, so a restarted master is never counted before
//! its new uptime is known, at no extra round trip.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use redis::aio::MultiplexedConnection;
use redis::{Cmd, ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};
use tracing::warn;

use crate::error::{Error, NodeFailureKind, Operation, Result};
use crate::metrics::NodeMetrics;

/// How old a node's health reading may get before the next call refreshes it.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_secs(10);

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
    pub(crate) dequeue: LuaScript,
    pub(crate) give_back: LuaScript,
    pub(crate) deployment: LuaScript,
    pub(crate) mark: LuaScript,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: LuaScript::new(
        1,
        concat!(
            include_str!("../../lua/queue.lua"),
            include_str!("../../lua/acquire.lua")
        ),
    ),
    extend: LuaScript::new(2, include_str!("../../lua/extend.lua")),
    release: LuaScript::new(
        4,
        concat!(
            include_str!("../../lua/queue.lua"),
            include_str!("../../lua/release.lua")
        ),
    ),
    dequeue: LuaScript::new(
        8,
        concat!(
            include_str!("../../lua/queue.lua"),
            include_str!("../../lua/dequeue.lua")
        ),
    ),
    give_back: LuaScript::new(
        16,
        concat!(
            include_str!("../../lua/queue.lua"),
            include_str!("../../lua/give_back.lua")
        ),
    ),
    deployment: LuaScript::new(32, include_str!("../../lua/deployment.lua")),
    mark: LuaScript::new(64, include_str!("../../lua/mark.lua")),
});

/// A node's answer to an acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Granted with this fencing token.
    Granted(u64),
    /// Held by another token, which expires in this long (if the node said), and whose
    /// acquisition has this fencing token.
    Held(Option<Duration>, u64),
    /// The proposed fencing token is not above the node's counter, which is this.
    Stale(u64),
    /// The lock is free, but an earlier waiter goes first.
    Reserved,
    /// A release handed the lock to the calling waiter, with this token and fencing token.
    HandedOver(Arc<str>, u64),
}

/// What a node knows of its deployment (see `lua/mark.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeploymentState {
    /// The deployment's id, when the node carries the marker.
    pub(crate) marker: Option<String>,
    /// The longest TTL asked for on the node.
    pub(crate) longest_ttl: Duration,
    /// How much longer the node is quarantined, if it is.
    pub(crate) quarantined_for: Option<Duration>,
}

/// A waiting caller's place in a lock's queue on the nodes.
#[derive(Debug, Clone)]
pub(crate) struct Place {
    /// Random, and the same on every node and for every attempt of one acquire.
    pub(crate) waiter: Arc<str>,
    /// Lower goes first; the same on every node, so the nodes agree on the order.
    pub(crate) priority: u64,
    /// How long a node keeps the place unless an attempt refreshes it.
    pub(crate) life: Duration,
}

/// The terms of a waiter's attempt, kept with its place: a release may hand the lock over on
/// them (see `lua/release.lua`).
#[derive(Debug, Clone)]
pub(crate) struct Terms {
    /// The attempt's token.
    pub(crate) token: Arc<str>,
    pub(crate) ttl: Duration,
    /// The fencing token the attempt proposed last.
    pub(crate) proposal: u64,
}

/// A node's answer to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    Deleted,
    Absent,
    Foreign,
}

/// What the client knows of one node's health, from [`Client::node_health`](crate::Client::node_health).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeHealth {
    /// The node's address, `host:port`.
    pub node: String,
    /// Why the last reading failed, if it did.
    pub error: Option<String>,
    /// How long the server process has been up, at the last reading.
    pub uptime: Option<Duration>,
    /// Whether AOF is on.
    pub aof_enabled: Option<bool>,
    /// The `appendfsync` policy, when `CONFIG GET` is allowed.
    pub appendfsync: Option<String>,
    /// Whether the node keeps every write across a restart (AOF with `appendfsync always`):
    /// what fencing counters need. `false` when it cannot be confirmed.
    pub durable: bool,
    /// Whether the node carries the deployment's marker; `Some(false)`: it lost its data (or
    /// the deployment is new) and grants nothing until a client marks it. `None`: not known.
    pub marked: Option<bool>,
    /// How much longer the node is quarantined (it lost its data while the deployment was in
    /// use, so it grants nothing until every lock it may have granted has expired), by the
    /// node's own clock, as last seen.
    pub quarantined_for: Option<Duration>,
}

/// The last health reading of a node.
#[derive(Debug, Default)]
struct Health {
    /// The connection the reading was taken on: votes count only from that connection.
    verified_link: Option<LinkId>,
    read_at: Option<Instant>,
    started_at: Option<Instant>,
    run_id: Option<String>,
    aof_enabled: Option<bool>,
    appendfsync: Option<String>,
    error: Option<String>,
    /// Whether a warning about durability was logged for the current process of the node.
    warned: bool,
    /// Whether the node carried the marker, as last seen.
    marked: Option<bool>,
    /// Until when the node said it is quarantined, as last seen.
    quarantined_until: Option<Instant>,
}

impl Health {
    fn durable(&self) -> bool {
        self.aof_enabled == Some(true) && self.appendfsync.as_deref() == Some("always")
    }
}

/// The number of a connection to a node, unique for the node's life.
pub(crate) type LinkId = u64;

/// A connection to the node, or its connect under way (shared by every caller waiting for it).
#[derive(Clone)]
struct Link {
    id: LinkId,
    connecting: Shared<BoxFuture<'static, RedisResult<MultiplexedConnection>>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("id", &self.id).finish()
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
    loaded: AtomicU8,
    /// Whether the current connection is up; until it is, commands take turns at
    /// [`Node::in_order`] (see [`Node::eval`]).
    connected: AtomicBool,
    in_order: tokio::sync::Mutex<()>,
    health: Mutex<Health>,
    metrics: NodeMetrics,
}

impl Node {
    /// Parses and checks a node URL; nothing is connected.
    pub(crate) fn new(url: &str, settings: NodeSettings) -> Result<Self> {
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
        let client = redis::IntoConnectionInfo::into_connection_info(url)
            .and_then(|info| {
                redis::Client::open(info.set_tcp_settings(tcp_settings(settings.connect_timeout)))
            })
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
            link: Mutex::new(None),
            last_link: AtomicU64::new(0),
            settings,
            loaded: AtomicU8::new(0),
            connected: AtomicBool::new(false),
            in_order: tokio::sync::Mutex::new(()),
            health: Mutex::new(Health::default()),
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

    /// Records a call that the caller gave up on at its deadline.
    pub(crate) fn record_timeout(&self, op: Operation) {
        self.metrics.failure(op, NodeFailureKind::Timeout.as_str());
    }

    /// The current connection, or the connect under way: a new one (with a new number) when
    /// there is none. The connect is driven in the background too, so that callers that give up
    /// at their deadline do not stall it.
    fn current_link(&self) -> Link {
        let mut slot = self
            .link
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(link) = slot.as_ref() {
            return link.clone();
        }
        let client = self.client.clone();
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.settings.connect_timeout))
            // Deadlines are the fan-out's business; a response timeout here would only make a
            // second, competing one.
            .set_response_timeout(None);
        let connecting = async move {
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await
        }
        .boxed()
        .shared();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(connecting.clone().map(drop));
        }
        let link = Link {
            id: self.last_link.fetch_add(1, Ordering::Relaxed) + 1,
            connecting,
        };
        *slot = Some(link.clone());
        link
    }

    /// The connection to send on, and its number; waits for the connect if one is under way.
    async fn connect(
        &self,
        op: Operation,
    ) -> std::result::Result<(LinkId, MultiplexedConnection), NodeFailureKind> {
        let link = self.current_link();
        match link.connecting.await {
            Ok(conn) => {
                self.connected.store(true, Ordering::Relaxed);
                Ok((link.id, conn))
            }
            Err(e) => {
                // Whatever failed (the network, the login), the next call tries a new connect
                // rather than meet this one's error again.
                self.retire_link(link.id);
                Err(self.failed(op, &e, link.id))
            }
        }
    }

    /// Drops connection `id` if it is still the current one: the next call connects anew, and
    /// what was known of the node (its script cache, its health) is for the old connection.
    fn retire_link(&self, id: LinkId) {
        let mut slot = self
            .link
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.as_ref().is_some_and(|link| link.id == id) {
            *slot = None;
            self.connected.store(false, Ordering::Relaxed);
        }
        self.loaded.store(0, Ordering::Relaxed);
    }

    /// The lock on the health reading; a poisoned lock only means a panic elsewhere while
    /// holding it, and the reading is still usable.
    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn needs_probe(&self, link: LinkId) -> bool {
        let health = self.health();
        health.verified_link != Some(link)
            || health.read_at.is_none_or(|t| t.elapsed() > PROBE_INTERVAL)
    }

    /// Whether a vote that came on connection `link` counts (`None`: on the current
    /// connection, for grants heard on the subscription); the reason when it does not.
    ///
    /// Durability says what the master behind a connection may forget, and its identity which
    /// process made a grant; a reading from another connection may be of another process, so
    /// a vote counts only from the connection the reading was taken on. (Quarantine itself is
    /// decided by the master, in the script that grants.)
    pub(crate) fn vote_counts(
        &self,
        link: Option<LinkId>,
    ) -> std::result::Result<(), NodeFailureKind> {
        let health = self.health();
        let link = link.or_else(|| {
            let slot = self
                .link
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            slot.as_ref().map(|l| l.id)
        });
        if self.settings.verify_votes && (link.is_none() || health.verified_link != link) {
            return Err(NodeFailureKind::Unverified);
        }
        if self.settings.require_durable && !health.durable() {
            return Err(NodeFailureKind::NotDurable);
        }
        Ok(())
    }

    /// Runs a script with the given keys, using `EVALSHA` when the node is known to have the
    /// script and `EVAL` (which also caches it) otherwise. When the node's health is due for a
    /// reading, the reading is pipelined in front of the script, in the same round trip. Returns
    /// the answer and the connection it came on.
    ///
    /// A `NOSCRIPT` answer means the script cache was emptied under this connection (`SCRIPT
    /// FLUSH`, or a restart behind something that kept the connection open): the script is
    /// sent whole, with a fresh reading in front, before its vote can count.
    async fn eval(
        &self,
        op: Operation,
        script: &LuaScript,
        keys: &[&str],
        args: impl Fn(&mut Cmd),
    ) -> std::result::Result<(Value, LinkId), NodeFailureKind> {
        let started = Instant::now();
        // While the connection is being made, every command waits for it, and those woken
        // together would be sent in any order: a lock's release could overtake the grant it
        // releases (still finishing in the background) and leave it until its TTL. So until the
        // connection is up, commands take turns in the order they were issued (tokio's mutex is
        // first come, first served), each keeping its turn until its command is queued on the
        // connection.
        let turn = if self.connected.load(Ordering::Relaxed) {
            None
        } else {
            Some(self.in_order.lock().await)
        };
        let (link, mut conn) = self.connect(op).await?;
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
            cmd.arg(keys.len()).arg(keys);
            args(&mut cmd);
            cmd
        };
        let first = build(known);
        let probe = self.needs_probe(link);
        let mut result = {
            let send = std::pin::pin!(self.send(&mut conn, link, &first, probe));
            in_turn(turn, send).await
        };
        if known
            && matches!(&result, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript))
        {
            self.loaded.fetch_and(!script.bit, Ordering::Relaxed);
            self.health().verified_link = None;
            result = self.send(&mut conn, link, &build(false), true).await;
        }
        match result {
            Ok(value) => {
                self.loaded.fetch_or(script.bit, Ordering::Relaxed);
                self.metrics.success(op, started.elapsed().as_secs_f64());
                Ok((value, link))
            }
            Err(e) => Err(self.failed(op, &e, link)),
        }
    }

    /// Sends `cmd` on connection `link`, with a health reading in front when `probe` is set.
    async fn send(
        &self,
        conn: &mut MultiplexedConnection,
        link: LinkId,
        cmd: &Cmd,
        probe: bool,
    ) -> RedisResult<Value> {
        if !probe {
            // redis-rs hands server errors back as values; turn them into errors to match on.
            return conn
                .send_packed_command(cmd)
                .await
                .and_then(Value::extract_error);
        }
        let mut pipe = probe_pipeline();
        pipe.add_command(cmd.clone());
        match conn.send_packed_commands(&pipe, 0, 3).await {
            Ok(mut values) if values.len() == 3 => {
                let value = values.pop().unwrap_or(Value::Nil);
                self.record_probe(link, &values);
                value.extract_error()
            }
            Ok(values) => Err(RedisError::from((
                ErrorKind::Parse,
                "pipeline answered with the wrong number of replies",
                format!("{}", values.len()),
            ))),
            Err(e) => Err(e),
        }
    }

    /// Books a failed call; a connection failure retires the connection, since the next one
    /// may be to a restarted node, with an empty script cache and a new uptime.
    fn failed(&self, op: Operation, e: &RedisError, link: LinkId) -> NodeFailureKind {
        let kind = classify(e);
        if matches!(kind, NodeFailureKind::Connection(_)) || e.is_unrecoverable_error() {
            self.retire_link(link);
            self.health().error = Some(e.to_string());
        }
        self.metrics.failure(op, kind.as_str());
        kind
    }

    /// Stores a health reading from the replies to [`probe_pipeline`].
    fn record_probe(&self, link: LinkId, replies: &[Value]) {
        let info = match replies.first() {
            Some(Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
            Some(Value::VerbatimString { text, .. }) => text.clone(),
            Some(Value::SimpleString(text)) => text.clone(),
            _ => String::new(),
        };
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        let now = Instant::now();
        let uptime = field("uptime_in_seconds")
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_secs);
        let run_id = field("run_id");
        let aof_enabled = field("aof_enabled").map(|v| v == "1");
        let appendfsync = replies.get(1).and_then(config_value);
        let mut health = self.health();
        if uptime.is_none() {
            health.error = Some("INFO did not report uptime_in_seconds".to_owned());
            return;
        }
        if health.run_id.is_some() && health.run_id != run_id {
            health.warned = false;
        }
        health.verified_link = Some(link);
        health.read_at = Some(now);
        health.started_at = uptime.and_then(|u| now.checked_sub(u));
        health.run_id = run_id;
        health.aof_enabled = aof_enabled;
        health.appendfsync = appendfsync;
        health.error = None;
        let durable = health.durable();
        self.metrics.reachable();
        self.metrics.durable(durable);
        if !durable && !health.warned {
            health.warned = true;
            warn!(
                node = self.addr,
                aof_enabled = ?health.aof_enabled,
                appendfsync = ?health.appendfsync,
                "node cannot keep fencing counters and locks across a restart; run it with appendonly yes and appendfsync always"
            );
        }
    }

    /// Books what an answer said of the node's deployment state.
    fn saw_deployment(&self, marked: bool, quarantined_for: Option<Duration>) {
        let mut health = self.health();
        health.marked = Some(marked);
        health.quarantined_until = quarantined_for.map(|left| Instant::now() + left);
        self.metrics
            .quarantined(quarantined_for.is_some() || !marked);
    }

    /// Reads the node's health now.
    pub(crate) async fn probe(&self) -> std::result::Result<(), NodeFailureKind> {
        let (link, mut conn) = self.connect(Operation::Inspect).await?;
        match conn.send_packed_commands(&probe_pipeline(), 0, 2).await {
            Ok(values) => {
                self.record_probe(link, &values);
                Ok(())
            }
            Err(e) => Err(self.failed(Operation::Inspect, &e, link)),
        }
    }

    /// The current health report.
    pub(crate) fn report(&self) -> NodeHealth {
        let health = self.health();
        NodeHealth {
            node: self.addr.clone(),
            error: health.error.clone(),
            uptime: health.started_at.map(|s| s.elapsed()),
            aof_enabled: health.aof_enabled,
            appendfsync: health.appendfsync.clone(),
            durable: health.durable(),
            marked: health.marked,
            quarantined_for: health
                .quarantined_until
                .map(|until| until.saturating_duration_since(Instant::now()))
                .filter(|left| !left.is_zero()),
        }
    }

    /// Asks the node to take the lock for `token` with fencing token `fence`, queueing `place`
    /// (when the caller waits) if the lock is not to be had. Keys: the lock, its fencing
    /// counter, its queue and the queue's lapse times.
    pub(crate) async fn acquire(
        &self,
        keys: [&str; 7],
        token: &str,
        ttl: Duration,
        fence: u64,
        place: Option<&Place>,
    ) -> std::result::Result<AcquireReply, NodeFailureKind> {
        let (value, link) = self
            .eval(Operation::Acquire, &SCRIPTS.acquire, &keys, |c| {
                c.arg(token).arg(millis(ttl)).arg(fence);
                match place {
                    Some(p) => c.arg(&*p.waiter).arg(p.priority).arg(millis(p.life)),
                    None => c.arg("").arg(0).arg(0),
                };
            })
            .await?;
        let reply = match value {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(1), Value::Int(fence)] => AcquireReply::Granted(non_negative(*fence)),
                [Value::Int(0), Value::Int(pttl), Value::Int(holder)] => AcquireReply::Held(
                    u64::try_from(*pttl).ok().map(Duration::from_millis),
                    non_negative(*holder),
                ),
                [Value::Int(2), Value::Int(counter)] => AcquireReply::Stale(non_negative(*counter)),
                [Value::Int(3)] => AcquireReply::Reserved,
                [Value::Int(4), Value::BulkString(token), Value::Int(fence)] => {
                    let token =
                        std::str::from_utf8(token).map_err(|_| unexpected("acquire", &items))?;
                    AcquireReply::HandedOver(token.into(), non_negative(*fence))
                }
                [Value::Int(5)] => {
                    self.saw_deployment(false, None);
                    return Err(NodeFailureKind::Unmarked);
                }
                [Value::Int(6), Value::Int(pttl)] => {
                    let left = Duration::from_millis(u64::try_from(*pttl).unwrap_or(1).max(1));
                    self.saw_deployment(true, Some(left));
                    return Err(NodeFailureKind::Quarantined(left));
                }
                _ => return Err(unexpected("acquire", &items)),
            },
            other => return Err(unexpected("acquire", &other)),
        };
        if self.health().marked != Some(true) {
            self.saw_deployment(true, None);
        }
        // A grant from a node whose votes do not count is left in place (the key makes the
        // lock sturdier) but not counted; refusals count as what they are.
        if matches!(reply, AcquireReply::Granted(_)) {
            self.vote_counts(Some(link))?;
        }
        Ok(reply)
    }

    /// Asks the node to push back the lock's expiry if `token` holds it; the holder's fencing
    /// token when it did, `None` when the lock is gone or held by another token.
    pub(crate) async fn extend(
        &self,
        keys: [&str; 3],
        token: &str,
        ttl: Duration,
    ) -> std::result::Result<Option<u64>, NodeFailureKind> {
        let (value, link) = self
            .eval(Operation::Extend, &SCRIPTS.extend, &keys, |c| {
                c.arg(token).arg(millis(ttl));
            })
            .await?;
        match value {
            Value::Int(-1) => Ok(None),
            Value::Int(fence) if fence >= 0 => {
                self.vote_counts(Some(link))?;
                Ok(Some(non_negative(fence)))
            }
            other => Err(unexpected("extend", &other)),
        }
    }

    /// Asks the node to delete the lock if `token` holds it, and to hand it to (or wake) the
    /// first waiter, whose client hears on `channel` and its id ('' for nobody). `fence` is the
    /// released lock's fencing token (0 when unknown). Keys: the lock, its queue, the queue's
    /// terms and the fencing counter. Counted from every node, quarantined or not: a release
    /// only ever removes.
    pub(crate) async fn release(
        &self,
        keys: [&str; 6],
        token: &str,
        channel: &str,
        fence: u64,
    ) -> std::result::Result<ReleaseReply, NodeFailureKind> {
        let (value, _) = self
            .eval(Operation::Release, &SCRIPTS.release, &keys, |c| {
                c.arg(token).arg(channel).arg(fence);
            })
            .await?;
        release_reply(value)
    }

    /// Gives back the lock if `token` holds it, and puts the waiter of `place` back in line
    /// with `terms`, or none (see `lua/give_back.lua`), waking on `channel` an earlier waiter if the
    /// lock is now free. Keys: the lock, its queue and the queue's terms.
    pub(crate) async fn give_back(
        &self,
        keys: [&str; 3],
        token: &str,
        place: &Place,
        terms: Option<&Terms>,
        channel: &str,
    ) -> std::result::Result<ReleaseReply, NodeFailureKind> {
        let (value, _) = self
            .eval(Operation::Release, &SCRIPTS.give_back, &keys, |c| {
                c.arg(token)
                    .arg(&*place.waiter)
                    .arg(place.priority)
                    .arg(millis(place.life));
                match terms {
                    Some(t) => c.arg(&*t.token).arg(millis(t.ttl)).arg(t.proposal),
                    None => c.arg("").arg("").arg(""),
                };
                c.arg(channel);
            })
            .await?;
        release_reply(value)
    }

    /// Gives up `waiter`'s place in the queue, waking the next waiter on `channel` if the lock
    /// is free. Keys: the lock, its queue and the queue's terms. Whether the waiter had a place
    /// here.
    pub(crate) async fn dequeue(
        &self,
        keys: [&str; 3],
        waiter: &str,
        channel: &str,
    ) -> std::result::Result<bool, NodeFailureKind> {
        let (value, _) = self
            .eval(Operation::Release, &SCRIPTS.dequeue, &keys, |c| {
                c.arg(waiter).arg(channel);
            })
            .await?;
        match value {
            Value::Int(n) => Ok(n == 1),
            other => Err(unexpected("dequeue", &other)),
        }
    }

    /// What the node knows of its deployment: its marker, the longest TTL asked for on it, and
    /// its quarantine.
    pub(crate) async fn deployment(
        &self,
        keys: [&str; 3],
    ) -> std::result::Result<DeploymentState, NodeFailureKind> {
        let (value, _) = self
            .eval(Operation::Inspect, &SCRIPTS.deployment, &keys, |_| {})
            .await?;
        let state = match &value {
            Value::Array(items) => match items.as_slice() {
                [
                    Value::BulkString(marker),
                    Value::Int(longest),
                    Value::Int(pttl),
                ] => DeploymentState {
                    marker: (!marker.is_empty())
                        .then(|| String::from_utf8_lossy(marker).into_owned()),
                    longest_ttl: Duration::from_millis(non_negative(*longest)),
                    quarantined_for: u64::try_from(*pttl)
                        .ok()
                        .filter(|ms| *ms > 0)
                        .map(Duration::from_millis),
                },
                _ => return Err(unexpected("deployment", &value)),
            },
            _ => return Err(unexpected("deployment", &value)),
        };
        self.saw_deployment(state.marker.is_some(), state.quarantined_for);
        Ok(state)
    }

    /// Marks the node as part of deployment `id`, quarantined for `quarantine` (zero: not at
    /// all), recording `longest_ttl`; whether it was marked now (`false`: it already was).
    pub(crate) async fn mark(
        &self,
        keys: [&str; 3],
        id: &str,
        quarantine: Duration,
        longest_ttl: Duration,
    ) -> std::result::Result<bool, NodeFailureKind> {
        let (value, _) = self
            .eval(Operation::Inspect, &SCRIPTS.mark, &keys, |c| {
                c.arg(id).arg(millis(quarantine)).arg(millis(longest_ttl));
            })
            .await?;
        match value {
            Value::Int(n) => Ok(n == 1),
            other => Err(unexpected("mark", &other)),
        }
    }

    /// The key's remaining time to live: `None` when there is no such key.
    pub(crate) async fn pttl(
        &self,
        key: &str,
    ) -> std::result::Result<Option<Duration>, NodeFailureKind> {
        let started = Instant::now();
        let (link, mut conn) = self.connect(Operation::Inspect).await?;
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
            Err(e) => Err(self.failed(Operation::Inspect, &e, link)),
        }
    }
}

/// Awaits `send`, keeping `turn` (when there is one) only until the command is queued on its
/// connection: the first poll of a send on an open connection puts the command in the
/// connection's queue (or, when the queue is full, in line for it, first come, first served
/// too), whose order the node keeps. A burst of callers on a new client must not make each
/// one wait for all the round trips ahead of it.
async fn in_turn<F: std::future::Future + Unpin>(
    turn: Option<tokio::sync::MutexGuard<'_, ()>>,
    mut send: F,
) -> F::Output {
    if let Some(turn) = turn {
        if let Poll::Ready(answer) = futures::poll!(&mut send) {
            return answer;
        }
        drop(turn);
    }
    send.await
}

/// `INFO server persistence` and `CONFIG GET appendfsync`, in that order.
fn probe_pipeline() -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.add_command(
        redis::cmd("INFO")
            .arg("server")
            .arg("persistence")
            .to_owned(),
    );
    pipe.add_command(
        redis::cmd("CONFIG")
            .arg("GET")
            .arg("appendfsync")
            .to_owned(),
    );
    pipe
}

/// The value of a `CONFIG GET` reply for one parameter; `None` when refused or absent (a
/// managed Redis may disable CONFIG).
pub(crate) fn config_value(reply: &Value) -> Option<String> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    match reply {
        Value::Array(items) => items.get(1).and_then(text),
        Value::Map(pairs) => pairs.first().and_then(|(_, v)| text(v)),
        _ => None,
    }
}

/// TCP options of every connection to a node: `stall` is the connect timeout, at least 1 s.
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
    let settings = redis::io::tcp::TcpSettings::default();
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

/// A release's (or give-back's) answer: 1 deleted, 0 already gone, -1 held by another token.
fn release_reply(value: Value) -> std::result::Result<ReleaseReply, NodeFailureKind> {
    match value {
        Value::Int(1) => Ok(ReleaseReply::Deleted),
        Value::Int(0) => Ok(ReleaseReply::Absent),
        Value::Int(-1) => Ok(ReleaseReply::Foreign),
        other => Err(unexpected("release", &other)),
    }
}

fn non_negative(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
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

    fn settings() -> NodeSettings {
        NodeSettings {
            connect_timeout: Duration::from_secs(1),
            verify_votes: true,
            require_durable: false,
        }
    }

    #[test]
    fn passwords_never_show() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert!(!redact("redis://u:sec ret@h:x").contains("sec"));
    }

    #[test]
    fn urls_are_checked() {
        assert!(Node::new("redis://127.0.0.1:6379", settings()).is_ok());
        assert!(Node::new("rediss://user:pw@example.com:6380/2", settings()).is_ok());
        for bad in [
            "",
            "127.0.0.1:6379",
            "http://h:1",
            "redis://",
            "redis://h:notaport",
            "unix:///tmp/s",
        ] {
            let err = Node::new(bad, settings()).unwrap_err();
            assert!(
                matches!(err, Error::InvalidArgument { field: "node", .. }),
                "{bad:?} gave {err}"
            );
        }
        let err = Node::new("redis://u:hunter2@h:99999", settings()).unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn script_hashes_are_distinct() {
        let s = &*SCRIPTS;
        let all = [
            &s.acquire,
            &s.extend,
            &s.release,
            &s.dequeue,
            &s.give_back,
            &s.deployment,
            &s.mark,
        ];
        for (i, a) in all.iter().enumerate() {
            assert_eq!(a.sha.len(), 40);
            for b in &all[i + 1..] {
                assert_ne!(a.sha, b.sha);
                // Each has its own bit in a node's record of the scripts it has loaded.
                assert_eq!(a.bit & b.bit, 0);
            }
        }
    }

    #[test]
    fn config_replies_are_read_in_both_protocols() {
        let resp2 = Value::Array(vec![
            Value::BulkString(b"appendfsync".to_vec()),
            Value::BulkString(b"always".to_vec()),
        ]);
        assert_eq!(config_value(&resp2).as_deref(), Some("always"));
        let resp3 = Value::Map(vec![(
            Value::BulkString(b"appendfsync".to_vec()),
            Value::BulkString(b"everysec".to_vec()),
        )]);
        assert_eq!(config_value(&resp3).as_deref(), Some("everysec"));
        assert_eq!(config_value(&Value::Nil), None);
    }
}
