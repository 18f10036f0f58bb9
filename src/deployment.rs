//! The deployment marker: how every client tells a master that lost its data from a master of
//! a new deployment, and puts the first in quarantine, on the masters themselves.
//!
//! Every master carries a marker (`lua/mark.lua`). A master without one grants nothing
//! (`lua/acquire.lua`); the client that meets it reads every master, and then:
//! - when another master carries the marker, the deployment was in use and this master lost
//!   its data: it is marked again in quarantine until the latest expiry the masters that kept
//!   their data record (never longer than the longest TTL they record), so that every lock it
//!   may have granted has expired elsewhere before it grants again;
//! - when a quorum of masters answered and none carries it, the deployment is new: every
//!   master is marked, with no quarantine, and counts at once.
//!
//! The quarantine is a key on the master that expires when it ends, so every client, including
//! one started after the loss, sees the same quarantine by the master's own clock. Only a loss
//! of data on a majority of masters at once (which no Redlock survives) looks like a new
//! deployment.

use std::time::{Duration, Instant};

use tracing::{info, warn};

use std::sync::Arc;

use crate::cluster::Cluster;
use crate::error::{NodeFailureKind, Operation};
use crate::fanout::{Answer, fan_out};
use crate::node::{DeploymentState, Node};
use crate::quorum::{Decision, quorum};

/// Bytes of randomness in a new deployment's id (hex-encoded).
const DEPLOYMENT_ID_BYTES: usize = 8;

/// The least time the reading of every master may take: marking happens once per deployment
/// and once per lost master, so it waits a little longer than the per-node deadline.
const MARKING_DEADLINE_MIN: Duration = Duration::from_millis(200);

/// What to do about the masters that carry no marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Marking {
    /// Nothing can be decided: too few masters answered, or none lacks the marker.
    Nothing,
    /// A new deployment: mark every unmarked master with a new id, no quarantine.
    New,
    /// The deployment was in use: mark the unmarked masters with its id, quarantined.
    Lost {
        id: String,
        quarantine: Duration,
        longest_ttl: Duration,
    },
}

/// Decides what to do from every master's reading (`None` or an error: it did not answer).
/// `quarantine` is the client's own setting, if any; `drift` the allowance for clock drift
/// over a time. A master lost its data when it carries no marker, or one made for an earlier
/// process while it does not keep every write (see [`DeploymentState::restarted`]).
pub(crate) fn plan(
    readings: &[Option<Answer<DeploymentState>>],
    quarantine: Option<Duration>,
    drift: impl Fn(Duration) -> Duration,
) -> Marking {
    let answered: Vec<&DeploymentState> = readings
        .iter()
        .filter_map(|r| r.as_ref()?.as_ref().ok())
        .collect();
    if !answered.iter().any(|s| s.lost_data()) {
        return Marking::Nothing;
    }
    // A master back from older data still has the marker: the deployment was in use.
    let Some(id) = answered.iter().find_map(|s| s.marker.clone()) else {
        return if answered.len() >= quorum(readings.len()) {
            Marking::New
        } else {
            Marking::Nothing
        };
    };
    // Every master that grants a lock records its TTL and when it expires, so each lock that
    // may still be held left both on a quorum, which may have lost no more than the masters
    // that lost their data. More than `n - quorum` masters that kept it always include one of
    // that quorum: then the latest expiry among them, and the longest TTL, each cover every
    // lock. With fewer of them read and some masters not read, wait (the others grant
    // nothing, or their votes do not count, meanwhile) until more answer; that many masters
    // out leaves no quorum to serve anyway. With every master read, a majority has lost its
    // data, which no Redlock survives: the records there are are the best there is.
    let kept: Vec<&DeploymentState> = answered
        .iter()
        .filter(|s| !s.lost_data())
        .copied()
        .collect();
    let n = readings.len();
    if kept.len() < n - quorum(n) + 1 && answered.len() < n {
        return Marking::Nothing;
    }
    let records = if kept.is_empty() { answered } else { kept };
    let longest_ttl = records
        .iter()
        .map(|s| s.longest_ttl)
        .max()
        .unwrap_or_default();
    Marking::Lost {
        id,
        quarantine: quarantine.unwrap_or_else(|| until_expired(&records, longest_ttl, drift)),
        longest_ttl,
    }
}

