//! What a capture thread has handed on so far, published for the threads downstream: the
//! file writer merges queues by it and the forwarder and sink know when a queue is done.
//! A leaf module, so that those threads need nothing else of the capture thread's.

/// What a capture thread has handed on so far (see the module docs).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Chunks sealed into the capture queue.
    pub sealed: u64,
    /// No packet with a smaller timestamp will come from this queue after the sealed ones
    /// (`u64::MAX` once the thread has finished).
    pub watermark_ns: u64,
}
