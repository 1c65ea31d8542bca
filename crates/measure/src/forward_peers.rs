//! The forwarding subjects of `bench forward` and the sink that judges them, described once
//! each: how to start them between the probe's IN (`prb0`) and OUT (`prb1`), which line says
//! they are ready, how to read their own accounting, and what the sink saw.
//!
//! Why the sink and not the tools' own counts decide loss, order and latency: only the sink
//! sees what really left OUT, and the generator's sequence numbers and send stamps make that
//! check the same for every subject (`poolcap check` logic, run in-process on the sink's file).
//! The frames that left OUT are also read from OUT's `tx_packets` for every subject, so a tool
//! without a forwarded count (netsniff-ng, the bridge) still has one.
//!
//! What each prints, recorded in the lab:
//! - `poolcap forward`: `listening on ...` on stderr; its `--stats-json` holds the seven
//!   terms of `received = forwarded + dropped_by_rule + dropped_kernel + dropped_pool +
//!   dropped_tx + filtered + not_taken`.
//! - netsniff-ng `--in prb0 --out prb1`: `Running!` on stdout (`stdbuf -oL`); at exit
//!   `N  packets incoming`, `N  packets passed filter`, `N  packets failed filter`. Like
//!   capture it needs `-A`, `-b CPU` and an explicit `-S` in a namespace (without `-S` it
//!   fails with `Cannot allocate RX_RING!`).
//! - the Linux bridge: no process of its own, so a shell enslaves IN and OUT to a bridge,
//!   prints `bridging`, and on SIGINT deletes the bridge. The lab's frames go to a MAC no host
//!   has, so the bridge floods them out of OUT: the kernel's forwarding path, a floor for the
//!   slow path.
//!
//! - the XDP redirect floor (`poolcap bench-peer xdp-redirect`, `poolcap_bench::xdp_redirect`):
//!   `listening on ...` on stderr once attached; at exit `N frames redirected` on stdout (its
//!   program's own per-CPU count). It needs GRO on at the sink ([`SinkGro`]). xdp-tools'
//!   `xdp-bench redirect` (Debian 12's 1.3.1) would be the obvious peer but fails to load on
//!   this kernel (6.18): its object carries a tracepoint program for `xdp_redirect_map_err`,
//!   which the kernel no longer has (`failed to find kernel BTF type ID`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use poolcap_lab::Lab;

use super::child::{pinned, Running};
use super::tool::{number_before, stats_text, CaptureSpec, Counts, Launch, Tool};
use poolcap_gen::seqcheck::SeqChecker;

/// The probe's OUT interface in the three-host lab.
pub const OUT: &str = "prb1";
/// The sink's interface.
pub const SINK_IFACE: &str = "snk0";
/// The sink keeps this many bytes of each frame: the generator's tag and stamp fit.
pub const SINK_SNAPLEN: u32 = 128;
/// The sink's kernel buffer, large enough that the sink itself never drops in a run.
pub const SINK_BUFFER_KIB: u64 = 65_536;

/// The seven terms of poolcap forward's equation, in its JSON.
pub const TERMS: [&str; 7] = [
    "forwarded",
    "dropped_by_rule",
    "dropped_kernel",
    "dropped_pool",
    "dropped_tx",
    "filtered",
    "not_taken",
];

/// How to start forwarding tool `tool` from `inp` to OUT (pinned by the caller to `cpu`).
pub fn launch(
    tool: Tool,
    spec: &CaptureSpec,
    inp: &str,
    cpu: usize,
    stats: &Path,
    exe: &Path,
) -> anyhow::Result<Launch> {
    let kib = spec.buffer_kib.to_string();
    let mut v: Vec<String> = Vec::new();
    let mut push = |xs: &[&str]| v.extend(xs.iter().map(|x| (*x).to_owned()));
    match tool {
        Tool::Forward => {
            push(&[&exe.to_string_lossy(), "forward", "-i", inp, "-o", OUT]);
            push(&["-q", "-B", &kib]);
            push(
                &spec
                    .engine_args()
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
            );
            for (flag, value) in [("--offload", &spec.offload), ("--backend", &spec.backend)] {
                if let Some(x) = value {
                    push(&[flag, x]);
                }
            }
            push(&["--stats-json", &stats.to_string_lossy()]);
        }
        Tool::NetsniffFwd => {
            push(&["stdbuf", "-oL", "netsniff-ng", "--in", inp, "--out", OUT]);
            // -k 100: netsniff-ng flushes its TX ring from a timer, every 10 µs by default;
            // on this lab's VMs that timer's signals took the whole core, and it forwarded
            // 2k of 300k frames at top speed (0 lost at 50k pps and 224k of 300k at top speed
            // with -k 100 or -k 1000; 100 µs keeps its latency low).
            push(&[
                "-s",
                "-A",
                "-k",
                "100",
                "-b",
                &cpu.to_string(),
                "-S",
                &format!("{kib}KiB"),
            ]);
        }
        Tool::Bridge => {
            let script = format!(
                "ip link add pcfwd0 type bridge && ip link set {inp} master pcfwd0 && \
                 ip link set {OUT} master pcfwd0 && ip link set pcfwd0 up && echo bridging || \
                 exit 1; trap 'ip link del pcfwd0; exit 0' INT TERM; \
                 while :; do sleep 0.1; done"
            );
            push(&["sh", "-c", &script]);
        }
        Tool::XdpRedirect => {
            push(&[&exe.to_string_lossy(), "bench-peer", "xdp-redirect"]);
            push(&["-i", inp, "-o", OUT]);
        }
        _ => return Err(anyhow!("{} does not forward", tool.name())),
    }
    Ok(Launch {
        argv: v,
        pipe: None,
    })
}

