//! The client, the library's front door: every public operation on a [`Client`] is here, and
//! each one hands the work to the layer that does it.

mod builder;
mod inspect;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tracing::warn;

pub use builder::ClientBuilder;
pub use inspect::{LockInfo, NodeLockState};

use crate::cluster::Cluster;
use crate::config::{LockKind, LockOptions};
use crate::doctor::{self, DoctorReport};
use crate::error::{Error, Result};
use crate::guard::{LockGuard, LockState, LockWatch, RenewOptions, guard_runtime};
use crate::lock::{self, Lock};
use crate::multi::{self, MultiGuard, MultiLock};

/// A handle on N independent Redis masters; cheap to clone (all clones share the connections).
///
/// Build one with [`Client::builder`]; take locks with [`Client::acquire`] or
/// [`Client::try_acquire`].
#[derive(Clone)]
pub struct Client {
    cluster: Arc<Cluster>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("nodes", &self.nodes())
            .field("quorum", &self.quorum())
            .field("key_prefix", &self.cluster.settings.key_prefix)
            .finish()
    }
}

impl Client {
    /// Starts building a client.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// Builds a client with default settings from node URLs.
    ///
    /// # Errors
    ///
    /// As [`ClientBuilder::build`].
    pub fn new<I, S>(urls: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientBuilder::default().nodes(urls).build()
    }

    /// The nodes' addresses (`host:port`, never a password), in the order given.
    pub fn nodes(&self) -> Vec<String> {
        self.cluster.addrs()
    }

    /// How many nodes must agree: a strict majority.
    pub fn quorum(&self) -> usize {
        self.cluster.quorum()
    }

    /// Takes the lock `name` on a quorum, retrying with jittered delays until `opts.wait` runs out.
    ///
    /// Each attempt asks every node at once and decides as soon as a quorum granted or could no
    /// longer grant; a failed attempt releases what it got on every node before the next one,
    /// and a failed acquire returns once its last attempt's releases are answered. While it
    /// waits, the caller keeps a place in the lock's queue on the nodes: a free lock goes to the
    /// caller that has waited longest, and a release hands it straight to that caller (its
    /// token then reads `<waiter id>/<token>`). Dropping the returned future cancels: grants of
    /// an attempt under way are released and the place is given up in the background (or they
    /// expire when there is no runtime).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] (no node is contacted); otherwise the last attempt's error:
    /// [`Error::Contended`], [`Error::QuorumUnavailable`], or [`Error::Timeout`] when a quorum
    /// granted too slowly to leave the minimum validity. [`Error::QuorumUnavailable`] comes
    /// before the wait is over when the nodes kept out (quarantined for longer than the wait,
    /// refusing, or failing to connect twice in a row) leave no quorum; when quarantines that
    /// end within the wait would, the acquire waits for them instead of retrying.
    pub async fn acquire(&self, name: &str, opts: &LockOptions) -> Result<Lock> {
        lock::acquire(&self.cluster, name, opts, opts.wait).await
    }

    /// Makes a single attempt to take the lock `name` (the options' wait is ignored).
    ///
    /// # Errors
    ///
    /// As [`Client::acquire`].
    pub async fn try_acquire(&self, name: &str, opts: &LockOptions) -> Result<Lock> {
        lock::acquire(&self.cluster, name, opts, Duration::ZERO).await
    }

    /// Extends a lock by name and token, as a stateless caller (the HTTP service) would.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the token does not hold the lock on a quorum (wrong token, or the
    /// lock expired); [`Error::InvalidArgument`] for a token of a shape this library never hands
    /// out (nothing is sent); otherwise as [`Lock::extend`].
    pub async fn extend_token(&self, name: &str, token: &str, ttl: Duration) -> Result<Lock> {
        lock::extend_token(&self.cluster, name, &LockKind::Mutex, token, ttl).await
    }

    /// [`Client::extend_token`] for a lock of any kind: `kind` as it was acquired with (for a
    /// reentrant lock, the owner, and `token` the hold's). The lock returned carries the
    /// holder's own fencing token: the lock's for a reentrant hold, the reader's, the writer's
    /// or the permit's as it was granted, even once later holders have raised the counters.
    ///
    /// # Errors
    ///
    /// As [`Client::extend_token`], for every kind: [`Error::NotHeld`] when the token holds
    /// nothing on a quorum (a reentrant lock's hold must be one its masters record: a token
    /// that never was a hold, or one released already, extends nothing, even while the owner
    /// holds the lock). For a semaphore held with another number of permits than `kind`'s,
    /// [`Error::InvalidArgument`] for `permits`; nothing is extended.
    pub async fn extend_token_as(
        &self,
        name: &str,
        kind: &LockKind,
        token: &str,
        ttl: Duration,
    ) -> Result<Lock> {
        lock::extend_token(&self.cluster, name, kind, token, ttl).await
    }

