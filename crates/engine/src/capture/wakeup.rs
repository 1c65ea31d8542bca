//! How the supervisor sleeps: until something needs it, not on a short fixed tick.
//!
//! A capture running for hours on a quiet link should cost nothing while nothing happens
//! (tcpdump sleeps in `poll` until a block is due). The supervisor used to wake every 50 ms to
//! see a stop, the end of a capture thread or a due status line; on these machines each
//! wakeup costs some 50 µs of CPU, 1 ms a second for nothing. Now it waits on a socket pair
//! that the events which end a capture write to (a stop signal, through signal-hook's pipe
//! registration; a capture thread that ends, e.g. its source ran out or `-c` is spent), and
//! wakes by itself only when a look is due (the link, a status line, `--duration`). Ringing
//! is a non-blocking one-byte send: safe in a signal handler and never a stall; a full
//! socket already holds a wakeup. (Not a [`Doorbell`](super::doorbell::Doorbell), which the
//! workers and the writer wait on: a signal handler cannot unpark a thread.)

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use poolcap_sys::poll::wait_readable;

/// See the module docs.
#[derive(Debug)]
pub struct Wakeup {
    rx: UnixStream,
    tx: UnixStream,
}

impl Wakeup {
    /// A new wakeup, not rung.
    pub fn new() -> io::Result<Self> {
        let (rx, tx) = UnixStream::pair()?;
        rx.set_nonblocking(true)?;
        tx.set_nonblocking(true)?;
        Ok(Self { rx, tx })
    }

    /// Wakes the waiter, or makes its next wait return at once.
    pub fn ring(&self) {
        // WouldBlock: the socket is full of wakeups already.
        let _ = (&self.tx).write(&[1]);
    }

    /// Waits for a ring, at most `timeout`; forgets every ring so far.
    pub fn wait(&self, timeout: Duration) {
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        // An error here (none is expected on a socket pair) only ends the wait early.
        let _ = wait_readable(self.rx.as_fd(), ms, "poll(wakeup)");
        let mut drain = [0u8; 64];
        while matches!((&self.rx).read(&mut drain), Ok(n) if n > 0) {}
    }

    /// An end to ring from elsewhere (a signal handler: see `signal_hook::low_level::pipe`).
    pub fn ringer(&self) -> io::Result<UnixStream> {
        self.tx.try_clone()
    }
}

/// The stop flag as the engine's own threads raise it (`-c` reached by the writer, `-W`'s
/// files done): raised, then rung, so the supervisor ends the capture at once.
#[derive(Debug, Clone)]
pub struct Stopper {
    flag: Arc<AtomicBool>,
    wakeup: Arc<Wakeup>,
}

impl Stopper {
    /// A stopper that raises `flag` and rings `wakeup`.
    pub fn new(flag: Arc<AtomicBool>, wakeup: Arc<Wakeup>) -> Self {
        Self { flag, wakeup }
    }

    /// Stops the capture.
    pub fn stop(&self) {
        self.flag.store(true, Ordering::Relaxed);
        self.wakeup.ring();
    }

    /// Wakes the supervisor without stopping (a write error to report).
    pub fn wake(&self) {
        self.wakeup.ring();
    }

    /// A stopper of a flag nobody supervises (tests).
    #[cfg(test)]
    pub fn unsupervised() -> Self {
        Self::new(Arc::default(), Arc::new(Wakeup::new().unwrap()))
    }

    /// Whether the stop was raised (tests).
    #[cfg(test)]
    pub fn raised(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_ring_before_or_during_the_wait_ends_it_at_once() {
        let w = Wakeup::new().unwrap();
        w.ring();
        w.ring();
        let t = Instant::now();
        w.wait(Duration::from_secs(10));
        assert!(t.elapsed() < Duration::from_secs(5));
        // Both rings were forgotten: the next wait runs its time out.
        let t = Instant::now();
        w.wait(Duration::from_millis(30));
        assert!(
            t.elapsed() >= Duration::from_millis(25),
            "{:?}",
            t.elapsed()
        );
        let w = std::sync::Arc::new(w);
        let ringer = std::sync::Arc::clone(&w);
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            ringer.ring();
        });
        let t = Instant::now();
        w.wait(Duration::from_secs(10));
        assert!(t.elapsed() < Duration::from_secs(5));
        h.join().unwrap();
    }

    #[test]
    fn the_ringer_rings_it_and_a_full_socket_does_not_block() {
        let w = Wakeup::new().unwrap();
        let mut r = w.ringer().unwrap();
        assert_eq!(r.write(&[1]).unwrap(), 1);
        for _ in 0..1_000_000 {
            w.ring(); // the socket fills; ringing goes on without blocking
        }
        let t = Instant::now();
        w.wait(Duration::from_secs(10));
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
