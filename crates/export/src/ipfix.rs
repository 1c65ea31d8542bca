//! The IPFIX wire format (RFC 7011), as much of it as a flow exporter needs: a message
//! header, one template per address family and data sets of flow records, with standard
//! information elements (IANA registry) only, so any collector can read them.
//!
//! Pure encoding: [`Encoder`] turns flows into messages of at most `max_len` bytes and keeps
//! the per-domain sequence numbers of one transport stream (RFC 7011 3.1: the number of
//! data records sent in the stream before the message).

use std::collections::HashMap;
use std::net::IpAddr;

/// IPFIX version number.
pub const VERSION: u16 = 10;
/// Set ID of template sets.
pub const TEMPLATE_SET_ID: u16 = 2;
/// Template of IPv4 flows.
pub const TEMPLATE_V4: u16 = 256;
/// Template of IPv6 flows.
pub const TEMPLATE_V6: u16 = 257;
/// Message header bytes.
pub const HEADER_LEN: usize = 16;
/// Set header bytes.
const SET_HEADER_LEN: usize = 4;
/// Messages stay under a 1500-byte MTU with IPv6 and UDP headers.
pub const UDP_MAX_MESSAGE: usize = 1400;

/// Why a flow ended (IANA flowEndReason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndReason {
    /// No packet for the idle timeout.
    Idle = 1,
    /// Active for the active timeout (the flow goes on in a new record).
    Active = 2,
    /// A FIN or RST was seen.
    EndOfFlow = 3,
    /// The exporter stopped.
    Forced = 4,
}

/// One flow record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// Source address.
    pub src: IpAddr,
    /// Destination address (same family as `src`).
    pub dst: IpAddr,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
    /// OR of the TCP flags seen.
    pub tcp_flags: u8,
    /// Octets (the probe's wire bytes, link-layer header included).
    pub octets: u64,
    /// Packets.
    pub packets: u64,
    /// First packet, ms since the epoch.
    pub start_ms: u64,
    /// Last packet, ms since the epoch.
    pub end_ms: u64,
    /// Why the record was exported.
    pub end_reason: EndReason,
}

/// Information elements (IANA element ID, length) of the two templates, in record order.
const ELEMENTS_V4: [(u16, u16); 11] = [
    (8, 4),   // sourceIPv4Address
    (12, 4),  // destinationIPv4Address
    (7, 2),   // sourceTransportPort
    (11, 2),  // destinationTransportPort
    (4, 1),   // protocolIdentifier
    (6, 2),   // tcpControlBits (RFC 7125: two octets)
    (1, 8),   // octetDeltaCount
    (2, 8),   // packetDeltaCount
    (152, 8), // flowStartMilliseconds
    (153, 8), // flowEndMilliseconds
    (136, 1), // flowEndReason
];
const ELEMENTS_V6: [(u16, u16); 11] = {
    let mut e = ELEMENTS_V4;
    e[0] = (27, 16); // sourceIPv6Address
    e[1] = (28, 16); // destinationIPv6Address
    e
};

const fn record_len(elements: &[(u16, u16)]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < elements.len() {
        n += elements[i].1 as usize;
        i += 1;
    }
    n
}

/// Bytes of one IPv4 data record.
pub const RECORD_LEN_V4: usize = record_len(&ELEMENTS_V4);
/// Bytes of one IPv6 data record.
pub const RECORD_LEN_V6: usize = record_len(&ELEMENTS_V6);

fn template_set() -> Vec<u8> {
    let mut s = vec![0; SET_HEADER_LEN];
    for (id, elements) in [(TEMPLATE_V4, &ELEMENTS_V4), (TEMPLATE_V6, &ELEMENTS_V6)] {
        s.extend(id.to_be_bytes());
        s.extend((elements.len() as u16).to_be_bytes());
        for (ie, len) in elements {
            s.extend(ie.to_be_bytes());
            s.extend(len.to_be_bytes());
        }
    }
    set_header(&mut s, TEMPLATE_SET_ID);
    s
}

fn set_header(set: &mut [u8], id: u16) {
    let len = set.len() as u16;
    set[0..2].copy_from_slice(&id.to_be_bytes());
    set[2..4].copy_from_slice(&len.to_be_bytes());
}

fn put_record(out: &mut Vec<u8>, f: &Flow) {
    match (f.src, f.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.extend(s.octets());
            out.extend(d.octets());
        }
        (s, d) => {
            out.extend(to_v6(s).octets());
            out.extend(to_v6(d).octets());
        }
    }
    out.extend(f.sport.to_be_bytes());
    out.extend(f.dport.to_be_bytes());
    out.push(f.proto);
    out.extend(u16::from(f.tcp_flags).to_be_bytes());
    out.extend(f.octets.to_be_bytes());
    out.extend(f.packets.to_be_bytes());
    out.extend(f.start_ms.to_be_bytes());
    out.extend(f.end_ms.to_be_bytes());
    out.push(f.end_reason as u8);
}

fn to_v6(a: IpAddr) -> std::net::Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

