//! The scenarios: what each does, and what the checker must find.
//!
//! Two shapes:
//!
//! - **Load** scenarios: every worker loops acquire / read / write / release while the runner
//!   injects one kind of fault on seeded nodes, round after round, and heals it. The history
//!   must be clean and the lock must stay available as far as a quorum allows.
//! - **Scripted** scenarios: the runner moves the workers step by step to build one precise
//!   situation, the one in which a known weakness bites. Those without the defence are
//!   *positive controls*: the checker must find the violation, or the suite fails (a checker
//!   that finds nothing where there is something proves nothing where there is nothing).

use std::time::Duration;

use serde::Serialize;

use crate::checker::{Expectation, Want};
use crate::history::{EventKind, PhaseKind};
use crate::runner::{Action, Ctx, Step, millis};
use crate::worker::{Command, LoadParams};

/// How big a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Size {
    /// Fault rounds per load scenario.
    pub(crate) rounds: u32,
    /// Workers in load scenarios.
    pub(crate) load_workers: u32,
    /// Load before the first fault.
    pub(crate) baseline: Duration,
    /// How long each fault lasts.
    pub(crate) fault_for: Duration,
    /// Load after each heal.
    pub(crate) heal_for: Duration,
}

impl Size {
    /// The CI schedule: the whole suite in a few minutes on two cores.
    pub(crate) const CI: Size = Size {
        rounds: 2,
        load_workers: 3,
        baseline: Duration::from_millis(1500),
        fault_for: Duration::from_millis(2500),
        heal_for: Duration::from_millis(1500),
    };

    /// The full schedule: more rounds, more workers, longer faults.
    pub(crate) const FULL: Size = Size {
        rounds: 5,
        load_workers: 5,
        baseline: Duration::from_secs(3),
        fault_for: Duration::from_secs(4),
        heal_for: Duration::from_secs(3),
    };
}

/// TTL of the load loops' locks.
const LOAD_TTL: Duration = Duration::from_millis(1500);
/// TTL of the scripted holders' locks: long enough to cover several docker operations.
const SCRIPT_TTL: Duration = Duration::from_secs(8);
/// How long a scripted second holder works under the lock before it lets go.
const SECOND_HOLDER_WORKS: Duration = Duration::from_millis(300);
/// The quarantine of scenarios that want one: the max TTL plus a margin.
const QUARANTINE: Duration = Duration::from_secs(10);

/// Which fault a load scenario injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LoadFault {
    /// Kill two masters; start them again (empty) after more than a TTL.
    KillMinority,
    /// Kill three masters: no quorum; start them again after more than a TTL.
    KillMajority,
    /// Freeze two masters (docker pause).
    PauseMinority,
    /// Cut two masters off the network.
    PartitionMinority,
    /// Rolling kills of two masters, each started again (empty) only after a TTL.
    DelayedRestart,
    /// Restart (SIGKILL) a majority of durable masters one after the other, at once.
    AofRestart,
}

/// What a scenario does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// Workers loop while faults come and go.
    Load(LoadFault),
    /// A holder with a bare majority; one of its masters restarts at once; another worker
    /// tries to take the lock.
    EmptyRestart,
    /// As [`Kind::EmptyRestart`], then a worker started only after the restart (a new
    /// client, which never saw the masters before) tries too.
    EmptyRestartNewcomer,
    /// As [`Kind::EmptyRestart`] with durable masters, then a load with immediate restarts.
    DurableRestart,
    /// A holder with a bare majority; the lock expires early on one of its masters; another
    /// worker takes the lock; the first one writes.
    ClockJump,
    /// A holder frozen between its validity check and its write for longer than its TTL.
    PausedHolder,
}

