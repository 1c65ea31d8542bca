//! `poolcap probe`: the engine with the probe's rules on its workers (live, `-i`), or the
//! same analysis over a capture file (`-r`); reports per period as JSON Lines and a table.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clap::{Args, Parser};
use poolcap_probe::Hub;

use crate::capture::{CaptureError, Engine, Output};
use crate::cli::capture::{config as capture_config, print_report, CaptureArgs};
use crate::cli::{export, privdrop, usage};
use crate::probe::control::ControlSocket;
use crate::probe::live::Manager;
use crate::probe::reporter::Reporter;
use crate::{probe, units};

/// Arguments of `poolcap probe`.
#[derive(Debug, Args)]
#[command(
    after_help = "The configuration (TOML) holds the report period and the rules; see the \
README. While a live probe runs, `poolcap ctl SOCKET rule enable|disable NAME`, `ctl SOCKET \
period 5s`, `ctl SOCKET reload` (or SIGHUP) change the rules without stopping capture.

Examples:
  poolcap probe -i eth0 -c probe.toml --report periods.jsonl --ctl /run/poolcap.sock
  poolcap probe -r trace.pcapng -c probe.toml"
)]
pub struct ProbeArgs {
    /// Interface to capture on.
    #[arg(
        short = 'i',
        long = "interface",
        required_unless_present = "read",
        conflicts_with = "read"
    )]
    iface: Option<String>,
    /// Analyse a capture file instead.
    #[arg(short = 'r')]
    read: Option<PathBuf>,
    /// The probe configuration (TOML).
    #[arg(short = 'c', long = "config")]
    config: PathBuf,
    /// Also write the captured packets to FILE (pcapng).
    #[arg(short = 'w', conflicts_with = "read")]
    write: Option<PathBuf>,
    /// Write each period's records as JSON Lines to FILE.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Serve `poolcap ctl` on this Unix socket (mode 0600).
    #[arg(long, conflicts_with = "read")]
    ctl: Option<PathBuf>,
    /// Receive queues (default: the interface's).
    #[arg(long, conflicts_with = "read")]
    queues: Option<usize>,
    /// Worker threads running the rules (default: one per queue).
    #[arg(long, conflicts_with = "read")]
    workers: Option<usize>,
    /// Extra synthetic analysis cost: x-loop iterations per packet after the rules.
    #[arg(long, conflicts_with = "read")]
    load: Option<u32>,
    /// Pool per queue as M,R.
    #[arg(long, conflicts_with = "read")]
    pool: Option<String>,
    /// Offload policy: basic, buddy:T or congestion:HIGH,LOW (as for capture).
    #[arg(long, conflicts_with = "read")]
    offload: Option<String>,
    /// Capture backend: af_packet, af_xdp or auto.
    #[arg(long, conflicts_with = "read")]
    backend: Option<String>,
    /// Stop after this long (e.g. 30s); otherwise at SIGINT or SIGTERM.
    #[arg(long, value_parser = units::parse_duration, conflicts_with = "read")]
    duration: Option<Duration>,
    /// No table on stdout (the JSON Lines report still gets every period).
    #[arg(short = 'q')]
    quiet: bool,
    #[command(flatten)]
    metrics: export::MetricsArgs,
    #[command(flatten)]
    ipfix: export::IpfixArgs,
    #[command(flatten)]
    kafka: export::KafkaArgs,
    #[command(flatten)]
    privileges: privdrop::UserArg,
}

/// The capture options a probe passes through, parsed by `poolcap capture`'s own parser so
/// both commands resolve queues, pools and backends alike.
#[derive(Debug, Parser)]
#[command(no_binary_name = true)]
struct EngineArgv {
    #[command(flatten)]
    capture: CaptureArgs,
}

fn engine_argv(a: &ProbeArgs, iface: &str) -> Vec<String> {
    let mut v: Vec<String> = vec!["-i".into(), iface.into(), "-q".into()];
    let mut opt = |name: &str, value: Option<String>| {
        if let Some(x) = value {
            v.push(name.into());
            v.push(x);
        }
    };
    opt("--queues", a.queues.map(|q| q.to_string()));
    opt("--workers", a.workers.map(|w| w.to_string()));
    opt("--pool", a.pool.clone());
    opt("--load", a.load.map(|x| x.to_string()));
    opt("--offload", a.offload.clone());
    opt("--backend", a.backend.clone());
    v
}

