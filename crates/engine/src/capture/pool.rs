//! The ring-buffer pool of a receive queue (WireCAP's B-(M,R)): R chunks of M packet cells,
//! allocated and touched once at start, then moved between threads as owned values.
//!
//! A [`Chunk`] is the unit of batching, hand-off and recycling: the capture thread fills it
//! with up to M packets, seals it into the capture queue, a worker processes it, and it goes
//! home through the recycle queue (the pool's free list). Nothing on this path allocates or
//! locks per packet: both queues are bounded lock-free MPMC queues of chunks.
//!
//! Two storages, one chunk type: on AF_PACKET the capture thread copies each packet out of
//! the kernel ring into the chunk's own buffer; on AF_XDP the pool is the socket's UMEM and a
//! chunk holds received frames themselves (zero further copies), which go back to the
//! kernel's fill ring when the chunk comes home. Such chunks come home through the recycle
//! queue, which only their capture thread (the fill ring's single producer) drains.
//!
//! Improvement over fixed cells: packets are packed back to back in the chunk's buffer (M
//! cells' worth of bytes), so a chunk of small packets does not waste 2 KB per packet; a
//! chunk is full when it holds M packets or its bytes run out, whichever comes first. The
//! memory bound stays n * R * M * cell bytes.
//!
//! Improvement for writing files: when the capture goes to a file, a chunk of copies leaves
//! room before and after each packet for its pcap/pcapng record header and trailer. The file
//! writer fills them in and hands the chunk's bytes to the kernel as they are (one vectored
//! write per run of records), instead of copying every packet a second time into a write
//! buffer. A cell then holds a packet and its record framing.
//!
//! Third storage, for files written from AF_PACKET with nothing else to do: a chunk holds one
//! retired ring block itself ([`HeldBlock`]), as netsniff-ng writes straight from its ring.
//! Each frame has the kernel's header in front of it (at least 68 bytes), room for a pcap
//! record header or a pcapng block header, and a frame's record trailer (pcapng: padding and
//! length, at most 7 bytes) fits before the next frame's data: it covers the start of that
//! frame's kernel header, already read, and after a block's last frame the kernel always
//! leaves 8 bytes or more. So the writer frames records where the frames lie and the packets
//! are copied once, by the kernel's write. The block goes back to the kernel when the chunk
//! comes home; the pool's memory is then in the ring, and its chunks are only handles.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use poolcap_format::FileFormat;
use poolcap_sys::rx_ring::HeldBlock;
use poolcap_sys::xsk::{RxFrame, Umem};

use super::doorbell::Doorbell;
pub use poolcap_core::geometry::{PoolSize, Room};

/// Where one packet sits in its chunk, and what the kernel said about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketMeta {
    /// Kernel receive timestamp, nanoseconds since the epoch.
    pub ts_ns: u64,
    /// Offset of the packet's bytes in the chunk buffer.
    pub offset: u32,
    /// Bytes stored (after snaplen).
    pub caplen: u32,
    /// Length on the wire.
    pub wire_len: u32,
}

/// Where packets of one ring block may lie to be written from it as records: each record's
/// header goes before the packet's bytes, past the block's descriptor, and its trailer after
/// them, inside the block (which the kernel's layout ensures; see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct HeldRoom {
    records: FileFormat,
    /// The block's first packet byte plus a record header: the lowest packet offset.
    lowest: usize,
    size: usize,
}

impl HeldRoom {
    /// The room of `block`, written as `records`.
    pub fn new(block: &HeldBlock, records: FileFormat) -> Self {
        HeldRoom {
            records,
            lowest: block.body_start() + records.record_head(),
            size: block.size(),
        }
    }

    /// The metadata of a packet whose `caplen` bytes lie at `offset` in the block, if its
    /// record fits around it there.
    #[inline]
    pub fn meta(
        &self,
        ts_ns: u64,
        offset: usize,
        caplen: usize,
        wire_len: u32,
    ) -> Option<PacketMeta> {
        let end = offset - self.records.record_head().min(offset) + self.records.record_len(caplen);
        (offset >= self.lowest && end <= self.size).then_some(PacketMeta {
            ts_ns,
            offset: offset as u32,
            caplen: caplen as u32,
            wire_len,
        })
    }
}

