//! Tests of the kinds' rules on hand-made histories: read-write locks, semaphores, multi-locks
//! and reentrant locks, each clean and violating.

use crate::checker::test_history::{hold_of, multi, of, phase, reentrant, semaphore};
use crate::checker::{Expectation, Verdict, Want, analyse, judge};
use crate::history::{Event, HeldKind, PhaseKind, Section};

fn read(name: &str) -> Section {
    of(HeldKind::Read, &[name])
}

fn write(name: &str) -> Section {
    of(HeldKind::Write, &[name])
}

#[test]
fn readers_share_a_read_write_lock() {
    // Two readers at once, then a writer after both: clean, fences in order.
    let mut h = hold_of(write("rw"), 1, 1, 10, (0, 5, 1000), Some(50));
    h.extend(hold_of(read("rw"), 2, 1, 10, (60, 70, 1000), Some(300)));
    h.extend(hold_of(read("rw"), 3, 1, 10, (80, 90, 1000), Some(250)));
    h.extend(hold_of(write("rw"), 1, 3, 11, (310, 320, 1000), Some(400)));
    let a = analyse(&h);
    assert!(a.definite.is_empty(), "{:?}", a.definite);
    assert!(a.possible.is_empty());
    assert_eq!(a.fence_order_violations, 0);
    assert_eq!(a.by_kind["read"].ok, 2);
    assert_eq!(a.by_kind["write"].ok, 2);
}

#[test]
fn a_writer_excludes_readers_and_writers() {
    // A reader granted while a writer holds the lock.
    let mut h = hold_of(write("rw"), 1, 1, 10, (0, 5, 1000), Some(300));
    h.extend(hold_of(read("rw"), 2, 1, 10, (100, 150, 1000), Some(400)));
    let a = analyse(&h);
    assert_eq!(a.definite.len(), 1);
    assert_eq!(a.definite[0].name, "rw");
    assert!((a.definite[0].overlap_ms - 150.0).abs() < 1e-6);
    // A second writer, the same.
    let mut h = hold_of(write("rw"), 1, 1, 10, (0, 5, 1000), Some(300));
    h.extend(hold_of(write("rw"), 2, 1, 11, (100, 150, 1000), Some(400)));
    assert_eq!(analyse(&h).definite.len(), 1);
    // A writer granted while a reader holds it, past the reader's validity: possible only.
    let mut h = hold_of(read("rw"), 1, 1, 10, (0, 5, 100), Some(300));
    h.extend(hold_of(write("rw"), 2, 1, 11, (150, 200, 1000), Some(400)));
    let a = analyse(&h);
    assert!(a.definite.is_empty());
    assert_eq!(a.possible.len(), 1);
    // Another name, or another kind's keys of the same name: no conflict.
    let mut h = hold_of(write("rw"), 1, 1, 10, (0, 5, 1000), Some(300));
    h.extend(hold_of(
        write("other"),
        2,
        1,
        11,
        (100, 150, 1000),
        Some(400),
    ));
    h.extend(hold_of(
        of(HeldKind::Mutex, &["rw"]),
        3,
        1,
        12,
        (100, 150, 1000),
        Some(400),
    ));
    assert!(analyse(&h).definite.is_empty());
}

