//! How the generator spreads frames over flows and sizes.
//!
//! A distribution (uniform, one elephant flow carrying a share S, or Zipf with exponent A)
//! becomes a [`Schedule`]: a table of 65,536 entries holding each choice in proportion to its
//! weight (largest-remainder rounding), shuffled once with a seeded RNG and then walked
//! cyclically. Every 65,536 frames the shares are exact; inside a window they look random;
//! and a draw costs one array read, so the generator's fast path stays flat.

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

/// Entries of a schedule table.
pub const TABLE_LEN: usize = 1 << 16;

/// How traffic is shared among `K` flows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Skew {
    /// Every flow carries the same share.
    Uniform,
    /// Flow 0 carries this share (0..=1); the others split the rest evenly.
    Elephant(f64),
    /// Flow i carries a share proportional to 1 / (i+1)^A.
    Zipf(f64),
}

/// Weights of `k` flows (k >= 1) under `skew`, summing to 1.
pub fn flow_weights(k: usize, skew: Skew) -> Vec<f64> {
    let k = k.max(1);
    let mut w: Vec<f64> = match skew {
        Skew::Uniform => vec![1.0; k],
        Skew::Elephant(s) if k == 1 => {
            let _ = s;
            vec![1.0]
        }
        Skew::Elephant(s) => {
            let s = s.clamp(0.0, 1.0);
            let rest = (1.0 - s) / (k - 1) as f64;
            (0..k).map(|i| if i == 0 { s } else { rest }).collect()
        }
        Skew::Zipf(a) => (0..k).map(|i| 1.0 / ((i + 1) as f64).powf(a)).collect(),
    };
    let total: f64 = w.iter().sum();
    for x in &mut w {
        *x /= total;
    }
    w
}

/// A shuffled table of choices walked cyclically (see the module docs).
#[derive(Debug, Clone)]
pub struct Schedule {
    table: Vec<u32>,
    pos: usize,
}

impl Schedule {
    /// Builds a schedule over `weights.len()` choices (at most [`TABLE_LEN`]).
    pub fn new(weights: &[f64], seed: u64) -> Self {
        let n = weights.len().clamp(1, TABLE_LEN);
        let total: f64 = weights.iter().take(n).sum::<f64>().max(f64::MIN_POSITIVE);
        let exact: Vec<f64> = weights
            .iter()
            .take(n)
            .map(|w| w / total * TABLE_LEN as f64)
            .collect();
        let mut counts: Vec<usize> = exact.iter().map(|e| e.floor() as usize).collect();
        let mut left = TABLE_LEN - counts.iter().sum::<usize>();
        let mut by_remainder: Vec<usize> = (0..n).collect();
        by_remainder.sort_by(|&a, &b| {
            (exact[b] - exact[b].floor())
                .total_cmp(&(exact[a] - exact[a].floor()))
                .then(a.cmp(&b))
        });
        for &i in by_remainder.iter().cycle() {
            if left == 0 {
                break;
            }
            counts[i] += 1;
            left -= 1;
        }
        let mut table = Vec::with_capacity(TABLE_LEN);
        for (i, &c) in counts.iter().enumerate() {
            table.extend(std::iter::repeat_n(i as u32, c));
        }
        table.shuffle(&mut SmallRng::seed_from_u64(seed));
        Self { table, pos: 0 }
    }

    /// The next choice.
    #[inline]
    pub fn next_index(&mut self) -> usize {
        let v = self.table[self.pos];
        self.pos = (self.pos + 1) % self.table.len();
        v as usize
    }
}

/// The simple IMIX: 7 frames of 60 bytes, 4 of 590, 1 of 1514 (64/594/1518 with FCS).
pub const IMIX: [(usize, f64); 3] = [(60, 7.0), (590, 4.0), (1514, 1.0)];

#[cfg(test)]
mod tests {
    use super::*;

    fn shares(s: &mut Schedule, k: usize, draws: usize) -> Vec<f64> {
        let mut c = vec![0usize; k];
        for _ in 0..draws {
            c[s.next_index()] += 1;
        }
        c.iter().map(|&x| x as f64 / draws as f64).collect()
    }

    #[test]
    fn elephant_flow_carries_its_share() {
        let w = flow_weights(16, Skew::Elephant(0.8));
        assert!((w[0] - 0.8).abs() < 1e-12);
        assert!((w[15] - 0.2 / 15.0).abs() < 1e-12);
        let mut s = Schedule::new(&w, 42);
        let got = shares(&mut s, 16, 300_000);
        assert!((got[0] - 0.8).abs() < 0.005, "{got:?}");
        for g in &got[1..] {
            assert!((g - 0.2 / 15.0).abs() < 0.003, "{got:?}");
        }
    }

    #[test]
    fn a_full_table_cycle_is_exact() {
        let w = flow_weights(3, Skew::Uniform);
        let mut s = Schedule::new(&w, 1);
        let mut c = [0usize; 3];
        for _ in 0..TABLE_LEN {
            c[s.next_index()] += 1;
        }
        // 65536 = 21845 * 3 + 1: shares differ by at most one entry.
        assert_eq!(c.iter().sum::<usize>(), TABLE_LEN);
        assert!(
            c.iter().max().unwrap() - c.iter().min().unwrap() <= 1,
            "{c:?}"
        );
    }

    #[test]
    fn zipf_weights_fall_as_a_power_law() {
        let w = flow_weights(4, Skew::Zipf(1.0));
        let h = 1.0 + 0.5 + 1.0 / 3.0 + 0.25;
        assert!((w[0] - 1.0 / h).abs() < 1e-12);
        assert!((w[3] - 0.25 / h).abs() < 1e-12);
        let mut s = Schedule::new(&w, 9);
        let got = shares(&mut s, 4, 200_000);
        for (g, e) in got.iter().zip(&w) {
            assert!((g - e).abs() < 0.005, "{got:?} vs {w:?}");
        }
    }

    #[test]
    fn seeds_make_schedules_reproducible_and_distinct() {
        let w = flow_weights(8, Skew::Uniform);
        let a: Vec<usize> = {
            let mut s = Schedule::new(&w, 5);
            (0..64).map(|_| s.next_index()).collect()
        };
        let b: Vec<usize> = {
            let mut s = Schedule::new(&w, 5);
            (0..64).map(|_| s.next_index()).collect()
        };
        let c: Vec<usize> = {
            let mut s = Schedule::new(&w, 6);
            (0..64).map(|_| s.next_index()).collect()
        };
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn imix_mean_frame_is_about_358_bytes() {
        let total: f64 = IMIX.iter().map(|(_, w)| w).sum();
        let mean: f64 = IMIX.iter().map(|(s, w)| *s as f64 * w).sum::<f64>() / total;
        assert!((mean - 4294.0 / 12.0).abs() < 1e-9, "{mean}");
    }
}
