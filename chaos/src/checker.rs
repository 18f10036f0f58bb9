//! The checker: reads a history and says what happened to mutual exclusion, to the protected
//! resource and to liveness, then compares that with what the scenario expected.
//!
//! Pure: no I/O, no clock. Everything is computed from the events.
//!
//! - A **hold** is one successful acquisition (one holder token). Its *certain window* is
//!   `[ok, min(valid_until, release invoked)]`: the time the library promised the lock was held
//!   and the holder meant to use it (`valid_until` moves with each successful extend). Its
//!   *action window* is `[ok, last thing the holder did]`, which runs past the certain window
//!   when a holder acts after its validity (it was paused between its check and its write).
//! - A **definite violation** is two holds whose certain windows overlap: the lock was granted
//!   to a second holder while the first still held it by the library's own account.
//! - A **possible violation** is two holds whose action windows overlap although their certain
//!   windows do not: a holder acted on an expired lock while another held it.
//! - A **lost update** is an accepted write that another accepted write overwrote without
//!   having seen it: every write stores the value it read plus one, so two accepted writes of
//!   the same value mean one of them was lost.
//! - A **stale write** is a write accepted although a write with a higher fencing token had
//!   been accepted before it was sent. With fencing on there must be none.
//! - **Fence order**: a lock acquired after another was granted must carry a larger fencing token.
//! - **Liveness**: acquire success per phase, time from a heal to the first success, the final
//!   acquire, and acquires that succeeded while a majority was out (there must be none).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::history::{Event, EventKind, PhaseKind, RUNNER, WorkerId};

/// One successful acquisition and what its holder did with it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Hold {
    /// The worker holding it.
    pub(crate) worker: WorkerId,
    /// The holder token.
    pub(crate) token: String,
    /// The fencing token.
    pub(crate) fence: u64,
    /// When the acquire was called.
    pub(crate) invoked: u64,
    /// When the acquire returned the lock.
    pub(crate) ok: u64,
    /// End of validity, after the last successful extend.
    pub(crate) valid_until: u64,
    /// When the holder called release, if it did.
    pub(crate) release_invoked: Option<u64>,
    /// Whether the release succeeded (`None`: not released, or outcome unknown).
    pub(crate) released: Option<bool>,
    /// The last time the holder did something under this lock (read, write, extend, release).
    pub(crate) last_action: u64,
}

impl Hold {
    /// `[ok, min(valid_until, release invoked)]`.
    pub(crate) fn certain(&self) -> (u64, u64) {
        let end = self
            .release_invoked
            .map_or(self.valid_until, |r| r.min(self.valid_until));
        (self.ok, end.max(self.ok))
    }

    /// `[ok, max(certain end, last action)]`.
    pub(crate) fn action(&self) -> (u64, u64) {
        let (start, end) = self.certain();
        (start, end.max(self.last_action))
    }
}

/// Two holds whose windows overlap.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Overlap {
    /// The earlier hold's worker and fencing token.
    pub(crate) first: (WorkerId, u64),
    /// The later hold's worker and fencing token.
    pub(crate) second: (WorkerId, u64),
    /// Start of the overlap (ns).
    pub(crate) from: u64,
    /// Length of the overlap in milliseconds.
    pub(crate) overlap_ms: f64,
}

/// A write to the protected resource.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Write {
    /// The writer.
    pub(crate) worker: WorkerId,
    /// The writer's fencing token.
    pub(crate) fence: u64,
    /// The value written.
    pub(crate) value: i64,
    /// Sent at.
    pub(crate) invoked: u64,
    /// Answered at (`None`: no answer).
    pub(crate) done: Option<u64>,
    /// Accepted, rejected by fencing, or unknown.
    pub(crate) outcome: WriteOutcome,
    /// Whether it was a fenced write.
    pub(crate) fenced: bool,
}

/// What became of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WriteOutcome {
    /// The resource accepted it.
    Accepted,
    /// The resource refused it (a higher fencing token had written).
    Rejected,
    /// No answer.
    Unknown,
}

/// Counts of one operation's outcomes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct OpCounts {
    /// Calls.
    pub(crate) invoked: u64,
    /// Succeeded.
    pub(crate) ok: u64,
    /// Failed (the caller knows nothing changed in its favour).
    pub(crate) fail: u64,
    /// Outcome unknown (no answer, or a release that could not reach a quorum).
    pub(crate) unknown: u64,
}

/// Acquire success within one phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PhaseStats {
    /// The phase's name.
    pub(crate) name: String,
    /// Its kind.
    pub(crate) kind: PhaseKind,
    /// Start (ns).
    pub(crate) from: u64,
    /// End (ns): the next phase's start, or the end of the history.
    pub(crate) to: u64,
    /// Acquires invoked in the phase.
    pub(crate) invoked: u64,
    /// Acquires judged: those invoked, less (after a heal) those that failed only once the next
    /// fault was under way.
    pub(crate) acquires: u64,
    /// Of which succeeded.
    pub(crate) acquired: u64,
    /// For a heal phase: ms from its start to the first success of an acquire invoked in it.
    pub(crate) recovery_ms: Option<f64>,
}

