//! `poolcap calibrate`: measures what each capture stage costs on this machine, per packet
//! and per byte, and turns it into a [`Profile`] for `poolcap predict`.
//!
//! A stage's cost is the capture tool's CPU time per packet in a configuration that has the
//! stage, minus that of the configuration without it (counting in the ring → copying into
//! the pool → writing pcap → compressing), at two frame sizes (or two snaplengths) so that
//! per-packet and per-byte work separate ([`Samples`]). Two ways to get the packets:
//! - [`lab`]: a veth lab of the bench rig (this crate), the generator at top speed,
//!   every configuration run once per frame size and repeat. Here the kernel's receive work
//!   runs on the sender's CPU (docs/design.md), so the sender's slowdown while poolcap captures
//!   measures it; a point with rps on (`rps_cpus` = the tool's CPU) measures the same work
//!   where it then runs, as the tool CPU's busy time per frame less poolcap's (`kernel rps`),
//!   and the peers' own cost behind it, and a run
//!   with a saturated analysis worker ([`SATURATED_LOAD`]) measures the share of the core a
//!   busy nice-10 worker gets (`poolcap_doctor::share::SATURATED`);
//! - [`live`]: a real interface with traffic the user sends; each configuration captures
//!   for a fixed time, and the interface's own counters give the packets and their mean
//!   size. The kernel's and sender's costs are not measured there and come from the base
//!   profile (the profile's `source` says so).
//!
//! The lab's runs are bench [`Point`]s ([`points`]) and their aggregated rows become
//! [`Samples`] in one place ([`samples`]), so `poolcap calibrate` and the calibration half of
//! `poolcap bench predict` measure the same way. [`validate`] checks the model against bench
//! results: predicted against measured loss.
//!
//! The CPU time of a child is the scheduler's run time of all its threads
//! (`/proc/PID/task/*/schedstat`, nanoseconds; ticks of 10 ms from `/proc/PID/stat` only
//! where there is none, and then a configuration must run for hundreds of ticks).

use std::collections::BTreeMap;

use poolcap_doctor::predict;
use poolcap_doctor::profile::{self, Disk, Profile, RingFill, Samples};
use poolcap_doctor::share::{self, Cpu, RpsWaits, Sharing};

use crate::peer::{CaptureSpec, Generator, Tool, Traffic};
use crate::point::{Point, Subject};
use crate::report::Row;
use crate::stats::median;

pub mod disk;
pub mod lab;
pub mod live;
pub mod validate;

/// A configuration measured: its key in [`Samples`] and how to run it.
pub struct Stage {
    /// `count`, `copy`, `write`, `zstd:3`, `tcpdump null`...
    pub key: String,
    /// The capture.
    pub spec: CaptureSpec,
}

/// The configurations, cheapest first (each poolcap stage adds one thing to the previous):
/// poolcap counting, writing its pcap stream to /dev/null (as the bench's sessions do),
/// copying (a 1-iteration x-loop makes it copy into the pool), writing pcap, writing pcapng,
/// compressing at `levels`; `poolcap probe` with each of [`PROBE_RULES`] rules (the bench's
/// generated rule set); then tcpdump and dumpcap writing to /dev/null and to a file, when
/// `peers`.
pub fn stages(levels: &[&str], peers: bool) -> Vec<Stage> {
    let poolcap = |key: &str, f: &dyn Fn(&mut CaptureSpec)| {
        let mut spec = CaptureSpec::new(Tool::Poolcap, crate::point::BUFFER_KIB);
        f(&mut spec);
        Stage {
            key: key.to_owned(),
            spec,
        }
    };
    let mut v = vec![
        poolcap("count", &|_| {}),
        poolcap("null", &|s| s.dev_null = true),
        poolcap("copy", &|s| s.load = 1),
        poolcap("write", &|s| s.write = true),
        poolcap("pcapng", &|s| {
            s.write = true;
            s.pcapng = true;
        }),
    ];
    for level in levels {
        v.push(poolcap(level, &|s| {
            s.write = true;
            s.compress = Some((*level).to_owned());
        }));
    }
    for rules in PROBE_RULES {
        v.push(Stage {
            key: profile::probe_key(rules),
            spec: CaptureSpec {
                rules: Some(rules),
                ..CaptureSpec::new(Tool::Probe, crate::point::BUFFER_KIB)
            },
        });
    }
    // As many rules again, each tracking the flows of every packet: a flow-table update's
    // cost beyond a rule's.
    let most = PROBE_RULES[PROBE_RULES.len() - 1];
    v.push(Stage {
        key: profile::probe_flows_key(most),
        spec: CaptureSpec {
            rules: Some(most),
            all_flows: true,
            ..CaptureSpec::new(Tool::Probe, crate::point::BUFFER_KIB)
        },
    });
    if peers {
        for tool in [Tool::Tcpdump, Tool::Dumpcap] {
            for (what, write) in [("null", false), ("file", true)] {
                let spec = CaptureSpec {
                    write,
                    ..CaptureSpec::new(tool, crate::point::BUFFER_KIB)
                };
                if crate::peer::missing(&spec.programs()).is_none() {
                    v.push(Stage {
                        key: format!("{} {what}", tool.name()),
                        spec,
                    });
                }
            }
        }
    }
    v
}

/// Rule counts `poolcap probe` is calibrated with: the first rule alone, and enough more that
/// their cost stands well above the runs' noise (about 10 ns each here: 1 µs a packet for
/// 99 more, against a spread of tens of ns).
pub const PROBE_RULES: [usize; 2] = [1, 100];

/// Frame sizes measured: the smallest common one, the MTU's, and one between where the costs
/// bend ([`poolcap_doctor::profile::Bend`]): with rps on, the receive work and tcpdump's own
/// cost behind it leave the line at 512 B (BENCHMARKS.md, predict, the calibrated profile).
pub const SIZES: [usize; 3] = [64, 512, 1514];

/// Id prefix of the calibration points.
pub const POINT_PREFIX: &str = "calibrate ";

/// Subject name of the sender alone.
const SENDER: &str = "sender";

/// Subject of the rps-on calibration points: poolcap counting while the kernel's receive
/// work runs on its CPU; its key in [`Samples`] is that work's ns per frame there.
const KERNEL_RPS: &str = "kernel rps";

/// Subject of the light rps-on calibration points ([`LIGHT_PPS`]): poolcap counting, for the
/// receive work's ns per frame at that rate, from which the peers' own cost there is taken.
const KERNEL_RPS_LIGHT: &str = "kernel rps light";

/// Suffix of a peer's subject (and key in [`Samples`]) at the rps-on points at top speed.
const RPS: &str = " rps";

