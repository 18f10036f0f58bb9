//! The comparison's tables in Markdown: the side-by-side figures, where the CPU time goes, what
//! the runtime's threads did, and what their wake-ups brought the contended clients.

use std::fmt::Write as _;

use super::{Row, count, figure};
use crate::wake_ups::WakeUpsPer;

/// A Markdown table: `columns` (a heading, and whether its cells are numbers, aligned right),
/// then one line per entry of `lines`, each a cell per column.
fn markdown(columns: &[(&str, bool)], lines: impl IntoIterator<Item = Vec<String>>) -> String {
    let line = |cells: &mut dyn Iterator<Item = String>| {
        cells.fold(String::from("|"), |mut out, cell| {
            let _ = write!(out, " {cell} |");
            out
        }) + "\n"
    };
    let mut out = line(&mut columns.iter().map(|(heading, _)| (*heading).to_owned()));
    out += &line(
        &mut columns
            .iter()
            .map(|(_, number)| if *number { "---:" } else { "---" }.to_owned()),
    );
    for cells in lines {
        out += &line(&mut cells.into_iter());
    }
    out
}

/// The table, one line per contender and variant.
pub(crate) fn table(rows: &[&Row]) -> String {
    let columns = [
        ("client", false),
        ("variant", false),
        ("uncontended pairs/s", true),
        ("contended sections/s", true),
        ("acquire p50", true),
        ("acquire p99", true),
        ("per worker (median repeat)", false),
        ("mutual exclusion", false),
    ];
    markdown(
        &columns,
        rows.iter().map(|row| {
            let per_worker = row.median_contended().map_or_else(
                || "-".to_owned(),
                |c| format!("{}..{}", c.per_worker.0, c.per_worker.1),
            );
            let exclusion = if row.contended.is_empty() {
                "-"
            } else if row.sound() {
                "held"
            } else {
                "BROKEN or stuck"
            };
            let errors: u64 = row.uncontended.iter().map(|u| u.errors).sum::<u64>()
                + row.contended.iter().map(|c| c.errors).sum::<u64>();
            let exclusion = if errors > 0 {
                format!("{exclusion}, {errors} errors")
            } else {
                exclusion.to_owned()
            };
            vec![
                row.client.to_owned(),
                row.variant.to_owned(),
                figure(row.pairs_per_second(), ""),
                figure(row.sections_per_second(), ""),
                figure(row.contended_median(|c| c.acquire_p50_us), " µs"),
                figure(row.contended_median(|c| c.acquire_p99_us), " µs"),
                per_worker,
                exclusion,
            ]
        }),
    )
}

/// Where the CPU time goes, one line per contender and variant: on a machine whose few CPUs
/// run the masters and the client together, the pairs and critical sections per second follow
/// what each costs all of them.
pub(crate) fn cpu_table(rows: &[&Row]) -> String {
    let columns = [
        ("client", false),
        ("variant", false),
        ("uncontended pairs/s", true),
        ("masters' CPU per pair", true),
        ("client's CPU per pair", true),
        ("both", true),
        ("contended sections/s", true),
        ("masters' CPU per section", true),
        ("client's CPU per section", true),
    ];
    markdown(
        &columns,
        rows.iter().map(|row| {
            vec![
                row.client.to_owned(),
                row.variant.to_owned(),
                figure(row.pairs_per_second(), ""),
                figure(row.cpu_per_pair(|c| c.masters_us), " µs"),
                figure(row.cpu_per_pair(|c| c.process_us), " µs"),
                figure(row.cpu_per_pair(|c| c.masters_us + c.process_us), " µs"),
                figure(row.sections_per_second(), ""),
                figure(row.cpu_per_section(|c| c.masters_us), " µs"),
                figure(row.cpu_per_section(|c| c.process_us), " µs"),
            ]
        }),
    )
}

/// What the runtime's worker threads did per critical section, one line per contender and
/// variant that ran the contended scenario: how often they parked (each time through the
/// kernel, and often an idle CPU woken) and how long they ran tasks.
pub(crate) fn runtime_table(rows: &[&Row]) -> String {
    let columns = [
        ("client", false),
        ("variant", false),
        ("worker threads", true),
        ("contended sections/s", true),
        ("worker parks per section", true),
        ("workers' busy time per section", true),
        ("client's CPU per section", true),
    ];
    markdown(
        &columns,
        rows.iter()
            .filter(|row| !row.contended.is_empty())
            .map(|row| {
                let workers = row
                    .contended
                    .iter()
                    .find_map(|c| c.runtime_per_section)
                    .map_or_else(|| "-".to_owned(), |r| r.workers.to_string());
                vec![
                    row.client.to_owned(),
                    row.variant.to_owned(),
                    workers,
                    figure(row.sections_per_second(), ""),
                    count(row.per_section(|c| c.runtime_per_section, |r| r.parks)),
                    figure(
                        row.per_section(|c| c.runtime_per_section, |r| r.busy_us),
                        " µs",
                    ),
                    figure(row.cpu_per_section(|c| c.process_us), " µs"),
                ]
            }),
    )
}

/// What the runtime threads' wake-ups brought the contended clients, per critical section (see
/// `wake_ups.rs`), for each row that ran the contended scenario. A client whose tasks are woken
/// by connection tasks of its own (redis-rs's multiplexed connections, which rslock uses) shows
/// no parks that woke a client's task: the driver woke those connection tasks instead.
pub(crate) fn wake_up_table(rows: &[&Row]) -> String {
    let columns = [
        ("client", false),
        ("variant", false),
        ("contended sections/s", true),
        ("thread wake-ups per section", true),
        ("wake-ups that ran no client's task", true),
        ("parks in which the driver woke one client's task", true),
        (
            "parks in which it woke two or more clients' tasks at once",
            true,
        ),
    ];
    markdown(
        &columns,
        rows.iter()
            .filter(|row| !row.contended.is_empty())
            .map(|row| {
                let wake_ups = |field: fn(&WakeUpsPer) -> f64| {
                    count(row.per_section(|c| c.wake_ups_per_section, field))
                };
                vec![
                    row.client.to_owned(),
                    row.variant.to_owned(),
                    figure(row.sections_per_second(), ""),
                    wake_ups(|w| w.wake_ups),
                    wake_ups(|w| w.ran_none),
                    wake_ups(|w| w.driver_woke_one),
                    wake_ups(|w| w.driver_woke_two),
                ]
            }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_has_its_headings_its_alignments_and_a_line_per_entry() {
        let columns = [("name", false), ("rate", true)];
        let lines = [vec!["a".to_owned(), "1".to_owned()]];
        assert_eq!(
            markdown(&columns, lines),
            "| name | rate |\n| --- | ---: |\n| a | 1 |\n"
        );
        assert_eq!(markdown(&columns, []), "| name | rate |\n| --- | ---: |\n");
    }
}
