//! Loss before the kernel ring: the interface's own drop counters. A NIC that runs out of
//! receive descriptors or FIFO space (`rx_missed_errors`, `rx_fifo_errors`) or a driver or
//! stack that drops a frame before any packet socket sees it (`rx_dropped`) loses packets
//! no capture socket can count. They are read from sysfs at the start and the end of a
//! capture and reported as their own term, `dropped_nic`. They are the interface's, not
//! the capture's: a frame the filter would have rejected counts too, and so does traffic
//! lost while another program, not this capture, was the cause.

use std::path::{Path, PathBuf};

/// The counters summed into `dropped_nic`.
pub const COUNTERS: [&str; 3] = ["rx_dropped", "rx_missed_errors", "rx_fifo_errors"];

/// An interface's drop counters at the start of a capture.
#[derive(Debug, Clone)]
pub struct NicDrops {
    /// The interface's statistics directory.
    dir: PathBuf,
    before: u64,
}

impl NicDrops {
    /// Reads `iface`'s counters now, from the current network namespace's sysfs; None when
    /// the interface has none of them (every interface at once, a file).
    pub fn start(iface: &str) -> Option<Self> {
        Self::start_in(Path::new("/sys/class/net"), iface)
    }

    /// As [`NicDrops::start`], under another sysfs `class/net` directory (tests).
    pub fn start_in(class_net: &Path, iface: &str) -> Option<Self> {
        let dir = class_net.join(iface).join("statistics");
        let before = sum(&dir)?;
        Some(Self { dir, before })
    }

    /// Drops counted since the start (0 if the counters went away or back: a replaced
    /// interface).
    pub fn since_start(&self) -> u64 {
        sum(&self.dir).map_or(0, |now| now.saturating_sub(self.before))
    }
}

/// The sum of the counters in `dir` that exist; None when none does.
fn sum(dir: &Path) -> Option<u64> {
    let values: Vec<u64> = COUNTERS
        .iter()
        .filter_map(|c| std::fs::read_to_string(dir.join(c)).ok())
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(dir: &Path, counter: &str, v: u64) {
        std::fs::write(dir.join(counter), format!("{v}\n")).unwrap();
    }

    #[test]
    fn the_three_counters_rise_into_one_term() {
        let root = tempfile::tempdir().unwrap();
        let stats = root.path().join("eth7/statistics");
        std::fs::create_dir_all(&stats).unwrap();
        set(&stats, "rx_dropped", 10);
        set(&stats, "rx_missed_errors", 5);
        set(&stats, "rx_fifo_errors", 0);
        set(&stats, "rx_packets", 1000);
        let nic = NicDrops::start_in(root.path(), "eth7").unwrap();
        assert_eq!(nic.since_start(), 0);
        set(&stats, "rx_dropped", 13);
        set(&stats, "rx_missed_errors", 105);
        set(&stats, "rx_fifo_errors", 2);
        set(&stats, "rx_packets", 5000);
        assert_eq!(nic.since_start(), 3 + 100 + 2);
    }

    #[test]
    fn an_interface_without_counters_has_no_term_and_a_reset_counts_nothing() {
        let root = tempfile::tempdir().unwrap();
        assert!(NicDrops::start_in(root.path(), "any").is_none());
        let stats = root.path().join("veth0/statistics");
        std::fs::create_dir_all(&stats).unwrap();
        set(&stats, "rx_dropped", 50);
        let nic = NicDrops::start_in(root.path(), "veth0").unwrap();
        set(&stats, "rx_dropped", 7);
        assert_eq!(nic.since_start(), 0);
    }

    #[test]
    fn loopback_has_counters_here() {
        assert!(NicDrops::start("lo").is_some());
    }
}
