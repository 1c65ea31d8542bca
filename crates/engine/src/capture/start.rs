//! The steps of [`super::Engine`]'s start-up, each small enough to read at once: the memory
//! check, the ring tuning, opening the input and the output, the wiring shared by the
//! threads ([`Plan`]) and the spawning of each kind of thread ([`Started`]). Spawned threads
//! are recorded in [`Threads`] as they start, so a later failure can stop them.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use poolcap_format::{FileFormat, FileHeader, LinkType, WriteError};
use poolcap_sys::rx_ring::RingGeometry;
use poolcap_sys::SysError;

use super::account::QueueCounters;
use super::backend::{self, Opened, Setup};
use super::config::{CaptureConfig, Input, Output};
use super::doorbell::Doorbell;
use super::end::{Budget, Cut};
use super::error::CaptureError;
use super::forward::AllForwardCounters;
use super::pipeline::{Analysis, Handoff, Pipeline};
use super::pool::{Chunk, Pool};
use super::progress::Progress;
use super::queue::CaptureThread;
use super::sink::{FileSink, ForwardSink, Sink, SinkIo, SinkSpec};
use super::source::Source;
use super::threads::{spawn, Threads};
use super::worker::{served_queues, Next, Worker};
use super::writer::{self, InlineWriter};
use super::{file, linktype, rotate, savefile};

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
    let need = q as u64 * (super::pool::for_records(cfg.pool, records).bytes() + ring_bytes);
    match crate::memlimit::available() {
        Some(avail) if need > avail => Err(CaptureError::Memory {
            need_mib: need >> 20,
            avail_mib: avail >> 20,
        }),
        _ => Ok(()),
    }
}

/// Block retire timeout when forwarding: the shortest TPACKET_V3 allows (it counts in
/// milliseconds), since a frame leaves only once its block is retired.
const FORWARD_RETIRE_MS: u32 = 1;

/// Block size when forwarding: at low rates a block retires after [`FORWARD_RETIRE_MS`]
/// holding few frames, so the ring buffers about `blocks` milliseconds; small blocks keep
/// that long (4 MiB: 256 blocks, 256 ms, where 16 blocks of 256 KiB held only 16 ms and
/// lost frames whenever the capture thread waited that long for a CPU).
const FORWARD_BLOCK: u32 = 16 << 10;

/// Most blocks of a ring (the `-B` check's limit).
const MAX_BLOCKS: u64 = 1 << 16;

/// The ring geometry and the seal timeout to use.
///
/// When no analysis waits for packets (they are only counted, or only written to a file
/// from one queue), let blocks fill for longer, so the kernel wakes the capture thread less
/// often (on veth, on the sender's CPU), and hand a chunk on as soon as the ring is empty
/// rather than wake again to seal it. Not when a writer merges queues: an idle queue's
/// watermark lags by twice the retire timeout. When forwarding the opposite: the retire
/// timeout and the seal timeout add to every frame's latency, so blocks retire after
/// [`FORWARD_RETIRE_MS`] and a chunk goes on as soon as the ring is empty (measured on the
/// veth lab at 10k pps: p50 from 4.3 ms to about 0.8 ms), in blocks of [`FORWARD_BLOCK`]
/// (the same ring bytes). That costs up to a thousand wakeups a second per queue, which
/// only forwarding pays.
pub(super) fn retire_tuning(
    cfg: &CaptureConfig,
    q: usize,
    pipeline: &Pipeline<SinkSpec>,
) -> (RingGeometry, Duration) {
    if pipeline.sink().is_some_and(SinkSpec::forwards) {
        let bytes = cfg.ring.bytes() as u64;
        let smallest = bytes.div_ceil(MAX_BLOCKS).next_multiple_of(4096);
        let block_size = u64::from(cfg.ring.block_size.min(FORWARD_BLOCK)).max(smallest);
        let ring = RingGeometry {
            block_size: block_size as u32,
            block_nr: (bytes / block_size).max(2) as u32,
            retire_timeout_ms: cfg.ring.retire_timeout_ms.min(FORWARD_RETIRE_MS),
        };
        return (ring, Duration::ZERO);
    }
    let no_analysis = match pipeline {
        Pipeline::Count => true,
        Pipeline::Direct(sink) => !sink.forwards() && q == 1,
        Pipeline::InPlace { .. } | Pipeline::Workers { .. } => false,
    };
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

/// Where the sources are and how they are set up: see [`open_input`].
#[derive(Clone, Copy)]
pub(super) struct InputPlan<'a> {
    pub(super) idx: Option<u32>,
    pub(super) q: usize,
    pub(super) ring: RingGeometry,
    /// Each queue's capture-queue capacity.
    pub(super) capacity: &'a [usize],
    /// The file format packets are written in, if they are.
    pub(super) records: Option<FileFormat>,
    /// Capture sockets ignore frames this host sends (forwarding: OUT may be IN's peer).
    pub(super) inbound_only: bool,
    /// Packets are only written to a file ([`writes_only`]).
    pub(super) writes_only: bool,
}

