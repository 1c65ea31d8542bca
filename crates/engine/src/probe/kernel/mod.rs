//! `poolcap probe --in-kernel`: rules whose actions are counts, size histograms and flow
//! tables run in eBPF programs at the interface's tc ingress (TCX links), which add each
//! matching packet to its rule's slot of a per-CPU array and, with `flows`, to its flow in
//! the rule's per-CPU hash map ([`translate::flowkey`]); the reporter reads them at each
//! period end. Those packets are never copied to user space for the rule, and when every
//! rule runs in the kernel no capture socket is opened at all.
//!
//! Why tc and not XDP: at tc ingress the kernel has already moved an outer VLAN tag into
//! the skb's metadata, as for the AF_PACKET tap that feeds the user-space probe, whatever
//! the driver does with tags; the program puts the tag back virtually ([`translate`]), so
//! both paths see the same stored frame. XDP would see whatever the driver leaves in the
//! data, and cannot share the interface with poolcap's AF_XDP program.
//!
//! Several programs: one program holds at most [`MAX_KERNEL_RULES`] rules (the verifier
//! walks at most 1M instructions) and [`MAX_FLOW_RULES`] flows rules (64 maps), so the rules
//! are split ([`partition`]) over up to [`MAX_KERNEL_PROGRAMS`] programs, each its own TCX
//! link on the same ingress; TCX runs them in order and each returns `TCX_NEXT`. In front
//! of them runs a "stamp" program, attached first and never replaced, which reads the
//! generation word once per packet, writes it into the skb's `cb[0]` and counts the packet
//! in the total (slot 0). The rule programs take the packet's generation from that stamp,
//! not from the word: were each program to read the word itself, a flip between two
//! programs would put the packet in one period for some rules and in the next for others
//! With the stamp a packet is in one generation
//! in every program, like in one program. Every rule has its own slot and flow maps, which
//! only the one program holding it writes.
//!
//! Counting is exact across periods and rule changes: every map has two generations, and a
//! packet adds to the generation the word named when the stamp program read it. At a
//! period end the reporter flips the word, waits for an RCU grace period (a packet runs the
//! whole TCX chain inside one RCU read-side section, so after it no packet still counts in
//! the old generation) and reads the old generation, whose counts and flows then stand
//! still: the counts as differences of running sums, the flow maps taken (the flows seen
//! read and zeroed in place, the flows not seen since the last time deleted: a flow that
//! goes on costs the kernel no allocation, which in softirq context can fail, and the
//! packet would then count as evicted). A flow table near its cap therefore evicts a
//! little earlier than in user space: the flows of the generation's previous period that
//! have not come back yet hold places until this period's read. So a packet is in exactly one period, and a rule's packets equal its flows
//! plus its evicted plus its no-IP packets in every period. A slot and its flow maps belong
//! to a rule name for the whole run (a flow map keeps the cap it was made with).
//!
//! A rule change builds every rule program anew for the next epoch (the word is `epoch << 1
//! | generation`, and a rule program counts only packets stamped with its own epoch) and
//! attaches them after the running ones, where they count nothing yet. At the period end
//! one write of the word flips the generation and the epoch together: from the next packet
//! on the new programs count and the old ones do not, so no packet is counted by both rule
//! sets or by neither, however many programs either has and whichever rules moved between
//! programs. After the grace period the old links are dropped (detached). Links are fds,
//! never pinned: nothing stays attached after the probe, however it ends.
//!
//! Alerts (rates per key) stay in user space: `--in-kernel` refuses a rule with the
//! `alert` action, `--in-kernel=auto` runs it on the workers.

pub mod translate;

/// The map value's size in bytes, for [`PerCpuArray::create`].
pub const VALUE_SIZE: u32 = (VALUE_WORDS * 8) as u32;

use std::net::IpAddr;
use std::time::SystemTime;

use poolcap_probe::flows::{Evicted, FlowStats};
use poolcap_probe::packet::FlowKey;
use poolcap_probe::report::Accounting;
use poolcap_probe::tally::{Sizes, Tally};
use poolcap_probe::Config;
use poolcap_sys::bpf::{Array, PerCpuArray, PerCpuHash, TcProgram, TcxLink};

use self::translate::flowkey::{self, FLOW_VALUE_SIZE, KEY_SIZE};
use self::translate::{
    FlowMaps, Generation, KernelRule, Maps, Vlan, EPOCH_MASK, FLOW_SIDE, GEN_STRIDE, VALUE_WORDS,
};
use super::ProbeError;
use crate::capture::filter::compile_offline;

