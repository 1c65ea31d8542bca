//! tcpdump filter expressions, compiled to classic BPF by libpcap and run in the kernel on
//! every fanout socket, so rejected packets cost no user-space work.
//!
//! The program is compiled on a live handle of the capture interface when possible: libpcap
//! then compiles `vlan` tests into loads of the kernel's VLAN metadata (the tag is stripped
//! before socket filters run), selecting what a live tcpdump selects. Without a live handle it
//! falls back to a dead Ethernet handle. Accepting returns are capped at the snaplen, so the
//! kernel copies no more than will be kept.

use poolcap_format::LinkType;
use poolcap_sys::pcap_filter::OfflineFilter;
use poolcap_sys::socket::BpfInsn;

/// `BPF_RET | BPF_K`.
const RET_K: u16 = 0x06;

/// A filter expression libpcap rejected.
#[derive(Debug, thiserror::Error)]
#[error("bad filter expression `{expr}`: {message}")]
pub struct FilterError {
    /// The expression.
    pub expr: String,
    /// libpcap's message.
    pub message: String,
}

fn parse_insn(text: &str) -> Option<BpfInsn> {
    let mut it = text.split_whitespace().map(str::parse::<u64>);
    let (code, jt, jf, k) = (
        it.next()?.ok()?,
        it.next()?.ok()?,
        it.next()?.ok()?,
        it.next()?.ok()?,
    );
    Some(BpfInsn {
        code: u16::try_from(code).ok()?,
        jt: u8::try_from(jt).ok()?,
        jf: u8::try_from(jf).ok()?,
        k: u32::try_from(k).ok()?,
    })
}

fn to_insns(program: &pcap::BpfProgram, snaplen: u32) -> Vec<BpfInsn> {
    program
        .get_instructions()
        .iter()
        // The pcap crate exposes instructions only through Display ("code jt jf k").
        .filter_map(|i| parse_insn(&i.to_string()))
        .map(|mut i| {
            if i.code == RET_K && i.k > snaplen {
                i.k = snaplen;
            }
            i
        })
        .collect()
}

/// Compiles `expr` for `iface` (live handle if it can be opened, else a dead handle of the
/// interface's `linktype`).
pub fn compile(
    expr: &str,
    iface: &str,
    snaplen: u32,
    linktype: LinkType,
) -> Result<Vec<BpfInsn>, FilterError> {
    let err = |e: pcap::Error| FilterError {
        expr: expr.to_string(),
        message: e.to_string(),
    };
    let live = pcap::Capture::from_device(iface)
        .and_then(|c| c.snaplen(snaplen as i32).buffer_size(1 << 16).open());
    let program = match live {
        Ok(cap) => cap.compile(expr, true).map_err(err)?,
        Err(_) => compile_dead(expr, linktype)?,
    };
    Ok(to_insns(&program, snaplen))
}

/// Compiles `expr` with offline semantics (as `tcpdump -r`: a VLAN tag is in the data) for
/// packets of `linktype`: the file source, and a capture on every interface (its packets
/// carry the LINUX_SLL2 header poolcap puts in front of them). It is run with each packet's
/// wire length, as `tcpdump -r` runs it.
pub fn compile_user(expr: &str, linktype: LinkType) -> Result<OfflineFilter, FilterError> {
    compile_dead(expr, linktype).map(OfflineFilter::new)
}

/// [`compile_user`]'s program for Ethernet as instructions, for the probe's eBPF
/// translation.
pub fn compile_offline(expr: &str) -> Result<Vec<BpfInsn>, FilterError> {
    compile_dead(expr, LinkType::ETHERNET).map(|p| to_insns(&p, u32::MAX))
}

/// [`compile_user`]'s program, run by poolcap's interpreter ([`super::bpf::Program`]) on
/// packets as they stand: the user-space filter of a capture on every interface.
pub fn compile_packet_user(
    expr: &str,
    linktype: LinkType,
) -> Result<super::bpf::Program, FilterError> {
    let insns = to_insns(&compile_dead(expr, linktype)?, u32::MAX);
    super::bpf::Program::new(insns).map_err(|message| FilterError {
        expr: expr.to_string(),
        message,
    })
}

