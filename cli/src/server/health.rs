//! The masters' health as `/readyz` and `/metrics` read it: one reading shared by every request
//! that comes while it is fresh.
//!
//! Both routes are open (probes and scrapers carry no token), and each reading asks every
//! master several commands: read once per request, a few hundred probes a second kept the
//! masters busy with nothing else. Requests that come while a reading is under way wait for it
//! rather than start their own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redquorum::{Client, NodeHealth};
use tokio::sync::Mutex;

/// How old a reading may be and still answer a request.
pub(crate) const HEALTH_FRESH_FOR: Duration = Duration::from_secs(1);

/// The last reading of the masters' health, and when it was taken.
#[derive(Clone, Debug)]
pub(crate) struct SharedHealth {
    client: Client,
    last: Arc<Mutex<Option<Reading>>>,
}

/// A reading of every master's health, and when it was taken.
type Reading = (Instant, Arc<[NodeHealth]>);

impl SharedHealth {
    pub(crate) fn new(client: Client) -> Self {
        SharedHealth {
            client,
            last: Arc::new(Mutex::new(None)),
        }
    }

    /// Every master's health, read now unless a reading at most [`HEALTH_FRESH_FOR`] old is
    /// at hand. One reading at a time: the lock is held while it is taken.
    pub(crate) async fn read(&self) -> Arc<[NodeHealth]> {
        let mut last = self.last.lock().await;
        if let Some((at, health)) = last.as_ref()
            && at.elapsed() < HEALTH_FRESH_FOR
        {
            return health.clone();
        }
        let health: Arc<[NodeHealth]> = self.client.node_health().await.into();
        *last = Some((Instant::now(), health.clone()));
        health
    }

    /// How many masters must be usable for an acquire.
    pub(crate) fn quorum(&self) -> usize {
        self.client.quorum()
    }
}