/// Map slots: two generations of the total, one per rule name seen during the run, and
/// one per flows rule name's flow side.
const SLOTS: u32 = 2 * GEN_STRIDE;

/// How far outside its period a flow's time read at the flip may lie (see
/// [`KernelRules::add_to`]).
pub const FLIP_SLACK_NS: u64 = 1_000_000;

/// Which rules `--in-kernel` runs in the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every rule, or refuse the configuration.
    On,
    /// Those it can; the others on the workers.
    Auto,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "on" => Ok(Self::On),
            "auto" => Ok(Self::Auto),
            other => Err(format!("--in-kernel={other}: use on or auto")),
        }
    }
}

/// The action that keeps `rule` out of the kernel, if any.
fn user_only_action(rule: &poolcap_probe::Rule) -> Option<&'static str> {
    if rule.alert.is_some() {
        Some("alert")
    } else {
        None
    }
}

/// Flows rules one program can hold: a program may use 64 maps, and each such rule has two
/// (one per generation) beside the counts and the generation word.
pub const MAX_FLOW_RULES: usize = 31;

/// Rules one program holds. The verifier walks at most 1M instructions of a program, and a
/// flows rule costs far more of that walk than a count rule: with `bench probe`'s mix (a
/// third each of count, sizes and flows rules, at most 31 flows rules in a program) about
/// 160 rules passed and about 190 did not ("BPF program is too large", measured on kernel
/// 6.18), so a program holds at most this many.
pub const MAX_KERNEL_RULES: usize = 128;

/// Rule programs at most, each its own TCX link (a hook takes 64 programs; a rule change
/// has both rule sets attached for a moment, beside the stamp program): with
/// [`MAX_KERNEL_RULES`] and [`MAX_FLOW_RULES`] each, the rules the kernel runs.
pub const MAX_KERNEL_PROGRAMS: usize = 16;

/// Rules the kernel runs at most, in [`MAX_KERNEL_PROGRAMS`] programs.
pub const MAX_RULES_IN_KERNEL: usize = MAX_KERNEL_RULES * MAX_KERNEL_PROGRAMS;

/// Flows rules the kernel runs at most.
pub const MAX_FLOW_RULES_IN_KERNEL: usize = MAX_FLOW_RULES * MAX_KERNEL_PROGRAMS;

/// Marks the rules of `config` that run in the kernel; `workers` says whether the probe
/// has user-space workers for the others.
pub fn place(config: &mut Config, mode: Mode, workers: bool) -> Result<(), String> {
    let (mut flow_rules, mut rules) = (0, 0);
    for r in &mut config.rules {
        let over = r.flows.is_some() && flow_rules == MAX_FLOW_RULES_IN_KERNEL;
        let full = rules == MAX_RULES_IN_KERNEL;
        let blocker = user_only_action(r)
            .or(over.then_some("flows"))
            .or(full.then_some("count"));
        let why = if full {
            format!(
                "more than {MAX_RULES_IN_KERNEL} rules in the kernel: {MAX_KERNEL_PROGRAMS} \
                 programs of {MAX_KERNEL_RULES}"
            )
        } else if over {
            format!(
                "more than {MAX_FLOW_RULES_IN_KERNEL} flows rules in the kernel: \
                 {MAX_KERNEL_PROGRAMS} programs of {MAX_FLOW_RULES} (two maps each; 64 per \
                 program)"
            )
        } else {
            "count, sizes and flows can".to_owned()
        };
        match (mode, blocker) {
            (Mode::On, Some(action)) => {
                return Err(format!(
                    "rule `{}`: action `{action}` cannot run in the kernel ({why}); use \
                     --in-kernel=auto to run this rule in user space",
                    r.name
                ))
            }
            (Mode::Auto, Some(action)) if !workers => {
                return Err(format!(
                    "rule `{}`: action `{action}` needs user space, but this probe started \
                     with every rule in the kernel and no capture socket; restart it",
                    r.name
                ))
            }
            _ => r.in_kernel = blocker.is_none(),
        }
        if r.in_kernel {
            rules += 1;
            flow_rules += usize::from(r.flows.is_some());
        }
    }
    Ok(())
}

/// Whether every rule of `config` can run in the kernel.
pub fn all_in_kernel(config: &Config) -> bool {
    config.rules.iter().all(|r| user_only_action(r).is_none())
        && config.rules.iter().filter(|r| r.flows.is_some()).count() <= MAX_FLOW_RULES_IN_KERNEL
        && config.rules.len() <= MAX_RULES_IN_KERNEL
}

