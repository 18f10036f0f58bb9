//! Reports of a run: `report.json` with every figure, `summary.md` with a table, and per
//! scenario a `timeline.svg` of holders per worker against faults per master.
//!
//! The timeline is drawn in `timeline`.

mod timeline;

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::checker::{Analysis, Crowd, Overlap, PhaseStats, WriteOutcome};
use crate::history::PhaseKind;
use crate::outcome::ScenarioOutcome;

use self::timeline::timeline_svg;

/// What a run was, for the report's header.
#[derive(Debug, Clone)]
pub(crate) struct RunInfo {
    /// The seed.
    pub(crate) seed: u64,
    /// CI-sized or not.
    pub(crate) ci: bool,
    /// The Redis image.
    pub(crate) redis_image: String,
    /// The compose client.
    pub(crate) compose: String,
    /// Wall time of the whole run.
    pub(crate) duration: Duration,
    /// The command that reproduces the run.
    pub(crate) command: String,
}

fn ms(ns: u64) -> f64 {
    (ns as f64 / 1e6 * 10.0).round() / 10.0
}

fn secs(ns: u64) -> f64 {
    (ns as f64 / 1e9 * 1000.0).round() / 1000.0
}

fn overlaps_json(list: &[Overlap]) -> Value {
    let shown: Vec<Value> = list
        .iter()
        .take(20)
        .map(|o| {
            json!({
                "first": { "worker": o.first.0, "fence": o.first.1 },
                "second": { "worker": o.second.0, "fence": o.second.1 },
                "at_s": secs(o.from),
                "overlap_ms": (o.overlap_ms * 10.0).round() / 10.0,
            })
        })
        .collect();
    Value::Array(shown)
}

fn crowds_json(list: &[Crowd]) -> Value {
    let shown: Vec<Value> = list
        .iter()
        .take(20)
        .map(|c| {
            json!({
                "name": c.name,
                "permits": c.permits,
                "admitted": { "worker": c.admitted.0, "fence": c.admitted.1 },
                "holders": c.holders.iter().map(|(w, f)| json!({ "worker": w, "fence": f })).collect::<Vec<_>>(),
                "at_s": secs(c.from),
                "overlap_ms": (c.overlap_ms * 10.0).round() / 10.0,
            })
        })
        .collect();
    Value::Array(shown)
}

fn phase_json(p: &PhaseStats) -> Value {
    json!({
        "name": p.name,
        "kind": p.kind,
        "from_s": secs(p.from),
        "to_s": secs(p.to),
        "invoked": p.invoked,
        "acquires": p.acquires,
        "acquired": p.acquired,
        "success_rate": p.success_rate(),
        "recovery_ms": p.recovery_ms,
    })
}

/// Every figure of one scenario.
fn figures(a: &Analysis) -> Value {
    let count = |o: WriteOutcome| a.writes.iter().filter(|w| w.outcome == o).count();
    json!({
        "acquire": a.acquire,
        "acquire_by_kind": a.by_kind,
        "extend": a.extend,
        "release": a.release,
        "holds": a.holds.len(),
        "writes": {
            "accepted": count(WriteOutcome::Accepted),
            "rejected": count(WriteOutcome::Rejected),
            "unknown": count(WriteOutcome::Unknown),
        },
        "lost_updates": a.lost_updates,
        "stale_accepted": a.stale_accepted,
        "resource_final": a.resource_final,
        "definite_violations": a.definite.len(),
        "max_definite_overlap_ms": (a.max_definite_ms() * 10.0).round() / 10.0,
        "definite": overlaps_json(&a.definite),
        "possible_violations": a.possible.len(),
        "possible": overlaps_json(&a.possible),
        "over_admissions": a.crowded.len(),
        "max_over_admission_ms": (a.max_crowded_ms() * 10.0).round() / 10.0,
        "over_admitted": crowds_json(&a.crowded),
        "possible_over_admissions": a.possibly_crowded.len(),
        "possibly_over_admitted": crowds_json(&a.possibly_crowded),
        "partial_multi_sections": a.partial_sections,
        "fence_order_violations": a.fence_order_violations,
        "false_acquires": a.false_acquires,
        "final_acquire": a.final_acquire,
        "min_success_under_fault": a.min_success(PhaseKind::Fault),
        "min_success_after_heal": a.min_success(PhaseKind::Heal),
        "max_recovery_ms": a.max_recovery_ms().filter(|r| r.is_finite()),
        "faults": {
            "injected": a.faults.len(),
            "confirmed": a.faults_confirmed(),
            "list": a.faults.iter().map(|f| json!({
                "id": f.id,
                "action": f.action,
                "targets": f.targets,
                "at_s": secs(f.invoked),
                "confirmed_after_ms": f.confirmed.map(|c| ms(c.saturating_sub(f.invoked))),
                "detail": f.detail,
            })).collect::<Vec<_>>(),
        },
        "phases": a.phases.iter().map(phase_json).collect::<Vec<_>>(),
        "history_end_s": secs(a.end),
    })
}

