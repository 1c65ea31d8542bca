//! Calibration on a real interface with traffic the user sends: each configuration of
//! [`super::stages`] captures for `window` at snaplength 64 and at full length, and its CPU
//! time (the scheduler's, in nanoseconds) over the window is divided by the frames the
//! interface received in it (its own counters, which also give their mean size). Two
//! snaplengths stand in for two frame sizes: the captured bytes are what copies, writes and
//! compression pay for (the probe, which keeps whole frames, runs once and gets per-packet
//! costs only).

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context};
use poolcap_doctor::profile::Samples;

use crate::child::{Running, Sched, TICKS_PER_SECOND};
use crate::peer::{CaptureSpec, Tool};
use crate::scratch::{remove_scratch, scratch_with_exe};
use poolcap_sys::netdev;

/// What to measure.
#[derive(Debug, Clone)]
pub struct LiveOptions {
    /// The interface.
    pub iface: String,
    /// Capture time per configuration and snaplength.
    pub window: Duration,
    /// Compression levels to measure.
    pub levels: Vec<String>,
    /// Measure tcpdump and dumpcap too.
    pub peers: bool,
}

/// Snaplength of the small-capture runs.
const SMALL_SNAPLEN: u32 = 64;

/// Frames and bytes the interface received so far.
fn received(iface: &str) -> anyhow::Result<(u64, u64)> {
    match (
        netdev::counter(iface, "rx_packets"),
        netdev::counter(iface, "rx_bytes"),
    ) {
        (Some(p), Some(b)) => Ok((p, b)),
        _ => bail!("cannot read the counters of {iface} (/sys/class/net/{iface}/statistics)"),
    }
}

/// Runs the calibration on an interface that exists (the caller checks); returns the samples
/// and the mean frame size seen.
pub fn measure(opts: &LiveOptions, stop: &AtomicBool) -> anyhow::Result<(Samples, f64)> {
    poolcap_sys::privilege::check_raw_sockets("calibrating on an interface")?;
    let (scratch, exe) = scratch_with_exe()?;
    let result = measure_in(opts, stop, &scratch, &exe);
    remove_scratch(&scratch);
    result
}

fn measure_in(
    opts: &LiveOptions,
    stop: &AtomicBool,
    scratch: &Path,
    exe: &Path,
) -> anyhow::Result<(Samples, f64)> {
    let levels: Vec<&str> = opts.levels.iter().map(String::as_str).collect();
    let mut samples = Samples::default();
    let (mut frames, mut bytes) = (0u64, 0u64);
    for stage in super::stages(&levels, opts.peers) {
        // The probe keeps whole frames (it has no snaplength): one window, per-packet costs.
        let snaplens: &[Option<u32>] = if stage.spec.tool == Tool::Probe {
            &[None]
        } else {
            &[Some(SMALL_SNAPLEN), None]
        };
        for &snaplen in snaplens {
            if stop.load(Ordering::Relaxed) {
                bail!("interrupted");
            }
            let spec = CaptureSpec {
                snaplen,
                ..stage.spec.clone()
            };
            let (ns, n, b) = window(opts, &spec, stop, scratch, exe)
                .with_context(|| format!("{} at snaplen {snaplen:?}", stage.key))?;
            let mean = b as f64 / n as f64;
            let caplen = snaplen.map_or(mean, |s| mean.min(f64::from(s)));
            samples.add(&stage.key, caplen, ns);
            (frames, bytes) = (frames + n, bytes + b);
            log::info!(
                "calibrate: {} at {caplen:.0} B captured: {ns:.0} ns per packet ({n} frames)",
                stage.key
            );
        }
    }
    Ok((samples, bytes as f64 / frames.max(1) as f64))
}

/// Runs one capture for the window; returns its CPU ns per frame received, and the frames
/// and bytes received.
fn window(
    opts: &LiveOptions,
    spec: &CaptureSpec,
    stop: &AtomicBool,
    scratch: &Path,
    exe: &Path,
) -> anyhow::Result<(f64, u64, u64)> {
    let file = scratch.join("capture.pcap");
    let stats = scratch.join("stats.json");
    let launch = spec.tool.launch(spec, &opts.iface, 0, &file, &stats, exe)?;
    let mut cmd = Command::new(&launch.argv[0]);
    cmd.args(&launch.argv[1..]);
    let mut r = match &launch.pipe {
        None => Running::spawn(cmd, spec.tool.name())?,
        Some(pipe) => {
            let out = std::fs::File::create(&file)?;
            let mut second = Command::new(&pipe[0]);
            second.args(&pipe[1..]);
            Running::spawn_pipe(cmd, second, out, spec.tool.name())?
        }
    };
    r.wait_ready(spec.tool.ready_marker(), Duration::from_secs(30), stop)?;
    std::thread::sleep(Duration::from_millis(300));
    let (p0, b0) = received(&opts.iface)?;
    let t0 = CpuTime::of(&r)?;
    std::thread::sleep(opts.window);
    let t1 = CpuTime::of(&r)?;
    let (p1, b1) = received(&opts.iface)?;
    let fin = r.interrupt(Duration::from_secs(60))?;
    let _ = std::fs::remove_file(&file);
    if !fin.status.success() {
        bail!("{} failed ({})", spec.tool.name(), fin.status);
    }
    let n = p1.saturating_sub(p0);
    if n == 0 {
        bail!(
            "no frames arrived on {} in {:?}: send traffic to it while calibrating",
            opts.iface,
            opts.window
        );
    }
    Ok((t1.ns_since(&t0) / n as f64, n, b1.saturating_sub(b0)))
}

/// A tool's CPU time so far: the scheduler's nanoseconds over all its threads, and its
/// 10 ms ticks for where there are none (a light configuration runs a few ticks a window).
struct CpuTime {
    sched: Option<Sched>,
    ticks: u64,
}

impl CpuTime {
    fn of(r: &Running) -> anyhow::Result<CpuTime> {
        Ok(CpuTime {
            sched: r.schedstat(),
            ticks: r.cpu_ticks().context("cannot read the tool's CPU time")?,
        })
    }

    /// Nanoseconds from `before` to `self`.
    fn ns_since(&self, before: &CpuTime) -> f64 {
        match (&self.sched, &before.sched) {
            (Some(a), Some(b)) => a.since(b).run_ns as f64,
            _ => self.ticks.saturating_sub(before.ticks) as f64 / TICKS_PER_SECOND * 1e9,
        }
    }
}
