//! The steps of [`super::Engine`]'s start-up, each small enough to read at once: the memory
//! check, the ring tuning, opening the input and the output, the wiring shared by the
//! threads ([`Plan`]) and the spawning of each kind of thread ([`Started`]). Spawned threads
//! are recorded in [`Threads`] as they start, so a later failure can stop them.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use poolcap_format::{FileFormat, IfStats, WriteError};
use poolcap_sys::rx_ring::RingGeometry;
use poolcap_sys::SysError;

use super::account::{self, QueueCounters};
use super::backend::{self, Opened, Setup};
use super::doorbell::Doorbell;
use super::end::{Budget, Cut};
use super::pool::{Chunk, Pool};
use super::queue::{CaptureThread, Progress};
use super::source::Source;
use super::threads::{spawn, Threads};
use super::worker::{self, served_queues, Next, Worker};
use super::writer::{self, FileWriter};
use super::{file, filter, forward, rotate, savefile, CaptureConfig, CaptureError, Input, Output};

/// Block retire timeout when no analysis waits for packets (they are only counted, or only
/// written to a file from one queue): blocks may fill for longer and wake the capture thread
/// and the writer less often. tcpdump -w lets libpcap wait up to a second.
const NO_ANALYSIS_RETIRE_MS: u32 = 50;

/// Refuses pools and rings that do not fit the memory available.
pub(super) fn check_memory(
    cfg: &CaptureConfig,
    q: usize,
    records: Option<FileFormat>,
    live: bool,
) -> Result<(), CaptureError> {
    let ring_bytes = if live { cfg.ring.bytes() as u64 } else { 0 };
    let need = q as u64 * (cfg.pool.for_records(records).bytes() + ring_bytes);
    match crate::memlimit::available() {
        Some(avail) if need > avail => Err(CaptureError::Memory {
            need_mib: need >> 20,
            avail_mib: avail >> 20,
        }),
        _ => Ok(()),
    }
}

/// The ring geometry and the seal timeout to use.
///
/// When no analysis waits for packets, let blocks fill for longer, so the kernel wakes the
/// capture thread less often (on veth, on the sender's CPU), and hand a chunk on as soon as
/// the ring is empty rather than wake again to seal it. Not when a writer merges queues: an
/// idle queue's watermark lags by twice the retire timeout. Never when forwarding: the
/// retire timeout would become the forwarding latency.
pub(super) fn retire_tuning(
    cfg: &CaptureConfig,
    q: usize,
    forwarding: bool,
) -> (RingGeometry, Duration) {
    let no_analysis = !cfg.in_place
        && cfg.load == 0
        && cfg.probe.is_none()
        && !forwarding
        && (cfg.output.is_none() || q == 1);
    if !no_analysis {
        return (cfg.ring, cfg.seal_after);
    }
    let retire_timeout_ms = cfg.ring.retire_timeout_ms.max(NO_ANALYSIS_RETIRE_MS);
    (
        RingGeometry {
            retire_timeout_ms,
            ..cfg.ring
        },
        Duration::ZERO,
    )
}

/// Opens the sources and their pools: a file, the caller's sources, or the interface
/// through the configured backend.
pub(super) fn open_input(
    cfg: &CaptureConfig,
    input: Input,
    idx: Option<u32>,
    q: usize,
    ring: RingGeometry,
    capacity: &[usize],
) -> Result<Opened, CaptureError> {
    let records = cfg.output.as_ref().map(|(_, format)| *format);
    let local = |sources: Vec<Box<dyn Source>>, report: String| Opened {
        pools: backend::copy_pools(cfg.pool, capacity, records),
        sources,
        xdp: None,
        kernel_filter: false,
        report,
    };
    Ok(match input {
        Input::File { path, speed } => {
            let filter = cfg
                .filter
                .as_deref()
                .map(filter::compile_user)
                .transpose()?;
            let src = file::FileSource::open(&path, filter, speed)?;
            local(vec![Box::new(src)], format!("reading {}", path.display()))
        }
        Input::Sources(s) => local(s, "in-memory sources".into()),
        Input::Live => backend::open(
            cfg.backend,
            &Setup {
                iface: &cfg.iface,
                ifindex: idx.unwrap_or(0),
                queues: q,
                pool: cfg.pool,
                queue_capacity: capacity.to_vec(),
                ring,
                fanout: cfg.fanout,
                filter: cfg.filter.as_deref(),
                snaplen: cfg.snaplen,
                records,
            },
        )?,
    })
}

/// Opens the output and writes its header.
pub(super) fn open_output(
    cfg: &CaptureConfig,
    target: Output,
    format: FileFormat,
) -> Result<savefile::Savefiles, CaptureError> {
    let spec = savefile::FileSpec {
        format,
        snaplen: cfg.snaplen,
        iface: cfg.iface.clone(),
        compress: cfg.compress,
        fsync: cfg.files.fsync,
        post_rotate: cfg.files.post_rotate.clone(),
    };
    let stream = match target {
        Output::Stdout => Box::new(std::io::stdout()),
        Output::Sink(s) => s,
        Output::File(path) => return open_file(cfg, spec, path),
    };
    let w = spec.start(stream).map_err(CaptureError::Header)?;
    Ok(savefile::Savefiles::new(spec, w, None, None))
}

