//! Where a lock name and the deployment live on a master: the key names, and the order in
//! which each Lua script takes them (its `KEYS`).

use std::sync::Arc;

/// Where one lock name lives on every node. Lock keys, counters and queues live under different
/// sub-prefixes, so no name can collide with another's counter or queue.
#[derive(Debug)]
pub(crate) struct Keys {
    /// `{prefix}lock:{name}`: the holder's token, with the lock's TTL.
    pub(crate) lock: String,
    /// `{prefix}fence:{name}`: the highest fencing token granted, with no expiry.
    pub(crate) fence: String,
    /// `{prefix}queue:{name}`: waiter ids by priority.
    pub(crate) queue: String,
    /// `{prefix}queue-terms:{name}`: when each waiter's place lapses, and on what terms a
    /// release may hand the lock to it.
    pub(crate) terms: String,
    /// The keys every name shares: the deployment's marker, longest TTL and quarantine.
    pub(crate) deployment: Arc<DeploymentKeys>,
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
}

impl DeploymentKeys {
    pub(crate) fn new(prefix: &str) -> Self {
        DeploymentKeys {
            marker: format!("{prefix}deployment"),
            longest_ttl: format!("{prefix}longest-ttl"),
            quarantine: format!("{prefix}quarantine"),
        }
    }

    /// The keys of the deployment scripts (read and mark).
    pub(crate) fn all(&self) -> [&str; 3] {
        [&self.marker, &self.longest_ttl, &self.quarantine]
    }
}

impl Keys {
    /// The keys of lock `name` under `prefix` (the name is already checked).
    pub(crate) fn new(prefix: &str, name: &str, deployment: Arc<DeploymentKeys>) -> Self {
        Keys {
            lock: format!("{prefix}lock:{name}"),
            fence: format!("{prefix}fence:{name}"),
            queue: format!("{prefix}queue:{name}"),
            terms: format!("{prefix}queue-terms:{name}"),
            deployment,
        }
    }

    /// The lock name whose lock key this is, if it is one under `prefix`.
    pub(crate) fn name_of_lock_key<'k>(prefix: &str, key: &'k str) -> Option<&'k str> {
        key.strip_prefix(prefix)?.strip_prefix("lock:")
    }

    /// The keys of the acquire script.
    pub(crate) fn for_acquire(&self) -> [&str; 7] {
        let d = &self.deployment;
        [
            &self.lock,
            &self.fence,
            &self.queue,
            &self.terms,
            &d.marker,
            &d.longest_ttl,
            &d.quarantine,
        ]
    }

    /// The keys of the extend script.
    pub(crate) fn for_extend(&self) -> [&str; 3] {
        [&self.lock, &self.fence, &self.deployment.longest_ttl]
    }

    /// The keys of the release script.
    pub(crate) fn for_release(&self) -> [&str; 6] {
        let d = &self.deployment;
        [
            &self.lock,
            &self.queue,
            &self.terms,
            &self.fence,
            &d.marker,
            &d.quarantine,
        ]
    }

    /// The keys of the script that holds a handed-over lock under one token (adopt).
    pub(crate) fn for_adopt(&self) -> [&str; 2] {
        [&self.lock, &self.fence]
    }

    /// The keys of the scripts that act on a waiter's place (dequeue, give back).
    pub(crate) fn for_place(&self) -> [&str; 3] {
        [&self.lock, &self.queue, &self.terms]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_key_gives_its_name_back() {
        let keys = Keys::new("rq:", "a name", Arc::new(DeploymentKeys::new("rq:")));
        assert_eq!(keys.lock, "rq:lock:a name");
        assert_eq!(Keys::name_of_lock_key("rq:", &keys.lock), Some("a name"));
        assert_eq!(Keys::name_of_lock_key("rq:", &keys.fence), None);
        assert_eq!(Keys::name_of_lock_key("other:", &keys.lock), None);
    }
}
