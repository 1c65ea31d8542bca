//! Closed-form loss of a single finite queue, to check the simulator against theory.
//!
//! Why: a simulator that agrees with an exact result in the one case where one exists can
//! be trusted further in the cases where none does. One receive queue with one-packet
//! chunks (M = 1), Poisson arrivals, a fixed per-packet cost and R chunks is an M/D/1/K
//! queue with K = R (a packet holds its chunk from capture until its worker is done).
//!
//! Method: the standard embedded Markov chain of M/G/1/K at departure epochs. With
//! a_k = P(k arrivals during one service) and states 0..K-1 (customers left behind), the
//! departure distribution pi solves pi = pi P, sum pi = 1, and the time-average (and, by
//! PASTA, arrival-seen) probability that the system is full is P_K = 1 - 1 / (pi_0 + rho),
//! rho = lambda * E\[S\]. That is the blocking probability.

/// P(k Poisson arrivals in one deterministic service), offered load `rho`: e^-rho rho^k / k!.
pub fn deterministic_arrivals(rho: f64) -> impl Fn(usize) -> f64 {
    move |k| {
        // In log space, so that large k neither overflow nor lose precision.
        let ln_fact: f64 = (1..=k).map(|i| (i as f64).ln()).sum();
        (-rho + k as f64 * rho.ln() - ln_fact).exp()
    }
}

/// P(k Poisson arrivals in one exponential service): geometric, for M/M/1/K.
pub fn exponential_arrivals(rho: f64) -> impl Fn(usize) -> f64 {
    move |k| (1.0 / (1.0 + rho)) * (rho / (1.0 + rho)).powi(k as i32)
}

/// Blocking probability of M/G/1/K with offered load `rho` and capacity `k` (in service
/// included), where `a(j)` is the probability of j arrivals during one service.
pub fn mg1k_blocking(rho: f64, k: usize, a: impl Fn(usize) -> f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if rho <= 0.0 {
        return 0.0;
    }
    let a: Vec<f64> = (0..k).map(a).collect();
    // Transition matrix of the embedded chain, states 0..k-1.
    let mut p = vec![vec![0.0; k]; k];
    for (i, row) in p.iter_mut().enumerate() {
        // From i (>= 1) the next departure leaves i - 1 + arrivals; from 0 the next
        // customer arrives to an empty system, so it leaves just the arrivals.
        let base = i.saturating_sub(1);
        let mut sum = 0.0;
        for j in base..k - 1 {
            row[j] = a[j - base];
            sum += row[j];
        }
        row[k - 1] = (1.0 - sum).max(0.0);
    }
    // Solve pi (P - I) = 0 with the last equation replaced by sum pi = 1:
    // rows of the system are the columns of P - I.
    let mut m = vec![vec![0.0; k + 1]; k];
    for (j, row) in m.iter_mut().enumerate().take(k - 1) {
        for i in 0..k {
            row[i] = p[i][j] - if i == j { 1.0 } else { 0.0 };
        }
    }
    m[k - 1] = vec![1.0; k + 1];
    let pi = solve(m);
    1.0 - 1.0 / (pi[0] + rho)
}

/// M/D/1/K blocking probability: Poisson arrivals, fixed service time, capacity `k`.
pub fn md1k_blocking(rho: f64, k: usize) -> f64 {
    mg1k_blocking(rho, k, deterministic_arrivals(rho))
}

/// Gaussian elimination with partial pivoting on an augmented n x (n+1) matrix.
fn solve(mut m: Vec<Vec<f64>>) -> Vec<f64> {
    let n = m.len();
    for col in 0..n {
        let piv = (col..n)
            .max_by(|&x, &y| m[x][col].abs().total_cmp(&m[y][col].abs()))
            .unwrap_or(col);
        m.swap(col, piv);
        let d = m[col][col];
        if d == 0.0 {
            continue;
        }
        let pivot = m[col].clone();
        for (r, row) in m.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / d;
                if f != 0.0 {
                    for (x, p) in row.iter_mut().zip(&pivot).skip(col) {
                        *x -= f * p;
                    }
                }
            }
        }
    }
    (0..n)
        .map(|i| {
            if m[i][i] == 0.0 {
                0.0
            } else {
                m[i][n] / m[i][i]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// M/M/1/K in closed form: (1 - rho) rho^K / (1 - rho^(K+1)).
    fn mm1k(rho: f64, k: usize) -> f64 {
        if (rho - 1.0).abs() < 1e-12 {
            return 1.0 / (k as f64 + 1.0);
        }
        (1.0 - rho) * rho.powi(k as i32) / (1.0 - rho.powi(k as i32 + 1))
    }

    #[test]
    fn the_chain_reproduces_mm1k_with_exponential_service() {
        for &(rho, k) in &[(0.5, 1), (0.8, 5), (0.95, 20), (1.0, 10), (1.5, 8)] {
            let got = mg1k_blocking(rho, k, exponential_arrivals(rho));
            let want = mm1k(rho, k);
            assert!(
                (got - want).abs() < 1e-9,
                "rho {rho} K {k}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn md1k_known_values() {
        // K = 1 is Erlang's loss formula for one server: rho / (1 + rho).
        assert!((md1k_blocking(0.9, 1) - 0.9 / 1.9).abs() < 1e-12);
        // Deterministic service loses less than exponential at the same load and room...
        for k in [2, 5, 10] {
            assert!(md1k_blocking(0.9, k) < mm1k(0.9, k));
        }
        // ...more room loses less, and overload loses at least the excess 1 - 1/rho.
        assert!(md1k_blocking(0.9, 10) < md1k_blocking(0.9, 5));
        assert!(md1k_blocking(1.25, 50) >= 0.2 - 1e-9);
        assert!((md1k_blocking(1.25, 200) - 0.2).abs() < 1e-6);
    }
}
