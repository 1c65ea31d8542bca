//! The formatters: `raw.jsonl` (one object per run, written as runs finish so an interrupted
//! bench keeps what it measured, and read back by `poolcap bench report`), `results.csv` (one
//! row per point and subject, min / median / max of every metric) and the markdown tables of
//! `summary.md` and `BENCHMARKS.md` (`poolcap_bench::doc`): results, poolcap as a ratio to the
//! best peer at each point, and the suite's targets.

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::peer::{CaptureSpec, Traffic};
use super::point::Record;
use super::sampler::{growth, Sample};
use super::stats::Spread;

/// Appends records to `raw.jsonl` as they come.
pub struct RawLog(File);

impl RawLog {
    /// Creates (truncates) the log.
    pub fn create(path: &Path) -> anyhow::Result<RawLog> {
        let f = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(RawLog(f))
    }

    /// Writes one record as one line.
    pub fn append(&mut self, r: &Record) -> anyhow::Result<()> {
        writeln!(self.0, "{}", serde_json::to_string(r)?)?;
        self.0.flush()?;
        Ok(())
    }
}

/// Reads `raw.jsonl` back (a torn last line, from a run killed mid-write, is skipped).
pub fn read_raw(path: &Path) -> anyhow::Result<Vec<Record>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut v = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        match serde_json::from_str(l) {
            Ok(r) => v.push(r),
            Err(_) if i + 1 == lines.len() => {}
            Err(e) => anyhow::bail!("{}:{}: {e}", path.display(), i + 1),
        }
    }
    Ok(v)
}

/// Which way a metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Smaller is better (loss, CPU).
    Lower,
    /// Larger is better (rates).
    Higher,
}

/// A number taken from every run.
pub struct Metric {
    /// Column name in the CSV.
    pub key: &'static str,
    /// Column title in the summary.
    pub title: &'static str,
    /// Which way is better (for ratios to the best peer).
    pub better: Better,
    /// Its value in a run.
    pub get: fn(&Record) -> Option<f64>,
    /// Shows a value in the summary.
    pub show: fn(f64) -> String,
}

fn n0(x: f64) -> String {
    format!("{x:.0}")
}
fn kilo(x: f64) -> String {
    format!("{:.0}k", x / 1e3)
}
/// A share as a percentage: `0`, `0.0123%` below a tenth of a percent, else `12.34%`.
pub fn pct(x: f64) -> String {
    match x {
        0.0 => "0".to_owned(),
        x if x.abs() < 0.001 => format!("{:.4}%", x * 100.0),
        x => format!("{:.2}%", x * 100.0),
    }
}
fn f2(x: f64) -> String {
    format!("{x:.2}")
}
fn f3(x: f64) -> String {
    format!("{x:.3}")
}
fn f4(x: f64) -> String {
    match x {
        0.0 => "0".to_owned(),
        x if x.abs() < 0.001 => format!("{x:.1e}"),
        x => format!("{x:.4}"),
    }
}

fn extra(r: &Record, k: &str) -> Option<f64> {
    r.counts.as_ref()?.extra.get(k).copied()
}

/// Share of the offered packets, with `n` packets.
fn of_offered(r: &Record, n: f64) -> Option<f64> {
    let offered = r.sent.as_ref()?.frames;
    (offered > 0).then(|| n / offered as f64)
}

/// Per captured packet.
fn per_captured(r: &Record, n: f64) -> Option<f64> {
    let c = r.counts.as_ref()?.captured;
    (c > 0).then(|| n / c as f64)
}

/// Packets taken from the kernel per second of sending: captured plus those the pool had no
/// room for (they were read, then dropped), scaled to the sender's rate.
fn capture_pps(r: &Record) -> Option<f64> {
    let c = r.counts.as_ref()?;
    let taken = c.captured as f64 + extra(r, "dropped_pool").unwrap_or(0.0);
    Some(of_offered(r, taken)? * r.sent.as_ref()?.pps)
}

/// Packets that went through the analysis (captured, which for poolcap means through the
/// x-loop), per second of sending.
fn analysis_pps(r: &Record) -> Option<f64> {
    Some(of_offered(r, r.captured()? as f64)? * r.sent.as_ref()?.pps)
}

