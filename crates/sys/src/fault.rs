//! The fake behind the one chokepoint every wrapped system call passes through
//! (`error::enter`): a test makes the next calls of a named syscall fail with an
//! errno of its choosing, so error paths (a ring the kernel refuses, a socket that cannot be
//! opened) are tested without root, a broken kernel or a full memory.
//!
//! Compiled in only for this crate's own tests and with the `fault` feature (which the
//! `poolcap` crate enables for its tests); otherwise [`planned`] is a constant `None` and the
//! chokepoint costs nothing.

#[cfg(any(test, feature = "fault"))]
mod armed {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Mutex, MutexGuard, PoisonError};

    /// One planned failure: calls named `call` fail with `errno` after `skip` real calls,
    /// `times` times.
    struct Plan {
        call: &'static str,
        errno: i32,
        skip: u32,
        times: u32,
    }

    /// Whether any plan exists: the chokepoint's only cost when none does.
    static ARMED: AtomicBool = AtomicBool::new(false);
    static PLANS: Mutex<Vec<Plan>> = Mutex::new(Vec::new());
    /// Held by each [`Injection`]: plans are process-wide (the engine's own threads must see
    /// them), so tests that inject run one at a time.
    static EXCLUSIVE: Mutex<()> = Mutex::new(());

    /// A planned failure; dropping it removes the plan.
    pub struct Injection {
        _exclusive: MutexGuard<'static, ()>,
    }

    /// Makes calls named `call` (the `call` of the resulting [`crate::SysError`], e.g.
    /// `"setsockopt(PACKET_RX_RING)"`) fail with `errno`: the first `skip` calls go through,
    /// the next `times` fail without reaching the kernel.
    pub fn inject(call: &'static str, errno: i32, skip: u32, times: u32) -> Injection {
        let exclusive = EXCLUSIVE.lock().unwrap_or_else(PoisonError::into_inner);
        let mut plans = PLANS.lock().unwrap_or_else(PoisonError::into_inner);
        plans.push(Plan {
            call,
            errno,
            skip,
            times,
        });
        // Relaxed: the plan itself is published by the mutex; the flag only saves the lock.
        ARMED.store(true, Ordering::Relaxed);
        Injection {
            _exclusive: exclusive,
        }
    }

    impl Drop for Injection {
        fn drop(&mut self) {
            let mut plans = PLANS.lock().unwrap_or_else(PoisonError::into_inner);
            plans.clear();
            ARMED.store(false, Ordering::Relaxed);
        }
    }

    /// The errno a call named `call` must fail with now, if a plan says so.
    pub fn planned(call: &str) -> Option<i32> {
        if !ARMED.load(Ordering::Relaxed) {
            return None;
        }
        let mut plans = PLANS.lock().unwrap_or_else(PoisonError::into_inner);
        let plan = plans.iter_mut().find(|p| p.call == call && p.times > 0)?;
        if plan.skip > 0 {
            plan.skip -= 1;
            return None;
        }
        plan.times -= 1;
        Some(plan.errno)
    }
}

#[cfg(any(test, feature = "fault"))]
pub use armed::{inject, planned, Injection};

/// The errno a call named `call` must fail with now: never, without the `fault` feature.
#[cfg(not(any(test, feature = "fault")))]
#[inline(always)]
pub fn planned(_call: &str) -> Option<i32> {
    None
}

#[cfg(test)]
mod tests {
    use super::inject;
    use crate::socket::{ifindex, PacketSocket};

    #[test]
    fn a_planned_call_fails_with_its_errno_after_the_skipped_ones_then_goes_through() {
        let _plan = inject("if_nametoindex", libc::ENOMEM, 1, 2);
        assert!(ifindex("lo").is_ok(), "the first call is skipped");
        for _ in 0..2 {
            let e = ifindex("lo").unwrap_err();
            assert_eq!(e.call, "if_nametoindex");
            assert_eq!(e.what, "lo");
            assert_eq!(e.errno(), Some(libc::ENOMEM));
        }
        assert!(ifindex("lo").is_ok(), "the plan is spent");
    }

    #[test]
    fn a_fault_stops_the_call_before_the_kernel_and_names_it() {
        let _plan = inject("socket(AF_PACKET, SOCK_RAW)", libc::EMFILE, 0, 1);
        // Without root the real call would fail with EPERM: EMFILE proves it never ran.
        let e = PacketSocket::open().expect_err("the planned failure");
        assert_eq!(e.errno(), Some(libc::EMFILE));
        assert!(
            e.to_string().starts_with("socket(AF_PACKET, SOCK_RAW): "),
            "{e}"
        );
    }

    #[test]
    fn other_calls_and_a_dropped_plan_are_untouched() {
        {
            let _plan = inject("setsockopt(PACKET_RX_RING)", libc::ENOMEM, 0, 1);
            assert!(ifindex("lo").is_ok());
        }
        assert_eq!(super::planned("setsockopt(PACKET_RX_RING)"), None);
    }
}