/// One scenario.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Scenario {
    /// Its name on the command line.
    pub(crate) name: &'static str,
    /// One line on what it does.
    pub(crate) about: &'static str,
    /// What it does.
    pub(crate) kind: Kind,
    /// Masters run AOF with `appendfsync always`.
    pub(crate) durable: bool,
    /// Workers write with `fenced_set`.
    pub(crate) fencing: bool,
    /// The clients' restart quarantine.
    pub(crate) quarantine: Duration,
    /// The clients' max TTL.
    pub(crate) max_ttl: Duration,
    /// What the checker must find.
    pub(crate) expect: Expectation,
}

impl Scenario {
    /// The masters' extra arguments (`REDIS_ARGS`).
    pub(crate) fn redis_args(&self) -> &'static str {
        if self.durable {
            "--appendonly yes --appendfsync always"
        } else {
            r#"--save "" --appendonly no"#
        }
    }

    /// How many workers it runs.
    pub(crate) fn workers(&self, size: &Size) -> u32 {
        match self.kind {
            Kind::Load(_) | Kind::DurableRestart => size.load_workers.max(3),
            _ => 3,
        }
    }
}

/// What a load scenario expects: no definite violation, no lost update, no stale write, the
/// lock available as far as a quorum allows. Possible violations (a holder whose write landed
/// after its validity, when the machine stalled it between its check and its write) are the
/// client's timing, not the lock's: reported, not judged.
/// Least acquire success after a heal. Every master is back, and acquires wait up to 2 s, far
/// longer than a turn at the lock takes: a failure there means the fault left something
/// behind that held the workers up (connections that stayed silent, waiters out of line).
const MIN_HEAL_SUCCESS: f64 = 0.9;

fn load_expect(min_fault_success: Option<f64>, fence_order: Want) -> Expectation {
    Expectation {
        possible: Want::Allowed,
        fence_order,
        min_fault_success,
        min_heal_success: Some(MIN_HEAL_SUCCESS),
        max_recovery_ms: Some(5000.0),
        min_acquired: 20,
        ..Expectation::clean()
    }
}

