//! A shared memory mapping of a file descriptor, unmapped on drop.
//!
//! Used for the TPACKET_V3 ring, which the kernel and poolcap share. The mapping only hands
//! out a base pointer; the ring module decides which parts may be read when.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use crate::error::{Result, SysError};

/// An `mmap(MAP_SHARED)` region, `munmap`ped when dropped.
#[derive(Debug)]
pub struct Mmap {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; access to its contents is
// synchronised by the ring protocol (see rx_ring), not by the mapping itself.
unsafe impl Send for Mmap {}

impl Mmap {
    /// Maps `len` bytes of `fd` read-write and shared, pre-faulting the pages.
    pub fn shared(fd: BorrowedFd<'_>, len: usize) -> Result<Self> {
        // SAFETY: a fresh mapping at an address the kernel picks cannot alias any Rust
        // object; the arguments are plain integers and a valid descriptor.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(SysError::last("mmap", format!("{len} bytes")));
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(|| SysError {
            call: "mmap",
            what: "null mapping".into(),
            source: std::io::Error::from(std::io::ErrorKind::Other),
        })?;
        Ok(Self { base, len })
    }

    /// The first byte of the mapping.
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// The mapping's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty mapping (never produced by [`Mmap::shared`]).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: base/len describe exactly the mapping created in `shared`, and no view
        // into it outlives `self` (views borrow the owning ring).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}
