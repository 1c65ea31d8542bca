//! Classic BPF rule filters translated into eBPF tc programs that count, per rule, the
//! packets, bytes and frame-size buckets of the frames they select, in a per-CPU array map.
//!
//! The user-space probe runs libpcap's offline program (`tcpdump -r` semantics) on the frame
//! as stored: an outer VLAN tag the kernel stripped is back in the data at byte 12. At tc
//! ingress the kernel has already stripped it into `__sk_buff` metadata (`vlan_present`,
//! `vlan_proto`, `vlan_tci`), exactly as AF_PACKET saw the frame. So every packet load
//! reads the *stored* frame: bytes 0..12 from the packet, 12..16 from the tag, the rest
//! from 4 bytes earlier in the packet; the length is the packet's plus 4. Without a tag
//! every load is direct. Loads read the skb's linear data in place when they fall inside it
//! and otherwise go through `bpf_skb_load_bytes`, whose error (outside the packet) rejects,
//! as a classic load outside the packet does.
//!
//! Registers: r6 the context, r7 A, r8 X, r9 the tag as `tpid << 16 | tci` (0: none);
//! M[0..16] and a few scratch words live on the stack. Classic semantics that eBPF lacks
//! are spelt out: division by zero rejects, shifts by 32 or more give 0, comparisons are
//! unsigned 32-bit (`JMP32`). Each rule's program ends in a jump to its "count" or "next
//! rule" label. Every program returns `TCX_NEXT`, so the packet goes on as if nothing ran.
//!
//! The generation a packet counts in ([`Generation`]): the probe attaches a "stamp" program
//! first, which reads the generation word once, writes it into the skb's `cb[0]` (scratch
//! space of the tc layer, which TCX leaves alone between programs) and counts the packet
//! in slot 0 (the total); the rule programs after it read the stamp, so every program sees
//! the generation the first one read, and count only when the stamp's epoch is theirs. The
//! stamp program also leaves the packet's time in `cb[1..3]`, so that a flow's first and
//! last seen are the same in every program and taken after the generation was read.

#[path = "flowkey.rs"]
pub mod flowkey;

use poolcap_sys::bpf::Insn;
use poolcap_sys::socket::BpfInsn;

/// The value of one map slot: packets, bytes, then one counter per frame-size bucket.
pub const VALUE_WORDS: usize = 2 + SIZE_BUCKETS;
const SIZE_BUCKETS: usize = poolcap_probe::tally::SIZE_LABELS.len();

// eBPF opcodes (include/uapi/linux/bpf.h, bpf_common.h).
const LDX: u8 = 0x01;
const ST: u8 = 0x02;
const STX: u8 = 0x03;
const ALU: u8 = 0x04;
const JMP: u8 = 0x05;
const JMP32: u8 = 0x06;
const ALU64: u8 = 0x07;
const W: u8 = 0x00;
const H: u8 = 0x08;
const B: u8 = 0x10;
const DW: u8 = 0x18;
const MEM: u8 = 0x60;
const K: u8 = 0x00;
const X: u8 = 0x08;
const ADD: u8 = 0x00;
const SUB: u8 = 0x10;
const MUL: u8 = 0x20;
const DIV: u8 = 0x30;
const OR: u8 = 0x40;
const AND: u8 = 0x50;
const LSH: u8 = 0x60;
const RSH: u8 = 0x70;
const NEG: u8 = 0x80;
const MOD: u8 = 0x90;
const XOR: u8 = 0xa0;
const MOV: u8 = 0xb0;
const END_TO_BE: u8 = 0xd8;
const JA: u8 = 0x00;
const JEQ: u8 = 0x10;
const JGT: u8 = 0x20;
const JGE: u8 = 0x30;
const JSET: u8 = 0x40;
const JNE: u8 = 0x50;
const JLT: u8 = 0xa0;
const JLE: u8 = 0xb0;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;
/// `BPF_LD | BPF_DW | BPF_IMM`: a 64-bit immediate over two instructions.
const LD_IMM64: u8 = 0x18;
const PSEUDO_MAP_FD: u8 = 1;
const FN_MAP_LOOKUP_ELEM: i32 = 1;
const FN_SKB_LOAD_BYTES: i32 = 26;
const FN_KTIME_GET_NS: i32 = 5;
/// tcx: let the packet continue (`TC_ACT_UNSPEC`).
const TCX_NEXT: i32 = -1;

