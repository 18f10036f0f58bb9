//! `redquorum run`: hold a lock of any kind, renewed in the background, while a command runs.

use std::io::IsTerminal;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redquorum::config::limits;
use redquorum::{Client, Error, LockGuard, LockKind, LockOptions, MultiGuard, Owner, RenewOptions};
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use super::{
    EXIT_CANNOT_EXECUTE, EXIT_LOCK_LOST, EXIT_NOT_FOUND, EXIT_SOFTWARE, EXIT_TEMPFAIL,
    EXIT_UNAVAILABLE, exit_code,
};

/// Which locks `run` holds, and of what kind.
#[derive(Debug, clap::Args)]
pub(super) struct RunLocks {
    /// The lock's name; given several times, the run holds every name, taken all or nothing
    /// (in the names' byte order, so that runs over overlapping names cannot deadlock).
    #[arg(long = "lock", value_name = "NAME", required = true)]
    names: Vec<String>,
    /// Take a reader's share of a read-write lock: readers run together, never beside a
    /// writer.
    #[arg(long, conflicts_with_all = ["write", "permits"])]
    read: bool,
    /// Take the writer's share of a read-write lock: one writer, and no reader beside it.
    #[arg(long, conflicts_with = "permits")]
    write: bool,
    /// Take one of P permits of a semaphore: at most P commands hold the lock at once (every
    /// run of the name must give the same P).
    #[arg(long, value_name = "P",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(limits::MAX_PERMITS)))]
    permits: Option<u32>,
    /// Who holds the reentrant lock a plain run takes: runs with the same owner re-enter each
    /// other's locks (default: REDQUORUM_OWNER, which every run passes on to its command, else
    /// a new random id).
    // A capability: never echo it in --help.
    #[arg(
        long,
        env = "REDQUORUM_OWNER",
        value_name = "ID",
        hide_env_values = true
    )]
    owner: Option<String>,
}

/// What a run holds: its names, their kind, and the owner it passes on to its command.
#[derive(Debug)]
pub(super) struct LockSet {
    names: Vec<String>,
    kind: LockKind,
    owner: Owner,
}

impl RunLocks {
    /// The locks to take, or why the arguments do not say.
    pub(super) fn lock_set(&self) -> Result<LockSet, String> {
        let owner = match &self.owner {
            Some(id) => Owner::from_id(id).map_err(|e| {
                format!("--owner (or REDQUORUM_OWNER) is not a valid owner id: {e}")
            })?,
            None => Owner::random().map_err(|e| e.to_string())?,
        };
        let kind = if self.read {
            LockKind::Read
        } else if self.write {
            LockKind::Write
        } else if let Some(permits) = self.permits {
            LockKind::semaphore(permits)
        } else {
            LockKind::Reentrant(owner.clone())
        };
        Ok(LockSet {
            names: self.names.clone(),
            kind,
            owner,
        })
    }
}

