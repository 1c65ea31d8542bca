//! One measured run: start the tool under test in the probe namespace pinned to the tool CPU,
//! wait for its ready line, send from the sender namespace pinned to the generator CPU, let the
//! pipeline drain, read the tool's CPU time, stop it with SIGINT and collect its counts (and,
//! for file-writing runs, count what is really in the file).
//!
//! Timing choices, measured on the lab:
//! - *settle* after the ready line: dumpcap prints `Capturing on` a few milliseconds before its
//!   socket exists;
//! - *drain* before stopping: libpcap (tcpdump, dumpcap) hands a partly filled TPACKET_V3
//!   block to the application only when its 1 s timeout expires, and stops without reading it,
//!   so stopping 300 ms after the sender finished under-counts tcpdump by up to a block.
//! - CPU time is the difference of `/proc/PID/stat` (utime + stime, all threads) between the
//!   ready line and the end of the drain, so start-up work (ring and pool allocation) is not
//!   charged per packet. On veth the kernel's receive work, including the copy into capture
//!   rings, runs on the *sender's* CPU (see `shared/design.md`): it shows up as a lower sender
//!   rate, not here — unless `--rps` moves it to the tool's CPU.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use poolcap_lab::{netns_command, Lab};
use serde::Serialize;

use super::child::{Finished, Running, TICKS_PER_SECOND};
use super::peer::{self, CaptureSpec, Counts, Generator, Sent, Tool, Traffic};
use super::stats::{spacing, Spacing};

/// The CPU the generator is pinned to.
pub const GEN_CPU: usize = 0;
/// The CPU the tool under test is pinned to.
pub const TOOL_CPU: usize = 1;

/// Who is measured at a point: a generator and, optionally, a capture tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Subject {
    /// Name in tables.
    pub name: String,
    /// Who sends.
    pub generator: Generator,
    /// Who captures (none: the generator alone is measured).
    pub capture: Option<CaptureSpec>,
}

impl Subject {
    /// The generator alone.
    pub fn sender(generator: Generator) -> Subject {
        Subject {
            name: generator.name().to_owned(),
            generator,
            capture: None,
        }
    }

    /// A capture tool fed by `poolcap gen`.
    pub fn capture(spec: CaptureSpec) -> Subject {
        Subject {
            name: spec.tool.name().to_owned(),
            generator: Generator::Poolcap,
            capture: Some(spec),
        }
    }

    /// Whether this subject is poolcap's own (the one compared with the peers).
    pub fn is_poolcap(&self) -> bool {
        match &self.capture {
            Some(c) => c.tool == Tool::Poolcap,
            None => self.generator == Generator::Poolcap,
        }
    }

    /// The first program this subject needs that is not installed.
    pub fn missing(&self) -> Option<String> {
        let mut programs = self.generator.programs().to_vec();
        programs.extend(self.capture.iter().flat_map(|c| c.tool.programs()));
        peer::missing(&programs)
    }
}

/// One configuration measured for several subjects.
#[derive(Debug, Clone)]
pub struct Point {
    /// Short label, unique within a suite: `64B top write`.
    pub id: String,
    /// What is sent.
    pub traffic: Traffic,
    /// Who is measured, in the order runs interleave.
    pub subjects: Vec<Subject>,
    /// Compute frame spacing from the written file's timestamps.
    pub spacing: bool,
}

/// Everything runs share.
pub struct Bench<'a> {
    /// The lab.
    pub lab: &'a Lab,
    /// This executable (for `poolcap capture` and `poolcap gen`).
    pub exe: PathBuf,
    /// Where capture files, stats and configs go (not tmpfs).
    pub scratch: PathBuf,
    /// Set by SIGINT/SIGTERM.
    pub stop: Arc<AtomicBool>,
    /// Whether the probe's rps_cpus sends receive work to the tool's CPU.
    pub rps: bool,
    /// Pause after the ready line.
    pub settle: Duration,
    /// Pause between the end of sending and stopping the tool.
    pub drain: Duration,
    /// Before each run, wait (up to `quiet_wait`) until at most this share of all CPUs is busy.
    pub quiet_below: f64,
    /// Longest wait for a quiet machine.
    pub quiet_wait: Duration,
}