/// Splits rules (whether each has the flows action) into programs of at most
/// [`MAX_KERNEL_RULES`] rules and [`MAX_FLOW_RULES`] flows rules, each rule's index in
/// one, in order within a program. Greedy: the flows rules first, then the others, each
/// into the first program with room, so as few programs as those limits allow (the flows
/// rules' and all rules' shares, whichever needs more); None when that is more than
/// [`MAX_KERNEL_PROGRAMS`].
pub fn partition(flows: &[bool]) -> Option<Vec<Vec<usize>>> {
    let mut programs: Vec<(Vec<usize>, usize)> = Vec::new();
    for pass in [true, false] {
        for (i, _) in flows.iter().enumerate().filter(|(_, &f)| f == pass) {
            let room = |(rules, flow_rules): &(Vec<usize>, usize)| {
                rules.len() < MAX_KERNEL_RULES && (!pass || *flow_rules < MAX_FLOW_RULES)
            };
            let p = match programs.iter().position(room) {
                Some(p) => p,
                None => {
                    programs.push((Vec::new(), 0));
                    programs.len() - 1
                }
            };
            programs[p].0.push(i);
            programs[p].1 += usize::from(pass);
        }
    }
    (programs.len() <= MAX_KERNEL_PROGRAMS).then(|| {
        programs
            .into_iter()
            .map(|(mut rules, _)| {
                rules.sort_unstable();
                rules
            })
            .collect()
    })
}

/// One slot summed over the CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Packets.
    pub packets: u64,
    /// Wire bytes (VLAN tag included, as stored).
    pub bytes: u64,
    /// Per size bucket, as [`poolcap_probe::tally::SIZE_BOUNDS`].
    pub sizes: [u64; VALUE_WORDS - 2],
}

impl Counts {
    /// Slot `slot` of `map`, summed over the CPUs.
    pub fn read(map: &PerCpuArray, slot: u32) -> Result<Self, ProbeError> {
        Ok(Self::sum(&map.lookup(slot)?))
    }

    fn sum(per_cpu: &[u8]) -> Self {
        let mut words = [0u64; VALUE_WORDS];
        for cpu in per_cpu.chunks_exact(VALUE_WORDS * 8) {
            for (w, b) in words.iter_mut().zip(cpu.chunks_exact(8)) {
                let mut le = [0u8; 8];
                le.copy_from_slice(b);
                *w += u64::from_le_bytes(le);
            }
        }
        let mut sizes = [0u64; VALUE_WORDS - 2];
        sizes.copy_from_slice(&words[2..]);
        Self {
            packets: words[0],
            bytes: words[1],
            sizes,
        }
    }

    fn plus(&self, o: &Counts) -> Counts {
        let mut sizes = self.sizes;
        for (s, e) in sizes.iter_mut().zip(o.sizes) {
            *s += e;
        }
        Counts {
            packets: self.packets + o.packets,
            bytes: self.bytes + o.bytes,
            sizes,
        }
    }

    /// Word `i` of the slot (0 packets, 1 bytes, then the size buckets).
    fn word(&self, i: usize) -> u64 {
        match i {
            0 => self.packets,
            1 => self.bytes,
            _ => self.sizes[i - 2],
        }
    }

    /// What this slot counted since `earlier`.
    pub fn minus(&self, earlier: &Counts) -> Counts {
        let mut sizes = self.sizes;
        for (s, e) in sizes.iter_mut().zip(earlier.sizes) {
            *s -= e;
        }
        Counts {
            packets: self.packets - earlier.packets,
            bytes: self.bytes - earlier.bytes,
            sizes,
        }
    }
}

/// What the rule programs of `config`'s enabled kernel rules are made of: each rule's
/// name (its slot), filter and whether it has the flows action.
type Signature = Vec<(String, String, bool)>;

fn signature(config: &Config) -> Signature {
    config
        .rules
        .iter()
        .filter(|r| r.in_kernel && r.enabled)
        .map(|r| (r.name.clone(), r.filter.clone(), r.flows.is_some()))
        .collect()
}

