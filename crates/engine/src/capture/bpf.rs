//! A classic BPF interpreter, so a user-space filter (AF_XDP, whose sockets take no socket
//! filter) selects what a live tcpdump on Linux selects.
//!
//! For a live Linux handle libpcap compiles for the kernel's view of a packet: the outer
//! VLAN tag has been stripped into metadata before socket filters run, and `vlan` reads it
//! through ancillary loads (`SKF_AD_VLAN_TAG_PRESENT`, `SKF_AD_VLAN_TAG`). An AF_XDP frame
//! still holds its tag, and libpcap's own user-space filter (`pcap_offline_filter`) knows
//! no ancillary loads. So [`Program::matches_frame`] strips the outer tag the way the kernel
//! does (`skb_vlan_untag`: 802.1Q or 802.1ad), into metadata, and runs the live-compiled
//! program over that view, answering the ancillary loads from the metadata. Without a tag
//! it is the plain program.
//!
//! Semantics follow the kernel's interpreter: a load outside the packet, a division by
//! zero or an unknown ancillary load rejects the packet. Programs are checked once
//! (jumps inside the program, a return at the end), so running one cannot panic.

use poolcap_sys::socket::BpfInsn;

// Instruction classes, sizes, modes and operations (include/uapi/linux/filter.h, bpf_common.h).
const LD: u16 = 0x00;
const LDX: u16 = 0x01;
const ST: u16 = 0x02;
const STX: u16 = 0x03;
const ALU: u16 = 0x04;
const JMP: u16 = 0x05;
const RET: u16 = 0x06;
const MISC: u16 = 0x07;
const W: u16 = 0x00;
const H: u16 = 0x08;
const B: u16 = 0x10;
const IMM: u16 = 0x00;
const ABS: u16 = 0x20;
const IND: u16 = 0x40;
const MEM: u16 = 0x60;
const LEN: u16 = 0x80;
const MSH: u16 = 0xa0;
const SRC_X: u16 = 0x08;
const MEMWORDS: usize = 16;
/// `SKF_AD_OFF`: ancillary loads are at negative offsets from here.
const SKF_AD_OFF: u32 = (-0x1000i32) as u32;
const SKF_AD_PROTOCOL: u32 = 0;
const SKF_AD_PKTTYPE: u32 = 4;
const SKF_AD_VLAN_TAG: u32 = 44;
const SKF_AD_VLAN_TAG_PRESENT: u32 = 48;
const SKF_AD_VLAN_TPID: u32 = 60;

/// A checked classic BPF program.
#[derive(Debug, Clone)]
pub struct Program(Vec<BpfInsn>);

/// A frame as the kernel's socket filter sees it: maybe without its outer VLAN tag.
struct View<'a> {
    data: &'a [u8],
    /// The outer tag (TCI, TPID), stripped from bytes 12..16 of `data`.
    vlan: Option<(u16, u16)>,
    /// The packet's length on the wire, when `data` may be less (cut by a snaplen).
    wire: Option<u32>,
}

impl View<'_> {
    fn of(data: &[u8]) -> View<'_> {
        let tpid = data.get(12..14).map(|t| u16::from_be_bytes([t[0], t[1]]));
        let vlan = match tpid {
            Some(t @ (0x8100 | 0x88a8)) if data.len() >= 18 => {
                Some((u16::from_be_bytes([data[14], data[15]]), t))
            }
            _ => None,
        };
        View {
            data,
            vlan,
            wire: None,
        }
    }

    fn len(&self) -> u32 {
        self.wire
            .unwrap_or((self.data.len() - if self.vlan.is_some() { 4 } else { 0 }) as u32)
    }

    fn byte(&self, off: u32) -> Option<u32> {
        let off = off as usize;
        let at = if self.vlan.is_some() && off >= 12 {
            off + 4
        } else {
            off
        };
        self.data.get(at).map(|&b| u32::from(b))
    }

    fn load(&self, off: u32, size: u16) -> Option<u32> {
        let n = match size {
            W => 4,
            H => 2,
            _ => 1,
        };
        if off >= SKF_AD_OFF {
            return self.ancillary(off - SKF_AD_OFF);
        }
        (0..n).try_fold(0u32, |v, i| Some(v << 8 | self.byte(off.checked_add(i)?)?))
    }

    fn ancillary(&self, what: u32) -> Option<u32> {
        match what {
            // The ethertype after the stripped tag, as skb->protocol.
            SKF_AD_PROTOCOL => Some(self.byte(12)? << 8 | self.byte(13)?),
            // Frames reach capture as received ones; the host/other split is not kept.
            SKF_AD_PKTTYPE => Some(0),
            SKF_AD_VLAN_TAG => Some(self.vlan.map_or(0, |(tci, _)| u32::from(tci))),
            SKF_AD_VLAN_TAG_PRESENT => Some(u32::from(self.vlan.is_some())),
            SKF_AD_VLAN_TPID => Some(self.vlan.map_or(0, |(_, t)| u32::from(t))),
            _ => None,
        }
    }
}

