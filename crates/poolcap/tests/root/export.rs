//! Export tests: the metrics and flow records poolcap exports, read back by the
//! real systems that consume them. Prometheus (Debian's server) scrapes a running capture
//! and its stored samples must equal the final accounting; nfcapd (nfdump) collects the
//! probe's IPFIX records and its flows must add up to the probe's own report and to the
//! capture's accounting. Every collector runs in the lab's probe namespace, on its loopback.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

use libtest_mimic::Trial;
use serde_json::Value;

use crate::common::{
    capture, gen, lab, netns_command, num, on_wire, path_str as s, poolcap_in, start_probe, stats,
    tempdir, trial, Background,
};

pub(crate) fn trials() -> Vec<Trial> {
    let t = |name: &'static str, f: fn()| trial(&format!("export::{name}"), f);
    vec![
        t(
            "prometheus_scrapes_equal_the_final_accounting",
            prometheus_scrapes_equal_the_final_accounting,
        ),
        t(
            "ipfix_flows_in_nfcapd_equal_the_probe_report",
            ipfix_flows_in_nfcapd_equal_the_probe_report,
        ),
        t(
            "ipfix_exports_every_flow_not_only_the_top_ones",
            ipfix_exports_every_flow_not_only_the_top_ones,
        ),
        t(
            "ipfix_udp_counts_as_exported_what_a_restarted_nfcapd_holds",
            ipfix_udp_counts_as_exported_what_a_restarted_nfcapd_holds,
        ),
        t(
            "ipfix_tcp_counts_as_exported_what_a_restarted_collector_holds",
            ipfix_tcp_counts_as_exported_what_a_restarted_collector_holds,
        ),
        t(
            "a_collector_that_goes_away_never_stops_the_capture",
            a_collector_that_goes_away_never_stops_the_capture,
        ),
        t(
            "bad_export_options_fail_at_start",
            bad_export_options_fail_at_start,
        ),
        t(
            "written_bytes_equal_the_rotated_files_sizes",
            written_bytes_equal_the_rotated_files_sizes,
        ),
    ]
}

/// Time for the last frames the generator sent to be captured and analysed.
const SETTLE: Duration = Duration::from_millis(400);
/// Where poolcap serves metrics in the tests (each lab namespace has its own loopback).
const METRICS: &str = "127.0.0.1:9464";
/// Where nfcapd listens.
const COLLECTOR: &str = "127.0.0.1:4739";

fn curl(netns: &str, url: &str) -> String {
    let out = netns_command(netns, "curl")
        .args(["-sf", url])
        .output()
        .expect("run curl");
    assert!(out.status.success(), "curl {url}: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8 reply")
}

/// Asks Prometheus (in `netns`) an instant query; returns its result vector.
fn query(netns: &str, q: &str) -> Vec<Value> {
    let out = netns_command(netns, "curl")
        .args([
            "-sf",
            "http://127.0.0.1:9090/api/v1/query",
            "--data-urlencode",
        ])
        .arg(format!("query={q}"))
        .output()
        .expect("run curl");
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("query {q}: {e}: {out:?}"));
    assert_eq!(v["status"], "success", "query {q}: {v}");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// The value of the series of `q` whose labels include `labels`.
fn series(result: &[Value], labels: &[(&str, &str)]) -> u64 {
    let hit = result
        .iter()
        .find(|r| labels.iter().all(|(k, v)| r["metric"][k] == *v))
        .unwrap_or_else(|| panic!("no series {labels:?} in {result:?}"));
    hit["value"][1]
        .as_str()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("bad value {hit}")) as u64
}

/// The time of the target's last scrape, from Prometheus's targets API.
fn last_scrape(netns: &str) -> Option<SystemTime> {
    let v: Value =
        serde_json::from_str(&curl(netns, "http://127.0.0.1:9090/api/v1/targets")).ok()?;
    let t = &v["data"]["activeTargets"][0];
    if t["health"] != "up" {
        return None;
    }
    humantime::parse_rfc3339(t["lastScrape"].as_str()?).ok()
}

