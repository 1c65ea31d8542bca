//! `forward`: WireCAP Figs 13–14 — poolcap as an inline middlebox. The sender
//! sends stamped, numbered frames to the probe's `prb0`; the subject forwards them out of
//! `prb1`; the sink captures them on `snk0` and the bench checks the file as `poolcap check`
//! does (every frame once, reordering within a flow, one-way latency). Subjects doing the same
//! job in the same lab: `poolcap forward` (AF_PACKET and AF_XDP backends; basic and buddy
//! offload), netsniff-ng `--in/--out`, the Linux bridge (the kernel's forwarding floor) and
//! an XDP redirect (the fast path's floor: [`crate::xdp_redirect`]; xdp-tools' `xdp-bench
//! redirect` cannot load on this kernel, see [`crate::forward_peers`]).

use std::fmt::Write as _;

use super::{
    checks_line, k, paced_quietly, pct, pct_or_dash, rows_where, Calibration, Check, Plan, Scale,
    Table, Text, BOTH_CPUS, BUFFER_KIB, GEN_CPU, TOOL_CPU,
};
use crate::figure::{by_subject, median, Figure};
use crate::meta::Meta;
use crate::peer::{CaptureSpec, Tool, Traffic};
use crate::point::{Point, Subject};
use crate::report::Row;

/// For BENCHMARKS.md.
pub const INTRO: &str = "WireCAP Figs 13–14: forwarding through a middlebox. \
The sender sends numbered frames stamped with their send time to the probe's `prb0`; the \
subject forwards them out of `prb1` to the sink, whose capture is checked like `poolcap check` \
does: loss (frames that never reached the sink), duplicates, reordering within a flow, and \
one-way latency percentiles. Subjects: `poolcap forward` (AF_PACKET and AF_XDP, basic and buddy \
offload), netsniff-ng `--in prb0 --out prb1`, the Linux bridge (kernel forwarding, the \
slow path's floor) and an XDP program on `prb0` that redirects every frame to `prb1` \
(`bpf_redirect`, the fast path's floor; poolcap's own, since xdp-tools' `xdp-bench redirect` \
(Debian 12, 1.3.1) cannot load on this kernel).";

/// The fixed offered rate of the rate points and of the load and elephant points.
pub const RATE: u64 = 50_000;
/// Flows and skew of the elephant point.
pub const FLOWS: usize = 16;
/// Share of the elephant flow.
pub const SKEW: f64 = 0.8;
/// At the heavy load point one core analyses this multiple of [`RATE`]: heavy, but within one
/// core, so a forwarder that keeps up loses nothing.
pub const HEAVY_SHARE: f64 = 1.25;
/// At the elephant point one core analyses this share of [`RATE`]: the elephant's queue needs
/// more than one core, both queues together less than two (as the `imbalance` suite).
pub const ELEPHANT_SHARE: f64 = 0.75;
/// Point id prefixes.
const NO_LOAD: &str = "no load";
const LOAD: &str = "load";
const ELEPHANT: &str = "elephant";

/// poolcap forward with `backend`, `load` and `offload` on both queues.
fn poolcap(backend: &str, load: u32, offload: Option<&str>) -> CaptureSpec {
    CaptureSpec {
        load,
        queues: Some(2),
        workers: (load > 0).then_some(2),
        backend: Some(backend.to_owned()),
        offload: offload.map(str::to_owned),
        ..CaptureSpec::new(Tool::Forward, BUFFER_KIB)
    }
}

/// A peer forwarder: it has no per-packet work option, so it runs the same at every load.
fn peer(tool: Tool) -> Subject {
    Subject::capture(CaptureSpec::new(tool, BUFFER_KIB))
}

/// poolcap's two backends, then the XDP redirect floor (cheap, so also at the smoke point),
/// then with `peers` netsniff-ng and the bridge.
fn forwarders(load: u32, peers: bool) -> Vec<Subject> {
    let mut v = vec![
        Subject::named("poolcap af_packet", poolcap("af_packet", load, None)),
        Subject::named("poolcap af_xdp", poolcap("af_xdp", load, None)),
        peer(Tool::XdpRedirect),
    ];
    if peers {
        v.push(peer(Tool::NetsniffFwd));
        v.push(peer(Tool::Bridge));
    }
    v
}

