//! Which validity windows anything still refers to: a window nothing refers to ends at once,
//! since nothing can tell whether it has (a new attempt makes a new window), and states that
//! differ only there are one.

use super::State;
use crate::client::Op;
use crate::ids::Window;
use crate::master::Keys;
use crate::net::Request;

/// A set of windows, by number.
#[derive(Clone, Copy, Default)]
struct Referenced(u64);

impl Referenced {
    fn add(&mut self, w: Window) {
        if w.0 < 64 {
            self.0 |= 1 << w.0;
        }
    }

    fn has(self, w: Window) -> bool {
        w.0 >= 64 || self.0 & (1 << w.0) != 0
    }

    fn keys(&mut self, keys: &Keys) {
        if let Some(v) = keys.lock {
            self.add(v.token().window);
        }
        for h in &keys.holders {
            self.add(h.token.window);
        }
        for p in &keys.queue {
            if let Some(t) = p.terms {
                self.add(t.token.window);
            }
        }
        for w in keys.record.iter().chain(keys.quarantine.iter()) {
            self.add(*w);
        }
    }

    fn request(&mut self, request: &Request) {
        match request {
            Request::Acquire { args, .. } => self.add(args.token.window),
            Request::HoldAcquire { args, .. } => self.add(args.token.window),
            Request::Release(args) => self.add(args.value.token().window),
            Request::HoldersRelease(token) => self.add(token.window),
            Request::GiveBack(args) => {
                self.add(args.value.token().window);
                if let Some(t) = args.terms {
                    self.add(t.token.window);
                }
            }
            Request::Mark(args) => {
                if let Some(w) = args.quarantine {
                    self.add(w);
                }
            }
        }
    }
}

/// Ends, in order, the oldest windows that nothing refers to.
pub(super) fn end_unreferenced(state: &mut State) {
    let mut refs = Referenced::default();
    for m in &state.masters {
        refs.keys(&m.keys);
        if let Some(s) = &m.snapshot {
            refs.keys(s);
        }
    }
    for c in &state.clients {
        match &c.op {
            Op::Trying(a) => refs.add(a.token.window),
            Op::Holding(h) => refs.add(h.value.token().window),
            Op::Idle | Op::Waiting => {}
        }
        for g in &c.heard {
            refs.add(g.value.token().window);
        }
        for conn in c.conns.iter().flatten() {
            for r in &conn.pending {
                refs.request(r);
            }
        }
    }
    for o in &state.orphans {
        refs.request(&o.request);
    }
    for m in &state.messages {
        refs.add(m.value.token().window);
    }
    while state.ended.0 <= state.clock && !refs.has(state.ended) {
        state.ended.0 += 1;
    }
}
