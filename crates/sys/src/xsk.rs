//! AF_XDP sockets: a UMEM (the receive queue's pool of frames), its fill ring, and the RX
//! ring, one socket per receive queue; and ([`XskTx`]) a transmit socket on another
//! interface sharing that UMEM, for forwarding frames from where they arrived.
//!
//! Ownership of a frame moves between the kernel and user space through the rings: frames
//! in the fill ring belong to the kernel, which writes a packet into one and hands its
//! address back in the RX ring. Here that ownership is a value: [`Xsk::receive`] turns RX
//! descriptors into [`RxFrame`] tokens (not `Clone`, not constructible outside this module),
//! [`Umem::data`] reads a frame only through its token, and [`Xsk::refill`] consumes tokens
//! to give frames back. So safe code can hold frames as long as it likes, in any order, and
//! never reads memory the kernel may be writing.
//!
//! Ring protocol (include/uapi/linux/if_xdp.h, net/xdp/xsk_queue.h): each ring has a
//! producer and a consumer index, free-running u32s. The kernel publishes RX descriptors
//! with a release store of `producer` (`smp_store_release` in `xskq_prod_submit`), so we
//! load it with `Acquire` before reading descriptors, and store `consumer` with `Release`
//! after reading them, which the kernel pairs with an acquire load before reusing the
//! slots. For the fill ring the roles swap: we write addresses, then store `producer` with
//! `Release`; we load the kernel's `consumer` with `Acquire` before overwriting slots.
//! The barrier labels (A)–(D) in the comments below are those of the table at the top of
//! <https://github.com/torvalds/linux/blob/v6.6/net/xdp/xsk_queue.h>.

use std::io;
use std::marker::PhantomData;
use std::mem::size_of;
use std::mem::ManuallyDrop;
use std::ops::Range;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Result, SysError};
use crate::mmap::Mmap;
use crate::poll::{self, Readiness};
use crate::sockopt::{self, Plain};

mod tx;
pub use tx::{UmemShare, XskTx};

/// Whether to bind in zero-copy mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum ZeroCopy {
    /// Zero-copy where the driver supports it, copy mode otherwise.
    Auto,
    /// Zero-copy or fail.
    Required,
    /// Always copy mode.
    Off,
}

/// Sizes of one AF_XDP socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XskConfig {
    /// Bytes per UMEM frame (2048 or 4096).
    pub frame_size: u32,
    /// Frames in the UMEM (the pool).
    pub frame_count: u32,
    /// Zero-copy policy.
    pub zero_copy: ZeroCopy,
}

/// How a socket ended up bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindReport {
    /// True if bound in zero-copy mode.
    pub zero_copy: bool,
    /// Why zero-copy is not in use, if it is not.
    pub copy_reason: Option<String>,
}

/// Counters from XDP_STATISTICS (cumulative since bind).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XskStats {
    /// Frames dropped for reasons other than a full RX ring (e.g. no fill frame).
    pub rx_dropped: u64,
    /// Invalid descriptors in the fill ring.
    pub rx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty.
    pub rx_fill_ring_empty_descs: u64,
}

static NEXT_UMEM_ID: AtomicUsize = AtomicUsize::new(1);

/// The frames of one socket. Shared (read-only) by every thread that holds frames of it.
#[derive(Debug)]
pub struct Umem {
    map: Mmap,
    frame_size: u32,
    id: usize,
}

// SAFETY: the mapping is only read, and only through `data`, which requires an RxFrame
// token proving the frame is out of the kernel's hands; nothing writes through a &Umem.
unsafe impl Sync for Umem {}

impl Umem {
    /// The bytes of a received frame.
    pub fn data<'a>(&'a self, frame: &'a RxFrame) -> &'a [u8] {
        assert_eq!(
            frame.umem, self.id,
            "RxFrame used with another socket's UMEM"
        );
        let span = packet_span(frame.addr, frame.len, self.frame_size, self.map.len())
            .expect("RX descriptor outside the UMEM");
        // SAFETY: `span` lies inside the mapping (packet_span checks it). The frame's token
        // exists, so the kernel got this frame back in the RX ring and will not write it until
        // the token is consumed by `refill`; the borrow of the token outlives the slice.
        unsafe { std::slice::from_raw_parts(self.map.base().as_ptr().add(span.start), span.len()) }
    }

