//! `poolcap forward`: poolcap as an inline middlebox. Frames received on IN's queues go
//! through the pool and the analysis, then out of OUT unchanged (see `capture::forward`).
//!
//! Everything that can be wrong with the arguments (OUT equal to IN, missing or down, a
//! smaller MTU than IN's, a `--drop` rule or filter that does not compile) is found before a
//! single frame is taken from IN, and reported in one line with exit code 2.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use poolcap_format::FileFormat;
use poolcap_sys::socket::{ifindex, FanoutMode};
use poolcap_sys::xsk::ZeroCopy;
use serde::Serialize;

use crate::capture::backend::{BackendConfig, BackendKind};
use crate::capture::forward::{DropRule, ForwardSetup, ForwardStats};
use crate::capture::needs::{Doing, Needs};
use crate::capture::policy::PolicySpec;
use crate::capture::pool::PoolSize;
use crate::capture::queue::WaitStrategy;
use crate::capture::{CaptureConfig, CaptureReport, Engine, Input, Output};
use crate::cli::capture::{engine_limits, parse_kib};
use crate::cli::launch::{engine_error, Launch, Launched};
use crate::cli::{privdrop, usage};
use crate::units::parse_pool;
use crate::{netdev, units};
use signal_hook::consts::{SIGINT, SIGTERM};

/// Arguments of `poolcap forward`.
#[derive(Debug, Args)]
#[command(
    after_help = "Every frame received on IN ends in one counter: received = forwarded + dropped_by_rule \
+ dropped_kernel + dropped_pool + dropped_tx + filtered + not_taken (not_taken: left in IN's \
kernel ring at the stop, after its cut or past -c). Frames of one flow leave in the order they came.

Examples:
  poolcap forward -i eth0 -o eth1
  poolcap forward -i eth0 -o eth1 --queues 2 --load 1000 --offload buddy:60 --drop 'udp port 53'
  poolcap forward -i eth0 -o eth1 -w passed.pcapng --drop 'udp port 53'"
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
    /// Pool per queue as M,R: R chunks of M packet cells. Forwarding hands a chunk on as
    /// soon as the ring is empty (latency), so at moderate rates chunks leave part full:
    /// more, smaller chunks than capture's 256,64 (the same cells) keep the pool's time
    /// buffer long enough to ride out a busy CPU.
    #[arg(long, default_value = "64,256", value_parser = parse_pool)]
    pool: (usize, usize),
    /// Offload policy: basic, buddy:T or congestion:HIGH,LOW (as for capture; frames still
    /// leave in their queue's order).
    #[arg(long, default_value = "basic")]
    offload: PolicySpec,
    /// Capture backend on IN: af_packet, af_xdp or auto. With AF_XDP, frames also leave
    /// from the UMEM they arrived in (an AF_XDP socket per queue on OUT shares it).
    #[arg(long, default_value = "af_packet", value_enum)]
    backend: BackendKind,
    /// A bump in the wire: also forward OUT to IN, each direction with its own pools,
    /// threads and accounting (two blocks in the report and in --stats-json). With -w FILE,
    /// OUT to IN is written to its own file beside it, FILE with `-back` before the extension
    /// (fwd.pcapng, fwd-back.pcapng). Not with --metrics.
    #[arg(long, conflicts_with = "metrics")]
    bidirectional: bool,
    /// Drop frames matching this tcpdump expression instead of forwarding them (counted).
    #[arg(long, value_name = "FILTER", value_parser = drop_filter)]
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
    /// Don't put IN (and OUT with --bidirectional) into promiscuous mode (tcpdump's -p).
    #[arg(short = 'p', long = "no-promiscuous-mode")]
    no_promiscuous: bool,
    /// Also write what was forwarded (after --drop) to FILE (`-` for standard output), as
    /// `poolcap capture -w` writes.
    #[arg(short = 'w', value_name = "FILE")]
    write: Option<PathBuf>,
    /// File format of -w: pcapng (nanosecond), pcap (microsecond) or pcap-ns.
    #[arg(long, default_value = "pcapng", value_enum, requires = "write")]
    format: FileFormat,
    // --store: not with --bidirectional (refused in `run`).
    #[command(flatten)]
    store: crate::cli::store::StoreOptions,
    #[command(flatten)]
    export: crate::cli::export::MetricsArgs,
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
    /// With `-w`: frames written to the file (the forwarded ones, unless writing failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub written: Option<u64>,
    /// With `-w`: the first write error, naming the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_error: Option<String>,
    /// Per receive queue.
    pub queues: Vec<ForwardStats>,
}

