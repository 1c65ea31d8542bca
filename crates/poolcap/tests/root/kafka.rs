//! Kafka export tests: a real single-node Apache Kafka broker (KRaft, started by
//! `scripts/kafka.sh` on the loopback of the lab's probe namespace) receives the probe's
//! messages, and `kcat` reads them back: they must equal the probe's own JSON Lines report.
//! A broker killed mid-run must not slow the capture; what it missed is counted.
//!
//! The broker's jars come from Maven Central (cached after the first run); if they cannot
//! be fetched, the broker tests are reported as ignored with the reason.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use libtest_mimic::Trial;
use serde_json::Value;

use crate::common::{
    gen, lab, netns_command, num, on_wire, path_str as s, poolcap_in, start_probe, tempdir, trial,
    Lab,
};
use crate::export::probe_report;

pub(crate) fn trials() -> Vec<Trial> {
    let t = |name: &'static str, f: fn()| trial(&format!("kafka::{name}"), f);
    let broker = [
        t(
            "kafka_records_equal_the_probe_report",
            kafka_records_equal_the_probe_report,
        ),
        t(
            "a_broker_that_goes_away_never_stops_the_capture",
            a_broker_that_goes_away_never_stops_the_capture,
        ),
        t(
            "a_file_exports_to_kafka_compressed_as_asked",
            a_file_exports_to_kafka_compressed_as_asked,
        ),
        t(
            "a_broker_name_that_resolves_later_gets_the_records",
            a_broker_name_that_resolves_later_gets_the_records,
        ),
    ];
    let broker = match fetch() {
        Ok(()) => broker.into_iter().collect::<Vec<_>>(),
        Err(why) => {
            eprintln!("ignoring the Kafka broker tests: {why}");
            broker
                .into_iter()
                .map(|t| t.with_ignored_flag(true))
                .collect()
        }
    };
    let mut all = broker;
    all.push(t(
        "bad_kafka_options_fail_at_start",
        bad_kafka_options_fail_at_start,
    ));
    all.push(t(
        "a_refusing_broker_is_heard_through_the_logger",
        a_refusing_broker_is_heard_through_the_logger,
    ));
    all
}

/// Where the broker listens (the probe namespace's loopback).
const BROKER: &str = "127.0.0.1:9092";
const TOPIC: &str = "poolcap";
/// Partitions of an auto-created topic (`num.partitions` in scripts/kafka.sh).
const PARTITIONS: u32 = 2;
const PROBE: &str = "lab-probe";
/// Time for the last frames to be captured and their period reported.
const SETTLE: Duration = Duration::from_millis(600);
const CONFIG: &str =
    "period = \"250ms\"\n[[rule]]\nname = \"all\"\nfilter = \"ip\"\nactions = [\"flows\"]\n";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kafka.sh")
}