/// Packets the kernel dropped (ring full), as a share of the offered.
fn kernel_drop(r: &Record) -> Option<f64> {
    let d = extra(r, "dropped_kernel").unwrap_or(r.counts.as_ref()?.dropped as f64);
    of_offered(r, d)
}

/// offered − captured − dropped − filtered − not_taken, as the tool counts them: 0 when the
/// accounting equation holds; none for a tool that keeps no accounts (the bridge).
fn unaccounted(r: &Record) -> Option<f64> {
    if r.capture.as_ref().is_some_and(|c| !c.tool.accounts()) {
        return None;
    }
    let c = r.counts.as_ref()?;
    let offered = r.sent.as_ref()?.frames as f64;
    let [filtered, not_taken] = ["filtered", "not_taken"].map(|k| extra(r, k).unwrap_or(0.0));
    Some(offered - c.captured as f64 - c.dropped as f64 - filtered - not_taken)
}

/// Frames that reached the sink (each once) per second of sending.
fn forwarded_pps(r: &Record) -> Option<f64> {
    let seconds = r.sent.as_ref()?.seconds;
    let n = extra(r, "sink_unique")?;
    (seconds > 0.0).then(|| n / seconds)
}

/// Bytes of the written file (compressed, if so) per second of sending, in MB/s: what the
/// tool kept up with while the traffic lasted.
fn written_mb_per_s(r: &Record) -> Option<f64> {
    let seconds = r.sent.as_ref()?.seconds;
    let bytes = r.file_bytes?;
    (seconds > 0.0).then(|| bytes as f64 / 1e6 / seconds)
}

/// Relative error of the generator's own rate against the asked rate.
fn rate_error(r: &Record) -> Option<f64> {
    Some(r.sent.as_ref()?.pps / r.traffic.rate? as f64 - 1.0)
}

/// Relative error of the rate seen on the wire (capture timestamps) against the asked rate.
fn wire_rate_error(r: &Record) -> Option<f64> {
    Some(r.spacing?.wire_pps / r.traffic.rate? as f64 - 1.0)
}

