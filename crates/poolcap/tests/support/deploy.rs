//! The queries of the deployment files in `deploy/` (the Grafana dashboard, the Prometheus
//! alert rules) and the metric names they use, shared by the test crates.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::PathBuf;

/// A file under the repository's `deploy/`.
pub(crate) fn path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(rel)
}

/// The Prometheus alert rules.
pub(crate) const RULES: &str = "prometheus/poolcap-rules.yml";
/// Their promtool unit tests.
pub(crate) const RULE_TESTS: &str = "prometheus/poolcap-rules.test.yml";
/// The Grafana dashboard.
pub(crate) const DASHBOARD: &str = "grafana/poolcap.json";

/// Every query of the dashboard's panels, as Grafana stores it.
pub(crate) fn dashboard_queries() -> Vec<String> {
    let text = std::fs::read_to_string(path(DASHBOARD)).expect("read the dashboard");
    let d: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let panels = d["panels"].as_array().expect("panels");
    let queries: Vec<String> = panels
        .iter()
        .filter_map(|p| p["targets"].as_array())
        .flatten()
        .map(|t| {
            t["expr"]
                .as_str()
                .expect("every target has an expr")
                .to_string()
        })
        .collect();
    assert!(!queries.is_empty(), "no queries in the dashboard");
    queries
}

/// Every alert's expression in the rules file (each on its `expr:` line).
pub(crate) fn rule_queries() -> Vec<String> {
    let text = std::fs::read_to_string(path(RULES)).expect("read the rules");
    let exprs: Vec<String> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr:"))
        .map(|e| e.trim().to_string())
        .collect();
    assert!(!exprs.is_empty(), "no expressions in the rules");
    exprs
}

/// The metric names a query uses: poolcap's own (`poolcap_`) and the process metrics
/// (`process_`). Prometheus's own series (`up`) and functions are not poolcap's.
pub(crate) fn metric_names(query: &str) -> BTreeSet<String> {
    query
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|t| t.starts_with("poolcap_") || t.starts_with("process_"))
        .map(str::to_string)
        .collect()
}

/// A dashboard query as plain PromQL: Grafana's variables replaced by what they stand for.
pub(crate) fn as_promql(query: &str) -> String {
    query
        .replace("$__rate_interval", "5m")
        .replace("$job", ".*")
        .replace("$instance", ".*")
}
