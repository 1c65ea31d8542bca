//! The TPACKET_V3 receive ring: blocks the kernel fills and hands to user space.
//!
//! The ring is an array of `block_nr` blocks of `block_size` bytes shared with the kernel.
//! Each block starts with a `tpacket_block_desc` whose `block_status` word says who owns it:
//! `TP_STATUS_KERNEL` (the kernel may write) or `TP_STATUS_USER` (retired, full or timed out,
//! now ours). Blocks are handed over strictly in ring order, so holding one block stops the
//! kernel at that block: the caller copies packets out and drops the [`Block`] guard at once,
//! which returns it. A [`HeldBlock`] is the other way: the block leaves the ring as an owned
//! value, goes to another thread (the file writer frames records in place and writes them
//! from the ring, with no copy) and returns to the kernel when dropped; held in ring order
//! and dropped in that order, the held blocks are simply the oldest part of the ring.
//!
//! Memory ordering: the kernel fills a block, issues `smp_wmb()` and then stores
//! `TP_STATUS_USER` (net/packet/af_packet.c `prb_close_block`), so we load the status with
//! `Acquire` before reading packets; we give the block back with a `Release` store of
//! `TP_STATUS_KERNEL` after our last read, which the kernel pairs with `smp_rmb()` in
//! `prb_queue_frozen`/`prb_retire_current_block` before it writes the block again.
//!
//! Everything read from a block (packet count, offsets, lengths) is bounds-checked against the
//! block before use, so a malformed block ends iteration instead of reading out of bounds.

use std::marker::PhantomData;
use std::ops::Range;
use std::os::fd::AsFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use crate::error::{Result, SysError};
use crate::mmap::Mmap;
use crate::socket::PacketSocket;

/// Sizes of a TPACKET_V3 ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingGeometry {
    /// Bytes per block; a multiple of the page size.
    pub block_size: u32,
    /// Number of blocks.
    pub block_nr: u32,
    /// Milliseconds after which the kernel retires a block that is not full.
    pub retire_timeout_ms: u32,
}

impl RingGeometry {
    /// Total bytes of the ring.
    pub fn bytes(&self) -> usize {
        self.block_size as usize * self.block_nr as usize
    }
}

// Offsets inside `struct tpacket_block_desc` (include/uapi/linux/if_packet.h).
const BD_BLOCK_STATUS: usize = 8;
const BD_NUM_PKTS: usize = 12;
const BD_OFFSET_TO_FIRST_PKT: usize = 16;
const BD_BLK_LEN: usize = 20;
// Offsets inside `struct tpacket3_hdr`.
const PH_NEXT_OFFSET: usize = 0;
const PH_SEC: usize = 4;
const PH_NSEC: usize = 8;
const PH_SNAPLEN: usize = 12;
const PH_LEN: usize = 16;
const PH_STATUS: usize = 20;
const PH_MAC: usize = 24;
const PH_VLAN_TCI: usize = 32;
const PH_VLAN_TPID: usize = 36;
const PH_SIZE: usize = 48;
/// `struct sockaddr_ll`, which follows the header (at `TPACKET_ALIGN(sizeof tpacket3_hdr)`,
/// which is 48).
const SLL_SIZE: usize = 20;

/// `tp_status` bit: the VLAN tag was stripped and is in `tp_vlan_tci`.
pub const TP_STATUS_VLAN_VALID: u32 = libc::TP_STATUS_VLAN_VALID;
/// `tp_status` bit: `tp_vlan_tpid` is valid.
pub const TP_STATUS_VLAN_TPID_VALID: u32 = libc::TP_STATUS_VLAN_TPID_VALID;

/// A mapped TPACKET_V3 receive ring.
#[derive(Debug)]
pub struct RxRing {
    map: Arc<Mmap>,
    geometry: RingGeometry,
    next: u32,
    /// Per block: taken out of the ring as a [`HeldBlock`] not yet dropped. Its status
    /// word still says "user" then, as it did when the kernel retired it: without this a
    /// ring whose every block was held (a writer behind, more chunks in flight than the
    /// ring has blocks) came round to the oldest held block and took it again, and its
    /// packets were written twice.
    held: Arc<[AtomicBool]>,
}

