//! The programs a bench runs, described once each: how to start them, which output line says
//! they are ready, and how to read their final counts. Everything tool-specific lives here, so
//! the measuring code in [`super::point`] has one path for all of them.
//!
//! What each tool prints was recorded by running it in a lab (the unit tests keep those
//! samples):
//! - tcpdump: `tcpdump: listening on ...` on stderr when ready; at exit `N packets captured`,
//!   `N packets received by filter`, `N packets dropped by kernel`. `-Z root` keeps it from
//!   dropping privileges and chowning its output (even `/dev/null`). With `-w -` it writes the
//!   pcap stream to a pipe, which is how it gets a compressor: `tcpdump -w - | zstd -L`
//!   (tcpdump itself cannot compress).
//! - netsniff-ng: `Running! Hang up with ^C!` on stdout, which it buffers when stdout is a
//!   pipe, hence `stdbuf -oL`. At exit, lines starting with `\r`: `N  packets incoming (U unread
//!   on exit)` (N = frames it read from the ring), `N  packets passed filter`, `N  packets
//!   failed filter (out of space)` (kernel drops). In a namespace it must get `-A` (it cannot
//!   tune the root namespace's socket memory, and without -A it spins at 95% of a core) and
//!   `-b CPU` (under `taskset` without -b it read nothing at all in our runs).
//! - dumpcap: `Capturing on 'IF'` on stderr, printed a few milliseconds *before* its socket is
//!   open, so every tool gets a settle time after its ready line. At exit `Packets captured: N`
//!   and `Packets received/dropped on interface 'IF': R/D (...)`. Its -B is in MiB.
//! - poolcap capture: `listening on ...` on stderr; final accounting from `--stats-json`
//!   (per queue: captured, drops, `syscalls`, `offloaded_out`/`offloaded_in`, `paused_ms`).
//!   `--inplace` makes it the plain AF_PACKET fanout reader (the load runs on the kernel ring
//!   in the capture thread, no pool): the Suricata/Zeek-style baseline, measured as a peer.
//! - stenotype: see [`super::stenotype`] (it writes a store only, not a pcap file).
//! - poolcap gen: one JSON object on stdout with `--json`.
//! - trafgen: sends a config file's frames; at exit `N packets outgoing` and
//!   `S sec, U usec on CPUk (N packets)` per sending CPU on stdout.
//! - perf stat `-x,`: one CSV line per event on stderr at exit, `VALUE,UNIT,EVENT,...`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};

use poolcap_gen::frame::{FlowAddr, FrameTemplate};

use crate::child::{Finished, Running};
pub use crate::tool::{check_exit, is_noise, store_dir, CaptureSpec, Counts, Launch, Tool};
use crate::tool::{number_before, stats_text};

/// `zstd:L` / `gzip:L` as (program, level).
pub fn compressor(spec: &str) -> anyhow::Result<(&'static str, i32)> {
    let (kind, level) = spec.split_once(':').unwrap_or((spec, ""));
    let (prog, default) = match kind {
        "zstd" => ("zstd", 3),
        "gzip" => ("gzip", 6),
        _ => bail!("unknown compression `{spec}`"),
    };
    let level = if level.is_empty() {
        default
    } else {
        level
            .parse()
            .with_context(|| format!("bad level in `{spec}`"))?
    };
    Ok((prog, level))
}

impl Tool {
    /// Stops the `running` tool as a user stops a capture (SIGINT), gives it `finish` to
    /// write what it holds and exit, and fails unless it ended well. pmacctd is first asked
    /// for its counters ([`crate::probe_peers::stop_pmacct`]).
    pub fn stop(
        self,
        running: Running,
        finish: Duration,
        stop: &AtomicBool,
    ) -> anyhow::Result<Finished> {
        if self == Tool::Pmacct {
            return crate::probe_peers::stop_pmacct(running, finish, stop);
        }
        let fin = running.interrupt(finish)?;
        check_exit(self.name(), &fin)?;
        Ok(fin)
    }

