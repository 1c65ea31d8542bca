//! The AF_PACKET source: a fanout socket with a TPACKET_V3 ring. Each retired block's
//! packets are copied into chunks and the block goes back to the kernel at once; timestamps
//! are the kernel's, and a VLAN tag the kernel stripped is put back, so the file shows the
//! wire. The filter runs in the kernel (see `filter`).
//!
//! Writing a file with nothing else to do, the source holds blocks instead (see `pool`): each
//! retired block goes whole into a chunk, its frames where they lie, and back to the kernel
//! once written. A stripped VLAN tag is put back in place: the frame's first 12 bytes move 4
//! bytes forward, into the kernel's header room in front of it.

use std::time::Duration;

use poolcap_sys::poll::Readiness;
use poolcap_sys::rx_ring::{
    RingGeometry, RxPacket, RxRing, TP_STATUS_VLAN_TPID_VALID, TP_STATUS_VLAN_VALID,
};
use poolcap_sys::socket::{BpfInsn, FanoutMode, PacketSocket};
use poolcap_sys::SysError;

use super::pool::Pool;
use super::source::{poll_ms, Filler, KernelDrops, Source};

/// How long a capture thread holding blocks sleeps before it looks at the ring again when
/// the kernel's `poll` cannot tell (see [`PacketSource::poll`]): a 256 KiB block fills in
/// 0.35 ms with 1514-byte frames at top speed on the veth lab, 2 ms with 64-byte frames.
const HELD_WAIT: Duration = Duration::from_millis(1);

/// An AF_PACKET fanout socket with its ring.
#[derive(Debug)]
pub struct PacketSource {
    sock: PacketSocket,
    ring: RxRing,
    /// Blocks go whole into chunks (a pool of blocks) instead of being copied out.
    holds: bool,
    /// The packets of the block being held, walked before it goes into its chunk.
    held: Vec<Held>,
}

/// The 4 bytes of the VLAN tag the kernel stripped from `pkt`, if it did.
fn stripped_tag(pkt: &RxPacket<'_>) -> Option<[u8; 4]> {
    if pkt.status & TP_STATUS_VLAN_VALID == 0 || pkt.data.len() < 12 {
        return None;
    }
    let tpid = if pkt.status & TP_STATUS_VLAN_TPID_VALID != 0 {
        pkt.vlan_tpid
    } else {
        0x8100
    };
    let mut tag = [0u8; 4];
    tag[..2].copy_from_slice(&tpid.to_be_bytes());
    tag[2..].copy_from_slice(&pkt.vlan_tci.to_be_bytes());
    Some(tag)
}

impl PacketSource {
    /// Opens a socket, attaches `filter` (if any) and a ring before binding (so no
    /// unfiltered packet slips in), binds to `ifindex` and joins the fanout group (if any).
    /// Both are per-packet work the kernel does on the receiving path, which on veth runs
    /// on the sender's CPU: a single queue needs no fanout, and no filter means none runs.
    /// `inbound_only`: frames this host sends on the interface are not delivered.
    pub fn open(
        ifindex: u32,
        geometry: RingGeometry,
        filter: Option<&[BpfInsn]>,
        fanout: Option<(u16, FanoutMode)>,
        inbound_only: bool,
        holds: bool,
    ) -> Result<Self, SysError> {
        let sock = PacketSocket::open()?;
        sock.set_tpacket_v3()?;
        if inbound_only {
            sock.set_ignore_outgoing()?;
        }
        if let Some(f) = filter {
            sock.attach_filter(f)?;
        }
        let ring = RxRing::new(&sock, geometry)?;
        sock.bind(ifindex)?;
        if let Some((group, mode)) = fanout {
            sock.join_fanout(group, mode, inbound_only)?;
        }
        Ok(Self {
            sock,
            ring,
            holds,
            held: Vec::new(),
        })
    }

    /// Takes the next retired block whole into a free chunk (see the module docs); false
    /// if there is no block or no free chunk (the block then stays in the ring).
    fn hold_batch(&mut self, pool: &Pool, filler: &mut Filler) -> bool {
        let Some(mut chunk) = pool.take_free() else {
            return false;
        };
        let Some(block) = self.ring.hold_next() else {
            pool.release(chunk);
            return false;
        };
        filler.begin_batch();
        self.held.clear();
        self.held.extend(block.packets().map(|pkt| Held {
            ts: u64::from(pkt.sec) * 1_000_000_000 + u64::from(pkt.nsec),
            offset: pkt.offset,
            len: pkt.data.len(),
            wire: pkt.wire_len,
            tag: stripped_tag(&pkt),
        }));
        let holds = chunk.hold(block);
        debug_assert!(holds, "a free chunk holds no block");
        for p in &self.held {
            let (mut offset, mut len, mut wire) = (p.offset, p.len, p.wire);
            if let Some(tag) = p.tag {
                let room = offset.checked_sub(4).map(|at| at..offset + 12);
                if let Some(b) = room.and_then(|r| chunk.block_mut(r)) {
                    b.copy_within(4..16, 0);
                    b[12..].copy_from_slice(&tag);
                    (offset, len, wire) = (offset - 4, len + 4, wire + 4);
                }
            }
            filler.push_held(&mut chunk, p.ts, offset, len, wire);
        }
        filler.seal_held(pool, chunk);
        true
    }
}

