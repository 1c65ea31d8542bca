//! `poolcap-bench SUITE` (`poolcap bench SUITE`): runs a benchmark suite against the peers
//! and writes raw runs, a CSV, figures and a markdown summary (see [`poolcap_bench`]); `all`
//! runs every suite and writes BENCHMARKS.md, `report` rebuilds BENCHMARKS.md from the
//! latest results.

use std::path::PathBuf;

use clap::builder::PossibleValue;
use clap::{Args, ValueEnum};

use poolcap::cli::usage;
use poolcap_bench::doc::ReportPaths;
use poolcap_bench::manager;
use poolcap_bench::{self as bench, Scale, Suite};

/// What `poolcap bench` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    /// One suite.
    Suite(Suite),
    /// Every suite, then the report.
    All,
    /// BENCHMARKS.md from the latest results, without running anything.
    Report,
    /// The flow exporters against softflowd and pmacctd (outside `all`; its own summary).
    Export,
}

const TARGETS: [Target; 18] = [
    Target::Suite(Suite::Gen),
    Target::Suite(Suite::Capture),
    Target::Suite(Suite::Burst),
    Target::Suite(Suite::Rates),
    Target::Suite(Suite::Imbalance),
    Target::Suite(Suite::Sizes),
    Target::Suite(Suite::Appload),
    Target::Suite(Suite::Wait),
    Target::Suite(Suite::Backends),
    Target::Suite(Suite::Disk),
    Target::Suite(Suite::Soak),
    Target::Suite(Suite::Predict),
    Target::Suite(Suite::Probe),
    Target::Suite(Suite::Forward),
    Target::Suite(Suite::Store),
    Target::All,
    Target::Report,
    Target::Export,
];

impl ValueEnum for Target {
    fn value_variants<'a>() -> &'a [Self] {
        &TARGETS
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(match self {
            Target::Suite(s) => s.name(),
            Target::All => "all",
            Target::Report => "report",
            Target::Export => "export",
        }))
    }
}

