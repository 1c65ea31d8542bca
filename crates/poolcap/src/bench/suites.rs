//! The suites: which points each one measures, how many frames, and which targets of the
//! issue its summary checks. [`super::manager`] runs them.

use std::time::{Duration, Instant};

use poolcap_lab::Lab;
use serde::Serialize;

use super::manager::Options;
use super::peer::{CaptureSpec, Generator, Tool, Traffic};
use super::point::{Point, Subject, GEN_CPU, TOOL_CPU};
use super::report::{Machine, Row, SummaryText, Versus};
use super::stats::Spread;

/// A suite of points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Suite {
    /// poolcap gen against trafgen: top speed, rate accuracy, spacing.
    Gen,
    /// poolcap capture against tcpdump, netsniff-ng and dumpcap: loss, CPU, sender rate.
    Capture,
    /// Burst absorption for several (M,R) with R*M fixed, under an x-loop load.
    Burst,
}

impl Suite {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Suite::Gen => "gen",
            Suite::Capture => "capture",
            Suite::Burst => "burst",
        }
    }
}

/// A run starts once at most this share of all CPUs is busy (waiting up to a minute): on a
/// shared 2-core machine, someone else's test run halves the sender's rate.
pub const QUIET_BELOW: f64 = 0.15;
/// Kernel buffer every capture tool gets in the capture suite (poolcap's default).
const BUFFER_KIB: u64 = 4096;
/// R*M of the burst suite.
const BURST_CELLS: usize = 16384;
/// poolcap's kernel ring in the burst suite: the smallest (2 blocks of 256 KiB), so its
/// memory is the pool, like tcpdump's is its ring.
const BURST_RING_KIB: u64 = 512;

fn top(size: usize, count: u64) -> Traffic {
    Traffic {
        size,
        count,
        rate: None,
        burst: None,
        idle: None,
    }
}

fn spec(tool: Tool, buffer_kib: u64, write: bool) -> CaptureSpec {
    CaptureSpec {
        tool,
        buffer_kib,
        write,
        pcap_ns: false,
        pool: None,
        load: 0,
    }
}

/// The gen suite: generators alone at top speed, then paced runs captured for spacing.
pub fn gen_points(quick: bool) -> Vec<Point> {
    let mut v = vec![Point {
        id: "64B top speed".into(),
        traffic: top(64, if quick { 500_000 } else { 2_000_000 }),
        subjects: vec![
            Subject::sender(Generator::Poolcap),
            Subject::sender(Generator::Trafgen),
        ],
        spacing: false,
    }];
    for rate in [100_000u64, 300_000] {
        let capture = CaptureSpec {
            pcap_ns: true,
            ..spec(Tool::Poolcap, BUFFER_KIB, true)
        };
        v.push(Point {
            id: format!("64B {}k pps", rate / 1000),
            traffic: Traffic {
                rate: Some(rate),
                ..top(64, 2 * rate)
            },
            subjects: vec![Subject {
                name: "poolcap gen".into(),
                generator: Generator::Poolcap,
                capture: Some(capture),
            }],
            spacing: true,
        });
    }
    v
}

/// The capture suite: every tool at every size, speed and output.
pub fn capture_points(quick: bool) -> Vec<Point> {
    let rates: &[Option<u64>] = if quick {
        &[None]
    } else {
        &[None, Some(300_000)]
    };
    let mut v = Vec::new();
    for size in [64usize, 1514] {
        for &rate in rates {
            for write in [false, true] {
                let count = match (rate, size, quick) {
                    (Some(r), _, _) => 2 * r,
                    (None, 64, true) => 500_000,
                    (None, 64, false) => 1_000_000,
                    (None, _, true) => 200_000,
                    (None, _, false) => 500_000,
                };
                let speed = rate.map_or("top".to_owned(), |r| format!("{}k", r / 1000));
                v.push(Point {
                    id: format!("{size}B {speed} {}", if write { "write" } else { "count" }),
                    traffic: Traffic {
                        rate,
                        ..top(size, count)
                    },
                    subjects: Tool::ALL
                        .iter()
                        .map(|&t| Subject::capture(spec(t, BUFFER_KIB, write)))
                        .collect(),
                    spacing: false,
                });
            }
        }
    }
    v
}

/// The burst suite's load, calibrated on this machine.
#[derive(Debug, Clone, Copy)]
pub struct Calibration {
    /// x-loop cost per iteration over a 64-byte packet.
    pub ns_per_iteration: f64,
    /// Offered top speed of 64-byte frames.
    pub top_pps: f64,
    /// x-loop iterations per packet.
    pub load: u32,
    /// Packets per second one core analyses at that load.
    pub analysis_pps: f64,
}

