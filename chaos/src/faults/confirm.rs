//! Confirming a fault on the masters: container state from `docker inspect`, PING, a new
//! `run_id` after a restart, the sentinel key (gone when a master came back empty, there when it
//! kept its data), `EXISTS` after an early expiry.

use std::time::{Duration, Instant};

use super::{Action, CONFIRM_WITHIN, Faults, PROBE_TIMEOUT};
use crate::docker::{ContainerState, info_field, redis_query};
use crate::worker::LOCK_NAME;

impl Faults {
    /// Checks that an action took effect on every target; returns how it was checked.
    pub(crate) async fn confirm(
        &mut self,
        action: Action,
        targets: &[String],
    ) -> Result<String, String> {
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

    async fn state(&self, service: &str) -> Result<ContainerState, String> {
        self.project.state(service).await
    }

    async fn wait_state(
        &self,
        service: &str,
        pred: impl Fn(&ContainerState) -> bool,
        what: &str,
    ) -> Result<ContainerState, String> {
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

    /// Waits until `service` answers PING.
    pub(crate) async fn wait_ping(&self, service: &str, within: Duration) -> Result<(), String> {
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

    /// The `run_id` a master reports: a new one means a new process.
    pub(super) async fn run_id(&self, service: &str) -> Result<String, String> {
        let info: String = redis_query(
            &self.project.url(service),
            redis::cmd("INFO").arg("server"),
            PROBE_TIMEOUT,
        )
        .await?;
        info_field(&info, "run_id").ok_or_else(|| format!("{service}: no run_id in INFO"))
    }

    /// After a master came back: did its data survive? It must have if the masters persist
    /// every write, and must not have otherwise.
    async fn check_sentinel(&mut self, service: &str) -> Result<String, String> {
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
}
