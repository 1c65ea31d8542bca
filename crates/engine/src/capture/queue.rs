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
use std::time::Duration;

use poolcap_core::decide::{self, Begin, Block, Look, Loop, Pause, Quiet, Spin, Step, Then, Wait};
use poolcap_core::policy::{Basic, Policy};
use poolcap_sys::poll::Readiness;
use poolcap_sys::SysError;

use super::account::QueueCounters;
use super::clock::{Clock, RealClock};
use super::end::{Budget, Cut};
use super::error::CaptureError;
use super::pipeline::Handoff;
use super::pool::{Chunk, Pool};
use super::progress::Progress;
use super::source::{Filler, Source};
use super::writer::{InlineWriter, WriterOutcome};

pub use poolcap_core::wait::WaitStrategy;

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
struct Turns<C> {
    /// The loop's time, and how the shell waits.
    clock: C,
    decide: Loop,
    filler: Filler,
    kernel: Kernel,
    seq: u64,
    backlogs: Vec<usize>,
    /// The filler's chunks opened as of the last look, and when the last one was seen.
    opened: u64,
    open_since: Duration,
}

impl<C: Clock> Turns<C> {
    fn now(&self) -> Duration {
        self.clock.now()
    }

    /// Notes the time of a chunk the filler opened in the batch just taken.
    fn saw_batch(&mut self) {
        if self.filler.opened != self.opened {
            self.opened = self.filler.opened;
            self.open_since = self.clock.now();
        }
    }
}

/// A capture thread ready to turn on its clock: [`CaptureThread::run`] turns it on the
/// machine's clocks until the capture is over; a test turns it one turn at a time in
/// virtual time.
pub(crate) struct Shell<C> {
    thread: CaptureThread,
    turns: Turns<C>,
    result: Option<Result<(), SysError>>,
}

impl<C: Clock> Shell<C> {
    /// One turn, then the inline writer's; false once the capture is over (or failed).
    pub(crate) fn turn(&mut self) -> bool {
        let turn = self.thread.turn(&mut self.turns);
        if let Some(w) = &mut self.thread.writer {
            w.pump();
        }
        match turn {
            Ok(true) => true,
            Ok(false) => {
                self.result = Some(Ok(()));
                false
            }
            Err(e) => {
                self.result = Some(Err(e));
                false
            }
        }
    }

    /// Whether the offload policy has paused the capture (see `decide`).
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn paused(&self) -> bool {
        self.turns.decide.paused()
    }

