//! Where a capture thread takes packets from: the [`Source`] trait, and the [`Filler`]
//! through which every source puts packets into pool chunks, so the capture thread, the
//! policies and the workers do not know where packets come from.
//!
//! Sources: an AF_PACKET fanout socket with a TPACKET_V3 ring (`af_packet`), an AF_XDP
//! socket whose UMEM is the pool (`af_xdp`), a pcap/pcapng file (`file`) and an in-memory
//! list with injected faults, for tests and the simulator (`mem`). Every source takes packets only up to the
//! stop's cut and within a count limit (see `end`); the packets past either count as
//! `not_taken`. A source only moves packets and reports the kernel's counters; what to do
//! when it has none (wait, seal, stop) is the capture thread's decision.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use poolcap_sys::poll::Readiness;
use poolcap_sys::xsk::RxFrame;
use poolcap_sys::SysError;

use super::end::{Budget, Cut};
use super::error::CaptureError;
use super::pool::{Chunk, HeldRoom, PacketMeta, Pool};
use super::worker::x_loop;

/// Wall-clock nanoseconds since the epoch (the kernel's timestamp clock).
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Per-batch tallies, published once per batch.
#[derive(Debug, Default)]
pub struct Tally {
    /// Packets put into chunks.
    pub captured: u64,
    /// Their wire bytes.
    pub bytes: u64,
    /// Packets dropped for want of a free chunk.
    pub dropped_pool: u64,
    /// Packets rejected by the user-space filter.
    pub filtered: u64,
    /// Packets taken from the kernel past the stop's cut or the count limit, and let go.
    pub not_taken: u64,
}

impl Tally {
    /// Every packet the batch took from the kernel.
    pub fn taken(&self) -> u64 {
        self.captured + self.dropped_pool + self.filtered + self.not_taken
    }
}

/// Puts packets into the open chunk, taking free chunks from the pool as they fill up.
#[derive(Debug)]
pub struct Filler {
    /// The chunk being filled.
    pub open: Option<Chunk>,
    /// Chunks opened so far: the shell notes the time it sees each new one (see
    /// [`super::clock`]).
    pub opened: u64,
    /// Chunks filled during the current batch, to seal once the batch is done.
    pub full: Vec<Chunk>,
    /// What the current batch did.
    pub tally: Tally,
    /// Bytes kept per packet.
    pub snaplen: usize,
    /// Process packets where they lie in the kernel's ring instead of copying them into
    /// chunks: `Some(0)` when nothing downstream looks at them (no load, no file: the papers'
    /// /dev/null case), `Some(x)` to run the x-loop in place (`--inplace`, the plain fanout
    /// reader that Suricata and Zeek use, whose ring is the only buffer).
    pub in_place: Option<u32>,
    /// The stop's cut, shared by the queues.
    cut: Arc<Cut>,
    /// The cut as read after the current batch was taken.
    cut_ns: u64,
    /// The count limit, shared by the queues.
    budget: Option<Arc<Budget>>,
}

impl Filler {
    /// An empty filler.
    pub fn new(
        snaplen: usize,
        chunks: usize,
        in_place: Option<u32>,
        cut: Arc<Cut>,
        budget: Option<Arc<Budget>>,
    ) -> Self {
        Self {
            open: None,
            opened: 0,
            full: Vec::with_capacity(chunks),
            tally: Tally::default(),
            snaplen,
            in_place,
            cut,
            cut_ns: u64::MAX,
            budget,
        }
    }

    /// Called by a source once it has taken a batch from the kernel, before its packets:
    /// every packet of the batch was received before the cut is read here.
    #[inline]
    pub(crate) fn begin_batch(&mut self) {
        self.cut_ns = self.cut.get();
    }

    /// True once the stop's cut is fixed (as read by [`Filler::begin_batch`]): sources
    /// whose packets have no arrival time of their own (a file) stop delivering.
    pub(crate) fn stopping(&self) -> bool {
        self.cut_ns != u64::MAX
    }