/// True when `pipeline` only writes packets to a file (no analysis, no forwarding): the
/// backend then writes them from its kernel ring (`backend::hold_split`).
pub(super) fn writes_only(pipeline: &Pipeline<SinkSpec>) -> bool {
    matches!(pipeline, Pipeline::Direct(sink) if !sink.forwards())
}

/// Opens the sources and their pools: a file, the caller's sources, or the interface
/// through the configured backend.
pub(super) fn open_input(
    cfg: &CaptureConfig,
    input: Input,
    plan: &InputPlan<'_>,
) -> Result<Opened, CaptureError> {
    let InputPlan {
        idx,
        q,
        ring,
        capacity,
        records,
        inbound_only,
        writes_only,
    } = *plan;
    let local = |sources: Vec<Box<dyn Source>>, report: String, backend, linktype| Opened {
        pools: backend::copy_pools(cfg.pool, capacity, records),
        sources,
        xdp: None,
        shares: Vec::new(),
        kernel_filter: false,
        report,
        backend,
        linktype,
        promiscuous: None,
    };
    Ok(match input {
        Input::File { path, speed } => {
            let src = file::FileSource::open(&path, cfg.filter.as_deref(), speed)?;
            let linktype = src.linktype();
            let report = format!("reading {}", path.display());
            local(vec![Box::new(src)], report, "file", linktype)
        }
        Input::Sources(s) => local(s, "in-memory sources".into(), "memory", LinkType::ETHERNET),
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
                inbound_only,
                writes_only,
                linktype: linktype::of_interface(&cfg.iface)?,
                promiscuous: cfg.promiscuous,
            },
        )?,
    })
}

/// An opened sink; when it forwards, its live counters and how it transmits.
pub(super) struct OpenedSink {
    pub(super) sink: Box<dyn Sink>,
    pub(super) forward_counters: Option<AllForwardCounters>,
    pub(super) tx_path: Option<String>,
    /// The capture file created, if any, and how it is written.
    pub(super) output: Option<(PathBuf, savefile::WritePath)>,
}

/// Opens the sink of `q` queues: creates the output file and writes its header, or wraps
/// the forwarder's socket (transmitting from IN's UMEMs when `shares` holds them, unless
/// it also writes: the writer takes each chunk once its frames are sent, where the
/// shared-UMEM path holds chunks until OUT's completions).
pub(super) fn open_sink(
    cfg: &CaptureConfig,
    q: usize,
    spec: SinkSpec,
    opened: &Opened,
) -> Result<OpenedSink, CaptureError> {
    let (shares, linktype) = (&opened.shares, opened.linktype);
    Ok(match spec {
        SinkSpec::File(target, format) => {
            let out = open_output(cfg, target, format, linktype)?;
            OpenedSink {
                output: written(&out),
                sink: Box::new(FileSink::new(out)),
                forward_counters: None,
                tx_path: None,
            }
        }
        SinkSpec::Forward { mut setup, write } => {
            if write.is_none() {
                setup.share_umem(shares)?;
            }
            let tx_path = Some(setup.path());
            let write = write
                .map(|(target, format)| {
                    Ok::<_, CaptureError>(FileSink::new(open_output(
                        cfg, target, format, linktype,
                    )?))
                })
                .transpose()?;
            let output = write.as_ref().and_then(|w| written(&w.out));
            let (sink, counters) = ForwardSink::new(setup, q, write);
            OpenedSink {
                output,
                sink: Box::new(sink),
                forward_counters: Some(counters),
                tx_path,
            }
        }
    })
}

/// The file `out` created, and how it is written.
fn written(out: &savefile::Savefiles) -> Option<(PathBuf, savefile::WritePath)> {
    Some((out.path()?.to_path_buf(), out.write_path()?))
}

