//! Where a lock name and the deployment live on a master: the key names, and the order in
//! which each Lua script takes them (its `KEYS`).

use std::sync::Arc;

use crate::config::LockKind;

/// Where one lock name lives on every node, and as what kind of lock. Lock keys, counters and
/// queues live under different sub-prefixes, so no name can collide with another's counter or
/// queue. A mutex and a reentrant lock share their keys (they exclude each other); read-write
/// locks and semaphores live under `rw:` and `sem:`, which no mutex sub-prefix starts with.
#[derive(Debug)]
pub(crate) struct Keys {
    /// What kind of lock this is: it picks the scripts, their arguments and the quorum.
    pub(crate) kind: LockKind,
    /// `{prefix}lock:{name}`: the holder's token, with the lock's TTL. For a read-write lock
    /// or a semaphore, `{prefix}rw:lock:{name}` or `{prefix}sem:lock:{name}`: the holders, by
    /// when each hold expires (see `lua/holders.lua`).
    pub(crate) lock: String,
    /// `{prefix}fence:{name}`: the highest fencing token granted for the name, alive for as
    /// long as a hold of it may be (see `lua/marked.lua`).
    pub(crate) fence: String,
    /// `{prefix}fence-floor:{slot}`: at or above every fencing token granted for a name of the
    /// name's slot (see [`crate::slot`]), with no expiry; what a counter that is gone reads as.
    pub(crate) fence_floor: String,
    /// `{prefix}queue:{name}`: waiter ids by priority.
    pub(crate) queue: String,
    /// `{prefix}queue-terms:{name}`: when each waiter's place lapses, and on what terms a
    /// release may hand the lock to it.
    pub(crate) terms: String,
    /// `{prefix}queue-live:{name}`: there while a place in the queue may be live, so that an
    /// acquire or release that finds it missing need not look at the queue.
    pub(crate) queue_live: String,
    /// `{prefix}holds:{name}`: a reentrant lock's holds (see `lua/reentrant_acquire.lua`).
    pub(crate) holds: String,
    /// Counts a bare majority whatever the kind (the unsafe setting a positive control uses).
    pub(crate) majority_only: bool,
    /// The keys every name shares: the deployment's marker, longest TTL and quarantine.
    pub(crate) deployment: Arc<DeploymentKeys>,
}

/// `parts` one after the other, in a string allocated once at its size: keys are made for
/// every acquire, and `format!` grows its string as it goes.
fn joined(parts: &[&str]) -> String {
    let mut key = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        key.push_str(part);
    }
    key
}

/// How many keys a [`KeyList`] holds: the longest list, a reentrant lock's acquire, has eleven.
const KEY_LIST_CAPACITY: usize = 12;

/// The keys of one script call, held in place: every call to every node makes one.
#[derive(Debug, Default)]
pub(crate) struct KeyList<'k> {
    keys: [&'k str; KEY_LIST_CAPACITY],
    len: usize,
}

impl<'k> std::ops::Deref for KeyList<'k> {
    type Target = [&'k str];

    fn deref(&self) -> &[&'k str] {
        self.keys.get(..self.len).unwrap_or(&[])
    }
}

/// Where a node keeps what it knows of its deployment (see `lua/mark.lua`).
#[derive(Debug)]
pub(crate) struct DeploymentKeys {
    /// `{prefix}deployment`: the marker, with the deployment's id; no expiry.
    pub(crate) marker: String,
    /// `{prefix}longest-ttl`: the longest TTL asked for on the node, in ms; no expiry.
    pub(crate) longest_ttl: String,
    /// `{prefix}quarantine`: present, with its TTL, while the node is quarantined.
    pub(crate) quarantine: String,
    /// `{prefix}marked-run`: the `run_id` of the node's process when it was last marked; no
    /// expiry. Another process carrying the marker came back from older data (a snapshot).
    pub(crate) marked_run: String,
    /// `{prefix}latest-expiry`: the latest moment, in the node's milliseconds, at which a lock
    /// it granted may expire (see `lua/marked.lua`); no expiry.
    pub(crate) latest_expiry: String,
}

impl Default for DeploymentKeys {
    /// Under the default key prefix.
    fn default() -> Self {
        DeploymentKeys::new(crate::config::defaults::KEY_PREFIX)
    }
}

impl DeploymentKeys {
    pub(crate) fn new(prefix: &str) -> Self {
        DeploymentKeys {
            marker: format!("{prefix}deployment"),
            longest_ttl: format!("{prefix}longest-ttl"),
            quarantine: format!("{prefix}quarantine"),
            marked_run: format!("{prefix}marked-run"),
            latest_expiry: format!("{prefix}latest-expiry"),
        }
    }