/// Runs `poolcap probe`.
pub fn run(args: ProbeArgs) -> anyhow::Result<()> {
    let config = poolcap_probe::config::load(&args.config).map_err(|e| usage(e.to_string()))?;
    if let Some(file) = &args.read {
        if args.metrics.is_set() || args.ipfix.is_set() || args.kafka.is_set() {
            return Err(usage(
                "--metrics, --ipfix and --kafka need a live probe (-i)",
            ));
        }
        probe::offline::run(file, config, args.report.as_deref(), !args.quiet)?;
        return Ok(());
    }
    let iface = args.iface.clone().unwrap_or_default();
    let parsed = EngineArgv::try_parse_from(engine_argv(&args, &iface)).map_err(|e| {
        usage(
            e.render()
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ")
                .to_string(),
        )
    })?;
    let mut cfg = capture_config(&parsed.capture)?;
    poolcap_sys::privilege::check_raw_sockets("capturing packets")?;
    let privileges = privdrop::prepare(args.privileges.user.as_deref())?;
    let metrics = export::bind_metrics(&args.metrics)?;
    let ipfix = export::plan_ipfix(&args.ipfix)?;
    let kafka = export::plan_kafka(&args.kafka, &iface)?;
    cfg.output = args
        .write
        .clone()
        .map(|p| (Output::File(p), poolcap_format::FileFormat::Pcapng));
    cfg.duration = args.duration;
    let hub = Hub::new(config);
    cfg.probe = Some(Arc::clone(&hub));
    let socket = args.ctl.as_deref().map(ControlSocket::bind).transpose()?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let hangup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hangup))?;
    let (queues, workers) = (cfg.queues, cfg.workers);
    // The report file is created before the privileges go, and handed to -Z's user.
    let mut reporter = Reporter::new(hub, SystemTime::now(), args.report.as_deref(), !args.quiet)?;
    let kept = [args.report.as_deref(), args.ctl.as_deref()];
    let engine = Engine::start(cfg, Arc::clone(&stop), |out| {
        let owned: Vec<_> = kept.into_iter().chain([out]).flatten().collect();
        privdrop::apply(&privileges, &owned)
    })
    .map_err(|e| match e {
        CaptureError::Filter(f) => usage(f.to_string()),
        e => anyhow::Error::new(e),
    })?;
    let exporters = match export::start_exporters(ipfix, kafka) {
        Ok(x) => x,
        Err(e) => {
            stop.store(true, Ordering::Relaxed);
            let _ = engine.run();
            return Err(e);
        }
    };
    let engine_done = Arc::new(AtomicBool::new(false));
    let metrics = metrics
        .map(|m| export::serve_metrics(m, &engine, args.write.is_some(), exporters.counters()))
        .transpose()?;
    if let Some((_, rules)) = &metrics {
        let rules = rules.clone();
        reporter.on_period(Box::new(move |records| rules.add_period(records)));
    }
    if let Some(x) = &exporters.ipfix {
        let flows = x.sender();
        reporter.on_period(Box::new(move |records| flows.offer(records)));
    }
    if let Some(x) = &exporters.kafka {
        let periods = x.sender();
        reporter.on_period(Box::new(move |records| periods.offer(records)));
    }
    let manager = Manager {
        reporter,
        config_path: args.config.clone(),
        counters: engine.counters(),
        socket,
        hangup,
        engine_done: Arc::clone(&engine_done),
    };
    let stop_on_failure = Arc::clone(&stop);
    let manager = std::thread::Builder::new()
        .name("probe-manager".into())
        .spawn(move || {
            let r = manager.run();
            if r.is_err() {
                stop_on_failure.store(true, Ordering::Relaxed);
            }
            r
        })?;
    eprintln!(
        "probing on {iface}, {queues} queue{}, {workers} worker{}",
        if queues == 1 { "" } else { "s" },
        if workers == 1 { "" } else { "s" },
    );
    eprintln!("{}", engine.backend_report());
    let report = engine.run();
    engine_done.store(true, Ordering::Release);
    let last = manager
        .join()
        .map_err(|_| anyhow::anyhow!("the probe manager panicked"))?;
    print_report(&report);
    exporters.finish();
    last?;
    if let Some(e) = &report.write_error {
        anyhow::bail!("write error: {e}");
    }
    if let Some(e) = &report.capture_error {
        anyhow::bail!("{e}");
    }
    Ok(())
}
