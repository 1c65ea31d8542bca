//! `poolcap-bench sim` (`poolcap sim`): one simulated run with a per-queue table, or a sweep written as CSV + PNG.
//!
//! Why on the command line: the simulator answers "what would n queues do" questions in
//! seconds, with the engine's own policies, where the two-core lab cannot; the sweeps
//! regenerate the figures of the WireCAP paper's advanced-mode section.

use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, Subcommand, ValueEnum};

use poolcap::capture::policy::{parse_buddy_groups, PolicySpec};
use poolcap::cli::usage;
use poolcap::units;
use poolcap_bench::plot::Chart;
use poolcap_bench::sim::model::{self, policy_label, Arrivals, Config, Shape, Split};
use poolcap_bench::sim::report::Row;
use poolcap_bench::sim::sweep::{self, Job};

/// Arguments of `poolcap sim`.
#[derive(Debug, Args)]
#[command(
    args_conflicts_with_subcommands = true,
    after_help = "Model: per receive queue the engine's own capture thread (its decisions, pool and \
offload policy: the code a capture runs) in virtual time, infinitely fast, over a kernel ring of \
--ring packets; it fills chunks of M packets from a pool of R chunks (--pool M,R), and one worker \
spends --cost-ns per packet on the chunks of its capture queue. A chunk is sealed when full, or \
when the ring is idle and it has been open --seal-after, and the policy picks the capture queue \
it joins; it always returns to its home pool. When the next batch would not fit with a chunk to \
spare, or the policy pauses the capture, packets wait in the kernel ring, and beyond it are \
dropped by the kernel; the pool drops only what neither holds. Every packet ends processed, \
dropped by the kernel or dropped by the pool.

Defaults (the regime the sweeps study): 1 Mpps in 1000 flows with Zipf(1.1) shares, each flow \
hashed to a queue and ON a quarter of the time (10 ms mean ON periods, sending at 4x its average \
while ON); workers spend 3.5 us per packet. Four workers handle 1.14 Mpps, so the capacity \
suffices on average even at 4 queues (88% load), but the elephant flow carries 18% of the \
packets, 720 kpps while ON, and overloads whichever queue it lands on: basic loses there whatever \
the number of queues, and only offloading can use the idle workers. Pool 256 x 100 as WireCAP's \
A-(256,100,T), kernel ring 4096 packets, 2 virtual seconds per run; sweeps average 3 seeds.

Examples:
  poolcap sim --queues 4 --policy buddy:60
  poolcap sim --queues 8 --policy congestion:90,50 --arrivals poisson --rate 3M
  poolcap sim --arrivals onoff --burst 50k --peak 2M --idle 100ms --policy basic
  poolcap sim --queues 4 --arrivals poisson --queue-rates 450k,150k,150k,150k --policy buddy:60
  poolcap sim sweep queues               # drop rate vs queues (4..64), 4 policies
  poolcap sim sweep threshold --out dir  # drop rate vs T = 60..90"
)]
pub(super) struct SimArgs {
    #[command(subcommand)]
    command: Option<Box<SimCommand>>,
    #[command(flatten)]
    model: ModelArgs,
}

#[derive(Debug, Subcommand)]
enum SimCommand {
    /// Run an experiment (many runs, in parallel) and write CSV + PNG to --out.
    Sweep(SweepArgs),
}

/// Which experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SweepKind {
    /// Drop rate vs number of queues for each policy (WireCAP Fig. 11, to 64 queues).
    Queues,
    /// Drop rate vs offload threshold T of buddy:T, with basic as reference (Fig. 12).
    Threshold,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Every other option sets the baseline of all runs, as for `poolcap sim` \