impl PhaseStats {
    /// Successes over attempts; `None` without attempts.
    pub(crate) fn success_rate(&self) -> Option<f64> {
        (self.acquires > 0).then(|| self.acquired as f64 / self.acquires as f64)
    }
}

/// A fault the runner injected.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct FaultRecord {
    /// Its number.
    pub(crate) id: u32,
    /// What was done.
    pub(crate) action: String,
    /// To what.
    pub(crate) targets: Vec<String>,
    /// When it was started.
    pub(crate) invoked: u64,
    /// When it was confirmed, if it was.
    pub(crate) confirmed: Option<u64>,
    /// How it was confirmed, or why not.
    pub(crate) detail: String,
}

/// Everything the checker found in a history.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Analysis {
    /// End of the history (ns).
    pub(crate) end: u64,
    /// Acquire outcomes.
    pub(crate) acquire: OpCounts,
    /// Extend outcomes.
    pub(crate) extend: OpCounts,
    /// Release outcomes.
    pub(crate) release: OpCounts,
    /// Every hold, in order of acquisition.
    pub(crate) holds: Vec<Hold>,
    /// Every write, in order of sending.
    pub(crate) writes: Vec<Write>,
    /// Holds whose certain windows overlap.
    pub(crate) definite: Vec<Overlap>,
    /// Holds whose action windows overlap, certain windows not.
    pub(crate) possible: Vec<Overlap>,
    /// Accepted writes overwritten by a writer that had not seen them.
    pub(crate) lost_updates: u64,
    /// Accepted writes sent after a higher fencing token's write was accepted.
    pub(crate) stale_accepted: u64,
    /// Writes the resource refused because of fencing.
    pub(crate) rejected: u64,
    /// Pairs of holds where the later acquisition has the smaller (or equal) fencing token.
    pub(crate) fence_order_violations: u64,
    /// Acquires invoked while a majority was out that succeeded anyway.
    pub(crate) false_acquires: u64,
    /// Per phase.
    pub(crate) phases: Vec<PhaseStats>,
    /// Whether an acquire in the final phase succeeded (`None`: there was no final phase).
    pub(crate) final_acquire: Option<bool>,
    /// The faults.
    pub(crate) faults: Vec<FaultRecord>,
    /// The resource's final counter, as the runner read it.
    pub(crate) resource_final: Option<i64>,
}

impl Analysis {
    /// Faults confirmed to have taken effect.
    pub(crate) fn faults_confirmed(&self) -> usize {
        self.faults.iter().filter(|f| f.confirmed.is_some()).count()
    }

    /// The longest definite overlap in ms.
    pub(crate) fn max_definite_ms(&self) -> f64 {
        self.definite
            .iter()
            .map(|o| o.overlap_ms)
            .fold(0.0, f64::max)
    }

    /// The lowest success rate among phases of the given kind that had attempts.
    pub(crate) fn min_success(&self, kind: PhaseKind) -> Option<f64> {
        self.phases
            .iter()
            .filter(|p| p.kind == kind)
            .filter_map(PhaseStats::success_rate)
            .reduce(f64::min)
    }

