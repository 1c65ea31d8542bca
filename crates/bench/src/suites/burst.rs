//! `burst`: bursts of R*M/2, R*M and 2 R*M frames for (M,R) = (64,256), (128,128), (256,64)
//! with R*M fixed, under an x-loop load with which one core analyses half the offered rate
//! (WireCAP Fig. 10; the capture issue's burst target).

use std::time::Duration;

use super::{spec, Calibration, Plan, Scale, Table, Text, ACCOUNTING, BUFFER_KIB, TOOL_CPU};
use crate::figure::{by_key, percent, Figure};
use crate::meta::Meta;
use crate::peer::{CaptureSpec, Tool, Traffic};
use crate::point::{Point, Subject};
use crate::report::Row;

/// For BENCHMARKS.md.
pub const INTRO: &str = "WireCAP Fig. 10 and the capture issue's burst target: bursts of \
R*M/2, R*M and 2·R*M 64-byte frames at top speed, each followed by enough silence to analyse \
it, for pools (M,R) = (64,256), (128,128), (256,64) with R*M = 16384 fixed, under an x-loop \
load with which one core analyses half the offered rate. Target: bursts of up to R*M packets \
lose nothing. tcpdump only copies frames (no analysis), so it is the papers' setting rather \
than a like-for-like comparison. Read: loss per (M,R) and burst length.";

/// R*M of the burst suite.
pub const BURST_CELLS: usize = 16384;
/// poolcap's kernel ring in the burst suite: small (16 blocks of 32 KiB), so its
/// memory is the pool, like tcpdump's is its ring.
pub const BURST_RING_KIB: u64 = 512;

/// Burst lengths at `scale`: R*M frames, and in full runs also R*M/2 and 2 R*M.
pub fn lengths(scale: Scale) -> &'static [u64] {
    const RM: u64 = BURST_CELLS as u64;
    match scale {
        Scale::Full => &[RM / 2, RM, 2 * RM],
        _ => &[RM],
    }
}

/// Bursts of `b` 64-byte frames at top speed (1, 3 or 5 of them by `scale`), each followed by
/// the silence in which one core analysing `analysis_pps` gets through 1.5 bursts.
pub fn bursts(scale: Scale, b: u64, analysis_pps: f64) -> Traffic {
    Traffic {
        burst: Some(b),
        idle: Some(Duration::from_secs_f64(1.5 * b as f64 / analysis_pps)),
        ..Traffic::top(64, scale.pick(1, 3, 5) * b)
    }
}

/// The points: bursts of R*M/2, R*M and 2 R*M frames for each (M,R).
pub fn plan(scale: Scale, c: &Calibration) -> Plan {
    let load = c.half_load();
    let analysis_pps = c.pps_at(load);
    let mut v = Vec::new();
    let ms: &[usize] = scale.pick(&[64], &[64, 128, 256], &[64, 128, 256]);
    for &m in ms {
        let r = BURST_CELLS / m;
        let rm = BURST_CELLS as u64;
        for &b in lengths(scale) {
            let poolcap = |ring| CaptureSpec {
                pool: Some((m, r)),
                load,
                ..spec(Tool::Poolcap, ring, false)
            };
            // The same pool with poolcap's default kernel ring, to tell what the pool absorbs
            // from what a larger ring absorbs.
            let default_ring =
                Subject::named(format!("poolcap -B {BUFFER_KIB}"), poolcap(BUFFER_KIB));
            // tcpdump gets the pool's memory as its ring: R*M cells of 2048 bytes.
            let tcpdump = spec(Tool::Tcpdump, rm * 2048 / 1024, false);
            v.push(Point::new(
                format!("M={m} R={r} B={b}"),
                bursts(scale, b, analysis_pps),
                vec![
                    Subject::capture(poolcap(BURST_RING_KIB)),
                    Subject::capture(tcpdump),
                    default_ring,
                ],
            ));
        }
    }
    Plan {
        points: v,
        notes: vec![format!(
            "{}; load X = {load} iterations per packet, so one core analyses about \
             {analysis_pps:.0} pps (half the offered rate); idle after a burst of B = 1.5 B / \
             {analysis_pps:.0} pps",
            c.top_speed_note(""),
        )],
    }
}

