//! A capture queue's thread: takes batches from its [`Source`] (a fanout socket's ring or
//! an AF_XDP socket) into pool chunks, seals chunks into the capture queue the offload
//! policy picks, and gives frames that came home back to the kernel.
//!
//! The thread is a shell: each turn it observes (stop flag, backlogs, room, the clock) and
//! performs what [`decide::Loop`] answers (take, hold, seal, wait, finish); every decision
//! described below is made there, so it is unit-tested and simulated as it runs here.
//!
//! The capture thread is the only writer of its queue's counters and the only taker of free
//! chunks from its pool. It seals a chunk when it is full, or when the kernel is idle and the
//! chunk has been open for `seal_after`, so low rates are not delayed. After sealing it
//! publishes its [`Progress`]: how many chunks it has sealed and a timestamp watermark below
//! which it will produce no more packets, which the file writer needs to merge queues in
//! timestamp order.
//!
//! Stopping: the thread fixes the shared cut (see `end`) when it first sees the stop flag,
//! then drains its ring of every packet received up to the cut. When the count limit is
//! spent it stops taking at once. Either way what the kernel received and the thread did
//! not take is counted as `not_taken` at the end, so the accounting adds up.
//!
//! A socket whose interface goes down reports `ENETDOWN` once (see `poolcap_sys::poll`);
//! while the link is down the thread waits [`decide::LINK_DOWN_WAIT`] at a time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use poolcap_sys::poll::Readiness;
use poolcap_sys::SysError;

use super::account::QueueCounters;
use super::decide::{self, Begin, Block, Look, Loop, Pause, Quiet, Spin, Step, Then, Wait};
use super::end::{Budget, Cut};
use super::pipeline::Handoff;
use super::policy::Policy;
use super::pool::{Chunk, Pool};
use super::source::{now_ns, Filler, Source};
use super::writer::{InlineWriter, WriterOutcome};
use super::CaptureError;

pub use poolcap_core::wait::WaitStrategy;

/// What a capture thread has handed on so far (see the module docs).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Chunks sealed into the capture queue.
    pub sealed: u64,
    /// No packet with a smaller timestamp will come from this queue after the sealed ones
    /// (`u64::MAX` once the thread has finished).
    pub watermark_ns: u64,
}

/// Everything a capture thread needs.
#[derive(Debug)]
pub struct CaptureThread {
    /// Receive queue index.
    pub queue: usize,
    /// Where packets come from.
    pub source: Box<dyn Source>,
    /// This queue's pool.
    pub pool: Arc<Pool>,
    /// Every queue's pool (a chunk may be routed to a buddy's capture queue).
    pub pools: Arc<Vec<Arc<Pool>>>,
    /// This queue's counters.
    pub counters: Arc<QueueCounters>,
    /// Every queue's counters (for `offloaded_in`).
    pub all_counters: Arc<Vec<Arc<QueueCounters>>>,
    /// The offload policy of this queue.
    pub policy: Box<dyn Policy>,
    /// Published progress.
    pub progress: Arc<Mutex<Progress>>,
    /// Waiting strategy.
    pub wait: WaitStrategy,
    /// Seal an open chunk after this long when the ring is idle.
    pub seal_after: Duration,
    /// Bytes kept per packet.
    pub snaplen: usize,
    /// Where packets go once taken (the pipeline's first hop).
    pub handoff: Handoff,
    /// A file writer merges this queue with others, so it needs the watermark to move on
    /// while the queue is idle.
    pub merged: bool,
    /// Set to stop.
    pub stop: Arc<AtomicBool>,
    /// The stop's cut, shared by the queues.
    pub cut: Arc<Cut>,
    /// The count limit (`-c`), shared by the queues.
    pub budget: Option<Arc<Budget>>,
    /// True while the interface is down (set by the supervisor, and on `ENETDOWN`).
    pub link_down: Arc<AtomicBool>,
    /// The file writer, when this thread runs it itself after each turn (one queue that
    /// only writes; see [`InlineWriter`]). Its chunks still go through the sink's input.
    pub writer: Option<InlineWriter>,
}

