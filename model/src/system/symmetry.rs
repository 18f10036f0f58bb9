//! Masters set up alike are interchangeable: a state and the same state with two such masters'
//! numbers swapped (everywhere a master is named) behave alike, and are checked once.

use std::hash::{Hash, Hasher};

use stateright::Representative;

use super::State;
use crate::client::Op;
use crate::ids::MasterId;

impl Representative for State {
    /// The state with its masters in a canonical order: sorted by everything that concerns
    /// each (its keys and process, and each client's connection, subscription, answer and
    /// grants from it), masters set up differently never swapped.
    fn representative(&self) -> Self {
        let n = self.masters.len();
        let mut order: Vec<MasterId> = (0..n).collect();
        let keys: Vec<(bool, u64)> = (0..n)
            .map(|m| (self.masters[m].durable, column(self, m)))
            .collect();
        order.sort_by_key(|&m| keys[m]);
        if order.iter().enumerate().all(|(i, &m)| i == m) {
            return self.clone();
        }
        permuted(self, &order)
    }
}

/// A hash of everything about master `m`, with its number left out.
fn column(state: &State, m: MasterId) -> u64 {
    let mut h = Fx(0);
    state.masters[m].hash(&mut h);
    for c in &state.clients {
        c.conns[m].hash(&mut h);
        c.subs[m].hash(&mut h);
        if let Op::Trying(a) = &c.op {
            a.answers[m].hash(&mut h);
        }
        for g in c.heard.iter().filter(|g| g.master == m) {
            (g.value, g.fence, g.sender).hash(&mut h);
        }
        for (_, v) in c.given_back.iter().filter(|(gm, _)| *gm == m) {
            v.hash(&mut h);
        }
        0xffu8.hash(&mut h);
    }
    for msg in state.messages.iter().filter(|msg| msg.master == m) {
        (msg.client, msg.value, msg.fence, msg.sender).hash(&mut h);
    }
    for o in state.orphans.iter().filter(|o| o.master == m) {
        (o.client, o.process, o.request).hash(&mut h);
    }
    h.finish()
}

/// `state` with master `order[i]` as master `i`.
fn permuted(state: &State, order: &[MasterId]) -> State {
    let mut new_index = vec![0; order.len()];
    for (i, &m) in order.iter().enumerate() {
        new_index[m] = i;
    }
    let mut s = state.clone();
    s.masters = order.iter().map(|&m| state.masters[m].clone()).collect();
    for (c, old) in s.clients.iter_mut().zip(&state.clients) {
        c.conns = order.iter().map(|&m| old.conns[m].clone()).collect();
        c.subs = order.iter().map(|&m| old.subs[m]).collect();
        if let (Op::Trying(a), Op::Trying(o)) = (&mut c.op, &old.op) {
            a.answers = order.iter().map(|&m| o.answers[m]).collect();
        }
        for g in &mut c.heard {
            g.master = new_index[g.master];
        }
        c.heard.sort();
        for (gm, _) in &mut c.given_back {
            *gm = new_index[*gm];
        }
        c.given_back.sort();
    }
    for msg in &mut s.messages {
        msg.master = new_index[msg.master];
    }
    s.messages.sort();
    for o in &mut s.orphans {
        o.master = new_index[o.master];
    }
    s
}

/// A small, fast hasher (the multiply-rotate of rustc's `FxHasher`): the order it gives only
/// needs to be the same for equal columns.
struct Fx(u64);

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn write_u16(&mut self, n: u16) {
        self.write_u64(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
