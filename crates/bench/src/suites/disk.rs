//! `disk`: writing to disk: poolcap against tcpdump `-w`, dumpcap
//! `-w` and netsniff-ng `-o`, each with the same memory in front of the disk, over frame
//! sizes 64/512/1514/imix, top speed and fixed rates, rps off and on, pcap and pcapng,
//! uncompressed and zstd level 1; and points that write over 20 GB at top speed (1514 B pcap
//! in every run, pcapng and imix too in a full run), whose loss leads the headline and whose
//! sustained rate is read against the device's own limit.
//!
//! Why the runs are long: with 24 GiB of RAM and `vm.dirty_ratio` 20, a run writing a few
//! hundred MB never leaves the page cache, so it measures memory copies, not the disk: 200k
//! frames hid loss that longer runs show, and 2.3 GB runs hid the 51.8% a buffered writer
//! lost over 20 GB. A full run therefore sends at least 2M frames of 1514 B (3 GB) per run,
//! and every run has a point over 20 GB, well past the dirty limit, where the kernel
//! throttles a buffered writer to write-back's pace. The device's
//! limit is measured in the same run (`dd oflag=direct` into the same directory, in the
//! calibration), so the sustained rate is read against this machine's disk as it is today.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context};

use super::{
    loss_targets, pct_or_dash, rows_where, spec, Calibration, Plan, Scale, Table, Text, ACCOUNTING,
    TOOL_CPU,
};
use crate::meta::Meta;
use crate::peer::{compressor, CaptureSpec, Tool, Traffic};
use crate::point::{Point, Subject};
use crate::report::Row;
use crate::stats::Spread;

/// For BENCHMARKS.md.
pub const INTRO: &str = "Writing every packet to disk. poolcap \
`-w` against tcpdump `-w`, dumpcap `-w` and netsniff-ng `-o`, each with the same memory in \
front of the disk (poolcap's pool plus kernel ring against the peers' kernel buffer), over \
64, 512, 1514-byte and imix frames at top speed and at fixed rates, with rps off and on, as \
pcap and as pcapng (against dumpcap, the one peer that writes pcapng), and compressed with \
zstd level 1 (against `tcpdump -w - | zstd -1`), and to /dev/null (64 B at 300k pps: \
the CPU per packet with no write cost, which a real file's kernel write cost dilutes); at \
the pcap and pcapng points poolcap also \
writes with `--buffered` (through the page cache, as the peers) beside its default direct \
I/O (O_DIRECT). Runs send 1.5M (quick) or 2M frames of \
1514 B, and every run has a point that writes over 20 GB at top speed (1514 B pcap; a full \
run adds pcapng and imix), which no page cache can hide and which leads the headline; its \
sustained MB/s is read against the device's own limit (`dd oflag=direct`, same run). Read: \
loss (captured = distinct frames found in the file), CPU per packet, the sender's rate while the \
tool writes, and MB/s written.";

/// poolcap's kernel ring (KiB), per queue with one queue.
pub const RING_KIB: u64 = 4096;
/// poolcap's pool (M, R) with one queue: its default, 64 chunks of 256 cells of 2 KiB
/// (32 MiB).
pub const POOL: (usize, usize) = (256, 64);
/// Flows of the 2-queue points: the sender's flow hash spreads them over both queues.
const FLOWS_2Q: usize = 8;
/// Cell size of a pool for 1514-byte frames (record framing adds a few bytes per cell).
const CELL_BYTES: u64 = 2048;
/// poolcap's pool in bytes.
const POOL_BYTES: u64 = POOL.0 as u64 * POOL.1 as u64 * CELL_BYTES;
/// The peers' kernel buffer (KiB): poolcap's ring plus its pool, so each tool has the same
/// memory between the wire and the disk.
pub const PEER_KIB: u64 = RING_KIB + POOL_BYTES / 1024;
/// Bytes poolcap's direct writer may hold beyond the ring at its peak: its 4 batches of 2
/// MiB and, while the device is behind, up to 1 GiB of stall buffers
/// (`poolcap_format::direct::{DEPTH, STALL_BYTES}`).
const WRITER_PEAK_BYTES: u64 = (8 << 20) + poolcap_format::direct::STALL_BYTES as u64;
/// The kernel buffer (KiB) of the peers that the sustained points also run at poolcap's
/// peak memory: its ring and pool plus `WRITER_PEAK_BYTES`, 1068 MiB, so a peer that loses
/// with 36 MiB is also seen with all the memory poolcap may take.
pub const PEER_PEAK_KIB: u64 = PEER_KIB + WRITER_PEAK_BYTES / 1024;
/// Bytes a sustained point writes at least: far more than the page cache holds (24 GiB of
/// RAM, dirty limit 20%), so a path that does not keep up with the device cannot hide.
pub const SUSTAINED_BYTES: f64 = 20.5e9;
/// Frames of a point at which CPU per packet is compared (64 B at 300k pps, to a file and
/// to /dev/null), in quick and full runs: shorter runs left the start-up and the drain a
/// large share of the CPU time.
const CPU_POINT_FRAMES: u64 = 1_500_000;
/// The device-limit measurement: MiB written with `dd oflag=direct` (full, quick).
const DD_MIB: (u64, u64) = (4096, 1024);

