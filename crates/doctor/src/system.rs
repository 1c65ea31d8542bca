//! The one layer through which the checks see the machine: files under /proc and /sys,
//! directory listings, symlink targets and the output of read-only commands (`ethtool -g`).
//!
//! Why a trait: the checks are rules over kernel settings, and a rule is only trustworthy if
//! it is tested against the cases this machine does not happen to have (a NIC with 4096-slot
//! rings, a `powersave` governor, IRQs on the capture CPU). [`FakeSystem`] is that tree, in
//! memory; [`RealSystem`] reads the running kernel. Nothing here writes.

use std::collections::BTreeMap;
use std::process::Command;

/// Read-only access to kernel state.
pub trait System {
    /// A file's content, trimmed; `None` if it cannot be read.
    fn read(&self, path: &str) -> Option<String>;
    /// Names in a directory, sorted; empty if it cannot be listed.
    fn list(&self, dir: &str) -> Vec<String>;
    /// The last component of a symlink's target (`.../drivers/ixgbe` gives `ixgbe`).
    fn link_name(&self, path: &str) -> Option<String>;
    /// Standard output of a read-only command that succeeded; `None` if it is missing or
    /// failed.
    fn run(&self, program: &str, args: &[&str]) -> Option<String>;
}

/// The running kernel, in the current network namespace.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealSystem;

impl System for RealSystem {
    fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(path)
            .ok()
            .map(|s| s.trim().to_owned())
    }

    fn list(&self, dir: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    fn link_name(&self, path: &str) -> Option<String> {
        let target = std::fs::read_link(path).ok()?;
        Some(target.file_name()?.to_string_lossy().into_owned())
    }

    fn run(&self, program: &str, args: &[&str]) -> Option<String> {
        let out = Command::new(program).args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// An in-memory tree for tests: files, symlink names and command outputs. A directory
/// listing is derived from the files (and links) below it.
#[derive(Debug, Default, Clone)]
pub struct FakeSystem {
    files: BTreeMap<String, String>,
    links: BTreeMap<String, String>,
    commands: BTreeMap<String, String>,
}

impl FakeSystem {
    /// An empty machine: nothing readable.
    pub fn new() -> FakeSystem {
        FakeSystem::default()
    }

    /// Adds a file.
    pub fn file(mut self, path: &str, content: &str) -> FakeSystem {
        self.files.insert(path.to_owned(), content.to_owned());
        self
    }

    /// Adds a symlink whose target ends in `name`.
    pub fn link(mut self, path: &str, name: &str) -> FakeSystem {
        self.links.insert(path.to_owned(), name.to_owned());
        self
    }

    /// Adds the output of `program args...` (joined by spaces).
    pub fn command(mut self, line: &str, stdout: &str) -> FakeSystem {
        self.commands.insert(line.to_owned(), stdout.to_owned());
        self
    }
}

impl System for FakeSystem {
    fn read(&self, path: &str) -> Option<String> {
        self.files.get(path).map(|s| s.trim().to_owned())
    }

    fn list(&self, dir: &str) -> Vec<String> {
        let prefix = format!("{}/", dir.trim_end_matches('/'));
        let mut v: Vec<String> = self
            .files
            .keys()
            .chain(self.links.keys())
            .filter_map(|p| p.strip_prefix(&prefix))
            .filter_map(|rest| rest.split('/').next())
            .map(str::to_owned)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    fn link_name(&self, path: &str) -> Option<String> {
        self.links.get(path).cloned()
    }

    fn run(&self, program: &str, args: &[&str]) -> Option<String> {
        let mut line = program.to_owned();
        for a in args {
            line.push(' ');
            line.push_str(a);
        }
        self.commands.get(&line).cloned()
    }
}

/// Parses a CPU list as the kernel writes it (`0-3,8,10-11`).
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                v.extend(a..=b);
            }
            None => v.push(part.trim().parse().ok()?),
        }
    }
    Some(v)
}

/// Parses a CPU mask as the kernel writes it (`ff`, `00000000,00000003`).
pub fn parse_cpu_mask(s: &str) -> Option<Vec<usize>> {
    let mut v = Vec::new();
    let words: Vec<&str> = s.trim().split(',').collect();
    for (i, w) in words.iter().rev().enumerate() {
        let bits = u32::from_str_radix(w, 16).ok()?;
        v.extend((0..32).filter(|b| bits >> b & 1 == 1).map(|b| i * 32 + b));
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_and_masks_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("0-2,5"), Some(vec![0, 1, 2, 5]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(parse_cpu_mask("0"), Some(vec![]));
        assert_eq!(parse_cpu_mask("5"), Some(vec![0, 2]));
        assert_eq!(parse_cpu_mask("00000001,00000002"), Some(vec![1, 32]));
        assert_eq!(parse_cpu_mask("zz"), None);
    }

    #[test]
    fn the_fake_lists_directories_from_its_files() {
        let f = FakeSystem::new()
            .file("/sys/class/net/e/queues/rx-0/rps_cpus", "0")
            .file("/sys/class/net/e/queues/rx-1/rps_cpus", "0")
            .link("/sys/class/net/e/device/driver", "ixgbe")
            .command("ethtool -g e", "out");
        assert_eq!(f.list("/sys/class/net/e/queues"), ["rx-0", "rx-1"]);
        assert_eq!(f.list("/sys/class/net/e/device"), ["driver"]);
        assert_eq!(
            f.link_name("/sys/class/net/e/device/driver").unwrap(),
            "ixgbe"
        );
        assert_eq!(f.run("ethtool", &["-g", "e"]).unwrap(), "out");
        assert_eq!(f.run("ethtool", &["-l", "e"]), None);
    }

    #[test]
    fn the_real_system_reads_this_kernel() {
        let s = RealSystem;
        assert!(s.read("/proc/sys/net/core/rmem_max").is_some());
        assert!(s.list("/sys/class/net").contains(&"lo".to_owned()));
        assert_eq!(s.read("/nonexistent/file"), None);
        assert_eq!(s.run("/nonexistent/program", &[]), None);
    }
}