// `struct __sk_buff` offsets.
const SKB_LEN: i16 = 0;
const SKB_VLAN_PRESENT: i16 = 20;
const SKB_VLAN_TCI: i16 = 24;
const SKB_VLAN_PROTO: i16 = 28;
const SKB_CB0: i16 = 48;
const SKB_DATA: i16 = 76;
const SKB_DATA_END: i16 = 80;

// Registers.
const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R3: u8 = 3;
const R4: u8 = 4;
const R5: u8 = 5;
const CTX: u8 = 6;
const RA: u8 = 7;
const RX: u8 = 8;
const TAG: u8 = 9;
const FP: u8 = 10;

// Stack slots (offsets from the frame pointer).
fn mem_slot(k: u32) -> i16 {
    -4 * (k as i16 + 1)
}
const LOAD_BUF: i16 = -72;
const KEY: i16 = -76;
const WIRE_LEN: i16 = -88;
const LOAD_OFF: i16 = -96;
/// This packet's generation's first slot in the counts map (0 or [`GEN_STRIDE`]).
const GEN_OFF: i16 = -104;

/// Counts-map slots per generation: the total (0), rules (1..FLOW_SIDE), and the flows
/// rules' flow sides (FLOW_SIDE..GEN_STRIDE: no-IP and evicted packets).
pub const GEN_STRIDE: u32 = 3072;
/// Where the flow-side slots start within a generation.
pub const FLOW_SIDE: u32 = 2560;
/// Epochs are 31 bits: the generation word is `epoch << 1 | generation`.
pub const EPOCH_MASK: u32 = u32::MAX >> 1;

/// Where a program takes the packet's generation from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// Generation 0 always (for `BPF_PROG_TEST_RUN`); counts the total.
    Zero,
    /// The stamp program: reads the generation word (an array of one u32, `epoch << 1 |
    /// generation`, by fd) once, stamps it into `cb[0]` and counts the total.
    Word(i32),
    /// A rule program behind the stamp: takes the generation from `cb[0]` and counts only
    /// packets stamped with `epoch` (the rule set it belongs to); no total.
    Stamped {
        /// This program's rule set (at most [`EPOCH_MASK`]).
        epoch: u32,
    },
}

/// The maps a program uses, by fd.
#[derive(Debug, Clone, Copy)]
pub struct Maps {
    /// The per-CPU counts array: two generations of [`GEN_STRIDE`] slots.
    pub counts: i32,
    /// Where the packet's generation comes from.
    pub gen: Generation,
}

/// Where the VLAN tag comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vlan {
    /// The skb's metadata: the program as attached.
    Skb,
    /// A fixed tag (TPID, TCI), or none: for running the program on a buffer with
    /// `BPF_PROG_TEST_RUN`, which builds an skb without VLAN metadata.
    Fixed(Option<(u16, u16)>),
}

/// One rule to count: its map slot and its checked classic program (offline semantics).
#[derive(Debug, Clone)]
pub struct KernelRule<'a> {
    /// Map slot (1..; slot 0 is the total).
    pub slot: u32,
    /// The classic BPF program, checked (jumps inside, ends in a return, M index < 16).
    pub filter: &'a [BpfInsn],
    /// With the flows action: the rule's flow maps and flow-side slot.
    pub flows: Option<FlowMaps>,
}

/// A flows rule's maps for generation 0 and 1 (by fd) and its flow-side slot
/// (FLOW_SIDE..GEN_STRIDE).
#[derive(Debug, Clone, Copy)]
pub struct FlowMaps {
    /// The flow maps of generation 0 and 1.
    pub maps: [i32; 2],
    /// The counts-map slot (within a generation) of its no-IP and evicted packets.
    pub side: u32,
}

/// A jump whose target is a label, patched at the end.
struct Fixup {
    at: usize,
    label: usize,
}

struct Emitter {
    code: Vec<Insn>,
    labels: Vec<Option<usize>>,
    fixups: Vec<Fixup>,
    map_fd: i32,
    /// Behind the stamp program: the packet's time is in `cb[1..3]`.
    stamped: bool,
}

