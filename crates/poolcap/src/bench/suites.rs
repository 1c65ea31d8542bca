//! The suites: which points each one measures, how many frames, and which targets of the
//! issue its summary checks. The manager loop that runs them (interleaving subjects so drift
//! hits all of them alike) is [`run`].

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use poolcap_lab::{netns_command, Lab};
use serde::Serialize;

use super::peer::{CaptureSpec, Generator, Tool, Traffic};
use super::point::{Bench, Point, Record, Subject, GEN_CPU, TOOL_CPU};
use super::report::{self, Machine, Row, SummaryText, Versus};
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

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The suite.
    pub suite: Suite,
    /// Fewer points and frames: minutes on 2 cores.
    pub quick: bool,
    /// Runs per point and subject.
    pub runs: usize,
    /// Set the probe's rps_cpus to the tool's CPU.
    pub rps: bool,
    /// Output directory.
    pub out: PathBuf,
    /// The command line, for the summary.
    pub command: String,
}

/// A run starts once at most this share of all CPUs is busy (waiting up to a minute): on a
/// shared 2-core machine, someone else's test run halves the sender's rate.
const QUIET_BELOW: f64 = 0.15;
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

fn gen_points(quick: bool) -> Vec<Point> {
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

fn capture_points(quick: bool) -> Vec<Point> {
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
struct Calibration {
    ns_per_iteration: f64,
    top_pps: f64,
    load: u32,
    analysis_pps: f64,
}

/// Nanoseconds per x-loop iteration over a 64-byte packet, measured on the tool's CPU.
fn ns_per_iteration() -> anyhow::Result<f64> {
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

fn burst_points(quick: bool, c: &Calibration) -> Vec<Point> {
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

/// Runs the interleaved runs of `points`: for each point, run 1 of every subject, then run 2
/// of every subject, and so on.
fn run_points(
    b: &Bench,
    suite: &str,
    points: &[Point],
    runs: usize,
    log: &mut report::RawLog,
    records: &mut Vec<Record>,
) -> anyhow::Result<()> {
    let n = points.len();
    for (i, p) in points.iter().enumerate() {
        for run in 1..=runs {
            for s in &p.subjects {
                if b.stop.load(Ordering::Relaxed) {
                    return Ok(());
                }
                eprint!("[{}/{n}] {} · {} · run {run}/{runs}: ", i + 1, p.id, s.name);
                let r = b.run_once(suite, p, s, run);
                if b.stop.load(Ordering::Relaxed) {
                    eprintln!("interrupted");
                    return Ok(());
                }
                eprintln!("{}", progress(&r));
                log.append(&r)?;
                records.push(r);
            }
        }
    }
    Ok(())
}

fn progress(r: &Record) -> String {
    if let Some(e) = &r.error {
        return format!("FAILED: {e}");
    }
    let mut s = String::new();
    if let Some(sent) = &r.sent {
        let _ = write!(s, "sent {} at {:.0} kpps", sent.frames, sent.pps / 1e3);
    }
    if let Some(c) = r.captured() {
        let _ = write!(s, ", captured {c}");
    }
    if let Some(l) = r.loss {
        let _ = write!(s, ", loss {:.3}%", l * 100.0);
    }
    if let Some(cpu) = r.cpu_s {
        let _ = write!(s, ", tool CPU {cpu:.2} s");
    }
    if let Some(sp) = r.spacing {
        let _ = write!(s, ", longest back-to-back {}", sp.max_back_to_back);
    }
    let _ = write!(s, " ({:.1} s)", r.wall_s);
    s
}

fn set_rps(lab: &Lab) -> anyhow::Result<()> {
    let mask = format!("{:x}", 1u64 << TOOL_CPU);
    let script = format!(
        "for f in /sys/class/net/{}/queues/rx-*/rps_cpus; do echo {mask} > $f; done",
        lab.probe.iface
    );
    let st = netns_command(&lab.probe.netns, "sh")
        .args(["-c", &script])
        .status()
        .context("cannot run sh")?;
    if !st.success() {
        bail!("cannot set rps_cpus of {} ({st})", lab.probe.iface);
    }
    Ok(())
}

/// UTC date and time as `YYYYMMDD-HHMMSS`.
pub fn timestamp(unix_secs: u64) -> String {
    let (days, secs) = (unix_secs / 86_400, unix_secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Runs a suite and writes its results to `opts.out`.
pub fn run(opts: &Options, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    let machine = Machine::read();
    if machine.nproc < 2 {
        bail!("the bench pins the generator and the tool to CPUs 0 and 1: it needs 2 CPUs");
    }
    poolcap_sys::privilege::check_lab()?;
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("cannot create {}", opts.out.display()))?;
    let scratch = PathBuf::from(format!("/var/tmp/poolcap-bench/{}", std::process::id()));
    std::fs::create_dir_all(&scratch)
        .with_context(|| format!("cannot create {}", scratch.display()))?;
    let result = run_in(opts, &machine, &scratch, stop);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn run_in(
    opts: &Options,
    machine: &Machine,
    scratch: &std::path::Path,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let suite = opts.suite.name();
    let lab = Lab::unique(1, 2)?;
    if opts.rps {
        set_rps(&lab)?;
    }
    let b = Bench {
        lab: &lab,
        exe: std::env::current_exe().context("cannot find the poolcap executable")?,
        scratch: scratch.to_owned(),
        stop: Arc::clone(&stop),
        rps: opts.rps,
        settle: Duration::from_millis(300),
        drain: Duration::from_millis(1200),
        quiet_below: QUIET_BELOW,
        quiet_wait: Duration::from_secs(60),
    };
    eprintln!(
        "poolcap bench {suite}: lab {} ({} / {}), rps {}, {} runs per point, results in {}",
        lab.name,
        lab.sender.netns,
        lab.probe.netns,
        if opts.rps { "on" } else { "off" },
        opts.runs,
        opts.out.display()
    );
    let mut log = report::RawLog::create(&opts.out.join("raw.jsonl"))?;
    let mut records = Vec::new();
    let mut notes = Vec::new();
    let mut points = match opts.suite {
        Suite::Gen => gen_points(opts.quick),
        Suite::Capture => capture_points(opts.quick),
        Suite::Burst => {
            let c = calibrate(&b, opts, &mut log, &mut records)?;
            notes.push(format!(
                "calibration: x-loop {:.3} ns per iteration on CPU {TOOL_CPU}; offered top speed \
                 of 64 B frames {:.0} pps (median); load X = {} iterations per packet, so one \
                 core analyses about {:.0} pps (half the offered rate); idle after a burst of B \
                 = 1.5 B / {:.0} pps",
                c.ns_per_iteration, c.top_pps, c.load, c.analysis_pps, c.analysis_pps
            ));
            burst_points(opts.quick, &c)
        }
    };
    for p in &mut points {
        p.subjects.retain(|s| match s.missing() {
            None => true,
            Some(prog) => {
                let note = format!("{} skipped at {}: `{prog}` is not installed", s.name, p.id);
                eprintln!("note: {note}");
                notes.push(note);
                false
            }
        });
    }
    run_points(&b, suite, &points, opts.runs, &mut log, &mut records)?;
    let interrupted = stop.load(Ordering::Relaxed);
    let rows = report::aggregate(&records);
    report::write_csv(&opts.out.join("results.csv"), suite, &rows)?;
    let text = summary_text(opts, machine, &lab, notes, &rows, interrupted);
    report::write_summary(&opts.out.join("summary.md"), &text, &rows)?;
    drop(lab);
    eprintln!("results: {}", opts.out.join("summary.md").display());
    if interrupted {
        bail!("interrupted; partial results in {}", opts.out.display());
    }
    Ok(())
}

/// Measures the offered top speed (`runs` runs of poolcap gen, logged as point
/// `calibration`) and the x-loop cost, and picks the load.
fn calibrate(
    b: &Bench,
    opts: &Options,
    log: &mut report::RawLog,
    records: &mut Vec<Record>,
) -> anyhow::Result<Calibration> {
    let p = Point {
        id: "calibration: 64B top speed".into(),
        traffic: top(64, 500_000),
        subjects: vec![Subject::sender(Generator::Poolcap)],
        spacing: false,
    };
    let before = records.len();
    run_points(b, opts.suite.name(), &[p], opts.runs, log, records)?;
    let top_pps = Spread::of(
        records[before..]
            .iter()
            .filter_map(|r| Some(r.sent.as_ref()?.pps)),
    )
    .context("calibration: the generator never finished")?
    .median;
    let ns = ns_per_iteration()?;
    let load = (2e9 / (top_pps * ns)).round().max(1.0) as u32;
    Ok(Calibration {
        ns_per_iteration: ns,
        top_pps,
        load,
        analysis_pps: 1e9 / (f64::from(load) * ns),
    })
}

fn summary_text(
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
    fn timestamps_are_utc_civil_dates() {
        assert_eq!(timestamp(0), "19700101-000000");
        assert_eq!(timestamp(951_782_400 + 3_723), "20000229-010203");
        assert_eq!(timestamp(1_767_225_599), "20251231-235959");
    }

    #[test]
    fn quick_suites_are_smaller_and_bursts_fill_the_pool() {
        assert!(capture_points(true).len() < capture_points(false).len());
        assert_eq!(capture_points(true).len(), 4);
        assert!(capture_points(false)
            .iter()
            .all(|p| p.subjects.len() == 4 && p.subjects[0].is_poolcap()));
        let c = Calibration {
            ns_per_iteration: 1.0,
            top_pps: 500e3,
            load: 4000,
            analysis_pps: 250e3,
        };
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
