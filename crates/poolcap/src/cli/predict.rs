//! `poolcap predict`: kernel and application loss of a capture, from the stage costs of a
//! profile (`poolcap calibrate`'s, or the built-in one measured on the development machine)
//! and the model of [`poolcap_doctor::predict`]. Also the one-line warning `poolcap capture`
//! prints when its configuration would lose packets at the interface's line rate.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use poolcap_doctor::predict::{self, DiskIo, Output, Prediction, Scenario, Tool};
use poolcap_doctor::profile::Profile;
use poolcap_doctor::system::{RealSystem, System};
use poolcap_format::FileFormat;
use poolcap_measure::report::pct;

use crate::capture::compress::Compression;
use crate::capture::savefile::FileIo;
use crate::capture::CaptureConfig;
use crate::cli::usage;
use crate::flows::IMIX;
use crate::frame::{MAX_FRAME, MIN_FRAME};
use crate::units;
use crate::units::parse_pool;

/// Where `poolcap calibrate` saves the profile and `predict` and `capture` look for it,
/// unless `POOLCAP_PROFILE` names another file.
pub const PROFILE_PATH: &str = "/var/lib/poolcap/profile.json";

/// The profile file in use by default: `$POOLCAP_PROFILE` or [`PROFILE_PATH`].
pub fn default_profile_path() -> PathBuf {
    std::env::var_os("POOLCAP_PROFILE").map_or_else(|| PROFILE_PATH.into(), PathBuf::from)
}

/// The profile at `path`, else the default file if it exists, else the built-in one; with
/// a note saying which.
pub fn load_profile(path: Option<&Path>) -> anyhow::Result<(Profile, String)> {
    let default = default_profile_path();
    let (file, given) = match path {
        Some(p) => (p.to_owned(), true),
        None if default.exists() => (default, false),
        None => {
            let p = Profile::built_in();
            let note = format!(
                "profile: {} (no --profile given and no {})",
                p.source,
                default.display()
            );
            return Ok((p, note));
        }
    };
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read profile {}", file.display()))?;
    let p = Profile::from_json(&text).map_err(|e| {
        let msg = format!("{}: {e}", file.display());
        if given {
            usage(msg)
        } else {
            anyhow::anyhow!(msg)
        }
    })?;
    let note = format!("profile: {} ({})", p.source, file.display());
    Ok((p, note))
}

/// Frame sizes (bytes) and their weights.
#[derive(Debug, Clone, PartialEq)]
struct Sizes(Vec<(f64, f64)>);

/// Frame sizes and weights: `N` (60..9000) or `imix`.
fn parse_sizes(s: &str) -> Result<Sizes, String> {
    if s.eq_ignore_ascii_case("imix") {
        return Ok(Sizes(IMIX.iter().map(|&(b, w)| (b as f64, w)).collect()));
    }
    match s.parse::<usize>() {
        Ok(n) if (MIN_FRAME..=MAX_FRAME).contains(&n) => Ok(Sizes(vec![(n as f64, 1.0)])),
        _ => Err(format!(
            "`{s}`: give a frame size in {MIN_FRAME}..{MAX_FRAME} or imix"
        )),
    }
}

/// The model's output for a capture that writes a file in `format` (`None`: no file).
fn output_of(format: Option<FileFormat>) -> Output {
    match format {
        None => Output::Nothing,
        Some(FileFormat::Pcapng) => Output::Pcapng,
        Some(_) => Output::Pcap,
    }
}

/// The profile's key for a compression choice (`zstd:3`).
fn compression_key(c: Compression) -> String {
    match c {
        Compression::Zstd(l) => format!("zstd:{l}"),
        Compression::Gzip(l) => format!("gzip:{l}"),
    }
}

/// Arguments of `poolcap predict`.
#[derive(Debug, Args)]
#[command(
    after_help = "Model: the kernel stage (receive work up to the ring) and the \
application stage (the tool's work per packet) each have a capacity from the profile's costs; \
the ring (and poolcap's pool) absorb bursts until the backlog exceeds them. With -w the disk \
is a stage too (the profile's disk rates): direct I/O at the device's rate behind the writer's \
buffers, buffered at the page cache's write-back rate once its dirty limit is reached, so how \
long the capture runs matters (--duration or --count). Losses are fractions of the offered \
frames.