    /// True (and counted) when a packet received at `ts` is not to be taken: past the cut.
    #[inline]
    pub(crate) fn past_cut(&mut self, ts: u64) -> bool {
        if ts <= self.cut_ns {
            return false;
        }
        self.tally.not_taken += 1;
        true
    }

    /// True once the count limit is spent: a source that chooses what it reads (a file)
    /// reads no further.
    pub(crate) fn budget_spent(&self) -> bool {
        self.budget.as_ref().is_some_and(|b| b.is_spent())
    }

    /// Takes a unit of the count limit, if there is one; false (and counted) when spent.
    #[inline]
    fn within_budget(&mut self) -> bool {
        let Some(b) = &self.budget else {
            return true;
        };
        if b.take() {
            return true;
        }
        self.tally.not_taken += 1;
        false
    }

    /// Gives back the unit of a packet that the pool had no room for.
    fn refund(&self) {
        if let Some(b) = &self.budget {
            b.refund();
        }
    }

    fn open_chunk(&mut self, pool: &Pool) -> Option<&mut Chunk> {
        if self.open.is_none() {
            self.open = pool.take_free();
            self.opened += 1;
        }
        self.open.as_mut()
    }

    fn close_chunk(&mut self) {
        if let Some(c) = self.open.take() {
            self.full.push(c);
        }
    }

    /// Copies a packet (the concatenation of `parts`) into a chunk.
    #[inline]
    pub(crate) fn push_copy(&mut self, pool: &Pool, ts: u64, parts: [&[u8]; 3], wire: u32) {
        if self.past_cut(ts) || !self.within_budget() {
            return;
        }
        if let Some(load) = self.in_place {
            if load > 0 {
                for p in parts.iter().filter(|p| !p.is_empty()) {
                    x_loop(p, load);
                }
            }
            self.tally.captured += 1;
            self.tally.bytes += u64::from(wire);
            return;
        }
        let len = parts.iter().map(|p| p.len()).sum::<usize>();
        let snaplen = self.snaplen;
        loop {
            let Some(chunk) = self.open_chunk(pool) else {
                self.tally.dropped_pool += 1;
                self.refund();
                return;
            };
            let caplen = len.min(snaplen).min(chunk.capacity_bytes());
            if chunk.push(ts, parts, caplen, wire) {
                self.tally.captured += 1;
                self.tally.bytes += u64::from(wire);
                return;
            }
            self.close_chunk();
        }
    }

    /// Takes a packet that stays where it lies, at `offset` in a ring block of `room`
    /// ([`HeldRoom::meta`]), into `meta`, the block's packets as walked; `len` bytes lie
    /// there.
    #[inline]
    pub(crate) fn push_held(
        &mut self,
        meta: &mut Vec<PacketMeta>,
        room: &HeldRoom,
        ts: u64,
        offset: usize,
        len: usize,
        wire: u32,
    ) {
        if self.past_cut(ts) || !self.within_budget() {
            return;
        }
        if let Some(m) = room.meta(ts, offset, len.min(self.snaplen), wire) {
            meta.push(m);
            self.tally.captured += 1;
            self.tally.bytes += u64::from(wire);
        } else {
            self.tally.dropped_pool += 1;
            self.refund();
        }
    }

    /// Seals a chunk holding a ring block once its packets are pushed; one with none goes
    /// home at once, which gives the block back.
    pub(crate) fn seal_held(&mut self, pool: &Pool, chunk: Chunk) {
        if chunk.is_empty() {
            pool.recycle(chunk);
        } else {
            self.full.push(chunk);
        }
    }

