//! `lua/mark.lua`: mark a master as part of the deployment, in quarantine if it lost its data.

use crate::ids::{Process, Window};
use crate::master::Keys;

/// The arguments of one call.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct MarkArgs {
    /// The window the quarantine lasts until (none: no quarantine): the latest the kept masters
    /// record as still possibly held.
    pub quarantine: Option<Window>,
    /// The process the client read the master to be (`ARGV[4]`).
    pub run: Process,
}

/// Whether it marked the master now.
pub fn mark(keys: &mut Keys, args: &MarkArgs) -> bool {
    if keys.marker && keys.marked_run == Some(args.run) {
        return false;
    }
    if args.quarantine.is_some() {
        keys.quarantine = args.quarantine;
    }
    keys.marker = true;
    keys.marked_run = Some(args.run);
    true
}
