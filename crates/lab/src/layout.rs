//! The fixed shape of every lab: namespace names derived from the lab name, and interface
//! names, MACs and addresses that are the same in every lab. Fixed values make captures from
//! different runs comparable and let tests hard-code what they expect on the wire; labs never
//! collide because each host is its own namespace.

use crate::LabError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::Ipv4Addr;

/// Most queues a lab interface may have.
pub const MAX_QUEUES: u16 = 64;

/// Longest lab name.
const MAX_NAME: usize = 20;

/// Prefix of every lab namespace: `poolcap-{name}-{host}`.
const NETNS_PREFIX: &str = "poolcap-";

/// The host part of the namespace names, in build order.
pub(crate) const NETNS_HOSTS: [&str; 3] = ["sender", "probe", "sink"];

/// What an interface is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// The sender's interface, `snd0`, wired to the probe's `prb0`.
    Sender,
    /// The probe's interface facing the sender, `prb0`: where capture happens.
    Probe,
    /// The probe's interface facing the sink, `prb1` (three hosts only).
    ProbeFwd,
    /// The sink's interface, `snk0`, wired to the probe's `prb1` (three hosts only).
    Sink,
}

impl Role {
    /// All roles, in order.
    pub const ALL: [Role; 4] = [Role::Sender, Role::Probe, Role::ProbeFwd, Role::Sink];

    /// The roles of a lab with `hosts` hosts (2 or 3).
    pub(crate) fn for_hosts(hosts: u8) -> &'static [Role] {
        if hosts >= 3 {
            &Role::ALL
        } else {
            &Role::ALL[..2]
        }
    }

    /// The name used in [`crate::HostInfo`] and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Sender => "sender",
            Role::Probe => "probe",
            Role::ProbeFwd => "probe-fwd",
            Role::Sink => "sink",
        }
    }

    /// The host (namespace suffix) this interface lives in.
    pub(crate) fn netns_host(self) -> &'static str {
        match self {
            Role::Sender => "sender",
            Role::Probe | Role::ProbeFwd => "probe",
            Role::Sink => "sink",
        }
    }

    /// The interface name, the same in every lab.
    pub fn iface(self) -> &'static str {
        match self {
            Role::Sender => "snd0",
            Role::Probe => "prb0",
            Role::ProbeFwd => "prb1",
            Role::Sink => "snk0",
        }
    }

    /// The interface's MAC address (locally administered, "pc" in the OUI bytes).
    pub fn mac(self) -> &'static str {
        match self {
            Role::Sender => "02:70:63:00:00:01",
            Role::Probe => "02:70:63:00:00:02",
            Role::ProbeFwd => "02:70:63:00:00:03",
            Role::Sink => "02:70:63:00:00:04",
        }
    }

    /// The interface's IPv4 address (prefix length `PREFIX_LEN`).
    pub fn ip(self) -> Ipv4Addr {
        match self {
            Role::Sender => Ipv4Addr::new(10, 77, 0, 1),
            Role::Probe => Ipv4Addr::new(10, 77, 0, 2),
            Role::ProbeFwd => Ipv4Addr::new(10, 77, 1, 1),
            Role::Sink => Ipv4Addr::new(10, 77, 1, 2),
        }
    }

    /// The other end of this interface's veth pair.
    pub fn peer(self) -> Role {
        match self {
            Role::Sender => Role::Probe,
            Role::Probe => Role::Sender,
            Role::ProbeFwd => Role::Sink,
            Role::Sink => Role::ProbeFwd,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Prefix length of every lab address: each veth pair is its own /24.
pub(crate) const PREFIX_LEN: u8 = 24;

/// The namespace of host `host` ("sender", "probe", "sink") in lab `lab`.
pub(crate) fn netns_name(lab: &str, host: &str) -> String {
    format!("{NETNS_PREFIX}{lab}-{host}")
}

/// The lab and host a namespace name belongs to, if it is a lab namespace.
pub(crate) fn parse_netns(netns: &str) -> Option<(&str, &str)> {
    let rest = netns.strip_prefix(NETNS_PREFIX)?;
    NETNS_HOSTS.iter().find_map(|host| {
        let lab = rest.strip_suffix(host)?.strip_suffix('-')?;
        valid_name(lab).then_some((lab, *host))
    })
}

fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Checks a lab name: 1 to 20 characters from `[A-Za-z0-9_-]`, so namespace names stay short
/// and safe to paste into a shell.
pub(crate) fn check_name(name: &str) -> Result<(), LabError> {
    if valid_name(name) {
        Ok(())
    } else {
        Err(LabError::InvalidName(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_name("lab").is_ok());
        assert!(check_name("a-b_C9").is_ok());
        assert!(check_name(&"x".repeat(20)).is_ok());
        for bad in ["", "a b", "a/b", "é", &"x".repeat(21)] {
            assert!(
                matches!(check_name(bad), Err(LabError::InvalidName(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn namespaces_round_trip() {
        for host in NETNS_HOSTS {
            let ns = netns_name("my-lab", host);
            assert_eq!(parse_netns(&ns), Some(("my-lab", host)));
        }
        assert_eq!(
            parse_netns("poolcap-x-sender-sink"),
            Some(("x-sender", "sink"))
        );
        assert_eq!(parse_netns("poolcap--probe"), None);
        assert_eq!(parse_netns("other-lab-probe"), None);
        assert_eq!(parse_netns("poolcap-lab-router"), None);
    }

    #[test]
    fn peers_are_symmetric() {
        for role in Role::ALL {
            assert_eq!(role.peer().peer(), role);
            assert_ne!(role.peer().netns_host(), role.netns_host());
        }
    }
}
