//! The setups checked in CI (`tests/protocol.rs`), and running one: exhaustively, depth-first,
//! with masters set up alike taken as one.

use std::time::{Duration, Instant};

use stateright::{Checker, Model};

use crate::rules::Rules;
use crate::setup::{Faults, Kind, Session, Setup};
use crate::system::{Action, Protocol};

/// What a check found.
#[derive(Debug)]
pub struct Outcome {
    /// States explored (distinct, up to the masters' symmetry).
    pub states: usize,
    /// How long it took.
    pub took: Duration,
    /// The first property found broken, with the steps that break it.
    pub broken: Option<(&'static str, Vec<Action>)>,
    /// The `sometimes` properties found reachable (the model is not vacuous).
    pub reached: Vec<&'static str>,
}

/// Checks every state `setup` can reach.
pub fn check(setup: Setup) -> Outcome {
    run(setup, false)
}

/// Checks every state `setup` can reach, breadth-first: a broken property comes with the
/// shortest trace there is, at the cost of memory (every state of a depth is held at once).
pub fn check_shortest(setup: Setup) -> Outcome {
    run(setup, true)
}

fn run(setup: Setup, breadth_first: bool) -> Outcome {
    let started = Instant::now();
    let model = Protocol::new(setup);
    let names: Vec<&'static str> = model.properties().iter().map(|p| p.name).collect();
    let checker = model.checker().threads(2);
    if breadth_first {
        outcome(&checker.spawn_bfs().join(), &names, started)
    } else {
        outcome(&checker.symmetry().spawn_dfs().join(), &names, started)
    }
}

/// What `checker` found, once it has finished.
fn outcome(checker: &impl Checker<Protocol>, names: &[&'static str], started: Instant) -> Outcome {
    let mut broken = None;
    let mut reached = Vec::new();
    for &name in names {
        let Some(path) = checker.discovery(name) else {
            continue;
        };
        if crate::system::ALWAYS.contains(&name) {
            broken.get_or_insert((name, path.into_actions()));
        } else {
            reached.push(name);
        }
    }
    Outcome {
        states: checker.unique_state_count(),
        took: started.elapsed(),
        broken,
        reached,
    }
}

/// Three plain masters.
fn plain() -> Vec<bool> {
    vec![false; 3]
}

/// One attempt per session of `programs`, on masters durable as `durable` says, under
/// `faults` and `rules`.
fn setup(durable: Vec<bool>, programs: Vec<Vec<Session>>, faults: Faults, rules: Rules) -> Setup {
    Setup {
        durable,
        programs,
        attempts: 1,
        faults,
        rules,
    }
}

/// A mutex: a holder that takes the lock unfairly and releases it, and two fair waiters, each
/// a client of its own.
fn holder_and_two_waiters() -> Vec<Vec<Session>> {
    vec![
        vec![Session::unfair_try()],
        vec![Session::waiting()],
        vec![Session::waiting()],
    ]
}

/// A crash, and a snapshot taken before it.
fn crash_from_snapshot() -> Faults {
    Faults {
        crashes: 1,
        snapshots: 1,
        ..Faults::default()
    }
}

/// The interleaving of a master back from its snapshot: a holder that releases late (its
/// release hands the lock over), a fair waiter, and a client that takes the lock and keeps it;
/// a snapshot and a crash.
pub fn snapshot_handover(rules: Rules) -> Setup {
    let programs = vec![
        vec![Session::unfair_try().keeping()],
        vec![Session::waiting()],
        vec![Session::unfair_try()],
    ];
    setup(plain(), programs, crash_from_snapshot(), rules)
}

/// Calls that run late or on a connection that broke: two waiters and a holder, no crash.
pub fn late_calls(rules: Rules) -> Setup {
    let faults = Faults {
        delays: 1,
        breaks: 1,
        ..Faults::default()
    };
    setup(plain(), holder_and_two_waiters(), faults, rules)
}

/// Hand-overs heard twice: two waiters and a holder, no crash.
pub fn duplicates(rules: Rules) -> Setup {
    let faults = Faults {
        duplicates: 1,
        ..Faults::default()
    };
    setup(plain(), holder_and_two_waiters(), faults, rules)
}

/// One master that keeps every write beside two that keep none, each crashing once.
pub fn durable_and_empty(rules: Rules) -> Setup {
    let programs = vec![
        vec![Session::unfair_try().keeping()],
        vec![Session::waiting()],
        vec![Session::unfair_try()],
    ];
    let faults = Faults {
        crashes: 1,
        ..Faults::default()
    };
    setup(vec![true, false, false], programs, faults, rules)
}

/// A read-write lock: a reader, a writer that releases, a writer that keeps it.
pub fn read_write(rules: Rules) -> Setup {
    let programs = vec![
        vec![Session::try_kind(Kind::Reader)],
        vec![Session::try_kind(Kind::Writer)],
        vec![Session::try_kind(Kind::Writer).keeping()],
    ];
    setup(plain(), programs, crash_from_snapshot(), rules)
}

/// A semaphore of two permits: three holders, one of which keeps its permit.
pub fn semaphore(rules: Rules) -> Setup {
    let permit = Session::try_kind(Kind::Permit(2));
    let programs = vec![vec![permit], vec![permit], vec![permit.keeping()]];
    setup(plain(), programs, crash_from_snapshot(), rules)
}