pub(super) async fn run(
    client: &Client,
    set: &LockSet,
    ttl: Duration,
    wait: Duration,
    kill_after: Duration,
    command: &[String],
) -> u8 {
    let name = set.names.join(", ");
    let name = name.as_str();
    let opts = LockOptions::new(ttl).wait(wait).kind(set.kind.clone());
    let held = match &set.names[..] {
        [one] => client
            .acquire_guard(one, &opts, RenewOptions::default())
            .await
            .map(Held::One),
        names => {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            client
                .acquire_all_guard(&names, &opts, RenewOptions::default())
                .await
                .map(Held::Many)
        }
    };
    let guard = match held {
        Ok(held) => held,
        Err(e @ Error::QuorumUnavailable { .. }) => {
            tracing::error!(
                "lock {name:?} cannot be had: no quorum of masters can grant it; the command was not run: {e}"
            );
            return EXIT_UNAVAILABLE;
        }
        Err(e @ (Error::Contended { .. } | Error::Timeout { .. })) => {
            tracing::error!(
                "lock {name:?} not obtained within {}; the command was not run: {e}",
                humantime::format_duration(wait)
            );
            return EXIT_TEMPFAIL;
        }
        Err(e) => {
            tracing::error!("{e}");
            return exit_code(&e);
        }
    };
    tracing::info!(
        lock = name,
        kind = set.kind.as_str(),
        "acquired; running {:?}",
        command
    );

    let (program, args) = match command.split_first() {
        Some(split) => split,
        None => return EXIT_SOFTWARE,
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(guard.env())
        .env("REDQUORUM_OWNER", set.owner.id());
    // In a terminal the command must stay in the foreground process group to read the
    // terminal; elsewhere (cron, CI) it gets a group of its own, so that signals reach all of
    // its processes.
    let own_group = !std::io::stdin().is_terminal();
    if own_group {
        cmd.process_group(0);
    }
    // Listening before the command starts: a SIGTERM that came between its start and our
    // listening would end this process by default and leave the command running on its own,
    // with the lock held until its TTL.
    let (mut interrupts, mut terminations) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(i), Ok(t)) => (i, t),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!("cannot listen for signals; the command was not run: {e}");
            release(guard, name).await;
            return EXIT_SOFTWARE;
        }
    };
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            tracing::error!("cannot run {program:?}: {e}");
            release(guard, name).await;
            return if e.kind() == std::io::ErrorKind::NotFound {
                EXIT_NOT_FOUND
            } else {
                EXIT_CANNOT_EXECUTE
            };
        }
    };
    let target = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(|pid| if own_group { -pid } else { pid });

    let code = loop {
        tokio::select! {
            status = child.wait() => break match status {
                Ok(status) => status_code(status),
                Err(e) => {
                    tracing::error!("waiting for the command failed: {e}");
                    EXIT_SOFTWARE
                }
            },
            () = guard.lost() => {
                tracing::error!(lock = name, "the lock was lost while the command ran; terminating the command");
                terminate(&mut child, target, kill_after).await;
                break EXIT_LOCK_LOST;
            }
            _ = interrupts.recv() => forward(target, Signal::SIGINT),
            _ = terminations.recv() => forward(target, Signal::SIGTERM),
        }
    };
    release(guard, name).await;
    code
}

/// The lock a run holds: one name, or several taken all or nothing.
enum Held {
    One(LockGuard),
    Many(MultiGuard),
}

impl Held {
    /// What the command is told of the locks: with several, one line per lock in the order
    /// they were taken.
    fn env(&self) -> [(&'static str, String); 3] {
        let guards = match self {
            Held::One(guard) => std::slice::from_ref(guard),
            Held::Many(multi) => multi.guards(),
        };
        let lines = |f: &dyn Fn(&LockGuard) -> String| -> String {
            guards.iter().map(f).collect::<Vec<_>>().join("\n")
        };
        [
            ("REDQUORUM_LOCK", lines(&|g| g.name().to_owned())),
            ("REDQUORUM_TOKEN", lines(&|g| g.token().to_owned())),
            ("REDQUORUM_FENCE", lines(&|g| g.fence().to_string())),
        ]
    }

    /// Resolves when a lock is lost.
    async fn lost(&self) {
        match self {
            Held::One(guard) => guard.lost().await,
            Held::Many(multi) => multi.lost().await,
        }
    }

    async fn release(self) -> redquorum::Result<()> {
        match self {
            Held::One(guard) => guard.release().await,
            Held::Many(multi) => multi.release().await,
        }
    }
}

async fn release(guard: Held, name: &str) {
    match guard.release().await {
        Ok(()) => tracing::info!(lock = name, "released"),
        Err(e) => tracing::warn!(
            lock = name,
            "release failed; the lock expires at its TTL: {e}"
        ),
    }
}

/// Sends a signal to the command (its whole group when it has one); it may be gone already.
fn forward(target: Option<i32>, signal: Signal) {
    if let Some(pid) = target {
        if let Err(e) = kill(Pid::from_raw(pid), signal) {
            tracing::debug!("could not send {signal} to the command: {e}");
        }
    }
}

/// SIGTERM, then SIGKILL if the command is still running after `grace`.
async fn terminate(child: &mut Child, target: Option<i32>, grace: Duration) {
    forward(target, Signal::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        tracing::warn!(
            "the command ignored SIGTERM for {}; killing it",
            humantime::format_duration(grace)
        );
        forward(target, Signal::SIGKILL);
        let _ = child.wait().await;
    }
}

/// The shell's convention: the exit code, or 128 + the signal that killed the command.
fn status_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(EXIT_SOFTWARE),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(EXIT_SOFTWARE),
        (None, None) => EXIT_SOFTWARE,
    }
}