fn traffic(size: usize, rate: Option<u64>, seconds: f64) -> Traffic {
    match rate {
        Some(r) => paced_quietly(size, r, seconds, 1),
        None => Traffic::top(size, (300_000.0 * seconds) as u64),
    }
}

/// The points.
pub fn plan(scale: Scale, c: &Calibration) -> Plan {
    let seconds = scale.pick(0.2, 1.0, 3.0);
    let (sizes, rates): (&[usize], Vec<Option<u64>>) = match scale {
        Scale::Smoke => (&[64], vec![Some(20_000)]),
        Scale::Quick => (&[64, 512, 1514], vec![Some(RATE), None]),
        Scale::Full => (
            &[64, 512, 1514],
            vec![Some(10_000), Some(RATE), Some(100_000), None],
        ),
    };
    let speed = |r: Option<u64>| r.map_or("top".to_owned(), k);
    let mut points = Vec::new();
    for &size in sizes {
        for &r in &rates {
            points.push(Point::new(
                format!("{NO_LOAD} {size}B {}", speed(r)),
                traffic(size, r, seconds),
                forwarders(0, scale != Scale::Smoke),
            ));
        }
    }
    let heavy = c.load_for(HEAVY_SHARE * RATE as f64);
    let split = c.load_for(ELEPHANT_SHARE * RATE as f64);
    if scale != Scale::Smoke {
        let mut s = forwarders(heavy, false);
        s.push(peer(Tool::NetsniffFwd));
        points.push(Point::new(
            format!("{LOAD} 64B {} x={heavy}", k(RATE)),
            traffic(64, Some(RATE), seconds * 2.0),
            s,
        ));
        let both = |offload: &str| CaptureSpec {
            taskset: Some(BOTH_CPUS.to_owned()),
            ..poolcap("af_packet", split, Some(offload))
        };
        points.push(Point::new(
            format!("{ELEPHANT} 64B {} x={split}", k(RATE)),
            Traffic {
                skew: Some(SKEW),
                ..paced_quietly(64, RATE, seconds * 2.0, FLOWS)
            },
            vec![
                Subject::named("basic", both("basic")),
                Subject::named("buddy:60", both("buddy:60")),
            ],
        ));
    }
    Plan {
        points,
        notes: vec![format!(
            "{}; load point: x = {heavy} (one core analyses about {:.0} pps, {:.0}% of the \
             offered {}); elephant point: x = {split} (one core analyses about {:.0} pps, \
             {:.0}% of the offered rate, so the elephant's queue needs more than one core)",
            c.x_loop_note(),
            c.pps_at(heavy),
            HEAVY_SHARE * 100.0,
            k(RATE),
            c.pps_at(split),
            ELEPHANT_SHARE * 100.0,
        )],
    }
}

/// The columns of every forwarding table.
pub const COLUMNS: [&str; 10] = [
    "sender_pps",
    "forwarded_pps",
    "loss",
    "reordered",
    "duplicates",
    "lat_p50_us",
    "lat_p99_us",
    "lat_p999_us",
    "lat_max_us",
    "cpu_s_per_mpkt",
];

/// The accounting columns of poolcap forward: its own terms (`dropped` is every drop of its
/// own) against what left OUT and what reached the sink (`captured`: distinct frames).
const ACCOUNTING: [&str; 8] = [
    "offered",
    "forwarded",
    "dropped",
    "dropped_tx",
    "unaccounted",
    "out_tx",
    "captured",
    "loss",
];

