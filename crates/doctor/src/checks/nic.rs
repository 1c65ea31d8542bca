//! The capture interface's own settings: NIC ring sizes and channel counts (`ethtool -g/-l`,
//! with sysfs `queues/` as the fallback), offloads that change what is captured (GRO, LRO,
//! TSO/GSO: frames larger than the MTU in the file), the NIC's NUMA node, and whether AF_XDP
//! can run in zero-copy mode.
//!
//! Zero-copy is judged from the driver's name (sysfs `device/driver`, else `ethtool -i`)
//! against the drivers that implement XSK zero-copy in mainline kernels; no socket is bound,
//! so no root is needed. `poolcap capture --backend af_xdp --zero-copy required` is the
//! definitive test.

use super::{Finding, Status};
use crate::ethtool::{self, MaxCurrent};
use crate::system::System;

/// Drivers with AF_XDP zero-copy support in mainline Linux 6.x.
pub const ZERO_COPY_DRIVERS: [&str; 9] = [
    "i40e",
    "ice",
    "ixgbe",
    "igc",
    "igb",
    "mlx5_core",
    "stmmac",
    "rvu_nicpf",
    "virtio_net",
];

/// Every check of `iface`.
pub fn check(sys: &dyn System, iface: &str) -> Vec<Finding> {
    let mut v = vec![ring(sys, iface), channels(sys, iface)];
    v.extend(offloads(sys, iface));
    v.push(numa(sys, iface));
    v.push(zero_copy(sys, iface));
    v
}

fn ring(sys: &dyn System, iface: &str) -> Finding {
    let check = format!("{iface} rx ring");
    let why = "frames the NIC can hold while the kernel is busy elsewhere; a ring below \
               its maximum overflows on bursts before any capture socket sees them";
    let rx = ethtool::query(sys, "-g", iface)
        .map(|t| ethtool::parse_params(&t).get("RX"))
        .unwrap_or_default();
    match rx {
        MaxCurrent {
            max: Some(max),
            current: Some(cur),
        } if cur < max => Finding::needs(
            if cur * 4 <= max {
                Status::Bad
            } else {
                Status::Warn
            },
            check,
            format!("RX {cur} of at most {max} (ethtool -g {iface})"),
            why,
            format!("ethtool -G {iface} rx {max}"),
        ),
        MaxCurrent {
            max: Some(max),
            current: Some(cur),
        } => Finding::ok(
            check,
            format!("RX {cur} of at most {max} (ethtool -g {iface})"),
            why,
        ),
        _ => Finding::ok(
            check,
            format!("not reported by the driver (ethtool -g {iface})"),
            why,
        ),
    }
}

fn channels(sys: &dyn System, iface: &str) -> Finding {
    let check = format!("{iface} channels");
    let why = "receive queues (RSS) the NIC spreads flows over; each can have its own \
               capture thread and CPU, so unused channels leave capacity idle";
    let sysfs_rx = sys
        .list(&format!("/sys/class/net/{iface}/queues"))
        .iter()
        .filter(|q| q.starts_with("rx-"))
        .count();
    let Some(text) = ethtool::query(sys, "-l", iface) else {
        return Finding::ok(
            check,
            format!(
                "{sysfs_rx} rx queues (/sys/class/net/{iface}/queues); ethtool -l gave nothing"
            ),
            why,
        );
    };
    let p = ethtool::parse_params(&text);
    let (kind, mc) = [("combined", p.get("Combined")), ("rx", p.get("RX"))]
        .into_iter()
        .find(|(_, mc)| mc.max.is_some_and(|m| m > 0))
        .unwrap_or(("combined", MaxCurrent::default()));
    match (mc.max, mc.current) {
        (Some(max), Some(cur)) if cur < max => Finding::needs(
            Status::Warn,
            check,
            format!(
                "{kind} {cur} of at most {max} (ethtool -l {iface}); {sysfs_rx} rx queues in sysfs"
            ),
            why,
            format!("ethtool -L {iface} {kind} {max}"),
        ),
        (Some(max), Some(cur)) => Finding::ok(
            check,
            format!("{kind} {cur} of at most {max} (ethtool -l {iface})"),
            why,
        ),
        _ => Finding::ok(
            check,
            format!("{sysfs_rx} rx queues (/sys/class/net/{iface}/queues); channels not reported"),
            why,
        ),
    }
}