/// Every scenario, in the order a full run takes them.
pub(crate) fn all() -> Vec<Scenario> {
    let load = |name, about, fault, durable, fencing, expect| Scenario {
        name,
        about,
        kind: Kind::Load(fault),
        durable,
        fencing,
        quarantine: Duration::ZERO,
        max_ttl: LOAD_TTL,
        expect,
    };
    let script = |name, about, kind, durable, fencing, quarantine, expect| Scenario {
        name,
        about,
        kind,
        durable,
        fencing,
        quarantine,
        max_ttl: SCRIPT_TTL,
        expect,
    };
    // Scenarios where masters restart empty may lose fencing counters: fence order is not
    // promised there (it needs durable masters), so it is reported, not judged.
    vec![
        load(
            "kill-minority",
            "kill 2 of 5 masters under load, start them again (empty) after a TTL",
            LoadFault::KillMinority,
            false,
            false,
            load_expect(Some(0.5), Want::Allowed),
        ),
        load(
            "kill-majority",
            "kill 3 of 5 masters under load: no acquire may succeed; recovers once they are back",
            LoadFault::KillMajority,
            false,
            true,
            load_expect(None, Want::Allowed),
        ),
        load(
            "pause-minority",
            "freeze 2 of 5 masters (docker pause) under load",
            LoadFault::PauseMinority,
            false,
            false,
            load_expect(Some(0.5), Want::Forbidden),
        ),
        load(
            "partition-minority",
            "cut 2 of 5 masters off the network (docker network disconnect) under load",
            LoadFault::PartitionMinority,
            false,
            false,
            load_expect(Some(0.5), Want::Forbidden),
        ),
        script(
            "restart-empty-no-quarantine",
            "positive control: a holder has a bare majority, one of its masters restarts empty at once, quarantine off: a second holder must be caught",
            Kind::EmptyRestart,
            false,
            false,
            Duration::ZERO,
            Expectation {
                definite: Want::Required,
                possible: Want::Allowed,
                lost_updates: Want::Allowed,
                stale_accepted: Want::Allowed,
                fence_order: Want::Allowed,
                ..Expectation::clean()
            },
        ),
        script(
            "restart-empty-quarantine",
            "the same restart with a quarantine of 10 s (max TTL 8 s); the two masters that were down when the deployment was first used come back unmarked after the others were marked: the second worker must not get the lock",
            Kind::EmptyRestart,
            false,
            false,
            QUARANTINE,
            Expectation {
                fence_order: Want::Allowed,
                ..Expectation::clean()
            },
        ),
        script(
            "restart-empty-newcomer",
            "the same restart with quarantine, then a client started only after it (it never saw the masters) tries the lock too: it must reach the same verdict and not get it",
            Kind::EmptyRestartNewcomer,
            false,
            false,
            QUARANTINE,
            Expectation {
                fence_order: Want::Allowed,
                ..Expectation::clean()
            },
        ),
        load(
            "delayed-restart",
            "rolling kills of 2 masters under load, each started again (empty) only after a TTL, quarantine off",
            LoadFault::DelayedRestart,
            false,
            true,
            load_expect(Some(0.5), Want::Allowed),
        ),
        script(
            "aof-restart",
            "the bare-majority restart on AOF-always masters (quarantine 10 s, which durable masters skip), then immediate restarts of a majority under load",
            Kind::DurableRestart,
            true,
            true,
            QUARANTINE,
            Expectation {
                min_fault_success: Some(0.5),
                min_heal_success: Some(MIN_HEAL_SUCCESS),
                max_recovery_ms: Some(5000.0),
                min_acquired: 20,
                ..Expectation::clean()
            },
        ),
        script(
            "clock-jump-fencing",
            "a holder's lock expires early on one of its bare majority (PEXPIRE, as after a clock jump); a second holder gets it; the first holder's write must be refused",
            Kind::ClockJump,
            false,
            true,
            Duration::ZERO,
            Expectation {
                definite: Want::Allowed,
                possible: Want::Allowed,
                fence_order: Want::Forbidden,
                ..Expectation::clean()
            }
            .with_rejected(),
        ),
        script(
            "clock-jump-no-fencing",
            "positive control: the same without fencing: the stale write and the lost update must be caught",
            Kind::ClockJump,
            false,
            false,
            Duration::ZERO,
            Expectation {
                definite: Want::Required,
                possible: Want::Allowed,
                lost_updates: Want::Required,
                stale_accepted: Want::Required,
                fence_order: Want::Forbidden,
                ..Expectation::clean()
            },
        ),
        script(
            "paused-holder-fencing",
            "a holder is frozen (SIGSTOP) between its check and its write past its TTL; another takes the lock and writes; the late write must be refused",
            Kind::PausedHolder,
            false,
            true,
            Duration::ZERO,
            Expectation {
                possible: Want::Required,
                ..Expectation::clean()
            }
            .with_rejected(),
        ),
        script(
            "paused-holder-no-fencing",
            "positive control: the same without fencing: the stale write and the lost update must be caught",
            Kind::PausedHolder,
            false,
            false,
            Duration::ZERO,
            Expectation {
                possible: Want::Required,
                lost_updates: Want::Required,
                stale_accepted: Want::Required,
                ..Expectation::clean()
            },
        ),
    ]
}

impl Expectation {
    fn with_rejected(mut self) -> Self {
        self.rejected = Want::Required;
        self
    }
}

