//! `predict`: `poolcap predict` validated against measurement. The run first calibrates
//! (the points of [`calibrate::points`], as `poolcap calibrate` does), then measures the
//! points the model is judged on: paper 002's four sessions (frame sizes at top speed, a
//! larger kernel buffer, a larger capture buffer, snaplength 96 with tuned buffers), a burst
//! grid and a load grid, for poolcap, tcpdump and dumpcap, and a probe grid (`poolcap probe`
//! with more and more rules). The summary predicts every
//! measured point from the profile built out of the calibration rows alone (the prediction
//! never sees the measurement) and judges it with [`validate`]: relative error ≤ 20% where
//! the measured loss is ≥ 1%, "no loss" (fewer than one frame predicted lost) where none
//! was measured. Since calibration and measurement run in one lab minutes apart, others'
//! load on a shared machine weighs on both.

use std::fmt::Write as _;
use std::time::Duration;

use super::{checks_line, Calibration, Check, Plan, Scale, Table, Text, TOOL_CPU};
use crate::calibrate::{self, validate};
use crate::figure::Figure;
use crate::meta::Meta;
use crate::peer::{CaptureSpec, Tool, Traffic};
use crate::point::{Point, Subject};
use crate::report::Row;
use poolcap_doctor::profile::Profile;

/// For BENCHMARKS.md.
pub const INTRO: &str = "`poolcap predict` against measurement. One run \
calibrates this machine's stage costs (the calibration points, as `poolcap calibrate`: the \
sender alone, each capture configuration (poolcap counting, copying, writing pcap and pcapng, \
its probe with 1 and 100 rules; tcpdump and dumpcap) and poolcap with a saturated worker at 64, \
512 and 1514 B, rps off; poolcap counting with rps on for the receive work's time on the tool's CPU, and \
the peers behind it at top speed with 2 MiB rings, where they fall behind, and at 250k pps, where they keep up; tcpdump at top speed \
with 32 MiB rings at 64 B, where it keeps up, for its waits for the CPU while it does) and then measures \
paper 002's four sessions with rps on (frame sizes at top speed with a 2 MB buffer; a larger \
kernel buffer; a larger capture buffer; snaplength 96 with tuned buffers), session 1 at a fixed \
450k pps (S5, not the paper's: the same offered rate for every tool and run), a burst grid and a \
load grid, for poolcap, tcpdump and dumpcap, and a probe grid (`poolcap probe` with 16, 256 and \
1000 rules, rps off), and one long writing point (poolcap writing pcap, 1514 B at top speed, over \
20 GB, with its default direct I/O and with `--buffered`), judged by the disk measured in the same run \
before its points (as `poolcap calibrate --disk-dir`: direct and buffered writes of twice the dirty limit). \
Every measured point is predicted from the \
profile of the calibration rows only. Target: relative error ≤ 20% where the measured loss is \
≥ 1%, and a correct \"no loss\" (under one frame predicted lost) where none was measured. A peer offered a rate \
between its two capacities is at the edge: it may keep up or fall behind for good, and the loss predicted is \
the likelier of the two (behind when a wait for its CPU is likely to outlast its buffers during the run); the \
tally counts those points and whether they lay between the two. Read: which kinds of point the model \
gets right, and by how much it misses the others.";

/// Paper 002's default capture buffer: 2 MB.
const PAPER_KIB: u64 = 2048;
/// Session 2's larger kernel buffer: the paper's 8 MB `rmem_default`.
const KERNEL_KIB: u64 = 8192;
/// Sessions 3 and 4: the paper's 32 MB capture buffer.
const CAPTURE_KIB: u64 = 32768;
/// poolcap's larger capture buffer in sessions 3 and 4: a pool of 256 x 256 packets.
const BIG_POOL: (usize, usize) = (256, 256);
/// The burst grid's buffers: a small ring (and for poolcap a pool of 4096 packets), so that
/// the longer bursts overflow them.
const BURST_RING_KIB: u64 = 512;
const BURST_PEER_RING_KIB: u64 = 1024;
const BURST_POOL: (usize, usize) = (64, 64);

/// The three tools writing their pcap stream to /dev/null, `buffer_kib` of ring, `snaplen`,
/// and for poolcap `pool`.
fn tools(buffer_kib: u64, snaplen: Option<u32>, pool: Option<(usize, usize)>) -> Vec<Subject> {
    [Tool::Poolcap, Tool::Tcpdump, Tool::Dumpcap]
        .into_iter()
        .map(|t| {
            let poolcap = t == Tool::Poolcap;
            Subject::capture(CaptureSpec {
                dev_null: poolcap,
                snaplen,
                pool: pool.filter(|_| poolcap),
                ..CaptureSpec::new(t, buffer_kib)
            })
        })
        .collect()
}