/// How a capture thread ended: its failure, if any, and what its inline writer wrote.
#[derive(Debug)]
pub struct CaptureEnd {
    /// `Err`: the thread or its source failed (the capture stops; what was taken is drained
    /// and written).
    pub result: Result<(), CaptureError>,
    /// What the inline writer wrote, when the thread ran one.
    pub written: Option<WriterOutcome>,
}

/// The shell's state between turns.
struct Turns {
    /// The loop's clock starts here.
    t0: Instant,
    decide: Loop,
    filler: Filler,
    kernel: Kernel,
    seq: u64,
    backlogs: Vec<usize>,
}

impl Turns {
    fn now(&self) -> Duration {
        self.t0.elapsed()
    }
}

impl CaptureThread {
    fn publish(&self, f: impl FnOnce(&mut Progress)) {
        if let Ok(mut p) = self.progress.lock() {
            f(&mut p);
        }
    }

    fn backlogs(&self, scratch: &mut Vec<usize>) {
        scratch.clear();
        scratch.extend(self.pools.iter().map(|p| p.backlog()));
    }

    fn seal(&self, mut chunk: Chunk, t: &mut Turns) {
        chunk.seq = t.seq;
        t.seq += 1;
        let last = chunk
            .len()
            .checked_sub(1)
            .map_or(0, |i| chunk.meta(i).ts_ns);
        // Cannot fail: the sink's queue holds every chunk of every pool, and a capture queue
        // every chunk of its buddy group.
        match &self.handoff {
            Handoff::Sink { input, bell } => {
                let _ = input.push(chunk);
                bell.ring();
            }
            // Packets processed in place fill no chunk, so none is sealed; one would go home.
            Handoff::InPlace { .. } => self.pool.recycle(chunk),
            Handoff::Workers(queue_bells) => {
                self.backlogs(&mut t.backlogs);
                let target = t.decide.route(&t.backlogs);
                if target != self.queue {
                    let n = chunk.len() as u64;
                    QueueCounters::add(&self.counters.offloaded_out, n);
                    QueueCounters::add(&self.all_counters[target].offloaded_in, n);
                }
                self.pools[target].push_captured(chunk);
                for b in &queue_bells[target] {
                    b.ring();
                }
            }
        }
        QueueCounters::add(&self.counters.chunks, 1);
        let in_use = self.pool.in_use() as u64;
        self.counters.pool_peak.fetch_max(in_use, Ordering::Relaxed);
        let sealed = t.seq;
        self.publish(|p| {
            p.sealed = sealed;
            p.watermark_ns = p.watermark_ns.max(last);
        });
    }

    /// Adds the kernel's counters since the last read to the queue's and to `kernel`.
    fn read_kernel_stats(&mut self, kernel: &mut Kernel) -> Result<(), SysError> {
        let d = self.source.kernel_drops()?;
        QueueCounters::add(&self.counters.dropped_kernel, d.kernel);
        QueueCounters::add(&self.counters.dropped_pool, d.pool);
        QueueCounters::add(&self.counters.freezes, d.freezes);
        if let Some(r) = d.received {
            kernel.received += r;
        }
        Ok(())
    }

    /// Publishes what the last batch did; adds what it took from the kernel to `kernel`.
    fn publish_tally(&self, filler: &mut Filler, kernel: &mut Kernel) {
        let t = std::mem::take(&mut filler.tally);
        kernel.taken += t.taken();
        QueueCounters::add(&self.counters.captured, t.captured);
        QueueCounters::add(&self.counters.bytes, t.bytes);
        QueueCounters::add(&self.counters.dropped_pool, t.dropped_pool);
        QueueCounters::add(&self.counters.filtered, t.filtered);
        QueueCounters::add(&self.counters.not_taken, t.not_taken);
    }

