//! The forwarding sink: poolcap as an inline middlebox (WireCAP's forwarding). Processed
//! chunks leave through a second interface, unchanged, then go home to their pool.
//!
//! ```text
//! IN rx queue q ─► capture thread q ─► worker(s) ─► forwarder ─► OUT (sendmmsg from the chunk)
//!                          ▲                             │
//!                          └──────── pool q ◄── recycle ─┘
//! ```
//!
//! Order: each receive queue's chunks are numbered as they are sealed, and a flow stays on
//! one queue (fanout hash). Workers may finish chunks out of order, above all when buddy
//! offloading sends a chunk to another queue's worker, so the forwarder puts each queue's
//! chunks back in sequence before sending: frames of one flow leave in the order they came.
//! Queues are independent of each other, so unlike the file writer no timestamp merge (and no
//! watermark wait) is needed.
//!
//! Transmission copies nothing in user space: one `sendmmsg` per chunk whose iovecs point at
//! the frames where they lie in the chunk ([`poolcap_sys::tx`]), or, when IN is captured
//! with AF_XDP, the frames' UMEM addresses on the TX ring of an AF_XDP socket on OUT that
//! shares IN's UMEM ([`super::forward_xdp`]; [`Transmit`] picks). A `--drop` rule (a tcpdump
//! expression run in user space, like the AF_XDP filter stage) removes matching frames inline.
//!
//! With `-w` the forwarder passes what it sent on to the file writer: each chunk stripped of
//! the frames that did not leave ([`Chunk::retain`]), renumbered without gaps, with a
//! per-queue progress of its own for the writer's merge ([`WriteFeed`]). The writer then
//! sends the chunk home; the file holds exactly what OUT was handed. The shared-UMEM path holds
//! a chunk until OUT's completions, so with `-w` frames leave by `sendmmsg`.
//!
//! Accounting: every frame the pipeline captured ends in exactly one of `forwarded`,
//! `dropped_by_rule` or `dropped_tx` (OUT could not take it: down, or its queue stayed
//! full), so `received = forwarded + dropped_by_rule + dropped_kernel + dropped_pool +
//! dropped_tx + filtered + not_taken` per queue and in total, where `not_taken` counts the
//! frames IN's sockets held when the forwarder stopped (after the stop's cut, or past
//! `-c N`): left in the kernel as a stopped capture leaves them, never sent. When OUT stops taking frames the forwarder
//! says so once, counts the frames as `dropped_tx` and keeps trying with every new chunk, so
//! forwarding resumes by itself when OUT comes back.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use poolcap_sys::socket::is_transient;
use poolcap_sys::tx::FrameSender;
use poolcap_sys::xsk::UmemShare;
use serde::{Deserialize, Serialize};

use super::account::QueueStats;
use super::doorbell::Doorbell;
use super::error::CaptureError;
use super::filter::{compile_user, FilterError};
pub use super::forward_out::{AllForwardCounters, ForwardCounters};
use super::forward_out::{OutState, TRANSIENT_PAUSE, TRANSIENT_RETRIES};
use super::forward_xdp::XdpTransmit;
use super::pool::{Chunk, Pool};
use super::progress::Progress;
use poolcap_sys::pcap_filter::OfflineFilter;

/// Send buffer of the transmit socket: room for a few chunks of full-size frames, so a
/// burst leaving the pool does not wait for the interface frame by frame.
const SNDBUF: usize = 8 << 20;

/// A tcpdump expression whose matching frames are dropped inline.
pub struct DropRule {
    expr: String,
    program: OfflineFilter,
}

impl std::fmt::Debug for DropRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DropRule")
            .field("expr", &self.expr)
            .finish()
    }
}

impl DropRule {
    /// Compiles `expr` (frames are matched as they are forwarded, VLAN tags in place).
    pub fn compile(expr: &str) -> Result<Self, FilterError> {
        Ok(Self {
            expr: expr.to_string(),
            program: compile_user(expr, poolcap_format::LinkType::ETHERNET)?,
        })
    }

    fn matches(&self, frame: &[u8], wire_len: u32) -> bool {
        self.program.matches(frame, wire_len)
    }
}

/// How frames leave OUT.
#[derive(Debug)]
pub enum Transmit {
    /// An AF_PACKET socket, `sendmmsg` from the chunks (any backend).
    Sendmmsg(FrameSender),
    /// AF_XDP sockets sharing IN's UMEMs (IN captured with AF_XDP).
    SharedUmem(XdpTransmit),
}

