//! Where processed chunks end: the [`Sink`] trait and its two sinks, the file writer
//! ([`FileSink`], `writer`) and the forwarder ([`ForwardSink`], `forward`).
//!
//! Why a trait: the engine starts, feeds and stops every sink the same way (one thread that
//! takes chunks from one input queue, sends them home to their pools, and ends once the
//! workers are done), so a new sink is one type here, not a new path through the start-up.
//! One exception: a single queue that only writes runs the file writer on its capture thread
//! ([`Sink::inline`], see `writer::InlineWriter`), fed through the same input queue.
//! Counting only is no sink at all (see `pipeline`): chunks go home from the capture thread
//! or the worker. Each sink is a thin adapter: the writer and the forwarder keep their own
//! modules and their own loops.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};

use crossbeam_queue::ArrayQueue;
use poolcap_format::{FileFormat, IfStats};

use super::account::{self, QueueCounters};
use super::config::Output;
use super::doorbell::Doorbell;
use super::forward::{AllForwardCounters, ForwardSetup, Forwarder, WriteFeed};
use super::pool::{Chunk, Pool};
use super::progress::Progress;
use super::savefile::{Savefiles, WritePath};
use super::wakeup::Stopper;
use super::writer::{self, FileWriter, InlineWriter, WriterOutcome, Written};

/// What a sink thread is given by the engine.
#[derive(Debug, Clone)]
pub struct SinkIo {
    /// Chunks to take (room for every chunk of every pool).
    pub input: Arc<ArrayQueue<Chunk>>,
    /// Every pool, to send chunks home.
    pub pools: Arc<Vec<Arc<Pool>>>,
    /// The capture threads' progress, by queue.
    pub progress: Vec<Arc<Mutex<Progress>>>,
    /// The capture counters, by queue.
    pub counters: Arc<Vec<Arc<QueueCounters>>>,
    /// Set when every worker has finished: nothing more will arrive.
    pub workers_done: Arc<AtomicBool>,
    /// Stops the capture.
    pub stop: Stopper,
    /// Rung when a chunk arrives.
    pub bell: Arc<Doorbell>,
    /// The count limit (`-c`).
    pub limit: Option<u64>,
    /// Set, once, to the first write error.
    pub failed: Arc<OnceLock<String>>,
    /// What the file writer has written so far.
    pub written: Arc<Written>,
}

/// See the module docs.
pub trait Sink: Send + std::fmt::Debug {
    /// The thread's name.
    fn name(&self) -> &'static str;

    /// True when the sink merges the queues in timestamp order, so every capture thread must
    /// move its watermark on while idle.
    fn merges_queues(&self) -> bool {
        false
    }

    /// Takes chunks until the workers are done and every chunk is handled; a sink that
    /// writes files says what it wrote.
    fn run(self: Box<Self>, io: SinkIo) -> Option<WriterOutcome>;

    /// The sink as a writer that the one capture thread runs itself between batches, when
    /// the sink can be one (a file; see [`writer::InlineWriter`]); `Err` gives it back.
    fn inline(self: Box<Self>, io: &SinkIo) -> Result<InlineWriter, Box<dyn Sink>>;
}

/// A sink as the command line describes it, before it is opened (the output file is
/// created only once the input is open, so a bad argument never truncates a file).
pub enum SinkSpec {
    /// A capture file (or a rotated set) in this format.
    File(Output, FileFormat),
    /// Another interface; with `write`, also a capture file of what was sent.
    Forward {
        /// OUT's transmit path and the drop rule.
        setup: ForwardSetup,
        /// `-w`: where and in which format to write what was forwarded.
        write: Option<(Output, FileFormat)>,
    },
}

impl SinkSpec {
    /// True when packets must leave at once (a forwarder: its input's delay is the
    /// forwarding latency).
    pub fn forwards(&self) -> bool {
        matches!(self, Self::Forward { .. })
    }

    /// The file format packets are written in, if they are (chunks keep room for records).
    pub fn records(&self) -> Option<FileFormat> {
        match self {
            Self::File(_, format)
            | Self::Forward {
                write: Some((_, format)),
                ..
            } => Some(*format),
            Self::Forward { write: None, .. } => None,
        }
    }
}

/// Writes chunks into capture files, merging the queues in timestamp order.
#[derive(Debug)]
pub struct FileSink {
    /// The files.
    pub out: Savefiles,
    /// Written with O_DIRECT: larger, aligned writes.
    pub direct: bool,
}

