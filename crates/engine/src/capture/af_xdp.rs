//! The AF_XDP source: a socket of one receive queue whose UMEM is the pool. Received frames
//! go into chunks as they are (no copy) and back to the fill ring when their chunk comes
//! home; timestamps are the kernel's receive times, which poolcap's XDP program stores in
//! each frame's metadata (CLOCK_MONOTONIC, converted to wall-clock time). A user-space
//! classic BPF filter (the program libpcap compiles for a live capture, as on AF_PACKET,
//! run by `bpf` with the kernel's view of VLAN tags) rejects frames before they enter a
//! chunk; they go straight back to the fill ring and count as `filtered`.

use std::time::Duration;

use poolcap_sys::poll::Readiness;
use poolcap_sys::xsk::{RxFrame, Xsk, XskStats};
use poolcap_sys::SysError;

use super::bpf::Program;
use super::pool::Pool;
use super::source::{now_ns, poll_ms, Filler, KernelDrops, Source};

/// An AF_XDP socket of one receive queue, with an optional user-space filter.
pub struct XdpSource {
    xsk: Xsk,
    filter: Option<Program>,
    batch: Vec<RxFrame>,
    rejected: Vec<RxFrame>,
    last: XskStats,
    /// CLOCK_MONOTONIC to wall clock, for the receive times the XDP program records.
    clock_offset: i64,
    /// Whether the XDP program records them (`XdpRedirect::stamps`).
    stamped: bool,
    /// The last time given to a frame that had none from the program.
    last_read: u64,
}

impl std::fmt::Debug for XdpSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpSource").field("xsk", &self.xsk).finish()
    }
}

/// Frames taken from the RX ring per batch.
const XDP_BATCH: usize = 256;

impl XdpSource {
    /// Wraps a bound socket; `filter` is a compiled tcpdump expression, if any; `stamped`
    /// whether the XDP program records each frame's receive time in its metadata.
    pub fn new(xsk: Xsk, filter: Option<Program>, stamped: bool) -> Self {
        Self {
            xsk,
            filter,
            batch: Vec::with_capacity(XDP_BATCH),
            rejected: Vec::with_capacity(XDP_BATCH),
            last: XskStats::default(),
            clock_offset: poolcap_sys::process::monotonic_to_realtime_offset(),
            stamped,
            last_read: 0,
        }
    }
}

impl Source for XdpSource {
    fn take_batch(&mut self, pool: &Pool, filler: &mut Filler) -> bool {
        self.batch.clear();
        if self.xsk.receive(XDP_BATCH, &mut self.batch) == 0 {
            return false;
        }
        filler.begin_batch();
        // Kernel receive time from the XDP metadata; the batch time if a frame has none.
        let now = now_ns();
        for frame in self.batch.drain(..) {
            let ts = if self.stamped {
                self.xsk
                    .umem()
                    .meta_u64(&frame)
                    .map(|mono| mono.wrapping_add_signed(self.clock_offset))
                    .filter(|&t| t <= now + 1_000_000 && now.saturating_sub(t) < 10_000_000_000)
                    .unwrap_or(now)
            } else {
                // The program records no time (the bytes there are one from the frame's last
                // use): the batch time, a nanosecond apart within the queue, so that the
                // frames of a batch keep their order when files are merged by time (a batch
                // split by a file's rotation left equal times on both sides, which `mergecap`
                // may order either way).
                self.last_read = now.max(self.last_read + 1);
                self.last_read
            };
            if filler.past_cut(ts) {
                self.rejected.push(frame);
                continue;
            }
            let keep = match &self.filter {
                Some(p) => p.matches_frame(self.xsk.umem().data(&frame)),
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

    fn poll(&self, timeout: Duration) -> Result<Readiness, SysError> {
        self.xsk.wait(poll_ms(timeout))
    }

    fn take_back(&mut self, pool: &Pool) {
        while let Some(mut c) = pool.take_returned() {
            self.xsk.refill(c.take_frames());
            pool.release(c);
        }
    }

    fn refills_from_pool(&self) -> bool {
        true
    }

    /// Frames are visible one by one, and waking per frame costs a wakeup on both CPUs for
    /// a handful of frames. 1 ms at 1 Mpps is 1000 frames, far below the RX ring's R*M
    /// entries, and below AF_PACKET's block timeout.
    fn coalesce(&self) -> Duration {
        Duration::from_millis(1)
    }

    fn needs_wakeup(&self) -> bool {
        self.xsk.needs_wakeup()
    }

    /// XDP_STATISTICS are cumulative: reports the difference.
    fn kernel_drops(&mut self) -> Result<KernelDrops, SysError> {
        let now = self.xsk.statistics()?;
        let d = |a: u64, b: u64| a.saturating_sub(b);
        let drops = KernelDrops {
            kernel: d(now.rx_ring_full, self.last.rx_ring_full)
                + d(now.rx_invalid_descs, self.last.rx_invalid_descs),
            pool: d(now.rx_dropped, self.last.rx_dropped),
            freezes: 0,
            received: None,
        };
        self.last = now;
        Ok(drops)
    }

    /// The RX ring's frames are not counted by the kernel: let them go, counted here.
    fn let_go_ready(&mut self) -> u64 {
        let mut n = 0;
        loop {
            self.batch.clear();
            let got = self.xsk.receive(XDP_BATCH, &mut self.batch);
            if got == 0 {
                return n;
            }
            n += got as u64;
            self.xsk.refill(self.batch.drain(..));
        }
    }
}
