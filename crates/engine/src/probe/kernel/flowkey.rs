//! The `flows` action in the kernel: the packet's 5-tuple and TCP flags, parsed once per
//! packet into a stack key by the definition the user-space probe's parser follows (in
//! [`poolcap_probe::packet`]'s docs: the ethertype decides the family, a total length below
//! the IPv4 header's is not used), and per flows rule an update of that rule's per-CPU
//! hash map: packets, bytes, first and last seen, OR of the TCP flags.
//!
//! The parse reads the skb's own data, where the kernel already removed the outer VLAN tag:
//! the layer-3 bytes are the stored frame's, shifted, so no virtual tag is needed. Like the
//! user-space parser it looks through at most three VLAN tags in all (the stripped one
//! included), keys IPv4 and IPv6 only (no key: counted in the rule's `no_ip`), walks the
//! IPv6 extension headers etherparse walks (hop-by-hop first, destination options,
//! routing, fragment, authentication; up to 8 of them), and gives ports 0 (and no flags)
//! to fragments, to headers cut short and to protocols other than TCP and UDP. MACsec has
//! no key on either side. Not done here (the frame is keyed without ports instead): IPv4's
//! authentication header, which the user-space parser walks.
//!
//! A new flow is inserted with `BPF_NOEXIST`; when the map is full (the rule's flow cap), or
//! the kernel cannot allocate the element then, the packet goes to the rule's "evicted"
//! counters instead, so flows + evicted + no_ip is every packet of the rule, as with the
//! user-space table. A flow found with zero packets on this CPU (inserted by another CPU,
//! or zeroed by the reporter) gets its first seen. Two maps per rule and the generation
//! word let the reporter take one map whole while the program fills the other.

use super::*;

/// Key bytes: source and destination address (IPv4 in the first 4 of 16), family (4 or
/// 6), protocol, source and destination port (host order), 2 zero bytes.
pub const KEY_SIZE: u32 = 40;
/// Value words: packets, bytes, first seen, last seen (`bpf_ktime_get_ns`), TCP flags.
pub const FLOW_VALUE_SIZE: u32 = 40;

// Stack slots (below the classic program's, which end at GEN_OFF).
const FKEY: i16 = GEN_OFF - KEY_SIZE as i16;
const FVAL: i16 = FKEY - FLOW_VALUE_SIZE as i16;
const HASKEY: i16 = FVAL - 8;
const END: i16 = HASKEY - 8;
const NOW: i16 = END - 8;
const SCRATCH: i16 = NOW - 8;
const FRAG: i16 = SCRATCH - 8;

const FN_MAP_UPDATE_ELEM: i32 = 2;
const BPF_NOEXIST: i32 = 1;
const JSLT: u8 = 0xc0;

/// Words of a rule's "flow side" slot in the counts map.
pub mod side {
    /// Matching packets without an IP header.
    pub const NO_IP: usize = 0;
    /// Packets that found the flow map full.
    pub const EVICTED_PACKETS: usize = 1;
    /// Their bytes.
    pub const EVICTED_BYTES: usize = 2;
}

impl Emitter {
    /// `dst = n bytes of the skb at r7 + off` (big-endian), or go to `fail`.
    fn raw(&mut self, dst: u8, n: i32, off: i32, fail: usize) {
        self.alu64_x(MOV, R2, RA);
        self.alu64_k(ADD, R2, off);
        self.load_bytes(n, fail);
        self.read_be(dst, n, FP, LOAD_BUF);
    }

    /// Copies n bytes of the skb at r7 + off to the stack at `to`, or goes to `fail`.
    fn copy(&mut self, off: i32, to: i16, n: i32, fail: usize) {
        self.alu64_x(MOV, R1, CTX);
        self.alu64_x(MOV, R2, RA);
        self.alu64_k(ADD, R2, off);
        self.alu64_x(MOV, R3, FP);
        self.alu64_k(ADD, R3, i32::from(to));
        self.alu64_k(MOV, R4, n);
        self.call(FN_SKB_LOAD_BYTES);
        self.jump_k(JMP, JNE, R0, 0, fail);
    }