impl Calibration {
    /// Picks the load with which one core analyses half of `top_pps`.
    pub fn new(top_pps: f64, ns_per_iteration: f64) -> Calibration {
        let load = (2e9 / (top_pps * ns_per_iteration)).round().max(1.0) as u32;
        Calibration {
            ns_per_iteration,
            top_pps,
            load,
            analysis_pps: 1e9 / (f64::from(load) * ns_per_iteration),
        }
    }
}

/// What the burst suite's calibration sends: poolcap gen alone at top speed.
pub fn calibration_point() -> Point {
    Point {
        id: "calibration: 64B top speed".into(),
        traffic: top(64, 500_000),
        subjects: vec![Subject::sender(Generator::Poolcap)],
        spacing: false,
    }
}

/// Nanoseconds per x-loop iteration over a 64-byte packet, measured on the tool's CPU.
pub fn ns_per_iteration() -> anyhow::Result<f64> {
    let t = std::thread::spawn(|| {
        core_affinity::set_for_current(core_affinity::CoreId { id: TOOL_CPU });
        let data = [0u8; 64];
        let x = 2_000_000u32;
        crate::capture::worker::x_loop(&data, x);
        let times = (0..7).map(|_| {
            let t = Instant::now();
            crate::capture::worker::x_loop(&data, x);
            t.elapsed().as_nanos() as f64 / f64::from(x)
        });
        Spread::of(times).map_or(f64::NAN, |s| s.median)
    });
    t.join()
        .map_err(|_| anyhow::anyhow!("calibration thread panicked"))
}

/// The burst suite: bursts of R*M/2, R*M and 2 R*M frames for each (M,R).
pub fn burst_points(quick: bool, c: &Calibration) -> Vec<Point> {
    let mut v = Vec::new();
    for m in [64usize, 128, 256] {
        let r = BURST_CELLS / m;
        let rm = BURST_CELLS as u64;
        let lens: &[u64] = if quick { &[rm] } else { &[rm / 2, rm, 2 * rm] };
        for &b in lens {
            let bursts = if quick { 3 } else { 5 };
            let poolcap = |ring| CaptureSpec {
                pool: Some((m, r)),
                load: c.load,
                ..spec(Tool::Poolcap, ring, false)
            };
            // The same pool with poolcap's default kernel ring, to tell what the pool absorbs
            // from what a larger ring absorbs.
            let default_ring = Subject {
                name: format!("poolcap -B {BUFFER_KIB}"),
                ..Subject::capture(poolcap(BUFFER_KIB))
            };
            // tcpdump gets the pool's memory as its ring: R*M cells of 2048 bytes.
            let tcpdump = spec(Tool::Tcpdump, rm * 2048 / 1024, false);
            v.push(Point {
                id: format!("M={m} R={r} B={b}"),
                traffic: Traffic {
                    burst: Some(b),
                    idle: Some(Duration::from_secs_f64(1.5 * b as f64 / c.analysis_pps)),
                    ..top(64, bursts * b)
                },
                subjects: vec![
                    Subject::capture(poolcap(BURST_RING_KIB)),
                    Subject::capture(tcpdump),
                    default_ring,
                ],
                spacing: false,
            });
        }
    }
    v
}

