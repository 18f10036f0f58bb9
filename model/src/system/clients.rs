//! What clients do: attempts and their votes, waiting in line, hand-overs, releases, and
//! marking the deployment (`src/lock/`, `src/deployment.rs`).

use super::{Action, Delays, Protocol, State};
use crate::client::{Attempt, Conn, Grant, Held, Op};
use crate::ids::{ClientId, Fence, MasterId, Token, Value, Window};
use crate::master::Terms;
use crate::net::Request;
use crate::scripts::Refusal;
use crate::scripts::acquire::{AcquireArgs, AcquireReply};
use crate::scripts::give_back::GiveBackArgs;
use crate::scripts::holders::HoldArgs;
use crate::scripts::release::ReleaseArgs;
use crate::setup::{Kind, Session};

impl Protocol {
    pub(super) fn client_actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, client) in state.clients.iter().enumerate() {
            let Ok(c) = ClientId::try_from(i) else {
                continue;
            };
            let mut step = |make: fn(ClientId, Delays) -> Action| {
                for delays in self.delay_choices(state) {
                    actions.push(make(c, delays));
                }
            };
            match &client.op {
                Op::Idle => {
                    if usize::from(client.session) < self.setup.programs[i].len() {
                        step(Action::Begin);
                    }
                }
                Op::Trying(_) => step(Action::Decide),
                Op::Waiting => {
                    if client.attempts < self.setup.attempts {
                        step(Action::Poll);
                    }
                    if !client.heard.is_empty() {
                        step(Action::TakeHandover);
                    }
                }
                Op::Holding(_) => {
                    if self.session(state, c).is_some_and(|s| s.releases) {
                        step(Action::Release);
                    }
                }
            }
            if client.marking_due {
                step(Action::Mark);
            }
        }
        for i in 0..state.messages.len() {
            if i == 0 || state.messages[i] != state.messages[i - 1] {
                for delays in self.delay_choices(state) {
                    actions.push(Action::Hear(i, delays));
                }
            }
        }
    }

    /// Which of a step's calls may be left in the network: any set of masters, as long as the
    /// budget of delays lasts.
    fn delay_choices(&self, state: &State) -> impl Iterator<Item = Delays> {
        let budget = state.faults.delays;
        let masters = u8::try_from(self.masters()).unwrap_or(8).min(8);
        (0..(1u16 << masters))
            .filter_map(|mask| u8::try_from(mask).ok())
            .filter(move |mask| mask.count_ones() <= u32::from(budget))
            .map(Delays)
    }

    fn session(&self, state: &State, c: ClientId) -> Option<Session> {
        let client = &state.clients[usize::from(c)];
        self.setup.programs[usize::from(c)]
            .get(usize::from(client.session))
            .copied()
    }

    /// Sends a call on the client's connection to master `m`, connecting anew when the
    /// connection is gone or broken (its master restarted): calls left on a broken one are
    /// lost. The master runs it at once, unless `delays` leaves it in the network (which uses
    /// up one delay) or an earlier call on the connection is still there: it then runs later,
    /// in order, if at all.
    pub(super) fn send(
        &self,
        state: &mut State,
        c: ClientId,
        m: MasterId,
        request: Request,
        delays: Delays,
    ) {
        let process = state.masters[m].process;
        let conn = &mut state.clients[usize::from(c)].conns[m];
        let behind = match conn {
            Some(k) if k.process == process => {
                k.pending.push(request);
                k.pending.len() > 1
            }
            _ => {
                *conn = Some(Conn {
                    process,
                    reading: None,
                    pending: vec![request],
                });
                false
            }
        };
        if behind {
            return;
        }
        if delays.has(m) && state.faults.delays > 0 {
            state.faults.delays -= 1;
            return;
        }
        self.run(state, c, m);
    }

    pub(super) fn begin(&self, state: &mut State, c: ClientId, delays: Delays) {
        let client = &mut state.clients[usize::from(c)];
        client.attempts = 0;
        client.priority = state.clock;
        client.heard.clear();
        client.given_back.clear();
        self.attempt(state, c, delays);
    }

    pub(super) fn poll(&self, state: &mut State, c: ClientId, delays: Delays) {
        self.attempt(state, c, delays);
    }

    /// A new attempt, with a fresh token, its own window and a proposal from the clock.
    fn attempt(&self, state: &mut State, c: ClientId, delays: Delays) {
        state.clock += 1;
        let client = &mut state.clients[usize::from(c)];
        let token = Token {
            client: c,
            session: client.session,
            attempt: client.attempts,
            window: Window(state.clock),
        };
        client.attempts += 1;
        let proposal = Fence::from(state.clock) * 2;
        self.send_attempt(state, c, token, proposal, 0, delays);
    }

    /// Sends attempt `token`'s round `round` with `proposal` to every master.
    fn send_attempt(
        &self,
        state: &mut State,
        c: ClientId,
        token: Token,
        proposal: Fence,
        round: u8,
        delays: Delays,
    ) {
        let Some(session) = self.session(state, c) else {
            return;
        };
        let client = &mut state.clients[usize::from(c)];
        client.op = Op::Trying(Attempt {
            token,
            proposal,
            round,
            floor: state.highest_fence,
            answers: vec![None; self.masters()],
        });
        let priority = session.waits.then_some(client.priority);
        for m in 0..self.masters() {
            let request = match session.kind.share() {
                None => Request::Acquire {
                    args: AcquireArgs {
                        token,
                        proposal,
                        priority,
                        fair: session.fair,
                    },
                    round,
                },
                Some(share) => Request::HoldAcquire {
                    args: HoldArgs {
                        token,
                        proposal,
                        share,
                    },
                    round,
                },
            };
            self.send(state, c, m, request, delays);
        }
    }

    /// The attempt counts its votes (`src/lock/attempt.rs`).
    pub(super) fn decide(&self, state: &mut State, c: ClientId, delays: Delays) {
        let Some(session) = self.session(state, c) else {
            return;
        };
        let Op::Trying(attempt) = state.clients[usize::from(c)].op.clone() else {
            return;
        };
        let quorum = session.kind.quorum(self.masters());
        let granted = |a: &Option<(AcquireReply, bool, _)>| {
            matches!(
                a,
                Some((AcquireReply::Granted(_) | AcquireReply::Kept(_), true, _))
            )
        };
        let votes = attempt.answers.iter().filter(|a| granted(a)).count();
        if votes >= quorum && attempt.token.window >= state.ended {
            // A reader shares the last writer's fencing token.
            let fence = (session.kind != Kind::Reader).then_some(attempt.proposal);
            if session.kind.exclusive() {
                self.check_fence(state, fence, state.highest_fence);
            } else {
                // Permits are held side by side: each one's token is above those held before
                // its attempt started, not above those of permits taken meanwhile.
                self.check_fence(state, fence, attempt.floor);
            }
            self.hold(state, c, Value::Attempt(attempt.token), fence, delays);
            return;
        }
        let refused_by = |f: fn(&AcquireReply) -> bool| {
            attempt
                .answers
                .iter()
                .any(|a| a.as_ref().is_some_and(|(r, _, _)| f(r)))
        };
        let unmarked = attempt.answers.iter().any(|a| {
            matches!(
                a,
                Some((AcquireReply::Refused(Refusal::Unmarked), _, _))
                    | Some((AcquireReply::Granted(_) | AcquireReply::Kept(_), false, _))
            )
        });
        let contended = refused_by(|r| {
            matches!(
                r,
                AcquireReply::Held(_) | AcquireReply::Reserved | AcquireReply::HandedOver(..)
            )
        });
        let stale = attempt
            .answers
            .iter()
            .filter_map(|a| match a {
                Some((AcquireReply::Stale(counter), _, _)) => Some(*counter),
                _ => None,
            })
            .max();
        if let Some(counter) = stale
            && !unmarked
            && !contended
            && attempt.round == 0
        {
            // A stale proposal is raised above the counters reported and sent again at once.
            let proposal = counter + 1;
            self.send_attempt(state, c, attempt.token, proposal, 1, delays);
            return;
        }
        self.fail(state, c, session, &attempt, unmarked, delays);
    }

    /// A failed attempt: grants handed over are booked as heard, and every master that may
    /// have granted is given back its grant (keeping the waiter's place, with the attempt's
    /// terms, for a fair waiter).
    fn fail(
        &self,
        state: &mut State,
        c: ClientId,
        session: Session,
        attempt: &Attempt,
        unmarked: bool,
        delays: Delays,
    ) {
        let client = &mut state.clients[usize::from(c)];
        client.marking_due |= unmarked;
        for (m, answer) in attempt.answers.iter().enumerate() {
            if let Some((AcquireReply::HandedOver(value, fence), _, process)) = answer {
                client.heard.push(Grant {
                    master: m,
                    value: *value,
                    fence: *fence,
                    sender: *process,
                });
            }
        }
        let priority = client.priority;
        client.op = if session.waits { Op::Waiting } else { Op::Idle };
        if !session.waits {
            client.session += 1;
        }
        for (m, answer) in attempt.answers.iter().enumerate() {
            let refused = matches!(
                answer,
                Some((
                    AcquireReply::Held(_) | AcquireReply::Reserved | AcquireReply::HandedOver(..),
                    _,
                    _
                ))
            );
            if refused {
                continue;
            }
            let request = match session.kind.share() {
                Some(_) => Request::HoldersRelease(attempt.token),
                None if session.waits && session.fair => Request::GiveBack(GiveBackArgs {
                    value: Value::Attempt(attempt.token),
                    priority,
                    terms: Some(Terms {
                        token: attempt.token,
                        proposal: attempt.proposal,
                    }),
                }),
                None => Request::Release(ReleaseArgs {
                    value: Value::Attempt(attempt.token),
                    fence: 0,
                    holder: false,
                    wake: session.waits,
                }),
            };
            self.send(state, c, m, request, delays);
        }
    }

    /// Books a fencing token held, which must be above `floor`.
    pub(super) fn check_fence(&self, state: &mut State, fence: Option<Fence>, floor: Fence) {
        if let Some(fence) = fence {
            if fence <= floor {
                state.fence_went_back = true;
            }
            state.highest_fence = state.highest_fence.max(fence);
        }
    }

    /// The client holds `value` (with `fence`, but for a reader); the grants it heard and does
    /// not hold with are given back.
    pub(super) fn hold(
        &self,
        state: &mut State,
        c: ClientId,
        value: Value,
        fence: Option<Fence>,
        delays: Delays,
    ) {
        let client = &mut state.clients[usize::from(c)];
        client.op = Op::Holding(Held {
            value,
            fence: fence.unwrap_or(0),
        });
        let others: Vec<Grant> = client
            .heard
            .drain(..)
            .filter(|g| g.value != value)
            .collect();
        for g in others {
            self.send(
                state,
                c,
                g.master,
                release_silently(g.value, g.fence),
                delays,
            );
        }
    }

    /// The holder releases on every master.
    pub(super) fn release(&self, state: &mut State, c: ClientId, delays: Delays) {
        let Some(session) = self.session(state, c) else {
            return;
        };
        let client = &mut state.clients[usize::from(c)];
        let Op::Holding(held) = client.op else {
            return;
        };
        client.op = Op::Idle;
        client.session += 1;
        for m in 0..self.masters() {
            let request = match session.kind.share() {
                Some(_) => Request::HoldersRelease(held.value.token()),
                None => Request::Release(ReleaseArgs {
                    value: held.value,
                    fence: held.fence,
                    holder: true,
                    wake: true,
                }),
            };
            self.send(state, c, m, request, delays);
        }
    }
}

/// A grant given back without passing the turn on.
fn release_silently(value: Value, fence: Fence) -> Request {
    Request::Release(ReleaseArgs {
        value,
        fence,
        holder: false,
        wake: false,
    })
}
