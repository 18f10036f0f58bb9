//! `Client::doctor`, `redquorum doctor` and `GET /v1/doctor` against real redis-server
//! processes, each misconfiguration made for real: a replica, one server listed twice, an
//! evicting memory policy, a user the ACL denies, no persistence, quarantine, a dead master.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The harness the library's tests use (local masters, test-tuned clients), shared as is.
#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use redquorum::{Client, DoctorReport, LockOptions, Severity};
use redquorum_cli::server::{AppOptions, BearerToken};
use redquorum_testkit::LocalNodes;
use serde_json::Value;
use tower::ServiceExt;

const BIN: &str = env!("CARGO_BIN_EXE_redquorum");

/// How long a loop that waits for the client to notice something may run.
const LOOP_LIMIT: Duration = Duration::from_secs(30);

const DURABLE: [&str; 6] = [
    "--appendonly",
    "yes",
    "--appendfsync",
    "always",
    "--maxmemory-policy",
    "noeviction",
];

/// A client on `urls` with quarantine off, as the tests not about quarantine want.
fn client(urls: &[String]) -> Client {
    Client::builder()
        .nodes(urls)
        .quarantine(Duration::ZERO)
        .build()
        .unwrap()
}

/// The problem codes found on master `i`.
fn codes(report: &DoctorReport, i: usize) -> Vec<&str> {
    report.nodes[i].problems.iter().map(|p| p.code).collect()
}

