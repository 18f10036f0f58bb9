//! Tests of verdicts: expectations met and missed, positive controls, inconclusive runs and
//! liveness thresholds.

use super::*;
use crate::checker::analyse;
use crate::checker::test_history::{ev, hold, phase};
use crate::history::{Event, EventKind, RUNNER, Section};

fn clean_run() -> Vec<Event> {
    let mut h = vec![phase(0, "baseline", PhaseKind::Normal)];
    h.extend(hold(1, 1, 10, (10, 20, 100), Some(30)));
    h.push(phase(40, "final", PhaseKind::Final));
    h.extend(hold(2, 1, 11, (41, 42, 100), Some(43)));
    h
}

#[test]
fn verdicts_follow_the_expectation() {
    let clean = clean_run();
    let a = analyse(&clean);
    assert_eq!(judge(&a, &Expectation::clean(), &[]).0, Verdict::Pass);

    // A positive control that finds nothing fails.
    let control = Expectation {
        definite: Want::Required,
        ..Expectation::clean()
    };
    assert!(control.is_positive_control());
    let (v, reasons) = judge(&a, &control, &[]);
    assert_eq!(v, Verdict::Fail);
    assert!(reasons[0].contains("expected definite violations"));

    // ... and passes when the violation is there.
    let mut bad = clean.clone();
    bad.extend(hold(3, 1, 9, (11, 25, 100), Some(35)));
    let a = analyse(&bad);
    assert_eq!(judge(&a, &control, &[]).0, Verdict::Pass);
    assert_eq!(judge(&a, &Expectation::clean(), &[]).0, Verdict::Fail);
}

#[test]
fn unconfirmed_faults_make_a_run_inconclusive() {
    let mut h = clean_run();
    h.push(ev(
        5,
        RUNNER,
        EventKind::FaultInvoke {
            id: 1,
            action: "kill".into(),
            targets: vec!["redis2".into()],
        },
    ));
    let a = analyse(&h);
    assert_eq!(a.faults.len(), 1);
    assert_eq!(a.faults_confirmed(), 0);
    let (v, reasons) = judge(&a, &Expectation::clean(), &[]);
    assert_eq!(v, Verdict::Inconclusive);
    assert!(reasons[0].contains("not confirmed"));

    h.push(ev(
        6,
        RUNNER,
        EventKind::FaultConfirmed {
            id: 1,
            detail: "exited".into(),
        },
    ));
    let a = analyse(&h);
    assert_eq!(judge(&a, &Expectation::clean(), &[]).0, Verdict::Pass);
    // Problems the runner saw make it inconclusive too, as do too few operations.
    assert_eq!(
        judge(&a, &Expectation::clean(), &["worker 2 died".into()]).0,
        Verdict::Inconclusive
    );
    let needy = Expectation {
        min_acquired: 10,
        ..Expectation::clean()
    };
    assert_eq!(judge(&a, &needy, &[]).0, Verdict::Inconclusive);
}

#[test]
fn liveness_thresholds_are_judged() {
    let mut h = vec![phase(0, "fault", PhaseKind::Fault)];
    h.push(ev(
        1,
        1,
        EventKind::AcquireInvoke {
            op: 1,
            ttl_ms: 100,
            section: Section::default(),
        },
    ));
    h.push(ev(
        2,
        1,
        EventKind::AcquireFail {
            op: 1,
            error: "timeout".into(),
        },
    ));
    h.extend(hold(1, 3, 10, (3, 4, 100), Some(5)));
    h.push(phase(10, "heal", PhaseKind::Heal));
    h.extend(hold(1, 5, 11, (11, 2000, 3000), Some(2001)));
    h.push(phase(2100, "final", PhaseKind::Final));
    h.extend(hold(2, 1, 12, (2101, 2102, 100), Some(2103)));
    h.push(ev(
        12,
        2,
        EventKind::AcquireInvoke {
            op: 1,
            ttl_ms: 100,
            section: Section::default(),
        },
    ));
    h.push(ev(
        20,
        2,
        EventKind::AcquireFail {
            op: 1,
            error: "contended".into(),
        },
    ));
    let a = analyse(&h);
    assert_eq!(a.min_success(PhaseKind::Fault), Some(0.5));
    assert_eq!(a.min_success(PhaseKind::Heal), Some(0.5));
    assert!((a.max_recovery_ms().unwrap() - 1990.0).abs() < 1e-6);
    let strict = Expectation {
        min_fault_success: Some(0.9),
        min_heal_success: Some(0.9),
        max_recovery_ms: Some(1000.0),
        ..Expectation::clean()
    };
    let (v, reasons) = judge(&a, &strict, &[]);
    assert_eq!(v, Verdict::Fail);
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    let lenient = Expectation {
        min_fault_success: Some(0.5),
        min_heal_success: Some(0.5),
        max_recovery_ms: Some(5000.0),
        ..Expectation::clean()
    };
    assert_eq!(judge(&a, &lenient, &[]).0, Verdict::Pass);
}

#[test]
fn events_out_of_order_and_json_round_trip() {
    let mut h = clean_run();
    h.reverse();
    let json: Vec<String> = h
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect();
    let back: Vec<Event> = json
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(back, h);
    let a = analyse(&back);
    assert_eq!(a.holds.len(), 2);
    assert_eq!(judge(&a, &Expectation::clean(), &[]).0, Verdict::Pass);
}