fn template_of(f: &Flow) -> u16 {
    match (f.src, f.dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => TEMPLATE_V4,
        _ => TEMPLATE_V6,
    }
}

/// One encoded message and the data records it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The message.
    pub bytes: Vec<u8>,
    /// Data records in it.
    pub records: u32,
}

/// Encodes messages of one transport stream (a UDP socket, or one TCP connection).
#[derive(Debug, Clone)]
pub struct Encoder {
    max_len: usize,
    /// Data records sent so far in this stream, per observation domain.
    sequence: HashMap<u32, u32>,
}

impl Encoder {
    /// A new stream whose messages are at most `max_len` bytes (at least room for the
    /// templates and for one record of each family).
    pub fn new(max_len: usize) -> Self {
        Self {
            max_len: max_len
                .max(HEADER_LEN + template_set().len() + RECORD_LEN_V6 + SET_HEADER_LEN),
            sequence: HashMap::new(),
        }
    }

    /// The templates alone, as one message of `domain`.
    pub fn templates(&mut self, domain: u32, export_secs: u32) -> Vec<u8> {
        let mut m = self.header(domain, export_secs);
        m.extend(template_set());
        finish(&mut m);
        m
    }

    fn header(&self, domain: u32, export_secs: u32) -> Vec<u8> {
        let mut m = Vec::with_capacity(self.max_len);
        m.extend(VERSION.to_be_bytes());
        m.extend(0u16.to_be_bytes()); // length, set by `finish`
        m.extend(export_secs.to_be_bytes());
        m.extend(
            self.sequence
                .get(&domain)
                .copied()
                .unwrap_or(0)
                .to_be_bytes(),
        );
        m.extend(domain.to_be_bytes());
        m
    }

    /// The flows of `domain` as messages, each with as many records as fit; with
    /// `templates`, the first message carries the templates too. Every message is exactly
    /// one data set of one template.
    pub fn data(
        &mut self,
        domain: u32,
        export_secs: u32,
        flows: &[Flow],
        templates: bool,
    ) -> Vec<Message> {
        let mut out = Vec::new();
        let mut pending_templates = templates;
        for template in [TEMPLATE_V4, TEMPLATE_V6] {
            let rec_len = if template == TEMPLATE_V4 {
                RECORD_LEN_V4
            } else {
                RECORD_LEN_V6
            };
            let mut of_family = flows
                .iter()
                .filter(|f| template_of(f) == template)
                .peekable();
            while of_family.peek().is_some() {
                let mut m = self.header(domain, export_secs);
                if pending_templates {
                    m.extend(template_set());
                    pending_templates = false;
                }
                let set_start = m.len();
                m.extend([0; SET_HEADER_LEN]);
                let mut n = 0u32;
                while m.len() + rec_len <= self.max_len {
                    let Some(f) = of_family.next() else { break };
                    put_record(&mut m, f);
                    n += 1;
                }
                set_header(&mut m[set_start..], template);
                finish(&mut m);
                let seq = self.sequence.entry(domain).or_insert(0);
                *seq = seq.wrapping_add(n);
                out.push(Message {
                    bytes: m,
                    records: n,
                });
            }
        }
        if pending_templates {
            out.push(Message {
                bytes: self.templates(domain, export_secs),
                records: 0,
            });
        }
        out
    }
}

fn finish(m: &mut [u8]) {
    let len = m.len() as u16;
    m[2..4].copy_from_slice(&len.to_be_bytes());
}

/// A decoder for tests: the flows in a byte stream of messages, and each message's
/// (domain, sequence, records).
#[cfg(test)]
pub(crate) mod decode {
    use super::*;

    pub(crate) struct Message {
        pub domain: u32,
        pub sequence: u32,
        pub templates: bool,
        pub flows: Vec<Flow>,
    }

    fn be(b: &[u8]) -> u64 {
        b.iter().fold(0, |a, &x| a << 8 | u64::from(x))
    }

    /// Data records in the whole messages at the start of `b`.
    pub(crate) fn stream_len(mut b: &[u8]) -> usize {
        let mut n = 0;
        while b.len() >= 4 {
            let len = be(&b[2..4]) as usize;
            if b.len() < len {
                break;
            }
            n += message(&b[..len]).flows.len();
            b = &b[len..];
        }
        n
    }

    /// Splits a stream into messages by their length fields and decodes each.
    pub(crate) fn stream(mut b: &[u8]) -> Vec<Message> {
        let mut out = Vec::new();
        while !b.is_empty() {
            assert_eq!(be(&b[0..2]), u64::from(VERSION));
            let len = be(&b[2..4]) as usize;
            out.push(message(&b[..len]));
            b = &b[len..];
        }
        out
    }

