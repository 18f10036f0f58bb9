//! A worker's operations on the lock and on the resource (acquire, read, write, extend,
//! release), each recorded as an invocation and an outcome on stdout. The load loop that
//! repeats them is in `load`.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use redquorum::fencing::{FencedWrite, fenced_set};
use redquorum::{Client, LockOptions, Owner};

use super::command::LockSpec;
use super::section::{Held, asked};
use super::{RESOURCE_KEY, WorkerArgs};
use crate::history::{Clock, Event, EventKind, WorkerId};

/// A holder does not start a step with less validity left than this.
pub(super) const MARGIN: Duration = Duration::from_millis(10);

/// The resource counter of one lock name of a multi-lock.
pub(super) fn counter_of(name: &str) -> String {
    format!("{RESOURCE_KEY}:{name}")
}

/// A value read from the resource, to be written back plus one.
struct Reading {
    key: String,
    /// The lock name whose fencing token guards `key` (none: the section's own token).
    name: Option<String>,
    value: i64,
}

/// A worker's client, what it holds and what it read under it.
pub(super) struct Worker {
    pub(super) id: WorkerId,
    pub(super) clock: Clock,
    client: Client,
    resource: redis::Client,
    conn: Option<MultiplexedConnection>,
    fencing: bool,
    lock_name: String,
    /// The worker's own owner of reentrant locks.
    owner: Owner,
    next_op: u64,
    /// The sections held: the first one, then holds nested in it (a reentrant owner's).
    /// Reads, writes, extends and releases act on the last.
    held: Vec<Held>,
    /// The counter as read under the current section.
    last_read: Option<Reading>,
    pub(super) stop: Arc<AtomicBool>,
}

impl Worker {
    /// A worker as `args` set it up, with no lock yet.
    pub(super) fn new(
        args: &WorkerArgs,
        client: Client,
        resource: redis::Client,
        owner: Owner,
        stop: Arc<AtomicBool>,
    ) -> Self {
        Worker {
            owner,
            id: args.id,
            clock: Clock::new(args.epoch_ns),
            client,
            resource,
            conn: None,
            fencing: args.fencing,
            lock_name: args.lock.clone(),
            next_op: 0,
            held: Vec::new(),
            last_read: None,
            stop,
        }
    }

    fn op(&mut self) -> u64 {
        self.next_op += 1;
        self.next_op
    }

    pub(super) fn emit(&self, kind: EventKind) -> Result<(), String> {
        self.emit_at(self.clock.now(), kind)
    }

    fn emit_at(&self, t: u64, kind: EventKind) -> Result<(), String> {
        let event = Event {
            t,
            src: self.id,
            kind,
        };
        let line = serde_json::to_string(&event).map_err(|e| e.to_string())?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(|e| format!("stdout is gone ({e}); the runner must have exited"))
    }

    /// `t + remaining`: conservative, as `remaining` is read after `t`.
    fn valid_until(&self, t: u64, held: &Held) -> u64 {
        t + u64::try_from(held.remaining().as_nanos()).unwrap_or(u64::MAX / 2)
    }

    fn token(&self) -> String {
        self.held.last().map(Held::token).unwrap_or_default()
    }

    /// How much longer the current section is certainly held (zero without one).
    pub(super) fn remaining(&self) -> Duration {
        self.held.last().map_or(Duration::ZERO, Held::remaining)
    }

    /// Takes what `spec` asks for, abandoning whatever is still held (it expires at its TTL;
    /// scripts never do this).
    pub(super) async fn acquire(
        &mut self,
        ttl_ms: u64,
        wait_ms: u64,
        spec: &LockSpec,
    ) -> Result<bool, String> {
        self.held.clear();
        self.enter(ttl_ms, wait_ms, spec).await
    }

    /// Takes what `spec` asks for within the current section (a nested reentrant hold), or as
    /// the first section.
    pub(super) async fn enter(
        &mut self,
        ttl_ms: u64,
        wait_ms: u64,
        spec: &LockSpec,
    ) -> Result<bool, String> {
        self.last_read = None;
        let op = self.op();
        let section = asked(&self.lock_name, spec, &self.owner);
        self.emit(EventKind::AcquireInvoke {
            op,
            ttl_ms,
            section: section.clone(),
        })?;
        let opts =
            LockOptions::new(Duration::from_millis(ttl_ms)).wait(Duration::from_millis(wait_ms));
        match Held::take(&self.client, &self.lock_name, spec, &self.owner, opts).await {
            Ok(held) => {
                let t = self.clock.now();
                self.emit_at(
                    t,
                    EventKind::AcquireOk {
                        op,
                        token: held.token(),
                        fence: held.fence(),
                        valid_until: self.valid_until(t, &held),
                        section: held.section(&section),
                    },
                )?;
                self.held.push(held);
                Ok(true)
            }
            Err(e) => {
                self.emit(EventKind::AcquireFail {
                    op,
                    error: e.code().to_owned(),
                })?;
                Ok(false)
            }
        }
    }