/// Waits (a bounded readiness wait, not a timing assertion) until Prometheus has scraped
/// the target after `after`.
fn wait_for_scrape(netns: &str, after: SystemTime) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while last_scrape(netns).is_none_or(|t| t <= after) {
        assert!(
            Instant::now() < deadline,
            "Prometheus never scraped poolcap after {after:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Prometheus scrapes a two-queue capture every second. After the traffic, the last
/// scrape's per-queue captured and dropped counters equal the final stats JSON exactly, and
/// `promtool check metrics` accepts the served text.
fn prometheus_scrapes_equal_the_final_accounting() {
    let lab = lab(2);
    let dir = tempdir();
    let ns = &lab.probe.netns;
    let json = dir.path().join("stats.json");
    let cap = capture(&lab, &["--metrics", METRICS, "--stats-json", s(&json)]);
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: poolcap\n    static_configs:\n      - targets: ['{METRICS}']\n"
        ),
    )
    .expect("write prometheus config");
    let mut cmd = netns_command(ns, "prometheus");
    cmd.arg(format!("--config.file={}", s(&config)))
        .arg(format!(
            "--storage.tsdb.path={}",
            s(&dir.path().join("data"))
        ))
        .arg("--web.listen-address=127.0.0.1:9090")
        .stdout(Stdio::null());
    let prometheus = Background::start(cmd, "Server is ready to receive web requests");
    wait_for_scrape(ns, SystemTime::UNIX_EPOCH);

    let g = gen(
        &lab,
        &["--count", "30000", "--rate", "30k", "--flows", "16"],
    );
    let sent = on_wire(&g);
    std::thread::sleep(SETTLE);
    wait_for_scrape(ns, SystemTime::now());

    let served = curl(ns, &format!("http://{METRICS}/metrics"));
    let lint = netns_command(ns, "promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .expect("stdin piped")
                .write_all(served.as_bytes())?;
            c.wait_with_output()
        })
        .expect("run promtool");
    assert!(
        lint.status.success(),
        "promtool check metrics: {}{}\n{served}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );

    let (code, stderr) = cap.stop("INT");
    assert_eq!(code, Some(0), "capture: {stderr}");
    let st = stats(&json);
    assert_eq!(num(&st, "captured"), sent, "no loss at 30k pps: {st}");
    // The target is gone now, so its series are stale: read each one's last sample.
    let last = |metric: &str| query(ns, &format!("last_over_time({metric}[5m])"));
    let captured = last("poolcap_packets_captured_total");
    let dropped = last("poolcap_packets_dropped_total");
    let in_use = last("poolcap_pool_chunks_in_use");
    for q in st["queues"].as_array().expect("queues") {
        let i = num(q, "queue").to_string();
        let queue = ("queue", i.as_str());
        assert_eq!(series(&captured, &[queue]), num(q, "captured"), "queue {i}");
        for cause in ["kernel", "pool"] {
            assert_eq!(
                series(&dropped, &[queue, ("cause", cause)]),
                num(q, &format!("dropped_{cause}")),
                "queue {i} cause {cause}"
            );
        }
        assert!(series(&in_use, &[queue]) <= 64, "occupancy within the pool");
    }
    assert!(
        captured.len() == 2 && num(&st["queues"][0], "captured") > 0,
        "{captured:?}"
    );
    let (code, stderr) = prometheus.stop("TERM");
    assert_eq!(code, Some(0), "prometheus: {stderr}");
}

fn start_nfcapd(lab: &poolcap_lab::Lab, dir: &Path) -> Background {
    std::fs::create_dir_all(dir).expect("mkdir flows");
    let (host, port) = COLLECTOR.split_once(':').expect("host:port");
    let mut cmd = netns_command(&lab.probe.netns, "nfcapd");
    cmd.args(["-w", s(dir), "-p", port, "-b", host])
        .stdout(Stdio::null());
    Background::start(cmd, "Bound to")
}

/// Stops nfcapd with SIGTERM, which it must end on cleanly (having written its files).
fn stop_nfcapd(nfcapd: Background) {
    let (code, log) = nfcapd.stop("TERM");
    assert_eq!(code, Some(0), "nfcapd: {log}");
}