    /// How to start the tool capturing on `iface` (pinned by the caller to `cpu`); fails on a
    /// compression it cannot do. `out` is the file to write when `spec.write`; `stats` is where
    /// poolcap writes its accounting; `exe` is poolcap.
    pub fn launch(
        self,
        spec: &CaptureSpec,
        iface: &str,
        cpu: usize,
        out: &Path,
        stats: &Path,
        exe: &Path,
    ) -> anyhow::Result<Launch> {
        let kib = spec.buffer_kib.to_string();
        let out = out.to_string_lossy().into_owned();
        let sink = if spec.write {
            out.clone()
        } else {
            "/dev/null".into()
        };
        let snaplen = spec.snaplen.map(|s| s.to_string());
        let mut v: Vec<String> = Vec::new();
        let mut pipe = None;
        let mut push = |xs: &[&str]| v.extend(xs.iter().map(|x| (*x).to_owned()));
        match self {
            Tool::Poolcap => {
                push(&[
                    &exe.to_string_lossy(),
                    "capture",
                    "-i",
                    iface,
                    "-q",
                    "-B",
                    &kib,
                ]);
                let store = spec.store.filter(|_| spec.write);
                let dir = store_dir(Path::new(&out)).to_string_lossy().into_owned();
                if let Some(mb) = store {
                    push(&["--store", &dir, "-C", &mb.to_string()]);
                } else if spec.write || spec.dev_null {
                    let format = match (spec.pcapng, spec.pcap_ns) {
                        (true, _) => "pcapng",
                        (false, true) => "pcap-ns",
                        (false, false) => "pcap",
                    };
                    push(&["--format", format, "-w", &sink]);
                }
                if let (Some(c), true) = (&spec.compress, spec.write) {
                    push(&["--compress", c]);
                }
                if let (Some((mb, files)), true) = (spec.rotate, spec.write) {
                    push(&["-C", &mb.to_string(), "-W", &files.to_string()]);
                }
                if spec.buffered && spec.write {
                    push(&["--buffered"]);
                }
                if let Some(s) = &snaplen {
                    push(&["-s", s]);
                }
                push(
                    &spec
                        .engine_args()
                        .iter()
                        .map(String::as_str)
                        .collect::<Vec<_>>(),
                );
                if spec.inplace {
                    push(&["--inplace"]);
                }
                for (flag, value) in [
                    ("--offload", &spec.offload),
                    ("--wait", &spec.wait),
                    ("--backend", &spec.backend),
                    ("--cpus", &spec.cpus),
                ] {
                    if let Some(x) = value {
                        push(&[flag, x]);
                    }
                }
                push(&["--stats-json", &stats.to_string_lossy()]);
            }
            Tool::Tcpdump => {
                push(&["tcpdump", "-i", iface, "-n", "-Z", "root", "-B", &kib]);
                if let Some(s) = &snaplen {
                    push(&["-s", s]);
                }
                match (&spec.compress, spec.write) {
                    (Some(c), true) => {
                        push(&["-w", "-"]);
                        let (prog, level) = compressor(c)?;
                        pipe = Some(vec![
                            prog.to_owned(),
                            format!("-{level}"),
                            "-q".into(),
                            "-c".into(),
                        ]);
                    }
                    _ => push(&["-w", &sink]),
                }
            }
            Tool::NetsniffNg => {
                push(&["stdbuf", "-oL", "netsniff-ng", "-i", iface, "-s", "-A"]);
                push(&[
                    "-b",
                    &cpu.to_string(),
                    "-S",
                    &format!("{kib}KiB"),
                    "-o",
                    &sink,
                ]);
            }
            Tool::Probe | Tool::Pmacct | Tool::Tshark => {
                // Their configuration and output files go beside the stats file.
                let dir = stats.parent().unwrap_or(Path::new("."));
                return super::probe_peers::launch(self, spec, iface, dir, exe);
            }
            Tool::Forward | Tool::NetsniffFwd | Tool::Bridge | Tool::XdpRedirect => {
                return super::forward_peers::launch(self, spec, iface, cpu, stats, exe);
            }
            Tool::Stenotype => {
                let Some(mb) = spec.store.filter(|_| spec.write) else {
                    bail!("stenotype only writes a store: give it `write` and `store`");
                };
                let dir = store_dir(Path::new(&out));
                v.extend(super::stenotype::argv(spec, iface, &dir, mb));
            }
            Tool::Dumpcap => {
                let mib = spec.buffer_kib.div_ceil(1024).max(1).to_string();
                push(&["dumpcap", "-i", iface, "-q"]);
                if !spec.pcapng {
                    push(&["-P"]);
                }
                push(&["-B", &mib]);
                if let Some(s) = &snaplen {
                    push(&["-s", s]);
                }
                push(&["-w", &sink]);
            }
        }
        if self != Tool::Poolcap && self != Tool::Tcpdump && spec.compress.is_some() {
            bail!("{} cannot compress its output here", self.name());
        }
        if matches!(self, Tool::Tcpdump | Tool::NetsniffNg) && spec.pcapng {
            bail!("{} writes pcap only", self.name());
        }
        Ok(Launch { argv: v, pipe })
    }

