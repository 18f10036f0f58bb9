//! Verdicts: what a scenario expects of each finding, and the comparison of an analysis with
//! that expectation (pass, fail, or inconclusive when a fault or a step did not take effect).

use serde::{Deserialize, Serialize};

use super::findings::Analysis;
use crate::history::PhaseKind;

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
    fn forbidden() -> Self {
        Want::Forbidden
    }

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
    /// Possible violations (overlapping action windows only, a semaphore crowded by action
    /// windows only).
    pub(crate) possible: Want,
    /// Semaphore holds admitted beyond the permits (certain windows).
    #[serde(default = "Want::forbidden")]
    pub(crate) over_admitted: Want,
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
    /// Fewest successful acquires of each kind the workers asked for (0: not judged): the load
    /// went through for every kind, readers and writers alike.
    #[serde(default)]
    pub(crate) min_per_kind: u64,
}

impl Expectation {
    /// A run that must be clean: no violation of any kind.
    pub(crate) fn clean() -> Self {
        Expectation {
            definite: Want::Forbidden,
            possible: Want::Forbidden,
            over_admitted: Want::Forbidden,
            lost_updates: Want::Forbidden,
            stale_accepted: Want::Forbidden,
            rejected: Want::Allowed,
            fence_order: Want::Forbidden,
            min_fault_success: None,
            min_heal_success: None,
            max_recovery_ms: None,
            min_acquired: 1,
            min_per_kind: 0,
        }
    }

    /// Whether this expects a violation of mutual exclusion or of the resource's integrity
    /// to be found (a positive control). A possible violation alone is not one: it is how a
    /// paused holder shows up even when fencing protects the resource.
    pub(crate) fn is_positive_control(&self) -> bool {
        [
            self.definite,
            self.over_admitted,
            self.lost_updates,
            self.stale_accepted,
        ]
        .contains(&Want::Required)
    }

    /// One line for reports.
    pub(crate) fn summary(&self) -> String {
        let mut must = Vec::new();
        let mut mustnt = Vec::new();
        for (want, what) in [
            (self.definite, "definite"),
            (self.possible, "possible"),
            (self.over_admitted, "over-admission"),
            (self.lost_updates, "lost updates"),
            (self.stale_accepted, "stale writes"),
            (self.rejected, "refused writes"),
            (self.fence_order, "fence order violations"),
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
        if self.min_per_kind > 0 {
            s.push_str(&format!(
                "; at least {} acquires of each kind asked for",
                self.min_per_kind
            ));
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
    expect.possible.judge(
        "possible violations",
        (a.possible.len() + a.possibly_crowded.len()) as u64,
        &mut reasons,
    );
    expect.over_admitted.judge(
        "semaphore over-admissions",
        a.crowded.len() as u64,
        &mut reasons,
    );
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
    if a.partial_sections > 0 {
        reasons.push(format!(
            "{} multi-lock sections did not hold every one of their names",
            a.partial_sections
        ));
    }
    if expect.min_per_kind > 0 {
        for (kind, counts) in &a.by_kind {
            if counts.ok < expect.min_per_kind {
                reasons.push(format!(
                    "only {} {kind} acquires succeeded of {} (at least {} expected)",
                    counts.ok, counts.invoked, expect.min_per_kind
                ));
            }
        }
    }
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
mod tests;
