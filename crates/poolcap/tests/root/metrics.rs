//! The `/metrics` endpoint as a service: it keeps answering scrapes while hostile or broken
//! clients connect, and its process stays small. Every client runs in the lab's probe
//! namespace, on its loopback.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use libtest_mimic::Trial;

use crate::common::{
    capture, gen, netns_command, path_str as s, start_probe, tempdir, trial, Background,
};
use crate::deploy;

pub(crate) fn trials() -> Vec<Trial> {
    let t = |name: &'static str, f: fn()| trial(&format!("metrics::{name}"), f);
    vec![
        t(
            "endpoint_answers_beside_idle_huge_and_stalled_clients",
            endpoint_answers_beside_idle_huge_and_stalled_clients,
        ),
        t(
            "build_info_and_process_metrics_describe_the_capture",
            build_info_and_process_metrics_describe_the_capture,
        ),
        t(
            "dashboard_and_alerts_use_only_served_metrics",
            dashboard_and_alerts_use_only_served_metrics,
        ),
    ]
}

/// Where poolcap serves metrics in these tests (each lab namespace has its own loopback).
const METRICS: &str = "127.0.0.1:9464";

/// Scrapes `/metrics` in `netns` with curl; `None` if curl failed (no answer in its time).
fn scrape(netns: &str) -> Option<String> {
    let out = netns_command(netns, "curl")
        // A hang guard: a scrape that gets no answer fails the test instead of blocking it.
        .args(["-sf", "--max-time", "5"])
        .arg(format!("http://{METRICS}/metrics"))
        .output()
        .expect("run curl");
    out.status
        .success()
        .then(|| String::from_utf8(out.stdout).expect("utf-8 reply"))
}

/// Threads of process `pid` now.
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("task dir")
        .count()
}

/// Resident memory of process `pid` now, in kB (`VmRSS`).
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in {status}"))
}

/// Hostile and broken clients of `METRICS`: 500 connections that send nothing, one that
/// sends a 10 MB header line, one that sends a request and never reads. They stay open
/// until the process is stopped.
const HOSTILE: &str = r#"
import socket, sys, threading, time
host, port = sys.argv[1].rsplit(':', 1)
addr = (host, int(port))
idle = []
for _ in range(500):
    s = socket.socket()
    s.connect(addr)
    idle.append(s)
stalled = socket.socket()
stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
stalled.connect(addr)
stalled.sendall(b'GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n')
def huge():
    s = socket.socket()
    s.connect(addr)
    try:
        s.sendall(b'GET /metrics HTTP/1.1\r\nX-Huge: ' + b'a' * (10 << 20) + b'\r\n\r\n')
    except OSError:
        pass
    idle.append(s)
t = threading.Thread(target=huge, daemon=True)
t.start()
t.join(3)
print('hostile clients connected', file=sys.stderr, flush=True)
time.sleep(600)
"#;

/// While 500 idle connections, a 10 MB header and a client that never reads its reply are
/// open, a normal scrape still answers (curl's 5 s limit is a hang guard), the capture has
/// at most a few dozen threads and its resident memory grows by less than 8 MB.
fn endpoint_answers_beside_idle_huge_and_stalled_clients() {
    let lab = crate::common::lab(1);
    let ns = &lab.probe.netns;
    let cap = capture(&lab, &["--metrics", METRICS]);
    let pid = cap.child.id();
    assert!(scrape(ns).is_some(), "a first scrape answers");
    let rss_before = rss_kb(pid);
    let mut cmd = netns_command(ns, "python3");
    cmd.args(["-c", HOSTILE, METRICS]).stdout(Stdio::null());
    let hostile = Background::start(cmd, "hostile clients connected");
    let served = scrape(ns);
    // Let the server take in what the clients sent before measuring it.
    std::thread::sleep(Duration::from_millis(500));
    let (tasks, rss_after) = (threads(pid), rss_kb(pid));
    let (_, hostile_err) = hostile.stop("TERM");
    eprintln!(
        "beside the hostile clients: {tasks} threads, resident {rss_before} -> {rss_after} kB"
    );
    let served = served.unwrap_or_else(|| panic!("no answer beside the hostile clients"));
    assert!(
        served.contains("poolcap_packets_captured_total{queue=\"0\"}"),
        "{served}"
    );
    assert!(
        tasks <= 40,
        "{tasks} threads in the capture (resident {rss_before} -> {rss_after} kB)"
    );
    assert!(
        rss_after < rss_before + 8 * 1024,
        "resident memory grew from {rss_before} kB to {rss_after} kB ({hostile_err})"
    );
    assert!(scrape(ns).is_some(), "a scrape after the hostile clients");
    let (code, stderr) = cap.stop("INT");
    assert_eq!(code, Some(0), "capture: {stderr}");
}

