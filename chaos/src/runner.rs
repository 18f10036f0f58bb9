//! Runs one scenario: a fresh compose project, worker processes, faults with confirmation, the
//! recorded history, and the tear-down, whatever happened.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

use crate::checker::{self, Analysis, Verdict};
use crate::docker::{Docker, MASTERS, Project, RESOURCE, info_field, redis_query};
use crate::history::{Clock, Event, EventKind, PhaseKind, RUNNER, WorkerId};
use crate::rng::SplitMix;
use crate::scenarios::{self, Scenario, Size};
use crate::worker::{Command, LoadParams, RESOURCE_KEY};

/// The lock every worker competes for.
pub(crate) const LOCK_NAME: &str = "chaos";

/// How long a confirmation may take before the fault counts as not having taken effect.
const CONFIRM_WITHIN: Duration = Duration::from_secs(15);

/// Per-probe deadline of the runner's own Redis calls.
const PROBE_TIMEOUT: Duration = Duration::from_millis(300);

/// What every scenario of a run shares.
#[derive(Debug, Clone)]
pub(crate) struct RunSettings {
    /// The repository root (compose files).
    pub(crate) root: PathBuf,
    /// The Redis image for masters and resource.
    pub(crate) redis_image: String,
    /// The run's seed.
    pub(crate) seed: u64,
    /// CI-sized or full schedule.
    pub(crate) size: Size,
    /// Where this run's files go.
    pub(crate) out_dir: PathBuf,
    /// This executable, started again as `worker`.
    pub(crate) exe: PathBuf,
    /// A short unique tag for project names.
    pub(crate) tag: String,
}

/// Compose projects that are up, so that an interrupted run can still take them down.
pub(crate) type LiveProjects = Arc<Mutex<Vec<Project>>>;

/// What one scenario produced.
#[derive(Debug, Clone)]
pub(crate) struct ScenarioOutcome {
    /// The scenario.
    pub(crate) scenario: Scenario,
    /// Its seed (the run's seed mixed with its position).
    pub(crate) seed: u64,
    /// The judgement.
    pub(crate) verdict: Verdict,
    /// Why (what differed, or why inconclusive).
    pub(crate) reasons: Vec<String>,
    /// The findings.
    pub(crate) analysis: Analysis,
    /// Wall time, set-up and tear-down included.
    pub(crate) duration: Duration,
    /// The history, for the timeline.
    pub(crate) events: Vec<Event>,
    /// The compose project's name.
    pub(crate) project: String,
}

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
    eprintln!("== {} ({name})", scenario.name);

    let project = match bring_up(docker, settings, scenario, &name, seed, live).await {
        Ok(p) => p,
        Err(e) => return failed_outcome(scenario, seed, started, e),
    };
    let mut ctx = Ctx {
        clock,
        project: project.clone(),
        network: String::new(),
        history: history.clone(),
        workers: Vec::new(),
        next_fault: 0,
        next_cmd: 0,
        sentinels: HashMap::new(),
        durable: scenario.durable,
        rng: SplitMix::new(seed),
        dir: dir.clone(),
        load: None,
        spawning: None,
    };
    let body = async {
        ctx.prepare(settings, scenario).await?;
        scenarios::body(scenario, &mut ctx, &settings.size).await
    };
    if let Err(e) = body.await {
        eprintln!("   {}: {e}", scenario.name);
        problems.push(e);
    }
    ctx.shutdown().await;
    if let Err(e) = project.down().await {
        eprintln!("   tear-down of {name}: {e}");
    }
    if let Ok(mut l) = live.lock() {
        l.retain(|p| p.name != project.name);
    }

    let events = history.lock().map(|h| h.clone()).unwrap_or_default();
    if let Err(e) = write_history(&dir.join("history.jsonl"), &events) {
        eprintln!("   cannot save the history: {e}");
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
    eprintln!("   {}: {problem}", scenario.name);
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

/// A worker process and its pipes.
struct WorkerHandle {
    id: WorkerId,
    child: Child,
    stdin: ChildStdin,
    /// `done` and `write_ready` events, for the runner to wait on.
    control: mpsc::UnboundedReceiver<Event>,
    pid: u32,
    stopped: bool,
}

/// Container actions (and worker signals) the runner injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// `compose kill`: SIGKILL, the container exits.
    Kill,
    /// `compose start`: a stopped master starts again (empty unless it persists).
    Start,
    /// `compose restart -t 0`: killed and started again at once.
    Restart,
    /// `compose pause`: frozen (cgroup freezer); connections stay open, nothing answers.
    Pause,
    /// `compose unpause`.
    Unpause,
    /// `docker network disconnect`: cut off from the network.
    Disconnect,
    /// `docker network connect` with its old address.
    Connect,
    /// The lock key expires at once on the target (as after a forward clock jump).
    Expire,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::Kill => "kill",
            Action::Start => "start",
            Action::Restart => "restart",
            Action::Pause => "pause",
            Action::Unpause => "unpause",
            Action::Disconnect => "disconnect",
            Action::Connect => "connect",
            Action::Expire => "expire",
        }
    }
}

