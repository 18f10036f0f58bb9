//! Whether a connection's client has gone, noticed while a request waits, whatever the HTTP
//! layer has read ahead.
//!
//! hyper looks for a closed connection under a request only while its read buffer is empty:
//! bytes after the request (a trailing `\r\n`, which older clients send, or a pipelined
//! request) hide the close, and a waiting acquire whose client had gone kept its place, was
//! handed the lock, and held it for nobody until its TTL. A [`Departure`] watches a duplicate
//! of the connection's socket, registered on its own, for the peer's end of the stream
//! (`EPOLLRDHUP`) or a reset (`EPOLLHUP`), both of which read as closed; data arriving
//! meanwhile is left for hyper to read.
//!
//! A client that closes only its sending side while it waits cannot be told from one that has
//! gone, and is taken as gone (see docs/http-api.md). hyper itself answers a request whose
//! client half-closed once it has been read (`half_close`): only waiting requests watch.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// A connection's socket, to watch for its client's departure. Cloned into every request on
/// the connection; a request served without a socket (a test calling the router) has none, and
/// its client never departs.
#[derive(Clone, Debug, Default)]
pub(crate) struct Departure(Option<Arc<OwnedFd>>);

impl Departure {
    /// For a connection on `socket`: a duplicate of its descriptor, which hyper's registration
    /// of the socket leaves free to be registered again. `None` when none can be made (no
    /// descriptors left): the connection is served without the watch.
    pub(crate) fn of(socket: &impl AsFd) -> Option<Departure> {
        match socket.as_fd().try_clone_to_owned() {
            Ok(fd) => Some(Departure(Some(Arc::new(fd)))),
            Err(e) => {
                tracing::debug!("cannot watch a connection for its client's departure: {e}");
                None
            }
        }
    }

    /// Resolves when the client has closed its end of the connection (or only its sending
    /// side) or reset it; never, when that cannot be watched.
    pub(crate) async fn departed(&self) {
        if let Some(watch) = self.watch() {
            while let Ok(ready) = watch.ready(Interest::READABLE).await {
                if ready.is_read_closed() {
                    return;
                }
                // Data for hyper to read: wait for what comes next. This registration's
                // readiness is its own; hyper's is untouched, and nothing is read here.
                let _ = watch.try_io(Interest::READABLE, || {
                    Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
                });
            }
        }
        std::future::pending::<()>().await;
    }

    /// The socket registered for readiness, on a descriptor of its own: each wait registers
    /// afresh, so that two waits on one connection (a session's release outliving its
    /// request) never meet one registration twice.
    fn watch(&self) -> Option<TcpStream> {
        let fd = self.0.as_ref()?.try_clone().ok()?;
        TcpStream::from_std(std::net::TcpStream::from(fd))
            .inspect_err(|e| tracing::debug!("cannot watch a connection: {e}"))
            .ok()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Departure {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<Departure>()
            .cloned()
            .unwrap_or_default())
    }
}
