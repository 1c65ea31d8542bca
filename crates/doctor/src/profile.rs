//! A machine's measured costs per capture stage: what `poolcap calibrate` writes and
//! `poolcap predict` reads (JSON).
//!
//! Every stage cost is linear in the bytes it touches, `ns_per_packet + ns_per_byte x bytes`
//! ([`Cost`]), fitted from the smallest and largest frame sizes measured (64 and 1514 bytes),
//! and bent where a size between them was measured too ([`Bend`]): per-packet work (wake-ups,
//! headers, bookkeeping) and per-byte work (copies, checksums of compression) are what the
//! papers vary with frame size and snaplength. Costs are CPU time on one core, so a stage's
//! capacity is `1e9 / cost` packets per second. Stage costs are increments: the pool copy
//! is what a poolcap capture with analysis costs beyond one that counts in the ring, the
//! write what writing costs beyond that, a compression level what it costs beyond writing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::share::Cpu;

/// A stage's CPU cost for one packet of `bytes` bytes: a line through the smallest and the
/// largest size measured, bent at a size measured between them when there is one ([`Bend`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Cost {
    /// Nanoseconds per packet, whatever its size.
    pub ns_per_packet: f64,
    /// Nanoseconds per byte the stage touches.
    pub ns_per_byte: f64,
    /// Where a size measured between the line's ends lies off it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bend: Option<Bend>,
}

/// `46 ns + 0.31 ns/B`, and where it bends `(+291 ns at 512 B)`.
impl std::fmt::Display for Cost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.0} ns + {:.2} ns/B",
            self.ns_per_packet, self.ns_per_byte
        )?;
        match self.bend {
            Some(b) => write!(f, " ({:+.0} ns at {:.0} B)", b.ns, b.at),
            None => Ok(()),
        }
    }
}

/// How far a cost measured at `at` bytes lies above the line through the costs at `from`
/// and `to` bytes (`ns`; below it when negative). The cost is then two lines meeting there.
/// A cost is not linear in the bytes everywhere: with rps on, the receive work on the tool's
/// CPU and tcpdump's own cost behind it leave the line at 512 B (the bend of each cost is in
/// BENCHMARKS.md, predict, "The profile calibrated in this run").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bend {
    /// The smallest size measured, bytes.
    pub from: f64,
    /// The size measured between, bytes.
    pub at: f64,
    /// The largest size measured, bytes.
    pub to: f64,
    /// Its cost less the line's there, nanoseconds.
    pub ns: f64,
}

impl Bend {
    /// What the bend adds at `bytes`: all of it at `at`, falling to nothing at either end
    /// and beyond.
    fn ns(&self, bytes: f64) -> f64 {
        let share = if bytes <= self.at {
            (bytes - self.from) / (self.at - self.from)
        } else {
            (self.to - bytes) / (self.to - self.at)
        };
        self.ns * share.clamp(0.0, 1.0)
    }
}

/// The largest frame a calibration measures (a full Ethernet frame without FCS), where a
/// cost says no larger size it was measured at.
pub const LARGEST_MEASURED: f64 = 1514.0;

impl Cost {
    /// Nanoseconds for one packet of `bytes` bytes, never negative. A fit from noisy
    /// measurements may fall with size (the built-in `kernel_rps` loses 0.15 ns a byte):
    /// beyond the largest size measured such a slope is not followed, the cost stays at
    /// the largest size's, where the line would reach zero at a jumbo frame.
    pub fn ns(&self, bytes: f64) -> f64 {
        let largest = self.bend.map_or(LARGEST_MEASURED, |b| b.to);
        let at = if self.ns_per_byte < 0.0 {
            bytes.min(largest.max(0.0))
        } else {
            bytes
        };
        let bend = self.bend.map_or(0.0, |b| b.ns(at));
        (self.ns_per_packet + self.ns_per_byte * at + bend).max(0.0)
    }

    /// The line through two measurements `(bytes, ns)`; with equal sizes, a per-packet cost
    /// only.
    pub fn fit(a: (f64, f64), b: (f64, f64)) -> Cost {
        if (b.0 - a.0).abs() < f64::EPSILON {
            return Cost {
                ns_per_packet: (a.1 + b.1) / 2.0,
                ..Cost::default()
            };
        }
        let per_byte = (b.1 - a.1) / (b.0 - a.0);
        Cost {
            ns_per_packet: a.1 - per_byte * a.0,
            ns_per_byte: per_byte,
            bend: None,
        }
    }

