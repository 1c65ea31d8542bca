//! The human units of the command line: packet rates (`300k`, `1M` pps), bit rates
//! (`1Gbit`, `500Mbit`), counts (`10k`), durations (`10s`, `250ms`) and byte sizes (`64M`).
//!
//! Decimal suffixes (k = 1e3, M = 1e6, G = 1e9) for rates and counts, as traffic tools do;
//! binary suffixes (K/M/G = 1024^n) for memory sizes, as `tcpdump -B` users expect.

use std::time::Duration;

/// A target sending rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    /// Frames per second.
    Pps(f64),
    /// Bits per second on the wire (frame bytes, excluding preamble and FCS).
    Bps(f64),
}

impl Rate {
    /// Frames per second for frames of `mean_frame_len` bytes.
    pub fn pps(&self, mean_frame_len: f64) -> f64 {
        match *self {
            Rate::Pps(p) => p,
            Rate::Bps(b) => b / (8.0 * mean_frame_len.max(1.0)),
        }
    }
}

fn split_number(s: &str) -> Result<(f64, &str), String> {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, rest) = s.split_at(end);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` does not start with a number"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("`{s}` is not a valid amount"));
    }
    Ok((v, rest))
}

fn decimal_multiplier(suffix: &str) -> Option<f64> {
    match suffix {
        "" => Some(1.0),
        "k" | "K" => Some(1e3),
        "m" | "M" => Some(1e6),
        "g" | "G" => Some(1e9),
        _ => None,
    }
}

/// Parses `300k`, `1M`, `250000`, `300kpps` (pps) or `1Gbit`, `100Mbit/s`, `1.5Gbps` (bit/s).
pub fn parse_rate(s: &str) -> Result<Rate, String> {
    let (v, rest) = split_number(s.trim())?;
    let lower = rest.to_ascii_lowercase();
    let (prefix, bits) = if let Some(p) = lower
        .strip_suffix("bit/s")
        .or_else(|| lower.strip_suffix("bit"))
        .or_else(|| lower.strip_suffix("bps"))
    {
        (p, true)
    } else {
        (lower.strip_suffix("pps").unwrap_or(&lower), false)
    };
    let m = decimal_multiplier(prefix)
        .ok_or_else(|| format!("unknown rate unit in `{s}` (use e.g. 300k, 1M, 1Gbit)"))?;
    let r = v * m;
    if r <= 0.0 {
        return Err(format!("rate `{s}` must be above zero"));
    }
    Ok(if bits { Rate::Bps(r) } else { Rate::Pps(r) })
}

/// Parses `M,R`, both at least 1.
pub fn parse_pool(s: &str) -> Result<(usize, usize), String> {
    let (m, r) = s
        .split_once(',')
        .ok_or_else(|| format!("`{s}`: give the pool as M,R (cells per chunk, chunks)"))?;
    let m: usize = m
        .trim()
        .parse()
        .map_err(|_| format!("`{m}` is not a number of cells"))?;
    let r: usize = r
        .trim()
        .parse()
        .map_err(|_| format!("`{r}` is not a number of chunks"))?;
    if m == 0 || r == 0 {
        return Err("M (cells per chunk) and R (chunks) must both be at least 1".into());
    }
    Ok((m, r))
}

/// Parses a count such as `1000`, `10k`, `2M`.
pub fn parse_count(s: &str) -> Result<u64, String> {
    let (v, rest) = split_number(s.trim())?;
    let m = decimal_multiplier(rest).ok_or_else(|| format!("unknown count suffix in `{s}`"))?;
    let n = v * m;
    if n.fract() != 0.0 || n > u64::MAX as f64 {
        return Err(format!("`{s}` is not a whole count"));
    }
    Ok(n as u64)
}

/// Parses a duration: `10s`, `250ms`, `2m`, `1.5s`, `100us`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (v, rest) = split_number(s.trim())?;
    let secs = match rest {
        "" | "s" => v,
        "ms" => v / 1e3,
        "us" => v / 1e6,
        "ns" => v / 1e9,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("unknown duration unit in `{s}` (use s, ms, us, m)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{s}` is too long a duration"))
}

/// Parses a memory size: `4096`, `64K`, `256M`, `1G` (powers of 1024), `MiB`/`MB` accepted.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let (v, rest) = split_number(s.trim())?;
    let m = match rest.trim_end_matches("iB").trim_end_matches('B') {
        "" => 1.0,
        "k" | "K" => 1024.0,
        "m" | "M" => 1024.0 * 1024.0,
        "g" | "G" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("unknown size unit in `{s}` (use K, M, G)")),
    };
    Ok((v * m) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_in_packets_and_bits() {
        assert_eq!(parse_rate("300k"), Ok(Rate::Pps(300e3)));
        assert_eq!(parse_rate("1M"), Ok(Rate::Pps(1e6)));
        assert_eq!(parse_rate("250000"), Ok(Rate::Pps(250e3)));
        assert_eq!(parse_rate("10kpps"), Ok(Rate::Pps(10e3)));
        assert_eq!(parse_rate("1Gbit"), Ok(Rate::Bps(1e9)));
        assert_eq!(parse_rate("100Mbit/s"), Ok(Rate::Bps(100e6)));
        assert_eq!(parse_rate("1.5Gbps"), Ok(Rate::Bps(1.5e9)));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("3x").is_err());
    }

    #[test]
    fn durations_beyond_duration_max_are_errors_not_panics() {
        // Found by the cli_options fuzz target (crash-002db75f…): 8.9e24 seconds.
        assert_eq!(
            parse_duration("88888888888888888888888884"),
            Err("`88888888888888888888888884` is too long a duration".into())
        );
        assert!(parse_duration("99999999999999999999h").is_err());
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
    }

    #[test]
    fn bit_rate_turns_into_frames_per_second() {
        let r = Rate::Bps(1e9);
        assert!((r.pps(1000.0) - 125_000.0).abs() < 1e-6);
    }

    #[test]
    fn counts_durations_and_sizes() {
        assert_eq!(parse_count("10k"), Ok(10_000));
        assert_eq!(parse_count("2M"), Ok(2_000_000));
        assert!(parse_count("1.5").is_err());
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("2 weeks").is_err());
        assert_eq!(parse_bytes("64M"), Ok(64 << 20));
        assert_eq!(parse_bytes("4KiB"), Ok(4096));
        assert!(parse_bytes("4X").is_err());
    }
}
