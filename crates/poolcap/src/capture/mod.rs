//! The capture engine, basic mode B-(M,R) on AF_PACKET TPACKET_V3 (see `shared/design.md`).
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
pub mod compress;
pub mod doorbell;
pub mod end;
pub mod file;
pub mod filter;
pub mod forward;
pub mod link;
pub mod mem;
pub mod policy;
pub mod pool;
pub mod queue;
pub mod rotate;
pub mod savefile;
pub mod source;
pub mod worker;
pub mod writer;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use poolcap_format::{FileFormat, IfStats, WriteError};
use poolcap_sys::process::{cpu_time, CpuTime, Who};
use poolcap_sys::rx_ring::RingGeometry;
use poolcap_sys::socket::{ifindex, FanoutMode};
use poolcap_sys::SysError;
use serde::{Deserialize, Serialize};

use self::account::{QueueCounters, QueueStats};
use self::backend::{BackendConfig, Opened, Setup};
use self::doorbell::Doorbell;
use self::end::{Budget, Cut};
use self::link::{LinkEvent, LinkWatch};
use self::policy::{group_of, PolicySpec};
use self::pool::{Pool, PoolSize};
use self::queue::{CaptureThread, Progress, WaitStrategy};
use self::source::Source;
use self::worker::{served_queues, Next, Worker};
use self::writer::{BoxedOutput, FileWriter, WriterOutcome};
use crate::netdev;

/// Block retire timeout when no analysis waits for packets (they are only counted, or only
/// written to a file from one queue): blocks may fill for longer and wake the capture thread
/// and the writer less often. tcpdump -w lets libpcap wait up to a second.
const NO_ANALYSIS_RETIRE_MS: u32 = 50;

/// How often the supervising thread looks at the stop flag and the counters.
const SUPERVISOR_TICK: Duration = Duration::from_millis(50);

/// The supervisor looks at the interface every this many ticks while it is up (a deleted
/// interface also makes its sockets report ENETDOWN, which brings the next look forward).
const LINK_LOOK_TICKS: u32 = 5;

/// Where a capture's packets come from.
pub enum Input {
    /// The interface `iface`, through the configured backend.
    Live,
    /// A pcap/pcapng file (plain, gzip or zstd; `-` for standard input), as fast as the
    /// pipeline takes it or at `speed` times its recorded pace.
    File {
        /// The file.
        path: PathBuf,
        /// Pace, as a multiple of the recorded one.
        speed: Option<f64>,
    },
    /// Sources built by the caller (tests: `mem`), one per queue.
    Sources(Vec<Box<dyn Source>>),
}

/// A resolved capture.
pub struct CaptureConfig {
    /// Where packets come from.
    pub input: Input,
    /// Interface (for a file: the name recorded in the output).
    pub iface: String,
    /// Receive queues (fanout sockets).
    pub queues: usize,
    /// Fanout mode.
    pub fanout: FanoutMode,
    /// Pool per queue.
    pub pool: PoolSize,
    /// Worker threads.
    pub workers: usize,
    /// x-loop iterations per packet.
    pub load: u32,
    /// Run the load in the capture thread on the kernel ring (no pool, no workers).
    pub in_place: bool,
    /// Capture threads' wait strategy.
    pub wait: WaitStrategy,
    /// Bytes kept per packet.
    pub snaplen: u32,
    /// Kernel ring per queue.
    pub ring: RingGeometry,
    /// tcpdump filter expression.
    pub filter: Option<String>,
    /// Output and its format.
    pub output: Option<(Output, FileFormat)>,
    /// Compress the output.
    pub compress: Option<compress::Compression>,
    /// Rotation, `-z` and `--fsync` of output files.
    pub files: savefile::FileOptions,
    /// Stop after this many packets.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// CPUs to pin capture threads (then workers) to, round robin.
    pub cpus: Option<Vec<usize>>,
    /// Seal a partly filled chunk after this long without new packets.
    pub seal_after: Duration,
    /// Offload policy.
    pub policy: PolicySpec,
    /// Backend (AF_PACKET, AF_XDP).
    pub backend: BackendConfig,
    /// Buddy groups (every queue in exactly one).
    pub buddy_groups: Vec<Vec<usize>>,
    /// Print a status line this often on stderr (None: quiet).
    pub status_every: Option<Duration>,
    /// Run the probe's rules on the workers instead of the x-loop (`poolcap probe`).
    pub probe: Option<Arc<poolcap_probe::Hub>>,
}

