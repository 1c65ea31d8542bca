//! `poolcap demo`: the README's main command. Builds a two-host lab with two receive queues,
//! starts a capture in the probe, sends steady traffic, bursts and a skewed flow set from the
//! sender, stops, prints the accounting, reads the file back to check every frame, and tears
//! the lab down. Everything runs as child processes of this one, each in its namespace.
//!
//! Nothing outlives the demo: Ctrl-C, SIGTERM or SIGHUP stop the capture and remove the lab
//! (exit 128 + signal); every child gets SIGTERM from the kernel if the demo dies, SIGKILL
//! included (PR_SET_PDEATHSIG); and the lab of a demo that was killed, named after its PID,
//! is removed by the next demo once that PID is gone.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use poolcap_lab::{Lab, LabSpec};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::capture::CaptureReport;
use crate::cli::Interrupted;
use crate::gen::GenReport;
use crate::seqcheck::SeqChecker;

/// Arguments of `poolcap demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where to write the capture file.
    #[arg(short = 'w', default_value = "/tmp/poolcap-demo/capture.pcapng")]
    write: PathBuf,
    /// Receive queues of the lab's interfaces (and capture queues).
    #[arg(long, default_value_t = 2)]
    queues: u16,
}

/// One phase of demo traffic.
struct Phase {
    name: &'static str,
    args: &'static [&'static str],
}

const PHASES: [Phase; 3] = [
    Phase {
        name: "steady 100k pps, 8 flows, 64 B",
        args: &["--rate", "100k", "--count", "150k", "--flows", "8"],
    },
    Phase {
        name: "bursts of 20k at top speed, 512 B",
        args: &[
            "--burst", "20k", "--idle", "200ms", "--count", "60k", "--size", "512",
        ],
    },
    Phase {
        name: "16 flows, one carrying 80%, imix",
        args: &[
            "--flows", "16", "--skew", "0.8", "--count", "150k", "--size", "imix",
        ],
    },
];

/// Demo labs are named `demo{PID}` after the demo that built them.
const LAB_PREFIX: &str = "demo";

/// The signal that asked the demo to stop (0: none yet).
#[derive(Clone)]
struct StopFlag(Arc<AtomicUsize>);

impl StopFlag {
    fn register() -> anyhow::Result<Self> {
        let flag = Arc::new(AtomicUsize::new(0));
        for sig in [SIGINT, SIGTERM, SIGHUP] {
            signal_hook::flag::register_usize(sig, Arc::clone(&flag), sig as usize)?;
        }
        Ok(Self(flag))
    }

    /// Fails with [`Interrupted`] once a signal has arrived.
    fn check(&self) -> anyhow::Result<()> {
        match self.0.load(Ordering::Relaxed) {
            0 => Ok(()),
            sig => Err(Interrupted(sig as i32).into()),
        }
    }
}

/// `ip netns exec NETNS poolcap`, ended by the kernel if the demo dies.
fn child_command(netns: &str, exe: &Path) -> Command {
    let mut cmd = poolcap_lab::netns_command(netns, &exe.to_string_lossy());
    poolcap_sys::process::kill_child_with_parent(&mut cmd, libc::SIGTERM);
    cmd
}

/// The capture process; stopped (SIGINT, then waited for) if dropped while running, so an
/// early return never leaves it behind in a lab about to be removed.
struct CaptureChild(Child);

impl Drop for CaptureChild {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = poolcap_sys::process::interrupt(self.0.id());
            let _ = self.0.wait();
        }
    }
}

fn self_exe() -> anyhow::Result<PathBuf> {
    std::env::current_exe().context("cannot find the poolcap executable")
}

/// Starts the capture and waits for its `listening on` line.
fn start_capture(
    lab: &Lab,
    exe: &Path,
    file: &Path,
    stats: &Path,
    stop: &StopFlag,
) -> anyhow::Result<CaptureChild> {
    let mut child = child_command(&lab.probe.netns, exe)
        .args([
            "capture",
            "-q",
            "-i",
            &lab.probe.iface,
            "--queues",
            &lab.queues.to_string(),
            "-w",
        ])
        .arg(file)
        .arg("--stats-json")
        .arg(stats)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start the capture")?;
    let err = child.stderr.take().context("capture stderr")?;
    let mut child = CaptureChild(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        stop.check()?;
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) if line.contains("listening on") => {
                println!("  capture: {line}");
                // Keep draining its stderr so it never blocks on a full pipe.
                std::thread::spawn(move || for _ in rx {});
                return Ok(child);
            }
            Ok(line) => log::info!("  capture: {line}"),
            Err(_) => {
                if let Some(st) = child.0.try_wait()? {
                    bail!("the capture exited early ({st})");
                }
            }
        }
    }
    bail!("the capture did not start within 20 s")
}