(--queues is replaced by --queue-counts).
Files: DIR/sweep-queues.{csv,png} or DIR/sweep-threshold.{csv,png}; one CSV row per run."
)]
struct SweepArgs {
    /// The experiment.
    #[arg(value_enum)]
    what: SweepKind,
    /// Directory for the CSV and the PNG.
    #[arg(long, default_value = "sim-results")]
    out: PathBuf,
    /// Policies compared by the queues sweep.
    #[arg(long, num_args = 1.., default_values_t = sweep::POLICIES.iter().map(|s| s.to_string()).collect::<Vec<_>>())]
    policies: Vec<String>,
    /// Queue counts [queues sweep: 4,5,6,8,16,64; threshold sweep: 4,5,6].
    #[arg(long, value_delimiter = ',')]
    queue_counts: Option<Vec<usize>>,
    /// Thresholds T of the threshold sweep, percent.
    #[arg(long, value_delimiter = ',', default_values_t = sweep::THRESHOLDS.to_vec())]
    thresholds: Vec<f64>,
    /// Runs per point with seeds --seed, --seed+1, ...; the chart shows their mean.
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// Logarithmic y axis (zero drop rates are then left out).
    #[arg(long)]
    log_y: bool,
    /// Parallel runs (default: one per CPU).
    #[arg(long)]
    threads: Option<usize>,
    #[command(flatten)]
    model: ModelArgs,
}

/// How packets arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ArrivalKind {
    /// Evenly spaced packets, --rate split evenly (or --queue-rates).
    Constant,
    /// Poisson, --rate split evenly (or --queue-rates).
    Poisson,
    /// Bursts of --burst packets at --peak, then --idle of silence, on every queue.
    Onoff,
    /// --flows flows with Zipf(--zipf) shares of --rate, hashed to queues; each flow ON and
    /// OFF (--duty, --on-mean), Poisson while ON.
    Zipf,
}

#[derive(Debug, Args)]
struct ModelArgs {
    /// Receive queues (1 to 64), each with its own pool, capture queue and worker.
    #[arg(long, default_value_t = model::DEFAULT_QUEUES)]
    queues: usize,
    /// basic, buddy:T (offload past T% of R) or congestion:HIGH,LOW (pause capture).
    #[arg(long, default_value = "basic")]
    policy: PolicySpec,
    /// Buddy groups, e.g. "0,1;2,3" (default: all queues in one group).
    #[arg(long)]
    buddy_groups: Option<String>,
    /// Arrival process.
    #[arg(long, value_enum, default_value = "zipf")]
    arrivals: ArrivalKind,
    /// Total average rate, packets/s (300k, 2M).
    #[arg(long, default_value = "1M", value_parser = parse_pps)]
    rate: f64,
    /// Rates per queue instead of --rate (constant and poisson), e.g. 450k,150k,150k,150k.
    #[arg(long, value_delimiter = ',', value_parser = parse_pps)]
    queue_rates: Option<Vec<f64>>,
    /// Flows of the zipf arrivals.
    #[arg(long, default_value_t = model::DEFAULT_FLOWS)]
    flows: usize,
    /// Zipf exponent of the flow shares.
    #[arg(long, default_value_t = model::DEFAULT_ZIPF)]
    zipf: f64,
    /// Share of time each flow is ON: below 1, every flow (zipf) or queue (poisson)
    /// alternates ON and OFF periods and sends at its rate / duty while ON [default: 0.25
    /// for zipf, 1 (plain Poisson) for poisson].
    #[arg(long)]
    duty: Option<f64>,
    /// Mean ON period of a flow when --duty < 1 (OFF periods follow from the duty).
    #[arg(long, default_value = "10ms", value_parser = units::parse_duration)]
    on_mean: std::time::Duration,
    /// Packets per burst (onoff).
    #[arg(long, default_value = "10k", value_parser = units::parse_count)]
    burst: u64,
    /// Packet rate inside a burst, per queue (onoff).
    #[arg(long, default_value = "1M", value_parser = parse_pps)]
    peak: f64,
    /// Silence after each burst (onoff), e.g. 20ms.
    #[arg(long, default_value = "20ms", value_parser = units::parse_duration)]
    idle: std::time::Duration,
    /// Worker cost per packet in ns: one value, or one per queue (3500 or 3500,7000,...).
    #[arg(long, value_delimiter = ',', default_values_t = vec![model::DEFAULT_COST_NS])]
    cost_ns: Vec<f64>,
    /// Pool geometry M,R: cells per chunk, chunks per queue.
    #[arg(long, default_value = "256,100", value_parser = poolcap::units::parse_pool)]
    pool: (usize, usize),
    /// Kernel ring per queue, packets.
    #[arg(long, default_value_t = model::DEFAULT_RING)]
    ring: usize,
    /// Seal a partly filled chunk once the ring is idle and it has been open this long.
    #[arg(long, default_value = "1ms", value_parser = units::parse_duration)]
    seal_after: std::time::Duration,
    /// Virtual seconds of traffic per run.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Seed of every random choice (flow placement, gaps, phases).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn parse_pps(s: &str) -> Result<f64, String> {
    match units::parse_rate(s)? {
        units::Rate::Pps(p) => Ok(p),
        units::Rate::Bps(_) => Err(format!("`{s}`: give a packet rate (e.g. 300k, 2M)")),
    }
}

