//! `capture -D` (tcpdump's `--list-interfaces`): the interfaces a capture can name with `-i`,
//! in this network namespace, numbered by interface index, with their state and receive
//! queues (one capture thread per queue by default).

use poolcap_sys::netdev;

const IFF_UP: u32 = 0x1;
const IFF_LOOPBACK: u32 = 0x8;

/// One interface as `-D` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Iface {
    index: u32,
    name: String,
    flags: u32,
    carrier: bool,
    rx_queues: usize,
}

impl Iface {
    fn line(&self) -> String {
        let mut state = Vec::new();
        if self.flags & IFF_UP != 0 {
            state.push("Up");
        }
        if self.carrier {
            state.push("Running");
        }
        if self.flags & IFF_LOOPBACK != 0 {
            state.push("Loopback");
        }
        format!(
            "{}.{} [{}] ({} rx queue{})",
            self.index,
            self.name,
            state.join(", "),
            self.rx_queues,
            if self.rx_queues == 1 { "" } else { "s" }
        )
    }
}

fn read_hex_or_dec(s: &str) -> Option<u32> {
    match s.trim().strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => s.trim().parse().ok(),
    }
}

/// The interfaces of /sys/class/net, by index.
fn interfaces() -> std::io::Result<Vec<Iface>> {
    let mut list = Vec::new();
    for entry in std::fs::read_dir("/sys/class/net")? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let read = |what: &str| {
            std::fs::read_to_string(format!("/sys/class/net/{name}/{what}"))
                .ok()
                .and_then(|s| read_hex_or_dec(&s))
        };
        // bonding_masters and similar files are not interfaces: they have no index.
        let Some(index) = read("ifindex") else {
            continue;
        };
        list.push(Iface {
            index,
            flags: read("flags").unwrap_or(0),
            // The kernel's IFF_RUNNING, which sysfs `flags` leaves out.
            carrier: read("carrier") == Some(1),
            rx_queues: netdev::rx_queues(&name),
            name,
        });
    }
    list.sort_by_key(|i| i.index);
    Ok(list)
}

/// Prints the interfaces, one per line, as `capture -D` does.
pub(super) fn print() -> anyhow::Result<()> {
    for i in interfaces()? {
        println!("{}", i.line());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_listed_first_and_described() {
        let list = interfaces().expect("sysfs");
        let lo = list.iter().find(|i| i.name == "lo").expect("lo");
        assert!(lo.line().contains("Loopback"), "{}", lo.line());
        assert!(list.windows(2).all(|w| w[0].index < w[1].index), "{list:?}");
    }

    #[test]
    fn a_line_reads_like_tcpdumps() {
        let i = Iface {
            index: 2,
            name: "prb0".into(),
            flags: IFF_UP,
            carrier: true,
            rx_queues: 2,
        };
        assert_eq!(i.line(), "2.prb0 [Up, Running] (2 rx queues)");
        assert_eq!(read_hex_or_dec("0x1003\n"), Some(0x1003));
    }
}
