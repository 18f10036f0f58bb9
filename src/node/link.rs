//! The connections to one node: numbered, made in the background on first use, retired when
//! they fail, and how a failed call is booked.

use std::sync::atomic::Ordering;

use redis::{ErrorKind, RedisError};

use super::Node;
use super::dial::{dial, login_commands};
use super::wire::Wire;
use crate::error::{NodeFailureKind, Operation};

/// The number of a connection to a node, unique for the node's life.
pub(crate) type LinkId = u64;

/// A connection to the node, perhaps still being made.
#[derive(Debug, Clone)]
pub(super) struct Link {
    pub(super) id: LinkId,
    wire: Wire,
}

impl Node {
    /// The current connection: a new one (with a new number) when there is none, or when the
    /// current one is broken. A new connection is made in the background; commands sent on
    /// it meanwhile go out, in order, once it is up (see [`Wire::connecting`]).
    pub(super) fn connect(&self) -> (LinkId, Wire) {
        let mut slot = self
            .link
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(link) = slot.as_ref() {
            // A master that closed the connection while it was idle would otherwise fail this
            // call, and with an idle timeout every master does so at once.
            if !link.wire.is_broken_or_closed() {
                return (link.id, link.wire.clone());
            }
            tracing::debug!(
                node = self.addr,
                "connection broken or closed by the master; connecting anew"
            );
            // What was known of the node (its script cache, its health) is for the old
            // connection; the master behind a new one may have restarted.
            self.loaded.store(0, Ordering::Relaxed);
        }
        let wire = self.dialer().dial();
        let link = Link {
            id: self.last_link.fetch_add(1, Ordering::Relaxed) + 1,
            wire,
        };
        let connected = (link.id, link.wire.clone());
        *slot = Some(link);
        connected
    }

    /// The current connection, if there is one (perhaps still being made, perhaps broken).
    pub(super) fn current_link(&self) -> Option<(LinkId, Wire)> {
        let slot = self
            .link
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slot.as_ref().map(|link| (link.id, link.wire.clone()))
    }

    /// Waits until the current connection has answered every command sent on it so far (a
    /// `PING` sent behind them is answered), or breaks; with no connection, at once. The
    /// answers it reads are handed to their calls, detached or not, as any reader's are.
    pub(crate) async fn flush(&self) -> Result<(), NodeFailureKind> {
        let Some((id, wire)) = self.current_link().filter(|(_, wire)| !wire.is_broken()) else {
            return Ok(());
        };
        let ping = redis::cmd("PING");
        match wire
            .call(None, 1, |out| ping.write_packed_command(out))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(self.failed(Operation::Inspect, &e, id)),
        }
    }

    /// What makes new connections to this node, for those who make their own (the release
    /// subscription).
    pub(crate) fn dialer(&self) -> Dialer {
        Dialer {
            info: self.client.get_connection_info().clone(),
            metrics: self.metrics.clone(),
            background: self.shared.background.clone(),
            tls: self.tls.clone(),
            timeout: self.settings.connect_timeout,
        }
    }

    /// Drops connection `id` if it is still the current one: the next call connects anew, and
    /// what was known of the node (its script cache, its health) is for the old connection.
    fn retire_link(&self, id: LinkId) {
        let mut slot = self
            .link
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.as_ref().is_some_and(|link| link.id == id) {
            *slot = None;
        }
        self.loaded.store(0, Ordering::Relaxed);
    }

    /// Books a failed call; a connection failure retires the connection, since the next one
    /// may be to a restarted node, with an empty script cache and a new uptime.
    pub(super) fn failed(&self, op: Operation, e: &RedisError, link: LinkId) -> NodeFailureKind {
        let kind = classify(e);
        if matches!(kind, NodeFailureKind::Connection(_)) || e.is_unrecoverable_error() {
            self.retire_link(link);
            self.health().error = Some(e.to_string());
        }
        self.metrics.failure(op, kind.as_str());
        kind
    }
}

fn classify(e: &RedisError) -> NodeFailureKind {
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
        NodeFailureKind::Connection(e.to_string())
    } else if matches!(
        e.kind(),
        ErrorKind::Server(_) | ErrorKind::AuthenticationFailed | ErrorKind::Extension
    ) {
        NodeFailureKind::Server(e.to_string())
    } else {
        NodeFailureKind::Protocol(e.to_string())
    }
}

/// Makes connections to one node.
#[derive(Debug, Clone)]
pub(crate) struct Dialer {
    info: redis::ConnectionInfo,
    metrics: std::sync::Arc<crate::metrics::NodeMetrics>,
    background: std::sync::Arc<super::detached::Background>,
    tls: Option<super::Tls>,
    timeout: std::time::Duration,
}

impl Dialer {
    /// A new connection, made in the background: commands sent on it go out once it is up and
    /// logged in.
    pub(crate) fn dial(&self) -> Wire {
        self.dial_then(&[], None)
    }

    /// A subscription to `channel`: a connection whose values, once it is up, are messages. It
    /// reads its master's process (`INFO server`) before it subscribes, so that every message
    /// it carries is known to come from that process (`Listening::identity`): a grant counts
    /// only by a reading of the process that made it.
    pub(crate) fn subscribe(&self, channel: &str) -> Wire {
        let mut subscribe = redis::cmd("SUBSCRIBE");
        subscribe.arg(channel);
        self.dial_then(
            &[redis::cmd("INFO").arg("server").to_owned(), subscribe],
            Some(0),
        )
    }

    /// A connection whose login is followed by `then`: a subscriber's when `identify_at` is
    /// given, the place in `then` of its `INFO server`.
    fn dial_then(&self, then: &[redis::Cmd], identify_at: Option<usize>) -> Wire {
        let mut login = login_commands(&self.info);
        let identify_at = identify_at.map(|at| at + login.len());
        login.extend_from_slice(then);
        let (wire, login) = Wire::connecting(
            self.metrics.clone(),
            self.background.clone(),
            &login,
            identify_at.is_some(),
        );
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(dial(
                    wire.clone(),
                    login,
                    identify_at,
                    self.info.clone(),
                    self.tls.clone(),
                    self.timeout,
                ));
            }
            Err(_) => wire.fail(std::io::Error::other("no Tokio runtime to connect on").into()),
        }
        wire
    }
}
