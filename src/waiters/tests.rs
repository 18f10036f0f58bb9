//! The waiters' bookkeeping: who a release wakes, and which grants are orphans.

use super::*;
use futures::FutureExt;

/// Whether the waiter was woken, looking once.
fn woken(w: &mut Woken) -> bool {
    w.now_or_never().is_some()
}

/// The orphan a delivery calls to give back, if any.
fn orphan(d: Delivered) -> Option<Orphan> {
    match d {
        Delivered::Orphan(o) => Some(o),
        _ => None,
    }
}

#[test]
fn a_wake_reaches_only_the_named_waiter() {
    let (waiters, _orphans) = Waiters::new("p:");
    assert_eq!(waiters.wake_prefix(), "p:wake:");
    let (a, b) = (waiters.new_waiter(), waiters.new_waiter());
    assert_ne!(a, b);
    assert_eq!(a.split_once('.').map(|(c, _)| c), Some(&*waiters.client_id));
    // A lock handed over to a waiter is held under `<waiter id>/<token>`, which a caller may
    // give back by hand (the HTTP service's release): it must pass the token check.
    let handed_over = format!("{a}/{}", crate::config::random_token().unwrap());
    assert!(crate::config::kind::is_issued_token(&handed_over));
    let mut first = waiters.listen("w1");
    let mut second = waiters.listen("w2");
    waiters.deliver("w1", None);
    assert!(woken(&mut first));
    assert!(!woken(&mut second), "only the named waiter wakes");
    // Another master announcing the same release, before the waiter listens again: it is
    // attempting anyway. After it listens again: woken again, to retry.
    waiters.deliver("w1", None);
    let mut again = waiters.listen("w1");
    assert!(!woken(&mut again));
    waiters.deliver("w1", None);
    assert!(woken(&mut again));
}

#[test]
fn grants_for_a_waiter_that_left_are_orphans_unless_kept() {
    let (waiters, mut orphans) = Waiters::new("p:");
    let on = |node: usize, token: &str| Grant {
        node,
        token: token.to_owned(),
        fence: 7,
        sender: None,
    };
    let msg = |node: usize, token: &str| Some((on(node, token), "p:lock:x".to_owned()));
    let given_back = |d: Delivered| orphan(d).map(|o| o.grant);
    let mut rx = waiters.listen("w1");
    assert!(orphan(waiters.deliver("w1", msg(0, "w1/a"))).is_none());
    assert!(woken(&mut rx), "a grant wakes its waiter");
    assert_eq!(waiters.take_grants("w1"), vec![on(0, "w1/a")]);
    waiters.remember_taken("w1/a");
    waiters.deliver("w1", msg(0, "w1/b"));
    waiters.deliver("w1", msg(1, "w1/a"));
    // Leaving: the grant it did not take is returned to be given back; its own lock's is not.
    assert_eq!(waiters.leave("w1"), vec![on(0, "w1/b")]);
    assert_eq!(waiters.heard_late_on("w1/a"), vec![1]);
    assert!(orphan(waiters.deliver("w1", msg(2, "w1/a"))).is_none());
    assert_eq!(
        given_back(waiters.deliver("w1", msg(0, "w1/c"))),
        Some(on(0, "w1/c"))
    );
    // Once its own lock is being released, a late grant with its token waits for the
    // release's answer from that master: given back unless the release deleted the lock
    // there (the handover came first, and the message is merely late).
    waiters.released("w1/a");
    assert!(orphan(waiters.deliver("w1", msg(3, "w1/a"))).is_none());
    assert!(orphan(waiters.deliver("w1", msg(4, "w1/a"))).is_none());
    assert!(orphans.try_recv().is_err());
    waiters.release_answered("w1/a", 3, true);
    assert!(orphans.try_recv().is_err(), "deleted by the release");
    waiters.release_answered("w1/a", 4, false);
    assert_eq!(
        orphans.try_recv().ok().map(|o| o.grant),
        Some(on(4, "w1/a"))
    );
    // Answers already in decide at once.
    assert!(orphan(waiters.deliver("w1", msg(3, "w1/a"))).is_none());
    assert_eq!(
        given_back(waiters.deliver("w1", msg(4, "w1/a"))),
        Some(on(4, "w1/a"))
    );
}

#[test]
fn waiters_that_left_are_forgotten() {
    let (waiters, _orphans) = Waiters::new("p:");
    let _rx = waiters.listen("w1");
    waiters.leave("w1");
    // Named after it left (another client's master still had its place): nothing to wake.
    waiters.deliver("w1", None);
    assert!(waiters.listeners().is_empty());
}

#[test]
fn a_grant_given_back_is_no_grant_when_heard_again() {
    let (waiters, _orphans) = Waiters::new("p:");
    let on = |node: usize, token: &str| Grant {
        node,
        token: token.to_owned(),
        fence: 7,
        sender: None,
    };
    let msg = |node: usize, token: &str| Some((on(node, token), "p:lock:x".to_owned()));
    let _listening = waiters.listen("w1");
    // An attempt heard of master 0's handover; the waiter took it, fell short of a quorum
    // and gave it back. Its message, heard meanwhile or late, is no grant; master 1's grant
    // of the same token, and master 0's of another, are.
    waiters.add_grants("w1", vec![on(0, "w1/a")]);
    let taken = waiters.take_grants("w1");
    waiters.deliver("w1", msg(0, "w1/a"));
    waiters.gave_back("w1", &taken);
    assert_eq!(waiters.take_grants("w1"), vec![]);
    waiters.deliver("w1", msg(0, "w1/a"));
    waiters.deliver("w1", msg(1, "w1/a"));
    waiters.add_grants("w1", vec![on(0, "w1/a"), on(0, "w1/b")]);
    assert_eq!(
        waiters.take_grants("w1"),
        vec![on(1, "w1/a"), on(0, "w1/b")]
    );
}
