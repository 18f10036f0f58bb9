//! Tests of reading a history: windows, overlaps, writes, fences and phase figures.

use super::*;
use crate::checker::test_history::{MS, ev, hold, phase, write};
use crate::checker::{Expectation, Verdict, judge};
use crate::history::Section;

#[test]
fn sequential_holds_are_clean() {
    let mut h = hold(1, 1, 10, (0, 5, 1000), Some(100));
    h.extend(hold(2, 1, 11, (50, 101, 1000), Some(200)));
    let a = analyse(&h);
    assert_eq!(a.holds.len(), 2);
    assert!(a.definite.is_empty(), "{:?}", a.definite);
    assert!(a.possible.is_empty());
    assert_eq!(a.fence_order_violations, 0);
    assert_eq!(a.acquire.ok, 2);
    assert_eq!(a.release.ok, 2);
}

#[test]
fn overlapping_certain_windows_are_a_definite_violation() {
    // Worker 1 holds until 300 (released then); worker 2 gets the lock at 150.
    let mut h = hold(1, 1, 10, (0, 5, 1000), Some(300));
    h.extend(hold(2, 1, 11, (100, 150, 1000), Some(400)));
    let a = analyse(&h);
    assert_eq!(a.definite.len(), 1);
    let o = &a.definite[0];
    assert_eq!((o.first, o.second), ((1, 10), (2, 11)));
    assert!((o.overlap_ms - 150.0).abs() < 1e-6, "{}", o.overlap_ms);
    assert!(a.possible.is_empty(), "a definite one is not also possible");
}

#[test]
fn validity_ends_the_certain_window() {
    // Worker 1 is valid until 0+100; it releases late (at 500), after worker 2 got the lock
    // at 200: not definite, but possible (worker 1 acted until 500).
    let mut h = hold(1, 1, 10, (0, 5, 100), Some(500));
    h.extend(hold(2, 1, 11, (150, 200, 1000), Some(600)));
    let a = analyse(&h);
    assert!(a.definite.is_empty(), "{:?}", a.definite);
    assert_eq!(a.possible.len(), 1);
    assert!((a.possible[0].overlap_ms - 300.0).abs() < 1e-6);
}

#[test]
fn an_extend_moves_validity() {
    let mut h = hold(1, 1, 10, (0, 5, 100), None);
    h.push(ev(
        50,
        1,
        EventKind::ExtendInvoke {
            op: 3,
            token: "tok-1-1".into(),
        },
    ));
    h.push(ev(
        52,
        1,
        EventKind::ExtendOk {
            op: 3,
            valid_until: 1000 * MS,
        },
    ));
    h.extend(hold(2, 1, 11, (400, 450, 1000), Some(600)));
    let a = analyse(&h);
    assert_eq!(a.extend.ok, 1);
    assert_eq!(a.definite.len(), 1, "validity was extended to 1000");
    // A failed extend does not.
    let mut h = hold(1, 1, 10, (0, 5, 100), None);
    h.push(ev(
        50,
        1,
        EventKind::ExtendInvoke {
            op: 3,
            token: "tok-1-1".into(),
        },
    ));
    h.push(ev(
        52,
        1,
        EventKind::ExtendFail {
            op: 3,
            error: "quorum_unavailable".into(),
        },
    ));
    h.extend(hold(2, 1, 11, (400, 450, 1000), Some(600)));
    assert!(analyse(&h).definite.is_empty());
}

#[test]
fn unfinished_operations_are_unknown() {
    let mut h = hold(1, 1, 10, (0, 5, 100), None);
    h.push(ev(
        10,
        1,
        EventKind::ReleaseInvoke {
            op: 2,
            token: "tok-1-1".into(),
        },
    ));
    h.push(ev(
        20,
        2,
        EventKind::AcquireInvoke {
            op: 1,
            ttl_ms: 100,
            section: Section::default(),
        },
    ));
    h.push(ev(
        30,
        1,
        EventKind::ReleaseFail {
            op: 2,
            error: "quorum_unavailable".into(),
        },
    ));
    let a = analyse(&h);
    assert_eq!(a.acquire.unknown, 1);
    assert_eq!(a.release.unknown, 1);
    assert_eq!(a.release.fail, 0);
}

