//! What the masters tell waiting callers: that a release handed them the lock, or that it is
//! their turn to try.
//!
//! Waiters queue on the masters themselves (see `lua/acquire.lua`): a refused attempt of a
//! caller that waits leaves its waiter id and the attempt's terms in the name's queue, in an
//! order every master agrees on, and only the first waiter may take a free lock. A waiter id
//! is `<client id>.<n>`. A release takes the lock for the first waiter on those terms where it
//! can (`lua/release.lua`) and publishes `<waiter id> <token> <fence> <lock key>` on that
//! waiter's client's channel, `{prefix}wake:<client id>`; where it cannot, it publishes just
//! the waiter id, to wake it. So one release reaches one waiter in all the clients (waking all
//! would send every waiter at the nodes for a lock only one may take), and no other client
//! even hears of it. Each client keeps one subscription per master, shared by all of its
//! waiters and started on the first wait; a waiting task reads them itself (`woken.rs`), and
//! the client's keeper reads them when no waiter does (`subscription.rs`).
//!
//! A waiter collects the grants and takes the lock once a quorum of masters has handed it
//! over (`handed_over` in `lock/acquire.rs`). A wake-up alone makes it retry at once, and the
//! same release heard from several masters may wake it more than once, on purpose: the first
//! master to announce it may be well ahead of the others, and an attempt made then finds the
//! lock still held on a quorum; the next announcement says to try again. Every waiter also
//! keeps its jittered retry delay, which carries it when a message is lost or a master's
//! subscription is down; an attempt then learns of a handover the message did not bring.
//! A grant for a waiter that is gone is released at once, passing the turn on.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::Waker;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::node::Node;

mod kept;
mod subscription;
mod woken;
pub(crate) use kept::{Kept, KeptPlace, KeptPlaces, LOOP_WINDOW};
use subscription::{Delivered, Subscriptions, keep};
pub(crate) use woken::Woken;

/// Handoff tokens of locks this client took lately, remembered so that a grant heard after its
/// waiter finished (from a master slower than the quorum) is known for this client's own lock,
/// and given back once that lock has been released.
const KEPT_TOKENS: usize = 256;

/// A lock that a release handed straight to a waiter on one master (see `lua/release.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) node: usize,
    pub(crate) token: String,
    pub(crate) fence: u64,
    /// The master's process (`run_id`) that made the grant, as read on the connection that
    /// carried it (the subscription, or the command connection of an attempt that heard of
    /// it); `None` when not read. The grant counts only by a reading of that same process.
    pub(crate) sender: Option<Arc<str>>,
}

/// A handover token this client took a lock with.
#[derive(Debug)]
struct KeptToken {
    token: String,
    released: bool,
    /// Per master, once its answer to the release is in (or its deadline passed): whether the
    /// release deleted the lock there. Where it did, the handover there came first, and a
    /// grant heard from that master afterwards is only a late message.
    release_answers: Vec<(usize, bool)>,
    /// Grants heard after the release was sent, from masters whose answer is not in yet: given
    /// back unless that answer says the release deleted the lock.
    parked: Vec<Orphan>,
    /// The masters whose grant was heard after the waiter had taken the lock: the handover
    /// there took the waiter's place off the queue too.
    heard_late_on: Vec<usize>,
}

/// What a master said to one of this client's waiters.
#[derive(Debug, Default)]
struct Listener {
    /// Whether the waiter listens for the next message, and whether it came.
    listening: bool,
    woken: bool,
    /// Wakes the waiter's task, when it waits.
    waker: Option<Waker>,
    /// Grants heard and not yet taken by the waiter.
    grants: Vec<Grant>,
    /// `(node, token)` of the grants the waiter gave back: one is heard twice when an attempt
    /// learned of it (see [`State::add_grants`]) before its message came, and the message,
    /// however late, must not count again a lock the master no longer holds for the waiter.
    given_back: VecDeque<(usize, String)>,
}

impl Listener {
    /// Adds the grants that are not of a lock the waiter gave back.
    fn hear(&mut self, grants: impl IntoIterator<Item = Grant>) {
        let given_back = &self.given_back;
        self.grants.extend(grants.into_iter().filter(|g| {
            !given_back
                .iter()
                .any(|(n, t)| *n == g.node && *t == g.token)
        }));
    }
}

