//! What the probe reads from a frame: its 5-tuple and TCP flags, parsed once per packet with
//! etherparse's lax slicer (which accepts snaplen-truncated frames and looks through VLAN
//! tags). A frame without an IP header has no key and is only counted; an IP fragment
//! whose transport header is not in it (any fragment, as etherparse does not reassemble)
//! gets ports 0, so all fragments of one datagram fall in one flow per address pair.

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

/// The frame's flow key and TCP flags (0 unless TCP), or None without an IP header.
pub fn parse(frame: &[u8]) -> Option<(FlowKey, u8)> {
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
    Some((
        FlowKey {
            src,
            dst,
            proto: payload.ip_number.0,
            sport,
            dport,
        },
        flags,
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    pub(crate) fn udp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, len: usize) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv4(src, dst, 64)
            .udp(sport, dport);
        let payload = vec![0u8; len];
        let mut out = Vec::with_capacity(b.size(len));
        b.write(&mut out, &payload).unwrap();
        out
    }

    pub(crate) fn syn6(src: [u8; 16], dst: [u8; 16], vlan: bool) -> Vec<u8> {
        let mut out = Vec::new();
        if vlan {
            PacketBuilder::ethernet2([2; 6], [4; 6])
                .single_vlan(7.try_into().unwrap())
                .ipv6(src, dst, 64)
                .tcp(1000, 80, 1, 1000)
                .syn()
                .write(&mut out, &[])
                .unwrap();
        } else {
            PacketBuilder::ethernet2([2; 6], [4; 6])
                .ipv6(src, dst, 64)
                .tcp(1000, 80, 1, 1000)
                .syn()
                .write(&mut out, &[])
                .unwrap();
        }
        out
    }

    #[test]
    fn udp_and_tcp_keys_through_vlan() {
        let (k, f) = parse(&udp4([10, 0, 0, 1], [10, 0, 0, 2], 5, 6, 10)).unwrap();
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
        let (k, f) = parse(&syn6([1; 16], [2; 16], true)).unwrap();
        assert_eq!((k.proto, k.sport, k.dport, f), (6, 1000, 80, tcp_flag::SYN));
        assert_eq!(flag_letters(tcp_flag::SYN | tcp_flag::ACK), "S.");
    }

    #[test]
    fn truncated_and_non_ip_frames() {
        let f = udp4([10, 0, 0, 1], [10, 0, 0, 2], 5, 6, 100);
        // Cut inside the UDP payload: still keyed (lax parsing).
        assert_eq!(parse(&f[..50]).unwrap().0.dport, 6);
        assert!(parse(&f[..10]).is_none());
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(parse(&arp).is_none());
    }
}