/// Where a chunk keeps its packets' bytes.
#[derive(Debug)]
enum Storage {
    /// Copies, packed back to back in the chunk's own buffer, each inside room for its
    /// record in `records` format if there is one.
    Copied {
        buf: Box<[u8]>,
        used: usize,
        records: Option<FileFormat>,
    },
    /// Received frames of a UMEM, read in place.
    Frames {
        umem: Arc<Umem>,
        frames: Vec<RxFrame>,
    },
    /// A retired ring block, its frames read and framed as `records` where they lie.
    Held {
        block: Option<HeldBlock>,
        records: FileFormat,
    },
}

/// M packet cells captured together; owned by one thread at a time.
#[derive(Debug)]
pub struct Chunk {
    /// Receive queue whose pool this chunk belongs to.
    pub home: usize,
    /// Position in the home queue's sealed sequence (for in-order merging).
    pub seq: u64,
    storage: Storage,
    meta: Vec<PacketMeta>,
    cells: usize,
}

impl Chunk {
    /// A chunk of `cells` cells of `cell_size` bytes, its memory touched so no page fault
    /// happens on the capture path. With `records`, each packet is stored inside room for
    /// its record in that format (see [`Chunk::record`]).
    pub fn new(home: usize, cells: usize, cell_size: usize, records: Option<FileFormat>) -> Self {
        let mut buf = vec![0u8; cells * cell_size].into_boxed_slice();
        // calloc'd pages are mapped lazily; write them now, not during a burst.
        for page in buf.chunks_mut(4096) {
            page[0] = 1;
        }
        Self::with(
            home,
            cells,
            Storage::Copied {
                buf,
                used: 0,
                records,
            },
        )
    }

    /// A chunk that holds up to `cells` frames of `umem`.
    pub fn of_frames(home: usize, cells: usize, umem: Arc<Umem>) -> Self {
        Self::with(
            home,
            cells,
            Storage::Frames {
                umem,
                frames: Vec::with_capacity(cells),
            },
        )
    }

    /// A chunk that holds one ring block of up to `cells` frames, written as `records`.
    pub fn of_block(home: usize, cells: usize, records: FileFormat) -> Self {
        Self {
            // A block of small frames holds thousands: the list grows on first use.
            meta: Vec::new(),
            ..Self::with(
                home,
                cells,
                Storage::Held {
                    block: None,
                    records,
                },
            )
        }
    }

    fn with(home: usize, cells: usize, storage: Storage) -> Self {
        Self {
            home,
            seq: 0,
            storage,
            meta: Vec::with_capacity(cells),
            cells,
        }
    }

    /// The record format of a chunk of ring blocks (none for other kinds).
    pub fn held_records(&self) -> Option<FileFormat> {
        match &self.storage {
            Storage::Held { records, .. } => Some(*records),
            _ => None,
        }
    }

    /// Takes a ring block to fill this chunk of blocks with, and `meta`, its packets as
    /// walked ([`HeldRoom::meta`]): the list is swapped in whole and `meta` gets this empty
    /// chunk's list back, so no packet is copied twice and no list is allocated. False, and
    /// the block goes back, if this chunk is of another kind or holds one already.
    pub fn hold(&mut self, held: HeldBlock, meta: &mut Vec<PacketMeta>) -> bool {
        match &mut self.storage {
            Storage::Held { block, .. } if block.is_none() && self.meta.is_empty() => {
                *block = Some(held);
                std::mem::swap(&mut self.meta, meta);
                true
            }
            _ => false,
        }
    }