/// One run of one subject at one point: a line of `raw.jsonl`.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// Suite name.
    pub suite: String,
    /// Point id.
    pub point: String,
    /// Subject name.
    pub subject: String,
    /// Whether the subject is poolcap's.
    pub poolcap: bool,
    /// Run number, from 1.
    pub run: usize,
    /// rps_cpus of the probe set to the tool's CPU.
    pub rps: bool,
    /// What was asked to be sent.
    pub traffic: Traffic,
    /// The generator.
    pub generator: Generator,
    /// The capture tool's settings.
    pub capture: Option<CaptureSpec>,
    /// What the generator reports.
    pub sent: Option<Sent>,
    /// What the capture tool reports.
    pub counts: Option<Counts>,
    /// Packets found in the written file.
    pub in_file: Option<u64>,
    /// (offered - captured) / offered, with captured = `in_file` for writing runs.
    pub loss: Option<f64>,
    /// Tool CPU seconds between ready and drained.
    pub cpu_s: Option<f64>,
    /// Tool CPU seconds from its start to drained.
    pub cpu_total_s: Option<f64>,
    /// Frame timing from the file.
    pub spacing: Option<Spacing>,
    /// Wall seconds of the whole run.
    pub wall_s: f64,
    /// Share of all CPUs busy just before the run (others' work on a shared machine).
    pub busy_before: Option<f64>,
    /// Why the run failed.
    pub error: Option<String>,
}

impl Record {
    /// Packets the tool captured: what is in the file for writing runs, else its own count.
    pub fn captured(&self) -> Option<u64> {
        self.in_file.or(self.counts.as_ref().map(|c| c.captured))
    }
}

/// `ip netns exec NS taskset -c CPU PROGRAM ARGS...`.
fn pinned(netns: &str, cpu: usize, argv: &[String]) -> Command {
    let mut cmd = netns_command(netns, "taskset");
    cmd.arg("-c").arg(cpu.to_string()).args(argv);
    cmd
}

/// Busy and total jiffies of all CPUs (`/proc/stat`; idle and iowait count as not busy).
fn cpu_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let v: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    Some((total - v.get(3)? - v.get(4)?, total))
}

/// Share of all CPUs busy over `window`.
fn busy_share(window: Duration) -> Option<f64> {
    let (b0, t0) = cpu_jiffies()?;
    std::thread::sleep(window);
    let (b1, t1) = cpu_jiffies()?;
    (t1 > t0).then(|| (b1 - b0) as f64 / (t1 - t0) as f64)
}

fn check_exit(name: &str, f: &Finished) -> anyhow::Result<()> {
    if !f.status.success() {
        let tail: Vec<&str> = f.text.lines().filter(|l| !peer::is_noise(l)).collect();
        let tail = &tail[tail.len().saturating_sub(4)..];
        bail!("{name} failed ({}): {}", f.status, tail.join(" | "));
    }
    Ok(())
}