impl RxRing {
    /// Creates the ring on `sock` (which must already use TPACKET_V3) and maps it.
    pub fn new(sock: &PacketSocket, geometry: RingGeometry) -> Result<Self> {
        const FRAME: u32 = 2048;
        if geometry.block_size == 0
            || !geometry.block_size.is_multiple_of(FRAME)
            || geometry.block_nr == 0
        {
            return Err(SysError {
                call: "setsockopt(PACKET_RX_RING)",
                what: format!("block size {} x {}", geometry.block_size, geometry.block_nr),
                source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
            });
        }
        let req = libc::tpacket_req3 {
            tp_block_size: geometry.block_size,
            tp_block_nr: geometry.block_nr,
            tp_frame_size: FRAME,
            tp_frame_nr: geometry.block_size / FRAME * geometry.block_nr,
            tp_retire_blk_tov: geometry.retire_timeout_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        sock.set_rx_ring(&req)?;
        let map = Arc::new(Mmap::shared(sock.as_fd(), geometry.bytes())?);
        Ok(Self {
            map,
            geometry,
            next: 0,
            held: (0..geometry.block_nr)
                .map(|_| AtomicBool::new(false))
                .collect(),
        })
    }

    /// The ring's geometry.
    pub fn geometry(&self) -> RingGeometry {
        self.geometry
    }

    fn block_ptr(&self, i: u32) -> *mut u8 {
        // SAFETY: i < block_nr, so the offset stays inside the mapping of block_nr*block_size.
        unsafe {
            self.map
                .base()
                .as_ptr()
                .add(i as usize * self.geometry.block_size as usize)
        }
    }

    fn status_word(&self, i: u32) -> &AtomicU32 {
        // SAFETY: block i lies in our live mapping (see `status_at`).
        unsafe { status_at(self.block_ptr(i)) }
    }

    /// True when the kernel has retired block `i` to user space. Acquire: the block's
    /// contents, written before the kernel's status store, are visible after it.
    fn retired(&self, i: u32) -> bool {
        // Pairs with the `smp_wmb()` before `prb_flush_block` stores TP_STATUS_USER in
        // `prb_close_block` (https://github.com/torvalds/linux/blob/v6.6/net/packet/af_packet.c).
        !self.held[i as usize].load(Ordering::Acquire)
            && self.status_word(i).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// A u32 field of block `i`'s header, at byte offset `at` (< the first packet).
    fn header_u32(&self, i: u32, at: usize) -> u32 {
        debug_assert!(self.retired(i) && at < BD_BLK_LEN + 4);
        // SAFETY: callers pass a block that `retired` said is ours, and the kernel does not
        // write it until we give it back; `at` is one of the header offsets above, inside
        // the block; read unaligned to be independent of layout.
        unsafe { self.block_ptr(i).add(at).cast::<u32>().read_unaligned() }
    }

    /// How many packets the next block holds, if the kernel has retired it to user space;
    /// the block stays in the ring (a capture thread asks before it has room for them).
    pub fn next_block_packets(&self) -> Option<u32> {
        self.retired(self.next)
            .then(|| self.header_u32(self.next, BD_NUM_PKTS))
    }

    /// Takes the next block if the kernel has retired it to user space.
    pub fn try_next_block(&mut self) -> Option<Block<'_>> {
        let (i, first, end, num_pkts) = self.take_retired()?;
        let base = self.block_ptr(i);
        // SAFETY: [first, end) lies inside block i (body_bounds keeps it within block_size),
        // which the kernel does not write until we store TP_STATUS_KERNEL in Block::drop; the
        // slice does not cover the status word (first > BD_BLOCK_STATUS + 4), and it cannot
        // outlive the Block guard.
        let body = unsafe { std::slice::from_raw_parts(base.add(first), end - first) };
        Some(Block {
            ring: self,
            index: i,
            num_pkts,
            first,
            body,
            _not_send: PhantomData,
        })
    }

    /// True when the block before the next one is not back with the kernel (a
    /// [`HeldBlock`] not yet dropped). The kernel's `poll` then says "readable" whether or
    /// not another block has retired (it looks at that block), so it cannot be waited on.
    pub fn last_taken_held(&self) -> bool {
        let last = self
            .next
            .checked_sub(1)
            .unwrap_or(self.geometry.block_nr - 1);
        self.status_word(last).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// If the kernel has retired the next block to user space: moves on past it and says
    /// which it is, where its packets lie (`[first, end)`, see [`body_bounds`]) and how many
    /// the header claims.
    fn take_retired(&mut self) -> Option<(u32, usize, usize, u32)> {
        let i = self.next;
        if !self.retired(i) {
            return None;
        }
        let (first, end) = body_bounds(
            self.header_u32(i, BD_OFFSET_TO_FIRST_PKT),
            self.header_u32(i, BD_BLK_LEN),
            self.geometry.block_size as usize,
        );
        self.next = (i + 1) % self.geometry.block_nr;
        Some((i, first, end, self.header_u32(i, BD_NUM_PKTS)))
    }

    /// Takes the next block out of the ring if the kernel has retired it to user space: it
    /// stays ours, wherever it goes, until the [`HeldBlock`] is dropped.
    pub fn hold_next(&mut self) -> Option<HeldBlock> {
        let (i, first, end, num_pkts) = self.take_retired()?;
        let size = self.geometry.block_size as usize;
        // block_ptr is inside a live mapping, so never null.
        let base = NonNull::new(self.block_ptr(i))?;
        self.held[i as usize].store(true, Ordering::Release);
        Some(HeldBlock {
            _map: Arc::clone(&self.map),
            held: Arc::clone(&self.held),
            index: i as usize,
            base,
            size,
            first,
            end,
            num_pkts,
        })
    }
}

/// The status word of the block at `block`.
///
/// # Safety
/// `block` is the start of a block of a live ring mapping, and the returned reference does
/// not outlive that mapping.
unsafe fn status_at<'a>(block: *mut u8) -> &'a AtomicU32 {
    // SAFETY: the status word is a 4-byte aligned u32 inside the block (blocks are page
    // aligned), live as the caller promises; the kernel accesses it only atomically-by-word,
    // and we only through this AtomicU32.
    unsafe { AtomicU32::from_ptr(block.add(BD_BLOCK_STATUS).cast::<u32>()) }
}

/// A retired block taken out of the ring: owned by user space, and by this value alone,
/// until dropped. It keeps the mapping alive, so it may outlive the ring's socket.
pub struct HeldBlock {
    _map: Arc<Mmap>,
    /// The ring's held flags (see [`RxRing`]) and this block's place in them.
    held: Arc<[AtomicBool]>,
    index: usize,
    base: NonNull<u8>,
    size: usize,
    first: usize,
    end: usize,
    num_pkts: u32,
}

// SAFETY: the block is ours alone until `drop` hands it back (the kernel writes it only
// after that store, the ring's other views never point into it), and the mapping it points
// into lives as long as `_map`; moving that ownership to another thread is sound.
unsafe impl Send for HeldBlock {}

impl std::fmt::Debug for HeldBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldBlock")
            .field("num_pkts", &self.num_pkts)
            .field("used", &(self.first..self.end))
            .finish()
    }
}

