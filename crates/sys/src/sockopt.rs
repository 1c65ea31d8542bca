//! The socket calls AF_PACKET and AF_XDP share, typed once: set and get an option whose
//! value is a plain C struct, bind to a plain C address.

use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::error::{Result, SysError};

/// Plain C data the kernel reads or writes as bytes: no pointers it would follow into Rust
/// objects that may move, no padding it cares about, and all-zero is a valid value.
///
/// # Safety
/// Implement only for `#[repr(C)]` structs and integers from the kernel's UAPI.
pub unsafe trait Plain: Sized {}

// SAFETY: all of these are integers or `#[repr(C)]` UAPI structs of integers (and
// sock_fprog, whose pointer the kernel only reads during the call).
unsafe impl Plain for libc::c_int {}
// SAFETY: as above.
unsafe impl Plain for u32 {}
// SAFETY: as above.
unsafe impl Plain for libc::tpacket_req3 {}
// SAFETY: as above.
unsafe impl Plain for libc::tpacket_stats_v3 {}
// SAFETY: as above.
unsafe impl Plain for libc::sock_fprog {}
// SAFETY: as above.
unsafe impl Plain for libc::sockaddr_ll {}
// SAFETY: as above.
unsafe impl Plain for libc::packet_mreq {}
// SAFETY: as above.
unsafe impl Plain for libc::sockaddr_xdp {}
// SAFETY: as above.
unsafe impl Plain for libc::xdp_umem_reg {}
// SAFETY: as above.
unsafe impl Plain for libc::xdp_mmap_offsets {}
// SAFETY: as above.
unsafe impl Plain for libc::xdp_statistics {}

/// `setsockopt(fd, level, opt, &val, sizeof val)`.
pub fn set<T: Plain>(
    fd: BorrowedFd<'_>,
    level: i32,
    opt: i32,
    val: &T,
    call: &'static str,
) -> Result<()> {
    crate::error::enter(call, String::new)?;
    // SAFETY: `val` points to a live, initialised T (Plain) and its exact size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (val as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(SysError::last(call, ""));
    }
    Ok(())
}

/// `getsockopt(fd, level, opt)` into a fresh T.
pub fn get<T: Plain>(fd: BorrowedFd<'_>, level: i32, opt: i32, call: &'static str) -> Result<T> {
    crate::error::enter(call, String::new)?;
    // SAFETY: T is Plain, so all-zero is a valid value.
    let mut v: T = unsafe { std::mem::zeroed() };
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is writable and `len` holds its size; the kernel writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (&mut v as *mut T).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(SysError::last(call, ""));
    }
    Ok(v)
}

/// `bind(fd, &addr, sizeof addr)`.
pub fn bind<T: Plain>(
    fd: BorrowedFd<'_>,
    addr: &T,
    call: &'static str,
    what: String,
) -> Result<()> {
    crate::error::enter(call, || what.clone())?;
    // SAFETY: `addr` is a live socket address struct (Plain) and its exact size is passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (addr as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(SysError::last(call, what));
    }
    Ok(())
}

/// A zeroed value of a Plain type (a socket address or option to fill in).
pub fn zeroed<T: Plain>() -> T {
    // SAFETY: T is Plain, so all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}
