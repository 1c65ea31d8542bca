//! Replaying a capture file: its untrusted contents become frames the link can carry and a
//! schedule that only moves forward. Pure (no I/O, no clock), so it is unit-tested and fuzzed.
//!
//! What an operator gets, and why:
//! - A timestamp earlier than the one before it (swapped records, a clock step, a second
//!   pcapng section, Simple Packet Blocks, which carry none) is a zero gap, as tcpreplay does:
//!   the frame leaves right after the previous one. A schedule that ran backwards would make
//!   the sender wait for a due time that has already been passed by a huge (wrapped) margin.
//! - A frame the interface cannot carry (longer than its MTU plus the Ethernet header, plus a
//!   VLAN tag if the frame carries one, which is what AF_PACKET accepts) is skipped and
//!   counted: one jumbo frame in a trace must not end the replay with `EMSGSIZE`. So is a
//!   frame shorter than an Ethernet header, which the kernel refuses with `EINVAL`.
//! - Raw IP files (link types 101, 228 IPv4 and 229 IPv6) are sent behind a synthetic
//!   Ethernet header (the generator's source and destination MACs, the ethertype of the
//!   packet's IP version). tcpreplay refuses them unless given a link type; an operator who
//!   replays a tunnel or `tcpdump -i tun0` trace onto Ethernet wants the packets on the wire,
//!   and the caller says that it wrapped them. Every other link type is refused.

use poolcap_format::CaptureFile;

use super::timing::Timing;

const LINKTYPE_ETHERNET: u32 = 1;
const LINKTYPE_RAW: u32 = 101;
const LINKTYPE_IPV4: u32 = 228;
const LINKTYPE_IPV6: u32 = 229;
const ETH_HLEN: usize = 14;
const VLAN_HLEN: usize = 4;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;

/// How the frames are to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkSpec {
    /// The interface's MTU: a frame may have this plus an Ethernet header (plus a VLAN tag).
    pub mtu: usize,
    /// Source MAC of a synthetic Ethernet header.
    pub src_mac: [u8; 6],
    /// Destination MAC of a synthetic Ethernet header.
    pub dst_mac: [u8; 6],
}

/// Frames of the file that are not sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Longer than the link carries.
    pub too_big: u64,
    /// Shorter than an Ethernet header, or in a raw IP file neither IPv4 nor IPv6.
    pub malformed: u64,
}

impl Skipped {
    fn add(self, other: Skipped) -> Skipped {
        Skipped {
            too_big: self.too_big + other.too_big,
            malformed: self.malformed + other.malformed,
        }
    }

    fn times(self, n: u64) -> Skipped {
        Skipped {
            too_big: self.too_big * n,
            malformed: self.malformed * n,
        }
    }
}

/// How the file's packets become Ethernet frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encap {
    /// Already Ethernet.
    Ethernet,
    /// IP of the version in the first nibble (101).
    RawIp,
    /// IPv4 only (228).
    Ipv4,
    /// IPv6 only (229).
    Ipv6,
}

impl Encap {
    fn of(linktype: u32) -> Result<Encap, PlanError> {
        match linktype {
            LINKTYPE_ETHERNET => Ok(Encap::Ethernet),
            LINKTYPE_RAW => Ok(Encap::RawIp),
            LINKTYPE_IPV4 => Ok(Encap::Ipv4),
            LINKTYPE_IPV6 => Ok(Encap::Ipv6),
            other => Err(PlanError::Linktype(other)),
        }
    }

    /// The ethertype of a synthetic header for `packet`; None if it needs none or is not IP.
    fn ethertype(self, packet: &[u8]) -> Option<u16> {
        let version = packet.first().map(|b| b >> 4);
        match (self, version) {
            (Encap::Ethernet, _) => None,
            (Encap::RawIp | Encap::Ipv4, Some(4)) => Some(ETHERTYPE_IPV4),
            (Encap::RawIp | Encap::Ipv6, Some(6)) => Some(ETHERTYPE_IPV6),
            _ => None,
        }
    }
}

/// Why a file cannot be replayed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    /// A link type that is neither Ethernet nor raw IP.
    #[error(
        "link type {0} cannot be replayed on Ethernet (poolcap replays Ethernet, link type 1, \
         and raw IP, 101, 228 and 229, behind a synthetic Ethernet header)"
    )]
    Linktype(u32),
    /// No packets at all.
    #[error("the file holds no packets")]
    Empty,
    /// Packets, but none the link can carry.
    #[error(
        "none of its {total} packets can be sent: {} longer than the MTU of {mtu} allows, {} \
         malformed",
        skipped.too_big,
        skipped.malformed
    )]
    NothingFits {
        /// Packets in the file.
        total: usize,
        /// The interface's MTU.
        mtu: usize,
        /// Why they were skipped.
        skipped: Skipped,
    },
}

