//! Packet arrival times per receive queue, in virtual nanoseconds.
//!
//! Why per-queue generators with their own random streams: a queue's arrivals then depend
//! only on (seed, queue), not on the order in which the engine interleaves events, so a run
//! is reproducible and changing the policy never changes the traffic it is compared on.
//! Zipf-skewed traffic is modelled at flow level (F flows, Zipf shares, each flow hashed to
//! a queue): a queue sees the superposition of its flows, a Poisson stream at the sum of
//! their rates, or, with bursty flows ([`Shape::Modulated`]), a Poisson stream whose rate
//! follows which of its flows are ON (a Markov-modulated Poisson process). An elephant flow
//! then makes its queue both hot on average and bursty, as in real traces.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::model::{Arrivals, Shape, Split};
use poolcap_gen::flows::{flow_weights, Skew};

/// SplitMix64's finaliser: a well-mixed 64-bit hash.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The queue flow `flow` is hashed to, among `queues`, for `seed`.
pub fn queue_of_flow(seed: u64, flow: usize, queues: usize) -> usize {
    (mix(seed ^ mix(flow as u64)) % queues.max(1) as u64) as usize
}

/// Average rate of every flow on each queue, packets/s: the Zipf flows each queue was dealt
/// (in flow order), or one flow per queue for the other splits. Empty for a silent queue.
pub fn queue_flows(a: &Arrivals, queues: usize, seed: u64) -> Vec<Vec<f64>> {
    let n = queues.max(1);
    let one_each = |r: &[f64]| r.iter().map(|&x| vec![x]).collect();
    match &a.split {
        Split::Even => one_each(&vec![a.rate_pps / n as f64; n]),
        Split::PerQueue(r) => one_each(r),
        Split::Zipf { flows, exponent } => {
            let mut per = vec![Vec::new(); n];
            for (i, w) in flow_weights(*flows, Skew::Zipf(*exponent))
                .into_iter()
                .enumerate()
            {
                per[queue_of_flow(seed, i, n)].push(w * a.rate_pps);
            }
            per
        }
    }
}

/// Average rate of each queue, packets/s.
pub fn queue_rates(a: &Arrivals, queues: usize, seed: u64) -> Vec<f64> {
    if let Shape::OnOff {
        burst,
        peak_pps,
        idle_ns,
    } = a.shape
    {
        let cycle_s = burst as f64 / peak_pps + idle_ns * 1e-9;
        return vec![burst as f64 / cycle_s; queues.max(1)];
    }
    queue_flows(a, queues, seed)
        .iter()
        .map(|f| f.iter().sum())
        .collect()
}

/// One queue's arrival process.
#[derive(Debug, Clone)]
pub struct Generator {
    rng: SmallRng,
    kind: Kind,
    /// Time of the next arrival, ns.
    next: f64,
}

#[derive(Debug, Clone)]
enum Kind {
    Silent,
    Constant {
        gap: f64,
    },
    Poisson {
        mean_gap: f64,
    },
    OnOff {
        gap: f64,
        burst: u64,
        idle: f64,
        left: u64,
    },
    Modulated(Box<Modulated>),
}

/// Flows that switch between ON (Poisson at `peak`) and OFF, with exponential periods.
#[derive(Debug, Clone)]
struct Modulated {
    peak: Vec<f64>,
    on: Vec<bool>,
    /// Next state change of each flow, as a min-heap of (time, flow).
    toggles: BinaryHeap<Reverse<(Ns, usize)>>,
    /// Sum of the peaks of the flows that are ON, packets/s.
    rate: f64,
    on_mean: f64,
    off_mean: f64,
    changes: u64,
}

/// A time that orders totally, for the toggle heap.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Ns(f64);
impl Eq for Ns {}
impl PartialOrd for Ns {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ns {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

/// An exponential variate with the given mean.
fn exp(rng: &mut SmallRng, mean: f64) -> f64 {
    let u: f64 = rng.random();
    -(1.0 - u).ln() * mean
}

impl Modulated {
    fn new(flows: &[f64], duty: f64, on_ns: f64, rng: &mut SmallRng) -> Self {
        let peak: Vec<f64> = flows.iter().map(|r| r / duty).collect();
        let on_mean = on_ns;
        let off_mean = on_ns * (1.0 - duty) / duty;
        let mut on = Vec::with_capacity(peak.len());
        let mut toggles = BinaryHeap::with_capacity(peak.len());
        let mut rate = 0.0;
        for (i, &p) in peak.iter().enumerate() {
            // Start in the stationary state: ON with probability `duty`, and (memoryless)
            // a fresh exponential period from there.
            let is_on = duty >= 1.0 || rng.random::<f64>() < duty;
            on.push(is_on);
            if is_on {
                rate += p;
            }
            if duty < 1.0 {
                let mean = if is_on { on_mean } else { off_mean };
                toggles.push(Reverse((Ns(exp(rng, mean)), i)));
            }
        }
        Self {
            peak,
            on,
            toggles,
            rate,
            on_mean,
            off_mean,
            changes: 0,
        }
    }