/// One flow map entry (key and per-CPU values, as [`flowkey`] writes them) as a flow, its
/// times moved by `clock_offset` ns (monotonic to wall clock).
pub fn flow_of(key: &[u8], per_cpu: &[u8], clock_offset: i64) -> (FlowKey, FlowStats) {
    let word = |b: &[u8], i: usize| {
        let mut le = [0u8; 8];
        le.copy_from_slice(&b[8 * i..8 * i + 8]);
        u64::from_le_bytes(le)
    };
    let addr = |b: &[u8]| -> IpAddr {
        if key[32] == 4 {
            IpAddr::from(<[u8; 4]>::try_from(&b[..4]).expect("4 bytes"))
        } else {
            IpAddr::from(<[u8; 16]>::try_from(&b[..16]).expect("16 bytes"))
        }
    };
    let port = |i: usize| u16::from_ne_bytes([key[i], key[i + 1]]);
    let flow = FlowKey {
        src: addr(&key[..16]),
        dst: addr(&key[16..32]),
        proto: key[33],
        sport: port(34),
        dport: port(36),
    };
    let mut s = FlowStats {
        first_ns: u64::MAX,
        ..FlowStats::default()
    };
    let wall = |t: u64| t.saturating_add_signed(clock_offset);
    for cpu in per_cpu.chunks_exact(FLOW_VALUE_SIZE as usize) {
        if word(cpu, 0) == 0 {
            continue;
        }
        let (packets, bytes) = (word(cpu, 0), word(cpu, 1));
        s.absorb(&FlowStats {
            packets,
            bytes,
            // At tc ingress the frame starts at its Ethernet header; the kernel keeps an
            // accelerated VLAN tag out of it. Tags left in the frame are not subtracted,
            // nor kept: in-kernel flows have no VLAN id or ICMP type.
            ip_bytes: bytes.saturating_sub(14 * packets),
            first_ns: wall(word(cpu, 2)),
            last_ns: wall(word(cpu, 3)),
            tcp_flags: word(cpu, 4) as u8,
            vlan: None,
            icmp: None,
        });
    }
    (flow, s)
}

/// A rule name's counts slot and, once it had the flows action, its flow maps (one per
/// generation) and flow-side slot.
#[derive(Debug)]
struct Named {
    name: String,
    flows: Option<([PerCpuHash; 2], u32)>,
}

/// The loaded, attached programs and their maps.
#[derive(Debug)]
pub struct KernelRules {
    mode: Mode,
    workers: bool,
    ifindex: u32,
    map: PerCpuArray,
    /// The generation word: `epoch << 1 | current`.
    gen: Array,
    /// The generation packets count in now (0 or 1).
    current: u32,
    /// The rule set counting now (see [`translate::Generation`]).
    epoch: u32,
    // Dropped in this order: the rule programs before the stamp they read.
    /// The rule programs' links, in TCX order.
    links: Vec<TcxLink>,
    /// The next rule set, attached by [`prepare`](Self::prepare) but counting nothing
    /// until the next flip of the word.
    pending: Option<(Vec<TcxLink>, Signature)>,
    /// The rule set the last flip replaced, detached once no packet runs it.
    retired: Vec<TcxLink>,
    /// The stamp program's link, first of ours at the hook.
    stamp: Option<TcxLink>,
    /// Slot `i + 1` belongs to rule `names[i]`.
    names: Vec<Named>,
    /// Flow-side slots given out (FLOW_SIDE + n).
    sides: u32,
    /// Each slot's running sums at the last read.
    seen: Vec<Counts>,
    installed: Signature,
    /// The generation flipped away from and not read yet.
    unread: Option<u32>,
}

impl KernelRules {
    /// Builds the programs for `config` (placed already) and attaches them at the ingress
    /// of interface `iface`, behind the stamp program.
    pub fn start(
        mode: Mode,
        iface: &str,
        config: &Config,
        workers: bool,
    ) -> Result<Self, ProbeError> {
        let ifindex = poolcap_sys::socket::ifindex(iface)?;
        let map = PerCpuArray::create("poolcap_probe", VALUE_SIZE, SLOTS)?;
        let gen = Array::create("poolcap_gen", 4, 1)?;
        let mut k = Self {
            mode,
            workers,
            ifindex,
            map,
            gen,
            current: 0,
            epoch: 0,
            links: Vec::new(),
            pending: None,
            retired: Vec::new(),
            stamp: None,
            names: Vec::new(),
            sides: 0,
            seen: vec![Counts::default(); SLOTS as usize],
            installed: signature(config),
            unread: None,
        };
        let maps = Maps {
            counts: k.map.raw_fd(),
            gen: Generation::Word(k.gen.raw_fd()),
        };
        let code = translate::program(&[], maps, Vlan::Skb).map_err(ProbeError::Kernel)?;
        let stamp = TcProgram::load("poolcap_stamp", &code)?;
        let progs = k.build(config, 0).map_err(ProbeError::Kernel)?;
        k.stamp = Some(TcxLink::attach(&stamp, ifindex)?);
        k.links = k.attach(&progs)?;
        Ok(k)
    }

