//! Marking the deployment: every master read, those that lost their data marked again, in
//! quarantine until the latest expiry the kept masters record (`src/deployment.rs`).

use super::{Delays, Protocol, State};
use crate::client::{Conn, Reading};
use crate::ids::ClientId;
use crate::net::Request;
use crate::scripts::mark::MarkArgs;

impl Protocol {
    /// The deployment check (`src/deployment.rs`): every master is read (on a connection of
    /// its current process), and those that lost their data are marked, in quarantine for the
    /// windows the kept masters record; with no marker anywhere, the deployment is new.
    ///
    /// The readings are taken at one instant: every record only grows between them, and what
    /// the masters that lost their data granted before the loss is recorded already.
    pub(super) fn mark(&self, state: &mut State, c: ClientId, delays: Delays) {
        state.clients[usize::from(c)].marking_due = false;
        let n = self.masters();
        let mut lost = vec![false; n];
        let mut kept_record = None;
        let mut any_record = None;
        for (m, master) in state.masters.iter().enumerate() {
            let restarted = master.keys.restarted(master.process, self.setup.durable[m]);
            lost[m] = !master.keys.marker || restarted;
            any_record = any_record.max(master.keys.record);
            if !lost[m] {
                kept_record = kept_record.max(master.keys.record);
            }
        }
        if !lost.contains(&true) {
            return;
        }
        let new_deployment = !state.masters.iter().any(|m| m.keys.marker);
        let quarantine = if new_deployment {
            None
        } else if lost.contains(&false) {
            kept_record
        } else {
            any_record
        };
        for (m, lost) in lost.into_iter().enumerate() {
            // Reading the master refreshes the connection's reading.
            let process = state.masters[m].process;
            let restarted = state.masters[m]
                .keys
                .restarted(process, self.setup.durable[m]);
            let conn = &mut state.clients[usize::from(c)].conns[m];
            match conn {
                Some(k) if k.process == process => k.reading = Some(Reading { restarted }),
                _ => {
                    *conn = Some(Conn {
                        process,
                        reading: Some(Reading { restarted }),
                        pending: Vec::new(),
                    });
                }
            }
            if lost {
                let run = process;
                let mark = Request::Mark(MarkArgs { quarantine, run });
                self.send(state, c, m, mark, delays);
            }
        }
    }
}
