//! One-way latency of stamped generator frames: each frame's capture time minus its send
//! time, summarised as percentiles.
//!
//! Every latency is kept (8 bytes a frame, against the whole frame `poolcap check` already
//! holds in memory), so the percentiles are exact rather than bucketed: a p99.9 over a short
//! run must not be a histogram bucket's edge.

use serde::Serialize;

/// Latencies collected so far.
#[derive(Debug, Default, Clone)]
pub(super) struct Latencies {
    ns: Vec<i64>,
}

/// Percentiles of one generator's latencies, in nanoseconds (nearest rank: the smallest
/// latency at least that share of the frames did not exceed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LatencyReport {
    /// Frames that carried a send time.
    pub frames: u64,
    /// Smallest latency.
    pub min_ns: i64,
    /// Median.
    pub p50_ns: i64,
    /// 99th percentile.
    pub p99_ns: i64,
    /// 99.9th percentile.
    pub p999_ns: i64,
    /// Largest latency.
    pub max_ns: i64,
}

impl Latencies {
    /// Adds one frame's latency.
    pub(super) fn push(&mut self, ns: i64) {
        self.ns.push(ns);
    }

    /// The percentiles, or `None` if no frame carried a send time.
    pub(super) fn report(&self) -> Option<LatencyReport> {
        let mut v = self.ns.clone();
        v.sort_unstable();
        let n = v.len();
        // Nearest rank: the ceil(p * n)-th smallest value, p in per mille.
        let rank = |per_mille: usize| v[(per_mille * n).div_ceil(1000).max(1) - 1];
        Some(LatencyReport {
            frames: n as u64,
            min_ns: *v.first()?,
            p50_ns: rank(500),
            p99_ns: rank(990),
            p999_ns: rank(999),
            max_ns: *v.last()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(values: impl IntoIterator<Item = i64>) -> Option<LatencyReport> {
        let mut l = Latencies::default();
        for v in values {
            l.push(v);
        }
        l.report()
    }

    #[test]
    fn no_latencies_give_no_report() {
        assert_eq!(of([]), None);
    }

    #[test]
    fn percentiles_follow_the_nearest_rank_in_any_arrival_order() {
        // 1..=2000 shuffled (a fixed permutation: 7 is prime to 2000).
        let r = of((0..2000).map(|i| (i * 7 % 2000) + 1)).unwrap();
        assert_eq!(r.frames, 2000);
        assert_eq!((r.min_ns, r.p50_ns, r.p99_ns), (1, 1000, 1980));
        assert_eq!((r.p999_ns, r.max_ns), (1998, 2000));
    }

    #[test]
    fn a_single_outlier_shows_only_in_the_tail() {
        let r = of((0..999).map(|_| 50).chain([9_000_000])).unwrap();
        assert_eq!((r.p50_ns, r.p99_ns, r.p999_ns), (50, 50, 50));
        assert_eq!(r.max_ns, 9_000_000);
        let one = of([42]).unwrap();
        assert_eq!(
            (one.min_ns, one.p50_ns, one.p999_ns, one.max_ns),
            (42, 42, 42, 42)
        );
    }
}
