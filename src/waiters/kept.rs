//! Places in line that a holder's release kept for its own client's next acquire of the same
//! lock (see `lua/release.lua`), and when this client last released each lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::node::{Keys, Place, PlaceKept, Terms};

/// How soon after releasing a lock a client must ask for it again to be taking it in a loop,
/// and how long a place its release kept waits to be taken up before it is given up.
pub(crate) const LOOP_WINDOW: Duration = Duration::from_millis(20);

/// Releases remembered at most; older ones are forgotten first (only the last
/// [`LOOP_WINDOW`] matters).
const RELEASES_REMEMBERED: usize = 1024;

/// Where a kept place is, per master, as far as the release's answers tell (queued out of
/// step: where the release handed nothing over, see `lua/release.lua`).
const UNKNOWN: u8 = 0;
const QUEUED: u8 = 1;
const NOT_QUEUED: u8 = 2;
const QUEUED_OUT_OF_STEP: u8 = 3;

/// A place a release queued for its client's next acquire, with that acquire's terms.
#[derive(Debug)]
pub(crate) struct KeptPlace {
    /// The lock's keys.
    pub(crate) keys: Arc<Keys>,
    pub(crate) place: Place,
    pub(crate) terms: Terms,
    /// When the release was sent: a hand-over on these terms came after it.
    pub(crate) sent: Instant,
    on: Vec<AtomicU8>,
}

impl KeptPlace {
    pub(crate) fn new(keys: Arc<Keys>, place: Place, terms: Terms, nodes: usize) -> Self {
        KeptPlace {
            keys,
            place,
            terms,
            sent: Instant::now(),
            on: (0..nodes).map(|_| AtomicU8::new(UNKNOWN)).collect(),
        }
    }

    /// Master `node` answered the release: whether, and how, it queued the place.
    pub(crate) fn answered(&self, node: usize, kept: PlaceKept) {
        if let Some(on) = self.on.get(node) {
            let state = match kept {
                PlaceKept::WithHandOver => QUEUED,
                PlaceKept::OutOfStep => QUEUED_OUT_OF_STEP,
                PlaceKept::No => NOT_QUEUED,
            };
            on.store(state, Ordering::Relaxed);
        }
    }

    /// How many masters said they queued the place as they handed the lock over: the place
    /// is worth waiting in only where the line goes on past this release on a quorum.
    pub(crate) fn queued_count(&self) -> usize {
        self.on
            .iter()
            .filter(|on| on.load(Ordering::Relaxed) == QUEUED)
            .count()
    }

    /// Per master: whether the place may be there (queued, or no answer yet).
    pub(crate) fn may_be_on(&self) -> Vec<bool> {
        self.on
            .iter()
            .map(|on| on.load(Ordering::Relaxed) != NOT_QUEUED)
            .collect()
    }
}

/// The places this client's releases kept, and its latest releases, by lock key.
#[derive(Debug, Default)]
pub(crate) struct KeptPlaces {
    places: Mutex<Places>,
    released: Mutex<HashMap<String, Instant>>,
}

#[derive(Debug, Default)]
struct Places {
    /// Each place, with when it was kept: its release had returned then, and the client's
    /// next acquire has [`LOOP_WINDOW`] from there to take it up. Counted from the release's
    /// sending instead, a slow release (a loaded machine, a slow master) would leave the
    /// client less, or no time at all.
    by_lock: HashMap<String, (Arc<KeptPlace>, Instant)>,
    /// Whether a task is giving up the places not taken up in time (one per client, running
    /// while there are places kept, rather than a timer per place).
    swept: bool,
}

/// What keeping a place asks of the caller.
#[derive(Debug)]
pub(crate) struct Kept {
    /// The place kept before for the same lock, now to be given up.
    pub(crate) replaced: Option<Arc<KeptPlace>>,
    /// Whether to start the task that gives up places not taken up (see
    /// [`KeptPlaces::take_stale`]).
    pub(crate) start_sweeping: bool,
}

impl KeptPlaces {
    fn places(&self) -> std::sync::MutexGuard<'_, Places> {
        self.places.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `kept` for the next acquire of its lock.
    pub(crate) fn keep(&self, kept: Arc<KeptPlace>) -> Kept {
        let mut places = self.places();
        let replaced = places
            .by_lock
            .insert(kept.keys.lock.clone(), (kept, Instant::now()))
            .map(|(replaced, _)| replaced);
        let start_sweeping = !places.swept;
        places.swept = true;
        Kept {
            replaced,
            start_sweeping,
        }
    }

    /// The place kept for `lock_key`, taken up.
    pub(crate) fn take(&self, lock_key: &str) -> Option<Arc<KeptPlace>> {
        self.places().by_lock.remove(lock_key).map(|(kept, _)| kept)
    }