#[test]
fn read_write_fences_follow_the_writers() {
    // Writers' fences must grow in acquisition order.
    let mut h = hold_of(write("rw"), 1, 1, 10, (0, 5, 100), Some(50));
    h.extend(hold_of(write("rw"), 2, 1, 10, (60, 70, 100), Some(90)));
    assert_eq!(analyse(&h).fence_order_violations, 1);
    // A reader carries the last writer's token, not less.
    let mut h = hold_of(write("rw"), 1, 1, 10, (0, 5, 100), Some(50));
    h.extend(hold_of(read("rw"), 2, 1, 10, (60, 70, 100), Some(90)));
    assert_eq!(analyse(&h).fence_order_violations, 0);
    let mut h = hold_of(write("rw"), 1, 1, 10, (0, 5, 100), Some(50));
    h.extend(hold_of(read("rw"), 2, 1, 9, (60, 70, 100), Some(90)));
    assert_eq!(analyse(&h).fence_order_violations, 1);
    // ... and a writer after a reader must go above the reader's token: a reader whose token
    // is the next writer's (or above) was not given the last writer's.
    let mut h = hold_of(read("rw"), 1, 1, 12, (0, 5, 100), Some(50));
    h.extend(hold_of(write("rw"), 2, 1, 12, (60, 70, 100), Some(90)));
    assert_eq!(analyse(&h).fence_order_violations, 1);
    // Readers after readers are not compared (a failed writer may have moved the counter on
    // some masters only).
    let mut h = hold_of(read("rw"), 1, 1, 12, (0, 5, 100), Some(50));
    h.extend(hold_of(read("rw"), 2, 1, 10, (60, 70, 100), Some(90)));
    assert_eq!(analyse(&h).fence_order_violations, 0);
}

/// Three holds of a two-permit semaphore: worker 3's overlaps workers 1's and 2's from
/// `third_at` on, unless they let go first; then a final acquire.
fn three_holders(third_at: u64, valid: u64) -> Vec<Event> {
    let mut h = hold_of(semaphore("s", 2), 1, 1, 10, (0, 5, valid), Some(300));
    h.extend(hold_of(
        semaphore("s", 2),
        2,
        1,
        11,
        (10, 20, valid),
        Some(280),
    ));
    h.extend(hold_of(
        semaphore("s", 2),
        3,
        1,
        12,
        (third_at - 10, third_at, 1000),
        Some(500),
    ));
    h.push(phase(600, "final", PhaseKind::Final));
    h.extend(hold_of(
        semaphore("s", 2),
        1,
        3,
        13,
        (610, 620, 1000),
        Some(630),
    ));
    h
}

#[test]
fn a_semaphore_admits_at_most_its_permits() {
    // Two holders at once and a third after one let go: clean.
    let a = analyse(&three_holders(290, 1000));
    assert!(a.crowded.is_empty(), "{:?}", a.crowded);
    assert!(
        a.definite.is_empty(),
        "semaphore holders do not conflict in pairs"
    );
    assert_eq!(a.fence_order_violations, 0);
    // A third while both hold it: crowded from 200 until worker 2 lets go at 280.
    let a = analyse(&three_holders(200, 1000));
    assert_eq!(a.crowded.len(), 1, "{:?}", a.crowded);
    let c = &a.crowded[0];
    assert_eq!((c.name.as_str(), c.permits, c.admitted), ("s", 2, (3, 12)));
    assert_eq!(c.holders.len(), 3);
    assert!((c.overlap_ms - 80.0).abs() < 1e-6, "{}", c.overlap_ms);
    let (v, reasons) = judge(&a, &Expectation::clean(), &[]);
    assert_eq!(v, Verdict::Fail);
    assert!(
        reasons.iter().any(|r| r.contains("over-admission")),
        "{reasons:?}"
    );
    // Holders past their validity (valid 150 ms from 0 and 10) crowd it only possibly.
    let a = analyse(&three_holders(200, 150));
    assert!(a.crowded.is_empty());
    assert_eq!(a.possibly_crowded.len(), 1);
    // Permits are per name: the same three on two names are clean.
    let mut h = hold_of(semaphore("s", 2), 1, 1, 10, (0, 5, 1000), Some(300));
    h.extend(hold_of(
        semaphore("s", 2),
        2,
        1,
        11,
        (10, 20, 1000),
        Some(280),
    ));
    h.extend(hold_of(
        semaphore("t", 2),
        3,
        1,
        12,
        (190, 200, 1000),
        Some(500),
    ));
    assert!(analyse(&h).crowded.is_empty());
}