/// What the caller opens before the engine starts: the transmit socket on OUT (so a bad OUT
/// fails before anything is captured) and the drop rule.
#[derive(Debug)]
pub struct ForwardSetup {
    /// OUT's name, for messages.
    pub out: String,
    /// OUT's interface index.
    pub ifindex: u32,
    /// The transmit path.
    pub transmit: Transmit,
    /// Frames matching this are dropped.
    pub drop: Option<DropRule>,
}

impl ForwardSetup {
    /// Opens a send-only socket on `out` (by interface index) and takes the drop rule.
    pub fn open(
        out: &str,
        ifindex: u32,
        drop: Option<DropRule>,
    ) -> poolcap_sys::error::Result<Self> {
        Ok(Self {
            out: out.to_string(),
            ifindex,
            transmit: Transmit::Sendmmsg(FrameSender::open(ifindex, SNDBUF)?),
            drop,
        })
    }

    /// Sends from IN's UMEMs (one share per IN queue) when IN was opened with AF_XDP
    /// (`shares` is empty otherwise, and sendmmsg stays).
    pub fn share_umem(&mut self, shares: &[UmemShare]) -> Result<(), CaptureError> {
        if !shares.is_empty() {
            self.transmit =
                Transmit::SharedUmem(XdpTransmit::bind(shares, &self.out, self.ifindex)?);
        }
        Ok(())
    }

    /// How frames are transmitted: `sendmmsg` or `af_xdp shared umem (copy|zero-copy)`.
    pub fn path(&self) -> String {
        match &self.transmit {
            Transmit::Sendmmsg(_) => "sendmmsg".into(),
            Transmit::SharedUmem(x) => x.path(),
        }
    }
}

/// A queue's chunks put back in sealed order, and what was passed on to the writer.
#[derive(Debug, Default)]
struct InOrder {
    next_seq: u64,
    waiting: BTreeMap<u64, Chunk>,
    /// Chunks passed on to the writer (their new sequence numbers).
    passed: u64,
    /// Timestamp of the last frame forwarded or dropped: the queue's frames come in
    /// timestamp order, so none that follows is earlier.
    last_ts: u64,
}

/// Where the forwarder passes what it sent, for the file writer (`-w`).
#[derive(Debug)]
pub struct WriteFeed {
    /// Chunks for the writer, holding only frames that were sent.
    pub chunks: Arc<ArrayQueue<Chunk>>,
    /// Rung when a chunk is passed on (the writer answers it).
    pub bell: Arc<Doorbell>,
    /// The capture threads' progress, by queue (read).
    capture: Vec<Arc<Mutex<Progress>>>,
    /// By queue, the progress of what was passed on: the writer merges by it.
    pub progress: Vec<Arc<Mutex<Progress>>>,
    /// Set once the last chunk is passed on.
    pub done: Arc<AtomicBool>,
}

impl WriteFeed {
    /// A feed behind capture threads publishing `capture`; `capacity`: every chunk of every
    /// pool, so passing on never fails.
    pub fn new(capture: Vec<Arc<Mutex<Progress>>>, capacity: usize) -> Self {
        Self {
            chunks: Arc::new(ArrayQueue::new(capacity)),
            bell: Arc::default(),
            progress: (0..capture.len()).map(|_| Arc::default()).collect(),
            capture,
            done: Arc::default(),
        }
    }

    /// Passes on the sent frames of `chunk` (`sent[i]`); a chunk left empty goes home.
    fn pass(&self, mut chunk: Chunk, sent: &[bool], q: &mut InOrder, pool: &Pool) {
        chunk.retain(sent);
        if chunk.is_empty() {
            pool.recycle(chunk);
            return;
        }
        chunk.seq = q.passed;
        q.passed += 1;
        // Cannot fail: the queue holds every chunk of every pool.
        let _ = self.chunks.push(chunk);
        self.bell.ring();
    }

    /// Publishes queue `i`'s progress: the chunks passed on, and a watermark below which no
    /// frame will be passed on: the last one handled, or, once every chunk the capture
    /// thread had sealed is handled, the capture thread's own watermark.
    fn publish(&self, i: usize, q: &InOrder) {
        let capture = self.capture[i].lock().map(|p| *p).unwrap_or_default();
        let mut watermark = q.last_ts;
        if q.next_seq >= capture.sealed {
            watermark = watermark.max(capture.watermark_ns);
        }
        if let Ok(mut p) = self.progress[i].lock() {
            p.sealed = q.passed;
            p.watermark_ns = p.watermark_ns.max(watermark);
        }
    }

