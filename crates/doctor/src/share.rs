//! The CPU a capture tool actually gets on a shared machine, and what waiting for it costs.
//!
//! The stage costs of a [`crate::profile::Profile`] are CPU time; they say how fast a tool
//! is on a core of its own. On a machine where the tool shares its core (with the kernel's
//! receive work, the generator, other programs), two things decide loss instead:
//!
//! 1. **Capacity share**: a tool with a backlog never sleeps; it runs a timeslice, then waits
//!    for the CPU as long as a wake-up waits, `w` (the mean wait per timeslice of
//!    `/proc/PID/task/*/schedstat` in its calibration runs). It gets `L / (L + w)` of the core,
//!    `L` the scheduler's timeslice ([`SLICE_S`]), so its capacity is that share times
//!    `1e9 / cost` frames/s.
//! 2. **Waits**: below that capacity the tool sleeps and waits for the CPU each time it
//!    wakes. Its calibration runs measured `s = run / (run + wait)`: it waits `(1 - s) / s`
//!    for each unit it runs, so needing `u` of a core (rate x CPU cost per packet) it spends
//!    `q = u (1 - s) / s` of the wall time runnable but not running. A wait longer than the
//!    time the buffers hold at the arrival rate (`depth = frames held / rate`) loses what
//!    arrives beyond it. With wait lengths exponential of mean `tail`, the lost fraction of
//!    the time, and so of the frames, is `E[(W - depth)+] / E[W] x q = q e^(-depth / tail)`.
//!
//! poolcap's analysis worker is the exception to 1.: it runs at nice 10, so beside the capture
//! thread, the receive softirq and nice-0 neighbours its slices are short and its waits
//! long, and neither a 1-iteration x-loop run (its worker rarely runnable) nor `L` says
//! what it gets. Calibration saturates it ([`SATURATED`]: an x-loop above a core's capacity
//! at the calibration rate), so it is runnable throughout, and the share it ran when
//! runnable *is* the share of the core a busy worker gets ([`Cpu::capacity_share`]).
//!
//! Calibration measures `s` per tool configuration in its own runs, and `tail` from those of
//! its runs that lost frames, by inverting the same formula (`tail = depth / ln(q / loss)`,
//! with the run's measured `q`); a calibration without loss leaves the mean wait per
//! timeslice as the tail. A profile without these numbers describes a core of the tool's own
//! (share 1, no waits).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The timeslice a CPU-bound thread runs before it waits again, seconds: the order of
/// CFS's and EEVDF's slice on a small machine (`sched_latency` 6 ms over two tasks, EEVDF's
/// base slice 0.75 ms x (1 + log2 CPUs) rounded up); the kernel does not show it without
/// debugfs, so it is a stated constant of the model, not a measurement.
pub const SLICE_S: f64 = 0.003;

/// The calibration configuration with a saturated analysis worker (poolcap with an x-loop
/// load above one core's capacity at the calibration rate).
pub const SATURATED: &str = "saturated";

/// One configuration's scheduling in its calibration runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sharing {
    /// Share of the time its threads ran while runnable, `run / (run + wait)`.
    pub share: f64,
    /// Mean wait for the CPU per timeslice, seconds.
    pub wait_s: f64,
}

impl Sharing {
    /// The share of the core a thread with a backlog gets: `L / (L + w)`.
    pub fn capacity_share(&self) -> f64 {
        SLICE_S / (SLICE_S + self.wait_s.max(0.0))
    }
}

/// What calibration measured of the CPU a capture gets on this machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cpu {
    /// By calibration configuration (`count`, `copy`, `write`, `tcpdump null`,
    /// `dumpcap file`...).
    pub sharing: BTreeMap<String, Sharing>,
    /// Mean length of the waits for the CPU that outlast a buffer, seconds.
    pub tail_s: f64,
    /// The longest wait for the CPU, seconds: the longest the calibration runs' losses
    /// allow (a run that lost `n` frames at `r` a second with buffers `depth` deep waited at
    /// most `depth + n / r` at once). No kernel setting bounds these waits as the softirq's
    /// budget bounds those behind the receive work ([`RpsWaits::longest_s`]), and an
    /// exponential fitted to waits of 2-3 ms gave 20-90 frames lost a run to buffers 30 ms
    /// deep, which lost none (poolcap analysing at 64 B; docs/predict.md). `None`: unbounded
    /// (no calibration run lost frames to a wait, or a profile calibrated without this bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_s: Option<f64>,
    /// The same, measured with the kernel's receive work on the tool's CPU (rps on): a
    /// tool then waits behind the receive softirq (and `ksoftirqd`), which its rps-off
    /// runs do not show. `None` in a profile calibrated without an rps-on point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rps: Option<RpsWaits>,
}

