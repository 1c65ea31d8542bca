//! One line per packet, as `tcpdump -q -n` prints them: local time to the microsecond, the
//! interface and direction on every interface at once, addresses and ports, the protocol and
//! its length. Headers are parsed by etherparse's lax slicer, which reads packets the
//! snaplen cut short.
//!
//! Why an output rather than a stage of its own: the printer takes the records the file
//! writer makes (pcap with nanoseconds), so printed packets come merged in timestamp order
//! over the queues, stop at `-c`, and are counted as written, exactly as a file's would.

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::IpAddr;

use etherparse::{EtherType, LaxNetSlice, LaxSlicedPacket, TransportSlice};
use poolcap_format::{LinkType, Output};

use crate::capture::linktype::{Sll2, SLL2_LEN};

/// Bytes of the pcap file header and of a record header.
const FILE_HEADER: usize = 24;
const RECORD_HEADER: usize = 16;

/// Turns a pcap (nanosecond) stream into lines on `out`; see the module docs.
pub(super) struct Printer<W: Write> {
    out: W,
    /// Bytes received and not yet printed (a record cut between two writes).
    carry: Vec<u8>,
    /// From the file header, once it has arrived.
    linktype: Option<LinkType>,
    /// Interface names by index, for packets from every interface (live only: a file's
    /// indexes are another time's, maybe another host's).
    names: HashMap<u32, String>,
}

impl<W: Write> Printer<W> {
    /// A printer to `out`; `live`: packets come from this namespace's interfaces now, so
    /// their indexes are named.
    pub(super) fn new(out: W, live: bool) -> Self {
        Self {
            out,
            carry: Vec::new(),
            linktype: None,
            names: if live {
                interface_names()
            } else {
                HashMap::new()
            },
        }
    }

    /// Prints every whole record in `carry`; keeps the rest.
    fn print_records(&mut self) -> io::Result<()> {
        let mut at = 0;
        if self.linktype.is_none() {
            let Some(h) = self.carry.get(..FILE_HEADER) else {
                return Ok(());
            };
            self.linktype = Some(LinkType(u32_at(h, 20) as u16));
            at = FILE_HEADER;
        }
        let linktype = self.linktype.unwrap_or(LinkType::ETHERNET);
        while let Some(h) = self.carry.get(at..at + RECORD_HEADER) {
            let (secs, nanos, caplen, wire) =
                (u32_at(h, 0), u32_at(h, 4), u32_at(h, 8), u32_at(h, 12));
            let start = at + RECORD_HEADER;
            let Some(data) = self.carry.get(start..start + caplen as usize) else {
                break;
            };
            let line = format!(
                "{} {}",
                time(secs, nanos),
                describe(linktype, data, wire, &self.names)
            );
            writeln!(self.out, "{line}")?;
            at = start + caplen as usize;
        }
        self.carry.drain(..at);
        Ok(())
    }
}

impl<W: Write> Write for Printer<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.carry.extend_from_slice(buf);
        self.print_records()?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Each batch of records ends with its lines on the terminal.
impl<W: Write> Output for Printer<W> {
    fn end_batch(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// `HH:MM:SS.uuuuuu` in local time.
fn time(secs: u32, nanos: u32) -> String {
    let hms = poolcap_sys::time::strftime_local("%H:%M:%S", i64::from(secs))
        .unwrap_or_else(|| secs.to_string());
    format!("{hms}.{:06}", nanos / 1000)
}

/// This namespace's interfaces by index (from sysfs).
fn interface_names() -> HashMap<u32, String> {
    let Ok(dir) = std::fs::read_dir("/sys/class/net") else {
        return HashMap::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let index = std::fs::read_to_string(e.path().join("ifindex")).ok()?;
            Some((index.trim().parse().ok()?, name))
        })
        .collect()
}

/// What a packet of `linktype` is, after the time on its line.
fn describe(linktype: LinkType, data: &[u8], wire: u32, names: &HashMap<u32, String>) -> String {
    let sliced = match linktype {
        LinkType::ETHERNET => LaxSlicedPacket::from_ethernet(data).ok(),
        LinkType::RAW | LinkType::IPV4 | LinkType::IPV6 => LaxSlicedPacket::from_ip(data).ok(),
        LinkType::LINUX_SLL2 => {
            let Some(sll) = Sll2::parse(data) else {
                return format!("link type {}, length {wire}", linktype.0);
            };
            let index = sll.ifindex;
            let name = names
                .get(&index)
                .cloned()
                .unwrap_or_else(|| format!("ifindex {index}"));
            let proto = EtherType(sll.protocol);
            let inner = LaxSlicedPacket::from_ether_type(proto, sll.payload);
            let what = summary(Some(&inner), proto, wire.saturating_sub(SLL2_LEN as u32));
            return format!("{name} {:<3} {what}", direction(sll.pkttype));
        }
        _ => return format!("link type {}, length {wire}", linktype.0),
    };
    let ethertype = match data.get(12..14) {
        Some(t) if linktype == LinkType::ETHERNET => EtherType(u16::from_be_bytes([t[0], t[1]])),
        _ => EtherType(0),
    };
    summary(sliced.as_ref(), ethertype, wire)
}

/// tcpdump's word for a cooked packet's direction (`sll_pkttype`).
fn direction(pkttype: u8) -> &'static str {
    match pkttype {
        0 => "In",
        1 => "B",
        2 => "M",
        3 => "P",
        4 => "Out",
        _ => "?",
    }
}

