//! `redquorum bench` runs end to end and reports every figure (small sizes; no timing is asserted).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Stdio;

const BIN: &str = env!("CARGO_BIN_EXE_redquorum");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_reports_every_figure_and_no_violation() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.jsonl");
    let out = tokio::process::Command::new(BIN)
        // On one thread: the whole benchmark, the HTTP service included, runs on a
        // current-thread runtime (the other CLI tests use the default one).
        .args([
            "--threads",
            "1",
            "bench",
            "--pairs",
            "100",
            "--seconds",
            "1",
            "--json",
        ])
        .arg(&json)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("| figure | value | ratio to floor |"),
        "{stdout}"
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&json)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let find = |prefix: &str| {
        lines
            .iter()
            .find(|f| f["name"].as_str().unwrap().starts_with(prefix))
            .unwrap_or_else(|| panic!("no figure {prefix:?} in {lines:?}"))
    };
    let floor = find("floor")["value"].as_f64().unwrap();
    assert!(floor > 0.0);
    let lowest = find("floor: lowest reading")["value"].as_f64().unwrap();
    let highest = find("floor: highest reading")["value"].as_f64().unwrap();
    assert!(
        lowest > 0.0 && lowest <= floor && floor <= highest,
        "{lines:?}"
    );
    let spread = find("floor: highest reading over the lowest")["value"]
        .as_f64()
        .unwrap();
    assert!((spread - highest / lowest).abs() < 1e-9, "{spread}");
    for prefix in [
        "bound N=3: SET on every master at once",
        "bound N=5: SET on every master at once",
        "bound N=5: PUBLISH on every master after 1ms idle",
        "uncontended N=3: acquire+release pairs",
        "uncontended N=5: acquire p50",
        "throughput N=5",
        "contended N=5: 8 workers, one name, 1ms sections: handoff p50",
        "HTTP serve N=5: acquire+release pairs",
        "HTTP serve N=5: the library's pairs in the blocks between",
        "HTTP serve N=5: one exchange that asks no master",
    ] {
        let figure = find(prefix);
        assert!(figure["value"].as_f64().unwrap() > 0.0, "{figure}");
        assert!(figure["ratio_to_floor"].as_f64().unwrap() > 0.0, "{figure}");
    }
    // What the HTTP service adds to the library, measured in blocks that alternate: a
    // difference of medians (either sign, on a busy machine) in round trips, and a ratio of
    // rates.
    let above = find("HTTP serve N=5: acquire p50 above the library's");
    assert!(above["value"].as_f64().unwrap().is_finite(), "{above}");
    assert!(
        above["ratio_to_floor"].as_f64().unwrap().is_finite(),
        "{above}"
    );
    // The masters are the bench's own: what the work cost their CPUs, and this process's, is
    // read. A pair is two fan-outs, each a script at least as heavy as one SET.
    for prefix in [
        "bound N=3: the masters' CPU per SET on every master",
        "bound N=5: the masters' CPU per SET on every master",
        "uncontended N=3: the masters' CPU per pair",
        "uncontended N=5: the masters' CPU per pair",
        "uncontended N=5: this process's CPU per pair",
        "HTTP serve N=5: this process's CPU per pair over HTTP",
        "HTTP serve N=5: the masters' CPU per pair over HTTP",
        "HTTP serve N=5: this process's CPU per pair through the library",
        "HTTP serve N=5: the masters' CPU per pair through the library",
    ] {
        let figure = find(prefix);
        assert!(figure["value"].as_f64().unwrap() > 0.0, "{figure}");
        assert!(figure["ratio_to_floor"].is_null(), "{figure}");
    }
    let in_sets = find("uncontended N=5: the masters' CPU per pair, in SETs on every master");
    assert!(in_sets["value"].as_f64().unwrap() > 1.0, "{in_sets}");
    let over = find("HTTP serve N=5: pairs/s over the library's");
    assert!(over["value"].as_f64().unwrap() > 0.0, "{over}");
    assert_eq!(
        find("mutual-exclusion violations")["value"].as_f64(),
        Some(0.0)
    );
}

#[tokio::test]
async fn an_absurd_thread_count_is_refused_before_anything_runs() {
    let out = tokio::process::Command::new(BIN)
        .args(["--threads", "5000", "bench"])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    // A usage error (EX_USAGE), like any other bad argument.
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--threads"), "{stderr}");
    // Refused at parsing: no masters were started, no table printed.
    assert!(out.stdout.is_empty());
}