/// How a point's file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    /// Microsecond pcap, every tool.
    Pcap,
    /// pcapng: poolcap and dumpcap.
    Pcapng,
    /// pcap compressed with zstd level 1: poolcap's `--compress`, tcpdump into `zstd -1`.
    Zstd1,
    /// Microsecond pcap to /dev/null, every tool: no write cost, so the CPU per packet is
    /// the capture and record-making path alone (a real file's write cost, the same for
    /// every tool, brings the tools' ratio towards 1).
    DevNull,
}

impl Output {
    fn name(self) -> &'static str {
        match self {
            Output::Pcap => "pcap",
            Output::Pcapng => "pcapng",
            Output::Zstd1 => "pcap+zstd:1",
            Output::DevNull => "pcap>/dev/null",
        }
    }

    /// The tools that can write this way.
    fn tools(self) -> &'static [Tool] {
        match self {
            Output::Pcap | Output::DevNull => &Tool::ALL,
            Output::Pcapng => &[Tool::Poolcap, Tool::Dumpcap],
            Output::Zstd1 => &[Tool::Poolcap, Tool::Tcpdump],
        }
    }
}

/// poolcap writing `out` with `--buffered` (through the page cache), beside its default
/// direct I/O.
fn buffered_subject(out: Output, queues: u16) -> Subject {
    let mut s = subject(Tool::Poolcap, out, queues);
    if let Some(spec) = s.capture.as_mut() {
        spec.buffered = true;
    }
    s.name = "poolcap --buffered".into();
    s
}

/// `tool` writing its file `out`, with the suite's equal memory; poolcap over `queues`
/// fanout sockets, each with its share of that memory (`-B` and `--pool` are per queue), the
/// peers on one socket, as they are run.
fn subject(tool: Tool, out: Output, queues: u16) -> Subject {
    let q = u64::from(queues);
    let buffer = if tool == Tool::Poolcap {
        RING_KIB / q
    } else {
        PEER_KIB
    };
    let file = out != Output::DevNull;
    let spec = CaptureSpec {
        pool: (tool == Tool::Poolcap).then_some((POOL.0, POOL.1 / queues as usize)),
        dev_null: !file && tool == Tool::Poolcap,
        queues: (tool == Tool::Poolcap).then_some(queues),
        pcapng: out == Output::Pcapng,
        compress: (out == Output::Zstd1).then(|| "zstd:1".to_owned()),
        ..spec(tool, buffer, file)
    };
    match &spec.compress {
        Some(c) if tool != Tool::Poolcap => {
            let name = match compressor(c) {
                Ok((prog, level)) => format!("{} | {prog} -{level}", tool.name()),
                Err(_) => format!("{} | {c}", tool.name()),
            };
            Subject::named(name, spec)
        }
        _ => Subject::capture(spec),
    }
}

/// A frame size of the grid: bytes, or the simple IMIX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Size {
    Bytes(usize),
    Imix,
}

impl Size {
    fn label(self) -> String {
        match self {
            Size::Bytes(b) => format!("{b}B"),
            Size::Imix => "imix".into(),
        }
    }

    /// Frames per run: enough for 1514 B to leave the page cache behind in a full run, and
    /// in a quick run the 1.5M frames (2.3 GB) at which loss showed that 200k hid.
    fn count(self, scale: Scale) -> u64 {
        let (quick, full) = match self {
            Size::Bytes(64) => (500_000, 5_000_000),
            Size::Bytes(1514) => (1_500_000, 2_000_000),
            _ => (400_000, 3_000_000),
        };
        scale.pick(20_000, quick, full)
    }

