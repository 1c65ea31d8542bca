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
// SAFETY: a shared `&Mmap` hands out only the base pointer and the length; whoever reads or
// writes through that pointer follows the ring protocol, which gives each block one owner.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Maps `len` bytes of `fd` read-write and shared, pre-faulting the pages.
    pub fn shared(fd: BorrowedFd<'_>, len: usize) -> Result<Self> {
        Self::map(Some(fd), len, 0, "mmap")
    }

    /// Maps `len` bytes of `fd` at `offset` (a kernel-defined page offset, as the AF_XDP
    /// rings use) read-write and shared, pre-faulting the pages.
    pub fn shared_at(fd: BorrowedFd<'_>, len: usize, offset: u64) -> Result<Self> {
        Self::map(Some(fd), len, offset, "mmap(ring)")
    }

    /// Maps `len` bytes of fresh zeroed memory, private to this process, pre-faulted.
    pub fn anonymous(len: usize) -> Result<Self> {
        Self::map(None, len, 0, "mmap(anonymous)")
    }

    fn map(
        fd: Option<BorrowedFd<'_>>,
        len: usize,
        offset: u64,
        call: &'static str,
    ) -> Result<Self> {
        let (flags, raw) = match fd {
            Some(fd) => (libc::MAP_SHARED | libc::MAP_POPULATE, fd.as_raw_fd()),
            None => (
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
            ),
        };
        let off = libc::off_t::try_from(offset).map_err(|_| SysError {
            call,
            what: format!("offset {offset:#x}"),
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        })?;
        crate::error::enter(call, || format!("{len} bytes"))?;
        // SAFETY: a fresh mapping at an address the kernel picks cannot alias any Rust
        // object; the arguments are plain integers and, if any, a valid descriptor.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                raw,
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(SysError::last(call, format!("{len} bytes")));
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(|| SysError {
            call,
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
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: base/len describe exactly the mapping created in `shared`, and no view
        // into it outlives `self` (views borrow the owning ring, held blocks own a share of
        // the mapping).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}