    async fn resource(&mut self) -> Result<MultiplexedConnection, redis::RedisError> {
        if let Some(conn) = &self.conn {
            return Ok(conn.clone());
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(2)));
        let conn = self
            .resource
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        self.conn = Some(conn.clone());
        Ok(conn)
    }

    /// Reads the counter.
    pub(super) async fn read(&mut self) -> Result<bool, String> {
        self.read_key(RESOURCE_KEY, None).await
    }

    /// Reads the counter `key`, guarded by lock `name`'s fencing token (none: the section's).
    pub(super) async fn read_key(&mut self, key: &str, name: Option<&str>) -> Result<bool, String> {
        let token = self.token();
        let value: Result<Option<i64>, _> = match self.resource().await {
            Ok(mut conn) => redis::cmd("GET").arg(key).query_async(&mut conn).await,
            Err(e) => Err(e),
        };
        match value {
            Ok(v) => {
                let value = v.unwrap_or(0);
                self.last_read = Some(Reading {
                    key: key.to_owned(),
                    name: name.map(str::to_owned),
                    value,
                });
                self.emit(EventKind::Read { token, value })?;
                Ok(true)
            }
            Err(e) => {
                self.conn = None;
                self.last_read = None;
                self.emit(EventKind::Note {
                    text: format!("read failed: {e}"),
                })?;
                Ok(false)
            }
        }
    }

    /// Checks the lock, pauses, writes the value read plus one. Returns whether the resource
    /// accepted the write.
    pub(super) async fn write(&mut self, pause_ms: u64) -> Result<(bool, String), String> {
        let Some(held) = self.held.last() else {
            return Ok((false, "no lock".to_owned()));
        };
        let Some(read) = self.last_read.take() else {
            return Ok((false, "nothing read under this lock".to_owned()));
        };
        let fence = match &read.name {
            Some(name) => held.fence_of(name),
            None => Some(held.fence()),
        };
        let Some(fence) = fence else {
            return Ok((false, "no fencing token for the name read".to_owned()));
        };
        let token = held.token();
        if held.remaining() <= MARGIN {
            self.emit(EventKind::WriteSkipped { token })?;
            return Ok((false, "lock expired before the write".to_owned()));
        }
        self.emit(EventKind::WriteReady {
            token: token.clone(),
        })?;
        if pause_ms > 0 {
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        }
        let value = read.value + 1;
        let op = self.op();
        self.emit(EventKind::WriteInvoke {
            op,
            token,
            fence,
            value,
            fenced: self.fencing,
            key: (read.key != RESOURCE_KEY).then(|| read.key.clone()),
        })?;
        let result = match self.resource().await {
            Ok(mut conn) if self.fencing => {
                fenced_set(&mut conn, &read.key, value.to_string().as_bytes(), fence)
                    .await
                    .map_err(|e| e.to_string())
            }
            Ok(mut conn) => redis::cmd("SET")
                .arg(&read.key)
                .arg(value)
                .query_async::<()>(&mut conn)
                .await
                .map(|()| FencedWrite::Written)
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        // The value is now written (or not): the next write needs a new read (taken above).
        match result {
            Ok(FencedWrite::Written) => {
                self.emit(EventKind::WriteOk { op })?;
                Ok((true, format!("wrote {value}")))
            }
            Ok(FencedWrite::Refused { highest }) => {
                self.emit(EventKind::WriteRejected { op, highest })?;
                Ok((false, format!("refused: fence {fence} < {highest}")))
            }
            Err(detail) => {
                self.conn = None;
                self.emit(EventKind::WriteFail {
                    op,
                    detail: detail.clone(),
                })?;
                Ok((false, detail))
            }
        }
    }

    /// Extends the current section.
    pub(super) async fn extend(&mut self, ttl_ms: u64) -> Result<bool, String> {
        let op = self.op();
        let Some(mut held) = self.held.pop() else {
            return Ok(false);
        };
        self.emit(EventKind::ExtendInvoke {
            op,
            token: held.token(),
        })?;
        let result = held.extend(Duration::from_millis(ttl_ms)).await;
        let ok = match result {
            Ok(()) => {
                let t = self.clock.now();
                self.emit_at(
                    t,
                    EventKind::ExtendOk {
                        op,
                        valid_until: self.valid_until(t, &held),
                    },
                )?;
                true
            }
            Err(e) => {
                self.emit(EventKind::ExtendFail {
                    op,
                    error: e.code().to_owned(),
                })?;
                false
            }
        };
        self.held.push(held);
        Ok(ok)
    }

    /// Releases the current section (the innermost nested hold first).
    pub(super) async fn release(&mut self) -> Result<bool, String> {
        let Some(held) = self.held.pop() else {
            return Ok(false);
        };
        self.last_read = None;
        let op = self.op();
        self.emit(EventKind::ReleaseInvoke {
            op,
            token: held.token(),
        })?;
        match held.release().await {
            Ok(()) => {
                self.emit(EventKind::ReleaseOk { op })?;
                Ok(true)
            }
            Err(e) => {
                self.emit(EventKind::ReleaseFail {
                    op,
                    error: e.code().to_owned(),
                })?;
                Ok(false)
            }
        }
    }
}
