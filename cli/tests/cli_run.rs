//! `redquorum run`, exercised as a user would: the real binary against real redis-server processes.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop
)]

// The harness the library's tests use (local masters, test-tuned clients), shared as is.
#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use redquorum_testkit::LocalNodes;
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_redquorum");

fn run(nodes: &LocalNodes, lock: &str, extra: &[&str], script: &str) -> Child {
    Command::new(BIN)
        .arg("run")
        .args([
            "--nodes",
            &nodes.urls().join(","),
            "--lock",
            lock,
            "--quarantine",
            "0s",
        ])
        .args(extra)
        .args(["--", "sh", "-c", script])
        // Each run is its own holder, whatever the caller of the tests holds.
        .env_remove("REDQUORUM_OWNER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn redquorum run")
}

async fn finish(child: Child) -> (ExitStatus, String) {
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("redquorum run finished")
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Whether the command wrote "started" to `log` within 5 s.
async fn started(log: &Path) -> bool {
    common::eventually(Duration::from_secs(5), || async {
        read(log).contains("started")
    })
    .await
}

/// Sends `signal` to the `redquorum run` process.
fn send(child: &Child, signal: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
    nix::sys::signal::kill(pid, signal).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_sees_the_lock_and_its_exit_code_is_passed_on() {
    let nodes = common::nodes(3);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("env");
    let script = format!(
        "echo \"$REDQUORUM_LOCK $REDQUORUM_TOKEN $REDQUORUM_FENCE\" > {}; exit 7",
        out.display()
    );
    let (status, stderr) = finish(run(&nodes, "env-check", &[], &script)).await;
    assert_eq!(status.code(), Some(7), "{stderr}");
    let seen = read(&out);
    let words: Vec<&str> = seen.split_whitespace().collect();
    let [name, token, fence] = words[..] else {
        panic!("expected three words, got {seen:?}");
    };
    assert_eq!(name, "env-check");
    assert_eq!(token.len(), 32, "{seen}");
    assert!(token.chars().all(|c| c.is_ascii_hexdigit()));
    // The fencing token matches the counter a quorum of nodes recorded for the name (a master
    // of a fresh deployment may have missed the grant: the acquire answers once a quorum
    // granted), and no node recorded a higher one.
    let fence: u64 = fence.parse().expect("a number");
    let mut counters = Vec::new();
    for i in 0..3 {
        let counter: Option<u64> = redis::AsyncCommands::get(
            &mut common::raw(&nodes, i).await,
            "redquorum:fence:env-check",
        )
        .await
        .unwrap();
        counters.push(counter);
    }
    assert!(
        counters.iter().filter(|c| **c == Some(fence)).count() >= 2,
        "{counters:?} {fence}"
    );
    assert!(
        counters.iter().all(|c| c.is_none_or(|c| c <= fence)),
        "{counters:?}"
    );
    // Released once the command exited.
    let info = common::client(&nodes).inspect("env-check").await.unwrap();
    assert!(!info.held);
    for i in 0..3 {
        assert_eq!(common::lock_count(&nodes, i).await, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_on_one_lock_take_turns() {
    let nodes = common::nodes(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = |who: &str| {
        format!(
            "echo start {who} $(date +%s%N) >> {log}; sleep 0.3; echo end {who} $(date +%s%N) >> {log}",
            log = log.display()
        )
    };
    let args = ["--wait", "10s", "--ttl", "1s"];
    let a = run(&nodes, "serial", &args, &script("a"));
    let b = run(&nodes, "serial", &args, &script("b"));
    let ((sa, ea), (sb, eb)) = tokio::join!(finish(a), finish(b));
    assert!(sa.success(), "{ea}");
    assert!(sb.success(), "{eb}");
    let lines: Vec<Vec<String>> = read(&log)
        .lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    // Each run's start is followed by its own end: the outputs do not interleave...
    assert_eq!(lines[0][0], "start");
    assert_eq!(lines[1][..2], ["end".to_owned(), lines[0][1].clone()]);
    assert_eq!(lines[2][0], "start");
    assert_eq!(lines[3][..2], ["end".to_owned(), lines[2][1].clone()]);
    assert_ne!(lines[0][1], lines[2][1]);
    // ...and the second started only after the first ended.
    let t = |i: usize| lines[i][2].parse::<u128>().unwrap();
    assert!(t(1) <= t(2), "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_zero_on_a_held_lock_runs_nothing_and_exits_75() {
    let nodes = common::nodes(3);
    let holder = common::client(&nodes);
    let lock = holder
        .try_acquire("busy", &common::opts(10_000))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let started = Instant::now();
    let (status, stderr) = finish(run(
        &nodes,
        "busy",
        &["--wait", "0s"],
        &format!("touch {}", marker.display()),
    ))
    .await;
    assert_eq!(status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("not obtained"), "{stderr}");
    assert!(!marker.exists(), "the command ran without the lock");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The holder is untouched: its quorum still holds it, and no master holds anything else.
    // (A master of a fresh deployment may have missed the holder's grant: the acquire answers
    // once a quorum granted.)
    assert!(common::token_on_quorum(&nodes, "busy", lock.token()).await);
    for i in 0..3 {
        let stored = common::stored_token(&nodes, i, "busy").await;
        assert!(
            stored.is_none() || stored.as_deref() == Some(lock.token()),
            "{stored:?}"
        );
    }
    lock.release().await.unwrap();
}

/// SIGTERM while the run waits for a held lock ends the wait: the command is not run, the run
/// exits 128+15, and once the holder releases, the lock is free (the run left no place in line
/// to be handed to). Before the run listened for signals only once it held the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_waiting_for_the_lock_gives_up_the_wait() {
    let nodes = common::nodes(3);
    let holder = common::client(&nodes);
    let lock = holder
        .try_acquire("awaited", &common::opts(10_000))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let child = run(
        &nodes,
        "awaited",
        &["--wait", "20s"],
        &format!("touch {}", marker.display()),
    );
    // Waiting: its place is in the lock's line on the masters.
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            let queued: i64 = redis::cmd("ZCARD")
                .arg("redquorum:queue:awaited")
                .query_async(&mut common::raw(&nodes, 0).await)
                .await
                .unwrap();
            queued > 0
        })
        .await,
        "the run never queued for the lock"
    );
    send(&child, nix::sys::signal::Signal::SIGTERM);
    let (status, stderr) = finish(child).await;
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("before the lock was taken"), "{stderr}");
    assert!(!marker.exists(), "the command ran");
    lock.release().await.unwrap();
    // Nobody took it over: the run left the line.
    assert!(
        !common::held(&nodes, "awaited").await,
        "the lock was handed to the run that gave up"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_terminates_the_command_and_exits_76() {
    let mut nodes = common::nodes(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = format!(
        "trap 'echo terminated >> {log}; exit 0' TERM; echo started >> {log}; while :; do sleep 0.05; done",
        log = log.display()
    );
    let child = run(
        &nodes,
        "lost",
        &["--ttl", "600ms", "--kill-after", "2s"],
        &script,
    );
    assert!(started(&log).await, "the command did not start");
    nodes.kill(0).unwrap();
    nodes.kill(1).unwrap();
    let killed = Instant::now();
    let (status, stderr) = finish(child).await;
    assert_eq!(status.code(), Some(76), "{stderr}");
    assert!(stderr.contains("lost"), "{stderr}");
    assert!(
        read(&log).contains("terminated"),
        "the command never got SIGTERM"
    );
    // Within the lock's validity (at most the TTL) plus the command's prompt exit.
    assert!(
        killed.elapsed() < Duration::from_secs(2),
        "{:?}",
        killed.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let mut nodes = common::nodes(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = format!(
        "trap '' TERM; echo started >> {}; while :; do sleep 0.05; done",
        log.display()
    );
    let child = run(
        &nodes,
        "stubborn",
        &["--ttl", "600ms", "--kill-after", "300ms"],
        &script,
    );
    assert!(started(&log).await, "the command did not start");
    nodes.kill(0).unwrap();
    nodes.kill(1).unwrap();
    let (status, stderr) = finish(child).await;
    assert_eq!(status.code(), Some(76), "{stderr}");
    assert!(stderr.contains("killing it"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_is_passed_on_and_the_lock_released_after_the_command_exits() {
    let nodes = common::nodes(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = format!(
        "trap 'sleep 0.2; echo got-term >> {log}; exit 42' TERM; echo started >> {log}; while :; do sleep 0.05; done",
        log = log.display()
    );
    let child = run(&nodes, "signalled", &[], &script);
    assert!(started(&log).await, "the command did not start");
    send(&child, nix::sys::signal::Signal::SIGTERM);
    // While the command is still cleaning up, the lock is still held.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(common::held(&nodes, "signalled").await);
    let (status, stderr) = finish(child).await;
    assert_eq!(status.code(), Some(42), "{stderr}");
    assert!(read(&log).contains("got-term"));
    assert!(!common::held(&nodes, "signalled").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_command_exits_127_and_releases() {
    let nodes = common::nodes(3);
    let out = Command::new(BIN)
        .args([
            "run",
            "--nodes",
            &nodes.urls().join(","),
            "--lock",
            "nocmd",
            "--quarantine",
            "0s",
            "--",
            "/nonexistent/command",
        ])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(!common::held(&nodes, "nocmd").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_come_from_flag_then_environment_then_config_file() {
    let nodes = common::nodes(3);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("redquorum.toml");
    let quoted: Vec<String> = nodes.urls().iter().map(|u| format!("{u:?}")).collect();
    std::fs::write(&config, format!("nodes = [{}]\n", quoted.join(", "))).unwrap();
    let bad = "redis://127.0.0.1:1";
    let status = |args: Vec<String>, env: Vec<(&str, String)>| {
        let mut cmd = Command::new(BIN);
        cmd.args([
            "run",
            "--lock",
            "sourced",
            "--wait",
            "0s",
            "--quarantine",
            "0s",
        ])
        .args(args)
        .args(["--", "true"])
        .env_remove("REDQUORUM_NODES")
        .env_remove("REDQUORUM_CONFIG")
        .stdin(Stdio::null())
        .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        async move { cmd.status().await.unwrap().code() }
    };
    let cfg = config.display().to_string();
    // The config file alone works.
    assert_eq!(
        status(vec!["--config".into(), cfg.clone()], vec![]).await,
        Some(0)
    );
    assert_eq!(
        status(vec![], vec![("REDQUORUM_CONFIG", cfg.clone())]).await,
        Some(0)
    );
    // The environment beats the config file, and the flag beats the environment.
    assert_eq!(
        status(
            vec![],
            vec![
                ("REDQUORUM_CONFIG", cfg.clone()),
                ("REDQUORUM_NODES", bad.into())
            ]
        )
        .await,
        // No master there: no quorum can grant it (EX_UNAVAILABLE).
        Some(69)
    );
    assert_eq!(
        status(
            vec!["--nodes".into(), nodes.urls().join(",")],
            vec![("REDQUORUM_NODES", bad.into())]
        )
        .await,
        Some(0)
    );
    // Nothing at all, a bad file, or a malformed URL: usage errors.
    assert_eq!(status(vec![], vec![]).await, Some(64));
    std::fs::write(&config, "nodez = []\n").unwrap();
    assert_eq!(status(vec!["--config".into(), cfg], vec![]).await, Some(64));
    assert_eq!(
        status(vec!["--nodes".into(), "redis//broken".into()], vec![]).await,
        Some(64)
    );
}

#[tokio::test]
async fn argument_errors_exit_with_ex_usage_and_help_succeeds() {
    let outcome = |args: &'static [&'static str]| async move {
        let out = Command::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Caught by the argument parser: a malformed duration, an unknown flag, a missing
    // required flag, an unknown command. Each says what is wrong and runs nothing.
    for (args, names) in [
        (
            &["run", "--lock", "x", "--ttl", "abc", "--", "true"][..],
            "--ttl",
        ),
        (
            &["--bogus", "run", "--lock", "x", "--ttl", "1s", "--", "true"][..],
            "--bogus",
        ),
        (&["run", "--ttl", "1s", "--", "true"][..], "--lock"),
        (&["nosuch"][..], "nosuch"),
    ] {
        let (code, stdout, stderr) = outcome(args).await;
        assert_eq!(code, Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(names), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
    }
    // Asking for help or the version is not an error.
    let (code, stdout, _) = outcome(&["run", "--help"]).await;
    assert_eq!(code, Some(0));
    assert!(stdout.contains("--lock"), "{stdout}");
    let (code, stdout, _) = outcome(&["--version"]).await;
    assert_eq!(code, Some(0));
    assert!(stdout.contains(env!("CARGO_PKG_VERSION")), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_signal_that_would_end_it_is_passed_on_and_the_lock_released_after() {
    use nix::sys::signal::Signal;
    let nodes = common::nodes(3);
    let dir = tempfile::tempdir().unwrap();
    for signal in [
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGALRM,
    ] {
        let name = signal.as_str().trim_start_matches("SIG");
        let log = dir.path().join(name);
        let script = format!(
            "trap 'echo got-{name} >> {log}; exit 42' {name}; echo started >> {log}; while :; do sleep 0.05; done",
            log = log.display()
        );
        let lock = format!("signalled-{name}");
        let child = run(&nodes, &lock, &[], &script);
        assert!(started(&log).await, "{name}: the command did not start");
        send(&child, signal);
        // redquorum outlives the signal, waits for the command and exits with its code...
        let (status, stderr) = finish(child).await;
        assert_eq!(status.code(), Some(42), "{name}: {status:?} {stderr}");
        assert!(read(&log).contains(&format!("got-{name}")), "{name}");
        // ...and releases the lock only then.
        assert!(!common::held(&nodes, &lock).await, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_outright_takes_its_command_with_it() {
    let nodes = common::nodes(3);
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let script = format!(
        "echo $$ > {}.tmp && mv {0}.tmp {0}; while :; do sleep 0.05; done",
        pid_file.display()
    );
    let mut child = run(&nodes, "killed", &["--ttl", "2s"], &script);
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            read(&pid_file).ends_with('\n')
        })
        .await
    );
    let command: u32 = read(&pid_file).trim().parse().unwrap();
    // SIGKILL: redquorum can neither pass it on nor release the lock.
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let running = || {
        std::fs::read_to_string(format!("/proc/{command}/stat"))
            .is_ok_and(|stat| !stat.contains(") Z "))
    };
    assert!(
        common::eventually(Duration::from_secs(5), || async { !running() }).await,
        "the command ran on without the lock after redquorum was killed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mistyped_flag_is_refused_before_any_lock_is_taken() {
    let nodes = common::nodes(3);
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let urls = nodes.urls().join(",");
    let touch = format!("touch {}", marker.display());
    let outcome = |args: Vec<&str>| {
        let mut cmd = Command::new(BIN);
        cmd.args([
            "run",
            "--nodes",
            &urls,
            "--lock",
            "typo",
            "--quarantine",
            "0s",
        ])
        .args(args)
        .env_remove("REDQUORUM_OWNER")
        .stdin(Stdio::null());
        async move {
            let out = cmd.output().await.unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    };
    // `--tll` for `--ttl`, before and without `--`: refused as a flag, not run as the command.
    for args in [
        vec!["--tll", "5s", "--", "sh", "-c", &touch],
        vec!["--tll", "5s", "sh", "-c", &touch],
    ] {
        let (code, stderr) = outcome(args.clone()).await;
        assert_eq!(code, Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains("unexpected argument '--tll'"), "{stderr}");
        assert!(!marker.exists(), "{args:?}: the command ran");
        for i in 0..3 {
            assert_eq!(
                common::lock_count(&nodes, i).await,
                0,
                "{args:?}: a lock was taken"
            );
        }
    }
    // The command's own flags are its own, after `--` or after its first word.
    for args in [
        vec!["--", "sh", "-c", &touch, "--not-a-run-flag"],
        vec!["sh", "-c", &touch, "--not-a-run-flag"],
    ] {
        let (code, stderr) = outcome(args.clone()).await;
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert!(marker.exists(), "{args:?}");
        std::fs::remove_file(&marker).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_command_still_ends_on_sigint_and_the_lock_is_released() {
    let nodes = common::nodes(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    // Stopped as a command that read the terminal from the background would be (SIGTTIN).
    let script = format!(
        "echo started >> {log}; kill -STOP $$; echo continued >> {log}",
        log = log.display()
    );
    let child = run(&nodes, "stopped", &[], &script);
    assert!(started(&log).await, "the command did not start");
    // Stopped, the command acts on nothing but SIGKILL until it is continued.
    tokio::time::sleep(Duration::from_millis(100)).await;
    send(&child, nix::sys::signal::Signal::SIGINT);
    let (status, stderr) = finish(child).await;
    // The shell ends of SIGINT once continued, before it says it continued.
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(!read(&log).contains("continued"));
    assert!(!common::held(&nodes, "stopped").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_durable_from_the_file_is_overridden_by_an_explicit_false() {
    // The test masters keep nothing across a restart: none counts when durability is required.
    let nodes = common::nodes(3);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("redquorum.toml");
    let quoted: Vec<String> = nodes.urls().iter().map(|u| format!("{u:?}")).collect();
    std::fs::write(
        &config,
        format!("nodes = [{}]\nrequire_durable = true\n", quoted.join(", ")),
    )
    .unwrap();
    let cfg = config.display().to_string();
    let code = |args: Vec<&str>, env: Option<&str>| {
        let mut cmd = Command::new(BIN);
        cmd.args([
            "run",
            "--lock",
            "durable",
            "--wait",
            "0s",
            "--quarantine",
            "0s",
        ])
        .args(["--config", &cfg])
        .args(args)
        .args(["--", "true"])
        .env_remove("REDQUORUM_NODES")
        .env_remove("REDQUORUM_REQUIRE_DURABLE")
        .env_remove("REDQUORUM_OWNER")
        .stdin(Stdio::null())
        .stderr(Stdio::null());
        if let Some(value) = env {
            cmd.env("REDQUORUM_REQUIRE_DURABLE", value);
        }
        async move { cmd.status().await.unwrap().code() }
    };
    // The file's true: no master can vote (EX_UNAVAILABLE).
    assert_eq!(code(vec![], None).await, Some(69));
    // An explicit false from the environment or the flag beats the file...
    assert_eq!(code(vec![], Some("false")).await, Some(0));
    assert_eq!(code(vec!["--require-durable=false"], None).await, Some(0));
    // ...and the flag beats the environment, either way.
    assert_eq!(
        code(vec!["--require-durable=false"], Some("true")).await,
        Some(0)
    );
    assert_eq!(
        code(vec!["--require-durable"], Some("false")).await,
        Some(69)
    );
}

#[tokio::test]
async fn help_inside_a_run_does_not_show_the_token_or_the_owner() {
    // The environment a run gives its command.
    let secret = "0123456789abcdef0123456789abcdef";
    for subcommand in ["release", "run", "status"] {
        let out = Command::new(BIN)
            .args([subcommand, "--help"])
            .env("REDQUORUM_TOKEN", secret)
            .env("REDQUORUM_OWNER", format!("owner-{secret}"))
            .output()
            .await
            .unwrap();
        assert!(out.status.success());
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("REDQUORUM_"), "{help}");
        assert!(!help.contains(secret), "{subcommand} --help: {help}");
    }
}
