//! Medians over the repeats, the side-by-side tables (`tables.rs`), and the ratios against the
//! goals.

use std::fmt::Write as _;

use redquorum_testkit::CpuPer;

use crate::scenarios::{Contended, Uncontended};

mod tables;
pub(crate) use tables::{cpu_table, runtime_table, table, wake_up_table};

/// Every repeat of one contender in one variant.
#[derive(Debug, Default)]
pub(crate) struct Row {
    pub(crate) client: &'static str,
    pub(crate) variant: &'static str,
    pub(crate) uncontended: Vec<Uncontended>,
    pub(crate) contended: Vec<Contended>,
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    })
}

/// The median of `field` over the repeats that could read their CPU time.
fn cpu_median(
    read: impl Iterator<Item = Option<CpuPer>>,
    field: fn(&CpuPer) -> f64,
) -> Option<f64> {
    median(read.flatten().map(|cpu| field(&cpu)).collect())
}

impl Row {
    pub(crate) fn new(client: &'static str, variant: &'static str) -> Self {
        Row {
            client,
            variant,
            ..Row::default()
        }
    }

    pub(crate) fn pairs_per_second(&self) -> Option<f64> {
        median(
            self.uncontended
                .iter()
                .map(|u| u.pairs_per_second)
                .collect(),
        )
    }

    pub(crate) fn sections_per_second(&self) -> Option<f64> {
        median(
            self.contended
                .iter()
                .map(|c| c.sections_per_second)
                .collect(),
        )
    }

    /// The contended repeat with the median rate: its workers' shares are the ones to read
    /// (the lowest and highest over repeats of different rates would mix them).
    fn median_contended(&self) -> Option<&Contended> {
        let mut by_rate: Vec<&Contended> = self.contended.iter().collect();
        by_rate.sort_by(|a, b| a.sections_per_second.total_cmp(&b.sections_per_second));
        by_rate.get(by_rate.len() / 2).copied()
    }

    /// The median over repeats of what a pair cost the CPUs, in µs; `None` where no repeat
    /// could read it.
    fn cpu_per_pair(&self, field: fn(&CpuPer) -> f64) -> Option<f64> {
        cpu_median(self.uncontended.iter().map(|u| u.cpu_per_pair), field)
    }

    /// The median over repeats of what a critical section cost the CPUs, in µs.
    fn cpu_per_section(&self, field: fn(&CpuPer) -> f64) -> Option<f64> {
        cpu_median(self.contended.iter().map(|c| c.cpu_per_section), field)
    }

    /// The median, over the repeats that read it, of a figure per critical section: `field` of
    /// what `read` takes from each repeat (what the runtime's workers did, or what their
    /// wake-ups brought).
    fn per_section<T>(
        &self,
        read: fn(&Contended) -> Option<T>,
        field: fn(&T) -> f64,
    ) -> Option<f64> {
        median(
            self.contended
                .iter()
                .filter_map(|c| read(c).as_ref().map(field))
                .collect(),
        )
    }

    fn contended_median(&self, field: fn(&Contended) -> f64) -> Option<f64> {
        median(self.contended.iter().map(field).collect())
    }

    /// Mutual exclusion held and no worker was stuck in every contended repeat.
    pub(crate) fn sound(&self) -> bool {
        self.contended
            .iter()
            .all(|c| c.mutual_exclusion && c.stuck_workers == 0)
    }
}

fn figure(value: Option<f64>, unit: &str) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}{unit}"))
}

/// A count per critical section, to two decimals, or `-` where none was read.
fn count(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"))
}

/// One ratio against its goal; false when it falls short or a figure is missing.
fn ratio(
    out: &mut String,
    label: &str,
    ours: Option<f64>,
    theirs: Option<f64>,
    goal: f64,
    higher: bool,
) -> bool {
    let (Some(ours), Some(theirs)) = (ours, theirs) else {
        let _ = writeln!(out, "{label}: missing");
        return false;
    };
    let r = ours / theirs;
    let met = if higher { r >= goal } else { r <= goal };
    let _ = writeln!(
        out,
        "{label}: {ours:.0} vs {theirs:.0} = {r:.2}x (goal {} {goal}) {}",
        if higher { ">=" } else { "<=" },
        if met { "ok" } else { "SHORT" }
    );
    met
}

