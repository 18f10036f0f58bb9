//! Scripted scenarios: the workers moved step by step into one precise situation (a holder on
//! a bare majority whose master restarts empty, a lock that expires early on one master, a
//! holder frozen before its write).

use std::time::Duration;

use super::{SCRIPT_TTL, SECOND_HOLDER_WORKS, names};
use crate::ctx::{Ctx, Step};
use crate::faults::Action;
use crate::history::{EventKind, PhaseKind};
use crate::scenario::Scenario;
use crate::worker::Command;

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
pub(super) async fn empty_restart(s: &Scenario, ctx: &mut Ctx, newcomer: bool) -> Step {
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

/// Worker 1 holds a bare majority; its key expires early on one of those masters; worker 2
/// takes the lock and writes; worker 1 writes last.
pub(super) async fn clock_jump(ctx: &mut Ctx) -> Step {
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

/// Worker 1 checks its lock and is frozen before its write for longer than its TTL; worker 2
/// takes the lock and writes; worker 1 wakes and writes.
pub(super) async fn paused_holder(ctx: &mut Ctx) -> Step {
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