/// The peers' ring (`-B`, KiB) at the rps-on points at top speed: paper 002's default (S1's),
/// shallow enough that tcpdump falls behind there at every frame size, so its cost behind
/// is measured (with 4 MiB it can keep up at 64 B; BENCHMARKS.md, predict, calibration runs).
const BEHIND_RING_KIB: u64 = 2048;

/// Suffix of a peer's subject (and key in [`Samples`]) at the light rps-on points.
const LIGHT: &str = " rps light";

/// Suffix of the key in [`Samples`] of a peer's share of its CPU's busy time at the rps-on
/// points at top speed (`null_rps_left` of its `ToolCosts`).
const LEFT: &str = " left";

/// Suffix of tcpdump's subjects at the deep rps-on point ([`DEEP_POINT`]).
const DEEP: &str = " rps deep";

/// Id of the deep rps-on point: tcpdump at top speed behind the receive work with rings of
/// [`DEEP_RING_KIB`], where it keeps up, for its waits for the CPU while it does
/// ([`RpsWaits::keeping_up`]).
const DEEP_POINT: &str = "calibrate rps deep 64B";

/// tcpdump's ring at [`DEEP_POINT`], KiB: paper 002's S3 (32 MiB), deep enough that tcpdump
/// keeps up with 64 B frames at top speed behind the receive work (BENCHMARKS.md, predict,
/// calibration runs: `calibrate rps deep 64B`).
const DEEP_RING_KIB: u64 = 32 << 10;

/// Frames a second of the light rps-on points: a rate tcpdump and dumpcap keep up with
/// behind the receive work on the 2-core VMs poolcap is developed on (dumpcap's dearest
/// point, a pcap file of 1514 B frames, then holds about 400k). Keeping up, a peer reads
/// each frame soon after the receive work wrote it, on the same CPU; once behind, it reads
/// frames written long before, and each costs it 30-80% more (dumpcap: 1.1-1.3 µs a packet
/// keeping up at 250-450k, 1.6-2.2 µs behind). A run that still lost 1% or more is no
/// measure of keeping up and is left out.
pub const LIGHT_PPS: u64 = 250_000;

/// Share of its frames a light run must capture to count as keeping up.
const KEPT_UP: f64 = 0.99;

/// Id of the ring point (see [`points`]).
pub const RING_POINT: &str = "calibrate ring 64B";

/// Frames sent at the ring point: twice what a 4 MiB ring holds of 64 B frames (27584).
const RING_FRAMES: u64 = 60_000;

/// x-loop iterations per packet of the saturated-worker run: at the x-loop's 1-2 ns per
/// iteration, 20-40 µs per packet, so one core analyses at most 25-50k pps, below the
/// sender's top speed at either frame size (76k pps and more even on a machine at load 18).
pub const SATURATED_LOAD: u32 = 20_000;

/// The calibration in the lab as bench points, two per frame size of `sizes` (normally
/// [`SIZES`]; one size fits per-packet costs only), `frames` frames at top speed each:
/// - `calibrate rps {size}B`, rps on: poolcap counting (`KERNEL_RPS`), for the time
///   the kernel's receive work takes on the tool's CPU, and the peers (with rings of
///   `BEHIND_RING_KIB`), for theirs behind it;
/// - `calibrate rps light {size}B`, with `peers`: the same at [`LIGHT_PPS`], for the
///   peers' cost behind the receive work while they keep up;
/// - `calibrate {size}B`, rps off: the sender alone, every configuration of [`stages`] (the
///   subject's name is its key in [`Samples`]) and poolcap with a saturated worker
///   ([`SATURATED_LOAD`]). The kernel's receive work must stay on the sender's CPU for the
///   sender's slowdown to measure it;
/// - [`RING_POINT`], rps off: poolcap analysing (1-iteration x-loop) and, with `peers`,
///   tcpdump, each stopped (SIGSTOP) while `RING_FRAMES` frames of 64 B arrive at top
///   speed (at most `frames`), then let go: what it captures is what its ring held
///   ([`rings`]);
/// - `DEEP_POINT`, rps on, with `peers` and 64 B among `sizes`: tcpdump's configurations
///   with rings of `DEEP_RING_KIB` at top speed.
pub fn points(sizes: &[usize], frames: u64, levels: &[&str], peers: bool) -> Vec<Point> {
    let count = || CaptureSpec::new(Tool::Poolcap, crate::point::BUFFER_KIB);
    let mut v = Vec::new();
    // The peers run with rps on too: a tool that wakes per packet pays more behind the
    // receive softirq than its rps-off run shows.
    let peer_stages: Vec<Stage> = stages(&[], peers)
        .into_iter()
        .filter(|s| matches!(s.spec.tool, Tool::Tcpdump | Tool::Dumpcap))
        .collect();
    let behind = |suffix: &str, buffer_kib: u64| -> Vec<Subject> {
        peer_stages
            .iter()
            .map(|s| {
                let spec = CaptureSpec {
                    buffer_kib,
                    ..s.spec.clone()
                };
                Subject::named(format!("{}{suffix}", s.key), spec)
            })
            .collect()
    };
    for &size in sizes {
        let traffic = Traffic::top(size, frames);
        let mut rps_subjects = vec![Subject::named(KERNEL_RPS, count())];
        rps_subjects.extend(behind(RPS, BEHIND_RING_KIB));
        v.push(Point {
            rps: Some(true),
            ..Point::new(
                format!("{POINT_PREFIX}rps {size}B"),
                traffic.clone(),
                rps_subjects,
            )
        });
        if !peer_stages.is_empty() {
            let mut light = vec![Subject::named(KERNEL_RPS_LIGHT, count())];
            light.extend(behind(LIGHT, crate::point::BUFFER_KIB));
            let paced = Traffic {
                rate: Some(LIGHT_PPS),
                ..traffic.clone()
            };
            v.push(Point {
                rps: Some(true),
                ..Point::new(format!("{POINT_PREFIX}rps light {size}B"), paced, light)
            });
        }
        let mut subjects = vec![Subject {
            name: SENDER.to_owned(),
            ..Subject::sender(Generator::Poolcap)
        }];
        subjects.extend(
            stages(levels, peers)
                .into_iter()
                .map(|s| Subject::named(s.key, s.spec)),
        );
        let saturated = CaptureSpec {
            load: SATURATED_LOAD,
            ..count()
        };
        subjects.push(Subject::named(share::SATURATED, saturated));
        v.push(Point {
            rps: Some(false),
            ..Point::new(format!("{POINT_PREFIX}{size}B"), traffic, subjects)
        });
    }
    let stopped = |tool: Tool, load: u32| CaptureSpec {
        load,
        stopped: true,
        ..CaptureSpec::new(tool, crate::point::BUFFER_KIB)
    };
    let mut rings = vec![Subject::named(RING_POOLCAP, stopped(Tool::Poolcap, 1))];
    let tcpdump = stopped(Tool::Tcpdump, 0);
    if peers && crate::peer::missing(&tcpdump.programs()).is_none() {
        rings.push(Subject::named(RING_TCPDUMP, tcpdump));
    }
    v.push(Point {
        rps: Some(false),
        ..Point::new(RING_POINT, Traffic::top(64, RING_FRAMES.min(frames)), rings)
    });
    let deep: Vec<Subject> = behind(DEEP, DEEP_RING_KIB)
        .into_iter()
        .filter(|s| s.capture.as_ref().is_some_and(|c| c.tool == Tool::Tcpdump))
        .collect();
    if sizes.contains(&64) && !deep.is_empty() {
        v.push(Point {
            rps: Some(true),
            ..Point::new(DEEP_POINT, Traffic::top(64, frames), deep)
        });
    }
    v
}

