//! The file writer: merges the per-queue chunk streams into one file in timestamp order.
//!
//! Each receive queue's packets arrive in timestamp order, in chunks numbered by the capture
//! thread; workers may finish chunks out of order, so the writer first puts each queue's
//! chunks back in sequence, then repeatedly writes the earliest head packet among the queues.
//! It may write a packet at time t only when every queue with nothing ready provably has
//! nothing earlier to come: all chunks it sealed have reached the writer, and its published
//! watermark is at least t (see `progress::Progress`). At the end everything left is merged.
//!
//! Packets are not copied again to be written: chunks of copies keep room around each packet
//! for its record (see `pool`), the writer frames the records in place and hands runs of
//! them to the kernel with one vectored write per batch of [`BATCH_BYTES`]. A chunk goes home
//! once the batch holding its last record is written. Chunks without
//! that room (AF_XDP frames) go through the format writer's buffer instead.
//!
//! The writer writes to a file set ([`Savefiles`]): before each packet it asks whether the
//! packet starts a new file (`-C`, `-G`); if so it writes the batch so far to the current
//! file, closes it and opens the next, so a rotation falls between two whole records and
//! no packet is lost or written twice.
//!
//! A write error (disk full, EIO) ends the writing, not the capture: the file keeps every
//! whole packet written before the error, the message (naming the file) is published at
//! once for the supervisor to print, and the writer goes on taking chunks, counting their
//! packets as not written and sending the chunks home, until the capture is stopped.

use std::collections::{BTreeMap, VecDeque};
use std::io::IoSlice;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use poolcap_format::{IfStats, WriteError};

use super::doorbell::Doorbell;
use super::pool::{Chunk, Pool};
use super::progress::Progress;
use super::rotate::Next;
use super::savefile::{Savefiles, DIRECT_BATCH_BYTES};
use super::wakeup::Stopper;

/// Most runs of records handed to the kernel in one vectored write (IOV_MAX on Linux).
const MAX_SPANS: usize = 1024;

/// Bytes of records handed to the kernel in one vectored write. Measured on the veth lab
/// (1514 B frames at top speed, written to ext4): against 64 KiB, 256 KiB took 17% less
/// CPU; 1 MiB took no less and lost frames in 3 of 4 runs (a long write keeps the capture
/// thread off a shared core).
pub const BATCH_BYTES: usize = 256 << 10;

/// Bytes of records per write, with or without direct I/O.
pub fn batch_bytes(direct: bool) -> usize {
    if direct {
        DIRECT_BATCH_BYTES
    } else {
        BATCH_BYTES
    }
}

/// Bytes a batch gathers before it is written, with or without direct I/O. A buffered write
/// goes as soon as the writer has caught up (each round). A direct write has a fixed cost
/// and is padded to a whole block, so small ones cost CPU and file size (at 64-byte frames,
/// one write per chunk padded 8% of the file): it waits for half a batch, unless it holds
/// `HOLD_CHUNKS_SHARE` of a pool or is `HOLD_TIME` old.
pub fn min_write(direct: bool) -> usize {
    if direct {
        DIRECT_BATCH_BYTES / 2
    } else {
        0
    }
}

/// A batch smaller than `min_write` is written anyway once one queue's chunks waiting for it
/// are this share (1/N) of its pool, so the pool keeps room.
const HOLD_CHUNKS_SHARE: usize = 4;

/// ... or once its first record is this old (plus one turn of the capture thread at most:
/// an inline writer's thread waits no longer, see [`InlineWriter::due_in`]).
const HOLD_TIME: Duration = Duration::from_millis(50);

#[derive(Debug, Default)]
struct QueueState {
    next_seq: u64,
    waiting: BTreeMap<u64, Chunk>,
    /// Chunks in sequence. The first `head` ones are done with but wait for the batch
    /// holding their records to be written.
    ready: VecDeque<Chunk>,
    head: usize,
    /// Index of the next packet to write in `ready[head]`.
    pos: usize,
}

impl QueueState {
    fn head_ts(&self) -> Option<u64> {
        self.ready.get(self.head).map(|c| c.meta(self.pos).ts_ns)
    }

    fn has_ready(&self) -> bool {
        self.head < self.ready.len()
    }
}

/// Records shorter than this, in a chunk whose records lie apart (a ring block: the
/// kernel's header lies between two frames), are made in the batch's own buffer, where
/// they join the records before them, instead of being handed to the kernel one by one.
/// Their headers are made there too, not in the ring: writing ring memory the sender's
/// core filled costs a cache-line transfer each way (64 B frames to /dev/null at 300k pps,
/// 5 interleaved rounds of 1M: 51-108 ms of CPU against 70-123 framing in the ring, lower
/// in each round).
/// One iovec per record costs the kernel more than a copy when records are small: writing
/// 1M 64-byte frames at top speed on the veth lab (4 interleaved runs), poolcap took
/// 101-110 ms of CPU with the copies against 122-136 ms with an iovec per record.
/// 1514-byte frames are not copied: one copy, by the kernel, is the point of writing from
/// the ring. (Only 64 and 1514 B were measured; 512 is a guess between.)
const SMALL_RECORD: usize = 512;