#[test]
fn duplicate_accepted_values_are_lost_updates() {
    let mut h = hold(1, 1, 10, (0, 5, 1000), Some(100));
    h.extend(write(10, 1, 5, "tok-1-1", 10, 1, true));
    h.extend(hold(2, 1, 11, (0, 200, 1000), Some(300)));
    h.extend(write(210, 2, 5, "tok-2-1", 11, 2, true));
    let a = analyse(&h);
    assert_eq!(a.lost_updates, 0);
    // A third writer that read 0 too.
    h.extend(hold(3, 1, 12, (0, 400, 1000), Some(500)));
    h.extend(write(410, 3, 5, "tok-3-1", 12, 1, true));
    let a = analyse(&h);
    assert_eq!(a.lost_updates, 1);
    assert_eq!(a.stale_accepted, 0, "its fence is the highest");
}

#[test]
fn a_lower_fence_accepted_after_a_higher_one_is_stale() {
    // Worker 2 (fence 11) writes at 200; worker 1 (fence 10), paused, writes at 300.
    let mut h = hold(1, 1, 10, (0, 5, 100), Some(400));
    h.extend(hold(2, 1, 11, (150, 160, 1000), Some(250)));
    h.extend(write(200, 2, 5, "tok-2-1", 11, 1, true));
    let accepted = [h.clone(), write(300, 1, 5, "tok-1-1", 10, 1, true)].concat();
    let a = analyse(&accepted);
    assert_eq!(a.stale_accepted, 1);
    assert_eq!(a.lost_updates, 1);
    assert_eq!(a.possible.len(), 1, "worker 1 wrote after its validity");
    // With fencing the resource refuses it: nothing stale, nothing lost.
    let refused = [h, write(300, 1, 5, "tok-1-1", 10, 1, false)].concat();
    let a = analyse(&refused);
    assert_eq!((a.stale_accepted, a.lost_updates, a.rejected), (0, 0, 1));
}

#[test]
fn concurrent_writes_are_not_stale() {
    // The higher write was not yet acknowledged when the lower one was sent.
    let mut h = write(100, 1, 1, "a", 10, 1, true);
    h.extend(write(100, 2, 1, "b", 11, 2, true));
    assert_eq!(analyse(&h).stale_accepted, 0);
}

#[test]
fn fences_must_grow_in_real_time_order() {
    let mut h = hold(1, 1, 10, (0, 5, 100), Some(50));
    h.extend(hold(2, 1, 9, (60, 70, 100), Some(90)));
    assert_eq!(analyse(&h).fence_order_violations, 1);
    // Concurrent acquisitions may come in any order.
    let mut h = hold(1, 1, 10, (0, 5, 100), Some(50));
    h.extend(hold(2, 1, 9, (1, 70, 100), Some(90)));
    assert_eq!(analyse(&h).fence_order_violations, 0);
}

