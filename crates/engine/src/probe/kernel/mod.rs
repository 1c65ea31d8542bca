//! `poolcap probe --in-kernel`: rules whose actions are counts, size histograms and flow
//! tables run in an eBPF program at the interface's tc ingress (TCX link), which adds each
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
//! Counting is exact across periods and rule changes: every map has two generations, and a
//! packet adds to the generation the generation word names when the program starts. At a
//! period end the reporter flips the word, waits for an RCU grace period (after which no
//! run of the program still uses the old generation) and reads the old generation, whose
//! counts and flows then stand still: the counts as differences of running sums, the flow
//! maps drained (read and emptied). So a packet is in exactly one period, and a rule's
//! packets equal its flows plus its evicted plus its no-IP packets in every period. A slot
//! and its flow maps belong to a rule name for the whole run (a flow map keeps the cap it
//! was made with). A rule change builds a new program on the same maps and swaps it in
//! atomically (`BPF_LINK_UPDATE`) when the period ends.
//!
//! Alerts (rates per key) stay in user space: `--in-kernel` refuses a rule with the
//! `alert` action, `--in-kernel=auto` runs it on the workers.

pub mod translate;

/// The map value's size in bytes, for [`PerCpuArray::create`].
pub const VALUE_SIZE: u32 = (VALUE_WORDS * 8) as u32;

use std::net::IpAddr;

use poolcap_probe::flows::{Evicted, FlowStats};
use poolcap_probe::packet::FlowKey;
use poolcap_probe::report::Accounting;
use poolcap_probe::tally::{Sizes, Tally};
use poolcap_probe::Config;
use poolcap_sys::bpf::{Array, PerCpuArray, PerCpuHash, TcProgram, TcxLink};

use self::translate::flowkey::{self, FLOW_VALUE_SIZE, KEY_SIZE};
use self::translate::{KernelRule, Maps, Vlan, FLOW_SIDE, GEN_STRIDE, VALUE_WORDS};
use crate::capture::filter::compile_offline;

/// Map slots: two generations of the total, one per rule name seen during the run, and
/// one per flows rule's flow side.
const SLOTS: u32 = 2 * GEN_STRIDE;

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
/// third each of count, sizes and flows rules, at most 31 flows rules in the kernel) about
/// 160 rules passed and about 190 did not ("BPF program is too large", measured on kernel
/// 6.18), so at most this many go into the kernel; `=auto` runs the rest on the workers.
pub const MAX_KERNEL_RULES: usize = 128;

