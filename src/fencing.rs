//! The protected resource's side of fencing: writes that refuse holders whose lock has passed.
//!
//! A lock's [`fence`](crate::Lock::fence) grows with every acquisition of its name. A resource
//! that remembers the highest token it has accepted, and refuses writes with a lower one,
//! cannot be corrupted by a holder that was paused (or cut off) past its validity and carries
//! on after another holder took over. [`fenced_set`] is that check for a value kept in Redis;
//! the same pattern in SQL is a conditional update:
//!
//! ```sql
//! UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2;
//! -- 0 rows updated: a newer holder has written; this holder must stop.
//! ```

use redis::aio::ConnectionLike;

use crate::error::{Error, Result};

/// The Lua script [`fenced_set`] runs, for use from other clients or languages.
/// KEYS: the value's key, the key holding the highest token accepted. ARGV: token, value.
/// Returns `{1, token}` when written, `{0, highest}` when refused.
pub const FENCED_SET_SCRIPT: &str = include_str!("../lua/fenced_set.lua");

/// What a fenced write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FencedWrite {
    /// The value was written; the resource's highest token is now this write's.
    Written,
    /// Refused: a holder with this higher token has written already. The writer's lock has
    /// passed to someone else; it must stop.
    Refused {
        /// The highest token the resource has accepted.
        highest: u64,
    },
}

/// The key where [`fenced_set`] keeps the highest token accepted for `key`: `{key}:fence`.
pub fn fence_key_for(key: &str) -> String {
    format!("{key}:fence")
}

/// Sets `key` to `value` on a Redis-backed resource, only if `fence` is at least the highest
/// token accepted for `key` so far (kept at [`fence_key_for`]`(key)`), atomically.
///
/// # Errors
///
/// [`Error::Resource`] when the resource's Redis fails or answers something unexpected.
pub async fn fenced_set<C>(conn: &mut C, key: &str, value: &[u8], fence: u64) -> Result<FencedWrite>
where
    C: ConnectionLike + Send,
{
    let (written, highest): (i64, i64) = redis::Script::new(FENCED_SET_SCRIPT)
        .key(key)
        .key(fence_key_for(key))
        .arg(fence)
        .arg(value)
        .invoke_async(conn)
        .await
        .map_err(|e| Error::Resource(e.to_string()))?;
    Ok(if written == 1 {
        FencedWrite::Written
    } else {
        FencedWrite::Refused {
            highest: u64::try_from(highest).unwrap_or(0),
        }
    })
}
