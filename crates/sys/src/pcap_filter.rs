//! libpcap's filter run as `tcpdump -r` runs it: over the bytes captured, with the packet's
//! length on the wire.
//!
//! A packet cut short by a snaplen keeps its wire length, and length tests (`greater N`,
//! `less N`, `len > N`) read that length (the classic BPF `len` load). The pcap crate's
//! `BpfProgram::filter` hands libpcap the captured bytes as both lengths, so on a file cut
//! to 100 bytes a packet of 1514 on the wire looked 100 bytes long: `greater 1000` selected
//! none, `less 100` selected too many. [`OfflineFilter::matches`] passes both lengths to
//! libpcap's interpreter (`bpf_filter(insns, packet, wirelen, buflen)`, what
//! `pcap_offline_filter` calls with the record header's `len` and `caplen`).

use std::ffi::c_uint;

use pcap::BpfProgram;

#[link(name = "pcap")]
unsafe extern "C" {
    /// libpcap's classic BPF interpreter (pcap/bpf.h): 0 rejects, else the snapshot length
    /// the program accepts. It reads no byte at or past `buflen`.
    fn bpf_filter(
        pc: *const pcap::BpfInstruction,
        p: *const u8,
        wirelen: c_uint,
        buflen: c_uint,
    ) -> c_uint;
}

/// A program libpcap compiled, run over captured bytes with their wire length.
pub struct OfflineFilter(BpfProgram);

impl std::fmt::Debug for OfflineFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("OfflineFilter")
            .field(&self.0.get_instructions().len())
            .finish()
    }
}

impl OfflineFilter {
    /// Takes a program from `pcap_compile` (`Capture::compile`).
    pub fn new(program: BpfProgram) -> Self {
        Self(program)
    }

    /// Whether the program accepts `data`, the captured bytes of a packet `wire_len` bytes
    /// long on the wire (never taken as less than `data`'s length).
    pub fn matches(&self, data: &[u8], wire_len: u32) -> bool {
        let insns = self.0.get_instructions();
        let caplen = u32::try_from(data.len()).unwrap_or(u32::MAX);
        // SAFETY: `insns` is the instruction array of a program libpcap compiled (the only
        // way to get a `BpfProgram`), alive as long as `self`, so every jump stays inside
        // it; `BpfInstruction` is `repr(transparent)` over libpcap's `struct bpf_insn`, the
        // type `bpf_filter` reads. `data` is readable for `caplen` bytes and `bpf_filter`
        // reads none at or past `buflen` (an out-of-range load rejects the packet). It keeps
        // no pointer after it returns.
        unsafe { bpf_filter(insns.as_ptr(), data.as_ptr(), wire_len.max(caplen), caplen) != 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile(expr: &str) -> OfflineFilter {
        let program = pcap::Capture::dead(pcap::Linktype::ETHERNET)
            .and_then(|c| c.compile(expr, true))
            .expect("compiles");
        OfflineFilter::new(program)
    }

    /// A UDP/IPv4 frame cut to its first 100 bytes.
    fn cut_frame() -> Vec<u8> {
        let mut f = vec![0u8; 100];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[23] = 17;
        f
    }

    #[test]
    fn length_tests_read_the_wire_length_not_the_captured_one() {
        let f = cut_frame();
        assert!(compile("greater 1000").matches(&f, 1514));
        assert!(!compile("greater 1000").matches(&f, 100));
        assert!(!compile("less 100").matches(&f, 1514));
        assert!(compile("len > 500").matches(&f, 1514));
        assert!(!compile("len > 500").matches(&f, 500));
        assert!(compile("udp").matches(&f, 1514), "contents still match");
        assert!(!compile("tcp").matches(&f, 1514));
    }

    #[test]
    fn a_load_past_the_captured_bytes_rejects_and_a_short_wire_length_is_the_captured_one() {
        let f = cut_frame();
        // Byte 200 is on the wire but was not captured: libpcap rejects, as tcpdump -r does.
        assert!(!compile("ether[200] = 0").matches(&f, 1514));
        assert!(compile("len = 100").matches(&f, 60));
    }
}
