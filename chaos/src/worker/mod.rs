//! A worker: one OS process (`redquorum-chaos worker`) that takes the lock with the library and
//! works on the protected resource, on the runner's orders.
//!
//! Workers are separate processes so that the runner can freeze one (SIGSTOP) in the middle of
//! its critical section, as a GC pause or a stopped VM would. Commands arrive as JSON lines on
//! stdin; every invocation and outcome goes out as a JSON [`Event`](crate::history::Event)
//! line on stdout, stamped with the shared monotonic clock, and each command ends with a
//! `done` event.
//!
//! The critical section is a read-modify-write of a counter on the resource: read it, then
//! write the value read plus one, with `fenced_set` (fencing on) or a plain `SET` (off). Before
//! each write the holder checks that its lock is still valid, as a careful holder would; a
//! process frozen between that check and its write is exactly what fencing is for.
//!
//! Each critical section takes a lock of one kind (mutex, reentrant, read, write, semaphore)
//! or several names at once (a multi-lock); what it took is recorded with its acquisition
//! (`history::Section`). Readers and semaphore holders share the resource and only read it; a
//! multi-lock's holder writes each name's own counter with that name's fencing token.
//!
//! The commands are in `command`, what a section holds in `section`, the operations in
//! `operations` and the load loop in `load`.

mod command;
mod load;
mod operations;
mod section;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redquorum::{Client, Owner};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use crate::history::{Clock, EventKind, WorkerId};

pub(crate) use self::command::{Command, LoadParams, LockSpec, Mix};
use self::operations::Worker;

/// The key of the protected counter on the resource Redis.
pub(crate) const RESOURCE_KEY: &str = "chaos:counter";

/// The lock every worker competes for.
pub(crate) const LOCK_NAME: &str = "chaos";

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
    /// Semaphores on a bare majority (unsafe: the semaphore's positive control).
    #[arg(long)]
    pub(crate) unsafe_majority_semaphores: bool,
}

/// Runs a worker until `exit` or the end of stdin.
///
/// # Errors
///
/// When the client cannot be built or stdout is gone (the runner died).
pub(crate) async fn run(args: WorkerArgs) -> Result<(), String> {
    init_logs(Clock::new(args.epoch_ns));
    let mut builder = Client::builder()
        .nodes(args.nodes.iter().cloned())
        .quarantine(Duration::from_millis(args.quarantine_ms))
        .max_ttl(Duration::from_millis(args.max_ttl_ms))
        .node_timeout(Duration::from_millis(args.node_timeout_ms));
    if args.unsafe_majority_semaphores {
        builder = builder.unsafe_majority_semaphores();
    }
    let client = builder
        .build()
        .map_err(|e| format!("cannot build the client: {e}"))?;
    let owner = Owner::random().map_err(|e| format!("no owner id: {e}"))?;
    let resource =
        redis::Client::open(args.resource.as_str()).map_err(|e| format!("resource URL: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(read_commands(tx, stop.clone()));
    let mut worker = Worker::new(&args, client, resource, owner, stop);
    while let Some(command) = rx.recv().await {
        let (id, ok, detail) = match command {
            Command::Acquire {
                id,
                ttl_ms,
                wait_ms,
                lock,
            } => {
                let ok = worker.acquire(ttl_ms, wait_ms, &lock).await?;
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
                    tell!("worker: ignoring a bad command ({e}): {line}");
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
