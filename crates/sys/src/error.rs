//! The error every wrapper returns: which call failed, on what, and the OS error.

use std::fmt;
use std::io;

/// A failed system call, with the name of the call and what it was applied to.
#[derive(Debug)]
pub struct SysError {
    /// The system call or socket option, e.g. `setsockopt(PACKET_RX_RING)`.
    pub call: &'static str,
    /// What the call was about: an interface name, a size, or empty.
    pub what: String,
    /// The error the kernel returned.
    pub source: io::Error,
}

impl SysError {
    /// Captures `errno` right after a failed call.
    pub fn last(call: &'static str, what: impl Into<String>) -> Self {
        Self {
            call,
            what: what.into(),
            source: io::Error::last_os_error(),
        }
    }

    /// The raw OS error number, if any.
    pub fn errno(&self) -> Option<i32> {
        self.source.raw_os_error()
    }
}

impl fmt::Display for SysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.what.is_empty() {
            write!(f, "{}: {}", self.call, self.source)
        } else {
            write!(f, "{} ({}): {}", self.call, self.what, self.source)
        }
    }
}

impl std::error::Error for SysError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The chokepoint every wrapper passes right before its system call: where a test's fake
/// ([`crate::fault`], feature `fault`) makes the call named `call` fail instead of reaching
/// the kernel. `what` is built only then.
#[inline]
pub(crate) fn enter(call: &'static str, what: impl FnOnce() -> String) -> Result<()> {
    match crate::fault::planned(call) {
        None => Ok(()),
        Some(errno) => Err(SysError {
            call,
            what: what(),
            source: io::Error::from_raw_os_error(errno),
        }),
    }
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, SysError>;