impl ForwardReport {
    fn new(a: &ForwardArgs, dir: &Direction, tx_path: &str, r: CaptureReport) -> Self {
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
            interface_in: dir.input.clone(),
            interface_out: dir.output.clone(),
            tx_path: tx_path.to_string(),
            total,
            seconds: r.seconds,
            cpu_user: r.cpu_user,
            cpu_system: r.cpu_system,
            capture_error: r.capture_error,
            written: a.write.is_some().then_some(r.written),
            write_error: r.write_error,
            queues,
        }
    }

    fn print(&self) {
        let t = &self.total;
        crate::say!(
            "{} frames received on {} in {:.2} s",
            t.received,
            self.interface_in,
            self.seconds
        );
        crate::say!(
            "{} frames forwarded to {} ({} bytes)",
            t.forwarded,
            self.interface_out,
            t.forwarded_bytes
        );
        crate::say!("{} frames dropped by rule", t.dropped_by_rule);
        crate::say!("{} frames dropped by kernel", t.dropped_kernel);
        crate::say!("{} frames dropped by pool", t.dropped_pool);
        crate::say!("{} frames dropped at transmit", t.dropped_tx);
        crate::say!("{} frames filtered", t.filtered);
        crate::say!(
            "{} frames not taken (left in the kernel at the stop)",
            t.not_taken
        );
        if let Some(n) = self.written {
            crate::say!("{n} frames written");
        }
        if t.in_flight > 0 {
            crate::say!("{} frames unaccounted for (in flight)", t.in_flight);
        }
        if self.queues.len() > 1 {
            for q in &self.queues {
                crate::say!(
                    "  queue {}: received {} forwarded {} dropped rule {} kernel {} pool {} tx {} filtered {} not taken {}",
                    q.queue,
                    q.received,
                    q.forwarded,
                    q.dropped_by_rule,
                    q.dropped_kernel,
                    q.dropped_pool,
                    q.dropped_tx,
                    q.filtered,
                    q.not_taken
                );
            }
        }
        crate::say!(
            "cpu {:.3} s user {:.3} s system",
            self.cpu_user,
            self.cpu_system
        );
    }
}

/// One direction of forwarding: frames come in on `input` and leave by `output`; with `-w`
/// what it forwarded goes to `file`.
#[derive(Debug)]
struct Direction {
    input: String,
    output: String,
    file: Option<PathBuf>,
}

impl Direction {
    /// IN to OUT, and with `--bidirectional` OUT to IN too.
    fn all(a: &ForwardArgs) -> Vec<Self> {
        let there = Self {
            input: a.input.clone(),
            output: a.output.clone(),
            file: a.write.clone(),
        };
        let back = Self {
            input: a.output.clone(),
            output: a.input.clone(),
            file: a.write.as_deref().map(back_file),
        };
        if a.bidirectional {
            vec![there, back]
        } else {
            vec![there]
        }
    }
}

/// The file of the OUT to IN direction beside `-w FILE`: `-back` before the extension
/// (`fwd.pcapng` → `fwd-back.pcapng`, `fwd` → `fwd-back`).
fn back_file(file: &Path) -> PathBuf {
    let stem = file.file_stem().unwrap_or_default().to_string_lossy();
    let name = match file.extension() {
        Some(ext) => format!("{stem}-back.{}", ext.to_string_lossy()),
        None => format!("{stem}-back"),
    };
    file.with_file_name(name)
}

/// The checks on IN and OUT that must pass before anything is forwarded (both ways with
/// `--bidirectional`: then IN must be up and have OUT's MTU too).
fn check_interfaces(a: &ForwardArgs) -> anyhow::Result<()> {
    check_direction(a)?;
    if a.bidirectional && a.write.as_deref() == Some(Path::new("-")) {
        return Err(usage(
            "-w: with --bidirectional each direction writes its own file; standard output \
             cannot hold both",
        ));
    }
    if a.bidirectional {
        let in_mtu = netdev::mtu(&a.input);
        if netdev::is_up(&a.input) == Some(false) {
            return Err(usage(format!(
                "-i: `{}` is down, and --bidirectional sends on it (ip link set {} up)",
                a.input, a.input
            )));
        }
        if in_mtu < netdev::mtu(&a.output) {
            return Err(usage(format!(
                "-i: `{}` has a smaller MTU than `{}`: with --bidirectional larger frames could not go back",
                a.input, a.output
            )));
        }
    }
    Ok(())
}