/// `redquorum doctor --nodes <urls> <extra...>`: (exit code, stdout, stderr).
fn doctor_cli(urls: &[String], extra: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("doctor")
        .arg("--nodes")
        .arg(urls.join(","))
        .args(extra)
        .env_remove("REDQUORUM_NODES")
        .env_remove("REDQUORUM_CONFIG")
        .env_remove("REDQUORUM_QUARANTINE")
        .env_remove("REDQUORUM_REQUIRE_DURABLE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `--json` report.
fn doctor_json(urls: &[String], extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = doctor_cli(urls, &args);
    let json = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("--json printed no JSON ({e}): {stdout} / {stderr}"));
    (code, json)
}

/// The password `LocalNodes` gave its masters, from a URL `redis://:PASSWORD@host:port`.
fn password(nodes: &LocalNodes) -> String {
    let url = nodes.url(0);
    let rest = url.strip_prefix("redis://:").unwrap();
    rest[..rest.find('@').unwrap()].to_owned()
}

/// A `redis-server` started by a test, killed when dropped.
struct Server {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        for _ in 0..5 {
            let port = rand::random_range(20_000..32_000u16);
            let mut child = Command::new(redquorum_testkit::find_redis_server().unwrap())
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(dir.path())
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(5) {
                if child.try_wait().unwrap().is_some() {
                    break; // the port was taken: try another
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Server {
                        child,
                        port,
                        _dir: dir,
                    };
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("could not start redis-server with {args:?}");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_noeviction_deployment_is_safe() {
    let nodes = LocalNodes::start_with(3, &DURABLE).unwrap();
    let report = client(&nodes.urls()).doctor().await;
    assert!(report.safe, "{report:#?}");
    assert_eq!((report.usable, report.quorum), (3, 2));
    for n in &report.nodes {
        assert!(n.reachable && n.problems.is_empty(), "{n:#?}");
        assert_eq!(n.role.as_deref(), Some("master"));
        assert!(n.redis_version.is_some() && n.run_id.is_some());
        assert!(n.durable);
        assert_eq!(n.maxmemory_policy.as_deref(), Some("noeviction"));
        assert_eq!(n.acl_user.as_deref(), Some("default"));
        assert!(n.acl_missing.is_empty());
        assert!(n.rtt.is_some_and(|rtt| rtt < Duration::from_secs(1)));
        // Same host, same clock: the offset is within the round trip (and some scheduling).
        let offset = n.clock_offset_micros.unwrap();
        assert!(offset.abs() < 100_000, "{offset}");
        assert_eq!(
            n.quarantined_for, None,
            "durable masters are never quarantined"
        );
    }

    // The binary: a table with one row per master, exit 0; the default quarantine does not
    // matter to durable masters.
    let (code, stdout, stderr) = doctor_cli(&nodes.urls(), &[]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    for i in 0..3 {
        assert!(
            stdout.contains(&format!("127.0.0.1:{}", nodes.port(i))),
            "{stdout}"
        );
    }
    assert!(stdout.contains("aof always") && stdout.contains("noeviction"));
    assert!(stdout.contains("safe: 3 of 3"), "{stdout}");
    // The table shows a run id's start only; --json has it whole.
    let run_id = report.nodes[0].run_id.as_deref().unwrap();
    assert!(!stdout.contains(run_id));

    let (code, json) = doctor_json(&nodes.urls(), &[]);
    assert_eq!(code, 0);
    assert_eq!(json["safe"], true);
    assert_eq!(json["nodes"].as_array().unwrap().len(), 3);
    assert_eq!(json["nodes"][0]["run_id"], run_id);
    assert_eq!(json["nodes"][0]["durable"], true);
    assert!(json["nodes"][0]["rtt_us"].is_u64());
    assert!(json["nodes"][0]["clock_offset_us"].is_i64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_an_error() {
    let nodes = LocalNodes::start_with(2, &DURABLE).unwrap();
    let pass = password(&nodes);
    let master = nodes.port(0).to_string();
    let replica = Server::start(&[
        "--replicaof",
        "127.0.0.1",
        &master,
        "--masterauth",
        &pass,
        "--maxmemory-policy",
        "noeviction",
    ]);
    let urls = vec![nodes.url(0), nodes.url(1), replica.url()];
    let report = client(&urls).doctor().await;
    assert!(!report.safe);
    assert_eq!(report.nodes[2].role.as_deref(), Some("slave"));
    assert!(codes(&report, 2).contains(&"replica"), "{report:#?}");
    assert!(codes(&report, 0).is_empty() && codes(&report, 1).is_empty());

    let (code, stdout, _) = doctor_cli(&urls, &["--quarantine", "0s"]);
    assert_eq!(code, 78, "{stdout}");
    assert!(stdout.contains("is a replica"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_server_twice_is_an_error() {
    let nodes = LocalNodes::start_with(3, &DURABLE).unwrap();
    // Two names for one server: the builder cannot tell, the run id can.
    let alias = nodes.url(0).replace("127.0.0.1", "localhost");
    let mut urls = nodes.urls();
    urls.push(alias);
    let report = client(&urls).doctor().await;
    assert!(!report.safe);
    assert_eq!(report.nodes[3].run_id, report.nodes[0].run_id);
    assert_eq!(codes(&report, 3), ["same_server"], "{report:#?}");
    assert!(codes(&report, 0).is_empty(), "the first address counts");
    assert_eq!(report.usable, 3);
    let message = &report.nodes[3].problems[0].message;
    assert!(
        message.contains(&format!("127.0.0.1:{}", nodes.port(0))),
        "{message}"
    );

    let (code, json) = doctor_json(&urls, &["--quarantine", "0s"]);
    assert_eq!(code, 78);
    assert_eq!(json["safe"], false);
    assert_eq!(json["nodes"][3]["problems"][0]["code"], "same_server");
    assert_eq!(json["nodes"][3]["problems"][0]["severity"], "error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_memory_policy_is_an_error() {
    let nodes = LocalNodes::start_with(
        3,
        &[
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--maxmemory-policy",
            "allkeys-lru",
        ],
    )
    .unwrap();
    let report = client(&nodes.urls()).doctor().await;
    assert!(!report.safe);
    for i in 0..3 {
        assert_eq!(codes(&report, i), ["eviction"], "{report:#?}");
        assert_eq!(report.nodes[i].problems[0].severity, Severity::Error);
    }
    assert!(report.nodes[0].problems[0].message.contains("allkeys-lru"));

    let (code, stdout, _) = doctor_cli(&nodes.urls(), &[]);
    assert_eq!(code, 78);
    assert!(
        stdout.contains("allkeys-lru") && stdout.contains("noeviction"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_acl_permission_is_an_error_naming_it() {
    let nodes = LocalNodes::start_with(3, &DURABLE).unwrap();
    let mut admin = common::raw(&nodes, 2).await;
    // No EVALSHA, and no ACL either, as a restricted user usually has: doctor tries each
    // command on a scratch key instead of asking ACL DRYRUN.
    let () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "locks",
            "on",
            ">pw",
            "+@all",
            "-evalsha",
            "-acl",
            "~redquorum:*",
            "&*",
        ])
        .query_async(&mut admin)
        .await
        .unwrap();
    // Every command, but keys of another prefix and no channels: DRYRUN is allowed here.
    let () = redis::cmd("ACL")
        .arg(&["SETUSER", "other", "on", ">pw", "+@all", "~other:*"])
        .query_async(&mut admin)
        .await
        .unwrap();
    let as_user = |user: &str| {
        let mut urls = nodes.urls();
        urls[2] = format!("redis://{user}:pw@127.0.0.1:{}", nodes.port(2));
        urls
    };

    let urls = as_user("locks");
    let report = client(&urls).doctor().await;
    assert!(!report.safe);
    assert_eq!(report.nodes[2].acl_missing, ["EVALSHA"], "{report:#?}");
    assert_eq!(report.nodes[2].acl_user.as_deref(), Some("locks"));
    assert_eq!(codes(&report, 2), ["acl"]);
    assert!(report.nodes[2].problems[0].message.contains("+evalsha"));
    // The scratch key is gone.
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("redquorum:*")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
    let (code, stdout, _) = doctor_cli(&urls, &["--quarantine", "0s"]);
    assert_eq!(code, 78);
    assert!(stdout.contains("EVALSHA"), "{stdout}");

    let report = client(&as_user("other")).doctor().await;
    assert!(!report.safe);
    assert_eq!(
        report.nodes[2].acl_missing,
        ["~redquorum:*", "&redquorum:*"],
        "{report:#?}"
    );
    assert_eq!(report.nodes[2].acl_user.as_deref(), Some("other"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_persistence_is_an_error_unless_accepted() {
    let nodes = LocalNodes::start(3).unwrap();
    // Fencing tokens need counters that survive a restart: without them the deployment is not
    // safe for fencing, and says so.
    let report = client(&nodes.urls()).doctor().await;
    assert!(!report.safe, "{report:#?}");
    for i in 0..3 {
        assert_eq!(codes(&report, i), ["not_durable"]);
        assert_eq!(report.nodes[i].problems[0].severity, Severity::Error);
        assert_eq!(report.nodes[i].aof_enabled, Some(false));
    }
    let (code, stdout, _) = doctor_cli(&nodes.urls(), &[]);
    assert_eq!(code, 78, "{stdout}");
    assert!(
        stdout.contains("error") && stdout.contains("AOF is off"),
        "{stdout}"
    );
    // Accepted: locks stay safe through quarantine; a warning, and exit 0.
    let report = client(&nodes.urls()).doctor().await.allowing_non_durable();
    assert!(report.safe, "{report:#?}");
    assert_eq!(report.nodes[0].problems[0].severity, Severity::Warning);
    let (code, stdout, _) = doctor_cli(&nodes.urls(), &["--allow-non-durable"]);
    assert_eq!(code, 0, "warnings alone are safe: {stdout}");
    assert!(
        stdout.contains("warning") && stdout.contains("AOF is off"),
        "{stdout}"
    );

    let strict = Client::builder()
        .nodes(nodes.urls())
        .quarantine(Duration::ZERO)
        .require_durable(true)
        .build()
        .unwrap();
    let report = strict.doctor().await;
    assert!(!report.safe);
    assert_eq!(report.nodes[0].problems[0].severity, Severity::Error);
    assert_eq!(report.usable, 0);
    assert_eq!(report.problems[0].code, "quorum");
    let (code, json) = doctor_json(&nodes.urls(), &["--quarantine", "0s", "--require-durable"]);
    assert_eq!(code, 78);
    assert_eq!(json["safe"], false);
    assert_eq!(json["problems"][0]["code"], "quorum");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_is_a_warning_with_the_time_left() {
    let mut nodes = LocalNodes::start(3).unwrap();
    let client = Client::new(nodes.urls()).unwrap();
    // A new deployment: nobody is quarantined.
    let report = client.doctor().await;
    assert!(report.nodes.iter().all(|n| n.quarantined_for.is_none()));
    // An hour-long lock makes an hour the longest TTL; then master 0 restarts empty.
    take_an_hour_long_lock(&client).await;
    nodes.restart(0).unwrap();
    let report = client.doctor().await;
    let lost = &report.nodes[0];
    assert_eq!(lost.marked, Some(false), "{lost:?}");
    assert!(
        lost.problems.iter().any(|p| p.code == "unmarked"),
        "{lost:?}"
    );
    // The next acquires notice and quarantine it. Not necessarily the first: it may meet the
    // old connection; and one that masters 1 and 2 grant is decided before master 0 answers on
    // its new connection (a loaded machine is slow to dial), when master 0's answer asks for a
    // marking in the background, which may end after the doctor has read. Bounded in count
    // and time.
    let started = Instant::now();
    let mut report = client.doctor().await;
    for _ in 0..100 {
        if report.nodes[0].quarantined_for.is_some() || started.elapsed() > LOOP_LIMIT {
            break;
        }
        if let Ok(lock) = client
            .try_acquire("next", &LockOptions::new(Duration::from_secs(1)))
            .await
        {
            lock.release().await.unwrap();
        }
        report = client.doctor().await;
    }
    let lost = &report.nodes[0];
    let left = lost
        .quarantined_for
        .expect("an acquire quarantined master 0");
    assert!(
        left > Duration::from_secs(3500) && left <= Duration::from_secs(3600),
        "{left:?}"
    );
    let p = lost
        .problems
        .iter()
        .find(|p| p.code == "quarantined")
        .unwrap();
    assert_eq!(p.severity, Severity::Warning);
    assert!(p.message.contains("59m"), "{}", p.message);
    // Two of three can vote: the deployment is degraded but safe (for locks: these masters
    // keep no fencing counters across a restart, which is accepted here).
    assert_eq!(report.usable, 2);
    assert!(report.allowing_non_durable().safe);

    let (code, stdout, _) = doctor_cli(&nodes.urls(), &["--allow-non-durable"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("quarantine") && stdout.contains("59m"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_master_is_an_error() {
    let mut nodes = LocalNodes::start_with(3, &DURABLE).unwrap();
    nodes.kill(2).unwrap();
    let report = client(&nodes.urls()).doctor().await;
    assert!(!report.safe);
    assert!(!report.nodes[2].reachable);
    assert!(report.nodes[2].error.is_some());
    assert_eq!(codes(&report, 2), ["unreachable"]);
    assert_eq!(report.usable, 2, "the other two still make a quorum");
    assert!(report.problems.is_empty());
    let (code, stdout, _) = doctor_cli(&nodes.urls(), &[]);
    assert_eq!(code, 78);
    assert!(stdout.contains("down"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_route_serves_the_report_behind_the_token() {
    let nodes = LocalNodes::start_with(3, &DURABLE).unwrap();
    let app = redquorum_cli::server::app(
        client(&nodes.urls()),
        AppOptions {
            auth: BearerToken::new("s3cret"),
            ..AppOptions::default()
        },
    );
    let get = |token: Option<&str>| {
        let mut req = Request::builder().method("GET").uri("/v1/doctor");
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let app = app.clone();
        async move {
            let response = app.oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
            let status = response.status();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap())
        }
    };
    let (status, body) = get(None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let (status, body) = get(Some("s3cret")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["safe"], true);
    assert_eq!(body["quorum"], 2);
    assert_eq!(body["usable"], 3);
    assert_eq!(body["nodes"][0]["role"], "master");
    assert_eq!(body["nodes"][0]["acl_missing"], serde_json::json!([]));

    // Unsafe is still a 200: the body says so.
    let mut nodes = nodes;
    nodes.kill(0).unwrap();
    nodes.kill(1).unwrap();
    let (status, body) = get(Some("s3cret")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["safe"], false);
    assert_eq!(body["problems"][0]["code"], "quorum");
    assert_eq!(body["nodes"][0]["reachable"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_quarantine_off_masters_that_lost_their_data_still_vote() {
    let mut nodes = LocalNodes::start(3).unwrap();
    // An hour-long lock makes an hour the longest TTL; then two masters restart empty.
    take_an_hour_long_lock(&Client::new(nodes.urls()).unwrap()).await;
    nodes.restart(0).unwrap();
    nodes.restart(1).unwrap();
    // With the default quarantine, a client counts only the third master: unsafe.
    let (code, json) = doctor_json(&nodes.urls(), &["--allow-non-durable"]);
    assert_eq!(code, 78, "{json}");
    assert_eq!(json["usable"], 1, "{json}");
    // A client with quarantine off counts all three (`run --quarantine 0s` takes locks there),
    // and doctor, asked with the options the clients use, says so; the masters that lost
    // their data are still warned of.
    let (code, json) = doctor_json(
        &nodes.urls(),
        &["--allow-non-durable", "--quarantine", "0s"],
    );
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["usable"], 3, "{json}");
    for i in 0..2 {
        let problems = json["nodes"][i]["problems"].as_array().unwrap();
        let lost = problems
            .iter()
            .find(|p| p["code"] == "unmarked" || p["code"] == "quarantined")
            .unwrap_or_else(|| panic!("{json}"));
        assert_eq!(lost["severity"], "warning", "{json}");
        assert!(
            lost["message"].as_str().unwrap().contains("quarantine off"),
            "{json}"
        );
    }
    // Once a client with quarantine on has put them in quarantine, the masters themselves
    // refuse every grant until it ends, whatever a client's setting: no vote counts there.
    let refused = Client::new(nodes.urls())
        .unwrap()
        .try_acquire("after", &LockOptions::new(Duration::from_secs(5)))
        .await;
    assert!(refused.is_err(), "{refused:?}");
    let quarantine_off = Client::builder()
        .nodes(nodes.urls())
        .quarantine(Duration::ZERO)
        .build()
        .unwrap();
    let refused = quarantine_off
        .try_acquire("after", &LockOptions::new(Duration::from_secs(5)))
        .await;
    assert!(refused.is_err(), "{refused:?}");
    let (code, json) = doctor_json(
        &nodes.urls(),
        &["--allow-non-durable", "--quarantine", "0s"],
    );
    assert_eq!(code, 78, "{json}");
    assert_eq!(json["usable"], 1, "{json}");
}

#[test]
fn the_help_calls_missing_durability_an_error_unless_allowed() {
    let out = Command::new(BIN)
        .args(["doctor", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout).replace('\n', " ");
    let (errors, warnings) = help.split_once("Warnings (safe):").unwrap();
    // As no_persistence_is_an_error_unless_accepted finds it.
    assert!(
        errors.contains("without durable persistence")
            && errors.contains("--allow-non-durable makes a warning"),
        "{help}"
    );
    assert!(!warnings.contains("durable"), "{warnings}");
}

/// Takes and releases an hour-long lock: a master that loses its data after it is quarantined
/// for up to an hour.
async fn take_an_hour_long_lock(client: &Client) {
    client
        .try_acquire("long", &LockOptions::new(Duration::from_secs(3600)))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}
