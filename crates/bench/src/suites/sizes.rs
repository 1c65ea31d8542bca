//! `sizes`: loss against frame size 72..1200 bytes (session 1), with snap lengths 96, 128 and
//! 256 bytes (session 2), with kernel buffers from 2 to 32 MB (session 3) and with both
//! (session 4), for poolcap, tcpdump and dumpcap (paper 002, "Predicting packet loss of
//! software capture on Linux").

use super::{loss_targets, rows_where, spec, Plan, Scale, Table, Text, TOOL_CPU};
use crate::figure::{by_key, by_subject, median, percent, Figure};
use crate::meta::Meta;
use crate::peer::{CaptureSpec, Tool, Traffic};
use crate::point::{Point, Subject};
use crate::report::Row;

/// For BENCHMARKS.md.
pub const INTRO: &str = "Paper 002 (predicting the packet loss of dumpcap on Linux), \
sessions 1-4: loss against frame size from 72 to 1200 bytes at top speed (session 1), with \
snap lengths of 96, 128 and 256 bytes (session 2), with the kernel capture buffer raised \
from 2 MB to 32 MB (session 3) and with both (session 4), for poolcap, tcpdump and dumpcap, \
each writing its pcap stream to /dev/null (the paper's dumpcap wrote to a RAM disk). Read: \
which sizes lose, and whether a short snap length or a bigger buffer helps. Loss on veth \
appears mostly when the kernel's receive work shares the tool's core, so `bench all` runs \
this suite with rps on (stated in its settings).";

/// Paper 002's default capture buffer: 2 MB.
pub const DEFAULT_KIB: u64 = 2048;
/// The tools.
const TOOLS: [Tool; 3] = [Tool::Poolcap, Tool::Tcpdump, Tool::Dumpcap];

/// A tool writing to /dev/null with `buffer_kib` and `snaplen`.
fn tool(t: Tool, buffer_kib: u64, snaplen: Option<u32>) -> Subject {
    Subject::capture(CaptureSpec {
        dev_null: t == Tool::Poolcap,
        snaplen,
        ..spec(t, buffer_kib, false)
    })
}

fn subjects(buffer_kib: u64, snaplen: Option<u32>, scale: Scale) -> Vec<Subject> {
    let tools: &[Tool] = if scale == Scale::Smoke {
        &TOOLS[..2]
    } else {
        &TOOLS
    };
    tools
        .iter()
        .map(|&t| tool(t, buffer_kib, snaplen))
        .collect()
}

/// The coarse grid of sizes for sessions 2-4 in full runs.
const GRID: [usize; 9] = [72, 128, 200, 256, 352, 512, 768, 1024, 1200];

/// The points.
pub fn plan(scale: Scale) -> Plan {
    let count = scale.pick(20_000, 300_000, 1_000_000);
    let top = |size| Traffic::top(size, count);
    let s1: Vec<usize> = match scale {
        Scale::Smoke => vec![200],
        Scale::Quick => vec![72, 200, 600, 1200],
        Scale::Full => (72..=1200).step_by(8).collect(),
    };
    let mut v: Vec<Point> = s1
        .iter()
        .map(|&s| {
            Point::new(
                format!("S1 {s}B"),
                top(s),
                subjects(DEFAULT_KIB, None, scale),
            )
        })
        .collect();
    if scale == Scale::Smoke {
        return Plan {
            points: v,
            notes: Vec::new(),
        };
    }
    let (s2, s3, buffers): (Vec<usize>, Vec<usize>, &[u64]) = match scale {
        Scale::Full => (GRID.to_vec(), GRID.to_vec(), &[4, 8, 16, 32]),
        _ => (vec![1200], vec![72, 200, 600, 1200], &[32]),
    };
    for &s in &s2 {
        for snap in [96u32, 128, 256] {
            v.push(Point::new(
                format!("S2 {s}B s{snap}"),
                top(s),
                subjects(DEFAULT_KIB, Some(snap), scale),
            ));
        }
    }
    for &s in &s3 {
        for &b in buffers {
            v.push(Point::new(
                format!("S3 {s}B B{b}M"),
                top(s),
                subjects(b * 1024, None, scale),
            ));
        }
    }
    if scale == Scale::Full {
        for &s in &GRID {
            v.push(Point::new(
                format!("S4 {s}B s96 B32M"),
                top(s),
                subjects(32 * 1024, Some(96), scale),
            ));
        }
    }
    Plan {
        points: v,
        notes: Vec::new(),
    }
}