/// A point with the kernel's receive work on (`rps`) or off the tool's CPU.
fn point(id: String, traffic: Traffic, subjects: Vec<Subject>, rps: bool) -> Point {
    Point {
        rps: Some(rps),
        ..Point::new(id, traffic, subjects)
    }
}

/// Paper 002's sessions at frame sizes `s1` (session 1) and `grid` (sessions 2-4), rps on.
fn sessions(s1: &[usize], grid: &[usize], frames: u64) -> Vec<Point> {
    let top = |size| Traffic::top(size, frames);
    let mut v: Vec<Point> = s1
        .iter()
        .map(|&s| {
            point(
                format!("S1 {s}B"),
                top(s),
                tools(PAPER_KIB, None, None),
                true,
            )
        })
        .collect();
    for &s in grid {
        v.push(point(
            format!("S2 {s}B B8M"),
            top(s),
            tools(KERNEL_KIB, None, None),
            true,
        ));
    }
    for &s in grid {
        v.push(point(
            format!("S3 {s}B B32M"),
            top(s),
            tools(CAPTURE_KIB, None, Some(BIG_POOL)),
            true,
        ));
    }
    for &s in grid {
        v.push(point(
            format!("S4 {s}B s96 B32M"),
            top(s),
            tools(CAPTURE_KIB, Some(96), Some(BIG_POOL)),
            true,
        ));
    }
    v
}

/// Bursts of `b` 64-byte frames at top speed, `n` of them, each followed by `idle`.
fn bursts(b: u64, n: u64, idle: Duration) -> Traffic {
    Traffic {
        burst: Some(b),
        idle: Some(idle),
        ..Traffic::top(64, n * b)
    }
}

/// The burst grid: poolcap with an x-loop load with which one core analyses half the top
/// speed (rps off, a 512 KiB ring and a pool of 4096 packets), and tcpdump and dumpcap with
/// a 1 MiB ring and the kernel's receive work on their CPU (rps on; without load or rps they
/// lose nothing on veth); each followed by time to analyse 1.5 bursts at half the top speed.
fn burst_grid(lengths: &[u64], n: u64, c: &Calibration) -> Vec<Point> {
    let load = c.half_load();
    let half = c.pps_at(load);
    let mut v = Vec::new();
    for &b in lengths {
        let idle = Duration::from_secs_f64(1.5 * b as f64 / half);
        let poolcap = CaptureSpec {
            pool: Some(BURST_POOL),
            load,
            ..CaptureSpec::new(Tool::Poolcap, BURST_RING_KIB)
        };
        v.push(point(
            format!("burst poolcap B={b}"),
            bursts(b, n, idle),
            vec![Subject::capture(poolcap)],
            false,
        ));
        let peers = [Tool::Tcpdump, Tool::Dumpcap]
            .map(|t| Subject::capture(CaptureSpec::new(t, BURST_PEER_RING_KIB)));
        v.push(point(
            format!("burst peers B={b}"),
            bursts(b, n, idle),
            peers.to_vec(),
            true,
        ));
    }
    v
}

/// The load grid at top speed with 64-byte frames: poolcap with x-loop loads with which one
/// core analyses `shares` of the top speed (rps off), and tcpdump and dumpcap writing a pcap
/// file (rps on).
fn load_grid(shares: &[f64], frames: u64, c: &Calibration) -> Vec<Point> {
    let mut v: Vec<Point> = shares
        .iter()
        .map(|&share| {
            let load = c.load_for(share * c.top());
            let spec = CaptureSpec {
                load,
                ..CaptureSpec::new(Tool::Poolcap, super::BUFFER_KIB)
            };
            point(
                format!("load poolcap x={load}"),
                Traffic::top(64, frames),
                vec![Subject::capture(spec)],
                false,
            )
        })
        .collect();
    let writers = [Tool::Tcpdump, Tool::Dumpcap]
        .map(|t| Subject::capture(super::spec(t, PAPER_KIB, true)))
        .to_vec();
    v.push(point(
        "load peers -w".to_owned(),
        Traffic::top(64, frames),
        writers,
        true,
    ));
    v
}

