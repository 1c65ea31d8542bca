//! Workers: packet-handler threads that run the pipeline over one chunk at a time, then send
//! the chunk on (to the file writer) or home (to its pool's recycle queue).
//!
//! The pipeline is one [`Stage`]: the papers' synthetic analysis load, the x-loop (X
//! iterations of arithmetic over the packet's bytes per packet, kept from being optimised
//! away by `black_box`), or the probe's rules (`poolcap probe`), whose per-worker
//! [`Analyzer`] counts without locks and hands its tally over at chunk boundaries when the
//! probe switches periods. Either way the pool, congestion control and buddy offload see the
//! same thing: a worker that takes a chunk, spends time on it, and passes it on. Which
//! capture queues a worker serves is decided once at start (B-(M,R): a chunk is processed by
//! a worker of its own queue).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use poolcap_probe::{Analyzer, Hub};

use super::doorbell::Doorbell;
use super::pool::{Chunk, Pool};

/// The x-loop: `x` iterations of a multiply-add over the packet's bytes.
#[inline]
pub fn x_loop(data: &[u8], x: u32) -> u64 {
    if data.is_empty() {
        return 0;
    }
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut i = 0usize;
    for _ in 0..x {
        h = (h ^ u64::from(data[i])).wrapping_mul(0x0100_0000_01b3);
        i += 1;
        if i == data.len() {
            i = 0;
        }
    }
    black_box(h)
}

/// Nice value of worker threads and of the packet store's threads (capture threads keep 0).
pub const WORKER_NICE: i32 = 10;

/// Which queues worker `w` of `workers` serves, for `queues` queues: queue q goes to worker
/// q mod W; with more workers than queues, worker w serves queue w mod Q.
pub fn served_queues(w: usize, workers: usize, queues: usize) -> Vec<usize> {
    if workers <= queues {
        (0..queues).filter(|q| q % workers == w).collect()
    } else {
        vec![w % queues]
    }
}

/// Where processed chunks go.
#[derive(Debug, Clone)]
pub enum Next {
    /// Back to the pool: count only.
    Recycle,
    /// To the sink (the file writer or the forwarder).
    Write(Arc<ArrayQueue<Chunk>>),
}

/// What a worker does with each packet.
#[derive(Debug)]
pub enum Stage {
    /// The x-loop with this many iterations per packet (0: pass chunks on).
    XLoop(u32),
    /// The probe's rules, then the x-loop with this many iterations (an extra synthetic
    /// analysis cost, as in Zabala et al.'s probe experiments).
    Probe(Analyzer, u32),
}

impl Stage {
    /// The probe's rules (plus `load`) when there is a probe, else the x-loop of `load`
    /// iterations.
    pub fn new(load: u32, probe: Option<&Arc<Hub>>) -> Self {
        probe.map_or(Self::XLoop(load), |hub| Self::Probe(hub.attach(), load))
    }

    fn run(&mut self, chunk: &Chunk) {
        match self {
            Self::XLoop(0) => {}
            Self::XLoop(x) => {
                for (_, data) in chunk.packets() {
                    x_loop(data, *x);
                }
            }
            Self::Probe(a, x) => {
                for (meta, data) in chunk.packets() {
                    a.observe(data, meta.wire_len, meta.ts_ns);
                    if *x > 0 {
                        x_loop(data, *x);
                    }
                }
                a.sync();
            }
        }
    }

    /// Between chunks: a probe worker answers a period switch even when no chunk comes.
    fn idle(&mut self) {
        if let Self::Probe(a, _) = self {
            a.sync();
        }
    }
}

/// One worker thread's setup.
#[derive(Debug)]
pub struct Worker {
    /// Queues served.
    pub queues: Vec<usize>,
    /// All pools (indexed by queue).
    pub pools: Arc<Vec<Arc<Pool>>>,
    /// What runs on each packet.
    pub stage: Stage,
    /// Where chunks go next.
    pub next: Next,
    /// Set when every capture thread has finished.
    pub captures_done: Arc<AtomicBool>,
    /// Rung when a chunk arrives in a served queue.
    pub bell: Arc<Doorbell>,
    /// The sink's bell.
    pub writer_bell: Arc<Doorbell>,
}

impl Worker {
    /// Processes chunks until the capture threads are done and the served queues are empty.
    pub fn run(mut self) {
        // When a worker shares a core with a capture thread, the capture thread must win:
        // it only empties the kernel ring into the pool, and if it waits the ring
        // overflows, while a waiting worker only lets the pool fill, which is what it is for.
        poolcap_sys::process::set_thread_nice(WORKER_NICE);
        self.bell.answer_from_this_thread();
        loop {
            let mut worked = false;
            for i in 0..self.queues.len() {
                if let Some(chunk) = self.pools[self.queues[i]].take_captured() {
                    self.process(chunk);
                    worked = true;
                }
            }
            if worked {
                continue;
            }
            self.stage.idle();
            if self.captures_done.load(Ordering::Acquire)
                && self
                    .queues
                    .iter()
                    .all(|&q| self.pools[q].nothing_captured())
            {
                return;
            }
            // Rung on every new chunk; the timeout only bounds a missed ring.
            self.bell.wait(Duration::from_millis(20));
        }
    }

    fn process(&mut self, chunk: Chunk) {
        self.stage.run(&chunk);
        match &self.next {
            Next::Recycle => self.pools[chunk.home].recycle(chunk),
            // Cannot fail: the sink's queue has room for every chunk of every pool.
            Next::Write(q) => {
                let _ = q.push(chunk);
                self.writer_bell.ring();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_queue_has_exactly_one_worker_when_workers_do_not_exceed_queues() {
        for (w, q) in [(1, 1), (1, 4), (2, 4), (3, 4), (4, 4)] {
            let mut seen = vec![0; q];
            for i in 0..w {
                for x in served_queues(i, w, q) {
                    seen[x] += 1;
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "w={w} q={q}: {seen:?}");
        }
        assert_eq!(served_queues(3, 4, 2), vec![1]);
    }

    #[test]
    fn x_loop_depends_on_data_and_iterations() {
        let a = x_loop(b"abc", 1000);
        assert_ne!(a, x_loop(b"abd", 1000));
        assert_ne!(a, x_loop(b"abc", 999));
        assert_eq!(x_loop(b"", 10), 0);
    }
}