    /// The keys of the deployment scripts (read and mark).
    pub(crate) fn all(&self) -> [&str; 5] {
        [
            &self.marker,
            &self.longest_ttl,
            &self.quarantine,
            &self.marked_run,
            &self.latest_expiry,
        ]
    }
}

impl Keys {
    /// The keys of lock `name` of `kind` under `prefix` (the name is already checked).
    pub(crate) fn new(
        prefix: &str,
        name: &str,
        kind: LockKind,
        deployment: Arc<DeploymentKeys>,
    ) -> Self {
        let space = match kind {
            LockKind::Mutex | LockKind::Reentrant(_) => "",
            LockKind::Read | LockKind::Write => "rw:",
            LockKind::Semaphore { .. } => "sem:",
        };
        Keys {
            lock: joined(&[prefix, space, "lock:", name]),
            fence: joined(&[prefix, space, "fence:", name]),
            fence_floor: joined(&[
                prefix,
                space,
                "fence-floor:",
                &crate::slot::of(name).to_string(),
            ]),
            queue: joined(&[prefix, space, "queue:", name]),
            terms: joined(&[prefix, space, "queue-terms:", name]),
            queue_live: joined(&[prefix, space, "queue-live:", name]),
            holds: joined(&[prefix, "holds:", name]),
            kind,
            majority_only: false,
            deployment,
        }
    }

    /// How many of `nodes` masters must grant this kind of lock.
    pub(crate) fn quorum(&self, nodes: usize) -> usize {
        if self.majority_only {
            return nodes / 2 + 1;
        }
        self.kind.quorum(nodes)
    }