    /// Appends a copy of a packet whose bytes are the concatenation of `parts` (at most
    /// `caplen` of them are stored). Returns false, storing nothing, when the chunk is full.
    #[inline]
    pub fn push(&mut self, ts_ns: u64, parts: [&[u8]; 3], caplen: usize, wire_len: u32) -> bool {
        let Storage::Copied { buf, used, records } = &mut self.storage else {
            return false;
        };
        let caplen = caplen.min(parts.iter().map(|p| p.len()).sum());
        let (head, room) = match records {
            Some(f) => (f.record_head(), f.record_len(caplen)),
            None => (0, caplen),
        };
        if self.meta.len() == self.cells || *used + room > buf.len() {
            return false;
        }
        let start = *used + head;
        let (mut at, mut left) = (start, caplen);
        for p in parts {
            let n = p.len().min(left);
            buf[at..at + n].copy_from_slice(&p[..n]);
            at += n;
            left -= n;
        }
        *used += room;
        self.meta.push(PacketMeta {
            ts_ns,
            offset: start as u32,
            caplen: caplen as u32,
            wire_len,
        });
        true
    }

    /// Appends a received frame, keeping at most `snaplen` of its bytes. Gives the frame
    /// back when the chunk is full (or does not hold frames).
    #[inline]
    pub fn push_frame(
        &mut self,
        ts_ns: u64,
        frame: RxFrame,
        snaplen: usize,
    ) -> Result<(), RxFrame> {
        let Storage::Frames { frames, .. } = &mut self.storage else {
            return Err(frame);
        };
        if self.meta.len() == self.cells {
            return Err(frame);
        }
        let len = frame.len();
        self.meta.push(PacketMeta {
            ts_ns,
            offset: 0,
            caplen: len.min(snaplen) as u32,
            wire_len: len as u32,
        });
        frames.push(frame);
        Ok(())
    }

    /// True when no more packets fit.
    pub fn is_full(&self) -> bool {
        self.meta.len() == self.cells
    }