/// How many given-back grants a waiter remembers (see [`Listener::given_back`]): a give-back
/// comes only after a handover that fell short of a quorum for a whole per-node deadline, so
/// this many span far longer than any message is held up.
const GIVEN_BACK: usize = 1024;

/// A lock a master handed to a waiter of this client that is gone: nobody's lock, to be given
/// back at once (passing the turn on) rather than left until its TTL.
#[derive(Debug)]
pub(crate) struct Orphan {
    /// The lock's key on that master.
    pub(crate) lock_key: String,
    pub(crate) grant: Grant,
}

/// The waiters of one client, and its subscriptions.
#[derive(Debug)]
pub(crate) struct Waiters {
    /// What the subscriptions share with the waiters; the keeper holds it weakly.
    state: Arc<State>,
    /// The subscriptions, once the first waiter started them, and how many are up.
    subscriptions: OnceLock<(Arc<Subscriptions>, watch::Receiver<usize>)>,
    /// Places this client's releases kept in line for its next acquires.
    pub(crate) kept_places: KeptPlaces,
    /// Dropped with the client, which stops the keeper.
    _alive: watch::Sender<()>,
    alive: watch::Receiver<()>,
}

/// The waiters' listeners and the handover tokens this client took locks with.
#[derive(Debug)]
pub(crate) struct State {
    /// `{prefix}wake:`; a client's channel is this and its id.
    wake_prefix: String,
    /// Random, so that clients that never met do not share waiter ids.
    client_id: String,
    next_waiter: AtomicU64,
    /// By waiter id.
    listeners: Mutex<HashMap<String, Listener>>,
    /// The latest [`KEPT_TOKENS`] handover tokens this client took a lock with, and whether
    /// that lock has been released since; newest last, and looked up from the newest, which
    /// is the one a release or a late message is most often about.
    kept: Mutex<VecDeque<KeptToken>>,
    /// Where grants for waiters that are gone go, to be given back by the client.
    orphans: mpsc::UnboundedSender<Orphan>,
}

impl std::ops::Deref for Waiters {
    type Target = State;

    fn deref(&self) -> &State {
        &self.state
    }
}

impl Waiters {
    /// The waiters of a client whose keys start with `key_prefix`, and the receiving end of
    /// their orphaned grants, which the client gives back.
    pub(crate) fn new(key_prefix: &str) -> (Self, mpsc::UnboundedReceiver<Orphan>) {
        let (alive_tx, alive_rx) = watch::channel(());
        let (orphans, orphans_rx) = mpsc::unbounded_channel();
        let state = State {
            wake_prefix: format!("{key_prefix}wake:"),
            client_id: format!("{:016x}", rand::random::<u64>()),
            next_waiter: AtomicU64::new(0),
            listeners: Mutex::new(HashMap::new()),
            kept: Mutex::new(VecDeque::new()),
            orphans,
        };
        let waiters = Waiters {
            state: Arc::new(state),
            subscriptions: OnceLock::new(),
            kept_places: KeptPlaces::default(),
            _alive: alive_tx,
            alive: alive_rx,
        };
        (waiters, orphans_rx)
    }