/// Subject of the ring point: poolcap analysing, whose blocks retire after 4 ms.
const RING_POOLCAP: &str = "poolcap analysing";

/// Subject of the ring point: tcpdump, whose blocks retire after 1 s.
const RING_TCPDUMP: &str = "tcpdump";

/// The rings the ring point measured full (the capture kept fewer frames than were sent),
/// each beside what `p`'s rule says at the rate the frames came ([`predict::ring_frames`]).
/// A ring that kept everything says only that it holds at least that much: left out.
pub fn rings(rows: &[Row], p: &Profile) -> Vec<RingFill> {
    rows.iter()
        .filter(|r| r.point == RING_POINT)
        .filter_map(|r| {
            let (held, offered) = (r.median("captured")?, r.median("offered")?);
            let pps = validate::offered_pps(r)?;
            let s = validate::scenario(r, pps)?;
            (held < offered).then(|| RingFill {
                capture: r.subject.clone(),
                ring_bytes: s.buffer_bytes,
                frame_bytes: r.traffic.size as f64,
                rate_pps: pps,
                held,
                rule: predict::ring_frames(p, &s, pps).0,
            })
        })
        .collect()
}

/// True for a calibration row that measures costs and CPU (every calibration point but the
/// ring point, whose capture was stopped on purpose, and the deep point, which measures
/// waits only).
fn measures_costs(r: &Row) -> bool {
    r.point.starts_with(POINT_PREFIX) && r.point != RING_POINT && r.point != DEEP_POINT
}

/// What a difference of busy times that came out at or below zero is recorded as: the
/// receive work's spread between runs (0.72-1.1 µs a frame at 64 B) can exceed a light
/// tool's own cost, and a point dropped from a fit would leave the other frame size to stand
/// for both (tcpdump writing a file behind the receive work then cost 3.8 µs at 64 B, its
/// 1514 B figure, where it had measured nothing; the model never charges a peer less than
/// its rps-off cost).
const MEASURED_NOTHING_NS: f64 = 1.0;

/// The samples of the calibration rows among `rows` (points of [`points`]): the sender's ns
/// per frame, the sender's while poolcap counts (`sender+capture`), each configuration's
/// CPU ns per captured packet, medians over the runs, keyed by the frame size. At the rps-on
/// points, where the tool CPU also runs the kernel's receive work, that CPU's busy time
/// splits the two: poolcap counting leaves the receive work's ns per frame sent (`kernel
/// rps`, its busy time less its own), and a peer its own ns per captured packet behind that
/// work (its busy time less the receive work's at the same point for every frame sent). A
/// tool's scheduler time is no measure of its own there: it holds the softirq that
/// interrupted it. A peer at the top speed counts by a run that fell behind
/// (`behind_run`); at a light point, only where it kept up (`KEPT_UP`).
pub fn samples(rows: &[Row]) -> Samples {
    let mut s = Samples::default();
    let costs = || rows.iter().filter(|r| measures_costs(r));
    let busy = |r: &Row| r.median("busy_ns_per_frame");
    let kept = |r: &Row| Some(r.median("captured")? / r.median("offered")?);
    let is_kernel = |r: &Row| r.rps && [KERNEL_RPS, KERNEL_RPS_LIGHT].contains(&r.subject.as_str());
    // The receive work's ns per frame at each rps-on point.
    let mut kernel_rps = BTreeMap::new();
    for r in costs().filter(|r| is_kernel(r)) {
        let own = r.median("cpu_s_per_mpkt").map(|x| x * 1e3);
        if let (Some(busy), Some(own), Some(kept)) = (busy(r), own, kept(r)) {
            let ns = (busy - own * kept).max(MEASURED_NOTHING_NS);
            kernel_rps.insert(r.point.as_str(), ns);
            if r.subject == KERNEL_RPS {
                s.add(KERNEL_RPS, r.traffic.size as f64, ns);
            }
        }
    }
    for r in costs() {
        let bytes = r.traffic.size as f64;
        let sender_ns = r.median("sender_pps").map(|pps| 1e9 / pps);
        match r.subject.as_str() {
            SENDER => {
                if let Some(ns) = sender_ns {
                    s.add("sender", bytes, ns);
                }
            }
            _ if is_kernel(r) => {}
            key if r.rps => {
                let kernel = kernel_rps.get(r.point.as_str());
                let run = if key.ends_with(LIGHT) {
                    busy(r).zip(kept(r).filter(|k| *k >= KEPT_UP))
                } else {
                    behind_run(r).or_else(|| busy(r).zip(kept(r)))
                };
                if let (Some((busy, kept)), Some(kernel)) = (run, kernel) {
                    let own = (busy - kernel) / kept.max(1e-9);
                    s.add(key, bytes, own.max(MEASURED_NOTHING_NS));
                    if !key.ends_with(LIGHT) {
                        s.add(&format!("{key}{LEFT}"), bytes, 1.0 - kernel / busy);
                    }
                }
            }
            key => {
                if let (Some(ns), "count") = (sender_ns, key) {
                    s.add("sender+capture", bytes, ns);
                }
                // CPU s per million packets = ns per packet / 1000.
                if let Some(ns) = r.median("cpu_s_per_mpkt").map(|x| x * 1e3) {
                    s.add(key, bytes, ns);
                }
            }
        }
    }
    s
}

/// A peer's run at the top speed that measures its cost once behind, as (busy ns per frame,
/// share of the frames kept): the median run when it lost [`KEPT_UP`] or more, else the run
/// that fell furthest behind when that one did (`None`: the median run fell behind, or no
/// run did). Near its capacity a run keeps up until a stall puts it behind, and stays behind
/// from then on ([`poolcap_doctor::predict::Edge`]), so runs of one configuration split:
/// tcpdump to /dev/null at 1514 B kept 99.6% in two runs of three and 82.5% in the third,
/// and the median, a run that kept up, said nothing of the cost behind. That run's CPU was
/// busy throughout, more than a run that kept up part of the time: the runs' highest busy
/// time stands for its own. (Taking the furthest run always made dumpcap, whose runs all
/// fall behind, 5-15 points dearer than its validated points lost.)
fn behind_run(r: &Row) -> Option<(f64, f64)> {
    let offered = r.median("offered")?;
    let (median, furthest) = (
        r.median("captured")? / offered,
        r.get("captured")?.min / offered,
    );
    (median >= KEPT_UP && furthest < KEPT_UP).then_some((r.get("busy_ns_per_frame")?.max, furthest))
}

