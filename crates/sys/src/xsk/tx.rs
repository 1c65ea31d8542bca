//! Transmitting received frames from the UMEM they arrived in: a second AF_XDP socket,
//! bound to a queue of another interface with `XDP_SHARED_UMEM`, whose TX ring takes the
//! frames' UMEM addresses as they are, and whose completion ring gives each address back
//! once the kernel is done reading the frame.
//!
//! Why a second socket: an AF_XDP socket is bound to one (device, queue), and forwarding
//! receives on IN and sends on OUT. With `XDP_SHARED_UMEM` the OUT socket uses the IN
//! socket's UMEM, so a frame needs no copy in user space between the two. Since Linux 5.10
//! a socket sharing a UMEM with a socket of another (device, queue) brings its own fill
//! and completion rings, set on the new socket before `bind` (Documentation/networking/
//! af_xdp.rst, "XDP_SHARED_UMEM bind flag"; libxdp's `xsk_socket__create_shared` takes
//! both rings for the same reason). The fill ring here stays empty and unmapped: nothing
//! is redirected to this socket, it only sends. A shared socket may not pass its own mode
//! flags: it inherits copy or zero-copy and need-wakeup from the UMEM's owner, so what
//! actually runs is read back with `XDP_OPTIONS`.
//!
//! Ownership: the caller keeps each frame's [`RxFrame`] token while the frame is on the TX
//! ring; [`XskTx::reap`] returns the addresses the kernel has completed, and only then may
//! the frame go back to the fill ring. In copy mode (veth, or any driver without AF_XDP
//! zero-copy) the kernel copies each frame once into an skb at `sendto` and completes it
//! when the skb is freed; in zero-copy mode the driver sends from the UMEM itself.
//!
//! Ring protocol (the same as the RX side, roles by ring): we produce the TX ring (write
//! descriptors, then store `producer` with `Release`; load the kernel's `consumer` with
//! `Acquire` before reusing slots) and consume the completion ring (load `producer` with
//! `Acquire` before reading addresses, store `consumer` with `Release` after). Labels
//! (A)–(D) are those of the table at the top of
//! <https://github.com/torvalds/linux/blob/v6.6/net/xdp/xsk_queue.h>.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{getsockopt, map_ring, setsockopt, Ring, RxFrame, Umem, Xsk};
use crate::error::{Result, SysError};
use crate::sockopt;

/// What another socket needs to share an [`Xsk`]'s UMEM: the owner's descriptor (a
/// duplicate, only read by the kernel at `bind`) and the UMEM.
#[derive(Debug)]
pub struct UmemShare {
    owner: OwnedFd,
    umem: Arc<Umem>,
}

impl Xsk {
    /// A handle through which a transmit socket on another interface can use this socket's
    /// UMEM (see [`XskTx::bind_shared`]).
    pub fn share(&self) -> Result<UmemShare> {
        let owner = self.fd.try_clone().map_err(|source| SysError {
            call: "fcntl(F_DUPFD_CLOEXEC)",
            what: "AF_XDP socket".into(),
            source,
        })?;
        Ok(UmemShare {
            owner,
            umem: Arc::clone(&self.umem),
        })
    }
}

/// A send-only AF_XDP socket using another socket's UMEM.
pub struct XskTx {
    fd: OwnedFd,
    umem: Arc<Umem>,
    tx: Ring<libc::xdp_desc>,
    completion: Ring<u64>,
    zero_copy: bool,
}

impl std::fmt::Debug for XskTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XskTx")
            .field("zero_copy", &self.zero_copy)
            .finish()
    }
}

/// Fill ring entries of a transmit socket: required for the bind, never used.
const IDLE_FILL: u32 = 64;

impl XskTx {
    /// Binds a transmit socket to queue `queue_id` of `ifindex`, sharing `share`'s UMEM, with
    /// TX and completion rings of `entries` (rounded up to a power of two).
    pub fn bind_shared(
        share: &UmemShare,
        ifindex: u32,
        queue_id: u32,
        entries: u32,
    ) -> Result<Self> {
        let entries = entries.next_power_of_two().max(64);
        let fd = super::open_socket()?;
        // Its own fill and completion rings, for its own (device, queue), before the bind.
        setsockopt(
            &fd,
            libc::XDP_UMEM_FILL_RING,
            &IDLE_FILL,
            "setsockopt(XDP_UMEM_FILL_RING)",
        )?;
        setsockopt(
            &fd,
            libc::XDP_UMEM_COMPLETION_RING,
            &entries,
            "setsockopt(XDP_UMEM_COMPLETION_RING)",
        )?;
        setsockopt(&fd, libc::XDP_TX_RING, &entries, "setsockopt(XDP_TX_RING)")?;
        let off: libc::xdp_mmap_offsets =
            getsockopt(&fd, libc::XDP_MMAP_OFFSETS, "getsockopt(XDP_MMAP_OFFSETS)")?;
        let tx = map_ring::<libc::xdp_desc>(&fd, &off.tx, entries, libc::XDP_PGOFF_TX_RING as u64)?;
        let completion =
            map_ring::<u64>(&fd, &off.cr, entries, libc::XDP_UMEM_PGOFF_COMPLETION_RING)?;
        let mut sa: libc::sockaddr_xdp = sockopt::zeroed();
        sa.sxdp_family = libc::AF_XDP as u16;
        sa.sxdp_flags = libc::XDP_SHARED_UMEM;
        sa.sxdp_ifindex = ifindex;
        sa.sxdp_queue_id = queue_id;
        sa.sxdp_shared_umem_fd = share.owner.as_raw_fd() as u32;
        sockopt::bind(
            fd.as_fd(),
            &sa,
            "bind(AF_XDP, XDP_SHARED_UMEM)",
            format!("ifindex {ifindex} queue {queue_id}"),
        )?;
        let opts: u32 = getsockopt(&fd, libc::XDP_OPTIONS, "getsockopt(XDP_OPTIONS)")?;
        Ok(Self {
            fd,
            umem: Arc::clone(&share.umem),
            tx,
            completion,
            zero_copy: opts & libc::XDP_OPTIONS_ZEROCOPY != 0,
        })
    }