    /// Releases a lock by name and token, as a stateless caller (the HTTP service) would.
    ///
    /// Compare-and-delete on every node: only keys holding this token are deleted.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when no node had this token and another token holds the lock (nothing
    /// is changed); [`Error::QuorumUnavailable`] when fewer than a quorum of nodes answered (keys
    /// left behind expire at their TTL); [`Error::InvalidArgument`] for a bad name or token (a
    /// token of a shape this library never hands out is refused before any node is asked). A
    /// lock that is already gone everywhere counts as released.
    pub async fn release_token(&self, name: &str, token: &str) -> Result<()> {
        lock::release_token(&self.cluster, name, &LockKind::Mutex, token).await
    }

    /// [`Client::release_token`] for a lock of any kind: `kind` as it was acquired with (for a
    /// reentrant lock, the owner, and `token` the hold's; the lock is freed with its last hold).
    /// Only the token's own hold goes: a reader's share, a permit, a reentrant lock's hold.
    ///
    /// # Errors
    ///
    /// As [`Client::release_token`], for every kind: [`Error::NotHeld`] when no node had this
    /// token while the lock is held (by another holder, other readers or permit holders, or
    /// the owner's other holds: a token that never held it, or one released already), and
    /// nothing is changed. A lock that nobody holds any more counts as released.
    pub async fn release_token_as(&self, name: &str, kind: &LockKind, token: &str) -> Result<()> {
        lock::release_token(&self.cluster, name, kind, token).await
    }

    /// Acquires every one of `names` with `opts` (each on its own quorum, of `opts`'s kind),
    /// all or nothing: a multi-lock. Names are deduplicated and taken one after the other in
    /// byte order, so that multi-locks over overlapping names cannot deadlock; `opts.wait`
    /// bounds the whole acquire. While a later name is waited for, the names held are kept
    /// alive; if one cannot be had, those already taken are released, and if the returned
    /// future is dropped before it finishes, they are released in the background (or expire at
    /// their TTL when there is no runtime). The multi-lock's validity is the shortest of its
    /// names'; each name has its own fencing token.
    ///
    /// ```no_run
    /// # async fn f(client: redquorum::Client) -> Result<(), redquorum::Error> {
    /// use std::time::Duration;
    /// let opts = redquorum::LockOptions::new(Duration::from_secs(10));
    /// let both = client.acquire_all(&["account:17", "account:4"], &opts).await?;
    /// let (from, to) = (both.fence_of("account:17"), both.fence_of("account:4"));
    /// // ... move money, sending each account's fence with its writes ...
    /// both.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for no names, more than
    /// [`limits::MAX_MULTI_NAMES`](crate::config::limits::MAX_MULTI_NAMES) distinct ones (a
    /// name given twice counts once), or a bad name or
    /// option (no node is contacted); otherwise the error of the name that could not be had,
    /// as [`Client::acquire`], or [`Error::Timeout`] when the names were all taken too late to
    /// leave the minimum validity.
    pub async fn acquire_all(&self, names: &[&str], opts: &LockOptions) -> Result<MultiLock> {
        multi::acquire_all(&self.cluster, names, opts, opts.wait).await
    }

    /// [`Client::acquire_all`] making one attempt per name, without waiting.
    ///
    /// # Errors
    ///
    /// As [`Client::acquire_all`].
    pub async fn try_acquire_all(&self, names: &[&str], opts: &LockOptions) -> Result<MultiLock> {
        multi::acquire_all(&self.cluster, names, opts, Duration::ZERO).await
    }

    /// Acquires a multi-lock and hands it to a renewing [`MultiGuard`].
    ///
    /// # Errors
    ///
    /// As [`Client::acquire_all`] and [`MultiLock::into_guard`]; bad renewal options are
    /// refused before any node is contacted.
    pub async fn acquire_all_guard(
        &self,
        names: &[&str],
        opts: &LockOptions,
        renew: RenewOptions,
    ) -> Result<MultiGuard> {
        self.check_guard(opts, &renew)?;
        self.acquire_all(names, opts).await?.into_guard(renew)
    }

    /// Acquires a lock and hands it to a renewing [`LockGuard`].
    ///
    /// # Errors
    ///
    /// As [`Client::acquire`] and [`Lock::into_guard`]; bad renewal options are refused
    /// before any node is contacted.
    pub async fn acquire_guard(
        &self,
        name: &str,
        opts: &LockOptions,
        renew: RenewOptions,
    ) -> Result<LockGuard> {
        self.check_guard(opts, &renew)?;
        self.acquire(name, opts).await?.into_guard(renew)
    }

    /// What would make `into_guard` refuse a lock taken with `opts`, checked before the lock is
    /// taken: a lock acquired only to be refused would be held for nothing.
    fn check_guard(&self, opts: &LockOptions, renew: &RenewOptions) -> Result<()> {
        opts.validate(&self.cluster.settings)?;
        renew.validate(opts.ttl)?;
        guard_runtime().map(drop)
    }

