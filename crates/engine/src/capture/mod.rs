//! The capture engine: WireCAP's pools in basic B-(M,R) and advanced A-(M,R,T) modes, with
//! congestion control, on AF_PACKET TPACKET_V3 or AF_XDP (see `docs/design.md`).
//!
//! ```text
//! rx queue q ─► fanout socket + TPACKET_V3 ring ─► capture thread q ─► capture queue q ─► worker(s)
//!                                                      ▲                                   │
//!                                  pool q (R chunks) ◄─┴── recycle ◄── file writer ◄───────┘
//! ```
//! One fanout socket, capture thread and pool per receive queue; `W` workers running the
//! x-loop load; an optional file writer that merges the queues in timestamp order. Every
//! packet ends in exactly one counter of [`account`].
//!
//! The shape: a capture thread ([`queue`]) is a thin shell around [`decide::Loop`], the capture
//! decisions as a value with no clock reads or syscalls, which live with the offload policies
//! and the pool geometry in the `poolcap-core` crate; `poolcap sim` turns the shell itself in
//! virtual time (`sim`, behind the `sim` feature); which data path runs is one
//! [`pipeline::Pipeline`] chosen at start (count in the kernel ring, straight to a sink, or
//! through workers); sinks (the file writer, the forwarder) are behind one [`sink::Sink`]
//! trait.
//!
//! Lifecycle: [`Engine::start`] sets everything up and returns once every queue is ready
//! (the caller then prints `listening on`); [`Engine::run`] supervises until the stop flag,
//! the duration or the packet count ends the capture, then drains: capture threads first
//! (they empty the kernel rings up to the stop's cut, see [`end`]), then workers, then the
//! writer, so nothing captured is lost. The supervisor also watches the interface
//! ([`link`]): a link that goes down is reported and waited for, a deleted one ends the
//! capture with an error.

pub mod account;
pub mod af_packet;
pub mod af_xdp;
pub mod backend;
pub mod bpf;
pub mod clock;
pub mod compress;
pub mod config;
pub use poolcap_core::decide;
pub mod doorbell;
pub mod end;
pub mod error;
pub mod file;
pub mod filter;
pub mod forward;
mod forward_out;
pub mod forward_xdp;
pub mod link;
pub mod linktype;
#[cfg(any(test, feature = "sim"))]
pub mod mem;
pub mod needs;
pub mod nic;
pub mod pipeline;
pub use poolcap_core::policy;
pub mod pool;
pub mod progress;
pub mod queue;
pub mod rotate;
pub mod savefile;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod sink;
pub mod source;
mod start;
#[cfg(test)]
mod testsink;
mod threads;
pub mod wakeup;
pub mod worker;
pub mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use poolcap_format::LinkType;
use poolcap_sys::process::{cpu_time, CpuTime, Who};
use poolcap_sys::socket::ifindex;
use poolcap_sys::SysError;
use serde::{Deserialize, Serialize};

pub use self::config::{CaptureConfig, Input, Output};
pub use self::error::CaptureError;

use self::account::{QueueCounters, QueueStats};
use self::backend::Opened;
use self::end::Budget;
use self::link::{LinkEvent, LinkWatch};
use self::pipeline::Pipeline;
use self::policy::group_of;
use self::pool::{Pool, PoolSize};
use self::sink::{Sink, SinkSpec};
use self::start::{
    check_memory, open_input, open_sink, retire_tuning, writes_only, InputPlan, Plan, Started,
};
use self::threads::Threads;
use self::wakeup::Wakeup;
use poolcap_sys::netdev;

