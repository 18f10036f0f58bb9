//! Which server each of a client's nodes is, by its `run_id`: two addresses of one server (a
//! host name and its IP address, two names of one host) are one vote, not two.

use std::sync::{Mutex, PoisonError};

/// The servers the client's nodes were last read to be, in the order first read.
#[derive(Debug, Default)]
pub(crate) struct Servers {
    /// `(addr, run_id)` of each node read so far.
    read: Mutex<Vec<(String, String)>>,
}

impl Servers {
    /// Records that node `addr` is the server `run_id`; the address of another node read
    /// before as the same server, if any: that one keeps the server's vote.
    pub(crate) fn identify(&self, addr: &str, run_id: &str) -> Option<String> {
        let mut read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        match read.iter_mut().find(|(node, _)| node == addr) {
            Some(entry) => run_id.clone_into(&mut entry.1),
            None => read.push((addr.to_owned(), run_id.to_owned())),
        }
        read.iter()
            .take_while(|(node, _)| node != addr)
            .find(|(_, id)| id == run_id)
            .map(|(node, _)| node.clone())
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
        // Read again, the first is still no duplicate of the later one.
        assert_eq!(servers.identify("a:1", "r1"), None);
        // A restart gives the server a new run_id: the duplicate follows it.
        assert_eq!(servers.identify("a:1", "r3"), None);
        assert_eq!(servers.identify("a2:1", "r1"), None);
        assert_eq!(servers.identify("a2:1", "r3").as_deref(), Some("a:1"));
    }
}
