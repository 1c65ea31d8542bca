//! The AF_PACKET source: a fanout socket with a TPACKET_V3 ring. Each retired block's
//! packets are copied into chunks and the block goes back to the kernel at once; timestamps
//! are the kernel's, and a VLAN tag the kernel stripped is put back, so the file shows the
//! wire. The filter runs in the kernel (see `filter`).

use std::time::Duration;

use poolcap_sys::poll::Readiness;
use poolcap_sys::rx_ring::{RingGeometry, RxRing, TP_STATUS_VLAN_TPID_VALID, TP_STATUS_VLAN_VALID};
use poolcap_sys::socket::{BpfInsn, FanoutMode, PacketSocket};
use poolcap_sys::SysError;

use super::pool::Pool;
use super::source::{poll_ms, Filler, KernelDrops, Source};

/// An AF_PACKET fanout socket with its ring.
#[derive(Debug)]
pub struct PacketSource {
    sock: PacketSocket,
    ring: RxRing,
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
        Ok(Self { sock, ring })
    }
}

impl Source for PacketSource {
    fn take_batch(&mut self, pool: &Pool, filler: &mut Filler) -> bool {
        let Some(block) = self.ring.try_next_block() else {
            return false;
        };
        filler.begin_batch();
        for pkt in block.packets() {
            let ts = u64::from(pkt.sec) * 1_000_000_000 + u64::from(pkt.nsec);
            // Put back the VLAN tag the kernel stripped, so the file shows the wire.
            let mut tag = [0u8; 4];
            if pkt.status & TP_STATUS_VLAN_VALID != 0 && pkt.data.len() >= 12 {
                let tpid = if pkt.status & TP_STATUS_VLAN_TPID_VALID != 0 {
                    pkt.vlan_tpid
                } else {
                    0x8100
                };
                tag[..2].copy_from_slice(&tpid.to_be_bytes());
                tag[2..].copy_from_slice(&pkt.vlan_tci.to_be_bytes());
                filler.push_copy(
                    pool,
                    ts,
                    [&pkt.data[..12], &tag, &pkt.data[12..]],
                    pkt.wire_len + 4,
                );
            } else {
                filler.push_copy(pool, ts, [pkt.data, &[], &[]], pkt.wire_len);
            }
        }
        true
    }

    fn poll(&self, timeout: Duration) -> Result<Readiness, SysError> {
        self.sock.wait_readable(poll_ms(timeout))
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
        for call in [
            "setsockopt(PACKET_RX_RING)",
            "mmap",
            "setsockopt(PACKET_FANOUT)",
        ] {
            let before = packet_sockets();
            let plan = inject(call, libc::ENOMEM, 0, 1);
            let e = PacketSource::open(lo, geometry, None, Some((0x5a17, FanoutMode::Hash)), false)
                .expect_err("the planned failure");
            drop(plan);
            assert_eq!((e.call, e.errno()), (call, Some(libc::ENOMEM)), "{e}");
            assert_eq!(packet_sockets(), before, "{call}: a socket leaked");
        }
        // With no fault the same queue opens.
        PacketSource::open(lo, geometry, None, Some((0x5a17, FanoutMode::Hash)), false).unwrap();
    }
}
