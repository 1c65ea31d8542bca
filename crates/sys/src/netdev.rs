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

/// The largest MTU of this namespace's interfaces but loopback's (at least 1500): what a
/// frame captured on every interface at once is, short of loopback's 64 KiB ones.
pub fn largest_mtu_but_loopback() -> usize {
    std::fs::read_dir("/sys/class/net")
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| arphrd(name) != Some(772))
                .filter_map(|name| mtu(&name))
                .max()
                .unwrap_or(1500)
        })
        .unwrap_or(1500)
        .max(1500)
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

/// The link's hardware type (`ARPHRD_*`, e.g. 1 for Ethernet, 65534 for a tun device), if
/// the interface exists.
pub fn arphrd(iface: &str) -> Option<u16> {
    read(iface, "type")?.parse().ok()
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
        assert_eq!(arphrd("lo"), Some(772));
        assert_eq!(crate::socket::arphrd("lo").unwrap(), 772);
        assert_eq!(arphrd("no-such-if0"), None);
        assert!(crate::socket::arphrd("no-such-if0").is_err());
        assert_eq!(mac("no-such-if0"), None);
        assert_eq!(rx_queues("no-such-if0"), 1);
    }
}
