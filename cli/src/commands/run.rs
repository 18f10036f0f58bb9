//! `redquorum run`: hold a lock, renewed in the background, while a command runs.

use std::io::IsTerminal;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redquorum::{Client, Error, LockOptions, RenewOptions};
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use super::{
    EXIT_CANNOT_EXECUTE, EXIT_LOCK_LOST, EXIT_NOT_FOUND, EXIT_SOFTWARE, EXIT_TEMPFAIL,
    EXIT_UNAVAILABLE, exit_code,
};

pub(super) async fn run(
    client: &Client,
    name: &str,
    ttl: Duration,
    wait: Duration,
    kill_after: Duration,
    command: &[String],
) -> u8 {
    let guard = match client
        .acquire_guard(
            name,
            &LockOptions::new(ttl).wait(wait),
            RenewOptions::default(),
        )
        .await
    {
        Ok(guard) => guard,
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
    tracing::info!(lock = name, "acquired; running {:?}", command);

    let (program, args) = match command.split_first() {
        Some(split) => split,
        None => return EXIT_SOFTWARE,
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("REDQUORUM_LOCK", name)
        .env("REDQUORUM_TOKEN", guard.token())
        .env("REDQUORUM_FENCE", guard.fence().to_string());
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

    let watch = guard.watch();
    let code = loop {
        tokio::select! {
            status = child.wait() => break match status {
                Ok(status) => status_code(status),
                Err(e) => {
                    tracing::error!("waiting for the command failed: {e}");
                    EXIT_SOFTWARE
                }
            },
            () = watch.lost() => {
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

async fn release(guard: redquorum::LockGuard, name: &str) {
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
