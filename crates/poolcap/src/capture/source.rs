//! Where a capture thread takes packets from: an AF_PACKET fanout socket with a TPACKET_V3
//! ring, or an AF_XDP socket whose UMEM is the pool. Both fill pool chunks through a
//! [`Filler`], so the capture thread, the policies and the workers do not know the backend.
//!
//! AF_PACKET: each retired block's packets are copied into chunks and the block goes back at
//! once; timestamps are the kernel's. AF_XDP: received frames go into chunks as they are
//! (no copy); timestamps are the kernel's receive times, which poolcap's XDP program
//! stores in each frame's metadata (CLOCK_MONOTONIC, converted to wall-clock time). A user-space classic
//! BPF filter (libpcap's, the same expression as on AF_PACKET) rejects frames before they
//! enter a chunk; they go straight back to the fill ring and count as `filtered`.
//!
//! Both take packets only up to the stop's cut and within a count limit (see `end`); the
//! packets past either count as `not_taken`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use poolcap_sys::poll::Readiness;
use poolcap_sys::rx_ring::{RingGeometry, RxRing, TP_STATUS_VLAN_TPID_VALID, TP_STATUS_VLAN_VALID};
use poolcap_sys::socket::{BpfInsn, FanoutMode, PacketSocket};
use poolcap_sys::xsk::{RxFrame, Xsk, XskStats};
use poolcap_sys::SysError;