    /// The 8 bytes of XDP metadata just before a frame's packet, if the frame has room for
    /// them (poolcap's XDP program stores the receive time there).
    pub fn meta_u64(&self, frame: &RxFrame) -> Option<u64> {
        assert_eq!(
            frame.umem, self.id,
            "RxFrame used with another socket's UMEM"
        );
        let span = meta_span(frame.addr, self.frame_size, self.map.len())?;
        // SAFETY: `span` (8 bytes) lies inside the frame (meta_span checks it), which the
        // token proves the kernel has handed back; the read is unaligned-safe.
        Some(unsafe {
            self.map
                .base()
                .as_ptr()
                .add(span.start)
                .cast::<u64>()
                .read_unaligned()
        })
    }

    /// Bytes per frame.
    pub fn frame_size(&self) -> u32 {
        self.frame_size
    }
}

/// Where the packet of an RX descriptor (`addr`, `len`) lies in a UMEM of `umem_len` bytes
/// cut into frames of `frame_size`: from `addr` (in aligned mode it points past the frame's
/// headroom) for `len` bytes, cut at the end of its frame. None if the frame is not wholly
/// inside the UMEM. Pure arithmetic on untrusted numbers, so it is tested and fuzzed alone.
pub fn packet_span(addr: u64, len: u32, frame_size: u32, umem_len: usize) -> Option<Range<usize>> {
    let start = usize::try_from(addr).ok()?;
    let fs = usize::try_from(frame_size).ok().filter(|&fs| fs > 0)?;
    let frame_end = (start / fs).checked_add(1)?.checked_mul(fs)?;
    if frame_end > umem_len {
        return None;
    }
    Some(start..start + (len as usize).min(frame_end - start))
}

/// Where the 8 bytes of XDP metadata before the packet at `addr` lie, if its frame has room
/// for them before the packet and the frame is inside the UMEM.
pub fn meta_span(addr: u64, frame_size: u32, umem_len: usize) -> Option<Range<usize>> {
    let start = usize::try_from(addr).ok()?;
    let fs = usize::try_from(frame_size).ok().filter(|&fs| fs > 0)?;
    let frame_base = start - start % fs;
    if start - frame_base < 8 || start > umem_len {
        return None;
    }
    Some(start - 8..start)
}

/// A received frame, owned by user space until given back with [`Xsk::refill`]. A frame
/// dropped instead (a panic unwinding through a chunk) is not lost to its UMEM: its drop
/// records it in `LOST` and its socket's next refill gives it back.
#[derive(Debug, PartialEq, Eq)]
pub struct RxFrame {
    addr: u64,
    len: u32,
    umem: usize,
}

/// Frames dropped without [`Xsk::refill`], as (UMEM id, address). Only the rare drop path
/// takes the lock; a refill looks at [`ANY_LOST`] first.
static LOST: Mutex<Vec<(usize, u64)>> = Mutex::new(Vec::new());

/// True while [`LOST`] may hold frames. Relaxed: only a hint, the lock orders the list;
/// a refill that misses a fresh `true` reclaims the frame at its next call.
static ANY_LOST: AtomicBool = AtomicBool::new(false);

impl Drop for RxFrame {
    fn drop(&mut self) {
        let mut lost = LOST.lock().unwrap_or_else(|e| e.into_inner());
        lost.push((self.umem, self.addr));
        ANY_LOST.store(true, Ordering::Relaxed);
    }
}

/// Takes the lost frames of UMEM `umem` out of [`LOST`].
fn reclaim(umem: usize) -> Vec<u64> {
    let mut lost = LOST.lock().unwrap_or_else(|e| e.into_inner());
    let mut mine = Vec::new();
    lost.retain(|&(id, addr)| {
        let keep = id != umem;
        if !keep {
            mine.push(addr);
        }
        keep
    });
    ANY_LOST.store(!lost.is_empty(), Ordering::Relaxed);
    mine
}