/// Fetches the broker's jars (a no-op once cached).
fn fetch() -> Result<(), String> {
    let out = Command::new(script())
        .arg("fetch")
        .output()
        .map_err(|e| format!("run scripts/kafka.sh: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// A broker in the lab's probe namespace; killed (by PID) on drop.
struct Broker {
    child: Child,
    netns: String,
    log: PathBuf,
}

impl Broker {
    /// Starts the broker and waits until it answers a metadata request (a bounded
    /// readiness wait, not a timing assertion).
    fn start(lab: &Lab, dir: &Path) -> Broker {
        let log = dir.join("broker.log");
        let file = std::fs::File::create(&log).expect("broker log");
        let child = netns_command(&lab.probe.netns, s(&script()))
            .args(["run", s(&dir.join("broker"))])
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("start the broker");
        let mut b = Broker {
            child,
            netns: lab.probe.netns.clone(),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !b.answers() {
            if let Ok(Some(st)) = b.child.try_wait() {
                panic!("the broker exited with {st}: {}", b.log());
            }
            assert!(
                Instant::now() < deadline,
                "the broker never came up: {}",
                b.log()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
        b
    }

    fn answers(&self) -> bool {
        netns_command(&self.netns, "kcat")
            .args(["-L", "-b", BROKER, "-m", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Every message of the topic: (partition, key, JSON). One kcat per partition: on
    /// several partitions at once, kcat 1.7 with librdkafka 2.0 does not always stop at the
    /// end (`-e`).
    fn consume(&self) -> Vec<(u32, String, Value)> {
        (0..PARTITIONS)
            .flat_map(|p| self.consume_partition(p))
            .collect()
    }

    fn consume_partition(&self, partition: u32) -> Vec<(u32, String, Value)> {
        // `timeout`: a kcat that never sees the end fails the test instead of hanging it.
        let out = netns_command(&self.netns, "timeout")
            .args([
                "30",
                "kcat",
                "-C",
                "-b",
                BROKER,
                "-t",
                TOPIC,
                "-o",
                "beginning",
                "-e",
            ])
            .args(["-p", &partition.to_string(), "-q", "-f", "%p\t%k\t%s\n"])
            .output()
            .expect("run kcat");
        assert!(out.status.success(), "kcat: {out:?}");
        String::from_utf8(out.stdout)
            .expect("utf-8 messages")
            .lines()
            .map(|l| {
                let mut f = l.splitn(3, '\t');
                let (p, k, v) = (f.next(), f.next(), f.next());
                let v = v.unwrap_or_else(|| panic!("kcat line {l}"));
                (
                    p.and_then(|p| p.parse().ok()).expect("partition"),
                    k.unwrap_or_default().to_string(),
                    serde_json::from_str(v).unwrap_or_else(|e| panic!("{e}: {v}")),
                )
            })
            .collect()
    }

    /// Kills the broker abruptly, as a crash would.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `kafka: A flow records delivered, B not delivered; C reports and alerts delivered, D not
/// delivered`, from the probe's stderr.
fn delivered(stderr: &str) -> [u64; 4] {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("kafka: ") && l.contains(" delivered, "))
        .unwrap_or_else(|| panic!("no kafka line: {stderr}"));
    let n: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.trim_end_matches(';').parse().ok())
        .collect();
    n.try_into().unwrap_or_else(|_| panic!("kafka line {line}"))
}

fn kafka_args<'a>(config: &'a Path, report: &'a Path) -> Vec<&'a str> {
    vec![
        "-c",
        s(config),
        "--report",
        s(report),
        "--kafka",
        BROKER,
        "--topic",
        TOPIC,
        "--probe-name",
        PROBE,
    ]
}

/// 2 s of traffic in 8 flows, 250 ms periods: the topic holds one report per rule and
/// period, equal to the probe's JSON Lines report, and flow records whose packets and bytes
/// add up to it exactly; keys name probe, rule and flow, and one flow keeps one partition.
fn kafka_records_equal_the_probe_report() {
    let lab = lab(2);
    let dir = tempdir();
    let broker = Broker::start(&lab, dir.path());
    let (config, report) = (dir.path().join("probe.toml"), dir.path().join("r.jsonl"));
    std::fs::write(&config, CONFIG).expect("write config");
    let probe = start_probe(&lab, &kafka_args(&config, &report));
    let g = gen(&lab, &["--count", "20000", "--rate", "10k", "--flows", "8"]);
    let sent = on_wire(&g);
    std::thread::sleep(SETTLE);
    let (code, stderr) = probe.stop("INT");
    assert_eq!(code, Some(0), "probe: {stderr}");
    let [flows, flows_lost, reports, reports_lost] = delivered(&stderr);
    assert_eq!((flows_lost, reports_lost), (0, 0), "{stderr}");

    let (distinct, packets, bytes, captured) = probe_report(&report);
    assert_eq!(captured, sent, "no loss at 10k pps");
    assert_eq!(packets, captured, "every captured packet is IP");
    let lines: Vec<Value> = std::fs::read_to_string(&report)
        .expect("read report")
        .lines()
        .map(|l| serde_json::from_str(l).expect("report line"))
        .collect();
    let listed: usize = lines
        .iter()
        .map(|r| r["flows"]["list"].as_array().map_or(0, Vec::len))
        .sum();

    let got = broker.consume();
    let of = |kind: &str| -> Vec<&(u32, String, Value)> {
        got.iter().filter(|m| m.2["type"] == kind).collect()
    };
    let (flow_msgs, report_msgs) = (of("flow"), of("report"));
    assert_eq!(flow_msgs.len() as u64, flows, "every delivered flow record");
    assert_eq!(flow_msgs.len(), listed, "one per listed flow and period");
    assert_eq!(
        report_msgs.len() as u64,
        reports,
        "reports (no alerts here)"
    );
    assert_eq!(report_msgs.len(), lines.len(), "one per report line");
    assert_eq!(got.len(), flow_msgs.len() + report_msgs.len(), "{got:?}");
    let sum = |k: &str| flow_msgs.iter().map(|m| num(&m.2, k)).sum::<u64>();
    assert_eq!((sum("packets"), sum("bytes")), (packets, bytes));
    for (line, (_, key, msg)) in lines.iter().zip(&report_msgs) {
        assert_eq!(key, &format!("{PROBE}/all/report"));
        for k in [
            "period_start",
            "period_end",
            "packets",
            "bytes",
            "accounting",
            "last",
        ] {
            assert_eq!(msg[k], line[k], "{k}: {msg} vs {line}");
        }
        assert_eq!(msg["flows"]["count"], line["flows"]["count"]);
    }
    let mut partition_of = std::collections::BTreeMap::new();
    for (p, key, msg) in &flow_msgs {
        let flow = format!(
            "{PROBE}/all/flow/{}/{}:{}/{}:{}",
            msg["proto"],
            msg["src"].as_str().expect("src"),
            msg["sport"],
            msg["dst"].as_str().expect("dst"),
            msg["dport"]
        );
        assert_eq!(key, &flow);
        assert_eq!(*partition_of.entry(flow).or_insert(*p), *p, "one partition");
    }
    assert_eq!(partition_of.len(), distinct, "the generator's flows");
    assert_eq!(distinct, 8);
}

/// The broker is killed halfway: the probe captures every packet the generator sent, the
/// messages it can no longer deliver are counted (metrics first, after librdkafka's message
/// timeout, then the final line), and what was delivered before the kill is counted so.
fn a_broker_that_goes_away_never_stops_the_capture() {
    const METRICS: &str = "127.0.0.1:9464";
    let lab = lab(1);
    let dir = tempdir();
    let broker = Broker::start(&lab, dir.path());
    let (config, report) = (dir.path().join("probe.toml"), dir.path().join("r.jsonl"));
    std::fs::write(&config, CONFIG).expect("write config");
    let mut args = kafka_args(&config, &report);
    args.extend(["--metrics", METRICS]);
    let probe = start_probe(&lab, &args);
    let counted = |outcome: &str| {
        let out = netns_command(&lab.probe.netns, "curl")
            .args(["-sf", &format!("http://{METRICS}/metrics")])
            .output()
            .expect("run curl");
        let prefix = format!(
            "poolcap_export_flow_records_total{{exporter=\"kafka\",outcome=\"{outcome}\"}} "
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix(&prefix).and_then(|v| v.parse::<u64>().ok()))
            .unwrap_or(0)
    };
    // Bounded readiness waits (not timing assertions): the broker acknowledges the first
    // records (the topic is created on first use), later librdkafka gives up on the first
    // records it cannot deliver.
    let wait_for = |outcome: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let n = counted(outcome);
            if n > 0 {
                return n;
            }
            assert!(Instant::now() < deadline, "no kafka records {outcome}");
            std::thread::sleep(Duration::from_millis(250));
        }
    };
    let g1 = gen(&lab, &["--count", "5000", "--rate", "10k", "--flows", "4"]);
    wait_for("exported");
    broker.kill();
    let g2 = gen(&lab, &["--count", "10000", "--rate", "10k", "--flows", "4"]);
    std::thread::sleep(SETTLE);
    let dropped = wait_for("dropped");
    let (code, stderr) = probe.stop("INT");
    assert_eq!(code, Some(0), "probe: {stderr}");
    let sent = [g1, g2].iter().map(on_wire).sum::<u64>();
    let (_, packets, _, captured) = probe_report(&report);
    assert_eq!((captured, packets), (sent, sent), "capture went on");
    let [flows, flows_lost, reports, reports_lost] = delivered(&stderr);
    assert!(
        flows > 0 && reports > 0,
        "delivered before the kill: {stderr}"
    );
    assert!(flows_lost >= dropped && reports_lost > 0, "{stderr}");
}

/// A broker address without a port, a setting that is not KEY=VALUE, one librdkafka does
/// not know or a value it refuses: one line, non-zero exit, before any capture.
fn bad_kafka_options_fail_at_start() {
    let lab = lab(1);
    let dir = tempdir();
    let config = dir.path().join("probe.toml");
    std::fs::write(&config, CONFIG).expect("write config");
    let iface = lab.probe.iface.as_str();
    let kafka = ["--kafka", BROKER, "--topic", TOPIC, "--kafka-opt"];
    let cases: [(&[&str], &str); 5] = [
        (
            &["--kafka", "127.0.0.1", "--topic", TOPIC],
            "--kafka `127.0.0.1`",
        ),
        (
            &[&kafka[..], &["acks"]].concat(),
            "--kafka-opt `acks`: give KEY=VALUE",
        ),
        (
            &[&kafka[..], &["no.such.setting=1"]].concat(),
            "--kafka-opt `no.such.setting=1`",
        ),
        (
            &[&kafka[..], &["compression.codec=nope"]].concat(),
            "compression.codec",
        ),
        (&["--kafka", BROKER], "--topic"),
    ];
    for (extra, expect) in cases {
        let mut args = vec!["probe", "-i", iface, "-c", s(&config)];
        args.extend_from_slice(extra);
        let out = poolcap_in(&lab.probe.netns, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded: {err}");
        assert!(err.contains(expect), "{args:?}: `{expect}` not in {err}");
        assert!(!err.contains("probing on"), "{args:?}: no capture: {err}");
        if !expect.starts_with("--topic") {
            assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
        }
    }
}

/// `probe -r` to a broker address where nothing listens: librdkafka's own error (the
/// connection refused) reaches stderr through the logger, as `librdkafka: ...` in text and
/// as a JSON object with target `librdkafka` and level `error` with `--log-format json`;
/// the records it could not deliver are counted.
fn a_refusing_broker_is_heard_through_the_logger() {
    let lab = lab(1);
    let dir = tempdir();
    let file = dir.path().join("known.pcap");
    crate::collectors::write_known_file(&file);
    let (config, report) = (dir.path().join("probe.toml"), dir.path().join("r.jsonl"));
    std::fs::write(&config, CONFIG).expect("write config");
    for json in [false, true] {
        let mut args = if json {
            vec!["--log-format", "json"]
        } else {
            vec![]
        };
        args.extend(["probe", "-r", s(&file), "-q"]);
        args.extend(kafka_args(&config, &report));
        let out = poolcap_in(&lab.probe.netns, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let refused = |l: &&str| l.contains("Connection refused");
        let heard = if json {
            stderr.lines().filter(refused).any(|l| {
                let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
                v["target"] == "librdkafka" && v["level"] == "error"
            })
        } else {
            stderr
                .lines()
                .filter(refused)
                .any(|l| l.starts_with("librdkafka: "))
        };
        assert!(
            heard,
            "json {json}: librdkafka's error not logged:\n{stderr}"
        );
        let [flows, _, reports, _] = delivered(&stderr);
        assert_eq!((flows, reports), (0, 0), "nothing delivered:\n{stderr}");
    }
}

/// The broker's jars (`scripts/kafka.sh fetch`).
fn kafka_lib() -> String {
    let out = Command::new(script())
        .arg("fetch")
        .output()
        .expect("run scripts/kafka.sh");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The compression codecs of the record batches in the topic's log segments, as Kafka's
/// own DumpLogSegments reads them (one per batch).
fn batch_codecs(dir: &Path) -> Vec<String> {
    let data = dir.join("broker/data");
    let mut codecs = Vec::new();
    for p in 0..PARTITIONS {
        let Ok(entries) = std::fs::read_dir(data.join(format!("{TOPIC}-{p}"))) else {
            continue;
        };
        for log in entries
            .map(|e| e.expect("entry").path())
            .filter(|f| f.extension().is_some_and(|x| x == "log"))
        {
            let out = Command::new("java")
                .args(["-cp", &format!("{}/*", kafka_lib())])
                .args(["kafka.tools.DumpLogSegments", "--files", s(&log)])
                .output()
                .expect("run DumpLogSegments");
            assert!(out.status.success(), "DumpLogSegments: {out:?}");
            codecs.extend(
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter_map(|l| l.split("compresscodec: ").nth(1))
                    .map(|c| c.split_whitespace().next().unwrap_or("").to_lowercase()),
            );
        }
    }
    codecs
}

/// `probe -r` of the known file (see the collectors tests) to Kafka with
/// `--kafka-opt compression.codec=zstd`: kcat reads every report and flow record back,
/// equal to the probe's JSON Lines report (flows, packets, wire and IP bytes, which add up
/// to the file's), and every record batch on the broker's disk is zstd-compressed, as Kafka's
/// DumpLogSegments reads it.
fn a_file_exports_to_kafka_compressed_as_asked() {
    let lab = lab(1);
    let dir = tempdir();
    let broker = Broker::start(&lab, dir.path());
    let file = dir.path().join("known.pcap");
    let known = crate::collectors::write_known_file(&file);
    let (config, report) = (dir.path().join("probe.toml"), dir.path().join("r.jsonl"));
    std::fs::write(
        &config,
        "period = \"1s\"\n[[rule]]\nname = \"all\"\nfilter = \"ip or ip6 or (vlan and (ip or ip6))\"\nactions = [\"flows\"]\n",
    )
    .expect("write config");
    let mut args = vec!["probe", "-r", s(&file), "-q"];
    args.extend(kafka_args(&config, &report));
    args.extend([
        "--kafka-opt",
        "compression.codec=zstd",
        "--kafka-opt",
        "acks=all",
    ]);
    let out = poolcap_in(&lab.probe.netns, &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "probe: {stderr}");
    let [flows, flows_lost, reports, reports_lost] = delivered(&stderr);
    assert_eq!((flows_lost, reports_lost), (0, 0), "{stderr}");

    let got = broker.consume();
    let flow_msgs: Vec<&Value> = got
        .iter()
        .filter(|m| m.2["type"] == "flow")
        .map(|m| &m.2)
        .collect();
    let report_lines = std::fs::read_to_string(&report)
        .expect("read report")
        .lines()
        .count() as u64;
    assert_eq!(
        (flow_msgs.len() as u64, got.len() as u64 - flows),
        (flows, reports),
        "kcat reads what the probe delivered"
    );
    assert_eq!(reports, report_lines, "one report message per period");
    let mut from_kafka = std::collections::BTreeMap::new();
    for m in &flow_msgs {
        let key = (
            num(m, "proto") as u8,
            m["src"].as_str().expect("src").to_string(),
            num(m, "sport") as u16,
        );
        let e: &mut (u64, u64, u64) = from_kafka.entry(key).or_default();
        *e = (
            e.0 + num(m, "packets"),
            e.1 + num(m, "bytes"),
            e.2 + num(m, "ip_bytes"),
        );
    }
    let from_file: std::collections::BTreeMap<_, _> = known
        .iter()
        .map(|k| {
            (
                (k.proto, k.src.to_string(), k.sport),
                (k.packets, k.l2_bytes, k.ip_bytes),
            )
        })
        .collect();
    assert_eq!(from_kafka, crate::collectors::report_flows(&report));
    assert_eq!(from_kafka, from_file);
    let codecs = batch_codecs(dir.path());
    assert!(
        !codecs.is_empty() && codecs.iter().all(|c| c == "zstd"),
        "{codecs:?}"
    );
}

/// The probe starts with a broker name nothing resolves yet (`ip netns exec` puts
/// /etc/netns/NS/hosts over /etc/hosts; the name is added to it later, as the network
/// comes up at boot): it runs and captures, says it cannot deliver and counts what
/// librdkafka gives up on; once the name resolves, it delivers, and kcat reads exactly the
/// flow records it counts as delivered.
fn a_broker_name_that_resolves_later_gets_the_records() {
    const NAME: &str = "kafka-later.lab";
    let lab = lab(1);
    let dir = tempdir();
    let broker = Broker::start(&lab, dir.path());
    let etc = PathBuf::from("/etc/netns").join(&lab.probe.netns);
    std::fs::create_dir_all(&etc).expect("mkdir /etc/netns/NS");
    let hosts = etc.join("hosts");
    std::fs::write(&hosts, "127.0.0.1 localhost\n").expect("write hosts");
    struct Cleanup(PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(etc);
    let (config, report) = (dir.path().join("probe.toml"), dir.path().join("r.jsonl"));
    std::fs::write(&config, CONFIG).expect("write config");
    let broker_name = format!("{NAME}:9092");
    let mut args = kafka_args(&config, &report);
    args[5] = &broker_name;
    let mut probe = start_probe(&lab, &args);
    let g1 = gen(&lab, &["--count", "2000", "--rate", "10k", "--flows", "4"]);
    // Hang guard: librdkafka gives up on a message after 5 s.
    assert!(
        probe.wait_for("kafka: cannot deliver", Duration::from_secs(30)),
        "no delivery failure said: {:?}",
        probe.stderr
    );
    // The name resolves from now on (written in place: the bind mount sees it).
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&hosts)
            .expect("open hosts");
        writeln!(f, "127.0.0.1 {NAME}").expect("append to hosts");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut g2 = Vec::new();
    // Hang guard: librdkafka retries the broker with a back-off of up to 10 s.
    loop {
        g2.push(gen(
            &lab,
            &["--count", "1000", "--rate", "10k", "--flows", "4"],
        ));
        if probe.wait_for("kafka: delivering again", Duration::from_secs(2)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never delivered: {:?}",
            probe.stderr
        );
    }
    let g3 = gen(&lab, &["--count", "1000", "--rate", "10k", "--flows", "4"]);
    std::thread::sleep(SETTLE);
    let (code, stderr) = probe.stop("INT");
    assert_eq!(code, Some(0), "probe: {stderr}");
    let sent: u64 = [&g1, &g3].into_iter().chain(&g2).map(on_wire).sum();
    let (_, packets, _, captured) = probe_report(&report);
    assert_eq!((captured, packets), (sent, sent), "capture went on");
    let [flows, flows_lost, ..] = delivered(&stderr);
    assert!(flows > 0 && flows_lost > 0, "{stderr}");
    let got = broker.consume();
    let flow_msgs = got.iter().filter(|m| m.2["type"] == "flow").count() as u64;
    assert_eq!(flow_msgs, flows, "kcat reads what was delivered");
}
