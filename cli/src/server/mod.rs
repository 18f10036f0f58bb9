//! The HTTP coordinator: the lock API over JSON, sessions held by a streaming response, health
//! probes and Prometheus metrics. `app` builds the router (tests call it without a socket);
//! `serve` runs it on listeners until a shutdown signal.
//!
//! The API is described in `docs/http-api.md`.

mod auth;
mod departure;
mod error;
mod health;
mod http_metrics;
mod inline;
mod inspect;
mod kind;
mod limits;
mod multi;
mod request;
mod routes;
mod session;
mod unique_json;
mod units;

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use inline::Inline;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use auth::BearerToken;
pub use error::ApiError;
pub use http_metrics::{
    HTTP_REQUEST_DURATION, HTTP_REQUESTS, SESSIONS_OPEN, install as install_metrics,
};
pub use kind::MAX_OWNER_BYTES;
pub use limits::{
    DEFAULT_MAX_SESSIONS, DEFAULT_MAX_WAITING, DEFAULT_MAX_WAITING_PER_NAME, HTTP_REFUSED,
    ServiceLimits,
};
pub use request::MAX_BODY_BYTES;
pub use routes::{MAX_HTTP_WAIT, doctor_json};

use redquorum::Client;

/// How long a client may leave the server waiting, unless configured: for the head of its next
/// request on an open connection, and for a request's body. Longer than the idle timeout of
/// the load balancers usually put in front (60 s by default on the common ones), so that the
/// server does not close a connection that a balancer is about to reuse.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(75);

/// How long, after the stop signal, a connection may take to finish the request it is on.
/// Requests that could wait longer (acquires with a wait) are answered at once instead.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// What the handlers share.
#[derive(Clone, Debug)]
pub struct AppState {
    pub(crate) client: Client,
    pub(crate) shutdown: CancellationToken,
    /// The masters' health for the open probes.
    pub(crate) health: health::SharedHealth,
    /// The sessions and waiting acquires under way, against their limits.
    pub(crate) admission: std::sync::Arc<limits::Admission>,
}

/// How the app is put together.
#[derive(Clone, Debug, Default)]
pub struct AppOptions {
    /// Required on every `/v1` request when set.
    pub auth: Option<BearerToken>,
    /// Serves `GET /metrics` from this handle when set.
    pub metrics: Option<PrometheusHandle>,
    /// Cancelled when the server shuts down: sessions release their locks and end, and waiting
    /// acquires give up their place and are answered `shutting_down`.
    pub shutdown: CancellationToken,
    /// How many sessions and waiting acquires are served at once.
    pub limits: ServiceLimits,
}

/// How `serve` treats its connections.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// A connection that sends no complete request head for this long, counted from when it
    /// opened or from its last answer, is closed: idle keep-alive connections, and requests
    /// that arrive too slowly to be served. A body not all in within as long after its head is
    /// answered `body_timeout`.
    pub idle_timeout: Duration,
    /// After the stop signal, how long a connection may take to finish the request it is on
    /// before it is closed.
    pub shutdown_grace: Duration,
    /// Connections open at once; one more is answered `503 too_many_connections` and closed.
    pub max_connections: usize,
}

