//! A worker's operations on the lock and on the resource (acquire, read, write, extend,
//! release, and the load loop that repeats them), each recorded as an invocation and an outcome
//! on stdout.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use redquorum::fencing::{FencedWrite, fenced_set};
use redquorum::{Client, Lock, LockOptions};

use super::{LoadParams, RESOURCE_KEY, WorkerArgs};
use crate::history::{Clock, Event, EventKind, WorkerId};
use crate::rng::SplitMix;

/// A holder does not start a step with less validity left than this.
const MARGIN: Duration = Duration::from_millis(10);

/// A worker's client, its lock and what it read under it.
pub(super) struct Worker {
    id: WorkerId,
    clock: Clock,
    client: Client,
    resource: redis::Client,
    conn: Option<MultiplexedConnection>,
    fencing: bool,
    lock_name: String,
    next_op: u64,
    lock: Option<Lock>,
    /// The counter as read under the current lock.
    last_read: Option<i64>,
    stop: Arc<AtomicBool>,
}

impl Worker {
    /// A worker as `args` set it up, with no lock yet.
    pub(super) fn new(
        args: &WorkerArgs,
        client: Client,
        resource: redis::Client,
        stop: Arc<AtomicBool>,
    ) -> Self {
        Worker {
            id: args.id,
            clock: Clock::new(args.epoch_ns),
            client,
            resource,
            conn: None,
            fencing: args.fencing,
            lock_name: args.lock.clone(),
            next_op: 0,
            lock: None,
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
    fn valid_until(&self, t: u64, lock: &Lock) -> u64 {
        t + u64::try_from(lock.remaining().as_nanos()).unwrap_or(u64::MAX / 2)
    }

    fn token(&self) -> String {
        self.lock
            .as_ref()
            .map(|l| l.token().to_owned())
            .unwrap_or_default()
    }

    pub(super) async fn acquire(&mut self, ttl_ms: u64, wait_ms: u64) -> Result<bool, String> {
        // A lock still in hand is abandoned (it expires at its TTL); scripts never do this.
        self.lock = None;
        self.last_read = None;
        let op = self.op();
        self.emit(EventKind::AcquireInvoke { op, ttl_ms })?;
        let opts =
            LockOptions::new(Duration::from_millis(ttl_ms)).wait(Duration::from_millis(wait_ms));
        match self.client.acquire(&self.lock_name, &opts).await {
            Ok(lock) => {
                let t = self.clock.now();
                self.emit_at(
                    t,
                    EventKind::AcquireOk {
                        op,
                        token: lock.token().to_owned(),
                        fence: lock.fence(),
                        valid_until: self.valid_until(t, &lock),
                    },
                )?;
                self.lock = Some(lock);
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

    pub(super) async fn read(&mut self) -> Result<bool, String> {
        let token = self.token();
        let value: Result<Option<i64>, _> = match self.resource().await {
            Ok(mut conn) => {
                redis::cmd("GET")
                    .arg(RESOURCE_KEY)
                    .query_async(&mut conn)
                    .await
            }
            Err(e) => Err(e),
        };
        match value {
            Ok(v) => {
                let value = v.unwrap_or(0);
                self.last_read = Some(value);
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
        let Some(lock) = &self.lock else {
            return Ok((false, "no lock".to_owned()));
        };
        let Some(read) = self.last_read else {
            return Ok((false, "nothing read under this lock".to_owned()));
        };
        let (token, fence) = (lock.token().to_owned(), lock.fence());
        if lock.remaining() <= MARGIN {
            self.emit(EventKind::WriteSkipped { token })?;
            return Ok((false, "lock expired before the write".to_owned()));
        }
        self.emit(EventKind::WriteReady {
            token: token.clone(),
        })?;
        if pause_ms > 0 {
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        }
        let value = read + 1;
        let op = self.op();
        self.emit(EventKind::WriteInvoke {
            op,
            token,
            fence,
            value,
            fenced: self.fencing,
        })?;
        let result = match self.resource().await {
            Ok(mut conn) if self.fencing => {
                fenced_set(&mut conn, RESOURCE_KEY, value.to_string().as_bytes(), fence)
                    .await
                    .map_err(|e| e.to_string())
            }
            Ok(mut conn) => redis::cmd("SET")
                .arg(RESOURCE_KEY)
                .arg(value)
                .query_async::<()>(&mut conn)
                .await
                .map(|()| FencedWrite::Written)
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        // The value is now written (or not): the next write needs a new read.
        self.last_read = None;
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

    pub(super) async fn extend(&mut self, ttl_ms: u64) -> Result<bool, String> {
        let op = self.op();
        let Some(mut lock) = self.lock.take() else {
            return Ok(false);
        };
        self.emit(EventKind::ExtendInvoke {
            op,
            token: lock.token().to_owned(),
        })?;
        let result = lock.extend(Duration::from_millis(ttl_ms)).await;
        let ok = match result {
            Ok(()) => {
                let t = self.clock.now();
                self.emit_at(
                    t,
                    EventKind::ExtendOk {
                        op,
                        valid_until: self.valid_until(t, &lock),
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
        self.lock = Some(lock);
        Ok(ok)
    }

    pub(super) async fn release(&mut self) -> Result<bool, String> {
        let Some(lock) = self.lock.take() else {
            return Ok(false);
        };
        self.last_read = None;
        let op = self.op();
        self.emit(EventKind::ReleaseInvoke {
            op,
            token: lock.token().to_owned(),
        })?;
        match lock.release().await {
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

    pub(super) async fn load(&mut self, p: &LoadParams) -> Result<u64, String> {
        let mut rng = SplitMix::new(p.seed ^ u64::from(self.id).wrapping_mul(0x9E37_79B9));
        let until = self.clock.now() + p.max_ms * 1_000_000;
        let mut n = 0;
        while n < p.max_iterations && !self.stop.load(Ordering::SeqCst) && self.clock.now() < until
        {
            n += 1;
            if self.acquire(p.ttl_ms, p.wait_ms).await? {
                if self.read().await? {
                    let hold = rng.range(p.hold_ms.0, p.hold_ms.1);
                    tokio::time::sleep(Duration::from_millis(hold)).await;
                    self.write(0).await?;
                }
                if rng.range(1, 100) <= p.extend_percent
                    && self.lock.as_ref().is_some_and(|l| l.remaining() > MARGIN)
                    && self.extend(p.ttl_ms).await?
                    && self.read().await?
                {
                    self.write(0).await?;
                }
                self.release().await?;
            }
            let think = rng.range(p.think_ms.0, p.think_ms.1);
            tokio::time::sleep(Duration::from_millis(think)).await;
        }
        Ok(n)
    }
}