/// A running scenario: the project, the workers, the history.
pub(crate) struct Ctx {
    clock: Clock,
    project: Project,
    network: String,
    history: Arc<Mutex<Vec<Event>>>,
    workers: Vec<WorkerHandle>,
    next_fault: u32,
    next_cmd: u64,
    /// Per master: a value written before a restart, to tell whether data survived it.
    sentinels: HashMap<String, String>,
    durable: bool,
    /// The scenario's seeded generator (which nodes, how long).
    pub(crate) rng: SplitMix,
    dir: PathBuf,
    /// The load running, if any.
    load: Option<LoadParams>,
    /// What a worker started mid-scenario needs.
    spawning: Option<(RunSettings, Scenario)>,
}

/// Result of a scenario step: `Err` stops the scenario and makes it inconclusive.
pub(crate) type Step<T = ()> = Result<T, String>;

impl Ctx {
    /// Records a runner event now.
    pub(crate) fn record(&self, kind: EventKind) {
        let event = Event {
            t: self.clock.now(),
            src: RUNNER,
            kind,
        };
        if let Ok(mut h) = self.history.lock() {
            h.push(event);
        }
    }

    /// Starts a phase.
    pub(crate) fn phase(&self, name: impl Into<String>, kind: PhaseKind) {
        let name = name.into();
        eprintln!("   phase: {name}");
        self.record(EventKind::Phase { name, kind });
    }

    /// Records a remark.
    pub(crate) fn note(&self, text: impl Into<String>) {
        self.record(EventKind::Note { text: text.into() });
    }

    /// How many events worker `id` has recorded that match `pred`.
    pub(crate) fn count_events(&self, id: WorkerId, pred: impl Fn(&EventKind) -> bool) -> usize {
        self.history
            .lock()
            .map(|h| h.iter().filter(|e| e.src == id && pred(&e.kind)).count())
            .unwrap_or(0)
    }

    /// The masters' service names.
    pub(crate) fn masters(&self) -> Vec<String> {
        MASTERS.iter().map(|s| (*s).to_owned()).collect()
    }

    /// Waits for the masters and the resource to answer, records their persistence settings,
    /// and starts the workers.
    async fn prepare(&mut self, settings: &RunSettings, scenario: &Scenario) -> Step {
        let mut all = self.masters();
        all.push(RESOURCE.to_owned());
        for service in &all {
            // Looked up once now, so that confirming a fault costs no `compose ps`.
            self.project.container(service).await?;
        }
        self.network = self.project.network().await?;
        for service in &all {
            self.wait_ping(service, Duration::from_secs(20)).await?;
        }
        let url = self.project.url(MASTERS[0]);
        let aof: Vec<String> = redis_query(
            &url,
            redis::cmd("CONFIG").arg("GET").arg("appendfsync"),
            PROBE_TIMEOUT,
        )
        .await
        .unwrap_or_default();
        let info: String = redis_query(&url, redis::cmd("INFO").arg("persistence"), PROBE_TIMEOUT)
            .await
            .unwrap_or_default();
        self.note(format!(
            "masters up on {} ({}); aof_enabled={} appendfsync={}",
            self.project.subnet,
            settings.redis_image,
            info_field(&info, "aof_enabled").unwrap_or_default(),
            aof.get(1).cloned().unwrap_or_default()
        ));
        let aof_on = info_field(&info, "aof_enabled").as_deref() == Some("1");
        if aof_on != scenario.durable {
            return Err(format!(
                "the masters' persistence is not what the scenario needs (aof_enabled={aof_on}, wanted {})",
                scenario.durable
            ));
        }
        self.spawning = Some((settings.clone(), scenario.clone()));
        for id in 1..=scenario.workers(&settings.size) {
            let handle = self.spawn_worker(settings, scenario, id)?;
            self.workers.push(handle);
        }
        Ok(())
    }