    /// The cost through measurements `(bytes, ns)`, one per size: the line through the
    /// smallest and the largest, bent at the middle one of three or more ([`Bend`]).
    pub fn through(points: &[(f64, f64)]) -> Option<Cost> {
        let mut v = points.to_vec();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (first, last) = (*v.first()?, *v.last()?);
        let mut c = Cost::fit(first, last);
        if v.len() >= 3 {
            let (at, ns) = v[v.len() / 2];
            c.bend = Some(Bend {
                from: first.0,
                at,
                to: last.0,
                ns: ns - c.ns_per_packet - c.ns_per_byte * at,
            });
        }
        Some(c)
    }

    /// `self` times `k`, per packet and per byte.
    pub fn times(&self, k: f64) -> Cost {
        Cost {
            ns_per_packet: self.ns_per_packet * k,
            ns_per_byte: self.ns_per_byte * k,
            bend: self.bend.map(|b| Bend { ns: b.ns * k, ..b }),
        }
    }

    /// `self - other`, stage by stage (an increment over a cheaper configuration, measured
    /// at the same sizes).
    pub fn minus(&self, other: &Cost) -> Cost {
        let bend = match (self.bend, other.bend) {
            (Some(a), o) => Some(Bend {
                ns: a.ns - o.map_or(0.0, |b| b.ns(a.at)),
                ..a
            }),
            (None, Some(b)) => Some(Bend { ns: -b.ns, ..b }),
            (None, None) => None,
        };
        Cost {
            ns_per_packet: self.ns_per_packet - other.ns_per_packet,
            ns_per_byte: self.ns_per_byte - other.ns_per_byte,
            bend,
        }
    }
}

/// A peer capture tool's cost per packet, counting (writing to /dev/null) and writing a file.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct ToolCosts {
    /// Writing to /dev/null (as the bench's counting runs do).
    pub null: Cost,
    /// Writing a pcap file.
    pub file: Cost,
    /// Writing to /dev/null with the kernel's receive work on the tool's CPU (rps on), per
    /// captured packet: that CPU's busy time less the receive work's (`kernel_rps` for each
    /// frame sent). A tool that wakes once per packet (dumpcap) pays each wake-up behind the
    /// receive softirq, twice its cost with rps off (`None`: not measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub null_rps: Option<Cost>,
    /// Writing a pcap file with the receive work on the tool's CPU (as `null_rps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_rps: Option<Cost>,
    /// `null_rps` measured at a light rate the tool keeps up with (`null_rps` is measured at
    /// the sender's top speed, where it falls behind): keeping up, it reads each frame soon
    /// after the receive work wrote it on the same CPU, and pays less for it. Between the
    /// two capacities a capture keeps up or falls behind for good
    /// ([`crate::predict::Edge`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub null_rps_light: Option<Cost>,
    /// `file_rps` measured at a light rate (as `null_rps_light`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_rps_light: Option<Cost>,
    /// The share of its CPU's busy time the tool got where `null_rps` was measured (its busy
    /// time less the receive work's, over its busy time), by frame size: a fraction, fitted
    /// as a cost is. Behind at top speed the CPU is busy throughout, the scheduler splits it
    /// between the receive softirq and the tool, and the sender goes as fast as the receive
    /// work's backlog lets it: a slower sender does not leave the tool more. Taking `rate x
    /// kernel_rps` first, as if it did, got tcpdump's captures wrong (BENCHMARKS.md, predict:
    /// its calibration runs behind the receive work against its S1 points).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub null_rps_left: Option<Cost>,
    /// The same where `file_rps` was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_rps_left: Option<Cost>,
}

/// What `poolcap probe`'s rules cost on the analysis worker, beyond the pool copy every
/// analysis has: a rule set of one rule (`count` and `flows` of all IP traffic, which every
/// packet matches) and each further rule, measured with the bench's generated rule set
/// (filters on ports and frame lengths that the generator's packets mostly miss, actions
/// cycling through count, sizes and flows: a rule's cost is mostly its filter's); and what
/// a further `flows` rule adds when every packet matches it (its flow-table update), from a
/// rule set whose every rule tracks the flows of all IP traffic ([`probe_flows_key`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct ProbeCosts {
    /// The rule engine with its one matching rule, per packet.
    pub first_rule: Cost,
    /// Each further rule, per packet.
    pub per_rule: Cost,
    /// Each further `flows` rule that the packet matches, beyond its `per_rule` (`None`: a
    /// profile calibrated before this was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_rule: Option<Cost>,
}

