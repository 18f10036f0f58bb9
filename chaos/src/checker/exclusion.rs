//! Which critical sections exclude which, kind by kind, and what follows from it: holders of a
//! name that overlap although their kinds exclude each other, more holders of a semaphore than
//! its permits, multi-lock sections without all their names, and fencing tokens out of order.
//!
//! The rules, per name, follow where each kind lives on the masters:
//!
//! - a **mutex** and a **reentrant** lock share their keys: any two of their holds exclude each
//!   other, except two holds of one reentrant owner (they nest);
//! - a **read-write** lock: a writer excludes everyone, readers do not exclude one another;
//! - a **semaphore** excludes nobody in pairs: it is crowded when more than its permits hold it
//!   at one instant;
//! - a **multi-lock** holds each of its names as its kind does, so it conflicts with any hold
//!   of any of them.
//!
//! Kinds in different key spaces (a mutex, a read-write lock and a semaphore of the same name)
//! never meet.

use std::collections::{BTreeMap, BTreeSet};

use super::findings::{Crowd, Hold, Overlap};
use crate::history::HeldKind;

/// Where a kind's keys live on the masters (`lock:`, `rw:lock:`, `sem:lock:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Space {
    Lock,
    ReadWrite,
    Semaphore,
}

/// A hold with its window, as a check sees it.
type Windowed<'h> = (&'h Hold, (u64, u64));

fn space(kind: HeldKind) -> Space {
    match kind {
        HeldKind::Mutex | HeldKind::Reentrant => Space::Lock,
        HeldKind::Read | HeldKind::Write => Space::ReadWrite,
        HeldKind::Semaphore => Space::Semaphore,
    }
}

/// Two holds of one reentrant owner: they may nest.
fn same_owner(a: &Hold, b: &Hold) -> bool {
    a.kind() == HeldKind::Reentrant
        && b.kind() == HeldKind::Reentrant
        && a.section.owner.is_some()
        && a.section.owner == b.section.owner
}

/// The name on which `a` and `b` may not be held at once, if there is one.
fn conflict<'h>(a: &'h Hold, b: &Hold) -> Option<&'h str> {
    if a.token == b.token || space(a.kind()) != space(b.kind()) {
        return None;
    }
    let excludes = match space(a.kind()) {
        Space::Lock => !same_owner(a, b),
        Space::ReadWrite => a.kind() == HeldKind::Write || b.kind() == HeldKind::Write,
        Space::Semaphore => false,
    };
    if !excludes {
        return None;
    }
    let theirs = b.names();
    a.names().into_iter().find(|n| theirs.contains(n))
}

/// Pairs of holds that exclude each other and whose windows, as `window` gives them, overlap.
pub(super) fn overlaps(holds: &[Hold], window: fn(&Hold) -> (u64, u64)) -> Vec<Overlap> {
    let mut sorted: Vec<Windowed<'_>> = holds.iter().map(|h| (h, window(h))).collect();
    sorted.sort_by_key(|(_, (start, _))| *start);
    let mut found = Vec::new();
    for (i, (first, (s1, e1))) in sorted.iter().enumerate() {
        for (second, (s2, e2)) in &sorted[i + 1..] {
            if s2 >= e1 {
                break;
            }
            let Some(name) = conflict(first, second) else {
                continue;
            };
            let from = *s2.max(s1);
            let to = *e1.min(e2);
            if to > from {
                found.push(Overlap {
                    first: (first.worker, first.fence),
                    second: (second.worker, second.fence),
                    name: name.to_owned(),
                    from,
                    overlap_ms: (to - from) as f64 / 1e6,
                });
            }
        }
    }
    found
}