/// Settings, notes, columns and target checks of a suite's summary.
pub fn summary_text(
    opts: &Options,
    machine: &Machine,
    lab: &Lab,
    mut notes: Vec<String>,
    rows: &[Row],
    interrupted: bool,
) -> SummaryText {
    let suite = opts.suite.name();
    let mut settings = vec![
        format!(
            "runs: {} per point and subject, interleaved (A B C A B C ...)",
            opts.runs
        ),
        format!(
            "lab: veth {} → {}, 1 queue; generator pinned to CPU {GEN_CPU}, tool under test \
             to CPU {TOOL_CPU} (`taskset`)",
            lab.sender.iface, lab.probe.iface
        ),
        format!(
            "rps_cpus of {}: {}",
            lab.probe.iface,
            if opts.rps {
                format!("CPU {TOOL_CPU} (kernel receive work competes with the tool)")
            } else {
                "off (kernel receive work runs on the sender's CPU)".to_owned()
            }
        ),
        "loss = (offered − captured) / offered; captured = packets in the written file for \
         writing runs, the tool's own count otherwise"
            .to_owned(),
        "tool CPU = utime + stime from /proc/PID/stat (10 ms ticks) between the ready line and \
         1.2 s after the sender finished; CPU s/Mpkt = that per million captured packets"
            .to_owned(),
    ];
    if opts.suite == Suite::Gen && opts.rps {
        notes.push(
            "with rps the kernel timestamps frames on the tool's CPU when it drains its backlog, \
             so the spacing columns show the receiver's batching, not the generator's"
                .into(),
        );
    }
    if opts.suite == Suite::Capture {
        settings.push(format!(
            "every tool gets a {BUFFER_KIB} KiB kernel buffer (-B / -S); files are pcap \
             (microseconds) under /var/tmp"
        ));
    }
    if interrupted {
        notes.push("INTERRUPTED: these are partial results".into());
    }
    let busy = rows
        .iter()
        .filter_map(|r| r.get("busy_before"))
        .map(|s| s.max)
        .fold(0.0, f64::max);
    notes.push(format!(
        "each run waited (up to 60 s) until at most {:.0}% of all CPUs were busy; the busiest \
         start measured {:.0}% (above the limit means someone else kept the machine busy)",
        QUIET_BELOW * 100.0,
        busy * 100.0
    ));
    let (columns, ratios, targets) = match opts.suite {
        Suite::Gen => (
            vec![
                "offered",
                "sender_pps",
                "rate_error",
                "wire_rate_error",
                "max_back_to_back",
                "p5_gap_ns",
                "batch",
                "loss",
            ],
            vec!["sender_pps"],
            gen_targets(rows),
        ),
        Suite::Capture => (
            vec![
                "offered",
                "sender_pps",
                "captured",
                "dropped",
                "loss",
                "cpu_s",
                "cpu_s_per_mpkt",
                "wall_s",
            ],
            vec!["loss", "cpu_s_per_mpkt", "sender_pps"],
            capture_targets(rows),
        ),
        Suite::Burst => {
            notes.push(format!(
                "poolcap gets the same memory as tcpdump: its pool (R*M cells of 2048 bytes) \
                 and the smallest kernel ring ({BURST_RING_KIB} KiB); `poolcap -B {BUFFER_KIB}` \
                 is the same pool with poolcap's default ring. Its capture thread and worker \
                 share CPU {TOOL_CPU}. Sender pps includes the idle gaps."
            ));
            notes.push(
                "tcpdump does no per-packet analysis: it only copies frames to /dev/null, \
                 while poolcap runs the x-loop load on every packet on the same core as its \
                 capture thread. tcpdump's ring (R*M*2048 bytes) also holds far more than R*M \
                 64-byte frames, since a TPACKET_V3 ring packs small frames while a pool cell \
                 is 2048 bytes. The comparison is the papers' setting, not a like-for-like one."
                    .into(),
            );
            (
                vec![
                    "offered",
                    "sender_pps",
                    "captured",
                    "dropped",
                    "loss",
                    "pool_peak_chunks",
                    "cpu_s",
                ],
                vec!["loss"],
                Vec::new(),
            )
        }
    };
    SummaryText {
        title: format!(
            "poolcap bench {suite}{}",
            if opts.quick { " (quick)" } else { "" }
        ),
        machine: machine.clone(),
        command: opts.command.clone(),
        settings,
        notes,
        columns,
        ratios,
        targets,
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "FAIL"
    }
}

fn points_of(rows: &[Row]) -> Vec<&str> {
    let mut v: Vec<&str> = Vec::new();
    for r in rows {
        if !v.contains(&r.point.as_str()) {
            v.push(&r.point);
        }
    }
    v
}

