//! `backends`: AF_XDP against AF_PACKET in the same lab and run, on 2 queues: capture CPU per
//! packet, sender rate and loss with no load, under an x-loop load and under bursts.
//! On veth AF_XDP runs in copy mode only: every figure and table says so.

use std::fmt::Write as _;

use super::{burst, k, rows_where, Calibration, Plan, Scale, Table, Text, BUFFER_KIB, TOOL_CPU};
use crate::figure::{by_subject, median, offered, percent, Figure};
use crate::meta::Meta;
use crate::peer::{CaptureSpec, Tool, Traffic};
use crate::point::{Point, Subject};
use crate::report::Row;

/// For BENCHMARKS.md.
pub const INTRO: &str = "poolcap's AF_XDP backend against its AF_PACKET backend \
(TPACKET_V3 fanout) in the same lab and the same run, 2 queues, 16 flows: capture CPU per \
packet and sender rate with no load, loss at top speed, under an x-loop load (one core \
analyses half the offered top speed) and under bursts of R*M frames. **AF_XDP runs in copy \
mode on veth** (zero-copy bind fails with EOPNOTSUPP): the kernel still allocates an skb per \
frame and copies it into the UMEM, so these numbers show AF_XDP's costs without its main \
benefit. On a NIC with zero-copy AF_XDP (ice, i40e, mlx5) the driver DMAs frames straight into \
the UMEM — the pool — with no skb, no copy and no per-packet kernel work beyond the XDP \
redirect; the sender-side slowdown and the system time measured here would largely vanish, \
while AF_PACKET keeps its skb and its copy into the ring (and poolcap its second copy into \
chunks). tcpdump and the plain fanout reader are the peers.";

/// Flows of the traffic (spread over both queues).
pub const FLOWS: usize = 16;
/// The caveat that goes beside every figure and table.
pub const COPY_MODE: &str = "AF_XDP in copy mode on veth (zero-copy unavailable)";

fn poolcap(backend: &str, load: u32) -> Subject {
    Subject::named(
        format!("poolcap {backend}"),
        CaptureSpec {
            load,
            queues: Some(2),
            workers: (load > 0).then_some(2),
            backend: Some(backend.to_owned()),
            ..CaptureSpec::new(Tool::Poolcap, BUFFER_KIB)
        },
    )
}

fn reader(load: u32) -> Subject {
    Subject::baseline(
        "reader (--inplace)",
        CaptureSpec {
            load,
            queues: Some(2),
            inplace: true,
            ..CaptureSpec::new(Tool::Poolcap, BUFFER_KIB)
        },
    )
}

fn traffic(size: usize, rate: Option<u64>, seconds: f64) -> Traffic {
    let count = rate.map_or(350_000.0 * seconds, |r| r as f64 * seconds) as u64;
    Traffic {
        rate,
        flows: FLOWS,
        ..Traffic::top(size, count)
    }
}

/// The points.
pub fn plan(scale: Scale, c: &Calibration) -> Plan {
    let load = c.half_load();
    let analysis = c.pps_at(load);
    let seconds = scale.pick(0.2, 1.5, 4.0);
    let rates: Vec<Option<u64>> = match scale {
        Scale::Smoke => vec![Some(100_000)],
        Scale::Quick => vec![Some(100_000), None],
        Scale::Full => vec![Some(100_000), Some(200_000), Some(300_000), None],
    };
    let speed = |r: Option<u64>| r.map_or("top".to_owned(), k);
    let mut v = Vec::new();
    let bare = || {
        let mut s = vec![poolcap("af_packet", 0), poolcap("af_xdp", 0)];
        if scale != Scale::Smoke {
            s.push(Subject::capture(CaptureSpec::new(
                Tool::Tcpdump,
                BUFFER_KIB,
            )));
        }
        s
    };
    let loaded = || {
        vec![
            poolcap("af_packet", load),
            poolcap("af_xdp", load),
            reader(load),
        ]
    };
    for &r in &rates {
        v.push(Point::new(
            format!("no load 64B {}", speed(r)),
            traffic(64, r, seconds),
            bare(),
        ));
    }
    if scale == Scale::Smoke {
        return Plan {
            points: v,
            notes: Vec::new(),
        };
    }
    if scale == Scale::Full {
        v.push(Point::new(
            "no load 1514B top",
            traffic(1514, None, seconds * 0.6),
            bare(),
        ));
    }
    for &r in &rates {
        v.push(Point::new(
            format!("load 64B {}", speed(r)),
            traffic(64, r, seconds),
            loaded(),
        ));
    }
    for &b in burst::lengths(scale) {
        v.push(Point::new(
            format!("bursts B={b} load"),
            Traffic {
                flows: FLOWS,
                ..burst::bursts(scale, b, analysis)
            },
            loaded(),
        ));
    }
    Plan {
        points: v,
        notes: vec![format!(
            "{}; load X = {load} iterations per packet: one core analyses about {analysis:.0} pps \
             (half the top speed); bursts of B frames are followed by 1.5 B / {analysis:.0} s of \
             silence",
            c.top_speed_note(&format!(" over {FLOWS} flows")),
        )],
    }
}

