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

use poolcap_format::{FileFormat, LinkType};
use poolcap_sys::poll::Readiness;
use poolcap_sys::rx_ring::{
    HeldBlock, RingGeometry, RxPacket, RxRing, TP_STATUS_VLAN_TPID_VALID, TP_STATUS_VLAN_VALID,
};
use poolcap_sys::socket::{BpfInsn, FanoutMode, PacketSocket};
use poolcap_sys::SysError;

use super::bpf::Program;
use super::linktype::{sll2_header, SLL2_LEN};
use super::pool::{HeldRoom, PacketMeta, Pool};
use super::source::{poll_ms, Filler, KernelDrops, Source};

/// The shortest sleep of a capture thread holding blocks before it looks at the ring again
/// when the kernel's `poll` cannot tell (see [`held_wait`]): a 256 KiB block fills in
/// 0.35 ms with 1514-byte frames at top speed on the veth lab.
const HELD_WAIT: Duration = Duration::from_millis(1);

/// The longest such sleep: at top speed (1514-byte frames, a 256 KiB block every 0.35 ms)
/// about 30 blocks fill meanwhile, well within the default ring (36 MiB: 144 blocks) with
/// the writer's held share of the pool (16 of 64 chunks) besides.
const HELD_WAIT_MAX: Duration = Duration::from_millis(10);

/// How long to sleep before looking at the ring again while the newest block taken is still
/// held (by the file writer, until its batch is written), so `poll` cannot say when the
/// next block retires: about as long as the last block took to fill, first packet to last,
/// since at that rate the next one retires then (or by the retire timeout, later still);
/// within [`HELD_WAIT`] and [`HELD_WAIT_MAX`], and never past `timeout`. A fixed 1 ms sleep
/// woke the thread ~770 times a second writing 64-byte frames at 100k pps with direct I/O
/// (whose writer holds blocks up to 50 ms), where a block fills in about 18 ms.
fn held_wait(last_fill: Duration, timeout: Duration) -> Duration {
    last_fill.clamp(HELD_WAIT, HELD_WAIT_MAX).min(timeout)
}

/// An AF_PACKET fanout socket with its ring.
#[derive(Debug)]
pub struct PacketSource {
    sock: PacketSocket,
    ring: RxRing,
    /// Blocks go whole into chunks (a pool of blocks) instead of being copied out.
    holds: bool,
    /// The walk of the block being held.
    walk: HeldWalk,
    /// How long the last block held took to fill, its first packet to its last.
    last_fill: Duration,
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
            walk: HeldWalk::default(),
            last_fill: Duration::ZERO,
            framing,
        })
    }

    /// Takes the next retired block whole into a free chunk (see the module docs); false
    /// if there is no block or no free chunk (the block then stays in the ring).
    fn hold_batch(&mut self, pool: &Pool, filler: &mut Filler) -> bool {
        let Some(mut chunk) = pool.take_free() else {
            return false;
        };
        let Some(records) = chunk.held_records() else {
            pool.release(chunk);
            return false;
        };
        let Some(mut block) = self.ring.hold_next() else {
            pool.release(chunk);
            return false;
        };
        filler.begin_batch();
        let ethernet = matches!(self.framing, Framing::Ethernet);
        self.walk.take(&mut block, records, ethernet, filler);
        let holds = chunk.hold(block, &mut self.walk.meta);
        debug_assert!(holds, "a free chunk holds no block");
        if let Some(last) = chunk.len().checked_sub(1) {
            let span = chunk.meta(last).ts_ns.saturating_sub(chunk.meta(0).ts_ns);
            self.last_fill = Duration::from_nanos(span);
        }
        filler.seal_held(pool, chunk);
        true
    }
}