impl Emitter {
    fn emit(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.code.push(Insn::new(code, dst, src, off, imm));
    }

    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }

    fn bind(&mut self, label: usize) {
        self.labels[label] = Some(self.code.len());
    }

    /// `if dst OP imm goto label` (`class` JMP: 64-bit, JMP32: 32-bit).
    fn jump_k(&mut self, class: u8, op: u8, dst: u8, imm: i32, label: usize) {
        self.fixups.push(Fixup {
            at: self.code.len(),
            label,
        });
        self.emit(class | op | K, dst, 0, 0, imm);
    }

    fn jump_x(&mut self, class: u8, op: u8, dst: u8, src: u8, label: usize) {
        self.fixups.push(Fixup {
            at: self.code.len(),
            label,
        });
        self.emit(class | op | X, dst, src, 0, 0);
    }

    fn goto(&mut self, label: usize) {
        self.jump_k(JMP, JA, 0, 0, label);
    }

    fn alu32_k(&mut self, op: u8, dst: u8, imm: i32) {
        self.emit(ALU | op | K, dst, 0, 0, imm);
    }

    fn alu32_x(&mut self, op: u8, dst: u8, src: u8) {
        self.emit(ALU | op | X, dst, src, 0, 0);
    }

    fn alu64_k(&mut self, op: u8, dst: u8, imm: i32) {
        self.emit(ALU64 | op | K, dst, 0, 0, imm);
    }

    fn alu64_x(&mut self, op: u8, dst: u8, src: u8) {
        self.emit(ALU64 | op | X, dst, src, 0, 0);
    }

    fn ldx(&mut self, size: u8, dst: u8, src: u8, off: i16) {
        self.emit(LDX | MEM | size, dst, src, off, 0);
    }

    fn stx(&mut self, size: u8, dst: u8, off: i16, src: u8) {
        self.emit(STX | MEM | size, dst, src, off, 0);
    }

    fn call(&mut self, helper: i32) {
        self.emit(JMP | CALL, 0, 0, 0, helper);
    }

    fn finish(mut self) -> Result<Vec<Insn>, String> {
        for f in &self.fixups {
            let target = self.labels[f.label].ok_or("internal: unbound label")?;
            let off = target as i64 - f.at as i64 - 1;
            self.code[f.at].off = i16::try_from(off)
                .map_err(|_| "the rules make a program too long for eBPF jumps".to_string())?;
        }
        Ok(self.code)
    }

    /// Returns `TCX_NEXT`: the packet goes on.
    fn exit(&mut self) {
        self.alu64_k(MOV, R0, TCX_NEXT);
        self.emit(JMP | EXIT, 0, 0, 0, 0);
    }

    /// `dst = n bytes of the stored frame at offset r2` (big-endian), or go to `reject`.
    fn load(&mut self, dst: u8, n: i32, reject: usize) {
        let (direct, shift, done) = (self.label(), self.label(), self.label());
        self.jump_k(JMP, JEQ, TAG, 0, direct);
        self.jump_k(JMP32, JGE, R2, 16, shift);
        self.jump_k(JMP32, JLE, R2, 12 - n, direct);
        // The load touches the tag: assemble it byte by byte.
        self.stx(W, FP, LOAD_OFF, R2);
        self.alu32_k(MOV, dst, 0);
        for i in 0..n {
            let (packet, after_tag, got) = (self.label(), self.label(), self.label());
            self.ldx(W, R2, FP, LOAD_OFF);
            self.alu32_k(ADD, R2, i);
            self.jump_k(JMP32, JLT, R2, 12, packet);
            self.jump_k(JMP32, JGE, R2, 16, after_tag);
            // Tag byte r2 (12..16) of `tpid << 16 | tci`: shift by 8 * (15 - r2).
            self.alu32_k(MOV, R1, 15);
            self.alu32_x(SUB, R1, R2);
            self.alu32_k(LSH, R1, 3);
            self.alu32_x(MOV, R3, TAG);
            self.alu32_x(RSH, R3, R1);
            self.alu32_k(AND, R3, 0xff);
            self.goto(got);
            self.bind(after_tag);
            self.alu32_k(SUB, R2, 4);
            self.bind(packet);
            self.load_bytes(1, reject);
            self.ldx(B, R3, FP, LOAD_BUF);
            self.bind(got);
            self.alu32_k(LSH, dst, 8);
            self.alu32_x(OR, dst, R3);
        }
        self.goto(done);
        self.bind(shift);
        self.alu32_k(SUB, R2, 4);
        self.bind(direct);
        // Within the linear data: read the packet in place; otherwise (or past 64 KiB,
        // beyond what the verifier lets a packet offset be) through the helper.
        let helper = self.label();
        self.jump_k(JMP, JGT, R2, 0xffff, helper);
        self.ldx(W, R3, CTX, SKB_DATA);
        self.ldx(W, R4, CTX, SKB_DATA_END);
        self.alu64_x(ADD, R3, R2);
        self.alu64_x(MOV, R5, R3);
        self.alu64_k(ADD, R5, n);
        self.jump_x(JMP, JGT, R5, R4, helper);
        self.read_be(dst, n, R3, 0);
        self.goto(done);
        self.bind(helper);
        self.load_bytes(n, reject);
        self.read_be(dst, n, FP, LOAD_BUF);
        self.bind(done);
    }

    /// `dst = n bytes at src + off`, big-endian.
    fn read_be(&mut self, dst: u8, n: i32, src: u8, off: i16) {
        match n {
            4 => {
                self.ldx(W, dst, src, off);
                self.emit(ALU | END_TO_BE, dst, 0, 0, 32);
            }
            2 => {
                self.ldx(H, dst, src, off);
                self.emit(ALU | END_TO_BE, dst, 0, 0, 16);
            }
            _ => self.ldx(B, dst, src, off),
        }
    }

    /// `bpf_skb_load_bytes(ctx, r2, fp + LOAD_BUF, n)`, rejecting on error.
    fn load_bytes(&mut self, n: i32, reject: usize) {
        self.alu64_x(MOV, R1, CTX);
        self.alu64_x(MOV, R3, FP);
        self.alu64_k(ADD, R3, i32::from(LOAD_BUF));
        self.alu64_k(MOV, R4, n);
        self.call(FN_SKB_LOAD_BYTES);
        self.jump_k(JMP, JNE, R0, 0, reject);
    }

    /// r0 = this CPU's value of slot `slot` of the packet's generation, or go to `skip`.
    fn slot_ptr(&mut self, slot: u32, skip: usize) {
        self.ldx(DW, R1, FP, GEN_OFF);
        self.alu64_k(ADD, R1, slot as i32);
        self.stx(W, FP, KEY, R1);
        self.emit(LD_IMM64, R1, PSEUDO_MAP_FD, 0, self.map_fd);
        self.emit(0, 0, 0, 0, 0);
        self.alu64_x(MOV, R2, FP);
        self.alu64_k(ADD, R2, i32::from(KEY));
        self.call(FN_MAP_LOOKUP_ELEM);
        self.jump_k(JMP, JEQ, R0, 0, skip);
    }

    /// Adds this packet to map slot `slot`: packets, wire bytes and its size bucket.
    fn count(&mut self, slot: u32, skip: usize) {
        self.slot_ptr(slot, skip);
        self.add_at(0, None);
        self.ldx(DW, R2, FP, WIRE_LEN);
        self.add_at(8, Some(R2));
        let done = self.label();
        let bounds = poolcap_probe::tally::SIZE_BOUNDS;
        let buckets: Vec<usize> = (0..=bounds.len()).map(|_| self.label()).collect();
        for (i, &b) in bounds.iter().enumerate() {
            self.jump_k(JMP, JLE, R2, b as i32, buckets[i]);
        }
        self.goto(buckets[bounds.len()]);
        for (i, &l) in buckets.iter().enumerate() {
            self.bind(l);
            self.add_at(16 + 8 * i as i16, None);
            self.goto(done);
        }
        self.bind(done);
    }

    /// `*(u64 *)(r0 + off) += by` (1 when None); the value is this CPU's own.
    fn add_at(&mut self, off: i16, by: Option<u8>) {
        self.ldx(DW, R1, R0, off);
        match by {
            Some(r) => self.alu64_x(ADD, R1, r),
            None => self.alu64_k(ADD, R1, 1),
        }
        self.stx(DW, R0, off, R1);
    }

    /// The prologue: context, zeroed scratch memory, the tag, the stored length.
    fn prologue(&mut self, vlan: Vlan) {
        self.alu64_x(MOV, CTX, R1);
        for i in 0..8 {
            self.emit(ST | MEM | DW, FP, 0, -8 * (i + 1), 0);
        }
        match vlan {
            Vlan::Skb => {
                // tag = (be16(vlan_proto) << 16 | vlan_tci) * vlan_present (0 or 1).
                self.ldx(W, TAG, CTX, SKB_VLAN_PROTO);
                self.emit(ALU | END_TO_BE, TAG, 0, 0, 16);
                self.alu64_k(LSH, TAG, 16);
                self.ldx(W, R1, CTX, SKB_VLAN_TCI);
                self.alu64_k(AND, R1, 0xffff);
                self.alu64_x(OR, TAG, R1);
                self.ldx(W, R1, CTX, SKB_VLAN_PRESENT);
                self.alu64_x(MUL, TAG, R1);
                self.alu64_k(LSH, R1, 2);
            }
            Vlan::Fixed(tag) => {
                let word = tag.map_or(0, |(tpid, tci)| u32::from(tpid) << 16 | u32::from(tci));
                self.alu32_k(MOV, TAG, word as i32);
                self.alu64_k(MOV, R1, if tag.is_some() { 4 } else { 0 });
            }
        }
        self.ldx(W, R2, CTX, SKB_LEN);
        self.alu64_x(ADD, R2, R1);
        self.stx(DW, FP, WIRE_LEN, R2);
    }

    /// GEN_OFF = the packet's generation * GEN_STRIDE (see [`Generation`]); a rule
    /// program returns at once for a packet stamped with another epoch (here: a jump to
    /// the program's end could be too long for a jump's offset).
    fn generation(&mut self, gen: Generation) {
        self.emit(ST | MEM | DW, FP, 0, GEN_OFF, 0);
        match gen {
            Generation::Zero => {}
            Generation::Word(fd) => {
                // A stamp no rule set has, should the word be missing (it cannot).
                let none = self.label();
                self.alu32_k(MOV, R1, -1);
                self.stx(W, CTX, SKB_CB0, R1);
                self.emit(ST | MEM | W, FP, 0, KEY, 0);
                self.emit(LD_IMM64, R1, PSEUDO_MAP_FD, 0, fd);
                self.emit(0, 0, 0, 0, 0);
                self.alu64_x(MOV, R2, FP);
                self.alu64_k(ADD, R2, i32::from(KEY));
                self.call(FN_MAP_LOOKUP_ELEM);
                self.jump_k(JMP, JEQ, R0, 0, none);
                self.ldx(W, R1, R0, 0);
                self.stx(W, CTX, SKB_CB0, R1);
                self.gen_off(R1);
                self.bind(none);
                // The packet's time for every program (flows' first and last seen), read
                // after the word: a packet of the new generation is never older than the
                // flip.
                self.call(FN_KTIME_GET_NS);
                self.stx(W, CTX, SKB_CB0 + 4, R0);
                self.alu64_k(RSH, R0, 32);
                self.stx(W, CTX, SKB_CB0 + 8, R0);
            }
            Generation::Stamped { epoch } => {
                self.ldx(W, R1, CTX, SKB_CB0);
                self.alu32_x(MOV, R2, R1);
                self.alu32_k(RSH, R2, 1);
                let ours = self.label();
                self.jump_k(JMP32, JEQ, R2, (epoch & EPOCH_MASK) as i32, ours);
                self.exit();
                self.bind(ours);
                self.gen_off(R1);
            }
        }
    }

    /// GEN_OFF = (bit 0 of `word`) * GEN_STRIDE; clobbers `word`.
    fn gen_off(&mut self, word: u8) {
        self.alu64_k(AND, word, 1);
        self.alu64_k(MUL, word, GEN_STRIDE as i32);
        self.stx(DW, FP, GEN_OFF, word);
    }

    /// One rule: its classic program, then the count.
    fn rule(&mut self, rule: &KernelRule<'_>) -> Result<(), String> {
        let last_returns = rule.filter.last().is_some_and(|i| i.code & 0x07 == 0x06);
        if !last_returns {
            return Err("a classic program must end with a return".into());
        }
        let (matched, next) = (self.label(), self.label());
        let at: Vec<usize> = (0..rule.filter.len()).map(|_| self.label()).collect();
        let target = |pc: usize, by: usize| -> Result<usize, String> {
            at.get(pc + 1 + by)
                .copied()
                .ok_or_else(|| format!("jump out of the program at instruction {pc}"))
        };
        self.alu32_k(MOV, RA, 0);
        self.alu32_k(MOV, RX, 0);
        for (pc, i) in rule.filter.iter().enumerate() {
            self.bind(at[pc]);
            let k = i.k as i32;
            let unsupported = || format!("instruction {pc} (code {:#x})", i.code);
            let code = i.code as u8;
            let scratch = matches!(code & 0x07, 0x02 | 0x03)
                || (matches!(code & 0x07, 0x00 | 0x01) && code & 0xe0 == 0x60);
            if scratch && i.k >= 16 {
                return Err(format!("scratch memory index {} at instruction {pc}", i.k));
            }
            match code & 0x07 {
                // LD and LDX.
                0x00 | 0x01 => self.load_insn(code, i.k, next).ok_or_else(unsupported)?,
                0x02 => self.stx(W, FP, mem_slot(i.k), RA),
                0x03 => self.stx(W, FP, mem_slot(i.k), RX),
                0x04 => self.alu(code, k, next).ok_or_else(unsupported)?,
                0x05 if code & 0xf0 == JA => self.goto(target(pc, i.k as usize)?),
                0x05 => {
                    let (t, f) = (target(pc, i.jt.into())?, target(pc, i.jf.into())?);
                    self.jump_insn(code, k, t, (i.jf != 0).then_some(f))
                        .ok_or_else(unsupported)?;
                }
                0x06 => match code & 0x18 {
                    0x00 => self.goto(if i.k != 0 { matched } else { next }),
                    rval => {
                        let r = if rval == 0x08 { RX } else { RA };
                        self.jump_k(JMP32, JNE, r, 0, matched);
                        self.goto(next);
                    }
                },
                0x07 => {
                    if code & 0xf8 == 0 {
                        self.alu32_x(MOV, RX, RA);
                    } else {
                        self.alu32_x(MOV, RA, RX);
                    }
                }
                _ => return Err(unsupported()),
            }
        }
        self.bind(matched);
        self.count(rule.slot, next);
        if let Some(f) = rule.flows {
            self.flows(f.side, f.maps, next);
        }
        self.bind(next);
        Ok(())
    }

    /// A classic load into A (`LD`) or X (`LDX`); None when the mode or size is unknown.
    /// A read past the packet jumps to `reject`, as the kernel's interpreter returns 0.
    fn load_insn(&mut self, code: u8, k: u32, reject: usize) -> Option<()> {
        let dst = if code & 0x07 == 0 { RA } else { RX };
        let n = match code & 0x18 {
            0x00 => 4,
            0x08 => 2,
            0x10 => 1,
            _ => return None,
        };
        match (code & 0x07, code & 0xe0) {
            (_, 0x00) => self.alu32_k(MOV, dst, k as i32),
            (0, 0x20) => {
                self.alu32_k(MOV, R2, k as i32);
                self.load(dst, n, reject);
            }
            (0, 0x40) => {
                self.alu32_x(MOV, R2, RX);
                self.alu32_k(ADD, R2, k as i32);
                self.load(dst, n, reject);
            }
            (_, 0x60) => self.ldx(W, dst, FP, mem_slot(k)),
            (_, 0x80) => {
                self.ldx(DW, dst, FP, WIRE_LEN);
                self.alu32_x(MOV, dst, dst);
            }
            // MSH: X = 4 * (P[k] & 0xf).
            (1, 0xa0) => {
                self.alu32_k(MOV, R2, k as i32);
                self.load(RX, 1, reject);
                self.alu32_k(AND, RX, 0x0f);
                self.alu32_k(LSH, RX, 2);
            }
            _ => return None,
        }
        Some(())
    }

    /// A classic conditional jump: to `taken` when it holds, else to `otherwise` (None: the
    /// next instruction); None when the comparison is unknown.
    fn jump_insn(
        &mut self,
        code: u8,
        k: i32,
        taken: usize,
        otherwise: Option<usize>,
    ) -> Option<()> {
        let op = code & 0xf0;
        if !matches!(op, JEQ | JGT | JGE | JSET) {
            return None;
        }
        if code & X != 0 {
            self.jump_x(JMP32, op, RA, RX, taken);
        } else {
            self.jump_k(JMP32, op, RA, k, taken);
        }
        if let Some(f) = otherwise {
            self.goto(f);
        }
        Some(())
    }

    /// A classic ALU instruction on A; None when the operation is unknown.
    fn alu(&mut self, code: u8, k: i32, reject: usize) -> Option<()> {
        let op = code & 0xf0;
        let by_x = code & X != 0;
        match op {
            ADD | SUB | MUL | OR | AND | XOR => {
                if by_x {
                    self.alu32_x(op, RA, RX);
                } else {
                    self.alu32_k(op, RA, k);
                }
            }
            NEG => self.emit(ALU | NEG, RA, 0, 0, 0),
            DIV | MOD => {
                if by_x {
                    self.jump_k(JMP32, JEQ, RX, 0, reject);
                    self.alu32_x(op, RA, RX);
                } else if k == 0 {
                    self.goto(reject);
                } else {
                    self.alu32_k(op, RA, k);
                }
            }
            LSH | RSH => {
                if by_x {
                    let (zero, done) = (self.label(), self.label());
                    self.jump_k(JMP32, JGE, RX, 32, zero);
                    self.alu32_x(op, RA, RX);
                    self.goto(done);
                    self.bind(zero);
                    self.alu32_k(MOV, RA, 0);
                    self.bind(done);
                } else if (k as u32) >= 32 {
                    self.alu32_k(MOV, RA, 0);
                } else {
                    self.alu32_k(op, RA, k);
                }
            }
            _ => return None,
        }
        Some(())
    }
}

