//! Facts about a network interface that sysfs tells: queue counts, MTU, MAC address and
//! counters. Read in the current network namespace's sysfs (`ip netns exec` mounts the
//! namespace's own), so every caller runs inside the namespace of the interface.

fn read(iface: &str, what: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/{what}"))
        .ok()
        .map(|s| s.trim().to_string())
}

fn queues(iface: &str, prefix: &str) -> usize {
    std::fs::read_dir(format!("/sys/class/net/{iface}/queues"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .count()
        })
        .unwrap_or(1)
        .max(1)
}

/// Receive queues (1 if unknown).
pub fn rx_queues(iface: &str) -> usize {
    queues(iface, "rx-")
}

/// Transmit queues (1 if unknown).
pub fn tx_queues(iface: &str) -> usize {
    queues(iface, "tx-")
}

/// The MTU, if the interface exists.
pub fn mtu(iface: &str) -> Option<usize> {
    read(iface, "mtu")?.parse().ok()
}

/// Whether the interface is administratively up (IFF_UP), if it exists.
pub fn is_up(iface: &str) -> Option<bool> {
    let flags = u32::from_str_radix(read(iface, "flags")?.trim_start_matches("0x"), 16).ok()?;
    Some(flags & 1 != 0)
}

/// Whether the interface has a carrier (link up at both ends; false when down), if it
/// exists.
pub fn has_carrier(iface: &str) -> Option<bool> {
    // Reading `carrier` fails with EINVAL while the interface is administratively down.
    is_up(iface)?;
    Some(read(iface, "carrier").is_some_and(|c| c == "1"))
}

/// The MAC address as text (`aa:bb:cc:dd:ee:ff`), if the interface exists.
pub fn mac(iface: &str) -> Option<String> {
    read(iface, "address")
}

/// A counter from `statistics/` (e.g. `rx_packets`, `tx_dropped`), if readable.
pub fn counter(iface: &str, name: &str) -> Option<u64> {
    read(iface, &format!("statistics/{name}"))?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_described_and_missing_interfaces_are_not() {
        assert_eq!(mtu("lo"), Some(65536));
        assert_eq!(is_up("lo"), Some(true));
        assert_eq!(is_up("no-such-if0"), None);
        assert!(rx_queues("lo") >= 1);
        assert!(counter("lo", "rx_packets").is_some());
        assert_eq!(is_up("lo"), Some(true));
        assert_eq!(is_up("no-such-if0"), None);
        assert_eq!(has_carrier("lo"), Some(true));
        assert_eq!(has_carrier("no-such-if0"), None);
        assert_eq!(mtu("no-such-if0"), None);
        assert_eq!(mac("no-such-if0"), None);
        assert_eq!(rx_queues("no-such-if0"), 1);
    }
}
