//! What the client knows of one node's health: the reading taken on a connection (uptime,
//! identity, persistence), the deployment state its answers showed, and whether its votes count.

use std::time::{Duration, Instant};

use redis::Value;
use tracing::warn;

use super::{Info, LinkId, Node, config_value, is_durable};
use crate::error::{NodeFailureKind, Operation};

/// How old a node's health reading may get before the next call refreshes it.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_secs(10);

/// What the client knows of one node's health, from [`Client::node_health`](crate::Client::node_health).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeHealth {
    /// The node's address, `host:port`.
    pub node: String,
    /// Why the last reading failed, if it did.
    pub error: Option<String>,
    /// How long the server process has been up, at the last reading.
    pub uptime: Option<Duration>,
    /// Whether AOF is on.
    pub aof_enabled: Option<bool>,
    /// The `appendfsync` policy, when `CONFIG GET` is allowed.
    pub appendfsync: Option<String>,
    /// Whether the node keeps every write across a restart (AOF with `appendfsync always`):
    /// what fencing counters need. `false` when it cannot be confirmed.
    pub durable: bool,
    /// Whether the node carries the deployment's marker; `Some(false)`: it lost its data (or
    /// the deployment is new) and grants nothing until a client marks it. `None`: not known.
    pub marked: Option<bool>,
    /// How much longer the node is quarantined (it lost its data while the deployment was in
    /// use, so it grants nothing until every lock it may have granted has expired), by the
    /// node's own clock, as last seen.
    pub quarantined_for: Option<Duration>,
    /// Whether the node's votes can count towards a quorum now, by this client's settings: it
    /// answered, is not quarantined, and keeps every write if the client requires durable
    /// nodes ([`ClientBuilder::require_durable`](crate::ClientBuilder::require_durable)).
    pub usable: bool,
}

/// The last health reading of a node.
#[derive(Debug, Default)]
pub(super) struct Health {
    /// The connection the reading was taken on: votes count only from that connection.
    pub(super) verified_link: Option<LinkId>,
    read_at: Option<Instant>,
    started_at: Option<Instant>,
    run_id: Option<String>,
    aof_enabled: Option<bool>,
    appendfsync: Option<String>,
    pub(super) error: Option<String>,
    /// Whether a warning about durability was logged for the current process of the node.
    warned: bool,
    /// Another node of the client that was read as the same server (one `run_id`) before
    /// this one: that one casts the server's vote, and this one none.
    same_server_as: Option<String>,
    /// Whether the node carried the marker, as last seen.
    pub(super) marked: Option<bool>,
    /// The process the marker was made for (`run_id`), as last seen; `None` with the marker:
    /// none was recorded (a marker older than that record).
    marked_run: Option<String>,
    /// Until when the node said it is quarantined, as last seen.
    quarantined_until: Option<Instant>,
}

impl Health {
    fn durable(&self) -> bool {
        is_durable(self.aof_enabled, self.appendfsync.as_deref())
    }

    /// Whether the node carries a marker that was not made for the process it is now read to
    /// be, while it does not keep every write: it came back from older data (a snapshot, or
    /// AOF that is not fsynced at every write) and may have lost locks it granted since, so
    /// its votes do not count until it is marked again, in quarantine. A marker with no
    /// process recorded is marked again (for this process, with no quarantine) first.
    fn restarted_since_marked(&self) -> bool {
        self.marked == Some(true)
            && !self.durable()
            && self
                .run_id
                .as_ref()
                .is_some_and(|now| self.marked_run.as_ref() != Some(now))
    }
}

impl Node {
    /// The lock on the health reading; a poisoned lock only means a panic elsewhere while
    /// holding it, and the reading is still usable.
    pub(super) fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn needs_probe(&self, link: LinkId) -> bool {
        let health = self.health();
        health.verified_link != Some(link)
            || health.read_at.is_none_or(|t| t.elapsed() > PROBE_INTERVAL)
    }

    /// Whether a vote that came on connection `link` counts (`None`: on the current
    /// connection, if it is not known to be broken); the reason when it does not.
    ///
    /// Durability says what the master behind a connection may forget, and its identity which
    /// process made a grant; a reading from another connection may be of another process, so
    /// a vote counts only from the connection the reading was taken on. (Quarantine itself is
    /// decided by the master, in the script that grants.)
    pub(crate) fn vote_counts(
        &self,
        link: Option<LinkId>,
    ) -> std::result::Result<(), NodeFailureKind> {
        let link = link.or_else(|| {
            self.current_link()
                .filter(|(_, wire)| !wire.is_broken())
                .map(|(id, _)| id)
        });
        let health = self.health();
        if self.settings.verify_votes && (link.is_none() || health.verified_link != link) {
            return Err(NodeFailureKind::Unverified);
        }
        self.reading_lets_vote(&health)
    }

