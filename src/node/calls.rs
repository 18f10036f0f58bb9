//! The calls a lock makes on one node (acquire, extend, release, give back, dequeue, the
//! deployment marker), and what a waiter sends with them.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use super::replies::{PlaceKept, non_negative, release_reply, unexpected};
use super::scripts::SCRIPTS;
use super::{AcquireReply, DeploymentState, Keys, Node, ReleaseReply};
use crate::config::LockKind;
use crate::error::{NodeFailureKind, Operation};

/// A waiting caller's place in a lock's queue on the nodes.
#[derive(Debug, Clone)]
pub(crate) struct Place {
    /// Random, and the same on every node and for every attempt of one acquire.
    pub(crate) waiter: Arc<str>,
    /// Lower goes first; the same on every node, so the nodes agree on the order.
    pub(crate) priority: u64,
    /// How long a node keeps the place unless an attempt refreshes it.
    pub(crate) life: Duration,
}

/// The terms of a waiter's attempt, kept with its place: a release may hand the lock over on
/// them (see `lua/release.lua`).
#[derive(Debug, Clone)]
pub(crate) struct Terms {
    /// The attempt's token.
    pub(crate) token: Arc<str>,
    pub(crate) ttl: Duration,
    /// The fencing token the attempt proposed last.
    pub(crate) proposal: u64,
}

/// The fencing token an attempt proposes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Proposal {
    pub(crate) fence: u64,
    /// Whether a grant that keeps the lock's token (a reader's, another hold's of a reentrant
    /// lock) raises it to `fence` first if it is lower (see `lua/reentrant_acquire.lua`).
    pub(crate) refence: bool,
}