/// Arguments of `poolcap-bench SUITE`.
#[derive(Debug, Args)]
#[command(after_help = "Suites:
  gen        poolcap gen vs trafgen at top speed; rate accuracy and spacing at 100k and 300k pps
  capture    poolcap vs tcpdump, netsniff-ng, dumpcap: 64/1514 B, top speed (and 300k pps),
             counting and writing a file: loss, CPU per packet, sender rate
  burst      loss vs burst length for (M,R) = (64,256), (128,128), (256,64) under an x-loop load
  rates      capture and analysis throughput vs offered rate: x = 0/1000/25000, 1 and 2 workers,
             basic and congestion control, and the plain fanout reader (--inplace)
  imbalance  skewed flows on 2 queues: basic vs buddy:60..90 vs the fanout reader; congestion
             control vs basic over offered rates
  sizes      loss vs frame size 72..1200 B, snaplen 96/128/256, buffers 2..32 MB: poolcap,
             tcpdump, dumpcap
  appload    loss vs compression level (zstd, gzip) at 64/256/512 B: poolcap vs tcpdump | zstd
  wait       syscalls per packet and loss of --wait poll/busy/adaptive and of the peers
  backends   AF_XDP (copy mode on veth) vs AF_PACKET: CPU per packet, sender rate, loss
  disk       writing files vs tcpdump -w, dumpcap -w, netsniff-ng -o with equal memory:
             64/512/1514 B/imix, top speed and fixed rates, rps off/on, pcap/pcapng, zstd:1;
             loss, CPU per packet, MB/s; full runs write >= 3 GB per run and one point > 20 GB
             against the disk's dd oflag=direct limit (needs about 25 GB free in /var/tmp)
  soak       10 minutes (30 s with --quick) at 80% of the generator's top rate, writing with
             -C 100 -W 5 under /var/tmp; RSS, open files and threads sampled from /proc into
             samples.csv; reports growth after warm-up and the accounting equation
  predict    calibrate, then paper 002's sessions, a burst and a load grid for poolcap, tcpdump,
             dumpcap: predicted (from this run's calibration) against measured loss
  probe      poolcap probe with 1/10/100/1000 rules, basic and congestion control (and
             --in-kernel once it exists) vs pmacctd and tshark -z conv,ip: capture and analysis
             throughput vs offered rate, loss, CPU per packet
  forward    three hosts: poolcap forward (AF_PACKET, AF_XDP; basic, buddy with an elephant)
             vs netsniff-ng --in/--out and the Linux bridge at 64/512/1514 B, 50k pps and top
             speed, x = 0 and heavy: forwarded pps, loss and reordering at the sink, latency
             p50/p99/p99.9/max, the forwarder's accounting, CPU per packet
  store      the packet store: capture --store vs -w alone (1514 B top, 64 B 300k pps, imix;
             loss, CPU per packet, index bytes); then a query store (2.5 GB quick, > 20 GB full,
             imix over 100k flows) queried for one flow and for 10% of the traffic against
             tcpdump -r over every file and against reading just the matching packets, page
             cache dropped before each (needs about 23 GB free in /var/tmp for a full run)
  all        every suite (sizes with --rps), then `report`
  export     poolcap probe --ipfix vs softflowd and pmacctd's nfprobe into nfcapd (1k-100k flows);
             the CPU of a Prometheus scrape and Kafka records/s (outside `all`)
  report     rebuild BENCHMARKS.md and docs/bench/*.png from the latest result of each suite

Needs root and 2 CPUs: the generator runs on CPU 0, the tool under test on CPU 1 (some suites
put a second worker on CPU 0 and say so). Each suite writes bench/results/SUITE-TIME/
(raw.jsonl, results.csv, meta.json, summary.md, *.png).

Examples:
  poolcap-bench all --quick          # every suite, a few minutes each, then BENCHMARKS.md
  poolcap-bench imbalance --quick
  poolcap-bench soak --minutes 60
  poolcap-bench capture --runs 5 --rps --out /tmp/capture-rps
  poolcap-bench report
(`poolcap bench ...` runs the same.)")]
pub(super) struct BenchArgs {
    /// The suite to run, `all`, or `report`.
    #[arg(value_enum, required = true)]
    target: Option<Target>,
    /// Fewer points and frames (a few minutes per suite on 2 cores).
    #[arg(long, conflicts_with = "smoke")]
    quick: bool,
    /// One tiny point (for tests: counts add up, files exist; the numbers mean nothing).
    #[arg(long)]
    smoke: bool,
    /// soak only: minutes of capture [default: 10; 0.5 with --quick].
    #[arg(long, value_parser = parse_minutes)]
    minutes: Option<f64>,
    /// Runs per point and tool (interleaved).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Only the points whose id contains this (e.g. `/dev/null` in `disk`), or one of its
    /// `|`-separated parts (`calibrate|disk` in `predict`: the calibration points and the long
    /// writing point): a check of a few points of one suite.
    #[arg(long, value_name = "TEXT")]
    points: Option<String>,
    /// Output directory of a single suite [default: RESULTS/SUITE-YYYYMMDD-HHMMSS, UTC].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Set the probe interface's rps_cpus to the tool's CPU, so the kernel's receive work
    /// competes with the tool as with a NIC whose interrupts go to the capture core.
    #[arg(long)]
    rps: bool,
    /// Where result directories go and `report` looks for them.
    #[arg(long, default_value = "bench/results")]
    results: PathBuf,
    /// The markdown file `all` and `report` write.
    #[arg(long, default_value = "BENCHMARKS.md")]
    markdown: PathBuf,
    /// The folder for its figures, relative to the markdown file's folder.
    #[arg(long, default_value = "docs/bench")]
    figures: PathBuf,
    /// Measure this poolcap executable (it also generates the traffic) instead of the one
    /// beside poolcap-bench: a build from before a change, for a before/after comparison on
    /// the same rig.
    #[arg(long, value_name = "POOLCAP")]
    subject: Option<PathBuf>,
}

/// `--minutes`: a positive number.
fn parse_minutes(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(m) if m > 0.0 && m.is_finite() => Ok(m),
        _ => Err(format!("`{s}` is not a positive number of minutes")),
    }
}

/// The command line as typed, quoted where needed.
fn command_line() -> String {
    std::env::args()
        .map(|a| {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'') {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                a
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The poolcap measured: `--subject`, else the one beside this executable.
fn subject(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        return if p.is_file() {
            Ok(p)
        } else {
            Err(usage(format!("--subject: no file {}", p.display())))
        };
    }
    let me = std::env::current_exe()?;
    let poolcap = me.with_file_name("poolcap");
    if poolcap.is_file() {
        Ok(poolcap)
    } else {
        anyhow::bail!(
            "no poolcap beside {} (cargo build --release -p poolcap, or give --subject)",
            me.display()
        )
    }
}

/// Runs `poolcap-bench SUITE`.
pub(super) fn run(args: BenchArgs) -> anyhow::Result<()> {
    let target = args
        .target
        .expect("clap requires a target without a subcommand");
    if args.runs == 0 {
        return Err(usage("--runs must be at least 1"));
    }
    if args.minutes.is_some() && target != Target::Suite(Suite::Soak) {
        return Err(usage("--minutes is for the soak suite only"));
    }
    if args.out.is_some() && !matches!(target, Target::Suite(_) | Target::Export) {
        return Err(usage("--out is for a single suite; use --results with all"));
    }
    let paths = ReportPaths {
        results: args.results.clone(),
        markdown: args.markdown.clone(),
        figures: args.figures.clone(),
        command: match target {
            Target::All => command_line(),
            _ => String::new(),
        },
    };
    let root = args
        .markdown
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or(PathBuf::from("."), PathBuf::from);
    if matches!(target, Target::All | Target::Report) && !bench::doc::is_repo_root(&root) {
        log::info!(
            "note: {} is not the repository root; BENCHMARKS.md goes there anyway",
            root.display()
        );
    }
    let stop = poolcap::cli::flag_on(&[signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])?;
    let scale = match (args.smoke, args.quick) {
        (true, _) => Scale::Smoke,
        (false, true) => Scale::Quick,
        (false, false) => Scale::Full,
    };
    let subject = subject(args.subject.clone())?;
    let template = |suite: Suite| bench::Options {
        suite,
        scale,
        runs: args.runs,
        minutes: args.minutes,
        rps: args.rps,
        out: args
            .out
            .clone()
            .unwrap_or_else(|| manager::default_out(&args.results, suite)),
        command: command_line(),
        subject: subject.clone(),
        points: args.points.clone(),
    };
    match target {
        Target::Suite(s) => bench::run(&template(s), stop).map(|_| ()),
        Target::All => manager::run_all(&template(Suite::Gen), &paths, stop),
        Target::Report => manager::report(&paths),
        Target::Export => {
            let out = args.out.clone().unwrap_or_else(|| {
                args.results
                    .join(format!("export-{}", manager::timestamp(manager::now())))
            });
            bench::suites::export::run(&subject.to_string_lossy(), scale, &out, &stop).map(|_| ())
        }
    }
}
