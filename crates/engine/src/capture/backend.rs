//! Opening the kernel side of a capture: one source and one pool per receive queue, on
//! AF_PACKET or AF_XDP, and the startup report that says which backend runs and why.
//!
//! AF_PACKET works on every interface: fanout sockets with TPACKET_V3 rings, the filter in
//! the kernel, packets copied into pool chunks. AF_XDP is the closest match to WireCAP's
//! ring-buffer pool: the UMEM of each queue's socket is the pool itself, frames go to
//! workers and come back in any order while the fill ring keeps the NIC supplied. It takes
//! the frames away from the host's stack (the XDP program redirects all of them), binds one
//! socket per hardware receive queue, and needs CAP_NET_ADMIN and CAP_BPF.

use std::sync::Arc;
use std::time::Duration;

use poolcap_format::{FileFormat, LinkType};
use poolcap_sys::rx_ring::RingGeometry;
use poolcap_sys::socket::{FanoutMode, PacketSocket};
use poolcap_sys::xdp::{AttachMode, XdpRedirect};
use poolcap_sys::xsk::{UmemShare, Xsk, XskConfig, ZeroCopy};
use poolcap_sys::SysError;

use super::af_packet::{PacketSource, QueueSocket};
use super::af_xdp::XdpSource;
use super::error::CaptureError;
use super::filter;
use super::pool::{Pool, PoolSize};
use super::source::Source;
use poolcap_sys::netdev;

/// Which backend to capture with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum BackendKind {
    /// AF_PACKET TPACKET_V3 with fanout.
    #[cfg_attr(feature = "clap", value(name = "af_packet"))]
    AfPacket,
    /// AF_XDP, one socket per receive queue.
    #[cfg_attr(feature = "clap", value(name = "af_xdp"))]
    AfXdp,
    /// AF_XDP where it works, AF_PACKET otherwise.
    Auto,
}

/// Backend settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendConfig {
    /// The backend.
    pub kind: BackendKind,
    /// AF_XDP zero-copy policy.
    pub zero_copy: ZeroCopy,
    /// Replace an XDP program someone else attached.
    pub force: bool,
}

/// What one queue needs from the kernel side.
#[derive(Debug)]
pub struct Setup<'a> {
    /// Interface.
    pub iface: &'a str,
    /// Its index.
    pub ifindex: u32,
    /// Queues.
    pub queues: usize,
    /// Pool per queue.
    pub pool: PoolSize,
    /// Capture-queue capacity per queue (chunks of its buddy group).
    pub queue_capacity: Vec<usize>,
    /// Kernel ring (AF_PACKET).
    pub ring: RingGeometry,
    /// Fanout (AF_PACKET).
    pub fanout: FanoutMode,
    /// Filter expression.
    pub filter: Option<&'a str>,
    /// Bytes kept per packet.
    pub snaplen: u32,
    /// The file format packets are written in, if they are: chunks of copies keep room for
    /// its records.
    pub records: Option<FileFormat>,
    /// Only frames that arrive, not those this host sends (a forwarder's IN, which with
    /// `--bidirectional` is also an OUT); AF_XDP sees only arriving frames anyway.
    pub inbound_only: bool,
    /// Packets are only written to a file (no analysis, no forwarding): on AF_PACKET they
    /// are written from the kernel ring ([`hold_split`]).
    pub writes_only: bool,
    /// The interface's link type ([`super::linktype`]; LINUX_SLL2 on every interface).
    pub linktype: LinkType,
    /// Put the interface in promiscuous mode while capturing (tcpdump's default).
    pub promiscuous: bool,
}

/// Bytes per block of a kernel ring of `bytes`: at least 16 blocks per ring, so the kernel
/// always has blocks to fill while the capture thread copies one out, and at most 256 KiB
/// each, in whole pages. (Measured: 8 blocks of 512 KiB lost 8-19% writing 1514-byte frames
/// at top speed where 16 of 256 KiB lost 0-0.5%.)
pub fn block_size(bytes: u64) -> u32 {
    let b = (bytes / 16).clamp(16 << 10, 256 << 10);
    (b / 4096 * 4096) as u32
}

/// The format packets are written in when the capture writes them from the kernel ring
/// where they lie (see `pool`): when they are only written (no analysis, no forwarding).
fn held_records(s: &Setup<'_>) -> Option<FileFormat> {
    s.records.filter(|_| s.writes_only)
}

