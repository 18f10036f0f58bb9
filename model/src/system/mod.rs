//! Everything together, as a stateright model: the state of masters, clients and network, the
//! actions each can take, and the properties every reachable state must have.

mod clients;
mod handovers;
mod marking;
mod masters;
mod symmetry;
mod windows;

use stateright::{Model, Property};

use crate::client::{Client, Op};
use crate::ids::{ClientId, Fence, MasterId, Window};
use crate::master::{Keys, Master, Restart};
use crate::net::{Message, Orphan};
use crate::setup::{Faults, Kind, Setup};

/// The whole system at one moment.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    /// The masters.
    pub masters: Vec<Master>,
    /// The clients.
    pub clients: Vec<Client>,
    /// Pub/sub messages in flight, sorted.
    pub messages: Vec<Message>,
    /// Calls of broken connections the masters may still run.
    pub orphans: Vec<Orphan>,
    /// Every validity window before this one has ended.
    pub ended: Window,
    /// Counts attempts: each attempt's window, and its fencing proposal, comes from it, above
    /// every earlier attempt's.
    pub clock: u8,
    /// Faults still allowed.
    pub faults: Faults,
    /// The highest fencing token an exclusive holder has held so far.
    pub highest_fence: Fence,
    /// An exclusive holder came to hold with a fencing token not above an earlier one's.
    pub fence_went_back: bool,
}

/// Which masters' calls of one client step are left in the network, to run later (if at all)
/// in any order with other events; the others run at once. Every delay uses up one of the
/// budget's ([`Faults::delays`]): the model is delay-bounded.
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq)]
pub struct Delays(pub u8);

impl Delays {
    /// Whether the call to master `m` is left in the network.
    pub fn has(self, m: MasterId) -> bool {
        m < 8 && self.0 & (1 << m) != 0
    }
}

/// One step.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// The client starts its next session's acquire.
    Begin(ClientId, Delays),
    /// The master runs the oldest call on the client's connection to it.
    Run(ClientId, MasterId),
    /// The master runs a call of a broken connection.
    RunOrphan(usize),
    /// The attempt counts the answers it has (the others are past their deadline).
    Decide(ClientId, Delays),
    /// A waiter in line makes its next attempt.
    Poll(ClientId, Delays),
    /// A waiter counts the hand-overs it heard.
    TakeHandover(ClientId, Delays),
    /// A published message reaches its client.
    Hear(usize, Delays),
    /// The holder releases, whether its lock is still valid or not.
    Release(ClientId, Delays),
    /// The client reads every master's marker and marks those that lost their data.
    Mark(ClientId, Delays),
    /// The oldest validity window still open ends.
    EndWindow,
    /// A master's mutex key expires (its window has ended).
    Expire(MasterId),
    /// A master's holder of a read-write lock or a semaphore expires.
    ExpireHold(MasterId, usize),
    /// A place of a waiter that has left lapses.
    Lapse(MasterId, usize),
    // Faults.
    /// A plain master writes a snapshot.
    Snapshot(MasterId),
    /// A master crashes and comes back as it is set up to.
    Crash(MasterId, Restart),
    /// A client's connection breaks with calls on it.
    Break(ClientId, MasterId),
    /// A published message is delivered twice.
    Duplicate(usize),
}

/// The properties every reachable state must have (the others are `sometimes`: reachable).
pub const ALWAYS: [&str; 2] = ["mutual exclusion", "fencing tokens grow"];

/// The model of one [`Setup`].
pub struct Protocol {
    /// What is checked.
    pub setup: Setup,
}

impl Protocol {
    /// The model of `setup`.
    pub fn new(setup: Setup) -> Self {
        Protocol { setup }
    }

    fn masters(&self) -> usize {
        self.setup.masters()
    }

    /// The kind of lock the client's current session takes.
    fn kind(&self, state: &State, c: ClientId) -> Kind {
        let client = &state.clients[usize::from(c)];
        self.setup.programs[usize::from(c)]
            .get(usize::from(client.session))
            .map_or(Kind::Mutex, |s| s.kind)
    }

    /// Drops what ended windows make moot, and puts multisets in order, so that equal states
    /// compare equal.
    fn normalize(state: &mut State) {
        windows::end_unreferenced(state);
        let ended = state.ended;
        for m in &mut state.masters {
            m.keys.expire_before(ended);
            if let Some(s) = &mut m.snapshot {
                s.expire_before(ended);
            }
        }
        let masters = &state.masters;
        state
            .orphans
            .retain(|o| masters[o.master].process == o.process);
        state.messages.sort();
        for c in &mut state.clients {
            c.heard.sort();
            c.heard.dedup();
        }
    }

