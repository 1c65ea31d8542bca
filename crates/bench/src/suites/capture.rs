//! `capture`: poolcap against tcpdump, netsniff-ng and dumpcap on one queue, counting and
//! writing, 64 and 1514 bytes: loss, CPU per packet, sender rate (the capture issue).

use super::{checks_line, loss_targets, points_of, spec, Check, Plan, Scale, Table, Text};
use super::{ACCOUNTING, BUFFER_KIB};
use crate::meta::Meta;
use crate::peer::{Tool, Traffic};
use crate::point::{Point, Subject};
use crate::report::Row;

/// For BENCHMARKS.md.
pub const INTRO: &str = "The capture issue's head-to-head: poolcap against tcpdump, \
netsniff-ng and dumpcap on one queue with no analysis load, counting (to /dev/null for the \
peers) and writing a pcap file, 64 and 1514-byte frames at top speed and at 100k pps (a full \
run adds 300k pps). On veth the kernel's receive work runs on the sender's CPU, so a capture \
tool's kernel cost shows as a lower sender rate. Read: loss (all zero is expected without load), CPU seconds per million packets (the \
tool's own CPU), and sender pps while each tool captures.";

/// The points: every tool at every size, speed and output.
pub fn plan(scale: Scale) -> Plan {
    let rates: &[Option<u64>] = scale.pick(
        &[None],
        &[None, Some(100_000)],
        &[None, Some(100_000), Some(300_000)],
    );
    let sizes: &[usize] = scale.pick(&[64], &[64, 1514], &[64, 1514]);
    let mut v = Vec::new();
    for &size in sizes {
        for &rate in rates {
            for write in [false, true] {
                let count = match (rate, size, scale) {
                    (_, _, Scale::Smoke) => 20_000,
                    (Some(r), _, _) => 2 * r,
                    (None, 64, Scale::Quick) => 500_000,
                    (None, 64, _) => 1_000_000,
                    (None, _, Scale::Quick) => 200_000,
                    (None, _, _) => 500_000,
                };
                let speed = rate.map_or("top".to_owned(), |r| format!("{}k", r / 1000));
                v.push(Point::new(
                    format!("{size}B {speed} {}", if write { "write" } else { "count" }),
                    Traffic {
                        rate,
                        ..Traffic::top(size, count)
                    },
                    Tool::ALL
                        .iter()
                        .map(|&t| Subject::capture(spec(t, BUFFER_KIB, write)))
                        .collect(),
                ));
            }
        }
    }
    Plan {
        points: v,
        notes: Vec::new(),
    }
}

/// Summary text.
pub fn text(_meta: &Meta, rows: &[Row]) -> Text {
    Text {
        settings: vec![format!(
            "every tool gets a {BUFFER_KIB} KiB kernel buffer (-B / -S); files are pcap \
             (microseconds) under /var/tmp"
        )],
        tables: vec![Table::results(
            rows,
            &[&ACCOUNTING[..], &["cpu_s", "cpu_s_per_mpkt", "wall_s"]].concat(),
            &["loss", "cpu_s_per_mpkt", "sender_pps"],
        )],
        targets: targets(rows),
        headline: headline(rows),
        ..Text::default()
    }
}

fn headline(rows: &[Row]) -> String {
    let (only, all, n) = super::zero_loss_counts(rows);
    format!(
        "No tool lost anything at {all} of {n} points; poolcap alone lost packets at {only}. \
         poolcap / best peer: CPU per packet {}, sender rate {}.",
        super::range_text(super::ratio_range(rows, "cpu_s_per_mpkt")),
        super::range_text(super::ratio_range(rows, "sender_pps"))
    )
}

fn targets(rows: &[Row]) -> Vec<String> {
    let (mut cpu, mut rate) = (vec![], vec![]);
    for p in points_of(rows) {
        let at = |s: &str, k: &str| {
            rows.iter()
                .find(|r| r.point == p && r.subject == s)
                .and_then(|r| r.median(k))
        };
        let check = |ok, detail| Check {
            point: p.to_owned(),
            ok,
            detail,
        };
        let key = "cpu_s_per_mpkt";
        if let (Some(a), Some(n)) = (at("poolcap", key), at("netsniff-ng", key)) {
            cpu.push(check(a <= n, format!("{a:.3} vs {n:.3} s/Mpkt")));
        }
        if let (Some(a), Some(d)) = (at("poolcap", "sender_pps"), at("tcpdump", "sender_pps")) {
            let detail = format!("{:.0}k vs {:.0}k pps = {:.2}", a / 1e3, d / 1e3, a / d);
            rate.push(check(a >= 0.95 * d, detail));
        }
    }
    let mut t = loss_targets(rows);
    t.push(checks_line(
        "poolcap CPU per packet ≤ netsniff-ng's (medians)",
        &cpu,
    ));
    t.push(checks_line(
        "sender rate while poolcap captures ≥ 0.95 × while tcpdump captures (medians)",
        &rate,
    ));
    t
}

/// The capture suite (see [`INTRO`]).
pub const DEF: super::SuiteDef = super::SuiteDef::new(
    "Capture without load: loss, CPU, sender rate",
    INTRO,
    |scale, _| plan(scale),
    text,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_is_smaller_and_every_tool_is_measured() {
        assert!(plan(Scale::Quick).points.len() < plan(Scale::Full).points.len());
        assert_eq!(plan(Scale::Quick).points.len(), 8);
        assert!(plan(Scale::Full)
            .points
            .iter()
            .all(|p| p.subjects.len() == 4 && p.subjects[0].is_poolcap()));
    }
}
