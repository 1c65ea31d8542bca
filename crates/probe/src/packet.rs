//! What the probe reads from a frame: its 5-tuple and TCP flags, parsed once per packet with
//! etherparse's lax slicer (which accepts snaplen-truncated frames and looks through VLAN
//! tags). A frame without an IP header has no key and is only counted; an IP fragment
//! whose transport header is not in it (any fragment, as etherparse does not reassemble)
//! gets ports 0, so all fragments of one datagram fall in one flow per address pair.
//!
//! The definition of a key, which the in-kernel `flows` program follows too
//! (`poolcap_engine::probe::kernel::flowkey`), so both report alike:
//! - after at most three VLAN tags (0x8100, 0x88a8, 0x9100), the ethertype decides the
//!   family: 0x0800 must carry a version-4 header, 0x86dd a version-6 one; any other
//!   ethertype (ARP, MACsec, ...) or a header of the other version has no key, as a filter
//!   `ip` or `ip6` would not select it as such;
//! - an IPv4 header shorter than 20 bytes or cut short has no key; an IPv4 total length
//!   below the header's length (TSO frames carry 0) is not usable, and the payload runs to
//!   the data's end (as for a total length past it);
//! - the rest as etherparse's lax slicer reads it (IPv6 extension headers, ports of whole
//!   TCP and UDP headers, fragments without ports).

use std::net::IpAddr;

use etherparse::{LaxNetSlice, LaxSlicedPacket, TransportSlice};

/// A flow's 5-tuple, in the direction of the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol number (of the last header for IPv6 with extension headers).
    pub proto: u8,
    /// Source port (0 without a TCP/UDP header).
    pub sport: u16,
    /// Destination port (0 without a TCP/UDP header).
    pub dport: u16,
}

/// TCP flag bits as on the wire (FIN 0x01 .. URG 0x20).
pub mod tcp_flag {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
    /// URG.
    pub const URG: u8 = 0x20;
}

/// Flag letters as tcpdump prints them, for reports.
pub fn flag_letters(flags: u8) -> String {
    use tcp_flag::*;
    [
        (FIN, 'F'),
        (SYN, 'S'),
        (RST, 'R'),
        (PSH, 'P'),
        (ACK, '.'),
        (URG, 'U'),
    ]
    .iter()
    .filter(|(bit, _)| flags & bit != 0)
    .map(|&(_, c)| c)
    .collect()
}

/// VLAN tag protocol identifiers the parsers look through.
const TAGS: [u16; 3] = [0x8100, 0x88a8, 0x9100];

/// What a collector wants of a packet beside its key: the link-layer header's length (so
/// IP bytes are the wire bytes without it), the outer VLAN tag's id and an ICMP message's
/// type and code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed {
    /// The flow key.
    pub key: FlowKey,
    /// TCP flags (0 unless TCP).
    pub flags: u8,
    /// Bytes before the IP header: Ethernet header and VLAN tags.
    pub l2_len: u16,
    /// The outer VLAN tag's VLAN id, if the frame has a tag.
    pub vlan: Option<u16>,
    /// ICMP or ICMPv6 type and code as IPFIX's icmpTypeCode: type * 256 + code.
    pub icmp: Option<u16>,
}