impl ProbeCosts {
    /// Nanoseconds `rules` rules cost for one packet of `bytes` bytes (at least one rule),
    /// `flow_rules` of the further ones updating a flow table with it. `None` when flow
    /// rules are asked for and the profile has no cost for them.
    pub fn ns(&self, rules: usize, flow_rules: usize, bytes: f64) -> Option<f64> {
        let flows = match (flow_rules, self.flow_rule) {
            (0, _) => 0.0,
            (n, Some(c)) => n as f64 * c.ns(bytes),
            (_, None) => return None,
        };
        Some(
            self.first_rule.ns(bytes)
                + rules.saturating_sub(1) as f64 * self.per_rule.ns(bytes)
                + flows,
        )
    }
}

/// The measured costs of this machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Where the numbers come from: `poolcap calibrate` on which interface, or the built-in
    /// default.
    pub source: String,
    /// 1-minute load average when calibrating (others' work makes costs look higher).
    pub load_average: Option<f64>,
    /// The sender alone, ns per frame of `bytes` (its top speed is the line rate a veth
    /// lab offers).
    pub sender: Cost,
    /// Kernel receive work per frame up to the capture ring (`bytes` = captured length).
    pub kernel: Cost,
    /// The same work measured where it runs when rps (or the NIC's interrupt) sends it to
    /// the tool's CPU: that CPU's busy time per frame received while poolcap counts, less
    /// poolcap's own (`None`: not measured; [`Profile::kernel_on_tool_cpu`] falls back to
    /// `kernel`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_rps: Option<Cost>,
    /// poolcap counting in the kernel ring (no copy).
    pub poolcap_count: Cost,
    /// poolcap copying a packet into the pool (increment; `bytes` = captured length).
    pub pool_copy: Cost,
    /// poolcap writing a pcap record (increment).
    pub write: Cost,
    /// poolcap writing its pcap stream to /dev/null, as the bench's sessions run it: the
    /// records and the write calls without the page cache's copy (increment over counting;
    /// `None`: not measured, the model falls back to `write`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_null: Option<Cost>,
    /// poolcap writing a pcapng block instead, its default format (increment over counting;
    /// `None`: not measured, the model falls back to `write`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcapng: Option<Cost>,
    /// `poolcap probe`'s rules on the analysis worker (`None`: not measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeCosts>,
    /// Compression (`zstd:1`, `gzip:6`) of a written record (increment).
    pub compress: BTreeMap<String, Cost>,
    /// x-loop cost per iteration, ns.
    pub x_loop_ns: f64,
    /// tcpdump's costs.
    pub tcpdump: ToolCosts,
    /// dumpcap's costs.
    pub dumpcap: ToolCosts,
    /// Bytes of a TPACKET_V3 ring slot in front of the captured bytes: the frame header,
    /// sockaddr_ll and alignment up to the MAC header (`tp_mac`; 82 for a 14-byte link
    /// header and no reserve).
    pub ring_slot_overhead: f64,
    /// The CPU share a capture gets here and how long it waits for it (`None`: a core of
    /// its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Cpu>,
    /// Kernel rings measured full, each beside the model's rule (empty: not measured).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rings: Vec<RingFill>,
}

/// A kernel ring measured full: its capture was stopped while more frames arrived than it
/// holds, then let go and counted what it had.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RingFill {
    /// The capture: `poolcap analysing` (its 4 ms retire timer), `tcpdump` (libpcap's 1 s).
    pub capture: String,
    /// Ring bytes (`-B`).
    pub ring_bytes: u64,
    /// Bytes of each frame.
    pub frame_bytes: f64,
    /// Frames per second they arrived at (median of the runs).
    pub rate_pps: f64,
    /// Frames the ring held (median of the runs).
    pub held: f64,
    /// Frames the model's rule says it holds at that rate ([`crate::predict::ring_frames`]).
    pub rule: f64,
}

/// The built-in profile's numbers: `poolcap calibrate` in a veth lab on the 2-core
/// Debian 12 VM poolcap is developed on (kernel 6.18), as `built_in` says.
const BUILT_IN: &str = include_str!("default_profile.json");