#[test]
fn the_semaphore_positive_control_needs_the_over_admission() {
    let control = Expectation {
        over_admitted: Want::Required,
        fence_order: Want::Allowed,
        ..Expectation::clean()
    };
    assert!(control.is_positive_control());
    let (v, reasons) = judge(&analyse(&three_holders(290, 1000)), &control, &[]);
    assert_eq!(v, Verdict::Fail);
    assert!(
        reasons[0].contains("expected semaphore over-admissions"),
        "{reasons:?}"
    );
    assert_eq!(
        judge(&analyse(&three_holders(200, 1000)), &control, &[]).0,
        Verdict::Pass
    );
}

#[test]
fn semaphore_fences_grow() {
    let mut h = hold_of(semaphore("s", 2), 1, 1, 10, (0, 5, 1000), Some(300));
    h.extend(hold_of(
        semaphore("s", 2),
        2,
        1,
        10,
        (10, 20, 1000),
        Some(280),
    ));
    assert_eq!(analyse(&h).fence_order_violations, 1);
}

#[test]
fn a_multi_lock_holds_every_name_and_excludes_each() {
    // {a, b} and {c} at once; then {b, c} after both: clean, fences growing per name.
    let mut h = hold_of(
        multi(&["a", "b"], &[("a", 5), ("b", 7)]),
        1,
        1,
        7,
        (0, 5, 1000),
        Some(100),
    );
    h.extend(hold_of(
        multi(&["c"], &[("c", 3)]),
        2,
        1,
        3,
        (0, 10, 1000),
        Some(100),
    ));
    h.extend(hold_of(
        multi(&["b", "c"], &[("b", 8), ("c", 4)]),
        3,
        1,
        8,
        (110, 120, 1000),
        Some(200),
    ));
    let a = analyse(&h);
    assert!(a.definite.is_empty(), "{:?}", a.definite);
    assert_eq!((a.partial_sections, a.fence_order_violations), (0, 0));
    assert_eq!(a.by_kind["multi"].ok, 3);

    // {b, c} granted while {a, b} holds b: a conflict on b.
    let mut h = hold_of(
        multi(&["a", "b"], &[("a", 5), ("b", 7)]),
        1,
        1,
        7,
        (0, 5, 1000),
        Some(300),
    );
    h.extend(hold_of(
        multi(&["b", "c"], &[("b", 8), ("c", 4)]),
        3,
        1,
        8,
        (110, 120, 1000),
        Some(400),
    ));
    let a = analyse(&h);
    assert_eq!(a.definite.len(), 1);
    assert_eq!(a.definite[0].name, "b");
    // A plain mutex on one of its names conflicts too.
    let mut h = hold_of(
        multi(&["a", "b"], &[("a", 5), ("b", 7)]),
        1,
        1,
        7,
        (0, 5, 1000),
        Some(300),
    );
    h.extend(hold_of(
        of(HeldKind::Mutex, &["a"]),
        2,
        1,
        6,
        (110, 120, 1000),
        Some(400),
    ));
    let a = analyse(&h);
    assert_eq!(a.definite.len(), 1);
    assert_eq!(a.fence_order_violations, 0, "6 is not below a's 5");

    // A section granted without one of its names is partial, whatever else happened.
    let h = hold_of(
        multi(&["a", "b"], &[("a", 5)]),
        1,
        1,
        5,
        (0, 5, 1000),
        Some(100),
    );
    let a = analyse(&h);
    assert_eq!(a.partial_sections, 1);
    let (v, reasons) = judge(&a, &Expectation::clean(), &[]);
    assert_eq!(v, Verdict::Fail);
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("every one of their names")),
        "{reasons:?}"
    );
}

#[test]
fn multi_lock_fences_grow_per_name() {
    // b's token goes down from 7 to 6 although the second section came after the first.
    let mut h = hold_of(
        multi(&["a", "b"], &[("a", 5), ("b", 7)]),
        1,
        1,
        7,
        (0, 5, 1000),
        Some(100),
    );
    h.extend(hold_of(
        multi(&["b", "c"], &[("b", 6), ("c", 40)]),
        2,
        1,
        40,
        (110, 120, 1000),
        Some(200),
    ));
    assert_eq!(analyse(&h).fence_order_violations, 1);
    // Names have counters of their own: c's 4 after a's 5 is fine.
    let mut h = hold_of(multi(&["a"], &[("a", 5)]), 1, 1, 5, (0, 5, 1000), Some(100));
    h.extend(hold_of(
        multi(&["c"], &[("c", 4)]),
        2,
        1,
        4,
        (110, 120, 1000),
        Some(200),
    ));
    assert_eq!(analyse(&h).fence_order_violations, 0);
}