    /// Puts a frame into a chunk; returns it if no chunk took it (it goes straight back to
    /// the kernel: counted, or dropped for want of a chunk).
    #[inline]
    pub(crate) fn push_frame(&mut self, pool: &Pool, ts: u64, frame: RxFrame) -> Option<RxFrame> {
        if !self.within_budget() {
            return Some(frame);
        }
        let wire = frame.len() as u64;
        if self.in_place == Some(0) {
            self.tally.captured += 1;
            self.tally.bytes += wire;
            return Some(frame);
        }
        let snaplen = self.snaplen;
        let Some(chunk) = self.open_chunk(pool) else {
            self.tally.dropped_pool += 1;
            self.refund();
            return Some(frame);
        };
        let pushed = chunk.push_frame(ts, frame, snaplen);
        let full = chunk.is_full();
        match pushed {
            Ok(()) => {
                self.tally.captured += 1;
                self.tally.bytes += wire;
                if full {
                    self.close_chunk();
                }
                None
            }
            Err(f) => {
                self.tally.dropped_pool += 1;
                self.refund();
                Some(f)
            }
        }
    }
}

/// Kernel-side counters since the previous read.
#[derive(Debug, Default, Clone, Copy)]
pub struct KernelDrops {
    /// The kernel had no room for the packet (ring full).
    pub kernel: u64,
    /// The kernel had no pool frame for the packet (AF_XDP fill ring empty).
    pub pool: u64,
    /// Times the ring froze.
    pub freezes: u64,
    /// Packets the kernel put into the ring, when it counts them (AF_PACKET).
    pub received: Option<u64>,
}

/// A capture thread's source of packets; see the module docs. Called once per batch, never
/// per packet.
pub trait Source: Send + std::fmt::Debug {
    /// Moves one batch (a retired block, a burst of frames, a run of a file's packets) into
    /// chunks; false if nothing was ready.
    fn take_batch(&mut self, pool: &Pool, filler: &mut Filler) -> bool;

    /// Waits up to `timeout` for packets (the kernel's `poll`, or a sleep).
    fn poll(&self, timeout: Duration) -> Result<Readiness, SysError>;

    /// How many packets the next batch holds, when the source can tell before taking it;
    /// the capture thread then leaves it where it is while the pool has no room for it.
    fn next_batch_len(&self) -> Option<usize> {
        None
    }

    /// Gives the frames of chunks that came home back to the kernel (AF_XDP).
    fn take_back(&mut self, _pool: &Pool) {}

    /// Whether taking packets is real work for the capture thread (a file: reading,
    /// decoding and copying every packet), so that the writer runs in a thread of its own,
    /// beside it, rather than between its batches (see `writer::InlineWriter`).
    fn works_per_packet(&self) -> bool {
        false
    }

    /// True when frames of chunks that come home must be given back to the kernel by the
    /// capture thread (AF_XDP's fill ring) before the kernel can receive into them.
    fn refills_from_pool(&self) -> bool {
        false
    }

    /// How long a capture thread that has just emptied the source lets packets gather
    /// before it looks again (see `af_xdp`).
    fn coalesce(&self) -> Duration {
        Duration::ZERO
    }

    /// True when the kernel waits for a syscall before it delivers more (AF_XDP
    /// need_wakeup); a spinning capture thread then makes one.
    fn needs_wakeup(&self) -> bool {
        false
    }

    /// How long a packet can sit in the source before it can be taken (AF_PACKET: the
    /// block retire timeout).
    fn visibility_delay(&self) -> Duration {
        Duration::ZERO
    }

    /// Counters of packets lost before they could be taken, since the previous call.
    fn kernel_drops(&mut self) -> Result<KernelDrops, SysError> {
        Ok(KernelDrops::default())
    }

    /// Lets go of the packets ready and not taken when the source does not count them in
    /// [`KernelDrops::received`]; returns how many.
    fn let_go_ready(&mut self) -> u64 {
        0
    }

    /// True once the source will never have packets again (a file read to its end).
    fn exhausted(&self) -> bool {
        false
    }

    /// Called once after the last batch: the error that cut the source short (a file that
    /// goes bad part-way), which fails the capture once what was taken is drained.
    fn finish(&mut self) -> Result<(), CaptureError> {
        Ok(())
    }
}

/// A wait's timeout in `poll`'s milliseconds: zero only looks (or wakes the kernel);
/// otherwise at least 1 ms.
pub fn poll_ms(timeout: Duration) -> i32 {
    if timeout.is_zero() {
        0
    } else {
        timeout.as_millis().clamp(1, i32::MAX as u128) as i32
    }
}