    /// Starts the subscriptions (once) and waits until at least one is confirmed, for at most
    /// `patience`: a waiter should not miss a release that happens right after it starts, but
    /// if no master can be subscribed to, polling still works.
    pub(crate) async fn subscribe(&self, nodes: &[Node], patience: Duration) {
        let (_, ready) = self.subscriptions.get_or_init(|| {
            let subscriptions = Arc::new(Subscriptions::new(nodes.len()));
            let ready = subscriptions.ready();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(keep(
                    Arc::downgrade(&self.state),
                    subscriptions.clone(),
                    nodes.iter().map(Node::dialer).collect(),
                    format!("{}{}", self.wake_prefix, self.client_id),
                    self.alive.clone(),
                ));
            }
            (subscriptions, ready)
        });
        if *ready.borrow() > 0 {
            return;
        }
        let mut ready = ready.clone();
        let _ = tokio::time::timeout(patience, ready.wait_for(|n| *n > 0)).await;
    }

    /// How many masters' subscriptions are confirmed and reading.
    pub(crate) fn subscribed_count(&self) -> usize {
        self.subscriptions
            .get()
            .map_or(0, |(_, ready)| *ready.borrow())
    }

    /// The grants heard for `waiter` since it last took them, reading first what the
    /// subscriptions have brought (a waiter reads them itself only while it waits).
    pub(crate) fn take_grants(&self, waiter: &str) -> Vec<Grant> {
        self.read_now();
        self.state.take_grants(waiter)
    }

    /// The masters whose grant of the lock taken with handoff token `token` was heard only
    /// after the waiter had taken it, reading first what the subscriptions have brought.
    pub(crate) fn heard_late_on(&self, token: &str) -> Vec<usize> {
        self.read_now();
        self.state.heard_late_on(token)
    }

    /// Reads what the subscriptions have brought, without waiting, and delivers it.
    fn read_now(&self) {
        let Some((subscriptions, _)) = self.subscriptions.get() else {
            return;
        };
        let mut listening = subscriptions.listen();
        subscription::hear(
            &self.state,
            listening.iter_mut().map(|(node, l)| (*node, l)),
            &mut std::task::Context::from_waker(Waker::noop()),
        );
    }

    /// Listens for the next release that names `waiter`: the returned future is done when
    /// one does. Listen before each attempt, so that a release during the attempt is not
    /// missed; while it is awaited, the waiter's task reads the subscriptions itself.
    pub(crate) fn listen(&self, waiter: &str) -> Woken {
        {
            let mut listeners = self.listeners();
            let listener = listeners.entry(waiter.to_owned()).or_default();
            listener.listening = true;
            listener.woken = false;
        }
        Woken {
            state: self.state.clone(),
            waiter: waiter.to_owned(),
            subscriptions: self
                .subscriptions
                .get()
                .map(|(subscriptions, _)| subscriptions.clone()),
            listening: None,
        }
    }
}

impl State {
    /// What the scripts prepend to a waiter's client id to name the channel that wakes it.
    pub(crate) fn wake_prefix(&self) -> &str {
        &self.wake_prefix
    }

    /// An id for a new waiter of this client: `<client id>.<n>`.
    pub(crate) fn new_waiter(&self) -> Arc<str> {
        let n = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        format!("{}.{n}", self.client_id).into()
    }

    fn listeners(&self) -> std::sync::MutexGuard<'_, HashMap<String, Listener>> {
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a master named `waiter` since it listened; if not, `waker` wakes it when one
    /// does.
    fn woken(&self, waiter: &str, waker: &Waker) -> bool {
        let mut listeners = self.listeners();
        let Some(listener) = listeners.get_mut(waiter) else {
            return false;
        };
        if listener.woken {
            return true;
        }
        match &mut listener.waker {
            Some(old) => old.clone_from(waker),
            None => listener.waker = Some(waker.clone()),
        }
        false
    }

    /// The grants heard for `waiter` since it last took them.
    pub(crate) fn take_grants(&self, waiter: &str) -> Vec<Grant> {
        self.listeners()
            .get_mut(waiter)
            .map(|l| std::mem::take(&mut l.grants))
            .unwrap_or_default()
    }

    /// The waiter is done waiting (it has the lock, gave up, or was cancelled); the grants it
    /// did not take are returned, for the caller to give back, except those of a lock this
    /// client holds (heard from masters slower than the quorum).
    pub(crate) fn leave(&self, waiter: &str) -> Vec<Grant> {
        let grants = self
            .listeners()
            .remove(waiter)
            .map(|l| l.grants)
            .unwrap_or_default();
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        grants
            .into_iter()
            .filter(
                |g| match kept.iter_mut().rev().find(|k| k.token == g.token) {
                    Some(k) => {
                        k.heard_late_on.push(g.node);
                        k.released
                    }
                    None => true,
                },
            )
            .collect()
    }