/// The longest the supervisor sleeps ([`wakeup`]): how late it sees the interface go down or
/// away, a write error, or a stop raised without ringing (a stop signal or the end of a
/// capture thread rings at once).
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// The outcome of a capture.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaptureReport {
    /// Interface.
    pub interface: String,
    /// Packets handed to the pipeline (all queues).
    pub captured: u64,
    /// Their wire bytes.
    pub bytes: u64,
    /// Dropped by the kernel (ring full).
    pub dropped_kernel: u64,
    /// Dropped by the pools (no free chunk).
    pub dropped_pool: u64,
    /// Dropped by the interface before the kernel ring (its `rx_dropped`,
    /// `rx_missed_errors` and `rx_fifo_errors` over the capture; see [`nic`]): the
    /// interface's, not only this capture's, and outside the accounting equation.
    #[serde(default)]
    pub dropped_nic: u64,
    /// Rejected by a filter: user-space stages plus `filtered_kernel`.
    pub filtered: u64,
    /// Rejected by the in-kernel filter: frames the interface counted that no socket saw.
    pub filtered_kernel: u64,
    /// Received by the kernel after the stop's cut or past `-c`, and left there (neither
    /// captured nor dropped).
    pub not_taken: u64,
    /// Kernel ring freezes.
    pub freezes: u64,
    /// Packets written to the output file.
    pub written: u64,
    /// Packets captured but not written (after a write error or past `-c`).
    pub not_written: u64,
    /// The first write error, naming the file (already printed on stderr when it happened).
    pub write_error: Option<String>,
    /// `-G` with `-W`: the last file was closed and the capture stopped.
    pub file_limit_reached: bool,
    /// `-z` commands that failed.
    pub post_rotate_failed: usize,
    /// The error that ended a capture thread: a kernel call's, or that of a file read
    /// (`-r`) that goes bad part-way.
    pub capture_error: Option<String>,
    /// Wall seconds of capture.
    pub seconds: f64,
    /// CPU seconds of this process (user, system).
    pub cpu_user: f64,
    /// CPU seconds in the kernel.
    pub cpu_system: f64,
    /// Wait syscalls per captured packet.
    pub syscalls_per_packet: f64,
    /// Per-queue counters.
    pub queues: Vec<QueueStats>,
    /// Per-queue forwarding accounting (`poolcap forward` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward: Option<Vec<forward::ForwardStats>>,
}

/// A capture that is set up and running.
pub struct Engine {
    iface: String,
    report: String,
    backend: &'static str,
    linktype: LinkType,
    // Keeps the XDP program attached until the engine is gone.
    _xdp: Option<poolcap_sys::xdp::XdpRedirect>,
    // Keeps the interface promiscuous (AF_XDP) until the engine is gone.
    _promiscuous: Option<poolcap_sys::socket::PacketSocket>,
    nic: Option<nic::NicDrops>,
    stats_request: Option<Arc<AtomicBool>>,
    pools: Arc<Vec<Arc<Pool>>>,
    counters: Arc<Vec<Arc<QueueCounters>>>,
    threads: Threads,
    /// What the supervisor sleeps on between looks.
    wakeup: Arc<Wakeup>,
    /// The writer's first error, printed by the supervisor as soon as it is set.
    write_failed: Arc<OnceLock<String>>,
    /// What the file writer has written so far (zero without `-w`).
    written: Arc<writer::Written>,
    forward_counters: Option<forward::AllForwardCounters>,
    /// How a forwarder transmits (`poolcap forward` only).
    tx_path: Option<String>,
    /// The capture file created and how it is written (for the startup report).
    output: Option<(PathBuf, savefile::WritePath)>,
    budget: Option<Arc<Budget>>,
    link: Option<LinkWatch>,
    if_before: Option<u64>,
    /// Capture sockets ignore outgoing frames (forwarding).
    inbound_only: bool,
    duration: Option<Duration>,
    status_every: Option<Duration>,
    started: Instant,
    cpu_start: CpuTime,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("iface", &self.iface)
            .finish()
    }
}

/// The interface index of a live capture (None otherwise) and the number of queues.
fn resolve_input(cfg: &CaptureConfig, input: &Input) -> Result<(Option<u32>, usize), CaptureError> {
    Ok(match input {
        Input::Live if cfg.iface == linktype::ANY => (Some(0), cfg.queues.max(1)),
        Input::Live => {
            let idx =
                ifindex(&cfg.iface).map_err(|_| CaptureError::NoInterface(cfg.iface.clone()))?;
            (Some(idx), cfg.queues.max(1))
        }
        Input::File { .. } => (None, 1),
        Input::Sources(s) => (None, s.len().max(1)),
    })
}

/// Frames the interface has seen in both directions, or only received ones when capture
/// sockets ignore outgoing frames (forwarding), for the in-kernel filter's count.
fn if_frames(iface: &str, inbound_only: bool) -> Option<u64> {
    let tx = if inbound_only {
        0
    } else {
        netdev::counter(iface, "tx_packets")?
    };
    Some(netdev::counter(iface, "rx_packets")? + tx)
}

