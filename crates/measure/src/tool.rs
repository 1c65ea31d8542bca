//! What every program a bench runs has in common, and what the modules that start them
//! ([`super::peer`] for the capture tools, [`super::probe_peers`] for the analysis tools,
//! [`super::forward_peers`] for the forwarders) share: which tool, the capture settings it
//! is given, the command line that starts it, its final counts and the reading of its
//! output. A leaf module, so those three depend on it and not on each other.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};

use crate::child::Finished;

/// A capture tool under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tool {
    /// `poolcap capture` (also as `--inplace`, the plain fanout reader).
    Poolcap,
    /// tcpdump (libpcap).
    Tcpdump,
    /// netsniff-ng (its own TPACKET ring reader).
    NetsniffNg,
    /// dumpcap (Wireshark's capture engine, libpcap).
    Dumpcap,
    /// `poolcap probe` (analysis tools: see [`super::probe_peers`]).
    Probe,
    /// pmacct's `pmacctd`.
    Pmacct,
    /// tshark computing conversation statistics.
    Tshark,
    /// `poolcap forward` (forwarding tools: see [`super::forward_peers`]).
    Forward,
    /// netsniff-ng forwarding `--in IN --out OUT`.
    NetsniffFwd,
    /// The Linux bridge between IN and OUT (kernel forwarding).
    Bridge,
    /// poolcap's XDP program redirecting IN to OUT (`poolcap bench-peer xdp-redirect`).
    XdpRedirect,
    /// Google Stenographer's packet writer and indexer (see [`super::stenotype`]).
    Stenotype,
}

/// How to run a capture tool at one point. Fields after `load` are optional settings, most of
/// them poolcap's; a peer takes those it has an option for (`snaplen`, `compress` for tcpdump).
/// A setting added later is an `Option` or `#[serde(default)]`, so that older `raw.jsonl` files
/// still read (a missing `Option` reads as `None`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaptureSpec {
    /// The tool.
    pub tool: Tool,
    /// Kernel buffer (ring) in KiB, given to every tool's own option.
    pub buffer_kib: u64,
    /// Write a pcap file (true) or only count (false).
    pub write: bool,
    /// poolcap only: nanosecond pcap instead of microsecond pcap.
    pub pcap_ns: bool,
    /// Write pcapng instead of pcap (poolcap's `--format pcapng`, dumpcap without `-P`;
    /// tcpdump and netsniff-ng write pcap only).
    #[serde(default)]
    pub pcapng: bool,
    /// poolcap only: pool as (M, R).
    pub pool: Option<(usize, usize)>,
    /// poolcap only: x-loop iterations per packet.
    pub load: u32,
    /// poolcap only: when not writing, write the pcap stream to /dev/null as the peers do
    /// (instead of counting in place).
    #[serde(default)]
    pub dev_null: bool,
    /// Snap length (`-s`).
    pub snaplen: Option<u32>,
    /// Compression of the written file: `zstd:L` or `gzip:L` (poolcap's `--compress`; tcpdump
    /// writes to a pipe into the `zstd` or `gzip` program).
    pub compress: Option<String>,
    /// poolcap only: `--queues`.
    pub queues: Option<u16>,
    /// poolcap only: `--workers`.
    pub workers: Option<usize>,
    /// poolcap only: `--offload` (basic, buddy:T, congestion:H,L).
    pub offload: Option<String>,
    /// poolcap only: `--wait` (poll, busy, adaptive).
    pub wait: Option<String>,
    /// poolcap only: `--backend` (af_packet, af_xdp).
    pub backend: Option<String>,
    /// poolcap only: `--inplace`, the plain AF_PACKET fanout reader.
    #[serde(default)]
    pub inplace: bool,
    /// poolcap only: `--cpus` (capture threads, then workers, round robin).
    pub cpus: Option<String>,
    /// CPUs the whole process may run on (`taskset -c`); default the tool CPU.
    pub taskset: Option<String>,
    /// poolcap probe only: rules of the generated rule set.
    #[serde(default)]
    pub rules: Option<usize>,
    /// poolcap probe only: the rule set's every rule tracks the flows of all IP traffic
    /// (`flows_rule_set`), not the generated mix (`rule_set`).
    #[serde(default)]
    pub all_flows: bool,
    /// poolcap probe only: `--in-kernel`.
    #[serde(default)]
    pub in_kernel: bool,
    /// poolcap only, when writing: rotate files as tcpdump's `-C MB -W FILES`.
    #[serde(default)]
    pub rotate: Option<(u64, u32)>,
    /// poolcap only, when writing: `--buffered` (through the page cache, not O_DIRECT).
    #[serde(default)]
    pub buffered: bool,
    /// The tool is stopped (SIGSTOP) from its ready line until the sender is done, then
    /// resumed: what it captures is what its kernel ring held (calibration of the ring).
    #[serde(default)]
    pub stopped: bool,
    /// poolcap and stenotype, when writing: a store (`--store DIR -C MB`; stenotype's
    /// `--dir DIR --filesize_mb MB`) instead of `-w FILE`, into the directory [`store_dir`]
    /// of the run's file, rotating every MB millions of bytes.
    #[serde(default)]
    pub store: Option<u64>,
}

