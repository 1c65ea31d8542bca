//! The flow exporters `poolcap bench export` compares, each started the way its manual says
//! in the lab's probe host, exporting IPFIX to one collector: `poolcap probe --ipfix`,
//! softflowd (`-v 10`) and pmacctd with its nfprobe plugin (`nfprobe_version: 10`). Each
//! gets a flow table large enough for every flow of the run, so a difference in loss is the
//! tool's and not a table size chosen for it.

use std::path::Path;
use std::process::Command;

use anyhow::Context;

/// A flow exporter under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowExporter {
    /// `poolcap probe --ipfix` with one rule `ip` and the flows action.
    Poolcap,
    /// softflowd.
    Softflowd,
    /// pmacctd with the nfprobe plugin.
    Pmacct,
}

impl FlowExporter {
    /// Every exporter, in run order.
    pub const ALL: [FlowExporter; 3] = [
        FlowExporter::Poolcap,
        FlowExporter::Softflowd,
        FlowExporter::Pmacct,
    ];

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            FlowExporter::Poolcap => "poolcap",
            FlowExporter::Softflowd => "softflowd",
            FlowExporter::Pmacct => "pmacctd-nfprobe",
        }
    }

    /// The program that must be installed.
    pub fn program(self) -> &'static str {
        match self {
            FlowExporter::Poolcap => "poolcap",
            FlowExporter::Softflowd => "softflowd",
            FlowExporter::Pmacct => "pmacctd",
        }
    }

    /// The signal that ends it with every open flow exported.
    pub fn stop_signal(self) -> &'static str {
        match self {
            FlowExporter::Poolcap => "INT",
            FlowExporter::Softflowd | FlowExporter::Pmacct => "TERM",
        }
    }

    /// The command that ends it with every open flow exported, when a signal does not
    /// (softflowd exports its open flows only on `softflowctl shutdown`); `dir` as given to
    /// [`command`](Self::command).
    pub fn stop_command(self, dir: &Path) -> Option<Command> {
        (self == FlowExporter::Softflowd).then(|| {
            let mut c = Command::new("softflowctl");
            c.arg("-c").arg(dir.join("softflowd.ctl")).arg("shutdown");
            c
        })
    }

    /// The command exporting the flows seen on `iface` to `collector` (HOST:PORT), with a
    /// flow table for `flows` flows; its configuration and sockets go in `dir`.
    pub fn command(
        self,
        poolcap: &str,
        iface: &str,
        collector: &str,
        flows: usize,
        dir: &Path,
    ) -> anyhow::Result<Command> {
        let table = (flows * 2).max(8192);
        let mut cmd;
        match self {
            FlowExporter::Poolcap => {
                let config = dir.join("probe.toml");
                std::fs::write(
                    &config,
                    format!(
                        "period = \"1s\"\nflow_limit = {table}\n[[rule]]\nname = \"all\"\n\
                         filter = \"ip\"\nactions = [\"flows\"]\n"
                    ),
                )
                .context("write the probe configuration")?;
                cmd = Command::new(poolcap);
                cmd.args(["probe", "-q", "-i", iface, "-Z", "root", "-c"])
                    .arg(&config)
                    .args(["--ipfix", collector]);
            }
            FlowExporter::Softflowd => {
                cmd = Command::new("softflowd");
                cmd.args(["-d", "-i", iface, "-n", collector, "-v", "10"])
                    .args(["-m", &table.to_string(), "-c"])
                    .arg(dir.join("softflowd.ctl"))
                    .arg("-p")
                    .arg(dir.join("softflowd.pid"));
            }
            FlowExporter::Pmacct => {
                let config = dir.join("pmacctd.conf");
                std::fs::write(
                    &config,
                    format!(
                        "daemonize: false\npcap_interface: {iface}\nplugins: nfprobe\n\
                         nfprobe_receiver: {collector}\nnfprobe_version: 10\n\
                         nfprobe_maxflows: {table}\n\
                         aggregate: src_host, dst_host, src_port, dst_port, proto\n\
                         plugin_buffer_size: 102400\nplugin_pipe_size: 10240000\n"
                    ),
                )
                .context("write the pmacctd configuration")?;
                cmd = Command::new("pmacctd");
                cmd.arg("-f").arg(&config);
            }
        }
        Ok(cmd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_exporter_gets_a_table_for_every_flow() {
        let dir = tempfile::tempdir().expect("tempdir");
        let soft = FlowExporter::Softflowd
            .command("poolcap", "prb0", "127.0.0.1:4739", 100_000, dir.path())
            .expect("command");
        let args: Vec<_> = soft.get_args().map(|a| a.to_string_lossy()).collect();
        assert!(
            args.windows(2).any(|w| w[0] == "-m" && w[1] == "200000"),
            "{args:?}"
        );
        FlowExporter::Pmacct
            .command("poolcap", "prb0", "127.0.0.1:4739", 10, dir.path())
            .expect("command");
        let conf = std::fs::read_to_string(dir.path().join("pmacctd.conf")).expect("conf");
        assert!(conf.contains("nfprobe_maxflows: 8192\n"), "{conf}");
        assert!(
            conf.contains("nfprobe_receiver: 127.0.0.1:4739\n"),
            "{conf}"
        );
        FlowExporter::Poolcap
            .command("poolcap", "prb0", "127.0.0.1:4739", 10, dir.path())
            .expect("command");
        let toml = std::fs::read_to_string(dir.path().join("probe.toml")).expect("toml");
        poolcap_probe::config::parse(Path::new("probe.toml"), &toml)
            .expect("a valid probe configuration");
    }
}
