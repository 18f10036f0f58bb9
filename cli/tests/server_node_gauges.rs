//! `/metrics` on a coordinator with no lock traffic: the node gauges say how the masters are at
//! the scrape, and the counters whose labels are known are there at 0. In a file of its own
//! because the Prometheus recorder is global to the process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The harness the library's tests use (local masters, test-tuned clients), shared as is.
#[path = "../../tests/common/mod.rs"]
mod common;
mod http_common;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use http_common::metric_value as value;
use redquorum_cli::server::AppOptions;
use tower::ServiceExt;

/// Waits until the scrapes' shared reading of the masters (at most a second old) has aged
/// out, so that the next scrape reads the masters as they are now.
async fn a_fresh_reading_is_due() {
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
}

async fn scrape(app: &Router) -> String {
    let req = Request::builder()
        .uri("/metrics")
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(req).await.unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_gauges_are_read_at_each_scrape() {
    let handle = redquorum_cli::server::install_metrics().expect("recorder installed");
    let mut nodes = common::nodes(3);
    let client = common::patient_client(&nodes);
    let addrs = client.nodes();
    let app = redquorum_cli::server::app(
        client,
        AppOptions {
            metrics: Some(handle),
            ..AppOptions::default()
        },
    );
    // No lock traffic at all: every master answers, and none keeps its writes (no AOF in
    // tests).
    let text = scrape(&app).await;
    for node in &addrs {
        let gauge = |name: &str| value(&text, &format!(r#"{name}{{node="{node}"}}"#));
        assert_eq!(gauge("redquorum_node_up"), Some(1.0), "{node}: {text}");
        assert_eq!(gauge("redquorum_node_durable"), Some(0.0), "{node}: {text}");
        // A new deployment's masters carry no marker yet; the first acquire marks them, none
        // in quarantine.
        assert_eq!(
            gauge("redquorum_node_quarantined"),
            Some(0.0),
            "{node}: {text}"
        );
    }
    // The counters whose labels are known are there from the start, at 0, so that
    // Prometheus' increase() and rate() see their first event: a lost lock, an operation
    // without a quorum, a master's first outage, a first hand-over.
    let kinds = ["mutex", "reentrant", "read", "write", "semaphore"];
    let operations = ["acquire", "extend", "release", "inspect"];
    let mut zeros = Vec::new();
    for kind in kinds {
        zeros.push(format!(r#"redquorum_locks_lost_total{{kind="{kind}"}} "#));
        for outcome in ["extended", "lost", "unavailable"] {
            zeros.push(format!(
                r#"redquorum_extensions_total{{kind="{kind}",outcome="{outcome}"}} "#
            ));
        }
        for outcome in ["released", "not_held", "unavailable"] {
            zeros.push(format!(
                r#"redquorum_releases_total{{kind="{kind}",outcome="{outcome}"}} "#
            ));
        }
        for outcome in ["renewed", "failed", "lost", "limit"] {
            zeros.push(format!(
                r#"redquorum_renewals_total{{kind="{kind}",outcome="{outcome}"}} "#
            ));
        }
    }
    for operation in operations {
        zeros.push(format!(
            r#"redquorum_quorum_failures_total{{operation="{operation}"}} "#
        ));
        for node in &addrs {
            for kind in ["timeout", "connection"] {
                zeros.push(format!(
                    r#"redquorum_node_errors_total{{node="{node}",operation="{operation}",kind="{kind}"}} "#
                ));
            }
        }
    }
    for outcome in ["taken", "adopted", "given_back"] {
        zeros.push(format!(
            r#"redquorum_handovers_total{{outcome="{outcome}"}} "#
        ));
    }
    for series in &zeros {
        assert_eq!(value(&text, series), Some(0.0), "{series}: {text}");
    }
    // A master stopped while no lock is asked for is down at the next scrape.
    nodes.kill(1).unwrap();
    a_fresh_reading_is_due().await;
    let text = scrape(&app).await;
    let up =
        |text: &str, node: &str| value(text, &format!(r#"redquorum_node_up{{node="{node}"}}"#));
    assert_eq!(up(&text, &addrs[1]), Some(0.0), "{text}");
    assert_eq!(up(&text, &addrs[0]), Some(1.0), "{text}");
    // And up again at the next one after it is back.
    nodes.restart(1).unwrap();
    a_fresh_reading_is_due().await;
    let text = scrape(&app).await;
    assert_eq!(up(&text, &addrs[1]), Some(1.0), "{text}");
    // A paused master keeps its connection open and answers nothing: down as well.
    nodes.pause(2).unwrap();
    a_fresh_reading_is_due().await;
    let text = scrape(&app).await;
    nodes.resume(2).unwrap();
    assert_eq!(up(&text, &addrs[2]), Some(0.0), "{text}");
    a_fresh_reading_is_due().await;
    let text = scrape(&app).await;
    assert_eq!(up(&text, &addrs[2]), Some(1.0), "{text}");
}