/// A replay ready to send: the frames, when each is due, and what the file needed.
#[derive(Debug)]
pub struct Plan {
    /// The frames to send, in file order.
    pub replay: Replay,
    /// Offset of each frame from the first, in ns; never decreasing.
    pub offsets_ns: Vec<u64>,
    /// How many timestamps were earlier than the one before (sent with no gap).
    pub backward_steps: u64,
    /// The raw IP link type whose packets were wrapped in a synthetic Ethernet header.
    pub wrapped: Option<u32>,
}

/// Turns a decoded capture file into frames for `link` and a forward-only schedule.
pub fn plan(file: CaptureFile, link: &LinkSpec) -> Result<Plan, PlanError> {
    let encap = Encap::of(file.linktype)?;
    if file.packets.is_empty() {
        return Err(PlanError::Empty);
    }
    let total = file.packets.len();
    let (mut frames, mut offsets_ns, mut skipped_before) = (Vec::new(), Vec::new(), Vec::new());
    let mut skipped = Skipped::default();
    let (mut clock, mut backward_steps) = (0u64, 0u64);
    let mut prev_ts = file.packets[0].ts_ns;
    for p in file.packets {
        match p.ts_ns.checked_sub(prev_ts) {
            Some(gap) => clock = clock.saturating_add(gap),
            None => backward_steps += 1,
        }
        prev_ts = p.ts_ns;
        match frame_for(encap, p.data, link) {
            Ok(frame) => {
                frames.push(frame);
                offsets_ns.push(clock);
                skipped_before.push(skipped);
            }
            Err(why) => skipped = skipped.add(why),
        }
    }
    if frames.is_empty() {
        return Err(PlanError::NothingFits {
            total,
            mtu: link.mtu,
            skipped,
        });
    }
    // Offsets count from the first frame sent, not the first in the file.
    let first = offsets_ns[0];
    offsets_ns.iter_mut().for_each(|o| *o -= first);
    Ok(Plan {
        replay: Replay {
            frames,
            skipped_before,
            per_pass: skipped,
        },
        offsets_ns,
        backward_steps,
        wrapped: (encap != Encap::Ethernet).then_some(file.linktype),
    })
}

/// The schedule of a plan's `offsets_ns` at `speed` (infinite: top speed), looped: one pass
/// lasts the last offset plus one mean gap (1 ms for a single frame).
pub fn recorded_timing(offsets_ns: Vec<u64>, speed: f64) -> Timing {
    let last = offsets_ns.last().copied().unwrap_or(0);
    let cycle_ns = match offsets_ns.len() as u64 {
        0 | 1 => 1_000_000,
        // Saturating: pcapng timestamps reach the end of u64 nanoseconds.
        n => last.saturating_add(last / (n - 1)),
    };
    Timing::Recorded {
        offsets_ns,
        cycle_ns,
        speed,
    }
}

/// The Ethernet frame for one packet, or why it is skipped.
fn frame_for(encap: Encap, packet: Vec<u8>, link: &LinkSpec) -> Result<Vec<u8>, Skipped> {
    let malformed = Skipped {
        malformed: 1,
        ..Skipped::default()
    };
    let frame = if encap == Encap::Ethernet {
        packet
    } else {
        let ethertype = encap.ethertype(&packet).ok_or(malformed)?;
        let mut f = Vec::with_capacity(ETH_HLEN + packet.len());
        f.extend_from_slice(&link.dst_mac);
        f.extend_from_slice(&link.src_mac);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(&packet);
        f
    };
    if frame.len() < ETH_HLEN {
        return Err(malformed);
    }
    let tagged = frame[12..14] == ETHERTYPE_VLAN.to_be_bytes();
    let limit = link.mtu + ETH_HLEN + if tagged { VLAN_HLEN } else { 0 };
    if frame.len() > limit {
        return Err(Skipped {
            too_big: 1,
            ..Skipped::default()
        });
    }
    Ok(frame)
}

/// The frames of a capture file, sent as recorded.
#[derive(Debug)]
pub struct Replay {
    frames: Vec<Vec<u8>>,
    /// Frames of the file skipped before frame i.
    skipped_before: Vec<Skipped>,
    /// Frames of the file skipped in one pass.
    per_pass: Skipped,
}