/// The program counting `rules` into the per-CPU array `maps.counts`, and their flows into
/// their flow maps; unless [`Generation::Stamped`], also every packet in slot 0 of its
/// generation (the total).
pub fn program(rules: &[KernelRule<'_>], maps: Maps, vlan: Vlan) -> Result<Vec<Insn>, String> {
    if rules.iter().any(|r| r.slot == 0 || r.slot >= FLOW_SIDE) {
        return Err(format!("rule slots are 1..{FLOW_SIDE}"));
    }
    let sides = FLOW_SIDE..GEN_STRIDE;
    if rules
        .iter()
        .any(|r| r.flows.is_some_and(|f| !sides.contains(&f.side)))
    {
        return Err(format!("flow-side slots are {FLOW_SIDE}..{GEN_STRIDE}"));
    }
    let mut e = Emitter {
        code: Vec::new(),
        labels: Vec::new(),
        fixups: Vec::new(),
        map_fd: maps.counts,
        stamped: matches!(maps.gen, Generation::Stamped { .. }),
    };
    e.prologue(vlan);
    e.generation(maps.gen);
    if rules.iter().any(|r| r.flows.is_some()) {
        e.flow_key();
    }
    if !matches!(maps.gen, Generation::Stamped { .. }) {
        let after_total = e.label();
        e.count(0, after_total);
        e.bind(after_total);
    }
    for r in rules {
        e.rule(r)?;
    }
    e.exit();
    e.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insn(code: u16, jt: u8, jf: u8, k: u32) -> BpfInsn {
        BpfInsn { code, jt, jf, k }
    }

    #[test]
    fn a_program_counts_the_total_then_ends_with_tcx_next() {
        let p = program(
            &[],
            Maps {
                counts: 7,
                gen: Generation::Zero,
            },
            Vlan::Skb,
        )
        .unwrap();
        let n = p.len();
        assert_eq!(p[n - 1], Insn::new(JMP | EXIT, 0, 0, 0, 0));
        assert_eq!(p[n - 2], Insn::new(ALU64 | MOV | K, 0, 0, 0, -1));
        // The map is loaded by fd as a two-slot pseudo instruction.
        let ld = p.iter().position(|i| i.code == LD_IMM64).unwrap();
        assert_eq!((p[ld].regs, p[ld].imm), (R1 | PSEUDO_MAP_FD << 4, 7));
        assert_eq!(p[ld + 1], Insn::new(0, 0, 0, 0, 0));
    }

    #[test]
    fn jumps_land_on_their_labels() {
        // `ldh [12]; jeq #0x800 jt 0 jf 1; ret #1; ret #0`.
        let f = [
            insn(0x28, 0, 0, 12),
            insn(0x15, 0, 1, 0x800),
            insn(0x06, 0, 0, 1),
            insn(0x06, 0, 0, 0),
        ];
        let p = program(
            &[KernelRule {
                slot: 1,
                filter: &f,
                flows: None,
            }],
            Maps {
                counts: 3,
                gen: Generation::Zero,
            },
            Vlan::Fixed(None),
        )
        .unwrap();
        for (at, i) in p.iter().enumerate() {
            let class = i.code & 0x07;
            let is_jump = (class == JMP || class == JMP32) && !matches!(i.code & 0xf0, CALL | EXIT);
            if is_jump {
                let to = at as i64 + 1 + i64::from(i.off);
                assert!(to > 0 && (to as usize) < p.len(), "jump at {at} to {to}");
            }
        }
        // The comparison is 32-bit and unsigned, against the constant.
        assert!(p
            .iter()
            .any(|i| i.code == JMP32 | JEQ | K && i.regs == RA && i.imm == 0x800));
    }

    #[test]
    fn the_stamp_program_stamps_and_rule_programs_read_the_stamp() {
        let dst = |i: &Insn| i.regs & 0x0f;
        let src = |i: &Insn| i.regs >> 4;
        let maps = |gen| Maps { counts: 3, gen };
        let counts_lookups = |p: &[Insn]| {
            p.iter()
                .filter(|i| i.code == LD_IMM64 && i.imm == 3)
                .count()
        };
        let stamp = program(&[], maps(Generation::Word(4)), Vlan::Skb).unwrap();
        // The word (from map 4) into cb[0], the time into cb[1..3]; the total counted.
        for off in [SKB_CB0, SKB_CB0 + 4, SKB_CB0 + 8] {
            assert!(
                stamp
                    .iter()
                    .any(|i| i.code == STX | MEM | W && dst(i) == CTX && i.off == off),
                "writes cb at {off}"
            );
        }
        assert!(stamp.iter().any(|i| i.code == LD_IMM64 && i.imm == 4));
        assert_eq!(counts_lookups(&stamp), 1);

        let all = [insn(0x06, 0, 0, 1)];
        let rules = [KernelRule {
            slot: 1,
            filter: &all,
            flows: None,
        }];
        let stamped = program(&rules, maps(Generation::Stamped { epoch: 5 }), Vlan::Skb).unwrap();
        assert!(stamped
            .iter()
            .any(|i| i.code == LDX | MEM | W && src(i) == CTX && i.off == SKB_CB0));
        // Its own epoch only, with a return right there (no jump to the far end).
        let check = stamped
            .iter()
            .position(|i| i.code == JMP32 | JEQ | K && i.imm == 5)
            .expect("epoch check");
        assert_eq!(stamped[check + 2], Insn::new(JMP | EXIT, 0, 0, 0, 0));
        // No total, no context write, no word.
        assert_eq!(counts_lookups(&stamped), 1, "the rule's slot only");
        assert!(!stamped
            .iter()
            .any(|i| i.code & 0x07 == STX && dst(i) == CTX));
        let zero = program(&rules, maps(Generation::Zero), Vlan::Skb).unwrap();
        assert_eq!(counts_lookups(&zero), 2, "the total and the rule's slot");
    }

    #[test]
    fn bad_programs_are_refused_not_miscompiled() {
        let refusal = |filter: &[BpfInsn]| {
            program(
                &[KernelRule {
                    slot: 1,
                    filter,
                    flows: None,
                }],
                Maps {
                    counts: 3,
                    gen: Generation::Zero,
                },
                Vlan::Skb,
            )
            .unwrap_err()
        };
        let e = refusal(&[insn(0x15, 0, 9, 1), insn(0x06, 0, 0, 0)]);
        assert!(e.contains("jump out"), "{e}");
        let e = refusal(&[insn(0x04 | 0xf0, 0, 0, 0), insn(0x06, 0, 0, 0)]);
        assert!(e.contains("instruction 0"), "{e}");
    }
}
