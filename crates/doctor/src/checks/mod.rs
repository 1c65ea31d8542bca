//! The checks of `poolcap doctor`: each reads what decides capture loss (through
//! [`System`]) and returns findings with their evidence and the command that would fix them.
//! None changes anything, and none needs root: where root would tell more (an AF_XDP
//! zero-copy bind), the finding says what it judged from instead.
//!
//! Thresholds come from the papers (Table II of the loss-prediction paper: 8 MiB socket
//! buffers, a larger netdev budget) and from what the lab measured (docs/design.md): buffers only
//! help against bursts, and kernel receive work on the capture CPU costs packets.
//!
//! - [`kernel`]: socket buffer limits, backlog and NAPI budget (sysctls);
//! - [`nic`]: ring sizes, channels, offloads, NUMA node, AF_XDP zero-copy (per interface);
//! - [`cpu`]: RPS/XPS and IRQ affinity against the capture CPUs, frequency governor;
//! - [`memory`]: locked-memory limit and huge pages.

use serde::Serialize;

use crate::system::System;

pub mod cpu;
pub mod kernel;
pub mod memory;
pub mod nic;

/// How a setting stands for lossless capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Fine as it is.
    Ok,
    /// Costs packets under some loads (bursts, small frames) or changes what is captured.
    Warn,
    /// Costs packets, or makes the capture differ from the wire, in most captures.
    Bad,
}

impl Status {
    /// `ok`, `warn`, `bad`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Bad => "bad",
        }
    }
}

/// One finding: the setting, how it stands, what was read, why it matters and the fix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The setting checked: `net.core.rmem_max`, `eth0 rx ring`.
    pub check: String,
    /// Verdict.
    pub status: Status,
    /// What was read, where: `4194304 (/proc/sys/net/core/rmem_max)`.
    pub evidence: String,
    /// Why it matters for loss.
    pub why: String,
    /// The command that would fix it (empty when nothing needs fixing).
    pub fix: String,
}

impl Finding {
    /// A finding with no fix needed.
    pub fn ok(check: impl Into<String>, evidence: impl Into<String>, why: &str) -> Finding {
        Finding {
            check: check.into(),
            status: Status::Ok,
            evidence: evidence.into(),
            why: why.to_owned(),
            fix: String::new(),
        }
    }

    /// A finding with a verdict and a fix.
    pub fn needs(
        status: Status,
        check: impl Into<String>,
        evidence: impl Into<String>,
        why: &str,
        fix: impl Into<String>,
    ) -> Finding {
        Finding {
            check: check.into(),
            status,
            evidence: evidence.into(),
            why: why.to_owned(),
            fix: fix.into(),
        }
    }
}

/// What the checks are about.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// The capture interface (`None`: only the machine-wide checks).
    pub iface: Option<String>,
    /// CPUs the capture threads will be pinned to (`None`: not pinned).
    pub capture_cpus: Option<Vec<usize>>,
}

/// Every check, machine-wide first, then the interface's.
pub fn run_all(sys: &dyn System, target: &Target) -> Vec<Finding> {
    let mut v = kernel::check(sys);
    if let Some(iface) = &target.iface {
        v.extend(nic::check(sys, iface));
        v.extend(cpu::check_interface(
            sys,
            iface,
            target.capture_cpus.as_deref(),
        ));
    }
    v.extend(cpu::check_governor(sys));
    v.extend(memory::check(sys));
    v
}

/// A sysctl's path under /proc/sys (`net.core.rmem_max` → `/proc/sys/net/core/rmem_max`).
pub fn sysctl_path(name: &str) -> String {
    format!("/proc/sys/{}", name.replace('.', "/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::FakeSystem;

    #[test]
    fn an_empty_machine_still_gets_every_machine_wide_check() {
        let v = run_all(&FakeSystem::new(), &Target::default());
        let names: Vec<&str> = v.iter().map(|f| f.check.as_str()).collect();
        for n in [
            "net.core.rmem_max",
            "net.core.rmem_default",
            "net.core.netdev_max_backlog",
            "net.core.netdev_budget",
            "net.core.netdev_budget_usecs",
            "cpu frequency governor",
            "locked memory limit",
            "hugepages",
        ] {
            assert!(names.contains(&n), "{n} missing from {names:?}");
        }
        assert!(v
            .iter()
            .all(|f| f.status == Status::Ok || !f.fix.is_empty()));
    }

    #[test]
    fn status_serialises_lowercase() {
        assert_eq!(serde_json::to_string(&Status::Bad).unwrap(), "\"bad\"");
        assert_eq!(Status::Warn.name(), "warn");
    }
}
