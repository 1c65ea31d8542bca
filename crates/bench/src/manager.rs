//! The manager: builds the suite's lab, calibrates, runs its points with the subjects
//! interleaved, checks for Ctrl-C between runs, and hands the records to the formatters.
//! [`render`] rebuilds a result directory's CSV, summary and figures from `meta.json` and
//! `raw.jsonl` alone; [`report()`] does that for the latest run of every suite and writes
//! BENCHMARKS.md; [`run_all`] runs every suite and then [`report()`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use poolcap_lab::Lab;

use super::calibrate::disk::{self, DiskOptions};
use super::doc::{self, Rendered, ReportPaths};
use super::figure::Figure;
use super::meta::{self, Meta};
use super::peer::{self, Generator, Traffic};
use super::point::{set_rps, Bench, Point, Record, Subject};
use super::progress::Progress;
use super::report::{self, Machine};
use super::stats::Spread;
use super::suites::{self, Calibration, CalibrationKind, Scale, Suite};
use poolcap_doctor::profile::Disk;
pub use poolcap_measure::scratch::{now, timestamp};
use poolcap_measure::scratch::{remove_scratch, scratch_with};

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The suite.
    pub suite: Suite,
    /// How many points and frames.
    pub scale: Scale,
    /// Runs per point and subject.
    pub runs: usize,
    /// soak only: minutes of capture instead of the scale's.
    pub minutes: Option<f64>,
    /// Set the probe's rps_cpus to the tool's CPU.
    pub rps: bool,
    /// Output directory.
    pub out: PathBuf,
    /// The command line, for the summary.
    pub command: String,
    /// The poolcap executable measured and used as the generator (the one beside
    /// `poolcap-bench`, or `--subject`: a build from before a change, for a before/after
    /// comparison on the same rig).
    pub subject: PathBuf,
    /// Only the points whose id contains this: a check of a few points, not a whole suite.
    pub points: Option<String>,
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
    let total: usize = points.iter().map(|p| p.subjects.len() * runs).sum();
    let mut progress = Progress::new(total as u64);
    for (i, p) in points.iter().enumerate() {
        for run in 1..=runs {
            for s in &p.subjects {
                if b.stop.load(Ordering::Relaxed) {
                    progress.finish();
                    return Ok(());
                }
                progress.start((i + 1, n), &p.id, &s.name, (run, runs));
                let r = b.run_once(suite, p, s, run);
                if b.stop.load(Ordering::Relaxed) {
                    progress.interrupted();
                    return Ok(());
                }
                progress.done(&r);
                log.append(&r)?;
                records.push(r);
            }
        }
    }
    progress.finish();
    Ok(())
}

/// The default output directory of a suite started now: `RESULTS/SUITE-YYYYMMDD-HHMMSS`.
pub fn default_out(results: &Path, suite: Suite) -> PathBuf {
    results.join(format!("{}-{}", suite.name(), timestamp(now())))
}

/// Runs a suite, writes its results to `opts.out` and returns the rendered summary.
pub fn run(opts: &Options, stop: Arc<AtomicBool>) -> anyhow::Result<Rendered> {
    let machine = Machine::read();
    if machine.nproc < 2 {
        bail!("the bench pins the generator and the tool to CPUs 0 and 1: it needs 2 CPUs");
    }
    poolcap_sys::privilege::check_lab()?;
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("cannot create {}", opts.out.display()))?;
    let (scratch, exe) = scratch_with(&opts.subject)?;
    let result = run_in(opts, machine, &scratch, &exe, stop);
    remove_scratch(&scratch);
    result
}

/// Peer programs whose version goes into `meta.json`.
const VERSIONED: [(&str, &str); 6] = [
    ("tcpdump", "--version"),
    ("dumpcap", "--version"),
    ("netsniff-ng", "--version"),
    ("trafgen", "--version"),
    ("zstd", "--version"),
    ("perf", "--version"),
];

