//! The workers of a running scenario: starting their processes, collecting their events into
//! the history, and the commands a scenario gives them (acquire, read, write, release, load).

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

use super::{Ctx, Step, millis};
use crate::docker::{MASTERS, RESOURCE};
use crate::history::{Event, EventKind, PhaseKind, RUNNER, WorkerId};
use crate::scenario::Scenario;
use crate::settings::RunSettings;
use crate::worker::{Command, LOCK_NAME, LoadParams, LockSpec};

/// A worker process and its pipes.
pub(super) struct WorkerHandle {
    pub(super) id: WorkerId,
    pub(super) child: Child,
    pub(super) stdin: ChildStdin,
    /// `done` and `write_ready` events, for the runner to wait on.
    control: mpsc::UnboundedReceiver<Event>,
    pub(super) pid: u32,
    pub(super) stopped: bool,
}

impl Ctx {
    /// Starts worker `id` as a process of its own, with the scenario's client settings.
    pub(super) fn spawn_worker(
        &self,
        settings: &RunSettings,
        scenario: &Scenario,
        id: WorkerId,
    ) -> Step<WorkerHandle> {
        let nodes: Vec<String> = MASTERS.iter().map(|s| self.project.url(s)).collect();
        let log = std::fs::File::create(self.dir.join(format!("worker-{id}.log")))
            .map_err(|e| format!("worker log: {e}"))?;
        let mut command = tokio::process::Command::new(&settings.exe);
        command.arg("worker");
        if scenario.unsafe_semaphores {
            command.arg("--unsafe-majority-semaphores");
        }
        let mut child = command
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

    pub(super) fn worker(&mut self, id: WorkerId) -> Step<&mut WorkerHandle> {
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

    /// Worker `id` takes the mutex (retrying for `wait`); returns whether it got it.
    pub(crate) async fn acquire(
        &mut self,
        id: WorkerId,
        ttl: Duration,
        wait: Duration,
    ) -> Step<bool> {
        self.acquire_as(id, ttl, wait, LockSpec::Mutex).await
    }

    /// Worker `id` takes what `lock` asks for (retrying for `wait`); returns whether it got it.
    pub(crate) async fn acquire_as(
        &mut self,
        id: WorkerId,
        ttl: Duration,
        wait: Duration,
        lock: LockSpec,
    ) -> Step<bool> {
        let (ttl_ms, wait_ms) = (millis(ttl), millis(wait));
        self.call(id, wait + Duration::from_secs(10), |n| Command::Acquire {
            id: n,
            ttl_ms,
            wait_ms,
            lock,
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

    /// The final acquire: a worker takes the mutex (retrying for `wait`) and releases it.
    pub(crate) async fn final_acquire(&mut self, id: WorkerId, wait: Duration) -> Step {
        self.final_acquire_as(id, wait, LockSpec::Mutex).await
    }

    /// The final acquire of what `lock` asks for.
    pub(crate) async fn final_acquire_as(
        &mut self,
        id: WorkerId,
        wait: Duration,
        lock: LockSpec,
    ) -> Step {
        self.phase("final acquire", PhaseKind::Final);
        if self
            .acquire_as(id, Duration::from_secs(1), wait, lock)
            .await?
        {
            self.release(id).await?;
        }
        Ok(())
    }
}