    /// Reads the final counts from everything the tool printed (stdout and stderr) and, for
    /// poolcap, its stats file.
    pub fn parse(self, output: &str, stats: &Path) -> anyhow::Result<Counts> {
        match self {
            Tool::Poolcap => parse_poolcap_stats(&stats_text(self, stats)?),
            Tool::Tcpdump => Ok(Counts {
                captured: number_before(output, "packets captured")?,
                dropped: number_before(output, "packets dropped by kernel")?,
                received: number_before(output, "packets received by filter").ok(),
                extra: BTreeMap::new(),
            }),
            Tool::NetsniffNg => Ok(Counts {
                captured: number_before(output, "packets incoming")?,
                dropped: number_before(output, "packets failed filter")?,
                received: None,
                extra: BTreeMap::new(),
            }),
            Tool::Probe | Tool::Pmacct | Tool::Tshark => {
                super::probe_peers::parse(self, output, stats.parent().unwrap_or(Path::new(".")))
            }
            Tool::Forward | Tool::NetsniffFwd | Tool::Bridge | Tool::XdpRedirect => {
                super::forward_peers::parse(self, output, stats)
            }
            Tool::Stenotype => Ok(super::stenotype::parse(output)),
            Tool::Dumpcap => {
                let captured = number_after(output, "Packets captured:")?;
                let (received, dropped) = after(output, "Packets received/dropped on interface")
                    .and_then(|rest| rest.split_once(": "))
                    .and_then(|(_, nums)| nums.split_whitespace().next())
                    .and_then(|rd| rd.split_once('/'))
                    .and_then(|(r, d)| Some((r.parse().ok()?, d.parse().ok()?)))
                    .ok_or_else(|| anyhow!("dumpcap printed no received/dropped line"))?;
                Ok(Counts {
                    captured,
                    dropped,
                    received: Some(received),
                    extra: BTreeMap::new(),
                })
            }
        }
    }
}

/// poolcap's `--stats-json`, read as plain JSON so that fields added to the report never
/// break the bench. Per-queue counters are summed into the extras; `hot_queue_share` is the
/// busiest queue's share of all packets the queues accounted for (captured or dropped).
fn parse_poolcap_stats(text: &str) -> anyhow::Result<Counts> {
    let v: serde_json::Value = serde_json::from_str(text).context("poolcap stats JSON")?;
    let num = |k: &str| {
        v.get(k)
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| anyhow!("poolcap stats without `{k}`"))
    };
    let (kernel, pool) = (num("dropped_kernel")?, num("dropped_pool")?);
    let mut extra = BTreeMap::from([
        ("dropped_kernel".to_owned(), kernel as f64),
        ("dropped_pool".to_owned(), pool as f64),
        ("filtered".to_owned(), num("filtered")? as f64),
    ]);
    for k in ["written", "not_written", "not_taken"] {
        if let Some(x) = v.get(k).and_then(serde_json::Value::as_u64) {
            extra.insert(k.to_owned(), x as f64);
        }
    }
    for k in ["syscalls_per_packet", "cpu_user", "cpu_system"] {
        if let Some(x) = v.get(k).and_then(serde_json::Value::as_f64) {
            extra.insert(k.to_owned(), x);
        }
    }
    let queues = v
        .get("queues")
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default();
    let q = |q: &serde_json::Value, k: &str| q.get(k).and_then(serde_json::Value::as_u64);
    if !queues.is_empty() {
        let peak = queues.iter().filter_map(|x| q(x, "pool_peak_chunks")).max();
        extra.extend(peak.map(|p| ("pool_peak_chunks".to_owned(), p as f64)));
        for k in ["syscalls", "offloaded_out", "offloaded_in", "paused_ms"] {
            let sum: u64 = queues.iter().filter_map(|x| q(x, k)).sum();
            extra.insert(k.to_owned(), sum as f64);
        }
        let per: Vec<u64> = queues
            .iter()
            .map(|x| {
                ["captured", "dropped_kernel", "dropped_pool"]
                    .iter()
                    .filter_map(|k| q(x, k))
                    .sum()
            })
            .collect();
        let all: u64 = per.iter().sum();
        if all > 0 {
            let hot = per.iter().copied().max().unwrap_or(0);
            extra.insert("hot_queue_share".to_owned(), hot as f64 / all as f64);
        }
        extra.insert("queues".to_owned(), queues.len() as f64);
    }
    Ok(Counts {
        captured: num("captured")?,
        dropped: kernel + pool,
        received: None,
        extra,
    })
}