/// Runs a scenario's steps.
pub(crate) async fn body(s: &Scenario, ctx: &mut Ctx, size: &Size) -> Step {
    match s.kind {
        Kind::Load(fault) => {
            load(ctx, size, fault).await?;
            ctx.final_acquire(1, Duration::from_secs(5)).await
        }
        Kind::EmptyRestart => empty_restart(s, ctx, false).await,
        Kind::EmptyRestartNewcomer => empty_restart(s, ctx, true).await,
        Kind::DurableRestart => {
            // The deployment is first used with all five up, so the two masters the bare
            // majority leaves out come back marked (AOF keeps the marker) and are not
            // quarantined as newcomers: what is tested is that durable restarts need none.
            ctx.phase("set-up: every master marked", PhaseKind::Other);
            if !ctx.acquire(1, SCRIPT_TTL, Duration::from_secs(3)).await? {
                return Err("worker 1 could not take the lock with every master up".to_owned());
            }
            ctx.release(1).await?;
            empty_restart(s, ctx, false).await?;
            load(ctx, size, LoadFault::AofRestart).await?;
            ctx.final_acquire(1, Duration::from_secs(5)).await
        }
        Kind::ClockJump => clock_jump(ctx).await,
        Kind::PausedHolder => paused_holder(ctx).await,
    }
}

fn load_params(size: &Size, seed: u64) -> LoadParams {
    let rounds = u64::from(size.rounds);
    let span = size.baseline + (size.fault_for * 3 + size.heal_for) * size.rounds;
    LoadParams {
        ttl_ms: millis(LOAD_TTL),
        wait_ms: 2000,
        hold_ms: (5, 30),
        think_ms: (5, 40),
        extend_percent: 30,
        // Bounds in case the runner never says stop.
        max_iterations: 2000 * rounds.max(1),
        max_ms: millis(span) + 60_000,
        seed,
    }
}

fn names(ctx: &mut Ctx, count: usize) -> Vec<String> {
    let masters = ctx.masters();
    ctx.rng
        .permutation(masters.len())
        .into_iter()
        .take(count)
        .map(|i| masters[i].clone())
        .collect()
}

/// At least a TTL and a second: a master down this long has forgotten nothing that matters.
fn past_ttl(size: &Size) -> Duration {
    size.fault_for.max(LOAD_TTL + Duration::from_secs(1))
}

