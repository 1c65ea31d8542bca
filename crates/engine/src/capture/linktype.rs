//! The link type of a live interface: what the first bytes of its packets are, from the
//! interface's hardware type (ARPHRD_, asked of the kernel), mapped as libpcap maps it, so a file
//! written here is decoded by Wireshark and tcpdump as the same capture by tcpdump would be.
//! Capturing on every interface at once (`-i any`) takes packets from a cooked socket,
//! which describes each packet's link beside it, and writes LINUX_SLL2.

use poolcap_format::LinkType;

use super::error::CaptureError;

/// The interface name that means every interface (as tcpdump's `-i any`).
pub const ANY: &str = "any";

// ARPHRD_ values (include/uapi/linux/if_arp.h).
const ARPHRD_ETHER: u16 = 1;
const ARPHRD_CAN: u16 = 280;
const ARPHRD_PPP: u16 = 512;
const ARPHRD_RAWIP: u16 = 519;
const ARPHRD_TUNNEL: u16 = 768;
const ARPHRD_TUNNEL6: u16 = 769;
const ARPHRD_LOOPBACK: u16 = 772;
const ARPHRD_SIT: u16 = 776;
const ARPHRD_IPGRE: u16 = 778;
const ARPHRD_IEEE80211: u16 = 801;
const ARPHRD_IEEE80211_RADIOTAP: u16 = 803;
const ARPHRD_IP6GRE: u16 = 823;
const ARPHRD_NONE: u16 = 0xfffe;

/// The link type of packets from an interface of hardware type `arphrd`, if poolcap
/// handles it. Loopback carries a zeroed Ethernet header; devices without a link-layer
/// header (tun, WireGuard, point-to-point tunnels, PPP) deliver the IP packet itself.
pub fn of_arphrd(arphrd: u16) -> Option<LinkType> {
    Some(match arphrd {
        ARPHRD_ETHER | ARPHRD_LOOPBACK => LinkType::ETHERNET,
        ARPHRD_NONE | ARPHRD_RAWIP | ARPHRD_TUNNEL | ARPHRD_TUNNEL6 | ARPHRD_SIT | ARPHRD_IPGRE
        | ARPHRD_IP6GRE | ARPHRD_PPP => LinkType::RAW,
        ARPHRD_IEEE80211 => LinkType::IEEE802_11,
        ARPHRD_IEEE80211_RADIOTAP => LinkType::IEEE802_11_RADIOTAP,
        ARPHRD_CAN => LinkType::CAN_SOCKETCAN,
        _ => return None,
    })
}

/// The link type of a live capture on `iface` ([`ANY`]: LINUX_SLL2), or why poolcap cannot
/// capture there.
pub fn of_interface(iface: &str) -> Result<LinkType, CaptureError> {
    if iface == ANY {
        return Ok(LinkType::LINUX_SLL2);
    }
    let arphrd = poolcap_sys::socket::arphrd(iface)
        .map_err(|_| CaptureError::NoInterface(iface.to_string()))?;
    of_arphrd(arphrd).ok_or_else(|| CaptureError::LinkType {
        iface: iface.to_string(),
        arphrd,
    })
}

/// The 20-byte LINUX_SLL2 header of a packet from a cooked socket: protocol, reserved,
/// interface index, ARPHRD_ type, packet type, address length, address (all big-endian).
pub fn sll2_header(link: &poolcap_sys::rx_ring::LinkAddr) -> [u8; SLL2_LEN] {
    let mut h = [0u8; SLL2_LEN];
    h[0..2].copy_from_slice(&link.protocol);
    h[4..8].copy_from_slice(&link.ifindex.to_be_bytes());
    h[8..10].copy_from_slice(&link.hatype.to_be_bytes());
    h[10] = link.pkttype;
    h[11] = link.halen;
    h[12..20].copy_from_slice(&link.addr);
    h
}

/// Bytes of a LINUX_SLL2 header.
pub const SLL2_LEN: usize = 20;

/// A LINUX_SLL2 packet read back: what [`sll2_header`] wrote, and the network layer after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sll2<'a> {
    /// The protocol (ethertype).
    pub protocol: u16,
    /// The interface the packet came in or went out on.
    pub ifindex: u32,
    /// The direction (`sll_pkttype`: 0 to us, 1 broadcast, 2 multicast, 3 to others, 4 ours).
    pub pkttype: u8,
    /// The packet from its network header on.
    pub payload: &'a [u8],
}

impl<'a> Sll2<'a> {
    /// `packet` read as LINUX_SLL2; None when it is shorter than the header.
    pub fn parse(packet: &'a [u8]) -> Option<Self> {
        let (h, payload) = (packet.get(..SLL2_LEN)?, &packet[SLL2_LEN..]);
        Some(Sll2 {
            protocol: u16::from_be_bytes([h[0], h[1]]),
            ifindex: u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
            pkttype: h[10],
            payload,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use poolcap_sys::rx_ring::LinkAddr;

    #[test]
    fn ethernet_and_loopback_are_ethernet_and_headerless_devices_raw_ip() {
        assert_eq!(of_arphrd(1), Some(LinkType::ETHERNET));
        assert_eq!(of_arphrd(772), Some(LinkType::ETHERNET));
        for tun_like in [0xfffe, 768, 769, 776, 778, 823, 519, 512] {
            assert_eq!(
                of_arphrd(tun_like),
                Some(LinkType::RAW),
                "ARPHRD {tun_like}"
            );
        }
        assert_eq!(of_arphrd(803), Some(LinkType::IEEE802_11_RADIOTAP));
        // InfiniBand, FDDI: refused.
        assert_eq!(of_arphrd(32), None);
        assert_eq!(of_arphrd(774), None);
    }

    #[test]
    fn loopback_is_ethernet_any_is_cooked_and_a_missing_interface_is_named() {
        assert_eq!(of_interface("lo").unwrap(), LinkType::ETHERNET);
        assert_eq!(of_interface(ANY).unwrap(), LinkType::LINUX_SLL2);
        let e = of_interface("no-such-if0").unwrap_err();
        assert_eq!(e.to_string(), "no such interface `no-such-if0`");
    }

    #[test]
    fn the_sll2_header_is_big_endian_with_the_protocol_as_on_the_wire() {
        let link = LinkAddr {
            protocol: [0x08, 0x00],
            ifindex: 0x0102_0304,
            hatype: 1,
            pkttype: 4,
            halen: 6,
            addr: [2, 0, 0, 0, 0, 1, 0, 0],
        };
        let head = sll2_header(&link);
        assert_eq!(
            head,
            [8, 0, 0, 0, 1, 2, 3, 4, 0, 1, 4, 6, 2, 0, 0, 0, 0, 1, 0, 0]
        );
        let packet = [&head[..], &[0x45, 0]].concat();
        let read = Sll2::parse(&packet).unwrap();
        assert_eq!(
            (read.protocol, read.ifindex, read.pkttype, read.payload),
            (0x0800, 0x0102_0304, 4, &[0x45, 0][..])
        );
        assert_eq!(Sll2::parse(&head[..19]), None);
    }
}