    /// The lock name whose lock key this is, if it is one under `prefix`.
    pub(crate) fn name_of_lock_key<'k>(prefix: &str, key: &'k str) -> Option<&'k str> {
        key.strip_prefix(prefix)?.strip_prefix("lock:")
    }

    /// The keys of the acquire scripts (a reentrant lock's holds last).
    pub(crate) fn for_acquire(&self) -> KeyList<'_> {
        let d = &self.deployment;
        self.with_holds([
            &self.lock,
            &self.fence,
            &self.queue,
            &self.terms,
            &d.marker,
            &d.longest_ttl,
            &d.quarantine,
            &self.queue_live,
            &d.marked_run,
            &d.latest_expiry,
            &self.fence_floor,
        ])
    }

    /// The keys of the extend scripts (a reentrant lock's holds last).
    pub(crate) fn for_extend(&self) -> KeyList<'_> {
        let d = &self.deployment;
        self.with_holds([
            &self.lock,
            &self.fence,
            &d.longest_ttl,
            &d.latest_expiry,
            &self.fence_floor,
        ])
    }

    /// The keys of the release scripts (a reentrant lock's holds last).
    pub(crate) fn for_release(&self) -> KeyList<'_> {
        let d = &self.deployment;
        self.with_holds([
            &self.lock,
            &self.queue,
            &self.terms,
            &self.fence,
            &d.marker,
            &d.quarantine,
            &self.queue_live,
            &d.marked_run,
            &d.latest_expiry,
            &d.longest_ttl,
            &self.fence_floor,
        ])
    }

    /// `keys`, and a reentrant lock's holds after them. A call with more keys than a list
    /// holds does not build: a key left out would leave a script short of one.
    fn with_holds<'k, const N: usize>(&'k self, keys: [&'k str; N]) -> KeyList<'k> {
        const {
            assert!(
                N < KEY_LIST_CAPACITY,
                "a script call has more keys than a KeyList holds"
            )
        };
        let mut list = KeyList::default();
        let holds = matches!(self.kind, LockKind::Reentrant(_)).then_some(self.holds.as_str());
        for (slot, key) in list.keys.iter_mut().zip(keys.into_iter().chain(holds)) {
            *slot = key;
            list.len += 1;
        }
        list
    }

    /// The keys of the script that holds a handed-over lock under one token (adopt).
    pub(crate) fn for_adopt(&self) -> [&str; 3] {
        [&self.lock, &self.fence, &self.fence_floor]
    }

    /// The keys of the scripts that act on a waiter's place (dequeue, a holder's release).
    pub(crate) fn for_place(&self) -> [&str; 4] {
        [&self.lock, &self.queue, &self.terms, &self.queue_live]
    }

    /// The keys of the give-back: a place's, and the deployment's that say whether the master
    /// may take one.
    pub(crate) fn for_give_back(&self) -> [&str; 7] {
        let d = &self.deployment;
        [
            &self.lock,
            &self.queue,
            &self.terms,
            &self.queue_live,
            &d.marker,
            &d.quarantine,
            &d.marked_run,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_key_gives_its_name_back() {
        let keys = Keys::new(
            "rq:",
            "a name",
            LockKind::Mutex,
            Arc::new(DeploymentKeys::new("rq:")),
        );
        assert_eq!(keys.lock, "rq:lock:a name");
        assert_eq!(Keys::name_of_lock_key("rq:", &keys.lock), Some("a name"));
        assert_eq!(Keys::name_of_lock_key("rq:", &keys.fence), None);
        assert_eq!(Keys::name_of_lock_key("other:", &keys.lock), None);
    }

    #[test]
    fn kinds_live_apart_whatever_the_name() {
        let d = Arc::new(DeploymentKeys::new("rq:"));
        let mutex = Keys::new("rq:", "rw:lock:x", LockKind::Mutex, d.clone());
        let rw = Keys::new("rq:", "x", LockKind::Read, d.clone());
        let sem = Keys::new("rq:", "x", LockKind::semaphore(2), d.clone());
        assert_eq!(rw.lock, "rq:rw:lock:x");
        assert_eq!(sem.lock, "rq:sem:lock:x");
        assert_ne!(mutex.lock, rw.lock);
        assert_eq!(Keys::name_of_lock_key("rq:", &rw.lock), None);
        // A reentrant lock is a mutex with holds.
        let owner = crate::config::Owner::from_id("o").unwrap();
        let reentrant = Keys::new("rq:", "x", LockKind::Reentrant(owner), d);
        assert_eq!(reentrant.lock, "rq:lock:x");
        assert_eq!(reentrant.for_acquire().len(), 12);
    }

    #[test]
    fn a_names_floor_is_its_slots() {
        let d = Arc::new(DeploymentKeys::new("rq:"));
        assert_eq!(
            Keys::new("rq:", "x", LockKind::Read, d).fence_floor,
            "rq:rw:fence-floor:16287"
        );
    }

    #[test]
    fn every_script_gets_all_its_keys_in_order() {
        let d = Arc::new(DeploymentKeys::new("rq:"));
        let mutex = Keys::new("rq:", "x", LockKind::Mutex, d.clone());
        assert_eq!(
            *mutex.for_acquire(),
            [
                "rq:lock:x",
                "rq:fence:x",
                "rq:queue:x",
                "rq:queue-terms:x",
                "rq:deployment",
                "rq:longest-ttl",
                "rq:quarantine",
                "rq:queue-live:x",
                "rq:marked-run",
                "rq:latest-expiry",
                "rq:fence-floor:16287"
            ]
        );
        assert_eq!(
            *mutex.for_release(),
            [
                "rq:lock:x",
                "rq:queue:x",
                "rq:queue-terms:x",
                "rq:fence:x",
                "rq:deployment",
                "rq:quarantine",
                "rq:queue-live:x",
                "rq:marked-run",
                "rq:latest-expiry",
                "rq:longest-ttl",
                "rq:fence-floor:16287"
            ]
        );
        assert_eq!(
            *mutex.for_extend(),
            [
                "rq:lock:x",
                "rq:fence:x",
                "rq:longest-ttl",
                "rq:latest-expiry",
                "rq:fence-floor:16287"
            ]
        );
        let owner = crate::config::Owner::from_id("o").unwrap();
        let reentrant = Keys::new("rq:", "x", LockKind::Reentrant(owner), d);
        assert_eq!(reentrant.for_acquire().last(), Some(&"rq:holds:x"));
        assert_eq!(reentrant.for_release().len(), 12);
        assert_eq!(
            *reentrant.for_extend(),
            [
                "rq:lock:x",
                "rq:fence:x",
                "rq:longest-ttl",
                "rq:latest-expiry",
                "rq:fence-floor:16287",
                "rq:holds:x"
            ]
        );
    }
}
