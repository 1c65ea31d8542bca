//! `poolcap probe --in-kernel`: rules whose actions are counts and size histograms run in
//! an eBPF program at the interface's tc ingress (TCX link), which adds each matching
//! packet to its rule's slot of a per-CPU array; the reporter reads the slots at each
//! period end. Those packets are never copied to user space for the rule, and when every
//! rule runs in the kernel no capture socket is opened at all.
//!
//! Why tc and not XDP: at tc ingress the kernel has already moved an outer VLAN tag into
//! the skb's metadata, as for the AF_PACKET tap that feeds the user-space probe, whatever
//! the driver does with tags; the program puts the tag back virtually ([`translate`]), so
//! both paths see the same stored frame. XDP would see whatever the driver leaves in the
//! data, and cannot share the interface with poolcap's AF_XDP program.
//!
//! Counting is exact across periods and rule changes: every packet adds to the map once,
//! the reporter takes differences of the running sums, and a slot belongs to a rule name
//! for the whole run. A rule change builds a new program and swaps it in atomically
//! (`BPF_LINK_UPDATE`) when the period ends; a packet being counted by the old program on
//! another CPU at that instant (microseconds) lands in the next period's read.
//!
//! Flow tables and alerts (per-key state) stay in user space: `--in-kernel` refuses a rule
//! with the `flows` or `alert` action, `--in-kernel=auto` runs it on the workers.

pub mod translate;

/// The map value's size in bytes, for [`PerCpuArray::create`].
pub const VALUE_SIZE: u32 = (VALUE_WORDS * 8) as u32;

use poolcap_probe::report::Accounting;
use poolcap_probe::tally::{Sizes, Tally};
use poolcap_probe::Config;
use poolcap_sys::bpf::{PerCpuArray, TcProgram, TcxLink};

use self::translate::{KernelRule, Vlan, VALUE_WORDS};
use crate::capture::filter::compile_offline;

/// Map slots: the total, then one per rule name seen during the run.
const SLOTS: u32 = 1024;

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
    if rule.flows.is_some() {
        Some("flows")
    } else if rule.alert.is_some() {
        Some("alert")
    } else {
        None
    }
}

/// Marks the rules of `config` that run in the kernel; `workers` says whether the probe
/// has user-space workers for the others.
pub fn place(config: &mut Config, mode: Mode, workers: bool) -> Result<(), String> {
    for r in &mut config.rules {
        let blocker = user_only_action(r);
        match (mode, blocker) {
            (Mode::On, Some(action)) => {
                return Err(format!(
                    "rule `{}`: action `{action}` cannot run in the kernel (count and sizes \
                     can); use --in-kernel=auto to run this rule in user space",
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
    }
    Ok(())
}

/// Whether every rule of `config` can run in the kernel.
pub fn all_in_kernel(config: &Config) -> bool {
    config.rules.iter().all(|r| user_only_action(r).is_none())
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

    fn minus(&self, earlier: &Counts) -> Counts {
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

/// The loaded, attached program and its map.
#[derive(Debug)]
pub struct KernelRules {
    mode: Mode,
    workers: bool,
    map: PerCpuArray,
    link: Option<TcxLink>,
    /// Slot `i + 1` belongs to rule `names[i]`.
    names: Vec<String>,
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
        let mut k = Self {
            mode,
            workers,
            map,
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

    fn slot(&mut self, name: &str) -> Result<u32, String> {
        if let Some(i) = self.names.iter().position(|n| n == name) {
            return Ok(i as u32 + 1);
        }
        if self.names.len() + 1 >= SLOTS as usize {
            return Err(format!("more than {} rule names in one run", SLOTS - 1));
        }
        self.names.push(name.to_string());
        Ok(self.names.len() as u32)
    }

    /// The program for `config`'s enabled kernel rules, loaded.
    fn build(&mut self, config: &Config) -> Result<TcProgram, String> {
        let mut compiled = Vec::new();
        for r in config.rules.iter().filter(|r| r.in_kernel && r.enabled) {
            let insns = compile_offline(&r.filter).map_err(|e| e.to_string())?;
            compiled.push((self.slot(&r.name)?, insns));
        }
        let rules: Vec<KernelRule<'_>> = compiled
            .iter()
            .map(|(slot, filter)| KernelRule {
                slot: *slot,
                filter,
            })
            .collect();
        let code = translate::program(&rules, self.map.raw_fd(), Vlan::Skb)?;
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

    fn read(&self, slot: u32) -> anyhow::Result<Counts> {
        Counts::read(&self.map, slot)
    }

    /// Adds what the kernel counted since the last call to the kernel rules of `tally`
    /// (made for `config`, the configuration that ran).
    pub fn add_to(&mut self, config: &Config, tally: &mut Tally) -> anyhow::Result<()> {
        for slot in 1..=self.names.len() as u32 {
            let now = self.read(slot)?;
            let delta = now.minus(&self.seen[slot as usize]);
            self.seen[slot as usize] = now;
            let name = &self.names[slot as usize - 1];
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
        }
        Ok(())
    }

    /// Every packet the program saw since it was attached, as capture accounting (no
    /// socket, so nothing is dropped or filtered).
    pub fn accounting(&self) -> anyhow::Result<Accounting> {
        let t = self.read(0)?;
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
    fn counts_and_sizes_run_in_the_kernel_flows_and_alerts_do_not() {
        let mut c = config("\"sizes\"");
        place(&mut c, Mode::On, false).unwrap();
        assert!(c.rules.iter().all(|r| r.in_kernel));
        assert!(all_in_kernel(&c));

        let mut c = config("\"flows\"");
        assert!(!all_in_kernel(&c));
        let e = place(&mut c.clone(), Mode::On, true).unwrap_err();
        assert!(
            e.contains("rule `b`: action `flows` cannot run in the kernel"),
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
