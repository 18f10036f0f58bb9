//! The chaos runner for redquorum: brings up five Redis masters (and a resource Redis) with
//! docker compose, drives worker processes that take the lock and write to the resource,
//! injects faults on a seeded schedule, records everything on one monotonic clock, and checks
//! the history for violations of mutual exclusion, stale writes, lost updates and liveness.
//!
//! ```text
//! cargo run -p redquorum-chaos --release -- run [--scenario NAME|all] [--seed N] [--ci]
//! cargo run -p redquorum-chaos --release -- list
//! ```
//!
//! Layout, each module using only those below it:
//! - `runner`: one scenario's life: compose project up and down, its steps, its verdict.
//! - `report`: JSON, Markdown and SVG reports of the outcomes.
//! - `outcome`: what one scenario produced.
//! - `scenarios`: the catalogue: what each scenario does and expects.
//! - `ctx`: the running scenario's context: its workers, its faults, its history.
//! - `faults`: faults on masters and workers, and their confirmation.
//! - `scenario`: what a scenario is; `settings`: how big a run is and what it shares.
//! - `checker`: the pure analysis of a history and the verdict (unit-tested).
//! - `worker`: the worker process (the `worker` subcommand) and its commands.
//! - `docker`: docker and compose through their clients; Redis probes.
//! - `history`: the events and the shared clock; `rng`: the seeded generator.
//! - `console`: the runner's lines on stdout and stderr, which never panic on a closed pipe.
#![warn(clippy::print_stderr)]

#[macro_use]
mod console;
mod checker;
mod ctx;
mod docker;
mod faults;
mod history;
mod outcome;
mod report;
mod rng;
mod runner;
mod scenario;
mod scenarios;
mod settings;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};

use crate::checker::Verdict;
use crate::console::say;
use crate::docker::Docker;
use crate::runner::LiveProjects;
use crate::scenario::Scenario;
use crate::settings::{RunSettings, Size};

/// Exit code when the suite ran and some scenario did not pass (or was inconclusive).
const EXIT_FAILED: u8 = 1;
/// Exit code when the suite could not run (no Docker, no image, bad arguments).
const EXIT_SETUP: u8 = 2;
/// Exit code after Ctrl-C or SIGTERM.
const EXIT_INTERRUPTED: u8 = 130;

#[derive(Debug, Parser)]
#[command(
    name = "redquorum-chaos",
    about = "Chaos tests of redquorum against Redis masters in docker compose"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run scenarios and write a report under target/chaos/.
    Run(RunArgs),
    /// List the scenarios and what each expects.
    List,
    /// Re-check a saved history (history.jsonl) against a scenario's expectation.
    Check {
        /// The history file.
        history: PathBuf,
        /// The scenario whose expectation applies.
        #[arg(long)]
        scenario: String,
    },
    /// A worker process (started by `run`; not for direct use).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Scenarios to run (repeat or comma-separate), or `all`.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    scenario: Vec<String>,
    /// Seed of the fault schedule [default: from the clock; printed, to reproduce a run].
    #[arg(long)]
    seed: Option<u64>,
    /// The CI-sized schedule (the whole suite in a few minutes).
    #[arg(long)]
    ci: bool,
    /// Without a Docker engine, say so and exit 0 instead of failing.
    #[arg(long)]
    skip_without_docker: bool,
    /// Redis image for the masters [default: $REDIS_IMAGE, else redquorum-redis:local, else
    /// redis:7.2, whichever is present locally].
    #[arg(long)]
    redis_image: Option<String>,
    /// Repository root (holds docker-compose.yml) [default: the one this binary was built from].
    #[arg(long)]
    root: Option<PathBuf>,
    /// Where reports go [default: ROOT/target/chaos/].
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tell!("redquorum-chaos: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_SETUP);
        }
    };
    runtime.block_on(async {
        match cli.command {
            Cmd::Run(args) => run(args).await,
            Cmd::List => list(),
            Cmd::Check { history, scenario } => check(&history, &scenario),
            Cmd::Worker(args) => match worker::run(args).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tell!("worker: {e}");
                    ExitCode::from(EXIT_SETUP)
                }
            },
        }
    })
}