/// AF_XDP's medians as a ratio to AF_PACKET's, per point.
fn xdp_vs_packet(rows: &[Row]) -> String {
    let mut s = String::from(
        "| point | CPU s/Mpkt af_xdp / af_packet | sender pps af_xdp / af_packet | loss af_xdp \
         vs af_packet |\n|---|---|---|---|\n",
    );
    let mut any = false;
    for p in super::points_of(rows) {
        let at = |b: &str, key: &str| {
            rows.iter()
                .find(|r| r.point == p && r.subject == format!("poolcap {b}"))
                .and_then(|r| r.median(key))
        };
        let ratio = |key: &str, digits: usize| match (at("af_xdp", key), at("af_packet", key)) {
            (Some(x), Some(a)) if a > 0.0 => {
                format!("{x:.digits$} / {a:.digits$} = {:.2}", x / a)
            }
            (Some(x), Some(a)) => format!("{x:.digits$} / {a:.digits$}"),
            _ => "–".into(),
        };
        let loss = match (at("af_xdp", "loss"), at("af_packet", "loss")) {
            (Some(x), Some(a)) => format!("{} vs {}", super::pct(x), super::pct(a)),
            _ => "–".into(),
        };
        if at("af_xdp", "sender_pps").is_none() {
            continue;
        }
        any = true;
        let _ = writeln!(
            s,
            "| {p} | {} | {} | {loss} |",
            ratio("cpu_s_per_mpkt", 3),
            ratio("sender_pps", 0)
        );
    }
    if any {
        s
    } else {
        String::new()
    }
}

/// Summary text.
pub fn text(_meta: &Meta, rows: &[Row]) -> Text {
    let cols = [
        "sender_pps",
        "captured",
        "loss",
        "cpu_s",
        "cpu_s_per_mpkt",
        "wait_syscalls_per_pkt",
    ];
    let ratios = ["loss", "cpu_s_per_mpkt", "sender_pps"];
    let mut tables = Vec::new();
    for (prefix, title) in [
        ("no load", "No load"),
        ("load", "Under an x-loop load"),
        ("bursts", "Bursts under load"),
    ] {
        let r = rows_where(rows, |r| r.point.starts_with(prefix));
        if !r.is_empty() {
            tables.push(Table::new(
                format!("{title} — {COPY_MODE}"),
                r,
                &cols,
                &ratios,
            ));
        }
    }
    let cmp = xdp_vs_packet(rows);
    Text {
        settings: vec![
            format!(
                "every subject: `--queues 2` on the 2-queue lab, all threads on CPU {TOOL_CPU} \
                 (`taskset`), {BUFFER_KIB} KiB ring per queue (AF_PACKET) or a UMEM of R*M \
                 frames per queue (AF_XDP), default pool; traffic: {FLOWS} flows (through the \
                 qdisc, so the flow hash spreads them over both tx, hence rx, queues)"
            ),
            format!("{COPY_MODE}: the kernel copies each frame into the UMEM"),
            "tool CPU is the process's user + system time; with AF_XDP in copy mode part of the \
             kernel's receive work runs in the tool's syscalls (system time), part on the \
             sender's CPU (lower sender rate)"
                .into(),
        ],
        tables,
        headline: headline(rows),
        sections: if cmp.is_empty() {
            Vec::new()
        } else {
            vec![(
                format!("AF_XDP against AF_PACKET, medians — {COPY_MODE}"),
                cmp,
            )]
        },
        ..Text::default()
    }
}