/// Default for [`ConnectionLimits::max_connections`]: below the descriptors a process is
/// usually allowed (each connection takes two, and a third while a request on it waits).
pub const DEFAULT_MAX_CONNECTIONS: usize = 4_096;

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// The router: `/v1/locks/...`, `/v1/multi...` and `/v1/doctor` (behind the bearer token, if
/// any), `/healthz`, `/readyz`, and `/metrics` when a handle is given.
pub fn app(client: Client, options: AppOptions) -> Router {
    let state = AppState {
        health: health::SharedHealth::new(client.clone()),
        client,
        shutdown: options.shutdown,
        admission: limits::Admission::new(options.limits),
    };
    let api = Router::new()
        .route(
            "/v1/locks/{name}",
            post(routes::acquire).get(inspect::inspect),
        )
        .route("/v1/locks/{name}/extend", post(routes::extend))
        .route("/v1/locks/{name}/release", post(routes::release))
        .route("/v1/locks/{name}/session", post(session::session))
        .route("/v1/multi", post(multi::acquire))
        .route("/v1/multi/extend", post(multi::extend))
        .route("/v1/multi/release", post(multi::release))
        .route("/v1/doctor", get(routes::doctor));
    let mut router = Router::new()
        .merge(api)
        .route("/healthz", get(routes::healthz))
        .route("/readyz", get(routes::readyz));
    if let Some(handle) = options.metrics {
        router = router.merge(shared_metrics_router(handle, state.health.clone()));
    }
    let router = router
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .with_state(state);
    // Around the whole router, not its `/v1` routes alone: a `404` or `405` answered before
    // the token was checked would tell anyone which routes exist. Without a token no layer at
    // all: every layer is a boxed future more per request.
    let router = match options.auth {
        Some(token) => router.layer(axum::middleware::from_fn_with_state(
            token,
            auth::require_on_api,
        )),
        None => router,
    };
    router.layer(axum::middleware::from_fn(http_metrics::track))
}

/// The router of a separate metrics listener: `GET /metrics`, and the probes, `/healthz` and
/// `/readyz`, which then answer on connections of their own, whatever load the API's listener
/// is under (its connections at their limit, say). Each scrape reads the masters' health first
/// (a reading at most a second old is shared, see `health.rs`): the node gauges (up, durable,
/// quarantined) are otherwise set only by lock traffic, and would show an idle coordinator's
/// masters as down, or a quarantine long over as still on.
pub fn metrics_router<S: Clone + Send + Sync + 'static>(
    handle: PrometheusHandle,
    client: Client,
) -> Router<S> {
    let health = health::SharedHealth::new(client);
    let probed = health.clone();
    shared_metrics_router(handle, health)
        .route("/healthz", get(routes::healthz))
        .route(
            "/readyz",
            get(move || {
                let health = probed.clone();
                async move { routes::readiness(&health).await }
            }),
        )
}

/// [`metrics_router`] on a reading shared with other routes.
fn shared_metrics_router<S: Clone + Send + Sync + 'static>(
    handle: PrometheusHandle,
    health: health::SharedHealth,
) -> Router<S> {
    Router::new().route(
        "/metrics",
        get(move || {
            let (handle, health) = (handle.clone(), health.clone());
            async move {
                health.read().await;
                handle.run_upkeep();
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4",
                    )],
                    handle.render(),
                )
            }
        }),
    )
}

/// The next connection on `listener`, with `TCP_NODELAY` on. An answer is a small write that
/// a client waits for, and a session's stream writes each event as it comes; Nagle's algorithm
/// would hold either back while an earlier segment is unacknowledged, up to the client's
/// delayed-acknowledgement timer.
async fn accept(listener: &TcpListener) -> std::io::Result<TcpStream> {
    let (stream, _) = listener.accept().await?;
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!("could not set TCP_NODELAY on a connection: {e}");
    }
    Ok(stream)
}