/// Records framed in place and not yet written: runs of adjacent records in chunks the
/// queues still hold, and small records copied out of them.
#[derive(Debug, Default)]
struct Batch {
    spans: Vec<Span>,
    /// Small records copied out of their chunks (see [`SMALL_RECORD`]).
    copied: Vec<u8>,
    bytes: usize,
    packets: u64,
    /// When its first record was added.
    since: Option<Instant>,
}

/// Where a run of records lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lies {
    /// In chunk `ready[chunk]` of queue `queue`.
    Chunk { queue: usize, chunk: usize },
    /// In the batch's own buffer.
    Copied,
}

/// Records `bytes` of where they lie.
#[derive(Debug)]
struct Span {
    lies: Lies,
    bytes: Range<usize>,
}

impl Batch {
    fn add(&mut self, queue: usize, chunk: usize, bytes: Range<usize>) {
        self.push(Lies::Chunk { queue, chunk }, bytes);
    }

    /// Adds the record `append` puts at the end of the batch's own buffer, unless it fails.
    fn add_copy<E>(&mut self, append: impl FnOnce(&mut Vec<u8>) -> Result<(), E>) -> Result<(), E> {
        let start = self.copied.len();
        append(&mut self.copied)?;
        self.push(Lies::Copied, start..self.copied.len());
        Ok(())
    }

    fn push(&mut self, lies: Lies, bytes: Range<usize>) {
        self.push_run(lies, bytes, 1);
    }

    /// Adds `packets` whole records lying in `bytes` of where they lie.
    fn push_run(&mut self, lies: Lies, bytes: Range<usize>, packets: u64) {
        self.bytes += bytes.len();
        self.packets += packets;
        match self.spans.last_mut() {
            Some(s) if s.lies == lies && s.bytes.end == bytes.start => {
                s.bytes.end = bytes.end;
            }
            _ => {
                if self.spans.is_empty() {
                    self.since = Some(Instant::now());
                }
                self.spans.push(Span { lies, bytes });
            }
        }
    }

    /// The bytes of `span`, which lie in `queues` or here.
    fn bytes_of<'a>(&'a self, queues: &'a [QueueState], span: &Span) -> &'a [u8] {
        match span.lies {
            Lies::Chunk { queue, chunk } => queues[queue].ready[chunk].records(span.bytes.clone()),
            Lies::Copied => &self.copied[span.bytes.clone()],
        }
    }

    fn is_full(&self, bytes: usize) -> bool {
        self.bytes >= bytes || self.spans.len() == MAX_SPANS
    }

    fn clear(&mut self) {
        self.spans.clear();
        self.copied.clear();
        (self.bytes, self.packets, self.since) = (0, 0, None);
    }
}

/// What the writer has written so far, published after every write batch and when idle
/// (read by `--metrics` while the capture runs).
#[derive(Debug, Default)]
pub struct Written {
    /// Packets in the files ([`Savefiles::packets_written`]).
    pub packets: AtomicU64,
    /// Bytes of the files ([`Savefiles::bytes_total`]).
    pub bytes: AtomicU64,
}

/// What the writer did.
#[derive(Debug)]
pub struct WriterOutcome {
    /// Packets written to the files.
    pub written: u64,
    /// Packets captured but not written (after an error, past `-c` or past `-W` files).
    pub not_written: u64,
    /// The first write error, naming the file, if any.
    pub error: Option<String>,
    /// `-G` with `-W`: the last file was closed and the capture stopped.
    pub file_limit_reached: bool,
    /// `-z` commands that failed.
    pub post_rotate_failed: usize,
}

/// What one round of the writer did.
struct Round {
    /// It took packets.
    progressed: bool,
    /// Everything has arrived and is written: the writer is done.
    done: bool,
}

/// The file writer run by the capture thread itself, after each batch it takes, when one
/// queue only writes (see `sink::Sink::inline`). Writing from the ring, a capture thread
/// only hands blocks on: the ring is the buffer, whoever writes. A second thread added
/// nothing but a wakeup per block and a second runnable thread on the core the kernel's
/// receive work also wants (with RPS on the capture core), and it kept the capture thread
/// from blocking in `poll` while the writer held the newest block.
pub struct InlineWriter {
    fw: FileWriter,
    m: Merge,
    stats: Box<dyn Fn() -> IfStats + Send>,
}

