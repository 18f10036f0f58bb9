//! `redquorum doctor`: the deployment check as a table for people, or JSON for scripts.

use std::time::Duration;

use redquorum::{Client, DoctorReport, NodeCheck, Severity};

use super::out::say;
use super::{EXIT_OK, EXIT_SOFTWARE, EXIT_UNSAFE};

pub(super) async fn run(client: &Client, json: bool, allow_non_durable: bool) -> u8 {
    let mut report = client.doctor().await;
    if allow_non_durable {
        report = report.allowing_non_durable();
    }
    let written = if json {
        say!("{}", redquorum_cli::server::doctor_json(&report))
    } else {
        let table = table(&report);
        say!("{}", table.strip_suffix('\n').unwrap_or(&table))
    };
    if let Err(e) = written {
        tracing::error!("{e}");
        return EXIT_SOFTWARE;
    }
    if report.safe { EXIT_OK } else { EXIT_UNSAFE }
}

/// The report for people: one row per master, then the problems, then the verdict.
fn table(report: &DoctorReport) -> String {
    let header = [
        "NODE",
        "STATUS",
        "SERVER",
        "VERSION",
        "ROLE",
        "PERSISTENCE",
        "EVICTION",
        "ACL",
        "RTT",
        "CLOCK",
        "QUARANTINE",
    ]
    .map(str::to_owned);
    let rows: Vec<[String; 11]> = report.nodes.iter().map(row).collect();
    let mut widths = header.clone().map(|h| h.len());
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for r in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = r
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    let problems: Vec<String> = report
        .all_problems()
        .map(|(node, p)| {
            format!(
                "  {:<7}  {}{}",
                p.severity.as_str(),
                node.map(|n| format!("{n}: ")).unwrap_or_default(),
                p.message
            )
        })
        .collect();
    if !problems.is_empty() {
        out.push_str("\nproblems:\n");
        for p in problems {
            out.push_str(&p);
            out.push('\n');
        }
    }
    out.push_str(&format!(
        "\n{}: {} of {} masters can vote, a lock needs {}\n",
        if report.safe { "safe" } else { "UNSAFE" },
        report.usable,
        report.nodes.len(),
        report.quorum
    ));
    out
}

fn row(n: &NodeCheck) -> [String; 11] {
    let or_dash = |v: Option<&str>| v.unwrap_or("-").to_owned();
    let status = if !n.reachable {
        "down"
    } else if n.problems.iter().any(|p| p.severity == Severity::Error) {
        "error"
    } else if n.problems.is_empty() {
        "ok"
    } else {
        "warning"
    };
    // Enough of the run id to tell servers apart; the whole one is in --json.
    let server: Option<String> = n.run_id.as_deref().map(|id| id.chars().take(8).collect());
    let persistence = match (n.aof_enabled, n.appendfsync.as_deref()) {
        (None, _) => "-".to_owned(),
        (Some(false), _) => "none".to_owned(),
        (Some(true), Some(fsync)) => format!("aof {fsync}"),
        (Some(true), None) => "aof ?".to_owned(),
    };
    let acl = if !n.reachable {
        "-".to_owned()
    } else if n.acl_missing.is_empty() {
        "ok".to_owned()
    } else {
        format!("missing {}", n.acl_missing.join(","))
    };
    [
        n.node.clone(),
        status.to_owned(),
        or_dash(server.as_deref()),
        or_dash(n.redis_version.as_deref()),
        or_dash(n.role.as_deref()),
        persistence,
        or_dash(n.maxmemory_policy.as_deref()),
        acl,
        n.rtt
            .map_or_else(|| "-".to_owned(), |d| millis(d.as_secs_f64() * 1e3)),
        n.clock_offset_micros.map_or_else(|| "-".to_owned(), offset),
        n.quarantined_for.map_or_else(
            || "-".to_owned(),
            |left| {
                humantime::format_duration(Duration::from_secs(left.as_secs().max(1))).to_string()
            },
        ),
    ]
}

/// Milliseconds, with more digits for small values.
fn millis(ms: f64) -> String {
    if ms.abs() < 10.0 {
        format!("{ms:.2}ms")
    } else if ms.abs() < 1000.0 {
        format!("{ms:.0}ms")
    } else {
        format!("{:.1}s", ms / 1e3)
    }
}

/// A signed clock offset: `+` when the master is ahead.
fn offset(micros: i64) -> String {
    // f64 holds any offset a clock can have to well under a microsecond.
    let ms = micros as f64 / 1e3;
    if micros >= 0 {
        format!("+{}", millis(ms))
    } else {
        millis(ms)
    }
}
