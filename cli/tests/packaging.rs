//! The coordinator's image recipe (`docker/Dockerfile`): its build stage gets every file the
//! workspace needs to build.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the cli crate sits in the workspace")
        .to_path_buf()
}

/// The sources of every `COPY` of the Dockerfile's first (build) stage.
fn build_stage_copies(dockerfile: &str) -> Vec<String> {
    let mut copies = Vec::new();
    let mut stages = 0;
    for line in dockerfile.lines().map(str::trim) {
        if line.starts_with("FROM ") {
            stages += 1;
        }
        if stages != 1 {
            continue;
        }
        if let Some(args) = line.strip_prefix("COPY ") {
            let words: Vec<&str> = args.split_whitespace().collect();
            // The last word is the destination, inside the build's WORKDIR.
            if let Some((_, sources)) = words.split_last() {
                copies.extend(sources.iter().map(|s| (*s).to_owned()));
            }
        }
    }
    copies
}

fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            if entry.file_name() == "target" {
                continue;
            }
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        std::fs::copy(from, to).unwrap();
    }
}

/// Cargo loads the workspace from exactly what the build stage copies: a member missing from
/// the copies (as `peers` once was) fails `docker compose build` before anything compiles.
#[test]
fn the_image_build_stage_copies_every_file_the_workspace_needs() {
    let root = root();
    let dockerfile = std::fs::read_to_string(root.join("docker/Dockerfile")).unwrap();
    let copies = build_stage_copies(&dockerfile);
    assert!(copies.iter().any(|c| c == "Cargo.toml"), "{copies:?}");
    let context = tempfile::tempdir().unwrap();
    for source in &copies {
        copy_tree(&root.join(source), &context.path().join(source));
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .arg("--locked")
        .current_dir(context.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo cannot load the workspace from the Dockerfile's copies {copies:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