/// The ring and pool of a queue written from the ring: all of the pool's memory goes to the
/// ring, whose blocks get the size its new size calls for ([`block_size`]), and the pool
/// keeps its R chunks as handles of blocks in flight to the writer, each for as many frames
/// as a block can hold (and no bytes of its own), so the queue has the same memory.
///
/// Why all of it in the ring: with no analysis the pool would hold only what the capture
/// thread has copied, and that thread shares a core with the writer (and, with RPS or a
/// NIC's interrupts there, with the receive work), while the kernel fills its ring on the
/// receiving core whether or not the capture thread runs: memory in the ring absorbs the
/// stalls of the capture core. (Measured on the veth lab, 1.5M frames of 1514 B at top
/// speed to a file, rps off, copying into the pool: `bench disk --quick` lost 2.4–16% with a
/// 4 MiB ring and 32 MiB pool, nothing in 3 of 3 runs with a 28 MiB ring and 8 MiB pool,
/// as netsniff-ng with its 36 MiB ring.) Workers (`--load`, the probe) keep the pool as
/// asked: there it absorbs what the analysis has not taken yet (WireCAP).
///
/// Why larger blocks ([`held_block_size`]): a block retired is a wakeup of the capture
/// thread, and a wakeup costs far more than the packets it brings at low rates. A 2 MiB
/// `-B` grown to 10 MiB in its 128 KiB blocks woke it twice as often as needed (2 queues,
/// 1514 B at top speed: 11k wakeups per capture thread for 750k frames); the 36 MiB of the
/// defaults in 256 KiB blocks woke it some 185 times a second at 64 B and 300k pps (tcpdump
/// 170), in 1 MiB blocks 65 times (`poll` calls counted by strace): run time 62 ns per
/// packet against 46 and tcpdump's 63 (`scripts/cpu-rig.sh`, 5 interleaved rounds of 1.5M
/// frames written to /dev/null, medians).
pub fn hold_split(ring: RingGeometry, pool: PoolSize) -> (RingGeometry, PoolSize) {
    let ring = grow(ring, pool.bytes());
    (
        ring,
        PoolSize {
            cells: ring.block_size as usize / MIN_FRAME_SLOT,
            chunks: pool.chunks,
            cell_size: 0,
        },
    )
}

/// Bytes per block of a ring of `bytes` written from: at least 32 blocks per ring (twice
/// [`block_size`]'s 16, since the writer holds blocks while it writes them), and at most
/// 1 MiB each, in whole pages.
pub fn held_block_size(bytes: u64) -> u32 {
    let b = (bytes / 32).clamp(16 << 10, 1 << 20);
    (b / 4096 * 4096) as u32
}

/// `ring` grown by `bytes`, in the blocks its new size calls for ([`held_block_size`], never
/// smaller than before), in whole blocks: the memory never grows past the sum.
fn grow(ring: RingGeometry, bytes: u64) -> RingGeometry {
    let total = ring.bytes() as u64 + bytes;
    let block = held_block_size(total).max(ring.block_size);
    RingGeometry {
        block_size: block,
        block_nr: (total / u64::from(block)).min(u64::from(u32::MAX)) as u32,
        ..ring
    }
}

/// The fewest bytes a frame takes in a TPACKET_V3 block: its header (48 bytes), the link
/// address (20), and at least a byte of packet, 8-byte aligned.
const MIN_FRAME_SLOT: usize = 72;

/// The opened kernel side.
pub struct Opened {
    /// One source per queue.
    pub sources: Vec<Box<dyn Source>>,
    /// One pool per queue.
    pub pools: Vec<Arc<Pool>>,
    /// The XDP program, attached while this lives.
    pub xdp: Option<XdpRedirect>,
    /// Per queue, its AF_XDP socket's UMEM for a forwarder to send from (AF_XDP only).
    pub shares: Vec<UmemShare>,
    /// True when a filter runs in the kernel (its rejections are counted from interface
    /// counters, not per queue).
    pub kernel_filter: bool,
    /// What runs and why, for the startup report.
    pub report: String,
    /// Which backend runs, by name: `af_packet`, `af_xdp`, or `file` and `memory` for
    /// sources that are not an interface.
    pub backend: &'static str,
    /// What each packet starts with.
    pub linktype: LinkType,
    /// A packet socket that keeps the interface promiscuous while it lives (AF_XDP, whose
    /// sockets cannot ask for it themselves).
    pub promiscuous: Option<PacketSocket>,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("report", &self.report)
            .finish()
    }
}

