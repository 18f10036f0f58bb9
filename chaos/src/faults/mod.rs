//! Faults: what the runner does to the masters (kill, start, restart, pause, partition, early
//! expiry of the lock key) and to worker processes (freeze, thaw), and how each is confirmed to
//! have taken effect: container state from `docker inspect`, PING, a sentinel key written before
//! a restart and read after it, a new `run_id`, `EXISTS` after an expiry, `/proc/PID/stat`.
//!
//! Injection is here; the confirmation of a fault on the masters is in `confirm`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::docker::{Project, redis_query};
use crate::rng::SplitMix;
use crate::worker::LOCK_NAME;

mod confirm;

/// How long a confirmation may take before the fault counts as not having taken effect.
const CONFIRM_WITHIN: Duration = Duration::from_secs(15);

/// Per-probe deadline of the runner's own Redis calls.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_millis(300);

/// Container actions (and worker signals) the runner injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// `compose kill`: SIGKILL, the container exits.
    Kill,
    /// `compose start`: a stopped master starts again (empty unless it persists).
    Start,
    /// `compose restart -t 0`: killed and started again at once.
    Restart,
    /// `compose pause`: frozen (cgroup freezer); connections stay open, nothing answers.
    Pause,
    /// `compose unpause`.
    Unpause,
    /// `docker network disconnect`: cut off from the network.
    Disconnect,
    /// `docker network connect` with its old address.
    Connect,
    /// The lock key expires at once on the target (as after a forward clock jump).
    Expire,
}

impl Action {
    /// The action's name in the history.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Action::Kill => "kill",
            Action::Start => "start",
            Action::Restart => "restart",
            Action::Pause => "pause",
            Action::Unpause => "unpause",
            Action::Disconnect => "disconnect",
            Action::Connect => "connect",
            Action::Expire => "expire",
        }
    }
}

/// The masters of one compose project, as faults see them: how to reach them, and what is
/// needed to tell whether a fault took effect.
pub(crate) struct Faults {
    project: Project,
    /// The project's network, which a partition cuts a master off.
    network: String,
    /// Per master: a value written before a restart, to tell whether data survived it.
    sentinels: HashMap<String, String>,
    /// The masters persist every write: their data must survive a restart.
    durable: bool,
}

impl Faults {
    /// Faults on `project`'s masters; `durable` when they persist every write.
    pub(crate) fn new(project: Project, durable: bool) -> Self {
        Faults {
            project,
            network: String::new(),
            sentinels: HashMap::new(),
            durable,
        }
    }

    /// Looks up the project's network, once it is up.
    pub(crate) async fn find_network(&mut self) -> Result<(), String> {
        self.network = self.project.network().await?;
        Ok(())
    }

    /// Injects `action` on the masters `targets`. Sentinel values are drawn from `rng`, the
    /// scenario's generator, so that a seed reproduces them too.
    pub(crate) async fn inject(
        &mut self,
        action: Action,
        targets: &[String],
        rng: &mut SplitMix,
    ) -> Result<(), String> {
        let names: Vec<&str> = targets.iter().map(String::as_str).collect();
        let compose = |verb: &'static str, extra: &'static [&'static str]| {
            let mut args = vec![verb];
            args.extend(extra);
            args.extend(names.iter().copied());
            args
        };
        match action {
            Action::Kill => {
                self.set_sentinels(targets, rng).await;
                self.project.compose(&compose("kill", &[])).await?;
            }
            Action::Restart => {
                self.set_sentinels(targets, rng).await;
                for t in targets {
                    let run_id = self.run_id(t).await.unwrap_or_default();
                    self.sentinels.insert(format!("{t}:run_id"), run_id);
                }
                self.project
                    .compose(&compose("restart", &["-t", "0"]))
                    .await?;
            }
            Action::Start => {
                self.project.compose(&compose("start", &[])).await?;
            }
            Action::Pause => {
                self.project.compose(&compose("pause", &[])).await?;
            }
            Action::Unpause => {
                self.project.compose(&compose("unpause", &[])).await?;
            }
            Action::Disconnect => {
                for t in targets {
                    let id = self.project.container(t).await?;
                    let network = self.network.clone();
                    self.project
                        .docker(&["network", "disconnect", &network, &id])
                        .await?;
                }
            }
            Action::Connect => {
                for t in targets {
                    let id = self.project.container(t).await?;
                    let ip = self
                        .project
                        .ips
                        .get(t.as_str())
                        .map(ToString::to_string)
                        .unwrap_or_default();
                    let network = self.network.clone();
                    self.project
                        .docker(&[
                            "network", "connect", "--ip", &ip, "--alias", t, &network, &id,
                        ])
                        .await?;
                }
            }
            Action::Expire => {
                let key = format!("redquorum:lock:{LOCK_NAME}");
                for t in targets {
                    let n: i64 = redis_query(
                        &self.project.url(t),
                        redis::cmd("PEXPIRE").arg(&key).arg(1),
                        PROBE_TIMEOUT,
                    )
                    .await?;
                    if n != 1 {
                        return Err(format!("{t} did not have {key} (PEXPIRE returned {n})"));
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes a fresh sentinel key on each target (best effort: a paused or unreachable
    /// master gets none).
    async fn set_sentinels(&mut self, targets: &[String], rng: &mut SplitMix) {
        for t in targets {
            let value = format!("{:016x}", rng.next_u64());
            let ok = redis_query::<()>(
                &self.project.url(t),
                redis::cmd("SET").arg("chaos:sentinel").arg(&value),
                PROBE_TIMEOUT,
            )
            .await
            .is_ok();
            if ok {
                self.sentinels.insert(t.clone(), value);
            } else {
                self.sentinels.remove(t);
            }
        }
    }
}

/// Freezes (SIGSTOP, `stop`) or thaws (SIGCONT) process `pid`, and confirms it from /proc;
/// returns what was seen.
pub(crate) async fn signal_process(pid: u32, stop: bool) -> Result<String, String> {
    let signal = if stop {
        Signal::SIGSTOP
    } else {
        Signal::SIGCONT
    };
    let sent = kill(Pid::from_raw(i32::try_from(pid).unwrap_or(0)), signal);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut state = '?';
    while sent.is_ok() && Instant::now() < deadline {
        state = process_state(pid).unwrap_or('?');
        if (state == 'T') == stop {
            return Ok(format!("pid {pid} state {state}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(format!("pid {pid} state {state} ({sent:?})"))
}

/// Thaws process `pid` without waiting for it, as a scenario's end does before its workers
/// are told to exit.
pub(crate) fn thaw(pid: u32) {
    let _ = kill(
        Pid::from_raw(i32::try_from(pid).unwrap_or(0)),
        Signal::SIGCONT,
    );
}

/// The state letter of a process in /proc (`T` when stopped).
fn process_state(pid: u32) -> Option<char> {
    state_of(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The state field of a /proc/PID/stat line. The command name is in parentheses and may hold
/// spaces and parentheses: the state follows the last ')'.
fn state_of(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_states_are_read() {
        assert_eq!(state_of("4242 (redquorum-chaos) T 1 4242"), Some('T'));
        assert_eq!(state_of("4242 (a) b (c)) S 1 4242"), Some('S'));
        assert!(matches!(process_state(std::process::id()), Some(c) if c != 'T'));
    }
}
