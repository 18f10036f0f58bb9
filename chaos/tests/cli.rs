//! The chaos runner's commands that need no Docker engine: `list`, `check` over recorded
//! histories (the positive controls' and their clean counterparts'), and its refusals of bad input.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_redquorum-chaos");

/// Histories recorded by `redquorum-chaos run --ci`: a master restarted empty without quarantine
/// (two holders at once), and a paused holder's late write with and without fencing.
fn history(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/histories")
        .join(format!("{name}.jsonl"))
}

/// What one run of the runner left: its exit code and its output.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn chaos(args: &[&str]) -> Ran {
    chaos_to(args, Stdio::piped(), Stdio::piped())
}

/// Runs the runner with `stdout` and `stderr` as its own; what goes into a piped one is read.
fn chaos_to(args: &[&str], stdout: Stdio, stderr: Stdio) -> Ran {
    let out = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .output()
        .unwrap();
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn check(scenario: &str, history_file: &Path) -> Ran {
    let file = history_file.to_str().unwrap();
    chaos(&["check", "--scenario", scenario, file])
}

/// The run exited with `code`, and its stdout and stderr hold each of the given texts.
fn assert_ran(ran: &Ran, code: i32, in_stdout: &[&str], in_stderr: &[&str]) {
    let Ran { stdout, stderr, .. } = ran;
    assert_eq!(ran.code, Some(code), "stdout:\n{stdout}\nstderr:\n{stderr}");
    for text in in_stdout {
        assert!(stdout.contains(text), "{text:?} not in stdout:\n{stdout}");
    }
    for text in in_stderr {
        assert!(stderr.contains(text), "{text:?} not in stderr:\n{stderr}");
    }
}

#[test]
fn list_names_every_scenario_with_what_it_expects() {
    let out = chaos(&["list"]);
    assert_ran(&out, 0, &[], &[]);
    let text = out.stdout;
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

/// A pipe whose reader is gone before anything is written: every write to it fails.
fn closed_pipe() -> Stdio {
    let (read_end, write_end): (OwnedFd, OwnedFd) = nix::unistd::pipe().unwrap();
    drop(read_end);
    Stdio::from(write_end)
}

/// Runs the runner with a stdout whose reader is gone before it writes its first line.
fn chaos_into_a_closed_pipe(args: &[&str]) -> Ran {
    let ran = chaos_to(args, closed_pipe(), Stdio::piped());
    assert!(!ran.stderr.contains("panicked"), "{}", ran.stderr);
    ran
}

#[test]
fn list_into_a_closed_pipe_ends_quietly() {
    assert_ran(&chaos_into_a_closed_pipe(&["list"]), 0, &[], &[]);
}

#[test]
fn check_into_a_closed_pipe_still_exits_with_its_verdict() {
    let file = history("restart-empty-no-quarantine");
    let file = file.to_str().unwrap();
    let judged_as = |scenario| chaos_into_a_closed_pipe(&["check", "--scenario", scenario, file]);
    assert_ran(&judged_as("restart-empty-no-quarantine"), 0, &[], &[]);
    assert_ran(&judged_as("restart-empty-quarantine"), 1, &[], &[]);
}

#[test]
fn a_positive_control_passes_on_its_violation_and_the_clean_expectation_fails_on_it() {
    let file = history("restart-empty-no-quarantine");
    assert_ran(
        &check("restart-empty-no-quarantine", &file),
        0,
        &[": PASS (definite 1,"],
        &[],
    );
    // The same history judged as a run with quarantine, which must have no second holder.
    assert_ran(
        &check("restart-empty-quarantine", &file),
        1,
        &[": FAIL (definite 1,", "found 1 definite violations"],
        &[],
    );
}

#[test]
fn fencing_refuses_the_paused_holders_write_and_without_it_the_update_is_lost() {
    let fenced = history("paused-holder-fencing");
    let unfenced = history("paused-holder-no-fencing");
    assert_ran(
        &check("paused-holder-fencing", &fenced),
        0,
        &["stale accepted 0, refused 1, lost updates 0"],
        &[],
    );
    assert_ran(
        &check("paused-holder-no-fencing", &unfenced),
        0,
        &["stale accepted 1, refused 0, lost updates 1"],
        &[],
    );
    // Each history judged against the other's expectation fails, with the reasons named.
    assert_ran(
        &check("paused-holder-fencing", &unfenced),
        1,
        &["found 1 lost updates", "found 1 stale writes accepted"],
        &[],
    );
    assert_ran(
        &check("paused-holder-no-fencing", &fenced),
        1,
        &["expected lost updates, found none"],
        &[],
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
    let ran = check("paused-holder-fencing", &file);
    std::fs::remove_file(&file).unwrap();
    assert_ran(&ran, 2, &[], &[&format!("{}:2:", file.display())]);
    assert!(
        ran.stdout.is_empty(),
        "no verdict on a history that was not read: {}",
        ran.stdout
    );

    let missing = std::env::temp_dir().join("redquorum-chaos-no-such-history.jsonl");
    assert_ran(
        &check("paused-holder-fencing", &missing),
        2,
        &[],
        &["redquorum-chaos-no-such-history.jsonl"],
    );
}

#[test]
fn an_unknown_scenario_is_refused_before_anything_runs() {
    let ran = chaos(&["run", "--scenario", "kill-minority,no-such-scenario"]);
    assert_ran(&ran, 2, &[], &["unknown scenario no-such-scenario"]);
    assert!(ran.stdout.is_empty(), "nothing ran: {}", ran.stdout);
    assert_ran(
        &check("no-such-scenario", &history("paused-holder-fencing")),
        2,
        &[],
        &["unknown scenario no-such-scenario"],
    );
}

/// A refusal still exits with its code when nobody reads stderr (a panic would make it 101).
#[test]
fn refusals_into_a_closed_stderr_still_exit_with_their_code() {
    let unknown = chaos_to(
        &["run", "--scenario", "no-such-scenario"],
        Stdio::piped(),
        closed_pipe(),
    );
    assert_ran(&unknown, 2, &[], &[]);
    assert!(unknown.stdout.is_empty(), "nothing ran: {}", unknown.stdout);

    let missing = std::env::temp_dir().join("redquorum-chaos-no-such-history.jsonl");
    let args = [
        "check",
        "--scenario",
        "paused-holder-fencing",
        missing.to_str().unwrap(),
    ];
    assert_ran(&chaos_to(&args, Stdio::piped(), closed_pipe()), 2, &[], &[]);
}
