//! Link types: what each packet's bytes start with, as capture files name it (the
//! LINKTYPE_ registry that pcap headers and pcapng interface blocks carry), and the libpcap
//! DLT_ value a filter for such packets is compiled with. The two numbers differ only where
//! a DLT_ value was platform-specific (raw IP), which is why files carry LINKTYPE_ values.

use std::fmt;

/// A LINKTYPE_ value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkType(pub u16);

impl LinkType {
    /// Ethernet (also Linux loopback, which carries a zeroed Ethernet header).
    pub const ETHERNET: LinkType = LinkType(1);
    /// Raw IP, version 4 or 6 from the first nibble (tun, WireGuard, ipip, sit, gre).
    pub const RAW: LinkType = LinkType(101);
    /// 802.11 frames, no radio header.
    pub const IEEE802_11: LinkType = LinkType(105);
    /// Linux cooked capture v1 (16-byte header).
    pub const LINUX_SLL: LinkType = LinkType(113);
    /// 802.11 frames behind a radiotap header (a monitor-mode interface).
    pub const IEEE802_11_RADIOTAP: LinkType = LinkType(127);
    /// SocketCAN frames.
    pub const CAN_SOCKETCAN: LinkType = LinkType(227);
    /// Raw IPv4.
    pub const IPV4: LinkType = LinkType(228);
    /// Raw IPv6.
    pub const IPV6: LinkType = LinkType(229);
    /// Linux cooked capture v2 (20-byte header with the interface index): every interface
    /// at once (`-i any`).
    pub const LINUX_SLL2: LinkType = LinkType(276);

    /// Every link type poolcap captures, reads and writes: its LINKTYPE_, DLT_ and names.
    const KNOWN: [(LinkType, i32, &'static str, &'static str); 9] = [
        (Self::ETHERNET, 1, "EN10MB", "Ethernet"),
        (Self::RAW, 12, "RAW", "Raw IP"),
        (Self::IEEE802_11, 105, "IEEE802_11", "802.11"),
        (Self::LINUX_SLL, 113, "LINUX_SLL", "Linux cooked v1"),
        (
            Self::IEEE802_11_RADIOTAP,
            127,
            "IEEE802_11_RADIO",
            "802.11 plus radiotap header",
        ),
        (
            Self::CAN_SOCKETCAN,
            227,
            "CAN_SOCKETCAN",
            "CAN-bus with SocketCAN headers",
        ),
        (Self::IPV4, 228, "IPV4", "Raw IPv4"),
        (Self::IPV6, 229, "IPV6", "Raw IPv6"),
        (Self::LINUX_SLL2, 276, "LINUX_SLL2", "Linux cooked v2"),
    ];

    fn known(self) -> Option<&'static (LinkType, i32, &'static str, &'static str)> {
        Self::KNOWN.iter().find(|k| k.0 == self)
    }

    /// Whether poolcap handles packets of this type (filters, printing, writing).
    pub fn is_supported(self) -> bool {
        self.known().is_some()
    }

    /// The DLT_ value libpcap compiles filters for (`pcap_open_dead`), if supported.
    pub fn dlt(self) -> Option<i32> {
        self.known().map(|k| k.1)
    }

    /// The link type of a file's header value, if poolcap supports it; otherwise an error
    /// that names it.
    pub fn of_file(value: u32) -> Result<LinkType, UnsupportedLinkType> {
        u16::try_from(value)
            .ok()
            .map(LinkType)
            .filter(|l| l.is_supported())
            .ok_or(UnsupportedLinkType(value))
    }
}

/// As tcpdump names it: `EN10MB (Ethernet)`, or the number for types poolcap does not know.
impl fmt::Display for LinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.known() {
            Some((_, _, name, what)) => write!(f, "{name} ({what})"),
            None => write!(f, "LINKTYPE {}", self.0),
        }
    }
}

/// A link type poolcap cannot decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "link type {0} is not supported (poolcap reads Ethernet, raw IP, Linux cooked v1/v2, \
     802.11, radiotap and SocketCAN)"
)]
pub struct UnsupportedLinkType(pub u32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_carry_linktype_values_and_filters_take_dlt_values() {
        assert_eq!(LinkType::RAW.dlt(), Some(12));
        assert_eq!(LinkType::ETHERNET.dlt(), Some(1));
        assert_eq!(LinkType::LINUX_SLL2.dlt(), Some(276));
        assert_eq!(LinkType::RAW.to_string(), "RAW (Raw IP)");
        assert_eq!(LinkType::ETHERNET.to_string(), "EN10MB (Ethernet)");
    }

    #[test]
    fn an_unknown_file_link_type_is_refused_by_number() {
        assert_eq!(LinkType::of_file(101), Ok(LinkType::RAW));
        let e = LinkType::of_file(147).unwrap_err();
        assert!(
            e.to_string().starts_with("link type 147 is not supported"),
            "{e}"
        );
        assert!(LinkType::of_file(70_000).is_err());
        assert_eq!(LinkType(147).to_string(), "LINKTYPE 147");
    }
}