    /// The clients that hold a lock they count valid, with their session's kind.
    fn valid_holders(&self, state: &State) -> Vec<Kind> {
        (0..state.clients.len())
            .filter_map(|c| {
                let client = &state.clients[c];
                let Op::Holding(h) = &client.op else {
                    return None;
                };
                let open = h.value.token().window >= state.ended;
                let id = ClientId::try_from(c).ok()?;
                open.then(|| self.kind(state, id))
            })
            .collect()
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = self.masters();
        vec![State {
            masters: (0..n)
                .map(|m| Master::new(Keys::marked(0), self.setup.durable[m]))
                .collect(),
            clients: (0..self.setup.programs.len())
                .map(|_| Client::new(n))
                .collect(),
            messages: Vec::new(),
            orphans: Vec::new(),
            // Attempts' windows are numbered from 1.
            ended: Window(1),
            clock: 0,
            faults: self.setup.faults,
            highest_fence: 0,
            fence_went_back: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        self.client_actions(state, actions);
        self.master_actions(state, actions);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Begin(c, d) => self.begin(&mut state, c, d),
            Action::Run(c, m) => self.run(&mut state, c, m),
            Action::RunOrphan(i) => self.run_orphan(&mut state, i),
            Action::Decide(c, d) => self.decide(&mut state, c, d),
            Action::Poll(c, d) => self.poll(&mut state, c, d),
            Action::TakeHandover(c, d) => self.take_handover(&mut state, c, d),
            Action::Hear(i, d) => self.hear(&mut state, i, d),
            Action::Release(c, d) => self.release(&mut state, c, d),
            Action::Mark(c, d) => self.mark(&mut state, c, d),
            Action::EndWindow => state.ended.0 += 1,
            Action::Expire(m) => state.masters[m].keys.lock = None,
            Action::ExpireHold(m, i) => {
                state.masters[m].keys.holders.remove(i);
            }
            Action::Lapse(m, i) => {
                state.masters[m].keys.queue.remove(i);
            }
            Action::Snapshot(m) => {
                state.faults.snapshots -= 1;
                let master = &mut state.masters[m];
                master.snapshot = Some(master.keys.clone());
            }
            Action::Crash(m, how) => {
                state.faults.crashes -= 1;
                state.masters[m].restart(how);
                // Subscriptions are made again at once: a message published while one is down
                // is one never heard, which the model has anyway.
                let process = state.masters[m].process;
                for c in &mut state.clients {
                    if c.subs[m].is_some() {
                        c.subs[m] = Some(process);
                    }
                }
            }
            Action::Break(c, m) => self.break_connection(&mut state, c, m),
            Action::Duplicate(i) => {
                state.faults.duplicates -= 1;
                let copy = state.messages[i];
                state.messages.push(copy);
            }
        }
        Self::normalize(&mut state);
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("mutual exclusion", |model: &Protocol, state: &State| {
                let holders = model.valid_holders(state);
                let exclusive = holders.iter().filter(|k| k.exclusive()).count();
                let permits = holders
                    .iter()
                    .filter(|k| matches!(k, Kind::Permit(_)))
                    .count();
                let allowed = holders
                    .iter()
                    .find_map(|k| match k {
                        Kind::Permit(p) => Some(usize::from(*p)),
                        _ => None,
                    })
                    .unwrap_or(usize::MAX);
                (exclusive == 0 || holders.len() == 1) && permits <= allowed
            }),
            Property::always("fencing tokens grow", |_: &Protocol, state: &State| {
                !state.fence_went_back
            }),
            Property::sometimes("a lock is held", |model: &Protocol, state: &State| {
                !model.valid_holders(state).is_empty()
            }),
            Property::sometimes(
                "a lock is handed over and held",
                |_: &Protocol, state: &State| {
                    state.clients.iter().any(|c| {
                    matches!(c.op, Op::Holding(h) if matches!(h.value, crate::ids::Value::Handover(_)))
                })
                },
            ),
            Property::sometimes("a master is quarantined", |_: &Protocol, state: &State| {
                state.masters.iter().any(|m| m.keys.quarantine.is_some())
            }),
        ]
    }
}