async fn load(ctx: &mut Ctx, size: &Size, fault: LoadFault) -> Step {
    let seed = ctx.rng.next_u64();
    ctx.phase("baseline", PhaseKind::Normal);
    ctx.start_load(load_params(size, seed)).await?;
    tokio::time::sleep(size.baseline).await;
    for round in 1..=size.rounds {
        let nodes = names(ctx, 3);
        let (two, three) = (&nodes[..2], &nodes[..3]);
        let list = |n: &[String]| n.join(",");
        match fault {
            LoadFault::KillMinority => {
                ctx.fault(Action::Kill, two).await?;
                ctx.phase(format!("{round}: {} killed", list(two)), PhaseKind::Fault);
                tokio::time::sleep(past_ttl(size)).await;
                ctx.fault(Action::Start, two).await?;
            }
            LoadFault::KillMajority => {
                ctx.fault(Action::Kill, three).await?;
                ctx.phase(
                    format!("{round}: {} killed", list(three)),
                    PhaseKind::Unavailable,
                );
                tokio::time::sleep(past_ttl(size)).await;
                ctx.fault(Action::Start, three).await?;
            }
            LoadFault::PauseMinority => {
                ctx.fault(Action::Pause, two).await?;
                ctx.phase(format!("{round}: {} paused", list(two)), PhaseKind::Fault);
                tokio::time::sleep(size.fault_for).await;
                ctx.fault(Action::Unpause, two).await?;
            }
            LoadFault::PartitionMinority => {
                ctx.fault(Action::Disconnect, two).await?;
                ctx.phase(
                    format!("{round}: {} partitioned", list(two)),
                    PhaseKind::Fault,
                );
                tokio::time::sleep(size.fault_for).await;
                ctx.fault(Action::Connect, two).await?;
            }
            LoadFault::DelayedRestart => {
                let (a, b) = (&nodes[..1], &nodes[1..2]);
                ctx.fault(Action::Kill, a).await?;
                ctx.phase(format!("{round}: {} killed", list(a)), PhaseKind::Fault);
                tokio::time::sleep(Duration::from_millis(500)).await;
                // Now holders get bare majorities on the other three.
                ctx.fault(Action::Kill, b).await?;
                ctx.phase(format!("{round}: {} killed", list(two)), PhaseKind::Fault);
                tokio::time::sleep(past_ttl(size)).await;
                ctx.fault(Action::Start, a).await?;
                ctx.phase(
                    format!("{round}: {} back after a TTL", list(a)),
                    PhaseKind::Fault,
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
                ctx.fault(Action::Start, b).await?;
            }
            LoadFault::AofRestart => {
                // A majority, one after the other, each at once: durable masters keep their
                // locks and, not being quarantined, vote again as soon as they are up.
                for (i, n) in three.iter().enumerate() {
                    let one = std::slice::from_ref(n);
                    ctx.fault(Action::Restart, one).await?;
                    ctx.phase(
                        format!("{round}: {} restarted ({} of 3)", n, i + 1),
                        PhaseKind::Fault,
                    );
                    tokio::time::sleep(Duration::from_millis(400)).await;
                }
            }
        }
        ctx.phase(format!("{round}: healed"), PhaseKind::Heal);
        tokio::time::sleep(size.heal_for).await;
    }
    ctx.stop_load().await
}

/// Kills two masters, lets worker 1 take the lock on the other three (a bare majority),
/// reads and writes once, and starts the two again. Returns the three holding masters.
async fn bare_majority(ctx: &mut Ctx) -> Step<Vec<String>> {
    let nodes = names(ctx, 5);
    let (holding, down) = (nodes[..3].to_vec(), nodes[3..].to_vec());
    ctx.phase("set-up: bare majority", PhaseKind::Other);
    ctx.fault(Action::Kill, &down).await?;
    if !ctx.acquire(1, SCRIPT_TTL, Duration::from_secs(3)).await? {
        return Err("worker 1 could not take the lock on a bare majority".to_owned());
    }
    ctx.note(format!("worker 1 holds the lock on {}", holding.join(",")));
    ctx.read(1).await?;
    ctx.write(1).await?;
    ctx.fault(Action::Start, &down).await?;
    Ok(holding)
}

/// The holder's master restarts at once; worker 2 tries the lock, and with `newcomer` a worker
/// started only now tries it as well. The two masters that were down when worker 1 took the
/// lock (the deployment's first use) come back unmarked after the three others were marked.
async fn empty_restart(s: &Scenario, ctx: &mut Ctx, newcomer: bool) -> Step {
    let holding = bare_majority(ctx).await?;
    let restarted = &holding[2..3];
    ctx.fault(Action::Restart, restarted).await?;
    ctx.phase("second worker tries the lock", PhaseKind::Other);
    let second = ctx.acquire(2, SCRIPT_TTL, Duration::from_secs(1)).await?;
    ctx.note(format!(
        "worker 2 {} the lock",
        if second { "got" } else { "did not get" }
    ));
    if second {
        ctx.read(2).await?;
        ctx.write(2).await?;
        // It works a while under the lock, as holders do.
        tokio::time::sleep(SECOND_HOLDER_WORKS).await;
        ctx.release(2).await?;
    }
    if newcomer {
        // A client that never met the masters must reach the same verdict: the quarantine is
        // kept on the masters, not in the clients that saw the restart.
        let id = ctx.start_worker().await?;
        ctx.phase("a new client tries the lock", PhaseKind::Other);
        let got = ctx.acquire(id, SCRIPT_TTL, Duration::from_secs(1)).await?;
        ctx.note(format!(
            "worker {id}, started after the restart, {} the lock",
            if got { "got" } else { "did not get" }
        ));
        if got {
            ctx.read(id).await?;
            ctx.write(id).await?;
            tokio::time::sleep(SECOND_HOLDER_WORKS).await;
            ctx.release(id).await?;
        }
    }
    ctx.release(1).await?;
    if !s.durable {
        // A quarantined master votes again when its quarantine ends.
        ctx.final_acquire(3, s.quarantine + Duration::from_secs(5))
            .await?;
    }
    Ok(())
}

async fn clock_jump(ctx: &mut Ctx) -> Step {
    let holding = bare_majority(ctx).await?;
    // Worker 1 reads now and writes last, as a holder that is slow but within its validity.
    ctx.read(1).await?;
    ctx.fault(Action::Expire, &holding[2..3]).await?;
    ctx.phase("second worker takes the lock", PhaseKind::Other);
    if !ctx.acquire(2, SCRIPT_TTL, Duration::from_secs(2)).await? {
        return Err(
            "worker 2 could not take the lock after it expired early on one master".to_owned(),
        );
    }
    ctx.read(2).await?;
    if !ctx.write(2).await? {
        return Err("worker 2's write was not accepted".to_owned());
    }
    tokio::time::sleep(SECOND_HOLDER_WORKS).await;
    ctx.phase("first holder writes", PhaseKind::Other);
    let accepted = ctx.write(1).await?;
    ctx.note(format!(
        "worker 1's late write was {}",
        if accepted { "accepted" } else { "refused" }
    ));
    ctx.release(2).await?;
    ctx.release(1).await?;
    ctx.final_acquire(3, Duration::from_secs(5)).await
}

async fn paused_holder(ctx: &mut Ctx) -> Step {
    let ttl = Duration::from_secs(2);
    ctx.phase("set-up: holder", PhaseKind::Other);
    if !ctx.acquire(1, ttl, Duration::from_secs(3)).await? {
        return Err("worker 1 could not take the lock".to_owned());
    }
    ctx.read(1).await?;
    let writes_before = ctx.count_events(1, |k| matches!(k, EventKind::WriteInvoke { .. }));
    // Worker 1 checks its lock, then pauses 1.5 s before writing: it is frozen in that gap.
    let write = ctx
        .send(1, |n| Command::Write {
            id: n,
            pause_ms: 1500,
        })
        .await?;
    ctx.wait_for(1, Duration::from_secs(10), |k| {
        matches!(k, EventKind::WriteReady { .. })
    })
    .await?;
    ctx.signal_worker(1, true).await?;
    let is_write = |k: &EventKind| matches!(k, EventKind::WriteInvoke { .. });
    if ctx.count_events(1, is_write) > writes_before {
        return Err("worker 1 wrote before it could be frozen".to_owned());
    }
    ctx.phase("holder frozen past its TTL", PhaseKind::Other);
    tokio::time::sleep(ttl + Duration::from_secs(1)).await;
    if !ctx
        .acquire(2, Duration::from_secs(5), Duration::from_secs(3))
        .await?
    {
        return Err("worker 2 could not take the lock after worker 1's expired".to_owned());
    }
    ctx.read(2).await?;
    if !ctx.write(2).await? {
        return Err("worker 2's write was not accepted".to_owned());
    }
    ctx.signal_worker(1, false).await?;
    ctx.phase("frozen holder wakes and writes", PhaseKind::Other);
    let accepted = ctx.wait_done(1, write, Duration::from_secs(10)).await?;
    ctx.note(format!(
        "worker 1's late write was {}",
        if accepted { "accepted" } else { "refused" }
    ));
    ctx.release(2).await?;
    ctx.release(1).await?;
    ctx.final_acquire(3, Duration::from_secs(5)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_controls_expect_violations() {
        let all = all();
        let mut names: Vec<&str> = all.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len());
        for s in &all {
            assert_eq!(
                s.expect.is_positive_control(),
                s.name.contains("no-"),
                "{}",
                s.name
            );
            // A quarantine shorter than the max TTL would not cover a forgotten lock.
            assert!(
                s.quarantine.is_zero() || s.quarantine >= s.max_ttl,
                "{}",
                s.name
            );
        }
    }
}
