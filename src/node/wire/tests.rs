//! The connection against a scripted master on an in-memory stream: what goes out and when,
//! which reply reaches which call, who reads, and what a broken stream does.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use redis::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;
use crate::node::detached::Background;

fn connecting(login: &[redis::Cmd], subscriber: bool) -> (Wire, Option<Call>) {
    let metrics = Arc::new(NodeMetrics::new("test:1"));
    Wire::connecting(metrics, Arc::default(), login, subscriber)
}

fn cmd(args: &[&str]) -> redis::Cmd {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c
}

fn send(wire: &Wire, args: &[&str]) -> Call {
    let c = cmd(args);
    wire.call(None, 1, |out| c.write_packed_command(out))
}

fn packed(args: &[&str]) -> Vec<u8> {
    cmd(args).get_packed_command()
}

/// The bytes the master has been sent so far.
async fn received(server: &mut DuplexStream) -> Vec<u8> {
    let mut buf = vec![0; 64 * 1024];
    match tokio::time::timeout(Duration::from_millis(200), server.read(&mut buf)).await {
        Ok(Ok(n)) => buf[..n].to_vec(),
        _ => Vec::new(),
    }
}

/// A connection open on an in-memory stream of 4 KiB, with detached work of its own: the
/// connection, its background, and the master's end.
fn open_with_background() -> (Wire, Arc<Background>, DuplexStream) {
    let background = Arc::new(Background::default());
    let metrics = Arc::new(NodeMetrics::new("test:1"));
    let (wire, _) = Wire::connecting(metrics, background.clone(), &[], false);
    let (client, server) = tokio::io::duplex(4096);
    wire.attach(Box::new(client));
    wire.open();
    (wire, background, server)
}

fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
}

fn int(v: &[Value]) -> i64 {
    match v {
        [Value::Int(n)] => *n,
        other => panic!("not one integer: {other:?}"),
    }
}

#[tokio::test]
async fn commands_sent_while_connecting_go_out_in_order_once_attached() {
    let (wire, login) = connecting(&[], false);
    assert!(login.is_none());
    let a = send(&wire, &["INCR", "a"]);
    let b = send(&wire, &["INCR", "b"]);
    let (client, mut server) = tokio::io::duplex(4096);
    wire.attach(Box::new(client));
    wire.open();
    let mut expected = packed(&["INCR", "a"]);
    expected.extend(packed(&["INCR", "b"]));
    assert_eq!(received(&mut server).await, expected);
    server.write_all(b":1\r\n:2\r\n").await.unwrap();
    assert_eq!(int(&b.await.unwrap()), 2);
    assert_eq!(int(&a.await.unwrap()), 1);
}

#[tokio::test]
async fn nothing_but_the_login_goes_out_until_it_is_answered() {
    let (wire, login) = connecting(&[cmd(&["AUTH", "pw"]), cmd(&["SELECT", "2"])], false);
    let login = login.expect("a login call");
    let later = send(&wire, &["GET", "k"]);
    let (client, mut server) = tokio::io::duplex(4096);
    wire.attach(Box::new(client));
    let mut expected = packed(&["AUTH", "pw"]);
    expected.extend(packed(&["SELECT", "2"]));
    assert_eq!(received(&mut server).await, expected);
    server.write_all(b"+OK\r\n+OK\r\n").await.unwrap();
    assert_eq!(login.await.unwrap(), vec![Value::Okay, Value::Okay]);
    assert!(
        received(&mut server).await.is_empty(),
        "held back until opened"
    );
    wire.open();
    assert_eq!(received(&mut server).await, packed(&["GET", "k"]));
    server.write_all(b"$1\r\nv\r\n").await.unwrap();
    assert_eq!(later.await.unwrap(), vec![Value::BulkString(b"v".to_vec())]);
}

#[tokio::test]
async fn a_failed_login_fails_every_call_and_sends_nothing_more() {
    let (wire, login) = connecting(&[cmd(&["AUTH", "bad"])], false);
    let login = login.expect("a login call");
    let later = send(&wire, &["DEL", "k"]);
    let (client, mut server) = tokio::io::duplex(4096);
    wire.attach(Box::new(client));
    assert_eq!(received(&mut server).await, packed(&["AUTH", "bad"]));
    server
        .write_all(b"-WRONGPASS invalid password\r\n")
        .await
        .unwrap();
    let replies = login.await.unwrap();
    let e = replies[0].clone().extract_error().unwrap_err();
    wire.fail(e);
    assert!(later.await.is_err());
    assert!(wire.is_broken());
    assert!(
        send(&wire, &["PING"]).await.is_err(),
        "later calls fail at once"
    );
    assert!(
        received(&mut server).await.is_empty(),
        "the DEL never went out"
    );
}

