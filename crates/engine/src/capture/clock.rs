//! The capture thread's time. The shell ([`super::queue`]) reads the time, spins, sleeps
//! and blocks only through a [`Clock`], so the very code that captures can also be run turn
//! by turn in virtual time: a test drives the real shell over the in-memory source and
//! checks what it decides (when a chunk is sealed, how long a pause lasts) to the
//! nanosecond, on any machine, however loaded (quinn's `Pair::drive` does this for a
//! connection). A capture runs on [`RealClock`].

use std::time::{Duration, Instant};

use poolcap_core::geometry::Room;
use poolcap_sys::poll::Readiness;
use poolcap_sys::SysError;

use super::pool::Pool;
use super::source::{now_ns, Source};

/// See the module docs.
pub trait Clock: Send {
    /// Time since the capture thread started.
    fn now(&self) -> Duration;
    /// The clock packets are stamped with (ns since the epoch): for the writer's watermark
    /// and the stop's cut.
    fn wall_ns(&self) -> u64;
    /// Busy-waits for `d`.
    fn spin_for(&self, d: Duration);
    /// Sleeps for `d`.
    fn sleep(&self, d: Duration);
    /// Blocks in `source` for up to `timeout`, until it has packets.
    fn poll(&self, source: &dyn Source, timeout: Duration) -> Result<Readiness, SysError>;
    /// Waits up to `timeout` for `pool` to make room of kind `what`, unless it has made
    /// some since `seen`; true if it waited.
    fn wait_for_room(&self, pool: &Pool, what: Room, seen: u64, timeout: Duration) -> bool;
}

/// The machine's clocks: what every capture runs on.
#[derive(Debug)]
pub struct RealClock {
    t0: Instant,
}

impl RealClock {
    /// A clock whose time starts now.
    pub fn start() -> Self {
        Self { t0: Instant::now() }
    }
}

impl Clock for RealClock {
    fn now(&self) -> Duration {
        self.t0.elapsed()
    }

    fn wall_ns(&self) -> u64 {
        now_ns()
    }

    fn spin_for(&self, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }

    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
    }

    fn poll(&self, source: &dyn Source, timeout: Duration) -> Result<Readiness, SysError> {
        source.poll(timeout)
    }

    fn wait_for_room(&self, pool: &Pool, what: Room, seen: u64, timeout: Duration) -> bool {
        pool.wait_for_room(what, seen, timeout)
    }
}

/// Time that moves only when the shell waits: each sleep, spin, idle poll or wait for room
/// advances it by exactly what was asked. Shared (cloned) between the shell and the test
/// that drives it.
#[cfg(test)]
#[derive(Debug, Clone)]
pub struct VirtualClock {
    ns: std::sync::Arc<std::sync::atomic::AtomicU64>,
    epoch_ns: u64,
}

#[cfg(test)]
impl VirtualClock {
    /// Time 0, stamped `epoch_ns` on the packets' clock.
    pub fn new(epoch_ns: u64) -> Self {
        Self {
            ns: Default::default(),
            epoch_ns,
        }
    }

    /// Moves time on by `d` (the test's own waiting: a consumer that is slow).
    pub fn advance(&self, d: Duration) {
        self.ns
            .fetch_add(d.as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
impl Clock for VirtualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.ns.load(std::sync::atomic::Ordering::Relaxed))
    }

    fn wall_ns(&self) -> u64 {
        self.epoch_ns + self.now().as_nanos() as u64
    }

    fn spin_for(&self, d: Duration) {
        self.advance(d);
    }

    fn sleep(&self, d: Duration) {
        self.advance(d);
    }

    fn poll(&self, source: &dyn Source, timeout: Duration) -> Result<Readiness, SysError> {
        let r = source.poll(Duration::ZERO)?;
        if r != Readiness::Readable {
            self.advance(timeout);
        }
        Ok(r)
    }

    fn wait_for_room(&self, pool: &Pool, _what: Room, seen: u64, timeout: Duration) -> bool {
        if pool.room_events() != seen {
            return false;
        }
        self.advance(timeout);
        true
    }
}
