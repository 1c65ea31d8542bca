//! Where the kernel's receive work runs, against the CPUs the capture threads use: IRQ
//! affinity of the NIC's interrupts, RPS (receive steering) and XPS masks; and the CPU
//! frequency governor.
//!
//! The lab measured what sharing costs (docs/design.md): with the capture interface's RPS on the
//! capture core, tcpdump lost 3-40% at 1514-byte top speed where it lost nothing otherwise.
//! So receive work belongs on other CPUs than the capture threads. Without `--cpus` the
//! capture threads are not pinned and the scheduler moves them away: nothing to judge.

use super::{Finding, Status};
use crate::system::{parse_cpu_list, parse_cpu_mask, System};

/// IRQ affinity and RPS/XPS of `iface` against `capture_cpus`.
pub fn check_interface(
    sys: &dyn System,
    iface: &str,
    capture_cpus: Option<&[usize]>,
) -> Vec<Finding> {
    vec![
        irqs(sys, iface, capture_cpus),
        steering(sys, iface, "rx-", "rps_cpus", "rps", capture_cpus),
        steering(sys, iface, "tx-", "xps_cpus", "xps", capture_cpus),
    ]
}

fn list(v: &[usize]) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

fn overlap(a: &[usize], b: &[usize]) -> Vec<usize> {
    a.iter().copied().filter(|c| b.contains(c)).collect()
}

/// The NIC's interrupt numbers: its MSI vectors (the PCI device's, also for virtio, whose
/// net device hangs below the PCI one), else lines of /proc/interrupts naming `iface`.
fn irq_numbers(sys: &dyn System, iface: &str) -> Vec<String> {
    let dev = format!("/sys/class/net/{iface}/device");
    let msi = sys.list(&format!("{dev}/msi_irqs"));
    if !msi.is_empty() {
        return msi;
    }
    let parent = sys.list(&format!("{dev}/../msi_irqs"));
    if !parent.is_empty() {
        return parent;
    }
    sys.read("/proc/interrupts")
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .last()
                .is_some_and(|n| n == iface || n.starts_with(&format!("{iface}-")))
        })
        .filter_map(|l| l.split(':').next().map(|n| n.trim().to_owned()))
        .collect()
}

fn irqs(sys: &dyn System, iface: &str, capture_cpus: Option<&[usize]>) -> Finding {
    let check = format!("{iface} irq affinity");
    let why = "the CPU an interrupt lands on runs the NIC's receive work (NAPI); on a \
               capture thread's CPU it takes that thread's time, and the ring overflows";
    let numbers = irq_numbers(sys, iface);
    if numbers.is_empty() {
        return Finding::ok(check, "no interrupts (a virtual device)", why);
    }
    let mut irq_cpus: Vec<usize> = Vec::new();
    let mut shown = Vec::new();
    for n in &numbers {
        let cpus = sys
            .read(&format!("/proc/irq/{n}/smp_affinity_list"))
            .and_then(|s| parse_cpu_list(&s))
            .unwrap_or_default();
        shown.push(format!("{n}→{}", list(&cpus)));
        irq_cpus.extend(cpus);
    }
    irq_cpus.sort_unstable();
    irq_cpus.dedup();
    let evidence = format!(
        "irq→cpus {} (/proc/irq/N/smp_affinity_list)",
        shown.join(" ")
    );
    match capture_cpus {
        Some(cap) if !overlap(&irq_cpus, cap).is_empty() => {
            let free: Vec<String> = irq_cpus
                .iter()
                .filter(|c| !cap.contains(c))
                .map(usize::to_string)
                .collect();
            let target = if free.is_empty() {
                "CPUS_WITHOUT_CAPTURE".to_owned()
            } else {
                free.join(",")
            };
            Finding::needs(
                Status::Warn,
                check,
                format!(
                    "{evidence}; shares CPUs {} with capture",
                    list(&overlap(&irq_cpus, cap))
                ),
                why,
                format!(
                    "for n in {}; do echo {target} > /proc/irq/$n/smp_affinity_list; done",
                    numbers.join(" ")
                ),
            )
        }
        _ => Finding::ok(check, evidence, why),
    }
}

fn steering(
    sys: &dyn System,
    iface: &str,
    prefix: &str,
    file: &str,
    short: &str,
    capture_cpus: Option<&[usize]>,
) -> Finding {
    let check = format!("{iface} {short}");
    let why = if short == "rps" {
        "RPS moves receive work of each rx queue to the CPUs in rps_cpus; on a capture \
         thread's CPU it takes most of that CPU at high rates and the capture loses what \
         it cannot read in the rest (veth lab, 512 B frames at top speed, 3 runs each: \
         poolcap writing lost 6-9% with a 2 MiB ring, 1-14% with 8-16 MiB, 8-26% with 32 \
         MiB; tcpdump 26-39%); where it must stay there, a ring of a few MiB (-B, and \
         --pool when only writing) loses less than a large one"
    } else {
        "XPS picks the tx queue by sending CPU; it matters for capture only through \
         locally sent traffic"
    };
    let queues: Vec<String> = sys
        .list(&format!("/sys/class/net/{iface}/queues"))
        .into_iter()
        .filter(|q| q.starts_with(prefix))
        .collect();
    let mut steered: Vec<usize> = Vec::new();
    let mut shown = Vec::new();
    for q in &queues {
        if let Some(cpus) = sys
            .read(&format!("/sys/class/net/{iface}/queues/{q}/{file}"))
            .and_then(|m| parse_cpu_mask(&m))
        {
            shown.push(format!(
                "{q}:{}",
                if cpus.is_empty() {
                    "-".to_owned()
                } else {
                    list(&cpus)
                }
            ));
            steered.extend(cpus);
        }
    }
    if shown.is_empty() {
        return Finding::ok(check, format!("no {file} readable"), why);
    }
    steered.sort_unstable();
    steered.dedup();
    let evidence = format!(
        "{} (/sys/class/net/{iface}/queues/*/{file})",
        shown.join(" ")
    );
    match capture_cpus {
        Some(cap) if short == "rps" && !overlap(&steered, cap).is_empty() => Finding::needs(
            Status::Bad,
            check,
            format!(
                "{evidence}; steers to capture CPUs {}",
                list(&overlap(&steered, cap))
            ),
            why,
            format!("for f in /sys/class/net/{iface}/queues/rx-*/rps_cpus; do echo 0 > $f; done"),
        ),
        _ => Finding::ok(check, evidence, why),
    }
}