/// Prints the catalogue; a reader that stops early ends the listing quietly.
fn list() -> ExitCode {
    for s in scenarios::all() {
        let written = say(format_args!("{:<30} {}", s.name, s.about))
            .and_then(|()| say(format_args!("{:<30} expects: {}", "", s.expect.summary())));
        if written.is_err() {
            break;
        }
    }
    ExitCode::SUCCESS
}

fn check(path: &PathBuf, name: &str) -> ExitCode {
    let Some(scenario) = scenarios::all().into_iter().find(|s| s.name == name) else {
        tell!("unknown scenario {name}; see `redquorum-chaos list`");
        return ExitCode::from(EXIT_SETUP);
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            tell!("{}: {e}", path.display());
            return ExitCode::from(EXIT_SETUP);
        }
    };
    let mut events = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        match serde_json::from_str(line) {
            Ok(e) => events.push(e),
            Err(e) => {
                tell!("{}:{}: {e}", path.display(), i + 1);
                return ExitCode::from(EXIT_SETUP);
            }
        }
    }
    let analysis = checker::analyse(&events);
    let (verdict, reasons) = checker::judge(&analysis, &scenario.expect, &[]);
    let _ = say(format_args!(
        "{}: {} (definite {}, over-admitted {}, possible {}, partial multi-locks {}, stale accepted {}, refused {}, lost updates {}, fence order {}, faults {}/{})",
        name,
        verdict.label(),
        analysis.definite.len(),
        analysis.crowded.len(),
        analysis.possible.len() + analysis.possibly_crowded.len(),
        analysis.partial_sections,
        analysis.stale_accepted,
        analysis.rejected,
        analysis.lost_updates,
        analysis.fence_order_violations,
        analysis.faults_confirmed(),
        analysis.faults.len()
    ))
    .and_then(|()| {
        reasons
            .iter()
            .try_for_each(|r| say(format_args!("  - {r}")))
    });
    if verdict == Verdict::Pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILED)
    }
}