#[tokio::test]
async fn a_dropped_calls_reply_is_read_and_dropped() {
    let (wire, _) = connecting(&[], false);
    let (client, mut server) = tokio::io::duplex(4096);
    wire.attach(Box::new(client));
    wire.open();
    let mut first = send(&wire, &["INCR", "x"]);
    assert!(poll_once(&mut first).is_pending());
    drop(first);
    let second = send(&wire, &["INCR", "y"]);
    let mut expected = packed(&["INCR", "x"]);
    expected.extend(packed(&["INCR", "y"]));
    assert_eq!(
        received(&mut server).await,
        expected,
        "the dropped call went out"
    );
    server.write_all(b":7\r\n:8\r\n").await.unwrap();
    assert_eq!(int(&second.await.unwrap()), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reader_hands_the_reading_on_when_it_has_its_answer() {
    let (wire, _) = connecting(&[], false);
    let (client, mut server) = tokio::io::duplex(4096);
    wire.attach(Box::new(client));
    wire.open();
    // Two tasks wait; the first to poll reads. Its answer comes alone, so the other's can
    // only be read if the reading is handed on.
    let first = tokio::spawn(send(&wire, &["INCR", "a"]));
    let second = tokio::spawn(send(&wire, &["INCR", "b"]));
    let mut got = Vec::new();
    while got.len() < packed(&["INCR", "a"]).len() * 2 {
        got.extend(received(&mut server).await);
    }
    server.write_all(b":1\r\n").await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    server.write_all(b":2\r\n").await.unwrap();
    let within = |t| tokio::time::timeout(Duration::from_secs(5), t);
    let a = within(first).await.expect("the first answered");
    let b = within(second)
        .await
        .expect("the second answered: the reading was handed on");
    assert_eq!(
        (int(&a.unwrap().unwrap()), int(&b.unwrap().unwrap())),
        (1, 2)
    );
}

#[tokio::test]
async fn a_closed_stream_fails_the_waiting_calls_and_every_later_one() {
    let (wire, _) = connecting(&[], false);
    let (client, server) = tokio::io::duplex(4096);
    wire.attach(Box::new(client));
    wire.open();
    let waiting = send(&wire, &["GET", "k"]);
    drop(server);
    let e = waiting.await.unwrap_err();
    assert!(e.is_io_error() || e.is_connection_dropped(), "{e}");
    assert!(wire.is_broken());
    assert!(send(&wire, &["GET", "k"]).await.is_err());
}

#[tokio::test]
async fn a_malformed_reply_breaks_the_connection() {
    let (wire, _) = connecting(&[], false);
    let (client, mut server) = tokio::io::duplex(4096);
    wire.attach(Box::new(client));
    wire.open();
    let waiting = send(&wire, &["GET", "k"]);
    server.write_all(b"?garbage\r\n").await.unwrap();
    assert!(waiting.await.is_err());
    assert!(wire.is_broken());
}

#[tokio::test]
async fn a_subscribers_messages_reach_its_listeners_and_a_task_reads_first() {
    let subscribe = [cmd(&["SUBSCRIBE", "ch"])];
    let (wire, login) = connecting(&subscribe, true);
    let login = login.expect("the subscribe call");
    let (client, mut server) = tokio::io::duplex(4096);
    wire.attach(Box::new(client));
    assert_eq!(received(&mut server).await, packed(&["SUBSCRIBE", "ch"]));
    server
        .write_all(b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n")
        .await
        .unwrap();
    login.await.unwrap();
    wire.open();
    assert!(wire.is_open());
    let mut keeper = wire.listen(true);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(keeper.poll_heard(&mut cx).messages.is_empty());
    // A waiting task's listener takes the reading from the keeper, and hears the message.
    let mut waiter = wire.listen(false);
    server
        .write_all(b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$4\r\nab.1\r\n")
        .await
        .unwrap();
    let heard = std::future::poll_fn(|cx| {
        let heard = waiter.poll_heard(cx);
        if heard.messages.is_empty() {
            Poll::Pending
        } else {
            Poll::Ready(heard)
        }
    })
    .await;
    assert_eq!(heard.messages.len(), 1);
    assert!(!heard.broken);
}

#[tokio::test]
async fn a_detached_calls_answer_is_finished_by_the_task_that_reads_it() {
    let (wire, background, mut server) = open_with_background();
    let detached_call = send(&wire, &["INCR", "d"]);
    let finished = background.detach(detached_call);
    let live = send(&wire, &["INCR", "l"]);
    let mut expected = packed(&["INCR", "d"]);
    expected.extend(packed(&["INCR", "l"]));
    assert_eq!(received(&mut server).await, expected);
    server.write_all(b":1\r\n:2\r\n").await.unwrap();
    assert_eq!(int(&live.await.unwrap()), 2);
    // Read by the live call, and finished on its way out: no poller was needed.
    let mut finished = finished;
    assert!(finished.try_recv().is_ok());
}

/// A command longer than the socket takes at once (a whole script, sent after `NOSCRIPT`)
/// goes out whole, the rest as the master reads, and its answer comes: for a task's call and
/// for a detached one, which no task polls until its answer is in.
#[tokio::test]
async fn a_command_longer_than_the_socket_takes_goes_out_whole() {
    for detached in [false, true] {
        let (wire, background, mut server) = open_with_background();
        let long = "x".repeat(20_000);
        let expected = packed(&["SET", "k", &long]);
        let call = send(&wire, &["SET", "k", &long]);
        let master = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buf = vec![0; 8192];
            while got.len() < expected.len() {
                let n = server.read(&mut buf).await.unwrap();
                assert!(n > 0);
                got.extend_from_slice(&buf[..n]);
            }
            assert_eq!(got, expected);
            server.write_all(b":7\r\n").await.unwrap();
            server
        });
        let answer = if detached {
            let (tx, rx) = tokio::sync::oneshot::channel();
            drop(background.detach(async move {
                let _ = tx.send(call.await);
            }));
            tokio::time::timeout(Duration::from_secs(5), rx)
                .await
                .expect("the detached call's command went out and was answered")
                .unwrap()
        } else {
            tokio::time::timeout(Duration::from_secs(5), call)
                .await
                .expect("the call's command went out and was answered")
        };
        assert_eq!(int(&answer.unwrap()), 7, "detached: {detached}");
        drop(master.await.unwrap());
    }
}