/// Semaphore holds granted while at least as many others as the permits held the same name,
/// by the windows `window` gives. The permits are the largest any of those holders asked with
/// (the masters refuse a mix).
pub(super) fn crowds(holds: &[Hold], window: fn(&Hold) -> (u64, u64)) -> Vec<Crowd> {
    let mut by_name: BTreeMap<&str, Vec<Windowed<'_>>> = BTreeMap::new();
    for h in holds.iter().filter(|h| h.kind() == HeldKind::Semaphore) {
        for name in h.names() {
            by_name.entry(name).or_default().push((h, window(h)));
        }
    }
    let mut found = Vec::new();
    for (name, mut list) in by_name {
        // Stable: holds granted at the same instant keep their order, and only the later one
        // counts the earlier.
        list.sort_by_key(|(_, (start, _))| *start);
        for (i, (h, (start, end))) in list.iter().enumerate() {
            let others: Vec<&Windowed<'_>> = list[..i]
                .iter()
                .filter(|(o, (_, e))| *e > *start && o.token != h.token)
                .collect();
            let permits = others
                .iter()
                .map(|(o, _)| o.section.permits.unwrap_or(1))
                .chain([h.section.permits.unwrap_or(1)])
                .max()
                .unwrap_or(1);
            let p = permits as usize;
            if others.len() < p || *end <= *start {
                continue;
            }
            // More than `permits` hold it until the p-th latest end among the others.
            let mut ends: Vec<u64> = others.iter().map(|(_, (_, e))| *e).collect();
            ends.sort_unstable();
            let to = ends[ends.len() - p].min(*end);
            let mut holders: Vec<(u32, u64)> =
                others.iter().map(|(o, _)| (o.worker, o.fence)).collect();
            holders.push((h.worker, h.fence));
            found.push(Crowd {
                name: name.to_owned(),
                permits,
                admitted: (h.worker, h.fence),
                holders,
                from: *start,
                overlap_ms: to.saturating_sub(*start) as f64 / 1e6,
            });
        }
    }
    found
}

/// How a later hold's fencing token must compare with an earlier one's on the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    /// Larger: a new grant of an exclusive kind (mutex, writer, a semaphore permit).
    Above,
    /// At least as large: a reader after a writer (it carries the last writer's token), or a
    /// reentrant owner's hold after one of its own that had ended.
    NotBelow,
    /// The same: a hold nested in one of its owner's (it carries the lock's token, which
    /// stays the same while the owner holds the lock).
    Equal,
}

/// The rule between an `earlier` hold and a `later` one of the same name, if any: readers
/// after readers are not compared, since a writer's attempt that failed may have moved the
/// counter on some masters and not on others.
fn order(earlier: &Hold, later: &Hold) -> Option<Order> {
    match space(later.kind()) {
        Space::Lock if same_owner(earlier, later) => {
            let (start, end) = earlier.certain();
            Some(if start <= later.ok && later.ok < end {
                Order::Equal
            } else {
                Order::NotBelow
            })
        }
        Space::Lock | Space::Semaphore => Some(Order::Above),
        Space::ReadWrite => match (earlier.kind(), later.kind()) {
            (_, HeldKind::Write) => Some(Order::Above),
            (HeldKind::Write, _) => Some(Order::NotBelow),
            _ => None,
        },
    }
}

/// Holds whose fencing token on some name breaks its order with a hold of that name granted
/// before this one was asked for (or, for a nested reentrant hold, granted before it and
/// still held); each such hold counts once.
pub(super) fn fence_order_violations(holds: &[Hold]) -> u64 {
    let mut slots: BTreeMap<(Space, &str), Vec<usize>> = BTreeMap::new();
    for (i, h) in holds.iter().enumerate() {
        for name in h.names() {
            slots.entry((space(h.kind()), name)).or_default().push(i);
        }
    }
    let mut bad: BTreeSet<usize> = BTreeSet::new();
    for ((_, name), mut list) in slots {
        list.sort_by_key(|&i| holds[i].ok);
        for &l in &list {
            let later = &holds[l];
            let broken = list
                .iter()
                .map(|&e| &holds[e])
                .take_while(|e| e.ok < later.invoked)
                .filter(|e| e.token != later.token)
                .any(|earlier| {
                    let (was, is) = (earlier.fence_on(name), later.fence_on(name));
                    match order(earlier, later) {
                        Some(Order::Above) => is <= was,
                        Some(Order::NotBelow) => is < was,
                        Some(Order::Equal) => is != was,
                        None => false,
                    }
                });
            if broken {
                bad.insert(l);
            }
        }
    }
    bad.len() as u64
}

/// Multi-lock sections whose recorded fences do not cover every one of their names: the
/// library returned a multi-lock without all it asked for.
pub(super) fn partial_sections(holds: &[Hold]) -> u64 {
    holds
        .iter()
        .filter(|h| h.section.multi)
        .filter(|h| {
            h.section.names.is_empty()
                || h.section
                    .names
                    .iter()
                    .any(|n| !h.section.fences.contains_key(n))
        })
        .count() as u64
}

#[cfg(test)]
mod tests;
