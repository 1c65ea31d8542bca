//! Generator frames: Ethernet / IPv4 / UDP templates whose payload carries a tag (magic,
//! generator id, 64-bit sequence number), so a capture can be checked for loss, duplication
//! and reordering frame by frame.
//!
//! Two tag layouts: "PCG1" (16 bytes: magic, generator id, sequence number) and "PCG2", the
//! same followed by the low 48 bits of the send time in nanoseconds of CLOCK_REALTIME
//! (22 bytes). 48 bits of nanoseconds wrap every 78 hours, far beyond any one-way latency, so
//! a checker recovers the latency from a capture timestamp on the same clock modulo 2^48.
//! PCG2 fits a 64-byte frame exactly; smaller frames (60..63 bytes) carry PCG1 and no send
//! time, and files written by older generators (PCG1 only) still parse.
//!
//! A [`FrameTemplate`] is built once per flow and frame size; stamping a sequence number into
//! a copy costs a memcpy and an incremental UDP checksum update (RFC 1624), never a full
//! checksum pass, so the generator's per-frame work stays constant whatever the frame size.

use std::net::Ipv4Addr;

/// Magic that starts a tag without a send time: "PCG1".
pub const TAG_MAGIC: u32 = 0x5043_4731;
/// Magic that starts a tag with a send time: "PCG2".
pub const TAG_MAGIC_STAMPED: u32 = 0x5043_4732;
/// Ethernet + IPv4 + UDP header bytes.
pub const HEADER_LEN: usize = 14 + 20 + 8;
/// Bytes of the tag at the start of the UDP payload: magic, generator id, sequence number.
pub const TAG_LEN: usize = 16;
/// Bytes of a stamped tag: [`TAG_LEN`] and the 48-bit send time.
pub const STAMPED_TAG_LEN: usize = TAG_LEN + 6;
/// Bits of the send time a stamped tag keeps.
pub const STAMP_BITS: u32 = 48;
const STAMP_MASK: u64 = (1 << STAMP_BITS) - 1;
/// Smallest frame (Ethernet minimum without FCS).
pub const MIN_FRAME: usize = 60;
/// Largest frame (jumbo).
pub const MAX_FRAME: usize = 9000;

const ETH_IPV4: u16 = 0x0800;
const ETH_VLAN: u16 = 0x8100;
const IP_UDP: u8 = 17;
const IP_OFF: usize = 14;
const UDP_OFF: usize = 34;
const TAG_OFF: usize = HEADER_LEN;
const SEQ_OFF: usize = TAG_OFF + 8;
const STAMP_OFF: usize = TAG_OFF + TAG_LEN;

/// Addresses and ports of one flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowAddr {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source IPv4 address.
    pub src_ip: Ipv4Addr,
    /// Destination IPv4 address.
    pub dst_ip: Ipv4Addr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
}

