//! Samples a running tool from `/proc` every few seconds while a point runs: resident memory,
//! open files and threads. A soak run needs them over time, not only at the end, because a
//! leak shows as growth between samples while the final numbers alone look plausible.
//!
//! The sampler is a thread of the bench (on whatever CPU the bench runs, not the tool's), reads
//! three small files per sample and never touches the tool, so it does not change what it
//! measures. [`growth`] is the verdict over the samples, a pure function.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The tool's state at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since sampling started.
    pub t_s: f64,
    /// Resident set size (`VmRSS` of `/proc/PID/status`), KiB.
    pub rss_kib: u64,
    /// Open file descriptors (entries of `/proc/PID/fd`).
    pub fds: u64,
    /// Threads (`Threads` of `/proc/PID/status`).
    pub threads: u64,
}

/// Reads one sample of process `pid`; `None` once it is gone.
pub fn read(pid: u32, t_s: f64) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |k: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Sample {
        t_s,
        rss_kib: field("VmRSS:")?,
        fds,
        threads: field("Threads:")?,
    })
}

/// A thread sampling one process until [`Sampler::finish`].
pub struct Sampler {
    done: Arc<AtomicBool>,
    handle: JoinHandle<Vec<Sample>>,
}

impl Sampler {
    /// Samples `pid` now and then every `every`.
    pub fn start(pid: u32, every: Duration) -> Sampler {
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        let handle = std::thread::spawn(move || {
            let start = Instant::now();
            let mut v = Vec::new();
            let mut next = start;
            while !flag.load(Ordering::Relaxed) {
                if Instant::now() >= next {
                    v.extend(read(pid, start.elapsed().as_secs_f64()));
                    next += every;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            v.extend(read(pid, start.elapsed().as_secs_f64()));
            v
        });
        Sampler { done, handle }
    }

    /// Takes a last sample and returns them all.
    pub fn finish(self) -> Vec<Sample> {
        self.done.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

/// RSS growth after warm-up tolerated as noise (allocator arenas, page-cache accounting of
/// shared pages), KiB.
pub const RSS_TOLERANCE_KIB: u64 = 2048;

/// What grew over a run, after warm-up (the first third of the sampled time: pools, rings,
/// thread stacks and the first output file are set up by then).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Growth {
    /// Largest RSS after warm-up minus RSS at the first sample after warm-up, KiB.
    pub rss_kib: i64,
    /// Smallest and largest open file count after warm-up.
    pub fds: (u64, u64),
    /// Smallest and largest thread count after warm-up.
    pub threads: (u64, u64),
}

impl Growth {
    /// Whether anything grew: RSS beyond [`RSS_TOLERANCE_KIB`], or open files or threads
    /// that were not constant.
    pub fn grew(&self) -> bool {
        self.rss_kib > RSS_TOLERANCE_KIB as i64
            || self.fds.0 != self.fds.1
            || self.threads.0 != self.threads.1
    }
}

/// The growth verdict over `samples` (in time order); `None` with fewer than two samples
/// after warm-up.
pub fn growth(samples: &[Sample]) -> Option<Growth> {
    let end = samples.last()?.t_s;
    let start = samples.first()?.t_s;
    let warm = start + (end - start) / 3.0;
    let after: Vec<&Sample> = samples.iter().filter(|s| s.t_s >= warm).collect();
    if after.len() < 2 {
        return None;
    }
    let range = |f: fn(&Sample) -> u64| {
        let v = after.iter().map(|s| f(s));
        (v.clone().min().unwrap_or(0), v.max().unwrap_or(0))
    };
    let max_rss = after.iter().map(|s| s.rss_kib).max().unwrap_or(0);
    Some(Growth {
        rss_kib: max_rss as i64 - after[0].rss_kib as i64,
        fds: range(|s| s.fds),
        threads: range(|s| s.threads),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t_s: f64, rss_kib: u64, fds: u64, threads: u64) -> Sample {
        Sample {
            t_s,
            rss_kib,
            fds,
            threads,
        }
    }

    #[test]
    fn growth_ignores_warm_up_and_flags_what_grew() {
        // Warm-up (t < 10) may grow freely; afterwards RSS stays within the tolerance.
        let steady = [
            s(0.0, 1000, 5, 2),
            s(5.0, 90_000, 9, 6),
            s(10.0, 100_000, 10, 6),
            s(20.0, 101_000, 10, 6),
            s(30.0, 100_500, 10, 6),
        ];
        let g = growth(&steady).unwrap();
        assert_eq!((g.rss_kib, g.fds, g.threads), (1000, (10, 10), (6, 6)));
        assert!(!g.grew());

        let mut leak = steady;
        leak[4].rss_kib = 100_000 + RSS_TOLERANCE_KIB + 1;
        assert!(growth(&leak).unwrap().grew());
        let mut fd_leak = steady;
        fd_leak[4].fds = 11;
        assert_eq!(growth(&fd_leak).unwrap().fds, (10, 11));
        assert!(growth(&fd_leak).unwrap().grew());
        let mut thread_leak = steady;
        thread_leak[3].threads = 7;
        assert!(growth(&thread_leak).unwrap().grew());

        assert_eq!(growth(&steady[..1]), None);
        assert_eq!(growth(&[]), None);
    }

    #[test]
    fn reads_this_process() {
        let me = read(std::process::id(), 1.5).unwrap();
        assert!(me.rss_kib > 0 && me.fds >= 3 && me.threads >= 1, "{me:?}");
        let sampler = Sampler::start(std::process::id(), Duration::from_millis(100));
        std::thread::sleep(Duration::from_millis(350));
        let v = sampler.finish();
        assert!(v.len() >= 3, "{v:?}");
        assert!(v.windows(2).all(|w| w[0].t_s <= w[1].t_s));
    }
}