    fn spawn_worker(
        &self,
        settings: &RunSettings,
        scenario: &Scenario,
        id: WorkerId,
    ) -> Step<WorkerHandle> {
        let nodes: Vec<String> = MASTERS.iter().map(|s| self.project.url(s)).collect();
        let log = std::fs::File::create(self.dir.join(format!("worker-{id}.log")))
            .map_err(|e| format!("worker log: {e}"))?;
        let mut child = tokio::process::Command::new(&settings.exe)
            .arg("worker")
            .args(["--id", &id.to_string()])
            .args(["--epoch-ns", &self.clock.epoch_ns().to_string()])
            .args(["--nodes", &nodes.join(",")])
            .args(["--resource", &self.project.url(RESOURCE)])
            .args(["--lock", LOCK_NAME])
            .args(["--fencing", &scenario.fencing.to_string()])
            .args([
                "--quarantine-ms",
                &scenario.quarantine.as_millis().to_string(),
            ])
            .args(["--max-ttl-ms", &scenario.max_ttl.as_millis().to_string()])
            .args(["--node-timeout-ms", "100"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start worker {id}: {e}"))?;
        let stdin = child.stdin.take().ok_or("worker stdin")?;
        let stdout = child.stdout.take().ok_or("worker stdout")?;
        let pid = child.id().ok_or("worker pid")?;
        let (tx, rx) = mpsc::unbounded_channel();
        let history = self.history.clone();
        let clock = self.clock;
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(event) = serde_json::from_str::<Event>(&line) else {
                    continue;
                };
                let control = matches!(
                    event.kind,
                    EventKind::Done { .. } | EventKind::WriteReady { .. }
                );
                if let Ok(mut h) = history.lock() {
                    h.push(event.clone());
                }
                if control {
                    let _ = tx.send(event);
                }
            }
            if let Ok(mut h) = history.lock() {
                h.push(Event {
                    t: clock.now(),
                    src: RUNNER,
                    kind: EventKind::Note {
                        text: format!("worker {id} exited"),
                    },
                });
            }
        });
        Ok(WorkerHandle {
            id,
            child,
            stdin,
            control: rx,
            pid,
            stopped: false,
        })
    }

    /// Starts one more worker (a new client, in a process of its own); returns its id.
    pub(crate) async fn start_worker(&mut self) -> Step<WorkerId> {
        let (settings, scenario) = self
            .spawning
            .clone()
            .ok_or("the scenario was not prepared")?;
        let id = self.workers.iter().map(|w| w.id).max().unwrap_or(0) + 1;
        let handle = self.spawn_worker(&settings, &scenario, id)?;
        self.workers.push(handle);
        Ok(id)
    }

    fn worker(&mut self, id: WorkerId) -> Step<&mut WorkerHandle> {
        self.workers
            .iter_mut()
            .find(|w| w.id == id)
            .ok_or_else(|| format!("no worker {id}"))
    }

    /// Sends a command without waiting; returns its number.
    pub(crate) async fn send(
        &mut self,
        id: WorkerId,
        make: impl FnOnce(u64) -> Command,
    ) -> Step<u64> {
        self.next_cmd += 1;
        let n = self.next_cmd;
        let line = serde_json::to_string(&make(n)).map_err(|e| e.to_string())? + "\n";
        let w = self.worker(id)?;
        w.stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("worker {id} is gone: {e}"))?;
        Ok(n)
    }

    /// Waits for a worker's control event matching `pred`.
    pub(crate) async fn wait_for(
        &mut self,
        id: WorkerId,
        within: Duration,
        pred: impl Fn(&EventKind) -> bool,
    ) -> Step<EventKind> {
        let w = self.worker(id)?;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, w.control.recv()).await {
                Ok(Some(e)) if pred(&e.kind) => return Ok(e.kind),
                Ok(Some(_)) => {}
                Ok(None) => return Err(format!("worker {id} exited")),
                Err(_) => {
                    return Err(format!(
                        "worker {id} did not answer within {} s",
                        within.as_secs()
                    ));
                }
            }
        }
    }

    /// Waits for command `cmd` to finish; returns whether it did what was asked.
    pub(crate) async fn wait_done(
        &mut self,
        id: WorkerId,
        cmd: u64,
        within: Duration,
    ) -> Step<bool> {
        match self
            .wait_for(
                id,
                within,
                |k| matches!(k, EventKind::Done { cmd: c, .. } if *c == cmd),
            )
            .await?
        {
            EventKind::Done { ok, .. } => Ok(ok),
            _ => Ok(false),
        }
    }

    /// Sends a command and waits for it.
    pub(crate) async fn call(
        &mut self,
        id: WorkerId,
        within: Duration,
        make: impl FnOnce(u64) -> Command,
    ) -> Step<bool> {
        let cmd = self.send(id, make).await?;
        self.wait_done(id, cmd, within).await
    }

    /// Worker `id` takes the lock (retrying for `wait`); returns whether it got it.
    pub(crate) async fn acquire(
        &mut self,
        id: WorkerId,
        ttl: Duration,
        wait: Duration,
    ) -> Step<bool> {
        let (ttl_ms, wait_ms) = (millis(ttl), millis(wait));
        self.call(id, wait + Duration::from_secs(10), |n| Command::Acquire {
            id: n,
            ttl_ms,
            wait_ms,
        })
        .await
    }

    /// Worker `id` reads the resource.
    pub(crate) async fn read(&mut self, id: WorkerId) -> Step<bool> {
        self.call(id, Duration::from_secs(10), |n| Command::Read { id: n })
            .await
    }

    /// Worker `id` writes the value it read plus one; returns whether it was accepted.
    pub(crate) async fn write(&mut self, id: WorkerId) -> Step<bool> {
        self.call(id, Duration::from_secs(10), |n| Command::Write {
            id: n,
            pause_ms: 0,
        })
        .await
    }

    /// Worker `id` releases its lock; returns whether the release succeeded.
    pub(crate) async fn release(&mut self, id: WorkerId) -> Step<bool> {
        self.call(id, Duration::from_secs(10), |n| Command::Release { id: n })
            .await
    }

    /// Every worker starts a load loop.
    pub(crate) async fn start_load(&mut self, params: LoadParams) -> Step {
        let ids: Vec<WorkerId> = self.workers.iter().map(|w| w.id).collect();
        for id in ids {
            let mut p = params.clone();
            p.seed = params.seed.wrapping_add(u64::from(id));
            self.send(id, |n| Command::Load { id: n, params: p })
                .await?;
        }
        self.load = Some(params);
        Ok(())
    }

    /// Every worker ends its load loop; waits until they all have.
    pub(crate) async fn stop_load(&mut self) -> Step {
        let Some(params) = self.load.take() else {
            return Ok(());
        };
        let ids: Vec<WorkerId> = self.workers.iter().map(|w| w.id).collect();
        for &id in &ids {
            self.send(id, |_| Command::Stop).await?;
        }
        let within =
            Duration::from_millis(params.wait_ms + params.ttl_ms * 3) + Duration::from_secs(10);
        for id in ids {
            self.wait_for(id, within, |k| matches!(k, EventKind::Done { .. }))
                .await?;
        }
        Ok(())
    }

    /// The final acquire: a worker takes the lock (retrying for `wait`) and releases it.
    pub(crate) async fn final_acquire(&mut self, id: WorkerId, wait: Duration) -> Step {
        self.phase("final acquire", PhaseKind::Final);
        if self.acquire(id, Duration::from_secs(1), wait).await? {
            self.release(id).await?;
        }
        Ok(())
    }

    /// Freezes (SIGSTOP) or thaws (SIGCONT) a worker process, confirmed from /proc.
    pub(crate) async fn signal_worker(&mut self, id: WorkerId, stop: bool) -> Step {
        self.next_fault += 1;
        let fault = self.next_fault;
        let action = if stop { "sigstop" } else { "sigcont" };
        self.record(EventKind::FaultInvoke {
            id: fault,
            action: action.to_owned(),
            targets: vec![format!("worker{id}")],
        });
        eprintln!("   fault {fault}: {action} worker{id}");
        let w = self.worker(id)?;
        let pid = w.pid;
        let signal = if stop {
            Signal::SIGSTOP
        } else {
            Signal::SIGCONT
        };
        let sent = kill(Pid::from_raw(i32::try_from(pid).unwrap_or(0)), signal);
        w.stopped = stop;
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut state = '?';
        while sent.is_ok() && Instant::now() < deadline {
            state = process_state(pid).unwrap_or('?');
            if (state == 'T') == stop {
                self.record(EventKind::FaultConfirmed {
                    id: fault,
                    detail: format!("pid {pid} state {state}"),
                });
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let detail = format!("pid {pid} state {state} ({sent:?})");
        self.record(EventKind::FaultUnconfirmed {
            id: fault,
            detail: detail.clone(),
        });
        Err(format!("{action} of worker {id} not confirmed: {detail}"))
    }

    /// Injects `action` on the masters `targets` and confirms it took effect. An unconfirmed
    /// fault is recorded and ends the scenario (inconclusive).
    pub(crate) async fn fault(&mut self, action: Action, targets: &[String]) -> Step {
        self.next_fault += 1;
        let id = self.next_fault;
        self.record(EventKind::FaultInvoke {
            id,
            action: action.as_str().to_owned(),
            targets: targets.to_vec(),
        });
        eprintln!("   fault {id}: {} {}", action.as_str(), targets.join(","));
        let result = self.inject(action, targets).await;
        let result = match result {
            Ok(()) => self.confirm(action, targets).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(detail) => {
                self.record(EventKind::FaultConfirmed { id, detail });
                Ok(())
            }
            Err(detail) => {
                self.record(EventKind::FaultUnconfirmed {
                    id,
                    detail: detail.clone(),
                });
                Err(format!(
                    "{} {} did not take effect: {detail}",
                    action.as_str(),
                    targets.join(",")
                ))
            }
        }
    }

    async fn inject(&mut self, action: Action, targets: &[String]) -> Step {
        let names: Vec<&str> = targets.iter().map(String::as_str).collect();
        let compose = |verb: &'static str, extra: &'static [&'static str]| {
            let mut args = vec![verb];
            args.extend(extra);
            args.extend(names.iter().copied());
            args
        };
        match action {
            Action::Kill => {
                self.set_sentinels(targets).await;
                self.project.compose(&compose("kill", &[])).await?;
            }
            Action::Restart => {
                self.set_sentinels(targets).await;
                for t in targets {
                    let run_id = self.run_id(t).await.unwrap_or_default();
                    self.sentinels.insert(format!("{t}:run_id"), run_id);
                }
                self.project
                    .compose(&compose("restart", &["-t", "0"]))
                    .await?;
            }
            Action::Start => {
                self.project.compose(&compose("start", &[])).await?;
            }
            Action::Pause => {
                self.project.compose(&compose("pause", &[])).await?;
            }
            Action::Unpause => {
                self.project.compose(&compose("unpause", &[])).await?;
            }
            Action::Disconnect => {
                for t in targets {
                    let id = self.project.container(t).await?;
                    let network = self.network.clone();
                    self.project
                        .docker(&["network", "disconnect", &network, &id])
                        .await?;
                }
            }
            Action::Connect => {
                for t in targets {
                    let id = self.project.container(t).await?;
                    let ip = self
                        .project
                        .ips
                        .get(t.as_str())
                        .map(ToString::to_string)
                        .unwrap_or_default();
                    let network = self.network.clone();
                    self.project
                        .docker(&[
                            "network", "connect", "--ip", &ip, "--alias", t, &network, &id,
                        ])
                        .await?;
                }
            }
            Action::Expire => {
                let key = format!("redquorum:lock:{LOCK_NAME}");
                for t in targets {
                    let n: i64 = redis_query(
                        &self.project.url(t),
                        redis::cmd("PEXPIRE").arg(&key).arg(1),
                        PROBE_TIMEOUT,
                    )
                    .await?;
                    if n != 1 {
                        return Err(format!("{t} did not have {key} (PEXPIRE returned {n})"));
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks that an action took effect on every target; returns how it was checked.
    async fn confirm(&mut self, action: Action, targets: &[String]) -> Step<String> {
        let mut details = Vec::new();
        for t in targets {
            let detail = match action {
                Action::Kill => {
                    let s = self.wait_state(t, |s| !s.running, "not running").await?;
                    format!("{t}: {} (exit {})", s.status, s.exit_code)
                }
                Action::Pause => {
                    let s = self.wait_state(t, |s| s.paused, "paused").await?;
                    format!("{t}: {}", s.status)
                }
                Action::Unpause => {
                    self.wait_state(t, |s| s.running && !s.paused, "running")
                        .await?;
                    self.wait_ping(t, CONFIRM_WITHIN).await?;
                    format!("{t}: running, answers PING")
                }
                Action::Start | Action::Restart => {
                    let s = self
                        .wait_state(t, |s| s.running && !s.paused, "running")
                        .await?;
                    self.wait_ping(t, CONFIRM_WITHIN).await?;
                    let mut d = format!("{t}: running since {}, answers PING", s.started_at);
                    if action == Action::Restart {
                        let before = self
                            .sentinels
                            .get(&format!("{t}:run_id"))
                            .cloned()
                            .unwrap_or_default();
                        let after = self.run_id(t).await?;
                        if before.is_empty() || before == after {
                            return Err(format!(
                                "{t}: same process after restart (run_id {after})"
                            ));
                        }
                        d.push_str(", new run_id");
                    }
                    d.push_str(&self.check_sentinel(t).await?);
                    d
                }
                Action::Disconnect => {
                    let s = self.state(t).await?;
                    if s.networks.contains_key(&self.network) {
                        return Err(format!("{t} is still on {}", self.network));
                    }
                    match redis_query::<String>(
                        &self.project.url(t),
                        &redis::cmd("PING"),
                        PROBE_TIMEOUT,
                    )
                    .await
                    {
                        Ok(_) => return Err(format!("{t} still answers PING")),
                        Err(e) => format!("{t}: off the network, PING fails ({e})"),
                    }
                }
                Action::Connect => {
                    let want = self
                        .project
                        .ips
                        .get(t.as_str())
                        .map(ToString::to_string)
                        .unwrap_or_default();
                    let s = self.state(t).await?;
                    match s.networks.get(&self.network) {
                        Some(ip) if *ip == want => {}
                        other => {
                            return Err(format!("{t} is on the network as {other:?}, not {want}"));
                        }
                    }
                    self.wait_ping(t, CONFIRM_WITHIN).await?;
                    format!("{t}: back on the network as {want}, answers PING")
                }
                Action::Expire => {
                    let key = format!("redquorum:lock:{LOCK_NAME}");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let n: i64 = redis_query(
                        &self.project.url(t),
                        redis::cmd("EXISTS").arg(&key),
                        PROBE_TIMEOUT,
                    )
                    .await?;
                    if n != 0 {
                        return Err(format!("{t} still has {key}"));
                    }
                    format!("{t}: {key} expired (EXISTS 0)")
                }
            };
            details.push(detail);
        }
        Ok(details.join("; "))
    }

    async fn state(&self, service: &str) -> Step<crate::docker::ContainerState> {
        self.project.state(service).await
    }

    async fn wait_state(
        &self,
        service: &str,
        pred: impl Fn(&crate::docker::ContainerState) -> bool,
        what: &str,
    ) -> Step<crate::docker::ContainerState> {
        let deadline = Instant::now() + CONFIRM_WITHIN;
        loop {
            let s = self.state(service).await?;
            if pred(&s) {
                return Ok(s);
            }
            if Instant::now() > deadline {
                return Err(format!("{service} is {}, not {what}", s.status));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn wait_ping(&self, service: &str, within: Duration) -> Step {
        let url = self.project.url(service);
        let deadline = Instant::now() + within;
        loop {
            match redis_query::<String>(&url, &redis::cmd("PING"), PROBE_TIMEOUT).await {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("{service} ({url}) does not answer PING: {e}"));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    async fn run_id(&self, service: &str) -> Step<String> {
        let info: String = redis_query(
            &self.project.url(service),
            redis::cmd("INFO").arg("server"),
            PROBE_TIMEOUT,
        )
        .await?;
        info_field(&info, "run_id").ok_or_else(|| format!("{service}: no run_id in INFO"))
    }

    /// Writes a fresh sentinel key on each target (best effort: a paused or unreachable
    /// master gets none).
    async fn set_sentinels(&mut self, targets: &[String]) {
        for t in targets {
            let value = format!("{:016x}", self.rng.next_u64());
            let ok = redis_query::<()>(
                &self.project.url(t),
                redis::cmd("SET").arg("chaos:sentinel").arg(&value),
                PROBE_TIMEOUT,
            )
            .await
            .is_ok();
            if ok {
                self.sentinels.insert(t.clone(), value);
            } else {
                self.sentinels.remove(t);
            }
        }
    }

    /// After a master came back: did its data survive? It must have if the masters persist
    /// every write, and must not have otherwise.
    async fn check_sentinel(&mut self, service: &str) -> Step<String> {
        let url = self.project.url(service);
        let found: Option<String> =
            redis_query(&url, redis::cmd("GET").arg("chaos:sentinel"), PROBE_TIMEOUT).await?;
        let dbsize: i64 = redis_query(&url, &redis::cmd("DBSIZE"), PROBE_TIMEOUT).await?;
        let Some(expected) = self.sentinels.remove(service) else {
            // No sentinel could be written before (the master was unreachable): fall back on
            // what the master says it loaded at start.
            let info: String =
                redis_query(&url, redis::cmd("INFO").arg("persistence"), PROBE_TIMEOUT).await?;
            let loaded = info_field(&info, "rdb_last_load_keys_loaded").unwrap_or_default();
            let aof = info_field(&info, "aof_enabled").unwrap_or_default();
            if !self.durable && (aof != "0" || loaded != "0") {
                return Err(format!(
                    "{service} may have loaded data (aof_enabled={aof}, keys loaded={loaded})"
                ));
            }
            return Ok(format!(
                ", no sentinel; aof_enabled={aof}, keys loaded at start={loaded}, DBSIZE {dbsize}"
            ));
        };
        match (self.durable, found) {
            (true, Some(v)) if v == expected => {
                Ok(format!(", data kept (sentinel survived), DBSIZE {dbsize}"))
            }
            (true, other) => Err(format!(
                "{service} lost data across the restart (sentinel {other:?}, wanted {expected})"
            )),
            (false, None) => Ok(format!(
                ", came back empty (sentinel gone), DBSIZE {dbsize}"
            )),
            (false, Some(_)) => Err(format!(
                "{service} kept its data across the restart: it was meant to come back empty"
            )),
        }
    }

    /// Ends the scenario: thaws and stops the workers, reads the resource's final value.
    async fn shutdown(&mut self) {
        let _ = self.stop_load().await;
        for w in &mut self.workers {
            if w.stopped {
                let _ = kill(
                    Pid::from_raw(i32::try_from(w.pid).unwrap_or(0)),
                    Signal::SIGCONT,
                );
                w.stopped = false;
            }
            if let Ok(line) = serde_json::to_string(&Command::Exit) {
                let _ = w.stdin.write_all(format!("{line}\n").as_bytes()).await;
            }
        }
        for w in &mut self.workers {
            if tokio::time::timeout(Duration::from_secs(3), w.child.wait())
                .await
                .is_err()
            {
                let _ = w.child.kill().await;
            }
        }
        let value: Result<Option<i64>, String> = redis_query(
            &self.project.url(RESOURCE),
            redis::cmd("GET").arg(RESOURCE_KEY),
            Duration::from_secs(1),
        )
        .await;
        if let Ok(v) = value {
            self.record(EventKind::ResourceFinal {
                value: v.unwrap_or(0),
            });
        }
    }
}

/// The state letter of a process in /proc (`T` when stopped).
fn process_state(pid: u32) -> Option<char> {
    state_of(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The state field of a /proc/PID/stat line. The command name is in parentheses and may hold
/// spaces and parentheses: the state follows the last ')'.
fn state_of(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Milliseconds of a duration, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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

    #[test]
    fn process_states_are_read() {
        assert_eq!(state_of("4242 (redquorum-chaos) T 1 4242"), Some('T'));
        assert_eq!(state_of("4242 (a) b (c)) S 1 4242"), Some('S'));
        assert!(matches!(process_state(std::process::id()), Some(c) if c != 'T'));
    }
}
