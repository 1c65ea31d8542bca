//! Calibration in a veth lab of the bench rig: the points of [`super::points`] (the generator
//! at top speed, 64 and 1514-byte frames, the sender alone, every configuration of
//! [`super::stages`] and the saturated worker, and poolcap counting with rps on) run through [`Bench::run_once`], which measures the tool's CPU time, its
//! scheduler statistics and the sender's rate; [`super::of_rows`] turns the runs into a
//! profile. The sender alone gives
//! the line rate the lab offers; the sender while poolcap counts gives, by difference, the
//! kernel's receive work per frame (on veth it runs on the sender's CPU).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use poolcap_lab::Lab;

use crate::point::{self, Bench, QUIET_BELOW};
use crate::report::{aggregate, Row};
use crate::scratch::{remove_scratch, scratch_with_exe};

/// What to measure.
#[derive(Debug, Clone)]
pub struct LabOptions {
    /// Frames per run.
    pub frames: u64,
    /// Runs per configuration and size (the median is kept).
    pub runs: usize,
    /// Compression levels to measure.
    pub levels: Vec<String>,
    /// Measure tcpdump and dumpcap too.
    pub peers: bool,
    /// Wait up to this long before each run for the machine to be quiet.
    pub quiet_wait: Duration,
}

/// Runs the calibration; returns its rows and the x-loop cost (ns per iteration).
pub fn measure(opts: &LabOptions, stop: Arc<AtomicBool>) -> anyhow::Result<(Vec<Row>, f64)> {
    let nproc = std::thread::available_parallelism().map_or(1, usize::from);
    if nproc < 2 {
        bail!("the lab pins the generator and the tool to CPUs 0 and 1: it needs 2 CPUs");
    }
    poolcap_sys::privilege::check_lab()?;
    let (scratch, exe) = scratch_with_exe()?;
    let result = measure_in(opts, stop, &scratch, &exe);
    remove_scratch(&scratch);
    result
}

fn measure_in(
    opts: &LabOptions,
    stop: Arc<AtomicBool>,
    scratch: &std::path::Path,
    exe: &std::path::Path,
) -> anyhow::Result<(Vec<Row>, f64)> {
    let lab = Lab::unique(1, 2)?;
    let b = Bench {
        lab: &lab,
        exe: exe.to_owned(),
        scratch: scratch.to_owned(),
        stop: Arc::clone(&stop),
        rps: false,
        settle: Duration::from_millis(300),
        drain: Duration::from_millis(1200),
        quiet_below: QUIET_BELOW,
        quiet_wait: opts.quiet_wait,
        perf: false,
    };
    let x_loop_ns = point::ns_per_iteration()?;
    log::info!(
        "calibrate: lab {} ({} / {}), x-loop {x_loop_ns:.3} ns per iteration",
        lab.name,
        lab.sender.netns,
        lab.probe.netns
    );
    let levels: Vec<&str> = opts.levels.iter().map(String::as_str).collect();
    let mut records = Vec::new();
    for point in super::points(&super::SIZES, opts.frames, &levels, opts.peers) {
        for subject in &point.subjects {
            for run in 1..=opts.runs {
                if stop.load(Ordering::Relaxed) {
                    bail!("interrupted");
                }
                let rec = b.run_once("calibrate", &point, subject, run);
                let size = point.traffic.size;
                match (&rec.error, &rec.capture) {
                    (Some(e), _) => {
                        log::info!(
                            "calibrate: {size} B {}: failed, not used: {e}",
                            subject.name
                        )
                    }
                    (None, None) => log::info!(
                        "calibrate: {size} B sender alone: {:.0} ns per frame",
                        rec.sent.as_ref().map_or(f64::NAN, |s| 1e9 / s.pps)
                    ),
                    (None, Some(c)) if c.stopped => log::info!(
                        "calibrate: {size} B {}, stopped while {} frames came at {:.0}k pps: its \
                         ring held {}",
                        subject.name,
                        rec.sent.as_ref().map_or(0, |s| s.frames),
                        rec.sent.as_ref().map_or(f64::NAN, |s| s.pps / 1e3),
                        rec.captured().unwrap_or(0)
                    ),
                    (None, Some(_)) => log::info!(
                        "calibrate: {size} B {}: {:.0} ns per packet (cpu {:.2} s, {} captured, \
                         loss {:.2}%)",
                        subject.name,
                        rec.cpu_s.unwrap_or(f64::NAN) * 1e9
                            / rec.captured().unwrap_or(0).max(1) as f64,
                        rec.cpu_s.unwrap_or(f64::NAN),
                        rec.captured().unwrap_or(0),
                        rec.loss.unwrap_or(f64::NAN) * 100.0
                    ),
                }
                records.push(rec);
            }
        }
    }
    drop(lab);
    Ok((aggregate(&records), x_loop_ns))
}