impl std::fmt::Debug for InlineWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InlineWriter")
            .field("fw", &self.fw)
            .finish()
    }
}

impl InlineWriter {
    /// Writes what the capture thread has sealed so far, without waiting; lets the file
    /// set rotate by time when there was nothing.
    pub fn pump(&mut self) {
        let round = self.fw.round(&mut self.m, false, &self.stats);
        if !round.progressed {
            self.fw.tick(&mut self.m);
        }
    }

    /// How long until the batch it holds is due by its age (`HOLD_TIME`), if it holds one:
    /// the capture thread waits no longer, so a record waits no longer than that.
    pub fn due_in(&self) -> Option<Duration> {
        self.m
            .batch
            .since
            .map(|t| HOLD_TIME.saturating_sub(t.elapsed()))
    }

    /// After the capture thread's last seal: writes everything and closes the last file.
    pub fn finish(mut self) -> WriterOutcome {
        while !self.fw.round(&mut self.m, true, &self.stats).done {}
        let stats = (self.stats)();
        self.fw.finish(self.m, stats)
    }
}

/// What became of one packet.
enum Put {
    Written,
    /// The format cannot hold it (counted as not written).
    Rejected,
    /// `-W` files are done: nothing more is written.
    FilesDone,
}

/// The writer's own state across rounds: each queue's chunks in order, the batch being
/// gathered, and what became of the packets taken so far.
struct Merge {
    queues: Vec<QueueState>,
    batch: Batch,
    /// Packets taken from chunks.
    handled: u64,
    /// Packets the files accepted.
    accepted: u64,
    /// The first write error, naming the file.
    error: Option<String>,
    /// `-W` files are done.
    files_done: bool,
}

impl Merge {
    fn new(queues: usize) -> Self {
        Merge {
            queues: (0..queues).map(|_| QueueState::default()).collect(),
            batch: Batch::default(),
            handled: 0,
            accepted: 0,
            error: None,
            files_done: false,
        }
    }
}

/// The writer thread's setup.
pub struct FileWriter {
    /// The file set, its first file open.
    pub out: Savefiles,
    /// Processed chunks from the workers.
    pub input: Arc<ArrayQueue<Chunk>>,
    /// Pools, to send chunks home.
    pub pools: Arc<Vec<Arc<Pool>>>,
    /// Capture threads' progress, by queue.
    pub progress: Vec<Arc<Mutex<Progress>>>,
    /// Set when every worker has finished.
    pub workers_done: Arc<AtomicBool>,
    /// Stop after this many packets (`-c`).
    pub limit: Option<u64>,
    /// Stops the capture when the limit is reached (or `-W`'s files are done).
    pub stop: Stopper,
    /// Rung when a chunk arrives.
    pub bell: Arc<Doorbell>,
    /// Bytes of records per write ([`batch_bytes`]).
    pub batch_bytes: usize,
    /// Bytes a batch gathers before it is written ([`min_write`]).
    pub min_write: usize,
    /// Set, once, to the first write error's message as soon as it happens.
    pub failed: Arc<OnceLock<String>>,
    /// What is written so far.
    pub written: Arc<Written>,
}

impl std::fmt::Debug for FileWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWriter")
            .field("limit", &self.limit)
            .finish()
    }
}

impl FileWriter {
    /// Merges and writes until the workers are done and every chunk is written; `stats`
    /// gives the interface counters so far, for each file's statistics block (pcapng).
    pub fn run(mut self, stats: impl Fn() -> IfStats) -> WriterOutcome {
        let mut m = Merge::new(self.pools.len());
        self.bell.answer_from_this_thread();
        loop {
            let upstream_done = self.workers_done.load(Ordering::Acquire);
            let round = self.round(&mut m, upstream_done, &stats);
            if round.done {
                break;
            }
            if !round.progressed {
                self.tick(&mut m);
                self.idle(&m);
            }
        }
        self.finish(m, stats())
    }

    /// The writer run by the one capture thread between its batches ([`InlineWriter`]).
    pub fn inline(self, stats: Box<dyn Fn() -> IfStats + Send>) -> InlineWriter {
        let m = Merge::new(self.pools.len());
        InlineWriter { fw: self, m, stats }
    }

    /// One round: takes what arrived, writes what can be written, and writes the batch
    /// when it is due. `upstream_done`: nothing more will be put into the input once it
    /// is empty (read before the input is).
    fn round(&mut self, m: &mut Merge, upstream_done: bool, stats: &impl Fn() -> IfStats) -> Round {
        self.receive(&mut m.queues);
        let last_round = upstream_done && self.input.is_empty();
        let bound = if last_round {
            u64::MAX
        } else {
            self.bound(&m.queues)
        };
        let progressed = self.take(m, bound, last_round, stats);
        if last_round || self.write_due(&m.queues, &m.batch) {
            if let Err(e) = self.write_batch(&mut m.queues, &mut m.batch) {
                m.error.get_or_insert_with(|| self.failure(&e));
            }
        }
        self.publish();
        let done = last_round
            && m.queues
                .iter()
                .all(|q| q.ready.is_empty() && q.waiting.is_empty());
        Round { progressed, done }
    }

