//! A capture queue: one fanout socket with its TPACKET_V3 ring, and the capture thread that
//! copies each retired block's packets into pool chunks and gives the block back at once, so
//! a slow worker never holds the kernel ring.
//!
//! The capture thread is the only writer of its queue's counters and the only taker of free
//! chunks from its pool. It seals a chunk when it is full, or when the ring is idle and the
//! chunk has been open for `seal_after`, so low rates are not delayed. After sealing it
//! publishes its [`Progress`]: how many chunks it has sealed and a timestamp watermark below
//! which it will produce no more packets, which the file writer needs to merge queues in
//! timestamp order.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use poolcap_sys::rx_ring::{RingGeometry, RxRing, TP_STATUS_VLAN_TPID_VALID, TP_STATUS_VLAN_VALID};
use poolcap_sys::socket::{BpfInsn, FanoutMode, PacketSocket};
use poolcap_sys::SysError;

use super::account::QueueCounters;
use super::policy::Policy;
use super::pool::{Chunk, Pool};

/// How the capture thread waits when the kernel has nothing for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitStrategy {
    /// Block in `poll()` until a block is retired.
    Poll,
    /// Spin on the block status word: no syscalls, one busy core per queue.
    Busy,
    /// Spin briefly, then sleep for a period that doubles while idle (up to the block
    /// timeout) and resets when packets come: few syscalls at high rates, little CPU at low.
    Adaptive,
}

/// What a capture thread has handed on so far (see the module docs).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Chunks sealed into the capture queue.
    pub sealed: u64,
    /// No packet with a smaller timestamp will come from this queue after the sealed ones.
    pub watermark_ns: u64,
    /// The thread has finished: nothing more will come.
    pub done: bool,
}

/// A fanout socket with its ring, ready to capture.
#[derive(Debug)]
pub struct QueueSocket {
    sock: PacketSocket,
    ring: RxRing,
}

impl QueueSocket {
    /// Opens a socket, attaches `filter` and a ring before binding (so no unfiltered packet
    /// slips in), binds to `ifindex` and joins the fanout group.
    pub fn open(
        ifindex: u32,
        geometry: RingGeometry,
        filter: &[BpfInsn],
        fanout: (u16, FanoutMode),
    ) -> Result<Self, SysError> {
        let sock = PacketSocket::open()?;
        sock.set_tpacket_v3()?;
        sock.attach_filter(filter)?;
        let ring = RxRing::new(&sock, geometry)?;
        sock.bind(ifindex)?;
        sock.join_fanout(fanout.0, fanout.1)?;
        Ok(Self { sock, ring })
    }
}

/// Everything a capture thread needs.
#[derive(Debug)]
pub struct CaptureThread {
    /// Receive queue index.
    pub queue: usize,
    /// The socket.
    pub socket: QueueSocket,
    /// This queue's pool.
    pub pool: Arc<Pool>,
    /// Every queue's pool (a chunk may be routed to a buddy's capture queue).
    pub pools: Arc<Vec<Arc<Pool>>>,
    /// This queue's counters.
    pub counters: Arc<QueueCounters>,
    /// Every queue's counters (for `offloaded_in`).
    pub all_counters: Arc<Vec<Arc<QueueCounters>>>,
    /// The offload policy of this queue.
    pub policy: Box<dyn Policy>,
    /// Published progress.
    pub progress: Arc<Mutex<Progress>>,
    /// Waiting strategy.
    pub wait: WaitStrategy,
    /// Seal an open chunk after this long when the ring is idle.
    pub seal_after: Duration,
    /// Bytes kept per packet.
    pub snaplen: usize,
    /// Set to stop.
    pub stop: Arc<AtomicBool>,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Per-block tallies, published once per block.
#[derive(Default)]
struct Tally {
    captured: u64,
    bytes: u64,
    dropped_pool: u64,
}

impl CaptureThread {
    fn publish(&self, f: impl FnOnce(&mut Progress)) {
        if let Ok(mut p) = self.progress.lock() {
            f(&mut p);
        }
    }

    fn backlogs(&self, scratch: &mut Vec<usize>) {
        scratch.clear();
        scratch.extend(self.pools.iter().map(|p| p.backlog()));
    }

