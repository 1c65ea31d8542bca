//! The transmit side of forwarding: frames that already sit in memory the caller owns (a
//! pool chunk) go out of an interface with one `sendmmsg` per batch, each message's iovec
//! pointing at the frame where it lies. No user-space copy: the kernel copies each frame
//! once into its socket buffer, as it must for any AF_PACKET send outside a TX ring.
//!
//! Why not the generator's [`crate::socket::TxBatch`]: it owns an arena the caller writes
//! frames into, which for forwarding would be a second copy of every frame. Why not a
//! PACKET_TX_RING: frames would have to be copied into the ring too, and the ring's slots
//! must be handed back in order, which ties the sink to the kernel's pace.
//!
//! The socket is bound with protocol 0, so it sends on the interface but receives nothing
//! (a socket bound to ETH_P_ALL would also get a copy of every frame on the link, including
//! the ones it sends). Frames go through the qdisc layer: there the transmit queue follows
//! the flow hash, so one flow keeps one queue (and its order), whereas PACKET_QDISC_BYPASS
//! picks the queue of the sending CPU, which changes when the thread migrates.

use std::io;
use std::os::fd::AsFd;

use crate::error::Result;
use crate::socket::{send_frames, PacketSocket};
use crate::sockopt;

/// Most frames handed to the kernel in one `sendmmsg` (the kernel's UIO_MAXIOV cap).
pub const MAX_BATCH: usize = 1024;

/// An AF_PACKET socket that sends frames from the caller's memory.
#[derive(Debug)]
pub struct FrameSender {
    sock: PacketSocket,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

// SAFETY: `iovs` and `msgs` hold pointers only during `send` (they are cleared before it
// returns), so a FrameSender carries no pointer into anyone's memory between calls.
unsafe impl Send for FrameSender {}

impl FrameSender {
    /// Opens a send-only packet socket on `ifindex` with a send buffer of `sndbuf` bytes.
    pub fn open(ifindex: u32, sndbuf: usize) -> Result<Self> {
        let sock = PacketSocket::open()?;
        sock.set_send_buffer(sndbuf)?;
        let mut sll: libc::sockaddr_ll = sockopt::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = 0;
        sll.sll_ifindex = ifindex as i32;
        sockopt::bind(
            sock.as_fd(),
            &sll,
            "bind(AF_PACKET, send only)",
            format!("ifindex {ifindex}"),
        )?;
        Ok(Self {
            sock,
            iovs: Vec::with_capacity(MAX_BATCH),
            msgs: Vec::with_capacity(MAX_BATCH),
        })
    }

    /// Sends up to [`MAX_BATCH`] of `frames`, in order, with one `sendmmsg` call. Returns how
    /// many the kernel took (a prefix); `Err` only when it took none (the error is that of
    /// the first frame).
    pub fn send(&mut self, frames: &[&[u8]]) -> io::Result<usize> {
        let frames = &frames[..frames.len().min(MAX_BATCH)];
        if frames.is_empty() {
            return Ok(0);
        }
        self.iovs.clear();
        self.iovs.extend(frames.iter().map(|f| libc::iovec {
            iov_base: f.as_ptr().cast_mut().cast(),
            iov_len: f.len(),
        }));
        // Each iovec points at a frame borrowed for this call.
        let result = send_frames(self.sock.as_fd(), &mut self.iovs, &mut self.msgs);
        self.iovs.clear();
        result
    }
}

/// True when a send error means the interface cannot send at all right now (down, gone, or
/// no carrier), rather than a full queue.
pub fn is_link_down(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENETDOWN) | Some(libc::ENXIO) | Some(libc::ENODEV)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::inject;
    use crate::socket::ifindex;

    /// A refused `sendmmsg` reaches the forwarder as the kernel's error (so `is_link_down`
    /// and the transient checks see it), and the next batch goes out again.
    #[test]
    fn a_refused_send_carries_its_errno_and_the_next_batch_goes_out() {
        if !crate::process::is_root() {
            eprintln!("skipped: AF_PACKET sockets need root (CI runs the suite as root)");
            return;
        }
        let mut tx = FrameSender::open(ifindex("lo").unwrap(), 1 << 20).unwrap();
        let frame = [0u8; 60];
        let frames: Vec<&[u8]> = vec![&frame; 3];
        let plan = inject("sendmmsg", libc::ENETDOWN, 0, 1);
        let e = tx.send(&frames).unwrap_err();
        assert!(is_link_down(&e), "{e}");
        drop(plan);
        assert_eq!(tx.send(&frames).unwrap(), 3);
    }
}