    /// Takes the frames out (to give them back to the kernel) and empties the chunk.
    pub fn take_frames(&mut self) -> impl Iterator<Item = RxFrame> + '_ {
        self.meta.clear();
        let frames = match &mut self.storage {
            Storage::Frames { frames, .. } => Some(frames.drain(..)),
            Storage::Copied { .. } | Storage::Held { .. } => None,
        };
        frames.into_iter().flatten()
    }

    /// Number of packets held.
    pub fn len(&self) -> usize {
        self.meta.len()
    }

    /// True when it holds no packet.
    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    /// The largest packet a chunk can take.
    pub fn capacity_bytes(&self) -> usize {
        match &self.storage {
            Storage::Copied { buf, records, .. } => {
                buf.len() - records.map_or(0, |f| f.record_overhead().min(buf.len()))
            }
            Storage::Frames { umem, .. } => umem.frame_size() as usize,
            Storage::Held { .. } => usize::MAX,
        }
    }

    /// Metadata of packet `i`.
    pub fn meta(&self, i: usize) -> PacketMeta {
        self.meta[i]
    }

    /// Packets `first..` with their bytes (as [`Chunk::data`]), the storage looked at once
    /// for the run rather than once per packet.
    pub fn packets_from(&self, first: usize) -> impl Iterator<Item = (PacketMeta, &[u8])> + '_ {
        let held = match &self.storage {
            Storage::Held { block: Some(b), .. } => Some(b),
            _ => None,
        };
        self.meta[first..].iter().enumerate().map(move |(k, &m)| {
            let data = match held {
                Some(b) => b.bytes(m.offset as usize..(m.offset + m.caplen) as usize),
                None => self.data(first + k),
            };
            (m, data)
        })
    }

    /// Bytes of packet `i` (at most its caplen).
    pub fn data(&self, i: usize) -> &[u8] {
        let m = self.meta[i];
        match &self.storage {
            Storage::Copied { buf, .. } => &buf[m.offset as usize..(m.offset + m.caplen) as usize],
            Storage::Frames { umem, frames } => &umem.data(&frames[i])[..m.caplen as usize],
            Storage::Held { block, .. } => block.as_ref().map_or(&[], |b| {
                b.bytes(m.offset as usize..(m.offset + m.caplen) as usize)
            }),
        }
    }

    /// The UMEM frame of packet `i`, in a chunk of frames.
    pub fn frame(&self, i: usize) -> Option<&RxFrame> {
        match &self.storage {
            Storage::Frames { frames, .. } => frames.get(i),
            Storage::Copied { .. } | Storage::Held { .. } => None,
        }
    }

    /// Where packet `i`'s record goes in the chunk's bytes, when the chunk keeps room for
    /// records: the packet's bytes sit [`FileFormat::record_head`] bytes in. Consecutive
    /// packets' records are adjacent in a chunk of copies, apart in a ring block
    /// ([`Chunk::records_apart`]).
    pub fn record(&self, i: usize) -> Option<Range<usize>> {
        let f = match &self.storage {
            Storage::Copied {
                records: Some(f), ..
            }
            | Storage::Held { records: f, .. } => f,
            _ => return None,
        };
        let m = self.meta[i];
        let start = m.offset as usize - f.record_head();
        Some(start..start + f.record_len(m.caplen as usize))
    }

    /// True when consecutive packets' records are not adjacent (in a ring block, the
    /// kernel's header of the next frame lies between them), so each is its own run.
    pub fn records_apart(&self) -> bool {
        matches!(self.storage, Storage::Held { .. })
    }

    /// Bytes `range` of records (ranges from [`Chunk::record`], which chunks of copies and
    /// of ring blocks give; a chunk of frames has none).
    pub fn records(&self, range: Range<usize>) -> &[u8] {
        match &self.storage {
            Storage::Copied { buf, .. } => &buf[range],
            Storage::Held { block: Some(b), .. } => b.bytes(range),
            Storage::Frames { .. } | Storage::Held { block: None, .. } => &[],
        }
    }

    /// Bytes `range` of records, to frame a record in place (see [`Chunk::records`]).
    pub fn records_mut(&mut self, range: Range<usize>) -> &mut [u8] {
        match &mut self.storage {
            Storage::Copied { buf, .. } => &mut buf[range],
            Storage::Held { block: Some(b), .. } => b.bytes_mut(range),
            Storage::Frames { .. } | Storage::Held { block: None, .. } => &mut [],
        }
    }

    /// Iterates over (meta, bytes).
    pub fn packets(&self) -> impl Iterator<Item = (PacketMeta, &[u8])> + '_ {
        (0..self.meta.len()).map(|i| (self.meta[i], self.data(i)))
    }

    /// Keeps packet `i` only where `keep[i]` is true, in order (a packet past `keep` goes):
    /// what a sink passes on after removing some packets. A frame let go returns to its
    /// socket's fill ring when dropped; the bytes of a removed copy stay unused until reuse.
    pub fn retain(&mut self, keep: &[bool]) {
        let mut k = keep.iter();
        self.meta.retain(|_| k.next().copied().unwrap_or(false));
        if let Storage::Frames { frames, .. } = &mut self.storage {
            let mut k = keep.iter();
            frames.retain(|_| k.next().copied().unwrap_or(false));
        }
    }

    /// Empties a chunk of copies for reuse, or hands its ring block back to the kernel
    /// (frames must be taken out with `take_frames`).
    fn clear_copies(&mut self) {
        match &mut self.storage {
            Storage::Copied { used, .. } => *used = 0,
            Storage::Held { block, .. } => *block = None,
            Storage::Frames { .. } => return,
        }
        self.meta.clear();
    }

    fn holds_frames(&self) -> bool {
        matches!(&self.storage, Storage::Frames { frames, .. } if !frames.is_empty())
    }
}

/// The same pool with cells grown to hold, besides a packet, its record framing in
/// `records` format.
pub fn for_records(size: PoolSize, records: Option<FileFormat>) -> PoolSize {
    size.with_cell_room(records.map_or(0, FileFormat::record_overhead))
}

