//! The AF_PACKET source: a fanout socket with a TPACKET_V3 ring. Each retired block's
//! packets are copied into chunks and the block goes back to the kernel at once; timestamps
//! are the kernel's, and on Ethernet a VLAN tag the kernel stripped is put back, so the file
//! shows the wire. The filter runs in the kernel (see `filter`).
//!
//! Each socket puts the interface in promiscuous mode for as long as it is open, unless
//! asked not to (tcpdump's `-p`): a SPAN or TAP port's frames are addressed to other hosts,
//! and a NIC not in promiscuous mode drops them before any socket sees them.
//!
//! On every interface at once (`-i any`) the socket is cooked: packets start at the network
//! header and each is given a LINUX_SLL2 header from the `sockaddr_ll` beside it (its
//! interface, link type and direction); the filter then runs here, on that framing.
//!
//! Writing a file with nothing else to do, the source holds blocks instead (see `pool`): each
//! retired block goes whole into a chunk, its frames where they lie, and back to the kernel
//! once written. A stripped VLAN tag is put back in place: the frame's first 12 bytes move 4
//! bytes forward, into the kernel's header room in front of it.

use std::time::Duration;

use poolcap_format::LinkType;
use poolcap_sys::poll::Readiness;
use poolcap_sys::rx_ring::{
    RingGeometry, RxPacket, RxRing, TP_STATUS_VLAN_TPID_VALID, TP_STATUS_VLAN_VALID,
};
use poolcap_sys::socket::{BpfInsn, FanoutMode, PacketSocket};
use poolcap_sys::SysError;

use super::bpf::Program;
use super::linktype::{sll2_header, SLL2_LEN};
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
    framing: Framing,
}

/// How a packet from the ring becomes the packet written.
#[derive(Debug)]
enum Framing {
    /// Ethernet: a stripped VLAN tag goes back in.
    Ethernet,
    /// As it lies (raw IP, 802.11, ...).
    AsIs,
    /// Every interface: a LINUX_SLL2 header in front, the filter run here on the result
    /// (`scratch` holds the framed packet for it).
    Cooked {
        filter: Option<Program>,
        scratch: Vec<u8>,
    },
}

/// How to open a queue's socket.
#[derive(Debug, Clone, Copy)]
pub struct QueueSocket<'a> {
    /// The interface; 0 for every interface (a cooked socket).
    pub ifindex: u32,
    /// Its link type (LINUX_SLL2 on every interface).
    pub linktype: LinkType,
    /// The kernel ring.
    pub geometry: RingGeometry,
    /// A program for the kernel, if any (not on every interface: see `user_filter`).
    pub filter: Option<&'a [BpfInsn]>,
    /// The filter run here on every interface, compiled for LINUX_SLL2.
    pub user_filter: Option<&'a Program>,
    /// Fanout group and mode, if several queues.
    pub fanout: Option<(u16, FanoutMode)>,
    /// Frames this host sends on the interface are not delivered.
    pub inbound_only: bool,
    /// Blocks go whole into chunks (writing only).
    pub holds: bool,
    /// Put the interface in promiscuous mode while the socket is open.
    pub promiscuous: bool,
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
    /// Opens a socket, attaches the filter (if any) and a ring before binding (so no
    /// unfiltered packet slips in), binds to the interface, asks for promiscuous mode and
    /// joins the fanout group (if any). Fanout and filter are per-packet work the kernel
    /// does on the receiving path, which on veth runs on the sender's CPU: a single queue
    /// needs no fanout, and no filter means none runs.
    pub fn open(q: &QueueSocket<'_>) -> Result<Self, SysError> {
        let cooked = q.ifindex == 0;
        let sock = if cooked {
            PacketSocket::open_cooked()?
        } else {
            PacketSocket::open()?
        };
        sock.set_tpacket_v3()?;
        if q.inbound_only {
            sock.set_ignore_outgoing()?;
        }
        if let Some(f) = q.filter {
            sock.attach_filter(f)?;
        }
        let ring = RxRing::new(&sock, q.geometry)?;
        sock.bind(q.ifindex)?;
        // libpcap does not ask for promiscuous mode on every interface either.
        if q.promiscuous && !cooked {
            sock.set_promiscuous(q.ifindex)?;
        }
        if let Some((group, mode)) = q.fanout {
            sock.join_fanout(group, mode, q.inbound_only)?;
        }
        let framing = match q.linktype {
            _ if cooked => Framing::Cooked {
                filter: q.user_filter.cloned(),
                scratch: Vec::new(),
            },
            LinkType::ETHERNET => Framing::Ethernet,
            _ => Framing::AsIs,
        };
        Ok(Self {
            sock,
            ring,
            holds: q.holds,
            held: Vec::new(),
            framing,
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
        let ethernet = matches!(self.framing, Framing::Ethernet);
        self.held.extend(block.packets().map(|pkt| Held {
            ts: u64::from(pkt.sec) * 1_000_000_000 + u64::from(pkt.nsec),
            offset: pkt.offset,
            len: pkt.data.len(),
            wire: pkt.wire_len,
            tag: if ethernet { stripped_tag(&pkt) } else { None },
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
            match &mut self.framing {
                // Put back the VLAN tag the kernel stripped, so the file shows the wire.
                Framing::Ethernet => match stripped_tag(&pkt) {
                    Some(tag) => filler.push_copy(
                        pool,
                        ts,
                        [&pkt.data[..12], &tag, &pkt.data[12..]],
                        pkt.wire_len + 4,
                    ),
                    None => filler.push_copy(pool, ts, [pkt.data, &[], &[]], pkt.wire_len),
                },
                Framing::AsIs => filler.push_copy(pool, ts, [pkt.data, &[], &[]], pkt.wire_len),
                Framing::Cooked { filter, scratch } => {
                    let Some(link) = pkt.link() else { continue };
                    let head = sll2_header(&link);
                    if let Some(f) = filter {
                        scratch.clear();
                        scratch.extend_from_slice(&head);
                        scratch.extend_from_slice(pkt.data);
                        if !f.matches_packet(scratch, pkt.wire_len + SLL2_LEN as u32) {
                            filler.tally.filtered += 1;
                            continue;
                        }
                    }
                    filler.push_copy(
                        pool,
                        ts,
                        [&head, pkt.data, &[]],
                        pkt.wire_len + SLL2_LEN as u32,
                    );
                }
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
        let q = QueueSocket {
            ifindex: lo,
            linktype: LinkType::ETHERNET,
            geometry,
            filter: None,
            user_filter: None,
            fanout: Some((0x5a17, FanoutMode::Hash)),
            inbound_only: false,
            holds: false,
            promiscuous: false,
        };
        let open = || PacketSource::open(&q);
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