/// The CPU a capture got in the calibration rows among `rows`, for `p` (their costs): from
/// the rps-off rows, the median share when runnable and wait per timeslice of each
/// configuration (the saturated worker's too) over the frame sizes, and the tail of the
/// waits (`poolcap_doctor::share`) from the runs that lost frames, each run's measured
/// waiting fraction and loss against the time its buffers held at its rate; without such a
/// run, the mean wait per timeslice; none longer than those runs' losses allow (`waits`).
/// The same from the rps-on rows (`KERNEL_RPS`) gives the waits behind the receive work
/// ([`RpsWaits`]), none longer than `rps_longest_s` (the softirq's time budget,
/// `netdev_budget_s`). `None` when no rps-off run has scheduler statistics.
pub fn cpu(rows: &[Row], p: &Profile, rps_longest_s: Option<f64>) -> Option<Cpu> {
    let cal = |rps: bool| {
        rows.iter()
            .filter(move |r| measures_costs(r) && r.rps == rps)
            .filter(|r| r.subject != SENDER)
    };
    let Waited {
        sharing,
        tail_s,
        longest_s,
    } = waits(cal(false), p, None)?;
    // The tail from poolcap counting only: the peers' rps-on runs lose by capacity too
    // (dumpcap, tcpdump writing), and taken as a wait's that loss made the tail swing from 2
    // to 65 ms between two runs of the rig. Their share when runnable is their own.
    let kernel_rps = cal(true).filter(|r| r.subject == KERNEL_RPS);
    let peers: BTreeMap<String, Sharing> =
        sharing_of(cal(true).filter(|r| r.subject != KERNEL_RPS))
            .into_iter()
            .filter_map(|(k, s)| Some((k.strip_suffix(RPS)?.to_owned(), s)))
            .collect();
    let rps = waits(kernel_rps, p, rps_longest_s).and_then(|w| {
        let sharing = *w.sharing.get(KERNEL_RPS)?;
        Some(RpsWaits {
            sharing,
            by_key: peers,
            keeping_up: keeping_up(rows),
            tail_s: w.tail_s,
            longest_s: w.longest_s,
        })
    });
    Some(Cpu {
        sharing,
        tail_s,
        longest_s,
        rps,
    })
}

/// tcpdump's mean wait per timeslice at [`DEEP_POINT`] by configuration, seconds, where the
/// median run kept up ([`KEPT_UP`]): a run that fell behind waited as a tool behind does.
fn keeping_up(rows: &[Row]) -> BTreeMap<String, f64> {
    rows.iter()
        .filter(|r| r.point == DEEP_POINT)
        .filter(|r| r.median("loss").is_some_and(|l| l <= 1.0 - KEPT_UP))
        .filter_map(|r| {
            let key = r.subject.strip_suffix(DEEP)?;
            Some((key.to_owned(), r.median("wait_per_slice_ms")? / 1e3))
        })
        .collect()
}

/// Each configuration's median share when runnable and wait per timeslice among `runs`.
fn sharing_of<'a>(runs: impl Iterator<Item = &'a Row>) -> BTreeMap<String, Sharing> {
    let mut by_key: BTreeMap<String, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for r in runs {
        if let (Some(sh), Some(ms)) = (r.median("cpu_share"), r.median("wait_per_slice_ms")) {
            let e = by_key.entry(r.subject.clone()).or_default();
            e.0.push(sh);
            e.1.push(ms / 1e3);
        }
    }
    by_key
        .into_iter()
        .filter_map(|(k, (s, w))| {
            let (share, wait_s) = (median(s)?, median(w)?);
            Some((k, Sharing { share, wait_s }))
        })
        .collect()
}

/// How far below its capacity (the model's, from the calibrated costs) a calibration run must
/// be offered frames for its loss to measure waits for the CPU: nearer its capacity a run
/// loses to capacity, not to waits (the probe with 100 rules at 1514 B, compression with
/// gzip:6; BENCHMARKS.md, predict, calibration runs).
const NEAR_CAPACITY: f64 = 0.15;

/// What [`waits`] found in a set of calibration runs.
struct Waited {
    /// Each configuration's median sharing.
    sharing: BTreeMap<String, Sharing>,
    /// The mean length of the waits that outlast a buffer, seconds.
    tail_s: f64,
    /// The longest wait, seconds (`None`: unbounded).
    longest_s: Option<f64>,
}

/// Each configuration's median sharing among `runs` ([`sharing_of`]), and the tail of waits
/// from the runs offered less than their capacity by [`NEAR_CAPACITY`] or more (see [`cpu`]):
/// waits of at most `budget` seconds, or without one, of at most what those runs' losses
/// allow. A run whose buffers held `depth` seconds of frames and that lost `n` of them at `r`
/// a second waited at most `depth + n / r` at once (all its loss from one wait), so the
/// longest of these bounds every wait the runs saw (runs writing a file left out: their
/// writer also waits for the disk, which would allow far longer waits); none lost a frame:
/// unbounded (docs/predict.md, "No wait with rps off outlasts").
fn waits<'a>(
    runs: impl Iterator<Item = &'a Row> + Clone,
    p: &Profile,
    budget: Option<f64>,
) -> Option<Waited> {
    // (waiting fraction, median loss, depth s) of the runs that measure waits, and the
    // longest wait their losses allow.
    let (mut measuring, mut slices, mut allowed) = (Vec::new(), Vec::new(), None::<f64>);
    for r in runs.clone() {
        let (Some(_), Some(ms)) = (r.median("cpu_share"), r.median("wait_per_slice_ms")) else {
            continue;
        };
        slices.push(ms / 1e3);
        let predicted = validate::offered_pps(r).and_then(|pps| {
            let s = validate::scenario(r, pps)?;
            Some((pps, predict::predict(p, &s).ok()?))
        });
        // A run over or near its capacity loses by capacity, not by waiting (the saturated
        // worker by design, gzip:6 and the probe with 100 rules at 1514 B): taken as a
        // wait's, the probe's loss made the tail 23 ms instead of 0.01.
        let Some((pps, x)) = predicted.filter(|(pps, x)| {
            *pps <= x.app_capacity_pps.min(x.kernel_capacity_pps) * (1.0 - NEAR_CAPACITY)
        }) else {
            continue;
        };
        let depth = x.buffer_frames / pps;
        // A file's writer also waits for the disk: its loss bounds no wait for the CPU.
        let to_file = r.capture.as_ref().is_some_and(|c| c.write && !c.dev_null);
        let worst = r
            .get("loss")
            .map(|l| l.max)
            .filter(|l| *l > 0.0 && !to_file);
        if let (Some(worst), Some(frames)) = (worst, r.median("offered")) {
            let wait = depth + worst * frames / pps;
            allowed = Some(allowed.map_or(wait, |a: f64| a.max(wait)));
        }
        if let (Some(q), Some(loss)) = (r.median("cpu_wait"), r.median("loss")) {
            measuring.push((q, loss, depth));
        }
    }
    let longest_s = budget.or(allowed);
    let bound = longest_s.unwrap_or(f64::INFINITY);
    let tails: Vec<f64> = measuring
        .into_iter()
        .filter_map(|(q, loss, depth)| share::tail_of(q, loss, depth, bound))
        .collect();
    let tail_s = median(tails).or_else(|| median(slices))?;
    Some(Waited {
        sharing: sharing_of(runs),
        tail_s,
        longest_s,
    })
}

