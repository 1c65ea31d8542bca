//! How a capture ends alike on every queue: one cut instant for a stop, one packet budget
//! for `-c`.
//!
//! Stopping is not instantaneous: each capture thread sees the stop flag on its own, then
//! drains what its kernel ring still holds for a while. Traffic that goes on meanwhile
//! would be taken by one queue and not by another, so the file would have holes below its
//! last packet that no counter explains. Instead the first thread to see the stop fixes a
//! [`Cut`]: every queue takes every packet received up to it and none after it; those
//! after it count as `not_taken`. Packets in one ring are in receive order, so a queue
//! still drains all of its packets up to the cut.
//!
//! A count limit (`-c N`) is a [`Budget`] shared by the queues: a packet is taken only
//! with a unit of it, so exactly N are captured, and the rest stay in the kernel (counted
//! as `not_taken`, not as drops), as `tcpdump -c` stops reading.

use std::sync::atomic::{AtomicU64, Ordering};

/// No cut yet.
const NONE: u64 = u64::MAX;
/// A thread is reading the clock to fix the cut.
const FIXING: u64 = u64::MAX - 1;

/// The instant (wall-clock nanoseconds, the kernel's timestamp clock) that ends a capture.
#[derive(Debug)]
pub struct Cut(AtomicU64);

impl Default for Cut {
    fn default() -> Self {
        Self(AtomicU64::new(NONE))
    }
}

impl Cut {
    /// Fixes the cut at `now()` if no thread has yet; returns the cut.
    ///
    /// The clock is read only after the claim, so a thread that found no cut after it took a
    /// batch (see [`Cut::get`]) took only packets older than the cut to come.
    pub fn fix(&self, now: impl FnOnce() -> u64) -> u64 {
        match self
            .0
            .compare_exchange(NONE, FIXING, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                let t = now().min(FIXING - 1);
                self.0.store(t, Ordering::Release);
                t
            }
            Err(_) => self.get(),
        }
    }

    /// The cut, or `u64::MAX` (take everything) while there is none. Call it after taking a
    /// batch from the kernel: every packet of the batch was received before the call.
    pub fn get(&self) -> u64 {
        loop {
            match self.0.load(Ordering::Acquire) {
                // Two loads of the clock apart: wait for the value.
                FIXING => std::hint::spin_loop(),
                t => return t,
            }
        }
    }
}

/// Packets still to take under a count limit.
#[derive(Debug)]
pub struct Budget(AtomicU64);

impl Budget {
    /// A budget of `n` packets.
    pub fn new(n: u64) -> Self {
        Self(AtomicU64::new(n))
    }

    /// Takes one packet's unit; false when none is left.
    #[inline]
    pub fn take(&self) -> bool {
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Gives back a unit taken for a packet that was not captured after all.
    pub fn refund(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// True when every unit is taken.
    pub fn is_spent(&self) -> bool {
        self.0.load(Ordering::Relaxed) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_stop_fixes_the_cut_for_every_queue() {
        let cut = Cut::default();
        assert_eq!(cut.get(), u64::MAX, "no cut: take everything");
        assert_eq!(cut.fix(|| 1000), 1000);
        assert_eq!(cut.fix(|| 2000), 1000, "a later stop keeps the first cut");
        assert_eq!(cut.get(), 1000);
    }

    #[test]
    fn a_budget_gives_exactly_n_units_across_threads() {
        let b = std::sync::Arc::new(Budget::new(1000));
        let taken: u64 = (0..4)
            .map(|_| {
                let b = std::sync::Arc::clone(&b);
                std::thread::spawn(move || (0..600).filter(|_| b.take()).count() as u64)
            })
            .map(|h| h.join().unwrap())
            .sum();
        assert_eq!(taken, 1000);
        assert!(b.is_spent());
        b.refund();
        assert!(!b.is_spent() && b.take() && !b.take());
    }
}