    /// Ends the capture (see [`CaptureThread::run`]).
    pub(crate) fn end(mut self) -> CaptureEnd {
        let writer = self.thread.writer.take();
        let result = self.result.take().unwrap_or(Ok(()));
        let result = self.thread.end(self.turns, result);
        CaptureEnd {
            result,
            written: writer.map(InlineWriter::finish),
        }
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

    fn seal<C: Clock>(&self, mut chunk: Chunk, t: &mut Turns<C>) {
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
    pub fn run(self) -> CaptureEnd {
        let mut shell = self.shell(RealClock::start());
        while shell.turn() {}
        shell.end()
    }

    /// The thread ready to turn on `clock`.
    pub(crate) fn shell<C: Clock>(mut self, clock: C) -> Shell<C> {
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
        let policy = std::mem::replace(&mut self.policy, Box::new(Basic));
        let turns = Turns {
            clock,
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
            opened: 0,
            open_since: Duration::ZERO,
        };
        self.pool.room_answered_by_this_thread();
        Shell {
            thread: self,
            turns,
            result: None,
        }
    }

    /// One turn: see `decide`. False once the capture is over.
    fn turn<C: Clock>(&mut self, t: &mut Turns<C>) -> Result<bool, SysError> {
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
            self.cut.fix(|| t.clock.wall_ns());
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
                if t.clock
                    .wait_for_room(&self.pool, what, room_seen, decide::ROOM_WAIT)
                {
                    QueueCounters::add(&self.counters.syscalls, 1);
                }
            }
            Step::Take if self.source.take_batch(&self.pool, &mut t.filler) => {
                self.publish_tally(&mut t.filler, &mut t.kernel);
                t.saw_batch();
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
    fn quiet<C: Clock>(&mut self, t: &mut Turns<C>, stop: bool) -> Result<bool, SysError> {
        let f = &t.filler;
        let q = Quiet {
            stop,
            open_len: f.open.as_ref().map_or(0, Chunk::len),
            open_since: t.open_since,
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
            let mark = t.clock.wall_ns().saturating_sub(lag.as_nanos() as u64);
            self.publish(|p| p.watermark_ns = p.watermark_ns.max(mark));
        }
        match idle.then {
            Then::Finish => Ok(false),
            Then::Wait(w) => self.wait(w, &t.clock).map(|()| true),
        }
    }

    /// Waits as `decide` said, no longer than the inline writer's held batch may wait: every
    /// kick and block is a syscall.
    fn wait(&self, w: Wait, clock: &impl Clock) -> Result<(), SysError> {
        let mut readiness = Readiness::Idle;
        if w.kick {
            QueueCounters::add(&self.counters.syscalls, 1);
            readiness = clock.poll(self.source.as_ref(), Duration::ZERO)?;
        }
        match w.spin {
            Spin::No => {}
            Spin::Times(n) => (0..n).for_each(|_| std::hint::spin_loop()),
            Spin::For(d) => clock.spin_for(d),
        }
        match w.block {
            Block::No => {}
            Block::Poll(d) => {
                QueueCounters::add(&self.counters.syscalls, 1);
                readiness = clock.poll(self.source.as_ref(), self.until_writer_due(d))?;
            }
            Block::Sleep(d) => {
                QueueCounters::add(&self.counters.syscalls, 1);
                clock.sleep(self.until_writer_due(d));
            }
        }
        if readiness == Readiness::LinkDown {
            // The error is cleared; wait long until packets or the supervisor say otherwise.
            self.link_down.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// `d`, cut short to when the inline writer's held batch is due by its age: the writer
    /// runs only between this thread's turns.
    fn until_writer_due(&self, d: Duration) -> Duration {
        match self.writer.as_ref().and_then(InlineWriter::due_in) {
            Some(due) => d.min(due),
            None => d,
        }
    }

    /// After the last turn: seals the open chunk, lets go of what the source still holds,
    /// reads the final statistics and counts what the kernel received and this thread did
    /// not take as `not_taken`; a kernel error comes before the source's own.
    fn end<C: Clock>(
        mut self,
        mut t: Turns<C>,
        result: Result<(), SysError>,
    ) -> Result<(), CaptureError> {
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

#[cfg(test)]
mod tests {
    //! The real shell, driven turn by turn in virtual time over the in-memory source: what
    //! it decides is checked to the nanosecond, whatever the machine's load.

    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use crossbeam_queue::ArrayQueue;
    use poolcap_format::RecordedPacket;

    use super::{CaptureThread, Shell, WaitStrategy};
    use crate::capture::account::{QueueCounters, QueueStats};
    use crate::capture::clock::{Clock, VirtualClock};
    use crate::capture::doorbell::Doorbell;
    use crate::capture::end::Cut;
    use crate::capture::mem::{Faults, MemSource};
    use crate::capture::pipeline::Handoff;
    use crate::capture::policy::Basic;
    use crate::capture::pool::{Chunk, Pool, PoolSize};
    use crate::capture::progress::Progress;

    /// The packets' clock at virtual time 0.
    const EPOCH: u64 = 1_700_000_000_000_000_000;
    const SEAL_AFTER: Duration = Duration::from_millis(2);

    /// One packet arriving `at` after time 0.
    fn packet(at: Duration) -> RecordedPacket {
        RecordedPacket {
            ts_ns: EPOCH + at.as_nanos() as u64,
            data: vec![0xab; 60],
            orig_len: 60,
        }
    }

    /// `n` packets from `from`, `gap` apart.
    fn train(from: Duration, n: u32, gap: Duration) -> Vec<RecordedPacket> {
        (0..n).map(|i| packet(from + gap * i)).collect()
    }

    /// A capture thread over `packets` arriving on `clock`, handing sealed chunks to a
    /// sink input the test drains; a pool of `chunks` chunks of 32 cells.
    struct Rig {
        shell: Shell<VirtualClock>,
        clock: VirtualClock,
        input: Arc<ArrayQueue<Chunk>>,
        pool: Arc<Pool>,
        counters: Arc<QueueCounters>,
        stop: Arc<AtomicBool>,
        progress: Arc<Mutex<Progress>>,
    }

    impl Rig {
        fn new(packets: Vec<RecordedPacket>, chunks: usize, faults: Faults) -> Self {
            let clock = VirtualClock::new(EPOCH);
            let size = PoolSize {
                cells: 32,
                chunks,
                cell_size: 128,
            };
            let pool = Arc::new(Pool::new(0, size, chunks, None));
            let counters = Arc::new(QueueCounters::default());
            let input = Arc::new(ArrayQueue::new(chunks));
            let stop = Arc::new(AtomicBool::new(false));
            let progress = Arc::new(Mutex::new(Progress::default()));
            let thread = CaptureThread {
                queue: 0,
                source: Box::new(MemSource::new(packets, 8, faults).arriving_on(clock.clone())),
                pool: Arc::clone(&pool),
                pools: Arc::new(vec![Arc::clone(&pool)]),
                counters: Arc::clone(&counters),
                all_counters: Arc::new(vec![Arc::clone(&counters)]),
                policy: Box::new(Basic),
                progress: Arc::clone(&progress),
                wait: WaitStrategy::Poll,
                seal_after: SEAL_AFTER,
                snaplen: 262_144,
                handoff: Handoff::Sink {
                    input: Arc::clone(&input),
                    bell: Arc::new(Doorbell::default()),
                },
                merged: true,
                stop: Arc::clone(&stop),
                cut: Arc::new(Cut::default()),
                budget: None,
                link_down: Arc::new(AtomicBool::new(false)),
                writer: None,
            };
            Self {
                shell: thread.shell(clock.clone()),
                clock,
                input,
                pool,
                counters,
                stop,
                progress,
            }
        }

        /// One turn, then time moves on to the end of the wait it asked for (a poll's ends
        /// at the next packet; nothing else happens meanwhile, so a wait for room lasts its
        /// timeout); false once the capture is over.
        fn turn(&mut self) -> bool {
            let on = self.shell.turn();
            if let Some(w) = self.clock.take_wake() {
                self.clock.set(w.at);
            }
            on
        }

        /// Turns until `until` holds or the capture is over; false if it ended first.
        fn turn_until(&mut self, mut until: impl FnMut(&Self) -> bool) -> bool {
            for _ in 0..1_000_000 {
                if until(self) {
                    return true;
                }
                if !self.turn() {
                    return false;
                }
            }
            panic!("hang guard: a million turns without the condition");
        }

        /// Sends every sealed chunk home (the sink took it); returns their packets.
        fn drain(&self) -> Vec<usize> {
            std::iter::from_fn(|| self.input.pop())
                .map(|c| {
                    let n = c.len();
                    self.pool.recycle(c);
                    n
                })
                .collect()
        }

        fn end(self) -> QueueStats {
            let end = self.shell.end();
            end.result.expect("the capture thread ends cleanly");
            self.counters.snapshot(0)
        }
    }

    #[test]
    fn an_idle_queue_seals_its_open_chunk_seal_after_its_last_packet() {
        // 5 packets in the first 40 µs, then nothing for a second: the chunk they opened is
        // sealed once it has been open SEAL_AFTER with the source idle, not before.
        let mut packets = train(Duration::ZERO, 5, Duration::from_micros(10));
        packets.push(packet(Duration::from_secs(1)));
        let mut rig = Rig::new(packets, 4, Faults::default());
        // The time at the start of the turn that sealed it (the turn then waits).
        let mut sealed_at = Duration::ZERO;
        assert!(rig.turn_until(|r| {
            let sealed = !r.input.is_empty();
            if !sealed {
                sealed_at = r.clock.now();
            }
            sealed
        }));
        assert_eq!(rig.drain(), vec![5]);
        // The idle waits are 1 ms polls (the shell's `soon`), so the seal comes at the
        // first wake at or after SEAL_AFTER from the chunk's opening.
        assert!(
            sealed_at >= SEAL_AFTER && sealed_at < SEAL_AFTER + Duration::from_millis(1),
            "sealed at {sealed_at:?}"
        );
        // The writer's watermark moved on while idle, on the packets' clock.
        rig.clock.advance(Duration::from_millis(50));
        assert!(
            rig.turn_until(|r| { r.progress.lock().unwrap().watermark_ns > EPOCH + 40_000_000 })
        );
        rig.stop.store(true, Ordering::Relaxed);
        assert!(!rig.turn_until(|_| false));
        let s = rig.end();
        assert_eq!((s.captured, s.not_taken, s.chunks), (5, 0, 1));
    }

    #[test]
    fn a_full_pool_holds_packets_in_the_kernel_until_the_consumer_makes_room() {
        // 3 chunks of 32 cells and 200 packets arriving at once: the queue fills the pool,
        // then leaves the rest in the "kernel" (nothing dropped) while the consumer is idle
        // for 50 ms, and takes them again in the very turn after the consumer frees chunks.
        let mut rig = Rig::new(
            train(Duration::ZERO, 200, Duration::from_nanos(100)),
            3,
            Faults::default(),
        );
        // The time at the start of the turn that filled the pool: the hold begins there.
        let mut full_at = Duration::ZERO;
        assert!(rig.turn_until(|r| {
            let full = r.input.len() == 2 && r.pool.free_chunks() == 1;
            if !full {
                full_at = r.clock.now();
            }
            full
        }));
        let held = rig.counters.snapshot(0).captured;
        assert!(rig.turn_until(|r| r.clock.now() >= full_at + Duration::from_millis(50)));
        assert_eq!(
            rig.counters.snapshot(0).captured,
            held,
            "took packets while held"
        );
        rig.drain();
        let drained_at = rig.clock.now();
        assert!(rig.turn_until(|r| r.counters.snapshot(0).captured > held));
        assert_eq!(rig.clock.now(), drained_at, "the room was seen at once");
        // Every packet has arrived, so the queue ends once it has taken them all.
        while rig.turn() {
            rig.drain();
        }
        let s = rig.end();
        assert_eq!((s.captured, s.dropped_kernel, s.dropped_pool), (200, 0, 0));
        assert!(held < 200 && s.pool_peak_chunks <= 3, "{s:?}");
    }

    #[test]
    fn a_stop_takes_every_packet_up_to_the_cut_and_counts_the_rest_not_taken() {
        // Packets every 100 µs for 100 ms, 1 in 7 dropped by the "kernel"; the stop comes at
        // 50 ms of virtual time. Every packet stamped up to the cut is captured or a kernel
        // drop; those that arrive while the queue drains are not taken; nothing else.
        let packets = train(Duration::ZERO, 1000, Duration::from_micros(100));
        let faults = Faults {
            drop_every: Some(7),
            ..Faults::default()
        };
        let mut rig = Rig::new(packets, 4, faults);
        let mut captured = 0;
        assert!(rig.turn_until(|r| {
            captured += r.drain().iter().sum::<usize>();
            r.clock.now() >= Duration::from_millis(50)
        }));
        rig.stop.store(true, Ordering::Relaxed);
        let stop_at = rig.clock.now();
        while rig.turn() {
            captured += rig.drain().iter().sum::<usize>();
        }
        let ended_at = rig.clock.now();
        captured += rig.drain().iter().sum::<usize>();
        let s = rig.end();
        let upto = |t: Duration| (t.as_micros() / 100 + 1) as u64;
        let (by_cut, by_end) = (upto(stop_at), upto(ended_at));
        let dropped = |n: u64| n / 7;
        assert_eq!(
            s.captured, captured as u64,
            "{s:?} stop {stop_at:?} end {ended_at:?}"
        );
        assert_eq!(
            s.captured + s.dropped_kernel,
            by_cut + dropped(by_end) - dropped(by_cut),
            "{s:?} stop {stop_at:?} end {ended_at:?}"
        );
        assert_eq!(s.dropped_kernel, dropped(by_end));
        assert_eq!(
            s.captured + s.dropped_kernel + s.not_taken,
            by_end,
            "{s:?}, stop at {stop_at:?}, ended at {ended_at:?}"
        );
        assert!(ended_at > stop_at, "the queue drained before it ended");
    }
}