impl Profile {
    /// The profile measured on the development machine, used when none is given.
    pub fn built_in() -> Profile {
        serde_json::from_str(BUILT_IN)
            .unwrap_or_else(|e| unreachable!("default_profile.json is checked by a unit test: {e}"))
    }

    /// Reads a profile from JSON text.
    pub fn from_json(text: &str) -> Result<Profile, String> {
        serde_json::from_str(text).map_err(|e| format!("not a poolcap profile: {e}"))
    }

    /// The kernel's receive work per frame when it runs on the tool's CPU: `kernel_rps` when
    /// measured, else `kernel`.
    pub fn kernel_on_tool_cpu(&self) -> Cost {
        self.kernel_rps.unwrap_or(self.kernel)
    }

    /// The sender's top speed (frames per second) for frames of `bytes` bytes.
    pub fn top_pps(&self, bytes: f64) -> f64 {
        let ns = self.sender.ns(bytes);
        if ns > 0.0 {
            1e9 / ns
        } else {
            f64::INFINITY
        }
    }
}

/// Measurements from which `poolcap calibrate` builds a profile: for each configuration,
/// `(captured bytes, ns per packet)` at two or more frame sizes (or snaplengths).
///
/// Keys: `sender` (the generator alone, ns per frame sent), `sender+capture` (the generator
/// while poolcap counts: the difference is the kernel's receive work on veth), `count`,
/// `null` (poolcap writing pcap to /dev/null), `copy` (poolcap with a 1-iteration x-loop:
/// the pool copy), `write` (pcap), `pcapng`, `probe 1r` and `probe 100r` (`poolcap probe`
/// with that many rules: [`probe_key`]), a compression level
/// (`zstd:3`, measured writing), `tcpdump null`, `tcpdump file`, `dumpcap null`,
/// `dumpcap file`, `kernel rps` (the receive work's ns per frame on the tool's CPU with rps
/// on), and `tcpdump null rps`, `tcpdump file rps`, `dumpcap null rps`, `dumpcap file rps`
/// (their own CPU per captured packet behind that work), the same with ` light` at a rate
/// they keep up with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Samples(BTreeMap<String, Vec<(f64, f64)>>);

impl Samples {
    /// Records one measurement (ignores what is not a finite positive number).
    pub fn add(&mut self, key: &str, bytes: f64, ns: f64) {
        if bytes.is_finite() && ns.is_finite() && ns > 0.0 {
            self.0.entry(key.to_owned()).or_default().push((bytes, ns));
        }
    }

    /// The cost of `key` through the median of its repeats at each size ([`Cost::through`]).
    pub fn fit(&self, key: &str) -> Option<Cost> {
        let v = self.0.get(key)?;
        let at = |bytes: f64| {
            let mut ns: Vec<f64> = v.iter().filter(|s| s.0 == bytes).map(|s| s.1).collect();
            ns.sort_by(f64::total_cmp);
            (bytes, ns[ns.len() / 2])
        };
        let points: Vec<(f64, f64)> = self.sizes(key).into_iter().map(at).collect();
        Cost::through(&points)
    }

    /// The sizes measured for `key`, smallest first, each once.
    pub fn sizes(&self, key: &str) -> Vec<f64> {
        let mut v: Vec<f64> = self
            .0
            .get(key)
            .map_or(Vec::new(), |v| v.iter().map(|s| s.0).collect());
        v.sort_by(f64::total_cmp);
        v.dedup();
        v
    }

    /// The smallest and largest size measured for `key`.
    pub fn span(&self, key: &str) -> Option<(f64, f64)> {
        let v = self.sizes(key);
        Some((*v.first()?, *v.last()?))
    }

    /// Keys measured.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }
}