/// Summary text.
pub fn text(_meta: &Meta, rows: &[Row]) -> Text {
    let mut tables = Vec::new();
    for (prefix, title) in [
        (NO_LOAD, "No load: frame size and offered rate"),
        (LOAD, "Under a heavy x-loop load"),
        (
            ELEPHANT,
            "Elephant flow on 2 queues: basic vs buddy offload",
        ),
    ] {
        let r = rows_where(rows, |r| r.point.starts_with(&format!("{prefix} ")));
        if !r.is_empty() {
            tables.push(Table::new(title, r, &COLUMNS, &["loss", "lat_p99_us"]));
        }
    }
    let own = rows_where(rows, |r| {
        r.capture.as_ref().is_some_and(|c| c.tool == Tool::Forward)
    });
    if !own.is_empty() {
        tables.push(Table::new(
            "poolcap forward's accounting: received = forwarded + dropped_by_rule + \
             dropped_kernel + dropped_pool + dropped_tx + filtered + not_taken (unaccounted = \
             offered − those terms)",
            own,
            &ACCOUNTING,
            &[],
        ));
    }
    Text {
        settings: vec![
            format!(
                "lab: three hosts, sender `snd0` → probe `prb0` | `prb1` → sink `snk0`, 2 \
                 queues per interface; sender on CPU {GEN_CPU}, forwarder on CPU {TOOL_CPU} \
                 (`taskset`; the elephant point's subjects on CPUs {BOTH_CPUS}), the sink's \
                 `poolcap capture -B 64MiB -s 128` on CPU {GEN_CPU}"
            ),
            format!(
                "poolcap forward: `--queues 2`, {BUFFER_KIB} KiB ring per queue, default pool; \
                 under load `--workers 2`; netsniff-ng `-s -A -k 100 -b {TOOL_CPU} -S {BUFFER_KIB}KiB` \
                 (it has no per-packet work option, so at the load point it forwards with no \
                 load: its loss there is a bar it clears more easily than poolcap)"
            ),
            "xdp redirect: `poolcap bench-peer xdp-redirect -i prb0 -o prb1`, a 14-instruction \
             XDP program (native mode, `BPF_XDP` link) that counts each frame per CPU and \
             returns `bpf_redirect(prb1)`; it does no per-packet work, so like netsniff-ng \
             and the bridge it has no load axis (at the load point it redirects with no \
             load). A frame redirected into a veth is received by the peer's NAPI, which \
             runs only with GRO (or XDP) on the peer: the bench turns GRO on at `snk0` for \
             this subject and off after (without it the kernel drops every redirected frame)"
                .into(),
            "loss = frames that never reached the sink (sink's distinct sequence numbers against \
             frames sent); forwarded pps = those frames per second of sending; latency = sink \
             capture time − generator send stamp (one clock); tool CPU per million frames \
             delivered; on veth the kernel's receive and transmit work for OUT runs on the \
             forwarder's CPU, the bridge's and the XDP redirect's entirely in the kernel on the \
             sender's CPU (their tool CPU is that of an idle process)"
                .into(),
        ],
        tables,
        targets: targets(rows),
        headline: headline(rows),
        sections: vec![("Worst point and median".into(), worst_and_median(rows))],
        ..Text::default()
    }
}

fn is_poolcap(r: &Row) -> bool {
    r.capture.as_ref().is_some_and(|c| c.tool == Tool::Forward)
}

/// For every poolcap subject: its worst point (highest loss, then highest p99) and the
/// median of its loss and p99 over all its points.
fn worst_and_median(rows: &[Row]) -> String {
    let mut s = String::from(
        "| subject | points | worst point (loss, p99 µs) | median loss | median p99 µs |\n\
         |---|---|---|---|---|\n",
    );
    let mut names: Vec<&str> = Vec::new();
    for r in rows {
        if !names.contains(&r.subject.as_str()) {
            names.push(&r.subject);
        }
    }
    for name in names {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.subject == name).collect();
        let key = |r: &Row| {
            (
                r.median("loss").unwrap_or(0.0),
                r.median("lat_p99_us").unwrap_or(0.0),
            )
        };
        let Some(worst) = mine.iter().max_by(|a, b| {
            key(a)
                .partial_cmp(&key(b))
                .unwrap_or(std::cmp::Ordering::Equal)
        }) else {
            continue;
        };
        let mid = |k: &str| {
            crate::stats::Spread::of(mine.iter().filter_map(|r| r.median(k))).map(|s| s.median)
        };
        let (wl, wp) = key(worst);
        let _ = writeln!(
            s,
            "| {name} | {} | {}: {}, {wp:.0} | {} | {} |",
            mine.len(),
            worst.point,
            pct(wl),
            pct_or_dash(mid("loss")),
            mid("lat_p99_us").map_or("–".into(), |x| format!("{x:.0}")),
        );
    }
    s
}