    /// Whether a grant made by the master's process `sender` (read on the connection that
    /// carried it: a subscription, or an attempt's connection) counts: only by a reading of
    /// that same process. A grant heard from a master that restarted since the client last
    /// read it is judged by nothing the client knows, and counts for nothing until the master
    /// is read again.
    pub(crate) fn grant_counts(
        &self,
        sender: Option<&str>,
    ) -> std::result::Result<(), NodeFailureKind> {
        let health = self.health();
        if self.settings.verify_votes
            && (sender.is_none()
                || health.verified_link.is_none()
                || health.run_id.as_deref() != sender)
        {
            return Err(NodeFailureKind::Unverified);
        }
        self.reading_lets_vote(&health)
    }

    /// The process that connection `link` was read to be connected to, if it was.
    pub(crate) fn process_of(&self, link: LinkId) -> Option<std::sync::Arc<str>> {
        let health = self.health();
        if health.verified_link != Some(link) {
            return None;
        }
        health.run_id.as_deref().map(Into::into)
    }

    /// What a granting script is told of the master behind connection `link` (see
    /// `marked_for_me` in `lua/marked.lua`): `*` when it was read durable, or when this client
    /// does not check (quarantine off and durability not required: it asks for no reading), its
    /// `run_id`, or nothing when the connection was not read yet (its reading is in the same
    /// pipeline as the script, which then asks the master itself).
    pub(super) fn process_arg(&self, link: LinkId) -> String {
        if !self.settings.verify_votes {
            return "*".to_owned();
        }
        let health = self.health();
        if health.verified_link != Some(link) {
            return String::new();
        }
        if health.durable() {
            return "*".to_owned();
        }
        health.run_id.clone().unwrap_or_default()
    }

    /// What the reading says of the master's votes, whichever connection they came on.
    fn reading_lets_vote(&self, health: &Health) -> std::result::Result<(), NodeFailureKind> {
        if let Some(other) = &health.same_server_as {
            return Err(NodeFailureKind::SameServer(other.clone()));
        }
        if self.settings.require_durable && !health.durable() {
            return Err(NodeFailureKind::NotDurable);
        }
        if self.settings.verify_votes && health.restarted_since_marked() {
            return Err(NodeFailureKind::Unmarked);
        }
        Ok(())
    }

    /// Whether the node, which does not keep every write, carries a marker made for another
    /// process than the one last read (or one recording no process): see
    /// `Health::restarted_since_marked`.
    pub(crate) fn restarted_since_marked(&self) -> bool {
        self.health().restarted_since_marked()
    }

    /// The `run_id` of the node's process, as last read.
    pub(crate) fn run_id(&self) -> Option<String> {
        self.health().run_id.clone()
    }

    /// Books the process the node's marker was made for, as the node said.
    pub(super) fn saw_marked_run(&self, run_id: Option<String>) {
        self.health().marked_run = run_id;
    }

    /// Stores a health reading from the replies to [`Node::probe_pipeline`].
    pub(super) fn record_probe(&self, link: LinkId, replies: &[Value]) {
        let info = Info::from_reply(replies.first());
        let field = |name: &str| info.field(name);
        let now = Instant::now();
        let uptime = field("uptime_in_seconds")
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_secs);
        let run_id = field("run_id");
        let aof_enabled = field("aof_enabled").map(|v| v == "1");
        let appendfsync = replies.get(1).and_then(config_value);
        let deployment = match replies.get(2) {
            Some(Value::Array(read)) => Some((
                matches!(read.first(), Some(Value::BulkString(_))),
                match read.get(1) {
                    Some(Value::BulkString(run)) => Some(String::from_utf8_lossy(run).into_owned()),
                    _ => None,
                },
            )),
            _ => None,
        };
        let mut health = self.health();
        if uptime.is_none() {
            health.error = Some("INFO did not report uptime_in_seconds".to_owned());
            return;
        }
        if health.run_id.is_some() && health.run_id != run_id {
            health.warned = false;
        }
        let same_server_as = run_id
            .as_deref()
            .and_then(|id| self.shared.servers.identify(&self.addr, id));
        if same_server_as.is_some() && same_server_as != health.same_server_as {
            warn!(
                node = self.addr,
                same_server_as = same_server_as.as_deref(),
                "node is the same server as another node of the client (one run_id): it casts no vote of its own; list each master once"
            );
        }
        health.same_server_as = same_server_as;
        health.verified_link = Some(link);
        health.read_at = Some(now);
        health.started_at = uptime.and_then(|u| now.checked_sub(u));
        health.run_id = run_id;
        health.aof_enabled = aof_enabled;
        health.appendfsync = appendfsync;
        if let Some((marked, marked_run)) = deployment {
            health.marked = Some(marked);
            health.marked_run = marked_run;
        }
        health.error = None;
        let durable = health.durable();
        self.metrics.reachable();
        self.metrics.durable(durable);
        if !durable && !health.warned {
            health.warned = true;
            warn!(
                node = self.addr,
                aof_enabled = ?health.aof_enabled,
                appendfsync = ?health.appendfsync,
                "node cannot keep fencing counters and locks across a restart; run it with appendonly yes and appendfsync always"
            );
        }
    }

    /// Books what an answer said of the node's deployment state.
    pub(super) fn saw_deployment(&self, marked: bool, quarantined_for: Option<Duration>) {
        let mut health = self.health();
        health.marked = Some(marked);
        health.quarantined_until = quarantined_for.map(|left| Instant::now() + left);
        self.metrics
            .quarantined(quarantined_for.is_some() || !marked);
    }

    /// The node carries no marker because the deployment is new (no master carries one): the
    /// next acquire marks it with no quarantine, so it is not counted as quarantined.
    pub(crate) fn marked_as_new(&self) {
        self.metrics.quarantined(false);
    }

    /// Reads the node's health now.
    pub(crate) async fn probe(&self) -> std::result::Result<(), NodeFailureKind> {
        let (link, conn) = self.connect();
        match conn
            .send_pipeline(Operation::Inspect, &self.probe_pipeline(), PROBE_REPLIES)
            .await
        {
            Ok(values) => {
                self.record_probe(link, &values);
                Ok(())
            }
            Err(e) => Err(self.failed(Operation::Inspect, &e, link)),
        }
    }

    /// The current health report.
    pub(crate) fn report(&self) -> NodeHealth {
        let health = self.health();
        let quarantined_for = health
            .quarantined_until
            .map(|until| until.saturating_duration_since(Instant::now()))
            .filter(|left| !left.is_zero());
        let durable = health.durable();
        NodeHealth {
            node: self.addr.clone(),
            error: health.error.clone(),
            uptime: health.started_at.map(|s| s.elapsed()),
            aof_enabled: health.aof_enabled,
            appendfsync: health.appendfsync.clone(),
            durable,
            // Marked for another process: it is to be marked again, as if it carried none.
            marked: health
                .marked
                .map(|marked| marked && !health.restarted_since_marked()),
            usable: health.error.is_none()
                && health.same_server_as.is_none()
                && quarantined_for.is_none()
                && (durable || !self.settings.require_durable)
                && !(self.settings.verify_votes && health.restarted_since_marked()),
            quarantined_for,
        }
    }
}