/// The Internet checksum's running sum over `data` (big-endian 16-bit words), unfolded.
pub fn sum_words(data: &[u8]) -> u32 {
    let mut sum = 0u32;
    let mut chunks = data.chunks_exact(2);
    for w in &mut chunks {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    sum
}

/// Folds a running sum into the one's-complement checksum.
pub fn fold_checksum(mut sum: u32) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A ready-made frame for one flow and length, with sequence number 0.
#[derive(Debug, Clone)]
pub struct FrameTemplate {
    bytes: Vec<u8>,
    /// UDP checksum running sum (pseudo header + segment) with seq = 0, send time 0 and
    /// checksum = 0.
    udp_sum: u32,
    /// Whether the frame has room for a send time (PCG2).
    stamped: bool,
}

impl FrameTemplate {
    /// Builds a frame of `frame_len` bytes (clamped to [`MIN_FRAME`]..=[`MAX_FRAME`]).
    pub fn new(addr: &FlowAddr, frame_len: usize, gen_id: u32) -> Self {
        let len = frame_len.clamp(MIN_FRAME, MAX_FRAME);
        let mut b = vec![0u8; len];
        b[0..6].copy_from_slice(&addr.dst_mac);
        b[6..12].copy_from_slice(&addr.src_mac);
        b[12..14].copy_from_slice(&ETH_IPV4.to_be_bytes());
        let ip_len = (len - IP_OFF) as u16;
        let ip = &mut b[IP_OFF..UDP_OFF];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
        ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // don't fragment
        ip[8] = 64;
        ip[9] = IP_UDP;
        ip[12..16].copy_from_slice(&addr.src_ip.octets());
        ip[16..20].copy_from_slice(&addr.dst_ip.octets());
        let ip_sum = fold_checksum(sum_words(ip));
        ip[10..12].copy_from_slice(&ip_sum.to_be_bytes());
        let udp_len = (len - UDP_OFF) as u16;
        let udp = &mut b[UDP_OFF..];
        udp[0..2].copy_from_slice(&addr.src_port.to_be_bytes());
        udp[2..4].copy_from_slice(&addr.dst_port.to_be_bytes());
        udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
        let stamped = len >= TAG_OFF + STAMPED_TAG_LEN;
        let (magic, tag_len) = if stamped {
            (TAG_MAGIC_STAMPED, STAMPED_TAG_LEN)
        } else {
            (TAG_MAGIC, TAG_LEN)
        };
        b[TAG_OFF..TAG_OFF + 4].copy_from_slice(&magic.to_be_bytes());
        b[TAG_OFF + 4..TAG_OFF + 8].copy_from_slice(&gen_id.to_be_bytes());
        // A recognisable filler after the tag.
        for (i, x) in b[TAG_OFF + tag_len..].iter_mut().enumerate() {
            *x = i as u8;
        }
        let mut pseudo = [0u8; 12];
        pseudo[0..4].copy_from_slice(&addr.src_ip.octets());
        pseudo[4..8].copy_from_slice(&addr.dst_ip.octets());
        pseudo[9] = IP_UDP;
        pseudo[10..12].copy_from_slice(&udp_len.to_be_bytes());
        let udp_sum = sum_words(&pseudo) + sum_words(&b[UDP_OFF..]);
        Self {
            bytes: b,
            udp_sum,
            stamped,
        }
    }

    /// Frame length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: a template holds at least [`MIN_FRAME`] bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Whether frames of this template carry a send time (PCG2).
    pub fn is_stamped(&self) -> bool {
        self.stamped
    }

    /// Writes the frame with sequence number `seq` into `out[..self.len()]`, with send time 0
    /// (read back as "no send time").
    pub fn stamp_into(&self, out: &mut [u8], seq: u64) {
        self.stamp_sent_into(out, seq, 0);
    }

    /// Writes the frame with sequence number `seq` and send time `sent_ns` (nanoseconds of
    /// CLOCK_REALTIME; only its low 48 bits are kept, and only if the frame has room) into
    /// `out[..self.len()]`.
    pub fn stamp_sent_into(&self, out: &mut [u8], seq: u64, sent_ns: u64) {
        let out = &mut out[..self.bytes.len()];
        out.copy_from_slice(&self.bytes);
        out[SEQ_OFF..SEQ_OFF + 8].copy_from_slice(&seq.to_be_bytes());
        // The sequence number and the send time start on even offsets of the UDP segment, so
        // their 16-bit words add straight into the running sum.
        let words = |v: u64| (v >> 48) + ((v >> 32) & 0xffff) + ((v >> 16) & 0xffff) + (v & 0xffff);
        let mut s = words(seq);
        if self.stamped {
            let stamp = sent_ns & STAMP_MASK;
            out[STAMP_OFF..STAMP_OFF + 6].copy_from_slice(&stamp.to_be_bytes()[2..]);
            s += words(stamp);
        }
        let mut sum = u64::from(self.udp_sum) + s;
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        let mut csum = !(sum as u16);
        if csum == 0 {
            csum = 0xffff; // 0 means "no checksum" in UDP over IPv4
        }
        out[UDP_OFF + 6..UDP_OFF + 8].copy_from_slice(&csum.to_be_bytes());
    }
}

/// The tag found in a generator frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tag {
    /// Which generator sent it.
    pub gen_id: u32,
    /// Its sequence number.
    pub seq: u64,
    /// Its flow: the UDP source port (the generator's flows differ in it).
    pub flow: u16,
    /// The low 48 bits of its send time in nanoseconds (CLOCK_REALTIME), if it carries one.
    pub sent_ns: Option<u64>,
}

/// One-way latency in nanoseconds of a frame sent at `sent_ns` (the low 48 bits a tag keeps)
/// and captured at `captured_ns` (full nanoseconds since the epoch, same clock): the
/// difference modulo 2^48, negative if the capture time is earlier than the send time.
pub fn latency_ns(sent_ns: u64, captured_ns: u64) -> i64 {
    let d = captured_ns.wrapping_sub(sent_ns) & STAMP_MASK;
    if d >= 1 << (STAMP_BITS - 1) {
        d as i64 - (1i64 << STAMP_BITS)
    } else {
        d as i64
    }
}