Examples:
  poolcap predict --rate 300k --size 64 --load 3000
  poolcap predict --rate 1Gbit --size imix -w --compress zstd:3 --json
  poolcap predict --rate 800k --size 1514 -w --io buffered --duration 30s
  poolcap predict --rate 500k --size 64 --probe probe.toml
  poolcap predict --tool tcpdump --rate 400k --size 1514 --burst 50k --idle 100ms"
)]
pub struct PredictArgs {
    /// Profile from `poolcap calibrate` (default: $POOLCAP_PROFILE, /var/lib/poolcap/profile.json,
    /// else the built-in one).
    #[arg(long)]
    profile: Option<PathBuf>,
    /// Offered rate (within bursts): 300k (pps) or 1Gbit.
    #[arg(long, value_parser = units::parse_rate, required_unless_present = "validate")]
    rate: Option<units::Rate>,
    /// Frame size in bytes without FCS (60..9000), or imix.
    #[arg(long, value_parser = parse_sizes, required_unless_present = "validate")]
    size: Option<Sizes>,
    /// Bytes kept of each packet.
    #[arg(short = 's', long, default_value_t = 262_144)]
    snaplen: u32,
    /// Kernel ring bytes (4M); default the tool's (poolcap 4 MiB, tcpdump and dumpcap 2 MiB).
    #[arg(long, value_parser = units::parse_bytes)]
    buffer: Option<u64>,
    /// poolcap's pool as M,R.
    #[arg(long, default_value = "256,64", value_parser = parse_pool)]
    pool: (usize, usize),
    /// x-loop iterations per packet (poolcap).
    #[arg(long, default_value_t = 0)]
    load: u32,
    /// `poolcap probe` with this configuration: its rules run on the worker for every
    /// packet (rules the probe counts in the kernel, `--in-kernel`, are not modelled).
    #[arg(long, value_name = "CONFIG", conflicts_with = "rules")]
    probe: Option<PathBuf>,
    /// `poolcap probe` with this many rules (as --probe, without a file).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    rules: Option<u32>,
    /// Bursts of this many frames at --rate...
    #[arg(long, value_parser = units::parse_count, requires = "idle")]
    burst: Option<u64>,
    /// ... each followed by this much silence (100ms).
    #[arg(long, value_parser = units::parse_duration, requires = "burst")]
    idle: Option<std::time::Duration>,
    /// Frames sent in all (default: an endless stream).
    #[arg(short = 'c', long, value_parser = frames)]
    count: Option<u64>,
    /// How long the traffic lasts (30s), instead of --count.
    #[arg(long, value_parser = units::parse_duration, conflicts_with = "count")]
    duration: Option<std::time::Duration>,
    /// The capture writes a file.
    #[arg(short = 'w')]
    write: bool,
    /// Its format (as `poolcap capture --format`).
    #[arg(long, default_value = "pcapng", value_enum, requires = "write")]
    format: FileFormat,
    /// Compression of the file: zstd[:L] or gzip[:L].
    #[arg(long, requires = "write")]
    compress: Option<Compression>,
    /// How the file is written: direct (poolcap's default, past the page cache) or buffered
    /// (`capture --buffered`; tcpdump and dumpcap always).
    #[arg(long, value_enum, requires = "write")]
    io: Option<DiskIo>,
    /// The capture tool: poolcap, tcpdump or dumpcap.
    #[arg(long, default_value = "poolcap", value_enum)]
    tool: Tool,
    /// The kernel's receive work runs on the capture CPU (IRQs or RPS there; the lab's
    /// `bench --rps`): it adds to the application's cost.
    #[arg(long)]
    kernel_on_cpu: bool,
    /// Print the prediction as one JSON object.
    #[arg(long)]
    json: bool,
    /// Instead: predict every point of a bench result directory (`poolcap bench sizes`,
    /// `burst`, `appload`...) and compare with its measured loss; writes predict.csv and
    /// predict.png there. A `bench predict` run is predicted from its own calibration
    /// (written to profile.json there) unless --profile is given.
    #[arg(long, conflicts_with_all = ["rate", "size"])]
    validate: Option<PathBuf>,
}