/// The frequency governor of every CPU that has one.
pub fn check_governor(sys: &dyn System) -> Vec<Finding> {
    let check = "cpu frequency governor";
    let why = "a power-saving governor clocks down between bursts, so the first frames of \
               each burst meet a slow CPU";
    let mut govs: Vec<(String, String)> = sys
        .list("/sys/devices/system/cpu")
        .into_iter()
        .filter(|c| {
            c.strip_prefix("cpu")
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter_map(|c| {
            let g = sys.read(&format!(
                "/sys/devices/system/cpu/{c}/cpufreq/scaling_governor"
            ))?;
            Some((c, g))
        })
        .collect();
    govs.sort();
    if govs.is_empty() {
        return vec![Finding::ok(
            check,
            "no cpufreq (/sys/devices/system/cpu/cpu*/cpufreq): fixed clock or a VM",
            why,
        )];
    }
    let slow: Vec<String> = govs
        .iter()
        .filter(|(_, g)| g != "performance")
        .map(|(c, g)| format!("{c}:{g}"))
        .collect();
    if slow.is_empty() {
        return vec![Finding::ok(check, "performance on every CPU", why)];
    }
    let status = if slow.iter().any(|s| s.ends_with(":powersave")) {
        Status::Bad
    } else {
        Status::Warn
    };
    vec![Finding::needs(
        status,
        check,
        format!(
            "{} (/sys/devices/system/cpu/cpuN/cpufreq/scaling_governor)",
            slow.join(" ")
        ),
        why,
        "cpupower frequency-set -g performance",
    )]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::FakeSystem;

    fn nic() -> FakeSystem {
        FakeSystem::new()
            .file("/sys/class/net/eth1/device/msi_irqs/40", "msix")
            .file("/sys/class/net/eth1/device/msi_irqs/41", "msix")
            .file("/proc/irq/40/smp_affinity_list", "0")
            .file("/proc/irq/41/smp_affinity_list", "1")
            .file("/sys/class/net/eth1/queues/rx-0/rps_cpus", "00000000")
            .file("/sys/class/net/eth1/queues/rx-1/rps_cpus", "2")
            .file("/sys/class/net/eth1/queues/tx-0/xps_cpus", "1")
    }

    #[test]
    fn irqs_on_a_capture_cpu_are_moved_to_the_others() {
        let v = check_interface(&nic(), "eth1", Some(&[1]));
        assert_eq!(v[0].status, Status::Warn);
        assert!(v[0].evidence.contains("40→0 41→1"), "{}", v[0].evidence);
        assert_eq!(
            v[0].fix,
            "for n in 40 41; do echo 0 > /proc/irq/$n/smp_affinity_list; done"
        );
        assert_eq!(v[1].status, Status::Bad, "rps steers rx-1 to CPU 1");
        assert!(
            v[1].evidence.starts_with("rx-0:- rx-1:1"),
            "{}",
            v[1].evidence
        );
        assert_eq!(v[2].status, Status::Ok);
    }

    #[test]
    fn unpinned_capture_or_other_cpus_pass() {
        assert!(check_interface(&nic(), "eth1", None)
            .iter()
            .all(|f| f.status == Status::Ok));
        let v = check_interface(&nic(), "eth1", Some(&[3]));
        assert!(v.iter().all(|f| f.status == Status::Ok), "{v:#?}");
    }

    #[test]
    fn irqs_are_found_by_name_when_there_are_no_msi_vectors() {
        let sys = FakeSystem::new()
            .file(
                "/proc/interrupts",
                "           CPU0       CPU1\n 30:   5   6   PCI-MSI 1-edge   eth2-TxRx-0\n 31:   1   1   PCI-MSI 2-edge   eth20\n",
            )
            .file("/proc/irq/30/smp_affinity_list", "0-1");
        let v = check_interface(&sys, "eth2", Some(&[0]));
        assert_eq!(v[0].status, Status::Warn);
        assert!(v[0].fix.starts_with("for n in 30;"), "{}", v[0].fix);
        assert!(v[0].fix.contains("echo 1 >"), "{}", v[0].fix);
        let none = check_interface(&FakeSystem::new(), "veth0", Some(&[0]));
        assert!(none[0].evidence.starts_with("no interrupts"));
    }

    #[test]
    fn governors_other_than_performance_are_flagged() {
        let sys = FakeSystem::new()
            .file(
                "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
                "performance",
            )
            .file(
                "/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
                "powersave",
            )
            .file("/sys/devices/system/cpu/online", "0-1");
        let g = &check_governor(&sys)[0];
        assert_eq!(g.status, Status::Bad);
        assert_eq!(g.evidence.split(' ').next(), Some("cpu1:powersave"));
        assert_eq!(g.fix, "cpupower frequency-set -g performance");
        let vm = &check_governor(&FakeSystem::new())[0];
        assert_eq!(vm.status, Status::Ok);
    }
}