/// After [`export_through_an_outage`]: the outage lost records (`lost`), and the collectors
/// hold (`held`) exactly the `records` the probe counts as exported.
fn assert_outage_accounted(records: u64, lost: u64, held: usize) {
    assert!(
        lost > 0,
        "the outage lost records: {records} exported, {lost} not"
    );
    assert_eq!(
        held as u64, records,
        "the collectors hold what the probe counts as exported"
    );
}

/// One nfdump flow: (source port, packets, bytes, input interface).
fn nfdump_flows(dir: &Path) -> Vec<(u16, u64, u64, u64)> {
    let out: Output = Command::new("nfdump")
        .args(["-q", "-N", "-R", s(dir), "-o", "fmt:%sp,%pkt,%byt,%in"])
        .output()
        .expect("run nfdump");
    assert!(out.status.success(), "nfdump: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        // nfdump says so when a directory holds no record.
        .filter(|l| !l.trim().is_empty() && l.trim() != "No matching flows")
        .map(|l| {
            let f: Vec<u64> = l
                .split(',')
                .map(|x| {
                    x.trim()
                        .parse()
                        .unwrap_or_else(|_| panic!("nfdump line {l}"))
                })
                .collect();
            (f[0] as u16, f[1], f[2], f[3])
        })
        .collect()
}

/// The IP bytes of every flow listed in the probe's report.
fn report_ip_bytes(path: &Path) -> u64 {
    crate::collectors::report_flows(path)
        .values()
        .map(|f| f.2)
        .sum()
}

/// The interface's ifindex in its namespace.
fn ifindex(netns: &str, iface: &str) -> u64 {
    let out = netns_command(netns, "cat")
        .arg(format!("/sys/class/net/{iface}/ifindex"))
        .output()
        .expect("read ifindex");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("an ifindex")
}

/// The probe's report: (distinct flows listed over all periods, packets, bytes, captured).
pub(crate) fn probe_report(path: &Path) -> (usize, u64, u64, u64) {
    let text = std::fs::read_to_string(path).expect("read report");
    let mut flows = BTreeSet::new();
    let (mut packets, mut bytes, mut captured) = (0, 0, 0);
    for line in text.lines() {
        let r: Value = serde_json::from_str(line).expect("report line");
        packets += num(&r, "packets");
        bytes += num(&r, "bytes");
        captured += num(&r["accounting"], "captured");
        assert_eq!(num(&r["flows"]["evicted"], "flows"), 0, "{r}");
        for f in r["flows"]["list"].as_array().expect("flows") {
            flows.insert((f["src"].to_string(), f["sport"].to_string()));
        }
    }
    (flows.len(), packets, bytes, captured)
}

/// `ipfix: N flow records exported, M not delivered`, from the probe's stderr.
fn exported(stderr: &str) -> (u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("ipfix: "))
        .unwrap_or_else(|| panic!("no ipfix line: {stderr}"));
    let n: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (n[0], n[1])
}

const FLOWS_CONFIG: &str =
    "period = \"250ms\"\n[[rule]]\nname = \"all\"\nfilter = \"ip\"\nactions = [\"flows\"]\n";

/// What a probe that exported its flows to nfcapd left: the generator's report, the probe's
/// stderr, the records it counts as exported and as lost, its report file and nfcapd's
/// directory.
struct ToNfcapd {
    g: Value,
    stderr: String,
    records: u64,
    lost: u64,
    report: PathBuf,
    flows: PathBuf,
}

/// Runs a probe with the configuration `config` (written in `dir`) exporting to nfcapd
/// (`--ipfix` [`COLLECTOR`] and `args`) while the generator sends `traffic`, then stops the
/// probe (which must end cleanly) and nfcapd.
fn export_to_nfcapd(
    lab: &poolcap_lab::Lab,
    dir: &Path,
    config: &str,
    args: &[&str],
    traffic: &[&str],
) -> ToNfcapd {
    let config_file = dir.join("probe.toml");
    std::fs::write(&config_file, config).expect("write config");
    let flows = dir.join("flows");
    let report = dir.join("report.jsonl");
    let nfcapd = start_nfcapd(lab, &flows);
    let to_nfcapd = [
        "-c",
        s(&config_file),
        "--report",
        s(&report),
        "--ipfix",
        COLLECTOR,
    ];
    let probe = start_probe(lab, &[&to_nfcapd[..], args].concat());
    let g = gen(lab, traffic);
    std::thread::sleep(SETTLE);
    let (code, stderr) = probe.stop("INT");
    assert_eq!(code, Some(0), "probe: {stderr}");
    let (records, lost) = exported(&stderr);
    stop_nfcapd(nfcapd);
    ToNfcapd {
        g,
        stderr,
        records,
        lost,
        report,
        flows,
    }
}

