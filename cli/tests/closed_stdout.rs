//! A command whose stdout has no reader left (`| head` that has exited: a pipe whose read end
//! is closed) says so and exits 70 instead of panicking, also when its stderr has no reader
//! either, and `acquire` gives back a lock whose token nobody can read rather than leave it
//! held until its TTL. A stdout closed before the process starts is reopened on /dev/null by
//! the Rust runtime; `acquire` refuses /dev/null before it takes the lock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Output, Stdio};

use redquorum_testkit::LocalNodes;

/// `redquorum SUBCOMMAND --nodes ... ARGS`, its stderr read by the test. The masters are fresh
/// `redis-server`s that have held no lock, so quarantine is off.
fn redquorum(nodes: &LocalNodes, subcommand: &str, args: &[&str], stdout: Stdio) -> Output {
    redquorum_to(nodes, subcommand, args, stdout, Stdio::piped())
}

fn redquorum_to(
    nodes: &LocalNodes,
    subcommand: &str,
    args: &[&str],
    stdout: Stdio,
    stderr: Stdio,
) -> Output {
    Command::new(env!("CARGO_BIN_EXE_redquorum"))
        .args([
            subcommand,
            "--nodes",
            &nodes.urls().join(","),
            "--quarantine",
            "0s",
        ])
        .args(args)
        .env_remove("REDQUORUM_NODES")
        .env_remove("REDQUORUM_CONFIG")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .output()
        .unwrap()
}

/// The write end of a pipe whose read end is already closed.
fn readerless_pipe() -> Stdio {
    Stdio::from(readerless_pipe_end())
}

fn readerless_pipe_end() -> std::os::fd::OwnedFd {
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    drop(read_end);
    write_end
}

/// The lock is free on every master, by `redquorum status`.
fn assert_free(nodes: &LocalNodes, lock: &str) {
    let status = redquorum(nodes, "status", &["--lock", lock], Stdio::piped());
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(
        text.starts_with(&format!("lock \"{lock}\": free")),
        "{text}"
    );
    assert!(!text.contains("held"), "{text}");
}

fn assert_reported_and_exited_70(out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("cannot write to stdout"), "{stderr}");
    assert_eq!(out.status.code(), Some(70), "{stderr}");
}

#[test]
fn acquire_gives_the_lock_back_when_its_token_cannot_be_written() {
    let nodes = LocalNodes::start(3).unwrap();
    let lock = ["--lock", "unread-token", "--ttl", "60s"];

    let out = redquorum(&nodes, "acquire", &lock, readerless_pipe());
    assert_reported_and_exited_70(&out);

    // Free on every master, and free to the next caller at once (no wait).
    assert_free(&nodes, "unread-token");
    let again = redquorum(
        &nodes,
        "acquire",
        &[&lock[..], &["--wait", "0s"]].concat(),
        Stdio::piped(),
    );
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&again.stdout).trim().len(),
        32,
        "a token on stdout"
    );
}

#[test]
fn status_and_doctor_report_a_closed_stdout() {
    let nodes = LocalNodes::start(3).unwrap();
    assert_reported_and_exited_70(&redquorum(
        &nodes,
        "status",
        &["--lock", "anything"],
        readerless_pipe(),
    ));
    assert_reported_and_exited_70(&redquorum(&nodes, "doctor", &["--json"], readerless_pipe()));
}

#[test]
fn with_stderr_gone_too_the_command_still_exits_70_and_gives_the_lock_back() {
    let nodes = LocalNodes::start(3).unwrap();
    // `redquorum acquire ... 2>&1 | head -0`: stdout and stderr on one pipe whose reader is
    // gone, so the error that says why cannot be written either.
    let pipe = readerless_pipe_end();
    let stderr = Stdio::from(pipe.try_clone().unwrap());
    let out = redquorum_to(
        &nodes,
        "acquire",
        &["--lock", "nobody-reads", "--ttl", "60s"],
        Stdio::from(pipe),
        stderr,
    );
    assert_eq!(out.status.code(), Some(70));
    assert_free(&nodes, "nobody-reads");
}

#[test]
fn acquire_refuses_a_stdout_that_is_dev_null_or_closed_before_taking_the_lock() {
    let nodes = LocalNodes::start(3).unwrap();
    let out = redquorum(
        &nodes,
        "acquire",
        &["--lock", "into-the-void", "--ttl", "60s"],
        Stdio::null(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("/dev/null"), "{stderr}");
    assert_free(&nodes, "into-the-void");

    // `redquorum acquire ... >&-`: the descriptor closed by the shell before the binary starts.
    let out = Command::new("sh")
        .args([
            "-c",
            r#"exec "$0" acquire --nodes "$1" --quarantine 0s --lock closed-stdout --ttl 60s >&-"#,
            env!("CARGO_BIN_EXE_redquorum"),
            &nodes.urls().join(","),
        ])
        .env_remove("REDQUORUM_NODES")
        .env_remove("REDQUORUM_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert_free(&nodes, "closed-stdout");
}
