//! The timeline of one scenario as SVG: a row per worker with its holds and writes, a row per
//! master with the faults it went through, and the phases.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::checker::WriteOutcome;
use crate::history::{Event, EventKind};
use crate::outcome::ScenarioOutcome;

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
            let what = if h.section.names.is_empty() {
                String::new()
            } else {
                format!(" {} {}", h.section.label(), h.section.names.join(","))
            };
            format!(
                "<title>worker{}{} fence {}: held {:.3}s-{:.3}s</title>",
                h.worker,
                esc(&what),
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
    // A semaphore's holders beyond its permits, on every holder's row.
    for (list, color) in [(&a.crowded, "#e31a1c"), (&a.possibly_crowded, "#fb9a99")] {
        for c in list.iter() {
            let to = c.from + (c.overlap_ms * 1e6) as u64;
            for (w, _) in &c.holders {
                let oy = y(&format!("worker{w}"));
                let _ = write!(
                    s,
                    r#"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="{color}" stroke-width="2"><title>{} holders of {} permits ({}): {:.1} ms</title></rect>"#,
                    x(c.from),
                    oy + 2.0,
                    round1((x(to) - x(c.from)).max(2.0)),
                    row_h - 4.0,
                    c.holders.len(),
                    c.permits,
                    esc(&c.name),
                    c.overlap_ms
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
                        && v.key == w.key
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
        ("#e31a1c", "definite violation / stale write"),
        ("#fb9a99", "possible violation"),
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