/// A packet of a held block, as walked: where it lies and what the kernel said of it.
#[derive(Debug, Clone, Copy)]
struct Held {
    ts: u64,
    offset: usize,
    len: usize,
    wire: u32,
    tag: Option<[u8; 4]>,
}

impl Source for PacketSource {
    fn take_batch(&mut self, pool: &Pool, filler: &mut Filler) -> bool {
        if self.holds {
            return self.hold_batch(pool, filler);
        }
        let Some(block) = self.ring.try_next_block() else {
            return false;
        };
        filler.begin_batch();
        for pkt in block.packets() {
            let ts = u64::from(pkt.sec) * 1_000_000_000 + u64::from(pkt.nsec);
            // Put back the VLAN tag the kernel stripped, so the file shows the wire.
            match stripped_tag(&pkt) {
                Some(tag) => filler.push_copy(
                    pool,
                    ts,
                    [&pkt.data[..12], &tag, &pkt.data[12..]],
                    pkt.wire_len + 4,
                ),
                None => filler.push_copy(pool, ts, [pkt.data, &[], &[]], pkt.wire_len),
            }
        }
        true
    }

    /// Holding blocks, the kernel's `poll` cannot tell whether a new block has retired while
    /// the writer still holds the last one (see `RxRing::last_taken_held`): then it only
    /// reads a pending error (a link gone down) and looks at the next block again after a
    /// short sleep, in which at top speed a few blocks fill.
    fn poll(&self, timeout: Duration) -> Result<Readiness, SysError> {
        if !(self.holds && self.ring.last_taken_held()) {
            return self.sock.wait_readable(poll_ms(timeout));
        }
        let now = self.sock.wait_readable(0)?;
        if now == Readiness::LinkDown || self.ring.next_block_packets().is_some() {
            return Ok(now);
        }
        std::thread::sleep(timeout.min(HELD_WAIT));
        Ok(if self.ring.next_block_packets().is_some() {
            Readiness::Readable
        } else {
            Readiness::Idle
        })
    }

    /// The next retired block's count: AF_PACKET can leave a block in the ring.
    fn next_batch_len(&self) -> Option<usize> {
        self.ring.next_block_packets().map(|n| n as usize)
    }

    /// A packet becomes visible when its block retires: at most the retire timeout.
    fn visibility_delay(&self) -> Duration {
        Duration::from_millis(u64::from(self.ring.geometry().retire_timeout_ms))
    }

    fn kernel_drops(&mut self) -> Result<KernelDrops, SysError> {
        let st = self.sock.take_statistics()?;
        Ok(KernelDrops {
            kernel: st.drops,
            pool: 0,
            freezes: st.freezes,
            received: Some(st.received),
        })
    }
}

#[cfg(test)]
mod tests {
    use poolcap_sys::fault::inject;
    use poolcap_sys::socket::ifindex;

    use super::*;

    /// This process's AF_PACKET sockets: its descriptors whose socket inode is in
    /// /proc/net/packet. Counting all descriptors would race with the other tests of this
    /// crate, which open files at the same time.
    fn packet_sockets() -> usize {
        let table = std::fs::read_to_string("/proc/net/packet").unwrap();
        let inodes: Vec<&str> = table
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().last())
            .collect();
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|l| {
                let l = l.to_string_lossy();
                l.strip_prefix("socket:[")
                    .and_then(|r| r.strip_suffix(']'))
                    .is_some_and(|n| inodes.contains(&n))
            })
            .count()
    }

    /// A queue whose ring or mapping the kernel refuses fails with the call named, and gives
    /// back what it had opened (socket, ring) so a capture that cannot start leaks nothing.
    #[test]
    fn a_refused_ring_or_mapping_names_the_call_and_leaks_no_descriptor() {
        if !poolcap_sys::process::is_root() {
            eprintln!("skipped: AF_PACKET sockets need root (CI runs the suite as root)");
            return;
        }
        let lo = ifindex("lo").unwrap();
        let geometry = RingGeometry {
            block_size: 1 << 16,
            block_nr: 2,
            retire_timeout_ms: 4,
        };
        let fanout = Some((0x5a17, FanoutMode::Hash));
        let open = || PacketSource::open(lo, geometry, None, fanout, false, false);
        for call in [
            "setsockopt(PACKET_RX_RING)",
            "mmap",
            "setsockopt(PACKET_FANOUT)",
        ] {
            let before = packet_sockets();
            let plan = inject(call, libc::ENOMEM, 0, 1);
            let e = open().expect_err("the planned failure");
            drop(plan);
            assert_eq!((e.call, e.errno()), (call, Some(libc::ENOMEM)), "{e}");
            assert_eq!(packet_sockets(), before, "{call}: a socket leaked");
        }
        // With no fault the same queue opens.
        open().unwrap();
    }
}