    /// At a fixed rate a full run sends for at most 15 s, but never fewer than 1.5M frames.
    fn traffic(self, rate: Option<u64>, scale: Scale) -> Traffic {
        let count = match (rate, scale) {
            (Some(r), Scale::Full) => self.count(scale).min((r * 15).max(1_500_000)),
            _ => self.count(scale),
        };
        let t = match self {
            Size::Bytes(b) => Traffic::top(b, count),
            Size::Imix => Traffic::imix(count),
        };
        Traffic { rate, ..t }
    }
}

/// A point: `size` at `rate` (top speed if none), written as `out`, rps on or off, poolcap
/// on `queues` queues (with 2, over [`FLOWS_2Q`] flows).
fn point(
    size: Size,
    rate: Option<u64>,
    out: Output,
    rps: bool,
    queues: u16,
    scale: Scale,
) -> Point {
    let speed = rate.map_or("top".to_owned(), super::k);
    let mut id = format!(
        "{} {speed} {} rps {}",
        size.label(),
        out.name(),
        if rps { "on" } else { "off" }
    );
    if queues > 1 {
        id.push_str(&format!(" {queues} queues"));
    }
    let tools = if scale == Scale::Smoke {
        &out.tools()[..2]
    } else {
        out.tools()
    };
    let mut subjects: Vec<Subject> = tools.iter().map(|&t| subject(t, out, queues)).collect();
    // Buffered against direct at the uncompressed points written to a file.
    if matches!(out, Output::Pcap | Output::Pcapng) && scale != Scale::Smoke {
        subjects.insert(1, buffered_subject(out, queues));
    }
    let mut traffic = size.traffic(rate, scale);
    if queues > 1 {
        traffic.flows = FLOWS_2Q;
    }
    let mut p = Point::new(id, traffic, subjects);
    p.rps = Some(rps);
    p
}

/// Whether a point is a sustained one (over 20 GB per run).
pub fn is_sustained(point: &str) -> bool {
    point.ends_with(">20GB")
}

/// A sustained point: `size` at top speed written as `out` until more than
/// [`SUSTAINED_BYTES`] are in the file (frames and their record headers).
fn sustained(size: Size, out: Output, scale: Scale) -> Point {
    let mut p = point(size, None, out, false, 1, scale);
    // The traffic's size is the mean frame for imix.
    let record = p.traffic.size as f64 + 16.0;
    p.id = format!("{} top {} >20GB", size.label(), out.name());
    p.traffic.count = (SUSTAINED_BYTES / record).ceil() as u64;
    // The peers that write pcap again with poolcap's peak memory as their kernel buffer,
    // right after poolcap's two subjects (a run cut short still compares them).
    if out == Output::Pcap && scale != Scale::Smoke {
        for (at, tool) in [(2, Tool::Tcpdump), (3, Tool::NetsniffNg)] {
            let name = format!("{} {}M", tool.name(), PEER_PEAK_KIB / 1024);
            p.subjects
                .insert(at, Subject::named(name, spec(tool, PEER_PEAK_KIB, true)));
        }
    }
    p
}

