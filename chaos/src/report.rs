//! Reports of a run: `report.json` with every figure, `summary.md` with a table, and per
//! scenario a `timeline.svg` of holders per worker against faults per master.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::checker::{Analysis, Overlap, PhaseStats, WriteOutcome};
use crate::history::{Event, EventKind, PhaseKind};
use crate::outcome::ScenarioOutcome;

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
        "| scenario | expected | verdict | acquires ok / fail / unknown | faults confirmed | definite (max overlap) | possible | stale writes accepted / refused | lost updates | min success under fault | min success after heal | max recovery | final acquire | time |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for o in outcomes {
        let a = &o.analysis;
        let expected = o.scenario.expect.label();
        let definite = if a.definite.is_empty() {
            "0".to_owned()
        } else {
            format!("{} ({:.0} ms)", a.definite.len(), a.max_definite_ms())
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
            "| {} | {} | **{}** | {} / {} / {} | {}/{} | {} | {} | {} / {} | {} | {} | {} | {} | {} | {} |",
            o.scenario.name,
            expected,
            o.verdict.label(),
            a.acquire.ok,
            a.acquire.fail,
            a.acquire.unknown,
            a.faults_confirmed(),
            a.faults.len(),
            definite,
            a.possible.len(),
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

/// A fault interval on one row of the timeline.
struct Band {
    row: String,
    from: u64,
    to: u64,
    label: &'static str,
    color: &'static str,
}

/// Turns fault events into intervals per target (down, paused, partitioned, frozen) and
/// instants (restart, early expiry).
fn bands(events: &[Event], end: u64) -> (Vec<Band>, Vec<(String, u64, &'static str)>) {
    let mut open: BTreeMap<(String, &'static str), u64> = BTreeMap::new();
    let mut bands = Vec::new();
    let mut marks = Vec::new();
    let mut actions: BTreeMap<u32, (String, Vec<String>)> = BTreeMap::new();
    for e in events {
        match &e.kind {
            EventKind::FaultInvoke {
                id,
                action,
                targets,
            } => {
                actions.insert(*id, (action.clone(), targets.clone()));
            }
            EventKind::FaultConfirmed { id, .. } => {
                let Some((action, targets)) = actions.get(id) else {
                    continue;
                };
                for t in targets {
                    let (opens, closes): (Option<&'static str>, Option<&'static str>) =
                        match action.as_str() {
                            "kill" | "stop" => (Some("down"), None),
                            "start" => (None, Some("down")),
                            "pause" => (Some("paused"), None),
                            "unpause" => (None, Some("paused")),
                            "disconnect" => (Some("partitioned"), None),
                            "connect" => (None, Some("partitioned")),
                            "sigstop" => (Some("frozen"), None),
                            "sigcont" => (None, Some("frozen")),
                            "restart" => {
                                marks.push((t.clone(), e.t, "restarted"));
                                (None, None)
                            }
                            "expire" => {
                                marks.push((t.clone(), e.t, "lock expired early"));
                                (None, None)
                            }
                            _ => (None, None),
                        };
                    if let Some(kind) = opens {
                        open.insert((t.clone(), kind), e.t);
                    }
                    if let Some(kind) = closes
                        && let Some(from) = open.remove(&(t.clone(), kind))
                    {
                        bands.push(band(t, from, e.t, kind));
                    }
                }
            }
            _ => {}
        }
    }
    for ((t, kind), from) in open {
        bands.push(band(&t, from, end, kind));
    }
    (bands, marks)
}

fn band(row: &str, from: u64, to: u64, kind: &'static str) -> Band {
    let color = match kind {
        "down" => "#555555",
        "paused" => "#d9a400",
        "partitioned" => "#8e44ad",
        _ => "#2c7fb8",
    };
    Band {
        row: row.to_owned(),
        from,
        to,
        label: kind,
        color,
    }
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The timeline of one scenario: a row per worker (its holds: certain window in green, acting
/// past validity in orange, overlaps in red; writes as dots; failed acquires as ticks) and a
/// row per master (down, paused, partitioned; restarts and early expiry as marks), with the
/// phases as dashed lines.
pub(crate) fn timeline_svg(o: &ScenarioOutcome) -> String {
    let a = &o.analysis;
    // The axis starts at the first phase, fault or worker event (set-up before is empty).
    let start = o
        .events
        .iter()
        .filter(|e| {
            e.src > 0
                || matches!(
                    e.kind,
                    EventKind::Phase { .. } | EventKind::FaultInvoke { .. }
                )
        })
        .map(|e| e.t)
        .min()
        .unwrap_or(0);
    let end = a.end.max(start + 1);
    let workers: Vec<u32> = {
        let mut w: Vec<u32> = o.events.iter().map(|e| e.src).filter(|s| *s > 0).collect();
        w.sort_unstable();
        w.dedup();
        w
    };
    let (bands, marks) = bands(&o.events, end);
    let mut rows: Vec<String> = workers.iter().map(|w| format!("worker{w}")).collect();
    rows.extend(crate::docker::MASTERS.iter().map(|s| (*s).to_owned()));
    let (left, top, row_h, width) = (90.0, 60.0, 26.0, 1100.0);
    let plot_w = width - left - 20.0;
    let height = top + row_h * rows.len() as f64 + 70.0;
    let span = (end - start) as f64;
    // Coordinates to a tenth of a pixel keep the file small.
    let x = |t: u64| round1(left + plot_w * (t.saturating_sub(start) as f64 / span));
    let y = |row: &str| top + row_h * rows.iter().position(|r| r == row).unwrap_or(0) as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        s,
        r##"<rect width="100%" height="100%" fill="#ffffff"/><text x="{left}" y="18" font-size="14" font-weight="bold">{} — {} ({})</text><text x="{left}" y="34" fill="#444">{}</text>"##,
        esc(o.scenario.name),
        o.verdict.label(),
        esc(&o.scenario.expect.summary()),
        esc(o.scenario.about),
    );
    // Rows and labels.
    for (i, r) in rows.iter().enumerate() {
        let ry = top + row_h * i as f64;
        let shade = if i % 2 == 0 { "#f4f4f4" } else { "#ffffff" };
        let _ = write!(
            s,
            r##"<rect x="{left}" y="{ry}" width="{plot_w}" height="{row_h}" fill="{shade}"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
            left - 6.0,
            ry + row_h / 2.0 + 4.0,
            esc(r)
        );
    }
    // Time axis.
    let axis_y = top + row_h * rows.len() as f64;
    let total_s = span / 1e9;
    let step = [1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0]
        .into_iter()
        .find(|st| total_s / st <= 15.0)
        .unwrap_or(120.0);
    // Ticks at whole multiples of the step, in seconds since the scenario started.
    let (first_s, last_s) = (start as f64 / 1e9, end as f64 / 1e9);
    let mut tick = (first_s / step).ceil() * step;
    while tick <= last_s {
        let tx = round1(left + plot_w * ((tick - first_s) / total_s));
        let _ = write!(
            s,
            r##"<line x1="{tx}" y1="{axis_y}" x2="{tx}" y2="{}" stroke="#888"/><text x="{tx}" y="{}" text-anchor="middle">{tick}s</text>"##,
            axis_y + 4.0,
            axis_y + 15.0,
        );
        tick += step;
    }
    // Phases.
    for p in &a.phases {
        let px = x(p.from);
        let _ = write!(
            s,
            r##"<line x1="{px}" y1="{}" x2="{px}" y2="{axis_y}" stroke="#999" stroke-dasharray="3,3"/><text x="{}" y="{}" fill="#666" font-size="9" transform="rotate(-20 {} {})">{}</text>"##,
            top - 4.0,
            px + 2.0,
            top - 6.0,
            px + 2.0,
            top - 6.0,
            esc(&p.name)
        );
    }
    for (row, t, label) in &marks {
        let (mx, my) = (x(*t), y(row));
        let _ = write!(
            s,
            r##"<path d="M{mx} {} l5 9 l-10 0 z" fill="#d7301f"><title>{} {label} at {:.2}s</title></path>"##,
            my + 4.0,
            esc(row),
            *t as f64 / 1e9
        );
    }
    // Holds. Tooltips only where they matter in a long run: they are most of the file.
    let detailed = a.holds.len() <= 100;
    let in_overlap = |fence: u64| {
        a.definite
            .iter()
            .chain(&a.possible)
            .any(|o| o.first.1 == fence || o.second.1 == fence)
    };
    for h in &a.holds {
        let row = format!("worker{}", h.worker);
        let hy = y(&row);
        let (c0, c1) = h.certain();
        let (_, a1) = h.action();
        let title = if detailed || in_overlap(h.fence) {
            format!(
                "<title>worker{} fence {}: held {:.3}s-{:.3}s</title>",
                h.worker,
                h.fence,
                c0 as f64 / 1e9,
                c1 as f64 / 1e9
            )
        } else {
            String::new()
        };
        let _ = write!(
            s,
            r##"<rect x="{}" y="{}" width="{}" height="{}" fill="#31a354">{title}</rect>"##,
            x(c0),
            hy + 5.0,
            round1((x(c1) - x(c0)).max(0.8)),
            row_h - 10.0,
        );
        if a1 > c1 {
            let _ = write!(
                s,
                r##"<rect x="{}" y="{}" width="{}" height="{}" fill="#fd8d3c"><title>worker{} fence {} acted after its validity, until {:.3}s</title></rect>"##,
                x(c1),
                hy + 8.0,
                round1((x(a1) - x(c1)).max(0.8)),
                row_h - 16.0,
                h.worker,
                h.fence,
                a1 as f64 / 1e9
            );
        }
    }
    // Faults: on a master's row a full bar; on a worker's row (frozen) a strip under its holds.
    for b in &bands {
        let by = y(&b.row);
        let (top_off, h) = if b.row.starts_with("worker") {
            (row_h - 5.0, 4.0)
        } else {
            (4.0, row_h - 8.0)
        };
        let _ = write!(
            s,
            r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{}" opacity="0.85"><title>{} {}: {:.2}s-{:.2}s</title></rect>"#,
            x(b.from),
            by + top_off,
            round1((x(b.to) - x(b.from)).max(1.0)),
            h,
            b.color,
            esc(&b.row),
            b.label,
            b.from as f64 / 1e9,
            b.to as f64 / 1e9
        );
    }
    // Overlaps, on both holders' rows.
    for (list, color) in [(&a.definite, "#e31a1c"), (&a.possible, "#fb9a99")] {
        for o in list.iter() {
            let to = o.from + (o.overlap_ms * 1e6) as u64;
            for w in [o.first.0, o.second.0] {
                let oy = y(&format!("worker{w}"));
                let _ = write!(
                    s,
                    r#"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="{color}" stroke-width="2"><title>overlap of fences {} and {}: {:.1} ms</title></rect>"#,
                    x(o.from),
                    oy + 2.0,
                    round1((x(to) - x(o.from)).max(2.0)),
                    row_h - 4.0,
                    o.first.1,
                    o.second.1,
                    o.overlap_ms
                );
            }
        }
    }
    // Writes.
    let stale_fences: Vec<(u32, u64)> = a
        .writes
        .iter()
        .filter(|w| {
            w.outcome == WriteOutcome::Accepted
                && a.writes.iter().any(|v| {
                    v.outcome == WriteOutcome::Accepted
                        && v.fence > w.fence
                        && v.done.is_some_and(|d| d < w.invoked)
                })
        })
        .map(|w| (w.worker, w.fence))
        .collect();
    for w in &a.writes {
        let (fill, what) = match w.outcome {
            WriteOutcome::Accepted if stale_fences.contains(&(w.worker, w.fence)) => {
                ("#e31a1c", "stale write accepted")
            }
            WriteOutcome::Accepted => ("#08519c", "write accepted"),
            WriteOutcome::Rejected => ("#7a0177", "write refused (fencing)"),
            WriteOutcome::Unknown => ("#999999", "write unknown"),
        };
        let wy = y(&format!("worker{}", w.worker));
        let title = if detailed || fill != "#08519c" {
            format!("<title>{what}: value {} fence {}</title>", w.value, w.fence)
        } else {
            String::new()
        };
        let _ = write!(
            s,
            r#"<circle cx="{}" cy="{}" r="2.5" fill="{fill}">{title}</circle>"#,
            x(w.invoked),
            wy + row_h / 2.0,
        );
    }
    // Failed acquires as ticks.
    for e in &o.events {
        if let EventKind::AcquireFail { .. } = e.kind {
            let fy = y(&format!("worker{}", e.src));
            let fx = x(e.t);
            let _ = write!(
                s,
                r##"<line x1="{fx}" y1="{}" x2="{fx}" y2="{}" stroke="#bbbbbb"/>"##,
                fy + 2.0,
                fy + 6.0
            );
        }
    }
    // Legend.
    let ly = axis_y + 32.0;
    let legend = [
        ("#31a354", "lock held (certain window)"),
        ("#fd8d3c", "acting after validity"),
        ("#e31a1c", "definite overlap / stale write"),
        ("#fb9a99", "possible overlap"),
        ("#08519c", "write accepted"),
        ("#7a0177", "write refused"),
        ("#555555", "master down"),
        ("#d9a400", "paused"),
        ("#8e44ad", "partitioned"),
        ("#2c7fb8", "worker frozen"),
        ("#d7301f", "restart / early expiry"),
    ];
    for (i, (color, label)) in legend.iter().enumerate() {
        let lx = left + (i % 6) as f64 * 170.0;
        let lyy = ly + (i / 6) as f64 * 16.0;
        let _ = write!(
            s,
            r#"<rect x="{lx}" y="{}" width="10" height="10" fill="{color}"/><text x="{}" y="{}">{label}</text>"#,
            lyy - 9.0,
            lx + 14.0,
            lyy
        );
    }
    s.push_str("</svg>\n");
    s
}
