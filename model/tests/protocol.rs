//! The protocol's model, checked exhaustively for the setups of `checks` (three masters, three
//! clients, bounded faults): every reachable state keeps mutual exclusion and fencing tokens
//! that grow, and the protocol before hand-overs were judged by their sender's process breaks
//! both (the positive control: the checker finds what it is meant to find).
#![allow(clippy::panic, clippy::print_stderr)]

use redquorum_model::checks::{self, Outcome};
use redquorum_model::{Rules, Setup};

/// Checks `setup` and fails on a broken property, printing the steps that break it.
fn holds(name: &str, setup: Setup, reachable: &[&str]) {
    let outcome = checks::check(setup);
    eprintln!(
        "{name}: {} states in {:.1?}, reached {:?}",
        outcome.states, outcome.took, outcome.reached
    );
    if let Some((property, steps)) = &outcome.broken {
        panic!("{name}: \"{property}\" is broken by:\n{}", trace(steps));
    }
    for r in reachable {
        assert!(
            outcome.reached.contains(r),
            "{name}: \"{r}\" never happens: the setup checks less than it says"
        );
    }
}

fn trace(steps: &[redquorum_model::Action]) -> String {
    steps
        .iter()
        .enumerate()
        .map(|(i, a)| format!("  {:>2}. {a:?}\n", i + 1))
        .collect()
}

const HELD: &str = "a lock is held";
const HANDED_OVER: &str = "a lock is handed over and held";
const QUARANTINED: &str = "a master is quarantined";

#[test]
fn a_master_back_from_its_snapshot_hands_over_nothing_that_counts() {
    let setup = checks::snapshot_handover(Rules::current());
    holds(
        "snapshot hand-over",
        setup,
        &[HELD, HANDED_OVER, QUARANTINED],
    );
}

/// The positive control: with the rules of fe8ed07 the checker finds two holders.
#[test]
fn before_the_fix_a_handover_from_a_snapshot_gives_two_holders() {
    let Outcome { broken, states, .. } =
        checks::check(checks::snapshot_handover(Rules::before_process_checks()));
    let Some((property, steps)) = broken else {
        panic!("the rules before the fix passed {states} states: the model misses the flaw");
    };
    eprintln!(
        "before the fix, \"{property}\" is broken by:\n{}",
        trace(&steps)
    );
    assert!(["mutual exclusion", "fencing tokens grow"].contains(&property));
}

#[test]
fn calls_that_run_late_or_after_their_connection_broke() {
    holds(
        "late calls",
        checks::late_calls(Rules::current()),
        &[HELD, HANDED_OVER],
    );
}

#[test]
fn handovers_heard_twice() {
    holds(
        "duplicates",
        checks::duplicates(Rules::current()),
        &[HELD, HANDED_OVER],
    );
}

#[test]
fn masters_that_keep_every_write_beside_masters_that_keep_none() {
    let setup = checks::durable_and_empty(Rules::current());
    holds(
        "durable and empty",
        setup,
        &[HELD, HANDED_OVER, QUARANTINED],
    );
}

#[test]
fn one_writer_and_no_reader_beside_it() {
    holds(
        "read-write",
        checks::read_write(Rules::current()),
        &[HELD, QUARANTINED],
    );
}

#[test]
fn no_more_holders_than_permits() {
    holds(
        "semaphore",
        checks::semaphore(Rules::current()),
        &[HELD, QUARANTINED],
    );
}