impl RxFrame {
    /// The packet's address in its UMEM (as the kernel gave it, past the frame's headroom).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length of the packet in the frame.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True for an empty packet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One mapped ring: indices, flags and the array of `E` entries (`xdp_desc` for RX and TX,
/// `u64` frame addresses for fill and completion).
struct Ring<E> {
    map: Mmap,
    producer: usize,
    consumer: usize,
    flags: usize,
    desc: usize,
    mask: u32,
    /// Our copy of the index we own (producer for fill, consumer for RX).
    local: u32,
    /// Last seen value of the index the kernel owns.
    cached: u32,
    /// The type of the array's entries.
    entry: PhantomData<E>,
}

impl<E> Ring<E> {
    fn index(&self, off: usize) -> &AtomicU32 {
        // SAFETY: `off` is one of the kernel-given offsets of a u32 inside the mapping
        // (checked against its length in `map_ring`); the word is only accessed atomically.
        unsafe { AtomicU32::from_ptr(self.map.base().as_ptr().add(off).cast::<u32>()) }
    }

    fn size(&self) -> u32 {
        self.mask + 1
    }

    /// The entry at free-running ring position `pos`.
    fn entry(&self, pos: u32) -> *mut E {
        let slot = (pos & self.mask) as usize;
        // SAFETY: slot <= mask, so the entry lies inside the mapped array of `mask + 1`
        // entries at `desc` (desc + entries * size_of::<E>() bytes, the mapping's length:
        // `map_ring`, and the tests' fake rings).
        unsafe {
            self.map
                .base()
                .as_ptr()
                .add(self.desc + slot * size_of::<E>())
                .cast::<E>()
        }
    }

    /// Reads the entry at position `pos`.
    ///
    /// # Safety
    /// The kernel does not write the slot meanwhile: it has published it (its producer index,
    /// loaded with `Acquire`, is past `pos`).
    unsafe fn read(&self, pos: u32) -> E {
        // SAFETY: `entry` is inside the mapping; the caller rules out a concurrent write.
        unsafe { self.entry(pos).read_unaligned() }
    }

    /// Writes `value` into the entry at position `pos`.
    ///
    /// # Safety
    /// The slot is ours: the kernel has consumed it (its consumer index, loaded with
    /// `Acquire`, is past the slot's previous use) and reads it only after our `Release`
    /// store of the producer index.
    unsafe fn write(&self, pos: u32, value: E) {
        // SAFETY: `entry` is inside the mapping; the caller rules out a concurrent access.
        unsafe { self.entry(pos).write_unaligned(value) }
    }
}

/// An AF_XDP socket bound to one receive queue, with its UMEM, fill ring and RX ring.
pub struct Xsk {
    fd: OwnedFd,
    umem: Arc<Umem>,
    fill: Ring<u64>,
    rx: Ring<libc::xdp_desc>,
    // The completion ring must exist for the bind; poolcap sends nothing, so it stays idle.
    _completion: Mmap,
    /// Frames user space holds that are neither in a chunk nor in the fill ring.
    spare: Vec<u64>,
    report: BindReport,
}

impl std::fmt::Debug for Xsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Xsk").field("report", &self.report).finish()
    }
}