    fn seal(&mut self, mut chunk: Chunk, seq: &mut u64, backlogs: &mut Vec<usize>) {
        chunk.seq = *seq;
        *seq += 1;
        let last = chunk.packets().last().map_or(0, |(m, _)| m.ts_ns);
        self.backlogs(backlogs);
        let target = self
            .policy
            .route(self.queue, backlogs, self.pool.size().chunks);
        if target != self.queue {
            let n = chunk.len() as u64;
            QueueCounters::add(&self.counters.offloaded_out, n);
            QueueCounters::add(&self.all_counters[target].offloaded_in, n);
        }
        // Cannot fail: a capture queue holds every chunk of its buddy group.
        let _ = self.pools[target].captured.push(chunk);
        QueueCounters::add(&self.counters.chunks, 1);
        let in_use = self.pool.in_use() as u64;
        self.counters.pool_peak.fetch_max(in_use, Ordering::Relaxed);
        let sealed = *seq;
        self.publish(|p| {
            p.sealed = sealed;
            p.watermark_ns = p.watermark_ns.max(last);
        });
    }

    fn read_kernel_stats(&self) -> Result<(), SysError> {
        let st = self.socket.sock.take_statistics()?;
        QueueCounters::add(&self.counters.dropped_kernel, st.drops);
        QueueCounters::add(&self.counters.freezes, st.freezes);
        Ok(())
    }

    /// Runs until stopped; then drains what the kernel still holds (waiting one block timeout
    /// for the last partial block), seals the open chunk and reads the final statistics.
    pub fn run(mut self) -> Result<(), SysError> {
        let retire =
            Duration::from_millis(u64::from(self.socket.ring.geometry().retire_timeout_ms));
        let mut open: Option<Chunk> = None;
        let mut open_since = Instant::now();
        let mut seq = 0u64;
        let mut stopping: Option<Instant> = None;
        let mut last_stats = Instant::now();
        let mut idle_sleep = Duration::from_micros(50);
        let mut tally = Tally::default();
        let mut full: Vec<Chunk> = Vec::with_capacity(self.pool.size().chunks);
        let mut backlogs = Vec::with_capacity(self.pools.len());
        let mut paused_since: Option<Instant> = None;
        let result = loop {
            self.backlogs(&mut backlogs);
            let capacity = self.pool.size().chunks;
            let pause = self.policy.pause(self.queue, &backlogs, capacity)
                && !self.stop.load(Ordering::Relaxed);
            match (pause, paused_since) {
                (true, None) => paused_since = Some(Instant::now()),
                (false, Some(t)) => {
                    QueueCounters::add(&self.counters.paused_ms, t.elapsed().as_millis() as u64);
                    paused_since = None;
                }
                _ => {}
            }
            if pause {
                // Leave the packets to the kernel, which counts what it cannot hold.
                std::thread::sleep(Duration::from_micros(200));
                QueueCounters::add(&self.counters.syscalls, 1);
                continue;
            }
            let got = self.take_block(&mut open, &mut open_since, &mut full, &mut tally);
            for c in full.drain(..) {
                self.seal(c, &mut seq, &mut backlogs);
            }
            if got {
                QueueCounters::add(&self.counters.captured, std::mem::take(&mut tally.captured));
                QueueCounters::add(&self.counters.bytes, std::mem::take(&mut tally.bytes));
                QueueCounters::add(
                    &self.counters.dropped_pool,
                    std::mem::take(&mut tally.dropped_pool),
                );
                idle_sleep = Duration::from_micros(50);
            } else {
                if open
                    .as_ref()
                    .is_some_and(|c| !c.is_empty() && open_since.elapsed() >= self.seal_after)
                {
                    if let Some(c) = open.take() {
                        self.seal(c, &mut seq, &mut backlogs);
                    }
                }
                if open.as_ref().is_none_or(Chunk::is_empty) {
                    // Packets not yet seen sit in the kernel's current block, opened at most one
                    // block timeout ago; allow the same again for scheduling slack.
                    let mark = now_ns().saturating_sub(2 * retire.as_nanos() as u64 + 5_000_000);
                    self.publish(|p| p.watermark_ns = p.watermark_ns.max(mark));
                }
                if self.stop.load(Ordering::Relaxed) {
                    let since = *stopping.get_or_insert_with(Instant::now);
                    if since.elapsed() > 2 * retire + Duration::from_millis(10) {
                        break Ok(());
                    }
                }
                let wait_for = retire.min(self.seal_after.max(Duration::from_millis(1)));
                if let Err(e) = self.wait(wait_for, &mut idle_sleep) {
                    break Err(e);
                }
            }
            if last_stats.elapsed() >= Duration::from_millis(100) {
                last_stats = Instant::now();
                if let Err(e) = self.read_kernel_stats() {
                    break Err(e);
                }
            }
        };
        if let Some(t) = paused_since {
            QueueCounters::add(&self.counters.paused_ms, t.elapsed().as_millis() as u64);
        }
        if let Some(c) = open.take().filter(|c| !c.is_empty()) {
            self.seal(c, &mut seq, &mut backlogs);
        } else if let Some(c) = open.take() {
            self.pool.recycle(c);
        }
        let stats = self.read_kernel_stats();
        self.publish(|p| {
            p.done = true;
            p.watermark_ns = u64::MAX;
        });
        result.and(stats)
    }

