//! The standard process metrics Prometheus's own clients export (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_open_fds`, `process_start_time_seconds`), read
//! from `/proc/self` at each scrape, so dashboards and alerts made for any exporter's
//! process work on poolcap's too.
//!
//! prometheus-client has no process collector, and the Go client's names are the
//! convention, so the few files are read here: `/proc/self/stat` (CPU ticks, start ticks
//! since boot, resident pages), `/proc/stat` (`btime`, the boot time) and the entries of
//! `/proc/self/fd`.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

/// This process's resources, as `/proc` tells them.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    /// User and system CPU time.
    cpu_seconds: f64,
    /// Resident memory.
    resident_bytes: u64,
    /// Open file descriptors.
    open_fds: u64,
    /// When the process started, in seconds since the epoch.
    start_time_seconds: f64,
}

/// The fields of `/proc/self/stat` used here: utime and stime, starttime (clock ticks
/// since boot) and rss (pages). Fields are counted after the command name, which is in
/// parentheses and may itself hold spaces and parentheses.
fn parse_stat(stat: &str) -> Option<(u64, u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state); field n is at index n - 3.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some((field(14)? + field(15)?, field(22)?, field(24)?))
}

/// The boot time in seconds since the epoch, from `/proc/stat`.
fn parse_btime(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())
}

/// Reads this process's sample now; `None` if `/proc` is not there or not as expected.
fn read() -> Option<Sample> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (cpu_ticks, start_ticks, pages) = parse_stat(&stat)?;
    let btime = parse_btime(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(Sample {
        cpu_seconds: cpu_ticks as f64 / ticks,
        resident_bytes: pages * rustix::param::page_size() as u64,
        open_fds,
        start_time_seconds: btime as f64 + start_ticks as f64 / ticks,
    })
}

/// Serves the process metrics at each scrape.
#[derive(Debug, Default)]
pub(crate) struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let Some(s) = read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(s.cpu_seconds);
        cpu.encode(enc.encode_descriptor(
            "process_cpu",
            "Total user and system CPU time spent in seconds.",
            Some(&Unit::Seconds),
            cpu.metric_type(),
        )?)?;
        let gauges: [(&str, &str, Option<&Unit>, ConstGauge<f64>); 3] = [
            (
                "process_resident_memory",
                "Resident memory size in bytes.",
                Some(&Unit::Bytes),
                ConstGauge::new(s.resident_bytes as f64),
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                None,
                ConstGauge::new(s.open_fds as f64),
            ),
            (
                "process_start_time",
                "Start time of the process since unix epoch in seconds.",
                Some(&Unit::Seconds),
                ConstGauge::new(s.start_time_seconds),
            ),
        ];
        for (name, help, unit, g) in gauges {
            g.encode(enc.encode_descriptor(name, help, unit, g.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let stat = "21325 (a) b) (c) R 21323 21323 8193 0 -1 4194304 100 0 0 0 7 5 0 0 20 0 1 0 1108263 3133440 408 18446744073709551615 0";
        assert_eq!(parse_stat(stat), Some((12, 1108263, 408)));
        assert_eq!(parse_stat("1 (x) R 2"), None);
        assert_eq!(
            parse_btime("cpu  1 2 3\nbtime 1795782023\nprocesses 9\n"),
            Some(1795782023)
        );
    }

    #[test]
    fn this_process_reads_as_running_now_with_its_cpu_time_memory_and_files() {
        let s = read().expect("/proc/self");
        let usage = poolcap_sys::process::cpu_time(poolcap_sys::process::Who::SelfProcess);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after the epoch")
            .as_secs_f64();
        // The test process started before now, and not a day ago.
        assert!(
            s.start_time_seconds <= now + 1.0 && s.start_time_seconds > now - 86400.0,
            "{s:?} now {now}"
        );
        // getrusage counts the same time, more finely than clock ticks.
        let rusage = usage.user + usage.system;
        assert!((s.cpu_seconds - rusage).abs() < 0.1, "{s:?} {usage:?}");
        assert!(s.resident_bytes > 1 << 20, "{s:?}");
        // At least the directory being read.
        assert!(s.open_fds >= 1, "{s:?}");
    }
}
