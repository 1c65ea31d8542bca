//! Machine-wide kernel buffers and budgets: `net.core.rmem_max`, `rmem_default`,
//! `netdev_max_backlog`, `netdev_budget` and `netdev_budget_usecs`.
//!
//! The loss-prediction paper's Table II raised the socket buffers to 8 MiB and the NAPI
//! budget 64-fold before kernel loss of small frames fell: the defaults (about 200 KiB, 1000
//! packets of backlog, 300 packets per poll) absorb a desktop's traffic, not a capture's
//! bursts. TPACKET rings are not bounded by rmem_max, but libpcap falls back to plain
//! sockets (bounded by it) where rings fail, and the backlog holds frames steered by RPS.

use super::{sysctl_path, Finding, Status};
use crate::system::System;

/// A sysctl, the value it should at least have, and why.
struct Floor {
    name: &'static str,
    at_least: u64,
    why: &'static str,
}

const FLOORS: [Floor; 5] = [
    Floor {
        name: "net.core.rmem_max",
        at_least: 8 << 20,
        why: "largest socket receive buffer an application may ask for (SO_RCVBUF); \
              capture without a ring (libpcap's fallback) loses bursts beyond it",
    },
    Floor {
        name: "net.core.rmem_default",
        at_least: 8 << 20,
        why: "receive buffer of sockets that do not ask: what a plain AF_PACKET socket \
              buffers before the kernel drops",
    },
    Floor {
        name: "net.core.netdev_max_backlog",
        at_least: 10_000,
        why: "per-CPU queue of received frames waiting for the stack (RPS, veth, \
              non-NAPI drivers); a burst beyond it is dropped before any capture socket",
    },
    Floor {
        name: "net.core.netdev_budget",
        at_least: 600,
        why: "frames one NAPI poll round may take from all interfaces; a small budget \
              leaves frames in the NIC ring under load (the paper raised it to 19200)",
    },
    Floor {
        name: "net.core.netdev_budget_usecs",
        at_least: 8000,
        why: "microseconds one NAPI poll round may run; with the budget, how long the \
              kernel drains NIC rings before yielding",
    },
];

/// The five sysctls, each against its floor.
pub fn check(sys: &dyn System) -> Vec<Finding> {
    FLOORS.iter().map(|f| check_floor(sys, f)).collect()
}

fn check_floor(sys: &dyn System, f: &Floor) -> Finding {
    let path = sysctl_path(f.name);
    let fix = format!("sysctl -w {}={}", f.name, f.at_least);
    match sys.read(&path).and_then(|v| v.parse::<u64>().ok()) {
        None => Finding::ok(f.name, format!("not readable ({path})"), f.why),
        Some(v) if v >= f.at_least => Finding::ok(f.name, format!("{v} ({path})"), f.why),
        Some(v) => {
            // Below a quarter of the floor is the kernel's desktop default or less.
            let status = if v * 4 <= f.at_least {
                Status::Bad
            } else {
                Status::Warn
            };
            Finding::needs(
                status,
                f.name,
                format!("{v} ({path}), below {}", f.at_least),
                f.why,
                fix,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::FakeSystem;

    fn machine(rmem_max: &str, backlog: &str) -> FakeSystem {
        FakeSystem::new()
            .file("/proc/sys/net/core/rmem_max", rmem_max)
            .file("/proc/sys/net/core/rmem_default", "212992")
            .file("/proc/sys/net/core/netdev_max_backlog", backlog)
            .file("/proc/sys/net/core/netdev_budget", "300")
            .file("/proc/sys/net/core/netdev_budget_usecs", "8000")
    }

    fn by_name<'a>(v: &'a [Finding], name: &str) -> &'a Finding {
        v.iter().find(|f| f.check == name).unwrap()
    }

    #[test]
    fn defaults_are_flagged_with_the_sysctl_that_fixes_them() {
        let v = check(&machine("212992", "1000"));
        let r = by_name(&v, "net.core.rmem_max");
        assert_eq!(r.status, Status::Bad);
        assert_eq!(r.fix, "sysctl -w net.core.rmem_max=8388608");
        assert!(r
            .evidence
            .starts_with("212992 (/proc/sys/net/core/rmem_max)"));
        assert_eq!(
            by_name(&v, "net.core.netdev_max_backlog").status,
            Status::Bad
        );
        assert_eq!(by_name(&v, "net.core.netdev_budget").status, Status::Warn);
        assert_eq!(
            by_name(&v, "net.core.netdev_budget_usecs").status,
            Status::Ok
        );
        assert_eq!(by_name(&v, "net.core.netdev_budget_usecs").fix, "");
    }

    #[test]
    fn tuned_values_pass_and_half_tuned_warn() {
        let v = check(&machine("16777216", "5000"));
        assert_eq!(by_name(&v, "net.core.rmem_max").status, Status::Ok);
        assert_eq!(
            by_name(&v, "net.core.netdev_max_backlog").status,
            Status::Warn
        );
    }

    #[test]
    fn unreadable_or_garbled_values_are_reported_not_judged() {
        let v = check(&machine("lots", "1000"));
        let r = by_name(&v, "net.core.rmem_max");
        assert_eq!(r.status, Status::Ok);
        assert!(r.evidence.starts_with("not readable"));
    }
}
