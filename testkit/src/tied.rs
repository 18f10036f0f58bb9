//! Child processes tied to this process: they are killed when it ends, even by SIGKILL, which it
//! cannot catch to stop them itself.
//!
//! Linux sends a child its parent-death signal when the *thread* that started it ends, not the
//! process. Masters are started from whatever thread asks, a runtime's blocking pool among them,
//! whose threads end when idle and would take masters still in use with them. So every child is
//! started by one thread that lives as long as the process, asked over a channel.

use std::io;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::sync::mpsc::{self, Sender};

/// util-linux's `setpriv`: it sets the parent-death signal, then runs the program in its own
/// place, so the child's pid is the program's.
const SETPRIV: &str = "setpriv";

/// A command to start and where to send the child.
type Request = (Command, Sender<io::Result<Child>>);

/// A command for `program` that, started with [`spawn`], is killed when this process ends
/// (SIGKILL, which ends a paused process too). Where `setpriv` cannot run, or the lasting thread
/// cannot be had (the signal would then follow whichever thread asked), the command is
/// `program` itself, and the child outlives a killed parent as any child does.
pub(crate) fn command(program: &Path) -> Command {
    if spawner().is_some() && setpriv_works() {
        let mut command = Command::new(SETPRIV);
        command.args(["--pdeathsig", "KILL", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// Starts `command` from the thread that lives as long as the process (see the module's
/// comment), or from this one when that thread could not be had (then [`command`] did not tie
/// the child to a thread).
pub(crate) fn spawn(mut command: Command) -> io::Result<Child> {
    let Some(spawner) = spawner() else {
        return command.spawn();
    };
    let stopped = || io::Error::other("the thread that starts child processes stopped");
    let (reply, child) = mpsc::channel();
    // Not started here instead: a tied child would die with this thread.
    spawner.send((command, reply)).map_err(|_| stopped())?;
    child.recv().map_err(|_| stopped())?
}

fn setpriv_works() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        Command::new(SETPRIV)
            .args(["--pdeathsig", "KILL", "--", "true"])
            .output()
            .is_ok_and(|out| out.status.success())
    })
}

fn spawner() -> Option<&'static Sender<Request>> {
    static SPAWNER: OnceLock<Option<Sender<Request>>> = OnceLock::new();
    SPAWNER
        .get_or_init(|| {
            let (requests, incoming) = mpsc::channel::<Request>();
            std::thread::Builder::new()
                .name("child-spawner".to_owned())
                .spawn(move || {
                    // The sender is never dropped: the thread waits here until the process ends.
                    for (mut command, reply) in incoming {
                        let _ = reply.send(command.spawn());
                    }
                })
                .ok()
                .map(|_| requests)
        })
        .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_started_from_a_thread_that_ends_keeps_running() {
        // The case the one lasting thread is for: the asking thread ends at once.
        let mut child = std::thread::spawn(|| {
            let mut sleeper = command(Path::new("sleep"));
            sleeper.arg("30");
            let child = spawn(sleeper);
            // Long enough for `setpriv` to set the signal while this thread still runs.
            std::thread::sleep(std::time::Duration::from_millis(200));
            child
        })
        .join()
        .unwrap()
        .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child died with the thread that asked for it"
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