    /// Attaches `progs` in order after whatever is at the hook; on an error, none stays.
    fn attach(&self, progs: &[TcProgram]) -> Result<Vec<TcxLink>, ProbeError> {
        let links = progs
            .iter()
            .map(|p| TcxLink::attach(p, self.ifindex))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(links)
    }

    /// The rule programs attached now (for tests and logs).
    pub fn programs(&self) -> usize {
        self.links.len()
    }

    /// The slot of rule `name` and, when `flows` caps its flows, its flow maps' fds and
    /// flow-side slot.
    fn slot(
        &mut self,
        name: &str,
        flows: Option<usize>,
    ) -> Result<(u32, Option<FlowMaps>), String> {
        let i = match self.names.iter().position(|n| n.name == name) {
            Some(i) => i,
            None if self.names.len() + 1 >= FLOW_SIDE as usize => {
                return Err(format!("more than {} rule names in one run", FLOW_SIDE - 1))
            }
            None => {
                self.names.push(Named {
                    name: name.to_string(),
                    flows: None,
                });
                self.names.len() - 1
            }
        };
        if let (Some(cap), None) = (flows, &self.names[i].flows) {
            if FLOW_SIDE + self.sides >= GEN_STRIDE {
                return Err(format!(
                    "more than {} flows rule names in one run",
                    GEN_STRIDE - FLOW_SIDE
                ));
            }
            let cap = u32::try_from(cap).unwrap_or(u32::MAX);
            let make = || PerCpuHash::create("poolcap_flows", KEY_SIZE, FLOW_VALUE_SIZE, cap);
            let maps: [PerCpuHash; 2] = [make(), make()]
                .into_iter()
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("rule `{name}`: flow map: {e}"))?
                .try_into()
                .expect("two maps");
            self.names[i].flows = Some((maps, FLOW_SIDE + self.sides));
            self.sides += 1;
        }
        let fds = flows
            .and(self.names[i].flows.as_ref())
            .map(|(m, side)| FlowMaps {
                maps: [m[0].raw_fd(), m[1].raw_fd()],
                side: *side,
            });
        Ok((i as u32 + 1, fds))
    }

    /// The rule programs for `config`'s enabled kernel rules, for rule set `epoch`, loaded.
    fn build(&mut self, config: &Config, epoch: u32) -> Result<Vec<TcProgram>, String> {
        let rules: Vec<&poolcap_probe::Rule> = config
            .rules
            .iter()
            .filter(|r| r.in_kernel && r.enabled)
            .collect();
        let flows: Vec<bool> = rules.iter().map(|r| r.flows.is_some()).collect();
        let parts = partition(&flows).ok_or_else(|| {
            format!(
                "{} rules, {} with flows, need more than {MAX_KERNEL_PROGRAMS} kernel programs",
                rules.len(),
                flows.iter().filter(|&&f| f).count()
            )
        })?;
        let mut compiled = Vec::new();
        for r in &rules {
            let insns = compile_offline(&r.filter).map_err(|e| e.to_string())?;
            let cap = r.flows.map(|_| config.flow_limit);
            compiled.push((self.slot(&r.name, cap)?, insns));
        }
        let maps = Maps {
            counts: self.map.raw_fd(),
            gen: Generation::Stamped { epoch },
        };
        let mut progs = Vec::new();
        for (n, part) in parts.iter().enumerate() {
            let rules: Vec<KernelRule<'_>> = part
                .iter()
                .map(|&i| {
                    let ((slot, flows), filter) = &compiled[i];
                    KernelRule {
                        slot: *slot,
                        filter,
                        flows: *flows,
                    }
                })
                .collect();
            let code = translate::program(&rules, maps, Vlan::Skb)?;
            let prog = TcProgram::load("poolcap_probe", &code).map_err(|e| {
                let with_flows = rules.iter().filter(|r| r.flows.is_some()).count();
                format!(
                    "in-kernel rules, program {} of {} ({} rules, {with_flows} with flows): {e}",
                    n + 1,
                    parts.len(),
                    rules.len()
                )
            })?;
            progs.push(prog);
        }
        Ok(progs)
    }

    /// The epoch of the next rule set.
    fn next_epoch(&self) -> u32 {
        (self.epoch + 1) & EPOCH_MASK
    }

    /// Places `next`'s rules and, when its kernel rules differ from the running ones,
    /// loads their programs and attaches them after the running ones, where they count
    /// nothing until [`install`](Self::install) and the next flip; an error changes
    /// nothing. (Attaching here, before the period's end is taken, keeps the time the
    /// kernel takes to attach, a grace period per link, out of the gap between that end
    /// and the flip.)
    pub fn prepare(&mut self, next: &mut Config) -> Result<(), String> {
        place(next, self.mode, self.workers)?;
        let sig = signature(next);
        if sig == self.installed {
            self.pending = None;
        } else if self.pending.as_ref().is_none_or(|(_, p)| *p != sig) {
            self.pending = None;
            let progs = self.build(next, self.next_epoch())?;
            let links = self
                .attach(&progs)
                .map_err(|e| format!("in-kernel rules: {e:#}"))?;
            self.pending = Some((links, sig));
        }
        Ok(())
    }

    /// Ends the period in the kernel, as close to its end as can be: `flip`.
    pub fn install(&mut self) -> Result<(), ProbeError> {
        self.flip()
    }

    /// Flips the generation word (with the prepared rule set, if any, also its epoch: from
    /// the next packet on that set counts instead of the running one). The old generation
    /// stands still once no packet runs with it any more, and [`add_to`](Self::add_to)
    /// reads it; until then this does nothing.
    fn flip(&mut self) -> Result<(), ProbeError> {
        if self.unread.is_some() {
            return Ok(());
        }
        let old = self.current;
        let epoch = if self.pending.is_some() {
            self.next_epoch()
        } else {
            self.epoch
        };
        self.gen.set(0, &(epoch << 1 | (1 - old)).to_ne_bytes())?;
        self.current = 1 - old;
        self.epoch = epoch;
        self.unread = Some(old);
        if let Some((links, sig)) = self.pending.take() {
            self.installed = sig;
            self.retired = std::mem::replace(&mut self.links, links);
        }
        Ok(())
    }

    /// Detaches the programs: nothing is counted after this.
    pub fn detach(&mut self) {
        self.pending = None;
        self.retired.clear();
        self.links.clear();
        self.stamp = None;
    }

    /// Slot `slot` of generation `gen`: what it counted since the last call.
    fn take(&mut self, gen: u32, slot: u32) -> Result<Counts, ProbeError> {
        let at = (gen * GEN_STRIDE + slot) as usize;
        let now = Counts::read(&self.map, at as u32)?;
        let delta = now.minus(&self.seen[at]);
        self.seen[at] = now;
        Ok(delta)
    }

    /// Adds what the kernel counted in the period [`install`](Self::install) ended (or, if
    /// none did, in the one ending now) to the kernel rules of `tally` (made for `config`,
    /// the configuration that ran); `period` is its start and end.
    ///
    /// The generation decides a flow's period; its times come from the kernel's clock and
    /// the period's ends from the wall clock, read on different CPUs around the flip, so a
    /// time within [`FLIP_SLACK_NS`] outside the period is moved to its edge.
    pub fn add_to(
        &mut self,
        config: &Config,
        tally: &mut Tally,
        period: (SystemTime, SystemTime),
    ) -> Result<(), ProbeError> {
        let ns = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        };
        let (start, end) = (ns(period.0), ns(period.1));
        let edge = |t: u64| {
            if t < start && start - t <= FLIP_SLACK_NS {
                start
            } else if t > end && t - end <= FLIP_SLACK_NS {
                end
            } else {
                t
            }
        };
        self.flip()?;
        let old = self.unread.take().expect("flipped");
        // After a grace period no packet still counts in the old generation, nor runs the
        // replaced rule set.
        poolcap_sys::bpf::synchronize_rcu()?;
        self.retired.clear();
        let clock_offset = poolcap_sys::process::monotonic_to_realtime_offset();
        for slot in 1..=self.names.len() as u32 {
            let delta = self.take(old, slot)?;
            let named = &self.names[slot as usize - 1];
            let flows = match &named.flows {
                Some((maps, _)) => maps[old as usize].take()?,
                None => Vec::new(),
            };
            let side = match named.flows.as_ref().map(|f| f.1) {
                Some(side) => self.take(old, side)?,
                None => Counts::default(),
            };
            let name = &self.names[slot as usize - 1].name;
            let Some(i) = config
                .rules
                .iter()
                .position(|r| &r.name == name && r.in_kernel && r.enabled)
            else {
                continue;
            };
            let t = &mut tally.rules[i];
            t.packets += delta.packets;
            t.bytes += delta.bytes;
            if let Some(Sizes(s)) = &mut t.sizes {
                for (a, b) in s.iter_mut().zip(delta.sizes) {
                    *a += b;
                }
            }
            if let Some(table) = &mut t.flows {
                t.no_ip += side.word(flowkey::side::NO_IP);
                for (key, values) in &flows {
                    let (k, mut s) = flow_of(key, values, clock_offset);
                    (s.first_ns, s.last_ns) = (edge(s.first_ns), edge(s.last_ns));
                    table.add_flow(k, s);
                }
                table.add_evicted(&Evicted {
                    flows: 0,
                    packets: side.word(flowkey::side::EVICTED_PACKETS),
                    bytes: side.word(flowkey::side::EVICTED_BYTES),
                });
            }
        }
        Ok(())
    }

    /// Every packet the stamp program saw since it was attached, as capture accounting (no
    /// socket, so nothing is dropped or filtered).
    pub fn accounting(&self) -> Result<Accounting, ProbeError> {
        let t = Counts::read(&self.map, 0)?.plus(&Counts::read(&self.map, GEN_STRIDE)?);
        Ok(Accounting {
            captured: t.packets,
            bytes: t.bytes,
            ..Accounting::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(actions: &str) -> Config {
        let text = format!(
            "period = \"1s\"\n[[rule]]\nname = \"a\"\nfilter = \"udp\"\nactions = [\"count\"]\n[[rule]]\nname = \"b\"\nfilter = \"tcp\"\nactions = [{actions}]\n"
        );
        poolcap_probe::config::parse(Path::new("t.toml"), &text).unwrap()
    }

    #[test]
    fn counts_sizes_and_flows_run_in_the_kernel_alerts_do_not() {
        for actions in ["\"sizes\"", "\"flows\""] {
            let mut c = config(actions);
            place(&mut c, Mode::On, false).unwrap();
            assert!(c.rules.iter().all(|r| r.in_kernel));
            assert!(all_in_kernel(&c));
        }

        let mut c = config("\"alert\"]\nalert = { key = \"dst\", rate = 5 }\n#[");
        assert!(!all_in_kernel(&c));
        let e = place(&mut c.clone(), Mode::On, true).unwrap_err();
        assert!(
            e.contains("rule `b`: action `alert` cannot run in the kernel"),
            "{e}"
        );
        assert!(e.contains("--in-kernel=auto"), "{e}");
        place(&mut c, Mode::Auto, true).unwrap();
        assert_eq!((c.rules[0].in_kernel, c.rules[1].in_kernel), (true, false));

        let mut c = config("\"alert\"]\nalert = { key = \"dst\", rate = 5 }\n#[");
        let e = place(&mut c, Mode::Auto, false).unwrap_err();
        assert!(
            e.contains("rule `b`: action `alert` needs user space"),
            "{e}"
        );
    }

    /// A configuration of `count` count rules, then `flows` flows rules.
    fn many(count: usize, flows: usize) -> Config {
        let mut text = String::from("period = \"1s\"\n");
        for i in 0..count {
            text += &format!(
                "[[rule]]\nname = \"c{i}\"\nfilter = \"udp port {i}\"\nactions = [\"count\"]\n"
            );
        }
        for i in 0..flows {
            text +=
                &format!("[[rule]]\nname = \"f{i}\"\nfilter = \"udp\"\nactions = [\"flows\"]\n");
        }
        poolcap_probe::config::parse(Path::new("t.toml"), &text).unwrap()
    }

    #[test]
    fn flows_rules_beyond_the_map_limit_are_refused_or_run_in_user_space() {
        let mut c = many(0, MAX_FLOW_RULES_IN_KERNEL);
        assert!(all_in_kernel(&c));
        place(&mut c, Mode::On, true).unwrap();

        let mut c = many(0, MAX_FLOW_RULES_IN_KERNEL + 1);
        assert!(!all_in_kernel(&c));
        let e = place(&mut c.clone(), Mode::On, true).unwrap_err();
        assert!(
            e.contains(&format!("rule `f{MAX_FLOW_RULES_IN_KERNEL}`")),
            "{e}"
        );
        assert!(e.contains("64 per program"), "{e}");
        place(&mut c, Mode::Auto, true).unwrap();
        let kernel = c.rules.iter().filter(|r| r.in_kernel).count();
        assert_eq!(kernel, MAX_FLOW_RULES_IN_KERNEL);
        assert!(!c.rules[MAX_FLOW_RULES_IN_KERNEL].in_kernel);
    }

    #[test]
    fn rules_beyond_the_programs_are_refused_or_run_in_user_space() {
        let mut c = many(1000, 0);
        assert!(all_in_kernel(&c));
        place(&mut c, Mode::On, true).unwrap();

        let n = MAX_RULES_IN_KERNEL + 100;
        let mut c = many(n, 0);
        assert!(!all_in_kernel(&c));
        let e = place(&mut c.clone(), Mode::On, true).unwrap_err();
        assert!(e.contains(&format!("rule `c{MAX_RULES_IN_KERNEL}`")), "{e}");
        assert!(
            e.contains(&format!(
                "{MAX_KERNEL_PROGRAMS} programs of {MAX_KERNEL_RULES}"
            )),
            "{e}"
        );
        place(&mut c, Mode::Auto, true).unwrap();
        let kernel: Vec<bool> = c.rules.iter().map(|r| r.in_kernel).collect();
        assert!(kernel[..MAX_RULES_IN_KERNEL].iter().all(|&k| k));
        assert!(kernel[MAX_RULES_IN_KERNEL..].iter().all(|&k| !k));
    }

    /// Checks that `parts` hold each of `flows`' rules once, in order, within the limits.
    fn check_partition(flows: &[bool], parts: &[Vec<usize>]) {
        let mut all: Vec<usize> = parts.concat();
        all.sort_unstable();
        assert_eq!(all, (0..flows.len()).collect::<Vec<_>>(), "each rule once");
        for p in parts {
            assert!(
                !p.is_empty() && p.len() <= MAX_KERNEL_RULES,
                "{} rules",
                p.len()
            );
            assert!(p.windows(2).all(|w| w[0] < w[1]), "in order: {p:?}");
            let f = p.iter().filter(|&&i| flows[i]).count();
            assert!(f <= MAX_FLOW_RULES, "{f} flows rules");
        }
    }

    #[test]
    fn rules_split_over_as_few_programs_as_the_limits_allow() {
        assert_eq!(partition(&[]), Some(Vec::new()));
        assert_eq!(partition(&[false, true, false]), Some(vec![vec![0, 1, 2]]));
        // bench probe's mix: a third each of count, sizes and flows rules.
        for n in [1usize, 100, 128, 129, 300, 600, 1000, 1488] {
            let flows: Vec<bool> = (0..n).map(|i| i % 3 == 2).collect();
            let parts = partition(&flows).unwrap();
            check_partition(&flows, &parts);
            let f = flows.iter().filter(|&&f| f).count();
            let least = n.div_ceil(MAX_KERNEL_RULES).max(f.div_ceil(MAX_FLOW_RULES));
            assert_eq!(parts.len(), least, "{n} rules, {f} with flows");
        }
        // Flows rules last (the order of a greedy pass in rule order would not fit them).
        let flows: Vec<bool> = (0..2000).map(|i| i >= 1900).collect();
        let parts = partition(&flows).unwrap();
        check_partition(&flows, &parts);
        assert_eq!(parts.len(), MAX_KERNEL_PROGRAMS);
        // At the limits, and beyond.
        let all = vec![false; MAX_RULES_IN_KERNEL];
        assert_eq!(partition(&all).unwrap().len(), MAX_KERNEL_PROGRAMS);
        assert_eq!(partition(&vec![false; MAX_RULES_IN_KERNEL + 1]), None);
        let all = vec![true; MAX_FLOW_RULES_IN_KERNEL];
        assert_eq!(partition(&all).unwrap().len(), MAX_KERNEL_PROGRAMS);
        assert_eq!(partition(&vec![true; MAX_FLOW_RULES_IN_KERNEL + 1]), None);
    }

    #[test]
    fn what_place_accepts_fits_the_programs() {
        for (count, flows) in [(2000, 48), (1000, 496), (1600, 448), (0, 496), (2048, 0)] {
            let mut c = many(count, flows);
            place(&mut c, Mode::Auto, true).unwrap();
            let placed: Vec<bool> = c
                .rules
                .iter()
                .filter(|r| r.in_kernel)
                .map(|r| r.flows.is_some())
                .collect();
            let parts = partition(&placed).expect("fits");
            check_partition(&placed, &parts);
        }
    }

    #[test]
    fn per_cpu_values_sum_and_differences_are_per_period() {
        let mut bytes = Vec::new();
        for cpu in 0..2u64 {
            for w in 0..VALUE_WORDS as u64 {
                bytes.extend_from_slice(&(cpu * 100 + w).to_le_bytes());
            }
        }
        let c = Counts::sum(&bytes);
        assert_eq!((c.packets, c.bytes), (100, 102));
        assert_eq!(c.sizes[0], 104);
        let d = c.minus(&Counts {
            packets: 40,
            ..Counts::default()
        });
        assert_eq!((d.packets, d.bytes), (60, 102));
    }

    #[test]
    fn modes_parse() {
        assert_eq!("on".parse::<Mode>(), Ok(Mode::On));
        assert_eq!("auto".parse::<Mode>(), Ok(Mode::Auto));
        assert!("yes".parse::<Mode>().unwrap_err().contains("on or auto"));
    }
}