/// Writes `report.json`, `summary.md` and the timelines; returns the Markdown table.
///
/// # Errors
///
/// When a file cannot be written.
pub(crate) fn write(
    dir: &Path,
    info: &RunInfo,
    outcomes: &[ScenarioOutcome],
) -> Result<String, String> {
    let write_file = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    let passed = outcomes
        .iter()
        .all(|o| o.verdict == crate::checker::Verdict::Pass);
    let scenarios: Vec<Value> = outcomes
        .iter()
        .map(|o| {
            json!({
                "name": o.scenario.name,
                "about": o.scenario.about,
                "kind": o.scenario.kind,
                "durable_masters": o.scenario.durable,
                "fencing": o.scenario.fencing,
                "quarantine_ms": o.scenario.quarantine.as_millis() as u64,
                "max_ttl_ms": o.scenario.max_ttl.as_millis() as u64,
                "positive_control": o.scenario.expect.is_positive_control(),
                "expectation": o.scenario.expect,
                "expected": o.scenario.expect.summary(),
                "verdict": o.verdict,
                "reasons": o.reasons,
                "seed": o.seed,
                "project": o.project,
                "duration_s": (o.duration.as_secs_f64() * 10.0).round() / 10.0,
                "figures": figures(&o.analysis),
                "files": {
                    "history": format!("{}/history.jsonl", o.scenario.name),
                    "timeline": format!("{}/timeline.svg", o.scenario.name),
                },
            })
        })
        .collect();
    let report = json!({
        "passed": passed,
        "seed": info.seed,
        "ci": info.ci,
        "redis_image": info.redis_image,
        "compose": info.compose,
        "duration_s": (info.duration.as_secs_f64() * 10.0).round() / 10.0,
        "command": info.command,
        "scenarios": scenarios,
    });
    let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    write_file("report.json", &json)?;
    for o in outcomes {
        let path = dir.join(o.scenario.name).join("timeline.svg");
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&path, timeline_svg(o)).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let table = markdown_table(outcomes);
    let md = format!(
        "# redquorum chaos run\n\n{}, seed {}, {} masters (image `{}`), {} total.\n\nReproduce: `{}`\n\n{table}\n{}",
        if info.ci { "CI-sized" } else { "Full" },
        info.seed,
        5,
        info.redis_image,
        fmt_duration(info.duration),
        info.command,
        details(outcomes)
    );
    write_file("summary.md", &md)?;
    Ok(table)
}

fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// The results table, one row per scenario.
pub(crate) fn markdown_table(outcomes: &[ScenarioOutcome]) -> String {
    let mut t = String::from(
        "| scenario | expected | verdict | acquires ok / fail / unknown | faults confirmed | definite (max overlap) | over-admitted (max) | possible | stale writes accepted / refused | lost updates | min success under fault | min success after heal | max recovery | final acquire | time |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for o in outcomes {
        let a = &o.analysis;
        let expected = o.scenario.expect.label();
        let definite = if a.definite.is_empty() {
            "0".to_owned()
        } else {
            format!("{} ({:.0} ms)", a.definite.len(), a.max_definite_ms())
        };
        let crowded = if a.crowded.is_empty() {
            "0".to_owned()
        } else {
            format!("{} ({:.0} ms)", a.crowded.len(), a.max_crowded_ms())
        };
        let success = |kind| {
            a.min_success(kind)
                .map_or("-".to_owned(), |r| format!("{:.0}%", r * 100.0))
        };
        let recovery = match a.max_recovery_ms() {
            Some(r) if r.is_finite() => format!("{r:.0} ms"),
            Some(_) => "never".to_owned(),
            None => "-".to_owned(),
        };
        let final_acquire = match a.final_acquire {
            Some(true) => "ok",
            Some(false) => "FAILED",
            None => "-",
        };
        let _ = writeln!(
            t,
            "| {} | {} | **{}** | {} / {} / {} | {}/{} | {} | {} | {} | {} / {} | {} | {} | {} | {} | {} | {} |",
            o.scenario.name,
            expected,
            o.verdict.label(),
            a.acquire.ok,
            a.acquire.fail,
            a.acquire.unknown,
            a.faults_confirmed(),
            a.faults.len(),
            definite,
            crowded,
            a.possible.len() + a.possibly_crowded.len(),
            a.stale_accepted,
            a.rejected,
            a.lost_updates,
            success(PhaseKind::Fault),
            success(PhaseKind::Heal),
            recovery,
            final_acquire,
            fmt_duration(o.duration),
        );
    }
    t
}

/// Whether the workers asked for anything but the mutex.
fn has_kinds(a: &Analysis) -> bool {
    a.by_kind.keys().any(|k| k != "mutex")
}

fn details(outcomes: &[ScenarioOutcome]) -> String {
    let mut s = String::from("## Scenarios\n");
    for o in outcomes {
        let _ = write!(
            s,
            "\n### {} — {}\n\n{}\n\nExpected: {}. Fencing {}, masters {}, quarantine {} ms. Timeline: [`{}/timeline.svg`]({}/timeline.svg).\n",
            o.scenario.name,
            o.verdict.label(),
            o.scenario.about,
            o.scenario.expect.summary(),
            if o.scenario.fencing { "on" } else { "off" },
            if o.scenario.durable {
                "AOF appendfsync always"
            } else {
                "without persistence"
            },
            o.scenario.quarantine.as_millis(),
            o.scenario.name,
            o.scenario.name,
        );
        for r in &o.reasons {
            let _ = writeln!(s, "- {r}");
        }
        if has_kinds(&o.analysis) {
            let kinds: Vec<String> = o
                .analysis
                .by_kind
                .iter()
                .map(|(k, c)| format!("{k} {} of {}", c.ok, c.invoked))
                .collect();
            let _ = writeln!(
                s,
                "\nAcquires that succeeded, by kind: {}.",
                kinds.join(", ")
            );
        }
        if !o.analysis.phases.is_empty() {
            s.push_str("\n| phase | from | acquires | success | recovery |\n| --- | --- | --- | --- | --- |\n");
            for p in &o.analysis.phases {
                let _ = writeln!(
                    s,
                    "| {} | {:.1} s | {} | {} | {} |",
                    p.name,
                    p.from as f64 / 1e9,
                    p.acquires,
                    p.success_rate()
                        .map_or("-".to_owned(), |r| format!("{:.0}%", r * 100.0)),
                    p.recovery_ms
                        .map_or("-".to_owned(), |r| format!("{r:.0} ms")),
                );
            }
        }
    }
    s
}