/// (feature, short name, status when on, why).
const OFFLOADS: [(&str, &str, Status, &str); 4] = [
    (
        "large-receive-offload",
        "lro",
        Status::Bad,
        "the NIC merges TCP segments before the kernel: the capture holds frames that never \
         crossed the wire, larger than the MTU",
    ),
    (
        "generic-receive-offload",
        "gro",
        Status::Warn,
        "the kernel merges segments of a flow: AF_PACKET sees (and the file holds) frames \
         larger than the MTU instead of the wire's frames",
    ),
    (
        "tcp-segmentation-offload",
        "tso",
        Status::Warn,
        "locally sent TCP is captured before the NIC cuts it: outgoing frames larger than \
         the MTU in the file",
    ),
    (
        "generic-segmentation-offload",
        "gso",
        Status::Warn,
        "as TSO, in software: outgoing frames larger than the MTU in the file",
    ),
];

fn offloads(sys: &dyn System, iface: &str) -> Vec<Finding> {
    let text = ethtool::query(sys, "-k", iface);
    OFFLOADS
        .iter()
        .map(|&(feature, short, when_on, why)| {
            let check = format!("{iface} {short}");
            match text.as_deref().and_then(|t| ethtool::feature(t, feature)) {
                None => Finding::ok(check, format!("not reported (ethtool -k {iface})"), why),
                Some(f) if !f.on => Finding::ok(check, format!("{feature}: off"), why),
                Some(f) if f.fixed => Finding::ok(
                    check,
                    format!("{feature}: on [fixed]: the driver cannot turn it off"),
                    why,
                ),
                Some(_) => Finding::needs(
                    when_on,
                    check,
                    format!("{feature}: on (ethtool -k {iface})"),
                    why,
                    format!("ethtool -K {iface} {short} off"),
                ),
            }
        })
        .collect()
}

fn numa(sys: &dyn System, iface: &str) -> Finding {
    let check = format!("{iface} numa node");
    let why = "capture threads on another NUMA node than the NIC read every frame across \
               the interconnect";
    let path = format!("/sys/class/net/{iface}/device/numa_node");
    let node = sys.read(&path).and_then(|n| n.parse::<i64>().ok());
    let nodes = sys
        .list("/sys/devices/system/node")
        .iter()
        .filter(|n| n.starts_with("node"))
        .count();
    match node {
        Some(n) if n >= 0 && nodes > 1 => {
            let cpus = sys
                .read(&format!("/sys/devices/system/node/node{n}/cpulist"))
                .unwrap_or_default();
            Finding::needs(
                Status::Warn,
                check,
                format!("node {n} of {nodes} ({path}); its CPUs: {cpus}"),
                why,
                format!("poolcap capture -i {iface} --cpus {cpus}"),
            )
        }
        Some(n) if n >= 0 => Finding::ok(check, format!("node {n}, the only one ({path})"), why),
        _ => Finding::ok(
            check,
            format!("no NUMA affinity reported ({path}): one node, or a virtual device"),
            why,
        ),
    }
}