impl HeldBlock {
    /// A block made of `block` (a whole TPACKET_V3 block, header first) in memory of its
    /// own rather than a ring's, read with the same bounds as a ring block: for tests of
    /// what holds ring blocks, as [`block_packets`] is for the walk.
    pub fn copy_of(block: &[u8]) -> Result<Self> {
        let map = Arc::new(Mmap::anonymous(block.len().max(BD_BLK_LEN + 4))?);
        let base = map.base();
        // SAFETY: the fresh mapping is at least `block.len()` bytes, writable, and no other
        // view of it exists yet; `block` cannot overlap it.
        unsafe { std::ptr::copy_nonoverlapping(block.as_ptr(), base.as_ptr(), block.len()) };
        let size = map.len();
        let field = |at| u32_at(block, at).unwrap_or(0);
        let (first, end) = body_bounds(field(BD_OFFSET_TO_FIRST_PKT), field(BD_BLK_LEN), size);
        Ok(HeldBlock {
            _map: map,
            held: Arc::new([AtomicBool::new(true)]),
            index: 0,
            base,
            size,
            first,
            end,
            num_pkts: field(BD_NUM_PKTS),
        })
    }

    /// The block's packets in arrival order; each says where its bytes lie in the block
    /// ([`RxPacket::offset`]).
    pub fn packets(&self) -> Packets<'_> {
        Packets::new(self.bytes(self.first..self.end), self.first, self.num_pkts)
    }

    /// The block's size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Where the block's packets begin (its `offset_to_first_pkt`): before it lies the
    /// kernel's block descriptor.
    pub fn body_start(&self) -> usize {
        self.first
    }

    /// Bytes `range` of the block (offsets from its start, past its header).
    pub fn bytes(&self, range: Range<usize>) -> &[u8] {
        self.check(&range);
        // SAFETY: `check` keeps the range inside this block and past its header (so off the
        // status word); the block is ours alone (see `Send`) and mapped while `_map` lives.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(range.start), range.len()) }
    }

    /// Bytes `range` of the block, to change in place (a record's framing, a VLAN tag put
    /// back); the frames' own headers there are no longer read once walked.
    pub fn bytes_mut(&mut self, range: Range<usize>) -> &mut [u8] {
        self.check(&range);
        // SAFETY: as in `bytes`; `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(range.start), range.len()) }
    }

    /// Panics unless `range` lies inside the block and past its header.
    fn check(&self, range: &Range<usize>) {
        assert!(
            range.start >= BD_BLK_LEN + 4 && range.start <= range.end && range.end <= self.size,
            "{range:?} is outside block {}..{}",
            BD_BLK_LEN + 4,
            self.size
        );
    }
}

