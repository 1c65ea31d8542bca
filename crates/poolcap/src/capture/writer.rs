//! The file writer: merges the per-queue chunk streams into one file in timestamp order.
//!
//! Each receive queue's packets arrive in timestamp order, in chunks numbered by the capture
//! thread; workers may finish chunks out of order, so the writer first puts each queue's
//! chunks back in sequence, then repeatedly writes the earliest head packet among the queues.
//! It may write a packet at time t only when every queue with nothing ready provably has
//! nothing earlier to come: all chunks it sealed have reached the writer, and its published
//! watermark is at least t (see `queue::Progress`). At the end everything left is merged.
//!
//! A write error (disk full, EIO) stops the capture: the file keeps every whole packet written
//! before the error, and the writer keeps recycling chunks so the engine drains cleanly.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use poolcap_format::{CaptureWriter, IfStats, Output, WriteError};

use super::doorbell::Doorbell;
use super::pool::{Chunk, Pool};
use super::queue::Progress;

/// The output of a capture: a file or standard output.
pub type BoxedOutput = Box<dyn Output + Send>;

#[derive(Debug, Default)]
struct QueueState {
    next_seq: u64,
    waiting: BTreeMap<u64, Chunk>,
    ready: VecDeque<Chunk>,
    /// Index of the next packet to write in `ready.front()`.
    pos: usize,
}

impl QueueState {
    fn head_ts(&self) -> Option<u64> {
        self.ready.front().map(|c| c.meta(self.pos).ts_ns)
    }
}

/// What the writer did.
#[derive(Debug)]
pub struct WriterOutcome {
    /// Packets written to the file.
    pub written: u64,
    /// Packets captured but not written (after an error or past `-c`).
    pub not_written: u64,
    /// The write error that stopped the capture, if any.
    pub error: Option<WriteError>,
}

/// The writer thread's setup.
pub struct FileWriter {
    /// The format writer.
    pub out: CaptureWriter<BoxedOutput>,
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
    /// Set to stop the capture (on error or when the limit is reached).
    pub stop: Arc<AtomicBool>,
    /// Rung when a chunk arrives.
    pub bell: Arc<Doorbell>,
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
    /// gives the interface statistics recorded at close (pcapng).
    pub fn run(mut self, stats: impl FnOnce() -> IfStats) -> WriterOutcome {
        let mut queues: Vec<QueueState> = (0..self.pools.len())
            .map(|_| QueueState::default())
            .collect();
        // Packets the writer took from chunks, and packets the format writer accepted.
        let mut handled = 0u64;
        let mut accepted = 0u64;
        let mut error: Option<WriteError> = None;
        self.bell.answer_from_this_thread();
        loop {
            while let Some(c) = self.input.pop() {
                let q = &mut queues[c.home];
                q.waiting.insert(c.seq, c);
            }
            for q in &mut queues {
                while let Some(c) = q.waiting.remove(&q.next_seq) {
                    q.ready.push_back(c);
                    q.next_seq += 1;
                }
            }
            let last_round = self.workers_done.load(Ordering::Acquire) && self.input.is_empty();
            let bound = if last_round {
                u64::MAX
            } else {
                self.bound(&queues)
            };
            let mut progressed = false;
            while let Some(qi) = earliest(&queues, bound) {
                progressed = true;
                let q = &mut queues[qi];
                let Some(chunk) = q.ready.front() else { break };
                let m = chunk.meta(q.pos);
                handled += 1;
                if error.is_none() && self.limit.is_none_or(|l| accepted < l) {
                    match self
                        .out
                        .write_packet(m.ts_ns, chunk.data(q.pos), m.wire_len)
                    {
                        Ok(()) => accepted += 1,
                        Err(e) if e.is_fatal() => {
                            error = Some(e);
                            self.stop.store(true, Ordering::Relaxed);
                        }
                        // A packet the format cannot hold is counted as not written.
                        Err(_) => {}
                    }
                    if self.limit == Some(accepted) {
                        self.stop.store(true, Ordering::Relaxed);
                    }
                }
                q.pos += 1;
                if q.pos == chunk.len() {
                    q.pos = 0;
                    if let Some(c) = q.ready.pop_front() {
                        self.pools[c.home].recycle(c);
                    }
                    if q.ready.is_empty() && !last_round {
                        break; // this queue's bound must be looked at again
                    }
                }
            }
            if last_round
                && queues
                    .iter()
                    .all(|q| q.ready.is_empty() && q.waiting.is_empty())
            {
                break;
            }
            if !progressed {
                // Rung on every new chunk; the timeout lets an idle queue's watermark move on.
                self.bell.wait(Duration::from_millis(5));
            }
        }
        // After a failure the file holds fewer packets than were accepted into its buffer.
        let written = match error {
            Some(_) => self.out.packets_written(),
            None => match self.out.finish(Some(stats())) {
                Ok(_) => accepted,
                Err(e) => {
                    let kept = e.packets_kept().unwrap_or(0);
                    error = Some(e);
                    kept
                }
            },
        };
        WriterOutcome {
            written,
            not_written: handled - written,
            error,
        }
    }