/// Opens the backend `cfg` asks for.
pub fn open(cfg: BackendConfig, s: &Setup<'_>) -> Result<Opened, CaptureError> {
    match cfg.kind {
        BackendKind::AfPacket => open_af_packet(s, "af_packet (asked for)"),
        BackendKind::AfXdp => open_af_xdp(cfg, s),
        BackendKind::Auto => match open_af_xdp(cfg, s) {
            Ok(o) => Ok(o),
            Err(CaptureError::Filter(f)) => Err(CaptureError::Filter(f)),
            Err(e) => open_af_packet(s, &format!("af_packet (AF_XDP unavailable: {e})")),
        },
    }
}

fn open_af_packet(s: &Setup<'_>, why: &str) -> Result<Opened, CaptureError> {
    // On every interface each packet gets a header in front: copied, never held.
    let every = s.ifindex == 0;
    let held = held_records(s).filter(|_| !every);
    let (ring, pool) = match held {
        Some(_) => hold_split(s.ring, s.pool),
        None => (s.ring, s.pool),
    };
    // Without an expression a filter only helps to cut packets to a short snaplen in the
    // kernel; otherwise it is per-packet work for nothing. On every interface the socket's
    // packets lack the header the program is compiled for: the filter runs here instead.
    let program = match s.filter {
        _ if every => None,
        Some(expr) => Some(filter::compile(expr, s.iface, s.snaplen, s.linktype)?),
        None if (s.snaplen as usize) < netdev::mtu(s.iface).unwrap_or(1500) + 18 => {
            Some(filter::accept_all(s.snaplen))
        }
        None => None,
    };
    let user_filter = match s.filter {
        Some(expr) if every => Some(filter::compile_packet_user(expr, s.linktype)?),
        _ => None,
    };
    // A fanout group belongs to one interface: an id per process and interface, so a
    // bidirectional forwarder's two engines each have theirs.
    let group = std::process::id().wrapping_add(s.ifindex.wrapping_mul(7919)) & 0xffff;
    let fanout = (s.queues > 1).then_some((group as u16, s.fanout));
    let queue = QueueSocket {
        ifindex: s.ifindex,
        linktype: s.linktype,
        geometry: ring,
        filter: program.as_deref(),
        user_filter: user_filter.as_ref(),
        fanout,
        inbound_only: s.inbound_only,
        holds: held.is_some(),
        promiscuous: s.promiscuous,
    };
    let sources = (0..s.queues)
        .map(|_| PacketSource::open(&queue).map(|p| Box::new(p) as Box<dyn Source>))
        .collect::<Result<Vec<_>, _>>()?;
    let pools = match held {
        Some(records) => block_pools(pool, &s.queue_capacity, records),
        None => copy_pools(pool, &s.queue_capacity, s.records),
    };
    let split = if held.is_some() {
        format!(
            "; writing from the ring: kernel ring {} MiB per queue, up to {} blocks in \
             flight to the writer",
            ring.bytes() >> 20,
            pool.chunks
        )
    } else {
        String::new()
    };
    Ok(Opened {
        sources,
        pools,
        xdp: None,
        shares: Vec::new(),
        kernel_filter: s.filter.is_some() && !every,
        report: format!("backend {why}{split}"),
        backend: "af_packet",
        linktype: s.linktype,
        promiscuous: None,
    })
}

/// One pool of chunks of ring blocks per queue, written as `records` in place.
fn block_pools(pool: PoolSize, capacity: &[usize], records: FileFormat) -> Vec<Arc<Pool>> {
    capacity
        .iter()
        .enumerate()
        .map(|(i, &c)| Arc::new(Pool::of_blocks(i, pool, c, records)))
        .collect()
}

/// One pool of copies per queue (`capacity` has one entry per queue), with room for
/// `records` if packets are written in that format.
pub fn copy_pools(
    pool: PoolSize,
    capacity: &[usize],
    records: Option<FileFormat>,
) -> Vec<Arc<Pool>> {
    let size = super::pool::for_records(pool, records);
    capacity
        .iter()
        .enumerate()
        .map(|(i, &c)| Arc::new(Pool::new(i, size, c, records)))
        .collect()
}

