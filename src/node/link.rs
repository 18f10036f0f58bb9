//! The connections to one node: numbered, made in the background on first use, retired when
//! they fail, and how a failed call is booked.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use redis::aio::MultiplexedConnection;
use redis::{ErrorKind, RedisError, RedisResult};

use super::Node;
use crate::error::{NodeFailureKind, Operation};

/// The number of a connection to a node, unique for the node's life.
pub(crate) type LinkId = u64;

/// A connection to the node, or its connect under way (shared by every caller waiting for it).
#[derive(Clone)]
pub(super) struct Link {
    pub(super) id: LinkId,
    connecting: Shared<BoxFuture<'static, RedisResult<MultiplexedConnection>>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("id", &self.id).finish()
    }
}

impl Node {
    /// The current connection, or the connect under way: a new one (with a new number) when
    /// there is none. The connect is driven in the background too, so that callers that give up
    /// at their deadline do not stall it.
    fn current_link(&self) -> Link {
        let mut slot = self
            .link
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(link) = slot.as_ref() {
            return link.clone();
        }
        let client = self.client.clone();
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.settings.connect_timeout))
            // Deadlines are the fan-out's business; a response timeout here would only make a
            // second, competing one.
            .set_response_timeout(None);
        let connecting = async move {
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await
        }
        .boxed()
        .shared();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(connecting.clone().map(drop));
        }
        let link = Link {
            id: self.last_link.fetch_add(1, Ordering::Relaxed) + 1,
            connecting,
        };
        *slot = Some(link.clone());
        link
    }

    /// The connection to send on, and its number; waits for the connect if one is under way.
    pub(super) async fn connect(
        &self,
        op: Operation,
    ) -> std::result::Result<(LinkId, MultiplexedConnection), NodeFailureKind> {
        let link = self.current_link();
        match link.connecting.await {
            Ok(conn) => {
                self.connected.store(true, Ordering::Relaxed);
                Ok((link.id, conn))
            }
            Err(e) => {
                // Whatever failed (the network, the login), the next call tries a new connect
                // rather than meet this one's error again.
                self.retire_link(link.id);
                Err(self.failed(op, &e, link.id))
            }
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
            self.connected.store(false, Ordering::Relaxed);
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

/// TCP options of every connection to a node: `stall` is the connect timeout, at least 1 s.
///
/// A node cut off by the network neither answers nor says so: the commands sent sit in the
/// socket while TCP resends them at ever longer intervals, and after the network comes back the
/// connection can stay silent for seconds more. Commands past their deadline do not close it,
/// and must not: a paused node runs the commands it was sent when it resumes, the release
/// after the grant. `TCP_USER_TIMEOUT` closes it once sent bytes have gone unacknowledged by
/// the node's kernel (which acknowledges for a paused process too) for `stall`, and the next
/// command connects anew; keepalive probes do the same for a connection that only listens,
/// like the release subscription.
pub(super) fn tcp_settings(stall: Duration) -> redis::io::tcp::TcpSettings {
    let settings = redis::io::tcp::TcpSettings::default();
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "fuchsia"))]
    let settings = {
        let stall = stall.max(Duration::from_secs(1));
        settings.set_user_timeout(stall).set_keepalive(
            redis::io::tcp::socket2::TcpKeepalive::new()
                .with_time(stall)
                .with_interval(stall),
        )
    };
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "fuchsia")))]
    let _ = stall;
    settings
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
