//! A worker: one OS process (`redquorum-chaos worker`) that takes the lock with the library and
//! works on the protected resource, on the runner's orders.
//!
//! Workers are separate processes so that the runner can freeze one (SIGSTOP) in the middle of
//! its critical section, as a GC pause or a stopped VM would. Commands arrive as JSON lines on
//! stdin; every invocation and outcome goes out as a JSON [`Event`] line on stdout, stamped
//! with the shared monotonic clock, and each command ends with a `done` event.
//!
//! The critical section is a read-modify-write of a counter on the resource: read it, then
//! write the value read plus one, with `fenced_set` (fencing on) or a plain `SET` (off). Before
//! each write the holder checks that its lock is still valid, as a careful holder would; a
//! process frozen between that check and its write is exactly what fencing is for.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use redquorum::fencing::{FencedWrite, fenced_set};
use redquorum::{Client, Lock, LockOptions};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use crate::history::{Clock, Event, EventKind, WorkerId};
use crate::rng::SplitMix;

/// The key of the protected counter on the resource Redis.
pub(crate) const RESOURCE_KEY: &str = "chaos:counter";

/// The lock every worker competes for.
pub(crate) const LOCK_NAME: &str = "chaos";

/// A holder does not start a step with less validity left than this.
const MARGIN: Duration = Duration::from_millis(10);

/// How a worker is set up (its command line).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WorkerArgs {
    /// This worker's number (1, 2, ...).
    #[arg(long)]
    pub(crate) id: WorkerId,
    /// The run's epoch on CLOCK_MONOTONIC, in ns.
    #[arg(long)]
    pub(crate) epoch_ns: u64,
    /// The masters, comma-separated redis:// URLs.
    #[arg(long, value_delimiter = ',', required = true)]
    pub(crate) nodes: Vec<String>,
    /// The protected resource's redis:// URL.
    #[arg(long)]
    pub(crate) resource: String,
    /// The lock's name.
    #[arg(long)]
    pub(crate) lock: String,
    /// Write with fenced_set (true) or a plain SET (false).
    #[arg(long, action = clap::ArgAction::Set)]
    pub(crate) fencing: bool,
    /// The client's restart quarantine, in ms (0: off).
    #[arg(long)]
    pub(crate) quarantine_ms: u64,
    /// The client's max TTL, in ms.
    #[arg(long)]
    pub(crate) max_ttl_ms: u64,
    /// The client's per-node deadline, in ms.
    #[arg(long)]
    pub(crate) node_timeout_ms: u64,
}

/// An order from the runner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub(crate) enum Command {
    /// Take the lock (retrying for `wait_ms`) and keep it.
    Acquire {
        /// Command number, echoed in `done`.
        id: u64,
        /// TTL in ms.
        ttl_ms: u64,
        /// How long to keep trying, in ms.
        wait_ms: u64,
    },
    /// Read the counter.
    Read {
        /// Command number.
        id: u64,
    },
    /// Check the lock, pause `pause_ms`, then write the value last read plus one.
    Write {
        /// Command number.
        id: u64,
        /// Pause between the check and the write.
        pause_ms: u64,
    },
    /// Extend the lock.
    Extend {
        /// Command number.
        id: u64,
        /// New TTL in ms.
        ttl_ms: u64,
    },
    /// Release the lock.
    Release {
        /// Command number.
        id: u64,
    },
    /// Loop acquire / read / write / (extend, read, write) / release until `stop`.
    Load {
        /// Command number.
        id: u64,
        /// The loop's settings.
        params: LoadParams,
    },
    /// End a `load` after its current iteration.
    Stop,
    /// Exit the process.
    Exit,
}

/// Settings of a load loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LoadParams {
    /// TTL of each acquisition, ms.
    pub(crate) ttl_ms: u64,
    /// How long each acquire keeps trying, ms.
    pub(crate) wait_ms: u64,
    /// Time spent between the read and the write, ms (uniform in the range).
    pub(crate) hold_ms: (u64, u64),
    /// Pause between iterations, ms (uniform in the range).
    pub(crate) think_ms: (u64, u64),
    /// Chance in percent that a holder extends its lock and does a second read-write.
    pub(crate) extend_percent: u64,
    /// Bound on iterations.
    pub(crate) max_iterations: u64,
    /// Bound on the loop's duration, ms.
    pub(crate) max_ms: u64,
    /// Seed of the loop's jitter.
    pub(crate) seed: u64,
}