    /// Takes the chunks the workers passed on and lines each queue's up in sealed order.
    fn receive(&self, queues: &mut [QueueState]) {
        while let Some(c) = self.input.pop() {
            let q = &mut queues[c.home];
            q.waiting.insert(c.seq, c);
        }
        for q in queues {
            while let Some(c) = q.waiting.remove(&q.next_seq) {
                q.ready.push_back(c);
                q.next_seq += 1;
            }
        }
    }

    /// Takes packets in timestamp order up to `bound` into the batch; true if any.
    fn take(
        &mut self,
        m: &mut Merge,
        bound: u64,
        last_round: bool,
        stats: &impl Fn() -> IfStats,
    ) -> bool {
        let mut progressed = false;
        while let Some(qi) = earliest(&m.queues, bound) {
            progressed = true;
            let mut taken = self.take_small_run(m, qi, bound);
            if taken == 0 {
                self.take_packet(m, qi, stats);
                taken = 1;
            }
            let q = &mut m.queues[qi];
            q.pos += taken;
            if q.pos == q.ready[q.head].len() {
                q.pos = 0;
                q.head += 1;
                if m.batch.spans.is_empty() {
                    // Nothing points into it (a chunk of frames): home at once.
                    self.send_home(&mut m.queues);
                }
                if !m.queues[qi].has_ready() && !last_round {
                    break; // this queue's bound must be looked at again
                }
            }
        }
        progressed
    }

    /// Takes, in one pass, the run of small records (see [`SMALL_RECORD`]) at the head of
    /// queue `qi`'s head chunk, a ring block, that come before every other queue's head
    /// and by `bound`, copying them into the batch's own buffer as [`FileWriter::put`]
    /// would one by one, when nothing is decided per packet: no error, within `-c`, and
    /// within the file's room before a rotation (`-C`, `-G`; a store's files rotate, and
    /// taking its small packets one by one cost a third more of the capture thread). The
    /// run ends where the batch is full (then written) and before a packet the format
    /// rejects. Returns the packets taken; 0 leaves the next packet to the per-packet way.
    fn take_small_run(&mut self, m: &mut Merge, qi: usize, bound: u64) -> usize {
        let q = &m.queues[qi];
        let chunk = &q.ready[q.head];
        // Large records (written from where they lie) and chunks of copies go the
        // per-packet way, before anything else is looked at.
        let small = chunk
            .record(q.pos)
            .is_some_and(|r| chunk.records_apart() && r.len() < SMALL_RECORD);
        if !small || m.error.is_some() || m.files_done {
            return 0;
        }
        let until = run_until(&m.queues, qi, bound);
        // As `put` asks the rotation before each packet: the file's bytes and those pending.
        let ((rotation, file_room), held) = (self.out.room(), self.out.bytes());
        let room = self
            .limit
            .map_or(usize::MAX, |l| l.saturating_sub(m.accepted) as usize);
        let Ok(out) = self.out.writer() else {
            return 0;
        };
        let format = out.format();
        let batch = &mut m.batch;
        let (mut bytes, full) = (batch.bytes, self.batch_bytes);
        let start = batch.copied.len();
        let packets = chunk
            .packets_from(q.pos)
            .take(room)
            .take_while(|(meta, _)| {
                let len = format.record_len(meta.caplen as usize);
                let same_file = meta.ts_ns < rotation && held + bytes as u64 <= file_room;
                let small = meta.ts_ns <= until && len < SMALL_RECORD && bytes < full && same_file;
                bytes += len;
                small
            })
            .map(|(meta, data)| (meta.ts_ns, data, meta.wire_len));
        let (appended, _rejected) = out.append_records(&mut batch.copied, packets);
        if appended == 0 {
            return 0;
        }
        batch.push_run(Lies::Copied, start..batch.copied.len(), appended as u64);
        m.handled += appended as u64;
        m.accepted += appended as u64;
        if self.limit == Some(m.accepted) {
            self.stop.stop();
        }
        if m.batch.is_full(self.batch_bytes) {
            if let Err(e) = self.write_batch(&mut m.queues, &mut m.batch) {
                m.error = Some(self.failure(&e));
            }
        }
        appended
    }