fn check_direction(a: &ForwardArgs) -> anyhow::Result<()> {
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

/// The engine of one direction; `status`: it prints the status line.
fn config(a: &ForwardArgs, dir: &Direction, status: bool) -> anyhow::Result<CaptureConfig> {
    if a.count == Some(0) {
        return Err(usage("-c: the frame count must be at least 1"));
    }
    let ring = engine_limits(a.queues, a.workers, a.buffer)?;
    let queues = a.queues.unwrap_or_else(|| netdev::rx_queues(&dir.input));
    // Frames are forwarded whole: a cell holds the largest frame IN carries (and a VLAN tag).
    let frame = (netdev::mtu(&dir.input).unwrap_or(1500) + 14 + 4).div_ceil(64) * 64;
    let snaplen = 262_144;
    Ok(CaptureConfig {
        input: Input::Live,
        iface: dir.input.clone(),
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
        output: dir.file.as_ref().map(|p| {
            let target = if p.as_os_str() == "-" {
                Output::Stdout
            } else {
                Output::File(p.clone())
            };
            (target, a.format)
        }),
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
        status_every: (status && !a.quiet).then_some(Duration::from_secs(1)),
        promiscuous: !a.no_promiscuous,
        stats_request: None,
    })
}

/// The startup line's account of a transmit path.
fn transmit_detail(path: &str) -> String {
    if path == "sendmmsg" {
        "sendmmsg: AF_PACKET with iovecs into the pool chunks (no user-space copy; through the qdisc, so a flow keeps its transmit queue)".into()
    } else if path.ends_with("(copy)") {
        format!("{path}: frames leave from the UMEM they arrived in, no user-space copy; copy mode, so the kernel copies each frame once into an skb")
    } else {
        format!("{path}: frames leave from the UMEM they arrived in, no copy")
    }
}

/// `--drop`'s filter: an empty one matches, so would drop, every frame.
fn drop_filter(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("an empty filter matches every frame: name what to drop".into());
    }
    Ok(s.to_string())
}

/// Runs `poolcap forward`.
pub fn run(args: ForwardArgs) -> anyhow::Result<()> {
    if args.bidirectional && args.store.store.is_some() {
        return Err(usage(
            "--store: not with --bidirectional (one direction per store)",
        ));
    }
    check_interfaces(&args)?;
    let dirs = Direction::all(&args);
    let mut configs = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| config(&args, d, i == 0))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let pending_store = args.store.open(None, &mut configs[0])?;
    drop_rule(&args)?;
    let mut launched = Launch {
        needs: Needs::of(&configs[0]),
        doing: Doing::Forwarding,
        user: args.privileges.user.as_deref(),
        stats_json: args.stats_json.as_deref(),
        metrics: &args.export,
        stop_on: &[SIGINT, SIGTERM],
    }
    .prepare()?;
    let (engines, started) = start_all(&args, &dirs, configs, &launched);
    if let Err(e) = launched.opened(started) {
        // A direction already started must not go on forwarding (the stop flag is up).
        engines.into_iter().for_each(|(e, _)| drop(e.run()));
        return Err(e);
    }
    engines.iter().for_each(|(e, _)| launched.wake(e));
    announce(&args, &dirs, &engines);
    // Without --bidirectional (they conflict): one engine.
    let _metrics = match (launched.take_metrics(), engines.first()) {
        (Some(m), Some((engine, _))) => Some(crate::cli::export::serve_metrics(
            m,
            engine,
            args.write.is_some(),
            Vec::new(),
        )?),
        _ => None,
    };
    let store = pending_store.map(|p| p.start()).transpose()?;
    launched.ready();
    let reports = run_engines(&args, &dirs, engines, store);
    match reports.as_slice() {
        [one] => launched.finish(one)?,
        all => launched.finish(&serde_json::json!({ "directions": all }))?,
    }
    for r in &reports {
        if let Some(e) = r.capture_error.as_ref().or(r.write_error.as_ref()) {
            anyhow::bail!("{e}");
        }
    }
    Ok(())
}

