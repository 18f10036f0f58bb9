//! Reading a history: holds paired from acquire, extend and release events, overlapping
//! windows (by the kinds' rules, in `exclusion`), the resource's writes, fence order and the
//! per-phase liveness figures.

use std::collections::{BTreeMap, HashMap};

use super::exclusion::{crowds, fence_order_violations, overlaps, partial_sections};
use super::findings::{Analysis, FaultRecord, Hold, PhaseStats, Write, WriteOutcome};
use crate::history::{Event, EventKind, PhaseKind, RUNNER, WorkerId};

/// Reads a history. Events may come in any order; they are sorted by time (stable, so events
/// a process recorded at the same nanosecond keep their order).
pub(crate) fn analyse(events: &[Event]) -> Analysis {
    let mut events: Vec<&Event> = events.iter().collect();
    events.sort_by_key(|e| e.t);
    let end = events.last().map_or(0, |e| e.t);
    let mut a = Analysis {
        end,
        ..Analysis::default()
    };

    // Operations pair by (worker, op).
    let mut acquires: HashMap<(WorkerId, u64), u64> = HashMap::new();
    // The kind each acquire asked for, for the per-kind figures.
    let mut asked: HashMap<(WorkerId, u64), String> = HashMap::new();
    let mut extends: HashMap<(WorkerId, u64), usize> = HashMap::new();
    let mut releases: HashMap<(WorkerId, u64), usize> = HashMap::new();
    // Write in flight -> (index in a.writes, the hold it was made under).
    let mut writes: HashMap<(WorkerId, u64), (usize, Option<usize>)> = HashMap::new();
    // Holder token -> index in a.holds.
    let mut by_token: HashMap<String, usize> = HashMap::new();
    let mut faults: BTreeMap<u32, FaultRecord> = BTreeMap::new();
    let mut phase_marks: Vec<(u64, String, PhaseKind)> = Vec::new();
    // Acquire invocations, with their outcome once known: (worker, invoked, ok time).
    let mut acquire_log: Vec<AcquireRecord> = Vec::new();
    let mut acquire_index: HashMap<(WorkerId, u64), usize> = HashMap::new();

    for e in &events {
        let w = e.src;
        match &e.kind {
            EventKind::AcquireInvoke { op, section, .. } => {
                a.acquire.invoked += 1;
                let label = section.label();
                a.by_kind.entry(label.clone()).or_default().invoked += 1;
                asked.insert((w, *op), label);
                acquires.insert((w, *op), e.t);
                acquire_index.insert((w, *op), acquire_log.len());
                acquire_log.push(AcquireRecord {
                    invoked: e.t,
                    ok: None,
                    ended: None,
                });
            }
            EventKind::AcquireOk {
                op,
                token,
                fence,
                valid_until,
                section,
            } => {
                a.acquire.ok += 1;
                if let Some(label) = asked.remove(&(w, *op)) {
                    a.by_kind.entry(label).or_default().ok += 1;
                }
                let invoked = acquires.remove(&(w, *op)).unwrap_or(e.t);
                if let Some(&i) = acquire_index.get(&(w, *op)) {
                    acquire_log[i].ok = Some(e.t);
                    acquire_log[i].ended = Some(e.t);
                }
                by_token.insert(token.clone(), a.holds.len());
                a.holds.push(Hold {
                    worker: w,
                    token: token.clone(),
                    fence: *fence,
                    invoked,
                    ok: e.t,
                    valid_until: *valid_until,
                    release_invoked: None,
                    released: None,
                    last_action: e.t,
                    section: section.clone(),
                });
            }
            EventKind::AcquireFail { op, .. } => {
                a.acquire.fail += 1;
                if let Some(label) = asked.remove(&(w, *op)) {
                    a.by_kind.entry(label).or_default().fail += 1;
                }
                acquires.remove(&(w, *op));
                if let Some(&i) = acquire_index.get(&(w, *op)) {
                    acquire_log[i].ended = Some(e.t);
                }
            }
            EventKind::ExtendInvoke { op, token } => {
                a.extend.invoked += 1;
                if let Some(&h) = by_token.get(token) {
                    extends.insert((w, *op), h);
                    a.holds[h].last_action = a.holds[h].last_action.max(e.t);
                }
            }
            EventKind::ExtendOk { op, valid_until } => {
                a.extend.ok += 1;
                if let Some(h) = extends.remove(&(w, *op)) {
                    let hold = &mut a.holds[h];
                    hold.valid_until = hold.valid_until.max(*valid_until);
                }
            }
            EventKind::ExtendFail { op, .. } => {
                a.extend.fail += 1;
                extends.remove(&(w, *op));
            }
            EventKind::ReleaseInvoke { op, token } => {
                a.release.invoked += 1;
                if let Some(&h) = by_token.get(token) {
                    releases.insert((w, *op), h);
                    let hold = &mut a.holds[h];
                    hold.release_invoked.get_or_insert(e.t);
                    hold.last_action = hold.last_action.max(e.t);
                }
            }
            EventKind::ReleaseOk { op } => {
                a.release.ok += 1;
                if let Some(h) = releases.remove(&(w, *op)) {
                    a.holds[h].released = Some(true);
                }
            }
            EventKind::ReleaseFail { op, error } => {
                // `not_held`: the nodes had no longer got it, a definite answer; anything else
                // leaves the lock's state on the nodes unknown.
                if error == "not_held" {
                    a.release.fail += 1;
                    if let Some(h) = releases.remove(&(w, *op)) {
                        a.holds[h].released = Some(false);
                    }
                } else {
                    a.release.unknown += 1;
                    releases.remove(&(w, *op));
                }
            }
            EventKind::Read { token, .. }
            | EventKind::WriteSkipped { token }
            | EventKind::WriteReady { token } => {
                if let Some(&h) = by_token.get(token) {
                    a.holds[h].last_action = a.holds[h].last_action.max(e.t);
                }
            }
            EventKind::WriteInvoke {
                op,
                token,
                fence,
                value,
                fenced,
                key,
            } => {
                let hold = by_token.get(token).copied();
                if let Some(h) = hold {
                    a.holds[h].last_action = a.holds[h].last_action.max(e.t);
                }
                writes.insert((w, *op), (a.writes.len(), hold));
                a.writes.push(Write {
                    worker: w,
                    fence: *fence,
                    value: *value,
                    invoked: e.t,
                    done: None,
                    outcome: WriteOutcome::Unknown,
                    fenced: *fenced,
                    key: key.clone().unwrap_or_default(),
                });
            }
            EventKind::WriteOk { op } | EventKind::WriteRejected { op, .. } => {
                if let Some((i, hold)) = writes.remove(&(w, *op)) {
                    let write = &mut a.writes[i];
                    write.done = Some(e.t);
                    write.outcome = if matches!(e.kind, EventKind::WriteOk { .. }) {
                        WriteOutcome::Accepted
                    } else {
                        WriteOutcome::Rejected
                    };
                    // The write happened under the lock: it is the holder's last action.
                    if let Some(h) = hold {
                        a.holds[h].last_action = a.holds[h].last_action.max(e.t);
                    }
                }
            }
            EventKind::WriteFail { op, .. } => {
                if let Some((i, _)) = writes.remove(&(w, *op)) {
                    a.writes[i].done = Some(e.t);
                }
            }
            EventKind::FaultInvoke {
                id,
                action,
                targets,
            } => {
                faults.insert(
                    *id,
                    FaultRecord {
                        id: *id,
                        action: action.clone(),
                        targets: targets.clone(),
                        invoked: e.t,
                        confirmed: None,
                        detail: String::new(),
                    },
                );
            }
            EventKind::FaultConfirmed { id, detail } => {
                if let Some(f) = faults.get_mut(id) {
                    f.confirmed = Some(e.t);
                    f.detail = detail.clone();
                }
            }
            EventKind::FaultUnconfirmed { id, detail } => {
                if let Some(f) = faults.get_mut(id) {
                    f.detail = detail.clone();
                }
            }
            EventKind::Phase { name, kind } if w == RUNNER => {
                phase_marks.push((e.t, name.clone(), *kind));
            }
            EventKind::ResourceFinal { value } => a.resource_final = Some(*value),
            EventKind::Phase { .. } | EventKind::Note { .. } | EventKind::Done { .. } => {}
        }
    }
    // Invocations left without an outcome: the worker never answered.
    a.acquire.unknown = a.acquire.invoked - a.acquire.ok - a.acquire.fail;
    a.extend.unknown = a.extend.invoked - a.extend.ok - a.extend.fail;
    a.release.unknown = a.release.invoked - a.release.ok - a.release.fail;
    for counts in a.by_kind.values_mut() {
        counts.unknown = counts.invoked - counts.ok - counts.fail;
    }

    a.definite = overlaps(&a.holds, Hold::certain);
    a.possible = overlaps(&a.holds, Hold::action)
        .into_iter()
        .filter(|p| {
            !a.definite
                .iter()
                .any(|d| d.first == p.first && d.second == p.second)
        })
        .collect();
    a.crowded = crowds(&a.holds, Hold::certain);
    a.possibly_crowded = crowds(&a.holds, Hold::action)
        .into_iter()
        .filter(|p| {
            !a.crowded
                .iter()
                .any(|d| d.admitted == p.admitted && d.name == p.name)
        })
        .collect();
    a.partial_sections = partial_sections(&a.holds);
    a.fence_order_violations = fence_order_violations(&a.holds);
    (a.lost_updates, a.stale_accepted, a.rejected) = resource_checks(&a.writes);
    let fault_times: Vec<u64> = faults.values().map(|f| f.invoked).collect();
    a.phases = phase_stats(&phase_marks, &acquire_log, &fault_times, end);
    a.false_acquires = a
        .phases
        .iter()
        .filter(|p| p.kind == PhaseKind::Unavailable)
        .map(|p| p.acquired)
        .sum();
    a.final_acquire = a
        .phases
        .iter()
        .filter(|p| p.kind == PhaseKind::Final)
        .map(|p| p.acquired > 0)
        .reduce(|x, y| x || y);
    a.faults = faults.into_values().collect();
    a
}

