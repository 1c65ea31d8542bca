//! Checks the capabilities packet capture and the lab need, so a missing one is named in one
//! line before anything is set up.

use std::fmt;

/// A capability the current process lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingPrivilege {
    /// The capability's name, e.g. `CAP_NET_ADMIN`.
    pub capability: &'static str,
    /// What it is needed for.
    pub purpose: &'static str,
}

impl fmt::Display for MissingPrivilege {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} needs {} (run as root or grant it)",
            self.purpose, self.capability
        )
    }
}

impl std::error::Error for MissingPrivilege {}

const CAP_NET_ADMIN: u32 = 12;
const CAP_NET_RAW: u32 = 13;
const CAP_SYS_ADMIN: u32 = 21;

/// The effective capability set of this process, from `/proc/self/status`.
fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

fn has(cap: u32) -> bool {
    effective_caps() & (1u64 << cap) != 0
}

/// Building or removing a lab: network namespaces and veth pairs.
pub fn check_lab() -> Result<(), MissingPrivilege> {
    if !has(CAP_SYS_ADMIN) {
        return Err(MissingPrivilege {
            capability: "CAP_SYS_ADMIN",
            purpose: "creating network namespaces",
        });
    }
    if !has(CAP_NET_ADMIN) {
        return Err(MissingPrivilege {
            capability: "CAP_NET_ADMIN",
            purpose: "creating veth test hosts",
        });
    }
    Ok(())
}

/// Opening AF_PACKET sockets to capture or send raw frames.
pub fn check_raw_sockets(purpose: &'static str) -> Result<(), MissingPrivilege> {
    if !has(CAP_NET_RAW) {
        return Err(MissingPrivilege {
            capability: "CAP_NET_RAW",
            purpose,
        });
    }
    Ok(())
}
