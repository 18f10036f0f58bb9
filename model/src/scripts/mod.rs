//! What each Lua script does to one master's keys, as a transition: one file per script, named
//! after it, kept in step with it (`tests/in_step.rs` fails when a script changes and the
//! model's record of it does not).
//!
//! A script runs at one instant on one master (Redis runs scripts one at a time), so each is a
//! single step here. What the scripts do only for speed (the queue's live mark, one `MGET` for
//! many keys) or only for liveness (wake-ups, which change no key) is left out; what decides
//! who may hold a lock is kept.

pub mod acquire;
pub mod give_back;
pub mod holders;
pub mod mark;
pub mod release;

use crate::ids::{Fence, Process, Value, Waiter};
use crate::master::Keys;
use crate::rules::Rules;

/// Where a script runs: the master's process, whether it keeps every write, and the version of
/// the protocol.
#[derive(Clone, Copy, Debug)]
pub struct Here<'r> {
    /// The master's process.
    pub process: Process,
    /// Whether the master keeps every write.
    pub durable: bool,
    /// The protocol's version.
    pub rules: &'r Rules,
}

impl Here<'_> {
    /// The deployment check every granting script makes first: the marker, then, under today's
    /// rules, the process the marker was made for (a master that is not durable and carries a
    /// marker made for another process came back from older data), then the quarantine.
    /// `Some(refusal)` when it may not grant.
    pub fn gate(&self, keys: &Keys) -> Option<Refusal> {
        if !keys.marker
            || (self.rules.scripts_check_process && keys.restarted(self.process, self.durable))
        {
            return Some(Refusal::Unmarked);
        }
        if keys.quarantine.is_some() {
            return Some(Refusal::Quarantined);
        }
        None
    }
}

/// Why a master grants nothing.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Refusal {
    /// No marker, or (today) one made for another process: `{5}`.
    Unmarked,
    /// `{6, pttl}`.
    Quarantined,
}

/// A lock handed to a waiter, published on its client's channel:
/// `<waiter id> <token> <fence> <lock key>`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Publish {
    /// The waiter it was handed to.
    pub to: Waiter,
    /// What the lock is held with now.
    pub value: Value,
    /// Its fencing token.
    pub fence: Fence,
}

/// Every Lua script of `lua/`, what in the model stands for it, and the FNV-1a hash of the
/// script's text the model was last brought in step with. `tests/in_step.rs` fails when a
/// script changes and this record does not: change the model with it (or say here why nothing
/// in the model changes), and the hash, in the same commit.
pub const IN_STEP: &[(&str, &str, u64)] = &[
    ("acquire.lua", "scripts/acquire.rs", 0xed0e_9d3f_b707_a912),
    (
        "adopt.lua",
        "not modelled: a waiter here holds a hand-over only of one token on a quorum",
        0x96d6_cbcb_eb5e_2377,
    ),
    (
        "deployment.lua",
        "the reading in system/clients.rs (`mark`)",
        0x6bac_0c83_6f79_22d4,
    ),
    (
        "dequeue.lua",
        "not modelled: a place is given up by lapsing (`Lapse`), at any time",
        0x1a23_d1aa_fd2f_92ca,
    ),
    (
        "extend.lua",
        "not modelled: holders do not extend (every lock has one TTL)",
        0xdf06_9f1d_473d_73c8,
    ),
    (
        "fenced_set.lua",
        "not modelled: the protected resource's side",
        0x77db_4094_f703_e327,
    ),
    (
        "fences.lua",
        "the counter in master.rs: for one name, its counter and its floor are one value",
        0x7513_9acc_b5ec_4b82,
    ),
    (
        "give_back.lua",
        "scripts/give_back.rs",
        0x4b4b_5ec4_1b26_2952,
    ),
    ("holders.lua", "scripts/holders.rs", 0x512b_166f_b66c_6a3e),
    (
        "holders_extend.lua",
        "not modelled: holders do not extend",
        0x5960_7432_300d_66ef,
    ),
    (
        "holders_release.lua",
        "scripts/holders.rs",
        0xbd66_324a_ac8e_a892,
    ),
    (
        "inspect.lua",
        "not modelled: reads only",
        0x0edb_9f97_e64f_0321,
    ),
    ("mark.lua", "scripts/mark.rs", 0xf862_1169_903b_15a9),
    (
        "marked.lua",
        "`Here::gate` and `Keys::record`",
        0x10fe_7452_016c_74ec,
    ),
    (
        "queue.lua",
        "`Keys::queue_place` and `Keys::dequeue`",
        0xac77_1def_d896_444a,
    ),
    (
        "reentrant_acquire.lua",
        "not modelled: a reentrant lock's first hold is acquire.lua's grant",
        0x673c_fdf1_1b45_8de0,
    ),
    (
        "reentrant_extend.lua",
        "not modelled: holders do not extend",
        0xb049_1929_a7f9_e14b,
    ),
    (
        "reentrant_release.lua",
        "not modelled: a reentrant lock's last hold is released as release.lua does",
        0xc489_81d3_c8f5_67e9,
    ),
    ("release.lua", "scripts/release.rs", 0x1c59_23f1_1a57_7318),
    (
        "rw_acquire.lua",
        "scripts/holders.rs",
        0x0004_f5c7_c6fb_cde6,
    ),
    (
        "semaphore_acquire.lua",
        "scripts/holders.rs",
        0xea63_32a9_705f_8603,
    ),
];

/// The FNV-1a hash of a script's text, as [`IN_STEP`] records it.
pub fn text_hash(text: &[u8]) -> u64 {
    text.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