    /// Nothing more will be passed on.
    fn finish(&self) {
        for p in &self.progress {
            if let Ok(mut p) = p.lock() {
                p.watermark_ns = u64::MAX;
            }
        }
        self.done.store(true, Ordering::Release);
        self.bell.ring();
    }
}

/// The forwarder thread's setup.
#[derive(Debug)]
pub struct Forwarder {
    /// Socket and rule.
    pub setup: ForwardSetup,
    /// Processed chunks (from workers, or straight from capture threads without a load).
    pub input: Arc<ArrayQueue<Chunk>>,
    /// Pools, to send chunks home.
    pub pools: Arc<Vec<Arc<Pool>>>,
    /// Per-queue counters.
    pub counters: AllForwardCounters,
    /// Set when every worker has finished (nothing more will arrive).
    pub workers_done: Arc<AtomicBool>,
    /// Rung when a chunk arrives.
    pub bell: Arc<Doorbell>,
    /// With `-w`: where sent frames go on to the file writer.
    pub write: Option<WriteFeed>,
}

impl Forwarder {
    /// Forwards until the workers are done and every chunk has been sent and sent home.
    pub fn run(mut self) {
        let mut queues: Vec<InOrder> = (0..self.pools.len()).map(|_| InOrder::default()).collect();
        let mut out = OutState::new(&self.setup.out, self.pools.len());
        self.bell.answer_from_this_thread();
        loop {
            // Read before draining: every chunk pushed before the flag was set is then seen.
            let done = self.workers_done.load(Ordering::Acquire);
            while let Some(c) = self.input.pop() {
                queues[c.home].waiting.insert(c.seq, c);
            }
            let mut worked = false;
            for (i, q) in queues.iter_mut().enumerate() {
                while let Some(c) = q.waiting.remove(&q.next_seq) {
                    q.next_seq += 1;
                    self.forward(c, q, &mut out);
                    worked = true;
                }
                if let Some(feed) = &self.write {
                    feed.publish(i, q);
                }
            }
            if done && self.input.is_empty() {
                break;
            }
            let holding = match &mut self.setup.transmit {
                Transmit::SharedUmem(x) => {
                    x.tend(&self.pools);
                    x.holding()
                }
                Transmit::Sendmmsg(_) => false,
            };
            if !worked {
                // Rung on every chunk; the timeout only bounds a missed ring, how long
                // completed frames wait to go home, or, when a writer merges queues, how
                // late an idle queue's watermark moves on.
                let merging = self.write.is_some() && queues.len() > 1;
                let wait_ms = if holding {
                    1
                } else if merging {
                    2
                } else {
                    20
                };
                self.bell.wait(Duration::from_millis(wait_ms));
            }
        }
        // Sequences have no gaps, so nothing is left; should a chunk be, it still goes out
        // in order and home.
        for q in &mut queues {
            for (_, c) in std::mem::take(&mut q.waiting) {
                self.forward(c, q, &mut out);
            }
        }
        if let Transmit::SharedUmem(x) = self.setup.transmit {
            x.finish(&self.pools, &self.counters);
        }
        if let Some(feed) = &self.write {
            feed.finish();
        }
        out.look(true, &self.counters);
    }

    /// The frames of `chunk` to send, and how many the rule dropped or were cut short.
    /// Also moves `q`'s last timestamp on (the writer's watermark).
    fn select(&self, chunk: &Chunk, q: &mut InOrder) -> (Vec<usize>, u64, u64) {
        let mut keep = Vec::with_capacity(chunk.len());
        let (mut by_rule, mut cut_short) = (0u64, 0u64);
        for (i, (meta, data)) in chunk.packets().enumerate() {
            q.last_ts = q.last_ts.max(meta.ts_ns);
            if self
                .setup
                .drop
                .as_ref()
                .is_some_and(|r| r.matches(data, meta.wire_len))
            {
                by_rule += 1;
            } else if meta.caplen < meta.wire_len {
                cut_short += 1;
            } else {
                keep.push(i);
            }
        }
        (keep, by_rule, cut_short)
    }