/// `perf stat -x,` output: event name → count (events perf could not count are left out).
pub fn parse_perf_stat(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.trim().split(',').collect();
            let value = f.first()?.trim().parse::<u64>().ok()?;
            let event = f.get(2)?.trim();
            (!event.is_empty()).then(|| (event.to_owned(), value))
        })
        .collect()
}

/// A traffic generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Generator {
    /// `poolcap gen`.
    Poolcap,
    /// netsniff-ng's trafgen (top speed or `-b` rate only).
    Trafgen,
}

/// What to send. A field added later is an `Option` or has a serde default, so that older
/// `raw.jsonl` files still read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Traffic {
    /// Frame size in bytes without FCS.
    pub size: usize,
    /// Frames to send.
    pub count: u64,
    /// Frames per second; `None` for top speed.
    pub rate: Option<u64>,
    /// Bursts of this many frames at top speed...
    pub burst: Option<u64>,
    /// ... each followed by this much silence.
    #[serde(serialize_with = "ser_ms", deserialize_with = "de_ms")]
    pub idle: Option<Duration>,
    /// Distinct UDP flows (`--flows`); several flows spread over receive queues.
    #[serde(default = "one")]
    pub flows: usize,
    /// Share of the heaviest flow (`--skew`).
    pub skew: Option<f64>,
    /// Frames per send call (`--batch`); paced runs with a batch of rate/1000 frames leave the
    /// generator asleep between batches instead of spinning.
    pub batch: Option<usize>,
    /// Send the simple IMIX (`--size imix`); `size` is then its mean frame size.
    #[serde(default)]
    pub imix: bool,
}

fn one() -> usize {
    1
}

fn ser_ms<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&(d.as_secs_f64() * 1e3)),
        None => s.serialize_none(),
    }
}

fn de_ms<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let ms: Option<f64> = Option::deserialize(d)?;
    Ok(ms.map(|ms| Duration::from_secs_f64(ms.max(0.0) / 1e3)))
}

impl Traffic {
    /// `count` frames of `size` bytes at top speed, one flow.
    pub fn top(size: usize, count: u64) -> Traffic {
        Traffic {
            size,
            count,
            rate: None,
            burst: None,
            idle: None,
            flows: 1,
            skew: None,
            batch: None,
            imix: false,
        }
    }

    /// `count` frames of the simple IMIX (7:4:1 of 60, 590 and 1514 bytes) at top speed.
    pub fn imix(count: u64) -> Traffic {
        let total: f64 = poolcap_gen::flows::IMIX.iter().map(|(_, w)| w).sum();
        let mean: f64 = poolcap_gen::flows::IMIX
            .iter()
            .map(|(s, w)| *s as f64 * w)
            .sum::<f64>()
            / total;
        Traffic {
            imix: true,
            ..Traffic::top(mean.round() as usize, count)
        }
    }

    /// A generous upper bound on how long sending takes (assuming at least 50k pps).
    pub fn timeout(&self) -> Duration {
        let pps = self.rate.unwrap_or(50_000).min(50_000) as f64;
        let idle = match (self.burst, self.idle) {
            (Some(b), Some(i)) => i.as_secs_f64() * (self.count.div_ceil(b.max(1))) as f64,
            _ => 0.0,
        };
        Duration::from_secs_f64(10.0 + 3.0 * (self.count as f64 / pps + idle))
    }

    /// Short description: `64 B, 100k pps, 16 flows (skew 0.8)`.
    pub fn describe(&self) -> String {
        let mut s = if self.imix {
            format!("imix (mean {} B)", self.size)
        } else {
            format!("{} B", self.size)
        };
        match self.rate {
            Some(r) => {
                let _ = write!(s, ", {}k pps", r / 1000);
            }
            None => s.push_str(", top speed"),
        }
        if let (Some(b), Some(i)) = (self.burst, self.idle) {
            let _ = write!(
                s,
                ", bursts of {b} every {:.1} ms idle",
                i.as_secs_f64() * 1e3
            );
        }
        if self.flows > 1 {
            let _ = write!(s, ", {} flows", self.flows);
            if let Some(k) = self.skew {
                let _ = write!(s, " (skew {k})");
            }
        }
        s
    }
}

/// What a generator reports about a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sent {
    /// Frames that left.
    pub frames: u64,
    /// Achieved frames per second.
    pub pps: f64,
    /// Seconds of sending.
    pub seconds: f64,
    /// Frames per send call, when the generator batches.
    pub batch: Option<u64>,
    /// CPU seconds the generator used while sending, when it says.
    #[serde(default)]
    pub cpu_s: Option<f64>,
}