fn run_in(
    opts: &Options,
    machine: Machine,
    scratch: &Path,
    exe: &Path,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Rendered> {
    let suite = opts.suite.name();
    let lab = Lab::unique(opts.suite.def().queues, opts.suite.def().hosts)?;
    if opts.rps {
        set_rps(&lab, true)?;
    }
    let smoke = opts.scale == Scale::Smoke;
    let perf = peer::missing(&["perf"]).is_none();
    let b = Bench {
        lab: &lab,
        exe: exe.to_owned(),
        scratch: scratch.to_owned(),
        stop: Arc::clone(&stop),
        rps: opts.rps,
        settle: Duration::from_millis(300),
        drain: Duration::from_millis(if smoke { 500 } else { 1200 }),
        quiet_below: suites::QUIET_BELOW,
        quiet_wait: Duration::from_secs(if smoke { 0 } else { 60 }),
        perf,
    };
    log::info!(
        "poolcap bench {suite} ({}): lab {} ({} / {}, {} queue(s)), rps {}, {} runs per point, \
         results in {}",
        opts.scale.name(),
        lab.name,
        lab.sender.netns,
        lab.probe.netns,
        lab.queues,
        if opts.rps { "on" } else { "off" },
        opts.runs,
        opts.out.display()
    );
    let mut meta = Meta {
        suite: opts.suite,
        scale: opts.scale,
        runs: opts.runs,
        rps: opts.rps,
        command: opts.command.clone(),
        machine,
        versions: meta::versions(&VERSIONED),
        sender_iface: lab.sender.iface.clone(),
        probe_iface: lab.probe.iface.clone(),
        queues: lab.queues,
        calibration: Calibration {
            ns_per_iteration: f64::NAN,
            top_pps: None,
            disk_mb_s: None,
        },
        disk: None,
        notes: Vec::new(),
        started: now(),
        finished: None,
        interrupted: false,
        perf,
    };
    let mut log = report::RawLog::create(&opts.out.join("raw.jsonl"))?;
    let mut records = Vec::new();
    meta.calibration = calibrate(&b, opts, &mut log, &mut records)?;
    let plan = match (opts.suite, opts.minutes) {
        (Suite::Soak, Some(m)) => suites::soak::plan_for(m * 60.0, &meta.calibration),
        _ => suites::plan(opts.suite, opts.scale, &meta.calibration),
    };
    let mut points = plan.points;
    meta.notes = plan.notes;
    // The store's query points run after its capture points, when `--points` picks them.
    let queries = opts.suite == Suite::Store
        && opts.points.as_deref().is_none_or(|only| {
            suites::store::QUERY_POINTS
                .iter()
                .any(|id| picked(id, only))
        });
    if let Some(only) = &opts.points {
        points.retain(|p| picked(&p.id, only));
        if points.is_empty() && !queries {
            bail!("no point of {suite} has `{only}` in its id");
        }
        meta.notes
            .push(format!("only the points whose id contains `{only}`"));
    }
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
    if !perf && points.iter().any(|p| p.syscalls) {
        skipped.insert("syscalls not counted: `perf` is not installed".to_owned());
    }
    for note in skipped {
        log::info!("note: {note}");
        meta.notes.push(note);
    }
    if points.iter().any(|p| p.id == suites::predict::LONG_WRITE) {
        meta.disk = Some(measure_disk(&b)?);
    }
    meta.write(&opts.out)?;
    run_points(&b, suite, &points, opts.runs, &mut log, &mut records)?;
    if queries && !stop.load(Ordering::Relaxed) {
        suites::store::queries(&b, opts.scale, opts.runs, &mut log, &mut records)?;
    }
    meta.interrupted = stop.load(Ordering::Relaxed);
    meta.finished = Some(now());
    meta.write(&opts.out)?;
    drop(lab);
    let r = render(&opts.out)?;
    log::info!(
        "results: {} ({:.1} min)",
        opts.out.join("summary.md").display(),
        meta.minutes().unwrap_or(0.0)
    );
    if meta.interrupted {
        bail!("interrupted; partial results in {}", opts.out.display());
    }
    Ok(r)
}

/// Whether a point `id` is one `--points` asks for: its id contains one of the filter's
/// `|`-separated parts (`calibrate|disk`: the calibration points and the long writing point).
fn picked(id: &str, filter: &str) -> bool {
    filter.split('|').any(|part| id.contains(part))
}

/// The scratch directory's disk as `poolcap calibrate --disk-dir` measures it: a direct and a
/// buffered write of twice the page cache's dirty limit (at least 1 GiB), each timed to its
/// `fsync` (for the prediction of points that write more than the page cache holds).
fn measure_disk(b: &Bench) -> anyhow::Result<Disk> {
    let opts = DiskOptions {
        dir: b.scratch.clone(),
        bytes: None,
        dirty_limit: disk::dirty_limit_bytes(),
        time_limit: Duration::from_secs(120),
    };
    suites::disk::check_room(&b.scratch, opts.bytes())?;
    log::info!(
        "calibration: the disk: {} MB written direct and buffered in {}",
        opts.bytes() / 1_000_000,
        b.scratch.display()
    );
    disk::measure(&opts, &b.stop)
}

/// What a suite needs before its points: the x-loop cost and, for some, the generator's top
/// speed (`runs` runs of poolcap gen alone, logged as point `calibration`; assumed in smoke
/// runs) or the scratch disk's own write limit (not in smoke runs).
fn calibrate(
    b: &Bench,
    opts: &Options,
    log: &mut report::RawLog,
    records: &mut Vec<Record>,
) -> anyhow::Result<Calibration> {
    let ns_per_iteration = suites::ns_per_iteration()?;
    let disk_mb_s = match (
        opts.suite.def().calibration,
        suites::disk::dd_mib(opts.scale),
    ) {
        (CalibrationKind::Device, Some(mib)) => {
            suites::disk::check_room(&b.scratch, suites::disk::room_needed(opts.scale))?;
            let mb = suites::disk::device_limit(&b.scratch, mib)?;
            log::info!("calibration: the disk writes {mb:.0} MB/s with dd oflag=direct");
            Some(mb)
        }
        _ => None,
    };
    let top_pps = match opts.suite.def().calibration {
        CalibrationKind::Iterations | CalibrationKind::Device => None,
        CalibrationKind::TopSpeed { .. } if opts.scale == Scale::Smoke => None,
        CalibrationKind::TopSpeed { flows } => {
            let p = Point::new(
                "calibration: 64B top speed",
                Traffic {
                    flows,
                    ..Traffic::top(64, 500_000)
                },
                vec![Subject::sender(Generator::Poolcap)],
            );
            let before = records.len();
            run_points(b, opts.suite.name(), &[p], opts.runs, log, records)?;
            let top = Spread::of(
                records[before..]
                    .iter()
                    .filter_map(|r| Some(r.sent.as_ref()?.pps)),
            )
            .context("calibration: the generator never finished")?;
            Some(top.median)
        }
    };
    Ok(Calibration {
        ns_per_iteration,
        top_pps,
        disk_mb_s,
    })
}

/// Rebuilds `results.csv`, `samples.csv` (runs that sampled the tool), the figures and
/// `summary.md` of a result directory from its `meta.json` and `raw.jsonl`.
pub fn render(dir: &Path) -> anyhow::Result<Rendered> {
    let meta = Meta::read(dir)?;
    let records = report::read_raw(&dir.join("raw.jsonl"))?;
    let rows = report::aggregate(&records);
    report::write_csv(&dir.join("results.csv"), meta.suite.name(), &rows)?;
    let sampled = records.iter().filter(|r| !r.samples.is_empty());
    if sampled.clone().next().is_some() {
        report::write_samples_csv(
            &dir.join("samples.csv"),
            sampled.map(|r| (r.point.as_str(), r.subject.as_str(), r.run, &r.samples[..])),
        )?;
    }
    let text = suites::text(&meta, &rows);
    let figures = suites::figures(&meta, &rows)
        .into_iter()
        .filter(Figure::has_points)
        .map(|f| {
            let drawn = f.draw(dir);
            (f, drawn)
        })
        .collect();
    let r = Rendered {
        dir: dir.to_owned(),
        meta,
        rows,
        text,
        figures,
    };
    let path = dir.join("summary.md");
    std::fs::write(&path, doc::summary(&r))
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(r)
}

/// The latest result directory of `suite` under `results` (by the timestamp in its name)
/// that has a `meta.json`.
pub fn latest(results: &Path, suite: Suite) -> Option<PathBuf> {
    let prefix = format!("{}-", suite.name());
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(results)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.strip_prefix(&prefix).is_some_and(is_timestamp))
                && p.join("meta.json").is_file()
                && p.join("raw.jsonl").is_file()
        })
        .collect();
    dirs.sort();
    dirs.pop()
}

