//! `poolcap forward`: poolcap as an inline middlebox. Frames received on IN's queues go
//! through the pool and the analysis, then out of OUT unchanged (see `capture::forward`).
//!
//! Everything that can be wrong with the arguments (OUT equal to IN, missing or down, a
//! smaller MTU than IN's, a `--drop` rule or filter that does not compile) is found before a
//! single frame is taken from IN, and reported in one line with exit code 2.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use poolcap_sys::socket::{ifindex, FanoutMode};
use poolcap_sys::xsk::ZeroCopy;
use serde::Serialize;

use crate::capture::backend::{BackendConfig, BackendKind};
use crate::capture::forward::{DropRule, ForwardSetup, ForwardStats};
use crate::capture::policy::PolicySpec;
use crate::capture::pool::PoolSize;
use crate::capture::queue::WaitStrategy;
use crate::capture::{CaptureConfig, CaptureError, CaptureReport, Engine, Input};
use crate::cli::capture::{engine_limits, parse_backend, parse_kib, parse_pool};
use crate::cli::statsfile::StatsFile;
use crate::cli::{privdrop, usage};
use crate::{netdev, units};

/// Arguments of `poolcap forward`.
#[derive(Debug, Args)]
#[command(
    after_help = "Every frame received on IN ends in one counter: received = forwarded + dropped_by_rule \
+ dropped_kernel + dropped_pool + dropped_tx + filtered. Frames of one flow leave in the order they came.

Examples:
  poolcap forward -i eth0 -o eth1
  poolcap forward -i eth0 -o eth1 --queues 2 --load 1000 --offload buddy:60 --drop 'udp port 53'"
)]
pub struct ForwardArgs {
    /// Interface frames come in on.
    #[arg(short = 'i', long = "in")]
    input: String,
    /// Interface frames leave by.
    #[arg(short = 'o', long = "out")]
    output: String,
    /// Receive queues of IN to capture with. Default: IN's rx queues.
    #[arg(long)]
    queues: Option<usize>,
    /// Worker threads (default: one per queue).
    #[arg(long)]
    workers: Option<usize>,
    /// Synthetic analysis load: x-loop iterations per frame.
    #[arg(long, default_value_t = 0)]
    load: u32,
    /// Pool per queue as M,R: R chunks of M packet cells.
    #[arg(long, default_value = "256,64", value_parser = parse_pool)]
    pool: (usize, usize),
    /// Offload policy: basic, buddy:T or congestion:HIGH,LOW (as for capture; frames still
    /// leave in their queue's order).
    #[arg(long, default_value = "basic")]
    offload: PolicySpec,
    /// Capture backend on IN: af_packet, af_xdp or auto.
    #[arg(long, default_value = "af_packet", value_parser = parse_backend)]
    backend: BackendKind,
    /// Drop frames matching this tcpdump expression instead of forwarding them (counted).
    #[arg(long, value_name = "FILTER")]
    drop: Option<String>,
    /// Kernel ring per queue, in KiB (or with a unit: 16M).
    #[arg(short = 'B', default_value = "4096", value_parser = parse_kib)]
    buffer: u64,
    /// Stop after this many frames received.
    #[arg(short = 'c', value_parser = units::parse_count)]
    count: Option<u64>,
    /// Stop after this long (e.g. 10s).
    #[arg(long, value_parser = units::parse_duration)]
    duration: Option<Duration>,
    /// Quiet: no status line while running.
    #[arg(short = 'q')]
    quiet: bool,
    /// Write the final accounting as one JSON object to FILE.
    #[arg(long)]
    stats_json: Option<PathBuf>,
    #[command(flatten)]
    privileges: privdrop::UserArg,
    /// Only frames matching this filter (tcpdump syntax, after the options) are forwarded;
    /// the others count as filtered.
    #[arg(trailing_var_arg = true)]
    filter: Vec<String>,
}

/// The final accounting of a forwarding run (also the `--stats-json` object).
#[derive(Debug, Serialize)]
pub struct ForwardReport {
    /// IN.
    pub interface_in: String,
    /// OUT.
    pub interface_out: String,
    /// How frames were transmitted.
    pub tx_path: String,
    /// The totals.
    #[serde(flatten)]
    pub total: ForwardStats,
    /// Wall seconds.
    pub seconds: f64,
    /// CPU seconds of this process in user space.
    pub cpu_user: f64,
    /// CPU seconds in the kernel.
    pub cpu_system: f64,
    /// The kernel error that ended a capture thread.
    pub capture_error: Option<String>,
    /// Per receive queue.
    pub queues: Vec<ForwardStats>,
}

impl ForwardReport {
    fn new(a: &ForwardArgs, tx_path: &str, r: CaptureReport) -> Self {
        let mut queues = r.forward.unwrap_or_default();
        // The in-kernel filter's rejections are known only in total (see capture::account).
        let kernel_filtered = r.filtered_kernel;
        let mut total = ForwardStats::total(&queues);
        total.filtered += kernel_filtered;
        total.received += kernel_filtered;
        if let [only] = queues.as_mut_slice() {
            *only = ForwardStats {
                queue: 0,
                ..total.clone()
            };
        }
        Self {
            interface_in: a.input.clone(),
            interface_out: a.output.clone(),
            tx_path: tx_path.to_string(),
            total,
            seconds: r.seconds,
            cpu_user: r.cpu_user,
            cpu_system: r.cpu_system,
            capture_error: r.capture_error,
            queues,
        }
    }