/// The bytes of the frame both generators send: poolcap gen's first frame (sequence 0) with
/// its default addresses, so trafgen's config carries the exact same frame.
pub fn lab_frame(src_mac: [u8; 6], size: usize) -> Vec<u8> {
    let addr = FlowAddr {
        src_mac,
        dst_mac: [0x02, 0x70, 0x63, 0x00, 0xff, 0xff],
        src_ip: [10, 77, 0, 1].into(),
        dst_ip: [10, 77, 0, 2].into(),
        src_port: 10000,
        dst_port: 9,
    };
    let t = FrameTemplate::new(&addr, size, 0);
    let mut f = vec![0u8; t.len()];
    t.stamp_into(&mut f, 0);
    f
}

/// A trafgen packet config holding one packet: `{ 0x02, 0x70, ... }`.
pub fn trafgen_config(frame: &[u8]) -> String {
    let mut s = String::from("{");
    for (i, b) in frame.iter().enumerate() {
        let sep = if i % 16 == 0 { "\n  " } else { " " };
        let _ = write!(s, "{sep}0x{b:02x},");
    }
    s.pop();
    s.push_str("\n}\n");
    s
}

impl Generator {
    /// The name used in tables.
    pub fn name(self) -> &'static str {
        match self {
            Generator::Poolcap => "poolcap gen",
            Generator::Trafgen => "trafgen",
        }
    }

    /// Programs that must be installed.
    pub fn programs(self) -> &'static [&'static str] {
        match self {
            Generator::Poolcap => &[],
            Generator::Trafgen => &["trafgen"],
        }
    }

    /// The command line (program first) sending `t` on `iface` from `cpu`; `cfg` is a trafgen
    /// config holding the frame.
    pub fn argv(
        self,
        t: &Traffic,
        iface: &str,
        cpu: usize,
        cfg: &Path,
        exe: &Path,
    ) -> anyhow::Result<Vec<String>> {
        let mut v: Vec<String> = Vec::new();
        let mut push = |xs: &[&str]| v.extend(xs.iter().map(|x| (*x).to_owned()));
        let size = if t.imix {
            "imix".to_owned()
        } else {
            t.size.to_string()
        };
        let count = t.count.to_string();
        match self {
            Generator::Poolcap => {
                push(&[&exe.to_string_lossy(), "gen", "-i", iface, "--json"]);
                push(&[
                    "--cpu",
                    &cpu.to_string(),
                    "--size",
                    &size,
                    "--count",
                    &count,
                ]);
                if let Some(r) = t.rate {
                    push(&["--rate", &r.to_string()]);
                }
                if let (Some(b), Some(i)) = (t.burst, t.idle) {
                    push(&[
                        "--burst",
                        &b.to_string(),
                        "--idle",
                        &format!("{}us", i.as_micros()),
                    ]);
                }
                if t.flows > 1 {
                    push(&["--flows", &t.flows.to_string()]);
                }
                if let Some(k) = t.skew {
                    push(&["--skew", &k.to_string()]);
                }
                if let Some(b) = t.batch {
                    push(&["--batch", &b.to_string()]);
                }
            }
            Generator::Trafgen => {
                if t.burst.is_some() || t.flows > 1 || t.batch.is_some() || t.imix {
                    bail!(
                        "trafgen here sends one flow of one size, without bursts or batch settings"
                    );
                }
                // One sending process; the caller pins it with taskset.
                push(&["trafgen", "-o", iface, "-P", "1", "-n", &count]);
                if let Some(r) = t.rate {
                    push(&["-b", &format!("{r}pps")]);
                }
                push(&["-i", &cfg.to_string_lossy()]);
            }
        }
        Ok(v)
    }

    /// Reads what was sent from the generator's stdout.
    pub fn parse(self, stdout: &str) -> anyhow::Result<Sent> {
        match self {
            Generator::Poolcap => {
                let line = stdout
                    .lines()
                    .find(|l| l.trim_start().starts_with('{'))
                    .ok_or_else(|| anyhow!("poolcap gen printed no JSON"))?;
                let r: poolcap_gen::GenReport =
                    serde_json::from_str(line).context("poolcap gen JSON")?;
                Ok(Sent {
                    frames: r.frames,
                    pps: r.pps,
                    seconds: r.seconds,
                    batch: Some(r.batch as u64),
                    cpu_s: Some(r.cpu_s),
                })
            }
            Generator::Trafgen => {
                let frames = number_before(stdout, "packets outgoing")?;
                // One `S sec, U usec on CPUk (N packets)` line per sending process; they
                // send in parallel, so the run took as long as the slowest.
                let seconds = stdout
                    .lines()
                    .filter(|l| l.contains(" usec on CPU"))
                    .filter_map(|l| {
                        let w: Vec<&str> = l.split_whitespace().collect();
                        let s: f64 = w.first()?.parse().ok()?;
                        let u: f64 = w.get(2)?.parse().ok()?;
                        Some(s + u / 1e6)
                    })
                    .fold(0.0, f64::max);
                if seconds <= 0.0 {
                    bail!("trafgen printed no timing line");
                }
                Ok(Sent {
                    frames,
                    pps: frames as f64 / seconds,
                    seconds,
                    batch: None,
                    cpu_s: None,
                })
            }
        }
    }
}