    /// The slowest recovery after a heal, in ms; `None` when there were no heal phases.
    /// A heal phase with attempts but no success counts as infinitely slow.
    pub(crate) fn max_recovery_ms(&self) -> Option<f64> {
        self.phases
            .iter()
            .filter(|p| p.kind == PhaseKind::Heal && p.invoked > 0)
            .map(|p| p.recovery_ms.unwrap_or(f64::INFINITY))
            .reduce(f64::max)
    }
}

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
    let mut extends: HashMap<(WorkerId, u64), usize> = HashMap::new();
    let mut releases: HashMap<(WorkerId, u64), usize> = HashMap::new();
    let mut writes: HashMap<(WorkerId, u64), usize> = HashMap::new();
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
            EventKind::AcquireInvoke { op, .. } => {
                a.acquire.invoked += 1;
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
            } => {
                a.acquire.ok += 1;
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
                });
            }
            EventKind::AcquireFail { op, .. } => {
                a.acquire.fail += 1;
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
            } => {
                if let Some(&h) = by_token.get(token) {
                    a.holds[h].last_action = a.holds[h].last_action.max(e.t);
                }
                writes.insert((w, *op), a.writes.len());
                a.writes.push(Write {
                    worker: w,
                    fence: *fence,
                    value: *value,
                    invoked: e.t,
                    done: None,
                    outcome: WriteOutcome::Unknown,
                    fenced: *fenced,
                });
            }
            EventKind::WriteOk { op } | EventKind::WriteRejected { op, .. } => {
                if let Some(i) = writes.remove(&(w, *op)) {
                    let write = &mut a.writes[i];
                    write.done = Some(e.t);
                    write.outcome = if matches!(e.kind, EventKind::WriteOk { .. }) {
                        WriteOutcome::Accepted
                    } else {
                        WriteOutcome::Rejected
                    };
                    // The write happened under the lock: it is the holder's last action.
                    if let Some(h) = a.holds.iter().rposition(|h| {
                        h.worker == w && h.fence == write.fence && h.ok <= write.invoked
                    }) {
                        a.holds[h].last_action = a.holds[h].last_action.max(e.t);
                    }
                }
            }
            EventKind::WriteFail { op, .. } => {
                if let Some(i) = writes.remove(&(w, *op)) {
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

    a.definite = overlaps(&a.holds, Hold::certain);
    a.possible = overlaps(&a.holds, Hold::action)
        .into_iter()
        .filter(|p| {
            !a.definite
                .iter()
                .any(|d| d.first == p.first && d.second == p.second)
        })
        .collect();
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

/// Pairs of holds (different tokens) whose windows, as `window` gives them, overlap.
fn overlaps(holds: &[Hold], window: fn(&Hold) -> (u64, u64)) -> Vec<Overlap> {
    let mut sorted: Vec<(&Hold, (u64, u64))> = holds.iter().map(|h| (h, window(h))).collect();
    sorted.sort_by_key(|(_, (start, _))| *start);
    let mut found = Vec::new();
    for (i, (first, (s1, e1))) in sorted.iter().enumerate() {
        for (second, (s2, e2)) in &sorted[i + 1..] {
            if s2 >= e1 {
                break;
            }
            if first.token == second.token {
                continue;
            }
            let from = *s2.max(s1);
            let to = *e1.min(e2);
            if to > from {
                found.push(Overlap {
                    first: (first.worker, first.fence),
                    second: (second.worker, second.fence),
                    from,
                    overlap_ms: (to - from) as f64 / 1e6,
                });
            }
        }
    }
    found
}

/// Pairs where one acquisition was invoked after another had succeeded, yet got a fencing
/// token that is not larger.
fn fence_order_violations(holds: &[Hold]) -> u64 {
    let mut by_ok: Vec<&Hold> = holds.iter().collect();
    by_ok.sort_by_key(|h| h.ok);
    let mut count = 0;
    for later in &by_ok {
        // The largest fence among holds that were granted before this one was asked for.
        let earlier_max = by_ok
            .iter()
            .take_while(|h| h.ok < later.invoked)
            .map(|h| h.fence)
            .max();
        if earlier_max.is_some_and(|f| later.fence <= f) {
            count += 1;
        }
    }
    count
}

/// Lost updates, stale writes accepted, and writes rejected by fencing.
fn resource_checks(writes: &[Write]) -> (u64, u64, u64) {
    let accepted: Vec<&Write> = writes
        .iter()
        .filter(|w| w.outcome == WriteOutcome::Accepted)
        .collect();
    let mut per_value: HashMap<i64, u64> = HashMap::new();
    for w in &accepted {
        *per_value.entry(w.value).or_default() += 1;
    }
    let lost = per_value.values().map(|n| n - 1).sum();
    let stale = accepted
        .iter()
        .filter(|w| {
            accepted.iter().any(|v| {
                v.fence > w.fence && v.done.is_some_and(|acknowledged| acknowledged < w.invoked)
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

/// What a scenario expects of one finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Want {
    /// It must be found (a positive control).
    Required,
    /// It must not be found.
    Forbidden,
    /// Either way (reported, not judged).
    Allowed,
}

impl Want {
    fn judge(self, what: &str, count: u64, reasons: &mut Vec<String>) {
        match self {
            Want::Required if count == 0 => {
                reasons.push(format!("expected {what}, found none"));
            }
            Want::Forbidden if count > 0 => reasons.push(format!("found {count} {what}")),
            _ => {}
        }
    }
}

/// What a scenario expects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Expectation {
    /// Definite violations (overlapping certain windows).
    pub(crate) definite: Want,
    /// Possible violations (overlapping action windows only).
    pub(crate) possible: Want,
    /// Lost updates at the resource.
    pub(crate) lost_updates: Want,
    /// Stale writes the resource accepted.
    pub(crate) stale_accepted: Want,
    /// Writes the resource refused because of fencing (required where fencing must act).
    pub(crate) rejected: Want,
    /// Fencing-order violations (only guaranteed while the masters keep their counters).
    pub(crate) fence_order: Want,
    /// Least acquire success rate in each phase where a tolerated fault is in effect.
    pub(crate) min_fault_success: Option<f64>,
    /// Least acquire success rate in each phase after a heal: the masters are all back, and
    /// an acquire that fails there was held up by what the fault left behind.
    pub(crate) min_heal_success: Option<f64>,
    /// Longest time from a heal to the first successful acquire.
    pub(crate) max_recovery_ms: Option<f64>,
    /// Fewest successful acquires for the run to say anything.
    pub(crate) min_acquired: u64,
}

impl Expectation {
    /// A run that must be clean: no violation of any kind.
    pub(crate) fn clean() -> Self {
        Expectation {
            definite: Want::Forbidden,
            possible: Want::Forbidden,
            lost_updates: Want::Forbidden,
            stale_accepted: Want::Forbidden,
            rejected: Want::Allowed,
            fence_order: Want::Forbidden,
            min_fault_success: None,
            min_heal_success: None,
            max_recovery_ms: None,
            min_acquired: 1,
        }
    }

    /// Whether this expects a violation of mutual exclusion or of the resource's integrity
    /// to be found (a positive control). A possible violation alone is not one: it is how a
    /// paused holder shows up even when fencing protects the resource.
    pub(crate) fn is_positive_control(&self) -> bool {
        [self.definite, self.lost_updates, self.stale_accepted].contains(&Want::Required)
    }

    /// One line for reports.
    pub(crate) fn summary(&self) -> String {
        let mut must = Vec::new();
        let mut mustnt = Vec::new();
        for (want, what) in [
            (self.definite, "definite"),
            (self.possible, "possible"),
            (self.lost_updates, "lost updates"),
            (self.stale_accepted, "stale writes"),
            (self.rejected, "refused writes"),
        ] {
            match want {
                Want::Required => must.push(what),
                Want::Forbidden => mustnt.push(what),
                Want::Allowed => {}
            }
        }
        let mut s = String::new();
        if !must.is_empty() {
            s.push_str(&format!("must find: {}", must.join(", ")));
        }
        if !mustnt.is_empty() {
            if !s.is_empty() {
                s.push_str("; ");
            }
            s.push_str(&format!("must not find: {}", mustnt.join(", ")));
        }
        if let Some(min) = self.min_fault_success {
            s.push_str(&format!(
                "; acquire success under a tolerated fault at least {:.0}%",
                min * 100.0
            ));
        }
        if let Some(min) = self.min_heal_success {
            s.push_str(&format!(
                "; acquire success after a heal at least {:.0}%",
                min * 100.0
            ));
        }
        if let Some(max) = self.max_recovery_ms {
            s.push_str(&format!("; recovery within {max:.0} ms of a heal"));
        }
        s
    }

    /// A short label for tables: what kind of outcome is expected.
    pub(crate) fn label(&self) -> &'static str {
        if self.is_positive_control() {
            "violation (positive control)"
        } else if self.rejected == Want::Required {
            "stale write refused"
        } else {
            "clean"
        }
    }
}

/// The outcome of comparing an analysis with an expectation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Verdict {
    /// As expected.
    Pass,
    /// Not as expected.
    Fail,
    /// The run cannot say: a fault did not take effect, a step could not be set up, too few
    /// operations.
    Inconclusive,
}

impl Verdict {
    /// Upper-case label for tables.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Inconclusive => "INCONCLUSIVE",
        }
    }
}

/// Judges an analysis. `setup_problems` are reasons the runner already knows the run is
/// inconclusive (a scripted step that did not go as arranged, a worker that died).
pub(crate) fn judge(
    a: &Analysis,
    expect: &Expectation,
    setup_problems: &[String],
) -> (Verdict, Vec<String>) {
    let mut inconclusive: Vec<String> = setup_problems.to_vec();
    for f in a.faults.iter().filter(|f| f.confirmed.is_none()) {
        inconclusive.push(format!(
            "fault {} ({} {}) not confirmed: {}",
            f.id,
            f.action,
            f.targets.join(","),
            f.detail
        ));
    }
    if a.acquire.ok < expect.min_acquired {
        inconclusive.push(format!(
            "only {} successful acquires (at least {} needed to judge)",
            a.acquire.ok, expect.min_acquired
        ));
    }
    if !inconclusive.is_empty() {
        return (Verdict::Inconclusive, inconclusive);
    }

    let mut reasons = Vec::new();
    expect
        .definite
        .judge("definite violations", a.definite.len() as u64, &mut reasons);
    expect
        .possible
        .judge("possible violations", a.possible.len() as u64, &mut reasons);
    expect
        .lost_updates
        .judge("lost updates", a.lost_updates, &mut reasons);
    expect
        .stale_accepted
        .judge("stale writes accepted", a.stale_accepted, &mut reasons);
    expect
        .rejected
        .judge("writes refused by fencing", a.rejected, &mut reasons);
    expect.fence_order.judge(
        "fencing-order violations",
        a.fence_order_violations,
        &mut reasons,
    );
    if a.false_acquires > 0 {
        reasons.push(format!(
            "{} acquires succeeded while a majority was out",
            a.false_acquires
        ));
    }
    match a.final_acquire {
        Some(true) => {}
        Some(false) => reasons.push("the final acquire failed".to_owned()),
        None => reasons.push("no final acquire was made".to_owned()),
    }
    if let (Some(min), Some(rate)) = (expect.min_fault_success, a.min_success(PhaseKind::Fault))
        && rate < min
    {
        reasons.push(format!(
            "acquire success {:.0}% under a tolerated fault (at least {:.0}% expected)",
            rate * 100.0,
            min * 100.0
        ));
    }
    if let (Some(min), Some(rate)) = (expect.min_heal_success, a.min_success(PhaseKind::Heal))
        && rate < min
    {
        reasons.push(format!(
            "acquire success {:.0}% after a heal (at least {:.0}% expected)",
            rate * 100.0,
            min * 100.0
        ));
    }
    if let (Some(max), Some(recovery)) = (expect.max_recovery_ms, a.max_recovery_ms())
        && recovery > max
    {
        reasons.push(if recovery.is_finite() {
            format!("recovery took {recovery:.0} ms after a heal (at most {max:.0} ms expected)")
        } else {
            "no acquire succeeded after a heal".to_owned()
        });
    }
    if reasons.is_empty() {
        (Verdict::Pass, reasons)
    } else {
        (Verdict::Fail, reasons)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn ev(t_ms: u64, src: WorkerId, kind: EventKind) -> Event {
        Event {
            t: t_ms * MS,
            src,
            kind,
        }
    }

    /// A complete hold: acquire invoked at `inv`, ok at `ok`, valid for `valid` ms, released
    /// at `rel` (if given).
    fn hold(
        w: WorkerId,
        op: u64,
        fence: u64,
        (inv, ok, valid): (u64, u64, u64),
        rel: Option<u64>,
    ) -> Vec<Event> {
        let token = format!("tok-{w}-{op}");
        let mut v = vec![
            ev(inv, w, EventKind::AcquireInvoke { op, ttl_ms: valid }),
            ev(
                ok,
                w,
                EventKind::AcquireOk {
                    op,
                    token: token.clone(),
                    fence,
                    valid_until: (inv + valid) * MS,
                },
            ),
        ];
        if let Some(r) = rel {
            v.push(ev(
                r,
                w,
                EventKind::ReleaseInvoke {
                    op: op + 1,
                    token: token.clone(),
                },
            ));
            v.push(ev(r + 1, w, EventKind::ReleaseOk { op: op + 1 }));
        }
        v
    }

    fn write(
        t: u64,
        w: WorkerId,
        op: u64,
        token: &str,
        fence: u64,
        value: i64,
        accepted: bool,
    ) -> Vec<Event> {
        vec![
            ev(
                t,
                w,
                EventKind::WriteInvoke {
                    op,
                    token: token.to_owned(),
                    fence,
                    value,
                    fenced: true,
                },
            ),
            ev(
                t + 1,
                w,
                if accepted {
                    EventKind::WriteOk { op }
                } else {
                    EventKind::WriteRejected { op, highest: 99 }
                },
            ),
        ]
    }

    fn phase(t: u64, name: &str, kind: PhaseKind) -> Event {
        ev(
            t,
            RUNNER,
            EventKind::Phase {
                name: name.to_owned(),
                kind,
            },
        )
    }

    #[test]
    fn sequential_holds_are_clean() {
        let mut h = hold(1, 1, 10, (0, 5, 1000), Some(100));
        h.extend(hold(2, 1, 11, (50, 101, 1000), Some(200)));
        let a = analyse(&h);
        assert_eq!(a.holds.len(), 2);
        assert!(a.definite.is_empty(), "{:?}", a.definite);
        assert!(a.possible.is_empty());
        assert_eq!(a.fence_order_violations, 0);
        assert_eq!(a.acquire.ok, 2);
        assert_eq!(a.release.ok, 2);
    }

    #[test]
    fn overlapping_certain_windows_are_a_definite_violation() {
        // Worker 1 holds until 300 (released then); worker 2 gets the lock at 150.
        let mut h = hold(1, 1, 10, (0, 5, 1000), Some(300));
        h.extend(hold(2, 1, 11, (100, 150, 1000), Some(400)));
        let a = analyse(&h);
        assert_eq!(a.definite.len(), 1);
        let o = &a.definite[0];
        assert_eq!((o.first, o.second), ((1, 10), (2, 11)));
        assert!((o.overlap_ms - 150.0).abs() < 1e-6, "{}", o.overlap_ms);
        assert!(a.possible.is_empty(), "a definite one is not also possible");
    }

    #[test]
    fn validity_ends_the_certain_window() {
        // Worker 1 is valid until 0+100; it releases late (at 500), after worker 2 got the lock
        // at 200: not definite, but possible (worker 1 acted until 500).
        let mut h = hold(1, 1, 10, (0, 5, 100), Some(500));
        h.extend(hold(2, 1, 11, (150, 200, 1000), Some(600)));
        let a = analyse(&h);
        assert!(a.definite.is_empty(), "{:?}", a.definite);
        assert_eq!(a.possible.len(), 1);
        assert!((a.possible[0].overlap_ms - 300.0).abs() < 1e-6);
    }

    #[test]
    fn an_extend_moves_validity() {
        let mut h = hold(1, 1, 10, (0, 5, 100), None);
        h.push(ev(
            50,
            1,
            EventKind::ExtendInvoke {
                op: 3,
                token: "tok-1-1".into(),
            },
        ));
        h.push(ev(
            52,
            1,
            EventKind::ExtendOk {
                op: 3,
                valid_until: 1000 * MS,
            },
        ));
        h.extend(hold(2, 1, 11, (400, 450, 1000), Some(600)));
        let a = analyse(&h);
        assert_eq!(a.extend.ok, 1);
        assert_eq!(a.definite.len(), 1, "validity was extended to 1000");
        // A failed extend does not.
        let mut h = hold(1, 1, 10, (0, 5, 100), None);
        h.push(ev(
            50,
            1,
            EventKind::ExtendInvoke {
                op: 3,
                token: "tok-1-1".into(),
            },
        ));
        h.push(ev(
            52,
            1,
            EventKind::ExtendFail {
                op: 3,
                error: "quorum_unavailable".into(),
            },
        ));
        h.extend(hold(2, 1, 11, (400, 450, 1000), Some(600)));
        assert!(analyse(&h).definite.is_empty());
    }

    #[test]
    fn unfinished_operations_are_unknown() {
        let mut h = hold(1, 1, 10, (0, 5, 100), None);
        h.push(ev(
            10,
            1,
            EventKind::ReleaseInvoke {
                op: 2,
                token: "tok-1-1".into(),
            },
        ));
        h.push(ev(20, 2, EventKind::AcquireInvoke { op: 1, ttl_ms: 100 }));
        h.push(ev(
            30,
            1,
            EventKind::ReleaseFail {
                op: 2,
                error: "quorum_unavailable".into(),
            },
        ));
        let a = analyse(&h);
        assert_eq!(a.acquire.unknown, 1);
        assert_eq!(a.release.unknown, 1);
        assert_eq!(a.release.fail, 0);
    }

    #[test]
    fn duplicate_accepted_values_are_lost_updates() {
        let mut h = hold(1, 1, 10, (0, 5, 1000), Some(100));
        h.extend(write(10, 1, 5, "tok-1-1", 10, 1, true));
        h.extend(hold(2, 1, 11, (0, 200, 1000), Some(300)));
        h.extend(write(210, 2, 5, "tok-2-1", 11, 2, true));
        let a = analyse(&h);
        assert_eq!(a.lost_updates, 0);
        // A third writer that read 0 too.
        h.extend(hold(3, 1, 12, (0, 400, 1000), Some(500)));
        h.extend(write(410, 3, 5, "tok-3-1", 12, 1, true));
        let a = analyse(&h);
        assert_eq!(a.lost_updates, 1);
        assert_eq!(a.stale_accepted, 0, "its fence is the highest");
    }

    #[test]
    fn a_lower_fence_accepted_after_a_higher_one_is_stale() {
        // Worker 2 (fence 11) writes at 200; worker 1 (fence 10), paused, writes at 300.
        let mut h = hold(1, 1, 10, (0, 5, 100), Some(400));
        h.extend(hold(2, 1, 11, (150, 160, 1000), Some(250)));
        h.extend(write(200, 2, 5, "tok-2-1", 11, 1, true));
        let accepted = [h.clone(), write(300, 1, 5, "tok-1-1", 10, 1, true)].concat();
        let a = analyse(&accepted);
        assert_eq!(a.stale_accepted, 1);
        assert_eq!(a.lost_updates, 1);
        assert_eq!(a.possible.len(), 1, "worker 1 wrote after its validity");
        // With fencing the resource refuses it: nothing stale, nothing lost.
        let refused = [h, write(300, 1, 5, "tok-1-1", 10, 1, false)].concat();
        let a = analyse(&refused);
        assert_eq!((a.stale_accepted, a.lost_updates, a.rejected), (0, 0, 1));
    }

    #[test]
    fn concurrent_writes_are_not_stale() {
        // The higher write was not yet acknowledged when the lower one was sent.
        let mut h = write(100, 1, 1, "a", 10, 1, true);
        h.extend(write(100, 2, 1, "b", 11, 2, true));
        assert_eq!(analyse(&h).stale_accepted, 0);
    }

    #[test]
    fn fences_must_grow_in_real_time_order() {
        let mut h = hold(1, 1, 10, (0, 5, 100), Some(50));
        h.extend(hold(2, 1, 9, (60, 70, 100), Some(90)));
        assert_eq!(analyse(&h).fence_order_violations, 1);
        // Concurrent acquisitions may come in any order.
        let mut h = hold(1, 1, 10, (0, 5, 100), Some(50));
        h.extend(hold(2, 1, 9, (1, 70, 100), Some(90)));
        assert_eq!(analyse(&h).fence_order_violations, 0);
    }

    #[test]
    fn phases_measure_success_recovery_and_false_acquires() {
        let mut h = vec![phase(0, "baseline", PhaseKind::Normal)];
        h.extend(hold(1, 1, 10, (10, 20, 100), Some(30)));
        h.push(phase(100, "majority down", PhaseKind::Unavailable));
        h.push(ev(110, 1, EventKind::AcquireInvoke { op: 3, ttl_ms: 100 }));
        h.push(ev(
            160,
            1,
            EventKind::AcquireFail {
                op: 3,
                error: "quorum_unavailable".into(),
            },
        ));
        h.push(phase(200, "healed", PhaseKind::Heal));
        h.push(ev(210, 1, EventKind::AcquireInvoke { op: 5, ttl_ms: 100 }));
        h.push(ev(
            215,
            1,
            EventKind::AcquireFail {
                op: 5,
                error: "quorum_unavailable".into(),
            },
        ));
        h.extend(hold(1, 7, 11, (230, 250, 100), Some(260)));
        h.push(phase(300, "final", PhaseKind::Final));
        h.extend(hold(2, 1, 12, (310, 320, 100), Some(330)));
        let a = analyse(&h);
        assert_eq!(a.phases.len(), 4);
        assert_eq!(a.phases[0].success_rate(), Some(1.0));
        assert_eq!(a.phases[1].acquires, 1);
        assert_eq!(a.false_acquires, 0);
        assert_eq!(a.phases[2].success_rate(), Some(0.5));
        assert!((a.phases[2].recovery_ms.unwrap() - 50.0).abs() < 1e-6);
        assert_eq!(a.final_acquire, Some(true));

        // One that waited through the outage and succeeded once the heal began is not.
        let mut h = vec![phase(0, "majority down", PhaseKind::Unavailable)];
        h.push(ev(10, 1, EventKind::AcquireInvoke { op: 1, ttl_ms: 100 }));
        h.push(ev(
            50,
            RUNNER,
            EventKind::FaultInvoke {
                id: 2,
                action: "start".into(),
                targets: vec!["redis1".into()],
            },
        ));
        h.push(ev(
            60,
            1,
            EventKind::AcquireOk {
                op: 1,
                token: "t".into(),
                fence: 1,
                valid_until: 200 * MS,
            },
        ));
        h.push(phase(70, "healed", PhaseKind::Heal));
        assert_eq!(analyse(&h).false_acquires, 0);

        // An acquire that succeeds while the majority is out is a false acquire.
        let mut h = vec![phase(0, "majority down", PhaseKind::Unavailable)];
        h.extend(hold(1, 1, 10, (10, 20, 100), Some(30)));
        h.push(phase(50, "final", PhaseKind::Final));
        let a = analyse(&h);
        assert_eq!(a.false_acquires, 1);
        let (verdict, reasons) = judge(&a, &Expectation::clean(), &[]);
        assert_eq!(verdict, Verdict::Fail);
        assert!(reasons[0].contains("majority was out"), "{reasons:?}");
        assert!(reasons.iter().any(|r| r.contains("final acquire failed")));
    }

    fn clean_run() -> Vec<Event> {
        let mut h = vec![phase(0, "baseline", PhaseKind::Normal)];
        h.extend(hold(1, 1, 10, (10, 20, 100), Some(30)));
        h.push(phase(40, "final", PhaseKind::Final));
        h.extend(hold(2, 1, 11, (41, 42, 100), Some(43)));
        h
    }

    #[test]
    fn verdicts_follow_the_expectation() {
        let clean = clean_run();
        let a = analyse(&clean);
        assert_eq!(judge(&a, &Expectation::clean(), &[]).0, Verdict::Pass);

        // A positive control that finds nothing fails.
        let control = Expectation {
            definite: Want::Required,
            ..Expectation::clean()
        };
        assert!(control.is_positive_control());
        let (v, reasons) = judge(&a, &control, &[]);
        assert_eq!(v, Verdict::Fail);
        assert!(reasons[0].contains("expected definite violations"));

        // ... and passes when the violation is there.
        let mut bad = clean.clone();
        bad.extend(hold(3, 1, 9, (11, 25, 100), Some(35)));
        let a = analyse(&bad);
        assert_eq!(judge(&a, &control, &[]).0, Verdict::Pass);
        assert_eq!(judge(&a, &Expectation::clean(), &[]).0, Verdict::Fail);
    }

    #[test]
    fn unconfirmed_faults_make_a_run_inconclusive() {
        let mut h = clean_run();
        h.push(ev(
            5,
            RUNNER,
            EventKind::FaultInvoke {
                id: 1,
                action: "kill".into(),
                targets: vec!["redis2".into()],
            },
        ));
        let a = analyse(&h);
        assert_eq!(a.faults.len(), 1);
        assert_eq!(a.faults_confirmed(), 0);
        let (v, reasons) = judge(&a, &Expectation::clean(), &[]);
        assert_eq!(v, Verdict::Inconclusive);
        assert!(reasons[0].contains("not confirmed"));

        h.push(ev(
            6,
            RUNNER,
            EventKind::FaultConfirmed {
                id: 1,
                detail: "exited".into(),
            },
        ));
        let a = analyse(&h);
        assert_eq!(judge(&a, &Expectation::clean(), &[]).0, Verdict::Pass);
        // Problems the runner saw make it inconclusive too, as do too few operations.
        assert_eq!(
            judge(&a, &Expectation::clean(), &["worker 2 died".into()]).0,
            Verdict::Inconclusive
        );
        let needy = Expectation {
            min_acquired: 10,
            ..Expectation::clean()
        };
        assert_eq!(judge(&a, &needy, &[]).0, Verdict::Inconclusive);
    }

    #[test]
    fn after_a_heal_failures_caused_by_the_next_fault_are_left_out() {
        let fail = |t, w, op| {
            ev(
                t,
                w,
                EventKind::AcquireFail {
                    op,
                    error: "quorum_unavailable".into(),
                },
            )
        };
        let mut h = vec![phase(0, "healed", PhaseKind::Heal)];
        h.extend(hold(1, 1, 10, (10, 20, 100), Some(30)));
        // Failed before the next fault: counts.
        h.push(ev(40, 2, EventKind::AcquireInvoke { op: 1, ttl_ms: 100 }));
        h.push(fail(60, 2, 1));
        // Invoked in the heal, failed once the next fault was under way: left out.
        h.push(ev(70, 3, EventKind::AcquireInvoke { op: 1, ttl_ms: 100 }));
        h.push(ev(
            80,
            RUNNER,
            EventKind::FaultInvoke {
                id: 2,
                action: "kill".into(),
                targets: vec!["redis1".into()],
            },
        ));
        h.push(fail(150, 3, 1));
        h.push(phase(100, "majority down", PhaseKind::Unavailable));
        let a = analyse(&h);
        let heal = &a.phases[0];
        assert_eq!((heal.invoked, heal.acquires, heal.acquired), (3, 2, 1));
        assert_eq!(a.min_success(PhaseKind::Heal), Some(0.5));
    }

    #[test]
    fn liveness_thresholds_are_judged() {
        let mut h = vec![phase(0, "fault", PhaseKind::Fault)];
        h.push(ev(1, 1, EventKind::AcquireInvoke { op: 1, ttl_ms: 100 }));
        h.push(ev(
            2,
            1,
            EventKind::AcquireFail {
                op: 1,
                error: "timeout".into(),
            },
        ));
        h.extend(hold(1, 3, 10, (3, 4, 100), Some(5)));
        h.push(phase(10, "heal", PhaseKind::Heal));
        h.extend(hold(1, 5, 11, (11, 2000, 3000), Some(2001)));
        h.push(phase(2100, "final", PhaseKind::Final));
        h.extend(hold(2, 1, 12, (2101, 2102, 100), Some(2103)));
        h.push(ev(12, 2, EventKind::AcquireInvoke { op: 1, ttl_ms: 100 }));
        h.push(ev(
            20,
            2,
            EventKind::AcquireFail {
                op: 1,
                error: "contended".into(),
            },
        ));
        let a = analyse(&h);
        assert_eq!(a.min_success(PhaseKind::Fault), Some(0.5));
        assert_eq!(a.min_success(PhaseKind::Heal), Some(0.5));
        assert!((a.max_recovery_ms().unwrap() - 1990.0).abs() < 1e-6);
        let strict = Expectation {
            min_fault_success: Some(0.9),
            min_heal_success: Some(0.9),
            max_recovery_ms: Some(1000.0),
            ..Expectation::clean()
        };
        let (v, reasons) = judge(&a, &strict, &[]);
        assert_eq!(v, Verdict::Fail);
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        let lenient = Expectation {
            min_fault_success: Some(0.5),
            min_heal_success: Some(0.5),
            max_recovery_ms: Some(5000.0),
            ..Expectation::clean()
        };
        assert_eq!(judge(&a, &lenient, &[]).0, Verdict::Pass);
    }

    #[test]
    fn events_out_of_order_and_json_round_trip() {
        let mut h = clean_run();
        h.reverse();
        let json: Vec<String> = h
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect();
        let back: Vec<Event> = json
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(back, h);
        let a = analyse(&back);
        assert_eq!(a.holds.len(), 2);
        assert_eq!(judge(&a, &Expectation::clean(), &[]).0, Verdict::Pass);
    }
}
