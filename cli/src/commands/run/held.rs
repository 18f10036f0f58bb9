//! What a run holds: one lock, or several taken all or nothing, each renewed by its guard;
//! what the command is told of them, and how their loss is watched.

use redquorum::{LockGuard, LockState, MultiGuard};

/// The lock a run holds: one name, or several taken all or nothing.
pub(super) enum Held {
    One(LockGuard),
    Many(MultiGuard),
}

impl Held {
    /// What the command is told of the locks: with several, one line per lock in the order
    /// they were taken.
    pub(super) fn env(&self) -> [(&'static str, String); 3] {
        let guards = self.guards();
        let lines = |f: &dyn Fn(&LockGuard) -> String| -> String {
            guards.iter().map(f).collect::<Vec<_>>().join("\n")
        };
        [
            ("REDQUORUM_LOCK", lines(&|g| g.name().to_owned())),
            ("REDQUORUM_TOKEN", lines(&|g| g.token().to_owned())),
            ("REDQUORUM_FENCE", lines(&|g| g.fence().to_string())),
        ]
    }

    /// The guards of the locks held, one or several.
    fn guards(&self) -> &[LockGuard] {
        match self {
            Held::One(guard) => std::slice::from_ref(guard),
            Held::Many(multi) => multi.guards(),
        }
    }

    /// Resolves when a lock other than `released` is lost; never, when there is none.
    pub(super) async fn lost_other_than(&self, released: &[String]) {
        let watched: Vec<_> = self
            .guards()
            .iter()
            .filter(|guard| !released.iter().any(|name| name == guard.name()))
            .map(|guard| Box::pin(guard.lost()))
            .collect();
        if watched.is_empty() {
            return std::future::pending().await;
        }
        futures::future::select_all(watched).await;
    }

    /// The names of the locks found lost.
    pub(super) fn lost_names(&self) -> Vec<String> {
        self.guards()
            .iter()
            .filter(|guard| guard.state() == LockState::Lost)
            .map(|guard| guard.name().to_owned())
            .collect()
    }

    pub(super) async fn release(self) -> redquorum::Result<()> {
        match self {
            Held::One(guard) => guard.release().await,
            Held::Many(multi) => multi.release().await,
        }
    }
}

pub(super) async fn release(guard: Held, name: &str) {
    match guard.release().await {
        Ok(()) => tracing::info!(lock = name, "released"),
        Err(e) => tracing::warn!(
            lock = name,
            "release failed; the lock expires at its TTL: {e}"
        ),
    }
}