/// Session 5 (not the paper's): session 1 at a fixed `pps` instead of top speed, so that
/// every tool and run is offered the same rate (at top speed the sender's rate moves with
/// the tool and the run, and the receive work's cost on the tool's CPU with it).
fn fixed_rate(sizes: &[usize], pps: u64, frames: u64) -> Vec<Point> {
    sizes
        .iter()
        .map(|&s| {
            point(
                format!("S5 {s}B {}k", pps / 1000),
                Traffic {
                    rate: Some(pps),
                    ..Traffic::top(s, frames)
                },
                tools(PAPER_KIB, None, None),
                true,
            )
        })
        .collect()
}

/// The offered rate of session 5: below the sender's top speed at 1514 B with the receive
/// work on the tool's CPU, so every tool and run is offered the same rate (BENCHMARKS.md,
/// predict, the sender's rate at S1 1514B).
const S5_PPS: u64 = 450_000;

/// The probe grid at top speed with 64-byte frames: `poolcap probe` with each of `rules`
/// rules of the bench's generated rule set on its one worker (rps off).
fn probe_grid(rules: &[usize], frames: u64) -> Vec<Point> {
    rules
        .iter()
        .map(|&n| {
            let spec = CaptureSpec {
                rules: Some(n),
                ..CaptureSpec::new(Tool::Probe, super::BUFFER_KIB)
            };
            point(
                format!("probe {n}r"),
                Traffic::top(64, frames),
                vec![Subject::capture(spec)],
                false,
            )
        })
        .collect()
}

/// Frames of the long writing point (`long_write`): as `bench disk`'s sustained point,
/// 1514 B frames making over 20 GB of pcap, several times the page cache's dirty limit on
/// the development VM (2.2 GB of 24 GB of memory), so the page cache cannot hide a path
/// slower than the offered rate.
pub const LONG_WRITE_FRAMES: u64 = 13_398_693;

/// The id of the long writing point.
pub const LONG_WRITE: &str = "disk 1514B pcap >20GB";

/// The long writing point: poolcap writing pcap in the scratch directory under /var/tmp,
/// 1514 B frames at top speed, rps off, for [`LONG_WRITE_FRAMES`], once with its default
/// direct I/O and once through the page cache (`--buffered`): the sender's 550-770k pps are
/// 0.85-1.2 GB/s, above write-back's 0.4-0.8 GB/s and below the device's direct rate, so the
/// buffered writer loses once the page cache is full and the direct one keeps up unless
/// the device stalls; the model must say which from the profile's disk.
fn long_write() -> Point {
    let spec = |buffered| CaptureSpec {
        write: true,
        buffered,
        ..CaptureSpec::new(Tool::Poolcap, super::BUFFER_KIB)
    };
    point(
        LONG_WRITE.to_owned(),
        Traffic::top(1514, LONG_WRITE_FRAMES),
        vec![
            Subject::capture(spec(false)),
            Subject::named("poolcap --buffered", spec(true)),
        ],
        false,
    )
}

/// The points: calibration first, then what is validated.
pub fn plan(scale: Scale, c: &Calibration) -> Plan {
    let frames = scale.pick(20_000, 300_000, 1_000_000);
    let mut v = match scale {
        Scale::Smoke => calibrate::points(&[64], frames, &[], false),
        Scale::Quick => calibrate::points(&calibrate::SIZES, 500_000, &[], true),
        Scale::Full => calibrate::points(&calibrate::SIZES, frames, &["zstd:1", "gzip:6"], true),
    };
    match scale {
        Scale::Smoke => {
            let mut subjects = tools(PAPER_KIB, None, None);
            subjects.truncate(2);
            v.push(point(
                "S1 64B".to_owned(),
                Traffic::top(64, frames),
                subjects,
                true,
            ));
        }
        Scale::Quick => {
            v.extend(sessions(&[64, 512, 1514], &[64], frames));
            v.extend(fixed_rate(&[64, 1514], S5_PPS, frames));
            v.extend(burst_grid(&[2048, 32768], 3, c));
            // 100k frames: the generator must finish within its timeout, which assumes
            // 50k pps, while a saturated capture on a busy machine slows it to ~10k pps.
            v.extend(load_grid(&[0.5, 0.8], 100_000, c));
            v.extend(probe_grid(&[16, 256, 1000], frames));
            v.push(long_write());
        }
        Scale::Full => {
            let grid = [64, 256, 512, 1024, 1514];
            v.extend(sessions(
                &[64, 128, 256, 512, 768, 1024, 1280, 1514],
                &grid,
                frames,
            ));
            v.extend(fixed_rate(&[64, 512, 1514], S5_PPS, frames));
            v.extend(burst_grid(&[1024, 4096, 16384, 65536], 5, c));
            v.extend(load_grid(&[0.25, 0.5, 0.75, 0.9, 1.5], frames, c));
            v.extend(probe_grid(&[1, 16, 64, 256, 1000], frames));
            v.push(long_write());
        }
    }
    Plan {
        points: v,
        notes: vec![format!(
            "{}; burst and load grids derive their x-loop loads from it",
            c.top_speed_note("")
        )],
    }
}