/// The first program of `programs` that is not on the PATH.
pub fn missing(programs: &[&str]) -> Option<String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    programs
        .iter()
        .find(|p| !std::env::split_paths(&path).any(|d| is_file(&d.join(p))))
        .map(|p| (*p).to_owned())
}

fn is_file(p: &Path) -> bool {
    p.metadata().map(|m| m.is_file()).unwrap_or(false)
}

/// The text after the last occurrence of `key` on its line.
fn after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .rev()
        .find_map(|l| l.find(key).map(|i| &l[i + key.len()..]))
}

/// The number right after `key`: `Packets captured: 123`.
fn number_after(text: &str, key: &str) -> anyhow::Result<u64> {
    after(text, key)
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| anyhow!("no `{key} N` in the tool's output"))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Recorded in a lab (1 queue, 64 B frames, and 1514 B frames with rps_cpus on CPU 1).
    const TCPDUMP: &str =
        "tcpdump: listening on prb0, link-type EN10MB (Ethernet), snapshot length 262144 bytes
319552 packets captured
1000000 packets received by filter
680448 packets dropped by kernel
";
    const NETSNIFF: &str =
        "Running! Hang up with ^C!\n\n\r      269814  packets incoming (730186 unread on exit)
\r      269814  packets passed filter
\r      730186  packets failed filter (out of space)
\r     73.0186% packet droprate
\r           5  sec, 358323 usec in total
";
    const NETSNIFF_OK: &str =
        "Running! Hang up with ^C!\n\n\r      100000  packets incoming (0 unread on exit)
\r      100000  packets passed filter
\r           0  packets failed filter (out of space)
\r      0.0000% packet droprate
\r           1  sec, 438270 usec in total
";
    const DUMPCAP: &str = "Capturing on 'prb0'
File: /dev/null
\rPackets captured: 68141
Packets received/dropped on interface 'prb0': 68141/31859 (pcap:31859/dumpcap:0/flushed:0/ps_ifdrop:0) (68.1%)
";
    const TRAFGEN: &str = "     1 packets to schedule
    64 bytes in total
Running! Hang up with ^C!