/// How a tool waits for its CPU when the receive work runs there too (see [`Cpu::rps`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpsWaits {
    /// The calibration run's share when runnable and wait per timeslice (poolcap counting):
    /// that of any configuration not in `by_key`.
    pub sharing: Sharing,
    /// The peers' configurations (`tcpdump null`, `dumpcap file`...) measured behind the
    /// receive work. A tool that wakes for every packet poolcap reads in a batch waits
    /// behind the softirq far more often: poolcap counting ran 59% of its runnable time
    /// there, tcpdump 93-95%, and a tcpdump taken to wait as poolcap did was predicted to
    /// lose 20% where it lost 0-0.5% (docs/predict.md).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_key: BTreeMap<String, Sharing>,
    /// A peer's mean wait per timeslice while it keeps up at top speed behind the receive
    /// work (a ring deep enough for it), seconds, by configuration: the waits that put a
    /// tool at the edge behind (`crate::predict::Edge`). Once behind it is runnable
    /// throughout and waits in short stretches between softirqs, so its waits behind would
    /// understate the chance of falling behind (docs/predict.md, "Which way a run at the edge
    /// goes"; BENCHMARKS.md, predict, the `rps deep` calibration point).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub keeping_up: BTreeMap<String, f64>,
    /// Mean length of the waits that outlast a buffer, seconds.
    pub tail_s: f64,
    /// The longest wait behind the receive work, seconds: the kernel's
    /// `net.core.netdev_budget_usecs` when calibrated, the time one run of the receive
    /// softirq may take before it leaves the rest to `ksoftirqd`, a thread the scheduler
    /// then interleaves with the tool. Measured here (budget 8 ms, its minimum at HZ 250):
    /// poolcap counting 1M frames of 64 B at 400k pps with rps on lost 0.01-0.19% with a
    /// ring 4 ms deep (7 runs), 0.04% in one run of six at 6 ms and nothing in seven at 8 ms
    /// and three at 12 ms, where the exponential tail fitted at 2-4 ms predicts about 45
    /// frames a run at 8 ms (docs/predict.md). Where the budget cannot be read, the longest
    /// the rps-on calibration runs' losses allow (as [`Cpu::longest_s`]).
    /// `None`: unbounded (neither known, or a profile calibrated without this bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_s: Option<f64>,
}

/// How long a tool's waits for the CPU last: exponential of mean `tail_s`, none longer than
/// `longest_s` (infinite: unbounded).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Waits {
    /// Mean of the exponential, seconds.
    pub tail_s: f64,
    /// The longest wait, seconds.
    pub longest_s: f64,
}

impl Cpu {
    /// The scheduling of configuration `key`; when `key` was not measured, the one with the
    /// median share among those that sleep when idle (not the [`SATURATED`] one).
    pub fn of(&self, key: &str) -> Sharing {
        if let Some(&s) = self.sharing.get(key) {
            return s;
        }
        let mut v: Vec<Sharing> = self
            .sharing
            .iter()
            .filter(|(k, _)| k.as_str() != SATURATED)
            .map(|(_, &s)| s)
            .collect();
        v.sort_by(|a, b| a.share.total_cmp(&b.share));
        v.get(v.len() / 2).copied().unwrap_or(Sharing {
            share: 1.0,
            wait_s: 0.0,
        })
    }

    /// How configuration `key` waits for the CPU, and how long its waits are: with the
    /// receive work on its CPU (`rps`), the rps-on calibration's when the profile has it.
    pub fn waits(&self, key: &str, rps: bool) -> (Sharing, Waits) {
        match self.rps.as_ref().filter(|_| rps) {
            Some(r) => (
                r.by_key.get(key).copied().unwrap_or(r.sharing),
                Waits {
                    tail_s: r.tail_s,
                    longest_s: r.longest_s.unwrap_or(f64::INFINITY),
                },
            ),
            None => (
                self.of(key),
                Waits {
                    tail_s: self.tail_s,
                    longest_s: self.longest_s.unwrap_or(f64::INFINITY),
                },
            ),
        }
    }

    /// The share of the core configuration `key` gets with a backlog: the [`SATURATED`]
    /// run's measured share (it was runnable throughout), else `L / (L + w)`.
    pub fn capacity_share(&self, key: &str) -> f64 {
        let s = self.of(key);
        if key == SATURATED && self.sharing.contains_key(key) {
            s.share
        } else {
            s.capacity_share()
        }
    }
}

