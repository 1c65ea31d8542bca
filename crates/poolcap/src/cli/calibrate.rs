//! `poolcap calibrate`: measures this machine's per-stage capture costs ([`crate::calibrate`])
//! in a lab of its own (default) or on `-i IF` with traffic the user sends, saves the profile
//! as JSON and prints it, with what the buffers absorb.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use poolcap_doctor::predict::{self, Scenario, Tool};
use poolcap_doctor::profile::Profile;

use crate::calibrate::{self, disk, lab, live};
use crate::cli::predict::default_profile_path;
use crate::outfile::{self, Existing};
use crate::units;

/// Arguments of `poolcap calibrate`.
#[derive(Debug, Args)]
#[command(
    after_help = "Without -i, builds a veth lab (two namespaces, removed at the end), \
sends 64, 512 and 1514 B frames at top speed and runs each configuration once per size: \
about 3 minutes. With -i IF, captures the traffic you send to IF for --window per configuration \
and snaplength (64 and full); the kernel's and sender's costs then come from the built-in \
profile. Then the disk (unless --no-disk): a file of --disk-bytes in --disk-dir written with \
O_DIRECT and again through the page cache (twice its dirty limit by default, for write-back's \
pace), each timed to the end of its fsync. Calibrate on a quiet machine: others' work makes \
every stage look slower."
)]
pub struct CalibrateArgs {
    /// Measure on this interface with traffic you send (default: a lab of its own).
    #[arg(short = 'i', long = "interface")]
    iface: Option<String>,
    /// Where to save the profile (default: $POOLCAP_PROFILE or /var/lib/poolcap/profile.json).
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// Lab: frames per run.
    #[arg(long, default_value = "1M", value_parser = units::parse_count)]
    frames: u64,
    /// Lab: runs per configuration and size (the median is kept).
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// -i: capture time per configuration and snaplength.
    #[arg(long, default_value = "5s", value_parser = units::parse_duration)]
    window: Duration,
    /// Compression levels to measure (comma-separated), or none.
    #[arg(long, value_delimiter = ',', default_value = "zstd:1,zstd:3,gzip:6")]
    levels: Vec<String>,
    /// Lab: before each run, wait up to this long for the machine to be quiet (at most 15%
    /// of the CPUs busy).
    #[arg(long, default_value = "10s", value_parser = units::parse_duration)]
    quiet_wait: Duration,
    /// Do not measure tcpdump and dumpcap.
    #[arg(long)]
    no_peers: bool,
    /// Measure the disk here: the file system capture files go to.
    #[arg(long, default_value = "/var/tmp", conflicts_with = "no_disk")]
    disk_dir: PathBuf,
    /// Bytes of each disk write (default: twice the page cache's dirty limit, at least 1G;
    /// a buffered write within the limit gives no rate).
    #[arg(long, value_parser = units::parse_bytes, conflicts_with = "no_disk")]
    disk_bytes: Option<u64>,
    /// Each disk write stops after this long.
    #[arg(long, default_value = "60s", value_parser = units::parse_duration)]
    disk_time: Duration,
    /// Do not measure the disk (the profile keeps the built-in one's, and says so).
    #[arg(long)]
    no_disk: bool,
}

/// The levels to measure (`none`: no compression).
fn check_levels(levels: &[String]) -> anyhow::Result<Vec<String>> {
    if levels == ["none"] {
        return Ok(Vec::new());
    }
    for l in levels {
        l.parse::<crate::capture::compress::Compression>()
            .map_err(|e| crate::cli::usage(format!("--levels: {e}")))?;
        if !l.contains(':') {
            return Err(crate::cli::usage(format!(
                "--levels: give the level too (`{l}:3`)"
            )));
        }
    }
    Ok(levels.to_vec())
}

/// What the kernel ring and poolcap's default pool hold, per the profile.
fn buffers(p: &Profile) -> Vec<String> {
    [64.0, 1514.0]
        .iter()
        .map(|&size| {
            // A block holds what arrives before its retire timer: at the line rate.
            let pps = p.top_pps(size);
            let counting = Scenario::steady(Tool::Poolcap, pps, size);
            let analysing = Scenario {
                load: 1,
                ..counting.clone()
            };
            let (c, a) = (
                predict::ring_frames(p, &counting, pps).0,
                predict::ring_frames(p, &analysing, pps).0,
            );
            format!(
                "a 4 MiB ring holds {c:.0} frames of {size:.0} B at {:.0}k pps ({a:.0} when \
                 poolcap analyses: its blocks retire after 4 ms)",
                pps / 1e3
            )
        })
        .chain(std::iter::once(
            "poolcap's default pool (256,64) adds 16384 packets when it copies".to_owned(),
        ))
        .chain(p.rings.iter().map(|r| {
            format!(
                "measured: {} stopped while {:.0}k frames of {:.0} B a second arrived kept \
                 {:.0} in {} KiB of ring (the rule: {:.0})",
                r.capture,
                r.rate_pps / 1e3,
                r.frame_bytes,
                r.held,
                r.ring_bytes >> 10,
                r.rule
            )
        }))
        .collect()
}

