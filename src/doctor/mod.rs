//! [`Client::doctor`]: checks a deployment before anyone trusts it with locks.
//!
//! Quorum locks are only as safe as the masters under them. A replica, or one server listed
//! twice, is counted as an independent vote it is not; an eviction policy that may drop keys
//! with a TTL may drop a lock; a master that restarts without durable persistence forgets the
//! locks it held; a user the ACL denies a command the scripts need fails every call. Doctor
//! reads each master over its own plain connection (so it never disturbs the client's
//! connections), in parallel and each under a bounded deadline, and reports what it found as
//! data: an unreachable master is a finding, not an error.
//!
//! Permissions are checked without admin rights: with `ACL DRYRUN` where the user may run it,
//! and otherwise by running each command the library uses, harmlessly, on a scratch key under
//! the key prefix (deleted afterwards, and with a TTL in case the delete is refused) and on a
//! scratch channel, and collecting the ones the server refuses with `NOPERM`.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, Value};

use crate::client::Client;
use crate::config::defaults;
use crate::node::Node;

/// How bad a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Severity {
    /// The deployment is not safe (or not able) to hold locks as configured.
    Error,
    /// Degraded but safe: worth fixing, locks still hold.
    Warning,
}

impl Severity {
    /// `error` or `warning`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing doctor found wrong, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Problem {
    /// Whether it makes the deployment unsafe.
    pub severity: Severity,
    /// A short stable name scripts may match on: `unreachable`, `replica`, `same_server`,
    /// `eviction`, `not_durable`, `acl`, `clock`, `quarantined`, `unmarked`, `quorum`.
    pub code: &'static str,
    /// What is wrong and what to do, for people.
    pub message: String,
}

impl Problem {
    fn new(severity: Severity, code: &'static str, message: impl Into<String>) -> Self {
        Problem {
            severity,
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.severity, self.message)
    }
}

/// What doctor found on one master.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeCheck {
    /// The master's address, `host:port` (never a password).
    pub node: String,
    /// Whether doctor could connect and read the master.
    pub reachable: bool,
    /// Why it could not, when it could not.
    pub error: Option<String>,
    /// `redis_version` from `INFO`.
    pub redis_version: Option<String>,
    /// `role` from `INFO replication`: `master`, or `slave` for a replica.
    pub role: Option<String>,
    /// The server process's `run_id` from `INFO`: two addresses with the same one are one
    /// server.
    pub run_id: Option<String>,
    /// Whether AOF is on.
    pub aof_enabled: Option<bool>,
    /// The `appendfsync` policy, when `CONFIG GET` is allowed.
    pub appendfsync: Option<String>,
    /// AOF with `appendfsync always`: every write survives a restart. `false` when it cannot
    /// be confirmed.
    pub durable: bool,
    /// `maxmemory_policy` from `INFO memory`.
    pub maxmemory_policy: Option<String>,
    /// The ACL user the client connects as (`ACL WHOAMI`), when the user may ask.
    pub acl_user: Option<String>,
    /// What the ACL denies that the library needs: command names (`EVALSHA`), `~{prefix}*`
    /// for key access and `&{prefix}*` for channel access.
    pub acl_missing: Vec<String>,
    /// The shortest of a few round trips.
    pub rtt: Option<Duration>,
    /// The master's clock (`TIME`) minus the local wall clock at the midpoint of the round
    /// trip, in microseconds: positive when the master is ahead.
    pub clock_offset_micros: Option<i64>,
    /// Whether the master carries the deployment's marker (see the README's "Deployment
    /// marker and quarantine"): `Some(false)` for a master of a new deployment (marked by the
    /// first acquire) or one that lost its data (put in quarantine by the first acquire).
    pub marked: Option<bool>,
    /// How much longer the master grants nothing because it lost its data while the
    /// deployment was in use: its quarantine, by its own clock.
    pub quarantined_for: Option<Duration>,
    /// What is wrong with this master.
    pub problems: Vec<Problem>,
}