/// The offset of the IP header if the ethertype after at most three tags promises the IP
/// version the header has (see the module docs); etherparse would otherwise key MACsec's
/// inner packet and go by the header's version alone.
fn ip_offset(frame: &[u8]) -> Option<usize> {
    let at = |off: usize| {
        frame
            .get(off..off + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    let mut off = 12;
    for _ in 0..=3 {
        let version = match at(off) {
            Some(t) if TAGS.contains(&t) => {
                off += 4;
                continue;
            }
            Some(0x0800) => 4,
            Some(0x86dd) => 6,
            _ => return None,
        };
        return frame
            .get(off + 2)
            .is_some_and(|b| b >> 4 == version)
            .then_some(off + 2);
    }
    None
}

/// The outer VLAN tag's id, if the frame has one.
fn outer_vlan(frame: &[u8]) -> Option<u16> {
    let tpid = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let tci = u16::from_be_bytes([*frame.get(14)?, *frame.get(15)?]);
    TAGS.contains(&tpid).then_some(tci & 0x0fff)
}

/// The frame's flow key, TCP flags and what [`Parsed`] holds, or None without an IP header.
pub fn parse(frame: &[u8]) -> Option<Parsed> {
    let l2_len = ip_offset(frame)?;
    let p = LaxSlicedPacket::from_ethernet(frame).ok()?;
    let (src, dst, payload) = match p.net.as_ref()? {
        LaxNetSlice::Ipv4(ip) => (
            IpAddr::V4(ip.header().source_addr()),
            IpAddr::V4(ip.header().destination_addr()),
            ip.payload(),
        ),
        LaxNetSlice::Ipv6(ip) => (
            IpAddr::V6(ip.header().source_addr()),
            IpAddr::V6(ip.header().destination_addr()),
            ip.payload(),
        ),
        LaxNetSlice::Arp(_) => return None,
    };
    let icmp = match &p.transport {
        Some(TransportSlice::Icmpv4(i)) => Some((i.type_u8(), i.code_u8())),
        Some(TransportSlice::Icmpv6(i)) => Some((i.type_u8(), i.code_u8())),
        _ => None,
    }
    .map(|(t, c)| u16::from(t) << 8 | u16::from(c));
    let (sport, dport, flags) = match &p.transport {
        Some(TransportSlice::Tcp(t)) => {
            use tcp_flag::*;
            let f = [
                (t.fin(), FIN),
                (t.syn(), SYN),
                (t.rst(), RST),
                (t.psh(), PSH),
                (t.ack(), ACK),
                (t.urg(), URG),
            ]
            .iter()
            .filter(|(on, _)| *on)
            .fold(0, |acc, (_, bit)| acc | bit);
            (t.source_port(), t.destination_port(), f)
        }
        Some(TransportSlice::Udp(u)) => (u.source_port(), u.destination_port(), 0),
        _ => (0, 0, 0),
    };
    Some(Parsed {
        key: FlowKey {
            src,
            dst,
            proto: payload.ip_number.0,
            sport,
            dport,
        },
        flags,
        l2_len: l2_len as u16,
        vlan: outer_vlan(frame),
        icmp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{odd_frames, syn6, udp4};
    use etherparse::PacketBuilder;

    #[test]
    fn udp_and_tcp_keys_through_vlan() {
        let p = parse(&udp4([10, 0, 0, 1], [10, 0, 0, 2], 5, 6, 10)).unwrap();
        let (k, f) = (p.key, p.flags);
        assert_eq!((p.l2_len, p.vlan, p.icmp), (14, None, None));
        assert_eq!(
            (
                k.src.to_string(),
                k.dst.to_string(),
                k.proto,
                k.sport,
                k.dport,
                f
            ),
            ("10.0.0.1".into(), "10.0.0.2".into(), 17, 5, 6, 0)
        );
        let p = parse(&syn6([1; 16], [2; 16], true)).unwrap();
        let (k, f) = (p.key, p.flags);
        assert_eq!((k.proto, k.sport, k.dport, f), (6, 1000, 80, tcp_flag::SYN));
        assert_eq!((p.l2_len, p.vlan, p.icmp), (18, Some(7), None));
        assert_eq!(flag_letters(tcp_flag::SYN | tcp_flag::ACK), "S.");
    }

    #[test]
    fn truncated_and_non_ip_frames() {
        let f = udp4([10, 0, 0, 1], [10, 0, 0, 2], 5, 6, 100);
        // Cut inside the UDP payload: still keyed (lax parsing).
        assert_eq!(parse(&f[..50]).unwrap().key.dport, 6);
        assert!(parse(&f[..10]).is_none());
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(parse(&arp).is_none());
    }

    #[test]
    fn icmp_messages_have_their_type_and_code() {
        let mut echo = Vec::new();
        PacketBuilder::ethernet2([2; 6], [4; 6])
            .single_vlan(42.try_into().unwrap())
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .icmpv4_echo_request(1, 1)
            .write(&mut echo, &[0; 8])
            .unwrap();
        let p = parse(&echo).unwrap();
        assert_eq!(
            (p.key.proto, p.icmp, p.vlan, p.l2_len),
            (1, Some(8 << 8), Some(42), 18)
        );
        let mut unreachable = Vec::new();
        PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv6([1; 16], [2; 16], 64)
            .icmpv6(etherparse::Icmpv6Type::DestinationUnreachable(
                etherparse::icmpv6::DestUnreachableCode::Port,
            ))
            .write(&mut unreachable, &[0; 8])
            .unwrap();
        let p = parse(&unreachable).unwrap();
        assert_eq!((p.key.proto, p.icmp, p.vlan), (58, Some(1 << 8 | 4), None));
    }

    #[test]
    fn the_ethertype_decides_and_a_short_total_length_is_not_used() {
        let keys: Vec<_> = odd_frames()
            .iter()
            .map(|f| parse(f).map(|p| (p.key.proto, p.key.sport, p.key.dport)))
            .collect();
        assert_eq!(
            keys,
            [
                None,
                None,
                None,
                None,
                Some((17, 5, 9)),
                Some((17, 5, 9)),
                Some((17, 0, 0))
            ]
        );
    }
}