/// Everything a capture opened, before its threads start (see [`Engine::launch`]).
struct Ready {
    cfg: CaptureConfig,
    idx: Option<u32>,
    q: usize,
    opened: Opened,
    pipeline: Pipeline<Box<dyn Sink>>,
    forward_counters: Option<forward::AllForwardCounters>,
    tx_path: Option<String>,
    /// The capture file the sink created, if any (`after_open` hands it to `-Z`'s user),
    /// and how it is written.
    output: Option<(PathBuf, savefile::WritePath)>,
    if_before: Option<u64>,
    inbound_only: bool,
    groups: Vec<Vec<usize>>,
    seal_after: Duration,
}

/// An engine with every socket, ring and file open and no thread started
/// ([`Engine::open_forward`]).
pub struct Opening(Ready);

impl Opening {
    /// The capture file it created, if any.
    pub fn output(&self) -> Option<&Path> {
        self.0.output.as_ref().map(|(p, _)| p.as_path())
    }

    /// Starts its threads.
    pub fn start(self, stop: Arc<AtomicBool>) -> Result<Engine, CaptureError> {
        Engine::spawn(self.0, stop)
    }
}

/// When the status line was last printed, and the totals then.
struct Status {
    last: Instant,
    prev: QueueStats,
}

/// The supervisor's looks at the interface, one each time it wakes (at least every
/// [`LOOK_EVERY`]): a look costs a few syscalls.
struct Links {
    link: Option<LinkWatch>,
}

impl Links {
    /// Starts watching; says so if the link is down already.
    fn new(mut link: Option<LinkWatch>, iface: &str) -> Self {
        if link.as_mut().and_then(|l| l.observe(l.look())) == Some(LinkEvent::Down) {
            log::warn!("warning: {iface} is down; packets are captured once it is up");
        }
        Self { link }
    }

    /// Looks, reports a change; returns the error that ends the capture when the interface
    /// is gone.
    fn look(&mut self, iface: &str) -> Option<CaptureError> {
        let l = self.link.as_mut()?;
        match l.observe(l.look())? {
            LinkEvent::Down => {
                log::warn!("{iface} went down; capture resumes when it is back up");
            }
            LinkEvent::Up => log::info!("{iface} is up again; capture resumed"),
            LinkEvent::Gone => return Some(CaptureError::LinkGone(iface.to_string())),
        }
        None
    }
}

impl Engine {
    /// Sets up rings, pools and threads; returns once every queue is capturing.
    /// `after_open` runs once every socket, ring, XDP program and the output are open and
    /// before any thread starts: the moment to give up privileges (`-Z`). It is given the
    /// output file the engine created, if any.
    pub fn start(
        mut cfg: CaptureConfig,
        stop: Arc<AtomicBool>,
        after_open: impl FnOnce(Option<&Path>) -> Result<(), SysError>,
    ) -> Result<Self, CaptureError> {
        let sink = cfg.output.take().map(|(o, f)| SinkSpec::File(o, f));
        Self::launch(cfg, sink, stop, after_open)
    }

    /// Opens a capture whose sink is a forwarder: processed chunks leave through `fwd`'s
    /// interface (see [`forward`]); `cfg.output`, if set, gets what was forwarded. Returns it
    /// unstarted, so a caller with several engines (both directions of a forward) drops
    /// privileges once all are open and before any thread runs.
    pub fn open_forward(
        mut cfg: CaptureConfig,
        fwd: forward::ForwardSetup,
    ) -> Result<Opening, CaptureError> {
        let write = cfg.output.take();
        let sink = SinkSpec::Forward { setup: fwd, write };
        Self::open(cfg, Some(sink)).map(Opening)
    }

    fn launch(
        cfg: CaptureConfig,
        sink: Option<SinkSpec>,
        stop: Arc<AtomicBool>,
        after_open: impl FnOnce(Option<&Path>) -> Result<(), SysError>,
    ) -> Result<Self, CaptureError> {
        let ready = Self::open(cfg, sink)?;
        after_open(ready.output.as_ref().map(|(p, _)| p.as_path()))?;
        Self::spawn(ready, stop)
    }