/// Opens every direction, drops privileges, then starts them: the engines started, and
/// whether all were.
fn start_all(
    args: &ForwardArgs,
    dirs: &[Direction],
    configs: Vec<CaptureConfig>,
    launched: &Launched,
) -> (Vec<(Engine, String)>, anyhow::Result<()>) {
    // Every direction is opened before any starts, so the privileges go (with the stats
    // file and the capture files handed to -Z's user) while the process has one thread.
    let opened = configs
        .into_iter()
        .zip(dirs)
        .map(|(cfg, dir)| {
            let setup = ForwardSetup::open(&dir.output, out_index(dir)?, drop_rule(args)?)?;
            Engine::open_forward(cfg, setup).map_err(engine_error)
        })
        .collect::<anyhow::Result<Vec<_>>>()
        .and_then(|opened| {
            let owned: Vec<&Path> = opened
                .iter()
                .filter_map(|o| o.output())
                .chain(args.store.store.as_deref())
                .collect();
            launched.drop_privileges(&owned)?;
            Ok(opened)
        });
    let mut engines: Vec<(Engine, String)> = Vec::new();
    let started = opened.and_then(|opened| {
        for o in opened {
            let engine = o.start(launched.stop())?;
            let tx_path = engine.tx_path().unwrap_or("sendmmsg").to_string();
            engines.push((engine, tx_path));
        }
        Ok(())
    });
    (engines, started)
}

/// `--drop`'s rule, compiled (each direction compiles its own).
fn drop_rule(args: &ForwardArgs) -> anyhow::Result<Option<DropRule>> {
    args.drop
        .as_deref()
        .map(DropRule::compile)
        .transpose()
        .map_err(|e| usage(format!("--drop: {e}")))
}

/// The start-up lines of each direction.
fn announce(args: &ForwardArgs, dirs: &[Direction], engines: &[(Engine, String)]) {
    for (dir, (engine, tx_path)) in dirs.iter().zip(engines) {
        log::info!(
            "listening on {}, forwarding to {}, {} queue(s), pool {}x{} cells",
            dir.input,
            dir.output,
            args.queues.unwrap_or_else(|| netdev::rx_queues(&dir.input)),
            args.pool.1,
            args.pool.0
        );
        log::info!("{}", engine.backend_report());
        log::info!("transmit: {}", transmit_detail(tx_path));
        if let Some(line) = engine.output_report() {
            log::info!("{line}");
        }
    }
}

/// Runs every direction's engine to its end, then ends the store's keeper and prints each
/// direction's accounting.
fn run_engines(
    args: &ForwardArgs,
    dirs: &[Direction],
    engines: Vec<(Engine, String)>,
    store: Option<crate::cli::store::RunningStore>,
) -> Vec<ForwardReport> {
    let results: Vec<(CaptureReport, String)> = std::thread::scope(|s| {
        let running: Vec<_> = engines
            .into_iter()
            .map(|(e, path)| s.spawn(move || (e.run(), path)))
            .collect();
        running
            .into_iter()
            .map(|h| h.join().expect("an engine thread panicked"))
            .collect()
    });
    let reports: Vec<ForwardReport> = results
        .into_iter()
        .zip(dirs)
        .map(|((r, path), d)| ForwardReport::new(args, d, &path, r))
        .collect();
    crate::cli::store::finish(store);
    for r in &reports {
        if args.bidirectional {
            crate::say!("{} -> {}:", r.interface_in, r.interface_out);
        }
        r.print();
    }
    reports
}

/// OUT's interface index.
fn out_index(dir: &Direction) -> anyhow::Result<u32> {
    ifindex(&dir.output).map_err(|_| usage(format!("-o: no such interface `{}`", dir.output)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_back_direction_writes_beside_the_file() {
        let b = |p: &str| back_file(Path::new(p));
        assert_eq!(b("/tmp/fwd.pcapng"), Path::new("/tmp/fwd-back.pcapng"));
        assert_eq!(b("fwd.pcap.zst"), Path::new("fwd.pcap-back.zst"));
        assert_eq!(b("dir/fwd"), Path::new("dir/fwd-back"));
    }
}