/// A receive queue's pool and its work queues.
#[derive(Debug)]
pub struct Pool {
    /// Free chunks: the capture thread pops.
    free: ArrayQueue<Chunk>,
    /// Processed chunks still holding UMEM frames (the recycle queue): their capture thread
    /// gives the frames back to the kernel and frees the chunk.
    returned: ArrayQueue<Chunk>,
    /// Sealed chunks waiting for a worker (the capture queue).
    captured: ArrayQueue<Chunk>,
    size: PoolSize,
    /// The capture thread waiting for room (see [`Pool::wait_for_room`]).
    room: Doorbell,
    /// What the capture thread waits for on `room` ([`Room`] as u8; 0: nothing), so
    /// others ring only when it helps.
    room_wanted: AtomicU8,
    /// Counts every taken or returned chunk: a capture thread that saw a count before
    /// deciding to wait does not wait if it has moved since.
    room_events: AtomicU64,
}

impl Pool {
    /// A pool of R chunks of copies for queue `home`, with a capture queue that can hold
    /// `queue_capacity` chunks (R, or the chunks of the whole buddy group when buddies may
    /// offload into it). With `records`, chunks keep room for file records (see the module
    /// docs; `size.cell_size` must include it).
    pub fn new(
        home: usize,
        size: PoolSize,
        queue_capacity: usize,
        records: Option<FileFormat>,
    ) -> Self {
        let chunks = size.chunks.max(1);
        Self::from_chunks(
            (0..chunks).map(|_| Chunk::new(home, size.cells.max(1), size.cell_size, records)),
            size,
            queue_capacity,
        )
    }

    /// A pool of R chunks that each hold a ring block of up to M frames, written as pcap
    /// `records` where they lie (see the module docs).
    pub fn of_blocks(
        home: usize,
        size: PoolSize,
        queue_capacity: usize,
        records: FileFormat,
    ) -> Self {
        let chunks = size.chunks.max(1);
        Self::from_chunks(
            (0..chunks).map(|_| Chunk::of_block(home, size.cells.max(1), records)),
            size,
            queue_capacity,
        )
    }

    /// A pool of R chunks that hold frames of `umem` (the UMEM has R*M frames).
    pub fn of_frames(home: usize, size: PoolSize, queue_capacity: usize, umem: &Arc<Umem>) -> Self {
        let chunks = size.chunks.max(1);
        Self::from_chunks(
            (0..chunks).map(|_| Chunk::of_frames(home, size.cells.max(1), Arc::clone(umem))),
            size,
            queue_capacity,
        )
    }

    fn from_chunks(
        chunks: impl Iterator<Item = Chunk>,
        size: PoolSize,
        queue_capacity: usize,
    ) -> Self {
        let n = size.chunks.max(1);
        let free = ArrayQueue::new(n);
        for c in chunks {
            // Cannot fail: the queue has room for exactly `n`.
            let _ = free.push(c);
        }
        Self {
            free,
            returned: ArrayQueue::new(n),
            captured: ArrayQueue::new(queue_capacity.max(n)),
            size,
            room: Doorbell::default(),
            room_wanted: AtomicU8::new(0),
            room_events: AtomicU64::new(0),
        }
    }

    /// Takes a free chunk, if any.
    #[inline]
    pub fn take_free(&self) -> Option<Chunk> {
        self.free.pop()
    }

    /// Sends a processed chunk home: straight to the free list, or, if it holds UMEM frames,
    /// to the recycle queue for its capture thread.
    #[inline]
    pub fn recycle(&self, mut chunk: Chunk) {
        // Cannot fail: at most R chunks exist and each is in exactly one place.
        if chunk.holds_frames() {
            let _ = self.returned.push(chunk);
        } else {
            chunk.clear_copies();
            let _ = self.free.push(chunk);
        }
        self.made_room(Room::FreeChunk);
    }

    /// Puts a sealed chunk into the capture queue. Cannot fail when the queue was sized
    /// for every chunk that may be routed to it.
    #[inline]
    pub fn push_captured(&self, chunk: Chunk) {
        let _ = self.captured.push(chunk);
    }

    /// For a worker: takes a chunk from the capture queue, if any.
    #[inline]
    pub fn take_captured(&self) -> Option<Chunk> {
        let c = self.captured.pop();
        if c.is_some() {
            self.made_room(Room::Backlog);
        }
        c
    }

