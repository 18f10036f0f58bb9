//! Which kind of lock an acquire takes: a mutex, one hold of a reentrant lock, a share of a
//! read-write lock, or a permit of a semaphore; and the quorum each kind needs.

use std::fmt;
use std::sync::Arc;

use rand::TryRng;

use super::limits;
use crate::error::{Error, Result};

/// Bytes of OS randomness in a token or a generated owner id (hex-encoded: 32 characters).
const RANDOM_BYTES: usize = 16;

/// A fresh random token: [`RANDOM_BYTES`] bytes from the OS generator, hex-encoded.
pub(crate) fn random_token() -> Result<String> {
    let mut bytes = [0u8; RANDOM_BYTES];
    rand::rngs::SysRng
        .try_fill_bytes(&mut bytes)
        .map_err(|e| Error::Entropy(e.to_string()))?;
    let mut token = String::with_capacity(RANDOM_BYTES * 2);
    for b in bytes {
        use std::fmt::Write;
        let _ = write!(token, "{b:02x}");
    }
    Ok(token)
}

/// Whether `token` has the shape of one this library hands out: a [`random_token`], or, for a
/// lock that a release handed over to a waiter, the waiter's id and `/` before it. A waiter id
/// is `<client id>.<n>`, the client id in hex and `n` in decimal (`Waiters::new_waiter`).
pub(crate) fn is_issued_token(token: &str) -> bool {
    let lower_hex =
        |s: &str| !s.is_empty() && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let waiter_id = |id: &str| {
        id.split_once('.').is_some_and(|(client, n)| {
            lower_hex(client) && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
        })
    };
    let (waiter, random) = match token.split_once('/') {
        Some((waiter, random)) => (Some(waiter), random),
        None => (None, token),
    };
    random.len() == RANDOM_BYTES * 2 && lower_hex(random) && waiter.is_none_or(waiter_id)
}

/// Who holds a reentrant lock. Tasks have no thread identity, so the owner is explicit: every
/// acquire made with the same owner re-enters a lock that owner holds.
///
/// The id is a capability: whoever has it can re-enter the lock (and keep it held), so a
/// generated one ([`Owner::random`]) is 128 random bits, and `Debug` does not print it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Owner(
    /// [`OWNER_VALUE_PREFIX`] and the id: the value of the lock key while the owner holds it,
    /// made once so that no call allocates it again.
    Arc<str>,
);

/// What goes before an owner's id in a reentrant lock's value on the masters. A mutex's
/// token check compares a token with that value, and owner ids may have any shape, a
/// token's included: the `:` is a byte no token has ([`is_issued_token`]), so no token can
/// ever extend or release a reentrant lock as a mutex.
const OWNER_VALUE_PREFIX: &str = "owner:";

impl Owner {
    /// A new owner with a random id (128 bits from the operating system).
    ///
    /// # Errors
    ///
    /// [`Error::Entropy`] when the operating system gives no randomness.
    pub fn random() -> Result<Owner> {
        Ok(Owner::with_id(&random_token()?))
    }

    fn with_id(id: &str) -> Owner {
        let mut value = String::with_capacity(OWNER_VALUE_PREFIX.len() + id.len());
        value.push_str(OWNER_VALUE_PREFIX);
        value.push_str(id);
        Owner(value.into())
    }

    /// The owner with this id, as handed down to another process (as `redquorum run` does with
    /// `REDQUORUM_OWNER`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] unless the id is 1 to [`limits::MAX_TOKEN_BYTES`] bytes of
    /// ASCII letters, digits, `-`, `_`, `.` and `:`.
    pub fn from_id(id: &str) -> Result<Owner> {
        if id.is_empty() || id.len() > limits::MAX_TOKEN_BYTES {
            return Err(Error::invalid(
                "owner",
                format!(
                    "must be 1 to {} bytes, not {}",
                    limits::MAX_TOKEN_BYTES,
                    id.len()
                ),
            ));
        }
        // No '/': a lock value with one reads as handed over to a waiter (see lua/acquire.lua).
        if !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
        {
            return Err(Error::invalid(
                "owner",
                "may hold only ASCII letters, digits, '-', '_', '.' and ':'",
            ));
        }
        Ok(Owner::with_id(id))
    }

