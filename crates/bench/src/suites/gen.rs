//! `gen`: poolcap gen against trafgen at top speed, then paced runs captured with nanosecond
//! timestamps to check the rate and the spacing on the wire.

use super::{spec, verdict, Plan, Scale, Table, Text, BUFFER_KIB};
use crate::meta::Meta;
use crate::peer::{CaptureSpec, Generator, Tool, Traffic};
use crate::point::{Point, Subject};
use crate::report::Row;

/// For BENCHMARKS.md.
pub const INTRO: &str = "The generator every other suite relies on: poolcap gen against \
netsniff-ng's trafgen at top speed (64-byte frames, one core), and the accuracy of paced \
rates as seen on the wire (capture timestamps). Read: sender pps (higher is better), rate \
error (within ±2% is the target), the longest back-to-back run (a paced generator should \
never burst beyond one send batch) and the sender's CPU (a paced generator sleeps between \
batches: at most a quarter of a core at 50k pps).";

/// The points: generators alone at top speed, then paced runs captured for spacing.
pub fn plan(scale: Scale) -> Plan {
    let mut v = vec![Point::new(
        "64B top speed",
        Traffic::top(64, scale.pick(50_000, 500_000, 2_000_000)),
        vec![
            Subject::sender(Generator::Poolcap),
            Subject::sender(Generator::Trafgen),
        ],
    )];
    let rates: &[u64] = match scale {
        Scale::Smoke => &[],
        _ => &[50_000, 100_000, 300_000],
    };
    for &rate in rates {
        let capture = CaptureSpec {
            pcap_ns: true,
            ..spec(Tool::Poolcap, BUFFER_KIB, true)
        };
        v.push(Point {
            spacing: true,
            ..Point::new(
                format!("64B {}k pps", rate / 1000),
                Traffic {
                    rate: Some(rate),
                    ..Traffic::top(64, 2 * rate)
                },
                vec![Subject::named("poolcap gen", capture)],
            )
        });
    }
    Plan {
        points: v,
        notes: Vec::new(),
    }
}

/// Summary text.
pub fn text(meta: &Meta, rows: &[Row]) -> Text {
    let mut notes = Vec::new();
    if meta.rps {
        notes.push(
            "with rps the kernel timestamps frames on the tool's CPU when it drains its backlog, \
             so the spacing columns show the receiver's batching, not the generator's"
                .into(),
        );
    }
    Text {
        notes,
        tables: vec![Table::results(
            rows,
            &[
                "offered",
                "sender_pps",
                "rate_error",
                "wire_rate_error",
                "max_back_to_back",
                "p5_gap_ns",
                "batch",
                "sender_cpu",
                "loss",
            ],
            &["sender_pps"],
        )],
        targets: targets(rows),
        headline: headline(rows),
        ..Text::default()
    }
}

fn headline(rows: &[Row]) -> String {
    let top = |p: &str| p == "64B top speed";
    let p = super::med(rows, top, "poolcap gen", "sender_pps");
    let t = super::med(rows, top, "trafgen", "sender_pps");
    let mut s = format!(
        "Top speed, 64 B: poolcap gen {} pps, trafgen {}",
        super::kpps(p),
        super::kpps(t)
    );
    if let (Some(p), Some(t)) = (p, t) {
        s.push_str(&format!(" ({:.2}×)", p / t));
    }
    let errs: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            Some(format!(
                "{} {:+.1}%",
                r.point,
                r.median("wire_rate_error")? * 100.0
            ))
        })
        .collect();
    if !errs.is_empty() {
        s.push_str(&format!("; rate error on the wire: {}", errs.join(", ")));
    }
    s + "."
}

fn targets(rows: &[Row]) -> Vec<String> {
    let mut t = Vec::new();
    let med = |point: &str, subject: &str, key: &str| {
        rows.iter()
            .find(|r| r.point == point && r.subject == subject && r.capture.is_none())
            .and_then(|r| r.median(key))
    };
    let top = "64B top speed";
    if let (Some(p), Some(g)) = (
        med(top, "poolcap gen", "sender_pps"),
        med(top, "trafgen", "sender_pps"),
    ) {
        t.push(format!(
            "top speed, 64 B: poolcap gen / trafgen = {:.0} / {:.0} pps = {:.2} (target ≥ 0.9): {}",
            p,
            g,
            p / g,
            verdict(p / g >= 0.9)
        ));
    }
    for r in rows.iter().filter(|r| r.traffic.rate.is_some()) {
        let (Some(e), Some(w)) = (r.median("rate_error"), r.median("wire_rate_error")) else {
            continue;
        };
        t.push(format!(
            "{}: rate error {:+.2}% (generator's count) / {:+.2}% (capture timestamps) \
             (target within ±2%): {}",
            r.point,
            e * 100.0,
            w * 100.0,
            verdict(e.abs() <= 0.02 && w.abs() <= 0.02)
        ));
        if let Some(cpu) = r.median("sender_cpu").filter(|_| r.point == "64B 50k pps") {
            t.push(format!(
                "{}: the paced generator used {:.0}% of a core, the frames' receive work on \
                 veth included (target ≤ 25%): {}",
                r.point,
                cpu * 100.0,
                verdict(cpu <= 0.25)
            ));
        }
        if let (Some(run), Some(batch)) = (r.get("max_back_to_back"), r.median("batch")) {
            t.push(format!(
                "{}: longest back-to-back run {:.0} frames (median; {:.0}–{:.0}) for a \
                 generator batch of {batch:.0}: {}",
                r.point,
                run.median,
                run.min,
                run.max,
                if run.max <= batch {
                    "no burst beyond one batch"
                } else {
                    "bursts longer than a batch"
                }
            ));
        }
    }
    t
}

/// The gen suite (see [`INTRO`]).
pub const DEF: super::SuiteDef =
    super::SuiteDef::new("Generator accuracy", INTRO, |scale, _| plan(scale), text);