    /// Chunks free for the capture thread to fill.
    pub fn free_chunks(&self) -> usize {
        self.free.len()
    }

    /// For the capture thread (once, before it first waits): it is the one
    /// [`Pool::wait_for_room`] wakes.
    pub fn room_answered_by_this_thread(&self) {
        self.room.answer_from_this_thread();
    }

    /// For the capture thread: how many chunks have been taken or returned so far. Read it
    /// before looking at the pool, and pass it to [`Pool::wait_for_room`].
    pub fn room_events(&self) -> u64 {
        self.room_events.load(Ordering::SeqCst)
    }

    /// For the capture thread: waits (at most `timeout`) until `what` happens, unless a
    /// chunk was taken or returned since the caller read `seen` from
    /// [`Pool::room_events`]. This is how a paused or full queue resumes as soon as there is
    /// room, without polling a clock. Returns whether it slept.
    pub fn wait_for_room(&self, what: Room, seen: u64, timeout: Duration) -> bool {
        self.room_wanted.store(what as u8, Ordering::SeqCst);
        if self.room_events() != seen {
            self.room_wanted.store(0, Ordering::SeqCst);
            return false;
        }
        self.room.wait(timeout);
        true
    }

    /// Counts the event and wakes the capture thread if it waits for it: two atomic
    /// operations otherwise.
    #[inline]
    fn made_room(&self, what: Room) {
        self.room_events.fetch_add(1, Ordering::SeqCst);
        let wanted = self.room_wanted.load(Ordering::SeqCst);
        if wanted != 0 && what as u8 <= wanted && self.room_wanted.swap(0, Ordering::SeqCst) != 0 {
            self.room.ring();
        }
    }

    /// For the capture thread: a returned chunk whose frames must go back to the kernel.
    /// The caller takes the frames out and then calls [`Pool::release`].
    #[inline]
    pub fn take_returned(&self) -> Option<Chunk> {
        self.returned.pop()
    }

    /// Puts an emptied chunk on the free list.
    #[inline]
    pub fn release(&self, chunk: Chunk) {
        let _ = self.free.push(chunk);
    }

    /// Chunks waiting in the capture queue.
    pub fn backlog(&self) -> usize {
        self.captured.len()
    }

    /// True when no chunk waits in the capture queue.
    pub fn nothing_captured(&self) -> bool {
        self.captured.is_empty()
    }

    /// Chunks not free (waiting, being processed or being written).
    pub fn in_use(&self) -> usize {
        self.size.chunks - self.free.len()
    }