    /// The first arrival after `from` (ns), applying the state changes on the way.
    fn next_after(&mut self, from: f64, rng: &mut SmallRng) -> f64 {
        let mut t = from;
        loop {
            let change = self
                .toggles
                .peek()
                .map_or(f64::INFINITY, |Reverse((n, _))| n.0);
            let arrival = if self.rate > 0.0 {
                t + exp(rng, 1e9 / self.rate)
            } else {
                f64::INFINITY
            };
            // Exponential gaps are memoryless: past a state change, draw again from there.
            if arrival <= change {
                return arrival;
            }
            let Some(Reverse((Ns(at), i))) = self.toggles.pop() else {
                return f64::INFINITY;
            };
            t = at;
            self.on[i] = !self.on[i];
            let mean = if self.on[i] {
                self.rate += self.peak[i];
                self.on_mean
            } else {
                self.rate -= self.peak[i];
                self.off_mean
            };
            self.toggles.push(Reverse((Ns(at + exp(rng, mean)), i)));
            self.changes += 1;
            if self.changes.is_multiple_of(4096) || self.rate < 0.0 {
                // Keep the running sum from drifting.
                self.rate = self
                    .peak
                    .iter()
                    .zip(&self.on)
                    .filter(|(_, &o)| o)
                    .map(|(p, _)| p)
                    .sum();
            }
        }
    }
}

impl Generator {
    /// The generator of a queue whose flows have average rates `flows` (packets/s), with
    /// timing `shape`; the stream is a function of `seed` and `queue` only.
    pub fn new(shape: &Shape, flows: &[f64], seed: u64, queue: usize) -> Self {
        let mut rng = SmallRng::seed_from_u64(mix(seed ^ mix(0x5eed_0000 + queue as u64)));
        let u: f64 = rng.random();
        let flows: Vec<f64> = flows.iter().copied().filter(|r| *r > 0.0).collect();
        let rate_pps: f64 = flows.iter().sum();
        let (kind, next) = match *shape {
            Shape::OnOff {
                burst,
                peak_pps,
                idle_ns,
            } => {
                let gap = 1e9 / peak_pps;
                let cycle = burst as f64 * gap + idle_ns;
                // Start somewhere in a cycle: inside a burst or in the silence after it.
                let phase = u * cycle;
                let into_burst = (phase / gap).floor() as u64;
                let (left, next) = if into_burst < burst {
                    (burst - into_burst, (into_burst as f64 + 1.0) * gap - phase)
                } else {
                    (burst, cycle - phase)
                };
                let kind = Kind::OnOff {
                    gap,
                    burst,
                    idle: idle_ns,
                    left,
                };
                (kind, next)
            }
            _ if rate_pps.is_nan() || rate_pps <= 0.0 => (Kind::Silent, f64::INFINITY),
            Shape::Constant => {
                let gap = 1e9 / rate_pps;
                (Kind::Constant { gap }, u * gap)
            }
            Shape::Poisson => {
                let mean_gap = 1e9 / rate_pps;
                (Kind::Poisson { mean_gap }, exp(&mut rng, mean_gap))
            }
            Shape::Modulated { duty, on_ns } => {
                let mut m = Modulated::new(&flows, duty, on_ns, &mut rng);
                let next = m.next_after(0.0, &mut rng);
                (Kind::Modulated(Box::new(m)), next)
            }
        };
        Self { rng, kind, next }
    }

    /// Time of the next arrival (ns), without consuming it; infinite for a silent queue.
    pub fn peek(&self) -> f64 {
        self.next
    }