    /// Puts queue `qi`'s next packet into the batch unless writing has ended (an error,
    /// `-c`, or `-W` files done); it is counted as handled either way.
    fn take_packet(&mut self, m: &mut Merge, qi: usize, stats: &impl Fn() -> IfStats) {
        m.handled += 1;
        if m.error.is_some() || m.files_done || self.limit.is_some_and(|l| m.accepted >= l) {
            return;
        }
        match self.put(&mut m.queues, qi, &mut m.batch, stats) {
            Ok(Put::Written) => m.accepted += 1,
            Ok(Put::Rejected) => {}
            Ok(Put::FilesDone) => {
                m.files_done = true;
                self.stop.stop();
            }
            Err(e) => m.error = Some(self.failure(&e)),
        }
        if self.limit == Some(m.accepted) {
            self.stop.stop();
        }
    }

    /// Nothing to take: lets the file set rotate by time.
    fn tick(&mut self, m: &mut Merge) {
        if m.error.is_none() {
            if let Err(e) = self.out.tick() {
                m.error = Some(self.failure(&e));
            }
        }
    }

    /// Waits for a chunk.
    fn idle(&self, m: &Merge) {
        // Rung on every new chunk; the timeout lets an idle queue's watermark move on when
        // queues are merged, and otherwise only bounds how late the end is seen.
        self.bell.wait(if m.queues.len() > 1 {
            Duration::from_millis(5)
        } else {
            Duration::from_millis(50)
        });
    }

    /// Closes the last file (with the final interface counters) and says what was done.
    fn finish(mut self, mut m: Merge, stats: IfStats) -> WriterOutcome {
        if m.error.is_none() && !m.files_done {
            if let Err(e) = self.out.close(stats) {
                m.error = Some(self.failure(&e));
            }
        }
        self.publish();
        let post_rotate_failed = self.out.wait_post_rotate();
        let written = self.out.packets_written();
        WriterOutcome {
            written,
            not_written: m.handled - written,
            error: m.error,
            file_limit_reached: m.files_done,
            post_rotate_failed,
        }
    }

    fn publish(&self) {
        let w = &self.written;
        w.packets
            .store(self.out.packets_written(), Ordering::Relaxed);
        w.bytes.store(self.out.bytes_total(), Ordering::Relaxed);
    }

    /// The message of a write error, naming the file; published for the supervisor.
    fn failure(&self, e: &WriteError) -> String {
        let message = format!("write error on {}: {e}", self.out.name());
        let _ = self.failed.set(message.clone());
        self.stop.wake();
        message
    }

    /// Puts the next packet of queue `qi` into the current file, after starting the next
    /// file if it belongs there: its record framed in place and added to `batch` (written
    /// once full), or, from a chunk without room for records, copied into the format
    /// writer's buffer (after the batch is written, to keep the order). An error is fatal.
    fn put(
        &mut self,
        queues: &mut [QueueState],
        qi: usize,
        batch: &mut Batch,
        stats: &dyn Fn() -> IfStats,
    ) -> Result<Put, WriteError> {
        let q = &queues[qi];
        let ts_ns = q.ready[q.head].meta(q.pos).ts_ns;
        match self
            .out
            .before_packet(ts_ns, self.out.bytes() + batch.bytes as u64)
        {
            Next::Same => {}
            Next::Rotate(path) => {
                self.write_batch(queues, batch)?;
                self.out.close_behind(stats())?;
                self.out.open(path)?;
            }
            Next::LimitReached => {
                self.write_batch(queues, batch)?;
                self.out.close(stats())?;
                return Ok(Put::FilesDone);
            }
        }
        let q = &queues[qi];
        let framed_in_place = q.ready[q.head].record(q.pos);
        if framed_in_place.is_none() && !batch.spans.is_empty() {
            self.write_batch(queues, batch)?;
        }
        let q = &mut queues[qi];
        let (k, i) = (q.head, q.pos);
        let chunk = &mut q.ready[k];
        let m = chunk.meta(i);
        let out = self.out.writer()?;
        let put = match framed_in_place {
            Some(bytes) if chunk.records_apart() && bytes.len() < SMALL_RECORD => {
                batch.add_copy(|into| out.append_record(into, m.ts_ns, chunk.data(i), m.wire_len))
            }
            Some(bytes) => {
                let record = chunk.records_mut(bytes.clone());
                let framed = out.frame_record(record, m.ts_ns, m.caplen as usize, m.wire_len);
                framed.map(|()| batch.add(qi, k, bytes))
            }
            None => out.write_packet(m.ts_ns, chunk.data(i), m.wire_len),
        };
        match put {
            Ok(()) if batch.is_full(self.batch_bytes) => {
                self.write_batch(queues, batch).map(|()| Put::Written)
            }
            Ok(()) => Ok(Put::Written),
            Err(e) if e.is_fatal() => Err(e),
            Err(_) => Ok(Put::Rejected),
        }
    }