/// How many replies [`Node::probe_pipeline`] has.
pub(super) const PROBE_REPLIES: usize = 3;

impl Node {
    /// `INFO server persistence`, `CONFIG GET appendfsync`, and the deployment's marker with
    /// the process it was made for, in that order: who the node is, whether it keeps every
    /// write, and whether it is still the process it was marked as.
    pub(super) fn probe_pipeline(&self) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        pipe.add_command(
            redis::cmd("INFO")
                .arg("server")
                .arg("persistence")
                .to_owned(),
        );
        pipe.add_command(
            redis::cmd("CONFIG")
                .arg("GET")
                .arg("appendfsync")
                .to_owned(),
        );
        let keys = &self.shared.deployment;
        pipe.add_command(
            redis::cmd("MGET")
                .arg(&keys.marker)
                .arg(&keys.marked_run)
                .to_owned(),
        );
        pipe
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use redis::Value;

    use super::*;
    use crate::node::{NodeSettings, Shared};

    fn node() -> Node {
        let settings = NodeSettings {
            connect_timeout: Duration::from_secs(1),
            verify_votes: true,
            require_durable: false,
        };
        Node::new("redis://127.0.0.1:6379", settings, &Shared::default())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Books a reading on connection `link` of process `run_id`, not durable, whose marker was
    /// made for `marked_run`.
    fn read(node: &Node, link: LinkId, run_id: &str, marked_run: &str) {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let info = format!(
            "# Server\r\nrun_id:{run_id}\r\nuptime_in_seconds:10\r\n# Persistence\r\naof_enabled:0\r\n"
        );
        let replies = [
            bulk(&info),
            Value::Array(vec![bulk("appendfsync"), bulk("everysec")]),
            Value::Array(vec![bulk("d1"), bulk(marked_run)]),
        ];
        node.record_probe(link, &replies);
    }

    #[test]
    fn a_grant_counts_only_by_a_reading_of_the_process_that_made_it() {
        let node = node();
        read(&node, 1, "aaaa", "aaaa");
        assert_eq!(node.grant_counts(Some("aaaa")), Ok(()));
        assert_eq!(node.process_arg(1), "aaaa");
        // The master restarted (from a snapshot) and the grant came from its new process, which
        // the client has not read: nothing it knows can judge it.
        assert_eq!(
            node.grant_counts(Some("bbbb")),
            Err(NodeFailureKind::Unverified)
        );
        assert_eq!(node.grant_counts(None), Err(NodeFailureKind::Unverified));
        // Read on a new connection: the new process, its marker made for the one before.
        read(&node, 2, "bbbb", "aaaa");
        assert_eq!(
            node.grant_counts(Some("bbbb")),
            Err(NodeFailureKind::Unmarked)
        );
        assert_eq!(
            node.grant_counts(Some("aaaa")),
            Err(NodeFailureKind::Unverified)
        );
        // A script sent on the old connection is told nothing; on the new one, the process.
        assert_eq!(node.process_arg(1), "");
        assert_eq!(node.process_arg(2), "bbbb");
    }
}