/// A forwarding tool's own accounting. `captured` is what it forwarded by its own count
/// (netsniff-ng: what passed its filter; the bridge: nothing of its own, OUT's count is used
/// instead by the caller), `dropped` what it says it dropped.
pub fn parse(tool: Tool, output: &str, stats: &Path) -> anyhow::Result<Counts> {
    match tool {
        Tool::Forward => parse_forward_stats(&stats_text(tool, stats)?),
        Tool::NetsniffFwd => Ok(Counts {
            captured: number_before(output, "packets passed filter")?,
            dropped: number_before(output, "packets failed filter")?,
            received: Some(number_before(output, "packets incoming")?),
            extra: BTreeMap::new(),
        }),
        Tool::Bridge => Ok(Counts::default()),
        Tool::XdpRedirect => {
            let n = number_before(output, "frames redirected")?;
            Ok(Counts {
                captured: n,
                received: Some(n),
                ..Counts::default()
            })
        }
        _ => Err(anyhow!("{} does not forward", tool.name())),
    }
}

/// `poolcap forward --stats-json`: the seven terms as extras, `captured` = forwarded, `dropped`
/// = every drop (so offered − captured − dropped − filtered is 0 when the equation holds).
fn parse_forward_stats(text: &str) -> anyhow::Result<Counts> {
    let v: serde_json::Value = serde_json::from_str(text).context("poolcap forward stats")?;
    let num = |k: &str| {
        v.get(k)
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| anyhow!("poolcap forward stats without `{k}`"))
    };
    let mut extra = BTreeMap::new();
    for k in TERMS.iter().chain(&["received", "in_flight"]) {
        extra.insert((*k).to_owned(), num(k)? as f64);
    }
    for k in ["offloaded_out", "offloaded_in"] {
        let sum: u64 = v
            .get("queues")
            .and_then(serde_json::Value::as_array)
            .map_or(0, |qs| qs.iter().filter_map(|q| q.get(k)?.as_u64()).sum());
        extra.insert(k.to_owned(), sum as f64);
    }
    let dropped = [
        "dropped_by_rule",
        "dropped_kernel",
        "dropped_pool",
        "dropped_tx",
    ]
    .iter()
    .map(|k| num(k))
    .sum::<anyhow::Result<u64>>()?;
    Ok(Counts {
        captured: num("forwarded")?,
        dropped,
        received: Some(num("received")?),
        extra,
    })
}

