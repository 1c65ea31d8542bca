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
//! - CPU time is the difference of the scheduler's run time summed over every thread
//!   (`/proc/PID/task/*/schedstat`, nanoseconds; utime + stime in 10 ms ticks where there is
//!   none) between the ready line and the end of the drain, so start-up work (ring and pool allocation) is not
//!   charged per packet. On veth the kernel's receive work, including the copy into capture
//!   rings, runs on the *sender's* CPU (see `docs/design.md`): it shows up as a lower sender
//!   rate, not here — unless `--rps` moves it to the tool's CPU.
//! - Syscalls (points that ask for them): `perf stat -e raw_syscalls:sys_enter -p PIDS`,
//!   attached after the ready line and stopped at the end of the drain. perf counts in the
//!   kernel (a tracepoint counter, no ptrace), so unlike `strace -c` it does not slow a tool
//!   that makes one syscall per packet, and the loss measured in the same run stays valid.
//!   Context switches (voluntary and involuntary, all threads, `/proc/PID/task/*/status`)
//!   are read for every run over the same window.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use poolcap_lab::{netns_command, Lab};
use serde::{Deserialize, Serialize};

use super::child::{pinned, Running, Sched, TICKS_PER_SECOND};
use super::filecount::{count_file, Frames, StoreHeld};
use super::forward_peers::{out_tx, Sink, SinkGro};
use super::peer::{self, CaptureSpec, Counts, Generator, Sent, Tool, Traffic};
use super::sampler::{Sample, Sampler};
use super::stats::{spacing, Spacing, Spread};

/// The CPU the generator is pinned to.
pub const GEN_CPU: usize = 0;
/// The CPU the tool under test is pinned to.
pub const TOOL_CPU: usize = 1;
/// A run starts once at most this share of all CPUs is busy (waiting up to a minute): on a
/// shared 2-core machine, someone else's test run halves the sender's rate.
pub const QUIET_BELOW: f64 = 0.15;
/// Kernel buffer every capture tool gets by default (poolcap's default).
pub const BUFFER_KIB: u64 = 4096;
/// Nanoseconds per x-loop iteration over a 64-byte packet, measured on the tool's CPU: the
/// fastest of 15 timings of a million iterations, since anything else running on the CPU can
/// only make a timing slower.
pub fn ns_per_iteration() -> anyhow::Result<f64> {
    let t = std::thread::spawn(|| {
        core_affinity::set_for_current(core_affinity::CoreId { id: TOOL_CPU });
        let data = [0u8; 64];
        let x = 1_000_000u32;
        poolcap_engine::capture::worker::x_loop(&data, x);
        let times = (0..15).map(|_| {
            let t = std::time::Instant::now();
            poolcap_engine::capture::worker::x_loop(&data, x);
            t.elapsed().as_nanos() as f64 / f64::from(x)
        });
        Spread::of(times).map_or(f64::NAN, |s| s.min)
    });
    t.join()
        .map_err(|_| anyhow::anyhow!("calibration thread panicked"))
}

/// Who is measured at a point: a generator and, optionally, a capture tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Subject {
    /// Name in tables.
    pub name: String,
    /// Who sends.
    pub generator: Generator,
    /// Who captures (none: the generator alone is measured).
    pub capture: Option<CaptureSpec>,
    /// A poolcap run that stands for a peer (`--inplace`, the plain fanout reader).
    pub baseline: bool,
    /// poolcap subjects are compared with the peers of the same group (or of group ""):
    /// e.g. the same x-loop load.
    pub group: String,
}

impl Subject {
    /// The generator alone.
    pub fn sender(generator: Generator) -> Subject {
        Subject {
            name: generator.name().to_owned(),
            generator,
            capture: None,
            baseline: false,
            group: String::new(),
        }
    }

    /// A capture tool fed by `poolcap gen`.
    pub fn capture(spec: CaptureSpec) -> Subject {
        Subject {
            name: spec.tool.name().to_owned(),
            generator: Generator::Poolcap,
            capture: Some(spec),
            baseline: false,
            group: String::new(),
        }
    }

    /// A capture tool under another name.
    pub fn named(name: impl Into<String>, spec: CaptureSpec) -> Subject {
        Subject {
            name: name.into(),
            ..Subject::capture(spec)
        }
    }

    /// poolcap in a peer's role (the plain fanout reader).
    pub fn baseline(name: impl Into<String>, spec: CaptureSpec) -> Subject {
        Subject {
            baseline: true,
            ..Subject::named(name, spec)
        }
    }

