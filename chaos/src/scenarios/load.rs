//! Load scenarios: every worker loops acquire / read / write / release while one kind of fault
//! comes and goes on seeded masters, round after round.

use std::time::Duration;

use super::{LOAD_TTL, names};
use crate::ctx::{Ctx, Step, millis};
use crate::faults::Action;
use crate::history::PhaseKind;
use crate::scenario::{LoadFault, RoundFault};
use crate::settings::Size;
use crate::worker::{LoadParams, Mix};

fn load_params(size: &Size, rounds: u32, seed: u64, mix: &Mix) -> LoadParams {
    let span = size.baseline + (size.fault_for * 3 + size.heal_for) * rounds;
    let rounds = u64::from(rounds);
    // Semaphore holders stay longer and come back sooner, so that the permits are often all
    // taken and someone is asking.
    let (hold_ms, think_ms) = match mix {
        Mix::Semaphore { .. } => ((20, 60), (0, 20)),
        _ => ((5, 30), (5, 40)),
    };
    LoadParams {
        ttl_ms: millis(LOAD_TTL),
        wait_ms: 2000,
        hold_ms,
        think_ms,
        extend_percent: 30,
        // Bounds in case the runner never says stop.
        max_iterations: 2000 * rounds.max(1),
        max_ms: millis(span) + 60_000,
        seed,
        mix: mix.clone(),
    }
}

/// At least a TTL and a second: a master down this long has forgotten nothing that matters.
fn past_ttl(size: &Size) -> Duration {
    size.fault_for.max(LOAD_TTL + Duration::from_secs(1))
}

/// Runs the load of `mix` with `fault` injected and healed each round, then stops it.
pub(super) async fn load(ctx: &mut Ctx, size: &Size, fault: LoadFault, mix: &Mix) -> Step {
    let seed = ctx.rng.next_u64();
    // A rotating schedule goes through each of its faults at least once.
    let rounds = match fault {
        LoadFault::Rotating { faults, .. } => size
            .rounds
            .max(u32::try_from(faults.len()).unwrap_or(u32::MAX)),
        _ => size.rounds,
    };
    ctx.phase("baseline", PhaseKind::Normal);
    ctx.start_load(load_params(size, rounds, seed, mix)).await?;
    tokio::time::sleep(size.baseline).await;
    for round in 1..=rounds {
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
            LoadFault::Rotating { masters, faults } => {
                let at = usize::try_from(round - 1).unwrap_or(0) % faults.len().max(1);
                let Some(&this) = faults.get(at) else {
                    return Err("a rotating schedule without faults".to_owned());
                };
                rotating(ctx, size, round, this, &nodes[..masters.min(3)]).await?;
            }
        }
        ctx.phase(format!("{round}: healed"), PhaseKind::Heal);
        tokio::time::sleep(size.heal_for).await;
    }
    ctx.stop_load().await
}

/// One round of a rotating schedule: `fault` on `some` masters (a restart: on the first).
async fn rotating(
    ctx: &mut Ctx,
    size: &Size,
    round: u32,
    fault: RoundFault,
    some: &[String],
) -> Step {
    let list = some.join(",");
    match fault {
        RoundFault::Kill => {
            ctx.fault(Action::Kill, some).await?;
            ctx.phase(format!("{round}: {list} killed"), PhaseKind::Fault);
            tokio::time::sleep(past_ttl(size)).await;
            ctx.fault(Action::Start, some).await?;
        }
        RoundFault::Pause => {
            ctx.fault(Action::Pause, some).await?;
            ctx.phase(format!("{round}: {list} paused"), PhaseKind::Fault);
            tokio::time::sleep(size.fault_for).await;
            ctx.fault(Action::Unpause, some).await?;
        }
        RoundFault::Partition => {
            ctx.fault(Action::Disconnect, some).await?;
            ctx.phase(format!("{round}: {list} partitioned"), PhaseKind::Fault);
            tokio::time::sleep(size.fault_for).await;
            ctx.fault(Action::Connect, some).await?;
        }
        RoundFault::Restart => {
            let one = &some[..some.len().min(1)];
            ctx.fault(Action::Restart, one).await?;
            ctx.phase(
                format!("{round}: {} restarted at once", one.join(",")),
                PhaseKind::Fault,
            );
            tokio::time::sleep(size.fault_for).await;
        }
    }
    Ok(())
}