\r      500000 packets outgoing
\r    32000000 bytes outgoing
\r           1 sec, 414549 usec on CPU0 (500000 packets)
";
    const POOLCAP_GEN: &str = r#"{"iface":"snd0","gen_id":23231,"frames":100000,"bytes":6400000,"seconds":0.225744472,"pps":442978.73216580914,"bps":226805110.86889428,"refused":0,"link_dropped":0,"qdisc_bypass":true,"batch":64,"interrupted":false}"#;
    const POOLCAP_STATS: &str = r#"{
  "interface": "prb0", "captured": 100000, "bytes": 6400000, "dropped_kernel": 7,
  "dropped_pool": 5, "filtered": 0, "filtered_kernel": 0, "freezes": 0, "written": 0,
  "not_written": 0, "write_error": null, "capture_error": null, "seconds": 2.055810611,
  "cpu_user": 0.046859, "cpu_system": 0.027871, "syscalls_per_packet": 0.00982,
  "queues": [ { "queue": 0, "captured": 100000, "bytes": 6400000, "dropped_kernel": 7,
      "dropped_pool": 5, "filtered": 0, "freezes": 0, "syscalls": 982, "chunks": 417,
      "pool_peak_chunks": 8 } ]
}"#;

    fn counts(tool: Tool, text: &str) -> (u64, u64, Option<u64>) {
        let c = tool.parse(text, Path::new("/nonexistent")).unwrap();
        (c.captured, c.dropped, c.received)
    }

    #[test]
    fn parses_recorded_tool_outputs() {
        assert_eq!(
            counts(Tool::Tcpdump, TCPDUMP),
            (319552, 680448, Some(1000000))
        );
        assert_eq!(counts(Tool::NetsniffNg, NETSNIFF), (269814, 730186, None));
        assert_eq!(counts(Tool::NetsniffNg, NETSNIFF_OK), (100000, 0, None));
        assert_eq!(counts(Tool::Dumpcap, DUMPCAP), (68141, 31859, Some(68141)));
        assert!(Tool::Tcpdump
            .parse("tcpdump: listening on prb0\n", Path::new(""))
            .is_err());
    }

    #[test]
    fn parses_poolcap_stats() {
        let c = parse_poolcap_stats(POOLCAP_STATS).unwrap();
        assert_eq!((c.captured, c.dropped), (100000, 12));
        assert_eq!(c.extra.get("pool_peak_chunks"), Some(&8.0));
        assert!(parse_poolcap_stats("{}").is_err());
    }

    #[test]
    fn parses_generator_outputs() {
        let t = Generator::Trafgen.parse(TRAFGEN).unwrap();
        assert_eq!(t.frames, 500000);
        assert!((t.seconds - 1.414549).abs() < 1e-9);
        assert!((t.pps - 500000.0 / 1.414549).abs() < 1e-6);
        let p = Generator::Poolcap.parse(POOLCAP_GEN).unwrap();
        assert_eq!((p.frames, p.batch), (100000, Some(64)));
        assert!(Generator::Trafgen.parse("Running!\n").is_err());
    }

    #[test]
    fn trafgen_config_holds_poolcap_gens_frame() {
        let f = lab_frame([2, 0x70, 0x63, 0, 0, 1], 64);
        assert_eq!(f.len(), 64);
        let cfg = trafgen_config(&f);
        let bytes: Vec<u8> = cfg
            .split(|c: char| c == ',' || c.is_whitespace() || c == '{' || c == '}')
            .filter(|s| !s.is_empty())
            .map(|s| u8::from_str_radix(s.trim_start_matches("0x"), 16).unwrap())
            .collect();
        assert_eq!(bytes, f);
        assert_eq!(&f[..6], &[0x02, 0x70, 0x63, 0x00, 0xff, 0xff]);
        assert!(poolcap_gen::frame::parse_tag(&f).is_some());
    }

    /// How `spec` starts in a lab: on prb0, from CPU 1, writing /x.pcap, poolcap being /pc.
    fn launch(spec: &CaptureSpec) -> anyhow::Result<Launch> {
        let p = Path::new;
        spec.tool
            .launch(spec, "prb0", 1, p("/x.pcap"), p("/s.json"), p("/pc"))
    }

    /// [`launch`]'s command line.
    fn line(spec: &CaptureSpec) -> String {
        launch(spec).unwrap().argv.join(" ")
    }

    #[test]
    fn command_lines_carry_the_shared_settings() {
        for (tool, want) in [
            (Tool::Dumpcap, "dumpcap -i prb0 -q -P -B 4 -w /dev/null"),
            (
                Tool::Tcpdump,
                "tcpdump -i prb0 -n -Z root -B 4096 -w /dev/null",
            ),
            (
                Tool::NetsniffNg,
                "stdbuf -oL netsniff-ng -i prb0 -s -A -b 1 -S 4096KiB -o /dev/null",
            ),
            (
                Tool::Poolcap,
                "/pc capture -i prb0 -q -B 4096 --stats-json /s.json",
            ),
        ] {
            assert_eq!(line(&CaptureSpec::new(tool, 4096)), want);
        }
    }

    #[test]
    fn poolcap_options_and_compression_pipes() {
        let spec = CaptureSpec {
            queues: Some(2),
            workers: Some(2),
            load: 1000,
            offload: Some("buddy:60".into()),
            cpus: Some("1,0,1,0".into()),
            pool: Some((64, 16)),
            snaplen: Some(96),
            dev_null: true,
            ..CaptureSpec::new(Tool::Poolcap, 512)
        };
        let l = launch(&spec).unwrap();
        assert_eq!(
            l.argv.join(" "),
            "/pc capture -i prb0 -q -B 512 --format pcap -w /dev/null -s 96 --pool 64,16 \
             --queues 2 --workers 2 --load 1000 --offload buddy:60 --cpus 1,0,1,0 \
             --stats-json /s.json"
        );
        assert!(l.pipe.is_none());
        let inplace = CaptureSpec {
            inplace: true,
            load: 25000,
            ..CaptureSpec::new(Tool::Poolcap, 4096)
        };
        let a = line(&inplace);
        assert!(a.contains("--load 25000 --inplace"), "{a}");

        let zstd = CaptureSpec {
            write: true,
            compress: Some("zstd:19".into()),
            ..CaptureSpec::new(Tool::Tcpdump, 4096)
        };
        let l = launch(&zstd).unwrap();
        assert_eq!(l.argv.join(" "), "tcpdump -i prb0 -n -Z root -B 4096 -w -");
        assert_eq!(l.pipe.unwrap().join(" "), "zstd -19 -q -c");
        assert_eq!(zstd.programs(), ["tcpdump", "zstd"]);
        let gz = CaptureSpec {
            compress: Some("gzip".into()),
            ..zstd.clone()
        };
        assert_eq!(
            launch(&gz).unwrap().pipe.unwrap().join(" "),
            "gzip -6 -q -c"
        );
        let pc = CaptureSpec {
            tool: Tool::Poolcap,
            ..zstd.clone()
        };
        let a = line(&pc);
        assert!(a.contains("-w /x.pcap --compress zstd:19"), "{a}");
        let dc = CaptureSpec {
            tool: Tool::Dumpcap,
            ..zstd
        };
        assert!(launch(&dc).is_err());
        assert_eq!(compressor("zstd:1").unwrap(), ("zstd", 1));
        assert!(compressor("lz4:1").is_err());
        assert!(compressor("gzip:x").is_err());
    }

    #[test]
    fn older_capture_specs_still_read() {
        let old: CaptureSpec = serde_json::from_str(
            r#"{"tool":"tcpdump","buffer_kib":4096,"write":false,"pcap_ns":false,"pool":null,
                "load":0}"#,
        )
        .unwrap();
        assert_eq!(old, CaptureSpec::new(Tool::Tcpdump, 4096));
    }

    #[test]
    fn parses_per_queue_poolcap_counters() {
        let text = r#"{"captured": 900, "dropped_kernel": 0, "dropped_pool": 100, "filtered": 0,
            "written": 0, "syscalls_per_packet": 0.5,
            "queues": [
              {"queue": 0, "captured": 700, "dropped_kernel": 0, "dropped_pool": 100,
               "syscalls": 10, "pool_peak_chunks": 64, "offloaded_out": 300,
               "offloaded_in": 0, "paused_ms": 5},
              {"queue": 1, "captured": 200, "dropped_kernel": 0, "dropped_pool": 0,
               "syscalls": 20, "pool_peak_chunks": 3, "offloaded_out": 0,
               "offloaded_in": 300, "paused_ms": 0}]}"#;
        let c = parse_poolcap_stats(text).unwrap();
        assert_eq!((c.captured, c.dropped), (900, 100));
        let x = |k: &str| c.extra.get(k).copied();
        assert_eq!(x("offloaded_out"), Some(300.0));
        assert_eq!(x("offloaded_in"), Some(300.0));
        assert_eq!(x("syscalls"), Some(30.0));
        assert_eq!(x("paused_ms"), Some(5.0));
        assert_eq!(x("pool_peak_chunks"), Some(64.0));
        assert_eq!(x("hot_queue_share"), Some(0.8));
        assert_eq!(x("queues"), Some(2.0));
    }

    #[test]
    fn parses_perf_stat_csv() {
        // perf stat -x, -e raw_syscalls:sys_enter,context-switches -p PID (recorded).
        let text = "19536,,raw_syscalls:sys_enter,252894026,100.00,,
214,,context-switches,252890000,100.00,,
<not counted>,,cycles,0,100.00,,
";
        let m = parse_perf_stat(text);
        assert_eq!(m.get("raw_syscalls:sys_enter"), Some(&19536));
        assert_eq!(m.get("context-switches"), Some(&214));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn traffic_round_trips_through_json() {
        let t = Traffic {
            rate: Some(100_000),
            burst: Some(10),
            idle: Some(Duration::from_micros(1500)),
            flows: 16,
            skew: Some(0.8),
            batch: Some(100),
            ..Traffic::top(64, 1000)
        };
        let back: Traffic = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back, t);
        let old: Traffic =
            serde_json::from_str(r#"{"size":64,"count":5,"rate":null,"burst":null,"idle":null}"#)
                .unwrap();
        assert_eq!(old, Traffic::top(64, 5));
        assert_eq!(
            t.describe(),
            "64 B, 100k pps, bursts of 10 every 1.5 ms idle, 16 flows (skew 0.8)"
        );
        let a = Generator::Poolcap
            .argv(&t, "snd0", 0, Path::new("/c"), Path::new("/pc"))
            .unwrap()
            .join(" ");
        assert!(
            a.ends_with("--burst 10 --idle 1500us --flows 16 --skew 0.8 --batch 100"),
            "{a}"
        );
        assert!(Generator::Trafgen
            .argv(&t, "snd0", 0, Path::new("/c"), Path::new("/pc"))
            .is_err());
    }
}