/// The profile of calibration rows: their costs, the x-loop cost and the CPU they got, and
/// the disk when it was measured (`None`: the built-in profile's, which the source then
/// names).
pub fn of_rows(rows: &[Row], x_loop_ns: f64, disk: Option<Disk>, source: String) -> Profile {
    let mut samples = samples(rows);
    if let Some(d) = disk {
        samples.set_disk(d);
    }
    let mut p = profile(&samples, x_loop_ns, source);
    p.cpu = cpu(rows, &p, netdev_budget_s());
    p.rings = rings(rows, &p);
    p
}

/// This machine's `net.core.netdev_budget_usecs` in seconds: the longest one run of the
/// receive softirq takes before it leaves the rest to `ksoftirqd`, and so the longest a tool
/// behind the receive work waits for its CPU ([`RpsWaits::longest_s`]). Read where the
/// profile is built, which is where it was calibrated (`poolcap predict --validate DIR`
/// rebuilds a run's profile on the machine it reads it on).
fn netdev_budget_s() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/sys/net/core/netdev_budget_usecs").ok()?;
    let usecs: f64 = text.trim().parse().ok()?;
    (usecs > 0.0).then_some(usecs / 1e6)
}

/// The profile from `samples` and the x-loop cost timed in-process, with `source` (the load
/// average is the caller's to set). With a saturated worker among the samples the x-loop's
/// cost is that worker's instead (`x_loop_in_pipeline`).
pub fn profile(samples: &Samples, x_loop_ns: f64, source: String) -> Profile {
    let mut p = Profile::from_samples(samples, &Profile::built_in(), &source);
    let x_loop_ns = x_loop_in_pipeline(samples).unwrap_or(x_loop_ns);
    if x_loop_ns.is_finite() && x_loop_ns > 0.0 {
        p.x_loop_ns = x_loop_ns;
    }
    // The base profile's load average describes its own calibration, not this one.
    p.load_average = None;
    p
}

/// The x-loop's ns per iteration as the analysis worker pays it: the saturated worker's CPU
/// per packet less the copy configuration's (one iteration), over the [`SATURATED_LOAD`]
/// less one further iterations, the mean over the frame sizes. A worker behind a backlog
/// of cold cells, beside the capture thread, pays more per iteration than the loop timed
/// alone, and the load grid's workers pay what this says (docs/predict.md, calibrate;
/// BENCHMARKS.md, predict, the load grid).
fn x_loop_in_pipeline(samples: &Samples) -> Option<f64> {
    let (saturated, copy) = (samples.fit(share::SATURATED)?, samples.fit("copy")?);
    let (lo, hi) = samples.span(share::SATURATED)?;
    let per_iteration = |b: f64| (saturated.ns(b) - copy.ns(b)) / f64::from(SATURATED_LOAD - 1);
    let ns = (per_iteration(lo) + per_iteration(hi)) / 2.0;
    (ns.is_finite() && ns > 0.0).then_some(ns)
}

