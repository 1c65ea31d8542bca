//! `poolcap probe`: the engine with the probe's rules on its workers, live (`-i`) or over a
//! capture file (`-r`, the engine's file source); reports per period as JSON Lines and a
//! table.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clap::{Args, Parser};
use poolcap_export::metrics::RuleCounters;
use poolcap_probe::report::RuleRecord;
use poolcap_probe::Hub;

use crate::capture::needs::{Doing, Needs};
use crate::capture::{CaptureConfig, CaptureReport, Engine, Output};
use crate::cli::capture::{config as capture_config, print_report, CaptureArgs};
use crate::cli::launch::{engine_error, Launch, Launched};
use crate::cli::{export, privdrop, usage};
use crate::probe::control::ControlSocket;
use crate::probe::kernel::{self, KernelRules};
use crate::probe::live::Manager;
use crate::probe::reporter::{PeriodHook, Reporter};
use crate::{probe, units};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// Arguments of `poolcap probe`.
#[derive(Debug, Args)]
#[command(
    after_help = "The configuration (TOML) holds the report period and the rules; see \
docs/probe.md. While a live probe runs, `poolcap ctl SOCKET rule enable|disable NAME`, `ctl SOCKET \
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
    /// Analyse a pcap/pcapng file (plain, .gz or .zst; `-` for standard input) instead,
    /// through the same engine; periods follow the packets' timestamps.
    #[arg(short = 'r')]
    read: Option<PathBuf>,
    /// With -r: replay at X times the recorded pace (default: as fast as possible).
    #[arg(long, requires = "read")]
    speed: Option<String>,
    /// The probe configuration (TOML).
    #[arg(short = 'c', long = "config")]
    config: PathBuf,
    /// Also write the captured packets to FILE (pcapng).
    #[arg(short = 'w', conflicts_with = "read")]
    write: Option<PathBuf>,
    #[command(flatten)]
    store: crate::cli::store::StoreOptions,
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
    #[arg(long)]
    workers: Option<usize>,
    /// Extra synthetic analysis cost: x-loop iterations per packet after the rules.
    #[arg(long)]
    load: Option<u32>,
    /// Pool per queue as M,R.
    #[arg(long)]
    pool: Option<String>,
    /// Offload policy: basic, buddy:T or congestion:HIGH,LOW (as for capture).
    #[arg(long)]
    offload: Option<String>,
    /// Capture backend: af_packet, af_xdp or auto.
    #[arg(long, conflicts_with = "read")]
    backend: Option<String>,
    /// Stop after this long (e.g. 30s); otherwise at SIGINT or SIGTERM.
    #[arg(long, value_parser = units::parse_duration, conflicts_with = "read")]
    duration: Option<Duration>,
    /// Count rules in eBPF programs at the interface's tc ingress instead of on the
    /// workers: `--in-kernel` runs every rule there or refuses one it cannot (alert, or
    /// beyond 2048 rules or 496 flows rules); `--in-kernel=auto` runs those in user space.
    /// With every rule in the kernel,
    /// no `-w` and no `--metrics`, no capture socket is opened at all.
    #[arg(long, value_name = "on|auto", num_args = 0..=1, require_equals = true,
          default_missing_value = "on", conflicts_with = "read")]
    in_kernel: Option<kernel::Mode>,
    /// No table on stdout (the JSON Lines report still gets every period).
    #[arg(short = 'q')]
    quiet: bool,
    /// Don't put the interface into promiscuous mode (tcpdump's -p).
    #[arg(short = 'p', long = "no-promiscuous-mode", conflicts_with = "read")]
    no_promiscuous: bool,
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
    let mut v: Vec<String> = match &a.read {
        Some(file) => vec![
            "-r".into(),
            file.to_string_lossy().into_owned(),
            "-q".into(),
        ],
        None => vec!["-i".into(), iface.into(), "-q".into()],
    };
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
    // In-kernel rules count at tc ingress, which AF_XDP's XDP program would bypass.
    let backend = match (a.backend.as_deref(), a.in_kernel) {
        (None | Some("auto"), Some(_)) => Some("af_packet".to_string()),
        (b, _) => b.map(str::to_string),
    };
    opt("--backend", backend);
    opt("--speed", a.speed.clone());
    if a.no_promiscuous {
        v.push("-p".into());
    }
    v
}