/// Every metric, in CSV column order.
pub const METRICS: &[Metric] = &[
    Metric {
        key: "offered",
        title: "offered",
        better: Better::Higher,
        get: |r| Some(r.sent.as_ref()?.frames as f64),
        show: n0,
    },
    Metric {
        key: "sender_pps",
        title: "sender pps",
        better: Better::Higher,
        get: |r| Some(r.sent.as_ref()?.pps),
        show: kilo,
    },
    Metric {
        key: "captured",
        title: "captured",
        better: Better::Higher,
        get: |r| Some(r.captured()? as f64),
        show: n0,
    },
    Metric {
        key: "dropped",
        title: "dropped (tool)",
        better: Better::Lower,
        get: |r| Some(r.counts.as_ref()?.dropped as f64),
        show: n0,
    },
    Metric {
        key: "loss",
        title: "loss",
        better: Better::Lower,
        get: |r| r.loss,
        show: pct,
    },
    Metric {
        key: "sender_cpu",
        title: "sender CPU (of a core)",
        better: Better::Lower,
        get: |r| {
            let s = r.sent.as_ref()?;
            Some(s.cpu_s? / s.seconds).filter(|x| x.is_finite())
        },
        show: pct,
    },
    Metric {
        key: "cpu_s",
        title: "tool CPU s",
        better: Better::Lower,
        get: |r| r.cpu_s,
        show: f2,
    },
    Metric {
        key: "cpu_s_per_mpkt",
        title: "CPU s/Mpkt",
        better: Better::Lower,
        get: |r| Some(r.cpu_s? * 1e6 / r.captured().filter(|&c| c > 0)? as f64),
        show: f3,
    },
    Metric {
        key: "cpu_share",
        title: "CPU share when runnable",
        better: Better::Higher,
        get: |r| {
            let (s, _) = r.sched?;
            let busy = s.run_ns + s.wait_ns;
            (busy > 0).then(|| s.run_ns as f64 / busy as f64)
        },
        show: pct,
    },
    Metric {
        key: "cpu_wait",
        title: "waiting for a CPU",
        better: Better::Lower,
        get: |r| {
            let (s, window) = r.sched?;
            (window > 0.0).then(|| s.wait_ns as f64 / 1e9 / window)
        },
        show: pct,
    },
    Metric {
        key: "busy_ns_per_frame",
        title: "tool CPU busy ns/frame",
        better: Better::Lower,
        get: |r| Some(r.busy_s? * 1e9 / r.sent.as_ref()?.frames.max(1) as f64),
        show: n0,
    },
    Metric {
        key: "wait_per_slice_ms",
        title: "wait per timeslice ms",
        better: Better::Lower,
        get: |r| {
            let (s, _) = r.sched?;
            (s.slices > 0).then(|| s.wait_ns as f64 / 1e6 / s.slices as f64)
        },
        show: f3,
    },
    Metric {
        key: "wall_s",
        title: "wall s",
        better: Better::Lower,
        get: |r| Some(r.wall_s),
        show: f2,
    },
    Metric {
        key: "mb_per_s",
        title: "MB/s written",
        better: Better::Higher,
        get: written_mb_per_s,
        show: n0,
    },
    Metric {
        key: "rate_error",
        title: "rate error (gen)",
        better: Better::Lower,
        get: rate_error,
        show: pct,
    },
    Metric {
        key: "wire_rate_error",
        title: "rate error (wire)",
        better: Better::Lower,
        get: wire_rate_error,
        show: pct,
    },
    Metric {
        key: "max_back_to_back",
        title: "longest back-to-back run",
        better: Better::Lower,
        get: |r| Some(r.spacing?.max_back_to_back as f64),
        show: n0,
    },
    Metric {
        key: "p5_gap_ns",
        title: "5th pct gap ns",
        better: Better::Lower,
        get: |r| Some(r.spacing?.p5_gap_ns),
        show: n0,
    },
    Metric {
        key: "batch",
        title: "gen batch",
        better: Better::Lower,
        get: |r| Some(r.sent.as_ref()?.batch? as f64),
        show: n0,
    },
    Metric {
        key: "pool_peak_chunks",
        title: "peak pool chunks",
        better: Better::Lower,
        get: |r| r.counts.as_ref()?.extra.get("pool_peak_chunks").copied(),
        show: n0,
    },
    Metric {
        key: "capture_pps",
        title: "capture pps",
        better: Better::Higher,
        get: capture_pps,
        show: kilo,
    },
    Metric {
        key: "analysis_pps",
        title: "analysis pps",
        better: Better::Higher,
        get: analysis_pps,
        show: kilo,
    },
    Metric {
        key: "kernel_drop",
        title: "kernel drops",
        better: Better::Lower,
        get: kernel_drop,
        show: pct,
    },
    Metric {
        key: "pool_drop",
        title: "pool drops",
        better: Better::Lower,
        get: |r| of_offered(r, extra(r, "dropped_pool")?),
        show: pct,
    },
    Metric {
        key: "hot_share",
        title: "hot queue share",
        better: Better::Lower,
        get: |r| extra(r, "hot_queue_share"),
        show: pct,
    },
    Metric {
        key: "away_share",
        title: "processed away from home",
        better: Better::Lower,
        get: |r| per_captured(r, extra(r, "offloaded_out")?),
        show: pct,
    },
    Metric {
        key: "paused_ms",
        title: "paused ms",
        better: Better::Lower,
        get: |r| extra(r, "paused_ms"),
        show: n0,
    },
    Metric {
        key: "syscalls_per_pkt",
        title: "syscalls/pkt (perf)",
        better: Better::Lower,
        get: |r| per_captured(r, r.syscalls? as f64),
        show: f4,
    },
    Metric {
        key: "wait_syscalls_per_pkt",
        title: "wait syscalls/pkt (own count)",
        better: Better::Lower,
        get: |r| per_captured(r, extra(r, "syscalls")?),
        show: f4,
    },
    Metric {
        key: "switches_per_pkt",
        title: "ctx switches/pkt",
        better: Better::Lower,
        get: |r| per_captured(r, (r.voluntary_switches? + r.involuntary_switches?) as f64),
        show: f4,
    },
    Metric {
        key: "unaccounted",
        title: "unaccounted",
        better: Better::Lower,
        get: unaccounted,
        show: n0,
    },
    Metric {
        key: "forwarded_pps",
        title: "forwarded pps",
        better: Better::Higher,
        get: forwarded_pps,
        show: kilo,
    },
    Metric {
        key: "forwarded",
        title: "forwarded (tool)",
        better: Better::Higher,
        get: |r| extra(r, "forwarded"),
        show: n0,
    },
    Metric {
        key: "out_tx",
        title: "left OUT",
        better: Better::Higher,
        get: |r| extra(r, "out_tx"),
        show: n0,
    },
    Metric {
        key: "dropped_tx",
        title: "dropped tx",
        better: Better::Lower,
        get: |r| extra(r, "dropped_tx"),
        show: n0,
    },
    Metric {
        key: "reordered",
        title: "reordered",
        better: Better::Lower,
        get: |r| extra(r, "reordered"),
        show: n0,
    },
    Metric {
        key: "duplicates",
        title: "duplicates",
        better: Better::Lower,
        get: |r| extra(r, "sink_duplicates"),
        show: n0,
    },
    Metric {
        key: "lat_p50_us",
        title: "p50 µs",
        better: Better::Lower,
        get: |r| extra(r, "lat_p50_us"),
        show: n0,
    },
    Metric {
        key: "lat_p99_us",
        title: "p99 µs",
        better: Better::Lower,
        get: |r| extra(r, "lat_p99_us"),
        show: n0,
    },
    Metric {
        key: "lat_p999_us",
        title: "p99.9 µs",
        better: Better::Lower,
        get: |r| extra(r, "lat_p999_us"),
        show: n0,
    },
    Metric {
        key: "lat_max_us",
        title: "max µs",
        better: Better::Lower,
        get: |r| extra(r, "lat_max_us"),
        show: n0,
    },
    Metric {
        key: "peak_mib",
        title: "peak memory MiB",
        better: Better::Lower,
        get: |r| extra(r, "peak_rss_kib").map(|k| k / 1024.0),
        show: n0,
    },
    Metric {
        key: "rss_growth_kib",
        title: "RSS growth after warm-up KiB",
        better: Better::Lower,
        get: |r| Some(growth(&r.samples)?.rss_kib as f64),
        show: n0,
    },
    Metric {
        key: "fds_change",
        title: "open files max − min",
        better: Better::Lower,
        get: |r| growth(&r.samples).map(|g| (g.fds.1 - g.fds.0) as f64),
        show: n0,
    },
    Metric {
        key: "threads_change",
        title: "threads max − min",
        better: Better::Lower,
        get: |r| growth(&r.samples).map(|g| (g.threads.1 - g.threads.0) as f64),
        show: n0,
    },
    Metric {
        key: "index_share",
        title: "index / packet bytes",
        better: Better::Lower,
        get: |r| Some(extra(r, "index_bytes")? / r.file_bytes.filter(|&b| b > 0)? as f64),
        show: pct,
    },
    Metric {
        key: "query_s",
        title: "seconds (cache dropped)",
        better: Better::Lower,
        get: |r| extra(r, "query_s"),
        show: f3,
    },
    Metric {
        key: "read_mb",
        title: "MB read",
        better: Better::Lower,
        get: |r| Some(extra(r, "bytes_read")? / 1e6),
        show: f2,
    },
    Metric {
        key: "matched",
        title: "packets matched",
        better: Better::Higher,
        get: |r| extra(r, "matched"),
        show: n0,
    },
    Metric {
        key: "busy_before",
        title: "machine busy before",
        better: Better::Lower,
        get: |r| r.busy_before,
        show: pct,
    },
];

