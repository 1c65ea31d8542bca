//! Calibration in a veth lab of the bench rig: the generator sends `frames` frames of 64 and
//! 1514 bytes at top speed for each configuration of [`super::stages`], and the rig
//! ([`Bench::run_once`]) measures the tool's CPU time and the sender's rate. The sender alone
//! gives the line rate the lab offers; the sender while poolcap counts gives, by difference,
//! the kernel's receive work per frame (on veth it runs on the sender's CPU).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use poolcap_doctor::profile::Samples;
use poolcap_lab::Lab;

use crate::bench::manager::scratch_with_exe;
use crate::bench::peer::{Generator, Traffic};
use crate::bench::point::{Bench, Point, Record, Subject};
use crate::bench::suites::{self, QUIET_BELOW};

/// Frame sizes measured: the smallest common one and the MTU's.
pub const SIZES: [usize; 2] = [64, 1514];

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

/// ns per frame of the sender (`sent.pps`), and the tool's CPU ns per captured packet.
fn ns_of(rec: &Record) -> (Option<f64>, Option<f64>) {
    let sender = rec.sent.as_ref().map(|s| 1e9 / s.pps);
    let tool = match (rec.cpu_s, rec.captured()) {
        (Some(cpu), Some(n)) if n > 0 => Some(cpu * 1e9 / n as f64),
        _ => None,
    };
    (sender, tool)
}

/// Runs the calibration; returns the samples and the x-loop cost (ns per iteration).
pub fn measure(opts: &LabOptions, stop: Arc<AtomicBool>) -> anyhow::Result<(Samples, f64)> {
    let nproc = std::thread::available_parallelism().map_or(1, usize::from);
    if nproc < 2 {
        bail!("the lab pins the generator and the tool to CPUs 0 and 1: it needs 2 CPUs");
    }
    poolcap_sys::privilege::check_lab()?;
    let (scratch, exe) = scratch_with_exe()?;
    let result = measure_in(opts, stop, &scratch, &exe);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn measure_in(
    opts: &LabOptions,
    stop: Arc<AtomicBool>,
    scratch: &std::path::Path,
    exe: &std::path::Path,
) -> anyhow::Result<(Samples, f64)> {
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
    let x_loop_ns = suites::ns_per_iteration()?;
    eprintln!(
        "calibrate: lab {} ({} / {}), x-loop {x_loop_ns:.3} ns per iteration",
        lab.name, lab.sender.netns, lab.probe.netns
    );
    let levels: Vec<&str> = opts.levels.iter().map(String::as_str).collect();
    let stages = super::stages(&levels, opts.peers);
    let mut samples = Samples::default();
    for size in SIZES {
        let traffic = Traffic::top(size, opts.frames);
        let bytes = size as f64;
        let mut subjects = vec![("sender".to_owned(), Subject::sender(Generator::Poolcap))];
        subjects.extend(
            stages
                .iter()
                .map(|s| (s.key.clone(), Subject::capture(s.spec.clone()))),
        );
        for (key, subject) in &subjects {
            let point = Point::new(format!("{size}B {key}"), traffic.clone(), vec![]);
            for run in 1..=opts.runs {
                if stop.load(Ordering::Relaxed) {
                    bail!("interrupted");
                }
                let rec = b.run_once("calibrate", &point, subject, run);
                if let Some(e) = &rec.error {
                    eprintln!("calibrate: {size} B {key}: failed, not used: {e}");
                    continue;
                }
                let (sender, tool) = ns_of(&rec);
                match key.as_str() {
                    "sender" => {
                        if let Some(ns) = sender {
                            samples.add("sender", bytes, ns);
                            eprintln!("calibrate: {size} B sender alone: {ns:.0} ns per frame");
                        }
                    }
                    k => {
                        if let (Some(ns), "count") = (sender, k) {
                            samples.add("sender+capture", bytes, ns);
                        }
                        if let Some(ns) = tool {
                            samples.add(k, bytes, ns);
                        }
                        eprintln!(
                            "calibrate: {size} B {k}: {} ns per packet (cpu {:.2} s, {} captured, loss {:.2}%)",
                            tool.map_or("?".to_owned(), |t| format!("{t:.0}")),
                            rec.cpu_s.unwrap_or(f64::NAN),
                            rec.captured().unwrap_or(0),
                            rec.loss.unwrap_or(f64::NAN) * 100.0
                        );
                    }
                }
            }
        }
    }
    drop(lab);
    Ok((samples, x_loop_ns))
}
