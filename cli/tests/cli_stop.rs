//! SIGTERM (a job's timeout, `kill`) and SIGINT (Ctrl-C) stop `bench` and `demo` and the
//! masters they started, with the shell's exit code for the signal, where the process used to
//! end at once and leave its masters running; SIGKILL, which the process cannot catch, ends its
//! masters too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod processes;

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use processes::{alive, children, start};

/// Starts the command `args`, waits until its five masters run, sends it each signal in turn
/// (a new process each time), and checks its exit code and its log (for the signals it
/// catches) and that its masters are gone.
async fn stops_with_its_masters(args: &[&str]) {
    for (signal, code) in [
        (Signal::SIGTERM, Some(143)),
        (Signal::SIGINT, Some(130)),
        (Signal::SIGKILL, None),
    ] {
        let command = start(args);
        let pid = command.id().unwrap();
        // Its five masters, once all of them run (starting them takes a moment).
        let started = Instant::now();
        let masters = loop {
            let masters = children(pid, "redis-server");
            if masters.len() == 5 {
                break masters;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{args:?} started {} masters in 30 s",
                masters.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).unwrap();
        let out = tokio::time::timeout(Duration::from_secs(30), command.wait_with_output())
            .await
            .expect("the command did not exit within 30 s of the signal")
            .unwrap();
        let (status, stderr) = (out.status, String::from_utf8_lossy(&out.stderr));
        assert_eq!(status.code(), code, "{args:?} {signal}: {stderr}");
        if code.is_some() {
            assert!(stderr.contains(signal.as_str()), "{stderr}");
        } else {
            // Killed outright, the command stopped nothing: the kernel ends the masters with
            // it, a moment later.
            let deadline = Instant::now() + Duration::from_secs(10);
            while masters.iter().any(|m| alive(*m)) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let running: Vec<u32> = masters.into_iter().filter(|m| alive(*m)).collect();
        assert!(
            running.is_empty(),
            "{args:?} {signal}: masters {running:?} still run"
        );
    }
}

#[tokio::test]
async fn a_stopped_bench_stops_the_masters_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.jsonl");
    stops_with_its_masters(&["bench", "--seconds", "60", "--json", json.to_str().unwrap()]).await;
}

#[tokio::test]
async fn a_stopped_demo_stops_the_masters_it_started() {
    // More pairs than it makes in the test's time: the signal comes while it runs.
    stops_with_its_masters(&["demo", "--pairs", "4000000000"]).await;
}
