//! The Prometheus recorder and per-request metrics and logs, labelled by route template.

use std::sync::OnceLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing::Instrument;

/// Counter, labels `route` (the template, never a lock name), `method` (one of HTTP's own, or
/// `other`), `status`.
pub const HTTP_REQUESTS: &str = "redquorum_http_requests_total";
/// Histogram, labels `route`, `method`: time to the response's head (a session's stream runs on).
pub const HTTP_REQUEST_DURATION: &str = "redquorum_http_request_duration_seconds";
/// Gauge: session streams open.
pub const SESSIONS_OPEN: &str = "redquorum_sessions_open";

/// Histogram buckets in seconds, from a tenth of a millisecond (loopback) to ten seconds (a
/// long wait).
const BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the Prometheus recorder as the process's global recorder (once; later calls,
/// concurrent ones included, return the same handle), or `None` when another recorder was
/// installed first. Install it before building the [`Client`](redquorum::Client) whose
/// metrics it should see.
pub fn install() -> Option<PrometheusHandle> {
    HANDLE.get_or_init(install_recorder).clone()
}

/// The recorder, installed and its metrics described.
fn install_recorder() -> Option<PrometheusHandle> {
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &BUCKETS)
        .ok()?;
    let handle = builder.install_recorder().ok()?;
    redquorum::metrics::describe();
    metrics::describe_counter!(
        HTTP_REQUESTS,
        "HTTP requests by route template, method and status"
    );
    metrics::describe_histogram!(
        HTTP_REQUEST_DURATION,
        metrics::Unit::Seconds,
        "HTTP request latency"
    );
    metrics::describe_gauge!(SESSIONS_OPEN, "Session streams open");
    metrics::describe_counter!(
        super::limits::HTTP_REFUSED,
        "Requests and connections refused at a limit, by limit"
    );
    // There from the start, at 0, so that increase() sees the first refusal.
    for limit in super::limits::LIMITS {
        metrics::counter!(super::limits::HTTP_REFUSED, "limit" => limit).absolute(0);
    }
    Some(handle)
}

/// Counts, times and logs every request, labelled by its route template. The log line is at
/// debug level (`RUST_LOG=redquorum_cli=debug` shows every request): at info it would write
/// one line per lock operation, which costs a busy coordinator more than the rest of the
/// request's own work; the metrics count every request at every level.
pub(crate) async fn track(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |m| m.as_str().to_owned());
    let method = method_label(req.method());
    let started = Instant::now();
    let span = tracing::debug_span!("request", method = %req.method(), route = %route, status = tracing::field::Empty);
    let response = next.run(req).instrument(span.clone()).await;
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    span.record("status", status);
    metrics::counter!(HTTP_REQUESTS, "route" => route.clone(), "method" => method, "status" => status.to_string())
        .increment(1);
    metrics::histogram!(HTTP_REQUEST_DURATION, "route" => route, "method" => method)
        .record(elapsed.as_secs_f64());
    tracing::debug!(parent: &span, latency_ms = elapsed.as_secs_f64() * 1e3, "request");
    response
}

/// The method as a label: HTTP's own methods by name, any other as `other`. Clients choose the
/// method, and a series for each one they make up would let them grow the metrics without
/// bound.
fn method_label(method: &Method) -> &'static str {
    const STANDARD: [(Method, &str); 9] = [
        (Method::GET, "GET"),
        (Method::POST, "POST"),
        (Method::PUT, "PUT"),
        (Method::DELETE, "DELETE"),
        (Method::HEAD, "HEAD"),
        (Method::OPTIONS, "OPTIONS"),
        (Method::PATCH, "PATCH"),
        (Method::CONNECT, "CONNECT"),
        (Method::TRACE, "TRACE"),
    ];
    STANDARD
        .iter()
        .find(|(standard, _)| standard == method)
        .map_or("other", |(_, label)| label)
}
