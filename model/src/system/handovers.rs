//! How a waiter hears of hand-overs and counts them (`src/lock/handover.rs`,
//! `src/waiters/`).

use super::{Delays, Protocol, State};
use crate::client::{Grant, Op};
use crate::ids::{ClientId, MasterId};
use crate::net::{Message, Request};
use crate::scripts::give_back::GiveBackArgs;
use crate::scripts::release::ReleaseArgs;

impl Protocol {
    /// A waiter counts the hand-overs it heard (`src/lock/handover.rs`): one value and fencing
    /// token on a quorum of masters whose grants count, from one of its attempts whose window
    /// is still open; otherwise it gives them back, keeping its place.
    pub(super) fn take_handover(&self, state: &mut State, c: ClientId, delays: Delays) {
        let client = &state.clients[usize::from(c)];
        let quorum = self.masters() / 2 + 1;
        let waiter = client.waiter(c);
        let counted: Vec<Grant> = client
            .heard
            .iter()
            .filter(|g| g.value.token().of(waiter) && client.grant_counts(g, &self.setup.rules))
            .copied()
            .collect();
        let held = counted.iter().find(|g| {
            let mut on: Vec<MasterId> = counted
                .iter()
                .filter(|o| o.value == g.value && o.fence == g.fence)
                .map(|o| o.master)
                .collect();
            on.dedup();
            on.len() >= quorum && g.value.token().window >= state.ended
        });
        if let Some(g) = held.copied() {
            self.check_fence(state, Some(g.fence), state.highest_fence);
            self.hold(state, c, g.value, Some(g.fence), delays);
            return;
        }
        let client = &mut state.clients[usize::from(c)];
        let priority = client.priority;
        let heard: Vec<Grant> = client.heard.drain(..).collect();
        for g in &heard {
            client.given_back.push((g.master, g.value));
        }
        client.given_back.sort();
        client.given_back.dedup();
        for g in heard {
            let request = Request::GiveBack(GiveBackArgs {
                value: g.value,
                priority,
                terms: None,
            });
            self.send(state, c, g.master, request, delays);
        }
    }

    /// A published message reaches its client: a grant for its waiter is booked; one for a
    /// waiter that is gone is given back, passing the turn on.
    pub(super) fn hear(&self, state: &mut State, i: usize, delays: Delays) {
        let Message {
            client: c,
            master,
            value,
            fence,
            sender,
        } = state.messages.remove(i);
        let client = &mut state.clients[usize::from(c)];
        let waiter = client.waiter(c);
        match &client.op {
            Op::Trying(_) | Op::Waiting if value.token().of(waiter) => {
                if !client.given_back.contains(&(master, value)) {
                    client.heard.push(Grant {
                        master,
                        value,
                        fence,
                        sender,
                    });
                }
            }
            Op::Holding(h) if h.value == value => {}
            _ => {
                let release = Request::Release(ReleaseArgs {
                    value,
                    fence,
                    holder: false,
                    wake: true,
                });
                self.send(state, c, master, release, delays);
            }
        }
    }
}