impl NodeCheck {
    fn unchecked(node: &str) -> Self {
        NodeCheck {
            node: node.to_owned(),
            reachable: false,
            error: None,
            redis_version: None,
            role: None,
            run_id: None,
            aof_enabled: None,
            appendfsync: None,
            durable: false,
            maxmemory_policy: None,
            acl_user: None,
            acl_missing: Vec::new(),
            rtt: None,
            clock_offset_micros: None,
            marked: None,
            quarantined_for: None,
            problems: Vec::new(),
        }
    }
}

/// What [`Client::doctor`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DoctorReport {
    /// One check per master, in the order the masters were given.
    pub nodes: Vec<NodeCheck>,
    /// Problems of the deployment as a whole (too few usable masters).
    pub problems: Vec<Problem>,
    /// How many masters must agree on a lock.
    pub quorum: usize,
    /// How many masters can vote now: reachable, independent masters the ACL lets the client
    /// use, not quarantined, and durable when durability is required.
    pub usable: usize,
    /// Whether no problem anywhere is an [`Severity::Error`].
    pub safe: bool,
}

impl DoctorReport {
    /// The same report for a deployment that accepts masters without durable persistence:
    /// their `not_durable` problems become warnings (locks stay safe through quarantine;
    /// fencing tokens may go back once a master that lost its counters counts again), and
    /// [`DoctorReport::safe`] is decided again.
    #[must_use]
    pub fn allowing_non_durable(mut self) -> Self {
        for problem in self
            .nodes
            .iter_mut()
            .flat_map(|n| n.problems.iter_mut())
            .filter(|p| p.code == "not_durable")
        {
            problem.severity = Severity::Warning;
        }
        let unsafe_anywhere = self
            .all_problems()
            .any(|(_, p)| p.severity == Severity::Error);
        self.safe = !unsafe_anywhere;
        self
    }

    /// Every problem, each with the master it is about (`None` for the deployment's own).
    pub fn all_problems(&self) -> impl Iterator<Item = (Option<&str>, &Problem)> {
        self.nodes
            .iter()
            .flat_map(|n| n.problems.iter().map(move |p| (Some(n.node.as_str()), p)))
            .chain(self.problems.iter().map(|p| (None, p)))
    }
}

impl Client {
    /// Checks every master for what makes quorum locks unsafe or unavailable: reachability,
    /// role (a replica), the same server listed twice, persistence, eviction policy, ACL
    /// permissions, round-trip time, clock offset, and quarantine. Masters are checked in
    /// parallel, each over a plain connection of its own and within
    /// `max(node_timeout, defaults::DOCTOR_DEADLINE)`.
    ///
    /// It never fails: what cannot be read is reported as a problem.
    pub async fn doctor(&self) -> DoctorReport {
        let settings = &self.inner.settings;
        let deadline = settings.node_timeout.max(defaults::DOCTOR_DEADLINE);
        let prefix = settings.key_prefix.as_str();
        let checks = futures::future::join_all(self.inner.nodes.iter().map(|node| async move {
            match tokio::time::timeout(deadline, check(node, prefix, deadline)).await {
                Ok(check) => check,
                Err(_) => {
                    let mut check = NodeCheck::unchecked(node.addr());
                    check.error = Some(format!(
                        "no answer within {}",
                        humantime::format_duration(deadline)
                    ));
                    check
                }
            }
        }));
        // The client's own reading says what each master keeps of the deployment: its marker
        // and its quarantine.
        let (mut nodes, health) = tokio::join!(checks, self.node_health());
        for (check, health) in nodes.iter_mut().zip(health) {
            check.marked = health.marked;
            check.quarantined_for = health.quarantined_for;
        }
        assess(nodes, self.quorum(), settings.require_durable)
    }
}