impl AsFd for Xsk {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn setsockopt<T: Plain>(fd: &OwnedFd, opt: i32, val: &T, call: &'static str) -> Result<()> {
    sockopt::set(fd.as_fd(), libc::SOL_XDP, opt, val, call)
}

fn getsockopt<T: Plain>(fd: &OwnedFd, opt: i32, call: &'static str) -> Result<T> {
    sockopt::get(fd.as_fd(), libc::SOL_XDP, opt, call)
}

fn map_ring<E>(
    fd: &OwnedFd,
    off: &libc::xdp_ring_offset,
    entries: u32,
    pgoff: u64,
) -> Result<Ring<E>> {
    let len = off.desc as usize + entries as usize * size_of::<E>();
    let map = Mmap::shared_at(fd.as_fd(), len, pgoff)?;
    for o in [off.producer, off.consumer, off.flags] {
        if o as usize + 4 > len {
            return Err(SysError {
                call: "getsockopt(XDP_MMAP_OFFSETS)",
                what: format!("offset {o} outside a ring of {len} bytes"),
                source: io::Error::from(io::ErrorKind::InvalidData),
            });
        }
    }
    Ok(Ring {
        map,
        producer: off.producer as usize,
        consumer: off.consumer as usize,
        flags: off.flags as usize,
        desc: off.desc as usize,
        mask: entries - 1,
        local: 0,
        cached: 0,
        entry: PhantomData,
    })
}

/// A fresh AF_XDP socket (receive or transmit side).
fn open_socket() -> Result<OwnedFd> {
    crate::error::enter("socket(AF_XDP)", String::new)?;
    // SAFETY: socket() takes plain integers; the result is checked.
    let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(SysError::last("socket(AF_XDP)", ""));
    }
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Maps `cfg.frame_count` frames of anonymous memory and registers them as `fd`'s UMEM,
/// with a fill ring of `entries`, a completion ring of 64 (this socket only receives) and an
/// RX ring of `entries`; the rings are mapped by the caller.
fn register_umem(fd: &OwnedFd, cfg: XskConfig, entries: u32) -> Result<Mmap> {
    let umem_len = cfg.frame_size as usize * cfg.frame_count as usize;
    let umem_map = Mmap::anonymous(umem_len)?;
    let mut reg: libc::xdp_umem_reg = sockopt::zeroed();
    reg.addr = umem_map.base().as_ptr() as u64;
    reg.len = umem_len as u64;
    reg.chunk_size = cfg.frame_size;
    setsockopt(fd, libc::XDP_UMEM_REG, &reg, "setsockopt(XDP_UMEM_REG)")?;
    for (opt, n, call) in [
        (
            libc::XDP_UMEM_FILL_RING,
            entries,
            "setsockopt(XDP_UMEM_FILL_RING)",
        ),
        (
            libc::XDP_UMEM_COMPLETION_RING,
            64,
            "setsockopt(XDP_UMEM_COMPLETION_RING)",
        ),
        (libc::XDP_RX_RING, entries, "setsockopt(XDP_RX_RING)"),
    ] {
        setsockopt(fd, opt, &n, call)?;
    }
    Ok(umem_map)
}

impl Xsk {
    /// Creates a socket with a UMEM of `cfg.frame_count` frames, binds it to queue
    /// `queue_id` of `ifindex`, and gives every frame to the kernel through the fill ring.
    pub fn bind(ifindex: u32, queue_id: u32, cfg: XskConfig) -> Result<Self> {
        let entries = cfg.frame_count.next_power_of_two().max(64);
        let fd = open_socket()?;
        let umem_map = register_umem(&fd, cfg, entries)?;
        let off: libc::xdp_mmap_offsets =
            getsockopt(&fd, libc::XDP_MMAP_OFFSETS, "getsockopt(XDP_MMAP_OFFSETS)")?;
        let fill = map_ring::<u64>(&fd, &off.fr, entries, libc::XDP_UMEM_PGOFF_FILL_RING)?;
        let completion =
            map_ring::<u64>(&fd, &off.cr, 64, libc::XDP_UMEM_PGOFF_COMPLETION_RING)?.map;
        let rx = map_ring::<libc::xdp_desc>(&fd, &off.rx, entries, libc::XDP_PGOFF_RX_RING as u64)?;
        let umem = Arc::new(Umem {
            map: umem_map,
            frame_size: cfg.frame_size,
            id: NEXT_UMEM_ID.fetch_add(1, Ordering::Relaxed),
        });
        let mut xsk = Xsk {
            fd,
            umem,
            fill,
            rx,
            _completion: completion,
            spare: (0..u64::from(cfg.frame_count))
                .map(|i| i * u64::from(cfg.frame_size))
                .collect(),
            report: BindReport {
                zero_copy: false,
                copy_reason: None,
            },
        };
        // Frames go to the kernel before bind so the queue never starts without buffers.
        xsk.flush_spare();
        xsk.report = xsk.bind_to(ifindex, queue_id, cfg.zero_copy)?;
        Ok(xsk)
    }

    fn bind_to(&self, ifindex: u32, queue_id: u32, zc: ZeroCopy) -> Result<BindReport> {
        let attempt = |flags: u16| -> Result<()> {
            let mut sa: libc::sockaddr_xdp = sockopt::zeroed();
            sa.sxdp_family = libc::AF_XDP as u16;
            sa.sxdp_flags = flags | libc::XDP_USE_NEED_WAKEUP;
            sa.sxdp_ifindex = ifindex;
            sa.sxdp_queue_id = queue_id;
            sockopt::bind(
                self.fd.as_fd(),
                &sa,
                "bind(AF_XDP)",
                format!("ifindex {ifindex} queue {queue_id}"),
            )
        };
        match zc {
            ZeroCopy::Off => attempt(libc::XDP_COPY).map(|()| BindReport {
                zero_copy: false,
                copy_reason: Some("copy mode requested".into()),
            }),
            ZeroCopy::Required => attempt(libc::XDP_ZEROCOPY).map(|()| BindReport {
                zero_copy: true,
                copy_reason: None,
            }),
            ZeroCopy::Auto => match attempt(libc::XDP_ZEROCOPY) {
                Ok(()) => Ok(BindReport {
                    zero_copy: true,
                    copy_reason: None,
                }),
                Err(e) if matches!(e.errno(), Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)) => {
                    let reason = format!("zero-copy unavailable ({})", e.source);
                    attempt(libc::XDP_COPY).map(|()| BindReport {
                        zero_copy: false,
                        copy_reason: Some(reason),
                    })
                }
                Err(e) => Err(e),
            },
        }
    }