impl Program {
    /// Checks `insns`: every jump lands inside the program and the last one returns.
    pub fn new(insns: Vec<BpfInsn>) -> Result<Self, String> {
        let n = insns.len();
        if n == 0 || insns[n - 1].code & 0x07 != RET {
            return Err("a BPF program must end with a return".into());
        }
        for (pc, i) in insns.iter().enumerate() {
            if i.code & 0x07 == JMP {
                let far = if i.code & 0xf0 == 0 {
                    i.k as usize
                } else {
                    usize::from(i.jt.max(i.jf))
                };
                if pc + 1 + far >= n {
                    return Err(format!("jump out of the program at instruction {pc}"));
                }
            }
            let class = i.code & 0x07;
            let mem =
                matches!(class, ST | STX) || (matches!(class, LD | LDX) && i.code & 0xe0 == MEM);
            if mem && i.k as usize >= MEMWORDS {
                return Err(format!("scratch memory index {} at instruction {pc}", i.k));
            }
        }
        Ok(Self(insns))
    }

    /// True when the program accepts `frame` (with its outer VLAN tag in the data) as the
    /// kernel would accept it after stripping the tag; see the module docs.
    pub fn matches_frame(&self, frame: &[u8]) -> bool {
        self.run(&View::of(frame)).is_some_and(|r| r > 0)
    }

    /// True when the program accepts `packet`, `wire` bytes long on the wire, as it stands
    /// (no tag to strip: a program compiled for a dead handle of the packet's link type, as
    /// `tcpdump -r` runs it; length tests read `wire`).
    pub fn matches_packet(&self, packet: &[u8], wire: u32) -> bool {
        let view = View {
            data: packet,
            vlan: None,
            wire: Some(wire),
        };
        self.run(&view).is_some_and(|r| r > 0)
    }