/// Reads one master. Everything is best effort: what fails is left empty, with the reason.
async fn check(node: &Node, prefix: &str, deadline: Duration) -> NodeCheck {
    let mut out = NodeCheck::unchecked(node.addr());
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(deadline))
        .set_response_timeout(Some(deadline));
    let mut conn = match node
        .redis_client()
        .get_multiplexed_async_connection_with_config(&config)
        .await
    {
        Ok(conn) => conn,
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    };
    if let Err(e) = read_info(&mut conn, &mut out).await {
        out.error = Some(e.to_string());
        return out;
    }
    out.reachable = true;
    if let Err(e) = read_clock(&mut conn, &mut out).await {
        out.reachable = false;
        out.error = Some(e.to_string());
        return out;
    }
    match read_acl(node, &mut conn, prefix).await {
        Ok((user, missing)) => {
            out.acl_user = user;
            out.acl_missing = missing;
        }
        Err(e) => {
            out.reachable = false;
            out.error = Some(e.to_string());
        }
    }
    out
}

/// `INFO` and `CONFIG GET appendfsync`: version, role, run id, persistence, eviction policy.
async fn read_info(
    conn: &mut MultiplexedConnection,
    out: &mut NodeCheck,
) -> redis::RedisResult<()> {
    let mut pipe = redis::pipe();
    // The default sections hold server, replication, persistence and memory alike, and a plain
    // `INFO` is understood by every Redis version.
    pipe.add_command(redis::cmd("INFO"));
    pipe.add_command(
        redis::cmd("CONFIG")
            .arg("GET")
            .arg("appendfsync")
            .to_owned(),
    );
    let replies = conn.send_packed_commands(&pipe, 0, 2).await?;
    let info = match replies.first() {
        Some(Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        Some(Value::VerbatimString { text, .. }) => text.clone(),
        Some(Value::SimpleString(text)) => text.clone(),
        // Refused (the ACL check names INFO then): the fields stay unknown.
        _ => String::new(),
    };
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    };
    out.redis_version = field("redis_version");
    out.role = field("role");
    out.run_id = field("run_id");
    out.aof_enabled = field("aof_enabled").map(|v| v == "1");
    out.maxmemory_policy = field("maxmemory_policy");
    out.appendfsync = replies.get(1).and_then(crate::node::config_value);
    out.durable = out.aof_enabled == Some(true) && out.appendfsync.as_deref() == Some("always");
    Ok(())
}

/// A few `TIME` round trips: the shortest gives the round-trip time and the offset estimate
/// with the least uncertainty (half the round trip).
async fn read_clock(
    conn: &mut MultiplexedConnection,
    out: &mut NodeCheck,
) -> redis::RedisResult<()> {
    const SAMPLES: usize = 3;
    let mut best: Option<(Duration, Option<i64>)> = None;
    for _ in 0..SAMPLES {
        let wall = SystemTime::now();
        let started = Instant::now();
        let reply = conn.send_packed_command(&redis::cmd("TIME")).await?;
        let rtt = started.elapsed();
        // Any answer, a refusal included, measures the round trip.
        let offset = master_micros(&reply).and_then(|master| {
            let midpoint = wall.checked_add(rtt / 2)?.duration_since(UNIX_EPOCH).ok()?;
            let local = i64::try_from(midpoint.as_micros()).ok()?;
            master.checked_sub(local)
        });
        if best.is_none_or(|(shortest, _)| rtt < shortest) {
            best = Some((rtt, offset));
        }
    }
    if let Some((rtt, offset)) = best {
        out.rtt = Some(rtt);
        out.clock_offset_micros = offset;
    }
    Ok(())
}

/// Microseconds since the epoch from a `TIME` reply.
fn master_micros(reply: &Value) -> Option<i64> {
    let number = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse::<i64>().ok(),
        Value::Int(n) => Some(*n),
        _ => None,
    };
    match reply {
        Value::Array(items) if items.len() == 2 => {
            let secs = number(&items[0])?;
            let micros = number(&items[1])?;
            secs.checked_mul(1_000_000)?.checked_add(micros)
        }
        _ => None,
    }
}