/// The 1-minute load average (`/proc/loadavg`).
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_poolcap_stage_adds_one_thing_to_the_previous() {
        let v = stages(&["zstd:1"], false);
        let keys: Vec<&str> = v.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "count",
                "null",
                "copy",
                "write",
                "pcapng",
                "zstd:1",
                "probe 1r",
                "probe 100r",
                "probe 100f"
            ]
        );
        assert_eq!(
            (v[0].spec.load, v[0].spec.write, v[0].spec.dev_null),
            (0, false, false)
        );
        assert_eq!((v[1].spec.write, v[1].spec.dev_null), (false, true));
        assert_eq!((v[2].spec.load, v[2].spec.write), (1, false));
        assert_eq!(
            (v[3].spec.load, v[3].spec.write, v[3].spec.pcapng),
            (0, true, false)
        );
        assert_eq!((v[4].spec.write, v[4].spec.pcapng), (true, true));
        assert_eq!(v[5].spec.compress.as_deref(), Some("zstd:1"));
        assert!(v[..6].iter().all(|s| s.spec.tool == Tool::Poolcap));
        assert!(v[6..].iter().all(|s| s.spec.tool == Tool::Probe));
        assert_eq!((v[6].spec.rules, v[7].spec.rules), (Some(1), Some(100)));
        assert_eq!((v[8].spec.rules, v[8].spec.all_flows), (Some(100), true));
    }

    #[test]
    fn calibration_rows_become_samples_and_the_others_are_ignored() {
        // Two sizes keep the list short; SIZES adds a third between them.
        const SIZES: [usize; 2] = [64, 1514];
        let points = points(&SIZES, 1000, &[], true);
        let ids = |sizes: &[usize]| -> Vec<String> {
            super::points(sizes, 1000, &[], true)
                .into_iter()
                .map(|p| p.id)
                .collect()
        };
        assert!(ids(&super::SIZES).contains(&"calibrate rps 512B".to_owned()));
        let ids: Vec<&str> = points.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "calibrate rps 64B",
                "calibrate rps light 64B",
                "calibrate 64B",
                "calibrate rps 1514B",
                "calibrate rps light 1514B",
                "calibrate 1514B",
                RING_POINT,
                DEEP_POINT
            ]
        );
        let rps: Vec<_> = points.iter().map(|p| p.rps).collect();
        assert_eq!(rps[..3], [Some(true), Some(true), Some(false)]);
        // The light point: the same subjects as the rps point at top speed, at LIGHT_PPS.
        let (top, light) = (&points[0], &points[1]);
        assert_eq!(
            (top.traffic.rate, light.traffic.rate),
            (None, Some(LIGHT_PPS))
        );
        let names =
            |p: &Point| -> Vec<String> { p.subjects.iter().map(|s| s.name.clone()).collect() };
        assert_eq!(
            names(light),
            [
                KERNEL_RPS_LIGHT,
                "tcpdump null rps light",
                "tcpdump file rps light",
                "dumpcap null rps light",
                "dumpcap file rps light"
            ][..names(top).len()]
        );
        assert!(names(top)[1..].iter().all(|n| n.ends_with(RPS)));
        // The peers fall behind at top speed in S1's shallow ring; the light point keeps the
        // bench's.
        let rings = |p: &Point| -> Vec<u64> {
            p.subjects[1..]
                .iter()
                .map(|s| s.capture.as_ref().unwrap().buffer_kib)
                .collect()
        };
        assert!(rings(top).iter().all(|&k| k == BEHIND_RING_KIB));
        assert!(rings(light).iter().all(|&k| k == crate::point::BUFFER_KIB));
        // Without the peers there is nothing to measure at a light rate, nor deep.
        assert_eq!(super::points(&SIZES, 1000, &[], false).len(), 5);
        // The deep point: tcpdump alone, at 64 B and top speed, in S3's ring.
        let deep = &points[7];
        assert_eq!((deep.rps, deep.traffic.rate), (Some(true), None));
        assert_eq!(deep.traffic.size, 64);
        assert!(deep.subjects.iter().all(|s| {
            let c = s.capture.as_ref().unwrap();
            s.name.ends_with(DEEP) && c.tool == Tool::Tcpdump && c.buffer_kib == DEEP_RING_KIB
        }));
        assert!(super::points(&[1514], 1000, &[], true)
            .iter()
            .all(|p| p.id != DEEP_POINT));
        // The ring point: poolcap analysing and tcpdump, stopped, sent 60k frames at most.
        let ring = &points[6];
        let specs: Vec<_> = ring
            .subjects
            .iter()
            .map(|s| s.capture.clone().unwrap())
            .collect();
        assert!(specs.iter().all(|c| c.stopped), "{specs:?}");
        assert_eq!((specs[0].tool, specs[0].load), (Tool::Poolcap, 1));
        assert_eq!(
            ring.traffic.count, 1000,
            "no more than the other points send"
        );
        assert_eq!(
            super::points(&SIZES, 500_000, &[], true)[6].traffic.count,
            RING_FRAMES
        );
        let names: Vec<&str> = points[2].subjects.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names[..5], ["sender", "count", "null", "copy", "write"]);
        assert_eq!(names.last(), Some(&share::SATURATED));
        let busy = points[2].subjects.last().unwrap().capture.as_ref().unwrap();
        assert_eq!((busy.load, busy.write), (SATURATED_LOAD, false));
        assert_eq!(points[0].subjects[0].name, KERNEL_RPS);
        // One run per subject at 64 B: the sender alone at 500k pps, 400k while poolcap
        // counts at 0.01 s of CPU for 3000 packets; a validated point is left out.
        let run = |point: &str, subject: &str, pps: f64, cpu: Option<f64>| {
            let mut r = crate::testing::record(point, "poolcap", 0.0);
            r.subject = subject.to_owned();
            r.traffic.burst = None;
            r.sent.as_mut().unwrap().pps = pps;
            r.cpu_s = cpu;
            r.in_file = Some(3000);
            r
        };
        let rows = crate::report::aggregate(&[
            run("calibrate 64B", "sender", 500e3, None),
            run("calibrate 64B", "count", 400e3, Some(0.01)),
            run("S1 64B", "copy", 400e3, Some(1.0)),
        ]);
        let s = samples(&rows);
        let keys: Vec<&str> = s.keys().collect();
        assert_eq!(keys, ["count", "sender", "sender+capture"]);
        // With rps on, 3000 frames sent: the tool CPU busy 3 ms while poolcap ran 1.5 ms of
        // it leaves the receive work 500 ns a frame. dumpcap's CPU busy 6 ms while it kept
        // 1500 of them: (6 ms - 3000 x 500 ns) / 1500, 3000 ns a packet of its own.
        let mut rps = run("calibrate rps 64B", KERNEL_RPS, 300e3, Some(0.0015));
        rps.rps = true;
        rps.busy_s = Some(0.003);
        let mut dumpcap = run("calibrate rps 64B", "dumpcap null rps", 300e3, Some(0.005));
        dumpcap.rps = true;
        dumpcap.busy_s = Some(0.006);
        dumpcap.in_file = Some(1500);
        // tcpdump's CPU busy 1 ms: less than the receive work alone measured elsewhere, which
        // is recorded as nothing (1 ns), not dropped.
        let mut tcpdump = run("calibrate rps 64B", "tcpdump null rps", 300e3, Some(0.0005));
        tcpdump.rps = true;
        tcpdump.busy_s = Some(0.001);
        let with_rps = samples(&crate::report::aggregate(&[rps, dumpcap, tcpdump]));
        let keys: Vec<&str> = with_rps.keys().collect();
        assert_eq!(
            keys,
            [
                "dumpcap null rps",
                "dumpcap null rps left",
                KERNEL_RPS,
                "tcpdump null rps"
            ]
        );
        // dumpcap had 4.5 ms of its CPU's 6 ms busy time: three quarters, which the profile
        // keeps as its share behind (tcpdump, less than the receive work's, has none).
        let left = with_rps.fit("dumpcap null rps left").unwrap();
        assert!((left.ns(64.0) - 0.75).abs() < 1e-9, "{left:?}");
        let kept = profile(&with_rps, 1.5, "test".into()).dumpcap.null_rps_left;
        assert_eq!(kept, Some(left));
        let t = with_rps.fit("tcpdump null rps").unwrap();
        assert_eq!(t.ns(64.0), MEASURED_NOTHING_NS);
        let k = profile(&with_rps, 1.5, "test".into()).kernel_on_tool_cpu();
        assert!((k.ns(64.0) - 500.0).abs() < 1e-6, "{k:?}");
        let d = with_rps.fit("dumpcap null rps").unwrap();
        assert!((d.ns(64.0) - 3000.0).abs() < 1e-6, "{d:?}");
        // Three runs of tcpdump at the top speed: two kept up (busy 2 ms), one kept 2000 of
        // the 3000 frames (busy 4.5 ms): that run is the cost behind, (1500 - 500) / (2/3)
        // ns a packet, not the median's 1 ns.
        let tcpdump = |n: usize, busy: f64, kept: u64| {
            let mut r = run("calibrate rps 64B", "tcpdump null rps", 300e3, Some(0.001));
            r.run = n;
            r.rps = true;
            r.busy_s = Some(busy);
            r.in_file = Some(kept);
            r
        };
        let mut kernel = run("calibrate rps 64B", KERNEL_RPS, 300e3, Some(0.0015));
        kernel.rps = true;
        kernel.busy_s = Some(0.003);
        let behind = samples(&crate::report::aggregate(&[
            kernel,
            tcpdump(1, 0.002, 3000),
            tcpdump(2, 0.002, 3000),
            tcpdump(3, 0.0045, 2000),
        ]));
        let t = behind.fit("tcpdump null rps").unwrap();
        assert!((t.ns(64.0) - 1500.0).abs() < 1e-6, "{t:?}");
        // At the light point the receive work is its own: busy 2.4 ms, poolcap 1.5 ms, 300 ns
        // a frame. dumpcap kept all 3000 frames in 6 ms: 1700 ns a packet of its own;
        // tcpdump kept half of them, so it did not keep up and is left out.
        let light = |subject: &str, cpu: f64, busy: f64, kept: u64| {
            let mut r = run("calibrate rps light 64B", subject, 250e3, Some(cpu));
            r.rps = true;
            r.busy_s = Some(busy);
            r.in_file = Some(kept);
            r
        };
        let rows = crate::report::aggregate(&[
            light(KERNEL_RPS_LIGHT, 0.0015, 0.0024, 3000),
            light("dumpcap null rps light", 0.005, 0.006, 3000),
            light("tcpdump null rps light", 0.001, 0.004, 1500),
        ]);
        let at_light = samples(&rows);
        let keys: Vec<&str> = at_light.keys().collect();
        assert_eq!(keys, ["dumpcap null rps light"]);
        let d = at_light.fit("dumpcap null rps light").unwrap();
        assert!((d.ns(64.0) - 1700.0).abs() < 1e-6, "{d:?}");
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        assert!(close(s.fit("sender").unwrap().ns(64.0), 2000.0));
        assert!(close(s.fit("sender+capture").unwrap().ns(64.0), 2500.0));
        assert!(close(s.fit("count").unwrap().ns(64.0), 1e7 / 3000.0));
        let p = profile(&s, 1.5, "test".into());
        assert!(close(p.kernel.ns(64.0), 500.0) && p.x_loop_ns == 1.5);
        assert_eq!(p.load_average, None);
    }

    #[test]
    fn a_stopped_ring_that_overflowed_is_measured_beside_the_rule_and_nothing_else() {
        // poolcap analysing, 4 MiB, stopped while 60000 frames of 64 B came at 600k pps: it
        // kept 20000. tcpdump kept all it was sent: that says only "at least".
        let stopped = |tool: &str, subject: &str, captured: u64| {
            let mut r: crate::point::Record = serde_json::from_value(serde_json::json!({
                "suite": "predict", "point": RING_POINT, "subject": subject,
                "poolcap": tool == "poolcap", "run": 1, "rps": false,
                "traffic": {"size": 64, "count": 60000, "rate": null, "burst": null,
                            "idle": null, "flows": 1, "skew": null, "batch": null},
                "generator": "poolcap",
                "capture": {"tool": tool, "buffer_kib": 4096, "write": false,
                            "pcap_ns": false, "pool": null, "load": u32::from(tool == "poolcap"),
                            "snaplen": null, "compress": null, "queues": null,
                            "workers": null, "offload": null, "wait": null, "backend": null,
                            "cpus": null, "taskset": null, "stopped": true},
                "sent": {"frames": 60000, "pps": 600000.0, "seconds": 0.1, "batch": null},
                "counts": {"captured": captured, "dropped": 60000 - captured,
                           "received": null, "extra": {}},
                "in_file": null, "loss": null, "cpu_s": null, "cpu_total_s": null,
                "spacing": null, "syscalls": null, "voluntary_switches": null,
                "involuntary_switches": null, "wall_s": 2.0, "busy_before": null,
                "error": null
            }))
            .unwrap();
            r.loss = Some(1.0 - captured as f64 / 60_000.0);
            r
        };
        let rows = crate::report::aggregate(&[
            stopped("poolcap", RING_POOLCAP, 20_000),
            stopped("tcpdump", RING_TCPDUMP, 60_000),
        ]);
        let p = Profile::built_in();
        let got = rings(&rows, &p);
        assert_eq!(got.len(), 1, "{got:?}");
        let r = &got[0];
        assert_eq!(
            (r.capture.as_str(), r.ring_bytes, r.held),
            (RING_POOLCAP, 4 << 20, 20_000.0)
        );
        assert!((r.rate_pps - 600_000.0).abs() < 1e-6, "{r:?}");
        // 16 blocks of 1724 slots of 152 B, which fill in 2.87 ms at 600k pps: the 4 ms
        // timer closes two a period, 1200 frames each.
        assert!((r.rule - 16.0 * 1200.0).abs() < 1e-6, "{r:?}");
        // The ring point feeds no cost and no CPU share.
        assert_eq!(samples(&rows).keys().count(), 0);
        assert!(cpu(&rows, &p, None).is_none());
    }

    #[test]
    fn the_x_loop_costs_what_the_saturated_worker_paid_per_iteration() {
        // Copying costs 43 and 270 ns at 64 and 1514 B; the saturated worker 19155 and
        // 20143: (19112 and 19873) / 19999 iterations, 0.9556 and 0.9937 ns, 0.9746 on average.
        let mut s = Samples::default();
        s.add("copy", 64.0, 43.0);
        s.add("copy", 1514.0, 270.0);
        let timed_alone = profile(&s, 0.927, "test".into());
        assert_eq!(
            timed_alone.x_loop_ns, 0.927,
            "no saturated worker: the loop timed alone"
        );
        s.add(share::SATURATED, 64.0, 19_155.0);
        s.add(share::SATURATED, 1514.0, 20_143.0);
        let p = profile(&s, 0.927, "test".into());
        let want = (19_112.0 + 19_873.0) / 2.0 / 19_999.0;
        assert!((p.x_loop_ns - want).abs() < 1e-9, "{}", p.x_loop_ns);
    }

    #[test]
    fn calibration_runs_give_each_configuration_its_share_and_lossy_runs_the_wait_tail() {
        use crate::child::Sched;
        // 64 B, 3000 frames sent in 10 ms bursts (see `record`): tcpdump ran 1 ms and waited
        // 1.2 s of a 2 s window (waiting 60%) and lost 0.05%; count ran 1 ms, waited 1 ms in
        // 4 slices and lost nothing.
        let run = |subject: &str, run_ns, wait_ns, loss| {
            let mut r = crate::testing::record("calibrate 64B", "tcpdump", loss);
            r.subject = subject.to_owned();
            r.capture.as_mut().unwrap().load = 0;
            r.sched = Some((
                Sched {
                    run_ns,
                    wait_ns,
                    slices: 4,
                },
                2.0,
            ));
            r
        };
        // The saturated worker ran 1 ms of 5 ms runnable and lost 0.1%, and so did the probe
        // with 1000 rules: both offered more than their capacity (300k pps within the
        // bursts), so that loss is no wait's; an rps-on run is left out.
        let mut rps = run("copy", 1_000_000, 9_000_000, 0.0);
        rps.rps = true;
        let over = |subject: &str, tool: Tool, load: u32, rules: Option<usize>| {
            let mut r = run(subject, 1_000_000, 4_000_000, 0.001);
            let c = r.capture.as_mut().unwrap();
            (c.tool, c.load, c.rules) = (tool, load, rules);
            r
        };
        let records = [
            run("tcpdump null", 1_000_000, 1_200_000_000, 0.0005),
            run("count", 1_000_000, 1_000_000, 0.0),
            over(share::SATURATED, Tool::Poolcap, SATURATED_LOAD, None),
            rps,
            over(&profile::probe_key(1000), Tool::Probe, 0, Some(1000)),
        ];
        let rows = crate::report::aggregate(&records);
        let p = Profile::built_in();
        let got = cpu(&rows, &p, None).unwrap();
        assert_eq!(got.capacity_share(share::SATURATED), 0.2);
        assert!(!got.sharing.contains_key("copy"));
        assert_eq!(got.sharing["tcpdump null"].share, 1.0 / 1201.0);
        assert_eq!(got.sharing["count"].share, 0.5);
        assert_eq!(got.sharing["count"].wait_s, 0.00025);
        // No wait was longer than the lossy run's buffers' depth and the time its 1.5 lost
        // frames took to arrive, and waits cut there reproduce its loss.
        let pps = validate::offered_pps(&rows[0]).unwrap();
        let s = validate::scenario(&rows[0], pps).unwrap();
        let depth = predict::predict(&p, &s).unwrap().buffer_frames / pps;
        let longest_s = depth + 0.0005 * 3000.0 / pps;
        assert!(
            (got.longest_s.unwrap() - longest_s).abs() < 1e-12,
            "{got:?}"
        );
        // A run writing a file waits for the disk too (the kernel throttles a writer whose
        // dirty pages outrun writeback): its loss bounds nothing.
        let mut file = run("tcpdump file", 1_000_000, 1_200_000_000, 0.01);
        file.capture.as_mut().unwrap().write = true;
        let with_file = crate::report::aggregate(&[&records[..], &[file]].concat());
        assert_eq!(cpu(&with_file, &p, None).unwrap().longest_s, got.longest_s);
        let (_, waits) = got.waits("tcpdump null", false);
        assert_eq!(waits.longest_s, got.longest_s.unwrap());
        let back = waits.lost(0.6, depth, f64::INFINITY);
        assert!((back - 0.0005).abs() < 1e-9, "{back} {got:?}");
        let unbounded = |tail_s| share::Waits {
            tail_s,
            longest_s: f64::INFINITY,
        };
        // Without a lossy run the tail is the mean wait per timeslice (0.25 or 0.75 ms).
        let calm = crate::report::aggregate(&[run("count", 1_000_000, 1_000_000, 0.0)]);
        assert_eq!(cpu(&calm, &p, None).unwrap().tail_s, 0.00025);
        assert!(cpu(&rows[..0], &p, None).is_none());
        // Only poolcap counting with rps on gives the waits behind the receive work.
        assert_eq!(got.rps, None);
        let mut behind = run(KERNEL_RPS, 1_000_000, 3_000_000, 0.0);
        behind.rps = true;
        // A peer's lossy rps-on run neither: its loss is not a wait's (see `cpu`); it gives
        // only its own share there (ran 1 ms, waited 2 ms).
        let mut peer = run("tcpdump file rps", 1_000_000, 2_000_000, 0.0005);
        peer.rps = true;
        let with =
            crate::report::aggregate(&[run("count", 1_000_000, 1_000_000, 0.0), behind, peer]);
        let w = cpu(&with, &p, None).unwrap().rps.unwrap();
        assert_eq!((w.sharing.share, w.sharing.wait_s), (0.25, 0.00075));
        assert_eq!(
            w.tail_s, 0.00075,
            "no lossy rps run: the wait per timeslice"
        );
        let c = cpu(&with, &p, None).unwrap();
        assert_eq!(c.waits("count", true), (w.sharing, unbounded(w.tail_s)));
        let own = w.by_key["tcpdump file"];
        assert!((own.share - 1.0 / 3.0).abs() < 1e-12, "{own:?}");
        assert_eq!(c.waits("tcpdump file", true), (own, unbounded(w.tail_s)));
        assert_eq!(w.by_key.len(), 1);
        assert_eq!(
            c.waits("count", false),
            (c.sharing["count"], unbounded(c.tail_s))
        );
        // A lossy run behind the receive work, with waits of at most twice its buffers'
        // depth: the tail that reproduces its loss under that bound, which the profile
        // keeps.
        let mut lossy = run(KERNEL_RPS, 1_000_000, 3_000_000, 0.0005);
        lossy.rps = true;
        let with = crate::report::aggregate(&[run("count", 1_000_000, 1_000_000, 0.0), lossy]);
        let r = with.iter().find(|r| r.subject == KERNEL_RPS).unwrap();
        let pps = validate::offered_pps(r).unwrap();
        let s = validate::scenario(r, pps).unwrap();
        let depth = predict::predict(&p, &s).unwrap().buffer_frames / pps;
        let longest = 2.0 * depth;
        let (sharing, waits) = cpu(&with, &p, Some(longest)).unwrap().waits("count", true);
        assert_eq!((sharing.share, waits.longest_s), (0.25, longest));
        let back = waits.lost(0.0015, depth, f64::INFINITY);
        assert!((back - 0.0005).abs() < 1e-9, "{back} {waits:?}");
        let free = cpu(&with, &p, None).unwrap().rps.unwrap().tail_s;
        assert!(
            waits.tail_s > free,
            "cut waits must be longer to lose as much"
        );
        // The deep point: tcpdump to /dev/null kept up and waited 0.75 ms a timeslice (3 ms
        // in 4), which the profile keeps; writing a file it fell behind (lost 2%): nothing.
        let deep = |subject: &str, loss| {
            let mut r = run(subject, 1_000_000, 3_000_000, loss);
            (r.point, r.rps) = (DEEP_POINT.to_owned(), true);
            r
        };
        let mut counting = run(KERNEL_RPS, 1_000_000, 3_000_000, 0.0);
        counting.rps = true;
        let with = crate::report::aggregate(&[
            run("count", 1_000_000, 1_000_000, 0.0),
            counting,
            deep("tcpdump null rps deep", 0.0),
            deep("tcpdump file rps deep", 0.02),
        ]);
        let kept = cpu(&with, &p, None).unwrap().rps.unwrap().keeping_up;
        assert_eq!(kept, BTreeMap::from([("tcpdump null".to_owned(), 0.00075)]));
        // And it measures no cost.
        assert!(samples(&with).keys().all(|k| !k.contains("deep")));
    }
}