/// The metric named `key`.
pub fn metric(key: &str) -> &'static Metric {
    METRICS
        .iter()
        .find(|m| m.key == key)
        .unwrap_or_else(|| panic!("no metric {key}"))
}

/// All runs of one subject at one point, summarised.
#[derive(Debug, Clone)]
pub struct Row {
    /// Point id.
    pub point: String,
    /// Subject name.
    pub subject: String,
    /// Whether it is poolcap's.
    pub poolcap: bool,
    /// Comparison group.
    pub group: String,
    /// rps setting of the runs.
    pub rps: bool,
    /// The point's traffic.
    pub traffic: Traffic,
    /// The tool's settings.
    pub capture: Option<CaptureSpec>,
    /// Runs that finished.
    pub ok: usize,
    /// Runs that failed, and the first error.
    pub failed: Vec<String>,
    /// Runs whose written file ended inside a record.
    pub truncated_files: usize,
    /// Spread of every metric over the finished runs, in [`METRICS`] order.
    pub spreads: Vec<Option<Spread>>,
}

impl Row {
    /// The spread of metric `key`.
    pub fn get(&self, key: &str) -> Option<Spread> {
        let i = METRICS.iter().position(|m| m.key == key)?;
        self.spreads[i]
    }

    /// The median of metric `key`.
    pub fn median(&self, key: &str) -> Option<f64> {
        self.get(key).map(|s| s.median)
    }
}