    fn wait(&self, timeout: Duration, idle_sleep: &mut Duration) -> Result<(), SysError> {
        match self.wait {
            WaitStrategy::Poll => {
                QueueCounters::add(&self.counters.syscalls, 1);
                self.socket
                    .sock
                    .wait_readable(timeout.as_millis().max(1) as i32)?;
            }
            WaitStrategy::Busy => {
                for _ in 0..256 {
                    std::hint::spin_loop();
                }
            }
            WaitStrategy::Adaptive => {
                let spin_until = Instant::now() + Duration::from_micros(20);
                while Instant::now() < spin_until {
                    std::hint::spin_loop();
                }
                QueueCounters::add(&self.counters.syscalls, 1);
                std::thread::sleep(*idle_sleep);
                *idle_sleep = (*idle_sleep * 2).min(timeout);
            }
        }
        Ok(())
    }

    /// Copies one retired block into chunks, leaving the chunks it filled in `full` to be
    /// sealed after the block is back with the kernel; false if the kernel had none ready.
    fn take_block(
        &mut self,
        open: &mut Option<Chunk>,
        open_since: &mut Instant,
        full: &mut Vec<Chunk>,
        tally: &mut Tally,
    ) -> bool {
        let Some(block) = self.socket.ring.try_next_block() else {
            return false;
        };
        for pkt in block.packets() {
            let ts = u64::from(pkt.sec) * 1_000_000_000 + u64::from(pkt.nsec);
            // Put back the VLAN tag the kernel stripped, so the file shows the wire.
            let mut tag = [0u8; 4];
            let (parts, wire): ([&[u8]; 3], u32) =
                if pkt.status & TP_STATUS_VLAN_VALID != 0 && pkt.data.len() >= 12 {
                    let tpid = if pkt.status & TP_STATUS_VLAN_TPID_VALID != 0 {
                        pkt.vlan_tpid
                    } else {
                        0x8100
                    };
                    tag[..2].copy_from_slice(&tpid.to_be_bytes());
                    tag[2..].copy_from_slice(&pkt.vlan_tci.to_be_bytes());
                    ([&pkt.data[..12], &tag, &pkt.data[12..]], pkt.wire_len + 4)
                } else {
                    ([pkt.data, &[], &[]], pkt.wire_len)
                };
            let len = parts.iter().map(|p| p.len()).sum::<usize>();
            loop {
                if open.is_none() {
                    *open = self.pool.take_free();
                    *open_since = Instant::now();
                }
                let Some(chunk) = open.as_mut() else {
                    tally.dropped_pool += 1;
                    break;
                };
                let caplen = len.min(self.snaplen).min(chunk.capacity_bytes());
                if chunk.push(ts, parts, caplen, wire) {
                    tally.captured += 1;
                    tally.bytes += u64::from(wire);
                    break;
                }
                if let Some(c) = open.take() {
                    full.push(c);
                }
            }
        }
        drop(block);
        true
    }
}