impl Drop for HeldBlock {
    fn drop(&mut self) {
        // SAFETY: the block lies in the mapping `_map` keeps alive.
        let status = unsafe { status_at(self.base.as_ptr()) };
        // Hand the block back after every read and write of it (see `Block`'s drop).
        status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
        // After the status: cleared first, the ring would see the old "user" and take the
        // block again.
        self.held[self.index].store(false, Ordering::Release);
    }
}

/// Where a block's packets lie, `[first, end)` in block offsets, from the header's
/// `offset_to_first_pkt` and `blk_len`, kept inside a block of `block_size` bytes and after
/// the block header, whatever the header says.
fn body_bounds(offset_to_first_pkt: u32, blk_len: u32, block_size: usize) -> (usize, usize) {
    // max then min, not clamp: clamp panics when a (synthetic) block is shorter than a header.
    let first = (offset_to_first_pkt as usize)
        .max(BD_BLK_LEN + 4)
        .min(block_size);
    let end = (blk_len as usize).max(first).min(block_size);
    (first, end)
}

/// The packets of a TPACKET_V3 block held in a byte slice (the whole block, header first),
/// walked exactly as a ring block is: the same bounds checks, without the ring. For tests and
/// fuzzing of the walker over blocks the kernel never wrote.
pub fn block_packets(block: &[u8]) -> Packets<'_> {
    let field = |at| u32_at(block, at).unwrap_or(0);
    let (first, end) = body_bounds(
        field(BD_OFFSET_TO_FIRST_PKT),
        field(BD_BLK_LEN),
        block.len(),
    );
    Packets::new(&block[first..end], first, field(BD_NUM_PKTS))
}

/// A retired block, owned by user space until dropped.
pub struct Block<'r> {
    ring: &'r RxRing,
    index: u32,
    num_pkts: u32,
    first: usize,
    body: &'r [u8],
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for Block<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Block")
            .field("index", &self.index)
            .field("num_pkts", &self.num_pkts)
            .finish()
    }
}

impl<'r> Block<'r> {
    /// Number of packets the kernel says the block holds.
    pub fn num_pkts(&self) -> u32 {
        self.num_pkts
    }

    /// The block's packets in arrival order.
    pub fn packets(&self) -> Packets<'_> {
        Packets::new(self.body, self.first, self.num_pkts)
    }
}