    /// The latest timestamp that can be written now: the smallest watermark among queues
    /// with nothing ready, or 0 if such a queue still has a chunk on its way.
    fn bound(&self, queues: &[QueueState]) -> u64 {
        let mut bound = u64::MAX;
        for (i, q) in queues.iter().enumerate() {
            if !q.ready.is_empty() {
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

    fn chunk(pool: &Pool, seq: u64, ts: &[u64]) -> Chunk {
        let mut c = pool.take_free().expect("free chunk");
        c.seq = seq;
        for &t in ts {
            assert!(c.push(t, [&t.to_be_bytes(), &[], &[]], 8, 8));
        }
        c
    }

    #[test]
    fn merges_queues_in_timestamp_order_whatever_order_chunks_arrive_in() {
        let size = PoolSize {
            cells: 4,
            chunks: 4,
            cell_size: 64,
        };
        let pools = Arc::new(vec![
            Arc::new(Pool::new(0, size, 4)),
            Arc::new(Pool::new(1, size, 4)),
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
        let out = CaptureWriter::new(
            Box::new(Vec::new()) as BoxedOutput,
            poolcap_format::FileFormat::PcapNs,
            64,
            "t0",
        )
        .unwrap();
        let w = FileWriter {
            out,
            input,
            pools: Arc::clone(&pools),
            progress,
            workers_done: Arc::new(AtomicBool::new(true)),
            limit: None,
            stop: Arc::new(AtomicBool::new(false)),
            bell: Arc::default(),
        };
        let outcome = w.run(|| IfStats {
            received: 7,
            dropped: 0,
        });
        assert_eq!(outcome.written, 7);
        assert!(outcome.error.is_none());
        assert_eq!(
            pools[0].in_use() + pools[1].in_use(),
            0,
            "every chunk went home"
        );
    }

    #[test]
    fn bound_waits_for_a_queue_with_a_chunk_in_flight() {
        let size = PoolSize {
            cells: 4,
            chunks: 2,
            cell_size: 64,
        };
        let pools = Arc::new(vec![
            Arc::new(Pool::new(0, size, 4)),
            Arc::new(Pool::new(1, size, 4)),
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
        let out = CaptureWriter::new(
            Box::new(Vec::new()) as BoxedOutput,
            poolcap_format::FileFormat::Pcap,
            64,
            "t0",
        )
        .unwrap();
        let w = FileWriter {
            out,
            input: Arc::new(ArrayQueue::new(4)),
            pools,
            progress,
            workers_done: Arc::new(AtomicBool::new(false)),
            limit: None,
            stop: Arc::new(AtomicBool::new(false)),
            bell: Arc::default(),
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
