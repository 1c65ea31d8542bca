//! Messages through the logger: `--log-format json` writes each one as a JSON object on a
//! line (time, level, target, message), `-q` keeps only warnings and errors; the final
//! accounting is printed as on a terminal either way. Run on `capture -r` of a small pcap
//! written here, without privileges.

use std::path::Path;
use std::process::{Command, Output};

#[path = "support/mix.rs"]
mod mix;

use mix::{write_pcap, FRAMES};

fn poolcap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poolcap"))
        .args(args)
        .output()
        .expect("run poolcap")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `poolcap LOG_FLAGS capture -r FILE -w DIR/out.pcap`, which must succeed.
fn read_file(dir: &Path, log_flags: &[&str]) -> String {
    let file = dir.join("in.pcap");
    write_pcap(&file);
    let written = dir.join("out.pcap");
    let mut args = log_flags.to_vec();
    args.extend(["capture", "-r", s(&file), "-w", s(&written)]);
    let out = poolcap(&args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    stderr(&out)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A JSON log line's fields; panics unless it has a time (RFC 3339), a level, a target and
/// a message.
fn fields(line: &str) -> (String, String) {
    let v: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    let field = |k: &str| {
        v[k].as_str()
            .unwrap_or_else(|| panic!("no `{k}` in {line}"))
            .to_string()
    };
    let time = field("time");
    humantime::parse_rfc3339(&time).unwrap_or_else(|e| panic!("time `{time}`: {e}"));
    assert!(field("target").starts_with("poolcap"), "{line}");
    (field("level"), field("message"))
}

#[test]
fn json_log_lines_are_objects_and_the_accounting_stays_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = read_file(dir.path(), &["--log-format", "json"]);
    let (json, text): (Vec<&str>, Vec<&str>) = err.lines().partition(|l| l.starts_with('{'));
    let messages: Vec<(String, String)> = json.iter().map(|l| fields(l)).collect();
    assert!(
        messages
            .iter()
            .any(|(level, m)| level == "info" && m.starts_with("reading from file in.pcap")),
        "{err}"
    );
    assert!(
        text.contains(&format!("{FRAMES} packets written, 0 not written").as_str()),
        "the accounting as on a terminal:\n{err}"
    );
    // An error: one JSON line, still one line.
    let out = poolcap(&["--log-format", "json", "capture", "-r", "/nonexistent.pcap"]);
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(lines.len(), 1, "{err}");
    let (level, message) = fields(lines[0]);
    assert_eq!(level, "error");
    assert!(
        message.starts_with("poolcap: cannot read /nonexistent.pcap"),
        "{message}"
    );
}

#[test]
fn quiet_keeps_the_accounting_but_not_the_start_up_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let said = read_file(dir.path(), &[]);
    let quiet = read_file(dir.path(), &["-q"]);
    let accounting = format!("{FRAMES} packets written, 0 not written");
    for (err, what) in [(&said, "default"), (&quiet, "-q")] {
        assert!(err.contains(&accounting), "{what}:\n{err}");
    }
    assert!(said.contains("reading from file in.pcap"), "{said}");
    assert!(!quiet.contains("reading from file"), "-q:\n{quiet}");
    let verbose = read_file(dir.path(), &["-v"]);
    assert!(
        verbose.contains("reading from file in.pcap"),
        "-v:\n{verbose}"
    );
}