/// The commands the library sends, with harmless arguments on a scratch key and channel.
/// Ordered so that a key some command creates gets a TTL (`PEXPIRE`) and is deleted (`DEL`)
/// when those are allowed; `SET` goes first with a TTL, so that the others find a string and
/// create nothing.
fn needed(key: &str, channel: &str) -> Vec<(&'static str, Cmd)> {
    let cmd = |name: &'static str, args: &[&str]| {
        let mut c = redis::cmd(name);
        for a in args {
            c.arg(*a);
        }
        (name, c)
    };
    // A SHA1 no script has: EVALSHA answers NOSCRIPT when it is allowed.
    let absent_sha = "0000000000000000000000000000000000000000";
    vec![
        cmd("SET", &[key, "doctor", "PX", "60000"]),
        cmd("GET", &[key]),
        cmd("MGET", &[key, key]),
        cmd("EXISTS", &[key]),
        cmd("PTTL", &[key]),
        cmd("ZADD", &[key, "0", "doctor"]),
        cmd("ZRANGE", &[key, "0", "0"]),
        cmd("ZREM", &[key, "doctor"]),
        cmd("HSET", &[key, "doctor", "1"]),
        cmd("HGET", &[key, "doctor"]),
        cmd("HDEL", &[key, "doctor"]),
        cmd("PEXPIRE", &[key, "60000"]),
        cmd("TIME", &[]),
        cmd("INFO", &["server"]),
        cmd("PUBLISH", &[channel, "doctor"]),
        cmd("EVAL", &["return 1", "1", key]),
        cmd("EVALSHA", &[absent_sha, "1", key]),
        cmd("DEL", &[key]),
    ]
}

/// The user, and what the ACL denies of what the library needs.
async fn read_acl(
    node: &Node,
    conn: &mut MultiplexedConnection,
    prefix: &str,
) -> redis::RedisResult<(Option<String>, Vec<String>)> {
    let scratch = format!("{prefix}doctor:{:016x}", rand::random::<u64>());
    // The wake channels are `{prefix}wake:<client id>`.
    let channel = format!("{prefix}wake:doctor-{:016x}", rand::random::<u64>());
    let mut commands = needed(&scratch, &channel);
    let mut missing = Missing::new(prefix);

    let user = match conn
        .send_packed_command(redis::cmd("ACL").arg("WHOAMI"))
        .await?
    {
        Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        Value::SimpleString(s) => Some(s),
        _ => None,
    };
    if let Some(user) = &user {
        commands.push((
            "SUBSCRIBE",
            redis::cmd("SUBSCRIBE").arg(&channel).to_owned(),
        ));
        let mut pipe = redis::pipe();
        for (_, c) in &commands {
            let mut dry = redis::cmd("ACL");
            dry.arg("DRYRUN").arg(user);
            for arg in c.args_iter() {
                if let redis::Arg::Simple(bytes) = arg {
                    dry.arg(bytes);
                }
            }
            pipe.add_command(dry);
        }
        let replies = conn.send_packed_commands(&pipe, 0, commands.len()).await?;
        // An error (rather than a verdict) means DRYRUN itself is refused or unknown (Redis
        // before 7): fall back on running the commands.
        if replies.iter().all(|r| !matches!(r, Value::ServerError(_))) {
            for ((name, _), reply) in commands.iter().zip(&replies) {
                let verdict = match reply {
                    Value::Okay => continue,
                    Value::SimpleString(s) => s.clone(),
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    other => format!("{other:?}"),
                };
                if verdict != "OK" {
                    missing.denied(name, &verdict);
                }
            }
            return Ok((Some(user.clone()), missing.into_list()));
        }
        commands.pop();
    }

    let mut pipe = redis::pipe();
    for (_, c) in &commands {
        pipe.add_command(c.clone());
    }
    let replies = conn.send_packed_commands(&pipe, 0, commands.len()).await?;
    for ((name, _), reply) in commands.iter().zip(&replies) {
        if let Value::ServerError(e) = reply {
            if e.code() == "NOPERM" {
                missing.denied(name, e.details().unwrap_or_default());
            }
        }
    }
    // SUBSCRIBE puts a connection in subscriber mode: it gets one of its own.
    let mut pubsub = node.redis_client().get_async_pubsub().await?;
    if let Err(e) = pubsub.subscribe(&channel).await {
        if e.code() == Some("NOPERM") {
            missing.denied("SUBSCRIBE", e.detail().unwrap_or_default());
        }
    }
    // WHOAMI refused: the user is the URL's, or `default`.
    let user = user.or_else(|| {
        let info = node.redis_client().get_connection_info();
        Some(
            info.redis_settings()
                .username()
                .unwrap_or("default")
                .to_owned(),
        )
    });
    Ok((user, missing.into_list()))
}