/// Creates the output file (the first of a rotation).
fn open_file(
    cfg: &CaptureConfig,
    spec: savefile::FileSpec,
    path: std::path::PathBuf,
) -> Result<savefile::Savefiles, CaptureError> {
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
        Err(e) => return Err(CaptureError::Header(e)),
    };
    Ok(savefile::Savefiles::new(spec, w, Some(first), rotation))
}

/// What the threads share, decided before any starts.
pub(super) struct Plan {
    pub(super) counters: Arc<Vec<Arc<QueueCounters>>>,
    progress: Vec<Arc<Mutex<Progress>>>,
    /// Count (and run the load) in the capture thread: no worker runs.
    in_place: Option<u32>,
    /// Capture threads hand chunks straight to the writer (no worker hop).
    direct: Option<Arc<ArrayQueue<Chunk>>>,
    /// The writer's (or forwarder's) input.
    writer_input: Option<Arc<ArrayQueue<Chunk>>>,
    pub(super) worker_bells: Vec<Arc<Doorbell>>,
    /// Per queue, the bells of the workers serving it.
    queue_bells: Arc<Vec<Vec<Arc<Doorbell>>>>,
    pub(super) writer_bell: Arc<Doorbell>,
    cut: Arc<Cut>,
    pub(super) budget: Option<Arc<Budget>>,
    pub(super) write_failed: Arc<OnceLock<String>>,
    pub(super) written: Arc<writer::Written>,
}

impl Plan {
    pub(super) fn new(cfg: &CaptureConfig, q: usize, output: bool, forwarding: bool) -> Self {
        // With no analysis load and no file nothing downstream reads packets: count them in
        // place. `--inplace` runs the load there too. Either way no worker runs.
        let in_place = match (cfg.in_place, cfg.load, !output && !forwarding) {
            (true, load, _) => Some(load),
            (false, 0, true) if cfg.probe.is_none() => Some(0),
            _ => None,
        };
        // Without an analysis load a worker would only pass chunks on: capture threads hand
        // them straight to the file writer.
        let total_chunks = q * cfg.pool.chunks.max(1);
        let writer_input = (output || forwarding).then(|| Arc::new(ArrayQueue::new(total_chunks)));
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
        let queue_bells = (0..q)
            .map(|queue| {
                (0..w)
                    .filter(|&i| served_queues(i, w, q).contains(&queue))
                    .map(|i| Arc::clone(&worker_bells[i]))
                    .collect()
            })
            .collect();
        Self {
            counters: Arc::new((0..q).map(|_| Arc::default()).collect()),
            progress: (0..q).map(|_| Arc::default()).collect(),
            in_place,
            direct,
            writer_input,
            worker_bells,
            queue_bells: Arc::new(queue_bells),
            writer_bell: Arc::default(),
            cut: Arc::default(),
            budget: cfg.count.map(|n| Arc::new(Budget::new(n))),
            write_failed: Arc::default(),
            written: Arc::default(),
        }
    }
}

/// Spawns the engine's threads from a [`Plan`]; each spawned thread goes into [`Threads`].
pub(super) struct Started<'a> {
    pub(super) cfg: &'a CaptureConfig,
    pub(super) plan: &'a Plan,
    pub(super) pools: &'a Arc<Vec<Arc<Pool>>>,
    pub(super) q: usize,
    /// Each queue's buddy group.
    pub(super) groups: &'a [Vec<usize>],
    pub(super) seal_after: Duration,
    pub(super) link_down: &'a Arc<AtomicBool>,
}

