//! The deployment files in `deploy/`: the Prometheus alert rules pass `promtool check
//! rules` and their unit tests on synthetic series (`promtool test rules`), and every
//! query of the Grafana dashboard parses as PromQL. promtool comes with Debian's
//! `prometheus` package (`./dev deps` installs it); without it these tests say so and pass.

#[path = "support/deploy.rs"]
mod deploy;

use std::process::{Command, Output};

/// Runs `promtool ARGS` in `deploy/prometheus`; `None` (with the reason printed) when
/// promtool is not installed.
fn promtool(args: &[&str]) -> Option<Output> {
    match Command::new("promtool")
        .args(args)
        .current_dir(deploy::path("prometheus"))
        .output()
    {
        Ok(out) => Some(out),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipped: promtool not found (the prometheus package; ./dev deps)");
            None
        }
        Err(e) => panic!("run promtool: {e}"),
    }
}

fn assert_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let rules = deploy::path(deploy::RULES);
    let tests = deploy::path(deploy::RULE_TESTS);
    let Some(check) = promtool(&["check", "rules", rules.to_str().expect("utf-8")]) else {
        return;
    };
    assert_success(&check, "promtool check rules");
    let Some(test) = promtool(&["test", "rules", tests.to_str().expect("utf-8")]) else {
        return;
    };
    assert_success(&test, "promtool test rules");
}

#[test]
fn dashboard_queries_parse_as_promql() {
    // promtool parses PromQL in rule files: one recording rule per query.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("dashboard-queries.yml");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, q) in deploy::dashboard_queries().iter().enumerate() {
        let q = deploy::as_promql(q);
        rules += &format!("      - record: poolcap:dashboard_query_{i}\n        expr: {q:?}\n");
    }
    std::fs::write(&file, rules).expect("write the queries");
    let Some(out) = promtool(&["check", "rules", file.to_str().expect("utf-8")]) else {
        return;
    };
    assert_success(&out, "the dashboard's queries");
}