/// The probe exports its flows over UDP to nfcapd with a 1 s active timeout, so 2 s of
/// traffic splits every flow into several records. nfdump's records add up to the probe's
/// report and the capture's accounting, packet for packet and byte for byte (IP bytes:
/// the frames' less their 14-byte Ethernet headers); each record names the probe's
/// interface as its input; each of the generator's flows is there, and nfcapd holds every
/// record the probe says it exported.
fn ipfix_flows_in_nfcapd_equal_the_probe_report() {
    let lab = lab(2);
    let dir = tempdir();
    let run = export_to_nfcapd(
        &lab,
        dir.path(),
        FLOWS_CONFIG,
        &["--ipfix-active", "1s"],
        &["--count", "20000", "--rate", "10k", "--flows", "8"],
    );
    let sent = on_wire(&run.g);
    assert_eq!(run.lost, 0, "{}", run.stderr);

    let (distinct, packets, bytes, captured) = probe_report(&run.report);
    assert_eq!(captured, sent, "no loss at 10k pps");
    assert_eq!(
        packets, captured,
        "every captured packet is IP and in the rule"
    );
    let got = nfdump_flows(&run.flows);
    assert_eq!(
        got.len() as u64,
        run.records,
        "nfcapd has every record exported"
    );
    assert_eq!(got.iter().map(|f| f.1).sum::<u64>(), packets, "{got:?}");
    let ip_bytes = report_ip_bytes(&run.report);
    assert_eq!(ip_bytes, bytes - 14 * packets, "untagged Ethernet frames");
    assert_eq!(got.iter().map(|f| f.2).sum::<u64>(), ip_bytes, "{got:?}");
    let iface = ifindex(&lab.probe.netns, &lab.probe.iface);
    assert!(got.iter().all(|f| f.3 == iface), "ifindex {iface}: {got:?}");
    let ports: BTreeSet<u16> = got.iter().map(|f| f.0).collect();
    assert_eq!(ports.len(), distinct, "{got:?}");
    assert_eq!(distinct, 8, "the generator's flows");
    assert!(
        got.len() > distinct,
        "2 s of traffic with a 1 s active timeout: flows split in records: {got:?}"
    );
}

/// A rule with `top = 5` over 32 flows: the report lists 5 flows a period, but every flow
/// goes to the collector: nfdump holds all 32 and every packet the generator put on the
/// wire, in as many records as the probe says it exported, none lost.
fn ipfix_exports_every_flow_not_only_the_top_ones() {
    let lab = lab(1);
    let dir = tempdir();
    let run = export_to_nfcapd(
        &lab,
        dir.path(),
        &format!("{FLOWS_CONFIG}top = 5\n"),
        &[],
        &["--count", "30000", "--rate", "10k", "--flows", "32"],
    );
    let text = std::fs::read_to_string(&run.report).expect("read report");
    for line in text.lines() {
        let r: Value = serde_json::from_str(line).expect("report line");
        let listed = r["flows"]["list"].as_array().expect("flows").len();
        assert!(listed <= 5, "the report lists the top 5: {r}");
    }
    let got = nfdump_flows(&run.flows);
    assert_eq!(
        (got.len() as u64, run.lost),
        (run.records, 0),
        "{}",
        run.stderr
    );
    assert_eq!(
        got.iter().map(|f| f.1).sum::<u64>(),
        on_wire(&run.g),
        "every packet on the wire is in nfdump's flows"
    );
    let ports: BTreeSet<u16> = got.iter().map(|f| f.0).collect();
    assert_eq!(ports.len(), 32, "every flow: {got:?}");
}