    /// How the socket was bound.
    pub fn report(&self) -> &BindReport {
        &self.report
    }

    /// The socket's UMEM, to read frames with.
    pub fn umem(&self) -> &Arc<Umem> {
        &self.umem
    }

    /// Moves up to `max` received frames into `out`; returns how many.
    pub fn receive(&mut self, max: usize, out: &mut Vec<RxFrame>) -> usize {
        let r = &mut self.rx;
        if r.cached == r.local {
            // (C): pairs with the kernel's release store of the RX producer (B),
            // `smp_store_release` in `xskq_prod_submit`/`__xskq_prod_submit`
            // (https://github.com/torvalds/linux/blob/v6.6/net/xdp/xsk_queue.h): the descriptors
            // up to it are written before we read them.
            r.cached = r.index(r.producer).load(Ordering::Acquire);
        }
        let n = (r.cached.wrapping_sub(r.local) as usize).min(max);
        for i in 0..n {
            // SAFETY: the kernel published the descriptor before the producer value loaded
            // with Acquire above.
            let d = unsafe { r.read(r.local.wrapping_add(i as u32)) };
            out.push(RxFrame {
                addr: d.addr,
                len: d.len,
                umem: self.umem.id,
            });
        }
        if n > 0 {
            r.local = r.local.wrapping_add(n as u32);
            // (D): our descriptor reads complete before the kernel sees the slots free;
            // pairs with its load of the RX consumer (A) in `xskq_prod_nb_free`
            // (https://github.com/torvalds/linux/blob/v6.6/net/xdp/xsk_queue.h).
            r.index(r.consumer).store(r.local, Ordering::Release);
        }
        n
    }

    /// Gives frames back to the kernel (through the fill ring). Frames the fill ring has no
    /// room for are kept and given at the next call.
    pub fn refill(&mut self, frames: impl IntoIterator<Item = RxFrame>) {
        for f in frames {
            assert_eq!(f.umem, self.umem.id, "RxFrame given back to another socket");
            // Given back here, so its drop (the lost-frame path) must not run.
            let f = ManuallyDrop::new(f);
            self.give_back(f.addr);
        }
        if ANY_LOST.load(Ordering::Relaxed) {
            for addr in reclaim(self.umem.id) {
                self.give_back(addr);
            }
        }
        self.flush_spare();
    }

    fn give_back(&mut self, addr: u64) {
        // The fill ring takes frame-aligned addresses.
        self.spare
            .push(addr - addr % u64::from(self.umem.frame_size));
    }

    fn flush_spare(&mut self) {
        let r = &mut self.fill;
        let size = r.size();
        let mut free = size - r.local.wrapping_sub(r.cached);
        if (free as usize) < self.spare.len() {
            // (A): pairs with the kernel's release store of the fill consumer (D),
            // `smp_store_release` in `__xskq_cons_release`
            // (https://github.com/torvalds/linux/blob/v6.6/net/xdp/xsk_queue.h): it has read the
            // addresses of the slots we overwrite next. Acquire is stronger than the control
            // dependency the kernel relies on, as in libxdp's `xsk_prod_nb_free`.
            r.cached = r.index(r.consumer).load(Ordering::Acquire);
            free = size - r.local.wrapping_sub(r.cached);
        }
        let n = (free as usize).min(self.spare.len());
        for (i, addr) in self.spare.drain(self.spare.len() - n..).enumerate() {
            // SAFETY: the slot is free: the kernel consumed it (consumer loaded with Acquire
            // above).
            unsafe { r.write(r.local.wrapping_add(i as u32), addr) };
        }
        if n > 0 {
            r.local = r.local.wrapping_add(n as u32);
            // (B): the addresses are written before the kernel sees them; pairs with its
            // `smp_load_acquire` of the fill producer (C) in `__xskq_cons_peek`
            // (https://github.com/torvalds/linux/blob/v6.6/net/xdp/xsk_queue.h).
            r.index(r.producer).store(r.local, Ordering::Release);
        }
    }

