//! Memory the capture buffers need: the locked-memory limit (an AF_XDP UMEM is charged to
//! RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK) and huge pages (pools of tens of MiB
//! per queue touch fewer TLB entries on 2 MiB pages; transparent huge pages give them
//! without reserving any).

use super::{Finding, Status};
use crate::system::System;

/// Pool memory of one queue at poolcap's defaults: 64 chunks of 256 cells of 2 KiB.
pub const DEFAULT_POOL_BYTES: u64 = 64 * 256 * 2048;

/// The locked-memory limit and huge pages.
pub fn check(sys: &dyn System) -> Vec<Finding> {
    vec![memlock(sys), hugepages(sys)]
}

fn memlock(sys: &dyn System) -> Finding {
    let check = "locked memory limit";
    let why = "an AF_XDP UMEM (the pool) is locked memory: a process without CAP_IPC_LOCK \
               cannot register more than this limit, and AF_XDP fails to start";
    let soft = sys.read("/proc/self/limits").and_then(|t| {
        t.lines()
            .find(|l| l.starts_with("Max locked memory"))
            .and_then(|l| l.split_whitespace().nth(3).map(str::to_owned))
    });
    match soft.as_deref() {
        None => Finding::ok(check, "not readable (/proc/self/limits)", why),
        Some("unlimited") => Finding::ok(check, "unlimited (/proc/self/limits)", why),
        Some(v) => match v.parse::<u64>() {
            Ok(b) if b >= DEFAULT_POOL_BYTES => {
                Finding::ok(check, format!("{b} bytes (/proc/self/limits)"), why)
            }
            Ok(b) => Finding::needs(
                Status::Warn,
                check,
                format!(
                    "{b} bytes (/proc/self/limits), less than one default pool ({DEFAULT_POOL_BYTES}); root has CAP_IPC_LOCK and is not limited"
                ),
                why,
                "ulimit -l unlimited (or run as root)",
            ),
            Err(_) => Finding::ok(check, format!("`{v}` (/proc/self/limits)"), why),
        },
    }
}

fn meminfo(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

fn hugepages(sys: &dyn System) -> Finding {
    let check = "hugepages";
    let why = "pools of tens of MiB per queue on 4 KiB pages miss the TLB on every chunk; \
               huge pages (reserved or transparent) avoid it";
    let total = sys
        .read("/proc/meminfo")
        .and_then(|m| meminfo(&m, "HugePages_Total"));
    let thp = sys.read("/sys/kernel/mm/transparent_hugepage/enabled");
    // The active THP mode is the bracketed one: `always [madvise] never`.
    let mode = thp.as_deref().and_then(|t| {
        let start = t.find('[')?;
        let end = t[start..].find(']')?;
        Some(t[start + 1..start + end].to_owned())
    });
    let evidence = format!(
        "{} reserved (/proc/meminfo HugePages_Total); transparent: {} (/sys/kernel/mm/transparent_hugepage/enabled)",
        total.map_or("?".to_owned(), |t| t.to_string()),
        mode.as_deref().unwrap_or("?")
    );
    match (total, mode.as_deref()) {
        (Some(0), Some("never")) => Finding::needs(
            Status::Warn,
            check,
            evidence,
            why,
            "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled",
        ),
        _ => Finding::ok(check, evidence, why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::FakeSystem;

    const LIMITS: &str = "Limit                     Soft Limit           Hard Limit           Units
Max open files            1024                 4096                 files
Max locked memory         8388608              8388608              bytes
";

    #[test]
    fn a_small_memlock_limit_warns_and_unlimited_passes() {
        let v = check(&FakeSystem::new().file("/proc/self/limits", LIMITS));
        assert_eq!(v[0].status, Status::Warn);
        assert!(v[0].evidence.starts_with("8388608 bytes"));
        let unl = LIMITS.replace("8388608              8388608", "unlimited unlimited");
        let v = check(&FakeSystem::new().file("/proc/self/limits", &unl));
        assert_eq!(v[0].status, Status::Ok);
        assert!(v[0].evidence.starts_with("unlimited"));
    }

    #[test]
    fn hugepages_warn_only_when_neither_reserved_nor_transparent() {
        let sys = |total: &str, thp: &str| {
            FakeSystem::new()
                .file(
                    "/proc/meminfo",
                    &format!("MemTotal: 100 kB\nHugePages_Total:    {total}\n"),
                )
                .file("/sys/kernel/mm/transparent_hugepage/enabled", thp)
        };
        let v = check(&sys("0", "always madvise [never]"));
        assert_eq!(v[1].status, Status::Warn);
        assert!(v[1].evidence.contains("transparent: never"));
        assert_eq!(
            check(&sys("0", "always [madvise] never"))[1].status,
            Status::Ok
        );
        assert_eq!(
            check(&sys("512", "always madvise [never]"))[1].status,
            Status::Ok
        );
    }
}