/// The store directory of a run whose file would be `file` (`FILE.store`).
pub fn store_dir(file: &Path) -> std::path::PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".store");
    name.into()
}

impl CaptureSpec {
    /// The engine options every poolcap subject (capture, probe, forward) takes alike: pool,
    /// queues, workers and x-loop load, each only when set.
    pub fn engine_args(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some((m, r)) = self.pool {
            v.extend(["--pool".to_owned(), format!("{m},{r}")]);
        }
        if let Some(q) = self.queues {
            v.extend(["--queues".to_owned(), q.to_string()]);
        }
        if let Some(w) = self.workers {
            v.extend(["--workers".to_owned(), w.to_string()]);
        }
        if self.load > 0 {
            v.extend(["--load".to_owned(), self.load.to_string()]);
        }
        v
    }

    /// `tool` with a `buffer_kib` kernel buffer, counting only, every option at its default.
    pub fn new(tool: Tool, buffer_kib: u64) -> CaptureSpec {
        CaptureSpec {
            tool,
            buffer_kib,
            write: false,
            pcap_ns: false,
            pcapng: false,
            pool: None,
            load: 0,
            dev_null: false,
            snaplen: None,
            compress: None,
            queues: None,
            workers: None,
            offload: None,
            wait: None,
            backend: None,
            inplace: false,
            cpus: None,
            taskset: None,
            rotate: None,
            buffered: false,
            rules: None,
            all_flows: false,
            in_kernel: false,
            stopped: false,
            store: None,
        }
    }

    /// Programs this setting needs besides the tool's own.
    pub fn programs(&self) -> Vec<&'static str> {
        let mut v = self.tool.programs().to_vec();
        if self.tool != Tool::Poolcap {
            if let Some(c) = &self.compress {
                v.push(if c.starts_with("gzip") {
                    "gzip"
                } else {
                    "zstd"
                });
            }
        }
        v
    }
}

/// How to start a capture tool: its command line and, for a tool that writes to a pipe, the
/// program reading that pipe (whose standard output becomes the file).
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// The tool's command line, program first.
    pub argv: Vec<String>,
    /// The program its standard output is piped into.
    pub pipe: Option<Vec<String>>,
}

/// Final counts of a capture tool, as the tool itself reports them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    /// Packets the tool read (handed to its own processing or file).
    pub captured: u64,
    /// Packets it reports as dropped (kernel ring full; for poolcap also pool drops).
    pub dropped: u64,
    /// Packets the kernel says reached the socket, when the tool reports it.
    pub received: Option<u64>,
    /// Tool-specific extras (poolcap: `dropped_kernel`, `dropped_pool`, `pool_peak_chunks`,
    /// `syscalls`, `offloaded_out`, `hot_queue_share`...).
    pub extra: BTreeMap<String, f64>,
}

