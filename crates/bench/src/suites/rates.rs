//! `rates`: capture throughput (packets taken from the kernel) and analysis throughput
//! (packets that went through the x-loop) against the offered rate, for x = 0, 1000 and 25000
//! iterations per packet, 1 and 2 workers, basic mode and congestion control, with the plain
//! fanout reader (`--inplace`) at the same loads as the peer (Zabala et al., Figs 6-9).

use super::{congestion_targets, k, paced_quietly, Plan, Scale, Table, Text};
use super::{BOTH_CPUS, CPUS_SPLIT, CPUS_SPLIT_READER, GEN_CPU, TOOL_CPU};
use crate::figure::{by_subject, diagonal, median, offered, Figure};
use crate::meta::Meta;
use crate::peer::{CaptureSpec, Tool, Traffic};
use crate::point::{Point, Subject};
use crate::report::Row;

/// For BENCHMARKS.md.
pub const INTRO: &str = "Zabala et al. (ICN 2014), Figs 6-9: capture throughput (packets \
taken from the kernel) and analysis throughput (packets that went through the x-loop) against \
the offered rate, for x = 0, 1000 and 25000 loop iterations per packet, one and two workers, \
basic mode and congestion control (stop taking packets from the kernel at 90% backlog, resume \
at 50%), with the plain AF_PACKET fanout reader (`poolcap --inplace`, the load run on the \
kernel ring) at the same loads as the peer. Read: where analysis throughput flattens (the \
analysis capacity), and the gap between capture and analysis throughput — packets captured \
only to be dropped by the pool, CPU spent for nothing. Congestion control closes it; so does \
basic mode, whose capture thread leaves a block in the kernel ring while the pool has no room \
for it.";

/// Pool of every poolcap subject: small, so that what is still buffered when the sender stops
/// (and analysed afterwards) is a small share of a run.
pub const POOL: (usize, usize) = (64, 32);
/// Kernel ring of every subject, for the same reason (about 4k 64-byte frames).
pub const RING_KIB: u64 = 512;
/// The congestion-control setting.
pub const CONGESTION: &str = "congestion:90,50";
/// Flows of the traffic: even, so two queues share it.
pub const FLOWS: usize = 16;
/// The columns of a capture vs analysis throughput table (here and in `imbalance`).
pub const THROUGHPUT: [&str; 8] = [
    "sender_pps",
    "capture_pps",
    "analysis_pps",
    "loss",
    "pool_drop",
    "kernel_drop",
    "paused_ms",
    "cpu_s",
];

/// poolcap with `load` on `queues` queues (one worker each), in basic mode or with
/// congestion control. Two queues use both CPUs (see [`CPUS_SPLIT`]).
pub fn poolcap(load: u32, queues: u16, congestion: bool) -> CaptureSpec {
    let two = queues > 1;
    CaptureSpec {
        pool: Some(POOL),
        load,
        queues: Some(queues),
        workers: (load > 0).then_some(queues as usize),
        offload: congestion.then(|| CONGESTION.to_owned()),
        cpus: two.then(|| CPUS_SPLIT.to_owned()),
        taskset: two.then(|| BOTH_CPUS.to_owned()),
        ..CaptureSpec::new(Tool::Poolcap, RING_KIB)
    }
}

/// The plain fanout reader with `load` on `queues` queues, placed like [`poolcap()`].
pub fn reader(load: u32, queues: u16) -> CaptureSpec {
    let two = queues > 1;
    CaptureSpec {
        load,
        queues: Some(queues),
        inplace: true,
        cpus: two.then(|| CPUS_SPLIT_READER.to_owned()),
        taskset: two.then(|| BOTH_CPUS.to_owned()),
        ..CaptureSpec::new(Tool::Poolcap, RING_KIB)
    }
}

