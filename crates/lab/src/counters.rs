//! Interface counters, read the same way a user would (`ip -s link`), so tests can prove how
//! many frames crossed a wire without trusting the code under test.

use crate::cmd::{describe, ip, run_json};
use crate::LabError;
use serde::{Deserialize, Serialize};

/// Packet and byte counters of one interface (the kernel's 64-bit `stats64`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IfCounters {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received (Ethernet header included).
    pub rx_bytes: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Bytes sent (Ethernet header included).
    pub tx_bytes: u64,
    /// Frames dropped on receive.
    pub rx_dropped: u64,
    /// Frames dropped on send.
    pub tx_dropped: u64,
}

#[derive(Deserialize)]
struct Link {
    stats64: Option<Stats64>,
}

#[derive(Deserialize)]
struct Stats64 {
    rx: Direction,
    tx: Direction,
}

#[derive(Deserialize)]
struct Direction {
    packets: u64,
    bytes: u64,
    dropped: u64,
}

/// Reads the counters of `iface` in namespace `netns` from `ip -n NETNS -s -j link show dev IFACE`.
pub fn if_counters(netns: &str, iface: &str) -> Result<IfCounters, LabError> {
    let cmd = ip(["-n", netns, "-s", "-j", "link", "show", "dev", iface]);
    let command = describe(&cmd);
    let links: Vec<Link> = run_json(cmd)?;
    let stats = links
        .into_iter()
        .next()
        .and_then(|l| l.stats64)
        .ok_or_else(|| LabError::Output {
            command,
            detail: "no stats64 for the interface".to_owned(),
        })?;
    Ok(IfCounters {
        rx_packets: stats.rx.packets,
        rx_bytes: stats.rx.bytes,
        tx_packets: stats.tx.packets,
        tx_bytes: stats.tx.bytes,
        rx_dropped: stats.rx.dropped,
        tx_dropped: stats.tx.dropped,
    })
}