/// How long a master that lost its data stays out: until the latest expiry that `records`
/// (read from the masters that kept theirs) name, with the allowance for the masters' clocks
/// drifting over that time, and never longer than the longest TTL they record. When one of them
/// records no expiry (it was marked by an earlier version, whose grants recorded none), the
/// longest TTL.
fn until_expired(
    records: &[&DeploymentState],
    longest_ttl: Duration,
    drift: impl Fn(Duration) -> Duration,
) -> Duration {
    let latest: Option<Vec<Duration>> = records.iter().map(|s| s.latest_expiry).collect();
    match latest.and_then(|l| l.into_iter().max()) {
        Some(left) if left.is_zero() => Duration::ZERO,
        Some(left) => longest_ttl.min(left + drift(left)),
        None => longest_ttl,
    }
}

/// The readings as the servers behind the nodes give them: one server is one reading, as it is
/// one vote. A node found to be the same server as another is left out (two addresses of one
/// master, both unmarked, would count twice towards taking a loss of data for a new
/// deployment), and, where votes are verified, a node whose server was not read is taken as
/// silent: it might be another's alias.
fn by_server(
    nodes: &[Node],
    readings: &[Option<Answer<DeploymentState>>],
) -> Vec<Option<Answer<DeploymentState>>> {
    nodes
        .iter()
        .zip(readings)
        .filter_map(|(node, reading)| match node.vote_counts(None) {
            Err(NodeFailureKind::SameServer(_)) => None,
            Err(NodeFailureKind::Unverified) => Some(None),
            _ => Some(reading.clone()),
        })
        .collect()
}

/// Each node's reading, with [`DeploymentState::restarted`] set from what the client read of
/// the node's process.
fn with_restarts(
    nodes: &[Node],
    readings: Vec<Option<Answer<DeploymentState>>>,
) -> Vec<Option<Answer<DeploymentState>>> {
    nodes
        .iter()
        .zip(readings)
        .map(|(node, reading)| {
            reading.map(|answer| {
                answer.map(|mut state| {
                    state.restarted = state.marked_run.is_some() && node.restarted_since_marked();
                    state
                })
            })
        })
        .collect()
}

/// What one node is marked with: the deployment's id, its quarantine, and the longest TTL.
type MarkWith = (String, Duration, Duration);

impl Cluster {
    /// Reads every master's marker and marks those without one (see the module's docs).
    ///
    /// One marking runs at a time. Two at once on a new deployment would each find masters
    /// the other had not marked yet: the second could then take the deployment for one in
    /// use, or give up until more masters answer, while the attempt that waited for it went
    /// on to masters still unmarked, which grant nothing.
    pub(crate) async fn mark_deployment(self: &Arc<Self>) {
        let _turn = self.marking_turn.lock().await;
        let inner = self;
        let deadline = Instant::now() + inner.settings.node_timeout.max(MARKING_DEADLINE_MIN);
        let readings = fan_out(
            &inner.nodes,
            Operation::Inspect,
            deadline,
            |i| {
                let inner = inner.clone();
                async move { inner.nodes[i].deployment(inner.deployment_keys.all()).await }
            },
            |_, _| Decision::Pending,
        )
        .await;
        let readings = with_restarts(&inner.nodes, readings);
        let lost = match plan(
            &by_server(&inner.nodes, &readings),
            inner.settings.quarantine,
            |over| inner.settings.drift(over),
        ) {
            Marking::Nothing => None,
            Marking::New => new_deployment_id().map(|id| (id, Duration::ZERO, Duration::ZERO)),
            Marking::Lost {
                id,
                quarantine,
                longest_ttl,
            } => Some((id, quarantine, longest_ttl)),
        };
        // The masters that lost their data, to mark as the plan says; and those whose marker
        // records no process (made before that was recorded), whose process now read is taken
        // as the marked one, with no quarantine.
        let marks: Vec<Option<MarkWith>> = readings
            .iter()
            .zip(&inner.nodes)
            .map(|(reading, node)| match reading {
                Some(Ok(state)) if state.lost_data() => lost.clone(),
                Some(Ok(state)) if state.marked_run.is_none() && node.restarted_since_marked() => {
                    let id = state.marker.clone()?;
                    Some((id, Duration::ZERO, Duration::ZERO))
                }
                _ => None,
            })
            .collect();
        if marks.iter().all(Option::is_none) {
            return;
        }
        // Its own deadline: reading waited out the masters that did not answer.
        let deadline = Instant::now() + inner.settings.node_timeout.max(MARKING_DEADLINE_MIN);
        let marked = fan_out(
            &inner.nodes,
            Operation::Inspect,
            deadline,
            |i| {
                let (inner, with) = (inner.clone(), marks[i].clone());
                async move {
                    let Some((id, quarantine, longest_ttl)) = with else {
                        return Ok(false);
                    };
                    inner.nodes[i]
                        .mark(inner.deployment_keys.all(), &id, quarantine, longest_ttl)
                        .await
                }
            },
            |_, _| Decision::Pending,
        )
        .await;
        for (i, answer) in marked.iter().enumerate() {
            let node = inner.nodes[i].addr();
            let Some((id, quarantine, _)) = &marks[i] else {
                continue;
            };
            match answer {
                Some(Ok(true)) if quarantine.is_zero() => {
                    info!(node, deployment = %id, "master marked as part of the deployment");
                }
                Some(Ok(true)) => warn!(
                    node,
                    deployment = %id,
                    quarantine = %humantime::format_duration(*quarantine),
                    "master lost its data while the deployment was in use; quarantined until every lock it may have granted has expired"
                ),
                Some(Err(e)) => warn!(node, "could not mark the master: {e}"),
                _ => {}
            }
        }
    }
}