/// Summary text.
pub fn text(meta: &Meta, rows: &[Row]) -> Text {
    let cols = [
        "offered",
        "sender_pps",
        "captured",
        "loss",
        "cpu_s_per_mpkt",
    ];
    let ratios = ["loss", "cpu_s_per_mpkt"];
    let mut tables = Vec::new();
    for (prefix, title) in [
        (
            "S1 ",
            "Session 1: loss vs frame size (2 MB buffer, full frames)",
        ),
        (
            "S2 ",
            "Session 2: snap length 96 / 128 / 256 bytes (2 MB buffer)",
        ),
        ("S3 ", "Session 3: kernel buffer (full frames)"),
        ("S4 ", "Session 4: snap length 96 and a 32 MB buffer"),
    ] {
        let r = rows_where(rows, |r| r.point.starts_with(prefix));
        if !r.is_empty() {
            tables.push(Table::new(title, r, &cols, &ratios));
        }
    }
    Text {
        settings: vec![
            "every tool writes its pcap stream to /dev/null (`tcpdump -w /dev/null`, `dumpcap -w \
             /dev/null`, `poolcap -w /dev/null`): the same per-packet work of formatting and \
             writing records; poolcap gets no x-loop load, so this suite measures the capture \
             path itself"
                .into(),
            format!(
                "kernel buffer: -B {DEFAULT_KIB} KiB (paper 002's default of 2 MB) unless the \
                 point says BnM; dumpcap's -B is in MiB. The paper also raised net.core sysctls \
                 (rmem_max, netdev_budget); a TPACKET ring's size is set by -B and does not \
                 depend on them, so they are left at this machine's values"
            ),
            format!(
                "rps {}: {}",
                if meta.rps { "on" } else { "off" },
                if meta.rps {
                    format!(
                        "the kernel's receive work (including copying each frame into the \
                         capture ring) runs on CPU {TOOL_CPU}, the tool's, as on a NIC whose \
                         interrupts go to the capture core"
                    )
                } else {
                    "the kernel's receive work runs on the sender's CPU; rerun with --rps for \
                     the setting of paper 002"
                        .to_owned()
                }
            ),
        ],
        tables,
        targets: loss_targets(rows),
        headline: headline(rows),
        ..Text::default()
    }
}

