//! The small values the model is made of: masters' processes, clients, tokens, validity
//! windows and fencing tokens.

/// A client, by number.
pub type ClientId = u8;

/// A master, by index.
pub type MasterId = usize;

/// A master's process: a restart starts a new one (Redis's `run_id`).
pub type Process = u8;

/// A fencing token.
pub type Fence = u16;

/// An acquire attempt's token: which client, which of its sessions (one acquire each) and
/// which attempt of that session, and when it started. A session's attempts share its place in
/// line (its waiter id is the client and the session).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Token {
    /// The client that made the attempt.
    pub client: ClientId,
    /// Which of the client's sessions.
    pub session: u8,
    /// Which attempt of the session.
    pub attempt: u8,
    /// When it started: its validity window.
    pub window: Window,
}

impl Token {
    /// Whether this token is of `waiter`'s session.
    pub fn of(self, waiter: Waiter) -> bool {
        self.client == waiter.client && self.session == waiter.session
    }

    /// The waiter whose attempt this is.
    pub fn waiter(self) -> Waiter {
        Waiter {
            client: self.client,
            session: self.session,
        }
    }
}

/// A waiter's id in a lock's queue: one client's one acquire.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Waiter {
    /// The client that waits.
    pub client: ClientId,
    /// Which of its sessions.
    pub session: u8,
}

/// A validity window, numbered in the order attempts start. Time is not modelled; what clocks
/// guarantee is: a holder counts its lock valid only while the window of the attempt it came
/// from is open, a key granted for that attempt expires only once the window has ended (the
/// TTL less the drift allowance, counted from before the grant), and, every lock having the
/// same TTL, windows end in the order their attempts started. When they end is the model
/// checker's choice.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Window(pub u8);

/// What a mutex's key holds on a master: an attempt's token, or a hand-over's
/// (`<waiter id>/<attempt token>`, which no cleanup of the attempt can delete).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Value {
    /// An attempt's own token.
    Attempt(Token),
    /// A hand-over's, on the terms of that attempt.
    Handover(Token),
}

impl Value {
    /// The attempt the value comes from.
    pub fn token(self) -> Token {
        match self {
            Value::Attempt(t) | Value::Handover(t) => t,
        }
    }
}