    /// The owner's id.
    pub fn id(&self) -> &str {
        self.0.get(OWNER_VALUE_PREFIX.len()..).unwrap_or_default()
    }

    /// The value of a reentrant lock's key on a master while this owner holds it: the id
    /// after a prefix that no token has (see [`OWNER_VALUE_PREFIX`]).
    pub(crate) fn lock_value(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Owner(..)")
    }
}

/// The kind of lock an acquire takes (see [`LockOptions::kind`](crate::LockOptions::kind)).
///
/// Every kind has the mutex's guarantees: votes on every master at once, validity with the
/// drift allowance, renewal on a quorum and the lost-lock signal, fencing tokens, restart
/// quarantine, and waiters woken by the masters. The kinds other than the mutex are not fair:
/// a free lock goes to whoever asks first, and waiters are woken by releases.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LockKind {
    /// One holder at a time.
    #[default]
    Mutex,
    /// One holder at a time, and that holder may acquire again: each acquire by the holding
    /// [`Owner`] is a hold of its own, released on its own, and the lock is freed on the
    /// masters when the last hold is released. It excludes a [`LockKind::Mutex`] of the same
    /// name, and keeps its fencing token while the owner holds it: a hold that finds the
    /// owner's lock on too few masters to confirm its token (one of them silent, say, or no
    /// quorum of them agreeing on it) is refused with
    /// [`Error::QuorumUnavailable`](crate::Error::QuorumUnavailable), whose failures name
    /// them, rather than given another token.
    Reentrant(Owner),
    /// A reader's share of a read-write lock: many readers at once, never beside a writer,
    /// and none new while a writer waits. Its fencing token is the last writer's, or, where a
    /// writer's failed attempt left the masters' counters apart, a new one above them: never
    /// below an earlier writer's, always below a later writer's.
    Read,
    /// The writer's share of a read-write lock: one writer, and no reader beside it.
    Write,
    /// One of `permits` permits: at most `permits` holders at once. It needs more than a
    /// majority of the masters (see [`LockKind::quorum`]). Every holder must ask for the same
    /// number: while the semaphore is held, an acquire or an extend with another is refused
    /// with [`Error::InvalidArgument`](crate::Error::InvalidArgument) for `permits`.
    Semaphore {
        /// How many holders the semaphore admits.
        permits: u32,
    },
}

impl LockKind {
    /// A semaphore with `permits` permits.
    pub fn semaphore(permits: u32) -> LockKind {
        LockKind::Semaphore { permits }
    }

