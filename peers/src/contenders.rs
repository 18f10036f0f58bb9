//! The clients compared, behind one acquire and release: redquorum through its public API,
//! rslock, a bare redis-rs fan-out with no lock logic (the bound a redis-rs client can reach),
//! the same fan-out on bare sockets (the bound of the machine, with no client library), and a
//! fan-out on bare sockets that sends redquorum's own scripts (what the masters' side of
//! redquorum's lock costs, with no client logic).

use std::time::Duration;

use futures::future::join_all;
use redis::aio::MultiplexedConnection;
use redquorum::{Client, LockOptions};
use tokio::sync::Mutex;

use crate::wire::Wire;

/// The bare fan-out's release: compare-and-delete, as every Redlock client's.
const UNLOCK: &str = "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

/// One client of one kind, with its own connections.
pub(crate) enum Contender {
    Redquorum(Client, LockOptions),
    Rslock(rslock::LockManager, Duration),
    /// `SET NX PX` on every master at once, then the compare-and-delete script; waits for
    /// every master, as rslock does. It does not wait for a held lock, so it only runs
    /// uncontended.
    Bare(Vec<MultiplexedConnection>, Duration, redis::Script),
    /// The bare fan-out on [`Wire`]s, with the compare-and-delete script's hash.
    Wire(Vec<Mutex<Wire>>, Duration, String),
    /// A fan-out on [`Wire`]s sending redquorum's acquire and release scripts, with the keys
    /// and arguments the library sends for an uncontended waiting caller; waits for every
    /// master. No client logic: no deadlines, no validity, no retry, no waiting.
    Scripts(Vec<Mutex<Wire>>, Duration, ScriptHashes),
}

/// The hashes of redquorum's acquire and release scripts, loaded on every master, and each
/// master's process (`run_id`), which the scripts are told as the library tells them what it
/// read on the connection (`lua/marked.lua`).
pub(crate) struct ScriptHashes {
    acquire: String,
    release: String,
    processes: Vec<String>,
}

/// redquorum's scripts, as the library puts them together (`src/node/scripts.rs`).
const ACQUIRE: &str = concat!(
    include_str!("../../lua/queue.lua"),
    include_str!("../../lua/marked.lua"),
    include_str!("../../lua/acquire.lua")
);
const RELEASE: &str = concat!(
    include_str!("../../lua/queue.lua"),
    include_str!("../../lua/marked.lua"),
    include_str!("../../lua/fences.lua"),
    include_str!("../../lua/release.lua")
);

/// The `run_id` in an `INFO server` reply.
fn run_id(info: &[u8]) -> Option<String> {
    String::from_utf8_lossy(info)
        .lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
}

/// redquorum's default key prefix, under which the library keeps every key (`src/node/keys.rs`).
const PREFIX: &str = "redquorum:";

/// The fencing floor of `name`'s slot, where the library keeps it.
fn floor_key(name: &str) -> String {
    format!("{PREFIX}fence-floor:{}", redquorum::slot::of(name))
}

/// An `EVALSHA` of script `sha` with `keys` and `args`, as one command's arguments.
fn evalsha(sha: &str, keys: &[String], args: &[&str]) -> Vec<Vec<u8>> {
    let head = ["EVALSHA", sha, &keys.len().to_string()].map(|a| a.as_bytes().to_vec());
    head.into_iter()
        .chain(keys.iter().map(|k| k.as_bytes().to_vec()))
        .chain(args.iter().map(|a| a.as_bytes().to_vec()))
        .collect()
}

/// A command's arguments as [`Wire::call`] takes them.
fn as_args(call: &[Vec<u8>]) -> Vec<&[u8]> {
    call.iter().map(Vec::as_slice).collect()
}

/// A lock taken by a [`Contender`].
pub(crate) enum Held {
    Redquorum(redquorum::Lock),
    Rslock(rslock::LockGuard),
    /// Taken by either bare fan-out: the name, and the value set on the masters.
    Bare(String, String),
    /// Taken with redquorum's scripts: the name, the token, and the fencing token granted
    /// (the proposal, which a grant returns).
    Scripted(String, String, String),
}

/// A bare fan-out's value for a lock: random, so that a release deletes only its own.
fn bare_value() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// A bare fan-out's lock, held when a quorum of `granted` (one answer per master) said yes.
fn held_on_a_quorum(name: &str, value: String, granted: &[bool]) -> Result<Held, String> {
    let quorum = granted.len() / 2 + 1;
    if granted.iter().filter(|g| **g).count() >= quorum {
        Ok(Held::Bare(name.to_owned(), value))
    } else {
        Err(format!("{name} was not granted on a quorum"))
    }
}