/// Serves `router` on every connection `listener` accepts (HTTP/1.1, keep-alive) until `stop`
/// is cancelled; then stops accepting, lets each connection finish the request it is on
/// within `limits.shutdown_grace`, closes the others (idle ones at once), and returns once they
/// are all closed.
pub(crate) async fn serve_http(
    listener: TcpListener,
    router: Router,
    stop: CancellationToken,
    limits: ConnectionLimits,
) {
    // Request bodies are read by the handlers; they find their time limit here.
    let router = router.layer(axum::Extension(request::BodyTimeout(limits.idle_timeout)));
    let connections = TaskTracker::new();
    loop {
        let stream = tokio::select! {
            () = stop.cancelled() => break,
            accepted = accept(&listener) => match accepted {
                Ok(stream) => stream,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of file descriptors, most likely: wait for some to be closed rather
                    // than spin.
                    tracing::warn!("cannot accept a connection: {e}");
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep(ACCEPT_RETRY) => continue,
                    }
                }
            },
        };
        if connections.len() >= limits.max_connections {
            connections.spawn(refuse_connection(stream));
            continue;
        }
        let service = with_departure(router.clone(), &stream);
        let stop = stop.clone();
        // Polled in place when hyper wakes the connection from inside its own poll (see
        // `inline.rs`).
        connections.spawn(Inline::new(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.idle_timeout)
                // A client that closes its sending side after its request still gets the
                // answer; one that waits is watched for leaving (see `departure.rs`).
                .half_close(true)
                .serve_connection(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = stop.cancelled() => {
                    // Closes the connection if it is between requests; but one that has sent
                    // nothing yet, or part of a request, counts as busy, and would hold the
                    // shutdown up for as long as its client keeps it open.
                    connection.as_mut().graceful_shutdown();
                    match tokio::time::timeout(limits.shutdown_grace, connection).await {
                        Ok(result) => result,
                        Err(_) => {
                            tracing::info!(
                                "closing a connection still busy {:?} after the stop signal",
                                limits.shutdown_grace
                            );
                            return;
                        }
                    }
                }
            };
            if let Err(e) = result {
                tracing::debug!("connection ended with an error: {e}");
            }
        }));
    }
    // Closed before the connections in flight are waited for: a client that connected now
    // would be accepted by the kernel and then never served, and reset when the process exits.
    // Closed, the port refuses it at once, and the client can go to another instance.
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// Answers a connection past [`ConnectionLimits::max_connections`] with `503
/// too_many_connections`, without reading its request, and closes it: at once, so that the
/// client can go to another instance, where a connection left in the listen queue would wait.
async fn refuse_connection(mut stream: TcpStream) {
    use tokio::io::AsyncWriteExt;
    limits::refused("connections");
    const BODY: &str = r#"{"error":"too_many_connections","message":"this server has its most connections open; retry, or ask another instance"}"#;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    let writing = async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await
    };
    // A client that reads nothing does not keep the descriptor.
    let _ = tokio::time::timeout(REFUSAL_WRITE_LIMIT, writing).await;
}

/// How long a refused connection may take to take its answer.
const REFUSAL_WRITE_LIMIT: Duration = Duration::from_secs(1);

/// `router` as hyper calls it for one connection on `stream`: each request carries the
/// connection's [`departure::Departure`], which waiting handlers watch.
fn with_departure(
    router: Router,
    stream: &TcpStream,
) -> TowerToHyperService<axum::middleware::AddExtension<Router, departure::Departure>> {
    let departure = departure::Departure::of(stream).unwrap_or_default();
    TowerToHyperService::new(tower_layer::Layer::layer(
        &axum::Extension(departure),
        router,
    ))
}

/// How long to wait before accepting again after an error other than a client's.
const ACCEPT_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Errors of one incoming connection (the client gave up before it was accepted), not of the
/// listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// Serves `router` (and `metrics`, on its own listener, if given) until `shutdown` resolves;
/// then stops accepting, cancels `sessions` (which release their locks and end their
/// streams, and ends waiting acquires), and waits for requests in flight, each for at most
/// `limits.shutdown_grace`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    metrics: Option<(TcpListener, Router)>,
    sessions: CancellationToken,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: ConnectionLimits,
) {
    let stop = CancellationToken::new();
    let trigger = stop.clone();
    tokio::spawn(async move {
        shutdown.await;
        tracing::info!("shutting down: ending sessions and waiting for requests in flight");
        sessions.cancel();
        trigger.cancel();
    });
    let metrics_task = metrics.map(|(listener, router)| {
        let stop = stop.clone();
        tokio::spawn(serve_http(listener, router, stop, limits))
    });
    serve_http(listener, router, stop, limits).await;
    if let Some(task) = metrics_task
        && let Err(e) = task.await
    {
        tracing::warn!("metrics listener task failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_connections_have_nagle_off() -> std::io::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let client = tokio::net::TcpStream::connect(addr).await?;
        let accepted = accept(&listener).await?;
        assert!(
            accepted.nodelay()?,
            "TCP_NODELAY is off on an accepted connection"
        );
        // The default, for contrast: the option is set by the listener, not by the kernel.
        assert!(!client.nodelay()?);
        Ok(())
    }
}
