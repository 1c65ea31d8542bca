//! The capture thread's time. The shell ([`super::queue`]) reads the time, spins, sleeps
//! and blocks only through a [`Clock`], so the very code that captures can also be run turn
//! by turn in virtual time: a test drives the real shell over the in-memory source and
//! checks what it decides (when a chunk is sealed, how long a pause lasts) to the
//! nanosecond, on any machine, however loaded (quinn's `Pair::drive` does this for a
//! connection), and `poolcap-bench sim` turns many shells on one virtual time (see
//! `super::sim`). A capture runs on [`RealClock`].

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

#[cfg(any(test, feature = "sim"))]
pub use virtual_time::{VirtualClock, Wake};

/// Virtual time: for tests, and for `poolcap-bench sim` (the engine's `sim` feature).
#[cfg(any(test, feature = "sim"))]
mod virtual_time {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use poolcap_core::geometry::Room;
    use poolcap_sys::poll::Readiness;
    use poolcap_sys::SysError;

    use super::Clock;
    use crate::capture::pool::Pool;
    use crate::capture::source::Source;

    /// Time that moves only when its driver moves it: a shell's wait (sleep, spin, idle poll,
    /// wait for room) returns at once and leaves a [`Wake`] saying until when it would wait and
    /// what would end it early; the driver (a test, or `poolcap-bench sim` with many shells on
    /// one time) moves the time to the earliest wake and turns that shell again. Clones share
    /// the time and the waits; [`VirtualClock::beside`] gives another shell its own waits on the
    /// same time.
    #[derive(Debug, Clone)]
    pub struct VirtualClock {
        ns: Arc<AtomicU64>,
        epoch_ns: u64,
        waits: Arc<Mutex<Waits>>,
    }

    /// A shell's pending wait, and when its source's next packet arrives.
    #[derive(Debug, Default)]
    struct Waits {
        wake: Option<Wake>,
        next_packet: Option<Duration>,
    }

    /// What a shell waits for in virtual time: until `at` at the latest, or until `room` (an
    /// event of that kind on its pool) if that comes first. A poll's `at` is already cut short
    /// to its source's next packet.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Wake {
        /// When the wait ends at the latest.
        pub at: Duration,
        /// A wait for room, which a room event of this kind (or an earlier kind) ends.
        pub room: Option<Room>,
    }

    impl VirtualClock {
        /// Time 0, stamped `epoch_ns` on the packets' clock.
        pub fn new(epoch_ns: u64) -> Self {
            Self {
                ns: Default::default(),
                epoch_ns,
                waits: Default::default(),
            }
        }

        /// A clock on the same time with waits of its own, for another shell.
        pub fn beside(&self) -> Self {
            Self {
                ns: Arc::clone(&self.ns),
                epoch_ns: self.epoch_ns,
                waits: Default::default(),
            }
        }

        /// Moves time on by `d` (the test's own waiting: a consumer that is slow).
        pub fn advance(&self, d: Duration) {
            self.ns.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
        }

        /// Moves time on to `t`; never back.
        pub fn set(&self, t: Duration) {
            self.ns.fetch_max(t.as_nanos() as u64, Ordering::Relaxed);
        }

        /// The wait the shell asked for since the last call (`None`: it did not wait, so it
        /// turns again at once).
        pub fn take_wake(&self) -> Option<Wake> {
            self.waits().wake.take()
        }

        /// For the shell's in-memory source: when its next packet arrives (`None`: never), which
        /// ends a poll.
        pub(crate) fn next_packet_at(&self, at_ns: Option<u64>) {
            self.waits().next_packet =
                at_ns.map(|ns| Duration::from_nanos(ns.saturating_sub(self.epoch_ns)));
        }

        fn waits(&self) -> std::sync::MutexGuard<'_, Waits> {
            self.waits.lock().unwrap_or_else(|e| e.into_inner())
        }

        /// Waits `d` more (after what this turn already waited), cut short at `until`.
        fn wait(&self, d: Duration, until: Option<Duration>, room: Option<Room>) {
            let now = self.now();
            let mut w = self.waits();
            let from = w.wake.map_or(now, |w| w.at);
            let at = (from + d).min(until.unwrap_or(Duration::MAX)).max(now);
            w.wake = Some(Wake { at, room });
        }
    }

    impl Clock for VirtualClock {
        fn now(&self) -> Duration {
            Duration::from_nanos(self.ns.load(Ordering::Relaxed))
        }

        fn wall_ns(&self) -> u64 {
            self.epoch_ns + self.now().as_nanos() as u64
        }

        fn spin_for(&self, d: Duration) {
            self.wait(d, None, None);
        }

        fn sleep(&self, d: Duration) {
            self.wait(d, None, None);
        }

        fn poll(&self, source: &dyn Source, timeout: Duration) -> Result<Readiness, SysError> {
            let r = source.poll(Duration::ZERO)?;
            if r != Readiness::Readable && !timeout.is_zero() {
                let next = self.waits().next_packet;
                self.wait(timeout, next, None);
            }
            Ok(r)
        }

        fn wait_for_room(&self, pool: &Pool, what: Room, seen: u64, timeout: Duration) -> bool {
            if pool.room_events() != seen {
                return false;
            }
            self.wait(timeout, None, Some(what));
            true
        }
    }
}