#[test]
fn phases_measure_success_recovery_and_false_acquires() {
    let mut h = vec![phase(0, "baseline", PhaseKind::Normal)];
    h.extend(hold(1, 1, 10, (10, 20, 100), Some(30)));
    h.push(phase(100, "majority down", PhaseKind::Unavailable));
    h.push(ev(
        110,
        1,
        EventKind::AcquireInvoke {
            op: 3,
            ttl_ms: 100,
            section: Section::default(),
        },
    ));
    h.push(ev(
        160,
        1,
        EventKind::AcquireFail {
            op: 3,
            error: "quorum_unavailable".into(),
        },
    ));
    h.push(phase(200, "healed", PhaseKind::Heal));
    h.push(ev(
        210,
        1,
        EventKind::AcquireInvoke {
            op: 5,
            ttl_ms: 100,
            section: Section::default(),
        },
    ));
    h.push(ev(
        215,
        1,
        EventKind::AcquireFail {
            op: 5,
            error: "quorum_unavailable".into(),
        },
    ));
    h.extend(hold(1, 7, 11, (230, 250, 100), Some(260)));
    h.push(phase(300, "final", PhaseKind::Final));
    h.extend(hold(2, 1, 12, (310, 320, 100), Some(330)));
    let a = analyse(&h);
    assert_eq!(a.phases.len(), 4);
    assert_eq!(a.phases[0].success_rate(), Some(1.0));
    assert_eq!(a.phases[1].acquires, 1);
    assert_eq!(a.false_acquires, 0);
    assert_eq!(a.phases[2].success_rate(), Some(0.5));
    assert!((a.phases[2].recovery_ms.unwrap() - 50.0).abs() < 1e-6);
    assert_eq!(a.final_acquire, Some(true));

    // One that waited through the outage and succeeded once the heal began is not.
    let mut h = vec![phase(0, "majority down", PhaseKind::Unavailable)];
    h.push(ev(
        10,
        1,
        EventKind::AcquireInvoke {
            op: 1,
            ttl_ms: 100,
            section: Section::default(),
        },
    ));
    h.push(ev(
        50,
        RUNNER,
        EventKind::FaultInvoke {
            id: 2,
            action: "start".into(),
            targets: vec!["redis1".into()],
        },
    ));
    h.push(ev(
        60,
        1,
        EventKind::AcquireOk {
            op: 1,
            token: "t".into(),
            fence: 1,
            valid_until: 200 * MS,
            section: Section::default(),
        },
    ));
    h.push(phase(70, "healed", PhaseKind::Heal));
    assert_eq!(analyse(&h).false_acquires, 0);

    // An acquire that succeeds while the majority is out is a false acquire.
    let mut h = vec![phase(0, "majority down", PhaseKind::Unavailable)];
    h.extend(hold(1, 1, 10, (10, 20, 100), Some(30)));
    h.push(phase(50, "final", PhaseKind::Final));
    let a = analyse(&h);
    assert_eq!(a.false_acquires, 1);
    let (verdict, reasons) = judge(&a, &Expectation::clean(), &[]);
    assert_eq!(verdict, Verdict::Fail);
    assert!(reasons[0].contains("majority was out"), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("final acquire failed")));
}

#[test]
fn after_a_heal_failures_caused_by_the_next_fault_are_left_out() {
    let fail = |t, w, op| {
        ev(
            t,
            w,
            EventKind::AcquireFail {
                op,
                error: "quorum_unavailable".into(),
            },
        )
    };
    let mut h = vec![phase(0, "healed", PhaseKind::Heal)];
    h.extend(hold(1, 1, 10, (10, 20, 100), Some(30)));
    // Failed before the next fault: counts.
    h.push(ev(
        40,
        2,
        EventKind::AcquireInvoke {
            op: 1,
            ttl_ms: 100,
            section: Section::default(),
        },
    ));
    h.push(fail(60, 2, 1));
    // Invoked in the heal, failed once the next fault was under way: left out.
    h.push(ev(
        70,
        3,
        EventKind::AcquireInvoke {
            op: 1,
            ttl_ms: 100,
            section: Section::default(),
        },
    ));
    h.push(ev(
        80,
        RUNNER,
        EventKind::FaultInvoke {
            id: 2,
            action: "kill".into(),
            targets: vec!["redis1".into()],
        },
    ));
    h.push(fail(150, 3, 1));
    h.push(phase(100, "majority down", PhaseKind::Unavailable));
    let a = analyse(&h);
    let heal = &a.phases[0];
    assert_eq!((heal.invoked, heal.acquires, heal.acquired), (3, 2, 1));
    assert_eq!(a.min_success(PhaseKind::Heal), Some(0.5));
}

#[test]
fn each_resource_key_is_a_counter_of_its_own() {
    let keyed = |t, w, op, token: &str, fence, value, key: &str| {
        vec![
            ev(
                t,
                w,
                EventKind::WriteInvoke {
                    op,
                    token: token.to_owned(),
                    fence,
                    value,
                    fenced: true,
                    key: Some(key.to_owned()),
                },
            ),
            ev(t + 1, w, EventKind::WriteOk { op }),
        ]
    };
    // The same value on two keys, and a lower fence on another key after a higher one: clean.
    let mut h = keyed(10, 1, 1, "a", 20, 1, "chaos:counter:a");
    h.extend(keyed(20, 2, 1, "b", 5, 1, "chaos:counter:b"));
    let a = analyse(&h);
    assert_eq!((a.lost_updates, a.stale_accepted), (0, 0));
    assert_eq!(a.writes[1].key, "chaos:counter:b");
    // The same value twice on one key, the second with a lower fence: lost and stale.
    h.extend(keyed(30, 3, 1, "c", 19, 1, "chaos:counter:a"));
    let a = analyse(&h);
    assert_eq!((a.lost_updates, a.stale_accepted), (1, 1));
}
