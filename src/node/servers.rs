//! Which server each of a client's nodes is, by its `run_id`: two addresses of one server (a
//! host name and its IP address, two names of one host) are one vote, not two.
//!
//! A node read to be the same server as another is that node's alias for the client's life:
//! it casts no vote, whatever it is read to be later. Readings go stale (a master that
//! restarts gets a new `run_id`, which each of its addresses learns only when it is read
//! again, in any order), and a rule that compared them again at each reading would, between
//! two such readings, let both addresses vote. An address does not become another server.

use std::sync::{Mutex, PoisonError};

/// The servers the client's nodes were last read to be, and the aliases found among them.
#[derive(Debug, Default)]
pub(crate) struct Servers {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// `(addr, run_id)` of each node read so far, as last read.
    read: Vec<(String, String)>,
    /// `(alias, keeper)`: a node found to be the same server as `keeper`, which casts the
    /// server's vote.
    aliases: Vec<(String, String)>,
}

impl State {
    /// The node that casts `addr`'s server's vote, if that is another node.
    fn keeper_of(&self, addr: &str) -> Option<&str> {
        self.aliases
            .iter()
            .find(|(alias, _)| alias == addr)
            .map(|(_, keeper)| keeper.as_str())
    }
}

impl Servers {
    /// Records that node `addr` is the server `run_id`; the node that casts that server's vote,
    /// when it is another one. A node found to be the same server as one read before it (by
    /// that one's last reading) becomes its alias, for good.
    pub(crate) fn identify(&self, addr: &str, run_id: &str) -> Option<String> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state.read.iter_mut().find(|(node, _)| node == addr) {
            Some(entry) => run_id.clone_into(&mut entry.1),
            None => state.read.push((addr.to_owned(), run_id.to_owned())),
        }
        if let Some(keeper) = state.keeper_of(addr) {
            return Some(keeper.to_owned());
        }
        // Another node last read as this server, other than this node's own aliases: it keeps
        // the vote (or the node it is an alias of does).
        let keeper = state
            .read
            .iter()
            .filter(|(node, id)| node != addr && id == run_id)
            .map(|(node, _)| state.keeper_of(node).unwrap_or(node).to_owned())
            .find(|keeper| keeper != addr)?;
        state.aliases.push((addr.to_owned(), keeper.clone()));
        Some(keeper)
    }
}

#[cfg(test)]
mod tests {
    use super::Servers;

    #[test]
    fn the_first_address_read_keeps_the_vote() {
        let servers = Servers::default();
        assert_eq!(servers.identify("a:1", "r1"), None);
        assert_eq!(servers.identify("b:1", "r2"), None);
        assert_eq!(servers.identify("a2:1", "r1").as_deref(), Some("a:1"));
        // Read again, the first is still no alias of the later one.
        assert_eq!(servers.identify("a:1", "r1"), None);
    }

    #[test]
    fn an_alias_stays_one_whatever_order_a_restarted_server_is_read_in() {
        let servers = Servers::default();
        assert_eq!(servers.identify("a:1", "r1"), None);
        assert_eq!(servers.identify("a2:1", "r1").as_deref(), Some("a:1"));
        // The server restarts: the alias is read first, while the keeper's reading is still of
        // the process before. Compared afresh it would vote beside the keeper.
        assert_eq!(servers.identify("a2:1", "r3").as_deref(), Some("a:1"));
        assert_eq!(servers.identify("a:1", "r3"), None);
        assert_eq!(servers.identify("a2:1", "r3").as_deref(), Some("a:1"));
    }

    #[test]
    fn a_server_read_anew_through_an_address_not_known_as_its_alias_yet() {
        let servers = Servers::default();
        // The first address is read, the server restarts, and the second address is read
        // first after it: no other reading is of that process yet, so it votes; the first,
        // read again, is then found to be its alias (its old connection, and vote, went with
        // the restart).
        assert_eq!(servers.identify("a:1", "r1"), None);
        assert_eq!(servers.identify("a2:1", "r3"), None);
        assert_eq!(servers.identify("a:1", "r3").as_deref(), Some("a2:1"));
        assert_eq!(servers.identify("a2:1", "r3"), None);
        // A third address of it is an alias of the one that keeps the vote.
        assert_eq!(servers.identify("a3:1", "r3").as_deref(), Some("a2:1"));
        assert_eq!(servers.identify("a:1", "r4").as_deref(), Some("a2:1"));
        assert_eq!(servers.identify("a3:1", "r4").as_deref(), Some("a2:1"));
    }
}
