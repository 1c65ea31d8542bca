//! A doorbell: how a producer wakes the thread that consumes its chunks. The consumer parks
//! when it has nothing to do; a producer rings after handing over a chunk. Ringing is an
//! atomic swap, plus one futex wake only when the consumer is parked, so it costs nothing per
//! packet and little per chunk, while an idle consumer sleeps instead of polling.

use std::sync::OnceLock;
use std::thread::Thread;
use std::time::Duration;

/// See the module docs.
#[derive(Debug, Default)]
pub struct Doorbell {
    consumer: OnceLock<Thread>,
}

impl Doorbell {
    /// Called by the consumer thread once, before it first waits.
    pub fn answer_from_this_thread(&self) {
        let _ = self.consumer.set(std::thread::current());
    }

    /// Wakes the consumer (or makes its next wait return at once).
    #[inline]
    pub fn ring(&self) {
        if let Some(t) = self.consumer.get() {
            t.unpark();
        }
    }

    /// For the consumer: waits for a ring, at most `timeout`.
    pub fn wait(&self, timeout: Duration) {
        std::thread::park_timeout(timeout);
    }
}