    /// Parses the packet into the flow key on the stack (HASKEY 1) or leaves HASKEY 0.
    /// Uses r7 (offset) and r8 (ether type, then protocol) before any rule runs.
    pub(super) fn flow_key(&mut self) {
        for i in 0..5 {
            self.emit(ST | MEM | DW, FP, 0, FKEY + 8 * i, 0);
            self.emit(ST | MEM | DW, FP, 0, FVAL + 8 * i, 0);
        }
        self.emit(ST | MEM | DW, FP, 0, HASKEY, 0);
        self.emit(ST | MEM | DW, FP, 0, FRAG, 0);
        if self.stamped {
            self.ldx(W, R0, CTX, SKB_CB0 + 4);
            self.ldx(W, R1, CTX, SKB_CB0 + 8);
            self.alu64_k(LSH, R1, 32);
            self.alu64_x(OR, R0, R1);
        } else {
            self.call(FN_KTIME_GET_NS);
        }
        self.stx(DW, FP, NOW, R0);
        let (nokey, keyed, v4, v6, l4) = (
            self.label(),
            self.label(),
            self.label(),
            self.label(),
            self.label(),
        );
        self.alu64_k(MOV, RA, 12);
        let ether_type = self.label();
        for i in 0..4 {
            let tag = self.label();
            self.raw(RX, 2, 0, nokey);
            for tpid in [0x8100, 0x88a8, 0x9100] {
                self.jump_k(JMP, JEQ, RX, tpid, tag);
            }
            self.goto(ether_type);
            self.bind(tag);
            // At most three tags in the stored frame, the one the kernel took included.
            match i {
                3 => self.goto(nokey),
                2 => self.jump_k(JMP, JNE, TAG, 0, nokey),
                _ => {}
            }
            if i < 3 {
                self.alu64_k(ADD, RA, 4);
            }
        }
        self.bind(ether_type);
        self.alu64_k(ADD, RA, 2);
        self.jump_k(JMP, JEQ, RX, 0x0800, v4);
        self.jump_k(JMP, JEQ, RX, 0x86dd, v6);
        self.goto(nokey);

        self.bind(v4);
        self.ipv4(nokey, keyed, l4);
        self.bind(v6);
        self.ipv6(nokey, keyed, l4);

        self.bind(l4);
        self.ports(keyed);
        self.bind(keyed);
        self.emit(ST | MEM | DW, FP, 0, HASKEY, 1);
        self.bind(nokey);
    }

    /// `r0 = min(r0, skb->len)`, clobbering r1.
    fn min_len(&mut self) {
        let ok = self.label();
        self.ldx(W, R1, CTX, SKB_LEN);
        self.jump_x(JMP, JLE, R0, R1, ok);
        self.alu64_x(MOV, R0, R1);
        self.bind(ok);
    }

    fn ipv4(&mut self, nokey: usize, keyed: usize, l4: usize) {
        self.raw(R0, 1, 0, nokey);
        self.alu64_x(MOV, R1, R0);
        self.alu64_k(RSH, R1, 4);
        self.jump_k(JMP, JNE, R1, 4, nokey);
        self.alu64_k(AND, R0, 0x0f);
        self.alu64_k(LSH, R0, 2);
        self.jump_k(JMP, JLT, R0, 20, nokey);
        self.stx(DW, FP, SCRATCH, R0);
        // The whole header must be there.
        self.alu64_x(ADD, R0, RA);
        self.ldx(W, R1, CTX, SKB_LEN);
        self.jump_x(JMP, JGT, R0, R1, nokey);
        self.raw(R0, 2, 6, nokey);
        self.stx(DW, FP, FRAG, R0);
        self.raw(RX, 1, 9, nokey);
        self.copy(12, FKEY, 4, nokey);
        self.copy(16, FKEY + 16, 4, nokey);
        self.emit(ST | MEM | B, FP, 0, FKEY + 32, 4);
        self.stx(B, FP, FKEY + 33, RX);
        // The payload ends at the total length, or the data's end when that comes first or
        // the total length is below the header's (not usable: TSO frames carry 0).
        self.raw(R0, 2, 2, keyed);
        let (long_enough, set_end, cut) = (self.label(), self.label(), self.label());
        self.ldx(DW, R1, FP, SCRATCH);
        self.jump_x(JMP, JGE, R0, R1, long_enough);
        self.ldx(W, R0, CTX, SKB_LEN);
        self.goto(set_end);
        self.bind(long_enough);
        self.alu64_x(ADD, R0, RA);
        self.min_len();
        self.bind(set_end);
        self.stx(DW, FP, END, R0);
        self.ldx(DW, R1, FP, SCRATCH);
        self.alu64_x(ADD, RA, R1);
        self.ldx(DW, R0, FP, FRAG);
        self.alu64_k(AND, R0, 0x3fff);
        self.jump_k(JMP, JNE, R0, 0, cut);
        self.goto(l4);
        self.bind(cut);
        self.goto(keyed);
    }