/// The session of a point id: `S1`..`S5`, `burst`, `load`, `probe`, `disk`.
fn session(point: &str) -> &str {
    point.split(' ').next().unwrap_or(point)
}

/// The profile calibrated in this run (its calibration rows only; the built-in one if the
/// run has none, which its source then says, with the disk measured in this run if it was)
/// and every other point predicted with it.
fn judged(meta: &Meta, rows: &[Row]) -> (Profile, Vec<validate::Compared>) {
    let profile = crate::validate::of_run(meta, rows).unwrap_or_else(|| {
        let mut p = Profile::built_in();
        if let Some(d) = &meta.disk {
            p.disk = Some(d.clone());
            p.source
                .push_str("; the disk (`disk`) measured in this run, before its points");
        }
        p
    });
    let compared = validate::compare(rows, &profile);
    (profile, compared)
}

/// One line per session: points, within 20%, no-loss misses.
fn per_session(compared: &[validate::Compared]) -> String {
    let mut s = String::from(
        "| session | points | loss ≥ 1%: within 20% | loss ≥ 1%, runs within 20% of their \
         median: within 20% | loss ≥ 1%: between the lowest and highest run | worst error | \
         median error | no loss measured: predicted to lose |\n|---|---|---|---|---|---|---|---|\n",
    );
    let mut names: Vec<&str> = compared.iter().map(|c| session(&c.point)).collect();
    names.dedup();
    let e = |x: Option<f64>| x.map_or("–".to_owned(), |x| format!("{:.0}%", x * 100.0));
    for name in names.iter().copied().chain(["all"]) {
        let t = validate::Tally::of(
            compared
                .iter()
                .filter(|c| name == "all" || session(&c.point) == name),
        );
        let _ = writeln!(
            s,
            "| {name} | {} | {} of {} | {} of {} | {} of {} | {} | {} | {} of {} |",
            t.points,
            t.within,
            t.judged,
            t.within_repeatable,
            t.repeatable,
            t.within_runs,
            t.judged,
            e(t.worst),
            e(t.median),
            t.no_loss_misses,
            t.no_loss
        );
    }
    s
}