/// `--count`: at least one frame (a loss of none is no fraction).
fn frames(s: &str) -> Result<u64, String> {
    match units::parse_count(s)? {
        0 => Err("give at least one frame".into()),
        n => Ok(n),
    }
}

/// `--duration`: the frames `seconds` of traffic at `pps` hold, in bursts of `burst` frames
/// each followed by its silence when there are bursts; at least one.
fn frames_in(seconds: f64, pps: f64, burst: Option<(u64, f64)>) -> anyhow::Result<u64> {
    let per_s = match burst {
        Some((b, idle)) => b as f64 / (b as f64 / pps + idle),
        None => pps,
    };
    let n = (seconds * per_s).round();
    if !(n >= 1.0 && n.is_finite()) {
        return Err(usage("--duration: too short for one frame at this rate"));
    }
    Ok(n as u64)
}

fn mean_size(sizes: &[(f64, f64)]) -> f64 {
    let w: f64 = sizes.iter().map(|s| s.1).sum();
    sizes.iter().map(|(b, x)| b * x).sum::<f64>() / w
}

fn rate(pps: f64) -> String {
    if pps.is_infinite() {
        "unbounded".to_owned()
    } else if pps >= 1e6 {
        format!("{:.2} Mpps", pps / 1e6)
    } else {
        format!("{:.0} kpps", pps / 1e3)
    }
}

fn print_text(p: &Prediction, note: &str) {
    println!("{note}");
    println!(
        "offered {} ({:.0} B captured per frame); buffers hold {:.0} frames",
        rate(p.offered_pps),
        p.caplen,
        p.buffer_frames
    );
    let stages: Vec<String> = p
        .stages
        .iter()
        .map(|s| format!("{} {:.0} ns", s.stage, s.ns))
        .collect();
    println!(
        "kernel capacity {}; application capacity {} ({})",
        rate(p.kernel_capacity_pps),
        rate(p.app_capacity_pps),
        stages.join(" + ")
    );
    println!(
        "predicted loss {} (kernel {}, application {}); loss starts at {}",
        pct(p.loss),
        pct(p.kernel_loss),
        pct(p.app_loss),
        rate(p.loss_starts_pps)
    );
    if let Some(e) = &p.edge {
        println!(
            "at the edge: keeping up (as it can up to {}) it loses {}, but once a wait for its \
             CPU outlasts its buffers it stays behind and loses {}; the chance of that in this \
             run is {:.0}%, so the prediction is the loss {}",
            rate(e.keeps_up_to_pps),
            pct(e.loss_keeping_up),
            pct(e.loss_behind),
            e.falls_behind * 100.0,
            if e.falls_behind >= 0.5 {
                "behind"
            } else {
                "keeping up"
            }
        );
    }
    if let Some(d) = &p.disk {
        let (how, buffer) = match d.io {
            DiskIo::Direct => ("direct I/O", "the writer's in flight"),
            DiskIo::Buffered => ("through the page cache", "its dirty limit"),
        };
        let fills = d.fills_in_s.map_or_else(
            || "which this rate does not fill".to_owned(),
            |t| format!("full after {t:.1} s at this rate"),
        );
        println!(
            "disk ({how}): {:.0} MB/s, {} of {:.0} B records; buffer ({}) {:.0} MB, {fills}",
            d.bytes_per_s / 1e6,
            rate(d.capacity_pps),
            d.record_bytes,
            buffer,
            d.buffer_bytes / 1e6
        );
    }
    for n in &p.notes {
        println!("note: {n}");
    }
    if let Some(b) = p.max_burst {
        println!("longest burst absorbed at this rate: {b:.0} frames");
    }
    if p.cpu_share < 1.0 {
        println!(
            "CPU share with a backlog {} (the profile's); waits that outlast the buffers lose {}",
            pct(p.cpu_share),
            pct(p.wait_loss)
        );
    }
    if p.loss > 0.0 {
        println!(
            "bottleneck: {}; to avoid: {}",
            p.bottleneck,
            predict::remedy(&p.bottleneck)
        );
    }
}

