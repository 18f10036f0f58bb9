//! What one node holds of a lock of any kind, for inspect: how long until its last holder
//! lapses and how many hold it, never who (see `lua/inspect.lua`).

use std::time::Duration;

use redis::Value;

use super::replies::{non_negative, unexpected};
use super::scripts::SCRIPTS;
use super::{Keys, Node};
use crate::config::LockKind;
use crate::error::{NodeFailureKind, Operation};

/// One node's view of a lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LockView {
    /// Until the last holder here lapses; `None` when nobody holds it here.
    pub(crate) ttl: Option<Duration>,
    /// How many hold it here: 0 or 1 for a mutex or a reentrant lock, readers and writer for
    /// a read-write lock, permits taken for a semaphore.
    pub(crate) holders: u32,
    pub(crate) readers: u32,
    pub(crate) writers: u32,
    /// A reentrant lock's holds.
    pub(crate) holds: u32,
    /// The number of permits a semaphore's holders asked for, when recorded.
    pub(crate) permits: Option<u32>,
    /// Whether a writer waits here, keeping new readers out.
    pub(crate) writer_waiting: bool,
}

impl Node {
    /// Reads what the node holds of the lock `keys` are for.
    pub(crate) async fn view(&self, keys: &Keys) -> Result<LockView, NodeFailureKind> {
        let how = match keys.kind {
            LockKind::Mutex => "mutex",
            LockKind::Reentrant(_) => "reentrant",
            LockKind::Read | LockKind::Write | LockKind::Semaphore { .. } => "holders",
        };
        let (value, _) = self
            .eval(
                Operation::Inspect,
                &SCRIPTS.inspect,
                &[&keys.lock, &keys.holds],
                |c| {
                    c.arg(how);
                },
            )
            .await?;
        let count = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
        match &value {
            Value::Array(items) => match items.as_slice() {
                [
                    Value::Int(pttl),
                    Value::Int(holders),
                    Value::Int(readers),
                    Value::Int(writers),
                    Value::Int(holds),
                    Value::Int(permits),
                    Value::Int(waiting),
                ] => Ok(LockView {
                    // -2: nobody holds it; -1, a key without expiry, is never written.
                    ttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
                    holders: count(*holders),
                    readers: count(*readers),
                    writers: count(*writers),
                    holds: count(*holds),
                    permits: (*permits > 0).then(|| count(*permits)),
                    writer_waiting: non_negative(*waiting) > 0,
                }),
                _ => Err(unexpected("inspect", &value)),
            },
            _ => Err(unexpected("inspect", &value)),
        }
    }
}