/// Groups records by point and subject, in the order they first appear.
pub fn aggregate(records: &[Record]) -> Vec<Row> {
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for r in records {
        if !keys.contains(&(&r.point, &r.subject)) {
            keys.push((&r.point, &r.subject));
        }
    }
    keys.into_iter()
        .map(|(p, s)| {
            let runs: Vec<&Record> = records
                .iter()
                .filter(|r| r.point == p && r.subject == s)
                .collect();
            let ok: Vec<&Record> = runs.iter().copied().filter(|r| r.error.is_none()).collect();
            let first = runs[0];
            Row {
                point: p.to_owned(),
                subject: s.to_owned(),
                poolcap: first.poolcap,
                group: first.group.clone(),
                rps: first.rps,
                traffic: first.traffic.clone(),
                capture: first.capture.clone(),
                ok: ok.len(),
                failed: runs.iter().filter_map(|r| r.error.clone()).collect(),
                truncated_files: ok.iter().filter(|r| r.file_truncated).count(),
                spreads: METRICS
                    .iter()
                    .map(|m| Spread::of(ok.iter().filter_map(|r| (m.get)(r))))
                    .collect(),
            }
        })
        .collect()
}

/// A CSV field, quoted when it must be.
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// Writes the samples of every run that has some as CSV: `point,subject,run,t_s,rss_kib,
/// fds,threads`.
pub fn write_samples_csv<'a>(
    path: &Path,
    runs: impl IntoIterator<Item = (&'a str, &'a str, usize, &'a [Sample])>,
) -> anyhow::Result<()> {
    let mut out = String::from("point,subject,run,t_s,rss_kib,fds,threads\n");
    for (point, subject, run, samples) in runs {
        for s in samples {
            out.push_str(&format!(
                "{},{},{run},{:.3},{},{},{}\n",
                csv_field(point),
                csv_field(subject),
                s.t_s,
                s.rss_kib,
                s.fds,
                s.threads
            ));
        }
    }
    std::fs::write(path, out).with_context(|| format!("cannot write {}", path.display()))
}

/// Writes `results.csv`: one row per point and subject.
pub fn write_csv(path: &Path, suite: &str, rows: &[Row]) -> anyhow::Result<()> {
    let mut out = String::from(
        "suite,point,subject,poolcap,rps,size,rate_pps,count,burst,idle_ms,write,buffer_kib,pool,load,runs_ok,runs_failed",
    );
    for m in METRICS {
        let _ = write!(out, ",{0}_min,{0}_median,{0}_max", m.key);
    }
    out.push('\n');
    let opt = |x: Option<String>| x.unwrap_or_default();
    for r in rows {
        let t = &r.traffic;
        let c = r.capture.as_ref();
        let fields = [
            suite.to_owned(),
            r.point.clone(),
            r.subject.clone(),
            r.poolcap.to_string(),
            r.rps.to_string(),
            t.size.to_string(),
            opt(t.rate.map(|x| x.to_string())),
            t.count.to_string(),
            opt(t.burst.map(|x| x.to_string())),
            opt(t.idle.map(|d| format!("{:.1}", d.as_secs_f64() * 1e3))),
            opt(c.map(|c| c.write.to_string())),
            opt(c.map(|c| c.buffer_kib.to_string())),
            opt(c.and_then(|c| c.pool).map(|(m, r)| format!("{m}x{r}"))),
            opt(c.map(|c| c.load.to_string())),
            r.ok.to_string(),
            r.failed.len().to_string(),
        ];
        out.push_str(&fields.map(|f| csv_field(&f)).join(","));
        for s in &r.spreads {
            match s {
                Some(s) => {
                    let _ = write!(out, ",{},{},{}", s.min, s.median, s.max);
                }
                None => out.push_str(",,,"),
            }
        }
        out.push('\n');
    }
    std::fs::write(path, out).with_context(|| format!("cannot write {}", path.display()))
}