impl FileSink {
    /// Writes to `out`, in batches sized for how its first file is written.
    pub fn new(out: Savefiles) -> Self {
        let direct = out.write_path() == Some(WritePath::Direct);
        FileSink { out, direct }
    }
}

impl Sink for FileSink {
    fn name(&self) -> &'static str {
        "writer"
    }

    fn merges_queues(&self) -> bool {
        true
    }

    fn run(self: Box<Self>, io: SinkIo) -> Option<WriterOutcome> {
        let counters = Arc::clone(&io.counters);
        Some(self.writer(io).run(move || if_stats(&counters)))
    }

    fn inline(self: Box<Self>, io: &SinkIo) -> Result<InlineWriter, Box<dyn Sink>> {
        let counters = Arc::clone(&io.counters);
        let stats = Box::new(move || if_stats(&counters));
        Ok(self.writer(io.clone()).inline(stats))
    }
}

impl FileSink {
    /// The file writer over `io`.
    fn writer(self, io: SinkIo) -> FileWriter {
        FileWriter {
            out: self.out,
            input: io.input,
            pools: io.pools,
            progress: io.progress,
            workers_done: io.workers_done,
            limit: io.limit,
            stop: io.stop,
            bell: io.bell,
            batch_bytes: writer::batch_bytes(self.direct),
            min_write: writer::min_write(self.direct),
            failed: io.failed,
            written: io.written,
        }
    }
}

/// Sends chunks out of another interface, each flow in its arrival order; with `-w`, a
/// file writer behind it takes what was sent (see `forward::WriteFeed`).
#[derive(Debug)]
pub struct ForwardSink {
    setup: ForwardSetup,
    counters: AllForwardCounters,
    write: Option<FileSink>,
}

impl ForwardSink {
    /// A forwarder for `queues` queues (writing what it sent to `write`), and its live
    /// counters.
    pub fn new(
        setup: ForwardSetup,
        queues: usize,
        write: Option<FileSink>,
    ) -> (Self, AllForwardCounters) {
        let counters: AllForwardCounters =
            Arc::new((0..queues).map(|_| Default::default()).collect());
        let sink = Self {
            setup,
            counters: Arc::clone(&counters),
            write,
        };
        (sink, counters)
    }
}

impl Sink for ForwardSink {
    fn name(&self) -> &'static str {
        "forwarder"
    }

    /// With `-w` the writer merges what was sent by the capture threads' watermarks.
    fn merges_queues(&self) -> bool {
        self.write.is_some()
    }

    fn run(self: Box<Self>, io: SinkIo) -> Option<WriterOutcome> {
        let this = *self;
        let Some(file) = this.write else {
            forwarder(this.setup, this.counters, io, None).run();
            return None;
        };
        // The writer runs beside the forwarder, fed with what it sent; it ends once the
        // forwarder has passed on its last chunk.
        let feed = WriteFeed::new(io.progress.clone(), io.input.capacity());
        let writer_io = SinkIo {
            input: Arc::clone(&feed.chunks),
            progress: feed.progress.clone(),
            workers_done: Arc::clone(&feed.done),
            bell: Arc::clone(&feed.bell),
            pools: Arc::clone(&io.pools),
            counters: Arc::clone(&io.counters),
            stop: io.stop.clone(),
            limit: io.limit,
            failed: Arc::clone(&io.failed),
            written: Arc::clone(&io.written),
        };
        let failed = Arc::clone(&io.failed);
        let writer = std::thread::Builder::new()
            .name("writer".into())
            .spawn(move || Box::new(file).run(writer_io));
        match writer {
            Ok(writer) => {
                forwarder(this.setup, this.counters, io, Some(feed)).run();
                writer.join().ok().flatten()
            }
            Err(e) => {
                // Forward anyway; the write error is reported as any other.
                let _ = failed.set(format!("cannot start the writer thread: {e}"));
                forwarder(this.setup, this.counters, io, None).run();
                None
            }
        }
    }

    /// The forwarder sends at once, on its own thread: never inline.
    fn inline(self: Box<Self>, _io: &SinkIo) -> Result<InlineWriter, Box<dyn Sink>> {
        Err(self)
    }
}

/// The forwarder of `setup` over `io`'s chunks.
fn forwarder(
    setup: ForwardSetup,
    counters: AllForwardCounters,
    io: SinkIo,
    write: Option<WriteFeed>,
) -> Forwarder {
    Forwarder {
        setup,
        input: io.input,
        pools: io.pools,
        counters,
        workers_done: io.workers_done,
        bell: io.bell,
        write,
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