/// The calibrated costs, as the model uses them.
fn costs(p: &Profile) -> String {
    let c = |x: poolcap_doctor::profile::Cost| x.to_string();
    let mut s = format!(
        "- sender alone: {} per frame; kernel receive work (the sender's slowdown while poolcap \
         counts): {}\n- poolcap: ring read {}, pool copy {}, write {}; x-loop {:.3} ns per \
         iteration\n- tcpdump: /dev/null {}, file {}\n- dumpcap: /dev/null {}, file {}\n",
        c(p.sender),
        c(p.kernel),
        c(p.poolcap_count),
        c(p.pool_copy),
        c(p.write),
        p.x_loop_ns,
        c(p.tcpdump.null),
        c(p.tcpdump.file),
        c(p.dumpcap.null),
        c(p.dumpcap.file)
    );
    if let Some(w) = p.write_null {
        let _ = writeln!(
            s,
            "- poolcap writing its pcap stream to /dev/null: {}",
            c(w)
        );
    }
    if let Some(w) = p.pcapng {
        let _ = writeln!(s, "- poolcap writing pcapng instead of pcap: {}", c(w));
    }
    if let Some(r) = p.probe {
        let _ = writeln!(
            s,
            "- poolcap probe's rules (beyond the pool copy): the first {}, each further {}",
            c(r.first_rule),
            c(r.per_rule)
        );
    }
    for (name, t) in [("tcpdump", &p.tcpdump), ("dumpcap", &p.dumpcap)] {
        let both =
            |a: Option<poolcap_doctor::profile::Cost>, b| a.zip(b).map(|(x, y)| (c(x), c(y)));
        if let Some((null, file)) = both(t.null_rps, t.file_rps) {
            let light = both(t.null_rps_light, t.file_rps_light).map_or_else(
                || "not measured".to_owned(),
                |(n, f)| format!("/dev/null {n}, file {f}"),
            );
            let _ = writeln!(
                s,
                "- {name} behind the receive work (rps on, its own per captured packet): \
                 fallen behind /dev/null {null}, file {file}; keeping up {light}"
            );
        }
    }
    if let Some(k) = p.kernel_rps {
        let _ = writeln!(
            s,
            "- kernel receive work with rps on (CPU {TOOL_CPU}'s busy time per frame less poolcap's): {}",
            c(k)
        );
    }
    if let Some(cpu) = &p.cpu {
        let shares: Vec<String> = cpu
            .sharing
            .iter()
            .map(|(k, v)| {
                format!(
                    "{k} {:.1}% ({:.2} ms, {:.0}% busy)",
                    v.share * 100.0,
                    v.wait_s * 1e3,
                    cpu.capacity_share(k) * 100.0
                )
            })
            .collect();
        let at_most = |longest: Option<f64>| {
            longest.map_or_else(
                || "unbounded".to_owned(),
                |l| format!("at most {:.1} ms", l * 1e3),
            )
        };
        let _ = writeln!(
            s,
            "- CPU share when runnable (mean wait per timeslice, share of a busy thread): {}; \
             tail of the waits for the CPU {:.2} ms, {} (the longest the calibration runs' \
             losses allow)",
            shares.join(", "),
            cpu.tail_s * 1e3,
            at_most(cpu.longest_s)
        );
        if let Some(r) = &cpu.rps {
            let longest = at_most(r.longest_s);
            let _ = writeln!(
                s,
                "- behind the receive work (rps on, poolcap counting): share when runnable \
                 {:.1}% ({:.2} ms a timeslice); waits' tail {:.2} ms, {longest} (the \
                 softirq's time budget, `netdev_budget_usecs`)",
                r.sharing.share * 100.0,
                r.sharing.wait_s * 1e3,
                r.tail_s * 1e3
            );
        }
    }
    for r in &p.rings {
        let _ = writeln!(
            s,
            "- kernel ring measured full ({} stopped while {:.0}k frames of {:.0} B a second \
             arrived): {} KiB held {:.0} frames; the model's rule {:.0} ({:+.0}%)",
            r.capture,
            r.rate_pps / 1e3,
            r.frame_bytes,
            r.ring_bytes >> 10,
            r.held,
            r.rule,
            (r.rule / r.held - 1.0) * 100.0
        );
    }
    if let Some(d) = &p.disk {
        let mb =
            |x: Option<f64>| x.map_or("not measured".to_owned(), |x| format!("{:.0} MB", x / 1e6));
        let _ = writeln!(
            s,
            "- disk ({}): direct {}/s, through the page cache {}/s, dirty limit {}",
            d.dir,
            mb(d.direct_bytes_per_s),
            mb(d.buffered_bytes_per_s),
            mb(d.dirty_limit_bytes)
        );
    }
    let _ = writeln!(s, "- source: {}", p.source);
    s
}

