//! Load scenarios: every worker loops acquire / read / write / release while one kind of fault
//! comes and goes on seeded masters, round after round.

use std::time::Duration;

use super::{LOAD_TTL, names};
use crate::ctx::{Ctx, Step, millis};
use crate::faults::Action;
use crate::history::PhaseKind;
use crate::scenario::LoadFault;
use crate::settings::Size;
use crate::worker::LoadParams;

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

/// At least a TTL and a second: a master down this long has forgotten nothing that matters.
fn past_ttl(size: &Size) -> Duration {
    size.fault_for.max(LOAD_TTL + Duration::from_secs(1))
}

/// Runs the load with `fault` injected and healed each round, then stops it.
pub(super) async fn load(ctx: &mut Ctx, size: &Size, fault: LoadFault) -> Step {
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