    /// Writes the batch, then sends home every chunk that is done with (also when the
    /// write fails).
    fn write_batch(
        &mut self,
        queues: &mut [QueueState],
        batch: &mut Batch,
    ) -> Result<(), WriteError> {
        let written = if batch.spans.is_empty() {
            Ok(())
        } else {
            let slices: Vec<IoSlice<'_>> = batch
                .spans
                .iter()
                .map(|s| IoSlice::new(batch.bytes_of(queues, s)))
                .collect();
            self.out
                .writer()
                .and_then(|w| w.write_records(&slices, batch.packets))
                .and_then(|()| self.out.tick())
        };
        batch.clear();
        self.send_home(queues);
        written
    }

    /// Whether the batch so far should be written now (see [`min_write`]).
    fn write_due(&self, queues: &[QueueState], batch: &Batch) -> bool {
        batch.bytes >= self.min_write
            || batch.since.is_some_and(|t| t.elapsed() >= HOLD_TIME)
            || queues
                .iter()
                .zip(self.pools.iter())
                .any(|(q, p)| q.head * HOLD_CHUNKS_SHARE >= p.size().chunks)
    }

    /// Sends home the chunks that are done with (no batch may point into them).
    fn send_home(&self, queues: &mut [QueueState]) {
        for q in queues.iter_mut() {
            for c in q.ready.drain(..q.head) {
                self.pools[c.home].recycle(c);
            }
            q.head = 0;
        }
    }

    /// The latest timestamp that can be written now: the smallest watermark among queues
    /// with nothing ready, or 0 if such a queue still has a chunk on its way.
    fn bound(&self, queues: &[QueueState]) -> u64 {
        let mut bound = u64::MAX;
        for (i, q) in queues.iter().enumerate() {
            if q.has_ready() {
                continue;
            }
            let p = self.progress[i].lock().map(|p| *p).unwrap_or_default();
            if q.next_seq < p.sealed {
                return 0;
            }
            bound = bound.min(p.watermark_ns);
        }
        bound
    }
}

/// The latest timestamp queue `qi`'s packets may have to be written before any other
/// queue's head, and by `bound`: [`earliest`] picks the first of queues whose heads tie.
fn run_until(queues: &[QueueState], qi: usize, bound: u64) -> u64 {
    queues
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != qi)
        .filter_map(|(i, q)| {
            let t = q.head_ts()?;
            Some(if i < qi { t.saturating_sub(1) } else { t })
        })
        .fold(bound, u64::min)
}