    /// The pool's geometry.
    pub fn size(&self) -> PoolSize {
        self.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_is_full_by_cells_or_by_bytes() {
        let mut c = Chunk::new(0, 4, 100, None);
        for i in 0..4 {
            assert!(c.push(i, [&[1u8; 60], &[], &[]], 60, 60));
        }
        assert!(
            !c.push(9, [&[1u8; 10], &[], &[]], 10, 10),
            "M packets make a full chunk"
        );
        let mut c = Chunk::new(0, 4, 100, None);
        assert!(c.push(0, [&[1u8; 300], &[], &[]], 300, 300));
        assert!(
            !c.push(1, [&[1u8; 200], &[], &[]], 200, 200),
            "bytes ran out"
        );
        assert!(c.push(1, [&[1u8; 100], &[], &[]], 100, 100));
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn packets_keep_their_bytes_lengths_and_times() {
        let mut c = Chunk::new(3, 8, 2048, None);
        c.push(10, [b"ab", b"cd", b"efgh"], 6, 1500);
        c.push(20, [b"xyz", &[], &[]], 3, 3);
        let p: Vec<_> = c
            .packets()
            .map(|(m, d)| (m.ts_ns, m.caplen, m.wire_len, d.to_vec()))
            .collect();
        assert_eq!(
            p,
            vec![
                (10, 6, 1500, b"abcdef".to_vec()),
                (20, 3, 3, b"xyz".to_vec())
            ]
        );
        c.clear_copies();
        assert!(c.is_empty());
    }

    #[test]
    fn chunks_for_records_keep_adjacent_room_around_each_packet() {
        let f = FileFormat::Pcapng;
        let size = crate::capture::pool::for_records(
            PoolSize {
                cells: 2,
                chunks: 1,
                cell_size: 64,
            },
            Some(f),
        );
        let mut c = Chunk::new(0, size.cells, size.cell_size, Some(f));
        assert_eq!(c.capacity_bytes(), 2 * 64 + f.record_overhead());
        assert!(c.push(1, [&[7u8; 40], &[8u8; 21], &[]], 64, 61));
        assert!(c.push(2, [&[9u8; 64], &[], &[]], 64, 64));
        assert_eq!(c.record(0), Some(0..f.record_len(61)));
        assert_eq!(
            c.record(1),
            Some(f.record_len(61)..f.record_len(61) + f.record_len(64)),
            "records are adjacent"
        );
        assert_eq!(&c.records(c.record(0).unwrap())[f.record_head()..][..61], {
            let mut d = vec![7u8; 40];
            d.extend([8u8; 21]);
            d
        });
        assert_eq!(c.data(1), [9u8; 64]);
        assert_eq!(Chunk::new(0, 2, 64, None).record(0), None);
    }

    #[test]
    fn retain_keeps_the_marked_packets_in_order_with_their_records() {
        let mut c = Chunk::new(0, 4, 256, Some(FileFormat::Pcap));
        for (ts, byte) in [(1u64, 1u8), (2, 2), (3, 3)] {
            assert!(c.push(ts, [&[byte; 60], &[], &[]], 60, 60));
        }
        c.retain(&[true, false, true]);
        let kept: Vec<(u64, u8)> = c.packets().map(|(m, d)| (m.ts_ns, d[0])).collect();
        assert_eq!(kept, vec![(1, 1), (3, 3)]);
        let r = c.record(1).expect("room for records");
        assert_eq!(r.len(), FileFormat::Pcap.record_len(60));
        c.retain(&[]);
        assert!(c.is_empty());
    }

    #[test]
    fn pool_hands_out_exactly_r_chunks_and_takes_them_back() {
        let pool = Pool::new(
            1,
            PoolSize {
                cells: 4,
                chunks: 3,
                cell_size: 64,
            },
            3,
            None,
        );
        let taken: Vec<Chunk> = std::iter::from_fn(|| pool.take_free()).collect();
        assert_eq!(taken.len(), 3);
        assert_eq!(pool.in_use(), 3);
        assert!(taken.iter().all(|c| c.home == 1));
        for c in taken {
            pool.recycle(c);
        }
        assert_eq!(pool.in_use(), 0);
        assert_eq!(pool.size().bytes(), 4 * 3 * 64);
    }

    #[test]
    fn a_full_pool_waits_for_room_and_wakes_when_a_chunk_comes_home() {
        let size = PoolSize {
            cells: 4,
            chunks: 1,
            cell_size: 64,
        };
        let pool = Arc::new(Pool::new(0, size, 1, None));
        pool.room_answered_by_this_thread();
        let chunk = pool.take_free().unwrap();
        // Room made after the capture thread looked: no sleep at all.
        let seen = pool.room_events();
        pool.push_captured(chunk);
        let chunk = pool.take_captured().unwrap();
        assert!(!pool.wait_for_room(Room::FreeChunk, seen, Duration::from_secs(5)));
        // Room made while it sleeps: woken long before the timeout.
        let seen = pool.room_events();
        let home = Arc::clone(&pool);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            home.recycle(chunk);
        });
        let started = std::time::Instant::now();
        assert!(pool.wait_for_room(Room::FreeChunk, seen, Duration::from_secs(5)));
        t.join().unwrap();
        // Woken by the recycle, not by the 5 s timeout (not a speed check).
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "woken by the timeout, not the recycle: {:?}",
            started.elapsed()
        );
        assert_eq!(pool.free_chunks(), 1);
    }
}
