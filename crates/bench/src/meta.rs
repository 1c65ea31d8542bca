//! `meta.json`: everything about a run that is not a measurement (suite, scale, command,
//! machine, lab, calibration, notes), so that `poolcap bench report` can rebuild the summary,
//! the figures and BENCHMARKS.md from a result directory without rerunning it.

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::report::Machine;
use super::setup::{Calibration, Scale, Suite};

/// A run's description.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    /// The suite.
    pub suite: Suite,
    /// Its scale.
    pub scale: Scale,
    /// Runs per point and subject.
    pub runs: usize,
    /// rps_cpus of the probe set to the tool's CPU.
    pub rps: bool,
    /// The exact command line.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// Versions of the peer programs (first line of their `--version`).
    pub versions: Vec<String>,
    /// The sender's interface.
    pub sender_iface: String,
    /// The probe's interface.
    pub probe_iface: String,
    /// Receive queues of the lab.
    pub queues: u16,
    /// What was calibrated.
    pub calibration: Calibration,
    /// The scratch disk's sustained rates, direct and through the page cache, when a point
    /// needs them (`poolcap calibrate`'s disk stage; `bench predict`'s long writing point).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<poolcap_doctor::profile::Disk>,
    /// Notes from the run (skipped subjects, calibration).
    pub notes: Vec<String>,
    /// Unix time the run started.
    pub started: u64,
    /// Unix time it ended.
    pub finished: Option<u64>,
    /// Whether it was interrupted.
    pub interrupted: bool,
    /// Whether perf was there to count syscalls.
    pub perf: bool,
}

impl Meta {
    /// Reads `dir/meta.json`.
    pub fn read(dir: &Path) -> anyhow::Result<Meta> {
        let p = dir.join("meta.json");
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{}", p.display()))
    }

    /// Writes `dir/meta.json`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        let p = dir.join("meta.json");
        std::fs::write(&p, serde_json::to_string_pretty(self)? + "\n")
            .with_context(|| format!("cannot write {}", p.display()))
    }

    /// `poolcap bench SUITE (quick)`.
    pub fn title(&self) -> String {
        match self.scale {
            Scale::Full => format!("poolcap bench {}", self.suite.name()),
            s => format!("poolcap bench {} ({})", self.suite.name(), s.name()),
        }
    }

    /// Wall minutes the run took.
    pub fn minutes(&self) -> Option<f64> {
        Some(self.finished?.saturating_sub(self.started) as f64 / 60.0)
    }
}

/// First line of `PROGRAM --version` (or `-v`), for the programs that are installed.
pub fn versions(programs: &[(&str, &str)]) -> Vec<String> {
    programs
        .iter()
        .filter_map(|(p, flag)| {
            let out = std::process::Command::new(p).arg(flag).output().ok()?;
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
            Some(line.to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let m = Meta {
            suite: Suite::Rates,
            scale: Scale::Quick,
            runs: 3,
            rps: false,
            command: "poolcap bench rates --quick".into(),
            machine: Machine::read(),
            versions: vec!["tcpdump version 4.99".into()],
            sender_iface: "snd0".into(),
            probe_iface: "prb0".into(),
            queues: 2,
            calibration: Calibration {
                ns_per_iteration: 1.4,
                top_pps: None,
                disk_mb_s: None,
            },
            disk: Some(poolcap_doctor::profile::Disk {
                dir: "/var/tmp".into(),
                direct_bytes_per_s: Some(2e9),
                buffered_bytes_per_s: None,
                dirty_limit_bytes: Some(2.2e9),
            }),
            notes: vec![],
            started: 100,
            finished: Some(400),
            interrupted: false,
            perf: true,
        };
        m.write(dir.path()).unwrap();
        let back = Meta::read(dir.path()).unwrap();
        assert_eq!(back.suite, Suite::Rates);
        assert_eq!(back.title(), "poolcap bench rates (quick)");
        assert_eq!(back.minutes(), Some(5.0));
        assert!(Meta::read(&dir.path().join("none")).is_err());
        assert!(versions(&[("no-such-program-here", "--version")]).is_empty());
        let v = versions(&[("true", "--version")]);
        assert!(v.len() == 1 && v[0].contains("true"), "{v:?}");
    }
}