impl Drop for Block<'_> {
    fn drop(&mut self) {
        // Hand the block back: our reads of it complete before the kernel sees it free.
        // Pairs with `prb_dispatch_next_block`'s status check and the `smp_rmb()` at the
        // start of `prb_open_block` (https://github.com/torvalds/linux/blob/v6.6/net/packet/af_packet.c).
        self.ring
            .status_word(self.index)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
    }
}

/// One packet inside a block.
#[derive(Debug, Clone, Copy)]
pub struct RxPacket<'b> {
    /// The captured bytes (link layer onwards; VLAN tag stripped by the kernel if any).
    pub data: &'b [u8],
    /// Where `data` starts, in bytes from the start of its block.
    pub offset: usize,
    /// The frame's length on the wire (without a stripped VLAN tag).
    pub wire_len: u32,
    /// Kernel receive timestamp, seconds.
    pub sec: u32,
    /// Kernel receive timestamp, nanoseconds.
    pub nsec: u32,
    /// `tp_status` bits (e.g. [`TP_STATUS_VLAN_VALID`]).
    pub status: u32,
    /// VLAN TCI if `status` says it is valid.
    pub vlan_tci: u16,
    /// VLAN TPID if `status` says it is valid.
    pub vlan_tpid: u16,
    /// The `sockaddr_ll` the kernel puts after the header (read by [`RxPacket::link`]).
    sll: &'b [u8],
}

/// Where a packet came from, as the kernel's `sockaddr_ll` beside it says: what a capture on
/// every interface needs to describe each packet's link (LINKTYPE_LINUX_SLL2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkAddr {
    /// The protocol (ethertype), in network byte order as on the wire.
    pub protocol: [u8; 2],
    /// The interface the packet came in or went out on.
    pub ifindex: u32,
    /// Its ARPHRD_ type.
    pub hatype: u16,
    /// PACKET_HOST, PACKET_BROADCAST, PACKET_MULTICAST, PACKET_OTHERHOST, PACKET_OUTGOING.
    pub pkttype: u8,
    /// Bytes of `addr` in use.
    pub halen: u8,
    /// The link-layer source address.
    pub addr: [u8; 8],
}

impl RxPacket<'_> {
    /// The packet's `sockaddr_ll`, if the kernel wrote one in bounds.
    pub fn link(&self) -> Option<LinkAddr> {
        let s = self.sll.get(..SLL_SIZE)?;
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&s[12..20]);
        Some(LinkAddr {
            protocol: [s[2], s[3]],
            ifindex: u32_at(s, 4)?,
            hatype: u16_at(s, 8)?,
            pkttype: s[10],
            halen: s[11].min(8),
            addr,
        })
    }
}

/// Iterator over the packets of a [`Block`].
#[derive(Debug)]
pub struct Packets<'b> {
    body: &'b [u8],
    first: usize,
    at: Option<usize>,
    left: u32,
}

impl<'b> Packets<'b> {
    /// The walk over `left` packets of a block body that starts `first` bytes into its block.
    fn new(body: &'b [u8], first: usize, left: u32) -> Self {
        Packets {
            body,
            first,
            at: Some(first),
            left,
        }
    }
}

/// How many frames ahead of the one it reads the walk asks for a header ([`prefetch`]).
/// The walk is a chain (each header says where the next one is), so without a hint every
/// header is a cache miss waited for in turn: a line the receive work wrote on another core
/// (rps off), or one that left the cache while the reader was behind in a ring larger than
/// it (rps on). Frames of one size lie `next` bytes apart, so the guess is exact for a
/// steady stream and harmless otherwise. 16 ahead cut poolcap's CPU per packet and its loss
/// behind the receive work; 32 did no better (BENCHMARKS.md, capture and sizes, whose runs
/// have it).
const PREFETCH_AHEAD: usize = 16;

/// Asks the CPU to fetch the two cache lines at `off` in `b` (a frame's header and the line
/// after it, where its link header and, written in place, its pcap record header lie), if
/// `off` lies in `b`. Only a hint: nothing is read.
fn prefetch(b: &[u8], off: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in [off, off.saturating_add(64)] {
        if let Some(x) = b.get(line) {
            // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has; a prefetch
            // reads and writes nothing and never faults, and the address lies in `b`.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    std::ptr::from_ref(x).cast::<i8>(),
                );
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (b, off);
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..off + 4)
        .map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    b.get(off..off + 2)
        .map(|s| u16::from_ne_bytes([s[0], s[1]]))
}