    /// Chooses the pipeline, opens the input, then the sink.
    fn open(mut cfg: CaptureConfig, sink: Option<SinkSpec>) -> Result<Ready, CaptureError> {
        let input = std::mem::replace(&mut cfg.input, Input::Live);
        let (idx, q) = resolve_input(&cfg, &input)?;
        let records = sink.as_ref().and_then(SinkSpec::records);
        check_memory(&cfg, q, records, idx.is_some())?;
        let pipeline = Pipeline::choose(cfg.in_place, cfg.load, cfg.probe.clone(), sink);
        let inbound_only = pipeline.sink().is_some_and(SinkSpec::forwards);
        let groups: Vec<Vec<usize>> = (0..q).map(|i| group_of(&cfg.buddy_groups, i)).collect();
        let (ring, seal_after) = retire_tuning(&cfg, q, &pipeline);
        let capacity: Vec<usize> = groups.iter().map(|g| g.len() * cfg.pool.chunks).collect();
        let inputs = InputPlan {
            idx,
            q,
            ring,
            capacity: &capacity,
            records,
            inbound_only,
            writes_only: writes_only(&pipeline),
        };
        let opened = open_input(&cfg, input, &inputs)?;
        let if_before = opened
            .kernel_filter
            .then(|| if_frames(&cfg.iface, inbound_only))
            .flatten();
        // Create the file only now that the filter compiled and the sockets are open, so a
        // bad argument never truncates an existing file; write its header before capturing.
        let (mut forward_counters, mut tx_path, mut output) = (None, None, None);
        let pipeline = pipeline.try_map_sink(|spec| {
            let opened_sink = open_sink(&cfg, q, spec, &opened)?;
            forward_counters = opened_sink.forward_counters;
            tx_path = opened_sink.tx_path;
            output = opened_sink.output;
            Ok::<_, CaptureError>(opened_sink.sink)
        })?;
        Ok(Ready {
            cfg,
            idx,
            q,
            opened,
            pipeline,
            forward_counters,
            tx_path,
            output,
            if_before,
            inbound_only,
            groups,
            seal_after,
        })
    }

    /// Starts the threads of what `r` opened.
    fn spawn(r: Ready, stop: Arc<AtomicBool>) -> Result<Self, CaptureError> {
        let Ready { cfg, q, opened, .. } = r;
        let pools: Arc<Vec<Arc<Pool>>> = Arc::new(opened.pools);
        let plan = Plan::new(&cfg, q, &r.pipeline);
        // Every interface at once (index 0) has no link to watch.
        let link = r
            .idx
            .filter(|&i| i != 0)
            .map(|i| LinkWatch::new(&cfg.iface, i))
            .transpose()?;
        let nic = link.as_ref().and_then(|_| nic::NicDrops::start(&cfg.iface));
        let link_down: Arc<AtomicBool> = link
            .as_ref()
            .map(|l| Arc::clone(&l.down))
            .unwrap_or_default();
        let wakeup = Arc::new(Wakeup::new().map_err(|source| SysError {
            call: "socketpair",
            what: "the supervisor's wakeup".into(),
            source,
        })?);
        let mut threads = Threads::new(
            Arc::clone(&stop),
            Arc::clone(&wakeup),
            plan.worker_bells.clone(),
            Arc::clone(&plan.sink_bell),
        );
        let started = Started {
            cfg: &cfg,
            plan: &plan,
            pools: &pools,
            q,
            groups: &r.groups,
            seal_after: r.seal_after,
            link_down: &link_down,
        };
        if let Err(e) = started.all(&mut threads, opened.sources, r.pipeline) {
            // Threads already running would go on capturing: stop and join them.
            threads.stop_and_join();
            return Err(e.into());
        }
        Ok(Self {
            iface: cfg.iface,
            report: opened.report,
            backend: opened.backend,
            linktype: opened.linktype,
            _xdp: opened.xdp,
            _promiscuous: opened.promiscuous,
            nic,
            stats_request: cfg.stats_request,
            pools,
            counters: plan.counters,
            threads,
            wakeup,
            write_failed: plan.write_failed,
            written: plan.written,
            forward_counters: r.forward_counters,
            tx_path: r.tx_path,
            output: r.output,
            inbound_only: r.inbound_only,
            budget: plan.budget,
            link,
            if_before: r.if_before,
            duration: cfg.duration,
            status_every: cfg.status_every,
            started: Instant::now(),
            cpu_start: cpu_time(Who::SelfProcess),
        })
    }

    /// An end that wakes the supervisor, for a caller to register with its stop signals
    /// (`signal_hook::low_level::pipe::register`) so that a stop is seen at once.
    pub fn ringer(&self) -> std::io::Result<std::os::unix::net::UnixStream> {
        self.wakeup.ringer()
    }

    /// The running per-queue counters (for reports while the engine runs).
    pub fn counters(&self) -> Arc<Vec<Arc<QueueCounters>>> {
        Arc::clone(&self.counters)
    }