/// The points.
pub fn plan(scale: Scale, cal: &Calibration) -> Plan {
    let mut v = Vec::new();
    if scale == Scale::Smoke {
        v.push(point(Size::Bytes(64), None, Output::Pcap, false, 1, scale));
    } else {
        // Fixed rates of a full run (a quick run picks its own, below).
        let (sizes, rates): (&[Size], &[u64]) = scale.pick(
            (&[], &[]),
            (&[Size::Bytes(64), Size::Bytes(1514)], &[]),
            (
                &[
                    Size::Bytes(64),
                    Size::Bytes(512),
                    Size::Bytes(1514),
                    Size::Imix,
                ],
                &[100_000, 200_000, 300_000],
            ),
        );
        for rps in [false, true] {
            // Quick: imix at top speed with rps off as well.
            let imix: &[Size] = if scale == Scale::Quick && !rps {
                &[Size::Imix]
            } else {
                &[]
            };
            for &size in sizes.iter().chain(imix) {
                v.push(point(size, None, Output::Pcap, rps, 1, scale));
                // Quick, rps off only: 100k pps at 1514 B, where a rate means MB/s, and
                // the CPU point, 300k pps at 64 B.
                let quick_rate = match size {
                    Size::Bytes(1514) if !rps => Some(100_000),
                    Size::Bytes(64) if !rps => Some(300_000),
                    _ => None,
                };
                let fixed: Vec<u64> = match scale {
                    Scale::Full => rates.to_vec(),
                    _ => quick_rate.into_iter().collect(),
                };
                for rate in fixed {
                    let mut p = point(size, Some(rate), Output::Pcap, rps, 1, scale);
                    if size == Size::Bytes(64) && rate == 300_000 {
                        p.traffic.count = p.traffic.count.max(CPU_POINT_FRAMES);
                    }
                    v.push(p);
                }
            }
            let other: &[Size] = scale.pick(
                &[],
                &[Size::Bytes(1514)],
                &[Size::Bytes(64), Size::Bytes(1514)],
            );
            for &size in other {
                // Quick: pcapng with rps on too, zstd with rps off only.
                for out in [Output::Pcapng, Output::Zstd1] {
                    if scale == Scale::Full || !rps || out == Output::Pcapng {
                        v.push(point(size, None, out, rps, 1, scale));
                    }
                }
            }
        }
        // The CPU point without a write cost: 64 B at 300k pps to /dev/null (a full run
        // adds 1514 B at 100k pps), rps off, beside the same traffic written to a file.
        let null: &[(Size, u64)] = scale.pick(
            &[],
            &[(Size::Bytes(64), 300_000)],
            &[(Size::Bytes(64), 300_000), (Size::Bytes(1514), 100_000)],
        );
        for &(size, rate) in null {
            let mut p = point(size, Some(rate), Output::DevNull, false, 1, scale);
            p.traffic.count = p.traffic.count.max(CPU_POINT_FRAMES);
            v.push(p);
        }
        // 2 queues: 1514 B pcap at top speed with rps off; a full run adds rps on, pcapng
        // and imix.
        let two: &[(Size, Output, bool)] = scale.pick(
            &[],
            &[(Size::Bytes(1514), Output::Pcap, false)],
            &[
                (Size::Bytes(1514), Output::Pcap, false),
                (Size::Bytes(1514), Output::Pcap, true),
                (Size::Bytes(1514), Output::Pcapng, false),
                (Size::Imix, Output::Pcap, false),
            ],
        );
        for &(size, out, rps) in two {
            v.push(point(size, None, out, rps, 2, scale));
        }
        // Over 20 GB: 1514 B pcap in every run; a full run adds pcapng and imix.
        let long: &[(Size, Output)] = scale.pick(
            &[],
            &[(Size::Bytes(1514), Output::Pcap)],
            &[
                (Size::Bytes(1514), Output::Pcap),
                (Size::Bytes(1514), Output::Pcapng),
                (Size::Imix, Output::Pcap),
            ],
        );
        for &(size, out) in long {
            v.push(sustained(size, out, scale));
        }
    }
    let mut notes = vec![format!(
        "equal memory in front of the disk: poolcap a {} MiB kernel ring plus a pool of {}×{} \
         cells of {CELL_BYTES} B ({} MiB; a cell also holds the packet's record framing, a \
         few bytes more), given as `-B {RING_KIB} --pool {},{}`: writing only, poolcap writes \
         from its kernel ring, which then has all of that memory (its chunks are handles of \
         ring blocks), as its startup line says; tcpdump, dumpcap and netsniff-ng a {} MiB kernel buffer (-B / -S); \
         at the `2 queues` points poolcap captures with `--queues 2` (fanout, a capture thread \
         per queue) and half of that memory per queue (`-B {} --pool {},{}`), the peers with \
         their one socket as before, and the traffic has {FLOWS_2Q} flows",
        RING_KIB / 1024,
        POOL.1,
        POOL.0,
        POOL_BYTES >> 20,
        POOL.0,
        POOL.1,
        PEER_KIB / 1024,
        RING_KIB / 2,
        POOL.0,
        POOL.1 / 2
    )];
    notes.push(match cal.disk_mb_s {
        Some(mb) => format!(
            "device limit: {mb:.0} MB/s (`dd if=/dev/zero bs=1M count={} oflag=direct` into \
             the bench's directory under /var/tmp, before the points; the file is deleted)",
            scale.pick(0, DD_MIB.1, DD_MIB.0)
        ),
        None => "device limit not measured (smoke run)".into(),
    });
    Plan { points: v, notes }
}

/// MiB `dd` writes to measure the device at `scale` (none in smoke runs).
pub fn dd_mib(scale: Scale) -> Option<u64> {
    match scale {
        Scale::Smoke => None,
        Scale::Quick => Some(DD_MIB.1),
        Scale::Full => Some(DD_MIB.0),
    }
}