    /// Runs `work` while holding the lock `name`, renewed in the background, and releases it
    /// afterwards. If the lock is lost first, `work` is stopped (its future dropped) and the
    /// result is [`Error::LockLost`]. So it is, with the work's value dropped, when the work
    /// finishes after the lock's validity ran out (work that blocked its thread past it, say,
    /// so that no loss could be noticed while it ran).
    ///
    /// ```no_run
    /// # async fn f(client: redquorum::Client) -> Result<(), redquorum::Error> {
    /// use std::time::Duration;
    /// let opts = redquorum::LockOptions::new(Duration::from_secs(10));
    /// let rows = client
    ///     .with_lock("compaction", &opts, |lock| async move {
    ///         // ... work; lock.remaining() and lock.token() are at hand ...
    ///         42
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Client::acquire_guard`]; [`Error::LockLost`] when the lock was lost while `work`
    /// ran or by the time it finished.
    pub async fn with_lock<T, F, Fut>(&self, name: &str, opts: &LockOptions, work: F) -> Result<T>
    where
        F: FnOnce(LockWatch) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self
            .acquire_guard(name, opts, RenewOptions::default())
            .await?;
        let watch = guard.watch();
        let outcome = tokio::select! {
            // A loss that is noticed together with the work's end still counts as a loss: the
            // work may have run its last part without the lock.
            biased;
            () = watch.lost() => None,
            value = work(guard.watch()) => Some(value),
        };
        // The renewal task publishes a loss only when it runs, which work that blocks its
        // thread (or a paused process) delays past the validity: so the validity itself is
        // read as the work ends. A lock lost by then may have been someone else's for the
        // work's last part, and the work's value is no result of a held lock.
        match outcome {
            Some(value) if watch.state() != LockState::Lost => {
                if let Err(e) = guard.release().await {
                    warn!(
                        lock = name,
                        "the work finished but the release failed (the lock expires at its TTL): {e}"
                    );
                }
                Ok(value)
            }
            _ => Err(Error::LockLost {
                name: name.to_owned(),
            }),
        }
    }

    /// Waits until every command this client has sent is answered, or until each node's
    /// per-node deadline passes. An operation returns once its vote is decided, and the
    /// commands to the other masters (a release's, a failed attempt's give-back) are still on
    /// their way, or waiting for a connection still being made: a short-lived process (a
    /// script, a command-line tool) calls this before it exits, so that they reach every master
    /// that answers rather than leave a lock's key there until its TTL.
    pub async fn flush(&self) {
        self.cluster.flush().await;
    }

    /// Checks every master for what makes quorum locks unsafe or unavailable: reachability,
    /// role (a replica), the same server listed twice, persistence, eviction policy, ACL
    /// permissions, round-trip time, clock offset, and quarantine. Masters are checked in
    /// parallel, each over a plain connection of its own and within
    /// `max(node_timeout, defaults::DOCTOR_DEADLINE)`.
    ///
    /// It never fails: what cannot be read is reported as a problem.
    pub async fn doctor(&self) -> DoctorReport {
        doctor::run(&self.cluster).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn building_checks_the_node_list() {
        let none: [&str; 0] = [];
        assert!(matches!(
            Client::new(none),
            Err(Error::InvalidArgument { field: "node", .. })
        ));
        let dup = Client::new(["redis://127.0.0.1:7000", "redis://127.0.0.1:7000/3"]).unwrap_err();
        assert!(dup.to_string().contains("given twice"), "{dup}");
        let bad = Client::new(["redis://127.0.0.1:7000", "redis//oops"]).unwrap_err();
        assert!(matches!(bad, Error::InvalidArgument { field: "node", .. }));
        let many: Vec<String> = (0..32)
            .map(|i| format!("redis://127.0.0.1:{}", 7000 + i))
            .collect();
        assert!(Client::new(many).is_err());
        let ok = Client::new(["redis://127.0.0.1:7000", "redis://:pw@127.0.0.1:7001"]).unwrap();
        assert_eq!(ok.nodes(), ["127.0.0.1:7000", "127.0.0.1:7001"]);
        assert_eq!(ok.quorum(), 2);
        assert!(!format!("{ok:?}").contains("pw"));
    }

    #[test]
    fn settings_are_checked() {
        let b = || Client::builder().node("redis://127.0.0.1:7000");
        assert!(b().node_timeout(Duration::ZERO).build().is_err());
        assert!(b().drift_factor(-0.1).build().is_err());
        assert!(b().drift_factor(f64::NAN).build().is_err());
        assert!(b().key_prefix("x".repeat(200)).build().is_err());
        assert!(b().key_prefix("").build().is_ok());
    }
}