/// `median (min–max)` of a metric, or `–`.
pub fn cell(row: &Row, key: &str) -> String {
    let m = metric(key);
    match row.get(key) {
        None => "–".to_owned(),
        Some(s) if (m.show)(s.min) == (m.show)(s.max) => (m.show)(s.median),
        Some(s) => format!(
            "{} ({}–{})",
            (m.show)(s.median),
            (m.show)(s.min),
            (m.show)(s.max)
        ),
    }
}

/// Text for a markdown table cell (a `|` would end the cell).
pub fn md_cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// A markdown table of `rows` with the given metric columns.
pub fn table(rows: &[Row], columns: &[&str]) -> String {
    let mut s = String::from("| point | subject | runs |");
    for c in columns {
        let _ = write!(s, " {} |", metric(c).title);
    }
    s.push_str("\n|---|---|---|");
    s.push_str(&"---|".repeat(columns.len()));
    s.push('\n');
    for r in rows {
        let runs = if r.failed.is_empty() {
            r.ok.to_string()
        } else {
            format!("{} ({} failed)", r.ok, r.failed.len())
        };
        let name = if r.poolcap {
            format!("**{}**", md_cell(&r.subject))
        } else {
            md_cell(&r.subject)
        };
        let _ = write!(s, "| {} | {} | {} |", md_cell(&r.point), name, runs);
        for c in columns {
            let _ = write!(s, " {} |", cell(r, c));
        }
        s.push('\n');
    }
    s
}

/// poolcap's median against the best peer's at one point, for one metric.
pub struct Versus {
    /// poolcap's median.
    pub poolcap: f64,
    /// The best peer and its median.
    pub best: Option<(String, f64)>,
}

impl Versus {
    /// Compares the first poolcap subject measured at `point` with the peers there, on `key`.
    pub fn at(rows: &[Row], point: &str, key: &str) -> Option<Versus> {
        let row = rows.iter().find(|r| r.point == point && r.poolcap)?;
        Versus::of(rows, row, key)
    }

    /// Compares poolcap's `row` with the peers at its point in its group (or of group ""),
    /// on `key`.
    pub fn of(rows: &[Row], row: &Row, key: &str) -> Option<Versus> {
        let poolcap = row.median(key)?;
        let lower = metric(key).better == Better::Lower;
        let best = rows
            .iter()
            .filter(|r| r.point == row.point && !r.poolcap)
            .filter(|r| r.group.is_empty() || r.group == row.group)
            .filter_map(|r| Some((r.subject.clone(), r.median(key)?)))
            .min_by(|a, b| {
                let o = a.1.total_cmp(&b.1);
                if lower {
                    o
                } else {
                    o.reverse()
                }
            });
        Some(Versus { poolcap, best })
    }

    /// `poolcap / best` as text (`=` when both are zero).
    pub fn ratio(&self) -> String {
        match &self.best {
            None => "no peer".to_owned(),
            Some((_, b)) if *b == 0.0 && self.poolcap == 0.0 => "both 0".to_owned(),
            Some((_, b)) if *b == 0.0 => "∞ (best peer 0)".to_owned(),
            Some((_, b)) => format!("{:.2}", self.poolcap / b),
        }
    }
}