impl Contender {
    /// redquorum with the options a waiting caller would use: it waits up to 60 s, and its
    /// fallback retry is jittered up to `retry`. The masters were started just now, so
    /// quarantine (which would keep a restarted master out) is off.
    pub(crate) fn redquorum(
        urls: &[String],
        ttl: Duration,
        retry: Duration,
    ) -> Result<Self, String> {
        let client = Client::builder()
            .nodes(urls.to_vec())
            .quarantine(Duration::ZERO)
            .build()
            .map_err(|e| e.to_string())?;
        let opts = LockOptions::new(ttl)
            .wait(Duration::from_secs(60))
            .retry_delay(Duration::ZERO)
            .retry_jitter(retry);
        Ok(Contender::Redquorum(client, opts))
    }

    /// rslock with three attempts per `lock()` call, `retry` apart at most (its waiting
    /// `acquire` loops over `lock()`).
    pub(crate) fn rslock(urls: &[String], ttl: Duration, retry: Duration) -> Self {
        let mut manager = rslock::LockManager::new(urls.to_vec());
        manager.set_retry(3, retry);
        Contender::Rslock(manager, ttl)
    }

    /// The bare fan-out, connected to every master.
    pub(crate) async fn bare(urls: &[String], ttl: Duration) -> Result<Self, String> {
        let mut connections = Vec::with_capacity(urls.len());
        for url in urls {
            let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
            connections.push(
                client
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        Ok(Contender::Bare(
            connections,
            ttl,
            redis::Script::new(UNLOCK),
        ))
    }

    /// The bare fan-out on a socket per master, the compare-and-delete script loaded on each.
    pub(crate) async fn wire(urls: &[String], ttl: Duration) -> Result<Self, String> {
        let mut wires = Vec::with_capacity(urls.len());
        let mut sha = Vec::new();
        for url in urls {
            let mut wire = Wire::connect(url).await?;
            sha = wire
                .call(&[b"SCRIPT", b"LOAD", UNLOCK.as_bytes()])
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            wires.push(Mutex::new(wire));
        }
        let sha = String::from_utf8(sha).map_err(|e| e.to_string())?;
        Ok(Contender::Wire(wires, ttl, sha))
    }

    /// The fan-out sending redquorum's scripts, on a socket per master. Each master is marked
    /// as part of a deployment, for the process it is, as a library client marks a new one, so
    /// that it grants.
    pub(crate) async fn scripts(urls: &[String], ttl: Duration) -> Result<Self, String> {
        let mut wires = Vec::with_capacity(urls.len());
        let mut hashes = ScriptHashes {
            acquire: String::new(),
            release: String::new(),
            processes: Vec::with_capacity(urls.len()),
        };
        for url in urls {
            let mut wire = Wire::connect(url).await?;
            let info = wire
                .call(&[b"INFO", b"server"])
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            let process = run_id(&info).ok_or_else(|| format!("{url}: INFO has no run_id"))?;
            let marker = format!("{PREFIX}deployment");
            wire.call(&[b"SET", marker.as_bytes(), b"peers", b"NX"])
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            let marked_run = format!("{PREFIX}marked-run");
            wire.call(&[b"SET", marked_run.as_bytes(), process.as_bytes()])
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            hashes.processes.push(process);
            for (body, hash) in [
                (ACQUIRE, &mut hashes.acquire),
                (RELEASE, &mut hashes.release),
            ] {
                let sha = wire
                    .call(&[b"SCRIPT", b"LOAD", body.as_bytes()])
                    .await
                    .map_err(|e| format!("{url}: {e}"))?;
                *hash = String::from_utf8(sha).map_err(|e| e.to_string())?;
            }
            wires.push(Mutex::new(wire));
        }
        Ok(Contender::Scripts(wires, ttl, hashes))
    }

    /// Takes `name`, waiting while it is held (the bare fan-outs do not wait).
    pub(crate) async fn acquire(&self, name: &str) -> Result<Held, String> {
        match self {
            Contender::Redquorum(client, opts) => client
                .acquire(name, opts)
                .await
                .map(Held::Redquorum)
                .map_err(|e| e.to_string()),
            Contender::Rslock(manager, ttl) => manager
                .acquire(name, *ttl)
                .await
                .map(Held::Rslock)
                .map_err(|e| e.to_string()),
            Contender::Bare(connections, ttl, _) => {
                let value = bare_value();
                let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
                let granted = join_all(connections.iter().map(|c| {
                    let mut c = c.clone();
                    let (name, value) = (name.to_owned(), value.clone());
                    async move {
                        let set: redis::RedisResult<redis::Value> = redis::cmd("SET")
                            .arg(name)
                            .arg(value)
                            .arg("NX")
                            .arg("PX")
                            .arg(ttl_ms)
                            .query_async(&mut c)
                            .await;
                        matches!(set, Ok(redis::Value::Okay))
                    }
                }))
                .await;
                held_on_a_quorum(name, value, &granted)
            }
            Contender::Wire(wires, ttl, _) => {
                let value = bare_value();
                let ttl_ms = ttl.as_millis().to_string();
                let granted = join_all(wires.iter().map(|wire| {
                    let args: [&[u8]; 6] = [
                        b"SET",
                        name.as_bytes(),
                        value.as_bytes(),
                        b"NX",
                        b"PX",
                        ttl_ms.as_bytes(),
                    ];
                    async move {
                        let reply = wire.lock().await.call(&args).await;
                        matches!(reply.as_deref(), Ok(b"OK"))
                    }
                }))
                .await;
                held_on_a_quorum(name, value, &granted)
            }
            Contender::Scripts(wires, ttl, hashes) => {
                let token = bare_value();
                let ttl_ms = ttl.as_millis().to_string();
                // A fencing token proposed from the clock, as the library's first proposal.
                let proposal = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_err(|e| e.to_string())?
                    .as_micros()
                    .to_string();
                let waiter = format!("peers.{:x}", rand::random::<u32>());
                let keys = [
                    format!("{PREFIX}lock:{name}"),
                    format!("{PREFIX}fence:{name}"),
                    format!("{PREFIX}queue:{name}"),
                    format!("{PREFIX}queue-terms:{name}"),
                    format!("{PREFIX}deployment"),
                    format!("{PREFIX}longest-ttl"),
                    format!("{PREFIX}quarantine"),
                    format!("{PREFIX}queue-live:{name}"),
                    format!("{PREFIX}marked-run"),
                    format!("{PREFIX}latest-expiry"),
                    floor_key(name),
                ];
                let answers =
                    join_all(wires.iter().zip(&hashes.processes).map(|(wire, process)| {
                        let call = evalsha(
                            &hashes.acquire,
                            &keys,
                            &[
                                &token, &ttl_ms, &proposal, &waiter, &proposal, "150", "1", "", "",
                                process,
                            ],
                        );
                        async move { wire.lock().await.call_for_array(&as_args(&call)).await }
                    }))
                    .await;
                // {1, fence}: granted.
                let granted: Vec<bool> = answers
                    .iter()
                    .map(|a| matches!(a.as_deref(), Ok([status, _]) if status == b"1"))
                    .collect();
                held_on_a_quorum(name, token.clone(), &granted)
                    .map(|_| Held::Scripted(name.to_owned(), token, proposal))
            }
        }
    }

    /// Releases a lock this contender took.
    pub(crate) async fn release(&self, held: Held) -> Result<(), String> {
        match (self, held) {
            (_, Held::Redquorum(lock)) => lock.release().await.map_err(|e| e.to_string()),
            (_, Held::Rslock(guard)) => {
                guard.release().await;
                Ok(())
            }
            (Contender::Bare(connections, _, unlock), Held::Bare(name, value)) => {
                join_all(connections.iter().map(|c| {
                    let mut c = c.clone();
                    let (name, value) = (&name, &value);
                    async move {
                        let _: redis::RedisResult<i64> =
                            unlock.key(name).arg(value).invoke_async(&mut c).await;
                    }
                }))
                .await;
                Ok(())
            }
            (Contender::Wire(wires, _, sha), Held::Bare(name, value)) => {
                join_all(wires.iter().map(|wire| {
                    let args: [&[u8]; 5] = [
                        b"EVALSHA",
                        sha.as_bytes(),
                        b"1",
                        name.as_bytes(),
                        value.as_bytes(),
                    ];
                    async move {
                        let _ = wire.lock().await.call(&args).await;
                    }
                }))
                .await;
                Ok(())
            }
            (Contender::Scripts(wires, _, hashes), Held::Scripted(name, token, fence)) => {
                let keys = [
                    format!("{PREFIX}lock:{name}"),
                    format!("{PREFIX}queue:{name}"),
                    format!("{PREFIX}queue-terms:{name}"),
                    format!("{PREFIX}fence:{name}"),
                    format!("{PREFIX}deployment"),
                    format!("{PREFIX}quarantine"),
                    format!("{PREFIX}queue-live:{name}"),
                    format!("{PREFIX}marked-run"),
                    format!("{PREFIX}latest-expiry"),
                    format!("{PREFIX}longest-ttl"),
                    floor_key(&name),
                ];
                let wake = format!("{PREFIX}wake:");
                let released =
                    join_all(wires.iter().zip(&hashes.processes).map(|(wire, process)| {
                        let call = evalsha(
                            &hashes.release,
                            &keys,
                            &[&token, &wake, &fence, "1", "", "", "", "", "", "", process],
                        );
                        async move { wire.lock().await.call(&as_args(&call)).await }
                    }))
                    .await;
                // 1: deleted; anything else on a master means the bench is not measuring a
                // lock that was held there.
                if released.iter().all(|r| matches!(r.as_deref(), Ok(b"1"))) {
                    Ok(())
                } else {
                    Err(format!("{name} was not released on every master"))
                }
            }
            (_, Held::Bare(name, _) | Held::Scripted(name, ..)) => {
                Err(format!("{name} was not taken by this fan-out"))
            }
        }
    }
}
