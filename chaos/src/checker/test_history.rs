//! Small histories for the checker's tests: events at millisecond times, complete holds,
//! writes and phase marks.

use crate::history::{Event, EventKind, PhaseKind, RUNNER, WorkerId};

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

/// A complete hold: acquire invoked at `inv`, ok at `ok`, valid for `valid` ms, released
/// at `rel` (if given).
pub(super) fn hold(
    w: WorkerId,
    op: u64,
    fence: u64,
    (inv, ok, valid): (u64, u64, u64),
    rel: Option<u64>,
) -> Vec<Event> {
    let token = format!("tok-{w}-{op}");
    let mut v = vec![
        ev(inv, w, EventKind::AcquireInvoke { op, ttl_ms: valid }),
        ev(
            ok,
            w,
            EventKind::AcquireOk {
                op,
                token: token.clone(),
                fence,
                valid_until: (inv + valid) * MS,
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