    fn print(&self) {
        let t = &self.total;
        eprintln!(
            "{} frames received on {} in {:.2} s",
            t.received, self.interface_in, self.seconds
        );
        eprintln!(
            "{} frames forwarded to {} ({} bytes)",
            t.forwarded, self.interface_out, t.forwarded_bytes
        );
        eprintln!("{} frames dropped by rule", t.dropped_by_rule);
        eprintln!("{} frames dropped by kernel", t.dropped_kernel);
        eprintln!("{} frames dropped by pool", t.dropped_pool);
        eprintln!("{} frames dropped at transmit", t.dropped_tx);
        eprintln!("{} frames filtered", t.filtered);
        if t.in_flight > 0 {
            eprintln!("{} frames unaccounted for (in flight)", t.in_flight);
        }
        if self.queues.len() > 1 {
            for q in &self.queues {
                eprintln!(
                    "  queue {}: received {} forwarded {} dropped rule {} kernel {} pool {} tx {} filtered {}",
                    q.queue,
                    q.received,
                    q.forwarded,
                    q.dropped_by_rule,
                    q.dropped_kernel,
                    q.dropped_pool,
                    q.dropped_tx,
                    q.filtered
                );
            }
        }
        eprintln!(
            "cpu {:.3} s user {:.3} s system",
            self.cpu_user, self.cpu_system
        );
    }
}

/// The checks on IN and OUT that must pass before anything is forwarded.
fn check_interfaces(a: &ForwardArgs) -> anyhow::Result<()> {
    if a.input == a.output {
        return Err(usage(format!(
            "-o: OUT must be another interface than IN (`{}`)",
            a.input
        )));
    }
    let Some(in_mtu) = netdev::mtu(&a.input) else {
        return Err(usage(format!("-i: no such interface `{}`", a.input)));
    };
    let Some(out_mtu) = netdev::mtu(&a.output) else {
        return Err(usage(format!("-o: no such interface `{}`", a.output)));
    };
    if netdev::is_up(&a.output) == Some(false) {
        return Err(usage(format!(
            "-o: `{}` is down (ip link set {} up)",
            a.output, a.output
        )));
    }
    if out_mtu < in_mtu {
        return Err(usage(format!(
            "-o: `{}` has MTU {out_mtu}, smaller than `{}`'s {in_mtu}: larger frames could not leave",
            a.output, a.input
        )));
    }
    Ok(())
}

fn config(a: &ForwardArgs) -> anyhow::Result<CaptureConfig> {
    if a.count == Some(0) {
        return Err(usage("-c: the frame count must be at least 1"));
    }
    let ring = engine_limits(a.queues, a.workers, a.buffer)?;
    let queues = a.queues.unwrap_or_else(|| netdev::rx_queues(&a.input));
    // Frames are forwarded whole: a cell holds the largest frame IN carries (and a VLAN tag).
    let frame = (netdev::mtu(&a.input).unwrap_or(1500) + 14 + 4).div_ceil(64) * 64;
    let snaplen = 262_144;
    Ok(CaptureConfig {
        input: Input::Live,
        iface: a.input.clone(),
        queues,
        fanout: FanoutMode::Hash,
        pool: PoolSize {
            cells: a.pool.0,
            chunks: a.pool.1,
            cell_size: frame.max(2048),
        },
        workers: a.workers.unwrap_or(queues),
        load: a.load,
        in_place: false,
        wait: WaitStrategy::Poll,
        snaplen,
        ring,
        filter: (!a.filter.is_empty()).then(|| a.filter.join(" ")),
        output: None,
        compress: None,
        files: Default::default(),
        probe: None,
        count: a.count,
        duration: a.duration,
        cpus: None,
        seal_after: Duration::from_millis(2),
        policy: a.offload.clone(),
        backend: BackendConfig {
            kind: a.backend,
            zero_copy: ZeroCopy::Auto,
            force: false,
        },
        buddy_groups: vec![(0..queues).collect()],
        status_every: (!a.quiet).then_some(Duration::from_secs(1)),
    })
}

/// Runs `poolcap forward`.
pub fn run(args: ForwardArgs) -> anyhow::Result<()> {
    check_interfaces(&args)?;
    let cfg = config(&args)?;
    let privileges = privdrop::prepare(args.privileges.user.as_deref())?;
    let stats = args
        .stats_json
        .as_deref()
        .map(StatsFile::open)
        .transpose()?;
    let drop = args
        .drop
        .as_deref()
        .map(DropRule::compile)
        .transpose()
        .map_err(|e| usage(format!("--drop: {e}")))?;
    poolcap_sys::privilege::check_raw_sockets("forwarding packets")?;
    let out_index = ifindex(&args.output)
        .map_err(|_| usage(format!("-o: no such interface `{}`", args.output)))?;
    let setup = ForwardSetup::open(&args.output, out_index, drop)?;
    let tx_path = setup.path();
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let (queues, pool) = (cfg.queues, cfg.pool);
    let stats_path = stats.as_ref().map(|s| s.path().to_owned());
    let started = Engine::start_forward(cfg, setup, stop, |_| {
        privdrop::apply(&privileges, &Vec::from_iter(stats_path.as_deref()))
    });
    let engine = match started {
        Ok(e) => e,
        Err(e) => {
            if let Some(s) = stats {
                s.abandon();
            }
            return Err(match e {
                CaptureError::Filter(f) => usage(f.to_string()),
                e => anyhow::Error::new(e),
            });
        }
    };
    eprintln!(
        "listening on {}, forwarding to {}, {queues} queue{}, pool {}x{} cells",
        args.input,
        args.output,
        if queues == 1 { "" } else { "s" },
        pool.chunks,
        pool.cells
    );
    eprintln!("{}", engine.backend_report());
    eprintln!("transmit: {tx_path}");
    let report = ForwardReport::new(&args, tx_path, engine.run());
    report.print();
    if let Some(s) = stats {
        s.write(&report)?;
    }
    if let Some(e) = &report.capture_error {
        anyhow::bail!("{e}");
    }
    Ok(())
}
