//! Where processed chunks end: the [`Sink`] trait and its two sinks, the file writer
//! ([`FileSink`], `writer`) and the forwarder ([`ForwardSink`], `forward`).
//!
//! Why a trait: the engine starts, feeds and stops every sink the same way (one thread that
//! takes chunks from one input queue, sends them home to their pools, and ends once the
//! workers are done), so a new sink is one type here, not a new path through the start-up.
//! Counting only is no sink at all (see `pipeline`): chunks go home from the capture thread
//! or the worker. Each sink is a thin adapter: the writer and the forwarder keep their own
//! modules and their own loops.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};

use crossbeam_queue::ArrayQueue;
use poolcap_format::{FileFormat, IfStats};

use super::account::{self, QueueCounters};
use super::doorbell::Doorbell;
use super::forward::{AllForwardCounters, ForwardSetup, Forwarder};
use super::pool::{Chunk, Pool};
use super::queue::Progress;
use super::savefile::Savefiles;
use super::writer::{self, FileWriter, WriterOutcome};
use super::Output;

/// What a sink thread is given by the engine.
#[derive(Debug)]
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
    /// Set to stop the capture.
    pub stop: Arc<AtomicBool>,
    /// Rung when a chunk arrives.
    pub bell: Arc<Doorbell>,
    /// The count limit (`-c`).
    pub limit: Option<u64>,
    /// Set, once, to the first write error.
    pub failed: Arc<OnceLock<String>>,
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
}

/// A sink as the command line describes it, before it is opened (the output file is
/// created only once the input is open, so a bad argument never truncates a file).
pub enum SinkSpec {
    /// A capture file (or a rotated set) in this format.
    File(Output, FileFormat),
    /// Another interface.
    Forward(ForwardSetup),
}

impl SinkSpec {
    /// True when packets must leave at once (a forwarder: its input's delay is the
    /// forwarding latency).
    pub fn forwards(&self) -> bool {
        matches!(self, Self::Forward(_))
    }

    /// The file format packets are written in, if they are (chunks keep room for records).
    pub fn records(&self) -> Option<FileFormat> {
        match self {
            Self::File(_, format) => Some(*format),
            Self::Forward(_) => None,
        }
    }
}

/// Writes chunks into capture files, merging the queues in timestamp order.
#[derive(Debug)]
pub struct FileSink(pub Savefiles);

impl Sink for FileSink {
    fn name(&self) -> &'static str {
        "writer"
    }

    fn merges_queues(&self) -> bool {
        true
    }

    fn run(self: Box<Self>, io: SinkIo) -> Option<WriterOutcome> {
        let fw = FileWriter {
            out: self.0,
            input: io.input,
            pools: io.pools,
            progress: io.progress,
            workers_done: io.workers_done,
            limit: io.limit,
            stop: io.stop,
            bell: io.bell,
            batch_bytes: writer::BATCH_BYTES,
            failed: io.failed,
        };
        let counters = io.counters;
        Some(fw.run(move || if_stats(&counters)))
    }
}

/// Sends chunks out of another interface, each flow in its arrival order.
#[derive(Debug)]
pub struct ForwardSink {
    setup: ForwardSetup,
    counters: AllForwardCounters,
}

impl ForwardSink {
    /// A forwarder for `queues` queues, and its live counters.
    pub fn new(setup: ForwardSetup, queues: usize) -> (Self, AllForwardCounters) {
        let counters: AllForwardCounters =
            Arc::new((0..queues).map(|_| Default::default()).collect());
        let sink = Self {
            setup,
            counters: Arc::clone(&counters),
        };
        (sink, counters)
    }
}

impl Sink for ForwardSink {
    fn name(&self) -> &'static str {
        "forwarder"
    }

    fn run(self: Box<Self>, io: SinkIo) -> Option<WriterOutcome> {
        Forwarder {
            setup: self.setup,
            input: io.input,
            pools: io.pools,
            counters: self.counters,
            workers_done: io.workers_done,
            bell: io.bell,
        }
        .run();
        None
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
