//! The ring-buffer pool of a receive queue (WireCAP's B-(M,R)): R chunks of M packet cells,
//! allocated and touched once at start, then moved between threads as owned values.
//!
//! A [`Chunk`] is the unit of batching, hand-off and recycling: the capture thread fills it
//! with up to M packets, seals it into the capture queue, a worker processes it, and it goes
//! home through the recycle queue (the pool's free list). Nothing on this path allocates or
//! locks per packet: both queues are bounded lock-free MPMC queues of chunks.
//!
//! Improvement over fixed cells: packets are packed back to back in the chunk's buffer (M
//! cells' worth of bytes), so a chunk of small packets does not waste 2 KB per packet; a
//! chunk is full when it holds M packets or its bytes run out, whichever comes first. The
//! memory bound stays n * R * M * cell bytes.

use crossbeam_queue::ArrayQueue;

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

/// M packet cells captured together; owned by one thread at a time.
#[derive(Debug)]
pub struct Chunk {
    /// Receive queue whose pool this chunk belongs to.
    pub home: usize,
    /// Position in the home queue's sealed sequence (for in-order merging).
    pub seq: u64,
    buf: Box<[u8]>,
    used: usize,
    meta: Vec<PacketMeta>,
    cells: usize,
}

impl Chunk {
    /// A chunk of `cells` cells of `cell_size` bytes, its memory touched so no page fault
    /// happens on the capture path.
    pub fn new(home: usize, cells: usize, cell_size: usize) -> Self {
        let mut buf = vec![0u8; cells * cell_size].into_boxed_slice();
        // calloc'd pages are mapped lazily; write them now, not during a burst.
        for page in buf.chunks_mut(4096) {
            page[0] = 1;
        }
        Self {
            home,
            seq: 0,
            buf,
            used: 0,
            meta: Vec::with_capacity(cells),
            cells,
        }
    }

    /// Appends a packet whose bytes are the concatenation of `parts` (at most `caplen` of them
    /// are stored). Returns false, storing nothing, when the chunk is full.
    #[inline]
    pub fn push(&mut self, ts_ns: u64, parts: [&[u8]; 3], caplen: usize, wire_len: u32) -> bool {
        if self.meta.len() == self.cells || self.used + caplen > self.buf.len() {
            return false;
        }
        let start = self.used;
        let mut left = caplen;
        for p in parts {
            let n = p.len().min(left);
            self.buf[self.used..self.used + n].copy_from_slice(&p[..n]);
            self.used += n;
            left -= n;
        }
        self.meta.push(PacketMeta {
            ts_ns,
            offset: start as u32,
            caplen: (self.used - start) as u32,
            wire_len,
        });
        true
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
        self.buf.len()
    }

    /// Metadata of packet `i`.
    pub fn meta(&self, i: usize) -> PacketMeta {
        self.meta[i]
    }

    /// Bytes of packet `i`.
    pub fn data(&self, i: usize) -> &[u8] {
        let m = self.meta[i];
        &self.buf[m.offset as usize..(m.offset + m.caplen) as usize]
    }

    /// Timestamp of the first packet.
    pub fn first_ts(&self) -> Option<u64> {
        self.meta.first().map(|m| m.ts_ns)
    }

    /// Iterates over (meta, bytes).
    pub fn packets(&self) -> impl Iterator<Item = (PacketMeta, &[u8])> + '_ {
        self.meta.iter().map(|m| {
            (
                *m,
                &self.buf[m.offset as usize..(m.offset + m.caplen) as usize],
            )
        })
    }

    /// Empties the chunk for reuse.
    pub fn clear(&mut self) {
        self.used = 0;
        self.meta.clear();
    }
}

/// Pool geometry: `chunks` (R) chunks of `cells` (M) cells of `cell_size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSize {
    /// M: packet cells per chunk.
    pub cells: usize,
    /// R: chunks per receive queue.
    pub chunks: usize,
    /// Bytes per cell.
    pub cell_size: usize,
}

impl PoolSize {
    /// Bytes one queue's pool takes.
    pub fn bytes(&self) -> u64 {
        self.cells as u64 * self.chunks as u64 * self.cell_size as u64
    }
}

/// A receive queue's pool and its two work queues.
#[derive(Debug)]
pub struct Pool {
    /// Free chunks (the recycle queue): workers push, the capture thread pops.
    free: ArrayQueue<Chunk>,
    /// Sealed chunks waiting for a worker (the capture queue).
    pub captured: ArrayQueue<Chunk>,
    size: PoolSize,
}

impl Pool {
    /// Allocates R chunks for queue `home`, with a capture queue that can hold
    /// `queue_capacity` chunks (R, or the chunks of the whole buddy group when buddies may
    /// offload into it).
    pub fn new(home: usize, size: PoolSize, queue_capacity: usize) -> Self {
        let chunks = size.chunks.max(1);
        let free = ArrayQueue::new(chunks);
        for _ in 0..chunks {
            // Cannot fail: the queue has room for exactly `chunks`.
            let _ = free.push(Chunk::new(home, size.cells.max(1), size.cell_size));
        }
        Self {
            free,
            captured: ArrayQueue::new(queue_capacity.max(chunks)),
            size,
        }
    }

    /// Takes a free chunk, if any.
    #[inline]
    pub fn take_free(&self) -> Option<Chunk> {
        self.free.pop()
    }

    /// Returns a chunk to its pool's free list, emptied.
    #[inline]
    pub fn recycle(&self, mut chunk: Chunk) {
        chunk.clear();
        // Cannot fail: at most R chunks exist and each is in exactly one place.
        let _ = self.free.push(chunk);
    }

    /// Chunks waiting in the capture queue.
    pub fn backlog(&self) -> usize {
        self.captured.len()
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
        let mut c = Chunk::new(0, 4, 100);
        for i in 0..4 {
            assert!(c.push(i, [&[1u8; 60], &[], &[]], 60, 60));
        }
        assert!(
            !c.push(9, [&[1u8; 10], &[], &[]], 10, 10),
            "M packets make a full chunk"
        );
        let mut c = Chunk::new(0, 4, 100);
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
        let mut c = Chunk::new(3, 8, 2048);
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
        assert_eq!(c.first_ts(), Some(10));
        c.clear();
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
}
