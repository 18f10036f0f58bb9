//! The context of a running scenario: its compose project, its worker processes, the faults it
//! injects and the history it records. A scenario acts only through [`Ctx`]; how the workers are
//! started and given commands is in `workers`, how faults take effect in the `faults` module.

mod workers;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::docker::{MASTERS, Project, RESOURCE, info_field, redis_query};
use crate::faults::{self, Action, Faults, PROBE_TIMEOUT};
use crate::history::{Clock, Event, EventKind, PhaseKind, RUNNER, WorkerId};
use crate::rng::SplitMix;
use crate::scenario::Scenario;
use crate::settings::RunSettings;
use crate::worker::{Command, LoadParams, RESOURCE_KEY};

use self::workers::WorkerHandle;

/// A running scenario: the project, the workers, the history.
pub(crate) struct Ctx {
    clock: Clock,
    project: Project,
    history: Arc<Mutex<Vec<Event>>>,
    workers: Vec<WorkerHandle>,
    next_fault: u32,
    next_cmd: u64,
    /// The masters' faults, and what confirming them needs.
    faults: Faults,
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
    /// The context of a scenario on `project`, before its workers are started: `durable` when
    /// its masters persist every write, `seed` for its choices.
    pub(crate) fn new(
        clock: Clock,
        project: Project,
        history: Arc<Mutex<Vec<Event>>>,
        durable: bool,
        seed: u64,
        dir: PathBuf,
    ) -> Self {
        Ctx {
            clock,
            faults: Faults::new(project.clone(), durable),
            project,
            history,
            workers: Vec::new(),
            next_fault: 0,
            next_cmd: 0,
            rng: SplitMix::new(seed),
            dir,
            load: None,
            spawning: None,
        }
    }

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
        tell!("   phase: {name}");
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
    pub(crate) async fn prepare(&mut self, settings: &RunSettings, scenario: &Scenario) -> Step {
        let mut all = self.masters();
        all.push(RESOURCE.to_owned());
        for service in &all {
            // Looked up once now, so that confirming a fault costs no `compose ps`.
            self.project.container(service).await?;
        }
        self.faults.find_network().await?;
        for service in &all {
            self.faults
                .wait_ping(service, Duration::from_secs(20))
                .await?;
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
        tell!("   fault {fault}: {action} worker{id}");
        let w = self.worker(id)?;
        let pid = w.pid;
        w.stopped = stop;
        match faults::signal_process(pid, stop).await {
            Ok(detail) => {
                self.record(EventKind::FaultConfirmed { id: fault, detail });
                Ok(())
            }
            Err(detail) => {
                self.record(EventKind::FaultUnconfirmed {
                    id: fault,
                    detail: detail.clone(),
                });
                Err(format!("{action} of worker {id} not confirmed: {detail}"))
            }
        }
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
        tell!("   fault {id}: {} {}", action.as_str(), targets.join(","));
        let result = self.faults.inject(action, targets, &mut self.rng).await;
        let result = match result {
            Ok(()) => self.faults.confirm(action, targets).await,
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

    /// Ends the scenario: thaws and stops the workers, reads the resource's final value.
    pub(crate) async fn shutdown(&mut self) {
        let _ = self.stop_load().await;
        for w in &mut self.workers {
            if w.stopped {
                faults::thaw(w.pid);
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

/// Milliseconds of a duration, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