    pub(crate) fn message(m: &[u8]) -> Message {
        assert_eq!(be(&m[2..4]) as usize, m.len(), "message length");
        let mut msg = Message {
            domain: be(&m[12..16]) as u32,
            sequence: be(&m[8..12]) as u32,
            templates: false,
            flows: Vec::new(),
        };
        let mut s = &m[HEADER_LEN..];
        while !s.is_empty() {
            let (id, len) = (be(&s[0..2]) as u16, be(&s[2..4]) as usize);
            let body = &s[SET_HEADER_LEN..len];
            match id {
                TEMPLATE_SET_ID => {
                    msg.templates = true;
                    assert_eq!(body, &template_set()[SET_HEADER_LEN..]);
                }
                TEMPLATE_V4 | TEMPLATE_V6 => {
                    let (n, addr) = if id == TEMPLATE_V4 {
                        (RECORD_LEN_V4, 4)
                    } else {
                        (RECORD_LEN_V6, 16)
                    };
                    assert_eq!(body.len() % n, 0, "whole records");
                    for r in body.chunks(n) {
                        let ip = |b: &[u8]| -> IpAddr {
                            if addr == 4 {
                                <[u8; 4]>::try_from(b).unwrap().into()
                            } else {
                                <[u8; 16]>::try_from(b).unwrap().into()
                            }
                        };
                        let r2 = &r[2 * addr..];
                        msg.flows.push(Flow {
                            src: ip(&r[..addr]),
                            dst: ip(&r[addr..2 * addr]),
                            sport: be(&r2[0..2]) as u16,
                            dport: be(&r2[2..4]) as u16,
                            proto: r2[4],
                            tcp_flags: be(&r2[5..7]) as u8,
                            octets: be(&r2[7..15]),
                            packets: be(&r2[15..23]),
                            start_ms: be(&r2[23..31]),
                            end_ms: be(&r2[31..39]),
                            end_reason: match r2[39] {
                                1 => EndReason::Idle,
                                2 => EndReason::Active,
                                3 => EndReason::EndOfFlow,
                                _ => EndReason::Forced,
                            },
                        });
                    }
                }
                other => panic!("unexpected set {other}"),
            }
            s = &s[len..];
        }
        msg
    }
}

#[cfg(test)]
mod tests {
    use super::decode::*;
    use super::*;

    fn flow(i: u16, v6: bool) -> Flow {
        let (src, dst): (IpAddr, IpAddr) = if v6 {
            (
                "2001:db8::1".parse().unwrap(),
                "2001:db8::2".parse().unwrap(),
            )
        } else {
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap())
        };
        Flow {
            src,
            dst,
            sport: i,
            dport: 53,
            proto: 17,
            tcp_flags: 0x12,
            octets: 1000 + u64::from(i),
            packets: 10,
            start_ms: 1_700_000_000_000,
            end_ms: 1_700_000_000_500,
            end_reason: EndReason::Idle,
        }
    }

    #[test]
    fn templates_and_records_have_the_rfc_layout() {
        assert_eq!((RECORD_LEN_V4, RECORD_LEN_V6), (48, 72));
        let mut e = Encoder::new(UDP_MAX_MESSAGE);
        let m = e.data(7, 1_700_000_000, &[flow(1, false)], true);
        assert_eq!(m.len(), 1);
        let b = &m[0].bytes;
        // Header: version 10, length, export time, sequence 0, domain 7.
        assert_eq!(&b[0..2], &[0, 10]);
        assert_eq!(usize::from(u16::from_be_bytes([b[2], b[3]])), b.len());
        assert_eq!(&b[4..8], &1_700_000_000u32.to_be_bytes());
        assert_eq!(&b[8..16], &[0, 0, 0, 0, 0, 0, 0, 7]);
        // Template set: id 2, then template 256 with 11 fields starting with IE 8 length 4.
        assert_eq!(&b[16..18], &[0, 2]);
        assert_eq!(&b[20..28], &[1, 0, 0, 11, 0, 8, 0, 4]);
        let d = message(b);
        assert!(d.templates);
        assert_eq!(d.flows, vec![flow(1, false)]);
    }

    #[test]
    fn flows_split_into_messages_with_running_sequence_numbers() {
        let mut e = Encoder::new(UDP_MAX_MESSAGE);
        let flows: Vec<Flow> = (0..100).map(|i| flow(i, i % 3 == 0)).collect();
        let msgs = e.data(1, 0, &flows, false);
        assert!(msgs.len() > 3);
        let mut seen = 0u32;
        let mut back = Vec::new();
        for m in &msgs {
            assert!(m.bytes.len() <= UDP_MAX_MESSAGE);
            let d = message(&m.bytes);
            assert!(!d.templates);
            assert_eq!(d.flows.len() as u32, m.records);
            assert_eq!(d.sequence, seen, "records before this message");
            seen += d.flows.len() as u32;
            back.extend(d.flows);
        }
        assert_eq!(seen, 100);
        back.sort_by_key(|f| f.sport);
        assert_eq!(back, flows);
        // Another domain has its own sequence; a template-only message for no flows.
        let m = e.data(2, 0, &[], true);
        assert_eq!(m.len(), 1);
        let d = message(&m[0].bytes);
        assert!(d.templates && d.flows.is_empty() && d.sequence == 0);
        let next = &e.data(1, 0, &[flow(1, false)], false)[0];
        assert_eq!(message(&next.bytes).sequence, 100);
    }
}