/// The sink's capture: `poolcap capture -i snk0` writing pcapng with snaplen
/// [`SINK_SNAPLEN`] to `file`, its accounting to `stats`.
pub fn sink_argv(exe: &Path, file: &Path, stats: &Path) -> Vec<String> {
    [
        &exe.to_string_lossy(),
        "capture",
        "-i",
        SINK_IFACE,
        "-q",
        "-B",
        &SINK_BUFFER_KIB.to_string(),
        "-s",
        &SINK_SNAPLEN.to_string(),
        "--format",
        "pcapng",
        "-w",
        &file.to_string_lossy(),
        "--stats-json",
        &stats.to_string_lossy(),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The sink's capture while a run lasts.
pub struct Sink {
    run: Running,
    file: PathBuf,
    stats: PathBuf,
}

impl Sink {
    /// Starts the sink's capture in `lab`'s sink namespace, pinned to `cpu`, writing into
    /// `scratch`, and waits until it listens.
    pub fn start(
        lab: &Lab,
        exe: &Path,
        scratch: &Path,
        cpu: usize,
        stop: &AtomicBool,
    ) -> anyhow::Result<Sink> {
        let host = lab
            .sink
            .as_ref()
            .ok_or_else(|| anyhow!("a forwarding run needs the three-host lab"))?;
        let (file, stats) = (scratch.join("sink.pcapng"), scratch.join("sink-stats.json"));
        let _ = std::fs::remove_file(&file);
        let _ = std::fs::remove_file(&stats);
        let argv = sink_argv(exe, &file, &stats);
        let mut run = Running::spawn(pinned(&host.netns, &cpu.to_string(), &argv), "sink")?;
        run.wait_ready("listening on", Duration::from_secs(30), stop)?;
        Ok(Sink { run, file, stats })
    }

    /// Stops the sink, checks its file (then removes it) and adds what it found to `extra`,
    /// with the sink's own drops as `sink_dropped`.
    pub fn finish(self, extra: &mut BTreeMap<String, f64>) -> anyhow::Result<SinkCheck> {
        let fin = self.run.interrupt(Duration::from_secs(60))?;
        if !fin.status.success() {
            bail!(
                "the sink's capture failed ({}): {}",
                fin.status,
                fin.text.trim()
            );
        }
        let check = SinkCheck::of_file(&self.file);
        let _ = std::fs::remove_file(&self.file);
        let check = check?;
        let own = Tool::Poolcap.parse(&fin.text, &self.stats)?;
        extra.insert("sink_dropped".into(), own.dropped as f64);
        check.clone().into_extra(extra);
        Ok(check)
    }
}

/// GRO on at the sink's interface while it lives, for a subject that redirects in XDP: a
/// frame redirected into a veth is received by the peer's NAPI, which runs only when the peer
/// has GRO on or an XDP program (without either, kernel 6.18 drops every such frame). Turned
/// off again on drop, so the next subject meets the lab as built.
pub struct SinkGro<'a> {
    netns: &'a str,
}

impl<'a> SinkGro<'a> {
    /// Turns GRO on at `snk0` in `lab`'s sink namespace.
    pub fn on(lab: &'a Lab) -> anyhow::Result<SinkGro<'a>> {
        let host = lab
            .sink
            .as_ref()
            .ok_or_else(|| anyhow!("a forwarding run needs the three-host lab"))?;
        set_gro(&host.netns, "on")?;
        Ok(SinkGro { netns: &host.netns })
    }
}

impl Drop for SinkGro<'_> {
    fn drop(&mut self) {
        if let Err(e) = set_gro(self.netns, "off") {
            log::warn!("warning: {e:#}");
        }
    }
}

fn set_gro(netns: &str, state: &str) -> anyhow::Result<()> {
    let out = poolcap_lab::netns_command(netns, "ethtool")
        .args(["-K", SINK_IFACE, "gro", state])
        .output()
        .context("cannot run ethtool")?;
    if !out.status.success() {
        bail!(
            "ethtool -K {SINK_IFACE} gro {state}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Frames that have left the probe's OUT so far (its `tx_packets`).
pub fn out_tx(lab: &Lab) -> anyhow::Result<u64> {
    Ok(poolcap_lab::if_counters(&lab.probe.netns, OUT)?.tx_packets)
}

/// What the sink's file says about one run, as `poolcap check` counts it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SinkCheck {
    /// Generator frames in the file.
    pub frames: u64,
    /// Distinct sequence numbers among them.
    pub unique: u64,
    /// Frames seen more than once.
    pub duplicates: u64,
    /// Frames that came after a later frame of their own flow.
    pub reordered_in_flow: u64,
    /// One-way latency percentiles (µs): p50, p99, p99.9, max.
    pub latency_us: Option<[f64; 4]>,
}

impl SinkCheck {
    /// Checks the sink's capture file.
    pub fn of_file(file: &Path) -> anyhow::Result<SinkCheck> {
        let f = poolcap_gen::capfile::read(file)
            .with_context(|| format!("cannot read the sink's {}", file.display()))?;
        let mut c = SeqChecker::new();
        for p in &f.packets {
            c.observe_at(&p.data, p.ts_ns);
        }
        Ok(SinkCheck::of(&c))
    }

    /// The first generator's report (a run has one generator).
    pub fn of(c: &SeqChecker) -> SinkCheck {
        let Some(r) = c.reports(None).into_iter().next() else {
            return SinkCheck::default();
        };
        let us = |ns: i64| ns as f64 / 1e3;
        SinkCheck {
            frames: r.frames,
            unique: r.unique,
            duplicates: r.duplicates,
            reordered_in_flow: r.reordered_in_flow,
            latency_us: r
                .latency
                .map(|l| [us(l.p50_ns), us(l.p99_ns), us(l.p999_ns), us(l.max_ns)]),
        }
    }

    /// Its numbers as extras of a run's counts (`sink_frames`, `sink_unique`,
    /// `sink_duplicates`, `reordered`, `lat_p50_us`, `lat_p99_us`, `lat_p999_us`,
    /// `lat_max_us`).
    pub fn into_extra(self, extra: &mut BTreeMap<String, f64>) {
        extra.insert("sink_frames".into(), self.frames as f64);
        extra.insert("sink_unique".into(), self.unique as f64);
        extra.insert("sink_duplicates".into(), self.duplicates as f64);
        extra.insert("reordered".into(), self.reordered_in_flow as f64);
        if let Some(l) = self.latency_us {
            for (k, x) in LATENCY_KEYS.iter().zip(l) {
                extra.insert((*k).to_owned(), x);
            }
        }
    }
}

/// The latency extras, in percentile order.
pub const LATENCY_KEYS: [&str; 4] = ["lat_p50_us", "lat_p99_us", "lat_p999_us", "lat_max_us"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_seven_terms_of_poolcap_forward() {
        let json = r#"{"received":1000,"forwarded":880,"dropped_by_rule":10,
            "dropped_kernel":40,"dropped_pool":30,"dropped_tx":15,"filtered":5,"not_taken":20,
            "in_flight":0,"queues":[{"offloaded_out":3},{"offloaded_out":4,"offloaded_in":2}]}"#;
        let c = parse_forward_stats(json).unwrap();
        assert_eq!((c.captured, c.dropped, c.received), (880, 95, Some(1000)));
        assert_eq!((c.extra["filtered"], c.extra["not_taken"]), (5.0, 20.0));
        assert_eq!(c.extra["offloaded_out"], 7.0);
        assert!(parse_forward_stats(r#"{"received":1}"#).is_err());
    }

    #[test]
    fn reads_netsniff_ng_forwarding() {
        let out = "Running! Hang up with ^C!\n\n\r       20000  packets incoming (0 unread on \
                   exit)\n\r       19990  packets passed filter\n\r          10  packets \
                   failed filter (out of space)\n\r      0.0000% packet droprate\n";
        let c = parse(Tool::NetsniffFwd, out, Path::new("/nonexistent")).unwrap();
        assert_eq!(
            (c.captured, c.dropped, c.received),
            (19990, 10, Some(20000))
        );
    }

    #[test]
    fn every_forwarder_goes_from_in_to_out() {
        let spec = CaptureSpec {
            load: 500,
            offload: Some("buddy:60".into()),
            backend: Some("af_xdp".into()),
            ..CaptureSpec::new(Tool::Forward, 4096)
        };
        let exe = Path::new("/x/poolcap");
        let l = launch(Tool::Forward, &spec, "prb0", 1, Path::new("s.json"), exe).unwrap();
        let a = l.argv.join(" ");
        assert!(
            a.starts_with("/x/poolcap forward -i prb0 -o prb1 -q -B 4096"),
            "{a}"
        );
        assert!(a.contains("--load 500 --offload buddy:60 --backend af_xdp --stats-json"));
        let n = launch(Tool::NetsniffFwd, &spec, "prb0", 1, Path::new("s"), exe).unwrap();
        assert!(n
            .argv
            .join(" ")
            .contains("--in prb0 --out prb1 -s -A -k 100 -b 1 -S 4096KiB"));
        let b = launch(Tool::Bridge, &spec, "prb0", 1, Path::new("s"), exe).unwrap();
        assert!(b.argv[2].contains("ip link set prb0 master pcfwd0"));
        let x = launch(Tool::XdpRedirect, &spec, "prb0", 1, Path::new("s"), exe).unwrap();
        assert_eq!(
            x.argv.join(" "),
            "/x/poolcap bench-peer xdp-redirect -i prb0 -o prb1"
        );
        assert!(launch(Tool::Tcpdump, &spec, "prb0", 1, Path::new("s"), exe).is_err());
    }

    #[test]
    fn reads_the_xdp_redirect_count() {
        let c = parse(
            Tool::XdpRedirect,
            "4000 frames redirected\n",
            Path::new("/x"),
        )
        .unwrap();
        assert_eq!((c.captured, c.dropped, c.received), (4000, 0, Some(4000)));
        assert!(parse(Tool::XdpRedirect, "", Path::new("/x")).is_err());
    }
}