/// Runs a worker until `exit` or the end of stdin.
///
/// # Errors
///
/// When the client cannot be built or stdout is gone (the runner died).
pub(crate) async fn run(args: WorkerArgs) -> Result<(), String> {
    init_logs(Clock::new(args.epoch_ns));
    let client = Client::builder()
        .nodes(args.nodes.iter().cloned())
        .quarantine(Duration::from_millis(args.quarantine_ms))
        .max_ttl(Duration::from_millis(args.max_ttl_ms))
        .node_timeout(Duration::from_millis(args.node_timeout_ms))
        .build()
        .map_err(|e| format!("cannot build the client: {e}"))?;
    let resource =
        redis::Client::open(args.resource.as_str()).map_err(|e| format!("resource URL: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(read_commands(tx, stop.clone()));
    let mut worker = Worker {
        id: args.id,
        clock: Clock::new(args.epoch_ns),
        client,
        resource,
        conn: None,
        fencing: args.fencing,
        lock_name: args.lock,
        next_op: 0,
        lock: None,
        last_read: None,
        stop,
    };
    while let Some(command) = rx.recv().await {
        let (id, ok, detail) = match command {
            Command::Acquire {
                id,
                ttl_ms,
                wait_ms,
            } => {
                let ok = worker.acquire(ttl_ms, wait_ms).await?;
                (id, ok, String::new())
            }
            Command::Read { id } => (id, worker.read().await?, String::new()),
            Command::Write { id, pause_ms } => {
                let (ok, detail) = worker.write(pause_ms).await?;
                (id, ok, detail)
            }
            Command::Extend { id, ttl_ms } => (id, worker.extend(ttl_ms).await?, String::new()),
            Command::Release { id } => (id, worker.release().await?, String::new()),
            Command::Load { id, params } => {
                let n = worker.load(&params).await?;
                (id, true, format!("{n} iterations"))
            }
            Command::Stop => continue,
            Command::Exit => break,
        };
        worker.emit(EventKind::Done {
            cmd: id,
            ok,
            detail,
        })?;
    }
    Ok(())
}

/// The library's logs go to stderr (the runner keeps them in `worker-N.log`), stamped with
/// the run's clock so that they line up with the history. `CHAOS_WORKER_LOG` sets the filter;
/// by default every node's answer is logged (`redquorum=debug`), which is what a violation
/// needs to be explained.
fn init_logs(clock: Clock) {
    struct RunClock(Clock);
    impl tracing_subscriber::fmt::time::FormatTime for RunClock {
        fn format_time(
            &self,
            w: &mut tracing_subscriber::fmt::format::Writer<'_>,
        ) -> std::fmt::Result {
            write!(w, "{:.6}", self.0.now() as f64 / 1e9)
        }
    }
    let filter = std::env::var("CHAOS_WORKER_LOG").unwrap_or_else(|_| "redquorum=debug".to_owned());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_timer(RunClock(clock))
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Forwards stdin's commands; `stop` is handled here so that it reaches a running loop. The
/// end of stdin (the runner is gone) is an `exit`.
async fn read_commands(tx: mpsc::UnboundedSender<Command>, stop: Arc<AtomicBool>) {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        let command = match lines.next_line().await {
            Ok(Some(line)) if line.trim().is_empty() => continue,
            Ok(Some(line)) => match serde_json::from_str::<Command>(&line) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("worker: ignoring a bad command ({e}): {line}");
                    continue;
                }
            },
            Ok(None) | Err(_) => Command::Exit,
        };
        match command {
            Command::Stop => stop.store(true, Ordering::SeqCst),
            Command::Load { .. } => stop.store(false, Ordering::SeqCst),
            _ => {}
        }
        let exit = command == Command::Exit;
        if tx.send(command).is_err() || exit {
            return;
        }
    }
}

struct Worker {
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
    fn op(&mut self) -> u64 {
        self.next_op += 1;
        self.next_op
    }

    fn emit(&self, kind: EventKind) -> Result<(), String> {
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

    async fn acquire(&mut self, ttl_ms: u64, wait_ms: u64) -> Result<bool, String> {
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

    async fn read(&mut self) -> Result<bool, String> {
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
    async fn write(&mut self, pause_ms: u64) -> Result<(bool, String), String> {
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

    async fn extend(&mut self, ttl_ms: u64) -> Result<bool, String> {
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

    async fn release(&mut self) -> Result<bool, String> {
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

    async fn load(&mut self, p: &LoadParams) -> Result<u64, String> {
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