/// A markdown table: each poolcap subject at each point, each metric as a ratio to the best
/// peer there (`–` where no peer was measured).
pub fn ratio_table(rows: &[Row], keys: &[&str]) -> String {
    let mut s = String::from("| point | poolcap subject |");
    for k in keys {
        let _ = write!(s, " {} poolcap / best peer |", metric(k).title);
    }
    s.push_str("\n|---|---|");
    s.push_str(&"---|".repeat(keys.len()));
    s.push('\n');
    let mut any = false;
    for row in rows.iter().filter(|r| r.poolcap && r.capture.is_some()) {
        let cells: Vec<String> = keys
            .iter()
            .map(|k| {
                let m = metric(k);
                match Versus::of(rows, row, k) {
                    Some(Versus {
                        poolcap,
                        best: Some((name, b)),
                    }) => {
                        let v = Versus {
                            poolcap,
                            best: Some((name.clone(), b)),
                        };
                        format!(
                            "{} / {} ({}) = {}",
                            (m.show)(poolcap),
                            (m.show)(b),
                            md_cell(&name),
                            v.ratio()
                        )
                    }
                    _ => "–".to_owned(),
                }
            })
            .collect();
        if cells.iter().all(|c| c == "–") {
            continue;
        }
        any = true;
        let _ = writeln!(
            s,
            "| {} | {} | {} |",
            md_cell(&row.point),
            md_cell(&row.subject),
            cells.join(" | ")
        );
    }
    if any {
        s
    } else {
        String::new()
    }
}

/// The machine a bench ran on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    /// CPUs online.
    pub nproc: usize,
    /// Kernel release.
    pub kernel: String,
    /// CPU model name.
    pub cpu: String,
}