/// Runs `poolcap predict`.
pub fn run(args: PredictArgs) -> anyhow::Result<()> {
    if let Some(dir) = &args.validate {
        return validate(dir, args.profile.as_deref());
    }
    let (profile, mut note) = load_profile(args.profile.as_deref())?;
    let (rules, flow_rules) = rules_of(&args, &mut note)?;
    let io = io_of(&args)?;
    let (Some(rate), Some(Sizes(sizes))) = (args.rate, args.size) else {
        return Err(usage("give --rate and --size (or --validate DIR)"));
    };
    let buffer = args.buffer.unwrap_or(match args.tool {
        Tool::Poolcap => 4 << 20,
        Tool::Tcpdump | Tool::Dumpcap => 2 << 20,
    });
    let pps = rate.pps(mean_size(&sizes));
    let burst = args.burst.zip(args.idle.map(|d| d.as_secs_f64()));
    let count = match args.duration {
        Some(d) => Some(frames_in(d.as_secs_f64(), pps, burst)?),
        None => args.count,
    };
    let s = Scenario {
        tool: args.tool,
        rate_pps: pps,
        sizes,
        snaplen: args.snaplen,
        buffer_bytes: buffer,
        pool: args.pool,
        load: args.load,
        rules,
        flow_rules,
        output: output_of(args.write.then_some(args.format)),
        compress: args.compress.map(compression_key),
        burst,
        count,
        kernel_on_app_cpu: args.kernel_on_cpu,
        io,
    };
    let p = predict::predict(&profile, &s).map_err(|e| usage(e.to_string()))?;
    if args.json {
        let mut v = serde_json::to_value(&p)?;
        v["profile"] = serde_json::Value::String(profile.source.clone());
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_text(&p, &note);
    }
    Ok(())
}

/// The probe's rule counts (all rules, and `flows` rules beyond the first), from `--probe`
/// or `--rules`; a note on what flows rules are taken to cost.
fn rules_of(args: &PredictArgs, note: &mut String) -> anyhow::Result<(usize, usize)> {
    let (rules, flow_rules) = match (&args.probe, args.rules) {
        (Some(file), _) => probe_rules(file)?,
        (None, Some(n)) => (n as usize, 0),
        (None, None) => (0, 0),
    };
    if rules > 0 && args.tool != Tool::Poolcap {
        return Err(usage(
            "--probe and --rules describe `poolcap probe`: drop --tool",
        ));
    }
    if flow_rules > 0 {
        *note += &format!(
            "\n{flow_rules} flows rules beyond the first are taken to update their flow table \
             with every packet (an upper bound for rules whose filters select)"
        );
    }
    Ok((rules, flow_rules))
}

/// How the tool writes (`--io`, else its default); tcpdump and dumpcap only buffered.
fn io_of(args: &PredictArgs) -> anyhow::Result<DiskIo> {
    match (args.io, args.tool) {
        (Some(DiskIo::Direct), Tool::Tcpdump | Tool::Dumpcap) => Err(usage(
            "--io direct: tcpdump and dumpcap write through the page cache",
        )),
        (Some(io), _) => Ok(io),
        (None, tool) => Ok(DiskIo::default_for(tool)),
    }
}

/// The rules of the probe configuration `file` that run on the workers (all of them: the
/// probe counts rules in the kernel only with `--in-kernel`), and how many of them beyond
/// the first track flows ([`flow_rules`]).
fn probe_rules(file: &Path) -> anyhow::Result<(usize, usize)> {
    let config = poolcap_probe::config::load(file).map_err(|e| usage(e.to_string()))?;
    if config.rules.is_empty() {
        return Err(usage(format!("{}: no rules", file.display())));
    }
    Ok((config.rules.len(), flow_rules(&config)))
}