impl Replay {
    /// Frames per pass.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// True when no frame is sent (a [`plan`] never makes one).
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// The largest frame.
    pub fn max_len(&self) -> usize {
        self.frames.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// Writes frame `k` (of the looped sequence) into `out`; returns its length.
    #[inline]
    pub fn frame(&self, k: u64, out: &mut [u8]) -> usize {
        let f = &self.frames[(k % self.frames.len() as u64) as usize];
        out[..f.len()].copy_from_slice(f);
        f.len()
    }

    /// Frames of the file passed over once `sent` frames have been sent: every skipped frame
    /// of the whole passes, and in the current pass those before the last frame sent.
    pub fn skipped(&self, sent: u64) -> Skipped {
        let n = self.frames.len() as u64;
        let (passes, i) = (sent / n, (sent % n) as usize);
        let partial = match i {
            0 => Skipped::default(),
            i => self.skipped_before[i - 1],
        };
        self.per_pass.times(passes).add(partial)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use poolcap_format::{FileFormat, RecordedPacket};

    const LINK: LinkSpec = LinkSpec {
        mtu: 1500,
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
    };

    fn file(linktype: u32, packets: &[(u64, Vec<u8>)]) -> CaptureFile {
        CaptureFile {
            format: FileFormat::Pcap,
            linktype,
            snaplen: 0,
            odd_timestamps: 0,
            packets: packets
                .iter()
                .map(|(ts_ns, data)| RecordedPacket {
                    ts_ns: *ts_ns,
                    data: data.clone(),
                    orig_len: data.len() as u32,
                })
                .collect(),
            if_stats: None,
        }
    }

    fn eth(len: usize, ethertype: u16) -> Vec<u8> {
        let mut f = vec![0xaa; len];
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        f
    }

    #[test]
    fn backward_timestamps_are_zero_gaps() {
        let f = file(
            1,
            &[
                (5_000, eth(60, 0x0800)),
                (7_000, eth(60, 0x0800)),
                (6_999, eth(60, 0x0800)), // 1 ns back
                (9_000, eth(60, 0x0800)),
                (0, eth(60, 0x0800)), // a second section starting over
                (1_000, eth(60, 0x0800)),
            ],
        );
        let p = plan(f, &LINK).unwrap();
        assert_eq!(p.offsets_ns, [0, 2_000, 2_000, 4_001, 4_001, 5_001]);
        assert_eq!(p.backward_steps, 2);
        assert_eq!(p.wrapped, None);
    }

    #[test]
    fn frames_the_link_cannot_carry_are_skipped_and_counted() {
        let f = file(
            1,
            &[
                (0, eth(9000, 0x0800)),
                (10, eth(1514, 0x0800)),
                (20, eth(1515, 0x0800)),
                (30, eth(1518, ETHERTYPE_VLAN)),
                (40, vec![1; 13]),
                (50, eth(1519, ETHERTYPE_VLAN)),
                (60, eth(60, 0x0800)),
                (70, eth(9000, 0x0800)),
            ],
        );
        let p = plan(f, &LINK).unwrap();
        let lens: Vec<usize> = p.replay.frames.iter().map(Vec::len).collect();
        assert_eq!(lens, [1514, 1518, 60]);
        // The schedule starts at the first frame sent.
        assert_eq!(p.offsets_ns, [0, 20, 50]);
        let s = |too_big, malformed| Skipped { too_big, malformed };
        assert_eq!(p.replay.skipped(0), s(0, 0));
        assert_eq!(p.replay.skipped(1), s(1, 0));
        assert_eq!(p.replay.skipped(2), s(2, 0));
        assert_eq!(p.replay.skipped(3), s(4, 1)); // a whole pass
        assert_eq!(p.replay.skipped(7), s(9, 2));
    }

    #[test]
    fn a_file_with_nothing_to_send_is_refused() {
        assert_eq!(plan(file(1, &[]), &LINK).unwrap_err(), PlanError::Empty);
        let err = plan(file(1, &[(0, eth(9000, 0x0800)), (1, vec![])]), &LINK).unwrap_err();
        assert_eq!(
            err.to_string(),
            "none of its 2 packets can be sent: 1 longer than the MTU of 1500 allows, 1 malformed"
        );
    }

    #[test]
    fn raw_ip_is_wrapped_in_a_synthetic_ethernet_header() {
        let v4 = [0x45, 1, 2, 3];
        let v6 = [0x60, 4, 5, 6];
        let p = plan(
            file(
                101,
                &[(0, v4.to_vec()), (1, v6.to_vec()), (2, vec![0x10, 0])],
            ),
            &LINK,
        )
        .unwrap();
        assert_eq!(p.wrapped, Some(101));
        let mut want4 = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00].to_vec();
        want4.extend_from_slice(&v4);
        let mut want6 = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd].to_vec();
        want6.extend_from_slice(&v6);
        assert_eq!(p.replay.frames, [want4.clone(), want6.clone()]);
        assert_eq!(p.replay.skipped(2).malformed, 1);
        // 228 takes only IPv4, 229 only IPv6.
        let p = plan(file(228, &[(0, v4.to_vec()), (1, v6.to_vec())]), &LINK).unwrap();
        assert_eq!(p.replay.frames, [want4]);
        let p = plan(file(229, &[(0, v4.to_vec()), (1, v6.to_vec())]), &LINK).unwrap();
        assert_eq!(p.replay.frames, [want6]);
        // The synthetic header counts against the MTU.
        let mut big = vec![0u8; 1501];
        big[0] = 0x45;
        let err = plan(file(101, &[(0, big)]), &LINK).unwrap_err();
        assert!(matches!(
            err,
            PlanError::NothingFits {
                skipped: Skipped { too_big: 1, .. },
                ..
            }
        ));
    }

    #[test]
    fn other_link_types_are_refused() {
        let err = plan(file(113, &[(0, eth(60, 0x0800))]), &LINK).unwrap_err();
        assert_eq!(err, PlanError::Linktype(113));
        assert!(err
            .to_string()
            .starts_with("link type 113 cannot be replayed"));
    }
}
