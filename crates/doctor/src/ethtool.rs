//! Reading `ethtool`'s text output: ring sizes (`-g`), channel counts (`-l`), offload
//! features (`-k`) and the driver name (`-i`).
//!
//! Why parse text rather than speak ethtool netlink: the program is on every machine that
//! tunes NICs, its output format has been stable for a decade, and going through
//! [`System::run`] keeps the NIC checks testable on a fake. `n/a` means the driver does not
//! report the value.

use crate::system::System;

/// A pre-set maximum and the current setting of one parameter (`None`: n/a).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MaxCurrent {
    /// The hardware's maximum.
    pub max: Option<u64>,
    /// The current setting.
    pub current: Option<u64>,
}

/// `ethtool -g` or `-l`: parameter name (`RX`, `Combined`) to maximum and current.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Params(Vec<(String, MaxCurrent)>);

impl Params {
    /// The named parameter (`RX`, `TX`, `Combined`).
    pub fn get(&self, name: &str) -> MaxCurrent {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
            .unwrap_or_default()
    }
}

/// Parses the two sections of `ethtool -g`/`-l` output.
pub fn parse_params(text: &str) -> Params {
    let mut out: Vec<(String, MaxCurrent)> = Vec::new();
    let mut in_current = None;
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with("Pre-set maximums") {
            in_current = Some(false);
            continue;
        }
        if l.starts_with("Current hardware settings") {
            in_current = Some(true);
            continue;
        }
        let (Some(current), Some((name, value))) = (in_current, l.split_once(':')) else {
            continue;
        };
        let value = value.trim().parse::<u64>().ok();
        let name = name.trim();
        let idx = match out.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None => {
                out.push((name.to_owned(), MaxCurrent::default()));
                out.len() - 1
            }
        };
        if current {
            out[idx].1.current = value;
        } else {
            out[idx].1.max = value;
        }
    }
    Params(out)
}

/// One offload feature from `ethtool -k`: on or off, and whether the driver fixes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feature {
    /// Enabled.
    pub on: bool,
    /// `[fixed]`: cannot be changed.
    pub fixed: bool,
}

/// The named feature (`generic-receive-offload`) in `ethtool -k` output.
pub fn feature(text: &str, name: &str) -> Option<Feature> {
    text.lines().find_map(|l| {
        let (n, v) = l.trim().split_once(':')?;
        (n.trim() == name).then(|| Feature {
            on: v.trim().starts_with("on"),
            fixed: v.contains("[fixed]"),
        })
    })
}

/// The driver name from `ethtool -i`.
pub fn driver(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("driver:"))
        .map(|d| d.trim().to_owned())
        .filter(|d| !d.is_empty())
}

/// Runs `ethtool FLAG IF` through `sys`.
pub fn query(sys: &dyn System, flag: &str, iface: &str) -> Option<String> {
    sys.run("ethtool", &[flag, iface])
}

#[cfg(test)]
pub(crate) mod samples {
    /// `ethtool -g` of an ixgbe port with small rings.
    pub(crate) const RING_IXGBE: &str = "Ring parameters for eth1:
Pre-set maximums:
RX:		4096
RX Mini:	n/a
RX Jumbo:	n/a
TX:		4096
Current hardware settings:
RX:		512
RX Mini:	n/a
RX Jumbo:	n/a
TX:		512
";
    /// `ethtool -l` of the same port, 4 of 63 combined channels.
    pub(crate) const CHANNELS_IXGBE: &str = "Channel parameters for eth1:
Pre-set maximums:
RX:		n/a
TX:		n/a
Other:		1
Combined:	63
Current hardware settings:
RX:		n/a
TX:		n/a
Other:		1
Combined:	4
";
    /// `ethtool -k` excerpt with GRO and LRO on.
    pub(crate) const FEATURES_LRO: &str = "Features for eth1:
rx-checksumming: on
tcp-segmentation-offload: on
generic-segmentation-offload: on
generic-receive-offload: on
large-receive-offload: on
";
    /// `ethtool -k` excerpt of veth: GRO off, LRO fixed off.
    pub(crate) const FEATURES_VETH: &str = "Features for prb0:
tcp-segmentation-offload: on
generic-segmentation-offload: on
generic-receive-offload: off
large-receive-offload: off [fixed]
";
}

#[cfg(test)]
mod tests {
    use super::samples::*;
    use super::*;

    #[test]
    fn ring_and_channel_sections_parse_with_na() {
        let g = parse_params(RING_IXGBE);
        assert_eq!(
            g.get("RX"),
            MaxCurrent {
                max: Some(4096),
                current: Some(512)
            }
        );
        assert_eq!(g.get("RX Mini"), MaxCurrent::default());
        let l = parse_params(CHANNELS_IXGBE);
        assert_eq!(l.get("Combined").max, Some(63));
        assert_eq!(l.get("Combined").current, Some(4));
        assert_eq!(l.get("RX").current, None);
        assert_eq!(parse_params("garbage\n:::"), Params::default());
    }

    #[test]
    fn features_and_driver_parse() {
        assert_eq!(
            feature(FEATURES_LRO, "large-receive-offload"),
            Some(Feature {
                on: true,
                fixed: false
            })
        );
        assert_eq!(
            feature(FEATURES_VETH, "large-receive-offload"),
            Some(Feature {
                on: false,
                fixed: true
            })
        );
        assert_eq!(feature(FEATURES_VETH, "no-such-feature"), None);
        assert_eq!(
            driver("driver: veth\nversion: 1.0\n").as_deref(),
            Some("veth")
        );
        assert_eq!(driver("driver: \n"), None);
    }
}