/// Marks the rules of `config` that run in the kernel; `workers` says whether the probe
/// has user-space workers for the others.
pub fn place(config: &mut Config, mode: Mode, workers: bool) -> Result<(), String> {
    let (mut flow_rules, mut rules) = (0, 0);
    for r in &mut config.rules {
        let over = r.flows.is_some() && flow_rules == MAX_FLOW_RULES;
        let full = rules == MAX_KERNEL_RULES;
        let blocker = user_only_action(r)
            .or(over.then_some("flows"))
            .or(full.then_some("count"));
        let why = if full {
            format!("more than {MAX_KERNEL_RULES} rules in one kernel program")
        } else if over {
            format!("more than {MAX_FLOW_RULES} flows rules (two maps each; 64 per program)")
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
        && config.rules.iter().filter(|r| r.flows.is_some()).count() <= MAX_FLOW_RULES
        && config.rules.len() <= MAX_KERNEL_RULES
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
    pub fn read(map: &PerCpuArray, slot: u32) -> anyhow::Result<Self> {
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

/// The classic programs of `config`'s enabled kernel rules, with their slots.
type Signature = Vec<(String, String)>;

fn signature(config: &Config) -> Signature {
    config
        .rules
        .iter()
        .filter(|r| r.in_kernel && r.enabled)
        .map(|r| (r.name.clone(), r.filter.clone()))
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
        s.absorb(&FlowStats {
            packets: word(cpu, 0),
            bytes: word(cpu, 1),
            first_ns: wall(word(cpu, 2)),
            last_ns: wall(word(cpu, 3)),
            tcp_flags: word(cpu, 4) as u8,
        });
    }
    (flow, s)
}

/// The loaded, attached program and its maps.
#[derive(Debug)]
pub struct KernelRules {
    mode: Mode,
    workers: bool,
    map: PerCpuArray,
    /// The generation packets count in now (0 or 1).
    gen: Array,
    current: u32,
    link: Option<TcxLink>,
    /// Slot `i + 1` belongs to rule `names[i]`, with its flow maps (one per generation)
    /// once it had the flows action.
    names: Vec<(String, Option<[PerCpuHash; 2]>)>,
    /// Each slot's running sums at the last read.
    seen: Vec<Counts>,
    installed: Signature,
    pending: Option<(TcProgram, Signature)>,
}

impl KernelRules {
    /// Builds the program for `config` (placed already) and attaches it at the ingress of
    /// interface `iface`.
    pub fn start(mode: Mode, iface: &str, config: &Config, workers: bool) -> anyhow::Result<Self> {
        let ifindex = poolcap_sys::socket::ifindex(iface)?;
        let map = PerCpuArray::create("poolcap_probe", VALUE_SIZE, SLOTS)?;
        let gen = Array::create("poolcap_gen", 4, 1)?;
        let mut k = Self {
            mode,
            workers,
            map,
            gen,
            current: 0,
            link: None,
            names: Vec::new(),
            seen: vec![Counts::default(); SLOTS as usize],
            installed: signature(config),
            pending: None,
        };
        let prog = k.build(config).map_err(anyhow::Error::msg)?;
        k.link = Some(TcxLink::attach(&prog, ifindex)?);
        Ok(k)
    }

    /// The slot of rule `name` and, when `flows` caps its flows, its flow maps' fds.
    fn slot(
        &mut self,
        name: &str,
        flows: Option<usize>,
    ) -> Result<(u32, Option<[i32; 2]>), String> {
        let i = match self.names.iter().position(|n| n.0 == name) {
            Some(i) => i,
            None if self.names.len() + 1 >= FLOW_SIDE as usize => {
                return Err(format!("more than {} rule names in one run", FLOW_SIDE - 1))
            }
            None => {
                self.names.push((name.to_string(), None));
                self.names.len() - 1
            }
        };
        let entry = &mut self.names[i].1;
        if let (Some(cap), None) = (flows, &entry) {
            let cap = u32::try_from(cap).unwrap_or(u32::MAX);
            let make = || PerCpuHash::create("poolcap_flows", KEY_SIZE, FLOW_VALUE_SIZE, cap);
            *entry = Some(
                [make(), make()]
                    .into_iter()
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("rule `{name}`: flow map: {e}"))?
                    .try_into()
                    .expect("two maps"),
            );
        }
        let fds = flows
            .and(entry.as_ref())
            .map(|m| [m[0].raw_fd(), m[1].raw_fd()]);
        Ok((i as u32 + 1, fds))
    }

    /// The program for `config`'s enabled kernel rules, loaded.
    fn build(&mut self, config: &Config) -> Result<TcProgram, String> {
        let mut compiled = Vec::new();
        for r in config.rules.iter().filter(|r| r.in_kernel && r.enabled) {
            let insns = compile_offline(&r.filter).map_err(|e| e.to_string())?;
            let cap = r.flows.map(|_| config.flow_limit);
            compiled.push((self.slot(&r.name, cap)?, insns));
        }
        let rules: Vec<KernelRule<'_>> = compiled
            .iter()
            .map(|((slot, flows), filter)| KernelRule {
                slot: *slot,
                filter,
                flows: *flows,
            })
            .collect();
        let maps = Maps {
            counts: self.map.raw_fd(),
            gen: Some(self.gen.raw_fd()),
        };
        let code = translate::program(&rules, maps, Vlan::Skb)?;
        TcProgram::load("poolcap_probe", &code).map_err(|e| format!("in-kernel rules: {e}"))
    }

    /// Places `next`'s rules and, when its kernel rules differ from the running ones,
    /// loads their program for [`install`](Self::install); an error changes nothing.
    pub fn prepare(&mut self, next: &mut Config) -> Result<(), String> {
        place(next, self.mode, self.workers)?;
        let sig = signature(next);
        if sig == self.installed {
            self.pending = None;
        } else if self.pending.as_ref().is_none_or(|(_, p)| *p != sig) {
            self.pending = Some((self.build(next)?, sig));
        }
        Ok(())
    }

    /// Swaps the prepared program in, if any.
    pub fn install(&mut self) -> anyhow::Result<()> {
        if let (Some((prog, sig)), Some(link)) = (self.pending.take(), &self.link) {
            link.replace(&prog)?;
            self.installed = sig;
        }
        Ok(())
    }

    /// Detaches the program: nothing is counted after this.
    pub fn detach(&mut self) {
        self.link = None;
    }

    /// Slot `slot` of generation `gen`: what it counted since the last call.
    fn take(&mut self, gen: u32, slot: u32) -> anyhow::Result<Counts> {
        let at = (gen * GEN_STRIDE + slot) as usize;
        let now = Counts::read(&self.map, at as u32)?;
        let delta = now.minus(&self.seen[at]);
        self.seen[at] = now;
        Ok(delta)
    }

    /// Adds what the kernel counted since the last call to the kernel rules of `tally`
    /// (made for `config`, the configuration that ran): flips the generation, waits until
    /// no program run uses the old one, and reads it.
    pub fn add_to(&mut self, config: &Config, tally: &mut Tally) -> anyhow::Result<()> {
        let old = self.current;
        self.current = 1 - old;
        self.gen.set(0, &self.current.to_ne_bytes())?;
        poolcap_sys::bpf::synchronize_rcu()?;
        let clock_offset = poolcap_sys::process::monotonic_to_realtime_offset();
        for slot in 1..=self.names.len() as u32 {
            let delta = self.take(old, slot)?;
            let side = self.take(old, FLOW_SIDE + slot)?;
            let (name, maps) = &self.names[slot as usize - 1];
            let flows = match maps {
                Some(m) => m[old as usize].drain()?,
                None => Vec::new(),
            };
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
                    let (k, s) = flow_of(key, values, clock_offset);
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

    /// Every packet the program saw since it was attached, as capture accounting (no
    /// socket, so nothing is dropped or filtered).
    pub fn accounting(&self) -> anyhow::Result<Accounting> {
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

    #[test]
    fn flows_rules_beyond_the_map_limit_are_refused_or_run_in_user_space() {
        let mut text = String::from("period = \"1s\"\n");
        for i in 0..=MAX_FLOW_RULES {
            text +=
                &format!("[[rule]]\nname = \"f{i}\"\nfilter = \"udp\"\nactions = [\"flows\"]\n");
        }
        let mut c = poolcap_probe::config::parse(Path::new("t.toml"), &text).unwrap();
        assert!(!all_in_kernel(&c));
        let e = place(&mut c.clone(), Mode::On, true).unwrap_err();
        assert!(e.contains(&format!("rule `f{MAX_FLOW_RULES}`")), "{e}");
        assert!(e.contains("64 per program"), "{e}");
        place(&mut c, Mode::Auto, true).unwrap();
        let kernel = c.rules.iter().filter(|r| r.in_kernel).count();
        assert_eq!(kernel, MAX_FLOW_RULES);
        assert!(!c.rules[MAX_FLOW_RULES].in_kernel);
    }

    #[test]
    fn rules_beyond_one_program_are_refused_or_run_in_user_space() {
        let mut text = String::from("period = \"1s\"\n");
        for i in 0..300 {
            text += &format!(
                "[[rule]]\nname = \"c{i}\"\nfilter = \"udp port {i}\"\nactions = [\"count\"]\n"
            );
        }
        let mut c = poolcap_probe::config::parse(Path::new("t.toml"), &text).unwrap();
        assert!(!all_in_kernel(&c));
        let e = place(&mut c.clone(), Mode::On, true).unwrap_err();
        assert!(e.contains(&format!("rule `c{MAX_KERNEL_RULES}`")), "{e}");
        place(&mut c, Mode::Auto, true).unwrap();
        let kernel: Vec<bool> = c.rules.iter().map(|r| r.in_kernel).collect();
        assert!(kernel[..MAX_KERNEL_RULES].iter().all(|&k| k));
        assert!(kernel[MAX_KERNEL_RULES..].iter().all(|&k| !k));
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