/// The `flows` rules of `config` beyond the first rule, which the model takes as matching
/// every packet (an upper bound: a rule whose filter selects updates its table less often).
/// The first rule's cost was measured with flows of every packet already.
pub fn flow_rules(config: &poolcap_probe::Config) -> usize {
    let flows = config.rules.iter().filter(|r| r.flows.is_some()).count();
    flows.saturating_sub(1)
}

/// `--validate DIR`: `poolcap-bench validate DIR [--profile FILE]`, which draws the figure.
fn validate(dir: &Path, profile: Option<&Path>) -> anyhow::Result<()> {
    let mut words = vec!["validate".into(), dir.as_os_str().to_owned()];
    if let Some(p) = profile {
        words.extend(["--profile".into(), p.as_os_str().to_owned()]);
    }
    crate::cli::rig::exec_words(words)
}

/// Minimum-size frames (60 bytes without FCS) per second at the interface's line rate
/// (`speed` in sysfs, Mbit/s; 24 bytes of FCS, preamble and gap each), or, for a virtual
/// device (no `device` in sysfs: veth reports a nominal 10000 Mbit/s that no sender
/// reaches), the profile's sender top speed; with a description.
fn line_rate(iface: &str, profile: &Profile) -> (f64, String) {
    let sys = RealSystem;
    let physical = sys
        .link_name(&format!("/sys/class/net/{iface}/device"))
        .is_some();
    let speed = sys
        .read(&format!("/sys/class/net/{iface}/speed"))
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0 && physical);
    match speed {
        Some(mbit) => (
            mbit * 1e6 / ((60.0 + 24.0) * 8.0),
            format!("{mbit:.0} Mbit/s line rate"),
        ),
        None => (
            profile.top_pps(60.0),
            "the profile's sender top speed (a virtual link)".to_owned(),
        ),
    }
}