/// The targets: zero loss and zero reordering wherever netsniff-ng forwards without
/// loss; under load loss at most netsniff-ng's; buddy at most 0.1× basic with an elephant.
/// Beside them the same zero-loss bar against the Linux bridge, which in this lab forwards
/// without loss where netsniff-ng does not (its RX ring overflows), so the first target is
/// never vacuous for want of a lossless peer.
fn targets(rows: &[Row]) -> Vec<String> {
    let (mut zero, mut bridge, mut load, mut buddy) = (vec![], vec![], vec![], vec![]);
    let peer = |point: &str, tool: Tool| {
        rows.iter()
            .find(|r| r.point == point && r.capture.as_ref().is_some_and(|c| c.tool == tool))
            .and_then(|r| r.median("loss"))
    };
    for r in rows
        .iter()
        .filter(|r| is_poolcap(r) && !r.point.starts_with(ELEPHANT))
    {
        let Some(l) = r.median("loss") else { continue };
        let at = format!("{} / {}", r.point, r.subject);
        let reordered = r.median("reordered").unwrap_or(0.0);
        let lossless = || Check {
            point: at.clone(),
            ok: l == 0.0 && reordered == 0.0,
            detail: format!("loss {}, reordered {reordered:.0}", pct(l)),
        };
        if peer(&r.point, Tool::NetsniffFwd) == Some(0.0) {
            zero.push(lossless());
        }
        if peer(&r.point, Tool::Bridge) == Some(0.0) {
            bridge.push(lossless());
        }
        if let (true, Some(n)) = (
            r.point.starts_with(&format!("{LOAD} ")),
            peer(&r.point, Tool::NetsniffFwd),
        ) {
            load.push(Check {
                point: at,
                ok: l <= n,
                detail: format!("poolcap {} vs netsniff-ng {} (no load)", pct(l), pct(n)),
            });
        }
    }
    let el = |s: &str| super::med(rows, |p| p.starts_with(ELEPHANT), s, "loss");
    if let (Some(b), Some(u)) = (el("basic"), el("buddy:60")) {
        buddy.push(Check {
            point: ELEPHANT.into(),
            ok: u <= 0.1 * b,
            detail: format!("buddy:60 {} vs basic {}", pct(u), pct(b)),
        });
    }
    vec![
        checks_line(
            "zero loss and zero reordering wherever netsniff-ng forwards without loss (medians)",
            &zero,
        ),
        checks_line(
            "(beside the issue) zero loss and zero reordering wherever the Linux bridge \
             forwards without loss (medians)",
            &bridge,
        ),
        checks_line(
            "under load, loss ≤ netsniff-ng's (netsniff-ng without load; medians)",
            &load,
        ),
        checks_line(
            "with an elephant flow, buddy offload's loss ≤ 0.1× basic's (medians)",
            &buddy,
        ),
    ]
}