impl ModelArgs {
    fn config(&self) -> anyhow::Result<Config> {
        let shape = match self.arrivals {
            ArrivalKind::Constant => Shape::Constant,
            ArrivalKind::Poisson | ArrivalKind::Zipf => {
                let default = if self.arrivals == ArrivalKind::Zipf {
                    model::DEFAULT_DUTY
                } else {
                    1.0
                };
                match self.duty.unwrap_or(default) {
                    d if d < 1.0 => Shape::Modulated {
                        duty: d,
                        on_ns: self.on_mean.as_secs_f64() * 1e9,
                    },
                    _ => Shape::Poisson,
                }
            }
            ArrivalKind::Onoff => Shape::OnOff {
                burst: self.burst,
                peak_pps: self.peak,
                idle_ns: self.idle.as_secs_f64() * 1e9,
            },
        };
        let split = match (&self.queue_rates, self.arrivals) {
            (Some(r), ArrivalKind::Constant | ArrivalKind::Poisson) => Split::PerQueue(r.clone()),
            (Some(_), _) => {
                return Err(usage(
                    "--queue-rates goes with --arrivals constant or poisson",
                ))
            }
            (None, ArrivalKind::Zipf) => Split::Zipf {
                flows: self.flows,
                exponent: self.zipf,
            },
            (None, _) => Split::Even,
        };
        let groups = match &self.buddy_groups {
            Some(g) => Some(parse_buddy_groups(g, self.queues).map_err(usage)?),
            None => None,
        };
        let cfg = Config {
            queues: self.queues,
            ring: self.ring,
            cells: self.pool.0,
            chunks: self.pool.1,
            cost_ns: self.cost_ns.clone(),
            seal_after_ns: self.seal_after.as_secs_f64() * 1e9,
            policy: self.policy.clone(),
            groups,
            arrivals: Arrivals {
                rate_pps: self.rate,
                split,
                shape,
            },
            seconds: self.seconds,
            seed: self.seed,
        };
        cfg.validate().map_err(usage)?;
        Ok(cfg)
    }
}

/// A packet rate for people: 1 Mpps, 450 kpps, 1.25 Mpps.
fn pps(x: f64) -> String {
    let (v, unit) = if x >= 1e6 {
        (x / 1e6, "Mpps")
    } else if x >= 1e3 {
        (x / 1e3, "kpps")
    } else {
        (x, "pps")
    };
    let s = format!("{v:.3}");
    format!("{} {unit}", s.trim_end_matches('0').trim_end_matches('.'))
}