    fn add_paused(&self, d: Duration) {
        QueueCounters::add(&self.counters.paused_ms, d.as_millis() as u64);
    }

    /// Runs until stopped; then drains what the kernel still holds (waiting for the last
    /// partial block to become visible), seals the open chunk, reads the final statistics
    /// and, running the writer, writes the rest and closes the file.
    pub fn run(mut self) -> CaptureEnd {
        let t0 = Instant::now();
        let setup = decide::Setup {
            queue: self.queue,
            pool: self.pool.size(),
            in_place: self.handoff.in_place().is_some(),
            wait: self.wait,
            seal_after: self.seal_after,
            visibility_delay: self.source.visibility_delay(),
            coalesce: self.source.coalesce(),
            merged: self.merged,
        };
        let policy = std::mem::replace(&mut self.policy, Box::new(super::policy::Basic));
        let mut t = Turns {
            t0,
            decide: Loop::new(setup, policy, Duration::ZERO),
            filler: Filler::new(
                self.snaplen,
                setup.pool.chunks,
                self.handoff.in_place(),
                Arc::clone(&self.cut),
                self.budget.clone(),
            ),
            kernel: Kernel::default(),
            seq: 0,
            backlogs: Vec::with_capacity(self.pools.len()),
        };
        self.pool.room_answered_by_this_thread();
        let result = loop {
            let turn = self.turn(&mut t);
            if let Some(w) = &mut self.writer {
                w.pump();
            }
            match turn {
                Ok(true) => {}
                Ok(false) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        let writer = self.writer.take();
        let result = self.end(t, result);
        CaptureEnd {
            result,
            written: writer.map(InlineWriter::finish),
        }
    }

    /// One turn: see `decide`. False once the capture is over.
    fn turn(&mut self, t: &mut Turns) -> Result<bool, SysError> {
        self.source.take_back(&self.pool);
        // Before looking at the pool: a chunk moving after this is not missed by a wait.
        let room_seen = self.pool.room_events();
        self.backlogs(&mut t.backlogs);
        let stop = self.stop.load(Ordering::Relaxed);
        let now = t.now();
        let Begin {
            fix_cut,
            pause,
            step,
        } = t
            .decide
            .begin(now, &self.look(&t.filler, &t.backlogs, stop));
        if fix_cut {
            self.cut.fix(now_ns);
        }
        if let Pause::Ended(d) = pause {
            self.add_paused(d);
        }
        match step {
            Step::Finish => return Ok(false),
            Step::Hold(what) => {
                // Leave the packets to the kernel, which counts what it cannot hold, and wake
                // when a worker makes room. The open chunk goes on, so that room can come;
                // an inline writer makes it now (the wait then returns at once).
                if let Some(c) = t.filler.open.take_if(|c| !c.is_empty()) {
                    self.seal(c, t);
                }
                if let Some(w) = &mut self.writer {
                    w.pump();
                }
                if self.pool.wait_for_room(what, room_seen, decide::ROOM_WAIT) {
                    QueueCounters::add(&self.counters.syscalls, 1);
                }
            }
            Step::Take if self.source.take_batch(&self.pool, &mut t.filler) => {
                self.publish_tally(&mut t.filler, &mut t.kernel);
                let mut full = std::mem::take(&mut t.filler.full);
                for c in full.drain(..) {
                    self.seal(c, t);
                }
                t.filler.full = full;
                t.decide.took();
            }
            Step::Take => {
                if !self.quiet(t, stop)? {
                    return Ok(false);
                }
            }
        }
        if t.decide.stats_due(now) {
            self.read_kernel_stats(&mut t.kernel)?;
        }
        Ok(true)
    }

    /// What the loop looks at before a batch.
    fn look<'a>(&self, filler: &Filler, backlogs: &'a [usize], stop: bool) -> Look<'a> {
        Look {
            stop,
            budget_spent: self.budget.as_ref().is_some_and(|b| b.is_spent()),
            backlogs,
            next_batch: if filler.in_place.is_some() {
                None
            } else {
                self.source.next_batch_len()
            },
            open: filler.open.as_ref().map(Chunk::len),
            free_chunks: self.pool.free_chunks(),
        }
    }