    /// What the file writer has written so far (for the metrics).
    pub fn written(&self) -> Arc<writer::Written> {
        Arc::clone(&self.written)
    }

    /// The pools, one per queue (for the metrics' occupancy).
    pub fn pools(&self) -> Arc<Vec<Arc<Pool>>> {
        Arc::clone(&self.pools)
    }

    /// The forwarder's live counters, per queue (`poolcap forward` only; for the metrics).
    pub fn forward_counters(&self) -> Option<forward::AllForwardCounters> {
        self.forward_counters.clone()
    }

    /// How the forwarder transmits (`sendmmsg` or `af_xdp shared umem (copy|zero-copy)`),
    /// for an engine opened with [`Engine::open_forward`].
    pub fn tx_path(&self) -> Option<&str> {
        self.tx_path.as_deref()
    }

    /// What each packet starts with (the file's link type).
    pub fn linktype(&self) -> LinkType {
        self.linktype
    }

    /// The capture file created, and how it is written (for the startup report): `writing
    /// to FILE with direct I/O (O_DIRECT)`, or buffered, and why.
    pub fn output_report(&self) -> Option<String> {
        let (path, how) = self.output.as_ref()?;
        Some(format!("writing to {} {how}", path.display()))
    }

    /// Which backend runs, and why (for the startup report).
    pub fn backend_report(&self) -> &str {
        &self.report
    }

    /// Which backend runs, by name (`af_packet`, `af_xdp`; `file`, `memory`).
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// The pool each queue has (R chunks of M cells): the one configured, or, when only
    /// writing, R handles of ring blocks (see [`backend::hold_split`]).
    pub fn pool_size(&self) -> Option<PoolSize> {
        self.pools.first().map(|p| p.size())
    }

    fn snapshot(&self) -> Vec<QueueStats> {
        account::snapshots(&self.counters)
    }

    fn status_line(&self, prev: &QueueStats, now: &[QueueStats], secs: f64) -> String {
        let t = account::total(now);
        let pps = (t.captured - prev.captured) as f64 / secs;
        let mbps = (t.bytes - prev.bytes) as f64 * 8.0 / secs / 1e6;
        let occupancy: Vec<String> = self
            .pools
            .iter()
            .enumerate()
            .map(|(i, p)| {
                format!(
                    "q{i} {:.0}%",
                    100.0 * p.in_use() as f64 / p.size().chunks.max(1) as f64
                )
            })
            .collect();
        let forwarded = self
            .forward_counters
            .as_ref()
            .map_or_else(String::new, |c| {
                let f = forward::ForwardStats::total(&forward::stats(now, c));
                format!(
                    " | forwarded {} dropped: rule {} tx {}",
                    f.forwarded, f.dropped_by_rule, f.dropped_tx
                )
            });
        format!(
            "{:.1} kpps {:.1} Mbit/s | captured {} dropped: kernel {} pool {} | offloaded {} paused {} ms | pool {}{forwarded}",
            pps / 1e3,
            mbps,
            t.captured,
            t.dropped_kernel,
            t.dropped_pool,
            t.offloaded_out,
            t.paused_ms,
            occupancy.join(" ")
        )
    }

    /// Supervises until stopped, then drains every stage and returns the accounting, also
    /// when a stage failed (the failure is in the report).
    pub fn run(mut self) -> CaptureReport {
        let (failure, error_printed) = self.supervise();
        self.finish(failure, error_printed)
    }

    /// Watches the stop flag, the duration, the count, the link and the threads until one
    /// ends the capture; returns a failure that ended it and whether a write error was
    /// already printed.
    fn supervise(&mut self) -> (Option<CaptureError>, bool) {
        let mut status = Status {
            last: Instant::now(),
            prev: QueueStats::default(),
        };
        let mut error_printed = false;
        let mut links = Links::new(self.link.take(), &self.iface);
        while !self.threads.stop.load(Ordering::Relaxed) {
            // A write error ends the writing, not the capture: say so at once, once.
            if let (false, Some(e)) = (error_printed, self.write_failed.get()) {
                log::error!("poolcap: {e}; capture goes on, packets are counted as not written");
                error_printed = true;
            }
            // Sleeps until rung (a stop signal, a capture thread's end) or a look is due;
            // the capture path does not depend on it.
            self.wakeup.wait(self.next_look(&status));
            if self.duration.is_some_and(|d| self.started.elapsed() >= d) {
                break;
            }
            if let Some(gone) = links.look(&self.iface) {
                return (Some(gone), error_printed);
            }
            if self.budget.as_ref().is_some_and(|b| b.is_spent()) {
                break;
            }
            let now = self.snapshot();
            if self.threads.capture_over() {
                break; // a capture thread failed (drain the others), or all ended
            }
            if let Some(asked) = &self.stats_request {
                if asked.swap(false, Ordering::Relaxed) {
                    self.print_accounting(&now);
                }
            }
            self.status(&mut status, &now);
        }
        (None, error_printed)
    }