/// The engine's configuration, resolved by `poolcap capture`'s parser.
fn engine_config(a: &ProbeArgs, iface: &str) -> anyhow::Result<CaptureConfig> {
    let parsed = EngineArgv::try_parse_from(engine_argv(a, iface)).map_err(|e| {
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
    // Rules are compiled for, and flows read from, Ethernet frames.
    if a.read.is_none() {
        let linktype = crate::capture::linktype::of_interface(iface)?;
        if linktype != poolcap_format::LinkType::ETHERNET {
            return Err(usage(format!(
                "the probe runs on Ethernet interfaces; {iface} is {linktype}"
            )));
        }
    }
    let mut cfg = capture_config(&parsed.capture)?;
    // -w and --duration are a live probe's (they conflict with -r).
    cfg.output = a
        .write
        .clone()
        .map(|p| (Output::File(p), poolcap_format::FileFormat::Pcapng));
    cfg.duration = a.duration;
    Ok(cfg)
}

/// Runs the periodic action manager on its own thread; a failure stops the capture.
fn spawn_manager(
    manager: Manager,
    stop: &Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<Result<Vec<RuleRecord>, probe::ProbeError>>> {
    let stop_on_failure = Arc::clone(stop);
    std::thread::Builder::new()
        .name("probe-manager".into())
        .spawn(move || {
            let r = manager.run();
            if r.is_err() {
                stop_on_failure.store(true, Ordering::Relaxed);
            }
            r
        })
}

/// Hands every period's records to the flow exporters.
fn feed_exporters(reporter: &mut Reporter, exporters: &export::Exporters) {
    for hook in exporter_hooks(exporters, false) {
        reporter.on_period(hook);
    }
}

/// The exporters' period hooks; `wait`: a file's, which wait for room rather than drop.
fn exporter_hooks(exporters: &export::Exporters, wait: bool) -> Vec<PeriodHook> {
    let mut hooks: Vec<PeriodHook> = Vec::new();
    if let Some(x) = &exporters.ipfix {
        let flows = if wait {
            x.sender().waiting()
        } else {
            x.sender()
        };
        hooks.push(Box::new(move |records| flows.offer(records)));
    }
    if let Some(x) = &exporters.kafka {
        let periods = if wait {
            x.sender().waiting()
        } else {
            x.sender()
        };
        hooks.push(Box::new(move |records| periods.offer(records)));
    }
    hooks
}

/// Why a probe with this configuration reports or exports nothing, if it does not: said at
/// start, so a run that stays silent says so.
fn nothing_to_show(args: &ProbeArgs, config: &poolcap_probe::Config) -> Option<String> {
    let file = args.config.display();
    if config.rules.is_empty() {
        return Some(format!(
            "probe: {file} has no rules: reports hold only the capture's accounting{}",
            if args.ipfix.is_set() || args.kafka.is_set() {
                ", and no flow records are exported"
            } else {
                ""
            }
        ));
    }
    let flows = config.rules.iter().any(|r| r.flows.is_some());
    (args.ipfix.is_set() && !flows).then(|| {
        format!("ipfix: no rule in {file} has the flows action: no flow records will be exported")
    })
}

/// Runs `poolcap probe`.
pub fn run(args: ProbeArgs) -> anyhow::Result<()> {
    let mut config = poolcap_probe::config::load(&args.config).map_err(|e| usage(e.to_string()))?;
    if let Some(why) = nothing_to_show(&args, &config) {
        log::warn!("{why}");
    }
    if let Some(file) = &args.read {
        return run_file(&args, config, file);
    }
    let iface = args.iface.clone().unwrap_or_default();
    if place_in_kernel(&args, &mut config)? {
        return run_in_kernel(args, config, &iface);
    }
    run_live(args, config, &iface)
}

/// `-r FILE`: the rules over a capture file, periods by the packets' timestamps.
fn run_file(args: &ProbeArgs, config: poolcap_probe::Config, file: &Path) -> anyhow::Result<()> {
    if args.metrics.is_set() {
        return Err(usage("--metrics needs a live probe (-i)"));
    }
    let cfg = engine_config(args, "")?;
    let launched = launch(args, Needs::of(&cfg))?;
    // A file has no interface: ingressInterface 0, the file's name in Kafka keys.
    let ipfix = export::plan_ipfix(&args.ipfix, 0)?;
    let kafka = export::plan_kafka(&args.kafka, &file.display().to_string())?;
    let stop = launched.stop();
    drop_privileges(args, &launched, None)?;
    launched.ready();
    let exporters = export::start_exporters(ipfix, kafka)?;
    let hooks = exporter_hooks(&exporters, true);
    let report = args.report.as_deref();
    let probed = probe::offline::run(cfg, config, report, !args.quiet, stop, hooks);
    exporters.finish();
    let (report, unwritten) = probed.map_err(|e| match e {
        probe::ProbeError::Capture(c) => engine_error(c),
        e => e.into(),
    })?;
    crate::say!("probed {}", file.display());
    print_report(&report);
    if let Some(e) = &report.capture_error {
        anyhow::bail!("{e}");
    }
    unwritten.map_or(Ok(()), |u| Err(u.into()))
}

/// `--in-kernel`: places the rules (in `config`) and says whether every one went to the
/// kernel and nothing else needs a capture socket.
fn place_in_kernel(args: &ProbeArgs, config: &mut poolcap_probe::Config) -> anyhow::Result<bool> {
    match args.in_kernel {
        Some(_) if args.backend.as_deref() == Some("af_xdp") => Err(usage(
            "--in-kernel counts at tc ingress, which the AF_XDP backend's XDP program \
             bypasses: use --backend af_packet",
        )),
        Some(mode) => {
            let alone = kernel::all_in_kernel(config)
                && args.write.is_none()
                && args.store.store.is_none()
                && !args.metrics.is_set();
            kernel::place(config, mode, !alone).map_err(usage)?;
            Ok(alone)
        }
        None => Ok(false),
    }
}

/// The launch sequence of every probe (a file, live, in the kernel) for what it `needs`.
fn launch(args: &ProbeArgs, needs: Needs) -> anyhow::Result<Launched> {
    Launch {
        needs,
        doing: Doing::Capturing,
        user: args.privileges.user.as_deref(),
        stats_json: None,
        metrics: &args.metrics,
        stop_on: &[SIGINT, SIGTERM],
    }
    .prepare()
}

/// A live probe: the launch sequence, the engine with the rules on its workers, the period
/// manager and the exporters.
fn run_live(args: ProbeArgs, config: poolcap_probe::Config, iface: &str) -> anyhow::Result<()> {
    let mut cfg = engine_config(&args, iface)?;
    let mut launched = launch(&args, Needs::of(&cfg))?;
    let ipfix = export::plan_ipfix(&args.ipfix, poolcap_sys::socket::ifindex(iface)?)?;
    let kafka = export::plan_kafka(&args.kafka, iface)?;
    let pending_store = args.store.open(None, &mut cfg)?;
    let warning = capture_warning(&args, &cfg, &config);
    let (queues, workers) = (cfg.queues, cfg.workers);
    let (hub, reporter, socket) = open_rules(&args, iface, config)?;
    cfg.probe = Some(hub);
    let started = Engine::start(cfg, launched.stop(), |out| {
        drop_privileges(&args, &launched, out)
    });
    let engine = launched.opened(started.map_err(engine_error))?;
    launched.wake(&engine);
    // Started without privileges even where the probe keeps them (for its in-kernel rules).
    let exporters = privdrop::unprivileged(|| export::start_exporters(ipfix, kafka));
    let exporters = match launched.opened(exporters) {
        Ok(x) => x,
        Err(e) => {
            let _ = engine.run();
            return Err(e);
        }
    };
    let store = pending_store.map(|p| p.start()).transpose()?;
    let metrics = launched
        .take_metrics()
        .map(|m| export::serve_metrics(m, &engine, args.write.is_some(), exporters.counters()))
        .transpose()?;
    let rules = metrics.as_ref().map(|(_, rules)| rules.clone());
    let manager = Manager {
        reporter: with_outputs(reporter, rules, &exporters),
        config_path: args.config.clone(),
        counters: engine.counters(),
        socket,
        hangup: crate::cli::flag_on(&[SIGHUP])?,
        engine_done: Arc::new(AtomicBool::new(false)),
    };
    let engine_done = Arc::clone(&manager.engine_done);
    let manager = spawn_manager(manager, &launched.stop())?;
    announce(iface, queues, workers, &engine, warning.as_deref());
    launched.ready();
    let report = engine.run();
    engine_done.store(true, Ordering::Release);
    let last = manager
        .join()
        .map_err(|_| anyhow::anyhow!("the probe manager panicked"))?;
    ended(&report, last.map(drop), exporters, store)
}

/// The engine's `after_open` step: the privileges go, and the report, the ctl socket and
/// the capture file to -Z's user. With rules in the kernel a rule change loads new programs
/// (CAP_BPF), so, as with every rule there, the privileges go only when -Z asks.
fn drop_privileges(
    args: &ProbeArgs,
    launched: &Launched,
    out: Option<&Path>,
) -> Result<(), poolcap_sys::SysError> {
    if args.in_kernel.is_some() && args.privileges.user.is_none() {
        return Ok(());
    }
    let store = args.store.store.as_deref();
    let owned: Vec<&Path> = [args.report.as_deref(), args.ctl.as_deref(), store, out]
        .into_iter()
        .flatten()
        .collect();
    launched.drop_privileges(&owned)
}

/// The end of a live probe: the accounting, the store's, the exporters' last records, then the first
/// failure of the manager, the writer or the capture.
fn ended(
    report: &CaptureReport,
    manager: Result<(), probe::ProbeError>,
    exporters: export::Exporters,
    store: Option<crate::cli::store::RunningStore>,
) -> anyhow::Result<()> {
    print_report(report);
    crate::cli::store::finish(store);
    exporters.finish();
    manager?;
    if let Some(e) = &report.write_error {
        anyhow::bail!("write error: {e}");
    }
    if let Some(e) = &report.capture_error {
        anyhow::bail!("{e}");
    }
    Ok(())
}

/// The reporter with its period outputs: the metrics' rule counters and the exporters.
fn with_outputs(
    mut reporter: Reporter,
    rules: Option<RuleCounters>,
    exporters: &export::Exporters,
) -> Reporter {
    if let Some(rules) = rules {
        reporter.on_period(Box::new(move |records| rules.add_period(records)));
    }
    feed_exporters(&mut reporter, exporters);
    reporter
}

/// The load model's warning for this probe; none with rules in the kernel (the model knows
/// rules on the workers only).
fn capture_warning(
    args: &ProbeArgs,
    cfg: &CaptureConfig,
    config: &poolcap_probe::Config,
) -> Option<String> {
    if args.in_kernel.is_some() {
        return None;
    }
    let flow_rules = crate::cli::predict::flow_rules(config);
    crate::cli::predict::capture_warning(cfg, (config.rules.len(), flow_rules))
}

/// The rules' hub, the period reporter (its report file created now, before the privileges
/// go, to be handed to -Z's user) with the in-kernel rules if any, and the ctl socket.
fn open_rules(
    args: &ProbeArgs,
    iface: &str,
    config: poolcap_probe::Config,
) -> anyhow::Result<(Arc<Hub>, Reporter, Option<ControlSocket>)> {
    let kernel = args
        .in_kernel
        .map(|mode| KernelRules::start(mode, iface, &config, true))
        .transpose()?;
    let hub = Hub::new(config);
    let socket = args.ctl.as_deref().map(ControlSocket::bind).transpose()?;
    let mut reporter = Reporter::new(
        Arc::clone(&hub),
        SystemTime::now(),
        args.report.as_deref(),
        !args.quiet,
    )?;
    if let Some(k) = kernel {
        reporter.set_kernel(k);
    }
    Ok((hub, reporter, socket))
}

/// The start-up lines of a live probe.
fn announce(iface: &str, queues: usize, workers: usize, engine: &Engine, warning: Option<&str>) {
    log::info!(
        "probing on {iface}, {queues} queue{}, {workers} worker{}",
        if queues == 1 { "" } else { "s" },
        if workers == 1 { "" } else { "s" },
    );
    log::info!("{}", engine.backend_report());
    if let Some(w) = warning {
        log::warn!("{w}");
    }
}

/// `--in-kernel` with every rule in the kernel: no capture socket, no workers; the manager
/// reads the program's map at each period until SIGINT, SIGTERM or `--duration`.
fn run_in_kernel(
    args: ProbeArgs,
    config: poolcap_probe::Config,
    iface: &str,
) -> anyhow::Result<()> {
    let mode = args.in_kernel.unwrap_or(kernel::Mode::On);
    let launched = launch(&args, Needs::TcPrograms)?;
    let ipfix = export::plan_ipfix(&args.ipfix, poolcap_sys::socket::ifindex(iface)?)?;
    let kafka = export::plan_kafka(&args.kafka, iface)?;
    let kernel = KernelRules::start(mode, iface, &config, false)?;
    let socket = args.ctl.as_deref().map(ControlSocket::bind).transpose()?;
    let hangup = crate::cli::flag_on(&[SIGHUP])?;
    let hub = Hub::new(config);
    let started = SystemTime::now();
    let mut reporter = Reporter::new(hub, started, args.report.as_deref(), !args.quiet)?;
    reporter.set_kernel(kernel);
    // The program, the ctl socket and the report file are open by now; the exporters'
    // threads start after the drop, and without privileges where the probe keeps them.
    drop_privileges(&args, &launched, None)?;
    let exporters = privdrop::unprivileged(|| export::start_exporters(ipfix, kafka))?;
    feed_exporters(&mut reporter, &exporters);
    let done = Arc::new(AtomicBool::new(false));
    let manager = Manager {
        reporter,
        config_path: args.config.clone(),
        counters: Arc::new(Vec::new()),
        socket,
        hangup,
        engine_done: Arc::clone(&done),
    };
    let stop = launched.stop();
    let manager = spawn_manager(manager, &stop)?;
    log::info!("probing on {iface} in the kernel (tc ingress), no capture socket");
    launched.ready();
    let deadline = args.duration.map(|d| std::time::Instant::now() + d);
    while !stop.load(Ordering::Relaxed) && deadline.is_none_or(|d| std::time::Instant::now() < d) {
        std::thread::sleep(Duration::from_millis(20));
    }
    done.store(true, Ordering::Release);
    let last = manager
        .join()
        .map_err(|_| anyhow::anyhow!("the probe manager panicked"))?;
    exporters.finish();
    last?;
    // The capture totals a socket-based probe prints, for scripts reading either: with no
    // socket and no pool, nothing was dropped on the way to the rules.
    crate::say!("0 packets dropped by kernel (no capture socket)");
    crate::say!("0 packets dropped by pool");
    Ok(())
}