    /// The source had nothing: seal, move the watermark on, wait or end as `decide` says.
    /// False once the capture is over.
    fn quiet(&mut self, t: &mut Turns, stop: bool) -> Result<bool, SysError> {
        let f = &t.filler;
        let q = Quiet {
            stop,
            open_len: f.open.as_ref().map_or(0, Chunk::len),
            open_since: f.open_since.saturating_duration_since(t.t0),
            exhausted: self.source.exhausted(),
            frames_out: self.source.refills_from_pool() && self.pool.in_use() > 0,
            link_down: self.link_down.load(Ordering::Relaxed),
            needs_wakeup: self.source.needs_wakeup(),
        };
        let idle = t.decide.quiet(t.now(), &q);
        if idle.seal_open {
            if let Some(c) = t.filler.open.take() {
                self.seal(c, t);
            }
        }
        if let Some(lag) = idle.watermark_lag {
            let mark = now_ns().saturating_sub(lag.as_nanos() as u64);
            self.publish(|p| p.watermark_ns = p.watermark_ns.max(mark));
        }
        match idle.then {
            Then::Finish => Ok(false),
            Then::Wait(w) => self.wait(w).map(|()| true),
        }
    }

    /// Waits as `decide` said: every kick and block is a syscall.
    fn wait(&self, w: Wait) -> Result<(), SysError> {
        let mut readiness = Readiness::Idle;
        if w.kick {
            QueueCounters::add(&self.counters.syscalls, 1);
            readiness = self.source.poll(Duration::ZERO)?;
        }
        match w.spin {
            Spin::No => {}
            Spin::Times(n) => (0..n).for_each(|_| std::hint::spin_loop()),
            Spin::For(d) => {
                let until = Instant::now() + d;
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
            }
        }
        match w.block {
            Block::No => {}
            Block::Poll(d) => {
                QueueCounters::add(&self.counters.syscalls, 1);
                readiness = self.source.poll(d)?;
            }
            Block::Sleep(d) => {
                QueueCounters::add(&self.counters.syscalls, 1);
                std::thread::sleep(d);
            }
        }
        if readiness == Readiness::LinkDown {
            // The error is cleared; wait long until packets or the supervisor say otherwise.
            self.link_down.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// After the last turn: seals the open chunk, lets go of what the source still holds,
    /// reads the final statistics and counts what the kernel received and this thread did
    /// not take as `not_taken`; a kernel error comes before the source's own.
    fn end(mut self, mut t: Turns, result: Result<(), SysError>) -> Result<(), CaptureError> {
        if let Some(d) = t.decide.finish(t.now()) {
            self.add_paused(d);
        }
        match t.filler.open.take() {
            Some(c) if !c.is_empty() => self.seal(c, &mut t),
            Some(c) => self.pool.recycle(c),
            None => {}
        }
        let left = self.source.let_go_ready();
        let stats = self.read_kernel_stats(&mut t.kernel);
        // What the kernel put into the ring and this thread did not take: past the cut or
        // the count limit, still in the ring.
        let residue = t.kernel.received.saturating_sub(t.kernel.taken);
        QueueCounters::add(&self.counters.not_taken, left + residue);
        self.publish(|p| {
            p.watermark_ns = u64::MAX;
        });
        let ended = self.source.finish();
        let queue = self.queue;
        result
            .and(stats)
            .map_err(|source| CaptureError::Thread { queue, source })
            .and(ended)
    }
}

/// What the kernel put into the ring and what the thread took from it, over the capture.
#[derive(Debug, Default)]
struct Kernel {
    received: u64,
    taken: u64,
}