/// Lost updates, stale writes accepted, and writes rejected by fencing; each resource key is
/// a counter of its own, with fencing tokens of its own lock name.
fn resource_checks(writes: &[Write]) -> (u64, u64, u64) {
    let accepted: Vec<&Write> = writes
        .iter()
        .filter(|w| w.outcome == WriteOutcome::Accepted)
        .collect();
    let mut per_value: HashMap<(&str, i64), u64> = HashMap::new();
    for w in &accepted {
        *per_value.entry((&w.key, w.value)).or_default() += 1;
    }
    let lost = per_value.values().map(|n| n - 1).sum();
    let stale = accepted
        .iter()
        .filter(|w| {
            accepted.iter().any(|v| {
                v.key == w.key
                    && v.fence > w.fence
                    && v.done.is_some_and(|acknowledged| acknowledged < w.invoked)
            })
        })
        .count() as u64;
    let rejected = writes
        .iter()
        .filter(|w| w.outcome == WriteOutcome::Rejected)
        .count() as u64;
    (lost, stale, rejected)
}

/// One acquire, for the per-phase figures (times in ns).
struct AcquireRecord {
    invoked: u64,
    ok: Option<u64>,
    /// When it succeeded or failed; `None` while its outcome is unknown.
    ended: Option<u64>,
}

