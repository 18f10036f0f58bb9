//! A command whose stdout has no reader left (`| head` that has exited, a closed descriptor)
//! says so and exits 70 instead of panicking, and `acquire` gives back a lock whose token
//! nobody can read rather than leave it held until its TTL.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Output, Stdio};

use redquorum_testkit::LocalNodes;

/// `redquorum SUBCOMMAND --nodes ... ARGS`. The masters are fresh `redis-server`s that have
/// held no lock, so quarantine is off.
fn redquorum(nodes: &LocalNodes, subcommand: &str, args: &[&str], stdout: Stdio) -> Output {
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
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

/// The write end of a pipe whose read end is already closed.
fn readerless_pipe() -> Stdio {
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    drop(read_end);
    Stdio::from(write_end)
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
    let status = redquorum(
        &nodes,
        "status",
        &["--lock", "unread-token"],
        Stdio::piped(),
    );
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(text.starts_with("lock \"unread-token\": free"), "{text}");
    assert!(!text.contains("held"), "{text}");
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