    /// The same subject in comparison group `group`.
    pub fn in_group(self, group: impl Into<String>) -> Subject {
        Subject {
            group: group.into(),
            ..self
        }
    }

    /// Whether this subject is poolcap's (the one compared with the peers).
    pub fn is_poolcap(&self) -> bool {
        if self.baseline {
            return false;
        }
        match &self.capture {
            Some(c) => matches!(c.tool, Tool::Poolcap | Tool::Forward),
            None => self.generator == Generator::Poolcap,
        }
    }

    /// The first program this subject needs that is not installed.
    pub fn missing(&self) -> Option<String> {
        let mut programs = self.generator.programs().to_vec();
        programs.extend(self.capture.iter().flat_map(CaptureSpec::programs));
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
    /// Count the tool's syscalls with perf.
    pub syscalls: bool,
    /// rps_cpus of the probe for this point (on: the tool's CPU), overriding the suite's.
    pub rps: Option<bool>,
    /// Sample the tool's memory, open files and threads this often while it runs.
    pub sample_every: Option<Duration>,
}

impl Point {
    /// A point with `subjects` measured on `traffic`.
    pub fn new(id: impl Into<String>, traffic: Traffic, subjects: Vec<Subject>) -> Point {
        Point {
            id: id.into(),
            traffic,
            subjects,
            spacing: false,
            syscalls: false,
            rps: None,
            sample_every: None,
        }
    }
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
    /// Whether `perf` is there to count syscalls.
    pub perf: bool,
}

/// One run of one subject at one point: a line of `raw.jsonl`. A field added later is an
/// `Option` or `#[serde(default)]`, so that older files still read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// Suite name.
    pub suite: String,
    /// Point id.
    pub point: String,
    /// Subject name.
    pub subject: String,
    /// Whether the subject is poolcap's.
    pub poolcap: bool,
    /// Comparison group of the subject.
    #[serde(default)]
    pub group: String,
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
    /// Distinct frames found in the written file (see `filecount::Frames`).
    pub in_file: Option<u64>,
    /// Size of the written file (compressed, if it was written compressed).
    #[serde(default)]
    pub file_bytes: Option<u64>,
    /// The written file ended inside a record (only its whole packets are counted).
    #[serde(default)]
    pub file_truncated: bool,
    /// (offered - captured) / offered, with captured = `in_file` for writing runs.
    pub loss: Option<f64>,
    /// Tool CPU seconds between ready and drained: the scheduler's run time of all its
    /// threads ([`Sched`]), or, where there is none, utime + stime in ticks.
    pub cpu_s: Option<f64>,
    /// Tool CPU seconds from its start to drained.
    pub cpu_total_s: Option<f64>,
    /// Frame timing from the file.
    pub spacing: Option<Spacing>,
    /// Syscalls of the tool (all threads, all processes of a pipe) between ready and drained,
    /// counted by perf.
    pub syscalls: Option<u64>,
    /// Voluntary context switches over the same window.
    pub voluntary_switches: Option<u64>,
    /// Involuntary context switches over the same window.
    pub involuntary_switches: Option<u64>,
    /// The tool's scheduler statistics over the same window (all threads), and the window's
    /// wall seconds: the CPU share it got and how long it waited for the CPU.
    #[serde(default)]
    pub sched: Option<(Sched, f64)>,
    /// Seconds the tool's CPU was busy over the same window (its wall time less the CPU's
    /// idle time in `/proc/stat`, to a 10 ms tick): the tool and, with rps on, the kernel's
    /// receive work for the probe interface, which runs there in softirq.
    #[serde(default)]
    pub busy_s: Option<f64>,
    /// Wall seconds of the whole run.
    pub wall_s: f64,
    /// Share of all CPUs busy just before the run (others' work on a shared machine).
    pub busy_before: Option<f64>,
    /// The tool's memory, open files and threads over the run (points that sample them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<Sample>,
    /// Why the run failed.
    pub error: Option<String>,
}

impl Record {
    /// A record of `subject` at `point` with nothing measured yet (no traffic, no capture).
    pub fn blank(suite: &str, point: &str, subject: &str, poolcap: bool, run: usize) -> Record {
        Record {
            suite: suite.to_owned(),
            point: point.to_owned(),
            subject: subject.to_owned(),
            poolcap,
            group: String::new(),
            run,
            rps: false,
            traffic: Traffic::top(0, 0),
            generator: Generator::Poolcap,
            capture: None,
            sent: None,
            counts: None,
            in_file: None,
            file_bytes: None,
            file_truncated: false,
            loss: None,
            cpu_s: None,
            cpu_total_s: None,
            spacing: None,
            syscalls: None,
            voluntary_switches: None,
            involuntary_switches: None,
            sched: None,
            busy_s: None,
            wall_s: 0.0,
            busy_before: None,
            samples: Vec::new(),
            error: None,
        }
    }

