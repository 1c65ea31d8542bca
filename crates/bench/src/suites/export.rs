//! `poolcap bench export`: the flow exporters side by side on the same traffic,
//! and the cost of poolcap's other two exporters.
//!
//! For each point (flows × rate) every exporter of [`FlowExporter::ALL`] runs alone in a
//! fresh lab's probe host, pinned to CPU 1, and exports IPFIX to nfcapd on that host's
//! loopback while `poolcap gen` sends the point's traffic from CPU 0. After the traffic the
//! exporter is stopped so that it exports every open flow, nfcapd is stopped so that it
//! writes its file, and nfdump reads the records back. A row compares what nfdump holds
//! with what was sent: packets (loss), records and flows per second of traffic, and the
//! exporter's CPU time (all its processes, from /proc) per packet sent. Bytes are not
//! compared across tools: poolcap counts wire bytes (link-layer header included), the
//! others IP bytes.
//!
//! Then poolcap alone: the CPU one Prometheus scrape of a running probe costs (many scrapes
//! with curl, the probe's CPU time divided by their number), and, when the Kafka jars are
//! there (`scripts/kafka.sh fetch`), the records per second `--kafka` delivers to a local
//! broker. This suite runs outside `bench all` (its peers and collector are not capture
//! tools); it writes `rows.csv` and `summary.md` in its output directory.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use poolcap_lab::Lab;

use super::Scale;
use crate::flowpeers::FlowExporter;
use crate::point::{GEN_CPU, TOOL_CPU};

/// Where nfcapd listens in the probe host.
const COLLECTOR: &str = "127.0.0.1:4739";
/// Where the probe serves metrics for the scrape cost.
const METRICS: &str = "127.0.0.1:9464";
/// Where the Kafka broker listens.
const BROKER: &str = "127.0.0.1:9092";
/// Time an exporter gets to open its capture before traffic (pmacctd says nothing when it
/// is ready).
const WARM_UP: Duration = Duration::from_millis(1500);
/// /proc reports CPU time in USER_HZ ticks, 100 per second on every Linux ABI.
const USER_HZ: f64 = 100.0;
/// Time after the traffic before the exporter is stopped: libpcap tools see the last
/// frames only when their TPACKET_V3 block times out (softflowd missed up to a third of a
/// short run's frames at 500 ms).
const SETTLE: Duration = Duration::from_secs(2);

/// One point: `flows` flows at `rate` frames/s for `seconds`.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    /// Distinct UDP flows.
    pub flows: usize,
    /// Frames per second.
    pub rate: u64,
    /// Seconds of traffic.
    pub seconds: f64,
}

/// The points of a scale.
pub fn points(scale: Scale) -> Vec<Point> {
    let p = |flows, rate, seconds| Point {
        flows,
        rate,
        seconds,
    };
    match scale {
        Scale::Smoke => vec![p(100, 5_000, 0.5)],
        Scale::Quick => vec![
            p(1_000, 50_000, 2.0),
            p(10_000, 50_000, 2.0),
            p(100_000, 50_000, 2.0),
            p(10_000, 20_000, 2.0),
            p(10_000, 150_000, 2.0),
        ],
        Scale::Full => [1_000, 10_000, 100_000]
            .into_iter()
            .flat_map(|f| [20_000, 50_000, 150_000, 300_000].map(|r| p(f, r, 5.0)))
            .collect(),
    }
}

/// One exporter at one point.
#[derive(Debug, Clone)]
pub struct Row {
    /// The exporter.
    pub exporter: &'static str,
    /// The point.
    pub flows: usize,
    /// Offered frames/s.
    pub rate: u64,
    /// Frames on the wire.
    pub sent: u64,
    /// Seconds the generator sent for.
    pub seconds: f64,
    /// Flow records nfdump read back.
    pub records: u64,
    /// Packets in them.
    pub packets: u64,
    /// Bytes in them.
    pub bytes: u64,
    /// Distinct flows (5-tuples) among them.
    pub distinct: u64,
    /// CPU seconds of the exporter's processes during the traffic.
    pub cpu_s: f64,
}

impl Row {
    /// Share of the sent packets missing from the records.
    pub fn loss(&self) -> f64 {
        1.0 - self.packets as f64 / self.sent.max(1) as f64
    }