/// The network and transport part of a line.
fn summary(p: Option<&LaxSlicedPacket<'_>>, ethertype: EtherType, wire: u32) -> String {
    let Some(net) = p.and_then(|p| p.net.as_ref()) else {
        return format!("ethertype 0x{:04x}, length {wire}", ethertype.0);
    };
    let (family, src, dst, ip_payload) = match net {
        LaxNetSlice::Ipv4(ip) => {
            let h = ip.header();
            let payload = usize::from(h.total_len()).saturating_sub(usize::from(h.ihl()) * 4);
            let (s, d) = (h.source_addr().into(), h.destination_addr().into());
            ("IP", s, d, payload)
        }
        LaxNetSlice::Ipv6(ip) => {
            let h = ip.header();
            let (s, d) = (h.source_addr().into(), h.destination_addr().into());
            ("IP6", s, d, usize::from(h.payload_length()))
        }
        LaxNetSlice::Arp(_) => return format!("ARP, length {wire}"),
    };
    let ends = |sport: Option<u16>, dport: Option<u16>| {
        format!("{} > {}", endpoint(src, sport), endpoint(dst, dport))
    };
    match p.and_then(|p| p.transport.as_ref()) {
        Some(TransportSlice::Tcp(t)) => format!(
            "{family} {}: tcp {}",
            ends(Some(t.source_port()), Some(t.destination_port())),
            ip_payload.saturating_sub(t.slice().len() - t.payload().len())
        ),
        Some(TransportSlice::Udp(u)) => format!(
            "{family} {}: UDP, length {}",
            ends(Some(u.source_port()), Some(u.destination_port())),
            u.length().saturating_sub(8)
        ),
        Some(TransportSlice::Icmpv4(_)) => {
            format!("{family} {}: ICMP, length {ip_payload}", ends(None, None))
        }
        Some(TransportSlice::Icmpv6(_)) => {
            format!("{family} {}: ICMP6, length {ip_payload}", ends(None, None))
        }
        Some(TransportSlice::Igmp(_)) => {
            format!("{family} {}: igmp, length {ip_payload}", ends(None, None))
        }
        None => {
            let proto = p
                .and_then(|p| p.net.as_ref())
                .and_then(|n| n.ip_payload_ref())
                .map_or(0, |x| x.ip_number.0);
            format!(
                "{family} {}: ip-proto-{proto} {ip_payload}",
                ends(None, None)
            )
        }
    }
}

/// `10.0.0.1.80` as tcpdump writes an address and port (IPv6 the same way).
fn endpoint(addr: IpAddr, port: Option<u16>) -> String {
    match port {
        Some(p) => format!("{addr}.{p}"),
        None => addr.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;
    use poolcap_format::{CaptureWriter, FileFormat, FileHeader};

    fn udp_frame() -> Vec<u8> {
        let mut f = Vec::new();
        PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([10, 77, 0, 1], [10, 77, 0, 2], 64)
            .udp(40000, 9)
            .write(&mut f, &[0u8; 18])
            .unwrap();
        f
    }

    fn tcp_raw_ip() -> Vec<u8> {
        let mut f = Vec::new();
        PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(80, 5555, 1, 1000)
            .write(&mut f, &[7u8; 100])
            .unwrap();
        f
    }

    fn printed(linktype: LinkType, packets: &[Vec<u8>]) -> Vec<String> {
        let mut out = Vec::new();
        let header = FileHeader::new(linktype, 0, "t0");
        let printer = Printer::new(&mut out, true);
        let mut w = CaptureWriter::with_header(printer, FileFormat::PcapNs, &header).unwrap();
        for (i, p) in packets.iter().enumerate() {
            w.write_packet(1_700_000_000_123_456_789 + i as u64, p, p.len() as u32)
                .unwrap();
        }
        w.finish(None).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| l.split_once(' ').unwrap().1.to_string())
            .collect()
    }

    #[test]
    fn lines_say_what_tcpdump_q_n_says() {
        assert_eq!(
            printed(LinkType::ETHERNET, &[udp_frame()]),
            ["IP 10.77.0.1.40000 > 10.77.0.2.9: UDP, length 18"]
        );
        assert_eq!(
            printed(LinkType::RAW, &[tcp_raw_ip()]),
            ["IP 10.0.0.1.80 > 10.0.0.2.5555: tcp 100"]
        );
        let mut arp = udp_frame()[..14].to_vec();
        arp[12..14].copy_from_slice(&[0x88, 0xb5]);
        assert_eq!(
            printed(LinkType::ETHERNET, &[arp]),
            ["ethertype 0x88b5, length 14"]
        );
    }

    #[test]
    fn a_cooked_packet_names_its_interface_and_direction() {
        let sll2 = [
            &[0x08, 0x00, 0, 0, 0, 0, 0, 1, 0, 1, 4, 6][..],
            &[0u8; 8],
            &tcp_raw_ip(),
        ]
        .concat();
        let lo = interface_names()
            .get(&1)
            .cloned()
            .unwrap_or("ifindex 1".into());
        assert_eq!(
            printed(LinkType::LINUX_SLL2, &[sll2]),
            [format!("{lo} Out IP 10.0.0.1.80 > 10.0.0.2.5555: tcp 100")]
        );
    }

    #[test]
    fn records_cut_between_writes_are_printed_once_whole() {
        let mut out = Vec::new();
        let mut p = Printer::new(&mut out, true);
        let mut stream = Vec::new();
        let mut w = CaptureWriter::with_header(
            &mut stream,
            FileFormat::PcapNs,
            &FileHeader::new(LinkType::ETHERNET, 0, "x"),
        )
        .unwrap();
        for _ in 0..3 {
            w.write_packet(1_000_000_000, &udp_frame(), 60).unwrap();
        }
        w.finish(None).unwrap();
        for piece in stream.chunks(7) {
            p.write_all(piece).unwrap();
        }
        drop(p);
        assert_eq!(String::from_utf8(out).unwrap().lines().count(), 3);
    }
}
