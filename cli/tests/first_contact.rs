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