fn zero_copy(sys: &dyn System, iface: &str) -> Finding {
    let check = format!("{iface} af_xdp zero-copy");
    let why = "in zero-copy mode the NIC writes frames straight into the pool (UMEM); in \
               copy mode the kernel copies each frame once more";
    let driver = sys
        .link_name(&format!("/sys/class/net/{iface}/device/driver"))
        .or_else(|| ethtool::query(sys, "-i", iface).and_then(|t| ethtool::driver(&t)));
    match driver {
        Some(d) if ZERO_COPY_DRIVERS.contains(&d.as_str()) => Finding::ok(
            check,
            format!("driver {d} supports it (judged by driver name, no bind attempted)"),
            why,
        ),
        Some(d) => Finding::needs(
            Status::Warn,
            check,
            format!("driver {d} has no zero-copy support (judged by driver name, no bind attempted): AF_XDP runs in copy mode"),
            why,
            format!("poolcap capture -i {iface} --backend af_packet (or a NIC driven by one of: {})", ZERO_COPY_DRIVERS.join(", ")),
        ),
        None => Finding::ok(check, "driver unknown: not judged", why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethtool::samples::*;
    use crate::system::FakeSystem;

    fn ixgbe() -> FakeSystem {
        FakeSystem::new()
            .command("ethtool -g eth1", RING_IXGBE)
            .command("ethtool -l eth1", CHANNELS_IXGBE)
            .command("ethtool -k eth1", FEATURES_LRO)
            .file("/sys/class/net/eth1/queues/rx-0/rps_cpus", "0")
            .file("/sys/class/net/eth1/device/numa_node", "1")
            .file("/sys/devices/system/node/node0/cpulist", "0-7")
            .file("/sys/devices/system/node/node1/cpulist", "8-15")
            .link("/sys/class/net/eth1/device/driver", "ixgbe")
    }

    fn find<'a>(v: &'a [Finding], check: &str) -> &'a Finding {
        v.iter()
            .find(|f| f.check == check)
            .unwrap_or_else(|| panic!("{check} missing"))
    }

    #[test]
    fn a_small_ring_and_idle_channels_get_their_ethtool_fix() {
        let v = check(&ixgbe(), "eth1");
        let r = find(&v, "eth1 rx ring");
        assert_eq!(
            (r.status, r.fix.as_str()),
            (Status::Bad, "ethtool -G eth1 rx 4096")
        );
        let c = find(&v, "eth1 channels");
        assert_eq!(
            (c.status, c.fix.as_str()),
            (Status::Warn, "ethtool -L eth1 combined 63")
        );
    }

    #[test]
    fn lro_is_bad_gro_warns_and_fixed_offloads_pass() {
        let v = check(&ixgbe(), "eth1");
        let l = find(&v, "eth1 lro");
        assert_eq!(
            (l.status, l.fix.as_str()),
            (Status::Bad, "ethtool -K eth1 lro off")
        );
        assert_eq!(find(&v, "eth1 gro").status, Status::Warn);
        let veth = FakeSystem::new().command("ethtool -k prb0", FEATURES_VETH);
        let v = check(&veth, "prb0");
        assert_eq!(find(&v, "prb0 gro").status, Status::Ok);
        let l = find(&v, "prb0 lro");
        assert_eq!(l.status, Status::Ok);
        assert_eq!(find(&v, "prb0 tso").status, Status::Warn);
    }

    #[test]
    fn numa_and_zero_copy_follow_the_device() {
        let v = check(&ixgbe(), "eth1");
        let n = find(&v, "eth1 numa node");
        assert_eq!(n.status, Status::Warn);
        assert!(n.fix.ends_with("--cpus 8-15"), "{}", n.fix);
        assert_eq!(find(&v, "eth1 af_xdp zero-copy").status, Status::Ok);
        let veth = FakeSystem::new().command("ethtool -i prb0", "driver: veth\n");
        let v = check(&veth, "prb0");
        let z = find(&v, "prb0 af_xdp zero-copy");
        assert_eq!(z.status, Status::Warn);
        assert!(z.evidence.contains("driver veth"));
        assert_eq!(find(&v, "prb0 numa node").status, Status::Ok);
    }

    #[test]
    fn drivers_that_report_nothing_are_not_judged() {
        let sys = FakeSystem::new()
            .file("/sys/class/net/x/queues/rx-0/rps_cpus", "0")
            .file("/sys/class/net/x/queues/rx-1/rps_cpus", "0");
        let v = check(&sys, "x");
        assert!(v.iter().all(|f| f.status == Status::Ok), "{v:#?}");
        assert!(find(&v, "x channels").evidence.starts_with("2 rx queues"));
    }
}
