//! Acquire, extend and release on a quorum, and the [`Lock`] handle a holder keeps.
//!
//! `acquire` makes the attempts, `queue` keeps a waiting caller's place in the lock's queue on
//! the nodes, `fence` tells an attempt's fencing token from its grants, `extend` and `release`
//! act on a held lock.

mod acquire;
mod attempt;
mod extend;
mod fence;
mod handover;
mod queue;
mod release;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use acquire::{acquire, acquire_waiting_since};
use extend::count_extension;
pub(crate) use extend::{extend_key, extend_token};
pub(crate) use release::{Releaser, release_key, release_token};

use crate::cluster::Cluster;
use crate::config::LockKind;
use crate::error::{Error, NodeFailureKind, Result};
use crate::fanout::{Answer, failures};
use crate::metrics::HeldGauge;
use crate::node::{Keys, Node};

/// [`Error::InvalidArgument`] for `permits` when a master refused a semaphore because it is
/// held with another number of permits than asked: every holder must ask for the same, and
/// no wait or retry changes that while it is held.
fn other_permits<T>(nodes: &[Node], answers: &[Option<Answer<T>>]) -> Option<Error> {
    failures(nodes, answers)
        .into_iter()
        .find(|f| matches!(f.kind, NodeFailureKind::OtherPermits(_)))
        .map(|f| {
            Error::invalid(
                "permits",
                format!("master {} refused it: {}", f.node, f.kind),
            )
        })
}

/// A lock held on a quorum of nodes.
///
/// The lock is only safe to act on while [`Lock::remaining`] is above zero; extend it with
/// [`Lock::extend`] and give it up with [`Lock::release`]. Dropping it does not release it:
/// the nodes expire it at its TTL.
#[must_use = "a lock that is dropped stays held on the nodes until its TTL expires; call release()"]
pub struct Lock {
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) name: String,
    pub(crate) keys: Arc<Keys>,
    pub(crate) token: Arc<str>,
    pub(crate) fence: u64,
    pub(crate) ttl: Duration,
    pub(crate) valid_until: Instant,
    pub(crate) held: HeldGauge,
    /// Set when the client takes this lock in a loop: its release keeps the client's place in
    /// line for the next hold.
    pub(crate) next_hold: Option<queue::NextHold>,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The token is a capability: whoever has it can release the lock. Keep it out of logs.
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("ttl", &self.ttl)
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}

impl Lock {
    pub(crate) fn new(
        cluster: &Arc<Cluster>,
        name: &str,
        keys: Arc<Keys>,
        token: Arc<str>,
        fence: u64,
        ttl: Duration,
        valid_until: Instant,
    ) -> Self {
        Lock {
            held: HeldGauge::new(&keys.kind),
            cluster: cluster.clone(),
            name: name.to_owned(),
            keys,
            token,
            fence,
            ttl,
            valid_until,
            next_hold: None,
        }
    }

    /// This lock, taken by a client that takes it in a loop (see [`Releaser::Looping`]).
    pub(crate) fn with_next_hold(mut self, next_hold: Option<queue::NextHold>) -> Self {
        self.next_hold = next_hold;
        self
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kind of lock held (a mutex unless the acquire asked for another).
    pub fn kind(&self) -> &LockKind {
        &self.keys.kind
    }

    /// The holder's token: 128 random bits from the operating system, hex-encoded, after
    /// `<waiter id>/` when a release handed the lock over to a waiting caller. Only this token
    /// can extend or release the lock.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The fencing token of this acquisition, whatever the clocks did. A mutex's, a writer's
    /// and each semaphore permit's is larger than that of every earlier acquisition of the
    /// same name. The holds of a reentrant lock share one, the owner's lock's, larger than
    /// every earlier owner's; readers share the last writer's (or one above the masters'
    /// counters, see [`LockKind::Read`]), never below an earlier writer's and always below a
    /// later one's. Send it with every write to the protected resource, which must refuse a
    /// token lower than the highest it has seen (see the `fencing` module).
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The TTL the lock was last set with.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The instant (monotonic clock) until which the lock is certainly held.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// How much longer the lock is certainly held; zero once it may have expired.
    pub fn remaining(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// Whether the lock is still certainly held.
    pub fn is_valid(&self) -> bool {
        self.remaining() > Duration::ZERO
    }

    /// Sets the lock's TTL to `ttl` on a quorum, counting from now.
    ///
    /// It only succeeds while the lock is valid, never deletes the lock, and never recreates it
    /// on a node that has lost it.
    ///
    /// An extend that fails may still have been applied on some nodes, or be applied later by
    /// a node that runs it late: whatever the outcome, the lock's validity is at most the new
    /// TTL counted from the start of the call (less the drift allowance), from the moment the
    /// call starts, so a failed extend to a shorter TTL, or one whose future is dropped before
    /// it ends, shortens [`Lock::valid_until`] too. A longer TTL that fails leaves the validity
    /// as it was.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when the lock has expired or a quorum no longer has it;
    /// [`Error::ExtendUncertain`] when too many nodes failed to answer in time;
    /// [`Error::InvalidArgument`] for a TTL out of bounds.
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        self.cluster.settings.validate_ttl(ttl)?;
        if !self.is_valid() {
            crate::metrics::extension(self.kind(), "lost");
            crate::metrics::lock_lost(self.kind());
            return Err(Error::LockLost {
                name: self.name.clone(),
            });
        }
        // Lowered before the extend is sent, not once it returns: a caller that stops waiting
        // (a timeout drops this future) must not keep the validity of before, while masters
        // apply the shorter TTL.
        let new_ttl_ends = Instant::now() + ttl - self.cluster.settings.drift(ttl);
        self.valid_until = self.valid_until.min(new_ttl_ends);
        let extended = extend_key(
            &self.cluster,
            &self.name,
            &self.keys,
            &self.token,
            ttl,
            Some(self.valid_until),
        )
        .await;
        count_extension(self.kind(), &extended.outcome);
        self.valid_until = extended.valid_until;
        match extended.outcome {
            Ok(_fence) => {
                self.ttl = ttl;
                Ok(())
            }
            Err(Error::NotHeld { name }) => {
                crate::metrics::lock_lost(self.kind());
                Err(Error::LockLost { name })
            }
            Err(e) => Err(e),
        }
    }

    /// Deletes the lock on every node where this token still holds it.
    ///
    /// # Errors
    ///
    /// As [`Client::release_token`](crate::Client::release_token). A lock that has already
    /// expired, and that nobody holds since, is released successfully; one held since by
    /// another holder (other readers or permit holders, or the owner's other holds, included)
    /// is [`Error::NotHeld`].
    pub async fn release(self) -> Result<()> {
        release_key(
            &self.cluster,
            &self.name,
            &self.keys,
            &self.token,
            self.fence,
            match self.next_hold {
                Some(next) => Releaser::Looping(next),
                None => Releaser::Holder,
            },
        )
        .await
    }
}