    fn ipv6(&mut self, nokey: usize, keyed: usize, l4: usize) {
        self.raw(R0, 1, 0, nokey);
        self.alu64_k(RSH, R0, 4);
        self.jump_k(JMP, JNE, R0, 6, nokey);
        self.raw(R0, 2, 4, nokey);
        self.stx(DW, FP, SCRATCH, R0);
        self.raw(RX, 1, 6, nokey);
        self.copy(8, FKEY, 16, nokey);
        self.copy(24, FKEY + 16, 16, nokey);
        self.emit(ST | MEM | B, FP, 0, FKEY + 32, 6);
        // The payload ends at the payload length (0: jumbo, the data's end).
        let (jumbo, set) = (self.label(), self.label());
        self.ldx(DW, R0, FP, SCRATCH);
        self.jump_k(JMP, JEQ, R0, 0, jumbo);
        self.alu64_k(ADD, R0, 40);
        self.alu64_x(ADD, R0, RA);
        self.min_len();
        self.goto(set);
        self.bind(jumbo);
        self.ldx(W, R0, CTX, SKB_LEN);
        self.bind(set);
        self.stx(DW, FP, END, R0);
        self.alu64_k(ADD, RA, 40);

        // Extension headers; a header cut short stops the walk without ports.
        let (done, stop) = (self.label(), self.label());
        for i in 0..9 {
            let (opt, frag, auth, next) = (self.label(), self.label(), self.label(), self.label());
            if i == 0 {
                self.jump_k(JMP, JEQ, RX, 0, opt);
                self.goto(next);
            } else {
                self.jump_k(JMP, JEQ, RX, 0, stop);
                self.jump_k(JMP, JEQ, RX, 60, opt);
                self.jump_k(JMP, JEQ, RX, 43, opt);
                self.jump_k(JMP, JEQ, RX, 44, frag);
                self.jump_k(JMP, JEQ, RX, 51, auth);
                self.goto(done);
            }
            // (len + 1) * 8 bytes.
            self.bind(opt);
            self.raw(R0, 1, 1, stop);
            self.alu64_k(ADD, R0, 1);
            self.alu64_k(LSH, R0, 3);
            self.ext_step(stop, next);
            if i == 0 {
                // Only hop-by-hop comes first.
                self.bind(next);
                continue;
            }
            // 8 bytes; fragmenting when the offset or the more-fragments bit is set.
            self.bind(frag);
            let whole = self.label();
            self.alu64_x(MOV, R0, RA);
            self.alu64_k(ADD, R0, 8);
            self.ldx(DW, R1, FP, END);
            self.jump_x(JMP, JGT, R0, R1, stop);
            self.raw(R0, 2, 2, stop);
            self.alu64_k(AND, R0, 0xfff9);
            self.jump_k(JMP, JEQ, R0, 0, whole);
            self.emit(ST | MEM | DW, FP, 0, FRAG, 1);
            self.bind(whole);
            self.alu64_k(MOV, R0, 8);
            self.ext_step(stop, next);
            // (len + 2) * 4 bytes.
            self.bind(auth);
            self.raw(R0, 1, 1, stop);
            self.alu64_k(ADD, R0, 2);
            self.alu64_k(LSH, R0, 2);
            self.ext_step(stop, next);
            self.bind(next);
        }
        self.bind(done);
        self.stx(B, FP, FKEY + 33, RX);
        self.ldx(DW, R0, FP, FRAG);
        self.jump_k(JMP, JEQ, R0, 0, l4);
        self.goto(keyed);
        self.bind(stop);
        self.stx(B, FP, FKEY + 33, RX);
        self.goto(keyed);
    }

    /// Steps over an extension header of r0 bytes at r7 (it must end by the payload's
    /// end): r8 = its next header, r7 past it; then goes to `next`.
    fn ext_step(&mut self, stop: usize, next: usize) {
        self.stx(DW, FP, SCRATCH, R0);
        self.alu64_x(ADD, R0, RA);
        self.ldx(DW, R1, FP, END);
        self.jump_x(JMP, JGT, R0, R1, stop);
        self.raw(RX, 1, 0, stop);
        self.ldx(DW, R0, FP, SCRATCH);
        self.alu64_x(ADD, RA, R0);
        self.goto(next);
    }

    /// Ports (and TCP flags) of the TCP or UDP header at r7, if it is whole before END.
    fn ports(&mut self, keyed: usize) {
        let (udp, tcp, both) = (self.label(), self.label(), self.label());
        self.ldx(DW, R1, FP, END);
        self.alu64_x(SUB, R1, RA);
        self.stx(DW, FP, SCRATCH, R1);
        self.jump_k(JMP, JEQ, RX, 17, udp);
        self.jump_k(JMP, JEQ, RX, 6, tcp);
        self.goto(keyed);

        self.bind(udp);
        self.jump_k(JMP, JSLT, R1, 8, keyed);
        self.goto(both);

        self.bind(tcp);
        self.jump_k(JMP, JSLT, R1, 20, keyed);
        self.raw(R0, 1, 12, keyed);
        self.alu64_k(RSH, R0, 4);
        self.jump_k(JMP, JLT, R0, 5, keyed);
        self.alu64_k(LSH, R0, 2);
        self.ldx(DW, R1, FP, SCRATCH);
        self.jump_x(JMP, JGT, R0, R1, keyed);
        self.raw(R0, 1, 13, keyed);
        self.alu64_k(AND, R0, 0x3f);
        self.stx(DW, FP, SCRATCH, R0);

        self.bind(both);
        self.raw(R0, 2, 0, keyed);
        self.stx(DW, FP, END, R0);
        self.raw(R0, 2, 2, keyed);
        self.stx(H, FP, FKEY + 36, R0);
        self.ldx(DW, R0, FP, END);
        self.stx(H, FP, FKEY + 34, R0);
        // TCP: the flags are in SCRATCH (udp never wrote them there).
        self.jump_k(JMP, JNE, RX, 6, keyed);
        self.ldx(DW, R0, FP, SCRATCH);
        self.stx(DW, FP, FVAL + 32, R0);
        self.goto(keyed);
    }

