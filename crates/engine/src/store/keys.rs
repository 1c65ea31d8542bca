//! The attributes a packet is indexed under, as Stenographer chooses them: its IP protocol,
//! its ports, its addresses (IPv4 and IPv6), plus its EtherType. Each is a key of one kind
//! byte and the value's bytes, big-endian.
//!
//! The keys only have to be a superset of what libpcap's primitives test (a query reads a
//! region of the file if any of its packets has the key, then libpcap decides), never a
//! subset: an address is indexed wherever `host`/`net` can find it (IPv4 and IPv6 headers,
//! ARP and RARP), the headers behind VLAN tags are indexed as well as the outer ones, and
//! every next-header value of an IPv6 extension chain counts as the packet's protocol.

/// Kind byte: IP protocol (1 byte).
pub const PROTO: u8 = 1;
/// Kind byte: TCP, UDP or SCTP port, source or destination (2 bytes).
pub const PORT: u8 = 2;
/// Kind byte: EtherType (2 bytes).
pub const ETHERTYPE: u8 = 3;
/// Kind byte: IPv4 address (4 bytes).
pub const V4: u8 = 4;
/// Kind byte: IPv6 address (16 bytes).
pub const V6: u8 = 6;

/// EtherTypes.
pub const ETH_IP: u16 = 0x0800;
/// IPv6.
pub const ETH_IP6: u16 = 0x86dd;
/// ARP.
pub const ETH_ARP: u16 = 0x0806;
/// RARP.
pub const ETH_RARP: u16 = 0x8035;
const ETH_VLAN: [u16; 3] = [0x8100, 0x88a8, 0x9100];

/// Bytes of a value of the kind `kind`.
pub fn width(kind: u8) -> usize {
    match kind {
        V6 => 16,
        PROTO => 1,
        PORT | ETHERTYPE => 2,
        _ => 4,
    }
}

/// A key's value (1 to 16 bytes, big-endian) as a number: compared as one by the index
/// builder, and hashed (see `sig`).
pub fn number(value: &[u8]) -> u128 {
    match *value {
        [a] => u128::from(a),
        [a, b] => u128::from(u16::from_be_bytes([a, b])),
        [a, b, c, d] => u128::from(u32::from_be_bytes([a, b, c, d])),
        _ => value.iter().fold(0, |v, &b| (v << 8) | u128::from(b)),
    }
}

/// Link types whose packets are dissected (others are indexed by time only).
pub fn dissects(linktype: u32) -> bool {
    matches!(linktype, 1 | 101 | 276)
}

/// Calls `key` with each key of the packet `data` of `linktype` (kind byte, value; repeats
/// possible). No key is allocated: the index builder calls this for every packet.
pub fn keys(linktype: u32, data: &[u8], key: &mut impl FnMut(u8, &[u8])) {
    let (ethertype, at) = match linktype {
        1 if data.len() >= 14 => (be16(data, 12), 14),
        276 if data.len() >= 20 => (be16(data, 0), 20),
        101 => match data.first().map(|b| b >> 4) {
            Some(4) => (ETH_IP, 0),
            Some(6) => (ETH_IP6, 0),
            _ => return,
        },
        _ => return,
    };
    let (mut ethertype, mut at) = (ethertype, at);
    key(ETHERTYPE, &ethertype.to_be_bytes());
    // Up to two VLAN tags; the outer EtherType was indexed, now the inner ones.
    for _ in 0..2 {
        if !ETH_VLAN.contains(&ethertype) || data.len() < at + 4 {
            break;
        }
        ethertype = be16(data, at + 2);
        at += 4;
        key(ETHERTYPE, &ethertype.to_be_bytes());
    }
    let l3 = &data[at.min(data.len())..];
    match ethertype {
        ETH_IP => ipv4(l3, key),
        ETH_IP6 => ipv6(l3, key),
        ETH_ARP | ETH_RARP => arp(l3, key),
        _ => {}
    }
}

/// [`keys`] of the packet `data`, less those the packet before it gave for sure: where
/// both are IPv4 on Ethernet without VLAN tags with the same protocol and addresses, only
/// the ports. `last` holds the packet before's EtherType, protocol and addresses in one
/// number (0: none, as when a region begins, whose signature starts empty).
///
/// Why: many packets repeat the packet before's hosts (a flow's packets come in trains;
/// the lab's generator varies only the source port), and those four keys were each a
/// lookup in the signer's table of keys seen (`sig::Signer`): noting 64-byte frames
/// between two hosts took 12.2 ns a packet on the lab's VMs, 9.2 to 10.5 with this (a
/// block of 4,096 frames noted over and over, hot in the caches); a packet that does not
/// repeat them costs one compare more. The union of the keys given over a run of packets
/// is that of [`keys`].
#[inline]
pub fn keys_after(linktype: u32, data: &[u8], last: &mut u128, key: &mut impl FnMut(u8, &[u8])) {
    if linktype == 1 && data.len() >= 14 + 20 && be16(data, 12) == ETH_IP {
        let ip = &data[14..];
        let addresses = u64::from_be_bytes(ip[12..20].try_into().expect("8 bytes"));
        let head = 1 << 127 | u128::from(ip[9]) << 64 | u128::from(addresses);
        if head == *last {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            return ports(ip[9], ip.get(ihl..).unwrap_or(&[]), key);
        }
        *last = head;
    } else {
        *last = 0;
    }
    keys(linktype, data, key);
}