fn gen_targets(rows: &[Row]) -> Vec<String> {
    let mut t = Vec::new();
    let med = |point: &str, subject: &str, key: &str| {
        rows.iter()
            .find(|r| r.point == point && r.subject == subject)
            .and_then(|r| r.median(key))
    };
    let top = "64B top speed";
    if let (Some(p), Some(g)) = (
        med(top, "poolcap gen", "sender_pps"),
        med(top, "trafgen", "sender_pps"),
    ) {
        t.push(format!(
            "top speed, 64 B: poolcap gen / trafgen = {:.0} / {:.0} pps = {:.2} (target ≥ 0.9): {}",
            p,
            g,
            p / g,
            verdict(p / g >= 0.9)
        ));
    }
    for r in rows.iter().filter(|r| r.traffic.rate.is_some()) {
        let (Some(e), Some(w)) = (r.median("rate_error"), r.median("wire_rate_error")) else {
            continue;
        };
        t.push(format!(
            "{}: rate error {:+.2}% (generator's count) / {:+.2}% (capture timestamps) \
             (target within ±2%): {}",
            r.point,
            e * 100.0,
            w * 100.0,
            verdict(e.abs() <= 0.02 && w.abs() <= 0.02)
        ));
        if let (Some(run), Some(batch)) = (r.get("max_back_to_back"), r.median("batch")) {
            t.push(format!(
                "{}: longest back-to-back run {:.0} frames (median; {:.0}–{:.0}) for a \
                 generator batch of {batch:.0}: {}",
                r.point,
                run.median,
                run.min,
                run.max,
                if run.max <= batch {
                    "no burst beyond one batch"
                } else {
                    "bursts longer than a batch"
                }
            ));
        }
    }
    t
}

/// One target checked at one point.
struct Check {
    point: String,
    ok: bool,
    detail: String,
}

/// `NAME: k of n points — point: detail PASS; ...`.
fn checks_line(name: &str, checks: &[Check]) -> String {
    let passed = checks.iter().filter(|c| c.ok).count();
    let detail: Vec<String> = checks
        .iter()
        .map(|c| format!("{}: {} {}", c.point, c.detail, verdict(c.ok)))
        .collect();
    format!(
        "{name}: {passed} of {} points — {}",
        checks.len(),
        detail.join("; ")
    )
}

fn capture_targets(rows: &[Row]) -> Vec<String> {
    let (mut zero, mut best, mut cpu, mut rate) = (vec![], vec![], vec![], vec![]);
    let pct = |x: f64| format!("{:.4}%", x * 100.0);
    for p in points_of(rows) {
        let check = |ok, detail| Check {
            point: p.to_owned(),
            ok,
            detail,
        };
        let at = |s: &str, k: &str| {
            rows.iter()
                .find(|r| r.point == p && r.subject == s)
                .and_then(|r| r.median(k))
        };
        if let Some(Versus {
            poolcap,
            best: Some((name, b)),
        }) = Versus::at(rows, p, "loss")
        {
            if b == 0.0 {
                zero.push(check(poolcap == 0.0, format!("poolcap {}", pct(poolcap))));
            }
            let detail = format!("poolcap {} vs {name} {}", pct(poolcap), pct(b));
            best.push(check(poolcap <= b, detail));
        }
        let key = "cpu_s_per_mpkt";
        if let (Some(a), Some(n)) = (at("poolcap", key), at("netsniff-ng", key)) {
            cpu.push(check(a <= n, format!("{a:.3} vs {n:.3} s/Mpkt")));
        }
        if let (Some(a), Some(d)) = (at("poolcap", "sender_pps"), at("tcpdump", "sender_pps")) {
            let detail = format!("{:.0}k vs {:.0}k pps = {:.2}", a / 1e3, d / 1e3, a / d);
            rate.push(check(a >= 0.95 * d, detail));
        }
    }
    vec![
        checks_line(
            "poolcap's loss is zero wherever a peer's is zero (medians)",
            &zero,
        ),
        checks_line(
            "poolcap's loss is never above the best peer's (medians)",
            &best,
        ),
        checks_line("poolcap CPU per packet ≤ netsniff-ng's (medians)", &cpu),
        checks_line(
            "sender rate while poolcap captures ≥ 0.95 × while tcpdump captures (medians)",
            &rate,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_suites_are_smaller_and_bursts_fill_the_pool() {
        assert!(capture_points(true).len() < capture_points(false).len());
        assert_eq!(capture_points(true).len(), 4);
        assert!(capture_points(false)
            .iter()
            .all(|p| p.subjects.len() == 4 && p.subjects[0].is_poolcap()));
        let c = Calibration::new(500e3, 1.0);
        assert_eq!(c.load, 4000);
        assert!((c.analysis_pps - 250e3).abs() < 1e-6);
        let quick = burst_points(true, &c);
        assert_eq!(quick.len(), 3);
        for p in &quick {
            assert_eq!(p.traffic.burst, Some(BURST_CELLS as u64));
            assert_eq!(p.traffic.count, 3 * BURST_CELLS as u64);
            let idle = p.traffic.idle.unwrap().as_secs_f64();
            assert!((idle - 1.5 * 16384.0 / 250e3).abs() < 1e-6);
        }
        assert_eq!(burst_points(false, &c).len(), 9);
    }
}