    /// True when the kernel asks for a syscall to go on filling the RX ring.
    pub fn needs_wakeup(&self) -> bool {
        // Relaxed: the kernel sets and clears the flag with plain stores and no barrier
        // (`xsk_set_rx_need_wakeup`, `xsk_clear_rx_need_wakeup` in
        // https://github.com/torvalds/linux/blob/v6.6/net/xdp/xsk.c), and it publishes no
        // data: a stale value costs one needless wake-up syscall, or a wake-up late by at
        // most the wait's timeout (capture threads always wait with one). libxdp's
        // `xsk_ring_prod__needs_wakeup` reads it as plainly.
        self.fill.index(self.fill.flags).load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    /// Waits up to `timeout_ms` for frames (poll), which also wakes the kernel if it asked
    /// (see [`crate::poll`]).
    pub fn wait(&self, timeout_ms: i32) -> Result<Readiness> {
        poll::wait_readable(self.fd.as_fd(), timeout_ms, "poll(AF_XDP)")
    }

    /// Kernel counters of this socket.
    pub fn statistics(&self) -> Result<XskStats> {
        let s: libc::xdp_statistics =
            getsockopt(&self.fd, libc::XDP_STATISTICS, "getsockopt(XDP_STATISTICS)")?;
        Ok(XskStats {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
        })
    }

    /// The raw descriptor, for registering in an XSKMAP.
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

impl Drop for Xsk {
    fn drop(&mut self) {
        // Lost frames of this UMEM have no socket to go back to any more.
        reclaim(self.umem.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_frame_goes_back_to_its_own_umem_only() {
        let (mine, other) = (
            NEXT_UMEM_ID.fetch_add(1, Ordering::Relaxed),
            NEXT_UMEM_ID.fetch_add(1, Ordering::Relaxed),
        );
        let frame = |umem, addr| RxFrame {
            addr,
            len: 60,
            umem,
        };
        // Dropped as a panic would drop them: unwinding through their owner.
        let r = std::panic::catch_unwind(|| {
            let _held = [
                frame(mine, 2048 + 256),
                frame(other, 4096),
                frame(mine, 256),
            ];
            panic!("worker failed");
        });
        assert!(r.is_err());
        let mut back = reclaim(mine);
        back.sort_unstable();
        assert_eq!(back, vec![256, 2048 + 256]);
        assert_eq!(reclaim(mine), Vec::<u64>::new(), "each frame once");
        assert_eq!(reclaim(other), vec![4096]);
    }

    #[test]
    fn descriptors_are_checked_against_the_umem() {
        // 4 frames of 2048 bytes.
        let umem = 4 * 2048;
        assert_eq!(packet_span(256, 60, 2048, umem), Some(256..316));
        assert_eq!(packet_span(2048 + 256, 60, 2048, umem), Some(2304..2364));
        // A length past the frame's end is cut there.
        assert_eq!(
            packet_span(3 * 2048 + 2000, 500, 2048, umem),
            Some(8144..8192)
        );
        // Outside the UMEM, or arithmetic that would overflow.
        assert_eq!(packet_span(4 * 2048, 60, 2048, umem), None);
        assert_eq!(packet_span(u64::MAX, 60, 2048, umem), None);
        assert_eq!(packet_span(u64::MAX, 60, 2, usize::MAX), None);
        assert_eq!(packet_span(0, 60, 0, umem), None);
    }

    #[test]
    fn metadata_needs_room_before_the_packet() {
        let umem = 4 * 2048;
        assert_eq!(meta_span(256, 2048, umem), Some(248..256));
        assert_eq!(meta_span(2048 + 8, 2048, umem), Some(2048..2056));
        assert_eq!(meta_span(2048 + 7, 2048, umem), None);
        assert_eq!(meta_span(u64::MAX, 2048, umem), None);
        assert_eq!(meta_span(256, 0, umem), None);
    }
}