fn is_timestamp(s: &str) -> bool {
    s.len() == 15
        && s.bytes().enumerate().all(|(i, c)| {
            if i == 8 {
                c == b'-'
            } else {
                c.is_ascii_digit()
            }
        })
}

/// Rebuilds every suite's latest result directory and writes BENCHMARKS.md with the figures
/// copied next to it.
pub fn report(paths: &ReportPaths) -> anyhow::Result<()> {
    let previous = std::fs::read_to_string(&paths.markdown).unwrap_or_default();
    let mut rendered = Vec::new();
    let mut kept = Vec::new();
    let mut missing = Vec::new();
    for s in Suite::ALL {
        match latest(&paths.results, s) {
            Some(dir) => match render(&dir) {
                Ok(r) => rendered.push(r),
                Err(e) => missing.push(format!(
                    "{}: {} could not be read: {e:#}",
                    s.name(),
                    dir.display()
                )),
            },
            None => match doc::Kept::from_previous(&previous, s) {
                Some(k) => kept.push(k),
                None => missing.push(format!("{}: no result directory yet", s.name())),
            },
        }
    }
    let root = paths
        .markdown
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let fig_dir = root.join(&paths.figures);
    std::fs::create_dir_all(&fig_dir)
        .with_context(|| format!("cannot create {}", fig_dir.display()))?;
    // Figures the previous report linked to go, unless a kept section still links to them;
    // other files in the folder (figures of the committed quick-run summaries) stay.
    let still: Vec<&str> = kept.iter().flat_map(doc::Kept::figures).collect();
    for f in doc::figure_links(&previous) {
        if !still.contains(&f) {
            let _ = std::fs::remove_file(fig_dir.join(f));
        }
    }
    for r in &rendered {
        for (f, drawn) in &r.figures {
            if drawn.is_ok() {
                std::fs::copy(r.dir.join(&f.file), fig_dir.join(&f.file))
                    .with_context(|| format!("cannot copy {}", f.file))?;
            }
        }
    }
    let text = doc::benchmarks(&rendered, &kept, &missing, paths);
    std::fs::write(&paths.markdown, text)
        .with_context(|| format!("cannot write {}", paths.markdown.display()))?;
    log::info!(
        "wrote {} ({} suites from their results, {} kept from the previous file, figures in {})",
        paths.markdown.display(),
        rendered.len(),
        kept.len(),
        fig_dir.display()
    );
    for m in missing {
        log::info!("note: {m}");
    }
    Ok(())
}

