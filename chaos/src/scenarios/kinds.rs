//! The scenarios of the lock kinds: read-write, semaphore, multi-lock and reentrant loads under
//! a different fault each round, and the semaphore's positive control (a bare-majority quorum
//! over-admits when partitions show each holder a different three of the five masters).

use std::time::{Duration, Instant};

use redquorum::config::defaults::CONNECT_TIMEOUT;

use super::{LOAD_TTL, MIN_HEAL_SUCCESS, SCRIPT_TTL, SECOND_HOLDER_WORKS, names};
use crate::checker::{Expectation, Want};
use crate::ctx::{Ctx, Step};
use crate::faults::Action;
use crate::history::PhaseKind;
use crate::scenario::{Kind, LoadFault, RoundFault, Scenario};
use crate::worker::{LockSpec, Mix};

/// The semaphores' permits.
const PERMITS: u32 = 2;

/// The names multi-lock sections pick from.
const MULTI_NAMES: [&str; 4] = ["chaos-a", "chaos-b", "chaos-c", "chaos-d"];

/// The quarantine of kinds scenarios whose masters restart empty: the max TTL and a margin.
const QUARANTINE: Duration = Duration::from_secs(2);

/// Least successful acquires of each kind the workers asked for.
const MIN_PER_KIND: u64 = 5;

/// What a kinds load expects: as a mutex load, fence order judged (masters that keep their
/// counters, or one clock for every client; see docs/safety.md), and every kind got through.
fn expect() -> Expectation {
    Expectation {
        possible: Want::Allowed,
        min_fault_success: Some(0.5),
        min_heal_success: Some(MIN_HEAL_SUCCESS),
        max_recovery_ms: Some(5000.0),
        min_acquired: 20,
        min_per_kind: MIN_PER_KIND,
        ..Expectation::clean()
    }
}

/// The kinds scenarios, in the order a full run takes them.
pub(super) fn kinds() -> Vec<Scenario> {
    let load = |name, about, masters, faults, durable, mix| Scenario {
        name,
        about,
        kind: Kind::Load(LoadFault::Rotating { masters, faults }),
        durable,
        fencing: true,
        quarantine: if durable { Duration::ZERO } else { QUARANTINE },
        max_ttl: LOAD_TTL,
        expect: expect(),
        mix,
        unsafe_semaphores: false,
    };
    vec![
        load(
            "rw-kill-pause-restart",
            "read-write lock under load (a writer 30% of the time), AOF masters: 2 killed and started again, 2 paused, 1 restarted at once; one writer at a time, no reader beside it, fences in order",
            2,
            &[RoundFault::Kill, RoundFault::Pause, RoundFault::Restart][..],
            true,
            Mix::ReadWrite { write_percent: 30 },
        ),
        load(
            "semaphore-one-down",
            "semaphore of 2 permits (quorum 4 of 5) under load, one master down at a time: killed (back empty, quarantined), cut off, restarted at once (quarantined); never more than 2 holders",
            1,
            &[RoundFault::Kill, RoundFault::Partition, RoundFault::Restart][..],
            false,
            Mix::Semaphore { permits: PERMITS },
        ),
        load(
            "multi-lock-faults",
            "2 or 3 of 4 names taken all or nothing (overlapping sets) under load, AOF masters: 2 cut off, 1 restarted at once, 2 killed; every name held, no overlap on any name, fences per name in order",
            2,
            &[RoundFault::Partition, RoundFault::Restart, RoundFault::Kill][..],
            true,
            Mix::Multi {
                names: MULTI_NAMES.iter().map(|n| (*n).to_owned()).collect(),
                min: 2,
                max: 3,
            },
        ),
        load(
            "reentrant-pause-restart",
            "reentrant locks held twice by their owners, and a plain mutex of the same name a third of the time, under load: 2 masters paused, 1 restarted at once (quarantined); owners nest, nobody else overlaps them",
            2,
            &[RoundFault::Pause, RoundFault::Restart][..],
            false,
            Mix::Reentrant {
                depth: 2,
                mutex_percent: 33,
            },
        ),
        Scenario {
            name: "semaphore-no-safe-quorum",
            about: "positive control: semaphores on a bare majority (unsafe_majority_semaphores); 3 workers take a 2-permit semaphore one after the other while partitions leave each a different 3 of the 5 masters: the over-admission must be caught",
            kind: Kind::SemaphorePartitions,
            durable: false,
            fencing: true,
            quarantine: Duration::ZERO,
            max_ttl: SCRIPT_TTL,
            expect: Expectation {
                over_admitted: Want::Required,
                possible: Want::Allowed,
                ..Expectation::clean()
            },
            mix: Mix::Semaphore { permits: PERMITS },
            unsafe_semaphores: true,
        },
    ]
}

