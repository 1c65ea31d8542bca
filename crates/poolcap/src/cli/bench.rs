//! `poolcap bench`: runs a benchmark suite against the peers and writes raw runs, a CSV and a
//! markdown summary (see [`crate::bench`]).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Args;

use crate::bench::{self, Suite};
use crate::cli::usage;

/// Arguments of `poolcap bench`.
#[derive(Debug, Args)]
#[command(after_help = "Suites:
  gen      poolcap gen vs trafgen at top speed; rate accuracy and spacing at 100k and 300k pps
  capture  poolcap vs tcpdump, netsniff-ng, dumpcap: 64/1514 B, top speed (and 300k pps),
           counting and writing a file: loss, CPU per packet, sender rate
  burst    loss vs burst length for (M,R) = (64,256), (128,128), (256,64) under an x-loop load

Needs root and 2 CPUs: the generator runs on CPU 0, the tool under test on CPU 1.

Examples:
  poolcap bench gen --quick
  poolcap bench capture --runs 5 --rps --out /tmp/capture-rps")]
pub struct BenchArgs {
    /// The suite to run.
    #[arg(value_enum)]
    suite: Suite,
    /// Fewer points and frames (a few minutes on 2 cores).
    #[arg(long)]
    quick: bool,
    /// Runs per point and tool (interleaved).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Output directory [default: bench/results/SUITE-YYYYMMDD-HHMMSS, UTC].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Set the probe interface's rps_cpus to the tool's CPU, so the kernel's receive work
    /// competes with the tool as with a NIC whose interrupts go to the capture core.
    #[arg(long)]
    rps: bool,
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

/// Runs `poolcap bench`.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if args.runs == 0 {
        return Err(usage("--runs must be at least 1"));
    }
    let out = args.out.unwrap_or_else(|| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        PathBuf::from("bench/results").join(format!(
            "{}-{}",
            args.suite.name(),
            bench::manager::timestamp(now)
        ))
    });
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let opts = bench::Options {
        suite: args.suite,
        quick: args.quick,
        runs: args.runs,
        rps: args.rps,
        out,
        command: command_line(),
    };
    bench::run(&opts, stop)
}
