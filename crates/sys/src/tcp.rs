//! How much of what was written to a TCP socket its peer has not acknowledged yet.
//!
//! A write to a TCP socket succeeds once the kernel has the bytes; they may still be lost if
//! the peer goes away before acknowledging them (the kernel then drops its send queue).
//! `SIOCOUTQ` says how many written bytes are not yet acknowledged, so a sender that counts
//! its bytes knows which of its messages the peer has received.

use std::os::fd::{AsFd, AsRawFd};

use crate::error::{enter, Result};
use crate::SysError;

/// Bytes written to `socket` (a connected TCP socket) that its peer has not acknowledged:
/// unsent or sent and unacknowledged (`SIOCOUTQ`).
pub fn unacknowledged(socket: &impl AsFd) -> Result<u64> {
    let fd = socket.as_fd().as_raw_fd();
    enter("ioctl", || "SIOCOUTQ".into())?;
    let mut queued: libc::c_int = 0;
    // SAFETY: `fd` is an open socket borrowed for the call; SIOCOUTQ (TIOCOUTQ's value) writes
    // one int through the pointer, which points at a live local int.
    let rc = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut queued as *mut libc::c_int) };
    if rc < 0 {
        return Err(SysError {
            call: "ioctl",
            what: "SIOCOUTQ".into(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(u64::try_from(queued).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn bytes_are_unacknowledged_until_the_peer_has_them() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.write_all(&[7u8; 1000]).unwrap();
        let mut got = [0u8; 1000];
        server.read_exact(&mut got).unwrap();
        // Loopback acknowledges on receipt; the ack may trail the read by a moment.
        let mut left = unacknowledged(&client).unwrap();
        for _ in 0..100 {
            if left == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            left = unacknowledged(&client).unwrap();
        }
        assert_eq!(left, 0);
        let e = unacknowledged(&listener).unwrap_err();
        assert_eq!(e.call, "ioctl", "a listening socket has no send queue: {e}");
    }
}