fn headline(rows: &[Row]) -> String {
    let top = |p: &str| p == "no load 64B top";
    let ratio = |key: &str| {
        let x = super::med(rows, top, "poolcap af_xdp", key)?;
        let a = super::med(rows, top, "poolcap af_packet", key)?;
        (a > 0.0).then(|| x / a)
    };
    let loaded = |p: &str| p == "load 64B top";
    format!(
        "{COPY_MODE}. At top speed with no load, AF_XDP / AF_PACKET: tool CPU per packet {}, \
         sender rate {}; loss under load at top speed: AF_XDP {}, AF_PACKET {}, fanout reader {}.",
        ratio("cpu_s_per_mpkt").map_or("–".into(), |r| format!("{r:.1}×")),
        ratio("sender_pps").map_or("–".into(), |r| format!("{r:.2}×")),
        super::pct_or_dash(super::med(rows, loaded, "poolcap af_xdp", "loss")),
        super::pct_or_dash(super::med(rows, loaded, "poolcap af_packet", "loss")),
        super::pct_or_dash(super::med(rows, loaded, "reader (--inplace)", "loss")),
    )
}

/// The figures.
pub fn figures(meta: &Meta, rows: &[Row]) -> Vec<Figure> {
    let rps = if meta.rps { "rps on" } else { "rps off" };
    let bare = |r: &Row| r.point.starts_with("no load 64B");
    let loaded = |r: &Row| r.point.starts_with("load 64B");
    let asked = |r: &Row| {
        r.traffic
            .rate
            .map(|x| x as f64)
            .or(meta.calibration.top_pps)
    };
    let mut v = vec![
        Figure::new(
            "backends-cpu.png",
            "Capture CPU per packet vs offered rate, no load",
            "offered rate (pps, sender's achieved)",
            "tool CPU s per million packets",
        )
        .with_subtitle(format!("{COPY_MODE}; 64 B, 2 queues, {FLOWS} flows; {rps}"))
        .lines(by_subject(rows, bare, offered, median("cpu_s_per_mpkt"))),
        Figure::new(
            "backends-sender.png",
            "Sender rate while each backend captures, no load",
            "asked rate (pps; the last point is top speed)",
            "sender's achieved rate (pps)",
        )
        .with_subtitle(format!(
            "{COPY_MODE}: the kernel's copy runs on the sender's CPU; 64 B, 2 queues; {rps}"
        ))
        .lines(by_subject(rows, bare, asked, median("sender_pps"))),
        Figure::new(
            "backends-loss-load.png",
            "Loss vs offered rate under an x-loop load",
            "offered rate (pps, sender's achieved)",
            "loss (%)",
        )
        .with_subtitle(format!(
            "{COPY_MODE}; one core analyses half the top speed; all threads on CPU 1; {rps}"
        ))
        .lines(by_subject(rows, loaded, offered, percent("loss"))),
    ];
    let bursts = |r: &Row| r.point.starts_with("bursts");
    if rows.iter().filter(|r| bursts(r)).count() > 3 {
        let mut f = Figure::new(
            "backends-bursts.png",
            "Loss vs burst length under load",
            "burst length (frames)",
            "loss (%)",
        )
        .with_subtitle(format!("{COPY_MODE}; R*M = 16384 cells per queue; {rps}"))
        .lines(by_subject(
            rows,
            bursts,
            |r| r.traffic.burst.map(|b| b as f64),
            percent("loss"),
        ));
        f.log_x = true;
        v.push(f);
    }
    v
}

/// The backends suite (see [`INTRO`]).
pub const DEF: super::SuiteDef = super::SuiteDef {
    calibration: super::CalibrationKind::TopSpeed { flows: FLOWS },
    queues: 2,
    figures,
    ..super::SuiteDef::new("AF_XDP (copy mode on veth) vs AF_PACKET", INTRO, plan, text)
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_backends_at_every_point() {
        let c = super::super::tests::calibration(1.4, Some(350e3));
        let q = plan(Scale::Quick, &c).points;
        assert_eq!(q.len(), 5);
        for p in &q {
            let names: Vec<&str> = p.subjects.iter().map(|s| s.name.as_str()).collect();
            assert!(names.contains(&"poolcap af_xdp") && names.contains(&"poolcap af_packet"));
            assert_eq!(p.traffic.flows, FLOWS);
        }
        let b = q.last().unwrap();
        assert_eq!(b.traffic.burst, Some(16_384));
        assert!(b.subjects[1].capture.as_ref().unwrap().load > 0);
        assert_eq!(plan(Scale::Full, &c).points.len(), 12);
    }
}