    /// True if the kernel sends from the UMEM itself (zero-copy), false if it copies each
    /// frame into an skb (copy mode).
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Bytes per UMEM frame (frame `i` starts at `i * frame_size`).
    pub fn frame_size(&self) -> u32 {
        self.umem.frame_size
    }

    /// Puts as many of `frames` (in order) on the TX ring as it has room for; returns how
    /// many. Each frame goes out as it was received (its address and length). The caller
    /// keeps the tokens until [`XskTx::reap`] returns their addresses.
    pub fn transmit(&mut self, frames: &[&RxFrame]) -> usize {
        let r = &mut self.tx;
        let size = r.size();
        let mut free = size - r.local.wrapping_sub(r.cached);
        if (free as usize) < frames.len() {
            // (A): pairs with the kernel's release store of the TX consumer (D),
            // `smp_store_release` in `__xskq_cons_release`
            // (https://github.com/torvalds/linux/blob/v6.6/net/xdp/xsk_queue.h): it has read the
            // descriptors of the slots we overwrite next.
            r.cached = r.index(r.consumer).load(Ordering::Acquire);
            free = size - r.local.wrapping_sub(r.cached);
        }
        let n = (free as usize).min(frames.len());
        for (i, f) in frames[..n].iter().enumerate() {
            assert_eq!(
                f.umem, self.umem.id,
                "RxFrame sent through a socket of another UMEM"
            );
            let desc = libc::xdp_desc {
                addr: f.addr,
                len: f.len,
                options: 0,
            };
            // SAFETY: the slot is free: the kernel consumed it (consumer loaded with Acquire
            // above).
            unsafe { r.write(r.local.wrapping_add(i as u32), desc) };
        }
        if n > 0 {
            r.local = r.local.wrapping_add(n as u32);
            // (B): the descriptors are written before the kernel sees them; pairs with its
            // `smp_load_acquire` of the TX producer (C) in `__xskq_cons_peek`
            // (https://github.com/torvalds/linux/blob/v6.6/net/xdp/xsk_queue.h).
            r.index(r.producer).store(r.local, Ordering::Release);
        }
        n
    }

    /// True while descriptors wait on the TX ring for the kernel.
    pub fn tx_pending(&self) -> bool {
        // (A) as in `transmit`: a stale value only costs one more kick.
        self.tx.index(self.tx.consumer).load(Ordering::Acquire) != self.tx.local
    }