async fn run(args: RunArgs) -> ExitCode {
    let all = scenarios::all();
    let selected: Vec<Scenario> = if args.scenario.iter().any(|s| s == "all") {
        all
    } else {
        let mut chosen = Vec::new();
        for name in &args.scenario {
            match all.iter().find(|s| s.name == name) {
                Some(s) => chosen.push(s.clone()),
                None => {
                    tell!("unknown scenario {name}; see `redquorum-chaos list`");
                    return ExitCode::from(EXIT_SETUP);
                }
            }
        }
        chosen
    };

    let docker = match Docker::detect().await {
        Ok(d) => d,
        Err(e) if args.skip_without_docker => {
            tell!("redquorum-chaos: skipped: {e}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            tell!(
                "redquorum-chaos: {e}.\nThe chaos suite needs a Docker engine and compose; pass --skip-without-docker to skip it where there is none."
            );
            return ExitCode::from(EXIT_SETUP);
        }
    };
    let root = args
        .root
        .clone()
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/..")));
    let root = root.canonicalize().unwrap_or(root);
    if !root.join("docker-compose.yml").is_file() || !root.join("chaos/compose.chaos.yml").is_file()
    {
        tell!(
            "redquorum-chaos: {} has no docker-compose.yml and chaos/compose.chaos.yml; pass --root",
            root.display()
        );
        return ExitCode::from(EXIT_SETUP);
    }
    let redis_image = match pick_image(&docker, args.redis_image.clone()).await {
        Ok(i) => i,
        Err(e) => {
            tell!("redquorum-chaos: {e}");
            return ExitCode::from(EXIT_SETUP);
        }
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            tell!("redquorum-chaos: cannot find this executable: {e}");
            return ExitCode::from(EXIT_SETUP);
        }
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let seed = args.seed.unwrap_or(now.as_secs() % 100_000);
    let tag = format!("{}{}", std::process::id(), now.subsec_millis());
    let out_dir = args
        .out
        .clone()
        .unwrap_or_else(|| root.join("target/chaos"))
        .join(format!("{}-seed{seed}", now.as_secs()));
    if let Err(e) = std::fs::create_dir_all(&out_dir) {
        tell!("redquorum-chaos: {}: {e}", out_dir.display());
        return ExitCode::from(EXIT_SETUP);
    }
    let names: Vec<&str> = selected.iter().map(|s| s.name).collect();
    let command = format!(
        "cargo run -p redquorum-chaos --release -- run --scenario {} --seed {seed}{}",
        if names.len() == scenarios::all().len() {
            "all".to_owned()
        } else {
            names.join(",")
        },
        if args.ci { " --ci" } else { "" }
    );
    tell!(
        "redquorum-chaos: {} scenario(s), seed {seed}, {}, image {redis_image}, {}; reports in {}",
        selected.len(),
        if args.ci { "CI-sized" } else { "full" },
        docker.compose_name(),
        out_dir.display()
    );
    let settings = RunSettings {
        root,
        redis_image: redis_image.clone(),
        seed,
        size: if args.ci { Size::CI } else { Size::FULL },
        out_dir: out_dir.clone(),
        exe,
        tag,
    };
    let live: LiveProjects = LiveProjects::default();
    let started = Instant::now();
    let suite = async {
        let mut outcomes = Vec::new();
        for (i, s) in selected.iter().enumerate() {
            let o = runner::run_scenario(&docker, &settings, s, i, &live).await;
            tell!(
                "   {} -> {}{}",
                s.name,
                o.verdict.label(),
                if o.reasons.is_empty() {
                    String::new()
                } else {
                    format!(": {}", o.reasons.join("; "))
                }
            );
            outcomes.push(o);
        }
        outcomes
    };
    let outcomes = tokio::select! {
        o = suite => o,
        () = interrupted() => {
            tell!("redquorum-chaos: interrupted; taking the compose projects down");
            let projects = live.lock().map(|l| l.clone()).unwrap_or_default();
            for p in projects {
                if let Err(e) = p.down().await {
                    tell!("   {}: {e}", p.name);
                }
            }
            return ExitCode::from(EXIT_INTERRUPTED);
        }
    };
    let info = report::RunInfo {
        seed,
        ci: args.ci,
        redis_image,
        compose: docker.compose_name(),
        duration: started.elapsed(),
        command,
    };
    match report::write(&out_dir, &info, &outcomes) {
        Ok(table) => {
            let _ = say(format_args!("{table}")).and_then(|()| {
                say(format_args!(
                    "Reports: {}/summary.md, report.json, <scenario>/timeline.svg ({} total)",
                    out_dir.display(),
                    humanize(started.elapsed())
                ))
            });
        }
        Err(e) => tell!("redquorum-chaos: cannot write the report: {e}"),
    }
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|o| o.verdict != Verdict::Pass)
        .map(|o| o.scenario.name)
        .collect();
    if failed.is_empty() {
        let _ = say(format_args!(
            "All {} scenarios behaved as expected.",
            outcomes.len()
        ));
        ExitCode::SUCCESS
    } else {
        let _ = say(format_args!(
            "Not as expected (failed or inconclusive): {}",
            failed.join(", ")
        ));
        ExitCode::from(EXIT_FAILED)
    }
}

fn humanize(d: Duration) -> String {
    format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
}

/// Resolves on Ctrl-C or SIGTERM.
async fn interrupted() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

/// The Redis image to use: the one asked for, else `$REDIS_IMAGE`, else the locally built
/// one, else the official one if it is present. Nothing is ever pulled.
async fn pick_image(docker: &Docker, asked: Option<String>) -> Result<String, String> {
    let asked = asked.or_else(|| std::env::var("REDIS_IMAGE").ok().filter(|s| !s.is_empty()));
    if let Some(image) = asked {
        return if docker.has_image(&image).await {
            Ok(image)
        } else {
            Err(format!(
                "image {image} is not present locally (nothing is pulled); build one with chaos/build-images.sh --redis-only"
            ))
        };
    }
    for image in ["redquorum-redis:local", "redis:7.2"] {
        if docker.has_image(image).await {
            return Ok(image.to_owned());
        }
    }
    Err("no Redis image is present locally: run `chaos/build-images.sh --redis-only` (it packages this machine's redis-server), or `docker pull redis:7.2` where a registry is reachable".to_owned())
}