/// One line describing the model of a run or sweep.
fn describe(c: &Config) -> String {
    let traffic = match (&c.arrivals.shape, &c.arrivals.split) {
        (
            Shape::OnOff {
                burst,
                peak_pps,
                idle_ns,
            },
            _,
        ) => format!(
            "on/off bursts of {burst} packets at {}, {:.1} ms idle, per queue",
            pps(*peak_pps),
            idle_ns / 1e6
        ),
        (Shape::Modulated { duty, on_ns }, Split::Zipf { flows, exponent }) => format!(
            "{}, {flows} flows Zipf({exponent}) ON {:.0}% of the time ({:.0} ms mean)",
            pps(c.arrivals.rate_pps),
            duty * 100.0,
            on_ns / 1e6
        ),
        (s, Split::Zipf { flows, exponent }) => format!(
            "{}, {flows} flows Zipf({exponent}), {s:?} per queue",
            pps(c.arrivals.rate_pps)
        ),
        (s, Split::PerQueue(r)) => format!(
            "{s:?} at {}",
            r.iter().map(|&x| pps(x)).collect::<Vec<_>>().join(", ")
        ),
        (s, Split::Even) => format!("{s:?}, {} split evenly", pps(c.arrivals.rate_pps)),
    };
    let cost = match c.cost_ns.as_slice() {
        [one] => format!("{one} ns/packet"),
        many => format!("{many:?} ns/packet"),
    };
    format!(
        "{traffic}; workers {cost}; pool M={} x R={}; ring {}; {} s; seed {}",
        c.cells, c.chunks, c.ring, c.seconds, c.seed
    )
}

/// Runs `poolcap sim`.
pub(super) fn run(args: SimArgs) -> anyhow::Result<()> {
    match args.command.map(|c| *c) {
        Some(SimCommand::Sweep(s)) => run_sweep(s),
        None => run_one(&args.model),
    }
}

fn run_one(m: &ModelArgs) -> anyhow::Result<()> {
    let cfg = m.config()?;
    let t0 = Instant::now();
    let r = poolcap_bench::sim::run(&cfg).map_err(usage)?;
    let wall = t0.elapsed().as_secs_f64();
    r.check()
        .map_err(|e| anyhow::anyhow!("simulator accounting broken: {e}"))?;
    println!(
        "poolcap sim: {} queues, policy {}; {}",
        cfg.queues,
        policy_label(&cfg.policy),
        describe(&cfg)
    );
    print!("{}", r.table());
    let t = r.total();
    println!(
        "drop rate {:.3}% (kernel {:.3}%, pool {:.3}%); offloaded {} packets; \
         {} events in {wall:.2} s",
        100.0 * t.drop_rate(),
        100.0 * t.kernel_drop_rate(),
        100.0 * t.pool_drop_rate(),
        t.offloaded_out_packets,
        r.events
    );
    Ok(())
}

fn run_sweep(s: SweepArgs) -> anyhow::Result<()> {
    let base = s.model.config()?;
    let policies: Vec<PolicySpec> = s
        .policies
        .iter()
        .map(|p| p.parse::<PolicySpec>().map_err(usage))
        .collect::<anyhow::Result<_>>()?;
    let threads = s.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let (name, jobs, title, x_label, log_x) = sweep_jobs(&s, &base, &policies);
    let t0 = Instant::now();
    let rows = sweep::run_jobs(&jobs, threads).map_err(usage)?;
    let wall = t0.elapsed().as_secs_f64();
    for r in &rows {
        r.report
            .check()
            .map_err(|e| anyhow::anyhow!("simulator accounting broken: {e}"))?;
    }
    let subtitle = match s.seeds {
        0 | 1 => describe(&base),
        n => format!(
            "{}; mean of seeds {}-{}",
            describe(&base).trim_end_matches(&format!("; seed {}", base.seed)),
            base.seed,
            base.seed + n - 1
        ),
    };
    let mut chart = Chart::new(title, x_label, "drop rate (%)");
    chart.subtitle = Some(&subtitle);
    chart.log_x = log_x;
    chart.log_y = s.log_y;
    println!(
        "poolcap sim sweep {}: {subtitle}",
        name.trim_start_matches("sweep-")
    );
    print!("{}", summary(&jobs, &rows));
    let written = sweep::write(&s.out, name, &chart, &jobs, &rows).map_err(anyhow::Error::msg)?;
    println!(
        "{} runs in {wall:.1} s on {threads} threads; wrote {} and {}",
        rows.len(),
        written.csv.display(),
        written.png.display()
    );
    Ok(())
}