/// The ratios of redquorum's defaults to rslock and to the bare fan-out, and whether all met
/// their goals; then, for the record, what the bare fan-out gains on bare sockets (`wire`),
/// and what the masters' side of redquorum's lock costs the same fan-out (`scripts`).
pub(crate) fn ratios(
    redquorum: &Row,
    current_thread: &Row,
    rslock: &Row,
    bare: &Row,
    wire: &Row,
    scripts: &Row,
) -> (String, bool) {
    let mut out = String::new();
    let mut met = ratio(
        &mut out,
        "uncontended pairs/s vs rslock",
        redquorum.pairs_per_second(),
        rslock.pairs_per_second(),
        1.2,
        true,
    );
    met &= ratio(
        &mut out,
        "uncontended pairs/s vs bare redis-rs",
        redquorum.pairs_per_second(),
        bare.pairs_per_second(),
        1.0,
        true,
    );
    met &= ratio(
        &mut out,
        "contended sections/s vs rslock",
        redquorum.sections_per_second(),
        rslock.sections_per_second(),
        1.2,
        true,
    );
    met &= ratio(
        &mut out,
        "contended acquire p99 vs rslock",
        redquorum.contended_median(|c| c.acquire_p99_us),
        rslock.contended_median(|c| c.acquire_p99_us),
        1.0,
        false,
    );
    met &= redquorum.sound();
    if let (Some(default), Some(single)) = (
        redquorum.sections_per_second(),
        current_thread.sections_per_second(),
    ) {
        let _ = writeln!(
            out,
            "contended, default runtime / current-thread runtime: {:.2}",
            default / single
        );
    }
    if let (Some(sockets), Some(library), Some(ours)) = (
        wire.pairs_per_second(),
        bare.pairs_per_second(),
        redquorum.pairs_per_second(),
    ) {
        let _ = writeln!(
            out,
            "uncontended, the bare fan-out on bare sockets / on redis-rs: {:.2}; redquorum / the bare fan-out on bare sockets: {:.2}",
            sockets / library,
            ours / sockets
        );
    }
    if let (Some(sockets), Some(with_scripts), Some(ours)) = (
        wire.pairs_per_second(),
        scripts.pairs_per_second(),
        redquorum.pairs_per_second(),
    ) {
        let _ = writeln!(
            out,
            "uncontended, the bare socket fan-out sending redquorum's scripts / sending SET NX PX and compare-and-delete: {:.2}; redquorum / the bare socket fan-out sending its scripts: {:.2}",
            with_scripts / sockets,
            ours / with_scripts
        );
    }
    (out, met)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime_counts::RuntimePer;
    use crate::wake_ups::WakeUpsPer;

    fn contended(rate: f64, per_worker: (u64, u64)) -> Contended {
        Contended {
            sections_per_second: rate,
            acquire_p50_us: 0.0,
            acquire_p99_us: 0.0,
            per_worker,
            mutual_exclusion: true,
            stuck_workers: 0,
            errors: 0,
            cpu_per_section: Some(CpuPer {
                masters_us: rate / 10.0,
                process_us: rate / 20.0,
            }),
            runtime_per_section: Some(RuntimePer {
                workers: 2,
                parks: rate / 1000.0,
                busy_us: rate / 40.0,
            }),
            wake_ups_per_section: Some(WakeUpsPer {
                wake_ups: rate / 500.0,
                ran_none: rate / 2000.0,
                driver_woke_one: rate / 1000.0,
                driver_woke_two: rate / 4000.0,
            }),
        }
    }

    fn uncontended(masters_us: f64, client_us: f64) -> Uncontended {
        Uncontended {
            pairs_per_second: 1000.0,
            errors: 0,
            cpu_per_pair: Some(CpuPer {
                masters_us,
                process_us: client_us,
            }),
        }
    }

    #[test]
    fn the_cpu_per_pair_shown_is_the_median_over_repeats() {
        let mut row = Row::new("c", "v");
        row.uncontended = vec![
            uncontended(500.0, 200.0),
            uncontended(300.0, 260.0),
            uncontended(400.0, 100.0),
        ];
        let table = cpu_table(&[&row]);
        // Each column its own median; "both" the median of the repeats' sums.
        assert!(
            table.contains("| c | v | 1000 | 400 µs | 200 µs | 560 µs | - | - | - |"),
            "{table}"
        );
        let mut unread = Row::new("d", "w");
        unread.uncontended = vec![Uncontended {
            cpu_per_pair: None,
            ..uncontended(0.0, 0.0)
        }];
        assert!(
            cpu_table(&[&unread]).contains("| d | w | 1000 | - | - | - | - | - | - |"),
            "{}",
            cpu_table(&[&unread])
        );
    }

    #[test]
    fn the_shares_shown_are_those_of_the_median_repeat() {
        let mut row = Row::new("c", "v");
        row.contended = vec![
            contended(3000.0, (3000, 3100)),
            contended(1000.0, (900, 1100)),
            contended(2000.0, (1900, 2050)),
        ];
        let table = table(&[&row]);
        assert!(table.contains("| 1900..2050 |"), "{table}");
        // The CPU per section is the median over repeats, as the rate is.
        let cpu = cpu_table(&[&row]);
        assert!(cpu.contains("| 2000 | 200 µs | 100 µs |"), "{cpu}");
    }

    #[test]
    fn the_runtime_and_wake_up_counts_shown_are_medians_and_rows_without_contention_are_left_out() {
        let mut row = Row::new("c", "v");
        row.contended = vec![
            contended(3000.0, (3000, 3100)),
            contended(1000.0, (900, 1100)),
            Contended {
                runtime_per_section: None,
                wake_ups_per_section: None,
                ..contended(2000.0, (1900, 2050))
            },
        ];
        let mut uncontended_only = Row::new("d", "w");
        uncontended_only.uncontended = vec![uncontended(1.0, 1.0)];
        let runtime = runtime_table(&[&row, &uncontended_only]);
        // Parks and busy time: medians of the repeats that read them (3 and 1 → 2, 75 and 25
        // → 50); the rate and the client's CPU, of all three.
        assert!(
            runtime.contains("| c | v | 2 | 2000 | 2.00 | 50 µs | 100 µs |"),
            "{runtime}"
        );
        let wake_ups = wake_up_table(&[&row, &uncontended_only]);
        // The counts likewise (6 and 2 → 4, 1.5 and 0.5 → 1, 3 and 1 → 2, 0.75 and 0.25 →
        // 0.5); the rate, of all three.
        assert!(
            wake_ups.contains("| c | v | 2000 | 4.00 | 1.00 | 2.00 | 0.50 |"),
            "{wake_ups}"
        );
        for table in [runtime, wake_ups] {
            assert!(!table.contains("| d | w |"), "{table}");
        }
    }
}
