//! The engine's threads and their ordered stop, in one place, so that a capture that ends
//! normally ([`super::Engine::run`]) and a start-up that fails half way (a spawn refused
//! after some capture threads already run) stop the same way: capture threads first (they
//! drain their sources up to the stop's cut), then workers, then the sink (the writer or
//! the forwarder). Nothing is left running and every source and pool is released when
//! [`Threads::stop_and_join`] returns.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use poolcap_sys::SysError;

use super::doorbell::Doorbell;
use super::error::CaptureError;
use super::queue::CaptureEnd;
use super::wakeup::{Stopper, Wakeup};
use super::writer::WriterOutcome;

/// The running threads and the signals that stop them.
pub(super) struct Threads {
    pub(super) captures: Vec<JoinHandle<CaptureEnd>>,
    pub(super) workers: Vec<JoinHandle<()>>,
    /// The sink's thread and its name.
    pub(super) sink: Option<(&'static str, JoinHandle<Option<WriterOutcome>>)>,
    /// The one capture thread runs the file writer itself (no sink thread).
    pub(super) inline_writer: bool,
    pub(super) stop: Arc<AtomicBool>,
    /// Rung by each capture thread that ends ([`Ending`]).
    wakeup: Arc<Wakeup>,
    /// Raised by a capture thread that ends with an error or a panic ([`Ending`]).
    capture_failed: Arc<AtomicBool>,
    /// Capture threads that ended, counted as they end ([`Ending`]).
    captures_ended: Arc<AtomicUsize>,
    pub(super) captures_done: Arc<AtomicBool>,
    pub(super) workers_done: Arc<AtomicBool>,
    pub(super) worker_bells: Vec<Arc<Doorbell>>,
    pub(super) sink_bell: Arc<Doorbell>,
}

/// What the stopped threads left: the first failure of a capture thread (or its source) and
/// what the sink wrote (`Err`: the named thread that wrote panicked: the sink, or the
/// capture thread running it).
pub(super) struct Joined {
    pub(super) failure: Option<CaptureError>,
    pub(super) written: Option<Result<WriterOutcome, &'static str>>,
}

impl Threads {
    /// No threads yet; `stop` and the bells are those the threads will be given.
    pub(super) fn new(
        stop: Arc<AtomicBool>,
        wakeup: Arc<Wakeup>,
        worker_bells: Vec<Arc<Doorbell>>,
        sink_bell: Arc<Doorbell>,
    ) -> Self {
        Self {
            captures: Vec::new(),
            workers: Vec::new(),
            sink: None,
            inline_writer: false,
            stop,
            wakeup,
            capture_failed: Arc::default(),
            captures_ended: Arc::default(),
            captures_done: Arc::default(),
            workers_done: Arc::default(),
            worker_bells,
            sink_bell,
        }
    }

    /// True once a capture thread failed (the others are drained), or every one ended
    /// (their sources ran out: files, the in-memory source). One source running out does
    /// not end the others: they read theirs to the end.
    pub(super) fn capture_over(&self) -> bool {
        self.capture_failed.load(Ordering::Acquire)
            || self.captures_ended.load(Ordering::Acquire) == self.captures.len()
    }

    /// How the engine's own threads stop the capture.
    pub(super) fn stopper(&self) -> Stopper {
        Stopper::new(Arc::clone(&self.stop), Arc::clone(&self.wakeup))
    }

    /// The guard a new capture thread holds until it ends.
    pub(super) fn ending(&self) -> Ending {
        Ending {
            failed: Arc::clone(&self.capture_failed),
            ended: Arc::clone(&self.captures_ended),
            wakeup: Arc::clone(&self.wakeup),
            clean: false,
        }
    }