/// `x=1000 2w congestion` and friends.
pub fn subjects(loads: &[u32], full: bool) -> Vec<Subject> {
    let mut v = Vec::new();
    for &x in loads {
        let g = format!("x={x}");
        if x == 0 {
            v.push(Subject::named("x=0 1q", poolcap(0, 1, false)).in_group(&g));
            if full {
                v.push(Subject::named("x=0 2q", poolcap(0, 2, false)).in_group(&g));
            }
            continue;
        }
        let mut configs = vec![(1, false), (1, true), (2, false), (2, true)];
        if !full && x < 10_000 {
            // At a light load one worker keeps up at every rate: one 2-worker line suffices.
            configs.retain(|c| *c != (2, true));
        }
        for (q, cong) in configs {
            let name = format!("x={x} {q}w {}", if cong { "congestion" } else { "basic" });
            v.push(Subject::named(name, poolcap(x, q, cong)).in_group(&g));
        }
        v.push(Subject::baseline(format!("x={x} reader 1q"), reader(x, 1)).in_group(&g));
        if full {
            v.push(Subject::baseline(format!("x={x} reader 2q"), reader(x, 2)).in_group(&g));
        }
    }
    v
}

/// A rate sweep of `subjects` with `size`-byte frames over `flows` flows (and a skew).
pub fn sweep(
    prefix: &str,
    size: usize,
    rates: &[Option<u64>],
    seconds: f64,
    flows: usize,
    skew: Option<f64>,
    subjects: &[Subject],
) -> Vec<Point> {
    rates
        .iter()
        .map(|&rate| {
            let traffic = match rate {
                Some(r) => Traffic {
                    skew,
                    ..paced_quietly(size, r, seconds, flows)
                },
                // About 350k pps reach the probe through the qdisc with several flows.
                None => Traffic {
                    flows,
                    skew,
                    ..Traffic::top(size, (350_000.0 * seconds) as u64)
                },
            };
            let speed = rate.map_or("top".to_owned(), k);
            Point::new(
                format!("{prefix}{size}B {speed}"),
                traffic,
                subjects.to_vec(),
            )
        })
        .collect()
}

/// The points.
pub fn plan(scale: Scale) -> Plan {
    let (sizes, rates, loads, seconds): (&[usize], Vec<Option<u64>>, &[u32], f64) = match scale {
        Scale::Smoke => (&[64], vec![Some(100_000)], &[1000], 0.2),
        Scale::Quick => (
            &[64],
            vec![Some(50_000), Some(200_000), None],
            &[0, 1000, 25_000],
            2.0,
        ),
        Scale::Full => (
            &[64, 1514],
            [50, 100, 150, 200, 250, 300]
                .iter()
                .map(|r| Some(r * 1000))
                .chain([None])
                .collect(),
            &[0, 1000, 25_000],
            5.0,
        ),
    };
    let mut subj = subjects(loads, scale == Scale::Full);
    if scale == Scale::Smoke {
        subj.retain(|s| s.name == "x=1000 1w basic" || s.name == "x=1000 reader 1q");
    }
    let points = sizes
        .iter()
        .flat_map(|&size| sweep("", size, &rates, seconds, FLOWS, None, &subj))
        .collect();
    Plan {
        points,
        notes: Vec::new(),
    }
}

/// The settings shared with the congestion part of `imbalance`.
pub fn settings(seconds_note: &str) -> Vec<String> {
    vec![
        format!(
            "throughput = share of the offered packets × the sender's achieved rate: capture \
             throughput counts packets taken from the kernel (captured + dropped by the pool), \
             analysis throughput those that went through the x-loop (captured; for the fanout \
             reader, captured = analysed in the capture thread)"
        ),
        format!(
            "every poolcap subject has a pool of {}×{} cells and a {RING_KIB} KiB kernel ring \
             per queue (about 4k 64-byte frames), every reader the same ring: what is still \
             buffered when the sender stops (≤ ~6k packets per queue) is analysed afterwards \
             and counts as analysed, which overstates analysis throughput by at most that over \
             {seconds_note}",
            POOL.0, POOL.1
        ),
        format!(
            "1 worker (`1w`): one queue, capture thread and worker on CPU {TOOL_CPU}. 2 workers \
             (`2w`): two queues, `taskset -c {BOTH_CPUS}`, `--cpus {CPUS_SPLIT}`: queue 0's \
             capture thread and worker on CPU {TOOL_CPU}, queue 1's on CPU {GEN_CPU}, shared with \
             the sender; the readers likewise (`--cpus {CPUS_SPLIT_READER}`). Workers run at \
             nice 10, so the sender keeps its rate and the second worker gets what the sender \
             leaves: paced runs send a batch of rate/1000 frames each millisecond and sleep in \
             between; at top speed the sender never sleeps and the second worker gets little"
        ),
        format!("congestion control: `--offload {CONGESTION}`"),
    ]
}