/// What the ACL denies, each thing once, in the order found.
struct Missing {
    keys: String,
    channels: String,
    list: Vec<String>,
}

impl Missing {
    fn new(prefix: &str) -> Self {
        Missing {
            keys: format!("~{prefix}*"),
            channels: format!("&{prefix}*"),
            list: Vec::new(),
        }
    }

    /// Books a refusal of `command` with the server's reason: the command itself, or access
    /// to the keys or channels under the prefix.
    fn denied(&mut self, command: &str, reason: &str) {
        let reason = reason.to_ascii_lowercase();
        let what = if reason.contains("channel") {
            self.channels.clone()
        } else if reason.contains("key") {
            self.keys.clone()
        } else {
            command.to_owned()
        };
        if !self.list.contains(&what) {
            self.list.push(what);
        }
    }

    fn into_list(self) -> Vec<String> {
        self.list
    }
}

/// Turns the readings into problems, per master and for the deployment.
fn assess(mut nodes: Vec<NodeCheck>, quorum: usize, require_durable: bool) -> DoctorReport {
    // The first address of each server, by run id.
    let mut first: HashMap<String, String> = HashMap::new();
    // Unmarked masters beside marked ones lost their data; with none marked, the deployment
    // is new and the first acquire marks them all.
    let lost_data = nodes.iter().any(|n| n.marked == Some(true));
    let mut usable = 0;
    for node in &mut nodes {
        let mut problems = Vec::new();
        let mut votes = node.reachable;
        if !node.reachable {
            problems.push(Problem::new(
                Severity::Error,
                "unreachable",
                format!(
                    "cannot be reached ({}); it cannot vote: check the address, the password and the network",
                    node.error.as_deref().unwrap_or("no reason given")
                ),
            ));
        }
        if let Some(role) = node.role.as_deref().filter(|r| *r != "master") {
            votes = false;
            problems.push(Problem::new(
                Severity::Error,
                "replica",
                format!(
                    "is a replica (role:{role}), not a master: it takes no writes of its own and copies another server's keys, so it is not an independent vote; list independent masters only"
                ),
            ));
        }
        if let Some(run_id) = &node.run_id {
            match first.get(run_id) {
                Some(other) => {
                    votes = false;
                    problems.push(Problem::new(
                        Severity::Error,
                        "same_server",
                        format!(
                            "is the same server as {other} (same run_id): one server would be counted as two votes; list each master once"
                        ),
                    ));
                }
                None => {
                    first.insert(run_id.clone(), node.node.clone());
                }
            }
        }
        if let Some(policy) = node
            .maxmemory_policy
            .as_deref()
            .filter(|p| *p != "noeviction")
        {
            problems.push(Problem::new(
                Severity::Error,
                "eviction",
                format!(
                    "maxmemory-policy is {policy}: volatile-* and allkeys-* policies can evict a lock key before its TTL, and another client then takes the lock; set maxmemory-policy noeviction"
                ),
            ));
        }
        if node.reachable && !node.durable {
            let how = match (node.aof_enabled, node.appendfsync.as_deref()) {
                (Some(true), None) => "AOF is on but appendfsync cannot be read (CONFIG GET is refused to this user), so durability cannot be confirmed".to_owned(),
                (Some(true), Some(fsync)) => format!("AOF runs with appendfsync {fsync}, which can lose the last writes"),
                _ => "AOF is off".to_owned(),
            };
            // Locks survive it (the master is quarantined once it lost its data), fencing
            // tokens do not: an error unless the caller accepts that
            // (`DoctorReport::allowing_non_durable`).
            let consequence = if require_durable {
                votes = false;
                "durable masters are required, so its votes are not counted"
            } else {
                "a restart or flush loses its locks (it is then quarantined for the longest TTL in use) and its fencing counters, so fencing tokens may go back once it counts again"
            };
            problems.push(Problem::new(
                Severity::Error,
                "not_durable",
                format!("{how}: {consequence}; run it with appendonly yes and appendfsync always"),
            ));
        }
        if !node.acl_missing.is_empty() {
            votes = false;
            let user = node.acl_user.as_deref().unwrap_or("<user>");
            let denied: Vec<String> = node
                .acl_missing
                .iter()
                .map(|m| match m.chars().next() {
                    Some('~') => format!("access to keys {m}"),
                    Some('&') => format!("access to channels {m}"),
                    _ => m.clone(),
                })
                .collect();
            let grant: Vec<String> = node
                .acl_missing
                .iter()
                .map(|m| match m.chars().next() {
                    Some('~' | '&') => m.clone(),
                    _ => format!("+{}", m.to_ascii_lowercase()),
                })
                .collect();
            problems.push(Problem::new(
                Severity::Error,
                "acl",
                format!(
                    "the ACL denies the client {} (user {user}); every call that needs it fails: ACL SETUSER {user} {}",
                    denied.join(", "),
                    grant.join(" ")
                ),
            ));
        }
        if let Some(offset) = node.clock_offset_micros {
            let limit = defaults::CLOCK_OFFSET_WARNING;
            if offset.unsigned_abs() > u64::try_from(limit.as_micros()).unwrap_or(u64::MAX) {
                problems.push(Problem::new(
                    Severity::Warning,
                    "clock",
                    format!(
                        "its clock is {} {} the local clock (more than {}): fencing-token proposals start from the clocks (a client behind the others needs extra round trips) and waiters' places in line lapse by them, so queue fairness suffers; held locks stay safe, but a clock this far off suggests one that may also step: run NTP on every host",
                        humantime::format_duration(Duration::from_millis(offset.unsigned_abs() / 1000)),
                        if offset > 0 { "ahead of" } else { "behind" },
                        humantime::format_duration(limit)
                    ),
                ));
            }
        }
        if let Some(left) = node.quarantined_for {
            votes = false;
            problems.push(Problem::new(
                Severity::Warning,
                "quarantined",
                format!(
                    "it lost its data (a restart without persistence, or a flush) while the deployment was in use: it grants nothing for {} more, until every lock it may have granted has expired elsewhere",
                    humantime::format_duration(Duration::from_secs(left.as_secs().max(1)))
                ),
            ));
        } else if node.marked == Some(false) && lost_data {
            votes = false;
            problems.push(Problem::new(
                Severity::Warning,
                "unmarked",
                "it carries no deployment marker while other masters do: it lost its data, and the next acquire puts it in quarantine for the longest TTL in use".to_owned(),
            ));
        }
        if votes {
            usable += 1;
        }
        node.problems = problems;
    }
    let mut problems = Vec::new();
    if usable < quorum {
        problems.push(Problem::new(
            Severity::Error,
            "quorum",
            format!(
                "only {usable} of {} masters can vote now, and a lock needs {quorum}: no lock can be taken until the problems above are fixed",
                nodes.len()
            ),
        ));
    }
    let safe = nodes
        .iter()
        .flat_map(|n| &n.problems)
        .chain(&problems)
        .all(|p| p.severity != Severity::Error);
    DoctorReport {
        nodes,
        problems,
        quorum,
        usable,
        safe,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy(node: &str, run_id: &str) -> NodeCheck {
        NodeCheck {
            reachable: true,
            redis_version: Some("7.0.15".into()),
            role: Some("master".into()),
            run_id: Some(run_id.into()),
            aof_enabled: Some(true),
            appendfsync: Some("always".into()),
            durable: true,
            maxmemory_policy: Some("noeviction".into()),
            rtt: Some(Duration::from_micros(200)),
            clock_offset_micros: Some(-150),
            ..NodeCheck::unchecked(node)
        }
    }

    fn codes(report: &DoctorReport) -> Vec<&str> {
        report.all_problems().map(|(_, p)| p.code).collect()
    }

    #[test]
    fn a_healthy_deployment_is_safe() {
        let nodes = vec![
            healthy("a:1", "x"),
            healthy("b:1", "y"),
            healthy("c:1", "z"),
        ];
        let report = assess(nodes, 2, true);
        assert!(report.safe, "{report:?}");
        assert_eq!(report.usable, 3);
        assert!(codes(&report).is_empty());
    }

    #[test]
    fn each_misconfiguration_is_found() {
        let mut replica = healthy("b:1", "y");
        replica.role = Some("slave".into());
        let twice = healthy("c:1", "x");
        let mut lru = healthy("d:1", "w");
        lru.maxmemory_policy = Some("allkeys-lru".into());
        let mut acl = healthy("e:1", "v");
        acl.acl_missing = vec!["EVALSHA".into()];
        let mut clock = healthy("f:1", "u");
        clock.clock_offset_micros = Some(-3_000_000);
        let down = NodeCheck::unchecked("g:1");
        let nodes = vec![healthy("a:1", "x"), replica, twice, lru, acl, clock, down];
        let report = assess(nodes, 4, false);
        assert!(!report.safe);
        assert_eq!(
            codes(&report),
            [
                "replica",
                "same_server",
                "eviction",
                "acl",
                "clock",
                "unreachable",
                "quorum"
            ]
        );
        // The first address of a server counts; the second does not.
        assert!(report.nodes[0].problems.is_empty());
        assert!(report.nodes[2].problems[0].message.contains("a:1"));
        assert!(report.nodes[5].problems[0].message.contains("behind"));
        assert_eq!(report.nodes[5].problems[0].severity, Severity::Warning);
        assert_eq!(report.usable, 3, "a, the eviction and the clock ones vote");
    }

    #[test]
    fn durability_is_an_error_unless_accepted() {
        let mut plain = healthy("a:1", "x");
        plain.aof_enabled = Some(false);
        plain.durable = false;
        let report = assess(vec![plain.clone()], 1, false);
        assert!(!report.safe);
        assert_eq!(codes(&report), ["not_durable"]);
        let accepted = report.allowing_non_durable();
        assert!(accepted.safe);
        assert_eq!(accepted.nodes[0].problems[0].severity, Severity::Warning);
        // Required and missing: its vote is lost, and then the quorum too, accepted or not.
        let report = assess(vec![plain], 1, true).allowing_non_durable();
        assert!(!report.safe);
        assert_eq!(codes(&report), ["not_durable", "quorum"]);
    }

    #[test]
    fn denials_name_the_command_or_the_access() {
        let mut m = Missing::new("rq:");
        m.denied(
            "EVALSHA",
            "this user has no permissions to run the 'evalsha' command",
        );
        m.denied(
            "GET",
            "this user has no permissions to access one of the keys used as arguments",
        );
        m.denied(
            "SET",
            "This user has no permissions to access the 'rq:doctor:1' key",
        );
        m.denied(
            "PUBLISH",
            "This user has no permissions to access the 'rq:wake:x' channel",
        );
        assert_eq!(m.into_list(), ["EVALSHA", "~rq:*", "&rq:*"]);
    }

    #[test]
    fn time_replies_are_read() {
        let reply = Value::Array(vec![
            Value::BulkString(b"1700000000".to_vec()),
            Value::BulkString(b"123456".to_vec()),
        ]);
        assert_eq!(master_micros(&reply), Some(1_700_000_000_123_456));
        assert_eq!(master_micros(&Value::Nil), None);
    }
}