/// The profile's file, opened before the minutes of measuring so that a path it cannot
/// write (a missing parent it cannot make, no permission, a symbolic link) fails at once;
/// written only at the end, and removed again if the run fails before it made the file.
struct ProfileFile {
    path: PathBuf,
    file: Option<std::fs::File>,
    made: bool,
}

impl ProfileFile {
    fn open(path: PathBuf) -> anyhow::Result<Self> {
        let fail = |e: &dyn std::fmt::Display| {
            crate::cli::usage(format!("-o {}: cannot write: {e}", path.display()))
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| fail(&e))?;
        }
        let made = path.symlink_metadata().is_err();
        let file = outfile::create(&path, Existing::Keep).map_err(|e| fail(&e))?;
        Ok(Self {
            path,
            file: Some(file),
            made,
        })
    }

    fn save(mut self, text: &str) -> anyhow::Result<()> {
        let mut file = self.file.take().expect("saved once");
        file.set_len(0)
            .and_then(|()| file.write_all(text.as_bytes()))
            .with_context(|| format!("cannot write {}", self.path.display()))
    }
}

impl Drop for ProfileFile {
    fn drop(&mut self) {
        if self.file.is_some() && self.made {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Runs `poolcap calibrate`.
pub fn run(args: CalibrateArgs) -> anyhow::Result<()> {
    let levels = check_levels(&args.levels)?;
    if args.runs == 0 || args.frames == 0 {
        return Err(crate::cli::usage("--runs and --frames must be at least 1"));
    }
    let path = args.output.clone().unwrap_or_else(default_profile_path);
    let out = ProfileFile::open(path)?;
    if !args.no_disk {
        disk::check_dir(&args.disk_dir).map_err(|e| crate::cli::usage(format!("{e:#}")))?;
    }
    let stop = crate::cli::flag_on(&[signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let when = poolcap_measure::scratch::timestamp(poolcap_measure::scratch::now());
    let mut profile = match &args.iface {
        None => {
            let (rows, x_loop) = lab::measure(
                &lab::LabOptions {
                    frames: args.frames,
                    runs: args.runs,
                    levels,
                    peers: !args.no_peers,
                    quiet_wait: args.quiet_wait,
                },
                Arc::clone(&stop),
            )?;
            let source = format!(
                "poolcap calibrate in a veth lab on {} at {when} UTC ({} frames per run)",
                host.trim(),
                args.frames
            );
            calibrate::of_rows(&rows, x_loop, measure_disk(&args, &stop)?, source)
        }
        Some(iface) => {
            let source = format!(
                "poolcap calibrate -i {iface} on {} at {when} UTC",
                host.trim()
            );
            live_profile(&args, iface, levels, &stop, source)?
        }
    };
    profile.load_average = calibrate::load_average();
    save(&profile, out)
}

/// The disk's sustained rates, direct and through the page cache, unless `--no-disk`.
fn measure_disk(
    args: &CalibrateArgs,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Option<poolcap_doctor::profile::Disk>> {
    if args.no_disk {
        return Ok(None);
    }
    let opts = disk::DiskOptions {
        dir: args.disk_dir.clone(),
        bytes: args.disk_bytes,
        dirty_limit: disk::dirty_limit_bytes(),
        time_limit: args.disk_time,
    };
    log::info!(
        "calibrate: disk: writing {} MB in {}, direct and buffered",
        opts.bytes() / 1_000_000,
        opts.dir.display()
    );
    disk::measure(&opts, stop).map(Some)
}

/// A profile from the live traffic of `-i IFACE` (and the disk).
fn live_profile(
    args: &CalibrateArgs,
    iface: &str,
    levels: Vec<String>,
    stop: &Arc<AtomicBool>,
    source: String,
) -> anyhow::Result<Profile> {
    if poolcap_sys::netdev::mtu(iface).is_none() {
        return Err(crate::cli::usage(format!(
            "-i: no interface `{iface}` in this network namespace"
        )));
    }
    let (mut samples, mean) = live::measure(
        &live::LiveOptions {
            iface: iface.to_owned(),
            window: args.window,
            levels,
            peers: !args.no_peers,
        },
        stop,
    )?;
    if let Some(d) = measure_disk(args, stop)? {
        samples.set_disk(d);
    }
    let x_loop = poolcap_measure::point::ns_per_iteration()?;
    let source = format!("{source} (live traffic, mean frame {mean:.0} B)");
    Ok(calibrate::profile(&samples, x_loop, source))
}

/// Saves the profile, prints it, and says what its buffers hold.
fn save(profile: &Profile, out: ProfileFile) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(profile)? + "\n";
    let path = out.path.clone();
    out.save(&text)?;
    print!("{text}");
    for line in buffers(profile) {
        log::info!("calibrate: {line}");
    }
    log::info!(
        "calibrate: profile saved to {} (load average {})",
        path.display(),
        profile
            .load_average
            .map_or("?".to_owned(), |l| format!("{l:.2}"))
    );
    Ok(())
}