/// Runs every suite (sizes with rps on, see [`suites::sizes`]), each into its own directory
/// under `paths.results`, then [`report()`]. A suite that fails is reported and the next runs.
pub fn run_all(
    template: &Options,
    paths: &ReportPaths,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let started = now();
    let mut failed = Vec::new();
    for s in Suite::ALL {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let opts = Options {
            suite: s,
            rps: template.rps || s == Suite::Sizes,
            out: default_out(&paths.results, s),
            ..template.clone()
        };
        if let Err(e) = run(&opts, Arc::clone(&stop)) {
            log::error!("poolcap bench {}: {e:#}", s.name());
            failed.push(s.name());
        }
    }
    report(paths)?;
    log::info!(
        "bench all: {:.1} min{}",
        (now() - started) as f64 / 60.0,
        if failed.is_empty() {
            String::new()
        } else {
            format!("; failed: {}", failed.join(", "))
        }
    );
    if stop.load(Ordering::Relaxed) {
        bail!("interrupted");
    }
    if !failed.is_empty() {
        bail!("suites failed: {}", failed.join(", "));
    }
    Ok(())
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
    fn finds_the_latest_complete_directory() {
        let d = tempfile::tempdir().unwrap();
        for (name, complete) in [
            ("rates-20260101-000000", true),
            ("rates-20260102-000000", true),
            ("rates-20260103-000000", false),
            ("rates-x", true),
            ("imbalance-20260105-000000", true),
        ] {
            let p = d.path().join(name);
            std::fs::create_dir_all(&p).unwrap();
            if complete {
                std::fs::write(p.join("meta.json"), "{}").unwrap();
                std::fs::write(p.join("raw.jsonl"), "").unwrap();
            }
        }
        let l = latest(d.path(), Suite::Rates).unwrap();
        assert!(l.ends_with("rates-20260102-000000"), "{l:?}");
        assert!(latest(d.path(), Suite::Wait).is_none());
        assert!(is_timestamp("20260101-000000") && !is_timestamp("2026010-1000000"));
    }

    #[test]
    fn a_points_filter_picks_every_point_of_any_of_its_parts() {
        // The calibration points and the long writing point of `predict`, and nothing else.
        let plan = suites::plan(Suite::Predict, Scale::Quick, &Calibration::default()).points;
        let picked_ids: Vec<&str> = plan
            .iter()
            .map(|p| p.id.as_str())
            .filter(|id| picked(id, "calibrate|disk"))
            .collect();
        assert!(picked_ids.contains(&suites::predict::LONG_WRITE));
        assert!(picked_ids.iter().any(|id| id.starts_with("calibrate ")));
        assert!(picked_ids.len() < plan.len());
        assert!(picked_ids
            .iter()
            .all(|id| id.starts_with("calibrate ") || *id == suites::predict::LONG_WRITE));
        // One part: as before, its text anywhere in the id.
        assert!(picked("64B 300k pcap>/dev/null rps off", "/dev/null"));
        assert!(!picked("64B top pcap rps off", "/dev/null|>20GB"));
    }
}
