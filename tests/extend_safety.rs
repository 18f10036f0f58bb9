//! An extend whose outcome is not known on every master: the holder's validity drops to what
//! the new TTL allows, so that a shorter TTL applied late by a stalled master can never leave
//! the holder believing in a lock that a second client has since taken.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use redquorum::{Client, Error, LockOptions, LockState, RenewOptions};

/// Tries `rival` on `name` until it takes the lock or `limit` passes.
async fn rival_takes(rival: &Client, name: &str, limit: Duration) -> Option<redquorum::Lock> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Ok(lock) = rival
            .try_acquire(name, &LockOptions::new(Duration::from_secs(10)))
            .await
        {
            return Some(lock);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Three masters, C dead; X holds on {A, B} with 10 s left and extends to 300 ms while B is
/// paused past the per-node deadline. A applies the shorter TTL at once, B when it resumes:
/// both keys are gone 300 ms later and a rival takes the lock. X must not think it still
/// holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_shorter_extend_cuts_the_holders_validity() {
    let mut nodes = common::nodes(3);
    nodes.kill(2).unwrap();
    let holder = common::client(&nodes);
    let rival = common::client(&nodes);
    let mut lock = holder
        .try_acquire("shortened", &LockOptions::new(Duration::from_secs(10)))
        .await
        .unwrap();
    nodes.pause(1).unwrap();
    let extend_started = Instant::now();
    let err = lock
        .extend(Duration::from_millis(300))
        .await
        .expect_err("B is paused and C is dead: no quorum can confirm the extend");
    assert!(matches!(err, Error::ExtendUncertain { .. }), "{err}");
    nodes.resume(1).unwrap();
    // The new TTL may have been applied anywhere: the lock is certain no longer than that.
    assert!(
        lock.valid_until() <= extend_started + Duration::from_millis(300),
        "validity left at {:?} after a failed extend to 300 ms",
        lock.remaining()
    );
    let second = rival_takes(&rival, "shortened", Duration::from_secs(3))
        .await
        .expect("the shortened keys expire and the rival takes the lock");
    assert!(
        !lock.is_valid(),
        "two holders: the rival took the lock while the first still counts {:?} of validity",
        lock.remaining()
    );
    second.release().await.unwrap();
}

/// The same hole in a guard: with `max_hold`, renewals shorten the TTL. A renewal that fails
/// (B paused, C dead) may still have been applied on A, and on B when it resumes: the guard's
/// validity must follow the shorter TTL, not stay Suspect with the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_shortening_renewal_cuts_the_guards_validity() {
    let mut nodes = common::nodes(3);
    nodes.kill(2).unwrap();
    let holder = common::client(&nodes);
    let rival = common::client(&nodes);
    let guard = holder
        .try_acquire("capped", &LockOptions::new(Duration::from_secs(3)))
        .await
        .unwrap()
        .into_guard(
            RenewOptions::default()
                .interval(Duration::from_secs(1))
                .max_hold(Duration::from_millis(1500)),
        )
        .unwrap();
    let mut watch = guard.watch();
    // The first renewal, at 1 s, asks for the 500 ms that are left of the hold.
    tokio::time::sleep(Duration::from_millis(900)).await;
    nodes.pause(1).unwrap();
    let suspect = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(status) = watch.changed().await {
            if status.state != LockState::Held {
                return status;
            }
        }
        panic!("the guard went away")
    })
    .await
    .expect("the renewal fails while B is paused");
    assert!(
        suspect.valid_until <= Instant::now() + Duration::from_millis(500),
        "a failed renewal to at most 500 ms left {:?} of validity",
        suspect
            .valid_until
            .saturating_duration_since(Instant::now())
    );
    // B runs the shorter TTL once it resumes, long after the renewal gave up on it.
    tokio::time::sleep(Duration::from_millis(700)).await;
    nodes.resume(1).unwrap();
    let second = rival_takes(&rival, "capped", Duration::from_secs(3))
        .await
        .expect("the shortened keys expire and the rival takes the lock");
    assert_eq!(
        guard.state(),
        LockState::Lost,
        "two holders: the rival took the lock while the guard counts {:?} of validity",
        guard.remaining()
    );
    second.release().await.unwrap();
}

/// Extending by token (the HTTP service's way) after the same failure: the error says so, and
/// a stateless caller learns that the lock is certain no longer than the new TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_extend_by_token_says_how_long_the_lock_may_last() {
    let mut nodes = common::nodes(3);
    nodes.kill(2).unwrap();
    let client = common::client(&nodes);
    let lock = client
        .try_acquire("by-token", &LockOptions::new(Duration::from_secs(10)))
        .await
        .unwrap();
    nodes.pause(1).unwrap();
    let err = client
        .extend_token("by-token", lock.token(), Duration::from_millis(300))
        .await
        .expect_err("no quorum can confirm the extend");
    nodes.resume(1).unwrap();
    match &err {
        Error::ExtendUncertain { valid_for, .. } => assert!(
            *valid_for <= Duration::from_millis(300),
            "{valid_for:?}: {err}"
        ),
        other => panic!("expected ExtendUncertain, got {other}"),
    }
}

/// The same for a caller that stops waiting for `Lock::extend` (a timeout or a `select!`
/// around it): the extend is out on every master, each applies the shorter TTL whenever it
/// runs it, and the holder's validity must already be no longer than the new TTL allows.
/// B and C are paused, so that the extend to 300 ms still waits when the caller gives up after
/// 20 ms; A applies it at once, B and C when they resume, and 300 ms later a rival takes the
/// lock. The validity was lowered only once the extend returned, so it stayed at 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_shorter_extend_cuts_the_holders_validity() {
    let nodes = common::nodes(3);
    let holder = common::client(&nodes);
    let rival = common::client(&nodes);
    let mut lock = holder
        .try_acquire("dropped", &LockOptions::new(Duration::from_secs(10)))
        .await
        .unwrap();
    nodes.pause(1).unwrap();
    nodes.pause(2).unwrap();
    let extend_started = Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_millis(20),
        lock.extend(Duration::from_millis(300)),
    )
    .await;
    assert!(outcome.is_err(), "the caller gave up on the extend");
    nodes.resume(1).unwrap();
    nodes.resume(2).unwrap();
    let second = rival_takes(&rival, "dropped", Duration::from_secs(3))
        .await
        .expect("the shortened keys expire and the rival takes the lock");
    assert!(
        !lock.is_valid(),
        "two holders: the rival took the lock {:?} after an extend to 300 ms was sent, while \
         the first holder's Lock still counts {:?} of validity",
        extend_started.elapsed(),
        lock.remaining()
    );
    second.release().await.unwrap();
}