    /// The kind's name, as in metrics labels and the HTTP API: `mutex`, `reentrant`, `read`,
    /// `write` or `semaphore`.
    pub fn as_str(&self) -> &'static str {
        match self {
            LockKind::Mutex => "mutex",
            LockKind::Reentrant(_) => "reentrant",
            LockKind::Read => "read",
            LockKind::Write => "write",
            LockKind::Semaphore { .. } => "semaphore",
        }
    }

    /// How many of `nodes` masters must grant: a majority, except for a semaphore with more
    /// than one permit.
    ///
    /// P holders of a semaphore with Q grants each fill P·Q of the N·P slots a set of P+1
    /// holders could not share; a (P+1)-th holder fits only if (P+1)·Q ≤ N·P. So the quorum is
    /// the least Q with Q·(P+1) > N·P, that is ⌊N·P/(P+1)⌋ + 1 (a majority when P = 1). Any
    /// two such quorums still share a master, so fencing tokens keep growing. The cost is
    /// availability: only N − Q masters may be down.
    ///
    /// ```
    /// use redquorum::config::LockKind;
    /// assert_eq!(LockKind::Mutex.quorum(5), 3);
    /// assert_eq!(LockKind::semaphore(1).quorum(5), 3);
    /// assert_eq!(LockKind::semaphore(2).quorum(5), 4);
    /// assert_eq!(LockKind::semaphore(4).quorum(5), 5);
    /// ```
    pub fn quorum(&self, nodes: usize) -> usize {
        match self {
            LockKind::Semaphore { permits } => {
                let p = *permits as usize;
                nodes * p / (p + 1) + 1
            }
            _ => nodes / 2 + 1,
        }
    }

    /// Checks the kind. (Its quorum never exceeds the masters: N·P/(P+1) < N.)
    pub(crate) fn validate(&self) -> Result<()> {
        if let LockKind::Semaphore { permits } = self {
            if *permits == 0 || *permits > limits::MAX_PERMITS {
                return Err(Error::invalid(
                    "permits",
                    format!("must be 1 to {}, not {permits}", limits::MAX_PERMITS),
                ));
            }
        }
        Ok(())
    }

    /// Whether waiters of this kind queue fairly (only the mutex does).
    pub(crate) fn may_be_fair(&self) -> bool {
        matches!(self, LockKind::Mutex)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semaphore_quorums_cannot_admit_one_holder_too_many() {
        for nodes in 1..=9usize {
            for permits in 1..=12u32 {
                let q = LockKind::semaphore(permits).quorum(nodes);
                let p = permits as usize;
                assert!(q <= nodes, "N={nodes} P={permits}: Q={q}");
                // P+1 holders need (P+1)·Q grants; N masters hold at most N·P.
                assert!(q * (p + 1) > nodes * p, "N={nodes} P={permits}: Q={q}");
                // And it is the least such Q.
                assert!(
                    (q - 1) * (p + 1) <= nodes * p,
                    "N={nodes} P={permits}: Q={q}"
                );
                // Two quorums share a master.
                assert!(2 * q > nodes);
            }
        }
    }

    #[test]
    fn tokens_are_128_bit_hex_and_distinct() {
        let a = random_token().unwrap();
        let b = random_token().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn only_tokens_of_the_issued_shape_pass() {
        let token = random_token().unwrap();
        assert!(is_issued_token(&token));
        assert!(is_issued_token(&format!("00c0ffee00c0ffee.17/{token}")));
        for bad in [
            "",
            "abc",
            "wrong-token",
            &token[1..],
            &format!("{token}0"),
            &token.to_uppercase(),
            &format!("{}g", &token[1..]),
            &format!("/{token}"),
            &format!("c0ffee/{token}"),
            &format!("c0ffee./{token}"),
            &format!(".17/{token}"),
            &format!("c0ffee.x/{token}"),
            "c0ffee.17/",
            &format!("c0ffee.17/{token}/{token}"),
        ] {
            assert!(!is_issued_token(bad), "{bad:?} passed");
        }
    }

    #[test]
    fn owners_are_checked() {
        assert!(Owner::from_id("job-42:worker.1_a").is_ok());
        assert!(Owner::from_id("").is_err());
        assert!(Owner::from_id("a/b").is_err());
        assert!(Owner::from_id("a b").is_err());
        assert!(Owner::from_id(&"x".repeat(limits::MAX_TOKEN_BYTES + 1)).is_err());
        let a = Owner::random().unwrap();
        assert_eq!(a.id().len(), 32);
        // The lock's value is no token, whatever the id looks like.
        assert_eq!(a.lock_value(), format!("owner:{}", a.id()));
        assert!(is_issued_token(a.id()) && !is_issued_token(a.lock_value()));
        assert_eq!(Owner::from_id("x:y").unwrap().id(), "x:y");
        assert_ne!(a, Owner::random().unwrap());
        assert_eq!(format!("{a:?}"), "Owner(..)");
    }

    #[test]
    fn permits_are_bounded() {
        assert!(LockKind::semaphore(0).validate().is_err());
        assert!(
            LockKind::semaphore(limits::MAX_PERMITS + 1)
                .validate()
                .is_err()
        );
        assert!(LockKind::semaphore(3).validate().is_ok());
    }
}
