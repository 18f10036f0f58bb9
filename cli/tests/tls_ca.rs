//! The binary on `rediss://` masters of a private certificate authority: `--tls-ca` trusts it,
//! and without it the masters' certificates are refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Output};

use redquorum_testkit::LocalNodes;

fn acquire(nodes: &LocalNodes, extra: &[&str]) -> Output {
    let urls: Vec<String> = (0..nodes.len())
        .map(|i| nodes.tls_url(i).expect("a TLS port"))
        .collect();
    Command::new(env!("CARGO_BIN_EXE_redquorum"))
        .args(["acquire", "--nodes", &urls.join(","), "--lock", "ca-test"])
        .args(["--ttl", "5s", "--quarantine", "0s"])
        .args(extra)
        .env_remove("REDQUORUM_NODES")
        .env_remove("REDQUORUM_CONFIG")
        .env_remove("REDQUORUM_TLS_CA")
        .output()
        .unwrap()
}

#[test]
fn tls_ca_trusts_a_private_authority() {
    let nodes = LocalNodes::start_tls(3).expect("TLS masters");
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, nodes.ca_pem().unwrap()).unwrap();

    let refused = acquire(&nodes, &[]);
    assert!(
        !refused.status.success(),
        "the private CA is not trusted by default"
    );

    let trusted = acquire(&nodes, &["--tls-ca", ca.to_str().unwrap()]);
    assert!(
        trusted.status.success(),
        "{}: {}",
        trusted.status,
        String::from_utf8_lossy(&trusted.stderr)
    );
    let token = String::from_utf8_lossy(&trusted.stdout);
    assert!(!token.trim().is_empty(), "the token on stdout");

    let missing = acquire(&nodes, &["--tls-ca", "/nonexistent/ca.pem"]);
    assert_eq!(
        missing.status.code(),
        Some(64),
        "a file that cannot be read is a usage error"
    );
}
