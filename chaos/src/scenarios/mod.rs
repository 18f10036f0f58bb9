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
//!
//! The load loop is in `load`, the scripted situations in `scripted`, and the scenarios of the
//! other lock kinds (read-write, semaphore, multi-lock, reentrant) in `kinds`.

mod kinds;
mod load;
mod scripted;

use std::time::Duration;

use crate::checker::{Expectation, Want};
use crate::ctx::{Ctx, Step};
use crate::history::PhaseKind;
use crate::scenario::{Kind, LoadFault, Scenario};
use crate::settings::Size;
use crate::worker::Mix;

/// TTL of the load loops' locks.
const LOAD_TTL: Duration = Duration::from_millis(1500);
/// TTL of the scripted holders' locks: long enough to cover several docker operations.
const SCRIPT_TTL: Duration = Duration::from_secs(8);
/// How long a scripted second holder works under the lock before it lets go.
const SECOND_HOLDER_WORKS: Duration = Duration::from_millis(300);
/// The quarantine of scenarios that want one: the max TTL plus a margin.
const QUARANTINE: Duration = Duration::from_secs(10);

/// Least acquire success after a heal. Every master is back, and acquires wait up to 2 s, far
/// longer than a turn at the lock takes: a failure there means the fault left something
/// behind that held the workers up (connections that stayed silent, waiters out of line).
const MIN_HEAL_SUCCESS: f64 = 0.9;

/// What a load scenario expects: no definite violation, no lost update, no stale write, the
/// lock available as far as a quorum allows. Possible violations (a holder whose write landed
/// after its validity, when the machine stalled it between its check and its write) are the
/// client's timing, not the lock's: reported, not judged.
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
        mix: Mix::Mutex,
        unsafe_semaphores: false,
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
        mix: Mix::Mutex,
        unsafe_semaphores: false,
    };
    // Scenarios where masters restart empty may lose fencing counters: fence order is not
    // promised there (it needs durable masters), so it is reported, not judged.
    let mut all = vec![
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
    ];
    all.extend(kinds::kinds());
    all
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
            load::load(ctx, size, fault, &s.mix).await?;
            ctx.final_acquire_as(1, Duration::from_secs(5), kinds::final_spec(&s.mix))
                .await
        }
        Kind::EmptyRestart => scripted::empty_restart(s, ctx, false).await,
        Kind::EmptyRestartNewcomer => scripted::empty_restart(s, ctx, true).await,
        Kind::DurableRestart => {
            // The deployment is first used with all five up, so the two masters the bare
            // majority leaves out come back marked (AOF keeps the marker) and are not
            // quarantined as newcomers: what is tested is that durable restarts need none.
            ctx.phase("set-up: every master marked", PhaseKind::Other);
            if !ctx.acquire(1, SCRIPT_TTL, Duration::from_secs(3)).await? {
                return Err("worker 1 could not take the lock with every master up".to_owned());
            }
            ctx.release(1).await?;
            scripted::empty_restart(s, ctx, false).await?;
            load::load(ctx, size, LoadFault::AofRestart, &Mix::Mutex).await?;
            ctx.final_acquire(1, Duration::from_secs(5)).await
        }
        Kind::ClockJump => scripted::clock_jump(ctx).await,
        Kind::PausedHolder => scripted::paused_holder(ctx).await,
        Kind::SemaphorePartitions => kinds::semaphore_partitions(ctx).await,
    }
}

/// `count` masters picked by the scenario's generator, in the order it picked them.
fn names(ctx: &mut Ctx, count: usize) -> Vec<String> {
    let masters = ctx.masters();
    ctx.rng
        .permutation(masters.len())
        .into_iter()
        .take(count)
        .map(|i| masters[i].clone())
        .collect()
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