/// The queue whose head packet is earliest, if that packet is not later than `bound`.
fn earliest(queues: &[QueueState], bound: u64) -> Option<usize> {
    let (i, ts) = queues
        .iter()
        .enumerate()
        .filter_map(|(i, q)| q.head_ts().map(|t| (i, t)))
        .min_by_key(|&(_, t)| t)?;
    (ts <= bound).then_some(i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::pool::PoolSize;
    use crate::capture::rotate::{RotateSpec, Rotation};
    use crate::capture::savefile::{FileIo, FileSpec};
    use crate::capture::testsink::Shared;
    use poolcap_format::FileFormat;

    fn chunk(pool: &Pool, seq: u64, ts: &[u64]) -> Chunk {
        let mut c = pool.take_free().expect("free chunk");
        c.seq = seq;
        for &t in ts {
            assert!(c.push(t, [&t.to_be_bytes(), &[], &[]], 8, 8));
        }
        c
    }

    /// Two queues' chunks, arriving out of sequence, written with `records` room (or
    /// without) and `-c limit`: the timestamps in each file, and what the writer reported.
    fn write_two_queues(
        format: FileFormat,
        records: Option<FileFormat>,
        limit: Option<u64>,
        rotation: Option<TestRotation>,
    ) -> (Vec<Vec<u64>>, WriterOutcome, bool) {
        let size = crate::capture::pool::for_records(
            PoolSize {
                cells: 4,
                chunks: 4,
                cell_size: 64,
            },
            records,
        );
        let pools = Arc::new(vec![
            Arc::new(Pool::new(0, size, 4, records)),
            Arc::new(Pool::new(1, size, 4, records)),
        ]);
        let input = Arc::new(ArrayQueue::new(8));
        // Queue 0's chunk 1 arrives before its chunk 0.
        input.push(chunk(&pools[0], 1, &[50, 70])).unwrap();
        input.push(chunk(&pools[1], 0, &[10, 40, 60])).unwrap();
        input.push(chunk(&pools[0], 0, &[20, 30])).unwrap();
        let progress: Vec<_> = (0..2)
            .map(|_| {
                Arc::new(Mutex::new(Progress {
                    sealed: 2,
                    watermark_ns: u64::MAX,
                }))
            })
            .collect();
        let file = Shared::default();
        let spec = FileSpec {
            io: match rotation.as_ref().is_some_and(|r| r.direct) {
                true => FileIo::Direct,
                false => FileIo::Buffered,
            },
            ..file_spec(format)
        };
        let out = match &rotation {
            None => Savefiles::new(
                spec.clone(),
                spec.start(Box::new(file.clone())).unwrap(),
                None,
                None,
            ),
            Some(r) => {
                let first = r.first_name();
                let (w, how) = spec.open(&first).unwrap();
                Savefiles::new(
                    spec.clone(),
                    w,
                    Some((first, how)),
                    Some(r.rotation.clone()),
                )
            }
        };
        let stop = Stopper::unsupervised();
        let w = FileWriter {
            out,
            input,
            pools: Arc::clone(&pools),
            progress,
            workers_done: Arc::new(AtomicBool::new(true)),
            limit,
            stop: stop.clone(),
            bell: Arc::default(),
            batch_bytes: 40, // one or two records
            min_write: 0,
            failed: Arc::default(),
            written: Arc::default(),
        };
        let outcome = w.run(|| IfStats {
            received: 7,
            dropped: 0,
        });
        assert_eq!(
            pools[0].in_use() + pools[1].in_use(),
            0,
            "every chunk went home"
        );
        let files = match rotation {
            None => vec![file.bytes()],
            Some(r) => r
                .files_made()
                .iter()
                .map(|p| {
                    let bytes = std::fs::read(p).unwrap();
                    // pcap written directly ends exact at the close, pcapng padded.
                    let aligned = bytes.len() % poolcap_format::direct::ALIGN == 0;
                    assert!(
                        !r.direct || format != FileFormat::Pcapng || aligned,
                        "{}: {} bytes",
                        p.display(),
                        bytes.len()
                    );
                    bytes
                })
                .collect(),
        };
        let mut times = Vec::new();
        for bytes in files {
            let read = poolcap_format::read_bytes(&bytes).unwrap();
            for p in &read.packets {
                assert_eq!(
                    p.data,
                    p.ts_ns.to_be_bytes(),
                    "each packet carries its time"
                );
            }
            times.push(read.packets.iter().map(|p| p.ts_ns).collect());
        }
        (times, outcome, stop.raised())
    }

    fn file_spec(format: FileFormat) -> FileSpec {
        FileSpec::plain(
            format,
            poolcap_format::FileHeader::new(poolcap_format::LinkType::ETHERNET, 64, "t0"),
        )
    }

    #[test]
    fn merges_queues_in_timestamp_order_whatever_order_chunks_arrive_in() {
        for format in [FileFormat::PcapNs, FileFormat::Pcapng] {
            for records in [None, Some(format)] {
                let (files, outcome, stopped) = write_two_queues(format, records, None, None);
                assert!(!stopped, "no limit, no stop");
                let times = files.concat();
                assert_eq!(
                    times,
                    [10, 20, 30, 40, 50, 60, 70],
                    "{format}, room {records:?}"
                );
                assert_eq!((outcome.written, outcome.not_written), (7, 0));
                assert!(outcome.error.is_none());
            }
        }
    }

    #[test]
    fn a_packet_limit_writes_the_earliest_packets_and_counts_the_rest() {
        let format = FileFormat::Pcapng;
        let (files, outcome, stopped) = write_two_queues(format, Some(format), Some(3), None);
        let times = files.concat();
        assert_eq!(times, [10, 20, 30]);
        assert!(stopped, "the limit stops the capture");
        assert_eq!((outcome.written, outcome.not_written), (3, 4));
    }

    #[test]
    fn an_inline_writer_writes_each_chunk_when_pumped_and_sends_it_home() {
        let format = FileFormat::PcapNs;
        let size = crate::capture::pool::for_records(
            PoolSize {
                cells: 4,
                chunks: 4,
                cell_size: 64,
            },
            Some(format),
        );
        let pool = Arc::new(Pool::new(0, size, 4, Some(format)));
        let input = Arc::new(ArrayQueue::new(4));
        let progress = Arc::new(Mutex::new(Progress::default()));
        let file = Shared::default();
        let spec = file_spec(format);
        let fw = FileWriter {
            out: Savefiles::new(
                spec.clone(),
                spec.start(Box::new(file.clone())).unwrap(),
                None,
                None,
            ),
            input: Arc::clone(&input),
            pools: Arc::new(vec![Arc::clone(&pool)]),
            progress: vec![Arc::clone(&progress)],
            // Never set: the capture thread says when it is done by finishing.
            workers_done: Arc::new(AtomicBool::new(false)),
            limit: None,
            stop: Stopper::unsupervised(),
            bell: Arc::default(),
            batch_bytes: BATCH_BYTES,
            min_write: 0,
            failed: Arc::default(),
            written: Arc::default(),
        };
        let mut w = fw.inline(Box::new(IfStats::default));
        let in_file = || poolcap_format::read_bytes(&file.bytes()).unwrap().packets;
        for seq in 0..3u64 {
            let ts = [10 * seq + 1, 10 * seq + 2];
            input.push(chunk(&pool, seq, &ts)).unwrap();
            progress.lock().unwrap().sealed = seq + 1;
            w.pump();
            assert_eq!(pool.in_use(), 0, "chunk {seq} went home once pumped");
            assert_eq!(
                in_file().len(),
                2 * (seq as usize + 1),
                "chunk {seq} is in the file"
            );
        }
        w.pump(); // nothing new: no packet twice
        let outcome = w.finish();
        assert_eq!((outcome.written, outcome.not_written), (6, 0));
        let times: Vec<u64> = in_file().iter().map(|p| p.ts_ns).collect();
        assert_eq!(times, [1, 2, 11, 12, 21, 22]);
    }

    /// A size rotation in a scratch directory.
    struct TestRotation {
        dir: tempfile::TempDir,
        rotation: Rotation,
        /// Files written with `O_DIRECT`.
        direct: bool,
    }

    impl TestRotation {
        fn new(spec: RotateSpec, direct: bool) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let template = dir.path().join("r").display().to_string();
            TestRotation {
                rotation: Rotation::new(&template, spec, 0),
                dir,
                direct,
            }
        }

        fn first_name(&self) -> std::path::PathBuf {
            self.rotation.first_name()
        }

        /// The files in the directory, oldest first (r, r1, r2, ...).
        fn files_made(&self) -> Vec<std::path::PathBuf> {
            let mut files: Vec<_> = std::fs::read_dir(self.dir.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            files.sort_by_key(|p| (p.as_os_str().len(), p.clone()));
            files
        }
    }

    #[test]
    fn size_rotation_puts_every_packet_in_exactly_one_whole_file() {
        let cases = [
            (FileFormat::PcapNs, false),
            (FileFormat::Pcapng, false),
            (FileFormat::Pcapng, true),
            (FileFormat::PcapNs, true),
        ];
        for (format, direct) in cases {
            // Taken one by one (frames copied), or in runs (records framed in the ring):
            // the same files, each packet in the same one.
            let mut one_by_one = None;
            for records in [None, Some(format)] {
                // Header 24 or 68 bytes, records 24 or 40: a new file every two packets.
                let r = TestRotation::new(
                    RotateSpec {
                        size: Some(70),
                        seconds: None,
                        files: None,
                    },
                    direct,
                );
                let (files, outcome, _) = write_two_queues(format, records, None, Some(r));
                let case = format!("{format} {records:?} direct {direct}");
                assert_eq!(files.concat(), [10, 20, 30, 40, 50, 60, 70], "{case}");
                assert_eq!((outcome.written, outcome.not_written), (7, 0), "{case}");
                assert!(files.len() >= 4, "{case}: {files:?}");
                assert_eq!(files, *one_by_one.get_or_insert(files.clone()), "{case}");
            }
        }
    }

    #[test]
    fn bound_waits_for_a_queue_with_a_chunk_in_flight() {
        let size = PoolSize {
            cells: 4,
            chunks: 2,
            cell_size: 64,
        };
        let pools = Arc::new(vec![
            Arc::new(Pool::new(0, size, 4, None)),
            Arc::new(Pool::new(1, size, 4, None)),
        ]);
        let progress = vec![
            Arc::new(Mutex::new(Progress {
                sealed: 1,
                watermark_ns: 100,
            })),
            Arc::new(Mutex::new(Progress {
                sealed: 0,
                watermark_ns: 35,
            })),
        ];
        let spec = file_spec(FileFormat::Pcap);
        let out = Savefiles::new(
            spec.clone(),
            spec.start(Box::new(Vec::new())).unwrap(),
            None,
            None,
        );
        let w = FileWriter {
            out,
            input: Arc::new(ArrayQueue::new(4)),
            pools,
            progress,
            workers_done: Arc::new(AtomicBool::new(false)),
            limit: None,
            stop: Stopper::unsupervised(),
            bell: Arc::default(),
            batch_bytes: 40, // one or two records
            min_write: 0,
            failed: Arc::default(),
            written: Arc::default(),
        };
        let mut qs = vec![QueueState::default(), QueueState::default()];
        assert_eq!(
            w.bound(&qs),
            0,
            "queue 0 sealed a chunk the writer has not seen"
        );
        qs[0].next_seq = 1;
        assert_eq!(
            w.bound(&qs),
            35,
            "then the smaller watermark bounds what may be written"
        );
    }
}
