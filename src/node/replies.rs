//! What the nodes answer: the replies of the scripts, and the reading of plain replies.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::error::NodeFailureKind;

/// A node's answer to an acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Granted with this fencing token.
    Granted(u64),
    /// Granted with the fencing token the node keeps for the lock, which is this: a reader's
    /// (the writers' counter), or one more hold of a reentrant lock its owner held already;
    /// `true` when the owner held it here with other holds than this attempt's (from an
    /// earlier round of the same attempt).
    Kept(u64, bool),
    /// Held by another token, whose acquisition has this fencing token.
    Held(u64),
    /// The proposed fencing token is not above the node's counter, which is this.
    Stale(u64),
    /// The lock is free, but an earlier waiter goes first.
    Reserved,
    /// A release handed the lock to the calling waiter, with this token and fencing token; the
    /// master's process as read on the connection that said so, if it was.
    HandedOver(Arc<str>, u64, Option<Arc<str>>),
}

/// What a node knows of its deployment (see `lua/mark.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeploymentState {
    /// The deployment's id, when the node carries the marker.
    pub(crate) marker: Option<String>,
    /// The longest TTL asked for on the node.
    pub(crate) longest_ttl: Duration,
    /// How much longer the node is quarantined, if it is.
    pub(crate) quarantined_for: Option<Duration>,
    /// The `run_id` of the process the node was last marked for, if one was recorded.
    pub(crate) marked_run: Option<String>,
    /// How long until the latest expiry of the locks the node granted (zero once it has
    /// passed); `None` when it records none (marked by an earlier version).
    pub(crate) latest_expiry: Option<Duration>,
    /// Whether the node, not durable, carries a marker made for another process than the one
    /// it is now: it came back from older data, and lost what it granted since (set by the
    /// client from its reading of the node, not by the node).
    pub(crate) restarted: bool,
}

impl DeploymentState {
    /// Whether the node lost its data: it carries no marker, or one made for an earlier
    /// process while it does not keep every write.
    pub(crate) fn lost_data(&self) -> bool {
        self.marker.is_none() || self.restarted
    }
}

/// A node's answer to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    Deleted,
    Absent,
    Foreign,
}

/// The value of a `CONFIG GET` reply for one parameter; `None` when refused or absent (a
/// managed Redis may disable CONFIG).
pub(crate) fn config_value(reply: &Value) -> Option<String> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    match reply {
        Value::Array(items) => items.get(1).and_then(text),
        Value::Map(pairs) => pairs.first().and_then(|(_, v)| text(v)),
        _ => None,
    }
}

/// The text of an `INFO` reply (empty when refused or not text), to read fields from.
#[derive(Debug)]
pub(crate) struct Info(String);

impl Info {
    pub(crate) fn from_reply(reply: Option<&Value>) -> Self {
        Info(match reply {
            Some(Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
            Some(Value::VerbatimString { text, .. }) => text.clone(),
            Some(Value::SimpleString(text)) => text.clone(),
            _ => String::new(),
        })
    }

    /// The value of `name:value` line `name`, if present.
    pub(crate) fn field(&self, name: &str) -> Option<String> {
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    }
}

/// Whether a node keeps every write across a restart: AOF with `appendfsync always`.
pub(crate) fn is_durable(aof_enabled: Option<bool>, appendfsync: Option<&str>) -> bool {
    aof_enabled == Some(true) && appendfsync == Some("always")
}

/// A release's (or give-back's) answer: 1 deleted, 0 already gone, -1 held by another token;
/// 10 more when the releaser's place was kept in line as the lock was handed over, 20 more when
/// it was kept where the lock was gone or another's (see [`PlaceKept`]).
pub(super) fn release_reply(
    value: Value,
) -> std::result::Result<(ReleaseReply, PlaceKept), NodeFailureKind> {
    match value {
        // 2: a reentrant lock's hold is gone, and other holds keep the lock.
        Value::Int(1 | 2) => Ok((ReleaseReply::Deleted, PlaceKept::No)),
        Value::Int(0) => Ok((ReleaseReply::Absent, PlaceKept::No)),
        Value::Int(-1) => Ok((ReleaseReply::Foreign, PlaceKept::No)),
        Value::Int(11) => Ok((ReleaseReply::Deleted, PlaceKept::WithHandOver)),
        Value::Int(10) => Ok((ReleaseReply::Absent, PlaceKept::WithHandOver)),
        Value::Int(20) => Ok((ReleaseReply::Absent, PlaceKept::OutOfStep)),
        Value::Int(19) => Ok((ReleaseReply::Foreign, PlaceKept::OutOfStep)),
        other => Err(unexpected("release", &other)),
    }
}

/// Whether a release queued the releaser's place for its next hold on a master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlaceKept {
    No,
    /// Queued as the release handed the lock over there.
    WithHandOver,
    /// Queued where the release found the lock gone or another's: a master out of step with
    /// the line, whose queue would otherwise lose a place with each such release.
    OutOfStep,
}

pub(super) fn non_negative(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

pub(super) fn unexpected(what: &str, value: &dyn std::fmt::Debug) -> NodeFailureKind {
    NodeFailureKind::Protocol(format!("{what} returned {value:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_replies_are_read_in_both_protocols() {
        let resp2 = Value::Array(vec![
            Value::BulkString(b"appendfsync".to_vec()),
            Value::BulkString(b"always".to_vec()),
        ]);
        assert_eq!(config_value(&resp2).as_deref(), Some("always"));
        let resp3 = Value::Map(vec![(
            Value::BulkString(b"appendfsync".to_vec()),
            Value::BulkString(b"everysec".to_vec()),
        )]);
        assert_eq!(config_value(&resp3).as_deref(), Some("everysec"));
        assert_eq!(config_value(&Value::Nil), None);
    }

    #[test]
    fn a_release_says_where_it_kept_the_releasers_place() {
        let read = |n| release_reply(Value::Int(n)).ok();
        assert_eq!(read(1), Some((ReleaseReply::Deleted, PlaceKept::No)));
        assert_eq!(
            read(11),
            Some((ReleaseReply::Deleted, PlaceKept::WithHandOver))
        );
        assert_eq!(
            read(10),
            Some((ReleaseReply::Absent, PlaceKept::WithHandOver))
        );
        assert_eq!(read(20), Some((ReleaseReply::Absent, PlaceKept::OutOfStep)));
        assert_eq!(
            read(19),
            Some((ReleaseReply::Foreign, PlaceKept::OutOfStep))
        );
        assert_eq!(read(-1), Some((ReleaseReply::Foreign, PlaceKept::No)));
        assert!(read(21).is_none());
    }
}
