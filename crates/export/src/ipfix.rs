//! The IPFIX wire format (RFC 7011), as much of it as a flow exporter needs: a message
//! header, one template per address family and data sets of flow records, with standard
//! information elements (IANA registry) only, so any collector can read them; and an
//! options template (RFC 7011 3.4.2) whose records carry the exporting process's own
//! statistics, scoped by its exportingProcessId.
//!
//! Octets are as IANA defines octetDeltaCount: the IP header and payload. The frame's bytes
//! (link-layer header and VLAN tags included) go in layer2OctetDeltaCount.
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
/// Set ID of options template sets.
pub const OPTIONS_TEMPLATE_SET_ID: u16 = 3;
/// Template of IPv4 flows.
pub const TEMPLATE_V4: u16 = 256;
/// Template of IPv6 flows.
pub const TEMPLATE_V6: u16 = 257;
/// Options template of the exporting process's statistics.
pub const TEMPLATE_STATS: u16 = 258;
/// The observation domain of the statistics: 0, "not specific to an observation domain"
/// (RFC 7011 3.1).
pub const STATS_DOMAIN: u32 = 0;
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
    /// Octets: IP header and payload.
    pub octets: u64,
    /// The frames' bytes: octets plus the link-layer header and VLAN tags.
    pub l2_octets: u64,
    /// Packets.
    pub packets: u64,
    /// First packet, ms since the epoch.
    pub start_ms: u64,
    /// Last packet, ms since the epoch.
    pub end_ms: u64,
    /// Why the record was exported.
    pub end_reason: EndReason,
    /// The first packet's outer VLAN id (0: no tag).
    pub vlan: u16,
    /// ICMP and ICMPv6: the first packet's type * 256 + code (0 otherwise).
    pub icmp: u16,
    /// The ifindex of the interface the packets came in on (0: unknown, a file).
    pub ingress: u32,
}

/// Information elements (IANA element ID, length) of the two templates, in record order.
const ELEMENTS_V4: [(u16, u16); 15] = [
    (8, 4),   // sourceIPv4Address
    (12, 4),  // destinationIPv4Address
    (7, 2),   // sourceTransportPort
    (11, 2),  // destinationTransportPort
    (4, 1),   // protocolIdentifier
    (6, 2),   // tcpControlBits (RFC 7125: two octets)
    (1, 8),   // octetDeltaCount
    (2, 8),   // packetDeltaCount
    (352, 8), // layer2OctetDeltaCount
    (152, 8), // flowStartMilliseconds
    (153, 8), // flowEndMilliseconds
    (136, 1), // flowEndReason
    (58, 2),  // vlanId
    (10, 4),  // ingressInterface
    (32, 2),  // icmpTypeCodeIPv4
];
const ELEMENTS_V6: [(u16, u16); 15] = {
    let mut e = ELEMENTS_V4;
    e[0] = (27, 16); // sourceIPv6Address
    e[1] = (28, 16); // destinationIPv6Address
    e[14] = (139, 2); // icmpTypeCodeIPv6
    e
};
/// The statistics' options template: one scope field, then the counters.
const ELEMENTS_STATS: [(u16, u16); 4] = [
    (144, 4), // exportingProcessId (scope)
    (41, 8),  // exportedMessageTotalCount
    (42, 8),  // exportedFlowRecordTotalCount
    (166, 8), // notSentFlowTotalCount
];

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

/// Bytes of one statistics record.
pub const RECORD_LEN_STATS: usize = record_len(&ELEMENTS_STATS);

fn put_fields(s: &mut Vec<u8>, elements: &[(u16, u16)]) {
    for (ie, len) in elements {
        s.extend(ie.to_be_bytes());
        s.extend(len.to_be_bytes());
    }
}

fn template_set() -> Vec<u8> {
    let mut s = vec![0; SET_HEADER_LEN];
    for (id, elements) in [(TEMPLATE_V4, &ELEMENTS_V4), (TEMPLATE_V6, &ELEMENTS_V6)] {
        s.extend(id.to_be_bytes());
        s.extend((elements.len() as u16).to_be_bytes());
        put_fields(&mut s, elements);
    }
    set_header(&mut s, TEMPLATE_SET_ID);
    s
}

/// The options template set: template ID, field count, scope field count, fields.
fn options_template_set() -> Vec<u8> {
    let mut s = vec![0; SET_HEADER_LEN];
    s.extend(TEMPLATE_STATS.to_be_bytes());
    s.extend((ELEMENTS_STATS.len() as u16).to_be_bytes());
    s.extend(1u16.to_be_bytes());
    put_fields(&mut s, &ELEMENTS_STATS);
    set_header(&mut s, OPTIONS_TEMPLATE_SET_ID);
    s
}