/// The fraction of the wall time a tool that needs `demand` of a core spends runnable but
/// waiting, at `share`.
pub fn waiting(demand: f64, share: f64) -> f64 {
    if share.is_nan() || share <= 0.0 {
        return 1.0;
    }
    (demand.min(share) * (1.0 - share) / share).clamp(0.0, 1.0)
}

impl Waits {
    /// The fraction of frames lost to waits longer than `depth_s` (the time the buffers
    /// hold) when `waiting` of the time is spent waiting, and frames arrive in stretches of
    /// at most `arrivals_s` (a burst's length; infinite for a steady stream). A wait `W`
    /// loses what arrives beyond the buffers' depth before the arrivals stop, `(min(W,
    /// arrivals) - depth)+` of arrival time. Over exponential waits cut at `longest` that
    /// is `(e^(-depth / tail) - e^(-min(arrivals, longest) / tail)) / (1 - e^(-longest /
    /// tail))` of the time waited: unbounded, `e^(-depth / tail)`. A burst the buffers hold
    /// whole, or buffers deeper than the longest wait, lose nothing to waits.
    pub fn lost(&self, waiting: f64, depth_s: f64, arrivals_s: f64) -> f64 {
        let cut = arrivals_s.min(self.longest_s);
        if self.tail_s.is_nan() || self.tail_s <= 0.0 || cut <= depth_s {
            return 0.0;
        }
        let beyond = |t: f64| (-t.max(0.0) / self.tail_s).exp();
        let lost = (beyond(depth_s) - beyond(cut)) / (1.0 - beyond(self.longest_s));
        (waiting * lost).clamp(0.0, 1.0)
    }
}