impl Profile {
    /// A profile from `samples`, taking from `base` every cost that was not measured (and
    /// saying so in `source`).
    pub fn from_samples(samples: &Samples, base: &Profile, source: &str) -> Profile {
        let mut kept = Kept::default();
        let fit = |k: &str| samples.fit(k);
        // An increment is measured at each size and never negative: on a busy machine a
        // configuration with one more stage can come out cheaper than the one without it.
        let diff = |a: &str, b: &str| {
            let (ca, cb) = (fit(a)?, fit(b)?);
            let inc = |x: f64| (x, (ca.ns(x) - cb.ns(x)).max(0.0));
            let points: Vec<(f64, f64)> = samples.sizes(a).into_iter().map(inc).collect();
            Cost::through(&points)
        };
        // Costs a profile may lack: the base's where it has them, and said so.
        let pcapng = kept.or_base("pcapng", diff("pcapng", "count"), base.pcapng);
        let write_null = kept.or_base("null", diff("null", "count"), base.write_null);
        let probe = kept.or_base("probe", probe_costs(samples, &diff), base.probe);
        let sender = kept.pick("sender", fit("sender"), base.sender);
        let kernel = kept.pick("kernel", diff("sender+capture", "sender"), base.kernel);
        let kernel_rps = fit("kernel rps").or(base.kernel_rps);
        let poolcap_count = kept.pick("count", fit("count"), base.poolcap_count);
        let pool_copy = kept.pick("copy", diff("copy", "count"), base.pool_copy);
        // A pcap file alone is written from the kernel ring: no pool copy in between.
        let write = kept.pick("write", diff("write", "count"), base.write);
        let mut compress = BTreeMap::new();
        for (level, c) in &base.compress {
            compress.insert(level.clone(), kept.pick(level, diff(level, "write"), *c));
        }
        for level in samples.keys().filter(|k| k.contains(':')) {
            if let Some(c) = diff(level, "write") {
                compress.insert(level.to_owned(), c);
            }
        }
        // A light cost only from both sizes: a size whose run fell behind is left out, and a
        // flat cost from the other would stand for it.
        let light = |k: &str| {
            let (lo, hi) = samples.span(k)?;
            (hi > lo).then(|| fit(k)).flatten()
        };
        let mut tool = |name: &str, b: &ToolCosts| {
            let key = |what: &str| format!("{name} {what}");
            let mut or_base = |what: &str, c: Option<Cost>, fallback: Option<Cost>| {
                kept.or_base(&key(what), c, fallback)
            };
            let fit_of = |what: &str| fit(&key(what));
            let light_of = |what: &str| light(&key(what));
            ToolCosts {
                null: or_base("null", fit_of("null"), Some(b.null)).unwrap_or(b.null),
                file: or_base("file", fit_of("file"), Some(b.file)).unwrap_or(b.file),
                null_rps: or_base("null rps", fit_of("null rps"), b.null_rps),
                file_rps: or_base("file rps", fit_of("file rps"), b.file_rps),
                null_rps_light: or_base(
                    "null rps light",
                    light_of("null rps light"),
                    b.null_rps_light,
                ),
                file_rps_light: or_base(
                    "file rps light",
                    light_of("file rps light"),
                    b.file_rps_light,
                ),
                null_rps_left: fit_of("null rps left").or(b.null_rps_left),
                file_rps_left: fit_of("file rps left").or(b.file_rps_left),
            }
        };
        let tcpdump = tool("tcpdump", &base.tcpdump);
        let dumpcap = tool("dumpcap", &base.dumpcap);
        let source = if kept.0.is_empty() {
            source.to_owned()
        } else {
            format!(
                "{source}; not measured, from {}: {}",
                base.source,
                kept.0.join(", ")
            )
        };
        Profile {
            source,
            sender,
            kernel,
            kernel_rps,
            poolcap_count,
            pool_copy,
            write,
            write_null,
            pcapng,
            probe,
            compress,
            tcpdump,
            dumpcap,
            ..base.clone()
        }
    }
}

/// The names of the costs a profile took from its base because they were not measured.
#[derive(Default)]
struct Kept(Vec<String>);

impl Kept {
    /// `measured`, else the base's cost (`None` when it has none), noting `name` when the
    /// base's is taken.
    fn or_base<T>(&mut self, name: &str, measured: Option<T>, base: Option<T>) -> Option<T> {
        if measured.is_none() && base.is_some() {
            self.0.push(name.to_owned());
        }
        measured.or(base)
    }

    /// [`Kept::or_base`] for a cost every profile has.
    fn pick<T: Copy>(&mut self, name: &str, measured: Option<T>, base: T) -> T {
        self.or_base(name, measured, Some(base)).unwrap_or(base)
    }
}

/// The key in [`Samples`] of `poolcap probe` with `rules` rules.
pub fn probe_key(rules: usize) -> String {
    format!("probe {rules}r")
}