/// Summary text.
pub fn text(meta: &Meta, rows: &[Row]) -> Text {
    let secs = meta.scale.pick("0.2 s", "2 s", "5 s");
    let mut settings = settings(&format!("{secs} of sending"));
    settings.push(format!(
        "traffic: {FLOWS} flows of equal weight (spread over both queues by the flow hash)"
    ));
    Text {
        settings,
        tables: vec![Table::results(rows, &THROUGHPUT, &["analysis_pps", "loss"])],
        targets: congestion_targets(rows, 0.02),
        headline: headline(rows),
        ..Text::default()
    }
}

/// Analysis throughput of each subject under the heaviest load at the highest offered rate.
pub fn capacity_line(rows: &[Row], subjects: &[&str]) -> String {
    let Some(x) = loads(rows).into_iter().max().filter(|&x| x > 0) else {
        return String::new();
    };
    // The point with the highest offered rate among those with this load.
    let top = rows
        .iter()
        .filter(|r| r.capture.as_ref().is_some_and(|c| c.load == x))
        .max_by(|a, b| {
            let o = |r: &Row| r.median("sender_pps").unwrap_or(0.0);
            o(a).total_cmp(&o(b))
        })
        .map(|r| r.point.clone());
    let Some(top) = top else {
        return String::new();
    };
    let parts: Vec<String> = subjects
        .iter()
        .filter_map(|s| {
            let v = super::med(rows, |p| p == top, s, "analysis_pps")?;
            Some(format!("{s} {}", super::kpps(Some(v))))
        })
        .collect();
    format!(
        "Analysis throughput at x = {x} and the highest offered rate ({top}): {} pps.",
        parts.join(", ")
    )
}

fn headline(rows: &[Row]) -> String {
    let mut s = capacity_line(
        rows,
        &[
            "x=25000 1w basic",
            "x=25000 1w congestion",
            "x=25000 2w basic",
            "x=25000 2w congestion",
            "x=25000 reader 1q",
        ],
    );
    let gap = |p: &str| {
        let c = super::med(rows, |x| x == p, "x=25000 1w basic", "capture_pps")?;
        let a = super::med(rows, |x| x == p, "x=25000 1w basic", "analysis_pps")?;
        Some(c / a.max(1.0))
    };
    if let Some(g) = super::points_of(rows)
        .iter()
        .filter_map(|p| gap(p))
        .reduce(f64::max)
    {
        s.push_str(&format!(
            " In basic mode up to {g:.2}× as many packets are taken from the kernel as are \
             analysed: a capture thread leaves a block in the kernel ring while its pool has \
             no room for it, so basic mode too takes only what it can analyse, and congestion \
             control only pauses earlier (at its HIGH mark)."
        ));
    }
    s
}