impl Node {
    /// Asks the node to take the lock for `token` with fencing token `proposal`, queueing `place`
    /// (when the caller waits) if the lock is not to be had. Keys: the lock, its fencing
    /// counter, its queue, the queue's lapse times, the deployment's keys and the queue's live
    /// mark ([`Keys::for_acquire`]).
    ///
    /// The kind of lock `keys` are for picks the script: a reentrant lock's holder is its
    /// owner (the lock's value is `Owner::lock_value`, which no token can match), and `token`
    /// names the hold.
    pub(crate) async fn acquire(
        &self,
        keys: &Keys,
        token: &str,
        ttl: Duration,
        proposal: Proposal,
        place: Option<&Place>,
        fair: bool,
    ) -> std::result::Result<AcquireReply, NodeFailureKind> {
        let Proposal { fence, refence } = proposal;
        let (script, holder) = match &keys.kind {
            LockKind::Mutex => (&SCRIPTS.acquire, token),
            LockKind::Reentrant(owner) => (&SCRIPTS.reentrant_acquire, owner.lock_value()),
            LockKind::Read | LockKind::Write => (&SCRIPTS.rw_acquire, token),
            LockKind::Semaphore { .. } => (&SCRIPTS.semaphore_acquire, token),
        };
        let (value, link) = self
            .eval(Operation::Acquire, script, &keys.for_acquire(), |c| {
                c.arg(holder).arg(millis(ttl)).arg(fence);
                match place {
                    Some(p) => c.arg(&*p.waiter).arg(p.priority).arg(millis(p.life)),
                    None => c.arg("").arg(0).arg(0),
                };
                c.arg(u8::from(fair));
                match &keys.kind {
                    LockKind::Mutex => {}
                    LockKind::Reentrant(_) => {
                        c.arg(token).arg(u8::from(refence));
                    }
                    LockKind::Read => {
                        c.arg("r").arg(u8::from(refence));
                    }
                    LockKind::Write => {
                        c.arg("w").arg(0);
                    }
                    LockKind::Semaphore { permits } => {
                        c.arg(*permits);
                    }
                }
            })
            .await?;
        let reply = match value {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(1), Value::Int(fence)] => AcquireReply::Granted(non_negative(*fence)),
                [Value::Int(8), Value::Int(fence), Value::Int(others)] => {
                    AcquireReply::Kept(non_negative(*fence), *others > 0)
                }
                [Value::Int(0), Value::Int(holder)] => AcquireReply::Held(non_negative(*holder)),
                [Value::Int(2), Value::Int(counter)] => AcquireReply::Stale(non_negative(*counter)),
                [Value::Int(3)] => AcquireReply::Reserved,
                [Value::Int(4), Value::BulkString(token), Value::Int(fence)] => {
                    let token =
                        std::str::from_utf8(token).map_err(|_| unexpected("acquire", &items))?;
                    AcquireReply::HandedOver(
                        token.into(),
                        non_negative(*fence),
                        self.process_of(link),
                    )
                }
                [Value::Int(5)] => {
                    self.saw_deployment(false, None);
                    return Err(NodeFailureKind::Unmarked);
                }
                [Value::Int(6), Value::Int(pttl)] => {
                    let left = Duration::from_millis(u64::try_from(*pttl).unwrap_or(1).max(1));
                    self.saw_deployment(true, Some(left));
                    return Err(NodeFailureKind::Quarantined(left));
                }
                [Value::Int(7), Value::Int(held)] => {
                    return Err(NodeFailureKind::OtherPermits(*held));
                }
                _ => return Err(unexpected("acquire", &items)),
            },
            other => return Err(unexpected("acquire", &other)),
        };
        if self.health().marked != Some(true) {
            self.saw_deployment(true, None);
        }
        // A grant from a node whose votes do not count is left in place (the key makes the
        // lock sturdier) but not counted; refusals count as what they are.
        if matches!(reply, AcquireReply::Granted(_) | AcquireReply::Kept(..)) {
            self.vote_counts(Some(link))?;
        }
        Ok(reply)
    }

    /// Asks the node to push back the lock's expiry if `token` holds it; the holder's fencing
    /// token when it did, `None` when the lock is gone or held by another token. For a
    /// reentrant lock, `token` is the hold, which the node must record.
    pub(crate) async fn extend(
        &self,
        keys: &Keys,
        token: &str,
        ttl: Duration,
    ) -> std::result::Result<Option<u64>, NodeFailureKind> {
        // The third argument: a reentrant lock's hold, or what goes before a holder's token in
        // a read-write lock's or a semaphore's holders.
        let (script, holder, third) = match &keys.kind {
            LockKind::Mutex => (&SCRIPTS.extend, token, None),
            LockKind::Reentrant(owner) => {
                (&SCRIPTS.reentrant_extend, owner.lock_value(), Some(token))
            }
            LockKind::Read => (&SCRIPTS.holders_extend, token, Some("r:")),
            LockKind::Write => (&SCRIPTS.holders_extend, token, Some("w:")),
            LockKind::Semaphore { .. } => (&SCRIPTS.holders_extend, token, Some("")),
        };
        let (value, link) = self
            .eval(Operation::Extend, script, &keys.for_extend(), |c| {
                c.arg(holder).arg(millis(ttl));
                if let Some(third) = third {
                    c.arg(third);
                }
                // A semaphore's masters check the permits, as they do for an acquire: with
                // fewer, the extend would count a smaller quorum than the holder's.
                if let LockKind::Semaphore { permits } = &keys.kind {
                    c.arg(*permits);
                }
            })
            .await?;
        match value {
            Value::Int(-1) => Ok(None),
            Value::Array(items) => match items.as_slice() {
                [Value::Int(7), Value::Int(held)] => Err(NodeFailureKind::OtherPermits(*held)),
                _ => Err(unexpected("extend", &items)),
            },
            Value::Int(fence) if fence >= 0 => {
                self.vote_counts(Some(link))?;
                Ok(Some(non_negative(fence)))
            }
            other => Err(unexpected("extend", &other)),
        }
    }

    /// Asks the node to delete the lock if `token` holds it, and to hand it to (or wake) the
    /// first waiter, whose client hears on `channel` and its id ('' for nobody). `fence` is the
    /// released lock's fencing token (0 when unknown). `holder` when the lock's own holder
    /// releases it: a mutex gone from this node is then handed over too (see
    /// `lua/release.lua`). Keys: the lock, its queue, the queue's terms, the fencing counter,
    /// the deployment's marker and quarantine, and the queue's live mark
    /// ([`Keys::for_release`]). Counted from every node, quarantined or not: a release only
    /// removes, or hands over what the first waiter could take itself.
    ///
    /// For a reentrant lock, `token` is the hold released, and the lock goes only with its
    /// last hold (a hold the node does not record answers as another token's lock); a
    /// read-write lock or a semaphore wakes the first few waiters.
    ///
    /// `keep`, for a mutex: a place in line for the releaser's next attempt, queued with its
    /// terms where the release hands the lock over, and where it finds the lock gone or
    /// another's (a master out of step with the line); the answer says which.
    pub(crate) async fn release(
        &self,
        keys: &Keys,
        token: &str,
        channel: &str,
        fence: u64,
        holder: bool,
        keep: Option<(&Place, &Terms)>,
    ) -> std::result::Result<(ReleaseReply, PlaceKept), NodeFailureKind> {
        let holders_member = match &keys.kind {
            LockKind::Mutex => None,
            LockKind::Reentrant(owner) => {
                let (value, _) = self
                    .eval(
                        Operation::Release,
                        &SCRIPTS.reentrant_release,
                        &keys.for_release(),
                        |c| {
                            c.arg(owner.lock_value()).arg(channel).arg(fence).arg(token);
                        },
                    )
                    .await?;
                return release_reply(value).map(|(reply, _)| (reply, PlaceKept::No));
            }
            LockKind::Read => Some("r:"),
            LockKind::Write => Some("w:"),
            LockKind::Semaphore { .. } => Some(""),
        };
        let (value, _) = match holders_member {
            None => {
                self.eval(
                    Operation::Release,
                    &SCRIPTS.release,
                    &keys.for_release(),
                    |c| {
                        c.arg(token)
                            .arg(channel)
                            .arg(fence)
                            .arg(if holder { "1" } else { "0" });
                        if let Some((place, terms)) = keep {
                            c.arg(&*place.waiter)
                                .arg(place.priority)
                                .arg(millis(place.life))
                                .arg(&*terms.token)
                                .arg(millis(terms.ttl))
                                .arg(terms.proposal);
                        }
                    },
                )
                .await?
            }
            Some(prefix) => {
                self.eval(
                    Operation::Release,
                    &SCRIPTS.holders_release,
                    &keys.for_place(),
                    |c| {
                        c.arg(token).arg(channel).arg(prefix);
                    },
                )
                .await?
            }
        };
        release_reply(value)
    }

    /// Gives back the lock if `token` holds it, and puts the waiter of `place` back in line
    /// with `terms`, or none (see `lua/give_back.lua`), waking on `channel` an earlier waiter if the
    /// lock is now free. Keys: the lock, its queue, the queue's terms and its live mark, then the
    /// deployment's marker, quarantine and marked process ([`Keys::for_give_back`]).
    pub(crate) async fn give_back(
        &self,
        keys: [&str; 7],
        token: &str,
        place: &Place,
        terms: Option<&Terms>,
        channel: &str,
    ) -> std::result::Result<ReleaseReply, NodeFailureKind> {
        let (value, _) = self
            .eval(Operation::Release, &SCRIPTS.give_back, &keys, |c| {
                c.arg(token)
                    .arg(&*place.waiter)
                    .arg(place.priority)
                    .arg(millis(place.life));
                match terms {
                    Some(t) => c.arg(&*t.token).arg(millis(t.ttl)).arg(t.proposal),
                    None => c.arg("").arg("").arg(""),
                };
                c.arg(channel);
            })
            .await?;
        release_reply(value).map(|(reply, _)| reply)
    }

    /// Gives up `waiter`'s place in the queue, waking the next waiter on `channel` if the lock
    /// is free; a read-write lock's `writer` also takes back its record that it waits, which
    /// keeps new readers out. Keys: the lock, its queue, the queue's terms and its live mark.
    /// Whether the waiter had a place here.
    pub(crate) async fn dequeue(
        &self,
        keys: [&str; 4],
        waiter: &str,
        channel: &str,
        writer: bool,
    ) -> std::result::Result<bool, NodeFailureKind> {
        let (value, _) = self
            .eval(Operation::Release, &SCRIPTS.dequeue, &keys, |c| {
                c.arg(waiter).arg(channel).arg(u8::from(writer));
            })
            .await?;
        match value {
            Value::Int(n) => Ok(n == 1),
            other => Err(unexpected("dequeue", &other)),
        }
    }

    /// Holds a lock handed to a waiter under `from` with `to` and fencing token `fence`
    /// instead (see `lua/adopt.lua`). Keys: the lock and its fencing counter. Whether it is
    /// held so now.
    pub(crate) async fn adopt(
        &self,
        keys: [&str; 3],
        from: &str,
        to: &str,
        fence: u64,
    ) -> std::result::Result<bool, NodeFailureKind> {
        let (value, _) = self
            .eval(Operation::Acquire, &SCRIPTS.adopt, &keys, |c| {
                c.arg(from).arg(to).arg(fence);
            })
            .await?;
        match value {
            Value::Int(n) => Ok(n == 1),
            other => Err(unexpected("adopt", &other)),
        }
    }

    /// What the node knows of its deployment: its marker, the longest TTL asked for on it, its
    /// quarantine, the process it was marked for, and how long until the latest expiry of the
    /// locks it granted.
    pub(crate) async fn deployment(
        &self,
        keys: [&str; 5],
    ) -> std::result::Result<DeploymentState, NodeFailureKind> {
        let (value, _) = self
            .eval(Operation::Inspect, &SCRIPTS.deployment, &keys, |_| {})
            .await?;
        let text =
            |bytes: &[u8]| (!bytes.is_empty()).then(|| String::from_utf8_lossy(bytes).into_owned());
        let state = match &value {
            Value::Array(items) => match items.as_slice() {
                [
                    Value::BulkString(marker),
                    Value::Int(longest),
                    Value::Int(pttl),
                    Value::BulkString(marked_run),
                    Value::Int(expiry_left),
                ] => DeploymentState {
                    marker: text(marker),
                    longest_ttl: Duration::from_millis(non_negative(*longest)),
                    quarantined_for: u64::try_from(*pttl)
                        .ok()
                        .filter(|ms| *ms > 0)
                        .map(Duration::from_millis),
                    marked_run: text(marked_run),
                    latest_expiry: u64::try_from(*expiry_left).ok().map(Duration::from_millis),
                    restarted: false,
                },
                _ => return Err(unexpected("deployment", &value)),
            },
            _ => return Err(unexpected("deployment", &value)),
        };
        self.saw_deployment(state.marker.is_some(), state.quarantined_for);
        self.saw_marked_run(state.marked_run.clone());
        Ok(state)
    }

    /// Marks the node as part of deployment `id`, quarantined for `quarantine` (zero: not at
    /// all), recording `longest_ttl` and the process the client read the node to be; whether it
    /// was marked now (`false`: it already was, for that process).
    pub(crate) async fn mark(
        &self,
        keys: [&str; 5],
        id: &str,
        quarantine: Duration,
        longest_ttl: Duration,
    ) -> std::result::Result<bool, NodeFailureKind> {
        let run_id = self.run_id().unwrap_or_default();
        let (value, _) = self
            .eval(Operation::Inspect, &SCRIPTS.mark, &keys, |c| {
                c.arg(id)
                    .arg(millis(quarantine))
                    .arg(millis(longest_ttl))
                    .arg(run_id.as_str());
            })
            .await?;
        match value {
            Value::Int(n) => {
                if !run_id.is_empty() {
                    self.saw_marked_run(Some(run_id));
                }
                Ok(n == 1)
            }
            other => Err(unexpected("mark", &other)),
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
