//! `redquorum run`: hold a lock of any kind, renewed in the background, while a command runs.

pub(super) mod held;
pub(super) mod releases;

use std::future::poll_fn;
use std::process::ExitStatus;
use std::task::Poll;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, getpgrp, tcgetpgrp};
use redquorum::config::limits;
use redquorum::{Client, Error, LockKind, LockOptions, Owner, RenewOptions};
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use super::tools::{KIND_ENV, kind_name};
use super::{
    EXIT_CANNOT_EXECUTE, EXIT_LOCK_LOST, EXIT_NOT_FOUND, EXIT_SOFTWARE, EXIT_TEMPFAIL,
    EXIT_UNAVAILABLE, LogFormat, exit_code,
};
use held::{Held, release};
use releases::{RELEASES_ENV, Releases};

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

/// The signals that would end redquorum by default and leave its command running without the
/// lock: each is passed on to the command instead (as GNU `timeout` does), and redquorum
/// releases the lock once the command has exited. SIGKILL cannot be caught; for it the command
/// is given a parent-death signal (see [`command_under_parent`]).
const PASSED_ON: [Signal; 7] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGALRM,
];

/// Listeners for [`PASSED_ON`]: while they exist, those signals no longer end the process.
struct PassedOn(Vec<(Signal, tokio::signal::unix::Signal)>);

impl PassedOn {
    fn listen() -> std::io::Result<Self> {
        PASSED_ON
            .iter()
            .map(|&sig| Ok((sig, signal(SignalKind::from_raw(sig as i32))?)))
            .collect::<std::io::Result<_>>()
            .map(PassedOn)
    }

    /// The next signal received.
    async fn next(&mut self) -> Signal {
        poll_fn(|cx| {
            for (sig, listener) in &mut self.0 {
                if listener.poll_recv(cx).is_ready() {
                    return Poll::Ready(*sig);
                }
            }
            Poll::Pending
        })
        .await
    }
}