    const HEADER: &'static str =
        "exporter,flows,rate,sent,seconds,records,packets,bytes,distinct,cpu_s,records_per_s,cpu_ns_per_packet,loss";

    fn csv(&self) -> String {
        format!(
            "{},{},{},{},{:.3},{},{},{},{},{:.3},{:.0},{:.0},{:.6}",
            self.exporter,
            self.flows,
            self.rate,
            self.sent,
            self.seconds,
            self.records,
            self.packets,
            self.bytes,
            self.distinct,
            self.cpu_s,
            self.records as f64 / self.seconds.max(1e-9),
            self.cpu_s * 1e9 / self.sent.max(1) as f64,
            self.loss()
        )
    }
}

/// Runs the suite at `scale` into `out`; returns the rows of the flow exporters.
pub fn run(
    poolcap: &str,
    scale: Scale,
    out: &Path,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Vec<Row>> {
    std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    let missing: Vec<&str> = ["nfcapd", "nfdump", "curl", "taskset"]
        .into_iter()
        .chain(FlowExporter::ALL.iter().skip(1).map(|e| e.program()))
        .filter(|p| !on_path(p))
        .collect();
    if !missing.is_empty() {
        bail!("bench export needs {} (./dev deps)", missing.join(", "));
    }
    let load = |when: &str| {
        let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        format!(
            "load average {when}: {}",
            l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
        )
    };
    let mut notes = vec![load("at start")];
    let mut rows = Vec::new();
    for p in points(scale) {
        for e in FlowExporter::ALL {
            if stop.load(Ordering::Relaxed) {
                bail!("interrupted");
            }
            let row = run_one(poolcap, e, p, out)
                .with_context(|| format!("{} at {} flows, {} pps", e.name(), p.flows, p.rate))?;
            log::info!(
                "{:<16} {:>6} flows {:>6} pps: {} records, {} of {} packets, {:.0} ns CPU/packet",
                row.exporter,
                row.flows,
                row.rate,
                row.records,
                row.packets,
                row.sent,
                row.cpu_s * 1e9 / row.sent.max(1) as f64
            );
            rows.push(row);
        }
    }
    let scrape = scrape_cost(poolcap, scale.pick(20, 200, 1000), out)?;
    notes.push(format!(
        "Prometheus scrape of a running probe: {:.0} µs CPU of the probe per scrape ({} scrapes of {} bytes, `curl` in the probe host)",
        scrape.0 * 1e6,
        scrape.1,
        scrape.2
    ));
    match kafka_throughput(poolcap, scale, out)? {
        Some((records, secs, lost)) => notes.push(format!(
            "Kafka: {records} records delivered to a local broker in {secs:.1} s of traffic = {:.0} records/s ({lost} not delivered)",
            records as f64 / secs.max(1e-9)
        )),
        None => notes.push("Kafka: not measured (no broker jars; `scripts/kafka.sh fetch`)".into()),
    }
    notes.push(load("at end"));
    let mut csv = String::from(Row::HEADER);
    csv.push('\n');
    for r in &rows {
        csv += &r.csv();
        csv.push('\n');
    }
    std::fs::write(out.join("rows.csv"), csv).context("write rows.csv")?;
    let md = summary(scale, &rows, &notes);
    std::fs::write(out.join("summary.md"), &md).context("write summary.md")?;
    println!("{md}");
    Ok(rows)
}

/// `out/NAME`, created: a run's configuration, logs and collected flows stay as evidence.
fn work_dir(out: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let d = out.join(name);
    std::fs::create_dir_all(&d).with_context(|| format!("create {}", d.display()))?;
    Ok(d)
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
        || Path::new("/usr/sbin").join(program).is_file()
}

/// `ip netns exec NETNS taskset -c CPU PROGRAM...`.
fn in_host(netns: &str, cpu: usize, cmd: &Command) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", netns, "taskset", "-c", &cpu.to_string()])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    c
}

fn signal(child: &Child, sig: &str) {
    let _ = Command::new("kill")
        .args([format!("-{sig}"), child.id().to_string()])
        .status();
}

