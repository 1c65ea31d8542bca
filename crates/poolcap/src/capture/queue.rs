//! A capture queue's thread: takes batches from its [`Source`] (a fanout socket's ring or
//! an AF_XDP socket) into pool chunks, seals chunks into the capture queue the offload
//! policy picks, and gives frames that came home back to the kernel.
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
//! while the link is down the thread waits [`LINK_DOWN_WAIT`] at a time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use poolcap_sys::poll::Readiness;
use poolcap_sys::SysError;

use super::account::QueueCounters;
use super::doorbell::Doorbell;
use super::end::{Budget, Cut};
use super::policy::Policy;
use super::pool::{Chunk, Pool, Room};
use super::source::{now_ns, Filler, Source};

/// Longest wait for room while paused or full: bounds how late a stop or the kernel
/// statistics are seen (room itself wakes the thread at once).
const ROOM_WAIT: Duration = Duration::from_millis(20);

/// Longest wait when something is pending (an open chunk to seal, a watermark to move on,
/// frames to give back), and the longest adaptive sleep.
const PENDING_WAIT: Duration = Duration::from_millis(2);

/// Longest wait for packets when nothing is pending: bounds how late a stop is seen.
const IDLE_WAIT: Duration = Duration::from_millis(50);

/// Longest wait while the link is down: nothing can arrive, so only a stop (or the link
/// coming back, which makes packets readable at once) matters; a few wakeups a second.
pub const LINK_DOWN_WAIT: Duration = Duration::from_millis(250);