/// Compiles `expr` for a user-space filter stage that must select what a live capture on
/// `iface` selects (AF_XDP: frames keep their VLAN tag; see `bpf`).
pub fn compile_live_user(
    expr: &str,
    iface: &str,
    snaplen: u32,
) -> Result<super::bpf::Program, FilterError> {
    let insns = compile(expr, iface, snaplen, LinkType::ETHERNET)?;
    super::bpf::Program::new(insns).map_err(|message| FilterError {
        expr: expr.to_string(),
        message,
    })
}

/// A program that accepts every packet, truncated to `snaplen` bytes in the kernel.
pub fn accept_all(snaplen: u32) -> Vec<BpfInsn> {
    vec![BpfInsn {
        code: RET_K,
        jt: 0,
        jf: 0,
        k: snaplen,
    }]
}

/// `expr` compiled by libpcap on a dead handle of `linktype` (offline semantics).
fn compile_dead(expr: &str, linktype: LinkType) -> Result<pcap::BpfProgram, FilterError> {
    let err = |e: pcap::Error| FilterError {
        expr: expr.to_string(),
        message: e.to_string(),
    };
    let dlt = linktype.dlt().ok_or_else(|| FilterError {
        expr: expr.to_string(),
        message: format!("no filters for link type {}", linktype.0),
    })?;
    pcap::Capture::dead(pcap::Linktype(dlt))
        .map_err(err)?
        .compile(expr, true)
        .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiles_tcpdump_expressions_into_kernel_programs() {
        let p =
            compile("udp port 53", "no-such-interface0", 96, LinkType::ETHERNET).expect("compiles");
        assert!(p.len() > 4);
        let last_accept = p
            .iter()
            .filter(|i| i.code == RET_K && i.k > 0)
            .collect::<Vec<_>>();
        assert!(!last_accept.is_empty());
        assert!(
            last_accept.iter().all(|i| i.k == 96),
            "accepts are capped at the snaplen"
        );
    }

    #[test]
    fn rejects_bad_expressions_with_libpcap_message() {
        let e = compile("udp prot 53", "no-such-interface0", 96, LinkType::ETHERNET).unwrap_err();
        assert!(e.to_string().contains("udp prot 53"), "{e}");
        assert!(!e.message.is_empty());
    }

    /// On raw IP the IP header is at offset 0; on Ethernet behind the 14-byte header, so
    /// the two programs differ, and each selects its own packets.
    #[test]
    fn programs_are_compiled_for_the_link_type() {
        let ip_udp_to_53: Vec<u8> = [
            &[
                0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
            ][..],
            &[0x30, 0x39, 0, 53, 0, 8, 0, 0],
        ]
        .concat();
        let eth = [&[0u8; 12][..], &[0x08, 0x00], &ip_udp_to_53].concat();
        let sll2 = [
            &[0x08, 0x00, 0, 0, 0, 0, 0, 3, 0, 1, 0, 6][..],
            &[0u8; 8],
            &ip_udp_to_53,
        ]
        .concat();
        for (linktype, packet) in [
            (LinkType::RAW, &ip_udp_to_53),
            (LinkType::ETHERNET, &eth),
            (LinkType::LINUX_SLL2, &sll2),
        ] {
            let wire = packet.len() as u32;
            let p = compile_packet_user("udp dst port 53", linktype).unwrap();
            assert!(p.matches_packet(packet, wire), "{linktype}");
            let p = compile_packet_user("udp dst port 54", linktype).unwrap();
            assert!(!p.matches_packet(packet, wire), "{linktype}");
            // Length tests read the wire length, also of a packet cut short.
            let p = compile_packet_user("greater 1000", linktype).unwrap();
            assert!(p.matches_packet(&packet[..20], 1400), "{linktype}");
            assert!(!p.matches_packet(packet, wire), "{linktype}");
        }
        let raw = compile_packet_user("udp dst port 53", LinkType::RAW).unwrap();
        let wire = eth.len() as u32;
        assert!(
            !raw.matches_packet(&eth, wire),
            "an Ethernet frame read as raw IP"
        );
        assert!(compile_user("ether host 1:2:3:4:5:6", LinkType::RAW).is_err());
    }

    #[test]
    fn parses_display_form_of_instructions() {
        assert_eq!(
            parse_insn("6 0 0 262144"),
            Some(BpfInsn {
                code: 6,
                jt: 0,
                jf: 0,
                k: 262144
            })
        );
        assert_eq!(parse_insn("6 0"), None);
    }
}
