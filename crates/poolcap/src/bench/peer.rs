//! The programs a bench runs, described once each: how to start them, which output line says
//! they are ready, and how to read their final counts. Everything tool-specific lives here, so
//! the measuring code in [`super::point`] has one path for all of them.
//!
//! What each tool prints was recorded by running it in a lab (the unit tests keep those
//! samples):
//! - tcpdump: `tcpdump: listening on ...` on stderr when ready; at exit `N packets captured`,
//!   `N packets received by filter`, `N packets dropped by kernel`. `-Z root` keeps it from
//!   dropping privileges and chowning its output (even `/dev/null`).
//! - netsniff-ng: `Running! Hang up with ^C!` on stdout, which it buffers when stdout is a
//!   pipe, hence `stdbuf -oL`. At exit, lines starting with `\r`: `N  packets incoming (U unread
//!   on exit)` (N = frames it read from the ring), `N  packets passed filter`, `N  packets
//!   failed filter (out of space)` (kernel drops). In a namespace it must get `-A` (it cannot
//!   tune the root namespace's socket memory, and without -A it spins at 95% of a core) and
//!   `-b CPU` (under `taskset` without -b it read nothing at all in our runs).
//! - dumpcap: `Capturing on 'IF'` on stderr, printed a few milliseconds *before* its socket is
//!   open, so every tool gets a settle time after its ready line. At exit `Packets captured: N`
//!   and `Packets received/dropped on interface 'IF': R/D (...)`. Its -B is in MiB.
//! - poolcap capture: `listening on ...` on stderr; final accounting from `--stats-json`.
//! - poolcap gen: one JSON object on stdout with `--json`.
//! - trafgen: sends a config file's frames; at exit `N packets outgoing` and
//!   `S sec, U usec on CPUk (N packets)` per sending CPU on stdout.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use serde::Serialize;

use crate::frame::{FlowAddr, FrameTemplate};

/// A capture tool under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tool {
    /// `poolcap capture`.
    Poolcap,
    /// tcpdump (libpcap).
    Tcpdump,
    /// netsniff-ng (its own TPACKET ring reader).
    NetsniffNg,
    /// dumpcap (Wireshark's capture engine, libpcap).
    Dumpcap,
}

/// How to run a capture tool at one point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaptureSpec {
    /// The tool.
    pub tool: Tool,
    /// Kernel buffer (ring) in KiB, given to every tool's own option.
    pub buffer_kib: u64,
    /// Write a pcap file (true) or only count (false).
    pub write: bool,
    /// poolcap only: nanosecond pcap instead of microsecond pcap.
    pub pcap_ns: bool,
    /// poolcap only: pool as (M, R).
    pub pool: Option<(usize, usize)>,
    /// poolcap only: x-loop iterations per packet.
    pub load: u32,
}

/// Final counts of a capture tool, as the tool itself reports them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Counts {
    /// Packets the tool read (handed to its own processing or file).
    pub captured: u64,
    /// Packets it reports as dropped (kernel ring full; for poolcap also pool drops).
    pub dropped: u64,
    /// Packets the kernel says reached the socket, when the tool reports it.
    pub received: Option<u64>,
    /// Tool-specific extras (poolcap: `dropped_kernel`, `dropped_pool`, `pool_peak_chunks`...).
    pub extra: BTreeMap<String, f64>,
}

impl Tool {
    /// Every capture tool, poolcap first.
    pub const ALL: [Tool; 4] = [
        Tool::Poolcap,
        Tool::Tcpdump,
        Tool::NetsniffNg,
        Tool::Dumpcap,
    ];

