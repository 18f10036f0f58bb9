//! Checks one of the model's setups and prints what it found: the states explored, the
//! properties reached, and the steps that break one, if any.
//!
//! `cargo run --release -p redquorum-model -- SETUP [RULES] [--shortest]`, with SETUP one of
//! `snapshot-handover`, `late-calls`, `duplicates`, `durable-and-empty`, `read-write`,
//! `semaphore`, and RULES `current` (the default) or `before-process-checks`. `--shortest`
//! searches breadth-first, for the shortest trace.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;

use redquorum_model::{Rules, checks};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let shortest = args.iter().any(|a| a == "--shortest");
    let mut words = args.iter().filter(|a| !a.starts_with("--"));
    let rules = |name: Option<&String>| match name.map(String::as_str) {
        None | Some("current") => Some(Rules::current()),
        Some("before-process-checks") => Some(Rules::before_process_checks()),
        Some(_) => None,
    };
    let setup = words.next().map(String::as_str);
    let Some(rules) = rules(words.next()) else {
        eprintln!("unknown rules; see the module's docs");
        return ExitCode::from(2);
    };
    let setup = match setup {
        Some("snapshot-handover") => checks::snapshot_handover(rules),
        Some("late-calls") => checks::late_calls(rules),
        Some("duplicates") => checks::duplicates(rules),
        Some("durable-and-empty") => checks::durable_and_empty(rules),
        Some("read-write") => checks::read_write(rules),
        Some("semaphore") => checks::semaphore(rules),
        _ => {
            eprintln!("unknown setup; see the module's docs");
            return ExitCode::from(2);
        }
    };
    let outcome = if shortest {
        checks::check_shortest(setup)
    } else {
        checks::check(setup)
    };
    println!(
        "{} states in {:.1?}; reached: {:?}",
        outcome.states, outcome.took, outcome.reached
    );
    match outcome.broken {
        None => {
            println!("every property holds");
            ExitCode::SUCCESS
        }
        Some((property, steps)) => {
            println!("\"{property}\" is broken by:");
            for (i, step) in steps.iter().enumerate() {
                println!("  {:>2}. {step:?}", i + 1);
            }
            ExitCode::FAILURE
        }
    }
}
