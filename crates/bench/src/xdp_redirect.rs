//! The fast-path floor of `bench forward`: an XDP program on the probe's IN that hands every
//! frame to OUT with `bpf_redirect`, counting what it redirected in a per-CPU slot.
//!
//! Why our own and not xdp-tools' `xdp-bench redirect`: Debian 12's 1.3.1 cannot load on
//! kernel 6.18 (its object carries a tracepoint program for `xdp_redirect_map_err`, which the
//! kernel no longer has). The program is fourteen instructions built here and loaded through
//! the raw `bpf(2)` layer of `poolcap_sys::bpf`, as the probe's in-kernel rules are, so it
//! needs no object file, BTF or clang. It is attached through a `BPF_XDP` link, so it leaves
//! the interface when the process ends, however it ends.
//!
//! On veth a frame redirected into OUT is received by OUT's peer through that peer's NAPI,
//! which runs only if the peer has an XDP program or GRO on. Without either, kernel 6.18 drops
//! every redirected frame: in the lab the program redirected 1000 frames, OUT's `tx_packets`
//! stayed 0 and the sink saw none; with GRO on at the sink all 1000 arrived, once each and in
//! order. So the bench turns GRO on at the sink for this subject only
//! ([`crate::forward_peers::SinkGro`]); the lab's frames are UDP to no local socket, which GRO
//! does not merge, so the sink still sees every frame as sent.

use poolcap_sys::bpf::{Insn, PerCpuArray, XdpLink, XdpProgram};

/// `BPF_FUNC_map_lookup_elem`.
const MAP_LOOKUP_ELEM: i32 = 1;
/// `BPF_FUNC_redirect`.
const REDIRECT: i32 = 23;
/// `BPF_PSEUDO_MAP_FD` in the source register of a 64-bit immediate load.
const PSEUDO_MAP_FD: u8 = 1;

/// The program: count the frame in slot 0 of `map_fd` (this CPU's copy, so no atomics), then
/// return `bpf_redirect(out_ifindex, 0)`.
pub fn program(map_fd: i32, out_ifindex: u32) -> Vec<Insn> {
    vec![
        Insn::new(0x62, 10, 0, -4, 0), // *(u32 *)(r10 - 4) = 0: the key
        Insn::new(0xbf, 2, 10, 0, 0),  // r2 = r10
        Insn::new(0x07, 2, 0, 0, -4),  // r2 += -4
        Insn::new(0x18, 1, PSEUDO_MAP_FD, 0, map_fd), // r1 = the map (two slots)
        Insn::new(0x00, 0, 0, 0, 0),
        Insn::new(0x85, 0, 0, 0, MAP_LOOKUP_ELEM), // r0 = lookup(r1, r2)
        Insn::new(0x15, 0, 0, 3, 0),               // if r0 == 0 goto redirect
        Insn::new(0x79, 1, 0, 0, 0),               // r1 = *(u64 *)(r0 + 0)
        Insn::new(0x07, 1, 0, 0, 1),               // r1 += 1
        Insn::new(0x7b, 0, 1, 0, 0),               // *(u64 *)(r0 + 0) = r1
        Insn::new(0xb7, 1, 0, 0, out_ifindex as i32), // redirect: r1 = OUT
        Insn::new(0xb7, 2, 0, 0, 0),               // r2 = 0 (flags)
        Insn::new(0x85, 0, 0, 0, REDIRECT),        // r0 = bpf_redirect(r1, r2)
        Insn::new(0x95, 0, 0, 0, 0),               // exit
    ]
}

/// The program attached to IN; detached when dropped.
#[derive(Debug)]
pub struct XdpRedirect {
    _link: XdpLink,
    counter: PerCpuArray,
}

impl XdpRedirect {
    /// Loads the program and attaches it to interface `inp`, redirecting to interface `out`
    /// (both ifindexes).
    pub fn attach(inp: u32, out: u32) -> anyhow::Result<XdpRedirect> {
        let counter = PerCpuArray::create("poolcap_xdp_fwd", 8, 1)?;
        let prog = XdpProgram::load("poolcap_xdp_fwd", &program(counter.raw_fd(), out))?;
        let link = XdpLink::attach(&prog, inp)?;
        Ok(XdpRedirect {
            _link: link,
            counter,
        })
    }

    /// Frames the program has redirected so far (all CPUs).
    pub fn redirected(&self) -> anyhow::Result<u64> {
        let bytes = self.counter.lookup(0)?;
        Ok(bytes
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
            .sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_counts_then_redirects_to_out() {
        let p = program(7, 42);
        assert_eq!(p.len(), 14);
        assert_eq!(p[3], Insn::new(0x18, 1, PSEUDO_MAP_FD, 0, 7));
        // The null check skips exactly the three counting instructions.
        assert_eq!(6 + 1 + p[6].off as usize, 10);
        assert_eq!(p[10], Insn::new(0xb7, 1, 0, 0, 42));
        assert_eq!(p[12].imm, REDIRECT);
        assert_eq!(p[13].code, 0x95);
    }
}