/// The tail that explains a run's `loss` given the `waiting` fraction it measured, its
/// buffers' `depth_s` and the longest wait ([`Waits::lost`] of a steady stream inverted: a
/// calibration run's frames arrive for hundreds of times its buffers' depth); `None` when
/// the loss is 0, or more than waits up to `longest_s` can lose (then waits alone do not
/// explain it).
pub fn tail_of(waiting: f64, loss: f64, depth_s: f64, longest_s: f64) -> Option<f64> {
    if !(loss > 0.0 && waiting > loss && depth_s > 0.0 && longest_s > depth_s) {
        return None;
    }
    if longest_s.is_infinite() {
        return Some(depth_s / (waiting / loss).ln());
    }
    // The lost share grows with the tail, towards (longest - depth) / longest: bisect.
    let lost = |tail_s: f64| Waits { tail_s, longest_s }.lost(waiting, depth_s, f64::INFINITY);
    let (mut lo, mut hi) = (1e-9f64, 1e3f64);
    if lost(hi) < loss {
        return None;
    }
    for _ in 0..200 {
        let mid = (lo * hi).sqrt();
        if lost(mid) < loss {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn a_fair_scheduler_makes_a_tool_wait_in_proportion_to_its_work() {
        // Half a core when runnable: as long waiting as running.
        assert!(close(waiting(0.1, 0.5), 0.1));
        // A quarter: three times as long; demand above the share is capped at it.
        assert!(close(waiting(0.1, 0.25), 0.3));
        assert!(close(waiting(0.9, 0.25), 0.75));
        assert!(close(waiting(0.5, 1.0), 0.0));
        assert_eq!(waiting(0.1, 0.0), 1.0);
    }

    #[test]
    fn waits_lose_what_outlasts_the_buffer() {
        let steady = f64::INFINITY;
        let waits = |tail_s| Waits {
            tail_s,
            longest_s: steady,
        };
        // 20% waiting in 10 ms waits, a 10 ms buffer: 0.2 / e.
        assert!(close(
            waits(0.01).lost(0.2, 0.01, steady),
            0.2 / std::f64::consts::E
        ));
        // No buffer: everything that arrives while waiting; a deep one: almost nothing.
        assert!(close(waits(0.01).lost(0.2, 0.0, steady), 0.2));
        assert!(waits(0.01).lost(0.2, 1.0, steady) < 1e-40);
        assert_eq!(waits(0.0).lost(0.2, 0.01, steady), 0.0);
    }

    #[test]
    fn no_wait_outlasts_the_longest_and_the_waits_it_cuts_lose_less() {
        let e = std::f64::consts::E;
        let cut = Waits {
            tail_s: 0.01,
            longest_s: 0.02,
        };
        // Waits of 10 ms cut at 20 ms: a 10 ms buffer loses (1/e - 1/e^2) / (1 - 1/e^2).
        let want = 0.2 * (1.0 / e - 1.0 / (e * e)) / (1.0 - 1.0 / (e * e));
        assert!(close(cut.lost(0.2, 0.01, f64::INFINITY), want));
        // A buffer as deep as the longest wait loses nothing.
        assert_eq!(cut.lost(0.2, 0.02, f64::INFINITY), 0.0);
        assert_eq!(cut.lost(0.2, 0.03, f64::INFINITY), 0.0);
        // With no buffer, everything that arrives while waiting, as unbounded.
        assert!(close(cut.lost(0.2, 0.0, f64::INFINITY), 0.2));
    }

    #[test]
    fn a_wait_loses_only_what_arrives_before_the_burst_ends() {
        // Bursts of 20 ms into a 10 ms buffer: a wait loses at most 10 ms of arrivals,
        // 0.2 (1/e - 1/e^2) over 10 ms waits.
        let e = std::f64::consts::E;
        let waits = |tail_s| Waits {
            tail_s,
            longest_s: f64::INFINITY,
        };
        let got = waits(0.01).lost(0.2, 0.01, 0.02);
        assert!(close(got, 0.2 * (1.0 / e - 1.0 / (e * e))), "{got}");
        // A burst the buffer holds whole loses nothing, however long the waits.
        assert_eq!(waits(1.0).lost(0.2, 0.01, 0.01), 0.0);
        assert_eq!(waits(1.0).lost(0.2, 0.01, 0.005), 0.0);
    }

    #[test]
    fn the_tail_inverts_the_wait_loss() {
        let inf = f64::INFINITY;
        let tail = tail_of(0.3, 0.05, 0.02, inf).unwrap();
        let waits = |tail_s, longest_s| Waits { tail_s, longest_s };
        assert!(close(waits(tail, inf).lost(0.3, 0.02, inf), 0.05));
        assert_eq!(tail_of(0.3, 0.0, 0.02, inf), None);
        assert_eq!(tail_of(0.05, 0.3, 0.02, inf), None);
        // Cut at 50 ms the same loss needs longer waits, and the cut ones reproduce it.
        let cut = tail_of(0.3, 0.05, 0.02, 0.05).unwrap();
        assert!(cut > tail, "{cut} {tail}");
        assert!((waits(cut, 0.05).lost(0.3, 0.02, inf) - 0.05).abs() < 1e-9);
        // Waits of at most 50 ms lose at most 30/50 of the waiting time to a 20 ms buffer,
        // and nothing to a 50 ms one.
        assert_eq!(tail_of(0.3, 0.19, 0.02, 0.05), None);
        assert_eq!(tail_of(0.3, 0.05, 0.05, 0.05), None);
    }

    #[test]
    fn an_unmeasured_configuration_takes_the_median_share() {
        let at = |share| Sharing {
            share,
            wait_s: 0.001,
        };
        let cpu = Cpu {
            sharing: BTreeMap::from([
                ("count".to_owned(), at(0.9)),
                ("copy".to_owned(), at(0.1)),
                ("tcpdump null".to_owned(), at(0.5)),
                (SATURATED.to_owned(), at(0.6)),
            ]),
            tail_s: 0.01,
            longest_s: None,
            rps: None,
        };
        assert_eq!(cpu.of("copy").share, 0.1);
        // The saturated worker does not count: with it the median would be 0.6.
        assert_eq!(cpu.of("zstd:3").share, 0.5);
    }

    #[test]
    fn a_saturated_worker_gets_the_share_it_ran_when_runnable() {
        let cpu = Cpu {
            sharing: BTreeMap::from([
                (
                    SATURATED.to_owned(),
                    Sharing {
                        share: 0.2,
                        wait_s: 0.0001,
                    },
                ),
                (
                    "count".to_owned(),
                    Sharing {
                        share: 0.2,
                        wait_s: SLICE_S,
                    },
                ),
            ]),
            tail_s: 0.01,
            longest_s: None,
            rps: None,
        };
        assert_eq!(cpu.capacity_share(SATURATED), 0.2);
        assert!(close(cpu.capacity_share("count"), 0.5));
        // Not calibrated: the median configuration's slice share.
        let other = Cpu {
            sharing: BTreeMap::from([("count".to_owned(), cpu.sharing["count"])]),
            ..cpu
        };
        assert!(close(other.capacity_share(SATURATED), 0.5));
    }

    #[test]
    fn a_busy_thread_gets_a_slice_per_wait() {
        let s = |wait_s| Sharing { share: 0.1, wait_s }.capacity_share();
        assert_eq!(s(0.0), 1.0);
        assert!(close(s(SLICE_S), 0.5));
        assert!(close(s(3.0 * SLICE_S), 0.25));
    }
}