    /// Asks the kernel to send what is on the TX ring, if it wants to be asked
    /// (`XDP_USE_NEED_WAKEUP`, inherited from the UMEM's owner; copy mode always asks).
    /// `EAGAIN` means the kernel sent a batch and more remain (copy mode sends a bounded
    /// batch per call); `ENOBUFS` and `EBUSY` that it is short of buffers or the device
    /// queue is full; `ENETDOWN` that the interface is down.
    pub fn kick(&self) -> io::Result<()> {
        // Relaxed: a flag word the kernel writes without ordering (`xsk_set_tx_need_wakeup`
        // in https://github.com/torvalds/linux/blob/v6.6/net/xdp/xsk.c) that guards no data;
        // a stale "no" only delays the send to the next kick, a stale "yes" costs a syscall.
        let flags = self.tx.index(self.tx.flags).load(Ordering::Relaxed);
        if flags & libc::XDP_RING_NEED_WAKEUP == 0 {
            return Ok(());
        }
        // SAFETY: sendto with no buffer and no address only wakes the socket's transmit path;
        // the descriptor is owned by `self`.
        let rc = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Moves the UMEM addresses of the frames the kernel has finished sending into `out`;
    /// returns how many. Their frames may go back to the fill ring.
    pub fn reap(&mut self, out: &mut Vec<u64>) -> usize {
        let r = &mut self.completion;
        // (C): pairs with the kernel's release store of the completion producer (B),
        // `smp_store_release` in `__xskq_prod_submit`
        // (https://github.com/torvalds/linux/blob/v6.6/net/xdp/xsk_queue.h): the addresses up
        // to it are written before we read them.
        r.cached = r.index(r.producer).load(Ordering::Acquire);
        let n = r.cached.wrapping_sub(r.local) as usize;
        for i in 0..n {
            // SAFETY: the kernel published the slot before the producer loaded with Acquire
            // above.
            out.push(unsafe { r.read(r.local.wrapping_add(i as u32)) });
        }
        if n > 0 {
            r.local = r.cached;
            // (D): our reads complete before the kernel reuses the slots; pairs with its
            // load of the completion consumer (A) in `xskq_prod_is_full`
            // (https://github.com/torvalds/linux/blob/v6.6/net/xdp/xsk_queue.h).
            r.index(r.consumer).store(r.local, Ordering::Release);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::super::NEXT_UMEM_ID;
    use super::*;
    use crate::mmap::Mmap;
    use std::marker::PhantomData;
    use std::mem::size_of;

    /// A ring of `entries` slots of `E` in plain memory, indices first.
    fn fake_ring<E>(entries: u32) -> Ring<E> {
        Ring {
            map: Mmap::anonymous(64 + entries as usize * size_of::<E>()).expect("mmap"),
            producer: 0,
            consumer: 4,
            flags: 8,
            desc: 64,
            mask: entries - 1,
            local: 0,
            cached: 0,
            entry: PhantomData,
        }
    }

    /// A transmit socket over fake rings: the test plays the kernel.
    fn fake_tx(entries: u32) -> XskTx {
        let umem = Arc::new(Umem {
            map: Mmap::anonymous(16 * 2048).expect("mmap"),
            frame_size: 2048,
            id: NEXT_UMEM_ID.fetch_add(1, Ordering::Relaxed),
        });
        XskTx {
            fd: std::fs::File::open("/dev/null").expect("fd").into(),
            umem,
            tx: fake_ring(entries),
            completion: fake_ring(entries),
            zero_copy: false,
        }
    }

    /// The kernel's side: takes every descriptor on the TX ring.
    fn kernel_consumes(tx: &XskTx) -> Vec<(u64, u32)> {
        let r = &tx.tx;
        let (from, to) = (
            r.index(r.consumer).load(Ordering::Acquire),
            r.index(r.producer).load(Ordering::Acquire),
        );
        let descs = (from..to)
            .map(|i| {
                // SAFETY: the test's single thread wrote the slot before the producer.
                let d = unsafe { r.read(i) };
                (d.addr, d.len)
            })
            .collect();
        r.index(r.consumer).store(to, Ordering::Release);
        descs
    }

    /// The kernel's side: completes `addrs`.
    fn kernel_completes(tx: &XskTx, addrs: &[u64]) {
        let r = &tx.completion;
        let mut p = r.index(r.producer).load(Ordering::Relaxed);
        for &a in addrs {
            // SAFETY: the test's single thread reads the slot only after the producer.
            unsafe { r.write(p, a) };
            p = p.wrapping_add(1);
        }
        r.index(r.producer).store(p, Ordering::Release);
    }

    #[test]
    fn a_sent_frame_comes_back_only_through_its_completion() {
        let mut tx = fake_tx(4);
        let id = tx.umem.id;
        let frames: Vec<RxFrame> = (0..6)
            .map(|i| RxFrame {
                addr: i * 2048 + 256,
                len: 60 + i as u32,
                umem: id,
            })
            .collect();
        let refs: Vec<&RxFrame> = frames.iter().collect();
        // The ring has 4 slots: the rest waits for the kernel to consume.
        assert_eq!(tx.transmit(&refs), 4);
        assert_eq!(tx.transmit(&refs[4..]), 0);
        let mut done = Vec::new();
        assert_eq!(
            tx.reap(&mut done),
            0,
            "nothing completes before the kernel says so"
        );
        let sent = kernel_consumes(&tx);
        assert_eq!(sent, vec![(256, 60), (2304, 61), (4352, 62), (6400, 63)]);
        // Consumed is not completed: the kernel may still be reading the frames.
        assert_eq!(tx.reap(&mut done), 0);
        assert_eq!(tx.transmit(&refs[4..]), 2, "consumed slots are reused");
        kernel_completes(&tx, &[2304, 256]);
        assert_eq!(tx.reap(&mut done), 2);
        assert_eq!(done, vec![2304, 256], "completions in the kernel's order");
        assert_eq!(tx.reap(&mut done), 0, "each completion once");
        for f in frames {
            std::mem::forget(f);
        }
    }

    #[test]
    #[should_panic(expected = "another UMEM")]
    fn a_frame_of_another_umem_is_refused() {
        let mut tx = fake_tx(4);
        let stranger = std::mem::ManuallyDrop::new(RxFrame {
            addr: 256,
            len: 60,
            umem: tx.umem.id + 1_000_000,
        });
        tx.transmit(&[&stranger]);
    }
}
