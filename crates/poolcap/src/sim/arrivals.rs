//! Packet arrival times per receive queue, in virtual nanoseconds.
//!
//! Why per-queue generators with their own random streams: a queue's arrivals then depend
//! only on (seed, queue), not on the order in which the engine interleaves events, so a run
//! is reproducible and changing the policy never changes the traffic it is compared on.
//! Zipf-skewed traffic is modelled at flow level (F flows, Zipf shares, each flow hashed to
//! a queue) and each queue then sees a Poisson stream at the sum of its flows' rates: the
//! superposition of many independent flows.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::model::{Arrivals, Shape, Split};
use crate::flows::{flow_weights, Skew};

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

/// Average rate of each queue, packets/s.
pub fn queue_rates(a: &Arrivals, queues: usize, seed: u64) -> Vec<f64> {
    let n = queues.max(1);
    if let Shape::OnOff {
        burst,
        peak_pps,
        idle_ns,
    } = a.shape
    {
        let cycle_s = burst as f64 / peak_pps + idle_ns * 1e-9;
        return vec![burst as f64 / cycle_s; n];
    }
    match &a.split {
        Split::Even => vec![a.rate_pps / n as f64; n],
        Split::PerQueue(r) => r.clone(),
        Split::Zipf { flows, exponent } => {
            let mut rates = vec![0.0; n];
            for (i, w) in flow_weights(*flows, Skew::Zipf(*exponent))
                .into_iter()
                .enumerate()
            {
                rates[queue_of_flow(seed, i, n)] += w * a.rate_pps;
            }
            rates
        }
    }
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
}

impl Generator {
    /// The generator of a queue with average rate `rate_pps` and timing `shape`; the stream
    /// is a function of `seed` and `queue` only.
    pub fn new(shape: &Shape, rate_pps: f64, seed: u64, queue: usize) -> Self {
        let mut rng = SmallRng::seed_from_u64(mix(seed ^ mix(0x5eed_0000 + queue as u64)));
        let u: f64 = rng.random();
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
                if into_burst < burst {
                    let kind = Kind::OnOff {
                        gap,
                        burst,
                        idle: idle_ns,
                        left: burst - into_burst,
                    };
                    (kind, (into_burst as f64 + 1.0) * gap - phase)
                } else {
                    let kind = Kind::OnOff {
                        gap,
                        burst,
                        idle: idle_ns,
                        left: burst,
                    };
                    (kind, cycle - phase)
                }
            }
            _ if !(rate_pps > 0.0) => (Kind::Silent, f64::INFINITY),
            Shape::Constant => {
                let gap = 1e9 / rate_pps;
                (Kind::Constant { gap }, u * gap)
            }
            Shape::Poisson => {
                let mean_gap = 1e9 / rate_pps;
                (Kind::Poisson { mean_gap }, -(1.0 - u).ln() * mean_gap)
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
            Kind::Poisson { mean_gap } => {
                let u: f64 = self.rng.random();
                t - (1.0 - u).ln() * *mean_gap
            }
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
            let mut g = Generator::new(&shape, 100_000.0, 7, 0);
            let n = count_until(&mut g, 1e9);
            assert!((n as f64 - 1e5).abs() < 1500.0, "{shape:?}: {n}");
        }
        let onoff = Shape::OnOff {
            burst: 1000,
            peak_pps: 1e6,
            idle_ns: 9e6,
        };
        let mut g = Generator::new(&onoff, 0.0, 7, 3);
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
            let mut g = Generator::new(&Shape::Poisson, 1e6, seed, q);
            (0..50).map(|_| g.advance()).collect::<Vec<_>>()
        };
        assert_eq!(take(1, 0), take(1, 0));
        assert_ne!(take(1, 0), take(1, 1));
        assert_ne!(take(1, 0), take(2, 0));
    }
}
