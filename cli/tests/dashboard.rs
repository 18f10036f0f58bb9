//! The Grafana dashboard (`docker/grafana/dashboards/redquorum.json`): its queries count each
//! master once, however many coordinators report on it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use serde_json::Value;

/// Every `expr` of the dashboard, wherever it sits.
fn exprs(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr", Value::String(expr)) => found.push(expr.clone()),
                    _ => exprs(v, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| exprs(v, found)),
        _ => {}
    }
}

#[test]
fn per_node_gauges_are_taken_once_per_node_before_any_sum() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docker/grafana/dashboards/redquorum.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let mut found = Vec::new();
    exprs(&dashboard, &mut found);
    assert!(!found.is_empty(), "no queries in {}", path.display());
    // Every coordinator reports its own reading of each master: summed as they are, two
    // coordinators would count every master twice. One reading per master first.
    for gauge in [
        "redquorum_node_up",
        "redquorum_node_quarantined",
        "redquorum_node_durable",
    ] {
        for expr in found.iter().filter(|e| e.contains(gauge)) {
            assert!(
                expr.contains(&format!("max by (node) ({gauge})")),
                "{gauge} is not taken once per node: {expr}"
            );
        }
    }
}