    /// Stops every thread in pipeline order and joins it.
    pub(super) fn stop_and_join(self) -> Joined {
        self.stop.store(true, Ordering::Relaxed);
        let (mut failure, mut inline_written) = (None, None);
        for (queue, h) in self.captures.into_iter().enumerate() {
            let e = match h.join() {
                Ok(CaptureEnd { result, written }) => {
                    inline_written = inline_written.or(written);
                    match result {
                        Ok(()) => continue,
                        Err(e) => e,
                    }
                }
                Err(_) => CaptureError::Thread {
                    queue,
                    source: SysError {
                        call: "capture thread",
                        what: "panicked".into(),
                        source: std::io::Error::other("panic"),
                    },
                },
            };
            failure = failure.or(Some(e));
        }
        // Release pairs with the workers' Acquire: every chunk the capture threads sealed
        // is in a queue before a worker sees `captures_done`.
        self.captures_done.store(true, Ordering::Release);
        self.worker_bells.iter().for_each(|b| b.ring());
        for h in self.workers {
            let _ = h.join();
        }
        self.workers_done.store(true, Ordering::Release);
        self.sink_bell.ring();
        let written = self
            .sink
            .and_then(|(name, h)| h.join().map_err(|_| name).transpose())
            .or(inline_written.map(Ok))
            .or(self.inline_writer.then_some(Err("capture")));
        Joined { failure, written }
    }
}

/// Spawns the thread `name` running `f`; `what` names it in the error.
pub(super) fn spawn<T: Send + 'static>(
    name: String,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<JoinHandle<T>, SysError> {
    let err = |source| SysError {
        call: "spawn",
        what: what.into(),
        source,
    };
    #[cfg(test)]
    let f = {
        failpoint::check().map_err(err)?;
        let alive = failpoint::alive();
        move || {
            let _alive = alive;
            f()
        }
    };
    std::thread::Builder::new().name(name).spawn(f).map_err(err)
}

/// Test hook: makes the Nth spawn of the calling thread fail, and tracks whether the threads
/// it spawned have ended (each holds a clone of one token while it runs). Per calling
/// thread, so tests running in parallel do not see each other's spawns.
/// Says that the capture thread holding it ended, when dropped: raises the failure flag
/// unless the end was clean (an error or a panic, which unwinds through it, ends the
/// capture), counts the thread as ended and wakes the supervisor.
pub(super) struct Ending {
    failed: Arc<AtomicBool>,
    ended: Arc<AtomicUsize>,
    wakeup: Arc<Wakeup>,
    clean: bool,
}

impl Ending {
    /// Records how the thread ended (`clean`: without an error).
    pub(super) fn ended(mut self, clean: bool) {
        self.clean = clean;
    }
}

impl Drop for Ending {
    fn drop(&mut self) {
        if !self.clean {
            self.failed.store(true, Ordering::Release);
        }
        self.ended.fetch_add(1, Ordering::AcqRel);
        self.wakeup.ring();
    }
}

#[cfg(test)]
pub(crate) mod failpoint {
    use std::cell::{Cell, RefCell};
    use std::sync::Arc;

    thread_local! {
        static FAIL_AT: Cell<Option<usize>> = const { Cell::new(None) };
        static SPAWNED: Cell<usize> = const { Cell::new(0) };
        static ALIVE: RefCell<Arc<()>> = RefCell::new(Arc::new(()));
    }

    /// From now on, spawn number `n` (counting from 0) fails; `None`: none fails.
    pub(in crate::capture) fn fail_at(n: Option<usize>) {
        FAIL_AT.set(n);
        SPAWNED.set(0);
    }

    /// Spawns attempted since [`fail_at`].
    pub(in crate::capture) fn spawned() -> usize {
        SPAWNED.get()
    }

    /// Threads spawned from this thread that are still running.
    pub(in crate::capture) fn running() -> usize {
        ALIVE.with_borrow(|a| Arc::strong_count(a) - 1)
    }

    pub(super) fn check() -> std::io::Result<()> {
        let n = SPAWNED.get();
        SPAWNED.set(n + 1);
        if FAIL_AT.get() == Some(n) {
            return Err(std::io::Error::other("injected spawn failure"));
        }
        Ok(())
    }

    pub(super) fn alive() -> Arc<()> {
        ALIVE.with_borrow(Arc::clone)
    }
}