/// The capture's accounting beside what was sent; whether every frame sent is accounted
/// for.
fn print_accounting(report: &CaptureReport, sent: &[GenReport]) -> bool {
    let total_sent: u64 = sent.iter().map(|r| r.frames).sum();
    let link_dropped: u64 = sent.iter().map(|r| r.link_dropped).sum();
    let accounted = report.captured + report.dropped_kernel + report.dropped_pool + report.filtered;
    println!();
    println!("accounting ({} queues):", report.queues.len());
    println!("  sent            {total_sent:>9}");
    println!("  captured        {:>9}", report.captured);
    println!("  dropped_kernel  {:>9}", report.dropped_kernel);
    println!("  dropped_pool    {:>9}", report.dropped_pool);
    println!("  filtered        {:>9}", report.filtered);
    for q in &report.queues {
        println!(
            "    queue {}: captured {:>7}, peak pool use {} chunks",
            q.queue, q.captured, q.pool_peak_chunks
        );
    }
    let balanced = accounted + link_dropped == total_sent;
    println!(
        "  sent = captured + dropped_kernel + dropped_pool + filtered{}: {}",
        if link_dropped > 0 {
            " + dropped on the link"
        } else {
            ""
        },
        if balanced { "holds" } else { "DOES NOT HOLD" }
    );
    println!(
        "  capture CPU: {:.2} s user, {:.2} s system",
        report.cpu_user, report.cpu_system
    );
    balanced
}

/// Reads the capture file back and checks each generator's frames arrived whole, once;
/// whether they all did.
fn check_file(path: &Path, sent: &[GenReport]) -> anyhow::Result<bool> {
    let file = poolcap_format::read_file(path)
        .with_context(|| format!("cannot read back {}", path.display()))?;
    let mut checker = SeqChecker::new();
    for p in &file.packets {
        checker.observe(&p.data);
    }
    println!();
    println!(
        "capture file: {} ({} packets, {})",
        path.display(),
        file.packets.len(),
        file.format
    );
    let mut complete = true;
    for (g, r) in checker.reports(None).iter().zip(sent) {
        let ok = g.unique == r.frames && g.duplicates == 0;
        complete &= ok;
        println!(
            "  generator {}: {} of {} frames, {} missing, {} duplicates",
            g.gen_id,
            g.unique,
            r.frames,
            r.frames.saturating_sub(g.unique),
            g.duplicates
        );
    }
    if let Ok(out) = Command::new("tshark")
        .arg("-r")
        .arg(path)
        .args(["-T", "fields", "-e", "frame.number"])
        .output()
    {
        if out.status.success() {
            let n = out.stdout.iter().filter(|&&b| b == b'\n').count();
            println!("  tshark reads {n} packets");
        }
    }
    Ok(complete)
}

fn send(
    lab: &Lab,
    exe: &Path,
    gen_id: u32,
    args: &[&str],
    stop: &StopFlag,
) -> anyhow::Result<GenReport> {
    let out = child_command(&lab.sender.netns, exe)
        .args([
            "gen",
            "-i",
            &lab.sender.iface,
            "--json",
            "--gen-id",
            &gen_id.to_string(),
        ])
        .args(args)
        .output()
        .context("cannot run the generator")?;
    // A Ctrl-C reaches the generator too: report the interruption, not its exit status.
    stop.check()?;
    if !out.status.success() {
        bail!(
            "generator failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout).context("cannot read the generator's report")
}

fn read_stats(path: &Path) -> anyhow::Result<CaptureReport> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("cannot parse {}", path.display()))
}

/// Runs `poolcap demo`.
pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let stop = StopFlag::register()?;
    let exe = self_exe()?;
    for name in Lab::remove_orphans(LAB_PREFIX)? {
        println!("poolcap demo: removed lab \"{name}\" left behind by a demo that was killed");
    }
    let dir = args
        .write
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let stats_path = args.write.with_extension("stats.json");
    println!(
        "poolcap demo: building a lab (sender and probe namespaces, veth with {} queues)",
        args.queues
    );
    let lab = Lab::up(&LabSpec {
        name: format!("{LAB_PREFIX}{}", std::process::id()),
        queues: args.queues,
        hosts: 2,
    })?;
    println!(
        "  sender {} ({}), probe {} ({})",
        lab.sender.netns, lab.sender.iface, lab.probe.netns, lab.probe.iface
    );
    let mut capture = start_capture(&lab, &exe, &args.write, &stats_path, &stop)?;
    let mut sent = Vec::new();
    for (i, phase) in PHASES.iter().enumerate() {
        stop.check()?;
        let r = send(&lab, &exe, i as u32 + 1, phase.args, &stop)?;
        println!(
            "  sent {:>7} frames: {:<36} {:>8.0} pps",
            r.frames, phase.name, r.pps
        );
        sent.push(r);
    }
    std::thread::sleep(Duration::from_millis(100));
    stop.check()?;
    poolcap_sys::process::interrupt(capture.0.id()).context("cannot stop the capture")?;
    let status = capture.0.wait()?;
    let report = read_stats(&stats_path)?;
    let balanced = print_accounting(&report, &sent);
    let complete = check_file(&args.write, &sent)?;
    drop(lab);
    println!();
    println!(
        "lab removed; demo took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if !status.success() || !balanced || report.written != report.captured || !complete {
        bail!("the demo found a problem (see above)");
    }
    Ok(())
}