    /// The name used in tables.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Poolcap => "poolcap",
            Tool::Tcpdump => "tcpdump",
            Tool::NetsniffNg => "netsniff-ng",
            Tool::Dumpcap => "dumpcap",
        }
    }

    /// Programs that must be installed (poolcap is this executable).
    pub fn programs(self) -> &'static [&'static str] {
        match self {
            Tool::Poolcap => &[],
            Tool::Tcpdump => &["tcpdump"],
            Tool::NetsniffNg => &["netsniff-ng", "stdbuf"],
            Tool::Dumpcap => &["dumpcap"],
        }
    }

    /// The substring of an output line that says the tool is capturing.
    pub fn ready_marker(self) -> &'static str {
        match self {
            Tool::Poolcap | Tool::Tcpdump => "listening on",
            Tool::NetsniffNg => "Running!",
            Tool::Dumpcap => "Capturing on",
        }
    }

    /// The command line (program first) capturing on `iface`, pinned by the caller. `out` is
    /// the file to write when `spec.write`; `stats` is where poolcap writes its accounting.
    pub fn argv(
        self,
        spec: &CaptureSpec,
        iface: &str,
        cpu: usize,
        out: &Path,
        stats: &Path,
        exe: &Path,
    ) -> Vec<String> {
        let kib = spec.buffer_kib.to_string();
        let out = out.to_string_lossy().into_owned();
        let sink = if spec.write {
            out.clone()
        } else {
            "/dev/null".into()
        };
        let mut v: Vec<String> = Vec::new();
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
                if spec.write {
                    let format = if spec.pcap_ns { "pcap-ns" } else { "pcap" };
                    push(&["--format", format, "-w", &out]);
                }
                if let Some((m, r)) = spec.pool {
                    push(&["--pool", &format!("{m},{r}")]);
                }
                if spec.load > 0 {
                    push(&["--load", &spec.load.to_string()]);
                }
                push(&["--stats-json", &stats.to_string_lossy()]);
            }
            Tool::Tcpdump => push(&[
                "tcpdump", "-i", iface, "-n", "-Z", "root", "-B", &kib, "-w", &sink,
            ]),
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
            Tool::Dumpcap => {
                let mib = spec.buffer_kib.div_ceil(1024).max(1).to_string();
                push(&["dumpcap", "-i", iface, "-q", "-P", "-B", &mib, "-w", &sink]);
            }
        }
        v
    }

    /// Reads the final counts from everything the tool printed (stdout and stderr) and, for
    /// poolcap, its stats file.
    pub fn parse(self, output: &str, stats: &Path) -> anyhow::Result<Counts> {
        match self {
            Tool::Poolcap => {
                let text = std::fs::read_to_string(stats)
                    .with_context(|| format!("poolcap wrote no {}", stats.display()))?;
                parse_poolcap_stats(&text)
            }
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
/// break the bench.
fn parse_poolcap_stats(text: &str) -> anyhow::Result<Counts> {
    let v: serde_json::Value = serde_json::from_str(text).context("poolcap stats JSON")?;
    let num = |k: &str| {
        v.get(k)
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| anyhow!("poolcap stats without `{k}`"))
    };
    let (kernel, pool) = (num("dropped_kernel")?, num("dropped_pool")?);
    let peak = v
        .get("queues")
        .and_then(serde_json::Value::as_array)
        .map(|qs| {
            qs.iter()
                .filter_map(|q| q.get("pool_peak_chunks")?.as_u64())
                .max()
                .unwrap_or(0)
        });
    let mut extra = BTreeMap::from([
        ("dropped_kernel".to_owned(), kernel as f64),
        ("dropped_pool".to_owned(), pool as f64),
        ("filtered".to_owned(), num("filtered")? as f64),
    ]);
    extra.extend(peak.map(|p| ("pool_peak_chunks".to_owned(), p as f64)));
    if let Some(s) = v.get("syscalls_per_packet").and_then(|x| x.as_f64()) {
        extra.insert("syscalls_per_packet".to_owned(), s);
    }
    Ok(Counts {
        captured: num("captured")?,
        dropped: kernel + pool,
        received: None,
        extra,
    })
}

/// A traffic generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Generator {
    /// `poolcap gen`.
    Poolcap,
    /// netsniff-ng's trafgen (top speed or `-b` rate only).
    Trafgen,
}

/// What to send.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
    #[serde(serialize_with = "ser_ms")]
    pub idle: Option<Duration>,
}

fn ser_ms<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&(d.as_secs_f64() * 1e3)),
        None => s.serialize_none(),
    }
}

impl Traffic {
    /// A generous upper bound on how long sending takes (assuming at least 50k pps).
    pub fn timeout(&self) -> Duration {
        let pps = self.rate.unwrap_or(50_000).min(50_000) as f64;
        let idle = match (self.burst, self.idle) {
            (Some(b), Some(i)) => i.as_secs_f64() * (self.count.div_ceil(b.max(1))) as f64,
            _ => 0.0,
        };
        Duration::from_secs_f64(10.0 + 3.0 * (self.count as f64 / pps + idle))
    }
}

/// What a generator reports about a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Sent {
    /// Frames that left.
    pub frames: u64,
    /// Achieved frames per second.
    pub pps: f64,
    /// Seconds of sending.
    pub seconds: f64,
    /// Frames per send call, when the generator batches.
    pub batch: Option<u64>,
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
        let (size, count) = (t.size.to_string(), t.count.to_string());
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
            }
            Generator::Trafgen => {
                if t.burst.is_some() {
                    bail!("trafgen cannot send bursts with idle gaps");
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
                let r: crate::gen::GenReport =
                    serde_json::from_str(line).context("poolcap gen JSON")?;
                Ok(Sent {
                    frames: r.frames,
                    pps: r.pps,
                    seconds: r.seconds,
                    batch: Some(r.batch as u64),
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
                })
            }
        }
    }
}

/// Output lines that say nothing about a failure: netsniff-ng and trafgen cannot tune the root
/// namespace's socket memory from inside a lab namespace.
pub fn is_noise(line: &str) -> bool {
    line.trim().is_empty() || line.contains("Cannot set system socket memory")
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

/// The number right before `key` on the last line holding it: `  123  packets incoming`.
fn number_before(text: &str, key: &str) -> anyhow::Result<u64> {
    text.lines()
        .rev()
        .find_map(|l| {
            let i = l.find(key)?;
            l[..i].split_whitespace().last()?.parse().ok()
        })
        .ok_or_else(|| anyhow!("no `N {key}` in the tool's output"))
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
        assert!(crate::frame::parse_tag(&f).is_some());
    }

    #[test]
    fn command_lines_carry_the_shared_settings() {
        let spec = CaptureSpec {
            tool: Tool::Dumpcap,
            buffer_kib: 4096,
            write: false,
            pcap_ns: false,
            pool: None,
            load: 0,
        };
        let p = Path::new;
        let line = |t: Tool| {
            let s = CaptureSpec {
                tool: t,
                ..spec.clone()
            };
            t.argv(&s, "prb0", 1, p("/x.pcap"), p("/s.json"), p("/bin/poolcap"))
                .join(" ")
        };
        assert_eq!(
            line(Tool::Dumpcap),
            "dumpcap -i prb0 -q -P -B 4 -w /dev/null"
        );
        assert_eq!(
            line(Tool::Tcpdump),
            "tcpdump -i prb0 -n -Z root -B 4096 -w /dev/null"
        );
        assert_eq!(
            line(Tool::NetsniffNg),
            "stdbuf -oL netsniff-ng -i prb0 -s -A -b 1 -S 4096KiB -o /dev/null"
        );
        assert_eq!(
            line(Tool::Poolcap),
            "/bin/poolcap capture -i prb0 -q -B 4096 --stats-json /s.json"
        );
    }
}
