//! Summaries over repeated runs and the timing analysis of a capture file.
//!
//! Every point runs at least three times and is reported as min / median / max: the median is
//! robust to one disturbed run on a shared machine, and the range shows how much to trust it.

use serde::{Deserialize, Serialize};

/// Min, median and max of a metric over the runs of one point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Smallest value.
    pub min: f64,
    /// Median (mean of the two middle values for an even count).
    pub median: f64,
    /// Largest value.
    pub max: f64,
    /// Runs that had a value.
    pub n: usize,
}

impl Spread {
    /// The spread of `values`, ignoring NaN; `None` when nothing is left.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            min: v[0],
            median,
            max: v[n - 1],
            n,
        })
    }
}

/// The median of `values` (mean of the two middle ones for an even count), ignoring NaN;
/// `None` when nothing is left.
pub fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    Spread::of(values).map(|s| s.median)
}

/// How evenly frames arrived, from capture timestamps in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spacing {
    /// Frames per second between the first and last frame.
    pub wire_pps: f64,
    /// Longest run of frames that arrived back to back (each gap below a quarter period).
    pub max_back_to_back: u64,
    /// Median gap between frames, nanoseconds.
    pub median_gap_ns: f64,
    /// 5th percentile of the gaps, nanoseconds: how close frames of one batch arrive.
    pub p5_gap_ns: f64,
}

/// Timing of frames stamped `ts_ns` (in arrival order) sent with period `period_ns`.
pub fn spacing(ts_ns: &[u64], period_ns: f64) -> Option<Spacing> {
    let (first, last) = (*ts_ns.first()?, *ts_ns.last()?);
    if ts_ns.len() < 2 || last <= first {
        return None;
    }
    let mut gaps: Vec<f64> = ts_ns
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]) as f64)
        .collect();
    let (mut run, mut best) = (1u64, 1u64);
    for &g in &gaps {
        run = if g < period_ns / 4.0 { run + 1 } else { 1 };
        best = best.max(run);
    }
    gaps.sort_by(f64::total_cmp);
    Some(Spacing {
        wire_pps: (ts_ns.len() - 1) as f64 * 1e9 / (last - first) as f64,
        max_back_to_back: best,
        median_gap_ns: gaps[gaps.len() / 2],
        p5_gap_ns: gaps[gaps.len() / 20],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_takes_min_median_max() {
        let s = Spread::of([3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.min, s.median, s.max, s.n), (1.0, 2.0, 3.0, 3));
        assert_eq!(
            Spread::of([4.0, 1.0, f64::NAN, 2.0, 3.0]).unwrap().median,
            2.5
        );
        assert!(Spread::of([f64::NAN]).is_none());
    }

    #[test]
    fn finds_the_longest_back_to_back_run() {
        // Period 10 us; batches of 4 frames 100 ns apart, one batch every 40 us.
        let mut ts = Vec::new();
        for b in 0..5u64 {
            ts.extend((0..4).map(|i| b * 40_000 + i * 100));
        }
        ts.extend([200_000, 200_100, 200_200, 200_300, 200_400, 200_500]);
        let s = spacing(&ts, 10_000.0).unwrap();
        assert_eq!(s.max_back_to_back, 6);
        assert!(spacing(&[5], 10.0).is_none());
        let even: Vec<u64> = (0..1001).map(|i| i * 10_000).collect();
        let s = spacing(&even, 10_000.0).unwrap();
        assert_eq!(s.max_back_to_back, 1);
        assert!((s.wire_pps - 100_000.0).abs() < 1e-6);
        assert_eq!((s.median_gap_ns, s.p5_gap_ns), (10_000.0, 10_000.0));
    }
}
