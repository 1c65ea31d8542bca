//! How much memory this process may still take: the smaller of the machine's `MemAvailable`
//! and the room left under every memory cgroup limit on the way to the root (cgroup v2
//! `memory.max`, v1 `memory.limit_in_bytes`). A capture sizes its pools against this before it
//! allocates, so a pool too large for a container is refused with a message instead of the
//! OOM killer ending the process later.
//!
//! The cgroup files must be visible: `ip netns exec` mounts a fresh /sys without the cgroup
//! hierarchies, so there (as in the lab) only `MemAvailable` counts.

use std::path::{Path, PathBuf};

/// Bytes this process can still allocate, if anything says.
pub fn available() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let machine = meminfo.as_deref().and_then(mem_available);
    let cgroup = cgroup_dirs(&cgroups, &mounts)
        .into_iter()
        .filter_map(|(dir, v2)| room_under(&dir, v2))
        .min();
    match (machine, cgroup) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `MemAvailable` of /proc/meminfo, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// The directories of this process's memory cgroup (v2, and v1 `memory` controller), with a
/// flag saying which is v2, from /proc/self/cgroup and the mount points in mountinfo.
fn cgroup_dirs(cgroups: &str, mountinfo: &str) -> Vec<(PathBuf, bool)> {
    let mut dirs = Vec::new();
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let v2 = controllers.is_empty();
        if !v2 && !controllers.split(',').any(|c| c == "memory") {
            continue;
        }
        if let Some((mount, root)) = mount_of(mountinfo, v2) {
            // Inside a cgroup namespace the path is relative to the mount's root.
            let rel = path.strip_prefix(root.as_str()).unwrap_or(path);
            dirs.push((mount.join(rel.trim_start_matches('/')), v2));
        }
    }
    dirs
}

/// Where the cgroup2 hierarchy (v2) or the v1 memory controller is mounted, with the mount's
/// root within the hierarchy.
fn mount_of(mountinfo: &str, v2: bool) -> Option<(PathBuf, String)> {
    mountinfo.lines().find_map(|l| {
        // mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS... - FSTYPE SOURCE SUPEROPTS
        let (left, right) = l.split_once(" - ")?;
        let f: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        let ok = if v2 {
            r.first() == Some(&"cgroup2")
        } else {
            r.first() == Some(&"cgroup") && r.get(2)?.split(',').any(|o| o == "memory")
        };
        if !ok {
            return None;
        }
        Some((PathBuf::from(f.get(4)?), f.get(3)?.to_string()))
    })
}

/// The least room left under a limit, over `dir` and its ancestors up to the mount.
fn room_under(dir: &Path, v2: bool) -> Option<u64> {
    let (limit, usage) = if v2 {
        ("memory.max", "memory.current")
    } else {
        ("memory.limit_in_bytes", "memory.usage_in_bytes")
    };
    let read = |d: &Path, f: &str| -> Option<u64> {
        std::fs::read_to_string(d.join(f)).ok()?.trim().parse().ok()
    };
    // A v2 cgroup without the memory controller enabled has no memory.max: look further up.
    dir.ancestors()
        .filter_map(|d| {
            // "max" (v2) does not parse: no limit here. v1 writes "no limit" as a huge number.
            let max = read(d, limit)?;
            Some(max.saturating_sub(read(d, usage).unwrap_or(0)))
        })
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
33 25 0:29 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
34 25 0:30 / /sys/fs/cgroup/cpu rw,nosuid - cgroup cgroup rw,cpu
";

    #[test]
    fn finds_v1_and_v2_memory_cgroups() {
        let cgroups = "4:memory:/jobs/a\n1:cpu:/\n0::/user.slice/x.scope\n";
        assert_eq!(
            cgroup_dirs(cgroups, MOUNTINFO),
            vec![
                (PathBuf::from("/sys/fs/cgroup/memory/jobs/a"), false),
                (
                    PathBuf::from("/sys/fs/cgroup/unified/user.slice/x.scope"),
                    true
                ),
            ]
        );
    }

    #[test]
    fn room_is_the_tightest_limit_minus_usage_up_the_tree() {
        let root = tempfile::tempdir().expect("tempdir");
        let child = root.path().join("a/b");
        std::fs::create_dir_all(&child).expect("dirs");
        let put = |d: &Path, f: &str, v: &str| std::fs::write(d.join(f), v).expect("write");
        put(root.path(), "memory.max", "max");
        put(&root.path().join("a"), "memory.max", "1000");
        put(&root.path().join("a"), "memory.current", "400");
        put(&child, "memory.max", "max");
        put(&child, "memory.current", "100");
        assert_eq!(room_under(&child, true), Some(600));
    }

    #[test]
    fn reads_mem_available() {
        assert_eq!(
            mem_available("MemTotal: 10 kB\nMemAvailable:    2048 kB\n"),
            Some(2048 * 1024)
        );
        assert_eq!(mem_available("MemTotal: 10 kB\n"), None);
    }
}