impl Machine {
    /// Reads /proc.
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |l: &str, k: &str| {
            l.strip_prefix(k)
                .filter(|r| r.trim_start().starts_with(':'))
                .map(|r| r.trim_start()[1..].trim().to_owned())
        };
        Machine {
            nproc: cpuinfo
                .lines()
                .filter(|l| field(l, "processor").is_some())
                .count(),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_default(),
            cpu: cpuinfo
                .lines()
                .find_map(|l| field(l, "model name"))
                .unwrap_or_else(|| "unknown".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::{Counts, Generator, Sent, Tool};

    fn rec(point: &str, subject: &str, poolcap: bool, captured: u64, pps: f64) -> Record {
        Record {
            suite: "t".into(),
            point: point.into(),
            subject: subject.into(),
            poolcap,
            group: String::new(),
            run: 1,
            rps: false,
            traffic: Traffic::top(64, 1000),
            generator: Generator::Poolcap,
            capture: Some(CaptureSpec::new(Tool::Tcpdump, 4096)),
            sent: Some(Sent {
                frames: 1000,
                pps,
                seconds: 1.0,
                batch: Some(64),
                cpu_s: None,
            }),
            counts: Some(Counts {
                captured,
                dropped: 1000 - captured,
                ..Counts::default()
            }),
            in_file: None,
            file_bytes: None,
            file_truncated: false,
            loss: Some((1000 - captured) as f64 / 1000.0),
            cpu_s: Some(0.01),
            cpu_total_s: None,
            spacing: None,
            syscalls: Some(captured / 2),
            voluntary_switches: Some(10),
            involuntary_switches: Some(0),
            sched: None,
            busy_s: None,
            wall_s: 1.0,
            busy_before: None,
            samples: Vec::new(),
            error: None,
        }
    }

    #[test]
    fn aggregates_and_compares_with_the_best_peer() {
        let mut rs = vec![
            rec("p", "poolcap", true, 1000, 400e3),
            rec("p", "tcpdump", false, 900, 500e3),
            rec("p", "poolcap", true, 990, 420e3),
            rec("p", "tcpdump", false, 950, 450e3),
            rec("p", "poolcap", true, 1000, 410e3),
            rec("p", "tcpdump", false, 800, 480e3),
        ];
        rs[5].error = Some("boom".into());
        let rows = aggregate(&rs);
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].ok, rows[1].ok, rows[1].failed.len()), (3, 2, 1));
        assert_eq!(rows[0].median("captured"), Some(1000.0));
        assert!((rows[1].median("loss").unwrap() - 0.075).abs() < 1e-12);
        let v = Versus::at(&rows, "p", "sender_pps").unwrap();
        assert_eq!(v.best.as_ref().unwrap().1, 475e3);
        assert_eq!(v.ratio(), format!("{:.2}", 410e3 / 475e3));
        let t = table(&rows, &["loss", "sender_pps"]);
        assert!(
            t.contains("| p | **poolcap** | 3 | 0 (0–1.00%) | 410k (400k–420k) |"),
            "{t}"
        );
        assert!(t.contains("2 (1 failed)"));
        assert_eq!(md_cell("tcpdump | zstd -1"), "tcpdump \\| zstd -1");
        let dir = tempfile::tempdir().unwrap();
        write_csv(&dir.path().join("r.csv"), "t", &rows).unwrap();
        let csv = std::fs::read_to_string(dir.path().join("r.csv")).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[0].split(',').count(),
            lines[1].split(',').count(),
            "{csv}"
        );
    }

    #[test]
    fn throughput_shares_and_per_packet_metrics() {
        let mut r = rec("p", "poolcap", true, 600, 100e3);
        let c = r.counts.as_mut().unwrap();
        c.dropped = 400;
        c.extra.insert("dropped_pool".into(), 300.0);
        c.extra.insert("dropped_kernel".into(), 100.0);
        c.extra.insert("offloaded_out".into(), 150.0);
        c.extra.insert("syscalls".into(), 60.0);
        let get = |k: &str| (metric(k).get)(&r).unwrap();
        // 600 analysed + 300 read then dropped by the pool, of 1000 offered at 100k pps.
        assert!((get("capture_pps") - 90e3).abs() < 1e-6);
        assert_eq!((metric("mb_per_s").get)(&r), None);
        assert!((get("analysis_pps") - 60e3).abs() < 1e-6);
        assert!((get("kernel_drop") - 0.1).abs() < 1e-12);
        assert!((get("pool_drop") - 0.3).abs() < 1e-12);
        assert!((get("away_share") - 0.25).abs() < 1e-12);
        assert!((get("syscalls_per_pkt") - 0.5).abs() < 1e-12);
        assert!((get("wait_syscalls_per_pkt") - 0.1).abs() < 1e-12);
        assert_eq!(get("unaccounted"), 0.0);
        r.counts.as_mut().unwrap().dropped = 350;
        assert_eq!((metric("unaccounted").get)(&r), Some(50.0));
        // 3 MB written over the run's 1 s of sending.
        r.file_bytes = Some(3_000_000);
        assert!(((metric("mb_per_s").get)(&r).unwrap() - 3.0).abs() < 1e-12);
    }

    #[test]
    fn ratios_compare_within_a_group() {
        let mut rs = vec![
            rec("p", "poolcap x=1000", true, 1000, 1.0),
            rec("p", "poolcap x=25000", true, 500, 1.0),
            rec("p", "reader x=1000", false, 900, 1.0),
            rec("p", "reader x=25000", false, 250, 1.0),
            rec("p", "tcpdump", false, 100, 1.0),
        ];
        for (r, g) in rs
            .iter_mut()
            .zip(["x=1000", "x=25000", "x=1000", "x=25000", ""])
        {
            r.group = g.into();
        }
        let rows = aggregate(&rs);
        let v = Versus::of(&rows, &rows[1], "captured").unwrap();
        assert_eq!(v.best, Some(("reader x=25000".into(), 250.0)));
        assert_eq!(v.ratio(), "2.00");
        let v = Versus::of(&rows, &rows[0], "loss").unwrap();
        assert_eq!(v.best.unwrap().0, "reader x=1000");
        let t = ratio_table(&rows, &["captured"]);
        assert_eq!(t.lines().count(), 4, "{t}");
        assert!(t.contains("| p | poolcap x=25000 | 500 / 250 (reader x=25000) = 2.00 |"));
        let raw = tempfile::NamedTempFile::new().unwrap();
        let mut log = RawLog::create(raw.path()).unwrap();
        for r in &rs {
            log.append(r).unwrap();
        }
        std::fs::OpenOptions::new()
            .append(true)
            .open(raw.path())
            .and_then(|mut f| f.write_all(b"{\"suite\":\"t"))
            .unwrap();
        let back = read_raw(raw.path()).unwrap();
        assert_eq!(back.len(), 5);
        assert_eq!(back[1].group, "x=25000");
    }
}