impl<'b> Iterator for Packets<'b> {
    type Item = RxPacket<'b>;

    fn next(&mut self) -> Option<RxPacket<'b>> {
        if self.left == 0 {
            return None;
        }
        let abs = self.at?;
        // Offsets inside the block are relative to the block start; `body` starts at `first`.
        let off = abs.checked_sub(self.first)?;
        let hdr = self.body.get(off..off + PH_SIZE)?;
        let next = u32_at(hdr, PH_NEXT_OFFSET)? as usize;
        let mac = usize::from(u16_at(hdr, PH_MAC)?);
        let snap = u32_at(hdr, PH_SNAPLEN)? as usize;
        let data = self.body.get(off + mac..off + mac + snap)?;
        let pkt = RxPacket {
            data,
            offset: abs + mac,
            wire_len: u32_at(hdr, PH_LEN)?,
            sec: u32_at(hdr, PH_SEC)?,
            nsec: u32_at(hdr, PH_NSEC)?,
            status: u32_at(hdr, PH_STATUS)?,
            vlan_tci: u32_at(hdr, PH_VLAN_TCI)? as u16,
            vlan_tpid: u16_at(hdr, PH_VLAN_TPID)?,
            sll: self
                .body
                .get(off + PH_SIZE..off + PH_SIZE + SLL_SIZE)
                .unwrap_or_default(),
        };
        self.left -= 1;
        self.at = if next == 0 {
            None
        } else {
            prefetch(
                self.body,
                off.saturating_add(next.saturating_mul(PREFETCH_AHEAD)),
            );
            abs.checked_add(next)
        };
        Some(pkt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block with a header and packets `(offset, next_offset, mac, snaplen, wire_len)`.
    fn block(len: usize, num: u32, first: u32, blk_len: u32, pkts: &[[u32; 5]]) -> Vec<u8> {
        let mut b = vec![0u8; len];
        let mut put = |at: usize, v: u32| {
            if let Some(w) = b.get_mut(at..at + 4) {
                w.copy_from_slice(&v.to_ne_bytes());
            }
        };
        put(BD_NUM_PKTS, num);
        put(BD_OFFSET_TO_FIRST_PKT, first);
        put(BD_BLK_LEN, blk_len);
        for &[at, next, mac, snap, wire] in pkts {
            let at = at as usize;
            put(at + PH_NEXT_OFFSET, next);
            put(at + PH_SNAPLEN, snap);
            put(at + PH_LEN, wire);
            put(at + PH_MAC, mac); // u16 field, native endian: the low half comes first on LE
        }
        b
    }

    fn walk(b: &[u8]) -> Vec<(usize, u32)> {
        block_packets(b)
            .map(|p| (p.data.len(), p.wire_len))
            .collect()
    }

    #[test]
    fn walks_the_packets_of_a_synthetic_block() {
        let b = block(
            4096,
            2,
            48,
            400,
            &[[48, 100, 64, 60, 60], [148, 0, 64, 100, 1514]],
        );
        assert_eq!(walk(&b), [(60, 60), (100, 1514)]);
    }

    #[test]
    fn malformed_blocks_end_the_walk_inside_the_block() {
        // More packets claimed than linked.
        let b = block(4096, 5, 48, 400, &[[48, 0, 64, 60, 60]]);
        assert_eq!(walk(&b), [(60, 60)]);
        // A packet running past blk_len.
        let b = block(4096, 1, 48, 100, &[[48, 0, 64, 60, 60]]);
        assert_eq!(walk(&b), []);
        // A next offset pointing outside the block.
        let b = block(4096, 2, 48, 4096, &[[48, u32::MAX, 64, 60, 60]]);
        assert_eq!(walk(&b), [(60, 60)]);
        // Blocks shorter than their header (the ring never has those; slices may).
        for len in 0..40 {
            assert_eq!(walk(&block(len, 3, 0, u32::MAX, &[])), [], "{len} bytes");
        }
    }
}