/// Waits up to `limit` for `child` to exit; kills it past that.
fn wait_exit(child: &mut Child, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// User plus system CPU seconds of `pid` and every process below it.
fn tree_cpu(pid: u32) -> f64 {
    let mut stats: Vec<(u32, u32, u64)> = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // Fields after the command (which may hold spaces) in parentheses.
        let Some((head, rest)) = text.rsplit_once(')') else {
            continue;
        };
        let me: u32 = head
            .split_whitespace()
            .next()
            .and_then(|x| x.parse().ok())
            .unwrap_or(0);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
        stats.push((me, num(1) as u32, num(11) + num(12)));
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(stats.iter().filter(|s| s.1 == parent).map(|s| s.0));
        i += 1;
    }
    let ticks: u64 = stats
        .iter()
        .filter(|s| tree.contains(&s.0))
        .map(|s| s.2)
        .sum();
    ticks as f64 / USER_HZ
}

/// `poolcap gen` in the sender; returns (frames on the wire, seconds).
fn generate(
    poolcap: &str,
    lab: &Lab,
    flows: usize,
    rate: u64,
    count: u64,
) -> anyhow::Result<(u64, f64)> {
    let mut gen = Command::new(poolcap);
    gen.args([
        "gen",
        "-i",
        &lab.sender.iface,
        "--json",
        "--flows",
        &flows.to_string(),
    ])
    .args(["--rate", &rate.to_string(), "--count", &count.to_string()]);
    let out = in_host(&lab.sender.netns, GEN_CPU, &gen)
        .output()
        .context("run poolcap gen")?;
    if !out.status.success() {
        bail!(
            "poolcap gen: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("gen's JSON")?;
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    Ok((
        n("frames") - n("link_dropped"),
        v["seconds"].as_f64().unwrap_or(0.0),
    ))
}

fn run_one(poolcap: &str, e: FlowExporter, p: Point, out: &Path) -> anyhow::Result<Row> {
    let lab = Lab::unique(1, 2)?;
    let dir = work_dir(out, &format!("{}-{}-{}", e.name(), p.flows, p.rate))?;
    let flows_dir = dir.join("flows");
    std::fs::create_dir_all(&flows_dir)?;
    let (host, port) = COLLECTOR.split_once(':').unwrap_or(("127.0.0.1", "4739"));
    let mut nf = Command::new("nfcapd");
    // The largest receive buffer rmem_max allows: with the default 208 KiB the collector
    // itself dropped a third of the records that arrive in one burst when a flow table is
    // flushed (every exporter alike).
    let rmem = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(4 << 20);
    nf.arg("-w")
        .arg(&flows_dir)
        .args(["-p", port, "-b", host, "-B", &rmem.to_string()]);
    let mut nfcapd = in_host(&lab.probe.netns, GEN_CPU, &nf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start nfcapd")?;
    let cmd = e.command(poolcap, &lab.probe.iface, COLLECTOR, p.flows, &dir)?;
    let log = std::fs::File::create(dir.join("exporter.log"))?;
    let mut exporter = in_host(&lab.probe.netns, TOOL_CPU, &cmd)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("start {}", e.program()))?;
    std::thread::sleep(WARM_UP);
    if let Ok(Some(s)) = exporter.try_wait() {
        bail!(
            "{} exited at start ({s}); see its log in {}",
            e.name(),
            out.display()
        );
    }
    let cpu0 = tree_cpu(exporter.id());
    let count = (p.rate as f64 * p.seconds) as u64;
    let (sent, seconds) = generate(poolcap, &lab, p.flows, p.rate, count)?;
    std::thread::sleep(SETTLE);
    let cpu_s = tree_cpu(exporter.id()) - cpu0;
    match e.stop_command(&dir) {
        Some(mut c) => {
            let _ = c.stdout(Stdio::null()).stderr(Stdio::null()).status();
        }
        None => signal(&exporter, e.stop_signal()),
    }
    wait_exit(&mut exporter, Duration::from_secs(30));
    // Records still in flight on the loopback.
    std::thread::sleep(Duration::from_millis(500));
    signal(&nfcapd, "TERM");
    wait_exit(&mut nfcapd, Duration::from_secs(10));
    let (records, packets, bytes, distinct) = nfdump(&flows_dir)?;
    Ok(Row {
        exporter: e.name(),
        flows: p.flows,
        rate: p.rate,
        sent,
        seconds,
        records,
        packets,
        bytes,
        distinct,
        cpu_s,
    })
}

/// (records, packets, bytes, distinct 5-tuples) of the nfcapd files in `dir`.
fn nfdump(dir: &Path) -> anyhow::Result<(u64, u64, u64, u64)> {
    let out = Command::new("nfdump")
        .arg("-R")
        .arg(dir)
        .args(["-q", "-N", "-o", "fmt:%sa,%sp,%da,%dp,%pr,%pkt,%byt"])
        .output()
        .context("run nfdump")?;
    if !out.status.success() {
        bail!("nfdump: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let (mut records, mut packets, mut bytes) = (0, 0, 0);
    let mut keys = std::collections::HashSet::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() < 7 {
            continue;
        }
        records += 1;
        packets += f[5].parse::<u64>().unwrap_or(0);
        bytes += f[6].parse::<u64>().unwrap_or(0);
        keys.insert(f[..5].join(","));
    }
    Ok((records, packets, bytes, keys.len() as u64))
}

/// CPU seconds of a running probe per `/metrics` scrape: (seconds, scrapes, bytes).
fn scrape_cost(poolcap: &str, scrapes: usize, out: &Path) -> anyhow::Result<(f64, usize, usize)> {
    let lab = Lab::unique(2, 2)?;
    let dir = work_dir(out, "scrape")?;
    let cmd = FlowExporter::Poolcap.command(poolcap, &lab.probe.iface, COLLECTOR, 1000, &dir)?;
    let mut probe = in_host(&lab.probe.netns, TOOL_CPU, &cmd);
    probe
        .args(["--metrics", METRICS])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = probe.spawn().context("start poolcap probe")?;
    std::thread::sleep(WARM_UP);
    // Some traffic first, so the rule and flow families have values.
    generate(poolcap, &lab, 1000, 50_000, 20_000)?;
    let url = format!("http://{METRICS}/metrics");
    let mut curl = Command::new("curl");
    curl.args(["-sf", &url]);
    let size = in_host(&lab.probe.netns, GEN_CPU, &curl)
        .output()?
        .stdout
        .len();
    let cpu0 = tree_cpu(child.id());
    for _ in 0..scrapes {
        let ok = in_host(&lab.probe.netns, GEN_CPU, &curl)
            .stdout(Stdio::null())
            .status()?
            .success();
        if !ok {
            bail!("curl {url} failed");
        }
    }
    let per = (tree_cpu(child.id()) - cpu0) / scrapes as f64;
    signal(&child, "INT");
    wait_exit(&mut child, Duration::from_secs(10));
    Ok((per, scrapes, size))
}

/// The repository's Kafka script, if this is run from the repository.
fn kafka_script() -> Option<PathBuf> {
    let p = PathBuf::from("scripts/kafka.sh");
    p.is_file().then_some(p)
}

/// Records `--kafka` delivered to a local broker, over the traffic's seconds, and records
/// not delivered; None without the broker's jars.
fn kafka_throughput(
    poolcap: &str,
    scale: Scale,
    out: &Path,
) -> anyhow::Result<Option<(u64, f64, u64)>> {
    let Some(script) = kafka_script() else {
        return Ok(None);
    };
    let fetched = Command::new(&script).arg("fetch").output()?;
    if !fetched.status.success() {
        return Ok(None);
    }
    let lab = Lab::unique(1, 2)?;
    let dir = work_dir(out, "kafka")?;
    let mut run = Command::new(&script);
    run.arg("run")
        .arg(dir.join("kafka"))
        .arg(BROKER.rsplit(':').next().unwrap_or("9092"));
    let log = std::fs::File::create(dir.join("broker.log"))?;
    let mut broker = in_host(&lab.probe.netns, GEN_CPU, &run)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("start the Kafka broker")?;
    let ready = Instant::now() + Duration::from_secs(90);
    loop {
        let mut meta = Command::new("kcat");
        meta.args(["-b", BROKER, "-L", "-m", "2"]);
        let up = in_host(&lab.probe.netns, GEN_CPU, &meta)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if up {
            break;
        }
        if Instant::now() > ready {
            signal(&broker, "TERM");
            wait_exit(&mut broker, Duration::from_secs(20));
            bail!("the Kafka broker did not come up in 90 s");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let flows = scale.pick(100, 20_000, 50_000);
    let cmd = FlowExporter::Poolcap.command(poolcap, &lab.probe.iface, COLLECTOR, flows, &dir)?;
    // The same probe without IPFIX: Kafka only, a period every 250 ms.
    let args: Vec<_> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .take_while(|a| a != "--ipfix")
        .collect();
    let config = dir.join("probe.toml");
    let text = std::fs::read_to_string(&config)?.replace("period = \"1s\"", "period = \"250ms\"");
    std::fs::write(&config, text)?;
    let mut probe = Command::new(poolcap);
    probe
        .args(&args)
        .args(["--kafka", BROKER, "--topic", "bench"]);
    let mut child = in_host(&lab.probe.netns, TOOL_CPU, &probe)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("start poolcap probe --kafka")?;
    std::thread::sleep(WARM_UP);
    let rate = scale.pick(5_000, 100_000, 100_000);
    let (_, seconds) = generate(
        poolcap,
        &lab,
        flows,
        rate,
        (rate as f64 * scale.pick(0.5, 2.0, 5.0)) as u64,
    )?;
    std::thread::sleep(SETTLE);
    signal(&child, "INT");
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read as _;
        let _ = e.read_to_string(&mut stderr);
    }
    wait_exit(&mut child, Duration::from_secs(30));
    signal(&broker, "TERM");
    wait_exit(&mut broker, Duration::from_secs(30));
    // `kafka: F flow records delivered, FL not delivered; O reports and alerts delivered, OL not delivered`
    let line = stderr
        .lines()
        .find(|l| l.starts_with("kafka: "))
        .with_context(|| format!("no kafka line from the probe: {stderr}"))?;
    let n: Vec<u64> = line
        .split([' ', ',', ';'])
        .filter_map(|w| w.parse().ok())
        .collect();
    let [f, fl, o, ol] = n[..] else {
        bail!("unexpected kafka line: {line}");
    };
    Ok(Some((f + o, seconds, fl + ol)))
}

/// The markdown summary.
fn summary(scale: Scale, rows: &[Row], notes: &[String]) -> String {
    let mut s = format!(
        "# bench export ({})\n\nOne run per point and exporter, each alone in a fresh lab: generator on CPU {GEN_CPU}, exporter on CPU {TOOL_CPU}, IPFIX to nfcapd on the probe host's loopback, read back with nfdump. CPU is the exporter's processes' user+system time during the traffic, per packet sent.\n\n",
        scale.name()
    );
    s += "| exporter | flows | offered pps | sent | records | flows seen | records/s | CPU ns/packet | packets in records | loss |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {} | {:.2}% |",
            r.exporter,
            r.flows,
            r.rate,
            r.sent,
            r.records,
            r.distinct,
            r.records as f64 / r.seconds.max(1e-9),
            r.cpu_s * 1e9 / r.sent.max(1) as f64,
            r.packets,
            r.loss() * 100.0
        );
    }
    s += "\n";
    for n in notes {
        let _ = writeln!(s, "- {n}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_grow_with_the_scale_and_a_row_computes_its_rates() {
        assert!(points(Scale::Smoke).len() < points(Scale::Quick).len());
        assert!(points(Scale::Quick).len() < points(Scale::Full).len());
        assert!(points(Scale::Quick).iter().any(|p| p.flows == 100_000));
        let r = Row {
            exporter: "poolcap",
            flows: 10,
            rate: 1000,
            sent: 1000,
            seconds: 2.0,
            records: 10,
            packets: 990,
            bytes: 99_000,
            distinct: 10,
            cpu_s: 0.001,
        };
        assert!((r.loss() - 0.01).abs() < 1e-9);
        assert_eq!(
            r.csv(),
            "poolcap,10,1000,1000,2.000,10,990,99000,10,0.001,5,1000,0.010000"
        );
        assert_eq!(Row::HEADER.split(',').count(), r.csv().split(',').count());
        let md = summary(Scale::Quick, &[r], &["n".into()]);
        assert!(
            md.contains("| poolcap | 10 | 1000 | 1000 | 10 | 10 | 5 | 1000 | 990 | 1.00% |"),
            "{md}"
        );
    }
}