fn headline(rows: &[Row]) -> String {
    let worst = |t: Tool, prefix: &str| {
        rows.iter()
            .filter(|r| r.point.starts_with(prefix))
            .filter(|r| r.capture.as_ref().is_some_and(|c| c.tool == t))
            .filter_map(|r| Some((r.median("loss")?, r.traffic.size)))
            .max_by(|a, b| a.0.total_cmp(&b.0))
    };
    let part = |prefix: &str| {
        TOOLS
            .iter()
            .map(|&t| match worst(t, prefix) {
                Some((l, size)) if l > 0.0 => {
                    format!("{} {} (at {size} B)", t.name(), super::pct_or_dash(Some(l)))
                }
                Some(_) => format!("{} 0", t.name()),
                None => format!("{} –", t.name()),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut s = format!("Worst loss over frame sizes (session 1): {}.", part("S1 "));
    if rows.iter().any(|r| r.point.starts_with("S3 ")) {
        s.push_str(&format!(
            " With a bigger buffer (session 3): {}.",
            part("S3 ")
        ));
    }
    s
}

fn size_x(r: &Row) -> Option<f64> {
    Some(r.traffic.size as f64)
}

/// The figures.
pub fn figures(meta: &Meta, rows: &[Row]) -> Vec<Figure> {
    let rps = if meta.rps { "rps on" } else { "rps off" };
    let s1 = |r: &Row| r.point.starts_with("S1 ");
    let mut v = vec![
        Figure::new(
            "sizes-s1-loss.png",
            "Session 1: loss vs frame size",
            "frame size (bytes)",
            "loss (%)",
        )
        .with_subtitle(format!(
            "top speed, 2 MB buffer, full frames, -w /dev/null; {rps}"
        ))
        .lines(by_subject(rows, s1, size_x, percent("loss"))),
        Figure::new(
            "sizes-s1-cpu.png",
            "Session 1: tool CPU per packet vs frame size",
            "frame size (bytes)",
            "tool CPU s per million packets",
        )
        .with_subtitle(format!(
            "the tool process only (kernel receive work is {}); {rps}",
            if meta.rps {
                "on the tool's CPU but not in its time"
            } else {
                "on the sender's CPU"
            }
        ))
        .lines(by_subject(rows, s1, size_x, median("cpu_s_per_mpkt"))),
    ];
    let s2 = rows_where(rows, |r| r.point.starts_with("S2 "));
    let snap = |r: &Row| r.capture.as_ref()?.snaplen.map(f64::from);
    let s2_sizes: Vec<usize> = {
        let mut s: Vec<usize> = s2.iter().map(|r| r.traffic.size).collect();
        s.sort_unstable();
        s.dedup();
        s
    };
    if s2_sizes.len() == 1 {
        // One size: loss against snap length, the full frame as the last point.
        let size = s2_sizes[0];
        let mut lines = by_subject(&s2, |_| true, snap, percent("loss"));
        for l in &mut lines {
            if let Some(full) = rows
                .iter()
                .find(|r| s1(r) && r.traffic.size == size && r.subject == l.name)
                .and_then(|r| r.median("loss"))
            {
                l.points.push((size as f64, full * 100.0));
            }
        }
        let mut f = Figure::new(
            "sizes-snaplen.png",
            format!("Session 2: loss vs snap length, {size}-byte frames"),
            "snap length (bytes; the last point is the full frame)",
            "loss (%)",
        )
        .with_subtitle(format!("top speed, 2 MB buffer; {rps}"))
        .lines(lines);
        f.log_x = true;
        v.push(f);
    } else if !s2.is_empty() {
        for t in TOOLS {
            let keep = |r: &Row| r.capture.as_ref().is_some_and(|c| c.tool == t);
            let mut lines = by_key(
                &s2,
                keep,
                |r| format!("-s {}", snap(r).unwrap_or(0.0)),
                size_x,
                percent("loss"),
            );
            lines.extend(by_key(
                rows,
                |r| s1(r) && keep(r) && GRID.contains(&r.traffic.size),
                |_| "full frames".into(),
                size_x,
                percent("loss"),
            ));
            v.push(
                Figure::new(
                    format!("sizes-snaplen-{}.png", t.name()),
                    format!("Session 2: {} loss vs frame size per snap length", t.name()),
                    "frame size (bytes)",
                    "loss (%)",
                )
                .with_subtitle(format!("top speed, 2 MB buffer; {rps}"))
                .lines(lines),
            );
        }
    }
    let buf = |r: &Row| {
        let c = r.capture.as_ref()?;
        (c.snaplen.is_none()).then_some(c.buffer_kib / 1024)
    };
    let s13 = |r: &Row| r.point.starts_with("S1 ") || r.point.starts_with("S3 ");
    let s3_sizes: Vec<usize> = rows
        .iter()
        .filter(|r| r.point.starts_with("S3 "))
        .map(|r| r.traffic.size)
        .collect();
    let on_s3 = |r: &Row| s13(r) && s3_sizes.contains(&r.traffic.size);
    if meta.scale != Scale::Full && !s3_sizes.is_empty() {
        v.push(
            Figure::new(
                "sizes-buffer.png",
                "Session 3: loss vs frame size per kernel buffer",
                "frame size (bytes)",
                "loss (%)",
            )
            .with_subtitle(format!("top speed, full frames; {rps}"))
            .lines(by_key(
                rows,
                on_s3,
                |r| format!("{} -B {}M", r.subject, buf(r).unwrap_or(0)),
                size_x,
                percent("loss"),
            )),
        );
    } else if !s3_sizes.is_empty() {
        for t in TOOLS {
            let keep = |r: &Row| on_s3(r) && r.capture.as_ref().is_some_and(|c| c.tool == t);
            v.push(
                Figure::new(
                    format!("sizes-buffer-{}.png", t.name()),
                    format!(
                        "Session 3: {} loss vs frame size per kernel buffer",
                        t.name()
                    ),
                    "frame size (bytes)",
                    "loss (%)",
                )
                .with_subtitle(format!("top speed, full frames; {rps}"))
                .lines(by_key(
                    rows,
                    keep,
                    |r| format!("-B {}M", buf(r).unwrap_or(0)),
                    size_x,
                    percent("loss"),
                )),
            );
        }
        v.push(
            Figure::new(
                "sizes-s4.png",
                "Session 4: default vs snap length 96 and a 32 MB buffer",
                "frame size (bytes)",
                "loss (%)",
            )
            .with_subtitle(format!("top speed; {rps}"))
            .lines(by_key(
                rows,
                |r| (s1(r) && GRID.contains(&r.traffic.size)) || r.point.starts_with("S4 "),
                |r| {
                    let tuned = r.point.starts_with("S4 ");
                    format!(
                        "{} {}",
                        r.subject,
                        if tuned { "-s 96 -B 32M" } else { "default" }
                    )
                },
                size_x,
                percent("loss"),
            )),
        );
    }
    v
}

/// The sizes suite (see [`INTRO`]).
pub const DEF: super::SuiteDef = super::SuiteDef {
    figures,
    ..super::SuiteDef::new(
        "Frame size, snap length, buffer size (paper 002, sessions 1-4)",
        INTRO,
        |scale, _| plan(scale),
        text,
    )
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_cover_sizes_snaplens_and_buffers() {
        let q = plan(Scale::Quick).points;
        assert_eq!(q.iter().filter(|p| p.id.starts_with("S1 ")).count(), 4);
        assert_eq!(q.iter().filter(|p| p.id.starts_with("S2 ")).count(), 3);
        assert_eq!(q.iter().filter(|p| p.id.starts_with("S3 ")).count(), 4);
        assert!(q.iter().all(|p| p.subjects.len() == 3));
        let f = plan(Scale::Full).points;
        assert_eq!(f.iter().filter(|p| p.id.starts_with("S1 ")).count(), 142);
        assert!(f.iter().any(|p| p.id == "S4 1200B s96 B32M"));
        let pc = q[0].subjects[0].capture.as_ref().unwrap();
        assert!(pc.dev_null && pc.buffer_kib == DEFAULT_KIB);
        let s2 = q.iter().find(|p| p.id == "S2 1200B s96").unwrap();
        assert_eq!(s2.subjects[2].capture.as_ref().unwrap().snaplen, Some(96));
    }
}