fn headline(rows: &[Row]) -> String {
    let at = |p: &str, s: &str, key: &str| super::med(rows, |x| x == p, s, key);
    let top = "no load 64B top";
    let lat = |s: &str| at(top, s, "lat_p50_us").map_or("–".into(), |x| format!("{x:.0} µs"));
    let own: Vec<&Row> = rows.iter().filter(|r| is_poolcap(r)).collect();
    let worst = own.iter().max_by(|a, b| {
        let l = |r: &Row| r.median("loss").unwrap_or(0.0);
        l(a).total_cmp(&l(b))
    });
    let mid = crate::stats::Spread::of(own.iter().filter_map(|r| r.median("loss")));
    let worst = worst.map_or("–".into(), |w| {
        format!(
            "{} / {}: loss {}, p99 {}",
            w.point,
            w.subject,
            pct_or_dash(w.median("loss")),
            w.median("lat_p99_us")
                .map_or("–".into(), |x| format!("{x:.0} µs"))
        )
    });
    let tools = [
        ("poolcap af_packet", "poolcap af_packet"),
        ("af_xdp", "poolcap af_xdp"),
        ("netsniff-ng", "netsniff-ng --in/--out"),
        ("bridge", "linux bridge"),
        ("xdp redirect", "xdp redirect"),
    ];
    let list = |f: &dyn Fn(&str) -> String| {
        tools
            .iter()
            .map(|(label, s)| format!("{} ({label})", f(s)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "Worst poolcap point {worst}; median poolcap loss over all points {}. 64 B at top \
         speed, no load: forwarded {}; loss {}; p50 latency {}.",
        pct_or_dash(mid.map(|s| s.median)),
        list(&|s| super::kpps(at(top, s, "forwarded_pps"))),
        list(&|s| pct_or_dash(at(top, s, "loss"))),
        list(&lat),
    )
}

/// The figures: forwarded rate and p99 latency vs frame size at top speed and at the fixed
/// rate, no load.
pub fn figures(_meta: &Meta, rows: &[Row]) -> Vec<Figure> {
    let size = |r: &Row| Some(r.traffic.size as f64);
    let mut v = Vec::new();
    for (label, suffix) in [("top speed", " top"), ("50k pps", " 50k")] {
        let keep = move |r: &Row| r.point.starts_with(NO_LOAD) && r.point.ends_with(suffix);
        let file = if suffix == " top" { "top" } else { "fixed" };
        v.push(
            Figure::new(
                format!("forward-rate-{file}.png"),
                format!("Forwarded rate vs frame size, no load, {label}"),
                "frame size (bytes)",
                "frames reaching the sink per second",
            )
            .with_subtitle("veth, 3 hosts; sender CPU 0, forwarder CPU 1")
            .lines(by_subject(rows, keep, size, median("forwarded_pps"))),
        );
        v.push(
            Figure::new(
                format!("forward-p99-{file}.png"),
                format!("p99 one-way latency vs frame size, no load, {label}"),
                "frame size (bytes)",
                "p99 latency (µs)",
            )
            .with_subtitle("sink capture time − send stamp; veth, 3 hosts")
            .lines(by_subject(rows, keep, size, median("lat_p99_us"))),
        );
    }
    v
}

/// The forward suite (see [`INTRO`]).
pub const DEF: super::SuiteDef = super::SuiteDef {
    queues: 2,
    hosts: 3,
    figures,
    ..super::SuiteDef::new(
        "Forwarding: rate, loss, order and latency at the sink (WireCAP Figs 13-14)",
        INTRO,
        plan,
        text,
    )
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scale_has_its_axes() {
        let c = super::super::tests::calibration(1.4, None);
        let smoke = plan(Scale::Smoke, &c).points;
        assert_eq!(smoke.len(), 1);
        let tools: Vec<Tool> = smoke[0]
            .subjects
            .iter()
            .map(|s| s.capture.as_ref().unwrap().tool)
            .collect();
        assert_eq!(tools, [Tool::Forward, Tool::Forward, Tool::XdpRedirect]);
        let q = plan(Scale::Quick, &c).points;
        assert_eq!(q.len(), 8);
        let names: Vec<&str> = q[0].subjects.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "poolcap af_packet",
                "poolcap af_xdp",
                "xdp redirect",
                "netsniff-ng --in/--out",
                "linux bridge"
            ]
        );
        let at_load: Vec<&str> = q[6].subjects.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            at_load,
            [
                "poolcap af_packet",
                "poolcap af_xdp",
                "xdp redirect",
                "netsniff-ng --in/--out"
            ]
        );
        let load = &q[6];
        assert!(load.id.starts_with("load 64B 50k x="), "{}", load.id);
        assert!(load.subjects[0].capture.as_ref().unwrap().load > 0);
        let el = &q[7];
        assert_eq!((el.traffic.flows, el.traffic.skew), (FLOWS, Some(SKEW)));
        let offloads: Vec<_> = el
            .subjects
            .iter()
            .map(|s| s.capture.as_ref().unwrap().offload.clone().unwrap())
            .collect();
        assert_eq!(offloads, ["basic", "buddy:60"]);
    }
}