use super::end::{Budget, Cut};
use super::pool::{Chunk, Pool};
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
    /// When it was opened.
    pub open_since: Instant,
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
            open_since: Instant::now(),
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
    fn begin_batch(&mut self) {
        self.cut_ns = self.cut.get();
    }

    /// True (and counted) when a packet received at `ts` is not to be taken: past the cut.
    #[inline]
    fn past_cut(&mut self, ts: u64) -> bool {
        let past = ts > self.cut_ns;
        self.tally.not_taken += u64::from(past);
        past
    }

    /// Takes a unit of the count limit, if there is one; false (and counted) when spent.
    #[inline]
    fn within_budget(&mut self) -> bool {
        let ok = self.budget.as_ref().is_none_or(|b| b.take());
        self.tally.not_taken += u64::from(!ok);
        ok
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
            self.open_since = Instant::now();
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
    fn push_copy(&mut self, pool: &Pool, ts: u64, parts: [&[u8]; 3], wire: u32) {
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

    /// Puts a frame into a chunk; returns it if no chunk took it (it goes straight back to
    /// the kernel: counted, or dropped for want of a chunk).
    #[inline]
    fn push_frame(&mut self, pool: &Pool, ts: u64, frame: RxFrame) -> Option<RxFrame> {
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

/// An AF_PACKET fanout socket with its ring.
#[derive(Debug)]
pub struct PacketSource {
    sock: PacketSocket,
    ring: RxRing,
}

impl PacketSource {
    /// Opens a socket, attaches `filter` (if any) and a ring before binding (so no
    /// unfiltered packet slips in), binds to `ifindex` and joins the fanout group (if any).
    /// Both are per-packet work the kernel does on the receiving path, which on veth runs
    /// on the sender's CPU: a single queue needs no fanout, and no filter means none runs.
    pub fn open(
        ifindex: u32,
        geometry: RingGeometry,
        filter: Option<&[BpfInsn]>,
        fanout: Option<(u16, FanoutMode)>,
    ) -> Result<Self, SysError> {
        let sock = PacketSocket::open()?;
        sock.set_tpacket_v3()?;
        if let Some(f) = filter {
            sock.attach_filter(f)?;
        }
        let ring = RxRing::new(&sock, geometry)?;
        sock.bind(ifindex)?;
        if let Some((group, mode)) = fanout {
            sock.join_fanout(group, mode)?;
        }
        Ok(Self { sock, ring })
    }

    fn take_batch(&mut self, pool: &Pool, filler: &mut Filler) -> bool {
        let Some(block) = self.ring.try_next_block() else {
            return false;
        };
        filler.begin_batch();
        for pkt in block.packets() {
            let ts = u64::from(pkt.sec) * 1_000_000_000 + u64::from(pkt.nsec);
            // Put back the VLAN tag the kernel stripped, so the file shows the wire.
            let mut tag = [0u8; 4];
            if pkt.status & TP_STATUS_VLAN_VALID != 0 && pkt.data.len() >= 12 {
                let tpid = if pkt.status & TP_STATUS_VLAN_TPID_VALID != 0 {
                    pkt.vlan_tpid
                } else {
                    0x8100
                };
                tag[..2].copy_from_slice(&tpid.to_be_bytes());
                tag[2..].copy_from_slice(&pkt.vlan_tci.to_be_bytes());
                filler.push_copy(
                    pool,
                    ts,
                    [&pkt.data[..12], &tag, &pkt.data[12..]],
                    pkt.wire_len + 4,
                );
            } else {
                filler.push_copy(pool, ts, [pkt.data, &[], &[]], pkt.wire_len);
            }
        }
        true
    }
}

/// An AF_XDP socket of one receive queue, with an optional user-space filter.
pub struct XdpSource {
    xsk: Xsk,
    filter: Option<pcap::BpfProgram>,
    batch: Vec<RxFrame>,
    rejected: Vec<RxFrame>,
    last: XskStats,
    /// CLOCK_MONOTONIC to wall clock, for the receive times the XDP program records.
    clock_offset: i64,
}

impl std::fmt::Debug for XdpSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpSource").field("xsk", &self.xsk).finish()
    }
}

/// Frames taken from the RX ring per batch.
const XDP_BATCH: usize = 256;

impl XdpSource {
    /// Wraps a bound socket; `filter` is a compiled tcpdump expression, if any.
    pub fn new(xsk: Xsk, filter: Option<pcap::BpfProgram>) -> Self {
        Self {
            xsk,
            filter,
            batch: Vec::with_capacity(XDP_BATCH),
            rejected: Vec::with_capacity(XDP_BATCH),
            last: XskStats::default(),
            clock_offset: poolcap_sys::process::monotonic_to_realtime_offset(),
        }
    }

    fn take_batch(&mut self, pool: &Pool, filler: &mut Filler) -> bool {
        self.batch.clear();
        if self.xsk.receive(XDP_BATCH, &mut self.batch) == 0 {
            return false;
        }
        filler.begin_batch();
        // Kernel receive time from the XDP metadata; the batch time if a frame has none.
        let now = now_ns();
        for frame in self.batch.drain(..) {
            let ts = self
                .xsk
                .umem()
                .meta_u64(&frame)
                .map(|mono| mono.wrapping_add_signed(self.clock_offset))
                .filter(|&t| t <= now + 1_000_000 && now.saturating_sub(t) < 10_000_000_000)
                .unwrap_or(now);
            if filler.past_cut(ts) {
                self.rejected.push(frame);
                continue;
            }
            let keep = match &self.filter {
                Some(p) => p.filter(self.xsk.umem().data(&frame)),
                None => true,
            };
            if !keep {
                filler.tally.filtered += 1;
                self.rejected.push(frame);
            } else if let Some(f) = filler.push_frame(pool, ts, frame) {
                self.rejected.push(f);
            }
        }
        self.xsk.refill(self.rejected.drain(..));
        true
    }
}

/// A capture thread's source of packets.
#[derive(Debug)]
pub enum Source {
    /// AF_PACKET TPACKET_V3.
    Packet(PacketSource),
    /// AF_XDP.
    Xdp(Box<XdpSource>),
}

impl Source {
    /// Moves one batch (a retired block, or up to 256 frames) into chunks; false if the
    /// kernel had nothing ready.
    pub fn take_batch(&mut self, pool: &Pool, filler: &mut Filler) -> bool {
        match self {
            Source::Packet(s) => s.take_batch(pool, filler),
            Source::Xdp(s) => s.take_batch(pool, filler),
        }
    }

    /// How many packets the next batch holds, when the source can tell before taking it
    /// (AF_PACKET: the next retired block's count). AF_XDP frames are in the pool already.
    pub fn next_batch_len(&self) -> Option<usize> {
        match self {
            Source::Packet(s) => s.ring.next_block_packets().map(|n| n as usize),
            Source::Xdp(_) => None,
        }
    }

    /// Gives the frames of chunks that came home back to the kernel (AF_XDP only).
    pub fn take_back(&mut self, pool: &Pool) {
        if let Source::Xdp(s) = self {
            while let Some(mut c) = pool.take_returned() {
                s.xsk.refill(c.take_frames());
                pool.release(c);
            }
        }
    }

    /// True when frames of chunks that come home must be given back to the kernel by the
    /// capture thread (AF_XDP's fill ring) before the kernel can receive into them.
    pub fn refills_from_pool(&self) -> bool {
        matches!(self, Source::Xdp(_))
    }

    /// Waits up to `timeout` for packets in the kernel's `poll`.
    pub fn poll(&self, timeout: Duration) -> Result<Readiness, SysError> {
        // A zero timeout only looks (or wakes the kernel); otherwise round up to 1 ms.
        let ms = if timeout.is_zero() {
            0
        } else {
            timeout.as_millis().clamp(1, i32::MAX as u128) as i32
        };
        match self {
            Source::Packet(s) => s.sock.wait_readable(ms),
            Source::Xdp(s) => s.xsk.wait(ms),
        }
    }

    /// How long a capture thread that has just emptied the source lets packets gather before
    /// it looks again. AF_PACKET needs none (the kernel batches packets into blocks and wakes
    /// the reader once per block); AF_XDP frames are visible one by one, and waking per
    /// frame costs a wakeup on both CPUs for a handful of frames. 1 ms at 1 Mpps is 1000
    /// frames, far below the RX ring's R*M entries, and below AF_PACKET's block timeout.
    pub fn coalesce(&self) -> Duration {
        match self {
            Source::Packet(_) => Duration::ZERO,
            Source::Xdp(_) => Duration::from_millis(1),
        }
    }

    /// True when the kernel waits for a syscall before it delivers more (AF_XDP
    /// need_wakeup); a spinning capture thread then makes one.
    pub fn needs_wakeup(&self) -> bool {
        match self {
            Source::Packet(_) => false,
            Source::Xdp(s) => s.xsk.needs_wakeup(),
        }
    }

    /// How long a packet can sit in the kernel before this source can see it: the block
    /// retire timeout on AF_PACKET, nothing on AF_XDP (frames are visible at once).
    pub fn visibility_delay(&self) -> Duration {
        match self {
            Source::Packet(s) => {
                Duration::from_millis(u64::from(s.ring.geometry().retire_timeout_ms))
            }
            Source::Xdp(_) => Duration::ZERO,
        }
    }

    /// Lets go of the packets the kernel has ready and not yet handed over, when the
    /// kernel does not count them itself (AF_XDP's RX ring); returns how many. AF_PACKET
    /// counts what it put into the ring ([`KernelDrops::received`]) instead.
    pub fn let_go_ready(&mut self) -> u64 {
        let Source::Xdp(s) = self else {
            return 0;
        };
        let mut n = 0;
        loop {
            s.batch.clear();
            let got = s.xsk.receive(XDP_BATCH, &mut s.batch);
            if got == 0 {
                return n;
            }
            n += got as u64;
            s.xsk.refill(s.batch.drain(..));
        }
    }

    /// Kernel drops since the previous call.
    pub fn kernel_drops(&mut self) -> Result<KernelDrops, SysError> {
        match self {
            Source::Packet(s) => {
                let st = s.sock.take_statistics()?;
                Ok(KernelDrops {
                    kernel: st.drops,
                    pool: 0,
                    freezes: st.freezes,
                    received: Some(st.received),
                })
            }
            Source::Xdp(s) => {
                // XDP_STATISTICS are cumulative: report the difference.
                let now = s.xsk.statistics()?;
                let d = |a: u64, b: u64| a.saturating_sub(b);
                let drops = KernelDrops {
                    kernel: d(now.rx_ring_full, s.last.rx_ring_full)
                        + d(now.rx_invalid_descs, s.last.rx_invalid_descs),
                    pool: d(now.rx_dropped, s.last.rx_dropped),
                    freezes: 0,
                    received: None,
                };
                s.last = now;
                Ok(drops)
            }
        }
    }
}
