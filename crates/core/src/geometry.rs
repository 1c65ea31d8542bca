//! A receive queue's pool as the decisions see it: R chunks of M cells, and what a capture
//! thread waits for when the pool has no room.

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
    /// The same pool with `bytes` more in every cell (room for a file record's framing
    /// around each packet).
    pub fn with_cell_room(self, bytes: usize) -> Self {
        Self {
            cell_size: self.cell_size + bytes,
            ..self
        }
    }

    /// Bytes one queue's pool takes.
    pub fn bytes(&self) -> u64 {
        self.cells as u64 * self.chunks as u64 * self.cell_size as u64
    }
}

/// What a waiting capture thread needs (the engine's `Pool::wait_for_room`). A waiter for a later
/// variant is also woken by an earlier one's event, not the other way round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Room {
    /// A chunk back on the free list (a full pool; only `recycle` helps).
    FreeChunk = 1,
    /// A chunk taken from the capture queue (a congestion pause, which ends on backlog).
    Backlog = 2,
}