/// Loads present in `rows`, ascending.
pub fn loads(rows: &[Row]) -> Vec<u32> {
    let mut v: Vec<u32> = rows
        .iter()
        .filter_map(|r| Some(r.capture.as_ref()?.load))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Throughput figures for the rows of one load: analysis (and, under load, capture)
/// throughput vs offered rate, one line per subject, with the offered rate as reference.
pub fn throughput_figures(
    prefix: &str,
    what: &str,
    rows: &[Row],
    keep: impl Fn(&Row) -> bool + Copy,
) -> Vec<Figure> {
    let mut out = Vec::new();
    let sizes: Vec<usize> = {
        let mut s: Vec<usize> = rows.iter().map(|r| r.traffic.size).collect();
        s.sort_unstable();
        s.dedup();
        s
    };
    for size in sizes {
        for x in loads(rows) {
            let at = |r: &Row| {
                keep(r) && r.traffic.size == size && r.capture.as_ref().is_some_and(|c| c.load == x)
            };
            let kinds: &[(&str, &str)] = if x == 0 {
                &[("analysis_pps", "throughput")]
            } else {
                &[
                    ("analysis_pps", "analysis throughput"),
                    ("capture_pps", "capture throughput"),
                ]
            };
            for &(key, label) in kinds {
                let mut lines = by_subject(rows, at, offered, median(key));
                // The reference first, so the measured lines are drawn over it.
                if let Some(d) = diagonal("offered", &lines) {
                    lines.insert(0, d);
                }
                let file = if x == 0 {
                    format!("{prefix}-{size}B-x0.png")
                } else {
                    format!(
                        "{prefix}-{size}B-x{x}-{}.png",
                        &key[..key.find('_').unwrap_or(0)]
                    )
                };
                let title = format!("{} vs offered rate, x = {x}, {size} B", capitalize(label));
                let mut f = Figure::new(
                    file,
                    title,
                    "offered rate (pps, sender's achieved)",
                    &format!("{label} (pps{})", if x > 0 { ", log scale" } else { "" }),
                )
                .with_subtitle(what.to_owned())
                .lines(lines);
                // Under load the analysis rate is a small fraction of the offered one.
                f.log_y = x > 0;
                out.push(f);
            }
        }
    }
    out
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

/// The figures.
pub fn figures(meta: &Meta, rows: &[Row]) -> Vec<Figure> {
    let what = format!(
        "{FLOWS} even flows over 2 queues; 1w: CPU 1; 2w: CPUs 1 and 0 (shared with the sender); \
         pool {}x{}, ring {RING_KIB} KiB; rps {}",
        POOL.0,
        POOL.1,
        if meta.rps { "on" } else { "off" }
    );
    throughput_figures("rates", &what, rows, |r| r.capture.is_some())
}

/// The rates suite (see [`INTRO`]).
pub const DEF: super::SuiteDef = super::SuiteDef {
    queues: 2,
    figures,
    ..super::SuiteDef::new(
        "Capture vs analysis throughput (Zabala et al., Figs 6-9)",
        INTRO,
        |scale, _| plan(scale),
        text,
    )
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_sweeps_three_rates_at_64_bytes() {
        let p = plan(Scale::Quick).points;
        assert_eq!(p.len(), 3);
        assert!(p
            .iter()
            .all(|p| p.traffic.size == 64 && p.traffic.flows == FLOWS));
        assert_eq!(p[0].traffic.batch, Some(50));
        assert_eq!(p[2].traffic.rate, None);
        let names: Vec<&str> = p[0].subjects.iter().map(|s| s.name.as_str()).collect();
        assert!(names.contains(&"x=25000 2w congestion"), "{names:?}");
        assert!(names.contains(&"x=1000 reader 1q"));
        assert!(!names.contains(&"x=1000 2w congestion"));
        let reader = p[0]
            .subjects
            .iter()
            .find(|s| s.name == "x=25000 reader 1q")
            .unwrap();
        assert!(!reader.is_poolcap() && reader.group == "x=25000");
        let s = poolcap(25_000, 2, true);
        assert_eq!(
            (s.cpus.as_deref(), s.taskset.as_deref(), s.workers),
            (Some("1,0,1,0"), Some("0,1"), Some(2))
        );
        assert_eq!(poolcap(0, 1, false).workers, None);
        let full = plan(Scale::Full).points;
        assert_eq!(full.len(), 14);
    }
}
