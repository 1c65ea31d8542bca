//! Waiting for a capture socket to become readable, and what else `poll` can say.
//!
//! Besides "readable", `poll` reports a pending socket error with `POLLERR`, and keeps
//! reporting it until the error is read: a loop that only looks at `POLLIN` then spins.
//! On Linux a packet socket gets `ENETDOWN` when its interface goes down or is deleted
//! (net/packet/af_packet.c `packet_notifier`: `sk->sk_err = ENETDOWN`), and an AF_XDP socket
//! when its device is unregistered (net/xdp/xsk.c `xsk_notifier`). As libpcap does
//! (pcap-linux.c `pcap_wait_for_frames_mmap`), reading `SO_ERROR` clears it; a packet socket
//! then receives again by itself once the interface is back up (`NETDEV_UP` re-registers
//! its hook), so `ENETDOWN` is a state to report, not a failure.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::error::{Result, SysError};
use crate::sockopt;

/// What a wait found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// Something to read.
    Readable,
    /// Nothing before the timeout (or a signal).
    Idle,
    /// The interface went down or away (`ENETDOWN`, now cleared).
    LinkDown,
}

/// Waits up to `timeout_ms` for `fd` to become readable. A pending socket error is read
/// (and so cleared): `ENETDOWN` gives [`Readiness::LinkDown`], any other is returned as the
/// error of `call`.
pub fn wait_readable(fd: BorrowedFd<'_>, timeout_ms: i32, call: &'static str) -> Result<Readiness> {
    crate::error::enter(call, String::new)?;
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid pollfd, and 1 is the array length.
    let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    if rc < 0 {
        let e = SysError::last(call, "");
        if e.source.kind() == io::ErrorKind::Interrupted {
            return Ok(Readiness::Idle);
        }
        return Err(e);
    }
    if pfd.revents & libc::POLLNVAL != 0 {
        return Err(SysError {
            call,
            what: "POLLNVAL".into(),
            source: io::Error::from_raw_os_error(libc::EBADF),
        });
    }
    if pfd.revents & libc::POLLERR != 0 {
        let err: libc::c_int =
            sockopt::get(fd, libc::SOL_SOCKET, libc::SO_ERROR, "getsockopt(SO_ERROR)")?;
        return match err {
            0 => Ok(Readiness::Idle),
            libc::ENETDOWN => Ok(Readiness::LinkDown),
            e => Err(SysError {
                call,
                what: "socket error".into(),
                source: io::Error::from_raw_os_error(e),
            }),
        };
    }
    Ok(if pfd.revents & libc::POLLIN != 0 {
        Readiness::Readable
    } else {
        Readiness::Idle
    })
}