    /// What to do with a grant heard for a waiter that is gone: the orphan to give back, or
    /// `None` when it is part of a lock this client took (held, or released after the
    /// handover on that master), or when that is known only once the release's answer from
    /// that master is in (the grant waits for it).
    fn late_grant(&self, grant: Grant, lock_key: String) -> Option<Orphan> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(k) = kept.iter_mut().rev().find(|k| k.token == grant.token) else {
            return Some(Orphan { lock_key, grant });
        };
        k.heard_late_on.push(grant.node);
        if !k.released {
            return None;
        }
        match k
            .release_answers
            .iter()
            .find(|(node, _)| *node == grant.node)
        {
            Some((_, true)) => None,
            Some((_, false)) => Some(Orphan { lock_key, grant }),
            None => {
                k.parked.push(Orphan { lock_key, grant });
                None
            }
        }
    }

    /// Books grants that `waiter`'s own attempt learned of, as if their messages had come.
    pub(crate) fn add_grants(&self, waiter: &str, grants: Vec<Grant>) {
        if grants.is_empty() {
            return;
        }
        if let Some(listener) = self.listeners().get_mut(waiter) {
            listener.hear(grants);
        }
    }

    /// `waiter` gave `grants` back: their messages, or an attempt's answers naming them, are
    /// no grant any more when they come after this.
    pub(crate) fn gave_back(&self, waiter: &str, grants: &[Grant]) {
        let mut listeners = self.listeners();
        let Some(listener) = listeners.get_mut(waiter) else {
            return;
        };
        for g in grants {
            if listener.given_back.len() == GIVEN_BACK {
                listener.given_back.pop_front();
            }
            listener.given_back.push_back((g.node, g.token.clone()));
        }
        // Heard again since the waiter took them, and not taken yet.
        listener.grants.retain(|g| {
            !grants
                .iter()
                .any(|b| b.node == g.node && b.token == g.token)
        });
    }

    /// Remembers a handoff token this client now holds a lock with.
    pub(crate) fn remember_taken(&self, token: &str) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() == KEPT_TOKENS {
            kept.pop_front();
        }
        kept.push_back(KeptToken {
            token: token.to_owned(),
            released: false,
            release_answers: Vec::new(),
            parked: Vec::new(),
            heard_late_on: Vec::new(),
        });
    }

    /// The lock with handoff token `token` is being released. A grant heard for it from now on
    /// is a late message, or came from a master whose handover ran after the release had
    /// passed it (a master slower than the quorum), and is then nobody's lock, to be given
    /// back. The release's answer from that master tells which (see
    /// [`State::release_answered`]).
    pub(crate) fn released(&self, token: &str) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(k) = kept.iter_mut().rev().find(|k| k.token == token) {
            k.released = true;
        }
    }

    /// The masters whose grant of the lock taken with handoff token `token` was heard only
    /// after the waiter had taken it.
    pub(crate) fn heard_late_on(&self, token: &str) -> Vec<usize> {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.iter()
            .rev()
            .find(|k| k.token == token)
            .map(|k| k.heard_late_on.clone())
            .unwrap_or_default()
    }

    /// Master `node` answered the release of the lock with handoff token `token` (`deleted`:
    /// it deleted the lock), or its deadline passed (`deleted` false). Grants from that master
    /// that were waiting for this are given back unless the release deleted the lock there.
    pub(crate) fn release_answered(&self, token: &str, node: usize, deleted: bool) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(k) = kept.iter_mut().rev().find(|k| k.token == token) else {
            return;
        };
        k.release_answers.push((node, deleted));
        let (from_node, others): (Vec<Orphan>, Vec<Orphan>) = std::mem::take(&mut k.parked)
            .into_iter()
            .partition(|o| o.grant.node == node);
        k.parked = others;
        drop(kept);
        if !deleted {
            for orphan in from_node {
                let _ = self.orphans.send(orphan);
            }
        }
    }

    /// A master said that `waiter` goes next (after a release, or the departure of the waiter
    /// before it), and maybe that it now holds the lock there: wake it if it is listening (one
    /// that is not is about to look anyway). A grant for a waiter that is gone is returned if
    /// it is nobody's lock (see [`State::late_grant`]), to be given back at once rather than
    /// left until its TTL.
    fn deliver(&self, waiter: &str, grant: Option<(Grant, String)>) -> Delivered {
        let mut listeners = self.listeners();
        let Some(listener) = listeners.get_mut(waiter) else {
            drop(listeners);
            let Some((grant, lock_key)) = grant else {
                return Delivered::Done;
            };
            return match self.late_grant(grant, lock_key) {
                Some(orphan) => Delivered::Orphan(orphan),
                None => Delivered::Done,
            };
        };
        listener.hear(grant.map(|(grant, _)| grant));
        if std::mem::take(&mut listener.listening) {
            listener.woken = true;
            if let Some(waker) = listener.waker.take() {
                return Delivered::Wake(waker);
            }
        }
        Delivered::Done
    }
}

#[cfg(test)]
mod tests;
