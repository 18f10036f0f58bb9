//! What masters do: run the calls that reach them, publish hand-overs, let keys expire, and
//! the faults (snapshots, crashes, broken connections, duplicated messages).

use super::{Action, Protocol, State};
use crate::client::{Op, Reading};
use crate::ids::{ClientId, MasterId};
use crate::master::Restart;
use crate::net::{Message, Orphan, Request};
use crate::scripts::{Here, Publish, acquire, give_back, holders, mark, release};

impl Protocol {
    pub(super) fn master_actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, client) in state.clients.iter().enumerate() {
            let Ok(c) = ClientId::try_from(i) else {
                continue;
            };
            for (m, conn) in client.conns.iter().enumerate() {
                let Some(conn) = conn else { continue };
                if conn.process == state.masters[m].process && !conn.pending.is_empty() {
                    actions.push(Action::Run(c, m));
                    if state.faults.breaks > 0 {
                        actions.push(Action::Break(c, m));
                    }
                }
            }
        }
        // A broken connection's calls reach the master in the order they were sent, if at all.
        for (i, o) in state.orphans.iter().enumerate() {
            let earlier = &state.orphans[..i];
            if !earlier
                .iter()
                .any(|e| e.client == o.client && e.master == o.master)
            {
                actions.push(Action::RunOrphan(i));
            }
        }
        if state.ended.0 <= state.clock {
            actions.push(Action::EndWindow);
        }
        for (m, master) in state.masters.iter().enumerate() {
            let keys = &master.keys;
            if keys.lock.is_some_and(|v| v.token().window < state.ended) {
                actions.push(Action::Expire(m));
            }
            for (i, h) in keys.holders.iter().enumerate() {
                if h.token.window < state.ended {
                    actions.push(Action::ExpireHold(m, i));
                }
            }
            for (i, place) in keys.queue.iter().enumerate() {
                let waiter = &state.clients[usize::from(place.waiter.client)];
                let gone = waiter.session != place.waiter.session
                    || !matches!(waiter.op, Op::Trying(_) | Op::Waiting);
                if gone {
                    actions.push(Action::Lapse(m, i));
                }
            }
            let durable = self.setup.durable[m];
            if state.faults.snapshots > 0 && !durable {
                actions.push(Action::Snapshot(m));
            }
            if state.faults.crashes > 0 {
                if durable {
                    actions.push(Action::Crash(m, Restart::Durable));
                } else {
                    actions.push(Action::Crash(m, Restart::Empty));
                    if master.snapshot.is_some() {
                        actions.push(Action::Crash(m, Restart::FromSnapshot));
                    }
                }
            }
        }
        if state.faults.duplicates > 0 {
            for i in 0..state.messages.len() {
                actions.push(Action::Duplicate(i));
            }
        }
    }

    /// Master `m` runs the oldest call on client `c`'s connection: the reading goes in front of
    /// the first call on a connection, and the answer goes to the attempt it is for.
    pub(super) fn run(&self, state: &mut State, c: ClientId, m: MasterId) {
        let process = state.masters[m].process;
        let durable = self.setup.durable[m];
        let Some(conn) = state.clients[usize::from(c)].conns[m].as_mut() else {
            return;
        };
        if conn.pending.is_empty() {
            return;
        }
        let request = conn.pending.remove(0);
        if conn.reading.is_none() {
            let restarted = state.masters[m].keys.restarted(process, durable);
            conn.reading = Some(Reading { restarted });
        }
        let counts = conn.reading.is_some_and(|r| !r.restarted);
        let answer = self.execute(state, m, request);
        let client = &mut state.clients[usize::from(c)];
        match (request, answer) {
            (Request::Acquire { args: a, round }, Some(reply)) => {
                if let Op::Trying(attempt) = &mut client.op
                    && attempt.token == a.token
                    && attempt.round == round
                {
                    attempt.answers[m] = Some((reply, counts, process));
                }
            }
            (Request::HoldAcquire { args: a, round }, Some(reply)) => {
                if let Op::Trying(attempt) = &mut client.op
                    && attempt.token == a.token
                    && attempt.round == round
                {
                    attempt.answers[m] = Some((reply, counts, process));
                }
            }
            (Request::Mark(_), _) => {
                // The marking's answer books the process it was made for.
                let restarted = state.masters[m].keys.restarted(process, durable);
                if let Some(conn) = client.conns[m].as_mut() {
                    conn.reading = Some(Reading { restarted });
                }
            }
            _ => {}
        }
    }

    /// A call of a broken connection reaches its master after all; its answer is lost.
    pub(super) fn run_orphan(&self, state: &mut State, i: usize) {
        let orphan = state.orphans.remove(i);
        self.execute(state, orphan.master, orphan.request);
    }

    /// Runs `request`'s script on master `m`; an acquire's answer.
    fn execute(
        &self,
        state: &mut State,
        m: MasterId,
        request: Request,
    ) -> Option<acquire::AcquireReply> {
        let rules = self.setup.rules;
        let master = &mut state.masters[m];
        let here = Here {
            process: master.process,
            durable: self.setup.durable[m],
            rules: &rules,
        };
        let keys = &mut master.keys;
        match request {
            Request::Acquire { args, .. } => Some(acquire::acquire(keys, here, &args)),
            Request::HoldAcquire { args, .. } => Some(holders::hold_acquire(keys, here, &args)),
            Request::Release(args) => {
                let (_, publish) = release::release(keys, here, &args);
                if let Some(p) = publish {
                    Self::publish(state, m, p);
                }
                None
            }
            Request::HoldersRelease(token) => {
                holders::holders_release(keys, token);
                None
            }
            Request::GiveBack(args) => {
                give_back::give_back(keys, here, &args);
                None
            }
            Request::Mark(args) => {
                mark::mark(keys, &args);
                None
            }
        }
    }

    /// A hand-over published on the waiter's client's channel reaches the client's
    /// subscription to this master's process, if it has one.
    fn publish(state: &mut State, m: MasterId, p: Publish) {
        let process = state.masters[m].process;
        let client = p.to.client;
        if state.clients[usize::from(client)].subs[m] == Some(process) {
            state.messages.push(Message {
                client,
                master: m,
                value: p.value,
                fence: p.fence,
                sender: process,
            });
        }
    }

    /// The client's connection to `m` breaks with calls on it: the master may still run them
    /// (they may be in its socket), in any order with the next connection's.
    pub(super) fn break_connection(&self, state: &mut State, c: ClientId, m: MasterId) {
        state.faults.breaks -= 1;
        let Some(conn) = state.clients[usize::from(c)].conns[m].take() else {
            return;
        };
        for request in conn.pending {
            state.orphans.push(Orphan {
                client: c,
                master: m,
                process: conn.process,
                request,
            });
        }
    }
}