/// Opens the output and writes its header: the link type, and in pcapng the interface, its
/// filter, the OS and poolcap, as dumpcap's files say them.
fn open_output(
    cfg: &CaptureConfig,
    target: Output,
    format: FileFormat,
    linktype: LinkType,
) -> Result<savefile::Savefiles, CaptureError> {
    let header = FileHeader {
        if_filter: cfg.filter.clone(),
        os: os_description(),
        application: format!("poolcap {}", env!("CARGO_PKG_VERSION")),
        ..FileHeader::new(linktype, cfg.snaplen, &cfg.iface)
    };
    let spec = savefile::FileSpec {
        format,
        header,
        compress: cfg.compress,
        fsync: cfg.files.fsync,
        post_rotate: cfg.files.post_rotate.clone(),
        io: cfg.files.io,
        packet_buffered: cfg.files.packet_buffered,
        closed: cfg.files.closed.clone(),
        live_tail: cfg.files.live_tail,
        buffers: savefile::FileSpec::buffers(),
    };
    let stream = match target {
        Output::Stdout => Box::new(std::io::stdout()),
        Output::Sink(s) => s,
        Output::File(path) => return open_file(cfg, spec, path),
    };
    let w = spec.start(stream).map_err(CaptureError::Header)?;
    Ok(savefile::Savefiles::new(spec, w, None, None))
}

/// The running kernel as `uname -sr` says it (`Linux 6.1.0-18-amd64`), for pcapng's
/// `shb_os`; empty if /proc does not tell.
fn os_description() -> String {
    let read = |what| std::fs::read_to_string(format!("/proc/sys/kernel/{what}"));
    match (read("ostype"), read("osrelease")) {
        (Ok(os), Ok(release)) => format!("{} {}", os.trim(), release.trim()),
        _ => String::new(),
    }
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
    let (w, how) = match spec.open(&first) {
        Ok(opened) => opened,
        Err(WriteError::Io { source, .. }) => {
            return Err(CaptureError::Open {
                path: first,
                source,
            })
        }
        Err(e) => return Err(CaptureError::Header(e)),
    };
    Ok(savefile::Savefiles::new(
        spec,
        w,
        Some((first, how)),
        rotation,
    ))
}

/// What the threads share, decided before any starts.
pub(super) struct Plan {
    pub(super) counters: Arc<Vec<Arc<QueueCounters>>>,
    progress: Vec<Arc<Mutex<Progress>>>,
    /// The sink's input, when the pipeline has a sink.
    sink_input: Option<Arc<ArrayQueue<Chunk>>>,
    pub(super) worker_bells: Vec<Arc<Doorbell>>,
    /// Per queue, the bells of the workers serving it.
    queue_bells: Arc<Vec<Vec<Arc<Doorbell>>>>,
    pub(super) sink_bell: Arc<Doorbell>,
    cut: Arc<Cut>,
    pub(super) budget: Option<Arc<Budget>>,
    pub(super) write_failed: Arc<OnceLock<String>>,
    pub(super) written: Arc<writer::Written>,
}