/// Reads the tag of a generator frame (Ethernet, optionally one 802.1Q tag, IPv4, UDP).
/// Returns `None` for any other frame or one truncated before the end of the tag.
pub fn parse_tag(frame: &[u8]) -> Option<Tag> {
    let mut off = 12;
    let mut ethertype = u16::from_be_bytes(frame.get(off..off + 2)?.try_into().ok()?);
    if ethertype == ETH_VLAN {
        off += 4;
        ethertype = u16::from_be_bytes(frame.get(off..off + 2)?.try_into().ok()?);
    }
    if ethertype != ETH_IPV4 {
        return None;
    }
    let ip = frame.get(off + 2..)?;
    let ihl = usize::from(ip.first()? & 0x0f) * 4;
    if ip.first()? >> 4 != 4 || ihl < 20 || *ip.get(9)? != IP_UDP {
        return None;
    }
    let payload = ip.get(ihl + 8..)?;
    let sent_ns = match u32::from_be_bytes(payload.get(0..4)?.try_into().ok()?) {
        TAG_MAGIC => None,
        TAG_MAGIC_STAMPED => {
            // A frame cut by a snaplen inside the send time keeps its sequence number. 0 is
            // what a template writes when no send time was given.
            payload.get(TAG_LEN..STAMPED_TAG_LEN).and_then(|t| {
                let mut b = [0u8; 8];
                b[2..].copy_from_slice(t);
                Some(u64::from_be_bytes(b)).filter(|&t| t != 0)
            })
        }
        _ => return None,
    };
    Some(Tag {
        gen_id: u32::from_be_bytes(payload.get(4..8)?.try_into().ok()?),
        seq: u64::from_be_bytes(payload.get(8..16)?.try_into().ok()?),
        flow: u16::from_be_bytes(ip.get(ihl..ihl + 2)?.try_into().ok()?),
        sent_ns,
    })
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.trim().split(':').collect();
    let mut mac = [0u8; 6];
    if parts.len() != 6 {
        return Err(format!("`{s}` is not a MAC address"));
    }
    for (m, p) in mac.iter_mut().zip(parts) {
        *m = u8::from_str_radix(p, 16).map_err(|_| format!("`{s}` is not a MAC address"))?;
    }
    Ok(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> FlowAddr {
        FlowAddr {
            src_mac: [2, 0x70, 0x63, 0, 0, 1],
            dst_mac: [2, 0x70, 0x63, 0, 0, 0xff],
            src_ip: Ipv4Addr::new(10, 77, 0, 1),
            dst_ip: Ipv4Addr::new(10, 77, 0, 2),
            src_port: 1234,
            dst_port: 9,
        }
    }

    /// Recomputes the UDP checksum from scratch, the slow and obvious way.
    fn full_udp_checksum(f: &[u8]) -> u16 {
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&f[26..34]);
        pseudo.extend_from_slice(&[0, IP_UDP]);
        pseudo.extend_from_slice(&f[38..40]);
        let mut seg = f[UDP_OFF..].to_vec();
        seg[6] = 0;
        seg[7] = 0;
        let c = fold_checksum(sum_words(&pseudo) + sum_words(&seg));
        if c == 0 {
            0xffff
        } else {
            c
        }
    }

    #[test]
    fn checksum_matches_rfc1071_example() {
        // RFC 1071 section 3 example words: 0x0001 0xf203 0xf4f5 0xf6f7 -> sum 0xddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold_checksum(sum_words(&data)), !0xddf2);
    }

    #[test]
    fn template_has_valid_headers_and_tag_for_every_size() {
        for len in [60, 64, 61, 128, 1514, 9000] {
            let t = FrameTemplate::new(&addr(), len, 7);
            let mut f = vec![0u8; t.len()];
            for seq in [
                0u64,
                1,
                0xffff,
                0x1_0000_0000,
                u64::MAX - 3,
                0x0123_4567_89ab_cdef,
            ] {
                t.stamp_into(&mut f, seq);
                assert_eq!(f.len(), len);
                assert_eq!(
                    fold_checksum(sum_words(&f[IP_OFF..UDP_OFF])),
                    0,
                    "ip checksum"
                );
                assert_eq!(u16::from_be_bytes([f[16], f[17]]) as usize, len - 14);
                assert_eq!(u16::from_be_bytes([f[38], f[39]]) as usize, len - 34);
                let got = u16::from_be_bytes([f[40], f[41]]);
                assert_eq!(
                    got,
                    full_udp_checksum(&f),
                    "udp checksum len {len} seq {seq}"
                );
                assert_eq!(parse_tag(&f).map(|t| (t.gen_id, t.seq)), Some((7, seq)));
            }
        }
    }

    #[test]
    fn sizes_are_clamped_to_ethernet_limits() {
        assert_eq!(FrameTemplate::new(&addr(), 10, 1).len(), MIN_FRAME);
        assert_eq!(FrameTemplate::new(&addr(), 20_000, 1).len(), MAX_FRAME);
    }

    #[test]
    fn parse_tag_rejects_other_and_truncated_frames() {
        let t = FrameTemplate::new(&addr(), 60, 1);
        let mut f = vec![0u8; 60];
        t.stamp_into(&mut f, 5);
        assert!(parse_tag(&f[..HEADER_LEN + TAG_LEN - 1]).is_none());
        let mut arp = f.clone();
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert!(parse_tag(&arp).is_none());
        let mut bad = f.clone();
        bad[TAG_OFF] ^= 1;
        assert!(parse_tag(&bad).is_none());
        // The same frame with an 802.1Q tag inserted still parses.
        let mut vlan = f[..12].to_vec();
        vlan.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        vlan.extend_from_slice(&f[12..]);
        assert_eq!(parse_tag(&vlan).map(|t| (t.gen_id, t.seq)), Some((1, 5)));
    }

    #[test]
    fn send_time_round_trips_in_frames_of_64_bytes_and_more() {
        let sent = 1_790_000_000_123_456_789u64;
        for len in [64, 65, 128, 1514, 9000] {
            let t = FrameTemplate::new(&addr(), len, 3);
            assert!(t.is_stamped());
            let mut f = vec![0u8; len];
            for (seq, at) in [(0u64, sent), (u64::MAX - 1, sent + 0xffff_ffff), (7, 1)] {
                t.stamp_sent_into(&mut f, seq, at);
                let tag = parse_tag(&f).expect("tag");
                assert_eq!((tag.gen_id, tag.seq), (3, seq));
                assert_eq!(tag.sent_ns, Some(at & STAMP_MASK), "len {len}");
                let got = u16::from_be_bytes([f[40], f[41]]);
                assert_eq!(got, full_udp_checksum(&f), "udp checksum len {len}");
            }
            // Without a send time the tag says so.
            t.stamp_into(&mut f, 9);
            assert_eq!(parse_tag(&f).and_then(|t| t.sent_ns), None);
        }
    }

    #[test]
    fn frames_without_room_and_old_layout_frames_parse_without_send_time() {
        // 60..63 bytes: PCG1, the sequence number only.
        let t = FrameTemplate::new(&addr(), 63, 2);
        assert!(!t.is_stamped());
        let mut f = vec![0u8; 63];
        t.stamp_sent_into(&mut f, 11, 123_456);
        assert_eq!(
            u32::from_be_bytes(f[TAG_OFF..TAG_OFF + 4].try_into().unwrap()),
            TAG_MAGIC
        );
        let tag = parse_tag(&f).expect("tag");
        assert_eq!((tag.gen_id, tag.seq, tag.sent_ns), (2, 11, None));
        // A 64-byte frame of an older generator: PCG1 magic and filler after the sequence.
        let t = FrameTemplate::new(&addr(), 64, 2);
        let mut old = vec![0u8; 64];
        t.stamp_sent_into(&mut old, 12, 123_456);
        old[TAG_OFF..TAG_OFF + 4].copy_from_slice(&TAG_MAGIC.to_be_bytes());
        old[STAMP_OFF..].copy_from_slice(&[0, 1, 2, 3, 4, 5]);
        let tag = parse_tag(&old).expect("tag");
        assert_eq!((tag.seq, tag.sent_ns), (12, None));
        // A stamped frame cut inside its send time keeps its sequence number.
        let mut f = vec![0u8; 64];
        t.stamp_sent_into(&mut f, 13, 123_456);
        let tag = parse_tag(&f[..62]).expect("tag");
        assert_eq!((tag.seq, tag.sent_ns), (13, None));
    }

    #[test]
    fn latency_is_recovered_across_the_48_bit_wrap() {
        let sent = (5u64 << STAMP_BITS) - 1_000; // 1 µs before a wrap
        assert_eq!(latency_ns(sent & STAMP_MASK, sent + 250_000), 250_000);
        assert_eq!(latency_ns(sent & STAMP_MASK, sent), 0);
        assert_eq!(latency_ns(sent & STAMP_MASK, sent - 40), -40);
        assert_eq!(latency_ns(1 << 20, (7 << STAMP_BITS) + (1 << 21)), 1 << 20);
    }
}