/// The sweep's name, its runs, and its chart's title, x label and whether x is logarithmic.
fn sweep_jobs(
    s: &SweepArgs,
    base: &Config,
    policies: &[PolicySpec],
) -> (&'static str, Vec<Job>, &'static str, &'static str, bool) {
    match s.what {
        SweepKind::Queues => {
            let counts = s
                .queue_counts
                .clone()
                .unwrap_or_else(|| sweep::QUEUE_COUNTS.to_vec());
            (
                "sweep-queues",
                sweep::queues_jobs(base, policies, &counts, s.seeds),
                "Drop rate vs receive queues (one buddy group)",
                "receive queues (log scale)",
                true,
            )
        }
        SweepKind::Threshold => {
            let counts = s.queue_counts.clone().unwrap_or_else(|| vec![4, 5, 6]);
            (
                "sweep-threshold",
                sweep::threshold_jobs(base, &s.thresholds, &counts, s.seeds),
                "Drop rate vs offload threshold T",
                "buddy threshold T (% of R)",
                false,
            )
        }
    }
}

/// A table: one line per series, one column per x, mean drop rate in percent.
fn summary(jobs: &[Job], rows: &[Row]) -> String {
    use std::fmt::Write as _;
    let series = sweep::series(jobs, rows);
    let mut xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let width = series
        .iter()
        .map(|s| s.name.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let mut out = String::new();
    let _ = write!(out, "{:<width$}", "drop %");
    for x in &xs {
        let _ = write!(out, " {:>8}", x);
    }
    out.push('\n');
    for s in &series {
        let _ = write!(out, "{:<width$}", s.name);
        for x in &xs {
            match s.points.iter().find(|p| p.0 == *x) {
                Some(p) => {
                    let _ = write!(out, " {:>8.3}", p.1);
                }
                None => {
                    let _ = write!(out, " {:>8}", "-");
                }
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        sim: SimArgs,
    }

    fn parse(line: &str) -> Result<SimArgs, clap::Error> {
        T::try_parse_from(std::iter::once("sim").chain(line.split_whitespace())).map(|t| t.sim)
    }

    #[test]
    fn the_documented_command_lines_parse_into_configs() {
        let a = parse(
            "--queues 4 --policy buddy:60 --arrivals zipf --flows 1000 --zipf 1.1 --rate 2M \
             --cost-ns 3000 --pool 256,64 --seconds 1 --seed 1",
        )
        .unwrap();
        let c = a.model.config().unwrap();
        assert_eq!((c.queues, c.cells, c.chunks), (4, 256, 64));
        assert_eq!(c.policy, PolicySpec::Buddy { threshold: 60.0 });
        assert_eq!(c.arrivals.rate_pps, 2e6);
        assert!(matches!(c.arrivals.shape, Shape::Modulated { duty, .. } if duty == 0.25));
        let p = parse("--arrivals poisson --queue-rates 450k,150k --queues 2").unwrap();
        let c = p.model.config().unwrap();
        assert_eq!(c.arrivals.shape, Shape::Poisson);
        assert_eq!(c.arrivals.split, Split::PerQueue(vec![450e3, 150e3]));
        assert_eq!(
            Config::default(),
            parse("").unwrap().model.config().unwrap()
        );
    }

    #[test]
    fn sweeps_parse_and_bad_input_is_refused() {
        let s = parse("sweep threshold --thresholds 60,90 --out /tmp/x").unwrap();
        match s.command.map(|c| *c) {
            Some(SimCommand::Sweep(w)) => {
                assert_eq!(w.what, SweepKind::Threshold);
                assert_eq!(w.thresholds, [60.0, 90.0]);
                assert_eq!(w.policies.len(), 4);
            }
            None => panic!("no sweep"),
        }
        assert!(parse("--queues 4 sweep queues").is_err());
        assert!(parse("--rate 1Gbit").is_err());
        assert!(parse("--pool 256").is_err());
        assert!(parse("--queues 65").unwrap().model.config().is_err());
        assert!(parse("--queue-rates 1k").unwrap().model.config().is_err());
    }
}
