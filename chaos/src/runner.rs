//! The run lifecycle of one scenario: a fresh compose project, the scenario's steps in its
//! context, the tear-down whatever happened, the saved history and the verdict.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::checker::{self, Analysis, Verdict};
use crate::ctx::Ctx;
use crate::docker::{Docker, Project};
use crate::history::{Clock, Event};
use crate::outcome::ScenarioOutcome;
use crate::scenario::Scenario;
use crate::scenarios;
use crate::settings::RunSettings;

/// Compose projects that are up, so that an interrupted run can still take them down.
pub(crate) type LiveProjects = Arc<Mutex<Vec<Project>>>;

/// Runs one scenario from start to tear-down.
pub(crate) async fn run_scenario(
    docker: &Docker,
    settings: &RunSettings,
    scenario: &Scenario,
    index: usize,
    live: &LiveProjects,
) -> ScenarioOutcome {
    let started = Instant::now();
    let seed = settings
        .seed
        .wrapping_add((index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let dir = settings.out_dir.join(scenario.name);
    let mut problems = Vec::new();
    let clock = match Clock::starting_now() {
        Ok(c) => c,
        Err(e) => return failed_outcome(scenario, seed, started, e),
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return failed_outcome(scenario, seed, started, format!("{}: {e}", dir.display()));
    }
    let history: Arc<Mutex<Vec<Event>>> = Arc::default();
    let name = format!("rqchaos-{}-{}", settings.tag, index + 1);
    tell!("== {} ({name})", scenario.name);

    let project = match bring_up(docker, settings, scenario, &name, seed, live).await {
        Ok(p) => p,
        Err(e) => return failed_outcome(scenario, seed, started, e),
    };
    let mut ctx = Ctx::new(
        clock,
        project.clone(),
        history.clone(),
        scenario.durable,
        seed,
        dir.clone(),
    );
    let body = async {
        ctx.prepare(settings, scenario).await?;
        scenarios::body(scenario, &mut ctx, &settings.size).await
    };
    if let Err(e) = body.await {
        tell!("   {}: {e}", scenario.name);
        problems.push(e);
    }
    ctx.shutdown().await;
    if let Err(e) = project.down().await {
        tell!("   tear-down of {name}: {e}");
    }
    if let Ok(mut l) = live.lock() {
        l.retain(|p| p.name != project.name);
    }

    let events = history.lock().map(|h| h.clone()).unwrap_or_default();
    if let Err(e) = write_history(&dir.join("history.jsonl"), &events) {
        tell!("   cannot save the history: {e}");
    }
    let analysis = checker::analyse(&events);
    let (verdict, reasons) = checker::judge(&analysis, &scenario.expect, &problems);
    ScenarioOutcome {
        scenario: scenario.clone(),
        seed,
        verdict,
        reasons,
        analysis,
        duration: started.elapsed(),
        events,
        project: name,
    }
}

fn failed_outcome(
    scenario: &Scenario,
    seed: u64,
    started: Instant,
    problem: String,
) -> ScenarioOutcome {
    tell!("   {}: {problem}", scenario.name);
    ScenarioOutcome {
        scenario: scenario.clone(),
        seed,
        verdict: Verdict::Inconclusive,
        reasons: vec![problem],
        analysis: Analysis::default(),
        duration: started.elapsed(),
        events: Vec::new(),
        project: String::new(),
    }
}

fn write_history(path: &Path, events: &[Event]) -> Result<(), String> {
    let mut text = String::new();
    for e in events {
        text.push_str(&serde_json::to_string(e).map_err(|e| e.to_string())?);
        text.push('\n');
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Picks a free subnet and brings the project up; a subnet taken meanwhile (another run) is
/// retried with the next one.
async fn bring_up(
    docker: &Docker,
    settings: &RunSettings,
    scenario: &Scenario,
    name: &str,
    seed: u64,
    live: &LiveProjects,
) -> Result<Project, String> {
    let used = docker.used_subnets().await;
    let start = (seed ^ u64::from(std::process::id())) % 250;
    let mut last_error = String::new();
    let mut tries = 0;
    for i in 0..250u64 {
        let third = u8::try_from((start + i) % 250 + 1).unwrap_or(1);
        let prefix = [10, 231, third];
        if used.iter().any(|s| overlaps_subnet(s, prefix)) {
            continue;
        }
        let project = Project::new(
            docker,
            &settings.root,
            name,
            prefix,
            &settings.redis_image,
            scenario.redis_args(),
        );
        // Registered before `up`, so that an interrupted `up` is taken down too.
        if let Ok(mut l) = live.lock() {
            l.push(project.clone());
        }
        match project.up().await {
            Ok(_) => return Ok(project),
            Err(e) => {
                let _ = project.down().await;
                if let Ok(mut l) = live.lock() {
                    l.retain(|p| p.name != project.name);
                }
                last_error = e;
                tries += 1;
                if tries >= 3 {
                    break;
                }
            }
        }
    }
    Err(format!("cannot bring the compose project up: {last_error}"))
}

/// Whether `subnet` (`a.b.c.d/len`) overlaps `prefix.0/24`.
pub(crate) fn overlaps_subnet(subnet: &str, prefix: [u8; 3]) -> bool {
    let Some((addr, len)) = subnet.split_once('/') else {
        return false;
    };
    let (Ok(addr), Ok(len)) = (addr.parse::<std::net::Ipv4Addr>(), len.parse::<u32>()) else {
        return false;
    };
    let ours = u32::from(std::net::Ipv4Addr::new(prefix[0], prefix[1], prefix[2], 0));
    let theirs = u32::from(addr);
    let common = len.min(24);
    let mask = if common == 0 {
        0
    } else {
        u32::MAX << (32 - common)
    };
    ours & mask == theirs & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnet_overlap() {
        assert!(overlaps_subnet("10.231.7.0/24", [10, 231, 7]));
        assert!(!overlaps_subnet("10.231.8.0/24", [10, 231, 7]));
        assert!(overlaps_subnet("10.0.0.0/8", [10, 231, 7]));
        assert!(!overlaps_subnet("172.17.0.0/16", [10, 231, 7]));
        assert!(overlaps_subnet("10.231.7.128/25", [10, 231, 7]));
        assert!(!overlaps_subnet("garbage", [10, 231, 7]));
    }
}