impl Bench<'_> {
    /// Waits until others leave the machine quiet enough (or `quiet_wait` passed); returns the
    /// busy share last measured.
    fn wait_quiet(&self) -> Option<f64> {
        let deadline = Instant::now() + self.quiet_wait;
        loop {
            let busy = busy_share(Duration::from_millis(300));
            if busy.is_none_or(|b| b <= self.quiet_below)
                || Instant::now() >= deadline
                || self.stop.load(Ordering::Relaxed)
            {
                return busy;
            }
        }
    }

    /// Runs `subject` once at `point`; failures are recorded in the result, not returned.
    pub fn run_once(&self, suite: &str, point: &Point, subject: &Subject, run: usize) -> Record {
        let busy_before = self.wait_quiet();
        let started = Instant::now();
        let mut rec = Record {
            suite: suite.to_owned(),
            point: point.id.clone(),
            subject: subject.name.clone(),
            poolcap: subject.is_poolcap(),
            run,
            rps: self.rps,
            traffic: point.traffic.clone(),
            generator: subject.generator,
            capture: subject.capture.clone(),
            sent: None,
            counts: None,
            in_file: None,
            loss: None,
            cpu_s: None,
            cpu_total_s: None,
            spacing: None,
            wall_s: 0.0,
            busy_before,
            error: None,
        };
        let file = self.scratch.join("capture.pcap");
        if let Err(e) = self.measure(point, subject, &file, &mut rec) {
            rec.error = Some(format!("{e:#}"));
        }
        let _ = std::fs::remove_file(&file);
        rec.wall_s = started.elapsed().as_secs_f64();
        rec
    }

    fn measure(
        &self,
        point: &Point,
        subject: &Subject,
        file: &std::path::Path,
        rec: &mut Record,
    ) -> anyhow::Result<()> {
        let stats = self.scratch.join("poolcap-stats.json");
        let _ = std::fs::remove_file(&stats);
        let _ = std::fs::remove_file(file);
        let probe = &self.lab.probe;
        let tool = match &subject.capture {
            Some(c) => {
                let argv = c
                    .tool
                    .argv(c, &probe.iface, TOOL_CPU, file, &stats, &self.exe);
                let mut r = Running::spawn(pinned(&probe.netns, TOOL_CPU, &argv), c.tool.name())?;
                r.wait_ready(c.tool.ready_marker(), Duration::from_secs(30), &self.stop)?;
                std::thread::sleep(self.settle);
                Some((c, r))
            }
            None => None,
        };
        let cpu_before = tool.as_ref().and_then(|(_, r)| r.cpu_ticks());

        let gen = subject.generator;
        let cfg = self
            .scratch
            .join(format!("trafgen-{}.cfg", point.traffic.size));
        if gen == Generator::Trafgen {
            let mac =
                crate::cli::gen::parse_mac(&self.lab.sender.mac).map_err(anyhow::Error::msg)?;
            let frame = peer::lab_frame(mac, point.traffic.size);
            std::fs::write(&cfg, peer::trafgen_config(&frame))?;
        }
        let sender = &self.lab.sender;
        let argv = gen.argv(&point.traffic, &sender.iface, GEN_CPU, &cfg, &self.exe)?;
        let running = Running::spawn(pinned(&sender.netns, GEN_CPU, &argv), gen.name())?;
        let done = running.wait(point.traffic.timeout(), &self.stop)?;
        if self.stop.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        check_exit(gen.name(), &done)?;
        let sent = gen.parse(&done.text)?;
        let offered = sent.frames;
        rec.sent = Some(sent);

        let Some((spec, tool)) = tool else {
            return Ok(());
        };
        std::thread::sleep(self.drain);
        let cpu_after = tool.cpu_ticks();
        let fin = tool.interrupt(Duration::from_secs(60))?;
        check_exit(spec.tool.name(), &fin)?;
        rec.cpu_total_s = cpu_after.map(|t| t as f64 / TICKS_PER_SECOND);
        if let (Some(a), Some(b)) = (cpu_before, cpu_after) {
            rec.cpu_s = Some(b.saturating_sub(a) as f64 / TICKS_PER_SECOND);
        }
        rec.counts = Some(spec.tool.parse(&fin.text, &stats)?);
        if spec.write {
            let f = poolcap_format::read_file(file)
                .with_context(|| format!("cannot read {}'s file", spec.tool.name()))?;
            rec.in_file = Some(f.packets.len() as u64);
            if let (true, Some(rate)) = (point.spacing, point.traffic.rate) {
                let ts: Vec<u64> = f.packets.iter().map(|p| p.ts_ns).collect();
                rec.spacing = spacing(&ts, 1e9 / rate as f64);
            }
        }
        if let (Some(c), true) = (rec.captured(), offered > 0) {
            rec.loss = Some((offered as f64 - c as f64) / offered as f64);
        }
        Ok(())
    }
}