pub(super) async fn run(
    client: &Client,
    set: &LockSet,
    ttl: Duration,
    wait: Duration,
    kill_after: Duration,
    command: &[String],
    log_format: LogFormat,
) -> u8 {
    let name = set.names.join(", ");
    let name = name.as_str();
    let opts = LockOptions::new(ttl).wait(wait).kind(set.kind.clone());
    // Listening before the lock is taken: a signal that came after would end this process by
    // default and leave the lock held until its TTL; one that comes while the lock is waited
    // for gives up the wait.
    let mut signals = match PassedOn::listen() {
        Ok(signals) => signals,
        Err(e) => {
            tracing::error!("cannot listen for signals; the command was not run: {e}");
            return EXIT_SOFTWARE;
        }
    };
    let acquiring = async {
        match &set.names[..] {
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
        }
    };
    let held = tokio::select! {
        held = acquiring => held,
        signal = signals.next() => {
            // Dropped, the acquire gives back what it got.
            tracing::error!(lock = name, "{signal} before the lock was taken; the command was not run");
            return 128 + signal as u8;
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
    let releases = match Releases::create() {
        Ok(releases) => releases,
        Err(e) => {
            tracing::error!("cannot make the run's file of releases; the command was not run: {e}");
            release(guard, name).await;
            return EXIT_SOFTWARE;
        }
    };
    let mut cmd = command_under_parent(program, args, log_format);
    cmd.envs(guard.env())
        .env("REDQUORUM_OWNER", set.owner.id())
        .env(KIND_ENV, kind_name(&set.kind))
        .env(RELEASES_ENV, releases.path());
    // In the foreground of a terminal the command must stay in our process group, the
    // terminal's foreground group, to read and write the terminal; elsewhere (cron, CI, in
    // the background) it gets a group of its own, so that signals reach all of its processes.
    let own_group = !in_terminal_foreground();
    if own_group {
        cmd.process_group(0);
    }
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            // On Linux what failed to start may be the launcher (see `command_under_parent`).
            let started = cmd.as_std().get_program().to_owned();
            if started == program.as_str() {
                tracing::error!("cannot run {program:?}: {e}");
            } else {
                tracing::error!("cannot run {program:?} through {started:?}: {e}");
            }
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

    // The locks the command said it released itself, once the run has found one gone: their
    // loss is no loss, and only the others' is watched.
    let mut given_up: Vec<String> = Vec::new();
    let code = loop {
        tokio::select! {
            status = child.wait() => break match status {
                Ok(status) => status_code(status),
                Err(e) => {
                    tracing::error!("waiting for the command failed: {e}");
                    EXIT_SOFTWARE
                }
            },
            () = guard.lost_other_than(&given_up) => {
                let released = releases.released(&set.names);
                if guard.lost_names().iter().all(|lost| released.contains(lost)) {
                    for name in released.iter().filter(|name| !given_up.contains(name)) {
                        tracing::info!(lock = name.as_str(), "the command released the lock itself; it runs on without it");
                    }
                    given_up = released;
                    continue;
                }
                tracing::error!(lock = name, "the lock was lost while the command ran; terminating the command");
                terminate(&mut child, target, kill_after).await;
                break EXIT_LOCK_LOST;
            }
            signal = signals.next() => {
                // In the terminal's foreground group the command got Ctrl-C's SIGINT and
                // Ctrl-\'s SIGQUIT from the terminal itself, as redquorum did: passed on, it
                // would get them twice.
                let from_terminal = matches!(signal, Signal::SIGINT | Signal::SIGQUIT);
                if own_group || !from_terminal {
                    forward(target, signal);
                }
            }
        }
    };
    if given_up.is_empty() {
        release(guard, name).await;
    } else if let Err(e) = guard.release().await {
        // Those it did not release are still held (a multi-lock's other names), and released
        // here; the command's own are gone already.
        tracing::debug!(
            lock = name,
            "the rest of the release after the command's own: {e}"
        );
    }
    code
}

/// Whether this process is in the foreground process group of its controlling terminal.
/// Whether stdin is a terminal does not tell: with stdin redirected (`< /dev/null`) a command
/// put in a group of its own is in the terminal's background, and stops (SIGTTIN, SIGTTOU)
/// the moment it reads or writes the terminal, holding the lock.
fn in_terminal_foreground() -> bool {
    // Opening /dev/tty fails when there is no controlling terminal.
    std::fs::File::open("/dev/tty")
        .is_ok_and(|tty| tcgetpgrp(&tty).is_ok_and(|foreground| foreground == getpgrp()))
}

/// Sends a signal to the command (its whole group when it has one); it may be gone already.
/// A group of its own is then continued: a process stopped (by SIGSTOP, or by reading the
/// terminal from the background) acts on no signal but SIGKILL until it is continued, and
/// would go on holding the lock.
fn forward(target: Option<i32>, signal: Signal) {
    if let Some(pid) = target {
        if let Err(e) = kill(Pid::from_raw(pid), signal) {
            tracing::debug!("could not send {signal} to the command: {e}");
        }
        if pid < 0 && signal != Signal::SIGKILL {
            if let Err(e) = kill(Pid::from_raw(pid), Signal::SIGCONT) {
                tracing::debug!("could not continue the command: {e}");
            }
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

/// The first argument that makes the binary the launcher of a `run`'s command (see
/// [`command_under_parent`]) instead of the command-line interface.
#[cfg(target_os = "linux")]
pub(crate) const LAUNCHER: &str = "__redquorum-run-command";

/// A command that runs `program` with `args` and dies with this process.
///
/// On Linux the command is started through this binary again ([`LAUNCHER`], then [`launch`]),
/// which asks the kernel to SIGKILL it when its parent dies (`PR_SET_PDEATHSIG`) and then
/// executes the command in its own place, keeping that request. So if redquorum is killed
/// outright (SIGKILL, the OOM killer), the command goes with it instead of running on without
/// the lock, whose renewal died with redquorum. SIGKILL rather than SIGTERM: a command that
/// ignored SIGTERM would run on unprotected, and nobody is left to follow up. Asking for it in
/// the forked child before it executes the command would take `unsafe` (`pre_exec`), which the
/// workspace forbids. The kernel sends the signal when the *thread* that started the child
/// ends: the command is started from the future `main` blocks on, which runs on the main
/// thread, so that is when the process ends. It covers the command's own process: processes
/// it starts are signalled only if it passes its end on to them.
#[cfg(target_os = "linux")]
fn command_under_parent(program: &str, args: &[String], log_format: LogFormat) -> Command {
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg(LAUNCHER)
        .arg(log_format.as_arg())
        .arg(std::process::id().to_string())
        .arg(program)
        .args(args);
    cmd
}

#[cfg(not(target_os = "linux"))]
fn command_under_parent(program: &str, args: &[String], _log_format: LogFormat) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args);
    cmd
}

/// The launcher's part: `args` are what follows [`LAUNCHER`] (the log format, the parent's
/// pid, the command and its arguments). It only returns if the command could not be executed,
/// with the exit code `run` documents for that.
#[cfg(target_os = "linux")]
pub(crate) fn launch(mut args: impl Iterator<Item = std::ffi::OsString>) -> u8 {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStringExt;

    use clap::ValueEnum;
    use nix::errno::Errno;
    use nix::sys::prctl;
    use nix::unistd::{execvp, getppid};

    let format = args
        .next()
        .and_then(|f| LogFormat::from_str(f.to_str()?, false).ok())
        .unwrap_or(LogFormat::Human);
    super::init_tracing(format, "info");
    let parent = args.next().and_then(|p| p.to_str()?.parse::<i32>().ok());
    // An argument cannot hold a NUL byte: the kernel ends each one at the first.
    let argv: Vec<CString> = match args.map(|a| CString::new(a.into_vec())).collect() {
        Ok(argv) => argv,
        Err(e) => {
            tracing::error!("cannot run the command: {e}");
            return EXIT_CANNOT_EXECUTE;
        }
    };
    let Some(program) = argv.first() else {
        tracing::error!("{LAUNCHER} was given no command");
        return EXIT_SOFTWARE;
    };
    if let Err(e) = prctl::set_pdeathsig(Signal::SIGKILL) {
        tracing::error!("cannot tie the command to redquorum's life; the command was not run: {e}");
        return EXIT_SOFTWARE;
    }
    // redquorum may have died before the request was made, and the request would then never
    // fire: this process now has another parent.
    if parent != Some(getppid().as_raw()) {
        tracing::error!("redquorum ended before its command started; the command was not run");
        return EXIT_SOFTWARE;
    }
    let e = match execvp(program, &argv) {
        Err(e) => e,
        Ok(never) => match never {},
    };
    tracing::error!("cannot run {program:?}: {e}");
    if e == Errno::ENOENT {
        EXIT_NOT_FOUND
    } else {
        EXIT_CANNOT_EXECUTE
    }
}