/// Marks the deployment in the background: for a master found without its marker by an
/// answer that came after the vote was decided. A marking already under way reads the masters
/// again once it ends (see [`MarkingRequests`](crate::cluster::MarkingRequests)).
pub(crate) fn mark_in_background(cluster: &Arc<Cluster>) {
    if !cluster.marking.ask() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        cluster.marking.abandon();
        return;
    };
    let cluster = cluster.clone();
    runtime.spawn(async move {
        loop {
            while cluster.marking.take() {
                cluster.mark_deployment().await;
            }
            if !cluster.marking.finish() {
                break;
            }
        }
    });
}

/// A new deployment's id: random, so that two deployments that share masters by mistake can
/// be told apart (`redquorum doctor` shows it).
fn new_deployment_id() -> Option<String> {
    use rand::TryRng;
    let mut bytes = [0u8; DEPLOYMENT_ID_BYTES];
    rand::rngs::SysRng.try_fill_bytes(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether an answer says the master carries no marker.
pub(crate) fn is_unmarked<T>(answer: &Option<Answer<T>>) -> bool {
    matches!(answer, Some(Err(NodeFailureKind::Unmarked)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn state(marker: Option<&str>, longest: u32) -> Option<Answer<DeploymentState>> {
        Some(Ok(DeploymentState {
            marker: marker.map(str::to_owned),
            longest_ttl: longest * S,
            quarantined_for: None,
            marked_run: marker.map(|_| "r1".to_owned()),
            latest_expiry: None,
            restarted: false,
        }))
    }

    /// A marked master of this version, which records when its locks expire: `left` seconds
    /// from now.
    fn recording(longest: u32, left: u32) -> Option<Answer<DeploymentState>> {
        let mut reading = state(Some("d1"), longest);
        if let Some(Ok(state)) = &mut reading {
            state.latest_expiry = Some(left * S);
        }
        reading
    }

    /// The client's default allowance: 1% and 2 ms.
    fn drift(over: Duration) -> Duration {
        over / 100 + Duration::from_millis(2)
    }

    /// A master that carries the marker, made for an earlier process: it came back from older
    /// data, recording the longest TTL of then.
    fn restarted(marker: &str, longest: u32) -> Option<Answer<DeploymentState>> {
        let mut reading = state(Some(marker), longest);
        if let Some(Ok(state)) = &mut reading {
            state.restarted = true;
        }
        reading
    }

    fn down() -> Option<Answer<DeploymentState>> {
        Some(Err(NodeFailureKind::Timeout))
    }

    #[test]
    fn a_new_deployment_needs_a_quorum_of_unmarked_masters() {
        let fresh = [state(None, 0), state(None, 0), state(None, 0)];
        assert_eq!(plan(&fresh, None, drift), Marking::New);
        // Two of three answered, none marked: still a quorum, so new.
        assert_eq!(
            plan(&[state(None, 0), state(None, 0), down()], None, drift),
            Marking::New
        );
        // Only one of three answered: a marked majority may be out of reach.
        assert_eq!(
            plan(&[state(None, 0), down(), None], None, drift),
            Marking::Nothing
        );
    }

    #[test]
    fn a_master_beside_masters_of_an_earlier_version_is_quarantined_for_the_longest_ttl() {
        let readings = [state(Some("d1"), 30), state(None, 0), state(Some("d1"), 10)];
        assert_eq!(
            plan(&readings, None, drift),
            Marking::Lost {
                id: "d1".into(),
                quarantine: 30 * S,
                longest_ttl: 30 * S,
            }
        );
        // The client's own setting wins.
        assert!(matches!(
            plan(&readings, Some(5 * S), drift),
            Marking::Lost { quarantine, .. } if quarantine == 5 * S
        ));
        // A master not read may be the only one left that recorded the longest TTL: wait.
        let partial = [state(Some("d1"), 30), state(None, 0), down()];
        assert_eq!(plan(&partial, None, drift), Marking::Nothing);
        // Five masters, one lost, one down: three marked ones cover every lock.
        let five = [
            state(Some("d1"), 30),
            state(None, 0),
            down(),
            state(Some("d1"), 60),
            state(Some("d1"), 10),
        ];
        assert!(matches!(
            plan(&five, None, drift),
            Marking::Lost { quarantine, .. } if quarantine == 60 * S
        ));
        // A majority lost its data, every master read: the record is all there is.
        let majority = [state(Some("d1"), 30), state(None, 0), state(None, 0)];
        assert!(matches!(
            plan(&majority, None, drift),
            Marking::Lost { quarantine, .. } if quarantine == 30 * S
        ));
        // A master back from a snapshot has the marker, and lost its data all the same: it is
        // quarantined for the longest TTL the others record, never taken for a new deployment.
        let restored = [
            state(Some("d1"), 30),
            restarted("d1", 10),
            state(Some("d1"), 20),
        ];
        assert_eq!(
            plan(&restored, None, drift),
            Marking::Lost {
                id: "d1".into(),
                quarantine: 30 * S,
                longest_ttl: 30 * S,
            }
        );
        let all_restored = [restarted("d1", 10), restarted("d1", 20), restarted("d1", 5)];
        assert!(matches!(
            plan(&all_restored, None, drift),
            Marking::Lost { quarantine, .. } if quarantine == 20 * S
        ));
        let one_read = [restarted("d1", 10), state(Some("d1"), 30), down()];
        assert_eq!(plan(&one_read, None, drift), Marking::Nothing);
        // Nothing lost, nothing to do.
        assert_eq!(
            plan(&[state(Some("d1"), 30), state(Some("d1"), 30)], None, drift),
            Marking::Nothing
        );
    }

    #[test]
    fn a_master_that_lost_its_data_is_quarantined_until_the_latest_expiry_the_others_record() {
        // A 10-minute TTL was asked once; the last lock granted expires in 5 s.
        let readings = [recording(600, 5), state(None, 0), recording(600, 2)];
        let five = 5 * S;
        assert_eq!(
            plan(&readings, None, drift),
            Marking::Lost {
                id: "d1".into(),
                quarantine: five + drift(five),
                longest_ttl: 600 * S,
            }
        );
        // Nothing granted is still alive: no quarantine at all.
        let idle = [recording(600, 0), state(None, 0), recording(600, 0)];
        assert!(matches!(
            plan(&idle, None, drift),
            Marking::Lost { quarantine, .. } if quarantine.is_zero()
        ));
        // Never longer than the longest TTL recorded.
        let long = [recording(10, 30), state(None, 0), recording(10, 1)];
        assert!(matches!(
            plan(&long, None, drift),
            Marking::Lost { quarantine, .. } if quarantine == 10 * S
        ));
        // What the master that lost its data records (from a snapshot) does not count.
        let mut restored = recording(600, 50);
        if let Some(Ok(state)) = &mut restored {
            state.restarted = true;
        }
        let readings = [recording(600, 3), restored, recording(600, 1)];
        assert!(matches!(
            plan(&readings, None, drift),
            Marking::Lost { quarantine, .. } if quarantine == 3 * S + drift(3 * S)
        ));
        // A kept master marked by an earlier version records no expiry: the longest TTL.
        let mixed = [recording(600, 5), state(None, 0), state(Some("d1"), 60)];
        assert!(matches!(
            plan(&mixed, None, drift),
            Marking::Lost { quarantine, .. } if quarantine == 600 * S
        ));
    }
}