/// What the model is, for BENCHMARKS.md (docs/predict.md has the whole of it).
const MODEL: &str = "Two stages in tandem with buffers between them (docs/predict.md). The \
kernel stage (receive work up to the capture ring) has capacity 1e9 / kernel(caplen) frames/s; \
on veth with rps off it runs on the sender's CPU and slows the sender instead of dropping, \
with rps on it runs on the tool's CPU at the cost the rps-on calibration point measured (that CPU's busy time per frame, less poolcap's own). The application stage (the tool's CPU per packet on \
one core: poolcap's ring read, pool copy (when it analyses; a file alone is written from the \
ring), x-loop (at the cost per iteration its saturated calibration worker paid), the probe's \
rules (its first rule's cost and each further one's, from its calibration with 1 and 100 rules) \
and write (pcap or pcapng); \
tcpdump's and dumpcap's measured \
cost; with rps on, their CPU's busy time less the receive work's, per captured packet, in a \
run that fell behind at top speed with a 2 MiB ring) has capacity 1e9 / app(caplen). A peer with rps on also has \
its cost keeping up (at 250k pps): offered a rate between the two capacities it is at the edge, \
keeping up until a wait for its CPU outlasts its buffers and puts it behind for good, and its loss lies \
between the two predictions. The one judged is the likelier: behind when the chance that one of the run's \
waits (exponential of the mean wait per timeslice the tool had keeping up at top speed behind the receive work in \
calibration, else behind it, one per \
3 ms timeslice and wait) outlasts the buffers' depth, 1 - exp(-n e^(-depth / w)), is at least one half. Each cost is linear in the captured bytes between the frame sizes \
measured (64, 512 and 1514 B): the line through 64 and 1514 B, bent through 512 B. The ring holds its blocks' slots (slot: the frame, its TPACKET_V3 \
header and libpcap's 4-byte reserve, 8-byte aligned), each block only as full as the frames \
that arrive before the kernel's periodic retire timer closes it (poolcap 4 ms when it \
analyses, 50 ms otherwise; tcpdump 1 s, dumpcap 250 ms): rate x tov / ceil(tov x rate / \
slots) frames a block; poolcap's pool adds R x M when it \
copies (writing alone its memory is in the ring), less the ring block and the chunk being emptied (handed back only whole). Traffic is a fluid: over a burst (or a whole finite run) the backlog grows at \
min(rate, C_k) - C_a, what exceeds the buffers is lost, idle time drains C_a x idle (C_a without the receive work \
on the tool's CPU: no frame arrives then). On a shared \
core (the calibration's schedstat) a busy tool runs a 3 ms timeslice per mean wait w for the \
CPU: C_a is 3 / (3 + w) x 1e9 / app, of what rps-on receive work leaves (softirq runs first); \
with an x-loop load poolcap's share is the one its saturated worker ran when runnable in \
calibration; \
below that it waits u (1 - s) / s of the time (u: the core it needs, s: its share when \
runnable in calibration), and a wait longer than the buffers' depth (frames held / rate) \
loses what arrives beyond it before the burst ends; with waits exponential of a calibrated \
tail that is q e^(-depth / tail) (less what arrives after the burst; behind the receive work \
no wait outlasts the softirq's time budget, netdev_budget_usecs, and with rps off none \
outlasts the longest a calibration run's loss allows, its buffers' depth plus the time its \
lost frames took to arrive, runs writing a file left out). A prediction of fewer than one \
lost frame over a point's offered frames is a \"no loss\" verdict (the fluid's fractions of a frame are not losses). \
A capture writing a file hands its records to the disk, a stage of capacity disk rate / record bytes behind a buffer: \
direct I/O the device's rate behind the writer's 8 MiB in flight, buffered write-back's sustained rate behind the \
page cache's dirty limit (the profile's `disk`, from `poolcap calibrate`'s long writes); a full disk buffer holds the \
writer back and its frames fill the ring and pool.";

/// The busy share of all CPUs before the runs of the rows passing `keep` (median of the
/// medians), as a percentage.
fn busy(rows: &[Row], keep: impl Fn(&Row) -> bool) -> String {
    let mut v: Vec<f64> = rows
        .iter()
        .filter(|r| keep(r))
        .filter_map(|r| r.median("busy_before"))
        .collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2)
        .map_or("–".to_owned(), |b| format!("{:.0}%", b * 100.0))
}