/// Detaches whatever XDP program is on `iface` (for `--force`).
fn detach_foreign_xdp(iface: &str) -> Result<(), CaptureError> {
    for kind in ["xdp", "xdpgeneric", "xdpdrv"] {
        let out = std::process::Command::new("ip")
            .args(["link", "set", "dev", iface, kind, "off"])
            .output();
        if let Ok(o) = out {
            if !o.status.success() && kind == "xdp" {
                return Err(CaptureError::Xdp(format!(
                    "cannot detach the XDP program on {iface}: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                )));
            }
        }
    }
    Ok(())
}

fn attach(cfg: BackendConfig, iface: &str) -> Result<XdpRedirect, CaptureError> {
    match XdpRedirect::attach(iface, AttachMode::Driver) {
        Ok(x) => Ok(x),
        Err(e) if matches!(e.errno(), Some(libc::EBUSY | libc::EEXIST)) && cfg.force => {
            detach_foreign_xdp(iface)?;
            XdpRedirect::attach(iface, AttachMode::Driver).map_err(CaptureError::Sys)
        }
        Err(e) if matches!(e.errno(), Some(libc::EBUSY | libc::EEXIST)) => Err(CaptureError::Xdp(format!(
            "an XDP program is already attached to {iface}; poolcap does not replace it (--force does)"
        ))),
        Err(e) if e.errno() == Some(libc::EPERM) => {
            Err(CaptureError::Xdp(format!("attaching XDP to {iface} needs CAP_BPF and CAP_NET_ADMIN ({e})")))
        }
        Err(e) => Err(CaptureError::Xdp(format!("native XDP on {iface} failed: {e}"))),
    }
}

/// Binds queue `q`, retrying while a previous socket's teardown still holds it (EBUSY).
fn bind_with_retry(ifindex: u32, q: usize, xcfg: XskConfig) -> Result<Xsk, SysError> {
    let mut wait = Duration::from_millis(50);
    loop {
        match Xsk::bind(ifindex, q as u32, xcfg) {
            Err(e) if e.errno() == Some(libc::EBUSY) && wait < Duration::from_secs(2) => {
                std::thread::sleep(wait);
                wait *= 2;
            }
            r => return r,
        }
    }
}

/// Binds queue `q`'s AF_XDP socket, saying why in the capture's words when it cannot.
fn bind_queue(s: &Setup<'_>, q: usize, xcfg: XskConfig) -> Result<Xsk, CaptureError> {
    bind_with_retry(s.ifindex, q, xcfg).map_err(|e| match e.errno() {
        Some(libc::EBUSY) => CaptureError::Xdp(format!(
            "queue {q} of {} is busy (another AF_XDP socket?): {e}",
            s.iface
        )),
        Some(libc::EOPNOTSUPP) if xcfg.zero_copy == ZeroCopy::Required => {
            CaptureError::Xdp(format!(
                "zero-copy unavailable on {} ({e}) and --zero-copy required",
                s.iface
            ))
        }
        _ => CaptureError::Sys(e),
    })
}

/// Bytes of an AF_XDP UMEM frame holding a cell of `cell_size` bytes.
pub fn umem_frame_size(cell_size: usize) -> u32 {
    if cell_size > 2048 {
        4096
    } else {
        2048
    }
}

fn open_af_xdp(cfg: BackendConfig, s: &Setup<'_>) -> Result<Opened, CaptureError> {
    if s.ifindex == 0 {
        return Err(CaptureError::Xdp(
            "AF_XDP binds the queues of one interface: capture on every interface with \
             --backend af_packet"
                .into(),
        ));
    }
    if s.linktype != LinkType::ETHERNET {
        return Err(CaptureError::Xdp(format!(
            "AF_XDP captures Ethernet interfaces; {} is {}: use --backend af_packet",
            s.iface, s.linktype
        )));
    }
    let have = netdev::rx_queues(s.iface);
    if s.queues > have {
        return Err(CaptureError::Xdp(format!(
            "{} has {have} receive queues, {} were asked for",
            s.iface, s.queues
        )));
    }
    // Compile the filter first: a bad expression is reported before anything is attached.
    // Compiled as for a live capture (VLAN tags in metadata), as AF_PACKET's and tcpdump's.
    let program = s
        .filter
        .map(|expr| filter::compile_live_user(expr, s.iface, s.snaplen))
        .transpose()?;
    let filters = vec![program; s.queues];
    let promiscuous = if s.promiscuous {
        let holder = PacketSocket::open()?;
        holder.set_promiscuous(s.ifindex)?;
        Some(holder)
    } else {
        None
    };
    let mut xdp = attach(cfg, s.iface)?;
    let stamped = xdp.stamps();
    let xcfg = XskConfig {
        frame_size: umem_frame_size(s.pool.cell_size),
        frame_count: (s.pool.cells * s.pool.chunks) as u32,
        zero_copy: cfg.zero_copy,
    };
    let mut sources: Vec<Box<dyn Source>> = Vec::with_capacity(s.queues);
    let mut pools = Vec::with_capacity(s.queues);
    let mut shares = Vec::with_capacity(s.queues);
    let mut mode = String::new();
    for (q, f) in filters.into_iter().enumerate() {
        let xsk = bind_queue(s, q, xcfg)?;
        xdp.register(q as u32, &xsk)?;
        if q == 0 {
            mode = match &xsk.report().copy_reason {
                None => "zero-copy".to_string(),
                Some(r) => format!("copy mode: {r}"),
            };
        }
        pools.push(Arc::new(Pool::of_frames(
            q,
            s.pool,
            s.queue_capacity[q],
            xsk.umem(),
        )));
        shares.push(xsk.share()?);
        sources.push(Box::new(XdpSource::new(xsk, f, stamped)));
    }
    Ok(Opened {
        sources,
        pools,
        xdp: Some(xdp),
        shares,
        kernel_filter: false,
        report: format!(
            "backend af_xdp (native XDP, {mode}; UMEM of {} frames per queue{})",
            xcfg.frame_count,
            match stamped {
                true => "",
                false =>
                    "; frames stamped when read: this kernel's XDP programs may not \
                          write metadata",
            }
        ),
        backend: "af_xdp",
        linktype: s.linktype,
        promiscuous,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RING: RingGeometry = RingGeometry {
        block_size: 256 << 10,
        block_nr: 16,
        retire_timeout_ms: 50,
    };

    fn pool(chunks: usize) -> PoolSize {
        PoolSize {
            cells: 256,
            chunks,
            cell_size: 2048,
        }
    }

    fn bytes(ring: RingGeometry, pool: PoolSize) -> u64 {
        ring.bytes() as u64 + pool.bytes()
    }

    #[test]
    fn writing_only_puts_the_whole_pool_into_the_ring_and_keeps_its_chunks_as_handles() {
        let (ring, p) = hold_split(RING, pool(64));
        assert_eq!(
            ring.bytes(),
            36 << 20,
            "4 MiB asked for plus 64 chunks of 512 KiB"
        );
        assert_eq!((ring.block_size, ring.retire_timeout_ms), (1 << 20, 50));
        assert_eq!(ring.block_nr, 36, "36 blocks of 1 MiB");
        assert_eq!(p.chunks, 64, "a handle per chunk");
        assert_eq!(p.cells, (1 << 20) / 72, "as many frames as a block holds");
        assert_eq!(bytes(ring, p), bytes(RING, pool(64)), "the same memory");
    }

    #[test]
    fn a_small_ring_grown_by_the_pool_gets_the_larger_blocks_its_size_calls_for() {
        let small = RingGeometry {
            block_size: block_size(2 << 20),
            block_nr: 16,
            ..RING
        };
        assert_eq!(small.block_size, 128 << 10);
        let (ring, p) = hold_split(small, pool(32));
        assert_eq!((ring.block_size, ring.block_nr), (576 << 10, 32), "18 MiB");
        assert_eq!(bytes(ring, p), bytes(small, pool(32)), "the same memory");
    }

    #[test]
    fn only_whole_blocks_grow_the_ring_and_the_memory_never_grows() {
        let ring = RingGeometry {
            block_size: 3 << 20,
            ..RING
        };
        let (r, p) = hold_split(ring, pool(5));
        assert_eq!(r.block_size, 3 << 20, "a block is never made smaller");
        assert_eq!(r.block_nr, 16, "5 chunks (2.5 MiB) make no 3 MiB block");
        assert!(bytes(r, p) <= bytes(ring, pool(5)));
    }
}