/// The value of an unlabelled (or fully labelled) series in a scrape.
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

fn epoch_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs_f64()
}

/// A capture's scrape says which poolcap runs (`poolcap_build_info{version,backend} 1`)
/// and describes its own process as `/proc` shows it from outside: started during the test,
/// resident memory near its `VmRSS`, open descriptors near the count of `/proc/PID/fd`, and
/// CPU time spent on the traffic.
fn build_info_and_process_metrics_describe_the_capture() {
    let lab = crate::common::lab(1);
    let ns = &lab.probe.netns;
    // /proc/stat's boot time has whole seconds.
    let before = epoch_seconds(SystemTime::now()) - 1.0;
    let cap = capture(&lab, &["--backend", "af_packet", "--metrics", METRICS]);
    let pid = cap.child.id();
    gen(&lab, &["--count", "20000", "--rate", "20k"]);
    let served = scrape(ns).expect("a scrape");
    let after = epoch_seconds(SystemTime::now()) + 1.0;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fd dir")
        .count() as f64;
    let rss = rss_kb(pid) as f64 * 1024.0;
    let (code, stderr) = cap.stop("INT");
    assert_eq!(code, Some(0), "capture: {stderr}");

    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        value(
            &served,
            &format!("poolcap_build_info{{version=\"{version}\",backend=\"af_packet\"}}")
        ),
        1.0
    );
    let started = value(&served, "process_start_time_seconds");
    assert!(
        (before..after).contains(&started),
        "started {started}, test ran {before}..{after}"
    );
    let resident = value(&served, "process_resident_memory_bytes");
    assert!(
        resident > rss / 2.0 && resident < rss * 2.0,
        "resident {resident} bytes, VmRSS {rss} bytes"
    );
    // The scrape's own connection and directory read come and go.
    let open = value(&served, "process_open_fds");
    assert!((open - fds).abs() <= 3.0, "{open} open, {fds} in /proc");
    assert!(
        value(&served, "process_cpu_seconds_total") > 0.0,
        "{served}"
    );
}

/// The metric names in a scrape in the Prometheus text format (what curl gets).
fn served_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// Every metric the Grafana dashboard and the alert rules in `deploy/` use is one poolcap
/// serves, so they cannot drift apart: the names scraped from a probe that writes a file
/// and exports IPFIX (engine, writer, rule, exporter and process families) and from a
/// forwarder with a `--drop` rule (forwarding and policy families) cover every name in
/// their queries.
fn dashboard_and_alerts_use_only_served_metrics() {
    let lab = crate::forward::lab3(1);
    let ns = lab.probe.netns.clone();
    let dir = tempdir();
    let config = dir.path().join("probe.toml");
    std::fs::write(
        &config,
        "period = \"250ms\"\n[[rule]]\nname = \"all\"\nfilter = \"ip\"\nactions = [\"flows\"]\n",
    )
    .expect("write config");
    let file = dir.path().join("probe.pcapng");
    let probe = start_probe(
        &lab,
        &[
            "-c",
            s(&config),
            "-w",
            s(&file),
            "--ipfix",
            "127.0.0.1:4739",
            "--metrics",
            METRICS,
        ],
    );
    gen(&lab, &["--count", "2000", "--rate", "10k"]);
    // A few probe periods end, so the rule counters have samples.
    std::thread::sleep(Duration::from_millis(800));
    let mut served = served_names(&scrape(&ns).expect("the probe's scrape"));
    let (code, stderr) = probe.stop("INT");
    assert_eq!(code, Some(0), "probe: {stderr}");
    let fwd = crate::forward::forward(&lab, &["--drop", "udp", "--metrics", METRICS]);
    served.extend(served_names(&scrape(&ns).expect("the forwarder's scrape")));
    let (code, stderr) = fwd.stop("INT");
    assert_eq!(code, Some(0), "forward: {stderr}");

    let used: BTreeSet<String> = deploy::dashboard_queries()
        .iter()
        .chain(&deploy::rule_queries())
        .flat_map(|q| deploy::metric_names(q))
        .collect();
    let missing: Vec<&String> = used.difference(&served).collect();
    assert!(
        missing.is_empty(),
        "used in deploy/ but not served: {missing:?}\nserved: {served:?}"
    );
    // The comparison has something to compare: the families the files are about.
    for name in [
        "poolcap_packets_dropped_total",
        "poolcap_pool_chunks_in_use",
        "poolcap_written_bytes_total",
        "poolcap_export_flow_records_total",
        "poolcap_packets_policy_dropped_total",
        "process_cpu_seconds_total",
    ] {
        assert!(used.contains(name), "{name} not used: {used:?}");
    }
}