/// Where the TCP collector of the restart test listens.
const TCP_COLLECTOR: &str = "127.0.0.1:4740";

/// A TCP IPFIX collector: accepts a stream on [`TCP_COLLECTOR`] and hands each whole
/// message it reads to nfcapd over UDP (nfcapd takes no TCP), so nfdump decodes what it
/// received. Killing it loses what its socket held unread, as killing a collector does.
fn start_tcp_collector(lab: &poolcap_lab::Lab) -> Background {
    let (host, port) = TCP_COLLECTOR.split_once(':').expect("host:port");
    let (uhost, uport) = COLLECTOR.split_once(':').expect("host:port");
    let script = format!(
        "import signal, socket, sys
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(('{host}', {port}))
l.listen()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
c = None
def stop(*_):
    if c is None:
        sys.exit(0)
    c.shutdown(socket.SHUT_WR)
    l.close()
signal.signal(signal.SIGTERM, stop)
print('listening', file=sys.stderr, flush=True)
while True:
    c, _ = l.accept()
    buf = b''
    while True:
        d = c.recv(65536)
        if not d:
            if l.fileno() < 0:
                sys.exit(0)
            c = None
            break
        buf += d
        while len(buf) >= 4 and len(buf) >= int.from_bytes(buf[2:4], 'big'):
            n = int.from_bytes(buf[2:4], 'big')
            u.sendto(buf[:n], ('{uhost}', {uport}))
            buf = buf[n:]
"
    );
    let mut cmd = netns_command(&lab.probe.netns, "python3");
    cmd.args(["-c", &script]).stdout(Stdio::null());
    Background::start(cmd, "listening")
}

/// Runs a probe exporting to `target` (250 ms periods and active timeout, so records flow
/// all along) while 3 s of traffic pass; `outage` is called 1 s in (it stops the collector
/// and starts it again 1 s later). Returns (exported, not delivered) from the probe.
fn export_through_an_outage(
    lab: &poolcap_lab::Lab,
    dir: &Path,
    target: &str,
    outage: impl FnOnce(),
) -> (u64, u64) {
    let config = dir.join("probe.toml");
    std::fs::write(&config, FLOWS_CONFIG).expect("write config");
    let probe = start_probe(
        lab,
        &[
            "-c",
            s(&config),
            "--ipfix",
            target,
            "--ipfix-active",
            "250ms",
        ],
    );
    std::thread::scope(|sc| {
        let sender = sc.spawn(|| gen(lab, &["--count", "6000", "--rate", "2k", "--flows", "8"]));
        std::thread::sleep(Duration::from_secs(1));
        outage();
        sender.join().expect("generator");
    });
    std::thread::sleep(SETTLE);
    let (code, stderr) = probe.stop("INT");
    assert_eq!(code, Some(0), "probe: {stderr}");
    exported(&stderr)
}

/// nfcapd (UDP) is stopped 1 s into the traffic and started again 1 s later: the
/// datagrams sent meanwhile are refused (ICMP port unreachable on loopback), so the probe
/// counts them as not delivered, and every record it counts as exported is in nfdump.
fn ipfix_udp_counts_as_exported_what_a_restarted_nfcapd_holds() {
    let lab = lab(1);
    let dir = tempdir();
    let (before, after) = (dir.path().join("flows1"), dir.path().join("flows2"));
    let first = start_nfcapd(&lab, &before);
    let mut second = None;
    let (records, lost) = export_through_an_outage(&lab, dir.path(), COLLECTOR, || {
        stop_nfcapd(first);
        std::thread::sleep(Duration::from_secs(1));
        second = Some(start_nfcapd(&lab, &after));
    });
    stop_nfcapd(second.expect("restarted"));
    let held = nfdump_flows(&before).len() + nfdump_flows(&after).len();
    assert_outage_accounted(records, lost, held);
}