/// Summary text.
pub fn text(_meta: &Meta, rows: &[Row]) -> Text {
    Text {
        notes: vec![
            format!(
                "poolcap gets the same memory as tcpdump: its pool (R*M cells of 2048 bytes) \
                 and the smallest kernel ring ({BURST_RING_KIB} KiB); `poolcap -B {BUFFER_KIB}` \
                 is the same pool with poolcap's default ring. Its capture thread and worker \
                 share CPU {TOOL_CPU}. Sender pps includes the idle gaps."
            ),
            "tcpdump does no per-packet analysis: it only copies frames to /dev/null, while \
             poolcap runs the x-loop load on every packet on the same core as its capture \
             thread. tcpdump's ring (R*M*2048 bytes) also holds far more than R*M 64-byte \
             frames, since a TPACKET_V3 ring packs small frames while a pool cell is 2048 bytes. \
             The comparison is the papers' setting, not a like-for-like one."
                .into(),
        ],
        tables: vec![Table::results(
            rows,
            &[&ACCOUNTING[..], &["pool_peak_chunks", "cpu_s"]].concat(),
            &["loss"],
        )],
        targets: targets(rows),
        headline: headline(rows),
        ..Text::default()
    }
}

fn headline(rows: &[Row]) -> String {
    let parts: Vec<String> = rows
        .iter()
        .filter(|r| r.subject == "poolcap" && r.traffic.burst == Some(BURST_CELLS as u64))
        .map(|r| format!("{} {}", r.point, super::pct_or_dash(r.median("loss"))))
        .collect();
    let tcpdump: Vec<String> = rows
        .iter()
        .filter(|r| r.subject == "tcpdump" && r.traffic.burst == Some(BURST_CELLS as u64))
        .map(|r| super::pct_or_dash(r.median("loss")))
        .collect();
    format!(
        "Loss with bursts of R*M frames — poolcap (smallest ring): {}; tcpdump: {}.",
        parts.join(", "),
        tcpdump.join(", ")
    )
}

fn targets(rows: &[Row]) -> Vec<String> {
    let checks: Vec<super::Check> = rows
        .iter()
        .filter(|r| r.poolcap && r.capture.is_some())
        .filter(|r| r.traffic.burst.is_some_and(|b| b <= BURST_CELLS as u64))
        .filter_map(|r| {
            let loss = r.median("loss")?;
            Some(super::Check {
                point: format!("{} / {}", r.point, r.subject),
                ok: loss == 0.0,
                detail: format!("loss {}", super::pct(loss)),
            })
        })
        .collect();
    vec![super::checks_line(
        "bursts of up to R*M packets lose nothing at a load where one core analyses half \
         the offered rate (medians)",
        &checks,
    )]
}

/// Loss vs M for each subject and burst length.
pub fn figures(meta: &Meta, rows: &[Row]) -> Vec<Figure> {
    let m_of = |r: &Row| r.capture.as_ref()?.pool.map(|(m, _)| m as f64);
    // tcpdump has no pool: place it at the M of its point.
    let m_at = |r: &Row| {
        m_of(r).or_else(|| {
            rows.iter()
                .find(|x| {
                    x.point == r.point && x.capture.as_ref().is_some_and(|c| c.pool.is_some())
                })
                .and_then(m_of)
        })
    };
    let lines = by_key(
        rows,
        |r| r.capture.is_some() && r.traffic.burst.is_some(),
        |r| format!("{} B={}", r.subject, r.traffic.burst.unwrap_or(0)),
        m_at,
        percent("loss"),
    );
    let mut f = Figure::new(
        "burst-loss.png",
        "Loss vs pool shape (R*M = 16384 fixed)",
        "M (cells per chunk; R = 16384 / M)",
        "loss (%)",
    )
    .with_subtitle(format!(
        "64-byte bursts of B frames at top speed; load: one core analyses half the offered \
         rate; {}",
        if meta.rps { "rps on" } else { "rps off" }
    ))
    .lines(lines);
    f.log_x = true;
    vec![f]
}

/// The burst suite (see [`INTRO`]).
pub const DEF: super::SuiteDef = super::SuiteDef {
    calibration: super::CalibrationKind::TopSpeed { flows: 1 },
    figures,
    ..super::SuiteDef::new("Burst absorption (WireCAP Fig. 10)", INTRO, plan, text)
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_fill_the_pool() {
        let c = super::super::tests::calibration(1.0, Some(500e3));
        let quick = plan(Scale::Quick, &c).points;
        assert_eq!(quick.len(), 3);
        for p in &quick {
            assert_eq!(p.traffic.burst, Some(BURST_CELLS as u64));
            assert_eq!(p.traffic.count, 3 * BURST_CELLS as u64);
            let idle = p.traffic.idle.unwrap().as_secs_f64();
            assert!((idle - 1.5 * 16384.0 / 250e3).abs() < 1e-6);
        }
        assert_eq!(plan(Scale::Full, &c).points.len(), 9);
    }
}