    fn forward(&mut self, chunk: Chunk, q: &mut InOrder, out: &mut OutState) {
        let home = chunk.home;
        let (keep, by_rule, cut_short) = self.select(&chunk, q);
        out.look(false, &self.counters);
        let counters = &self.counters[home];
        let sender = match &mut self.setup.transmit {
            Transmit::Sendmmsg(sender) => sender,
            Transmit::SharedUmem(x) => {
                let (sent, bytes) = if out.usable {
                    x.send(chunk, &keep, out, &self.pools[home])
                } else {
                    self.pools[home].recycle(chunk);
                    (0, 0)
                };
                ForwardCounters::add(&counters.forwarded, sent);
                ForwardCounters::add(&counters.forwarded_bytes, bytes);
                ForwardCounters::add(&counters.dropped_by_rule, by_rule);
                ForwardCounters::add(&counters.dropped_tx, keep.len() as u64 - sent + cut_short);
                return;
            }
        };
        let frames: Vec<&[u8]> = keep.iter().map(|&i| chunk.data(i)).collect();
        let mut sent = 0usize;
        let mut retries = 0u32;
        while sent < frames.len() && out.usable {
            match sender.send(&frames[sent..]) {
                Ok(n) if n > 0 => {
                    sent += n;
                    retries = 0;
                }
                Ok(_) => retries += 1,
                Err(e) if is_transient(&e) && retries < TRANSIENT_RETRIES => {
                    retries += 1;
                    std::thread::sleep(TRANSIENT_PAUSE);
                }
                Err(e) => {
                    out.refused(&e);
                    break;
                }
            }
            if retries >= TRANSIENT_RETRIES {
                out.fail("stays full");
                break;
            }
        }
        out.handed[home] += sent as u64;
        let bytes: usize = frames[..sent].iter().map(|f| f.len()).sum();
        let unsent = (frames.len() - sent) as u64;
        drop(frames);
        ForwardCounters::add(&counters.forwarded, sent as u64);
        ForwardCounters::add(&counters.forwarded_bytes, bytes as u64);
        ForwardCounters::add(&counters.dropped_by_rule, by_rule);
        ForwardCounters::add(&counters.dropped_tx, unsent + cut_short);
        let pool = &self.pools[home];
        match &self.write {
            Some(feed) => {
                let mut kept = vec![false; chunk.len()];
                keep[..sent].iter().for_each(|&i| kept[i] = true);
                feed.pass(chunk, &kept, q, pool);
            }
            None => pool.recycle(chunk),
        }
    }
}

/// The forwarding accounting of one receive queue (or the total).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardStats {
    /// Receive queue index (0 in the total).
    pub queue: usize,
    /// Every frame the queue accounted for: the sum of the seven terms below.
    pub received: u64,
    /// Sent out of OUT.
    pub forwarded: u64,
    /// Their bytes.
    pub forwarded_bytes: u64,
    /// Removed by the `--drop` rule.
    pub dropped_by_rule: u64,
    /// Dropped by the kernel on IN (ring full).
    pub dropped_kernel: u64,
    /// Dropped by the pool (no free chunk).
    pub dropped_pool: u64,
    /// Not taken by OUT.
    pub dropped_tx: u64,
    /// Rejected by the capture filter.
    pub filtered: u64,
    /// Received after the stop's cut or past `-c N`, left in the kernel and not sent.
    pub not_taken: u64,
    /// Captured but neither sent nor dropped: 0 once the engine has drained.
    pub in_flight: u64,
    /// Frames of this queue's chunks processed by a buddy's workers (they still leave in
    /// this queue's order).
    pub offloaded_out: u64,
}

impl ForwardStats {
    /// One queue's accounting from its capture counters and forwarding counters.
    pub fn of(capture: &QueueStats, fwd: &ForwardCounters) -> Self {
        let (forwarded, forwarded_bytes, dropped_by_rule, dropped_tx) = fwd.snapshot();
        Self {
            queue: capture.queue,
            received: capture.accounted(),
            forwarded,
            forwarded_bytes,
            dropped_by_rule,
            dropped_kernel: capture.dropped_kernel,
            dropped_pool: capture.dropped_pool,
            dropped_tx,
            filtered: capture.filtered,
            not_taken: capture.not_taken,
            in_flight: capture
                .captured
                .saturating_sub(forwarded + dropped_by_rule + dropped_tx),
            offloaded_out: capture.offloaded_out,
        }
    }

    /// Sums queues into a total.
    pub fn total(queues: &[ForwardStats]) -> Self {
        queues.iter().fold(Self::default(), |mut t, q| {
            t.received += q.received;
            t.forwarded += q.forwarded;
            t.forwarded_bytes += q.forwarded_bytes;
            t.dropped_by_rule += q.dropped_by_rule;
            t.dropped_kernel += q.dropped_kernel;
            t.dropped_pool += q.dropped_pool;
            t.dropped_tx += q.dropped_tx;
            t.filtered += q.filtered;
            t.not_taken += q.not_taken;
            t.in_flight += q.in_flight;
            t.offloaded_out += q.offloaded_out;
            t
        })
    }
}

