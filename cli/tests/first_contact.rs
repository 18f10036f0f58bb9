//! First contact with plain masters through the binary: `redquorum run` with default options
//! locks new plain masters at once. The library's side of first contact is
//! `tests/first_contact.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The harness the library's tests use (local masters, test-tuned clients), shared as is.
#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::Command;
use std::time::Instant;

/// The newcomer's first command, with default options, on plain `redis-server`s.
#[test]
fn redquorum_run_on_new_plain_masters_succeeds_at_once() {
    let nodes = common::nodes(3);
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_redquorum"))
        .args([
            "run",
            "--nodes",
            &nodes.urls().join(","),
            "--lock",
            "job",
            "--",
            "true",
        ])
        .env_remove("REDQUORUM_NODES")
        .env_remove("REDQUORUM_CONFIG")
        .env_remove("REDQUORUM_QUARANTINE")
        .env_remove("REDQUORUM_MAX_TTL")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("run took {:?}", started.elapsed());
}

/// The fencing token printed after `prefix` on a line of `out`.
fn fence_after(out: &str, prefix: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{out}"));
    line[prefix.len()..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no fencing token in {line:?}"))
}

/// `redquorum demo`, which the quick start points to, on its own five masters: a refusal that
/// names the holders, then a hand-over whose fencing token is larger than the first holder's.
#[test]
fn redquorum_demo_refuses_the_second_client_then_hands_it_a_larger_fence() {
    let out = Command::new(env!("CARGO_BIN_EXE_redquorum"))
        .args(["demo", "--pairs", "50"])
        .env_remove("REDQUORUM_NODES")
        .env_remove("REDQUORUM_CONFIG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}: {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let alice = fence_after(&stdout, "alice acquired \"demo\" with fencing token ");
    assert!(
        stdout.contains(
            "bob waited 200ms and was refused: lock \"demo\" is held by someone else on "
        ),
        "{stdout}"
    );
    let bob = fence_after(&stdout, "bob acquired it with fencing token ");
    assert!(bob > alice, "bob's fence {bob} after alice's {alice}");
}

/// `redquorum demo` with arguments it cannot use: refused as bad arguments (64) before any
/// master is started, not after starting them (`--masters 32`, exit 70) nor with a figure of
/// nothing (`--pairs 0` printed "inf").
#[test]
fn redquorum_demo_refuses_bad_arguments_before_starting_masters() {
    for (args, flag) in [
        (["--masters", "32"], "--masters"),
        (["--masters", "0"], "--masters"),
        (["--pairs", "0"], "--pairs"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_redquorum"))
            .arg("demo")
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: started something");
    }
}
