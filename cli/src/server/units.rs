//! Durations as the API writes them: whole milliseconds.

use std::time::Duration;

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis_of(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
