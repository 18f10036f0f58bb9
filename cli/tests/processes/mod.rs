//! The `redquorum` binary started as a command under test, and the processes it started, from
//! the outside: where a `serve` serves, its children by name, and whether one still runs.
// Each test binary that includes this module uses its own part of it.
#![allow(clippy::unwrap_used, dead_code)]

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

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

/// The address a `serve` started by [`start`] says it serves on, read from its log (the line
/// "redquorum serving on http://ADDR") within `limit`. A test that lets `serve` bind a free port
/// itself (`--listen 127.0.0.1:0`) learns it here, where a port chosen by the test and let go
/// before `serve` binds it could be taken by another process in between. The rest of the log
/// is read in the background, so that `serve` never blocks on a full pipe, and not kept.
pub(crate) async fn serving_address(child: &mut tokio::process::Child, limit: Duration) -> String {
    let (addr, rest) = serving_address_and_log(child, limit).await;
    drop(rest);
    addr
}

/// [`serving_address`], and the rest of the log: its lines, read in the background until the
/// process closes its stderr.
pub(crate) async fn serving_address_and_log(
    child: &mut tokio::process::Child,
    limit: Duration,
) -> (String, tokio::task::JoinHandle<Vec<String>>) {
    const MARK: &str = "serving on http://";
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let found = tokio::time::timeout(limit, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(at) = line.find(MARK) {
                let addr: String = line[at + MARK.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']'))
                    .collect();
                return Some(addr);
            }
        }
        None
    })
    .await;
    let rest = tokio::spawn(async move {
        let mut rest = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            rest.push(line);
        }
        rest
    });
    match found {
        Ok(Some(addr)) => (addr, rest),
        Ok(None) => panic!("serve ended its log without saying where it serves"),
        Err(_) => panic!("serve did not say where it serves within {limit:?}"),
    }
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