    /// Consumes the next arrival and returns its time.
    pub fn advance(&mut self) -> f64 {
        let t = self.next;
        self.next = match &mut self.kind {
            Kind::Silent => f64::INFINITY,
            Kind::Constant { gap } => t + *gap,
            Kind::Poisson { mean_gap } => t + exp(&mut self.rng, *mean_gap),
            Kind::OnOff {
                gap,
                burst,
                idle,
                left,
            } => {
                *left -= 1;
                if *left == 0 {
                    *left = *burst;
                    t + *gap + *idle
                } else {
                    t + *gap
                }
            }
            Kind::Modulated(m) => m.next_after(t, &mut self.rng),
        };
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count_until(g: &mut Generator, end_ns: f64) -> u64 {
        let mut n = 0;
        while g.peek() < end_ns {
            g.advance();
            n += 1;
        }
        n
    }

    #[test]
    fn rates_come_out_as_configured() {
        for shape in [Shape::Constant, Shape::Poisson] {
            let mut g = Generator::new(&shape, &[100_000.0], 7, 0);
            let n = count_until(&mut g, 1e9);
            assert!((n as f64 - 1e5).abs() < 1500.0, "{shape:?}: {n}");
        }
        let onoff = Shape::OnOff {
            burst: 1000,
            peak_pps: 1e6,
            idle_ns: 9e6,
        };
        let mut g = Generator::new(&onoff, &[], 7, 3);
        // 1000 packets every 10 ms: 100 bursts in a second, give or take the phase.
        let n = count_until(&mut g, 1e9);
        assert!((99_000..=101_000).contains(&n), "{n}");
        let a = Arrivals {
            rate_pps: 0.0,
            split: Split::Even,
            shape: onoff,
        };
        assert!((queue_rates(&a, 2, 1)[1] - 1e5).abs() < 1e-6);
    }

    #[test]
    fn zipf_rates_sum_to_the_total_and_follow_the_seed() {
        let a = Arrivals {
            rate_pps: 2e6,
            split: Split::Zipf {
                flows: 1000,
                exponent: 1.1,
            },
            shape: Shape::Poisson,
        };
        let r = queue_rates(&a, 8, 1);
        assert!((r.iter().sum::<f64>() - 2e6).abs() < 1e-3);
        let max = r.iter().copied().fold(0.0, f64::max);
        assert!(max > 2e6 / 8.0 * 1.5, "one queue is hot: {r:?}");
        assert_eq!(r, queue_rates(&a, 8, 1));
        assert_ne!(r, queue_rates(&a, 8, 2));
    }

    #[test]
    fn streams_are_reproducible_per_seed_and_queue() {
        let take = |seed, q| {
            let mut g = Generator::new(&Shape::Poisson, &[1e6], seed, q);
            (0..50).map(|_| g.advance()).collect::<Vec<_>>()
        };
        assert_eq!(take(1, 0), take(1, 0));
        assert_ne!(take(1, 0), take(1, 1));
        assert_ne!(take(1, 0), take(2, 0));
    }

    #[test]
    fn bursty_flows_keep_their_average_but_swing() {
        // Counts per 5 ms window: Poisson has variance = mean; ON/OFF flows far more.
        let windows = |shape: &Shape| {
            let flows = [40_000.0, 30_000.0, 20_000.0, 10_000.0];
            let mut g = Generator::new(shape, &flows, 11, 0);
            let mut counts = vec![0u64; 400];
            while g.peek() < 2e9 {
                counts[(g.advance() / 5e6) as usize] += 1;
            }
            let mean = counts.iter().sum::<u64>() as f64 / counts.len() as f64;
            let var = counts
                .iter()
                .map(|&c| (c as f64 - mean).powi(2))
                .sum::<f64>()
                / counts.len() as f64;
            (mean, var)
        };
        let (m, v) = windows(&Shape::Poisson);
        assert!((m - 500.0).abs() < 10.0 && v < 2.0 * m, "poisson {m} {v}");
        let bursty = Shape::Modulated {
            duty: 0.25,
            on_ns: 20e6,
        };
        let (m, v) = windows(&bursty);
        assert!((m - 500.0).abs() < 75.0, "bursty mean {m}");
        assert!(v > 20.0 * m, "bursty variance {v} vs mean {m}");
        let (m1, v1) = windows(&Shape::Modulated {
            duty: 1.0,
            on_ns: 20e6,
        });
        assert!(
            (m1 - 500.0).abs() < 10.0 && v1 < 2.0 * m1,
            "duty 1 is Poisson"
        );
    }
}
