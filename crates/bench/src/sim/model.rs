//! What a simulation run is made of: the system (queues, kernel rings, pools, workers, the
//! offload policy) and the offered traffic, in one plain value.
//!
//! Why a separate module: the engine, the sweeps, the command line and the tests all build
//! a [`Config`]; keeping it free of behaviour lets each of them vary one field of a common
//! baseline ([`Config::default`], the regime the sweeps study) and nothing else.

use poolcap_core::policy::PolicySpec;

/// How the total rate is shared among receive queues.
#[derive(Debug, Clone, PartialEq)]
pub enum Split {
    /// Every queue gets the same rate.
    Even,
    /// `flows` flows with Zipf(`exponent`) shares; flow i lands on queue hash(seed, i) % n,
    /// so a queue's rate is the sum of the flows it was dealt (RSS-like, deterministic).
    Zipf {
        /// Number of flows F.
        flows: usize,
        /// Zipf exponent A (flow i carries a share proportional to 1/(i+1)^A).
        exponent: f64,
    },
    /// Explicit rates per queue in packets/s (the total rate is ignored).
    PerQueue(Vec<f64>),
}

/// The timing of one queue's packets at its average rate.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// Evenly spaced packets (random phase per queue).
    Constant,
    /// Exponential gaps: a Poisson process (the superposition of many independent flows).
    Poisson,
    /// Each flow (each queue, without flows) alternates ON and OFF periods of exponential
    /// length, ON a share `duty` of the time with a mean ON period of `on_ns`, and sends a
    /// Poisson stream at its average rate / `duty` while ON: traffic whose rate swings for
    /// milliseconds, as real traces do, while keeping the configured average.
    Modulated {
        /// Share of time a flow is ON (0 < duty <= 1; 1 is plain Poisson).
        duty: f64,
        /// Mean ON period, ns.
        on_ns: f64,
    },
    /// Bursts of `burst` packets at `peak_pps`, each followed by `idle_ns` of silence; every
    /// queue has the same pattern (random phase). The split and total rate are ignored: the
    /// average per queue is burst / (burst / peak + idle).
    OnOff {
        /// Packets per burst.
        burst: u64,
        /// Packet rate inside a burst.
        peak_pps: f64,
        /// Silence after each burst, in ns.
        idle_ns: f64,
    },
}

/// The offered traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrivals {
    /// Total average rate over all queues, packets/s.
    pub rate_pps: f64,
    /// How the rate is shared among queues.
    pub split: Split,
    /// Packet timing within each queue.
    pub shape: Shape,
}

/// One simulation: the system and its traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Receive queues n, each with a capture thread, a pool, a capture queue and one worker.
    pub queues: usize,
    /// Kernel ring per queue, in packets: it fills while the capture is paused or the pool
    /// has no room for the next batch.
    pub ring: usize,
    /// Cells per chunk (M).
    pub cells: usize,
    /// Chunks per pool (R).
    pub chunks: usize,
    /// Worker cost per packet in ns; one value for every worker, or one per worker.
    pub cost_ns: Vec<f64>,
    /// A partly filled chunk is sealed once the ring is idle and it has been open this long
    /// (ns; below 1 ns, at once).
    pub seal_after_ns: f64,
    /// The offload / congestion policy, one instance per queue.
    pub policy: PolicySpec,
    /// Buddy groups; `None` puts every queue in one group.
    pub groups: Option<Vec<Vec<usize>>>,
    /// The traffic.
    pub arrivals: Arrivals,
    /// Virtual seconds of traffic (the run then drains what is buffered).
    pub seconds: f64,
    /// Seed of every random choice (phases, gaps, flow placement).
    pub seed: u64,
}

/// Default receive queues of a single run.
pub const DEFAULT_QUEUES: usize = 4;
/// Default kernel ring, packets.
pub const DEFAULT_RING: usize = 4096;
/// Default pool geometry (M, R), as WireCAP's A-(256,100,T).
pub const DEFAULT_POOL: (usize, usize) = (256, 100);
/// Default total rate, packets/s.
pub const DEFAULT_RATE: f64 = 1_000_000.0;
/// Default worker cost per packet, ns (one worker handles 1e9/cost packets/s).
pub const DEFAULT_COST_NS: f64 = 3_500.0;
/// Default flows.
pub const DEFAULT_FLOWS: usize = 1000;
/// Default Zipf exponent.
pub const DEFAULT_ZIPF: f64 = 1.1;
/// Default share of time a flow is ON.
pub const DEFAULT_DUTY: f64 = 0.25;
/// Default mean ON period of a flow, ns.
pub const DEFAULT_ON_NS: f64 = 10e6;
/// Default partial-chunk timeout, ns.
pub const DEFAULT_SEAL_AFTER_NS: f64 = 1_000_000.0;