/// The one-line warning `poolcap capture` (and `poolcap probe`, with its `rules` on the
/// workers) prints at start when the profile predicts loss for `cfg` at the interface's line
/// rate of minimum-size frames (`None`: no loss predicted, or the capture is not one the
/// model describes).
pub fn capture_warning(cfg: &CaptureConfig, (rules, flow_rules): (usize, usize)) -> Option<String> {
    let (profile, _) = load_profile(None).ok()?;
    let (pps, what) = line_rate(&cfg.iface, &profile);
    let s = Scenario {
        snaplen: cfg.snaplen,
        buffer_bytes: u64::from(cfg.ring.block_size) * u64::from(cfg.ring.block_nr),
        pool: (cfg.pool.cells, cfg.pool.chunks),
        load: cfg.load,
        rules,
        flow_rules,
        output: output_of(cfg.output.as_ref().map(|(_, f)| *f)),
        compress: cfg.compress.map(compression_key),
        // Auto is direct wherever the file system takes it (a disk's does).
        io: match cfg.files.io {
            FileIo::Auto | FileIo::Direct => DiskIo::Direct,
            FileIo::Buffered => DiskIo::Buffered,
        },
        ..Scenario::steady(Tool::Poolcap, pps, 60.0)
    };
    let p = predict::predict(&profile, &s).ok()?;
    // Queues (capture threads) and workers spread the work over the CPUs there are.
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let parallel = cfg.queues.max(cfg.workers).clamp(1, cpus);
    let per_queue = p.loss_starts_pps * parallel as f64;
    if per_queue >= pps {
        return None;
    }
    let loss = 1.0 - per_queue / pps;
    Some(format!(
        "poolcap: warning: at {} ({} of 60 B frames) this {} is predicted to lose {} \
         (loss starts at {}, bottleneck {}); to avoid: {} (`poolcap predict` for details)",
        what,
        rate(pps),
        if rules > 0 { "probe" } else { "capture" },
        pct(loss),
        rate(per_queue),
        p.bottleneck,
        predict::remedy(&p.bottleneck)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_knows_what_the_direct_writer_has_in_flight() {
        let bytes = poolcap_format::direct::STALL_BYTES;
        assert_eq!(predict::DIRECT_IN_FLIGHT_BYTES, bytes as f64);
    }

    #[test]
    fn the_model_keeps_the_ring_blocks_the_engine_keeps() {
        for kib in [64, 512, 2048, 4096, 5000, 65536] {
            assert_eq!(
                poolcap_doctor::predict::ring_block_bytes(Tool::Poolcap, kib << 10),
                u64::from(crate::capture::backend::block_size(kib << 10)),
                "-B {kib}"
            );
        }
        // Writing only, the ring grows by the pool and is cut into larger blocks.
        for (kib, cells, chunks) in [
            (64, 16, 4),
            (2048, 256, 32),
            (4096, 256, 64),
            (65536, 64, 8),
        ] {
            let ring = crate::cli::capture::engine_limits(None, None, kib << 10).unwrap();
            let pool = crate::capture::pool::PoolSize {
                cells,
                chunks,
                cell_size: 2048,
            };
            let (grown, _) = crate::capture::backend::hold_split(ring, pool);
            assert_eq!(
                poolcap_doctor::predict::held_block_bytes((kib << 10) + pool.bytes(), kib << 10),
                u64::from(grown.block_size),
                "-B {kib} --pool {cells},{chunks}"
            );
        }
    }

    #[test]
    fn sizes_tools_and_compression_keys_parse() {
        assert_eq!(parse_sizes("64"), Ok(Sizes(vec![(64.0, 1.0)])));
        assert_eq!(parse_sizes("IMIX").unwrap().0.len(), 3);
        assert!(parse_sizes("59").unwrap_err().contains("60..9000"));
        assert!(parse_sizes("big").is_err());
        use clap::ValueEnum;
        assert_eq!(Tool::from_str("dumpcap", false), Ok(Tool::Dumpcap));
        assert!(Tool::from_str("wireshark", false).is_err());
        assert_eq!(compression_key(Compression::Zstd(-3)), "zstd:-3");
        assert_eq!(compression_key(Compression::Gzip(6)), "gzip:6");
        assert!((mean_size(&parse_sizes("imix").unwrap().0) - 357.83).abs() < 0.01);
        assert!(frames("0").unwrap_err().contains("at least one frame"));
        assert_eq!(frames_in(30.0, 800e3, None).unwrap(), 24_000_000);
        // Bursts of 1000 frames at 1M pps (1 ms) and 9 ms of silence: 100k frames a second.
        assert_eq!(frames_in(2.0, 1e6, Some((1000, 0.009))).unwrap(), 200_000);
        assert!(frames_in(1e-9, 1e3, None).is_err());
        assert_eq!(frames("2k"), Ok(2000));
    }

    #[test]
    fn a_jumbo_frame_costs_no_less_than_a_full_one() {
        // The built-in profile's kernel_rps falls with size: the line would reach 0 ns.
        let p = Profile::built_in();
        let at = |size: f64| {
            let s = Scenario {
                kernel_on_app_cpu: true,
                ..Scenario::steady(Tool::Poolcap, 100e3, size)
            };
            predict::predict(&p, &s).expect("predict")
        };
        let (full, jumbo) = (at(1514.0), at(9000.0));
        assert!(
            jumbo.kernel_capacity_pps <= full.kernel_capacity_pps
                && jumbo.app_capacity_pps <= full.app_capacity_pps,
            "9000 B: kernel {} app {} pps; 1514 B: kernel {} app {} pps",
            jumbo.kernel_capacity_pps,
            jumbo.app_capacity_pps,
            full.kernel_capacity_pps,
            full.app_capacity_pps
        );
        assert!(jumbo.stages.iter().all(|s| s.ns >= 0.0));
    }

    #[test]
    fn a_missing_or_bad_profile_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.json");
        let e = load_profile(Some(&f)).unwrap_err();
        assert!(format!("{e:#}").contains("p.json"));
        std::fs::write(&f, "{\"x\": 1}").unwrap();
        let e = load_profile(Some(&f)).unwrap_err();
        assert!(e.to_string().contains("not a poolcap profile"), "{e}");
        std::fs::write(&f, serde_json::to_string(&Profile::built_in()).unwrap()).unwrap();
        let (p, note) = load_profile(Some(&f)).unwrap();
        assert_eq!(p, Profile::built_in());
        assert!(note.ends_with("p.json)"));
    }
}