/// A TCP collector is stopped 1 s into the traffic (TERM: it closes its side and reads
/// until the probe closes too) and started again 1 s later: the probe reconnects, counts as
/// exported exactly the records the collectors received (decoded by nfdump), and what it
/// could not send meanwhile as not delivered.
fn ipfix_tcp_counts_as_exported_what_a_restarted_collector_holds() {
    let lab = lab(1);
    let dir = tempdir();
    let flows = dir.path().join("flows");
    let nfcapd = start_nfcapd(&lab, &flows);
    let first = start_tcp_collector(&lab);
    let mut second = None;
    let target = format!("tcp://{TCP_COLLECTOR}");
    let (records, lost) = export_through_an_outage(&lab, dir.path(), &target, || {
        let (code, log) = first.stop("TERM");
        assert_eq!(code, Some(0), "the collector stops gracefully: {log}");
        std::thread::sleep(Duration::from_secs(1));
        second = Some(start_tcp_collector(&lab));
    });
    // Time for the collector to hand the last messages on before it goes.
    std::thread::sleep(SETTLE);
    drop(second);
    std::thread::sleep(SETTLE);
    stop_nfcapd(nfcapd);
    assert_outage_accounted(records, lost, nfdump_flows(&flows).len());
}

/// nfcapd stops halfway through the traffic: the probe keeps capturing every packet, and
/// the records it could not deliver are counted (in its final line and in its metrics).
fn a_collector_that_goes_away_never_stops_the_capture() {
    let lab = lab(1);
    let dir = tempdir();
    let config = dir.path().join("probe.toml");
    std::fs::write(&config, FLOWS_CONFIG).expect("write config");
    let nfcapd = start_nfcapd(&lab, &dir.path().join("flows"));
    let report = dir.path().join("report.jsonl");
    let probe = start_probe(
        &lab,
        &[
            "-c",
            s(&config),
            "--report",
            s(&report),
            "--ipfix",
            COLLECTOR,
            "--ipfix-active",
            "250ms",
            "--metrics",
            METRICS,
        ],
    );
    let g1 = gen(&lab, &["--count", "5000", "--rate", "10k", "--flows", "4"]);
    std::thread::sleep(SETTLE);
    stop_nfcapd(nfcapd);
    let g2 = gen(&lab, &["--count", "10000", "--rate", "10k", "--flows", "4"]);
    std::thread::sleep(SETTLE);
    let metrics = curl(&lab.probe.netns, &format!("http://{METRICS}/metrics"));
    let (code, stderr) = probe.stop("INT");
    assert_eq!(code, Some(0), "probe: {stderr}");
    let sent = [g1, g2].iter().map(on_wire).sum::<u64>();
    let (_, packets, _, captured) = probe_report(&report);
    assert_eq!((captured, packets), (sent, sent), "capture went on");
    let (records, lost) = exported(&stderr);
    assert!(records > 0 && lost > 0, "{stderr}");
    let dropped_metric = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "poolcap_export_flow_records_total{exporter=\"ipfix\",outcome=\"dropped\"} ",
            )
        })
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no dropped counter in\n{metrics}"));
    assert!(
        dropped_metric > 0 && dropped_metric <= lost,
        "{dropped_metric} {lost}"
    );
}

/// A metrics port in use, an unresolvable collector, a TCP collector that is not there and
/// IPFIX without a live probe: one line, non-zero exit, before any capture.
fn bad_export_options_fail_at_start() {
    let lab = lab(1);
    let dir = tempdir();
    let config = dir.path().join("probe.toml");
    std::fs::write(&config, FLOWS_CONFIG).expect("write config");
    let holder = capture(&lab, &["--metrics", METRICS]);
    let iface = lab.probe.iface.as_str();
    let cases: [(&[&str], &str); 5] = [
        (
            &["capture", "-i", iface, "--metrics", METRICS],
            "cannot listen on 127.0.0.1:9464",
        ),
        (
            &["capture", "-i", iface, "--metrics", "99999"],
            "--metrics `99999`",
        ),
        (
            &[
                "probe",
                "-i",
                iface,
                "-c",
                s(&config),
                "--ipfix",
                "collector.invalid:4739",
            ],
            "--ipfix `collector.invalid:4739`",
        ),
        (
            &[
                "probe",
                "-i",
                iface,
                "-c",
                s(&config),
                "--ipfix",
                "tcp://127.0.0.1:4739",
            ],
            "cannot reach the collector 127.0.0.1:4739",
        ),
        (
            &[
                "probe",
                "-r",
                s(&config),
                "-c",
                s(&config),
                "--metrics",
                "9464",
            ],
            "--metrics needs a live probe",
        ),
    ];
    for (args, expect) in cases {
        let out = poolcap_in(&lab.probe.netns, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains(expect), "{args:?}: `{expect}` not in {err}");
    }
    let (code, stderr) = holder.stop("INT");
    assert_eq!(code, Some(0), "{stderr}");
}