/// Acquire success per phase. In an `Unavailable` phase a majority is out from the phase's
/// start (the fault confirmed) until the runner starts to heal it (the next fault invoked): an
/// acquire that started and succeeded in that window was granted by a minority, and only those
/// count as successes there. One that started there but succeeded after the heal began merely
/// waited long enough. In a `Heal` phase an acquire that failed only after the next fault was
/// invoked is left out: it met that fault (the phase itself lasts until the fault is
/// confirmed).
fn phase_stats(
    marks: &[(u64, String, PhaseKind)],
    acquires: &[AcquireRecord],
    fault_times: &[u64],
    end: u64,
) -> Vec<PhaseStats> {
    marks
        .iter()
        .enumerate()
        .map(|(i, (from, name, kind))| {
            let to = marks.get(i + 1).map_or(end, |m| m.0);
            let next_fault = fault_times
                .iter()
                .copied()
                .filter(|t| t > from)
                .min()
                .unwrap_or(to)
                .min(to);
            let within: Vec<&AcquireRecord> = acquires
                .iter()
                .filter(|r| r.invoked >= *from && (r.invoked < to || i + 1 == marks.len()))
                .collect();
            let first_ok = within.iter().filter_map(|r| r.ok).min();
            let judged: Vec<&&AcquireRecord> = match kind {
                PhaseKind::Heal if next_fault < to => within
                    .iter()
                    .filter(|r| r.ok.is_some() || r.ended.is_some_and(|t| t < next_fault))
                    .collect(),
                _ => within.iter().collect(),
            };
            let counts_until = if *kind == PhaseKind::Unavailable {
                next_fault
            } else {
                u64::MAX
            };
            PhaseStats {
                name: name.clone(),
                kind: *kind,
                from: *from,
                to,
                invoked: within.len() as u64,
                acquires: judged.len() as u64,
                acquired: judged
                    .iter()
                    .filter(|r| r.ok.is_some_and(|ok| ok < counts_until))
                    .count() as u64,
                recovery_ms: (*kind == PhaseKind::Heal)
                    .then(|| first_ok.map(|ok| (ok.saturating_sub(*from)) as f64 / 1e6))
                    .flatten(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