impl Started<'_> {
    /// Every thread, in the order they always started: capture threads, the forwarder or
    /// the writer, the workers. Returns the forwarder's counters.
    pub(super) fn all(
        &self,
        threads: &mut Threads,
        sources: Vec<Box<dyn Source>>,
        output: Option<savefile::Savefiles>,
        fwd: Option<forward::ForwardSetup>,
    ) -> Result<Option<forward::AllForwardCounters>, SysError> {
        self.captures(threads, sources, output.is_some() && self.q > 1)?;
        let (next, fwd_counters) = self.sinks(threads, output, fwd)?;
        self.workers(threads, &next)?;
        Ok(fwd_counters)
    }

    /// One capture thread per source; `merged`: a writer merges the queues.
    fn captures(
        &self,
        threads: &mut Threads,
        sources: Vec<Box<dyn Source>>,
        merged: bool,
    ) -> Result<(), SysError> {
        let (cfg, plan) = (self.cfg, self.plan);
        for (i, source) in sources.into_iter().enumerate() {
            let t = CaptureThread {
                queue: i,
                source,
                pool: Arc::clone(&self.pools[i]),
                pools: Arc::clone(self.pools),
                counters: Arc::clone(&plan.counters[i]),
                all_counters: Arc::clone(&plan.counters),
                policy: cfg.policy.build(&self.groups[i]),
                progress: Arc::clone(&plan.progress[i]),
                wait: cfg.wait,
                seal_after: self.seal_after,
                snaplen: cfg.snaplen as usize,
                in_place: plan.in_place,
                direct: plan.direct.clone(),
                queue_bells: Arc::clone(&plan.queue_bells),
                writer_bell: Arc::clone(&plan.writer_bell),
                merged,
                stop: Arc::clone(&threads.stop),
                cut: Arc::clone(&plan.cut),
                budget: plan.budget.clone(),
                link_down: Arc::clone(self.link_down),
            };
            let cpus = cfg.cpus.clone();
            let h = spawn(format!("capture-{i}"), "capture thread", move || {
                super::pin(&cpus, i);
                t.run()
            })?;
            threads.captures.push(h);
        }
        Ok(())
    }

    /// The writer or the forwarder, if any; returns where workers pass chunks and the
    /// forwarder's counters.
    fn sinks(
        &self,
        threads: &mut Threads,
        output: Option<savefile::Savefiles>,
        fwd: Option<forward::ForwardSetup>,
    ) -> Result<(Next, Option<forward::AllForwardCounters>), SysError> {
        let Some(input) = self.plan.writer_input.clone() else {
            return Ok((Next::Recycle, None));
        };
        let fwd_counters = match fwd {
            Some(setup) => Some(self.forwarder(threads, setup, &input)?),
            None => None,
        };
        if let Some(out) = output {
            self.writer(threads, out, &input)?;
        }
        Ok((Next::Write(input), fwd_counters))
    }

    fn forwarder(
        &self,
        threads: &mut Threads,
        setup: forward::ForwardSetup,
        input: &Arc<ArrayQueue<Chunk>>,
    ) -> Result<forward::AllForwardCounters, SysError> {
        let counters: forward::AllForwardCounters =
            Arc::new((0..self.q).map(|_| Default::default()).collect());
        let fw = forward::Forwarder {
            setup,
            input: Arc::clone(input),
            pools: Arc::clone(self.pools),
            counters: Arc::clone(&counters),
            workers_done: Arc::clone(&threads.workers_done),
            bell: Arc::clone(&self.plan.writer_bell),
        };
        threads.forwarder = Some(spawn("forwarder".into(), "forwarder thread", move || {
            fw.run()
        })?);
        Ok(counters)
    }

    fn writer(
        &self,
        threads: &mut Threads,
        out: savefile::Savefiles,
        input: &Arc<ArrayQueue<Chunk>>,
    ) -> Result<(), SysError> {
        let fw = FileWriter {
            out,
            input: Arc::clone(input),
            pools: Arc::clone(self.pools),
            progress: self.plan.progress.clone(),
            workers_done: Arc::clone(&threads.workers_done),
            limit: self.cfg.count,
            stop: Arc::clone(&threads.stop),
            bell: Arc::clone(&self.plan.writer_bell),
            batch_bytes: writer::BATCH_BYTES,
            failed: Arc::clone(&self.plan.write_failed),
            written: Arc::clone(&self.plan.written),
        };
        let counters = Arc::clone(&self.plan.counters);
        threads.writer = Some(spawn("writer".into(), "writer thread", move || {
            fw.run(move || if_stats(&counters))
        })?);
        Ok(())
    }

    /// The workers, passing chunks to `next`.
    fn workers(&self, threads: &mut Threads, next: &Next) -> Result<(), SysError> {
        let w = self.plan.worker_bells.len();
        for (i, bell) in self.plan.worker_bells.iter().enumerate() {
            let wk = Worker {
                queues: served_queues(i, w, self.q),
                pools: Arc::clone(self.pools),
                stage: worker::Stage::new(self.cfg.load, self.cfg.probe.as_ref()),
                next: next.clone(),
                captures_done: Arc::clone(&threads.captures_done),
                bell: Arc::clone(bell),
                writer_bell: Arc::clone(&self.plan.writer_bell),
            };
            let (cpus, q) = (self.cfg.cpus.clone(), self.q);
            let h = spawn(format!("worker-{i}"), "worker thread", move || {
                super::pin(&cpus, q + i);
                wk.run()
            })?;
            threads.workers.push(h);
        }
        Ok(())
    }
}

/// The interface statistics a pcapng file ends with: the engine's totals.
fn if_stats(counters: &[Arc<QueueCounters>]) -> IfStats {
    let t = account::total(&account::snapshots(counters));
    IfStats {
        received: t.captured,
        dropped: t.dropped_kernel + t.dropped_pool,
    }
}