/// The exporting process's own statistics, since it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Its exportingProcessId (the process id).
    pub process: u32,
    /// Messages sent before this one.
    pub messages: u64,
    /// Flow records exported.
    pub flows: u64,
    /// Flow records not delivered (dropped on the way, or refused by the collector).
    pub not_sent: u64,
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
    out.extend(f.l2_octets.to_be_bytes());
    out.extend(f.start_ms.to_be_bytes());
    out.extend(f.end_ms.to_be_bytes());
    out.push(f.end_reason as u8);
    out.extend(f.vlan.to_be_bytes());
    out.extend(f.ingress.to_be_bytes());
    out.extend(f.icmp.to_be_bytes());
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

    /// The statistics' options template and one record of `stats`, as one message of
    /// [`STATS_DOMAIN`].
    pub fn stats(&mut self, export_secs: u32, stats: &Stats) -> Vec<u8> {
        let mut m = self.header(STATS_DOMAIN, export_secs);
        m.extend(options_template_set());
        let set_start = m.len();
        m.extend([0; SET_HEADER_LEN]);
        m.extend(stats.process.to_be_bytes());
        m.extend(stats.messages.to_be_bytes());
        m.extend(stats.flows.to_be_bytes());
        m.extend(stats.not_sent.to_be_bytes());
        set_header(&mut m[set_start..], TEMPLATE_STATS);
        finish(&mut m);
        let seq = self.sequence.entry(STATS_DOMAIN).or_insert(0);
        *seq = seq.wrapping_add(1);
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
        pub stats: Vec<Stats>,
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
            stats: Vec::new(),
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
                OPTIONS_TEMPLATE_SET_ID => {
                    assert_eq!(body, &options_template_set()[SET_HEADER_LEN..]);
                }
                TEMPLATE_STATS => {
                    for r in body.chunks(RECORD_LEN_STATS) {
                        msg.stats.push(Stats {
                            process: be(&r[0..4]) as u32,
                            messages: be(&r[4..12]),
                            flows: be(&r[12..20]),
                            not_sent: be(&r[20..28]),
                        });
                    }
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
                            l2_octets: be(&r2[23..31]),
                            start_ms: be(&r2[31..39]),
                            end_ms: be(&r2[39..47]),
                            end_reason: match r2[47] {
                                1 => EndReason::Idle,
                                2 => EndReason::Active,
                                3 => EndReason::EndOfFlow,
                                _ => EndReason::Forced,
                            },
                            vlan: be(&r2[48..50]) as u16,
                            ingress: be(&r2[50..54]) as u32,
                            icmp: be(&r2[54..56]) as u16,
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
            l2_octets: 1140 + u64::from(i),
            start_ms: 1_700_000_000_000,
            end_ms: 1_700_000_000_500,
            end_reason: EndReason::Idle,
            vlan: 42,
            icmp: 0x0301,
            ingress: 7,
        }
    }

    #[test]
    fn templates_and_records_have_the_rfc_layout() {
        assert_eq!((RECORD_LEN_V4, RECORD_LEN_V6), (64, 88));
        let mut e = Encoder::new(UDP_MAX_MESSAGE);
        let m = e.data(7, 1_700_000_000, &[flow(1, false)], true);
        assert_eq!(m.len(), 1);
        let b = &m[0].bytes;
        // Header: version 10, length, export time, sequence 0, domain 7.
        assert_eq!(&b[0..2], &[0, 10]);
        assert_eq!(usize::from(u16::from_be_bytes([b[2], b[3]])), b.len());
        assert_eq!(&b[4..8], &1_700_000_000u32.to_be_bytes());
        assert_eq!(&b[8..16], &[0, 0, 0, 0, 0, 0, 0, 7]);
        // Template set: id 2, then template 256 with 15 fields starting with IE 8 length 4.
        assert_eq!(&b[16..18], &[0, 2]);
        assert_eq!(&b[20..28], &[1, 0, 0, 15, 0, 8, 0, 4]);
        // The record's last fields: vlanId 42, ingressInterface 7, icmpTypeCodeIPv4 3/1.
        assert_eq!(&b[b.len() - 8..], &[0, 42, 0, 0, 0, 7, 3, 1]);
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

    #[test]
    fn statistics_are_an_options_record_of_domain_zero() {
        let mut e = Encoder::new(UDP_MAX_MESSAGE);
        let stats = Stats {
            process: 4242,
            messages: 9,
            flows: 100,
            not_sent: 3,
        };
        let b = e.stats(1_700_000_000, &stats);
        // Options template set: id 3, template 258, 4 fields, 1 of them scope (IE 144).
        assert_eq!(&b[16..18], &[0, 3]);
        assert_eq!(&b[20..30], &[1, 2, 0, 4, 0, 1, 0, 144, 0, 4]);
        let d = message(&b);
        assert_eq!((d.domain, d.sequence, d.stats), (0, 0, vec![stats]));
        assert_eq!(message(&e.stats(0, &stats)).sequence, 1, "a data record");
    }
}
