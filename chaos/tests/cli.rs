//! The chaos runner's commands that need no Docker engine: `list`, `check` over recorded
//! histories (the positive controls' and their clean counterparts'), and its refusals of bad input.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_redquorum-chaos");

/// Histories recorded by `redquorum-chaos run --ci`: a master restarted empty without quarantine
/// (two holders at once), and a paused holder's late write with and without fencing.
fn history(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/histories")
        .join(format!("{name}.jsonl"))
}

fn chaos(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn check(scenario: &str, history_file: &Path) -> (Option<i32>, String, String) {
    let out = Command::new(BIN)
        .args(["check", "--scenario", scenario])
        .arg(history_file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), stdout, stderr)
}

#[test]
fn list_names_every_scenario_with_what_it_expects() {
    let out = chaos(&["list"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let names: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with(' '))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    let expectations = text
        .lines()
        .filter(|l| l.trim_start().starts_with("expects: "))
        .count();
    assert_eq!(
        names.len(),
        expectations,
        "one expectation per scenario:\n{text}"
    );
    for control in [
        "restart-empty-no-quarantine",
        "clock-jump-no-fencing",
        "paused-holder-no-fencing",
        "semaphore-no-safe-quorum",
    ] {
        assert!(
            names.contains(&control),
            "positive control {control} missing:\n{text}"
        );
    }
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "scenario names repeat:\n{text}");
}

#[test]
fn list_into_a_closed_pipe_ends_quietly() {
    let (read_end, write_end): (OwnedFd, OwnedFd) = nix::unistd::pipe().unwrap();
    // The reader is gone before the runner writes its first line.
    drop(read_end);
    let out = Command::new(BIN)
        .arg("list")
        .stdin(Stdio::null())
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

#[test]
fn a_positive_control_passes_on_its_violation_and_the_clean_expectation_fails_on_it() {
    let file = history("restart-empty-no-quarantine");
    let (code, stdout, _) = check("restart-empty-no-quarantine", &file);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains(": PASS (definite 1,"), "{stdout}");

    // The same history judged as a run with quarantine, which must have no second holder.
    let (code, stdout, _) = check("restart-empty-quarantine", &file);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains(": FAIL (definite 1,"), "{stdout}");
    assert!(stdout.contains("found 1 definite violations"), "{stdout}");
}

#[test]
fn fencing_refuses_the_paused_holders_write_and_without_it_the_update_is_lost() {
    let fenced = history("paused-holder-fencing");
    let unfenced = history("paused-holder-no-fencing");

    let (code, stdout, _) = check("paused-holder-fencing", &fenced);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("stale accepted 0, refused 1, lost updates 0"),
        "{stdout}"
    );
    let (code, stdout, _) = check("paused-holder-no-fencing", &unfenced);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("stale accepted 1, refused 0, lost updates 1"),
        "{stdout}"
    );

    // Each history judged against the other's expectation fails, with the reasons named.
    let (code, stdout, _) = check("paused-holder-fencing", &unfenced);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("found 1 lost updates"), "{stdout}");
    assert!(stdout.contains("found 1 stale writes accepted"), "{stdout}");
    let (code, stdout, _) = check("paused-holder-no-fencing", &fenced);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("expected lost updates, found none"),
        "{stdout}"
    );
}

#[test]
fn a_malformed_history_is_refused_with_its_line() {
    let good = std::fs::read_to_string(history("paused-holder-fencing")).unwrap();
    let first = good.lines().next().unwrap();
    let file = std::env::temp_dir().join(format!(
        "redquorum-chaos-malformed-{}.jsonl",
        std::process::id()
    ));
    std::fs::write(&file, format!("{first}\n{{\"t\": 12, \"src\":\n")).unwrap();
    let (code, stdout, stderr) = check("paused-holder-fencing", &file);
    std::fs::remove_file(&file).unwrap();
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!("{}:2:", file.display())),
        "{stderr}"
    );
    assert!(
        stdout.is_empty(),
        "no verdict on a history that was not read: {stdout}"
    );

    let missing = std::env::temp_dir().join("redquorum-chaos-no-such-history.jsonl");
    let (code, _, stderr) = check("paused-holder-fencing", &missing);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("redquorum-chaos-no-such-history.jsonl"),
        "{stderr}"
    );
}

#[test]
fn an_unknown_scenario_is_refused_before_anything_runs() {
    let out = chaos(&["run", "--scenario", "kill-minority,no-such-scenario"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("unknown scenario no-such-scenario"),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "nothing ran: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    let (code, _, stderr) = check("no-such-scenario", &history("paused-holder-fencing"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("unknown scenario no-such-scenario"),
        "{stderr}"
    );
}