impl Tool {
    /// Every capture tool, poolcap first.
    pub const ALL: [Tool; 4] = [
        Tool::Poolcap,
        Tool::Tcpdump,
        Tool::NetsniffNg,
        Tool::Dumpcap,
    ];

    /// Whether it forwards from the probe's IN to its OUT (a `bench forward` subject) rather
    /// than capturing.
    pub fn forwards(self) -> bool {
        matches!(
            self,
            Tool::Forward | Tool::NetsniffFwd | Tool::Bridge | Tool::XdpRedirect
        )
    }

    /// Whether it reports its own counts (the Linux bridge has no process that could).
    pub fn accounts(self) -> bool {
        self != Tool::Bridge
    }

    /// The name used in tables.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Poolcap => "poolcap",
            Tool::Tcpdump => "tcpdump",
            Tool::NetsniffNg => "netsniff-ng",
            Tool::Dumpcap => "dumpcap",
            Tool::Probe => "poolcap probe",
            Tool::Pmacct => "pmacctd",
            Tool::Tshark => "tshark",
            Tool::Forward => "poolcap forward",
            Tool::NetsniffFwd => "netsniff-ng --in/--out",
            Tool::Bridge => "linux bridge",
            Tool::XdpRedirect => "xdp redirect",
            Tool::Stenotype => "stenotype",
        }
    }

    /// Programs that must be installed (poolcap is this executable).
    pub fn programs(self) -> &'static [&'static str] {
        match self {
            Tool::Poolcap | Tool::Probe | Tool::Forward | Tool::XdpRedirect => &[],
            Tool::NetsniffFwd => &["netsniff-ng", "stdbuf"],
            Tool::Bridge => &["ip", "sh"],
            Tool::Pmacct => &["pmacctd"],
            Tool::Tshark => &["tshark", "env"],
            Tool::Tcpdump => &["tcpdump"],
            Tool::NetsniffNg => &["netsniff-ng", "stdbuf"],
            Tool::Dumpcap => &["dumpcap"],
            Tool::Stenotype => &["stenotype", "sh"],
        }
    }

    /// The substring of an output line that says the tool is capturing.
    pub fn ready_marker(self) -> &'static str {
        match self {
            Tool::Poolcap | Tool::Tcpdump | Tool::Forward | Tool::XdpRedirect => "listening on",
            Tool::NetsniffFwd => "Running!",
            Tool::Bridge => "bridging",
            Tool::NetsniffNg => "Running!",
            Tool::Dumpcap | Tool::Tshark => "Capturing on",
            Tool::Probe => "probing on",
            Tool::Pmacct => "link type is",
            Tool::Stenotype => "starting to process packets",
        }
    }
}

/// Fails when `f`, the run of `name`, did not end well, with its last telling lines.
pub fn check_exit(name: &str, f: &Finished) -> anyhow::Result<()> {
    if !f.status.success() {
        let tail: Vec<&str> = f.text.lines().filter(|l| !is_noise(l)).collect();
        let tail = &tail[tail.len().saturating_sub(4)..];
        bail!("{name} failed ({}): {}", f.status, tail.join(" | "));
    }
    Ok(())
}

/// Output lines that say nothing about a failure: netsniff-ng and trafgen cannot tune the root
/// namespace's socket memory from inside a lab namespace.
pub fn is_noise(line: &str) -> bool {
    line.trim().is_empty() || line.contains("Cannot set system socket memory")
}

/// The stats file `tool` (a poolcap command) wrote at its end.
pub(crate) fn stats_text(tool: Tool, stats: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(stats)
        .with_context(|| format!("{} wrote no {}", tool.name(), stats.display()))
}

/// The number right before `key` on the last line holding it: `  123  packets incoming`.
pub(crate) fn number_before(text: &str, key: &str) -> anyhow::Result<u64> {
    text.lines()
        .rev()
        .find_map(|l| {
            let i = l.find(key)?;
            l[..i].split_whitespace().last()?.parse().ok()
        })
        .ok_or_else(|| anyhow!("no `N {key}` in the tool's output"))
}