fn be16(d: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([d[at], d[at + 1]])
}

#[inline]
fn ipv4(ip: &[u8], key: &mut impl FnMut(u8, &[u8])) {
    if ip.len() < 20 {
        return;
    }
    let proto = ip[9];
    key(PROTO, &[proto]);
    key(V4, &ip[12..16]);
    key(V4, &ip[16..20]);
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    ports(proto, ip.get(ihl..).unwrap_or(&[]), key);
}

fn ipv6(ip: &[u8], key: &mut impl FnMut(u8, &[u8])) {
    if ip.len() < 40 {
        return;
    }
    key(V6, &ip[8..24]);
    key(V6, &ip[24..40]);
    let (mut next, mut at) = (ip[6], 40);
    // Hop-by-hop, routing, fragment, destination options: each names the next header.
    for _ in 0..8 {
        key(PROTO, &[next]);
        if !matches!(next, 0 | 43 | 44 | 60) || ip.len() < at + 8 {
            break;
        }
        let len = if next == 44 {
            8
        } else {
            (usize::from(ip[at + 1]) + 1) * 8
        };
        next = ip[at];
        at += len;
    }
    ports(next, ip.get(at..).unwrap_or(&[]), key);
}

#[inline]
fn ports(proto: u8, l4: &[u8], key: &mut impl FnMut(u8, &[u8])) {
    if matches!(proto, 6 | 17 | 132) && l4.len() >= 4 {
        key(PORT, &l4[0..2]);
        key(PORT, &l4[2..4]);
    }
}

/// ARP/RARP for IPv4: sender and target protocol addresses.
fn arp(a: &[u8], key: &mut impl FnMut(u8, &[u8])) {
    if a.len() < 8 {
        return;
    }
    let (hlen, plen) = (usize::from(a[4]), usize::from(a[5]));
    if plen != 4 || a.len() < 8 + 2 * hlen + 8 {
        return;
    }
    key(V4, &a[8 + hlen..8 + hlen + 4]);
    key(V4, &a[8 + 2 * hlen + 4..8 + 2 * hlen + 8]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(linktype: u32, data: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        keys(linktype, data, &mut |kind, value| {
            let mut k = vec![kind];
            k.extend_from_slice(value);
            out.push(k);
        });
        out
    }

    #[test]
    fn keys_after_the_packet_before_give_every_key_of_a_run() {
        let eth = |ethertype: [u8; 2], l3: &[u8]| {
            let mut f = vec![0u8; 12];
            f.extend_from_slice(&ethertype);
            f.extend_from_slice(l3);
            f
        };
        let v4 = |proto: u8, src: u8, dst: u8, ihl: u8, sport: u8| {
            let mut ip = vec![0x40 | ihl, 0, 0, 0, 0, 0, 0, 0, 64, proto, 0, 0];
            ip.extend_from_slice(&[10, 0, 0, src, 10, 0, 0, dst]);
            ip.resize(usize::from(ihl) * 4, 0);
            ip.extend_from_slice(&[0, sport, 0, 53]);
            ip
        };
        let mut frames = Vec::new();
        for proto in [6, 17, 1] {
            for (src, dst) in [(1, 2), (2, 1), (1, 3)] {
                for ihl in [5, 6] {
                    for sport in [7, 8] {
                        frames.push(eth([8, 0], &v4(proto, src, dst, ihl, sport)));
                    }
                }
            }
        }
        let tagged = |f: &[u8]| [&f[..12], &[0x81, 0, 0, 7], &f[12..]].concat();
        frames.push(tagged(&frames[0]));
        frames.push(frames[0][..30].to_vec());
        frames.push(frames[0][..36].to_vec());
        frames.push(eth([0x86, 0xdd], &[0x60; 48]));
        let mut x = 7u64;
        for run in 0..200 {
            // A run of frames drawn from the list, repeats likely.
            let picks: Vec<&Vec<u8>> = (0..20)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    &frames[(x % if run % 2 == 0 { 4 } else { 30 }) as usize % frames.len()]
                })
                .collect();
            let (mut want, mut got) = (Vec::new(), Vec::new());
            let mut last = 0;
            for f in &picks {
                want.extend(all(1, f));
                keys_after(1, f, &mut last, &mut |kind, value| {
                    got.push([&[kind], value].concat());
                });
            }
            want.sort();
            want.dedup();
            got.sort();
            got.dedup();
            assert_eq!(got, want, "run {run}");
        }
    }

    #[test]
    fn a_tagged_udp_packet_has_its_inner_addresses_ports_and_protocol() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x81, 0x00, 0, 7, 0x08, 0x00]);
        let mut ip = vec![
            0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        ip.extend_from_slice(&[0x30, 0x39, 0, 53, 0, 8, 0, 0]);
        f.extend_from_slice(&ip);
        let k = all(1, &f);
        for want in [
            vec![ETHERTYPE, 0x81, 0x00],
            vec![ETHERTYPE, 0x08, 0x00],
            vec![PROTO, 17],
            vec![V4, 10, 0, 0, 1],
            vec![V4, 10, 0, 0, 2],
            vec![PORT, 0x30, 0x39],
            vec![PORT, 0, 53],
        ] {
            assert!(k.contains(&want), "{want:?} in {k:?}");
        }
        assert_eq!(all(1, &f[..20]).len(), 2, "cut short: only what is there");
    }
}
