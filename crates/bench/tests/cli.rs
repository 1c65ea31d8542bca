//! `poolcap-bench`'s command line without privileges: what it accepts, and one-line errors
//! with exit code 2 for what it does not. (The suites themselves run as root in poolcap's
//! root tests, through `poolcap bench`; this test also makes `cargo test --workspace` build
//! the `poolcap-bench` executable they run.)

use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poolcap-bench"))
        .args(args)
        .output()
        .expect("run poolcap-bench")
}

fn one_line_usage_error(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("poolcap-bench: "), "{err}");
    err
}

#[test]
fn help_lists_every_suite_and_the_subcommands() {
    let out = bench(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for word in [
        "gen", "capture", "disk", "forward", "all", "report", "export", "sim", "validate",
    ] {
        assert!(text.contains(word), "{word} missing: {text}");
    }
}

#[test]
fn bad_usage_is_one_line_and_exit_code_2() {
    let err = one_line_usage_error(&bench(&["nosuch"]));
    assert!(err.contains("'nosuch'"), "{err}");
    let err = one_line_usage_error(&bench(&["gen", "--runs", "0"]));
    assert!(err.contains("--runs must be at least 1"), "{err}");
    let err = one_line_usage_error(&bench(&["gen", "--subject", "/nonexistent/poolcap"]));
    assert!(
        err.contains("--subject: no file /nonexistent/poolcap"),
        "{err}"
    );
    let err = one_line_usage_error(&bench(&["validate", "/nonexistent"]));
    assert!(err.contains("no /nonexistent/raw.jsonl"), "{err}");
    // A suite and a subcommand do not mix.
    one_line_usage_error(&bench(&["sim", "gen"]));
}

#[test]
fn sim_prints_its_table_and_a_burst_loses_what_the_engine_loses() {
    // The burst of the bench crate's a_burst_is_lost_where_the_engines_shell_loses_it,
    // through the command line: the report's format and its counts.
    let out = bench(&[
        "sim",
        "--queues",
        "1",
        "--pool",
        "32,16",
        "--ring",
        "100",
        "--cost-ns",
        "1000000",
        "--arrivals",
        "constant",
        "--rate",
        "1000M",
        "--seconds",
        "0.000001",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("queue  offered/s     arrived   processed  drop:kern  drop:pool"),
        "{text}"
    );
    let all: Vec<&str> = text
        .lines()
        .find(|l| l.trim_start().starts_with("all"))
        .expect("a total line")
        .split_whitespace()
        .collect();
    assert_eq!(all[2..6], ["1000", "580", "420", "0"], "{text}");
    assert!(
        text.contains("drop rate 42.000% (kernel 42.000%, pool 0.000%)"),
        "{text}"
    );
}
