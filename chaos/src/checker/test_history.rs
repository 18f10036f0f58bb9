//! Small histories for the checker's tests: events at millisecond times, complete holds,
//! writes and phase marks.

use std::collections::BTreeMap;

use crate::history::{Event, EventKind, HeldKind, PhaseKind, RUNNER, Section, WorkerId};

/// One millisecond in the history's nanoseconds.
pub(super) const MS: u64 = 1_000_000;

/// An event at `t_ms` milliseconds.
pub(super) fn ev(t_ms: u64, src: WorkerId, kind: EventKind) -> Event {
    Event {
        t: t_ms * MS,
        src,
        kind,
    }
}

/// A complete hold of the history's one mutex: acquire invoked at `inv`, ok at `ok`, valid
/// for `valid` ms, released at `rel` (if given). Its token is `tok-<w>-<op>`.
pub(super) fn hold(
    w: WorkerId,
    op: u64,
    fence: u64,
    times: (u64, u64, u64),
    rel: Option<u64>,
) -> Vec<Event> {
    hold_of(Section::default(), w, op, fence, times, rel)
}

/// The section of a `kind` lock on `names`.
pub(super) fn of(kind: HeldKind, names: &[&str]) -> Section {
    Section {
        kind,
        names: names.iter().map(|n| (*n).to_owned()).collect(),
        ..Section::default()
    }
}

/// A semaphore of `permits` on `name`.
pub(super) fn semaphore(name: &str, permits: u32) -> Section {
    Section {
        permits: Some(permits),
        ..of(HeldKind::Semaphore, &[name])
    }
}

/// A reentrant hold of `owner` on `name`.
pub(super) fn reentrant(name: &str, owner: &str) -> Section {
    Section {
        owner: Some(owner.to_owned()),
        ..of(HeldKind::Reentrant, &[name])
    }
}

/// A multi-lock of mutexes on `names`, holding the names of `fences` with those tokens.
pub(super) fn multi(names: &[&str], fences: &[(&str, u64)]) -> Section {
    Section {
        multi: true,
        fences: fences
            .iter()
            .map(|(n, f)| ((*n).to_owned(), *f))
            .collect::<BTreeMap<_, _>>(),
        ..of(HeldKind::Mutex, names)
    }
}

/// As [`hold`], of what `section` describes.
pub(super) fn hold_of(
    section: Section,
    w: WorkerId,
    op: u64,
    fence: u64,
    (inv, ok, valid): (u64, u64, u64),
    rel: Option<u64>,
) -> Vec<Event> {
    let token = format!("tok-{w}-{op}");
    let asked = Section {
        fences: BTreeMap::new(),
        ..section.clone()
    };
    let mut v = vec![
        ev(
            inv,
            w,
            EventKind::AcquireInvoke {
                op,
                ttl_ms: valid,
                section: asked,
            },
        ),
        ev(
            ok,
            w,
            EventKind::AcquireOk {
                op,
                token: token.clone(),
                fence,
                valid_until: (inv + valid) * MS,
                section,
            },
        ),
    ];
    if let Some(r) = rel {
        v.push(ev(
            r,
            w,
            EventKind::ReleaseInvoke {
                op: op + 1,
                token: token.clone(),
            },
        ));
        v.push(ev(r + 1, w, EventKind::ReleaseOk { op: op + 1 }));
    }
    v
}

pub(super) fn write(
    t: u64,
    w: WorkerId,
    op: u64,
    token: &str,
    fence: u64,
    value: i64,
    accepted: bool,
) -> Vec<Event> {
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
                key: None,
            },
        ),
        ev(
            t + 1,
            w,
            if accepted {
                EventKind::WriteOk { op }
            } else {
                EventKind::WriteRejected { op, highest: 99 }
            },
        ),
    ]
}

pub(super) fn phase(t: u64, name: &str, kind: PhaseKind) -> Event {
    ev(
        t,
        RUNNER,
        EventKind::Phase {
            name: name.to_owned(),
            kind,
        },
    )
}
