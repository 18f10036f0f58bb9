//! `redquorum run` with lock kinds, as a user would run it: the real binary against real
//! redis-server processes. A nested run re-enters its parent's lock, semaphores and read-write
//! locks admit whom they should, and several `--lock` are held together.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The harness the library's tests use (local masters, test-tuned clients), shared as is.
#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use redquorum_testkit::LocalNodes;
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_redquorum");

/// `redquorum run` of `locks` (and `extra` options) around `sh -c script`, with `REDQUORUM_NODES`
/// set so that nested runs find the masters, and no owner inherited from the test's caller.
fn run(nodes: &LocalNodes, locks: &[&str], extra: &[&str], script: &str) -> Child {
    let mut cmd = Command::new(BIN);
    cmd.arg("run").args(["--quarantine", "0s"]);
    for lock in locks {
        cmd.args(["--lock", lock]);
    }
    cmd.args(extra)
        .args(["--", "sh", "-c", script])
        .env("REDQUORUM_NODES", nodes.urls().join(","))
        .env_remove("REDQUORUM_OWNER")
        .env_remove("REDQUORUM_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd.spawn().expect("spawn redquorum run")
}

/// The run's exit status and stderr; a run that is not over within 30 s fails the test.
async fn finish(child: Child) -> (ExitStatus, String) {
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("redquorum run finished in time (a deadlock?)")
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A script that marks `dir/<who>.started`, waits (at most 10 s) for `dir/go`, then marks
/// `dir/<who>.ended` and appends to `dir/log`.
fn hold_until_go(dir: &Path, who: &str) -> String {
    let d = dir.display();
    format!(
        "echo start {who} >> {d}/log; touch {d}/{who}.started; i=0; \
         while [ ! -e {d}/go ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; \
         echo end {who} >> {d}/log; touch {d}/{who}.ended"
    )
}

fn marker(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

async fn appears(path: &Path) -> bool {
    common::eventually(Duration::from_secs(10), || async { path.exists() }).await
}

/// The log's lines, as "start a", "end a", ...
fn log(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_run_of_the_same_lock_re_enters_instead_of_waiting() {
    let nodes = common::nodes(3);
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    // The inner run waits at most 5 s: a run that did not re-enter exits 75, not 0.
    let inner = format!(
        "{BIN} run --quarantine 0s --lock nest --wait 5s -- \
         sh -c 'echo \"$REDQUORUM_OWNER $REDQUORUM_FENCE\" >> {seen}'",
        seen = seen.display()
    );
    let outer = format!(
        "echo \"$REDQUORUM_OWNER $REDQUORUM_FENCE\" > {seen}; {inner}",
        seen = seen.display()
    );
    let (status, stderr) = finish(run(&nodes, &["nest"], &["--wait", "5s"], &outer)).await;
    assert_eq!(status.code(), Some(0), "{stderr}");
    let lines: Vec<String> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    let seen: Vec<(&str, u64)> = lines
        .iter()
        .map(|l| {
            let (owner, fence) = l.split_once(' ').unwrap();
            (owner, fence.parse().unwrap())
        })
        .collect();
    assert_eq!(seen[0].0, seen[1].0, "the same owner");
    assert!(!seen[0].0.is_empty());
    // The lock's one fence, even where a master of the fresh deployment missed the outer hold
    // and granted the inner one a fresh lock: a quorum of masters agree on it.
    assert_eq!(seen[0].1, seen[1].1, "{seen:?}");
    // Both holds are released: the lock and its holds are gone.
    assert!(!common::held(&nodes, "nest").await);
    for i in 0..3 {
        assert_eq!(common::stored_token(&nodes, i, "nest").await, None);
    }
    // Without the owner, another run waits for the holder, as before.
    let outsider = format!(
        "env -u REDQUORUM_OWNER {BIN} run --quarantine 0s --lock nest --wait 300ms -- true"
    );
    let (status, stderr) = finish(run(&nodes, &["nest"], &[], &outsider)).await;
    assert_eq!(status.code(), Some(75), "{stderr}");
    // A bad owner id is a usage error, and runs nothing.
    let (status, stderr) = finish(run(&nodes, &["nest"], &["--owner", "a b"], "true")).await;
    assert_eq!(status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("owner"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_two_lets_two_runs_in_and_holds_the_third() {
    let nodes = common::nodes(3);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = ["--permits", "2", "--wait", "20s"];
    let a = run(&nodes, &["pool"], &args, &hold_until_go(d, "a"));
    let b = run(&nodes, &["pool"], &args, &hold_until_go(d, "b"));
    assert!(appears(&marker(d, "a.started")).await);
    assert!(
        appears(&marker(d, "b.started")).await,
        "two permits, two runs"
    );
    let c = run(&nodes, &["pool"], &args, &hold_until_go(d, "c"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!marker(d, "c.started").exists(), "a third run got in");
    std::fs::write(marker(d, "go"), "").unwrap();
    for child in [a, b, c] {
        let (status, stderr) = finish(child).await;
        assert_eq!(status.code(), Some(0), "{stderr}");
    }
    // The third started only after one of the first two ended.
    let lines = log(d);
    let c_start = lines.iter().position(|l| l == "start c").unwrap();
    let first_end = lines.iter().position(|l| l.starts_with("end ")).unwrap();
    assert!(first_end < c_start, "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_run_together_and_a_writer_waits_for_them() {
    let nodes = common::nodes(3);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let read = ["--read", "--wait", "20s"];
    let r1 = run(&nodes, &["doc"], &read, &hold_until_go(d, "r1"));
    let r2 = run(&nodes, &["doc"], &read, &hold_until_go(d, "r2"));
    assert!(appears(&marker(d, "r1.started")).await);
    assert!(
        appears(&marker(d, "r2.started")).await,
        "readers run together"
    );
    let w = run(
        &nodes,
        &["doc"],
        &["--write", "--wait", "20s"],
        &hold_until_go(d, "w"),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!marker(d, "w.started").exists(), "a writer beside readers");
    std::fs::write(marker(d, "go"), "").unwrap();
    for child in [r1, r2, w] {
        let (status, stderr) = finish(child).await;
        assert_eq!(status.code(), Some(0), "{stderr}");
    }
    let lines = log(d);
    let w_start = lines.iter().position(|l| l == "start w").unwrap();
    for reader in ["end r1", "end r2"] {
        let end = lines.iter().position(|l| l == reader).unwrap();
        assert!(end < w_start, "{lines:?}");
    }
    // --read with --write, or with --permits, is refused by the parser.
    let (status, _) = finish(run(&nodes, &["doc"], &["--read", "--write"], "true")).await;
    assert!(!status.success());
    let (status, _) = finish(run(&nodes, &["doc"], &["--read", "--permits", "2"], "true")).await;
    assert!(!status.success());
    let (status, _) = finish(run(&nodes, &["doc"], &["--permits", "0"], "true")).await;
    assert!(!status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_locks_are_held_together() {
    let nodes = common::nodes(3);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let env = d.join("env");
    let script = format!(
        "printf '%s|%s|%s' \"$REDQUORUM_LOCK\" \"$REDQUORUM_FENCE\" \"$REDQUORUM_TOKEN\" > {}; {}",
        env.display(),
        hold_until_go(d, "both")
    );
    let both = run(&nodes, &["b", "a"], &["--wait", "5s"], &script);
    assert!(appears(&marker(d, "both.started")).await);
    // Each name is held: a run of either one alone is refused.
    for name in ["a", "b"] {
        let (status, stderr) = finish(run(&nodes, &[name], &["--wait", "0s"], "true")).await;
        assert_eq!(status.code(), Some(75), "{name}: {stderr}");
    }
    std::fs::write(marker(d, "go"), "").unwrap();
    let (status, stderr) = finish(both).await;
    assert_eq!(status.code(), Some(0), "{stderr}");
    let seen = std::fs::read_to_string(&env).unwrap();
    let [names, fences, tokens] = seen.split('|').collect::<Vec<_>>()[..] else {
        panic!("{seen:?}");
    };
    assert_eq!(names, "a\nb", "one line per lock, in the order taken");
    assert_eq!(fences.lines().count(), 2);
    assert!(fences.lines().all(|f| f.parse::<u64>().is_ok()), "{fences}");
    assert_eq!(tokens.lines().count(), 2);
    for name in ["a", "b"] {
        assert!(!common::held(&nodes, name).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_release_see_the_kind_a_run_holds() {
    let nodes = common::nodes(3);
    let urls = nodes.urls().join(",");
    for kind in [&[][..], &["--read"], &["--write"], &["--permits", "2"]] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let name = format!("kinds{}", kind.join("").replace('-', "_"));
        // Inside the run, with nothing but the environment the run gives its command: status,
        // release with REDQUORUM_TOKEN, and status again.
        let script = format!(
            "{BIN} status --lock {name} > {d}/before; touch {d}/holding; i=0; \
             while [ ! -e {d}/go ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; \
             {BIN} release --lock {name}; echo $? > {d}/rc; {BIN} status --lock {name} > {d}/after; \
             t=$({BIN} acquire --lock {name}-other --ttl 60s) && {BIN} release --lock {name}-other --token $t; \
             echo $? > {d}/rc-other"
        );
        let child = run(&nodes, &[&name], kind, &script);
        assert!(
            common::eventually(Duration::from_secs(10), || async {
                dir.path().join("holding").exists()
            })
            .await,
            "{kind:?}: the command did not start"
        );
        // Outside the run, with no kind given: held, whatever the kind.
        let outside = Command::new(BIN)
            .args(["status", "--nodes", &urls, "--lock", &name])
            .env_remove("REDQUORUM_KIND")
            .env_remove("REDQUORUM_NODES")
            .env_remove("REDQUORUM_CONFIG")
            .output()
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&outside.stdout);
        assert!(outside.status.success(), "{kind:?}");
        assert!(
            text.starts_with(&format!("lock \"{name}\": held")),
            "{kind:?}: {text}"
        );
        std::fs::write(dir.path().join("go"), "").unwrap();
        let (status, stderr) = finish(child).await;
        assert!(status.success(), "{kind:?}: {stderr}");
        let file = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
        assert!(
            file("before").starts_with(&format!("lock \"{name}\": held")),
            "{kind:?}: {}",
            file("before")
        );
        assert_eq!(file("rc").trim(), "0", "{kind:?}: {stderr}");
        // A mutex taken by `acquire` inside the run is released as a mutex, not as the run's
        // kind.
        assert_eq!(file("rc-other").trim(), "0", "{kind:?}: {stderr}");
        assert!(
            !common::client(&nodes)
                .inspect(&format!("{name}-other"))
                .await
                .unwrap()
                .held,
            "{kind:?}"
        );
        // The release freed it: "released" while the lock stayed held was the defect.
        assert!(
            file("after").starts_with(&format!("lock \"{name}\": free")),
            "{kind:?}: {}",
            file("after")
        );
    }
}

/// The command releases the run's lock itself (`redquorum release --lock NAME`, one of a
/// multi-lock's names too) and runs on past several renewals: that is no lost lock, so the
/// command is not terminated and the run exits with its code. It used to be taken for a loss
/// (SIGTERM, exit 76), and a multi-lock run's release failed with 64, its token several lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_releases_the_runs_lock_itself_runs_on() {
    let nodes = common::nodes(3);
    for locks in [&["given-up"][..], &["given-up:b", "given-up:a"]] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let released = locks[locks.len() - 1];
        // TTL 600 ms: renewed every 200 ms, so the command outlives several renewals after
        // its release.
        // The other names of a multi-lock stay held and renewed meanwhile: `status` past
        // several renewals still finds each held.
        let others: Vec<&str> = locks.iter().copied().filter(|n| *n != released).collect();
        let status_of_others: String = others
            .iter()
            .map(|other| format!("{BIN} status --lock {other} >> {d}/others; "))
            .collect();
        let script = format!(
            "{BIN} release --lock {released}; echo $? > {d}/rc; sleep 1.5; {status_of_others}echo done > {d}/done"
        );
        let child = run(&nodes, locks, &["--ttl", "600ms"], &script);
        let (status, stderr) = finish(child).await;
        let file = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap_or_default();
        assert_eq!(file("rc").trim(), "0", "{locks:?}: {stderr}");
        assert_eq!(
            file("done").trim(),
            "done",
            "{locks:?}: terminated: {stderr}"
        );
        assert!(status.success(), "{locks:?}: {status:?}: {stderr}");
        assert!(
            stderr.contains("released the lock itself"),
            "{locks:?}: {stderr}"
        );
        let others_status = file("others");
        assert_eq!(
            others_status
                .lines()
                .filter(|l| l.contains(": held"))
                .count(),
            others.len(),
            "{locks:?}: {others_status}"
        );
        for name in locks {
            assert!(
                !common::held(&nodes, name).await,
                "{locks:?}: {name} still held"
            );
        }
    }
}

/// `status --owner ID` reads the name's key as a reentrant lock's: a run's lock shows its
/// holds, and a mutex taken by `acquire` (same key) shows as held with 0 reentrant holds. It
/// was called a "reentrant lock" with "0 hold(s)".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_with_an_owner_tells_a_mutex_from_a_reentrant_lock() {
    let nodes = common::nodes(3);
    let urls = nodes.urls().join(",");
    let acquired = Command::new(BIN)
        .args(["acquire", "--quarantine", "0s", "--nodes", &urls])
        .args(["--lock", "owned-mutex", "--ttl", "30s"])
        .env_remove("REDQUORUM_CONFIG")
        .output()
        .await
        .unwrap();
    assert!(acquired.status.success(), "{acquired:?}");
    let out = Command::new(BIN)
        .args(["status", "--nodes", &urls, "--lock", "owned-mutex"])
        .args(["--owner", "someone"])
        .env_remove("REDQUORUM_KIND")
        .env_remove("REDQUORUM_CONFIG")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("lock \"owned-mutex\": held (mutex or reentrant lock)"),
        "{text}"
    );
    assert_eq!(text.matches(", 0 reentrant hold(s)").count(), 3, "{text}");

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let script = format!("{BIN} status --lock owned-run --owner run-owner > {d}/inside");
    let child = run(&nodes, &["owned-run"], &["--owner", "run-owner"], &script);
    let (exit, stderr) = finish(child).await;
    assert!(exit.success(), "{stderr}");
    let inside = std::fs::read_to_string(dir.path().join("inside")).unwrap();
    assert_eq!(
        inside.matches(", 1 reentrant hold(s)").count(),
        3,
        "{inside}"
    );
}