/// Summary text.
pub fn text(meta: &Meta, rows: &[Row]) -> Text {
    let (profile, compared) = judged(meta, rows);
    let is_cal = |r: &Row| r.point.starts_with(calibrate::POINT_PREFIX);
    let all = validate::Tally::of(&compared);
    let (mut within, mut no_loss, mut disk) = (Vec::new(), Vec::new(), Vec::new());
    for c in &compared {
        let at = format!("{} / {}", c.point, c.subject);
        let detail = format!(
            "measured {} predicted {}",
            super::pct(c.measured),
            super::pct(c.predicted)
        );
        if session(&c.point) == "disk" {
            let loses = |x: f64| x >= validate::JUDGED_FROM;
            disk.push(Check {
                point: at.clone(),
                ok: loses(c.measured) == loses(c.predicted),
                detail: detail.clone(),
            });
        }
        if let Some(e) = c.rel_error {
            within.push(Check {
                point: at,
                ok: e <= validate::TOLERANCE,
                detail: format!("{detail} ({:.0}%)", e * 100.0),
            });
        } else if c.measured == 0.0 {
            no_loss.push(Check {
                point: at,
                ok: c.verdict == validate::Verdict::Hit,
                detail,
            });
        }
    }
    Text {
        settings: vec![
            format!(
                "calibration points (`{p}SIZEB` for SIZE {sizes}) run with rps off and feed the \
                 profile (`{p}rps SIZEB` with rps on, for the receive work's time on the tool's \
                 CPU); sessions S1-S4 and the peers' burst and load points run with rps on (the \
                 kernel's receive work on CPU {TOOL_CPU}, the tool's, as in paper 002), \
                 poolcap's burst and load points with rps off and an x-loop load",
                p = calibrate::POINT_PREFIX,
                sizes = calibrate::SIZES.map(|b| b.to_string()).join(", "),
            ),
            format!(
                "session buffers: S1 -B {} MiB (paper 002's default); S2 -B {} MiB (its larger \
                 kernel buffer); S3 -B {} MiB and poolcap's pool {}x{} (its larger capture \
                 buffer); S4 as S3 with -s 96; every tool writes its pcap stream to /dev/null",
                PAPER_KIB / 1024,
                KERNEL_KIB / 1024,
                CAPTURE_KIB / 1024,
                BIG_POOL.0,
                BIG_POOL.1
            ),
            format!(
                "machine busy before a run (median): {} during calibration, {} during the \
                 validated points",
                busy(rows, is_cal),
                busy(rows, |r| !is_cal(r))
            ),
        ],
        tables: vec![
            Table::new(
                "Calibration runs (the profile comes from these alone)",
                super::rows_where(rows, is_cal),
                &["sender_pps", "captured", "cpu_s_per_mpkt", "busy_before"],
                &[],
            ),
            Table::new(
                "Validated runs",
                super::rows_where(rows, |r| !is_cal(r)),
                &[
                    "offered",
                    "sender_pps",
                    "captured",
                    "loss",
                    "cpu_s_per_mpkt",
                    "busy_before",
                ],
                &[],
            ),
        ],
        sections: vec![
            (
                "Predicted against measured loss".to_owned(),
                validate::markdown(&compared),
            ),
            ("Per session".to_owned(), per_session(&compared)),
            (
                "The profile calibrated in this run".to_owned(),
                costs(&profile),
            ),
            ("The model".to_owned(), format!("{MODEL}\n")),
        ],
        targets: vec![
            checks_line(
                "relative error ≤ 20% where the measured loss is ≥ 1% (medians)",
                &within,
            ),
            checks_line(
                "no loss (under one frame lost) predicted where none was measured (medians)",
                &no_loss,
            ),
            checks_line(
                "the long writing point: loss of 1% or more predicted where measured, and \
                 only there (medians)",
                &disk,
            ),
        ],
        headline: format!("{}.", all.line()),
        ..Text::default()
    }
}

/// Predicted against measured loss, one series per tool.
pub fn figures(meta: &Meta, rows: &[Row]) -> Vec<Figure> {
    let (_, compared) = judged(meta, rows);
    vec![Figure::new(
        "predict-loss.png",
        "Predicted against measured loss",
        "measured loss (%)",
        "predicted loss (%)",
    )
    .with_subtitle(
        "every validated point (medians), predicted from this run's calibration rows only",
    )
    .lines(crate::validate::series(&compared))]
}