    /// The places kept for longer than [`LOOP_WINDOW`], taken out to be given up, and whether
    /// the sweeping goes on (places are left); when it does not, the next place kept starts it
    /// again.
    pub(crate) fn take_stale(&self) -> (Vec<Arc<KeptPlace>>, bool) {
        let mut places = self.places();
        let stale: Vec<String> = places
            .by_lock
            .iter()
            .filter(|(_, (_, kept_at))| kept_at.elapsed() >= LOOP_WINDOW)
            .map(|(lock, _)| lock.clone())
            .collect();
        let taken = stale
            .iter()
            .filter_map(|lock| places.by_lock.remove(lock))
            .map(|(kept, _)| kept)
            .collect();
        places.swept = !places.by_lock.is_empty();
        (taken, places.swept)
    }

    /// The task giving up stale places has ended; the next place kept starts another.
    pub(crate) fn sweeping_stopped(&self) {
        self.places().swept = false;
    }

    /// This client has just released `lock_key`.
    pub(crate) fn note_release(&self, lock_key: &str) {
        let mut released = self.released.lock().unwrap_or_else(PoisonError::into_inner);
        if released.len() >= RELEASES_REMEMBERED && !released.contains_key(lock_key) {
            released.retain(|_, at| at.elapsed() < LOOP_WINDOW);
            if released.len() >= RELEASES_REMEMBERED {
                released.clear();
            }
        }
        released.insert(lock_key.to_owned(), Instant::now());
    }

    /// Whether this client released `lock_key` at most [`LOOP_WINDOW`] before `at`.
    pub(crate) fn released_lately(&self, lock_key: &str, at: Instant) -> bool {
        self.released
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(lock_key)
            .is_some_and(|released| at.saturating_duration_since(*released) <= LOOP_WINDOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept() -> Arc<KeptPlace> {
        let keys = Keys::new(
            "t:",
            "l",
            crate::config::LockKind::Mutex,
            Arc::new(crate::node::DeploymentKeys::new("t:")),
        );
        Arc::new(KeptPlace::new(
            Arc::new(keys),
            Place {
                waiter: "c.1".into(),
                priority: 1,
                life: Duration::from_millis(100),
            },
            Terms {
                token: "t".into(),
                ttl: Duration::from_secs(1),
                proposal: 1,
            },
            3,
        ))
    }

    #[test]
    fn a_place_is_where_the_answers_say_or_may_be_where_none_came() {
        let k = kept();
        k.answered(0, PlaceKept::WithHandOver);
        k.answered(1, PlaceKept::No);
        assert_eq!(k.queued_count(), 1);
        assert_eq!(k.may_be_on(), vec![true, false, true]);
        // Kept out of step, the place is there to give up, but no hand-over counts for it.
        k.answered(2, PlaceKept::OutOfStep);
        assert_eq!(k.queued_count(), 1);
        assert_eq!(k.may_be_on(), vec![true, false, true]);
    }

    #[test]
    fn a_kept_place_is_taken_once_and_swept_when_stale() {
        let places = KeptPlaces::default();
        let k = kept();
        let lock = k.keys.lock.clone();
        let first = places.keep(k.clone());
        assert!(first.replaced.is_none() && first.start_sweeping);
        let second = places.keep(k.clone());
        assert!(second.replaced.is_some() && !second.start_sweeping);
        // Not stale yet: the sweep goes on.
        assert_eq!(places.take_stale().0.len(), 0);
        assert!(places.take(&lock).is_some());
        assert!(places.take(&lock).is_none());
        // Nothing left: the sweep stops, and the next place kept starts it again.
        assert!(!places.take_stale().1);
        assert!(places.keep(k).start_sweeping);
        std::thread::sleep(LOOP_WINDOW);
        let (stale, going_on) = places.take_stale();
        assert_eq!(stale.len(), 1);
        assert!(!going_on);
    }

    #[test]
    fn a_slow_release_leaves_the_whole_window_to_take_its_place_up() {
        let places = KeptPlaces::default();
        // The release was sent a window ago, and its answers only came now.
        let k = kept();
        std::thread::sleep(LOOP_WINDOW);
        places.keep(k);
        let (stale, going_on) = places.take_stale();
        assert!(stale.is_empty(), "given up as soon as it was kept");
        assert!(going_on);
    }

    #[test]
    fn only_a_recent_release_counts_as_a_loop() {
        let places = KeptPlaces::default();
        assert!(!places.released_lately("l", Instant::now()));
        places.note_release("l");
        assert!(places.released_lately("l", Instant::now()));
        assert!(!places.released_lately("m", Instant::now()));
        assert!(!places.released_lately("l", Instant::now() + LOOP_WINDOW * 2));
    }
}
