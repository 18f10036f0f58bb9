//! The comparison runs every client against real masters, keeps mutual exclusion in every
//! contended run, and refuses flags it does not know, whether or not its stderr is read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

/// The rows of the table whose header contains `header`.
fn table_rows<'a>(stdout: &'a str, header: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .skip_while(|line| !line.contains(header))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .collect()
}

#[test]
fn a_short_run_measures_every_client_and_mutual_exclusion_holds() {
    let out = Command::new(env!("CARGO_BIN_EXE_redquorum-peers"))
        .args([
            "--repeat",
            "1",
            "--seconds",
            "0.5",
            "--pairs",
            "50",
            "--warm-up",
            "10",
        ])
        .output()
        .expect("run redquorum-peers");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for row in [
        "| redquorum | default (fair) |",
        "| redquorum | current-thread runtime |",
        "| rslock 0.10 | default |",
        "| bare redis-rs fan-out | multi-thread |",
        "| bare redis-rs fan-out | current-thread |",
        "| bare sockets fan-out, no client library | multi-thread |",
        "| bare sockets fan-out sending redquorum's scripts | multi-thread |",
    ] {
        assert!(stdout.contains(row), "no row {row:?} in\n{stdout}");
    }
    // The three contended rows: the counter matched the critical sections, nobody overlapped,
    // nobody was stuck.
    assert_eq!(stdout.matches("| held").count(), 3, "{stdout}");
    assert!(!stdout.contains("BROKEN"), "{stdout}");
    // Every acquire and release of every client succeeded (a row says how many did not): for
    // the fan-out sending redquorum's scripts, every master granted and released with the keys
    // and arguments it sends, as the library's own calls do.
    assert!(!stdout.contains(" errors |"), "{stdout}");
    // What the runtime's workers did, for the three rows that ran the contended scenario: a
    // runtime that waited for the masters parked, and ran tasks for some time, every section.
    let runtime_rows = table_rows(&stdout, "| worker parks per section |");
    assert_eq!(runtime_rows.len(), 3, "{stdout}");
    for line in &runtime_rows {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let parks: f64 = cells[5].parse().unwrap_or(0.0);
        let busy: f64 = cells[6].trim_end_matches(" µs").parse().unwrap_or(0.0);
        assert!(parks > 0.0 && busy > 0.0, "{line}");
    }
    assert!(
        runtime_rows
            .iter()
            .any(|line| line.starts_with("| redquorum | current-thread runtime | 1 |")),
        "{stdout}"
    );
    // What the wake-ups brought: redquorum's clients read their own sockets, so on both
    // runtimes the driver itself woke their tasks, in parks that the table counts, and some of
    // the threads' wake-ups ran a client's task.
    let wake_up_rows = table_rows(&stdout, "| thread wake-ups per section |");
    assert_eq!(wake_up_rows.len(), 3, "{stdout}");
    for line in wake_up_rows
        .iter()
        .filter(|line| line.starts_with("| redquorum |"))
    {
        let cells: Vec<f64> = line
            .split('|')
            .skip(4)
            .filter_map(|cell| cell.trim().parse().ok())
            .collect();
        let [wake_ups, ran_none, woke_one, woke_two] = cells[..] else {
            panic!("{line}");
        };
        assert!(wake_ups > 0.0 && ran_none < wake_ups, "{line}");
        assert!(woke_one + woke_two > 0.0, "{line}");
    }
    for ratio in [
        "vs rslock",
        "vs bare redis-rs",
        "current-thread runtime:",
        "on bare sockets / on redis-rs:",
        "sending its scripts:",
    ] {
        assert!(stdout.contains(ratio), "no {ratio:?} line in\n{stdout}");
    }
}

#[test]
fn unknown_flags_are_refused_with_the_usage() {
    let out = Command::new(env!("CARGO_BIN_EXE_redquorum-peers"))
        .args(["--fast", "yes"])
        .output()
        .expect("run redquorum-peers");
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: redquorum-peers"));
    let help = Command::new(env!("CARGO_BIN_EXE_redquorum-peers"))
        .arg("--help")
        .output()
        .expect("run redquorum-peers --help");
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("--repeat"));

    // With nobody reading stderr the refusal still exits 64 (a panic on the write made it 101).
    // (`nix`'s pipe, as `std::io::pipe` is newer than the crate's minimum Rust.)
    let (reader, writer) = nix::unistd::pipe().expect("pipe");
    drop(reader);
    let unread = Command::new(env!("CARGO_BIN_EXE_redquorum-peers"))
        .args(["--fast", "yes"])
        .stderr(Stdio::from(writer))
        .status()
        .expect("run redquorum-peers");
    assert_eq!(unread.code(), Some(64));
}