/// The predict suite (see [`INTRO`]).
pub const DEF: super::SuiteDef = super::SuiteDef {
    calibration: super::CalibrationKind::TopSpeed { flows: 1 },
    figures,
    ..super::SuiteDef::new(
        "Loss prediction against measurement (paper 002)",
        INTRO,
        plan,
        text,
    )
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_calibration_rows_the_built_in_profile_takes_the_runs_disk() {
        let disk = poolcap_doctor::profile::Disk {
            dir: "/var/tmp/poolcap-bench/1".into(),
            direct_bytes_per_s: Some(1.8e9),
            buffered_bytes_per_s: Some(2e8),
            dirty_limit_bytes: Some(3.5e9),
        };
        let mut meta = Meta {
            suite: super::super::Suite::Predict,
            scale: Scale::Quick,
            runs: 1,
            rps: false,
            command: "poolcap bench predict --quick --points disk".into(),
            machine: crate::report::Machine::read(),
            versions: vec![],
            sender_iface: "snd0".into(),
            probe_iface: "prb0".into(),
            queues: 1,
            calibration: Calibration::default(),
            disk: Some(disk.clone()),
            notes: vec![],
            started: 100,
            finished: Some(400),
            interrupted: false,
            perf: false,
        };
        let (p, _) = judged(&meta, &[]);
        assert_eq!(p.disk, Some(disk));
        assert!(p.source.contains("measured in this run"), "{}", p.source);
        meta.disk = None;
        assert_eq!(judged(&meta, &[]).0, Profile::built_in());
    }

    #[test]
    fn calibration_comes_first_and_every_session_is_planned() {
        let c = super::super::tests::calibration(1.0, Some(500e3));
        let q = plan(Scale::Quick, &c).points;
        let first_other = q
            .iter()
            .position(|p| !p.id.starts_with(calibrate::POINT_PREFIX))
            .unwrap();
        assert_eq!(
            first_other,
            calibrate::points(&calibrate::SIZES, 500_000, &[], true).len(),
            "three per size (rps on at top speed and at a light rate, rps off), the ring point \
             and, with tcpdump installed, the deep point"
        );
        assert!(q[first_other..]
            .iter()
            .all(|p| !p.id.starts_with(calibrate::POINT_PREFIX)));
        for s in [
            "S1", "S2", "S3", "S4", "S5", "burst", "load", "probe", "disk",
        ] {
            assert!(q.iter().any(|p| session(&p.id) == s), "{s}");
        }
        // Session 5 offers every tool the same fixed rate, with the receive work on its CPU.
        let s5 = q.iter().find(|p| session(&p.id) == "S5").unwrap();
        assert_eq!((s5.traffic.rate, s5.rps), (Some(S5_PPS), Some(true)));
        assert_eq!(s5.subjects.len(), 3);
        let probe = q.iter().find(|p| p.id == "probe 1000r").unwrap();
        let spec = probe.subjects[0].capture.as_ref().unwrap();
        assert_eq!(
            (spec.tool, spec.rules, probe.rps),
            (Tool::Probe, Some(1000), Some(false))
        );
        let s4 = q.iter().find(|p| session(&p.id) == "S4").unwrap();
        let pc = s4.subjects[0].capture.as_ref().unwrap();
        assert_eq!(
            (pc.snaplen, pc.buffer_kib, pc.pool, s4.rps),
            (Some(96), CAPTURE_KIB, Some(BIG_POOL), Some(true))
        );
        assert_eq!(s4.subjects[2].capture.as_ref().unwrap().pool, None);
        let burst = q.iter().find(|p| p.id == "burst poolcap B=32768").unwrap();
        assert_eq!(burst.subjects[0].capture.as_ref().unwrap().load, 4000);
        assert_eq!(burst.rps, Some(false));
        // The long writing point writes pcap direct and through the page cache, for more
        // bytes than the cache holds dirty, and is judged by the profile's disk.
        let disk = q.iter().find(|p| p.id == LONG_WRITE).unwrap();
        assert_eq!(session(&disk.id), "disk");
        let specs: Vec<&CaptureSpec> = disk
            .subjects
            .iter()
            .map(|s| s.capture.as_ref().unwrap())
            .collect();
        assert!(specs.iter().all(|s| s.write && !s.pcapng), "{specs:?}");
        assert_eq!(
            specs.iter().map(|s| s.buffered).collect::<Vec<_>>(),
            [false, true]
        );
        assert_eq!(disk.traffic.count, LONG_WRITE_FRAMES);
        assert!(
            LONG_WRITE_FRAMES as f64 * 1530.0 > 20e9,
            "over 20 GB of pcap"
        );
        // Sent at the sender's top speed, 558k pps: the built-in profile predicts loss
        // through the page cache, none written direct (the device takes 1.6 GB/s).
        let predicted = |spec: &CaptureSpec| {
            let mut row = poolcap_measure::testing::record(&disk.id, "poolcap", 0.5);
            row.capture = Some(spec.clone());
            row.traffic = disk.traffic.clone();
            let sent = row.sent.as_mut().unwrap();
            (sent.frames, sent.pps) = (LONG_WRITE_FRAMES, 558e3);
            sent.seconds = LONG_WRITE_FRAMES as f64 / sent.pps;
            let rows = crate::report::aggregate(&[row]);
            let pps = validate::offered_pps(&rows[0]).unwrap();
            let scenario = validate::scenario(&rows[0], pps).unwrap();
            poolcap_doctor::predict::predict(&Profile::built_in(), &scenario).unwrap()
        };
        let buffered = predicted(specs[1]);
        let d = buffered.disk.expect("the built-in profile knows the disk");
        assert_eq!(d.io, poolcap_doctor::predict::DiskIo::Buffered);
        assert!(LONG_WRITE_FRAMES as f64 > 5.0 * d.buffer_frames, "{d:?}");
        assert!(buffered.loss > 0.1, "{buffered:?}");
        let direct = predicted(specs[0]);
        assert_eq!(
            direct.disk.map(|d| d.io),
            Some(poolcap_doctor::predict::DiskIo::Direct)
        );
        assert_eq!(direct.loss, 0.0);
        let smoke = plan(Scale::Smoke, &c).points;
        assert_eq!(
            smoke.len(),
            4,
            "two calibration points, the ring point, S1 64B"
        );
    }
}
