//! `redquorum run` at a terminal: the real binary in a pseudo-terminal (made by
//! `terminal/pty_driver.py`, as a user's terminal would be) against real redis-server masters.
//! Ctrl-C reaches the command once, and a command can read the terminal. They need python3.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The harness the library's tests use (local masters, test-tuned clients), shared as is.
#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_redquorum");

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/terminal")
        .join(name)
}

/// `command` run in a new pseudo-terminal: once it shows `wait_for`, `typed` is typed. What the
/// terminal showed, and the exit code ("hung" if it had not ended 20 s later).
async fn at_terminal(wait_for: &str, typed: &str, command: &[&str]) -> (String, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        Command::new("python3")
            .arg(script("pty_driver.py"))
            .args([wait_for, typed, "--"])
            .args(command)
            .env_remove("REDQUORUM_OWNER")
            .env_remove("REDQUORUM_CONFIG")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the pty driver ends within its own limits")
    .expect("python3, which makes the pseudo-terminal (see the README's quick start)");
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    let code = shown
        .rsplit_once("EXIT ")
        .map(|(_, code)| code.trim().to_owned())
        .unwrap_or_else(|| panic!("no exit code in {shown:?}"));
    (shown, code)
}

fn run_args<'a>(nodes: &'a str, lock: &'a str) -> Vec<&'a str> {
    vec![
        BIN,
        "run",
        "--nodes",
        nodes,
        "--lock",
        lock,
        "--quarantine",
        "0s",
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ctrl_c_reaches_the_command_once() {
    let nodes = common::nodes(3);
    let urls = nodes.urls().join(",");
    let dir = tempfile::tempdir().unwrap();
    let count = dir.path().join("count");
    let counter = script("count_sigint.py");
    let mut command = run_args(&urls, "ctrl-c");
    command.extend([
        "--",
        "python3",
        counter.to_str().unwrap(),
        count.to_str().unwrap(),
    ]);
    let (shown, code) = at_terminal("child started", "\\x03", &command).await;
    // The terminal sends SIGINT to its foreground process group, which holds the command;
    // redquorum passing it on as well made two.
    assert_eq!(
        std::fs::read_to_string(&count).unwrap().trim(),
        "1",
        "{shown}"
    );
    assert_eq!(code, "1", "{shown}");
    assert!(!common::held(&nodes, "ctrl-c").await, "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_reads_the_terminal_when_stdin_is_redirected() {
    let nodes = common::nodes(3);
    let urls = nodes.urls().join(",");
    let mut run = run_args(&urls, "tty-read");
    run.extend(["--", "sh", "-c", "read x < /dev/tty; echo \"got:$x\""]);
    // `redquorum run ... < /dev/null` typed at an interactive terminal: redquorum is in the
    // terminal's foreground group, its stdin is not the terminal.
    let line = format!(
        "exec {} < /dev/null",
        run.iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let (shown, code) = at_terminal("acquired", "an-answer\\n", &["sh", "-c", &line]).await;
    // A command in a group of its own was in the terminal's background: reading it stopped it
    // (SIGTTIN), with the lock held, and the run never ended.
    assert_eq!(code, "0", "{shown}");
    assert!(shown.contains("got:an-answer"), "{shown}");
    assert!(!common::held(&nodes, "tty-read").await, "{shown}");
}