impl std::fmt::Debug for CaptureConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureConfig")
            .field("iface", &self.iface)
            .field("queues", &self.queues)
            .finish()
    }
}

/// Where captured packets go.
pub enum Output {
    /// Standard output (`-w -`).
    Stdout,
    /// A file, created (truncated) only once everything else is set up.
    File(PathBuf),
    /// Any other sink (tests).
    Sink(BoxedOutput),
}

/// Why a capture could not start or failed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// No such interface.
    #[error("no such interface `{0}`")]
    NoInterface(String),
    /// The filter did not compile.
    #[error(transparent)]
    Filter(#[from] filter::FilterError),
    /// Pools and rings need more memory than is available.
    #[error("pools and rings need {need_mib} MiB but only {avail_mib} MiB are available; use a smaller --pool or -B")]
    Memory {
        /// MiB needed.
        need_mib: u64,
        /// MiB available.
        avail_mib: u64,
    },
    /// A kernel call failed.
    #[error(transparent)]
    Sys(#[from] SysError),
    /// The output file could not be created.
    #[error("cannot write {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The capture file could not be read.
    #[error(transparent)]
    File(#[from] file::FileError),
    /// AF_XDP could not be set up.
    #[error("{0}")]
    Xdp(String),
    /// The file header could not be written.
    #[error("cannot write the capture file header: {0}")]
    Header(poolcap_format::WriteError),
    /// The interface was deleted while capturing.
    #[error("interface `{0}` disappeared during the capture")]
    LinkGone(String),
    /// A capture thread failed while running.
    #[error("capture thread of queue {queue} failed: {source}")]
    Thread {
        /// Queue.
        queue: usize,
        /// Error.
        source: SysError,
    },
}

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
    /// The kernel error that ended a capture thread.
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
    // Keeps the XDP program attached until the engine is gone.
    _xdp: Option<poolcap_sys::xdp::XdpRedirect>,
    pools: Arc<Vec<Arc<Pool>>>,
    counters: Arc<Vec<Arc<QueueCounters>>>,
    captures: Vec<JoinHandle<Result<(), SysError>>>,
    workers: Vec<JoinHandle<()>>,
    writer: Option<JoinHandle<WriterOutcome>>,
    /// The writer's first error, printed by the supervisor as soon as it is set.
    write_failed: Arc<OnceLock<String>>,
    forwarder: Option<(JoinHandle<()>, forward::AllForwardCounters)>,
    captures_done: Arc<AtomicBool>,
    workers_done: Arc<AtomicBool>,
    worker_bells: Vec<Arc<Doorbell>>,
    writer_bell: Arc<Doorbell>,
    stop: Arc<AtomicBool>,
    budget: Option<Arc<Budget>>,
    link: Option<LinkWatch>,
    if_before: Option<u64>,
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

/// Frames the interface has seen in both directions (for the in-kernel filter's count).
fn if_frames(iface: &str) -> Option<u64> {
    Some(netdev::counter(iface, "rx_packets")? + netdev::counter(iface, "tx_packets")?)
}

fn pin(cpus: &Option<Vec<usize>>, i: usize) {
    if let Some(list) = cpus.as_ref().filter(|l| !l.is_empty()) {
        core_affinity::set_for_current(core_affinity::CoreId {
            id: list[i % list.len()],
        });
    }
}

impl Engine {
    /// Sets up rings, pools and threads; returns once every queue is capturing.
    /// `after_open` runs once every socket, ring, XDP program and the output are open and
    /// before any thread starts: the moment to give up privileges (`-Z`).
    pub fn start(
        cfg: CaptureConfig,
        stop: Arc<AtomicBool>,
        after_open: impl FnOnce() -> Result<(), SysError>,
    ) -> Result<Self, CaptureError> {
        Self::launch(cfg, None, stop, after_open)
    }

    /// As [`Engine::start`], with a forwarder instead of a file writer as the sink: processed
    /// chunks leave through `fwd`'s interface (see [`forward`]); `cfg.output` is ignored.
    pub fn start_forward(
        cfg: CaptureConfig,
        fwd: forward::ForwardSetup,
        stop: Arc<AtomicBool>,
        after_open: impl FnOnce() -> Result<(), SysError>,
    ) -> Result<Self, CaptureError> {
        Self::launch(
            CaptureConfig {
                output: None,
                ..cfg
            },
            Some(fwd),
            stop,
            after_open,
        )
    }

    fn launch(
        mut cfg: CaptureConfig,
        fwd: Option<forward::ForwardSetup>,
        stop: Arc<AtomicBool>,
        after_open: impl FnOnce() -> Result<(), SysError>,
    ) -> Result<Self, CaptureError> {
        let input = std::mem::replace(&mut cfg.input, Input::Live);
        let idx = match input {
            Input::Live => Some(
                ifindex(&cfg.iface).map_err(|_| CaptureError::NoInterface(cfg.iface.clone()))?,
            ),
            _ => None,
        };
        let q = match &input {
            Input::Live => cfg.queues.max(1),
            Input::File { .. } => 1,
            Input::Sources(s) => s.len().max(1),
        };
        let records = cfg.output.as_ref().map(|(_, format)| *format);
        let ring_bytes = if idx.is_some() {
            cfg.ring.bytes() as u64
        } else {
            0
        };
        let need = q as u64 * (cfg.pool.for_records(records).bytes() + ring_bytes);
        if let Some(avail) = crate::memlimit::available() {
            if need > avail {
                return Err(CaptureError::Memory {
                    need_mib: need >> 20,
                    avail_mib: avail >> 20,
                });
            }
        }
        let groups: Vec<Vec<usize>> = (0..q).map(|i| group_of(&cfg.buddy_groups, i)).collect();
        // When no analysis waits for packets, let blocks fill for longer, so the kernel wakes
        // the capture thread less often (on veth, on the sender's CPU), and hand a chunk on
        // as soon as the ring is empty rather than wake again to seal it. Not when a writer
        // merges queues: an idle queue's watermark lags by twice the retire timeout.
        // Never when forwarding: the retire timeout would become the forwarding latency.
        let no_analysis = !cfg.in_place
            && cfg.load == 0
            && cfg.probe.is_none()
            && fwd.is_none()
            && (cfg.output.is_none() || q == 1);
        let (ring, seal_after) = if no_analysis {
            let retire = cfg.ring.retire_timeout_ms.max(NO_ANALYSIS_RETIRE_MS);
            (
                RingGeometry {
                    retire_timeout_ms: retire,
                    ..cfg.ring
                },
                Duration::ZERO,
            )
        } else {
            (cfg.ring, cfg.seal_after)
        };
        let capacity: Vec<usize> = groups.iter().map(|g| g.len() * cfg.pool.chunks).collect();
        let local = |sources: Vec<Box<dyn Source>>, report: String| Opened {
            pools: backend::copy_pools(cfg.pool, &capacity, records),
            sources,
            xdp: None,
            kernel_filter: false,
            report,
        };
        let opened = match (input, idx) {
            (Input::File { path, speed }, _) => {
                let filter = cfg
                    .filter
                    .as_deref()
                    .map(filter::compile_user)
                    .transpose()?;
                let src = file::FileSource::open(&path, filter, speed)?;
                local(vec![Box::new(src)], format!("reading {}", path.display()))
            }
            (Input::Sources(s), _) => local(s, "in-memory sources".into()),
            (Input::Live, idx) => backend::open(
                cfg.backend,
                &Setup {
                    iface: &cfg.iface,
                    ifindex: idx.unwrap_or(0),
                    queues: q,
                    pool: cfg.pool,
                    queue_capacity: capacity.clone(),
                    ring,
                    fanout: cfg.fanout,
                    filter: cfg.filter.as_deref(),
                    snaplen: cfg.snaplen,
                    records,
                },
            )?,
        };
        let pools: Arc<Vec<Arc<Pool>>> = Arc::new(opened.pools);
        let sockets = opened.sources;
        let if_before = if opened.kernel_filter {
            if_frames(&cfg.iface)
        } else {
            None
        };
        // Create the file only now that the filter compiled and the sockets are open, so a
        // bad argument never truncates an existing file; write its header before capturing.
        let output = match cfg.output {
            Some((target, format)) => {
                let spec = savefile::FileSpec {
                    format,
                    snaplen: cfg.snaplen,
                    iface: cfg.iface.clone(),
                    compress: cfg.compress,
                    fsync: cfg.files.fsync,
                    post_rotate: cfg.files.post_rotate.clone(),
                };
                let header = |e| CaptureError::Header(e);
                Some(match target {
                    Output::Stdout => {
                        let w = spec.start(Box::new(std::io::stdout())).map_err(header)?;
                        savefile::Savefiles::new(spec, w, None, None)
                    }
                    Output::Sink(s) => {
                        let w = spec.start(s).map_err(header)?;
                        savefile::Savefiles::new(spec, w, None, None)
                    }
                    Output::File(path) => {
                        let rotation = cfg.files.rotate.rotates().then(|| {
                            let now = std::time::SystemTime::now()
                                .duration_since(std::time::UNIX_EPOCH)
                                .map_or(0, |d| d.as_secs() as i64);
                            rotate::Rotation::new(&path.to_string_lossy(), cfg.files.rotate, now)
                        });
                        let first = rotation.as_ref().map_or(path, |r| r.first_name());
                        let w = match spec.open(&first) {
                            Ok(w) => w,
                            Err(WriteError::Io { source, .. }) => {
                                return Err(CaptureError::Open {
                                    path: first,
                                    source,
                                })
                            }
                            Err(e) => return Err(header(e)),
                        };
                        savefile::Savefiles::new(spec, w, Some(first), rotation)
                    }
                })
            }
            None => None,
        };
        after_open()?;
        let counters: Arc<Vec<Arc<QueueCounters>>> =
            Arc::new((0..q).map(|_| Arc::new(QueueCounters::default())).collect());
        let progress: Vec<Arc<Mutex<Progress>>> = (0..q)
            .map(|_| Arc::new(Mutex::new(Progress::default())))
            .collect();
        // With no analysis load and no file nothing downstream reads packets: count them in
        // place. `--inplace` runs the load there too. Either way no worker runs.
        let in_place = match (cfg.in_place, cfg.load, output.is_none() && fwd.is_none()) {
            (true, load, _) => Some(load),
            (false, 0, true) if cfg.probe.is_none() => Some(0),
            _ => None,
        };
        // Without an analysis load a worker would only pass chunks on: capture threads hand
        // them straight to the file writer.
        let total_chunks = q * cfg.pool.chunks.max(1);
        let writer_input =
            (output.is_some() || fwd.is_some()).then(|| Arc::new(ArrayQueue::new(total_chunks)));
        let direct = writer_input
            .clone()
            .filter(|_| cfg.load == 0 && cfg.probe.is_none() && in_place.is_none());
        let w = if in_place.is_some() || direct.is_some() {
            0
        } else {
            cfg.workers.max(1)
        };
        // One bell per worker, listed under each queue it serves, and one for the writer.
        let worker_bells: Vec<Arc<Doorbell>> = (0..w).map(|_| Arc::default()).collect();
        let queue_bells: Arc<Vec<Vec<Arc<Doorbell>>>> = Arc::new(
            (0..q)
                .map(|queue| {
                    (0..w)
                        .filter(|&i| served_queues(i, w, q).contains(&queue))
                        .map(|i| Arc::clone(&worker_bells[i]))
                        .collect()
                })
                .collect(),
        );
        let writer_bell: Arc<Doorbell> = Arc::default();
        let cut: Arc<Cut> = Arc::default();
        let budget = cfg.count.map(|n| Arc::new(Budget::new(n)));
        let link = idx.map(|i| LinkWatch::new(&cfg.iface, i));
        let link_down: Arc<AtomicBool> = link
            .as_ref()
            .map(|l| Arc::clone(&l.down))
            .unwrap_or_default();
        let captures = sockets
            .into_iter()
            .enumerate()
            .map(|(i, source)| {
                let t = CaptureThread {
                    queue: i,
                    source,
                    pool: Arc::clone(&pools[i]),
                    pools: Arc::clone(&pools),
                    counters: Arc::clone(&counters[i]),
                    all_counters: Arc::clone(&counters),
                    policy: cfg.policy.build(&groups[i]),
                    progress: Arc::clone(&progress[i]),
                    wait: cfg.wait,
                    seal_after,
                    snaplen: cfg.snaplen as usize,
                    in_place,
                    direct: direct.clone(),
                    queue_bells: Arc::clone(&queue_bells),
                    writer_bell: Arc::clone(&writer_bell),
                    merged: output.is_some() && q > 1,
                    stop: Arc::clone(&stop),
                    cut: Arc::clone(&cut),
                    budget: budget.clone(),
                    link_down: Arc::clone(&link_down),
                };
                let cpus = cfg.cpus.clone();
                std::thread::Builder::new()
                    .name(format!("capture-{i}"))
                    .spawn(move || {
                        pin(&cpus, i);
                        t.run()
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| SysError {
                call: "spawn",
                what: "capture thread".into(),
                source: e,
            })?;
        let write_failed: Arc<OnceLock<String>> = Arc::default();
        let captures_done = Arc::new(AtomicBool::new(false));
        let workers_done = Arc::new(AtomicBool::new(false));
        let forwarder = match (fwd, &writer_input) {
            (Some(setup), Some(input)) => {
                let fw_counters: forward::AllForwardCounters =
                    Arc::new((0..q).map(|_| Default::default()).collect());
                let fw = forward::Forwarder {
                    setup,
                    input: Arc::clone(input),
                    pools: Arc::clone(&pools),
                    counters: Arc::clone(&fw_counters),
                    workers_done: Arc::clone(&workers_done),
                    bell: Arc::clone(&writer_bell),
                };
                let h = std::thread::Builder::new()
                    .name("forwarder".into())
                    .spawn(move || fw.run())
                    .map_err(|e| SysError {
                        call: "spawn",
                        what: "forwarder thread".into(),
                        source: e,
                    })?;
                Some((h, fw_counters))
            }
            _ => None,
        };
        let (next, writer) = match (output, writer_input) {
            (Some(out), Some(input)) => {
                let fw = FileWriter {
                    out,
                    input: Arc::clone(&input),
                    pools: Arc::clone(&pools),
                    progress: progress.clone(),
                    workers_done: Arc::clone(&workers_done),
                    limit: cfg.count,
                    stop: Arc::clone(&stop),
                    bell: Arc::clone(&writer_bell),
                    batch_bytes: writer::BATCH_BYTES,
                    failed: Arc::clone(&write_failed),
                };
                let stats_counters = Arc::clone(&counters);
                let h = std::thread::Builder::new()
                    .name("writer".into())
                    .spawn(move || {
                        fw.run(move || {
                            let t = account::total(
                                &stats_counters
                                    .iter()
                                    .enumerate()
                                    .map(|(i, c)| c.snapshot(i))
                                    .collect::<Vec<_>>(),
                            );
                            IfStats {
                                received: t.captured,
                                dropped: t.dropped_kernel + t.dropped_pool,
                            }
                        })
                    })
                    .map_err(|e| SysError {
                        call: "spawn",
                        what: "writer thread".into(),
                        source: e,
                    })?;
                (Next::Write(input), Some(h))
            }
            // The forwarder takes the file writer's place.
            (None, Some(input)) => (Next::Write(input), None),
            _ => (Next::Recycle, None),
        };
        let workers = (0..w)
            .map(|i| {
                let wk = Worker {
                    queues: served_queues(i, w, q),
                    pools: Arc::clone(&pools),
                    stage: worker::Stage::new(cfg.load, cfg.probe.as_ref()),
                    next: next.clone(),
                    captures_done: Arc::clone(&captures_done),
                    bell: Arc::clone(&worker_bells[i]),
                    writer_bell: Arc::clone(&writer_bell),
                };
                let cpus = cfg.cpus.clone();
                std::thread::Builder::new()
                    .name(format!("worker-{i}"))
                    .spawn(move || {
                        pin(&cpus, q + i);
                        wk.run()
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| SysError {
                call: "spawn",
                what: "worker thread".into(),
                source: e,
            })?;
        Ok(Self {
            iface: cfg.iface,
            report: opened.report,
            _xdp: opened.xdp,
            pools,
            counters,
            captures,
            workers,
            writer,
            write_failed,
            forwarder,
            captures_done,
            workers_done,
            worker_bells,
            writer_bell,
            stop,
            budget,
            link,
            if_before,
            duration: cfg.duration,
            status_every: cfg.status_every,
            started: Instant::now(),
            cpu_start: cpu_time(Who::SelfProcess),
        })
    }

    /// The running per-queue counters (for reports while the engine runs).
    pub fn counters(&self) -> Arc<Vec<Arc<QueueCounters>>> {
        Arc::clone(&self.counters)
    }

    /// The pools, one per queue (for the metrics' occupancy).
    pub fn pools(&self) -> Arc<Vec<Arc<Pool>>> {
        Arc::clone(&self.pools)
    }

    /// Which backend runs, and why (for the startup report).
    pub fn backend_report(&self) -> &str {
        &self.report
    }

    fn snapshot(&self) -> Vec<QueueStats> {
        self.counters
            .iter()
            .enumerate()
            .map(|(i, c)| c.snapshot(i))
            .collect()
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
        let forwarded = self.forwarder.as_ref().map_or_else(String::new, |(_, c)| {
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
        let mut last_status = Instant::now();
        let mut prev = QueueStats::default();
        let mut error_printed = false;
        let mut failure = None;
        let mut link = self.link.take();
        if link.as_mut().and_then(|l| l.observe(l.look())) == Some(LinkEvent::Down) {
            eprintln!(
                "warning: {} is down; packets are captured once it is up",
                self.iface
            );
        }
        // Every tick while the link is down (or a socket said ENETDOWN), else every
        // LINK_LOOK_TICKS: a look costs a few syscalls.
        let mut ticks = 0u32;
        let mut look = || {
            let l = link.as_mut()?;
            ticks += 1;
            let due = ticks.is_multiple_of(LINK_LOOK_TICKS) || l.down.load(Ordering::Relaxed);
            due.then(|| l.observe(l.look())).flatten()
        };
        while !self.stop.load(Ordering::Relaxed) {
            // A write error ends the writing, not the capture: say so at once, once.
            if let (false, Some(e)) = (error_printed, self.write_failed.get()) {
                eprintln!("poolcap: {e}; capture goes on, packets are counted as not written");
                error_printed = true;
            }
            // Bounds how late a stop, the duration or the count is seen; the capture path
            // does not depend on it.
            std::thread::sleep(SUPERVISOR_TICK);
            if self.duration.is_some_and(|d| self.started.elapsed() >= d) {
                break;
            }
            match look() {
                Some(LinkEvent::Down) => eprintln!(
                    "{} went down; capture resumes when it is back up",
                    self.iface
                ),
                Some(LinkEvent::Up) => eprintln!("{} is up again; capture resumed", self.iface),
                Some(LinkEvent::Gone) => {
                    failure = Some(CaptureError::LinkGone(self.iface.clone()));
                    break;
                }
                None => {}
            }
            if self.budget.as_ref().is_some_and(|b| b.is_spent()) {
                break;
            }
            let now = self.snapshot();
            if self.captures.iter().any(JoinHandle::is_finished) {
                break; // a capture thread failed; drain the others
            }
            if let Some(every) = self.status_every {
                let secs = last_status.elapsed().as_secs_f64();
                if secs >= every.as_secs_f64() {
                    crate::say!("{}", self.status_line(&prev, &now, secs));
                    prev = account::total(&now);
                    last_status = Instant::now();
                }
            }
        }
        self.stop.store(true, Ordering::Relaxed);
        for (i, h) in self.captures.into_iter().enumerate() {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    failure = failure.or(Some(CaptureError::Thread {
                        queue: i,
                        source: e,
                    }))
                }
                Err(_) => {
                    failure = failure.or(Some(CaptureError::Thread {
                        queue: i,
                        source: SysError {
                            call: "capture thread",
                            what: "panicked".into(),
                            source: std::io::Error::other("panic"),
                        },
                    }))
                }
            }
        }
        self.captures_done.store(true, Ordering::Release);
        self.worker_bells.iter().for_each(|b| b.ring());
        for h in self.workers {
            let _ = h.join();
        }
        self.workers_done.store(true, Ordering::Release);
        self.writer_bell.ring();
        let outcome = self.writer.map(|h| h.join());
        let forward_counters = self.forwarder.map(|(h, c)| {
            let _ = h.join();
            c
        });
        let seconds = self.started.elapsed().as_secs_f64();
        let queues: Vec<QueueStats> = self
            .counters
            .iter()
            .enumerate()
            .map(|(i, c)| c.snapshot(i))
            .collect();
        let t = account::total(&queues);
        let filtered_kernel = match (self.if_before, if_frames(&self.iface)) {
            (Some(a), Some(b)) => {
                (b - a).saturating_sub(t.captured + t.dropped_kernel + t.dropped_pool + t.not_taken)
            }
            _ => 0,
        };
        let (written, not_written, write_error) = match &outcome {
            Some(Ok(o)) => (o.written, o.not_written, o.error.clone()),
            Some(Err(_)) => (0, t.captured, Some("writer thread panicked".to_string())),
            None => (0, 0, None),
        };
        if let (false, Some(e)) = (error_printed, &write_error) {
            eprintln!("poolcap: {e}");
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