#[test]
fn a_reentrant_owner_nests_and_excludes_others() {
    // Owner x holds the lock twice (nested, the same token), then owner y after both.
    let mut h = hold_of(reentrant("r", "x"), 1, 1, 10, (0, 5, 1000), Some(300));
    h.extend(hold_of(
        reentrant("r", "x"),
        1,
        3,
        10,
        (50, 55, 1000),
        Some(200),
    ));
    h.extend(hold_of(
        reentrant("r", "y"),
        2,
        1,
        11,
        (310, 320, 1000),
        Some(400),
    ));
    let a = analyse(&h);
    assert!(a.definite.is_empty(), "{:?}", a.definite);
    assert_eq!(a.fence_order_violations, 0);
    // Owner y while x holds it, and a mutex of the same name while x holds it.
    let mut h = hold_of(reentrant("r", "x"), 1, 1, 10, (0, 5, 1000), Some(300));
    h.extend(hold_of(
        reentrant("r", "y"),
        2,
        1,
        11,
        (100, 150, 1000),
        Some(400),
    ));
    h.extend(hold_of(
        of(HeldKind::Mutex, &["r"]),
        3,
        1,
        12,
        (100, 160, 1000),
        Some(400),
    ));
    let a = analyse(&h);
    // x-y, x-mutex, y-mutex.
    assert_eq!(a.definite.len(), 3, "{:?}", a.definite);
    // A nested hold carries the lock's token: neither below nor above its owner's.
    for nested in [9, 11] {
        let mut h = hold_of(reentrant("r", "x"), 1, 1, 10, (0, 5, 1000), Some(300));
        h.extend(hold_of(
            reentrant("r", "x"),
            1,
            3,
            nested,
            (50, 55, 1000),
            Some(200),
        ));
        assert_eq!(analyse(&h).fence_order_violations, 1, "{nested}");
    }
    // Once the owner has let go, its next hold is a new acquisition (a larger token), yet a
    // hold after a nested one that ended, within the same outer hold, keeps the lock's token.
    let mut h = hold_of(reentrant("r", "x"), 1, 1, 10, (0, 5, 1000), Some(300));
    h.extend(hold_of(
        reentrant("r", "x"),
        1,
        3,
        10,
        (50, 55, 1000),
        Some(100),
    ));
    h.extend(hold_of(
        reentrant("r", "x"),
        1,
        5,
        10,
        (150, 155, 1000),
        Some(200),
    ));
    h.extend(hold_of(
        reentrant("r", "x"),
        1,
        7,
        12,
        (400, 405, 1000),
        Some(500),
    ));
    assert_eq!(analyse(&h).fence_order_violations, 0);
}

#[test]
fn each_kind_must_get_through() {
    let mut h = hold_of(write("rw"), 1, 1, 10, (0, 5, 1000), Some(50));
    h.extend(hold_of(read("rw"), 2, 1, 10, (60, 70, 1000), Some(90)));
    h.push(phase(100, "final", PhaseKind::Final));
    h.extend(hold_of(read("rw"), 2, 3, 10, (110, 120, 1000), Some(130)));
    let a = analyse(&h);
    let wants_two = Expectation {
        min_per_kind: 2,
        ..Expectation::clean()
    };
    let (v, reasons) = judge(&a, &wants_two, &[]);
    assert_eq!(v, Verdict::Fail);
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(reasons[0].contains("only 1 write acquires"), "{reasons:?}");
    assert_eq!(judge(&a, &Expectation::clean(), &[]).0, Verdict::Pass);
}