    fn run(&self, p: &View<'_>) -> Option<u32> {
        let (mut a, mut x) = (0u32, 0u32);
        let mut mem = [0u32; MEMWORDS];
        let mut pc = 0usize;
        loop {
            let i = *self.0.get(pc)?;
            pc += 1;
            let k = i.k;
            match i.code & 0x07 {
                LD => a = load(i.code, k, x, &mem, p)?,
                LDX => {
                    x = match i.code & 0xe0 {
                        MSH => (p.load(k, B)? & 0x0f) << 2,
                        IMM | MEM | LEN => load(i.code, k, x, &mem, p)?,
                        _ => return None,
                    }
                }
                ST => mem[k as usize % MEMWORDS] = a,
                STX => mem[k as usize % MEMWORDS] = x,
                ALU => a = alu(i.code, a, if i.code & SRC_X != 0 { x } else { k })?,
                JMP => {
                    let v = if i.code & SRC_X != 0 { x } else { k };
                    let taken = match i.code & 0xf0 {
                        0x00 => {
                            pc += k as usize;
                            continue;
                        }
                        0x10 => a == v,
                        0x20 => a > v,
                        0x30 => a >= v,
                        0x40 => a & v != 0,
                        _ => return None,
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                RET => {
                    return Some(match i.code & 0x18 {
                        0x00 => k,
                        0x08 => x,
                        _ => a,
                    })
                }
                MISC => {
                    if i.code & 0xf8 == 0 {
                        x = a;
                    } else {
                        a = x;
                    }
                }
                _ => return None,
            }
        }
    }
}

/// The value a load (`LD`, or `LDX` in the modes it shares) puts in its register; `None`
/// ends the program (a read past the packet, an unknown mode), as the kernel does.
fn load(code: u16, k: u32, x: u32, mem: &[u32; MEMWORDS], p: &View<'_>) -> Option<u32> {
    Some(match code & 0xe0 {
        IMM => k,
        ABS => p.load(k, code & 0x18)?,
        IND => p.load(x.wrapping_add(k), code & 0x18)?,
        MEM => mem[k as usize % MEMWORDS],
        LEN => p.len(),
        _ => return None,
    })
}

/// `a OP v` for an `ALU` instruction; `None` for a division by zero or an unknown op.
fn alu(code: u16, a: u32, v: u32) -> Option<u32> {
    Some(match code & 0xf0 {
        0x00 => a.wrapping_add(v),
        0x10 => a.wrapping_sub(v),
        0x20 => a.wrapping_mul(v),
        0x30 => a.checked_div(v)?,
        0x40 => a | v,
        0x50 => a & v,
        0x60 => a.checked_shl(v).unwrap_or(0),
        0x70 => a.checked_shr(v).unwrap_or(0),
        0x80 => a.wrapping_neg(),
        0x90 => a.checked_rem(v)?,
        0xa0 => a ^ v,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insn(code: u16, jt: u8, jf: u8, k: u32) -> BpfInsn {
        BpfInsn { code, jt, jf, k }
    }

    /// Ethernet + IPv4 + TCP, optionally 802.1Q-tagged with `vlan`.
    fn tcp_frame(vlan: Option<u16>) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        if let Some(v) = vlan {
            f.extend_from_slice(&[0x81, 0x00]);
            f.extend_from_slice(&v.to_be_bytes());
        }
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6]);
        f.resize(f.len() + 8 + 20, 0);
        f
    }

    /// `ldh [12]; jeq #0x800 jt 0 jf 3; ldb [23]; jeq #6 jt 0 jf 1; ret #N; ret #0`:
    /// libpcap's `tcp` over IPv4 (the IPv6 half left out).
    fn ipv4_tcp() -> Program {
        Program::new(vec![
            insn(LD | H | ABS, 0, 0, 12),
            insn(JMP | 0x10, 0, 3, 0x800),
            insn(LD | B | ABS, 0, 0, 23),
            insn(JMP | 0x10, 0, 1, 6),
            insn(RET, 0, 0, 262_144),
            insn(RET, 0, 0, 0),
        ])
        .unwrap()
    }

    #[test]
    fn a_tagged_frame_is_filtered_as_the_kernel_sees_it_after_stripping_the_tag() {
        let p = ipv4_tcp();
        assert!(p.matches_frame(&tcp_frame(None)));
        assert!(
            p.matches_frame(&tcp_frame(Some(100))),
            "live `tcp` selects VLAN-tagged TCP, as the kernel strips the tag"
        );
        let mut udp = tcp_frame(Some(100));
        udp[16 + 11] = 17;
        assert!(!p.matches_frame(&udp));
    }

    #[test]
    fn ancillary_loads_read_the_stripped_tag() {
        // `vlan 100` as libpcap compiles it live: tag present, then its id.
        let p = Program::new(vec![
            insn(LD | B | ABS, 0, 0, SKF_AD_OFF + SKF_AD_VLAN_TAG_PRESENT),
            insn(JMP | 0x10, 0, 4, 1),
            insn(LD | H | ABS, 0, 0, SKF_AD_OFF + SKF_AD_VLAN_TAG),
            insn(ALU | 0x50, 0, 0, 0x0fff),
            insn(JMP | 0x10, 0, 1, 100),
            insn(RET, 0, 0, 1),
            insn(RET, 0, 0, 0),
        ])
        .unwrap();
        assert!(p.matches_frame(&tcp_frame(Some(100))));
        assert!(!p.matches_frame(&tcp_frame(Some(200))));
        assert!(!p.matches_frame(&tcp_frame(None)));
    }

    #[test]
    fn out_of_bounds_loads_and_bad_programs_reject() {
        let p = Program::new(vec![
            insn(LD | W | ABS, 0, 0, 4000),
            insn(RET | 0x10, 0, 0, 0),
        ])
        .unwrap();
        assert!(!p.matches_frame(&tcp_frame(None)));
        assert!(Program::new(vec![]).is_err());
        assert!(Program::new(vec![insn(JMP, 0, 0, 5), insn(RET, 0, 0, 1)]).is_err());
        assert!(Program::new(vec![insn(LD | IMM, 0, 0, 1)]).is_err());
    }

    #[test]
    fn agrees_with_libpcap_on_programs_it_compiles_for_untagged_frames() {
        for expr in ["tcp", "udp port 53", "ip and len > 60", "tcp[13] & 2 != 0"] {
            let prog = crate::capture::filter::compile(
                expr,
                "no-such-if0",
                262_144,
                poolcap_format::LinkType::ETHERNET,
            )
            .unwrap();
            let ours = Program::new(prog).unwrap();
            let theirs = pcap::Capture::dead(pcap::Linktype::ETHERNET)
                .unwrap()
                .compile(expr, true)
                .unwrap();
            for f in [tcp_frame(None), vec![0u8; 60]] {
                assert_eq!(ours.matches_frame(&f), theirs.filter(&f), "`{expr}`");
            }
        }
    }
}