/// The one walk of a held block: each packet's metadata goes straight into the list its
/// chunk takes whole ([`Chunk::hold`](super::pool::Chunk::hold)), and the stripped VLAN
/// tags are put back once the walk is over. (A list of the packets walked, pushed into the
/// chunk in a second pass, took about 15% of the capture thread's time at 64-byte frames.)
#[derive(Debug, Default)]
struct HeldWalk {
    /// The packets of the block being held, as they will be in its chunk.
    meta: Vec<PacketMeta>,
    /// Where the frames whose tag goes back start, and their tags.
    tags: Vec<(usize, [u8; 4])>,
}

impl HeldWalk {
    /// Walks `block`, written as `records`, once (see [`HeldWalk`]); on Ethernet a
    /// stripped tag goes back in place: the frame's first 12 bytes move 4 bytes forward,
    /// into the kernel's header room in front of it.
    fn take(
        &mut self,
        block: &mut HeldBlock,
        records: FileFormat,
        ethernet: bool,
        filler: &mut Filler,
    ) {
        self.meta.clear();
        self.tags.clear();
        let room = HeldRoom::new(block, records);
        for pkt in block.packets() {
            let ts = u64::from(pkt.sec) * 1_000_000_000 + u64::from(pkt.nsec);
            let (mut offset, mut len, mut wire) = (pkt.offset, pkt.data.len(), pkt.wire_len);
            if let Some(tag) = stripped_tag(&pkt).filter(|_| ethernet && offset >= 4) {
                self.tags.push((offset, tag));
                (offset, len, wire) = (offset - 4, len + 4, wire + 4);
            }
            filler.push_held(&mut self.meta, &room, ts, offset, len, wire);
        }
        for &(offset, tag) in &self.tags {
            let b = block.bytes_mut(offset - 4..offset + 12);
            b.copy_within(4..16, 0);
            b[12..].copy_from_slice(&tag);
        }
    }
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
    /// reads a pending error (a link gone down) and looks at the next block again after
    /// about the time the last block took to fill (`held_wait`).
    fn poll(&self, timeout: Duration) -> Result<Readiness, SysError> {
        if !(self.holds && self.ring.last_taken_held()) {
            return self.sock.wait_readable(poll_ms(timeout));
        }
        let now = self.sock.wait_readable(0)?;
        if now == Readiness::LinkDown || self.ring.next_block_packets().is_some() {
            return Ok(now);
        }
        std::thread::sleep(held_wait(self.last_fill, timeout));
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

#[cfg(test)]
mod held_tests {
    //! The held path (one walk of a ring block into its chunk, then the file writer framing
    //! and copying records from it) writes the bytes the per-packet writer writes for the
    //! same packets.

    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Mutex};

    use crossbeam_queue::ArrayQueue;
    use poolcap_format::{CaptureWriter, FileHeader, IfStats, LinkType};
    use poolcap_sys::rx_ring::{block_packets, HeldBlock};

    use super::*;
    use crate::capture::end::Cut;
    use crate::capture::pool::PoolSize;
    use crate::capture::progress::Progress;
    use crate::capture::savefile::{FileSpec, Savefiles};
    use crate::capture::testsink::Shared;
    use crate::capture::writer::FileWriter;

    /// A frame as the kernel puts it in a block: its bytes, length on the wire, time, and
    /// the VLAN tag (TPID, TCI) the kernel stripped, if any.
    struct Frame {
        data: Vec<u8>,
        wire: u32,
        ts_ns: u64,
        tag: Option<(u16, u16)>,
    }

    fn frame(len: usize, ts_ns: u64, tag: Option<(u16, u16)>) -> Frame {
        Frame {
            data: (0..len).map(|i| (i as u64 + ts_ns) as u8).collect(),
            wire: len as u32 + 7, // a snaplen the kernel applied: caplen < wire
            ts_ns,
            tag,
        }
    }

    /// A 64 KiB TPACKET_V3 block laid out as the kernel lays it out: the block descriptor
    /// (48 bytes), then each frame's header (48), its `sockaddr_ll` (20) and the frame at
    /// offset 82, frames 8-byte aligned.
    fn block(frames: &[Frame]) -> Vec<u8> {
        let mut b = vec![0u8; 64 << 10];
        let put =
            |b: &mut Vec<u8>, at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        let mut at = 48;
        for (i, f) in frames.iter().enumerate() {
            let mac = 82;
            let next = (mac + f.data.len()).next_multiple_of(8);
            let last = i + 1 == frames.len();
            put(&mut b, at, if last { 0 } else { next as u32 });
            put(&mut b, at + 4, (f.ts_ns / 1_000_000_000) as u32);
            put(&mut b, at + 8, (f.ts_ns % 1_000_000_000) as u32);
            put(&mut b, at + 12, f.data.len() as u32);
            put(&mut b, at + 16, f.wire);
            if let Some((tpid, tci)) = f.tag {
                put(
                    &mut b,
                    at + 20,
                    TP_STATUS_VLAN_VALID | TP_STATUS_VLAN_TPID_VALID,
                );
                put(&mut b, at + 32, u32::from(tci));
                b[at + 36..at + 38].copy_from_slice(&tpid.to_ne_bytes());
            }
            b[at + 24..at + 26].copy_from_slice(&(mac as u16).to_ne_bytes());
            b[at + mac..at + mac + f.data.len()].copy_from_slice(&f.data);
            at += next;
        }
        put(&mut b, 12, frames.len() as u32);
        put(&mut b, 16, 48);
        put(&mut b, 20, at as u32);
        b
    }

    /// Blocks of small and large frames, some of whose tags the kernel stripped; the last
    /// small frame of the first block is tagged, and the second block starts with a large
    /// tagged frame.
    fn blocks() -> Vec<Vec<u8>> {
        let t0 = 1_700_000_000_000_000_000;
        let tag = Some((0x8100, 0x0064));
        let first: Vec<Frame> = (0..40)
            .map(|i| frame([60, 64, 1514, 200][i % 4], t0 + i as u64, None))
            .chain([frame(64, t0 + 40, tag)])
            .collect();
        let second = vec![
            frame(1514, t0 + 41, Some((0x88a8, 0x0fff))),
            frame(64, t0 + 42, None),
            frame(120, t0 + 43, tag),
            frame(600, t0 + 44, None),
        ];
        vec![block(&first), block(&second)]
    }

    /// The file the per-packet writer makes of `blocks`' packets: each tag put back, each
    /// packet cut to `snaplen`.
    fn written_per_packet(
        format: FileFormat,
        header: &FileHeader,
        blocks: &[Vec<u8>],
        snaplen: usize,
    ) -> Vec<u8> {
        let mut w = CaptureWriter::with_header(Vec::new(), format, header).unwrap();
        for b in blocks {
            for p in block_packets(b) {
                let ts = u64::from(p.sec) * 1_000_000_000 + u64::from(p.nsec);
                let (data, wire) = match stripped_tag(&p) {
                    Some(tag) => (
                        [&p.data[..12], &tag, &p.data[12..]].concat(),
                        p.wire_len + 4,
                    ),
                    None => (p.data.to_vec(), p.wire_len),
                };
                w.write_packet(ts, &data[..data.len().min(snaplen)], wire)
                    .unwrap();
            }
        }
        w.finish(None).unwrap()
    }

    #[test]
    fn holding_the_newest_block_sleeps_about_as_long_as_the_last_block_took_to_fill() {
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        // The capture thread's wait with nothing pending.
        let idle = ms(50);
        // 64-byte frames at 100k pps: a 256 KiB block fills in about 18 ms; looking every
        // millisecond woke the thread ~18 times per block.
        assert_eq!(held_wait(ms(18), idle), HELD_WAIT_MAX);
        assert_eq!(
            held_wait(ms(6), idle),
            ms(6),
            "300k pps: one look per block"
        );
        // 1514-byte frames at top speed: as often as before.
        assert_eq!(held_wait(us(350), idle), HELD_WAIT);
        assert_eq!(held_wait(Duration::ZERO, idle), HELD_WAIT, "one packet");
        assert_eq!(held_wait(ms(6), ms(4)), ms(4), "never past the timeout");
    }

    /// What the held path writes of `blocks`: each walked into a chunk of a pool of blocks,
    /// then written by the file writer in batches of `batch_bytes`.
    fn written_held(
        format: FileFormat,
        header: &FileHeader,
        blocks: &[Vec<u8>],
        snaplen: usize,
        batch_bytes: usize,
    ) -> Vec<u8> {
        let size = PoolSize {
            cells: 1024,
            chunks: 4,
            cell_size: 0,
        };
        let pool = Arc::new(Pool::of_blocks(0, size, 4, format));
        let mut filler = Filler::new(snaplen, 4, None, Arc::new(Cut::default()), None);
        let mut walk = HeldWalk::default();
        let input = Arc::new(ArrayQueue::new(4));
        let mut packets = 0;
        for (seq, bytes) in blocks.iter().enumerate() {
            let mut block = HeldBlock::copy_of(bytes).unwrap();
            let mut chunk = pool.take_free().unwrap();
            filler.begin_batch();
            walk.take(&mut block, format, true, &mut filler);
            assert!(chunk.hold(block, &mut walk.meta));
            filler.seal_held(&pool, chunk);
            for mut c in filler.full.drain(..) {
                c.seq = seq as u64;
                input.push(c).unwrap();
            }
            packets += block_packets(bytes).count() as u64;
        }
        let t = std::mem::take(&mut filler.tally);
        assert_eq!((t.captured, t.dropped_pool, t.not_taken), (packets, 0, 0));
        let file = Shared::default();
        let spec = FileSpec::plain(format, header.clone());
        let out = Savefiles::new(
            spec.clone(),
            spec.start(Box::new(file.clone())).unwrap(),
            None,
            None,
        );
        let w = FileWriter {
            out,
            input,
            pools: Arc::new(vec![Arc::clone(&pool)]),
            progress: vec![Arc::new(Mutex::new(Progress {
                sealed: blocks.len() as u64,
                watermark_ns: u64::MAX,
            }))],
            workers_done: Arc::new(AtomicBool::new(true)),
            limit: None,
            stop: crate::capture::wakeup::Stopper::unsupervised(),
            bell: Arc::default(),
            batch_bytes,
            min_write: 0,
            failed: Arc::default(),
            written: Arc::default(),
        };
        let outcome = w.run(IfStats::default);
        assert_eq!((outcome.written, outcome.not_written), (packets, 0));
        assert_eq!(pool.in_use(), 0, "every block went back");
        file.bytes()
    }

    #[test]
    fn a_held_block_walked_once_is_written_as_the_per_packet_writer_writes_it() {
        let blocks = blocks();
        for format in [FileFormat::PcapNs, FileFormat::Pcap, FileFormat::Pcapng] {
            for snaplen in [262_144, 100, 40] {
                // 700 bytes: batches end inside blocks and blocks inside batches.
                for batch_bytes in [700, 256 << 10] {
                    let case =
                        format!("{format}, snaplen {snaplen}, batches of {batch_bytes} bytes");
                    let header = FileHeader::new(LinkType::ETHERNET, snaplen as u32, "t0");
                    let want = written_per_packet(format, &header, &blocks, snaplen);
                    let got = written_held(format, &header, &blocks, snaplen, batch_bytes);
                    // pcapng ends with the statistics block the writer adds at the close.
                    let isb = match format {
                        FileFormat::Pcapng => {
                            u32::from_ne_bytes(got[want.len() + 4..][..4].try_into().unwrap())
                                as usize
                        }
                        _ => 0,
                    };
                    assert_eq!(got.len(), want.len() + isb, "{case}");
                    assert!(got[..want.len()] == want[..], "{case}: the records differ");
                }
            }
        }
    }
}
