//! How a capture thread waits when the kernel has nothing for it: the choice Braun et al.
//! measured (one `poll()` per packet against batching and adaptive waiting).

/// How the capture thread waits when the kernel has nothing for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum WaitStrategy {
    /// Block in `poll()` until a block is retired.
    Poll,
    /// Spin on the block status word: no syscalls, one busy core per queue.
    Busy,
    /// Spin briefly, then sleep for a period that doubles while idle (up to the block
    /// timeout) and resets when packets come: few syscalls at high rates, little CPU at low.
    Adaptive,
}