/// Per-queue forwarding accounting from both sets of counters.
pub fn stats(capture: &[QueueStats], fwd: &[ForwardCounters]) -> Vec<ForwardStats> {
    capture
        .iter()
        .zip(fwd)
        .map(|(c, f)| ForwardStats::of(c, f))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_received_frame_is_in_exactly_one_term() {
        let capture = QueueStats {
            queue: 1,
            captured: 100,
            dropped_kernel: 7,
            dropped_pool: 3,
            filtered: 2,
            not_taken: 5,
            ..QueueStats::default()
        };
        let f = ForwardCounters::default();
        ForwardCounters::add(&f.forwarded, 90);
        ForwardCounters::add(&f.dropped_by_rule, 6);
        ForwardCounters::add(&f.dropped_tx, 4);
        let s = ForwardStats::of(&capture, &f);
        assert_eq!(s.received, 117);
        assert_eq!(s.in_flight, 0);
        assert_eq!(
            s.received,
            s.forwarded
                + s.dropped_by_rule
                + s.dropped_kernel
                + s.dropped_pool
                + s.dropped_tx
                + s.filtered
                + s.not_taken
        );
        let t = ForwardStats::total(&[s.clone(), s]);
        assert_eq!(
            (t.received, t.forwarded, t.dropped_tx, t.not_taken),
            (234, 180, 8, 10)
        );
    }

    #[test]
    fn drop_rules_match_what_tcpdump_would_and_bad_ones_say_why() {
        let rule = DropRule::compile("udp port 9").expect("compiles");
        let mut frame = vec![0u8; 42];
        frame[12..14].copy_from_slice(&[0x08, 0x00]); // IPv4
        frame[14] = 0x45;
        frame[23] = 17; // UDP
        frame[36..38].copy_from_slice(&9u16.to_be_bytes()); // destination port
        assert!(rule.matches(&frame, 42));
        frame[36..38].copy_from_slice(&10u16.to_be_bytes());
        assert!(!rule.matches(&frame, 42));
        let e = DropRule::compile("udp prot 9").unwrap_err();
        assert!(e.to_string().contains("udp prot 9"), "{e}");
    }

    #[test]
    fn the_writer_feed_passes_sent_frames_renumbered_and_publishes_a_safe_watermark() {
        use super::super::pool::PoolSize;
        let size = PoolSize {
            cells: 4,
            chunks: 3,
            cell_size: 128,
        };
        let pool = Pool::new(0, size, 3, None);
        let capture = Arc::new(Mutex::new(Progress {
            sealed: 2,
            watermark_ns: 100,
        }));
        let feed = WriteFeed::new(vec![Arc::clone(&capture)], 3);
        let mut q = InOrder::default();
        let chunk = |ts: &[u64]| {
            let mut c = pool.take_free().expect("a free chunk");
            for &t in ts {
                assert!(c.push(t, [&[0u8; 60], &[], &[]], 60, 60));
            }
            c
        };
        // The first chunk sent nothing: home at once, no sequence number used.
        q.next_seq = 1;
        q.last_ts = 20;
        feed.pass(chunk(&[10, 20]), &[false, false], &mut q, &pool);
        assert_eq!((pool.free_chunks(), feed.chunks.len()), (3, 0));
        feed.publish(0, &q);
        let p = *feed.progress[0].lock().unwrap();
        // One sealed chunk not yet handled: only the last handled frame bounds the merge.
        assert_eq!((p.sealed, p.watermark_ns), (0, 20));
        q.next_seq = 2;
        q.last_ts = 40;
        feed.pass(chunk(&[30, 35, 40]), &[true, false, true], &mut q, &pool);
        feed.publish(0, &q);
        let p = *feed.progress[0].lock().unwrap();
        assert_eq!(
            (p.sealed, p.watermark_ns),
            (1, 100),
            "caught up: the capture's own"
        );
        let passed = feed.chunks.pop().expect("passed on");
        assert_eq!(passed.seq, 0, "renumbered without the gap");
        let ts: Vec<u64> = passed.packets().map(|(m, _)| m.ts_ns).collect();
        assert_eq!(ts, vec![30, 40]);
        feed.finish();
        assert!(feed.done.load(Ordering::Acquire));
        assert_eq!(feed.progress[0].lock().unwrap().watermark_ns, u64::MAX);
    }
}