    /// How long the supervisor may sleep: until the next status line, the end of
    /// `--duration`, or [`LOOK_EVERY`], whichever comes first.
    fn next_look(&self, status: &Status) -> Duration {
        let elapsed = self.started.elapsed();
        let due = [
            self.duration.map(|d| d.saturating_sub(elapsed)),
            self.status_every
                .map(|every| every.saturating_sub(status.last.elapsed())),
        ];
        due.into_iter().flatten().fold(LOOK_EVERY, Duration::min)
    }

    /// Prints the accounting so far (SIGUSR1, as tcpdump answers it), without stopping.
    fn print_accounting(&self, now: &[QueueStats]) {
        let t = account::total(now);
        crate::say!(
            "{} packets captured, {} dropped by kernel, {} dropped by pool, {} filtered, \
             {} dropped by the interface, in {:.1} s",
            t.captured,
            t.dropped_kernel,
            t.dropped_pool,
            t.filtered,
            self.nic.as_ref().map_or(0, nic::NicDrops::since_start),
            self.started.elapsed().as_secs_f64()
        );
    }

    /// Prints the status line when it is due.
    fn status(&self, status: &mut Status, now: &[QueueStats]) {
        let Some(every) = self.status_every else {
            return;
        };
        let secs = status.last.elapsed().as_secs_f64();
        if secs >= every.as_secs_f64() {
            crate::say!("{}", self.status_line(&status.prev, now, secs));
            status.prev = account::total(now);
            status.last = Instant::now();
        }
    }

    /// Stops and joins every thread, then builds the report.
    fn finish(self, failure: Option<CaptureError>, error_printed: bool) -> CaptureReport {
        let joined = self.threads.stop_and_join();
        let failure = failure.or(joined.failure);
        let outcome = joined.written;
        let forward_counters = self.forward_counters;
        let seconds = self.started.elapsed().as_secs_f64();
        let queues = account::snapshots(&self.counters);
        let t = account::total(&queues);
        let filtered_kernel = match (self.if_before, if_frames(&self.iface, self.inbound_only)) {
            (Some(a), Some(b)) => {
                (b - a).saturating_sub(t.captured + t.dropped_kernel + t.dropped_pool + t.not_taken)
            }
            _ => 0,
        };
        let (written, not_written, write_error) = match &outcome {
            Some(Ok(o)) => (o.written, o.not_written, o.error.clone()),
            Some(Err(sink)) => (0, t.captured, Some(format!("{sink} thread panicked"))),
            None => (0, 0, None),
        };
        if let (false, Some(e)) = (error_printed, &write_error) {
            log::error!("poolcap: {e}");
        }
        let (file_limit_reached, post_rotate_failed) = match &outcome {
            Some(Ok(o)) => (o.file_limit_reached, o.post_rotate_failed),
            _ => (false, 0),
        };
        let cpu = cpu_time(Who::SelfProcess);
        CaptureReport {
            interface: self.iface,
            captured: t.captured,
            bytes: t.bytes,
            dropped_kernel: t.dropped_kernel,
            dropped_pool: t.dropped_pool,
            dropped_nic: self.nic.as_ref().map_or(0, nic::NicDrops::since_start),
            filtered: t.filtered + filtered_kernel,
            filtered_kernel,
            not_taken: t.not_taken,
            freezes: t.freezes,
            written,
            not_written,
            write_error,
            file_limit_reached,
            post_rotate_failed,
            capture_error: failure.map(|e| e.to_string()),
            seconds,
            cpu_user: cpu.user - self.cpu_start.user,
            cpu_system: cpu.system - self.cpu_start.system,
            syscalls_per_packet: if t.captured > 0 {
                t.syscalls as f64 / t.captured as f64
            } else {
                0.0
            },
            forward: forward_counters.map(|c| forward::stats(&queues, &c)),
            queues,
        }
    }
}