impl Plan {
    pub(super) fn new<S>(cfg: &CaptureConfig, q: usize, pipeline: &Pipeline<S>) -> Self {
        let total_chunks = q * cfg.pool.chunks.max(1);
        let sink_input = pipeline
            .sink()
            .map(|_| Arc::new(ArrayQueue::new(total_chunks)));
        let w = pipeline.workers(cfg.workers);
        // One bell per worker, listed under each queue it serves, and one for the sink.
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
            sink_input,
            worker_bells,
            queue_bells: Arc::new(queue_bells),
            sink_bell: Arc::default(),
            cut: Arc::default(),
            budget: cfg.count.map(|n| Arc::new(Budget::new(n))),
            write_failed: Arc::default(),
            written: Arc::default(),
        }
    }

    /// Where the capture threads of `pipeline` hand what they take.
    fn handoff<S>(&self, pipeline: &Pipeline<S>) -> Handoff {
        match (pipeline, &self.sink_input) {
            (Pipeline::Count, _) => Handoff::InPlace { load: 0 },
            (Pipeline::InPlace { load }, _) => Handoff::InPlace { load: *load },
            (Pipeline::Direct(_), Some(input)) => Handoff::Sink {
                input: Arc::clone(input),
                bell: Arc::clone(&self.sink_bell),
            },
            _ => Handoff::Workers(Arc::clone(&self.queue_bells)),
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
    /// Every thread of `pipeline`, in the order they always started: capture threads, the
    /// sink, the workers.
    pub(super) fn all(
        &self,
        threads: &mut Threads,
        sources: Vec<Box<dyn Source>>,
        pipeline: Pipeline<Box<dyn Sink>>,
    ) -> Result<(), SysError> {
        let merged = pipeline.sink().is_some_and(|s| s.merges_queues()) && self.q > 1;
        let handoff = self.plan.handoff(&pipeline);
        let (analysis, sink) = pipeline.into_parts();
        let io = self.sink_io(threads);
        // One queue that only writes: its capture thread runs the writer (see `InlineWriter`),
        // unless its source keeps it busy.
        let inline =
            analysis.is_none() && self.q == 1 && !sources.iter().any(|s| s.works_per_packet());
        let (sink, writer) = match (sink, &io) {
            (Some(s), Some(io)) if inline => match s.inline(io) {
                Ok(w) => (None, Some(w)),
                Err(s) => (Some(s), None),
            },
            (sink, _) => (sink, None),
        };
        threads.inline_writer = writer.is_some();
        self.captures(threads, sources, &handoff, merged, writer)?;
        let next = self.sink(threads, sink, io)?;
        if let Some(a) = analysis {
            self.workers(threads, &a, &next)?;
        }
        Ok(())
    }

    /// One capture thread per source; `merged`: a writer merges the queues; `writer`: the
    /// one capture thread runs it.
    fn captures(
        &self,
        threads: &mut Threads,
        sources: Vec<Box<dyn Source>>,
        handoff: &Handoff,
        merged: bool,
        mut writer: Option<InlineWriter>,
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
                handoff: handoff.clone(),
                merged,
                stop: Arc::clone(&threads.stop),
                cut: Arc::clone(&plan.cut),
                budget: plan.budget.clone(),
                link_down: Arc::clone(self.link_down),
                writer: writer.take(),
            };
            let cpus = cfg.cpus.clone();
            let ending = threads.ending();
            let h = spawn(format!("capture-{i}"), "capture thread", move || {
                pin(&cpus, i);
                let end = t.run();
                ending.ended(end.result.is_ok());
                end
            })?;
            threads.captures.push(h);
        }
        Ok(())
    }

    /// What a sink is given, when the pipeline has one.
    fn sink_io(&self, threads: &Threads) -> Option<SinkIo> {
        let input = self.plan.sink_input.clone()?;
        Some(SinkIo {
            input,
            pools: Arc::clone(self.pools),
            progress: self.plan.progress.clone(),
            counters: Arc::clone(&self.plan.counters),
            workers_done: Arc::clone(&threads.workers_done),
            stop: threads.stopper(),
            bell: Arc::clone(&self.plan.sink_bell),
            limit: self.cfg.count,
            failed: Arc::clone(&self.plan.write_failed),
            written: Arc::clone(&self.plan.written),
        })
    }

    /// The sink's thread over `io`, if any; returns where workers pass chunks.
    fn sink(
        &self,
        threads: &mut Threads,
        sink: Option<Box<dyn Sink>>,
        io: Option<SinkIo>,
    ) -> Result<Next, SysError> {
        let (Some(sink), Some(io)) = (sink, io) else {
            return Ok(Next::Recycle);
        };
        let input = Arc::clone(&io.input);
        let name = sink.name();
        let h = spawn(name.into(), &format!("{name} thread"), move || sink.run(io))?;
        threads.sink = Some((name, h));
        Ok(Next::Write(input))
    }

    /// The workers, running `analysis` and passing chunks to `next`.
    fn workers(
        &self,
        threads: &mut Threads,
        analysis: &Analysis,
        next: &Next,
    ) -> Result<(), SysError> {
        let w = self.plan.worker_bells.len();
        for (i, bell) in self.plan.worker_bells.iter().enumerate() {
            let wk = Worker {
                queues: served_queues(i, w, self.q),
                pools: Arc::clone(self.pools),
                stage: analysis.stage(),
                next: next.clone(),
                captures_done: Arc::clone(&threads.captures_done),
                bell: Arc::clone(bell),
                writer_bell: Arc::clone(&self.plan.sink_bell),
            };
            let (cpus, q) = (self.cfg.cpus.clone(), self.q);
            let h = spawn(format!("worker-{i}"), "worker thread", move || {
                pin(&cpus, q + i);
                wk.run()
            })?;
            threads.workers.push(h);
        }
        Ok(())
    }
}

/// Pins the calling thread to the `i`-th of `cpus` (round robin), if any are given.
fn pin(cpus: &Option<Vec<usize>>, i: usize) {
    if let Some(list) = cpus.as_ref().filter(|l| !l.is_empty()) {
        core_affinity::set_for_current(core_affinity::CoreId {
            id: list[i % list.len()],
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::Output;

    fn file() -> Option<SinkSpec> {
        Some(SinkSpec::File(Output::Stdout, FileFormat::Pcap))
    }

    #[test]
    fn only_a_capture_that_just_writes_writes_from_the_ring() {
        let writes = Pipeline::choose(false, 0, None, file());
        assert!(writes_only(&writes));
        let analyses = Pipeline::choose(false, 1000, None, file());
        let counts = Pipeline::choose(false, 0, None, None);
        let in_place = Pipeline::choose(true, 0, None, file());
        assert!(!writes_only(&analyses), "workers keep the pool");
        assert!(!writes_only(&counts));
        assert!(!writes_only(&in_place));
    }
}