/// The key in [`Samples`] of `poolcap probe` with `rules` rules that each track the flows
/// of every packet.
pub fn probe_flows_key(rules: usize) -> String {
    format!("probe {rules}f")
}

/// The rules of the probe configuration whose key is `key` ([`probe_key`]; `None`: not a
/// probe's).
pub fn probe_rules_of(key: &str) -> Option<usize> {
    key.strip_prefix("probe ")?.strip_suffix('r')?.parse().ok()
}

/// The rule counts measured in `samples` (keys `probe {n}r`), fewest first.
fn probe_rule_counts(samples: &Samples) -> Vec<usize> {
    let mut v: Vec<usize> = samples.keys().filter_map(probe_rules_of).collect();
    v.sort_unstable();
    v
}

/// The probe's costs from its runs with the fewest and the most rules: each further rule
/// the slope between them, the first rule the fewest's increment over the pool copy less
/// its further rules (`diff(a, b)`: `a`'s increment over `b`, see
/// [`Profile::from_samples`]). `None` without two rule counts. A further flows rule is
/// what the run of `many` flows rules ([`probe_flows_key`]) adds per rule over the `few`
/// rules' run, less a further rule's cost.
fn probe_costs(samples: &Samples, diff: &dyn Fn(&str, &str) -> Option<Cost>) -> Option<ProbeCosts> {
    let counts = probe_rule_counts(samples);
    let (&few, &many) = (counts.first()?, counts.last()?);
    if many <= few {
        return None;
    }
    let per_rule = diff(&probe_key(many), &probe_key(few))?.times(1.0 / (many - few) as f64);
    let first_rule = diff(&probe_key(few), "copy")?.minus(&per_rule.times((few - 1) as f64));
    let flow_rule = diff(&probe_flows_key(many), &probe_key(few))
        .map(|c| c.times(1.0 / (many - few) as f64).minus(&per_rule));
    Some(ProbeCosts {
        first_rule,
        per_rule,
        flow_rule,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fit_goes_through_both_points() {
        let c = Cost::fit((64.0, 164.0), (1514.0, 1614.0));
        assert!((c.ns_per_byte - 1.0).abs() < 1e-9);
        assert!((c.ns_per_packet - 100.0).abs() < 1e-9);
        assert!((c.ns(1000.0) - 1100.0).abs() < 1e-9);
        let flat = Cost::fit((64.0, 10.0), (64.0, 20.0));
        assert_eq!(flat.ns(1500.0), 15.0);
        let negative = Cost {
            ns_per_packet: -50.0,
            ns_per_byte: 0.01,
            bend: None,
        };
        assert_eq!(negative.ns(64.0), 0.0);
        assert_eq!(c.minus(&c), Cost::default());
    }

    #[test]
    fn a_falling_cost_is_not_extrapolated_past_the_largest_size_measured() {
        // The built-in kernel_rps: 985 ns - 0.151 ns/B, zero by 6.5 KB on the line.
        let c = Cost {
            ns_per_packet: 985.0,
            ns_per_byte: -0.151,
            bend: None,
        };
        let at_1514 = c.ns(1514.0);
        assert!(at_1514 > 700.0, "{at_1514}");
        assert_eq!(c.ns(9000.0), at_1514, "held at the largest size measured");
        assert!(
            c.ns(64.0) > at_1514,
            "within the measured sizes the line holds"
        );
        // A rising cost goes on rising; no cost is ever negative.
        let up = Cost {
            ns_per_packet: 10.0,
            ns_per_byte: 0.5,
            bend: None,
        };
        assert_eq!(up.ns(9000.0), 10.0 + 4500.0);
        let below = Cost {
            ns_per_packet: -100.0,
            ns_per_byte: -1.0,
            bend: None,
        };
        assert_eq!(below.ns(9000.0), 0.0);
    }

    #[test]
    fn a_third_size_bends_the_cost_through_it() {
        // tcpdump behind the receive work at S1 (µs per packet at 64, 512 and 1514 B).
        let points = [(512.0, 920.0), (64.0, 360.0), (1514.0, 1100.0)];
        let c = Cost::through(&points).unwrap();
        for (b, ns) in points {
            assert!((c.ns(b) - ns).abs() < 1e-9, "{b}: {} {c:?}", c.ns(b));
        }
        // Straight between the measured sizes, and the ends' line beyond them.
        let mid = (c.ns(64.0) + c.ns(512.0)) / 2.0;
        assert!((c.ns(288.0) - mid).abs() < 1e-9);
        let line = Cost::fit((64.0, 360.0), (1514.0, 1100.0));
        assert!((c.ns(9000.0) - line.ns(9000.0)).abs() < 1e-9);
        // Scaled and subtracted size by size.
        let half = c.times(0.5);
        let other = Cost::through(&[(64.0, 100.0), (512.0, 100.0), (1514.0, 400.0)]).unwrap();
        for b in [64.0, 300.0, 512.0, 1000.0, 1514.0] {
            assert!((half.ns(b) - c.ns(b) / 2.0).abs() < 1e-9);
            assert!(
                (c.minus(&other).ns(b) - (c.ns(b) - other.ns(b))).abs() < 1e-9,
                "{b}"
            );
        }
        assert_eq!(c.to_string(), "327 ns + 0.51 ns/B (+331 ns at 512 B)");
        assert_eq!(line.to_string(), "327 ns + 0.51 ns/B");
        // Two sizes: a line, as before; none: nothing.
        assert_eq!(Cost::through(&points[1..]).unwrap().bend, None);
        assert_eq!(Cost::through(&[]), None);
        // A profile without bends reads as before, and one with a bend round-trips.
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<Cost>(&json).unwrap(), c);
        assert!(!serde_json::to_string(&line).unwrap().contains("bend"));
    }

    #[test]
    fn a_light_cost_needs_both_frame_sizes() {
        // One size kept up, the other fell behind (left out): no light cost, not a flat one.
        let mut s = Samples::default();
        s.add("dumpcap null rps light", 64.0, 1200.0);
        let mut base = Profile::built_in();
        base.dumpcap.null_rps_light = None;
        base.dumpcap.file_rps_light = None;
        let p = Profile::from_samples(&s, &base, "test");
        assert_eq!(p.dumpcap.null_rps_light, None);
        s.add("dumpcap null rps light", 1514.0, 1500.0);
        let p = Profile::from_samples(&s, &base, "test");
        let c = p.dumpcap.null_rps_light.expect("both sizes measured");
        assert!((c.ns(1514.0) - 1500.0).abs() < 1e-9, "{c:?}");
        assert_eq!(p.dumpcap.file_rps_light, None);
    }

    #[test]
    fn stage_costs_are_increments_over_the_cheaper_configuration() {
        let mut s = Samples::default();
        for (bytes, base) in [(64.0, 100.0), (1514.0, 100.0 + 1450.0)] {
            s.add("count", bytes, base);
            s.add("copy", bytes, base + 50.0);
            // pcap is written from the ring: its increment is over counting, not the copy.
            s.add("write", bytes, base + bytes);
            s.add("zstd:1", bytes, base + 3.0 * bytes);
            s.add("pcapng", bytes, base + bytes / 2.0);
            s.add("null", bytes, base + 10.0);
            // The probe copies into the pool (50 ns), then its rules: 300 ns + 20 per further.
            s.add(&probe_key(1), bytes, base + 50.0 + 300.0);
            s.add(&probe_key(100), bytes, base + 50.0 + 300.0 + 99.0 * 20.0);
            // 99 further rules that each update a flow table: 50 ns more each.
            s.add(
                &probe_flows_key(100),
                bytes,
                base + 50.0 + 300.0 + 99.0 * 70.0,
            );
            s.add("sender", bytes, 2000.0);
            s.add("sender+capture", bytes, 2300.0);
            s.add("kernel rps", bytes, 400.0 + bytes / 2.0);
        }
        s.add("count", 64.0, 1e9); // an outlier repeat: the median ignores it
        s.add("count", 64.0, 100.0);
        s.add("tcpdump null", 64.0, f64::NAN); // ignored
                                               // gzip:1 measured cheaper than writing at 1514 B (noise): its increment is 0 there.
        s.add("gzip:1", 64.0, 100.0 + 64.0 + 36.0);
        s.add("gzip:1", 1514.0, 100.0 + 1450.0);
        let base = Profile::built_in();
        let p = Profile::from_samples(&s, &base, "calibrate test");
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        assert!(close(p.poolcap_count.ns(64.0), 100.0));
        assert!(close(p.pool_copy.ns(1000.0), 50.0));
        assert!(close(p.write.ns_per_byte, 1.0) && close(p.write.ns_per_packet, 0.0));
        assert!(close(p.compress["zstd:1"].ns_per_byte, 2.0));
        let pcapng = p.pcapng.unwrap();
        assert!(close(pcapng.ns_per_byte, 0.5) && close(pcapng.ns_per_packet, 0.0));
        let null = p.write_null.unwrap();
        assert!(close(null.ns(1514.0), 10.0) && close(null.ns(64.0), 10.0));
        let probe = p.probe.unwrap();
        assert!(close(probe.first_rule.ns(1514.0), 300.0));
        assert!(close(probe.per_rule.ns(64.0), 20.0));
        assert!(close(probe.ns(11, 0, 64.0).unwrap(), 500.0));
        assert!(close(probe.flow_rule.unwrap().ns(1514.0), 50.0));
        assert!(close(probe.ns(11, 10, 64.0).unwrap(), 1000.0));
        assert!(close(p.kernel.ns(64.0), 300.0));
        let rps = p.kernel_on_tool_cpu();
        assert!(close(rps.ns_per_packet, 400.0) && close(rps.ns_per_byte, 0.5));
        let unmeasured = Profile {
            kernel_rps: None,
            ..base.clone()
        };
        assert_eq!(unmeasured.kernel_on_tool_cpu(), unmeasured.kernel);
        assert_eq!(p.tcpdump, base.tcpdump);
        assert_eq!(p.compress["zstd:3"], base.compress["zstd:3"]);
        assert!(p
            .source
            .starts_with("calibrate test; not measured, from built-in"));
        assert!(p.source.contains("zstd:3") && p.source.contains("tcpdump null"));
        let kept = p.source.rsplit(": ").next().unwrap();
        assert!(
            !kept.contains("probe") && !kept.contains("pcapng"),
            "{kept}"
        );
        assert!(close(p.compress["gzip:1"].ns(64.0), 36.0));
        assert!(close(p.compress["gzip:1"].ns(1514.0), 0.0));
        assert!(!p.source.contains("zstd:1"));
    }

    #[test]
    fn the_probes_first_rule_is_what_its_fewest_rules_cost_less_the_further_ones() {
        let mut s = Samples::default();
        for bytes in [64.0, 1514.0] {
            s.add("copy", bytes, 100.0);
            s.add(&probe_key(10), bytes, 100.0 + 400.0 + 9.0 * 30.0);
            s.add(&probe_key(50), bytes, 100.0 + 400.0 + 49.0 * 30.0);
        }
        let p = Profile::from_samples(&s, &Profile::built_in(), "test")
            .probe
            .unwrap();
        assert!((p.first_rule.ns(64.0) - 400.0).abs() < 1e-6, "{p:?}");
        assert!((p.per_rule.ns(1514.0) - 30.0).abs() < 1e-6, "{p:?}");
        // Without a run of flows rules, their cost is not known, and a rule set with
        // further flows rules has no cost.
        assert_eq!(p.flow_rule, None);
        assert_eq!(p.ns(3, 1, 64.0), None);
        // One rule count alone says nothing of the further rules: the base's costs stand.
        let mut one = Samples::default();
        one.add("copy", 64.0, 100.0);
        one.add(&probe_key(10), 64.0, 900.0);
        let base = Profile {
            probe: None,
            ..Profile::built_in()
        };
        assert_eq!(Profile::from_samples(&one, &base, "test").probe, None);
        // With a base that has them, its costs stand, and the source says so.
        let kept = Profile::from_samples(&one, &Profile::built_in(), "test");
        assert_eq!(kept.probe, Profile::built_in().probe);
        assert!(
            kept.source.contains("pcapng, null, probe"),
            "{}",
            kept.source
        );
    }

    #[test]
    fn the_built_in_profile_reads_and_round_trips() {
        let p = Profile::built_in();
        assert!(p.source.starts_with("built-in"));
        assert!(p.x_loop_ns > 0.0 && p.top_pps(64.0) > 1e4);
        assert!(p.compress.contains_key("zstd:3"));
        assert!(p.pcapng.is_some() && p.probe.is_some_and(|r| r.per_rule.ns(64.0) > 0.0));
        let back = Profile::from_json(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back, p);
        assert!(Profile::from_json("{}")
            .unwrap_err()
            .starts_with("not a poolcap profile"));
    }
}