impl Default for Config {
    /// The regime the sweeps study: 1 Mpps in 1000 flows with Zipf(1.1) shares, each flow
    /// hashed to a queue and ON a quarter of the time (10 ms mean ON periods, sending at 4x
    /// its average while ON); workers spend 3.5 us per packet. Four workers handle
    /// 1.14 Mpps, so capacity suffices on average even at 4 queues (88% load), but the
    /// elephant flow carries 18% of the packets, 720 kpps while ON, and overloads whichever
    /// queue it lands on: basic loses there whatever the number of queues, and only
    /// offloading can use the idle workers. Pool 256 x 100 as WireCAP's A-(256,100,T),
    /// kernel ring 4096 packets, 2 virtual seconds per run.
    fn default() -> Self {
        Self {
            queues: DEFAULT_QUEUES,
            ring: DEFAULT_RING,
            cells: DEFAULT_POOL.0,
            chunks: DEFAULT_POOL.1,
            cost_ns: vec![DEFAULT_COST_NS],
            seal_after_ns: DEFAULT_SEAL_AFTER_NS,
            policy: PolicySpec::Basic,
            groups: None,
            arrivals: Arrivals {
                rate_pps: DEFAULT_RATE,
                split: Split::Zipf {
                    flows: DEFAULT_FLOWS,
                    exponent: DEFAULT_ZIPF,
                },
                shape: Shape::Modulated {
                    duty: DEFAULT_DUTY,
                    on_ns: DEFAULT_ON_NS,
                },
            },
            seconds: 2.0,
            seed: 1,
        }
    }
}

impl Config {
    /// The cost per packet of worker `w`, ns.
    pub fn cost_of(&self, w: usize) -> f64 {
        match self.cost_ns.as_slice() {
            [] => 0.0,
            [c] => *c,
            cs => cs[w.min(cs.len() - 1)],
        }
    }

    /// The buddy group of every queue.
    pub fn group_list(&self) -> Vec<Vec<usize>> {
        match &self.groups {
            Some(g) => g.clone(),
            None => vec![(0..self.queues).collect()],
        }
    }

    /// Checks the values a run cannot work with.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=64).contains(&self.queues) {
            return Err(format!("{} queues: use 1 to 64", self.queues));
        }
        if self.cells == 0 || self.chunks == 0 {
            return Err("the pool needs at least one chunk of one cell".into());
        }
        if self.cost_ns.iter().any(|c| !c.is_finite() || *c < 0.0) {
            return Err("worker costs must be finite and not negative".into());
        }
        if self.cost_ns.len() > 1 && self.cost_ns.len() != self.queues {
            return Err(format!(
                "{} worker costs for {} queues: give one, or one per queue",
                self.cost_ns.len(),
                self.queues
            ));
        }
        if !(self.seconds.is_finite() && self.seconds > 0.0) {
            return Err("the run needs a positive duration".into());
        }
        if !(self.seal_after_ns.is_finite() && self.seal_after_ns > 0.0) {
            return Err("the seal timeout must be positive".into());
        }
        self.validate_traffic()?;
        self.validate_groups()
    }

    /// Checks the offered traffic.
    fn validate_traffic(&self) -> Result<(), String> {
        if let Split::PerQueue(r) = &self.arrivals.split {
            if r.len() != self.queues {
                return Err(format!(
                    "{} queue rates for {} queues",
                    r.len(),
                    self.queues
                ));
            }
        }
        if let Split::Zipf { flows, exponent } = self.arrivals.split {
            if flows == 0 || !exponent.is_finite() || exponent < 0.0 {
                return Err("zipf needs at least one flow and an exponent >= 0".into());
            }
        }
        if let Shape::OnOff {
            burst,
            peak_pps,
            idle_ns,
        } = self.arrivals.shape
        {
            if burst == 0
                || peak_pps.is_nan()
                || peak_pps <= 0.0
                || idle_ns.is_nan()
                || idle_ns < 0.0
            {
                return Err("on/off needs a burst of at least one packet, a peak rate and an idle time >= 0".into());
            }
        } else if !(self.arrivals.rate_pps.is_finite() && self.arrivals.rate_pps >= 0.0) {
            return Err("the rate must be finite and not negative".into());
        }
        if let Shape::Modulated { duty, on_ns } = self.arrivals.shape {
            if !(duty > 0.0 && duty <= 1.0 && on_ns > 0.0 && on_ns.is_finite()) {
                return Err("bursty flows need 0 < duty <= 1 and a positive ON period".into());
            }
        }
        Ok(())
    }

    /// Checks the buddy groups: every member a queue, none twice.
    fn validate_groups(&self) -> Result<(), String> {
        if let Some(groups) = &self.groups {
            let mut seen = vec![false; self.queues];
            for &q in groups.iter().flatten() {
                if q >= self.queues || std::mem::replace(&mut seen[q], true) {
                    return Err(format!(
                        "buddy group member {q} is out of range or repeated"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// How a policy is written on the command line (`basic`, `buddy:60`, `congestion:90,50`).
pub fn policy_label(p: &PolicySpec) -> String {
    match p {
        PolicySpec::Basic => "basic".into(),
        PolicySpec::Buddy { threshold } => format!("buddy:{threshold}"),
        PolicySpec::Congestion { high, low } => format!("congestion:{high},{low}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_parse_back() {
        for s in ["basic", "buddy:60", "congestion:90,50", "buddy:72.5"] {
            let p: PolicySpec = s.parse().unwrap();
            assert_eq!(policy_label(&p), s);
        }
    }

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        assert_eq!(Config::default().validate(), Ok(()));
        let bad = Config {
            queues: 65,
            ..Config::default()
        };
        assert!(bad.validate().unwrap_err().contains("65 queues"));
        let bad = Config {
            cost_ns: vec![1.0, 2.0],
            ..Config::default()
        };
        assert!(bad.validate().is_err());
    }
}