    /// The flows action of a rule with flow-side slot `side_slot` and two maps (generation 0 and
    /// 1); goes to `next`.
    pub(super) fn flows(&mut self, side_slot: u32, maps: [i32; 2], next: usize) {
        let (keyed, second) = (self.label(), self.label());
        self.ldx(DW, R1, FP, HASKEY);
        self.jump_k(JMP, JNE, R1, 0, keyed);
        self.side_add(side_slot, side::NO_IP, None, next);
        self.goto(next);
        self.bind(keyed);
        self.ldx(DW, R1, FP, GEN_OFF);
        self.jump_k(JMP, JNE, R1, 0, second);
        self.flow_update(side_slot, maps[0], next);
        self.bind(second);
        self.flow_update(side_slot, maps[1], next);
    }

    fn lookup_flow(&mut self, map: i32) {
        self.emit(LD_IMM64, R1, PSEUDO_MAP_FD, 0, map);
        self.emit(0, 0, 0, 0, 0);
        self.alu64_x(MOV, R2, FP);
        self.alu64_k(ADD, R2, i32::from(FKEY));
        self.call(FN_MAP_LOOKUP_ELEM);
    }

    fn flow_update(&mut self, side_slot: u32, map: i32, next: usize) {
        let (add, full) = (self.label(), self.label());
        self.lookup_flow(map);
        self.jump_k(JMP, JNE, R0, 0, add);
        self.emit(ST | MEM | DW, FP, 0, FVAL, 1);
        self.ldx(DW, R1, FP, WIRE_LEN);
        self.stx(DW, FP, FVAL + 8, R1);
        self.ldx(DW, R1, FP, NOW);
        self.stx(DW, FP, FVAL + 16, R1);
        self.stx(DW, FP, FVAL + 24, R1);
        self.emit(LD_IMM64, R1, PSEUDO_MAP_FD, 0, map);
        self.emit(0, 0, 0, 0, 0);
        self.alu64_x(MOV, R2, FP);
        self.alu64_k(ADD, R2, i32::from(FKEY));
        self.alu64_x(MOV, R3, FP);
        self.alu64_k(ADD, R3, i32::from(FVAL));
        self.alu64_k(MOV, R4, BPF_NOEXIST);
        self.call(FN_MAP_UPDATE_ELEM);
        self.jump_k(JMP, JEQ, R0, 0, next);
        // Another CPU inserted it meanwhile, or the map is full.
        self.lookup_flow(map);
        self.jump_k(JMP, JEQ, R0, 0, full);
        self.bind(add);
        // This CPU's copy: zero when another CPU inserted the flow.
        let seen = self.label();
        self.ldx(DW, R1, R0, 0);
        self.ldx(DW, R2, FP, NOW);
        self.jump_k(JMP, JNE, R1, 0, seen);
        self.stx(DW, R0, 16, R2);
        self.bind(seen);
        self.stx(DW, R0, 24, R2);
        self.add_at(0, None);
        self.ldx(DW, R2, FP, WIRE_LEN);
        self.add_at(8, Some(R2));
        self.ldx(DW, R1, R0, 32);
        self.ldx(DW, R2, FP, FVAL + 32);
        self.alu64_x(OR, R1, R2);
        self.stx(DW, R0, 32, R1);
        self.goto(next);
        self.bind(full);
        self.side_add(side_slot, side::EVICTED_PACKETS, None, next);
        self.ldx(DW, R2, FP, WIRE_LEN);
        self.add_at(8 * side::EVICTED_BYTES as i16, Some(R2));
        self.goto(next);
    }

    /// Adds 1 (or register `by`) to word `word` of flow-side slot `side_slot`; leaves the
    /// slot's pointer in r0.
    fn side_add(&mut self, side_slot: u32, word: usize, by: Option<u8>, skip: usize) {
        self.slot_ptr(side_slot, skip);
        self.add_at(8 * word as i16, by);
    }
}