/// Bytes a run at `scale` writes at once into the scratch directory at most: the largest
/// capture file (the sustained point's in a full run) or `dd`'s file.
pub fn room_needed(scale: Scale) -> u64 {
    let largest = plan(scale, &Calibration::default())
        .points
        .iter()
        .map(|p| p.traffic.count * (p.traffic.size as u64 + 16))
        .max()
        .unwrap_or(0);
    largest.max(dd_mib(scale).unwrap_or(0) << 20)
}

/// Fails with a clear message when `dir`'s file system has less than `bytes` free, rather
/// than filling a shared disk halfway through a run.
pub fn check_room(dir: &Path, bytes: u64) -> anyhow::Result<()> {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(dir)
        .output()
        .context("cannot run df")?;
    let free: u64 = String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .with_context(|| format!("df printed no free space for {}", dir.display()))?;
    if free < bytes {
        bail!(
            "{} has {:.1} GB free; this run writes files of up to {:.1} GB there",
            dir.display(),
            free as f64 / 1e9,
            bytes as f64 / 1e9
        );
    }
    Ok(())
}

/// The device's own write limit in MB/s: `mib` MiB of zeros written with `O_DIRECT` (past
/// the page cache) into `dir` by `dd` on the tool's CPU, timed from start to exit; the file
/// is deleted afterwards.
pub fn device_limit(dir: &Path, mib: u64) -> anyhow::Result<f64> {
    let file = dir.join("dd-oflag-direct.bin");
    let started = Instant::now();
    let out = Command::new("taskset")
        .args(["-c", &TOOL_CPU.to_string(), "dd", "if=/dev/zero", "bs=1M"])
        .arg(format!("count={mib}"))
        .arg(format!("of={}", file.display()))
        .args(["oflag=direct", "status=none"])
        .output()
        .context("cannot run dd");
    let seconds = started.elapsed().as_secs_f64();
    let written = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_file(&file);
    let out = out?;
    if !out.status.success() {
        bail!(
            "dd oflag=direct failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    if written != mib << 20 {
        bail!("dd oflag=direct wrote {written} bytes, not {}", mib << 20);
    }
    Ok(written as f64 / 1e6 / seconds)
}

/// Rows of points whose id passes `keep`, with the tools' peak memory if `memory`.
fn table(title: &str, rows: &[Row], keep: impl Fn(&str) -> bool, memory: bool) -> Table {
    let mut columns = [&ACCOUNTING[..], &["cpu_s_per_mpkt", "mb_per_s", "wall_s"]].concat();
    if memory {
        columns.push("peak_mib");
    }
    Table::new(
        title,
        rows_where(rows, |r| keep(&r.point)),
        &columns,
        &["loss", "cpu_s_per_mpkt", "sender_pps", "mb_per_s"],
    )
}

/// Summary text.
pub fn text(meta: &Meta, rows: &[Row]) -> Text {
    let mut tables = Vec::new();
    for (title, pattern) in [
        ("pcap, rps off", " pcap rps off"),
        ("pcap, rps on", " pcap rps on"),
        ("pcapng (poolcap and dumpcap)", " pcapng "),
        (
            "zstd level 1 (poolcap and tcpdump | zstd -1)",
            " pcap+zstd:1 ",
        ),
        (
            "pcap to /dev/null (no write cost: the capture path's CPU per packet alone)",
            " pcap>/dev/null ",
        ),
    ] {
        tables.push(table(title, rows, |p| p.contains(pattern), false));
    }
    tables.push(table(
        "Sustained: over 20 GB per run",
        rows,
        is_sustained,
        true,
    ));
    let mut sections = Vec::new();
    if let Some(s) = sustained_text(meta, rows) {
        sections.push(("Sustained rate against the device".to_owned(), s));
    }
    Text {
        settings: vec![
            format!(
                "every tool writes to a file under /var/tmp (disk, not tmpfs), deleted after \
                 each run; pinned to CPU {TOOL_CPU} with its threads (tcpdump's zstd too); \
                 captured = distinct frames found in the file (read back as a stream, \
                 decompressed; a frame found twice fails the run)"
            ),
            "rps is set per point (`rps on`: the probe's rps_cpus is the tool's CPU, so the \
             kernel's receive work competes with the writer, as with a NIC whose interrupts go \
             to the capture core; `rps off`: it runs on the sender's CPU)"
                .into(),
            "tcpdump and netsniff-ng write pcap only, so the pcapng points compare poolcap \
             with dumpcap; only tcpdump has a way to compress (a pipe into the zstd program), \
             so the zstd:1 points compare poolcap with `tcpdump -w - | zstd -1 -q -c`"
                .into(),
            "MB/s written = size of the file (compressed, if so) / seconds of sending".into(),
            format!(
                "memory over 20 GB: poolcap's direct writer may take up to {} MiB beyond its \
                 {} MiB ring (4 batches of 2 MiB, and stall buffers while the device is behind), \
                 so those points also run tcpdump and netsniff-ng with a {} MiB kernel buffer; \
                 peak memory = the tool's peak resident set (`VmHWM`, its mapped kernel ring \
                 included, the page cache not; summed over a pipe's processes)",
                WRITER_PEAK_BYTES >> 20,
                PEER_KIB / 1024,
                PEER_PEAK_KIB / 1024
            ),
        ],
        tables,
        sections,
        targets: loss_targets(rows),
        headline: headline(meta, rows),
        ..Text::default()
    }
}

/// The sustained point's MB/s against the device limit, per tool.
fn sustained_text(meta: &Meta, rows: &[Row]) -> Option<String> {
    let limit = meta.calibration.disk_mb_s?;
    let lines: Vec<String> = rows
        .iter()
        .filter(|r| is_sustained(&r.point))
        .filter_map(|r| {
            let mb = r.get("mb_per_s")?;
            Some(format!(
                "- {} {}: {:.0} MB/s (median; {:.0}–{:.0}) = {:.2} of the device's {limit:.0} \
                 MB/s, loss {}",
                r.point,
                r.subject,
                mb.median,
                mb.min,
                mb.max,
                mb.median / limit,
                pct_or_dash(r.median("loss"))
            ))
        })
        .collect();
    (!lines.is_empty()).then(|| {
        format!(
            "Device limit measured in this run with `dd oflag=direct`: {limit:.0} MB/s.\n\n{}\n",
            lines.join("\n")
        )
    })
}

/// Worst and median of one tool's per-point medians of `key`, with the worst point.
fn worst_and_median(rows: &[Row], tool: Tool, key: &str) -> Option<(f64, String, f64)> {
    let v: Vec<(f64, &str)> = rows
        .iter()
        .filter(|r| r.capture.as_ref().is_some_and(|c| c.tool == tool))
        .filter_map(|r| Some((r.median(key)?, r.point.as_str())))
        .collect();
    let (worst, at) = v.iter().copied().max_by(|a, b| a.0.total_cmp(&b.0))?;
    let median = Spread::of(v.iter().map(|x| x.0))?.median;
    Some((worst, at.to_owned(), median))
}

/// First what over 20 GB at top speed lost, per subject with its memory (the page cache
/// cannot hide a path that does not keep up there); then the worst point and the median for
/// each tool (never the best point), and the sustained rate against the device.
fn headline(meta: &Meta, rows: &[Row]) -> String {
    let long: Vec<String> = rows
        .iter()
        .filter(|r| is_sustained(&r.point))
        .filter_map(|r| {
            let memory = r
                .median("peak_mib")
                .map_or(String::new(), |m| format!(" (peak {m:.0} MiB)"));
            Some(format!(
                "{} {} {}{memory}",
                r.point,
                r.subject,
                pct_or_dash(Some(r.median("loss")?))
            ))
        })
        .collect();
    let lead = if long.is_empty() {
        String::new()
    } else {
        format!(
            "Over 20 GB at top speed, loss (median of runs; every tool with a {} MiB ring, the \
             `{}M` peers with poolcap's peak memory; peak memory is the tool's resident peak, \
             the page cache not counted): {}. ",
            PEER_KIB / 1024,
            PEER_PEAK_KIB / 1024,
            long.join(", ")
        )
    };
    let tools: Vec<String> = Tool::ALL
        .iter()
        .filter_map(|&t| {
            let (worst, at, median) = worst_and_median(rows, t, "loss")?;
            Some(format!(
                "{} worst {} (at {at}), median {}",
                t.name(),
                pct_or_dash(Some(worst)),
                pct_or_dash(Some(median))
            ))
        })
        .collect();
    let mut s = format!(
        "{lead}Loss over the points (median of runs per point): {}.",
        tools.join("; ")
    );
    if let Some(cpu) = cpu_without_write(rows) {
        s.push(' ');
        s.push_str(&cpu);
    }
    if let (Some(limit), Some(mb)) = (
        meta.calibration.disk_mb_s,
        rows.iter()
            .find(|r| r.point == "1514B top pcap >20GB" && r.poolcap)
            .and_then(|r| r.median("mb_per_s")),
    ) {
        s.push_str(&format!(
            " Sustained over 20 GB: poolcap {mb:.0} MB/s against the device's {limit:.0} MB/s \
             (dd oflag=direct)."
        ));
    }
    s
}

/// CPU per packet (median of runs, ns) of each tool at the first point written to
/// /dev/null, where no write cost dilutes the difference between the tools.
fn cpu_without_write(rows: &[Row]) -> Option<String> {
    let at = rows
        .iter()
        .find(|r| r.point.contains(" pcap>/dev/null "))?
        .point
        .clone();
    let tools: Vec<String> = rows
        .iter()
        .filter(|r| r.point == at)
        .filter_map(|r| {
            let ns = r.median("cpu_s_per_mpkt")? * 1e3;
            Some(format!("{} {ns:.0}", r.subject))
        })
        .collect();
    (!tools.is_empty()).then(|| {
        format!(
            "CPU per packet with no write cost ({at}, ns, median of runs): {}.",
            tools.join(", ")
        )
    })
}

/// The disk suite (see [`INTRO`]).
pub const DEF: super::SuiteDef = super::SuiteDef {
    queues: 2,
    calibration: super::CalibrationKind::Device,
    ..super::SuiteDef::new(
        "Writing to disk: loss, CPU, MB/s, sustained rate",
        INTRO,
        plan,
        text,
    )
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suites::ASSUMED_TOP_PPS;

    fn cal() -> Calibration {
        Calibration {
            ns_per_iteration: 1.0,
            top_pps: Some(ASSUMED_TOP_PPS),
            disk_mb_s: Some(1800.0),
        }
    }

    #[test]
    fn full_runs_cover_the_grid_and_leave_the_page_cache_behind() {
        let f = plan(Scale::Full, &cal()).points;
        let ids: Vec<&str> = f.iter().map(|p| p.id.as_str()).collect();
        for id in [
            "64B top pcap rps off",
            "512B 200k pcap rps on",
            "imix 100k pcap rps off",
            "1514B top pcapng rps on",
            "64B top pcap+zstd:1 rps off",
            "1514B top pcap >20GB",
            "1514B top pcapng >20GB",
            "imix top pcap >20GB",
        ] {
            assert!(ids.contains(&id), "{id} missing: {ids:?}");
        }
        for p in f.iter().filter(|p| p.traffic.size >= 1514) {
            assert!(p.traffic.count >= 1_500_000, "{}", p.id);
        }
        let count = |id: &str| f.iter().find(|p| p.id == id).unwrap().traffic.count;
        assert_eq!(count("64B top pcap rps off"), 5_000_000);
        assert_eq!(count("64B 100k pcap rps off"), 1_500_000, "15 s at most");
        assert_eq!(count("1514B 200k pcap rps on"), 2_000_000);
        for big in f.iter().filter(|p| is_sustained(&p.id)) {
            let mean = if big.traffic.imix { 355.0 } else { 1514.0 };
            assert!(
                big.traffic.count as f64 * (mean + 16.0) > 20e9,
                "{}",
                big.id
            );
        }
        let big = f.iter().find(|p| p.id == "1514B top pcap >20GB").unwrap();
        let names: Vec<&str> = big.subjects.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "poolcap",
                "poolcap --buffered",
                "tcpdump 1068M",
                "netsniff-ng 1068M",
                "tcpdump",
                "netsniff-ng",
                "dumpcap"
            ]
        );
        // The peers at poolcap's peak memory: its ring and pool, its direct writer's batches
        // and stall buffers.
        let peak = (PEER_KIB << 10) as usize
            + poolcap_format::direct::DEPTH * (2 << 20)
            + poolcap_format::direct::STALL_BYTES;
        for s in &big.subjects[2..4] {
            let c = s.capture.as_ref().unwrap();
            assert_eq!(((c.buffer_kib << 10) as usize, c.write), (peak, true));
        }
        let ng = f.iter().find(|p| p.id == "1514B top pcapng >20GB").unwrap();
        assert_eq!(ng.subjects.len(), 3, "no peer at peak memory writes pcapng");
        let imix = f.iter().find(|p| p.id.starts_with("imix")).unwrap();
        assert!(imix.traffic.imix);
        assert!(f.iter().all(|p| p.rps.is_some()));
    }

    #[test]
    fn every_tool_gets_the_same_memory_and_its_own_way_to_write() {
        let q = plan(Scale::Quick, &cal()).points;
        assert!(q.len() <= 13, "{}", q.len());
        let cpu = q.iter().find(|p| p.id == "64B 300k pcap rps off").unwrap();
        assert_eq!(cpu.traffic.count, CPU_POINT_FRAMES);
        let null = q
            .iter()
            .find(|p| p.id == "64B 300k pcap>/dev/null rps off")
            .unwrap();
        assert_eq!(null.traffic.count, CPU_POINT_FRAMES);
        let names: Vec<&str> = null.subjects.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["poolcap", "tcpdump", "netsniff-ng", "dumpcap"]);
        for s in &null.subjects {
            let c = s.capture.as_ref().unwrap();
            assert!(!c.write, "{}: nothing is written to a file", s.name);
            assert_eq!(c.dev_null, c.tool == Tool::Poolcap, "{}", s.name);
        }
        let two = q
            .iter()
            .find(|p| p.id == "1514B top pcap rps off 2 queues")
            .unwrap();
        assert_eq!(two.traffic.flows, FLOWS_2Q);
        let c = two.subjects[0].capture.as_ref().unwrap();
        assert_eq!(
            (c.queues, c.buffer_kib, c.pool),
            (Some(2), 2048, Some((256, 32)))
        );
        // Every quick point is short but the one over 20 GB.
        assert!(q
            .iter()
            .all(|p| p.traffic.count <= 1_500_000 || p.id == "1514B top pcap >20GB"));
        assert!(q.iter().filter(|p| is_sustained(&p.id)).count() == 1);
        let imix = q.iter().find(|p| p.id == "imix top pcap rps off").unwrap();
        assert!(imix.traffic.imix);
        let long = q.iter().find(|p| p.id == "1514B top pcap rps off").unwrap();
        assert_eq!(long.traffic.count, 1_500_000, "the quick length");
        let pcap = q.iter().find(|p| p.id == "1514B top pcap rps on").unwrap();
        let mem = |s: &Subject| {
            let c = s.capture.as_ref().unwrap();
            let pool = c
                .pool
                .map_or(0, |(m, r)| (m * r) as u64 * CELL_BYTES / 1024);
            (c.buffer_kib + pool) * u64::from(c.queues.unwrap_or(1))
        };
        assert!(
            two.subjects.iter().all(|s| mem(s) == PEER_KIB),
            "equal memory"
        );
        assert_eq!(pcap.subjects.len(), 5);
        assert_eq!(pcap.subjects[1].name, "poolcap --buffered");
        assert!(
            pcap.subjects.iter().all(|s| mem(s) == PEER_KIB),
            "equal memory"
        );
        assert_eq!(PEER_KIB, 36 * 1024);
        let ng = q.iter().find(|p| p.id.contains("pcapng")).unwrap();
        let names: Vec<&str> = ng.subjects.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["poolcap", "poolcap --buffered", "dumpcap"]);
        let buffered = |s: &Subject| s.capture.as_ref().unwrap().buffered;
        assert_eq!(ng.subjects.iter().filter(|s| buffered(s)).count(), 1);
        assert!(q.iter().any(|p| p.id == "1514B top pcapng rps on"));
        assert!(ng
            .subjects
            .iter()
            .all(|s| s.capture.as_ref().unwrap().pcapng));
        let z = q.iter().find(|p| p.id.contains("zstd")).unwrap();
        assert_eq!(z.subjects[1].name, "tcpdump | zstd -1");
        assert_eq!(dd_mib(Scale::Smoke), None);
        assert!(room_needed(Scale::Full) > 20_000_000_000);
        assert!(room_needed(Scale::Quick) > 20_000_000_000);
        assert!(check_room(Path::new("/var/tmp"), 1).is_ok());
        let e = check_room(Path::new("/var/tmp"), u64::MAX).unwrap_err();
        assert!(e.to_string().contains("GB free"), "{e}");
    }

    #[test]
    fn the_device_limit_is_measured_past_the_page_cache() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let mb = device_limit(dir.path(), 8).unwrap();
        assert!(mb > 0.0 && mb.is_finite(), "{mb}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "file left"
        );
    }
}