/// What a load's final acquire takes: what its sections take (a multi-lock: every name).
pub(super) fn final_spec(mix: &Mix) -> LockSpec {
    match mix {
        Mix::Mutex => LockSpec::Mutex,
        Mix::ReadWrite { .. } => LockSpec::Write,
        Mix::Semaphore { permits } => LockSpec::Semaphore { permits: *permits },
        Mix::Reentrant { .. } => LockSpec::Reentrant,
        Mix::Multi { names, .. } => LockSpec::Multi {
            names: names.clone(),
        },
    }
}

/// Workers 1, 2 and 3 take a two-permit semaphore, each while partitions leave it a different
/// three masters: {a,b,c}, then {c,d,e}, then {a,b,d}. Each master then has at most two holders,
/// so a bare majority grants all three; the safe quorum (4 of 5) would have granted none.
pub(super) async fn semaphore_partitions(ctx: &mut Ctx) -> Step {
    let spec = LockSpec::Semaphore { permits: PERMITS };
    let n = names(ctx, 5);
    let set = |idx: &[usize]| idx.iter().map(|&i| n[i].clone()).collect::<Vec<_>>();
    let (ab, ce, de) = (set(&[0, 1]), set(&[2, 4]), set(&[3, 4]));
    // The deployment is first used with all five up, so that every master is marked (a
    // master cut off at the first use would come back unmarked and grant nothing). Worker 3
    // does it, as it acquires last: a worker that has connections to a master when it is cut
    // off leaves its request in them, and the master grants it once it is back, taking a
    // permit the script means for another holder.
    ctx.phase("set-up: every master marked", PhaseKind::Other);
    if !ctx
        .acquire_as(3, SCRIPT_TTL, Duration::from_secs(3), spec.clone())
        .await?
    {
        return Err("worker 3 could not take a permit with every master up".to_owned());
    }
    ctx.release(3).await?;
    ctx.phase("set-up: holders on different majorities", PhaseKind::Other);
    let steps: [(&[String], &[String], u32); 3] = [
        (&[][..], &de[..], 1),
        (&de[..], &ab[..], 2),
        (&ab[..], &ce[..], 3),
    ];
    // Workers 1 and 2 first meet the masters cut off in their step: their connects there wait
    // for the connect timeout (the client's default), and a SYN sent again once the masters
    // are back (the first after 1 s) would open the connection and deliver the request after
    // all. So a cut is healed only once those connects have given up.
    let mut heal_after = Instant::now();
    for (heal, cut, worker) in steps {
        if !heal.is_empty() {
            tokio::time::sleep_until(heal_after.into()).await;
            ctx.fault(Action::Connect, heal).await?;
        }
        ctx.fault(Action::Disconnect, cut).await?;
        heal_after = Instant::now() + CONNECT_TIMEOUT + Duration::from_millis(500);
        let got = ctx
            .acquire_as(worker, SCRIPT_TTL, Duration::from_secs(1), spec.clone())
            .await?;
        ctx.note(format!(
            "worker {worker} {} a permit with {} cut off",
            if got { "got" } else { "did not get" },
            cut.join(",")
        ));
        if !got {
            return Err(format!(
                "worker {worker} could not take a permit on a bare majority ({} cut off)",
                cut.join(",")
            ));
        }
        ctx.read(worker).await?;
    }
    ctx.fault(Action::Connect, &ce).await?;
    ctx.phase("three holders of two permits", PhaseKind::Other);
    tokio::time::sleep(SECOND_HOLDER_WORKS).await;
    for worker in [3, 2, 1] {
        ctx.release(worker).await?;
    }
    ctx.final_acquire_as(1, Duration::from_secs(5), spec).await
}

#[cfg(test)]
mod tests {
    use redquorum::LockKind;

    use super::*;

    #[test]
    fn kinds_scenarios_stay_within_their_quorums() {
        for s in kinds() {
            let Kind::Load(LoadFault::Rotating { masters, faults }) = s.kind else {
                continue;
            };
            // A master restarted empty must be kept out by a quarantine covering every TTL.
            let empty = !s.durable
                && faults
                    .iter()
                    .any(|f| matches!(f, RoundFault::Kill | RoundFault::Restart));
            if empty {
                assert!(s.quarantine >= s.max_ttl, "{}", s.name);
            }
            // A load must stay available: no more masters down than the kind's quorum spares.
            let quorum = match s.mix {
                Mix::Semaphore { permits } => LockKind::semaphore(permits).quorum(5),
                _ => LockKind::Mutex.quorum(5),
            };
            assert!(masters <= 5 - quorum, "{}", s.name);
            assert!(!s.unsafe_semaphores, "{}", s.name);
            assert_eq!(s.expect.min_per_kind, MIN_PER_KIND, "{}", s.name);
        }
        let control: Vec<Scenario> = kinds()
            .into_iter()
            .filter(|s| s.expect.is_positive_control())
            .collect();
        assert_eq!(control.len(), 1);
        assert!(control[0].unsafe_semaphores);
        assert_eq!(control[0].expect.over_admitted, Want::Required);
    }
}
