//! The processes a command under test started, from the outside: its children by name, and
//! whether one still runs.
#![allow(clippy::unwrap_used)]

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
