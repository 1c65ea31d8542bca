//! Frames for tests of the flow key, built once for this crate's tests and for poolcap's
//! root tests (feature `testing`), which check the kernel translation of the key against
//! [`crate::packet::parse`] on the same odd frames.

use etherparse::PacketBuilder;

/// An Ethernet, IPv4 and UDP frame with `len` zero bytes of payload.
pub fn udp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, len: usize) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv4(src, dst, 64)
        .udp(sport, dport);
    let payload = vec![0u8; len];
    let mut out = Vec::with_capacity(b.size(len));
    b.write(&mut out, &payload).unwrap();
    out
}

/// An Ethernet, IPv6 and TCP SYN frame, behind VLAN 7 if `vlan`.
pub fn syn6(src: [u8; 16], dst: [u8; 16], vlan: bool) -> Vec<u8> {
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

/// Frames the key's definition ([`crate::packet`] docs) decides and etherparse alone would
/// not: MACsec with and without the SCI, an IPv4 ethertype carrying an IPv6 header and the
/// reverse, IPv4 total lengths 19, 0 and 20 (the header's).
pub fn odd_frames() -> Vec<Vec<u8>> {
    let v4 = udp4([1, 1, 1, 1], [2, 2, 2, 2], 5, 9, 20);
    let v6 = syn6([1; 16], [2; 16], false);
    let retyped = |f: &[u8], t: [u8; 2]| [&f[..12], &t, &f[14..]].concat();
    let total_len = |n: u16| [&v4[..16], &n.to_be_bytes()[..], &v4[18..]].concat();
    vec![
        // MACsec (SecTAG with and without the SCI), an IPv4 packet inside.
        [
            &v4[..12],
            &[0x88, 0xe5, 0x20, 0, 0, 0, 0, 1],
            &[0; 8],
            &v4[12..],
        ]
        .concat(),
        [&v4[..12], &[0x88, 0xe5, 0, 0, 0, 0, 0, 1], &v4[12..]].concat(),
        retyped(&v6, [0x08, 0x00]),
        retyped(&v4, [0x86, 0xdd]),
        total_len(19),
        total_len(0),
        total_len(20),
    ]
}
