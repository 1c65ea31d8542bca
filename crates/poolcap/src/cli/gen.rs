//! `poolcap gen`: the traffic generator's command line.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use clap::Args;

use crate::cli::usage;
use crate::flows::Skew;
use crate::frame::parse_mac;
use crate::gen::replay::{self, LinkSpec};
use crate::gen::source::{Endpoints, SizeSpec, Synthetic};
use crate::gen::timing::Timing;
use crate::gen::{self, Bypass, Frames, GenConfig, GenReport};
use crate::{netdev, units};

/// Arguments of `poolcap gen`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  poolcap gen -i snd0 --count 1M --size 64                  # top speed
  poolcap gen -i snd0 --count 300k --rate 300k --flows 16 --skew 0.8
  poolcap gen -i snd0 --burst 10k --idle 100ms --duration 5s
  poolcap gen -i snd0 --replay trace.pcapng --speed 2 --loop 3")]
pub struct GenArgs {
    /// Interface to send on.
    #[arg(short = 'i', long = "interface")]
    iface: String,
    /// Send exactly this many frames (e.g. 1000, 10k, 2M).
    #[arg(long, value_parser = units::parse_count)]
    count: Option<u64>,
    /// Send for this long (e.g. 10s, 500ms). Without --count or --duration: until Ctrl-C.
    #[arg(long, value_parser = units::parse_duration)]
    duration: Option<std::time::Duration>,
    /// Frame size in bytes without FCS (60..9000), or `imix`.
    #[arg(long, default_value = "64", value_parser = parse_size)]
    size: SizeSpec,
    /// Rate in frames/s (300k, 1M) or bit/s (1Gbit). Default: top speed.
    #[arg(long, value_parser = units::parse_rate)]
    rate: Option<units::Rate>,
    /// Number of distinct UDP flows (source ports).
    #[arg(long, default_value_t = 1)]
    flows: usize,
    /// Share of frames in the heaviest flow (0.8 = an elephant carrying 80%).
    #[arg(long, conflicts_with = "zipf")]
    skew: Option<f64>,
    /// Zipf exponent of the flow shares.
    #[arg(long)]
    zipf: Option<f64>,
    /// Bursts of LEN frames at top speed (or --rate), each followed by --idle.
    #[arg(long, value_parser = units::parse_count, requires = "idle")]
    burst: Option<u64>,
    /// Silence after each burst (e.g. 100ms).
    #[arg(long, value_parser = units::parse_duration, requires = "burst")]
    idle: Option<std::time::Duration>,
    /// Replay a pcap or pcapng file instead of synthetic frames. A timestamp earlier than the
    /// one before is sent with no gap (as tcpreplay does); frames longer than the interface's
    /// MTU allows are skipped and counted (skipped_too_big); raw IP files (link types 101,
    /// 228, 229) are sent behind a synthetic Ethernet header (--src-mac, --dst-mac); other
    /// link types are refused.
    #[arg(long, conflicts_with_all = ["flows", "skew", "zipf", "burst", "rate"])]
    replay: Option<PathBuf>,
    /// Replay speed factor (2 = twice as fast as recorded).
    #[arg(long, default_value_t = 1.0, requires = "replay")]
    speed: f64,
    /// Replay at top speed, ignoring recorded timing.
    #[arg(long, requires = "replay")]
    topspeed: bool,
    /// Replay the file this many times.
    #[arg(long = "loop", default_value_t = 1, requires = "replay")]
    loops: u64,
    /// Frames per sendmmsg call (default: 64 at top speed, rate/5k when paced: a batch
    /// every 200 us, the sender asleep between).
    #[arg(long)]
    batch: Option<usize>,
    /// Pin the sending thread to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// Bypass the qdisc: auto (unless flows must spread over several tx queues), on, off.
    #[arg(long, default_value = "auto", value_enum)]
    qdisc_bypass: Bypass,
    /// Generator id carried in every frame (default: derived from the process id).
    #[arg(long)]
    gen_id: Option<u32>,
    /// Seed of the flow and size schedules.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Destination MAC (default: 02:70:63:00:ff:ff, which no lab host has, so receivers drop
    /// the frames cheaply after capture sockets have seen them).
    #[arg(long, default_value = "02:70:63:00:ff:ff", value_parser = parse_mac)]
    dst_mac: [u8; 6],
    /// Source MAC (default: the interface's).
    #[arg(long, value_parser = parse_mac)]
    src_mac: Option<[u8; 6]>,
    /// Source IPv4 address of the first flow.
    #[arg(long, default_value = "10.77.0.1")]
    src_ip: Ipv4Addr,
    /// Destination IPv4 address.
    #[arg(long, default_value = "10.77.0.2")]
    dst_ip: Ipv4Addr,
    /// UDP source port of the first flow (flow i uses port + i).
    #[arg(long, default_value_t = 10000)]
    src_port: u16,
    /// UDP destination port.
    #[arg(long, default_value_t = 9)]
    dst_port: u16,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

fn parse_size(s: &str) -> Result<SizeSpec, String> {
    if s.eq_ignore_ascii_case("imix") {
        return Ok(SizeSpec::Imix);
    }
    let n: usize = s
        .parse()
        .map_err(|_| format!("`{s}` is not a size (60..9000 or imix)"))?;
    if !(crate::frame::MIN_FRAME..=crate::frame::MAX_FRAME).contains(&n) {
        return Err(format!("size {n} is outside 60..9000"));
    }
    Ok(SizeSpec::Fixed(n))
}

fn interface_mac(iface: &str) -> anyhow::Result<[u8; 6]> {
    let s = netdev::mac(iface).ok_or_else(|| anyhow::anyhow!("no such interface `{iface}`"))?;
    parse_mac(&s).map_err(anyhow::Error::msg)
}

fn timing(a: &GenArgs, mean_len: f64) -> anyhow::Result<Timing> {
    let period_ns = a.rate.map_or(0.0, |r| 1e9 / r.pps(mean_len));
    Ok(match (a.burst, a.idle) {
        (Some(0), _) => return Err(usage("--burst must be at least 1")),
        (Some(len), Some(idle)) => Timing::Burst {
            len,
            idle_ns: idle.as_nanos() as u64,
            period_ns,
        },
        _ if a.rate.is_some() => Timing::Rate { period_ns },
        _ => Timing::TopSpeed,
    })
}

fn replay_frames(a: &GenArgs, path: &std::path::Path) -> anyhow::Result<(Frames, Timing, u64)> {
    // A missing or malformed file is bad input: exit code 2.
    let cannot =
        |e: &dyn std::fmt::Display| usage(format!("cannot replay {}: {e}", path.display()));
    let file = poolcap_format::read_file(path).map_err(|e| cannot(&e))?;
    // Such a time is up to 71 minutes (2^32 us) from its neighbours: a replay would wait.
    if file.odd_timestamps > 0 {
        return Err(cannot(&format!(
            "{} records have a timestamp fraction of a second or more",
            file.odd_timestamps
        )));
    }
    if !(a.speed > 0.0 && a.speed.is_finite()) {
        return Err(usage("--speed must be a positive number"));
    }
    // Without the interface nothing is sent anyway (the run fails naming it), so its MTU and
    // MAC only need to be right when it exists.
    let link = LinkSpec {
        mtu: netdev::mtu(&a.iface).unwrap_or(1500),
        src_mac: a
            .src_mac
            .or_else(|| interface_mac(&a.iface).ok())
            .unwrap_or_default(),
        dst_mac: a.dst_mac,
    };
    let plan = replay::plan(file, &link).map_err(|e| cannot(&e))?;
    let name = path.display();
    if let Some(linktype) = plan.wrapped {
        log::info!(
            "replay: {name} holds raw IP packets (link type {linktype}); each is sent behind a \
             synthetic Ethernet header ({} > {}, ethertype of its IP version)",
            mac_string(link.src_mac),
            mac_string(link.dst_mac)
        );
    }
    if plan.backward_steps > 0 {
        log::warn!(
            "replay: {} timestamps of {name} go back in time; those frames follow the one \
             before with no gap (as tcpreplay does)",
            plan.backward_steps
        );
    }
    let speed = if a.topspeed { f64::INFINITY } else { a.speed };
    let count = plan.offsets_ns.len() as u64 * a.loops.max(1);
    Ok((
        Frames::Replay(plan.replay),
        replay::recorded_timing(plan.offsets_ns, speed),
        count,
    ))
}

fn mac_string(mac: [u8; 6]) -> String {
    mac.map(|b| format!("{b:02x}")).join(":")
}

/// Resolves the arguments into a generator run.
fn config(a: &GenArgs) -> anyhow::Result<GenConfig> {
    if a.flows == 0 {
        return Err(usage("--flows must be at least 1"));
    }
    if let Some(s) = a.skew {
        if !(0.0..=1.0).contains(&s) {
            return Err(usage("--skew is a share between 0 and 1"));
        }
    }
    let (frames, timing, count) = if let Some(path) = &a.replay {
        let (f, t, c) = replay_frames(a, path)?;
        (f, t, a.count.or(Some(c)))
    } else {
        let skew = match (a.skew, a.zipf) {
            (Some(s), _) => Skew::Elephant(s),
            (_, Some(z)) => Skew::Zipf(z),
            _ => Skew::Uniform,
        };
        let ends = Endpoints {
            src_mac: match a.src_mac {
                Some(m) => m,
                None => interface_mac(&a.iface)?,
            },
            dst_mac: a.dst_mac,
            src_ip: a.src_ip,
            dst_ip: a.dst_ip,
            base_port: a.src_port,
            dst_port: a.dst_port,
        };
        let gen_id = gen_id(a);
        if let (SizeSpec::Fixed(n), Some(mtu)) = (a.size, netdev::mtu(&a.iface)) {
            if n > mtu + 14 {
                return Err(usage(format!(
                    "--size {n} does not fit {}'s MTU of {mtu} bytes (at most {})",
                    a.iface,
                    mtu + 14
                )));
            }
        }
        let synth = Synthetic::new(&ends, a.flows, skew, a.size, gen_id, a.seed);
        let t = timing(a, Synthetic::mean_len(a.size))?;
        (Frames::Synthetic(synth), t, a.count)
    };
    let batch = a.batch.unwrap_or(match (&timing, a.rate) {
        (Timing::TopSpeed | Timing::Burst { .. }, None) => 64,
        (Timing::Recorded { speed, .. }, _) if !speed.is_finite() => 64,
        (Timing::Recorded { .. }, _) => 1,
        // A batch every 200 us: between batches the sender sleeps (measured at 50k pps on
        // the veth lab, 3 s runs, CPU of the whole process: a batch every 40 us took 63%
        // of a core, every 100 us 33%, every 200 us 22%, kernel's veth work included).
        (_, Some(r)) => {
            ((r.pps(Synthetic::mean_len(a.size)) / 5_000.0).round() as usize).clamp(1, 64)
        }
        _ => 64,
    });
    if batch == 0 || batch > 1024 {
        return Err(usage("--batch must be between 1 and 1024"));
    }
    Ok(GenConfig {
        iface: a.iface.clone(),
        frames,
        timing,
        count,
        duration: a.duration,
        batch,
        bypass: a.qdisc_bypass,
        flows: a.flows,
        cpu: a.cpu,
        gen_id: gen_id(a),
    })
}

fn gen_id(a: &GenArgs) -> u32 {
    a.gen_id.unwrap_or_else(std::process::id)
}

fn print_report(r: &GenReport) {
    println!(
        "sent {} frames ({} bytes) on {} in {:.3} s: {:.0} pps, {:.1} Mbit/s; gen id {}, batch {}, qdisc bypass {}",
        r.frames,
        r.bytes,
        r.iface,
        r.seconds,
        r.pps,
        r.bps / 1e6,
        r.gen_id,
        r.batch,
        if r.qdisc_bypass { "on" } else { "off" }
    );
    println!(
        "kernel refusals retried: {}; dropped by the link on transmit: {}; cpu {:.3} s ({:.0}% of a core)",
        r.refused,
        r.link_dropped,
        r.cpu_s,
        if r.seconds > 0.0 { 100.0 * r.cpu_s / r.seconds } else { 0.0 }
    );
    if r.skipped_too_big + r.skipped_malformed > 0 {
        println!(
            "replay frames skipped: {} longer than the link carries, {} malformed",
            r.skipped_too_big, r.skipped_malformed
        );
    }
    if r.interrupted {
        println!("interrupted before the end");
    }
}

/// Runs `poolcap gen`.
pub fn run(args: GenArgs) -> anyhow::Result<()> {
    poolcap_sys::privilege::check_raw_sockets("sending raw frames")?;
    let cfg = config(&args)?;
    let stop = crate::cli::flag_on(&[signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])?;
    let report = gen::run(cfg, &stop)?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}