/// The served value of an unlabelled series, if it is there.
fn metric(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// A pcap capture rotated every 1 MB (`-C 1`) writes 3000 frames of 1000 bytes into several
/// files. Once the writer has written every captured packet, the scraped
/// `poolcap_written_bytes_total` equals the sum of the files' sizes (headers included,
/// every file of the set) and `poolcap_written_packets_total` the packets tcpdump reads
/// back from them; the final stats JSON agrees.
fn written_bytes_equal_the_rotated_files_sizes() {
    let lab = lab(1);
    let dir = tempdir();
    let (file, json) = (dir.path().join("w.pcap"), dir.path().join("w.json"));
    let cap = capture(
        &lab,
        // Buffered: a direct pcap file ends at a 4 KiB boundary while the capture runs, the
        // bytes past it wait for the next write, so the files trail the counter until the end.
        &[
            "--buffered",
            "--format",
            "pcap",
            "-w",
            s(&file),
            "-C",
            "1",
            "--stats-json",
            s(&json),
            "--metrics",
            METRICS,
        ],
    );
    let sent = num(
        &gen(
            &lab,
            &["--count", "3000", "--rate", "10k", "--size", "1000"],
        ),
        "frames",
    );
    let files = || -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(dir.path())
            .expect("read dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.to_string_lossy().contains("w.pcap"))
            .collect();
        v.sort();
        v
    };
    let size = || -> u64 {
        files()
            .iter()
            .map(|p| std::fs::metadata(p).expect("stat").len())
            .sum()
    };
    // A bounded readiness wait: until every frame sent is captured or dropped (the capture
    // has seen them all: the counters move no more), the writer has published every captured
    // packet and the files hold what it says it wrote.
    let url = format!("http://{METRICS}/metrics");
    let deadline = Instant::now() + Duration::from_secs(20);
    let (packets, bytes) = loop {
        let text = curl(&lab.probe.netns, &url);
        let captured = metric(&text, "poolcap_packets_captured_total{queue=\"0\"}");
        let packets = metric(&text, "poolcap_written_packets_total");
        let bytes = metric(&text, "poolcap_written_bytes_total");
        let dropped: u64 = ["kernel", "pool"]
            .iter()
            .filter_map(|c| {
                metric(
                    &text,
                    &format!("poolcap_packets_dropped_total{{queue=\"0\",cause=\"{c}\"}}"),
                )
            })
            .sum();
        let all_seen = captured.is_some_and(|c| c + dropped == sent);
        if all_seen && packets == captured && bytes == Some(size()) {
            break (packets.unwrap_or(0), bytes.unwrap_or(0));
        }
        assert!(
            Instant::now() < deadline,
            "written counters never matched the files ({} bytes):\n{text}",
            size()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(files().len() >= 3, "3 MB in 1 MB files: {:?}", files());
    let read_back: u64 = files()
        .iter()
        .map(|f| crate::common::tcpdump_count(f, &[]))
        .sum();
    assert_eq!(packets, read_back, "{:?}", files());
    // pcap: a 24-byte header per file and 16 + 1000 bytes per record.
    assert_eq!(bytes, 24 * files().len() as u64 + 1016 * packets);
    let (code, stderr) = cap.stop("INT");
    assert_eq!(code, Some(0), "capture: {stderr}");
    let st = stats(&json);
    assert_eq!(num(&st, "written"), packets, "{st}");
    assert!(packets > 0 && packets == num(&st, "captured"), "{st}");
}
