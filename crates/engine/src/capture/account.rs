//! Accounting: every packet ends in exactly one counter, per receive queue and in total.
//!
//! `captured` (handed to the pipeline), `dropped_kernel` (no room in the kernel ring, from
//! PACKET_STATISTICS), `dropped_pool` (no free chunk), `filtered` (rejected by a filter),
//! `not_taken` (received by the kernel after the stop's cut or past the count limit, and
//! left there: neither captured nor lost). In the lab,
//! `sent = captured + dropped_kernel + dropped_pool + filtered + not_taken` holds exactly
//! for every frame that reached the capture sockets before they closed.
//!
//! One term is known only in total: packets the in-kernel filter rejects are never counted
//! by the socket they were fanned out to, so the engine derives them from the interface's
//! counters (`filtered_kernel` in the report). Per queue, `filtered` holds only what a
//! user-space filter stage rejected; the other three terms add up across queues exactly.
//!
//! Capture threads own the counters of their queue and publish them through relaxed atomics
//! once per kernel block; readers (status line, final report) only need eventually
//! consistent values, and the final report is read after the threads have been joined.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Live counters of one receive queue.
#[derive(Debug, Default)]
pub struct QueueCounters {
    /// Packets put into chunks.
    pub captured: AtomicU64,
    /// Their wire bytes.
    pub bytes: AtomicU64,
    /// Packets the kernel dropped for lack of ring space.
    pub dropped_kernel: AtomicU64,
    /// Times the kernel ring froze.
    pub freezes: AtomicU64,
    /// Packets dropped because the pool had no free chunk.
    pub dropped_pool: AtomicU64,
    /// Packets rejected by a user-space filter stage.
    pub filtered: AtomicU64,
    /// Packets received after the stop's cut or past the count limit, not taken.
    pub not_taken: AtomicU64,
    /// Wait syscalls made by the capture thread (poll, sleep).
    pub syscalls: AtomicU64,
    /// Chunks sealed.
    pub chunks: AtomicU64,
    /// Highest number of chunks in use at once.
    pub pool_peak: AtomicU64,
    /// Packets of this queue's chunks sent to a buddy's workers.
    pub offloaded_out: AtomicU64,
    /// Packets of buddies' chunks taken in by this queue's workers.
    pub offloaded_in: AtomicU64,
    /// Milliseconds the capture was paused by congestion control.
    pub paused_ms: AtomicU64,
}

impl QueueCounters {
    /// Adds `n` to a counter.
    #[inline]
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// A consistent-enough copy for reporting.
    pub fn snapshot(&self, queue: usize) -> QueueStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        QueueStats {
            queue,
            captured: g(&self.captured),
            bytes: g(&self.bytes),
            dropped_kernel: g(&self.dropped_kernel),
            dropped_pool: g(&self.dropped_pool),
            filtered: g(&self.filtered),
            not_taken: g(&self.not_taken),
            freezes: g(&self.freezes),
            syscalls: g(&self.syscalls),
            chunks: g(&self.chunks),
            pool_peak_chunks: g(&self.pool_peak),
            offloaded_out: g(&self.offloaded_out),
            offloaded_in: g(&self.offloaded_in),
            paused_ms: g(&self.paused_ms),
        }
    }
}

/// Counters of one receive queue at a moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    /// Receive queue index.
    pub queue: usize,
    /// Packets handed to the pipeline.
    pub captured: u64,
    /// Their wire bytes.
    pub bytes: u64,
    /// Dropped by the kernel (ring full).
    pub dropped_kernel: u64,
    /// Dropped by the pool (no free chunk).
    pub dropped_pool: u64,
    /// Rejected by a filter.
    pub filtered: u64,
    /// Received after the stop's cut or past the count limit, and left to the kernel.
    pub not_taken: u64,
    /// Kernel ring freezes.
    pub freezes: u64,
    /// Wait syscalls.
    pub syscalls: u64,
    /// Chunks sealed.
    pub chunks: u64,
    /// Most chunks in use at once.
    pub pool_peak_chunks: u64,
    /// Packets sent to buddies' workers.
    pub offloaded_out: u64,
    /// Packets taken in from buddies.
    pub offloaded_in: u64,
    /// Milliseconds paused by congestion control.
    pub paused_ms: u64,
}

impl QueueStats {
    /// Every packet this queue accounted for.
    pub fn accounted(&self) -> u64 {
        self.captured + self.dropped_kernel + self.dropped_pool + self.filtered + self.not_taken
    }
}

/// Every queue's stats now, in queue order.
pub fn snapshots(counters: &[Arc<QueueCounters>]) -> Vec<QueueStats> {
    counters
        .iter()
        .enumerate()
        .map(|(i, c)| c.snapshot(i))
        .collect()
}

/// Sums per-queue stats into totals (the `queue` field of the result is meaningless).
pub fn total(queues: &[QueueStats]) -> QueueStats {
    queues.iter().fold(QueueStats::default(), |mut t, q| {
        t.captured += q.captured;
        t.bytes += q.bytes;
        t.dropped_kernel += q.dropped_kernel;
        t.dropped_pool += q.dropped_pool;
        t.filtered += q.filtered;
        t.not_taken += q.not_taken;
        t.freezes += q.freezes;
        t.syscalls += q.syscalls;
        t.chunks += q.chunks;
        t.pool_peak_chunks = t.pool_peak_chunks.max(q.pool_peak_chunks);
        t.offloaded_out += q.offloaded_out;
        t.offloaded_in += q.offloaded_in;
        t.paused_ms += q.paused_ms;
        t
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_up_per_queue_counters() {
        let a = QueueCounters::default();
        let b = QueueCounters::default();
        QueueCounters::add(&a.captured, 10);
        QueueCounters::add(&a.dropped_kernel, 2);
        QueueCounters::add(&b.captured, 5);
        QueueCounters::add(&b.dropped_pool, 3);
        QueueCounters::add(&b.filtered, 1);
        QueueCounters::add(&b.not_taken, 4);
        let qs = vec![a.snapshot(0), b.snapshot(1)];
        let t = total(&qs);
        assert_eq!(
            (
                t.captured,
                t.dropped_kernel,
                t.dropped_pool,
                t.filtered,
                t.not_taken
            ),
            (15, 2, 3, 1, 4)
        );
        assert_eq!(
            t.accounted(),
            qs.iter().map(QueueStats::accounted).sum::<u64>()
        );
        assert_eq!(t.accounted(), 25);
    }
}
