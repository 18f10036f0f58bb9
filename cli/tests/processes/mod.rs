//! The `redquorum` binary started as a command under test, and the processes it started, from
//! the outside: its children by name, and whether one still runs.
#![allow(clippy::unwrap_used)]

use std::process::Stdio;

/// Starts `redquorum` with `args`: no input, its log (stderr) kept for the test, killed if the
/// test ends first.
pub(crate) fn start(args: &[&str]) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_redquorum"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Pids of the running children of `pid` named `name`.
pub(crate) fn children(pid: u32, name: &str) -> Vec<u32> {
    let out = std::process::Command::new("pgrep")
        .args(["-P", &pid.to_string(), name])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Whether `pid` runs: it exists and is not a zombie waiting to be reaped.
pub(crate) fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}
