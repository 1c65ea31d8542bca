//! The manager: builds the suite's lab, runs its points with the subjects interleaved, checks
//! for Ctrl-C between runs, and hands the records to the formatters.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use poolcap_lab::{netns_command, Lab};

use super::point::{Bench, Point, Record, TOOL_CPU};
use super::report::{self, Machine};
use super::stats::Spread;
use super::suites::{self, Calibration, Suite};

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
    // Children run a copy of this executable, so a rebuild during a long bench (others build
    // on this machine too) neither breaks nor changes what is measured.
    let exe = scratch.join("poolcap");
    std::env::current_exe()
        .and_then(|me| std::fs::copy(me, &exe))
        .context("cannot copy the poolcap executable")?;
    let result = run_in(opts, &machine, &scratch, &exe, stop);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn run_in(
    opts: &Options,
    machine: &Machine,
    scratch: &Path,
    exe: &Path,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let suite = opts.suite.name();
    let lab = Lab::unique(1, 2)?;
    if opts.rps {
        set_rps(&lab)?;
    }
    let b = Bench {
        lab: &lab,
        exe: exe.to_owned(),
        scratch: scratch.to_owned(),
        stop: Arc::clone(&stop),
        rps: opts.rps,
        settle: Duration::from_millis(300),
        drain: Duration::from_millis(1200),
        quiet_below: suites::QUIET_BELOW,
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
        Suite::Gen => suites::gen_points(opts.quick),
        Suite::Capture => suites::capture_points(opts.quick),
        Suite::Burst => {
            let c = calibrate(&b, opts, &mut log, &mut records)?;
            notes.push(format!(
                "calibration: x-loop {:.3} ns per iteration on CPU {TOOL_CPU}; offered top speed \
                 of 64 B frames {:.0} pps (median); load X = {} iterations per packet, so one \
                 core analyses about {:.0} pps (half the offered rate); idle after a burst of B \
                 = 1.5 B / {:.0} pps",
                c.ns_per_iteration, c.top_pps, c.load, c.analysis_pps, c.analysis_pps
            ));
            suites::burst_points(opts.quick, &c)
        }
    };
    let mut skipped = BTreeSet::new();
    for p in &mut points {
        p.subjects.retain(|s| match s.missing() {
            None => true,
            Some(prog) => {
                skipped.insert(format!("{} skipped: `{prog}` is not installed", s.name));
                false
            }
        });
    }
    for note in skipped {
        eprintln!("note: {note}");
        notes.push(note);
    }
    run_points(&b, suite, &points, opts.runs, &mut log, &mut records)?;
    let interrupted = stop.load(Ordering::Relaxed);
    let rows = report::aggregate(&records);
    report::write_csv(&opts.out.join("results.csv"), suite, &rows)?;
    let text = suites::summary_text(opts, machine, &lab, notes, &rows, interrupted);
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
    let p = suites::calibration_point();
    let before = records.len();
    run_points(b, opts.suite.name(), &[p], opts.runs, log, records)?;
    let top_pps = Spread::of(
        records[before..]
            .iter()
            .filter_map(|r| Some(r.sent.as_ref()?.pps)),
    )
    .context("calibration: the generator never finished")?
    .median;
    Ok(Calibration::new(top_pps, suites::ns_per_iteration()?))
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
}
