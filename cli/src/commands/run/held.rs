//! What a run holds: one lock, or several taken all or nothing, each renewed by its guard;
//! what the command is told of them, and how their loss is watched.

use redquorum::{LockGuard, LockState, MultiGuard};

/// Where a run tells its command the names of its locks, one line per lock in the order taken.
pub(in crate::commands) const LOCK_ENV: &str = "REDQUORUM_LOCK";
/// Where a run tells its command its tokens, one line per lock, in the order of [`LOCK_ENV`].
pub(in crate::commands) const TOKEN_ENV: &str = "REDQUORUM_TOKEN";

/// The locks of the run this process is a command of, as its environment tells them (none
/// outside a run).
pub(in crate::commands) struct RunsLocks {
    names: String,
    tokens: String,
}

impl RunsLocks {
    pub(in crate::commands) fn from_env() -> Self {
        let var = |name| std::env::var(name).unwrap_or_default();
        RunsLocks {
            names: var(LOCK_ENV),
            tokens: var(TOKEN_ENV),
        }
    }

    /// Which line of the run's variables is `name`'s, if it is one of the run's locks.
    pub(in crate::commands) fn line_of(&self, name: &str) -> Option<usize> {
        self.names.lines().position(|held| held == name)
    }

    /// The run's token for `name`, if it is one of the run's locks.
    pub(in crate::commands) fn token_of(&self, name: &str) -> Option<&str> {
        self.tokens.lines().nth(self.line_of(name)?)
    }

    /// Every token, one line per lock, as the environment gives them.
    pub(in crate::commands) fn tokens(&self) -> &str {
        &self.tokens
    }
}

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
            (LOCK_ENV, lines(&|g| g.name().to_owned())),
            (TOKEN_ENV, lines(&|g| g.token().to_owned())),
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