/// How the capture thread waits when the kernel has nothing for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WaitStrategy {
    /// Block in `poll()` until a block is retired.
    Poll,
    /// Spin on the block status word: no syscalls, one busy core per queue.
    Busy,
    /// Spin briefly, then sleep for a period that doubles while idle (up to the block
    /// timeout) and resets when packets come: few syscalls at high rates, little CPU at low.
    Adaptive,
}

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
    /// Process packets in the kernel ring instead of filling chunks (see `Filler::in_place`).
    pub in_place: Option<u32>,
    /// Hand sealed chunks straight to the file writer (no analysis, so no worker).
    pub direct: Option<Arc<crossbeam_queue::ArrayQueue<Chunk>>>,
    /// The bells of the workers serving each capture queue.
    pub queue_bells: Arc<Vec<Vec<Arc<Doorbell>>>>,
    /// The file writer's bell.
    pub writer_bell: Arc<Doorbell>,
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

    fn seal(&mut self, mut chunk: Chunk, seq: &mut u64, backlogs: &mut Vec<usize>) {
        chunk.seq = *seq;
        *seq += 1;
        let last = chunk.packets().last().map_or(0, |(m, _)| m.ts_ns);
        // Cannot fail: the writer queue holds every chunk of every pool, and a capture queue
        // every chunk of its buddy group.
        if let Some(writer) = &self.direct {
            let _ = writer.push(chunk);
            self.writer_bell.ring();
        } else {
            self.backlogs(backlogs);
            let target = self
                .policy
                .route(self.queue, backlogs, self.pool.size().chunks);
            if target != self.queue {
                let n = chunk.len() as u64;
                QueueCounters::add(&self.counters.offloaded_out, n);
                QueueCounters::add(&self.all_counters[target].offloaded_in, n);
            }
            self.pools[target].push_captured(chunk);
            for b in &self.queue_bells[target] {
                b.ring();
            }
        }
        QueueCounters::add(&self.counters.chunks, 1);
        let in_use = self.pool.in_use() as u64;
        self.counters.pool_peak.fetch_max(in_use, Ordering::Relaxed);
        let sealed = *seq;
        self.publish(|p| {
            p.sealed = sealed;
            p.watermark_ns = p.watermark_ns.max(last);
        });
    }

    /// True when the next batch the kernel holds would not fit in the open chunk and the free
    /// chunks (with a chunk to spare for packets larger than a cell): the capture thread then
    /// leaves it in the kernel ring, which buffers it until workers make room, instead of
    /// copying it out only to drop it. A batch larger than the whole pool is taken anyway.
    /// With this, the kernel ring extends the pool: the pool drops only what neither holds.
    fn short_of_room(&self, filler: &Filler) -> bool {
        if filler.in_place.is_some() {
            return false;
        }
        let Some(n) = self.source.next_batch_len() else {
            return false;
        };
        let size = self.pool.size();
        let open_room = filler
            .open
            .as_ref()
            .map_or(0, |c| size.cells.saturating_sub(c.len()));
        let room = open_room + self.pool.free_chunks() * size.cells;
        let need = n + size.cells;
        need > room && need <= size.cells * size.chunks
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

    /// Runs until stopped; then drains what the kernel still holds (waiting for the last
    /// partial block to become visible), seals the open chunk and reads the final statistics.
    pub fn run(mut self) -> Result<(), SysError> {
        let delay = self.source.visibility_delay();
        let mut filler = Filler::new(
            self.snaplen,
            self.pool.size().chunks,
            self.in_place,
            Arc::clone(&self.cut),
            self.budget.clone(),
        );
        let mut kernel = Kernel::default();
        let mut seq = 0u64;
        let mut stopping: Option<Instant> = None;
        let mut last_stats = Instant::now();
        let mut idle = Idle::new(self.source.coalesce());
        let mut backlogs = Vec::with_capacity(self.pools.len());
        let mut paused_since: Option<Instant> = None;
        self.pool.room_answered_by_this_thread();
        let result = loop {
            self.source.take_back(&self.pool);
            // Before looking at the pool: a chunk moving after this is not missed by a wait.
            let room_seen = self.pool.room_events();
            self.backlogs(&mut backlogs);
            let capacity = self.pool.size().chunks;
            let stopping_now = self.stop.load(Ordering::Relaxed);
            if stopping_now && stopping.is_none() {
                self.cut.fix(now_ns);
            }
            if self.budget.as_ref().is_some_and(|b| b.is_spent()) {
                break Ok(()); // the rest stays in the kernel, counted below
            }
            let pause = self.policy.pause(self.queue, &backlogs, capacity) && !stopping_now;
            match (pause, paused_since) {
                (true, None) => paused_since = Some(Instant::now()),
                (false, Some(t)) => {
                    QueueCounters::add(&self.counters.paused_ms, t.elapsed().as_millis() as u64);
                    paused_since = None;
                }
                _ => {}
            }
            if pause || (!stopping_now && self.short_of_room(&filler)) {
                // Leave the packets to the kernel, which counts what it cannot hold, and wake
                // when a worker makes room. The open chunk goes on, so that room can come.
                if let Some(c) = filler.open.take_if(|c| !c.is_empty()) {
                    self.seal(c, &mut seq, &mut backlogs);
                }
                let what = if pause {
                    Room::Backlog
                } else {
                    Room::FreeChunk
                };
                if self.pool.wait_for_room(what, room_seen, ROOM_WAIT) {
                    QueueCounters::add(&self.counters.syscalls, 1);
                }
            } else if self.source.take_batch(&self.pool, &mut filler) {
                self.publish_tally(&mut filler, &mut kernel);
                for c in filler.full.drain(..) {
                    self.seal(c, &mut seq, &mut backlogs);
                }
                idle.batch_taken();
            } else {
                if filler.open.as_ref().is_some_and(|c| {
                    !c.is_empty() && filler.open_since.elapsed() >= self.seal_after
                }) {
                    if let Some(c) = filler.open.take() {
                        self.seal(c, &mut seq, &mut backlogs);
                    }
                }
                if self.source.exhausted() {
                    break Ok(()); // a file read to its end
                }
                if filler.open.as_ref().is_none_or(Chunk::is_empty) {
                    // Packets not yet seen became visible at most one visibility delay ago
                    // (AF_PACKET: the open block retires after its timeout); allow the same
                    // again plus 5 ms for scheduling.
                    let mark = now_ns().saturating_sub(2 * delay.as_nanos() as u64 + 5_000_000);
                    self.publish(|p| p.watermark_ns = p.watermark_ns.max(mark));
                }
                if stopping_now {
                    let since = *stopping.get_or_insert_with(Instant::now);
                    // The kernel retires a block up to one timer tick late.
                    let margin = Duration::from_millis(10).max(delay / 4);
                    if since.elapsed() > 2 * delay + margin {
                        break Ok(());
                    }
                }
                // Wake in time to seal an open chunk, to move the watermark on for a writer
                // that merges queues, or to give frames that come home back to the kernel
                // (AF_XDP); otherwise only packets (or a stop) matter.
                let open = filler.open.as_ref().is_some_and(|c| !c.is_empty());
                let frames_out = self.source.refills_from_pool() && self.pool.in_use() > 0;
                let soon = delay
                    .max(Duration::from_millis(1))
                    .min(self.seal_after.max(PENDING_WAIT));
                let wait_for = if open || self.merged || frames_out {
                    soon
                } else {
                    IDLE_WAIT
                };
                if let Err(e) = self.wait(wait_for, soon, &mut idle) {
                    break Err(e);
                }
            }
            if last_stats.elapsed() >= Duration::from_millis(100) {
                last_stats = Instant::now();
                if let Err(e) = self.read_kernel_stats(&mut kernel) {
                    break Err(e);
                }
            }
        };
        if let Some(t) = paused_since {
            QueueCounters::add(&self.counters.paused_ms, t.elapsed().as_millis() as u64);
        }
        match filler.open.take() {
            Some(c) if !c.is_empty() => self.seal(c, &mut seq, &mut backlogs),
            Some(c) => self.pool.recycle(c),
            None => {}
        }
        let left = self.source.let_go_ready();
        let stats = self.read_kernel_stats(&mut kernel);
        // What the kernel put into the ring and this thread did not take: past the cut or
        // the count limit, still in the ring.
        let residue = kernel.received.saturating_sub(kernel.taken);
        QueueCounters::add(&self.counters.not_taken, left + residue);
        self.publish(|p| {
            p.watermark_ns = u64::MAX;
        });
        result.and(stats)
    }

    /// Waits for packets: a blocking wait up to `timeout`; adaptive sleeps grow to
    /// `longest_sleep` at most (a sleep cannot be cut short by packets, so it stays short).
    fn wait(
        &self,
        timeout: Duration,
        longest_sleep: Duration,
        idle: &mut Idle,
    ) -> Result<(), SysError> {
        let after_batch = std::mem::take(&mut idle.after_batch);
        if self.link_down.load(Ordering::Relaxed) {
            QueueCounters::add(&self.counters.syscalls, 1);
            self.source.poll(LINK_DOWN_WAIT)?;
            return Ok(());
        }
        let readiness = match self.wait {
            WaitStrategy::Poll if after_batch && !idle.coalesce.is_zero() => {
                // Let frames gather instead of waking per frame: the kernel keeps filling
                // the ring on its own unless it asked for a wakeup.
                let r = self.kick_if_asked()?;
                QueueCounters::add(&self.counters.syscalls, 1);
                std::thread::sleep(idle.coalesce);
                r
            }
            WaitStrategy::Poll => {
                QueueCounters::add(&self.counters.syscalls, 1);
                self.source.poll(timeout)?
            }
            WaitStrategy::Busy => {
                let r = self.kick_if_asked()?;
                for _ in 0..256 {
                    std::hint::spin_loop();
                }
                r
            }
            WaitStrategy::Adaptive => {
                let spin_until = Instant::now() + Duration::from_micros(20);
                while Instant::now() < spin_until {
                    std::hint::spin_loop();
                }
                QueueCounters::add(&self.counters.syscalls, 1);
                let r = if self.source.needs_wakeup() {
                    self.source.poll(idle.sleep)?
                } else {
                    std::thread::sleep(idle.sleep);
                    Readiness::Idle
                };
                idle.sleep = (idle.sleep * 2).min(longest_sleep.max(idle.first_sleep()));
                r
            }
        };
        if readiness == Readiness::LinkDown {
            // The error is cleared; wait long until packets or the supervisor say otherwise.
            self.link_down.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Makes the syscall the kernel asked for (AF_XDP need_wakeup), without waiting.
    fn kick_if_asked(&self) -> Result<Readiness, SysError> {
        if self.source.needs_wakeup() {
            QueueCounters::add(&self.counters.syscalls, 1);
            return self.source.poll(Duration::ZERO);
        }
        Ok(Readiness::Idle)
    }
}

/// What the kernel put into the ring and what the thread took from it, over the capture.
#[derive(Debug, Default)]
struct Kernel {
    received: u64,
    taken: u64,
}

/// What waiting remembers between waits: adaptive waiting's current sleep, and whether the
/// last look found packets (a source that does not batch in the kernel then gets time to
/// gather some: see [`Source::coalesce`]).
#[derive(Debug)]
struct Idle {
    sleep: Duration,
    after_batch: bool,
    coalesce: Duration,
}

impl Idle {
    fn new(coalesce: Duration) -> Self {
        let mut idle = Self {
            sleep: Duration::ZERO,
            after_batch: false,
            coalesce,
        };
        idle.sleep = idle.first_sleep();
        idle
    }

    /// Adaptive waiting's first sleep after packets: short where the kernel batches
    /// (AF_PACKET blocks), a share of the coalescing time where it does not.
    fn first_sleep(&self) -> Duration {
        (self.coalesce / 4).max(Duration::from_micros(50))
    }

    fn batch_taken(&mut self) {
        self.after_batch = true;
        self.sleep = self.first_sleep();
    }
}