    /// Packets the tool captured: what is in the file for writing runs, else its own count.
    pub fn captured(&self) -> Option<u64> {
        self.in_file.or(self.counts.as_ref().map(|c| c.captured))
    }
}

/// The peak resident memory of processes `pids` so far (`VmHWM` of `/proc/PID/status`,
/// summed over a pipe's processes), KiB: what a tool took at its worst, its kernel ring
/// included (the ring is mapped into it), the page cache not (`None`: a process is gone).
fn peak_memory_kib(pids: &[u32]) -> Option<u64> {
    pids.iter()
        .map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Sets the rps_cpus of every receive queue of the lab's probe interface: `on` sends the
/// kernel's receive work to the tool's CPU, off (mask 0) leaves it on the sender's.
pub fn set_rps(lab: &Lab, on: bool) -> anyhow::Result<()> {
    let mask = if on { 1u64 << TOOL_CPU } else { 0 };
    let script = format!(
        "for f in /sys/class/net/{}/queues/rx-*/rps_cpus; do echo {mask:x} > $f; done",
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

/// What poolcap's store directory holds after a run: its capture files counted as streams
/// (not through the store's own indexes), their distinct frames, and the bytes of its
/// indexes.
fn count_store(dir: &Path) -> anyhow::Result<StoreHeld> {
    let mut held = StoreHeld::default();
    let mut frames = Frames::default();
    let store = poolcap_engine::store::Store::open(dir)?;
    for f in store.files()? {
        let c = count_file(&f, None, false, &mut frames)
            .with_context(|| format!("cannot read {}", f.display()))?;
        held.packets += c.packets;
        held.bytes += c.bytes;
        held.truncated |= c.truncated;
        let idx = poolcap_engine::store::index::index_path(&f);
        held.index_bytes += std::fs::metadata(idx).map_or(0, |m| m.len());
    }
    held.distinct = frames.distinct();
    held.duplicates = frames.duplicates();
    Ok(held)
}

/// Removes `file` and the files a rotation wrote beside it (`capture.pcap0`, `capture.pcap1`,
/// ...), so a soak's rotated set does not stay on disk until the bench ends.
fn remove_with_rotated(file: &Path) {
    let _ = std::fs::remove_file(file);
    let (Some(dir), Some(name)) = (file.parent(), file.file_name().and_then(|n| n.to_str())) else {
        return;
    };
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let rotated = e
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix(name))
            .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|c| c.is_ascii_digit()));
        if rotated {
            let _ = std::fs::remove_file(e.path());
        }
    }
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
        // rps_cpus first: the quiet wait then also covers what changing it stirs up.
        let rps_set = point.rps.map_or(Ok(()), |on| set_rps(self.lab, on));
        let busy_before = self.wait_quiet();
        let started = Instant::now();
        let mut rec = Record::blank(suite, &point.id, &subject.name, subject.is_poolcap(), run);
        rec.group = subject.group.clone();
        rec.rps = point.rps.unwrap_or(self.rps);
        rec.traffic = point.traffic.clone();
        rec.generator = subject.generator;
        rec.capture = subject.capture.clone();
        rec.busy_before = busy_before;
        let file = self.scratch.join("capture.pcap");
        if let Err(e) = rps_set.and_then(|()| self.measure(point, subject, &file, &mut rec)) {
            rec.error = Some(format!("{e:#}"));
        }
        remove_with_rotated(&file);
        let _ = std::fs::remove_dir_all(peer::store_dir(&file));
        rec.wall_s = started.elapsed().as_secs_f64();
        rec
    }

    fn measure(
        &self,
        point: &Point,
        subject: &Subject,
        file: &Path,
        rec: &mut Record,
    ) -> anyhow::Result<()> {
        let stats = self.scratch.join("poolcap-stats.json");
        let _ = std::fs::remove_file(&stats);
        let _ = std::fs::remove_file(file);
        let probe = &self.lab.probe;
        let forwards = subject.capture.as_ref().is_some_and(|c| c.tool.forwards());
        let sink = if forwards {
            Some(Sink::start(
                self.lab,
                &self.exe,
                &self.scratch,
                GEN_CPU,
                &self.stop,
            )?)
        } else {
            None
        };
        let _gro = match &subject.capture {
            Some(c) if c.tool == Tool::XdpRedirect => Some(SinkGro::on(self.lab)?),
            _ => None,
        };
        let tool = match &subject.capture {
            Some(c) => {
                let launch = c
                    .tool
                    .launch(c, &probe.iface, TOOL_CPU, file, &stats, &self.exe)?;
                let cpus = c.taskset.clone().unwrap_or_else(|| TOOL_CPU.to_string());
                let first = pinned(&probe.netns, &cpus, &launch.argv);
                let mut r = match &launch.pipe {
                    None => Running::spawn(first, c.tool.name())?,
                    Some(pipe) => {
                        let out = std::fs::File::create(file)
                            .with_context(|| format!("cannot create {}", file.display()))?;
                        let second = pinned(&probe.netns, &cpus, pipe);
                        Running::spawn_pipe(first, second, out, c.tool.name())?
                    }
                };
                r.wait_ready(c.tool.ready_marker(), Duration::from_secs(30), &self.stop)?;
                std::thread::sleep(self.settle);
                if c.stopped {
                    r.suspend()?;
                }
                Some((c, r))
            }
            None => None,
        };
        let perf = match (&tool, point.syscalls && self.perf) {
            (Some((_, r)), true) => Some(self.start_perf(&r.pids())?),
            _ => None,
        };
        let sampler = match (&tool, point.sample_every) {
            (Some((_, r)), Some(every)) => Some(Sampler::start(r.pid(), every)),
            _ => None,
        };
        let out_before = if forwards {
            Some(out_tx(self.lab)?)
        } else {
            None
        };
        let cpu_before = tool.as_ref().and_then(|(_, r)| r.cpu_ticks());
        let sw_before = tool.as_ref().and_then(|(_, r)| r.switches());
        let sched_before = tool.as_ref().and_then(|(_, r)| r.schedstat());
        let idle_before = super::child::idle_ticks(TOOL_CPU);
        let window = Instant::now();

        let gen = subject.generator;
        let cfg = self
            .scratch
            .join(format!("trafgen-{}.cfg", point.traffic.size));
        if gen == Generator::Trafgen {
            let mac =
                poolcap_gen::frame::parse_mac(&self.lab.sender.mac).map_err(anyhow::Error::msg)?;
            let frame = peer::lab_frame(mac, point.traffic.size);
            std::fs::write(&cfg, peer::trafgen_config(&frame))?;
        }
        let sender = &self.lab.sender;
        let argv = gen.argv(&point.traffic, &sender.iface, GEN_CPU, &cfg, &self.exe)?;
        let running = Running::spawn(
            pinned(&sender.netns, &GEN_CPU.to_string(), &argv),
            gen.name(),
        )?;
        let done = running.wait(point.traffic.timeout(), &self.stop)?;
        if self.stop.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        peer::check_exit(gen.name(), &done)?;
        let sent = gen.parse(&done.text)?;
        let offered = sent.frames;
        rec.sent = Some(sent);

        let Some((spec, tool)) = tool else {
            return Ok(());
        };
        if spec.stopped {
            tool.resume()?;
        }
        std::thread::sleep(self.drain);
        rec.samples = sampler.map(Sampler::finish).unwrap_or_default();
        let cpu_after = tool.cpu_ticks();
        let sw_after = tool.switches();
        if let (Some(a), Some(b)) = (sched_before, tool.schedstat()) {
            rec.sched = Some((b.since(&a), window.elapsed().as_secs_f64()));
        }
        if let (Some(a), Some(b)) = (idle_before, super::child::idle_ticks(TOOL_CPU)) {
            let idle = b.saturating_sub(a) as f64 / TICKS_PER_SECOND;
            rec.busy_s = Some((window.elapsed().as_secs_f64() - idle).max(0.0));
        }
        if let Some(p) = perf {
            let f = p.interrupt(Duration::from_secs(10))?;
            let counts = peer::parse_perf_stat(&f.text);
            rec.syscalls = counts.get("raw_syscalls:sys_enter").copied();
            if rec.syscalls.is_none() {
                bail!("perf counted no syscalls: {}", f.text.trim());
            }
        }
        let peak_kib = peak_memory_kib(&tool.pids());
        // A compressor may still hold tens of MB to compress at a slow level (zstd -19
        // compresses about 2 MB/s here): give it time to finish rather than lose the file.
        let finish = if spec.compress.is_some() { 300 } else { 60 };
        let fin = spec
            .tool
            .stop(tool, Duration::from_secs(finish), &self.stop)?;
        rec.cpu_total_s = cpu_after.map(|t| t as f64 / TICKS_PER_SECOND);
        // The scheduler's nanoseconds where it has them: ticks of 10 ms made ratios of a
        // tool that runs 0.1 s per point move by 10% on their own.
        rec.cpu_s = match (&rec.sched, cpu_before, cpu_after) {
            (Some((s, _)), _, _) => Some(s.run_ns as f64 / 1e9),
            (None, Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / TICKS_PER_SECOND),
            _ => None,
        };
        if let (Some(a), Some(b)) = (sw_before, sw_after) {
            rec.voluntary_switches = Some(b.0.saturating_sub(a.0));
            rec.involuntary_switches = Some(b.1.saturating_sub(a.1));
        }
        rec.counts = Some(spec.tool.parse(&fin.text, &stats)?);
        if let (Some(kib), Some(c)) = (peak_kib, rec.counts.as_mut()) {
            c.extra.insert("peak_rss_kib".into(), kib as f64);
        }
        if let (Some(sink), Some(before), Some(counts)) = (sink, out_before, rec.counts.as_mut()) {
            let out = out_tx(self.lab)?.saturating_sub(before);
            counts.extra.insert("out_tx".into(), out as f64);
            rec.in_file = Some(sink.finish(&mut counts.extra)?.unique);
        }
        // Frames a file holds more than once: captured once, and the run a failure.
        let mut duplicates = 0;
        if let (true, Some(_)) = (spec.write, spec.store) {
            let dir = peer::store_dir(file);
            let held = if spec.tool == Tool::Stenotype {
                super::stenotype::count_dir(&dir)?
            } else {
                count_store(&dir)?
            };
            rec.in_file = Some(held.distinct);
            duplicates = held.duplicates;
            rec.file_bytes = Some(held.bytes);
            rec.file_truncated = held.truncated;
            if let Some(c) = rec.counts.as_mut() {
                c.extra
                    .insert("index_bytes".into(), held.index_bytes as f64);
            }
        } else if spec.write && spec.rotate.is_none() {
            // A rotated set has no one file to count (and -W overwrote its oldest files).
            let mut frames = Frames::default();
            let f = count_file(file, spec.compress.as_deref(), point.spacing, &mut frames)
                .with_context(|| format!("cannot read {}'s file", spec.tool.name()))?;
            rec.in_file = Some(frames.distinct());
            duplicates = frames.duplicates();
            rec.file_bytes = Some(f.bytes);
            rec.file_truncated = f.truncated;
            if let (true, Some(rate)) = (point.spacing, point.traffic.rate) {
                rec.spacing = spacing(&f.ts_ns, 1e9 / rate as f64);
            }
        }
        if let (Some(c), true) = (rec.captured(), offered > 0) {
            rec.loss = Some((offered as f64 - c as f64) / offered as f64);
        }
        if duplicates > 0 {
            rec.error = Some(format!(
                "{} wrote {duplicates} frames more than once",
                spec.tool.name()
            ));
        }
        Ok(())
    }

    /// Starts `perf stat` counting the syscalls of `pids` (on the generator's CPU, where it
    /// only sleeps) and gives it time to attach.
    fn start_perf(&self, pids: &[u32]) -> anyhow::Result<Running> {
        let list: Vec<String> = pids.iter().map(u32::to_string).collect();
        let mut cmd = Command::new("taskset");
        cmd.args(["-c", &GEN_CPU.to_string(), "perf", "stat", "-x,"])
            .args(["-e", "raw_syscalls:sys_enter", "-p", &list.join(",")]);
        let r = Running::spawn(cmd, "perf stat")?;
        std::thread::sleep(Duration::from_millis(200));
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_memory_sums_a_pipes_processes_and_is_none_once_one_is_gone() {
        let me = std::process::id();
        // Touch 64 MiB so the peak is at least that.
        let v = vec![1u8; 64 << 20];
        let one = peak_memory_kib(&[me]).unwrap();
        assert!(
            one >= 64 << 10,
            "{one} KiB, {}",
            v.iter().map(|&b| b as u64).sum::<u64>()
        );
        assert!(peak_memory_kib(&[me, me]).unwrap() >= 2 * one);
        assert_eq!(peak_memory_kib(&[me, u32::MAX]), None);
    }
}
