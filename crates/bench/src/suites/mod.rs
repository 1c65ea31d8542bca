//! The suites: which points each one measures, how many frames, which figures it draws and
//! which targets of the issues its summary checks. [`super::manager`] runs them; one module
//! per suite:
//!
//! | suite | reproduces |
//! |---|---|
//! | [`gen`] | generator accuracy (poolcap gen against trafgen) |
//! | [`capture`] | the capture issue: loss, CPU per packet, sender rate against tcpdump, netsniff-ng, dumpcap |
//! | [`burst`] | WireCAP Fig. 10: loss vs burst length for (M,R) with R*M fixed |
//! | [`rates`] | Zabala et al. Figs 6-9: capture and analysis throughput vs offered rate |
//! | [`imbalance`] | WireCAP Figs 11-12: basic vs buddy offloading under skew; congestion control |
//! | [`sizes`] | paper 002 sessions 1-4: loss vs frame size, snaplen, kernel buffer |
//! | [`appload`] | Braun et al. Figs 10-11: loss vs compression level |
//! | [`wait`] | Braun et al. 4.3: syscalls per packet of the wait strategies |
//! | [`backends`] | AF_XDP (copy mode on veth) against AF_PACKET |
//! | [`disk`] | writing to disk against tcpdump, dumpcap, netsniff-ng; sustained rate |
//! | [`soak`] | a long rotated capture at 80% of top rate; growth of memory, files, threads |
//! | [`predict`] | `poolcap predict` against paper 002's sessions, bursts and loads |
//! | [`probe`] | Zabala et al. Figs 6-9 with real analysis: probe rules vs pmacctd and tshark |
//! | [`forward`] | WireCAP Figs 13-14: forwarding rate, loss, order and latency through the probe |
//! | [`store`] | the packet store: `--store` against `-w`, index size, queries against the scan |
//!
//! Every suite has three scales: `Smoke` (one tiny point, for the root test), `Quick` (a few
//! minutes) and `Full`.

use super::figure::Figure;
use super::meta::Meta;
use super::peer::{CaptureSpec, Tool, Traffic};
pub use super::point::{ns_per_iteration, BUFFER_KIB, QUIET_BELOW};
use super::point::{Point, GEN_CPU, TOOL_CPU};
use super::report::{Row, Versus};
pub use super::setup::{Calibration, CalibrationKind, Scale, Suite, ASSUMED_TOP_PPS};

pub mod appload;
pub mod backends;
pub mod burst;
pub mod capture;
pub mod disk;
pub mod export;
pub mod forward;
pub mod gen;
pub mod imbalance;
pub mod predict;
pub mod probe;
pub mod rates;
pub mod sizes;
pub mod soak;
pub mod store;
pub mod wait;

impl Suite {
    /// Its implementation: the one place a suite's behaviour is looked up by its name.
    pub fn def(self) -> &'static SuiteDef {
        match self {
            Suite::Gen => &gen::DEF,
            Suite::Capture => &capture::DEF,
            Suite::Burst => &burst::DEF,
            Suite::Rates => &rates::DEF,
            Suite::Imbalance => &imbalance::DEF,
            Suite::Sizes => &sizes::DEF,
            Suite::Appload => &appload::DEF,
            Suite::Wait => &wait::DEF,
            Suite::Backends => &backends::DEF,
            Suite::Disk => &disk::DEF,
            Suite::Soak => &soak::DEF,
            Suite::Predict => &predict::DEF,
            Suite::Probe => &probe::DEF,
            Suite::Forward => &forward::DEF,
            Suite::Store => &store::DEF,
        }
    }
}

/// What a suite is: its BENCHMARKS.md heading and introduction, its lab, what it
/// calibrates, and how it plans its points and reports a run. Each suite's file has one,
/// `DEF`; [`Suite::def`] looks it up. The manager and the formatters call it; a suite
/// never calls them back.
pub struct SuiteDef {
    /// Its BENCHMARKS.md heading.
    pub title: &'static str,
    /// The paper figure or issue it reproduces, and what to read from it (for BENCHMARKS.md).
    pub intro: &'static str,
    /// Receive queues of its lab.
    pub queues: u16,
    /// Hosts of its lab: 3 (sender, probe, sink) for forwarding, else 2.
    pub hosts: u8,
    /// What its calibration measures.
    pub calibration: CalibrationKind,
    /// Its points at a scale, given the calibration.
    pub plan: fn(Scale, &Calibration) -> Plan,
    /// The summary text of a finished run.
    pub text: fn(&Meta, &[Row]) -> Text,
    /// The figures of a finished run.
    pub figures: fn(&Meta, &[Row]) -> Vec<Figure>,
}

impl SuiteDef {
    /// A suite on one queue and two hosts, calibrating the x-loop, without figures.
    pub const fn new(
        title: &'static str,
        intro: &'static str,
        plan: fn(Scale, &Calibration) -> Plan,
        text: fn(&Meta, &[Row]) -> Text,
    ) -> Self {
        Self {
            title,
            intro,
            queues: 1,
            hosts: 2,
            calibration: CalibrationKind::Iterations,
            plan,
            text,
            figures: |_, _| Vec::new(),
        }
    }
}

/// `--cpus` of a 2-queue poolcap whose threads use both CPUs: capture thread and worker of
/// queue 0 on CPU 1, those of queue 1 on CPU 0 (shared with the generator).
pub const CPUS_SPLIT: &str = "1,0,1,0";
/// `--cpus` of the 2-queue fanout reader with the same placement.
pub const CPUS_SPLIT_READER: &str = "1,0";
/// `taskset` of a tool that may use both CPUs.
pub const BOTH_CPUS: &str = "0,1";

/// `tool` with `buffer_kib`, writing a file or not.
pub fn spec(tool: Tool, buffer_kib: u64, write: bool) -> CaptureSpec {
    CaptureSpec {
        write,
        ..CaptureSpec::new(tool, buffer_kib)
    }
}

/// `rate` pps of `size`-byte frames for `seconds` over `flows` flows, in batches of
/// rate/1000 frames: one send call per millisecond, so the generator sleeps between batches
/// instead of spinning (see `wait_until` in the generator) and leaves its CPU to others.
pub fn paced_quietly(size: usize, rate: u64, seconds: f64, flows: usize) -> Traffic {
    Traffic {
        rate: Some(rate),
        flows,
        batch: Some((rate / 1000).max(4) as usize),
        ..Traffic::top(size, (rate as f64 * seconds) as u64)
    }
}

/// `1000` → `1k`, `25000` → `25k`, `300000` → `300k`.
pub fn k(n: u64) -> String {
    if n >= 1000 && n.is_multiple_of(1000) {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

/// Points, and notes on how they were chosen.
pub struct Plan {
    /// The points, in run order.
    pub points: Vec<Point>,
    /// Notes for the summary (calibration, choices).
    pub notes: Vec<String>,
}

/// The points of `suite` at `scale`.
pub fn plan(suite: Suite, scale: Scale, cal: &Calibration) -> Plan {
    (suite.def().plan)(scale, cal)
}

/// One results table.
pub struct Table {
    /// Heading.
    pub title: String,
    /// Its rows.
    pub rows: Vec<Row>,
    /// Metric columns.
    pub columns: Vec<&'static str>,
    /// Metrics shown as poolcap / best peer under it.
    pub ratios: Vec<&'static str>,
}

impl Table {
    /// A table of `rows`.
    pub fn new(
        title: impl Into<String>,
        rows: Vec<Row>,
        columns: &[&'static str],
        ratios: &[&'static str],
    ) -> Table {
        Table {
            title: title.into(),
            rows,
            columns: columns.to_vec(),
            ratios: ratios.to_vec(),
        }
    }

    /// The table of every row of a suite, titled `Results`.
    pub fn results(rows: &[Row], columns: &[&'static str], ratios: &[&'static str]) -> Table {
        Table::new("Results", rows.to_vec(), columns, ratios)
    }
}

/// The columns of the accounting equation: frames asked for and sent, and what became of them.
pub const ACCOUNTING: [&str; 5] = ["offered", "sender_pps", "captured", "dropped", "loss"];

/// What a suite's summary says besides the common settings.
#[derive(Default)]
pub struct Text {
    /// Suite settings, one bullet each.
    pub settings: Vec<String>,
    /// Notes, one bullet each.
    pub notes: Vec<String>,
    /// Results tables.
    pub tables: Vec<Table>,
    /// Further markdown sections: (heading, body).
    pub sections: Vec<(String, String)>,
    /// Target checks, one bullet each.
    pub targets: Vec<String>,
    /// One or two sentences of what the run shows, computed from its medians.
    pub headline: String,
}

/// The median of `key` for `subject` at the first point passing `at`.
pub fn med(rows: &[Row], at: impl Fn(&str) -> bool, subject: &str, key: &str) -> Option<f64> {
    rows.iter()
        .find(|r| at(&r.point) && r.subject == subject)
        .and_then(|r| r.median(key))
}

/// [`pct`], or `–`.
pub fn pct_or_dash(x: Option<f64>) -> String {
    x.map_or_else(|| "–".into(), pct)
}

/// `123k` or `–`.
pub fn kpps(x: Option<f64>) -> String {
    x.map_or("–".into(), |x| format!("{:.0}k", x / 1e3))
}

/// The smallest and largest finite ratio poolcap / best peer on `key` over every poolcap row
/// of `rows` that has a peer.
pub fn ratio_range(rows: &[Row], key: &str) -> Option<(f64, f64)> {
    let v: Vec<f64> = rows
        .iter()
        .filter(|r| r.poolcap && r.capture.is_some())
        .filter_map(|r| {
            let v = Versus::of(rows, r, key)?;
            let (_, b) = v.best?;
            (b > 0.0).then(|| v.poolcap / b)
        })
        .collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    lo.is_finite().then_some((lo, hi))
}

/// `0.80–1.20×` or `–`.
pub fn range_text(r: Option<(f64, f64)>) -> String {
    match r {
        None => "–".into(),
        Some((lo, hi)) if (hi - lo).abs() < 0.005 => format!("{lo:.2}×"),
        Some((lo, hi)) => format!("{lo:.2}–{hi:.2}×"),
    }
}

/// Points where poolcap lost packets while some peer lost none, and where every tool lost
/// nothing: `(poolcap only, all zero, points compared)`.
pub fn zero_loss_counts(rows: &[Row]) -> (usize, usize, usize) {
    let (mut only, mut all, mut n) = (0, 0, 0);
    for r in rows.iter().filter(|r| r.poolcap && r.capture.is_some()) {
        if let Some(Versus {
            poolcap,
            best: Some((_, b)),
        }) = Versus::of(rows, r, "loss")
        {
            n += 1;
            if b == 0.0 && poolcap > 0.0 {
                only += 1;
            }
            if b == 0.0 && poolcap == 0.0 {
                all += 1;
            }
        }
    }
    (only, all, n)
}

/// The summary text of a finished run.
pub fn text(meta: &Meta, rows: &[Row]) -> Text {
    (meta.suite.def().text)(meta, rows)
}

/// The figures of a finished run.
pub fn figures(meta: &Meta, rows: &[Row]) -> Vec<Figure> {
    (meta.suite.def().figures)(meta, rows)
}

/// The pinning sentence every summary starts its settings with.
pub fn pinning(meta: &Meta) -> String {
    format!(
        "lab: veth {} → {}, {} queue{}; generator pinned to CPU {GEN_CPU}, tool under test to \
         CPU {TOOL_CPU} (`taskset`) unless a subject says otherwise",
        meta.sender_iface,
        meta.probe_iface,
        meta.queues,
        if meta.queues == 1 { "" } else { "s" }
    )
}

/// Rows passing `keep`.
pub fn rows_where(rows: &[Row], keep: impl Fn(&Row) -> bool) -> Vec<Row> {
    rows.iter().filter(|r| keep(r)).cloned().collect()
}

/// PASS or FAIL.
pub fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "FAIL"
    }
}

/// Point ids in order of first appearance.
pub fn points_of(rows: &[Row]) -> Vec<&str> {
    let mut v: Vec<&str> = Vec::new();
    for r in rows {
        if !v.contains(&r.point.as_str()) {
            v.push(&r.point);
        }
    }
    v
}

/// One target checked at one point.
pub struct Check {
    /// Where.
    pub point: String,
    /// Whether it held.
    pub ok: bool,
    /// The numbers.
    pub detail: String,
}

/// `NAME: k of n points — point: detail PASS; ...`.
pub fn checks_line(name: &str, checks: &[Check]) -> String {
    let passed = checks.iter().filter(|c| c.ok).count();
    if checks.is_empty() {
        return format!("{name}: not measured");
    }
    let detail: Vec<String> = checks
        .iter()
        .map(|c| format!("{}: {} {}", c.point, c.detail, verdict(c.ok)))
        .collect();
    format!(
        "{name}: {passed} of {} points — {}",
        checks.len(),
        detail.join("; ")
    )
}

pub use poolcap_measure::report::pct;

/// The capture issue's loss targets at every point where poolcap and a peer were measured:
/// zero wherever a peer's is zero, never above the best peer's (medians).
pub fn loss_targets(rows: &[Row]) -> Vec<String> {
    let (mut zero, mut best) = (vec![], vec![]);
    for row in rows.iter().filter(|r| r.poolcap && r.capture.is_some()) {
        let point = if rows_where(rows, |r| r.point == row.point && r.poolcap).len() > 1 {
            format!("{} / {}", row.point, row.subject)
        } else {
            row.point.clone()
        };
        if let Some(Versus {
            poolcap,
            best: Some((name, b)),
        }) = Versus::of(rows, row, "loss")
        {
            if b == 0.0 {
                zero.push(Check {
                    point: point.clone(),
                    ok: poolcap == 0.0,
                    detail: format!("poolcap {}", pct(poolcap)),
                });
            }
            best.push(Check {
                point,
                ok: poolcap <= b,
                detail: format!("poolcap {} vs {name} {}", pct(poolcap), pct(b)),
            });
        }
    }
    vec![
        checks_line(
            "poolcap's loss is zero wherever a peer's is zero (medians)",
            &zero,
        ),
        checks_line(
            "poolcap's loss is never above the best peer's (medians)",
            &best,
        ),
    ]
}

/// The congestion-control target for every (basic, congestion) pair of poolcap subjects at a
/// point with the same load, queues and workers: with congestion control capture and analysis
/// throughput are equal (within 1%) and analysis throughput is not lower than basic's, or
/// than its own offered rate where that was lower (within `tolerance`, the run-to-run noise).
pub fn congestion_targets(rows: &[Row], tolerance: f64) -> Vec<String> {
    let (mut equal, mut not_lower) = (vec![], vec![]);
    let kind = |r: &Row| {
        let c = r.capture.as_ref()?;
        let off = c.offload.as_deref().unwrap_or("basic");
        Some((c.load, c.queues, c.workers, c.inplace, off.to_owned()))
    };
    for cong in rows.iter().filter(|r| {
        r.poolcap
            && kind(r).is_some_and(|k| !k.3 && k.4.starts_with("congestion"))
            && r.get("analysis_pps").is_some()
    }) {
        let Some(ck) = kind(cong) else { continue };
        let basic = rows.iter().find(|r| {
            r.point == cong.point
                && r.poolcap
                && kind(r).is_some_and(|k| (k.0, k.1, k.2, k.3) == (ck.0, ck.1, ck.2, false))
                && kind(r).is_some_and(|k| k.4 == "basic")
        });
        let (Some(c), Some(a)) = (cong.median("capture_pps"), cong.median("analysis_pps")) else {
            continue;
        };
        let at = format!("{} / {}", cong.point, cong.subject);
        equal.push(Check {
            point: at.clone(),
            ok: (c - a).abs() <= 0.01 * c.max(1.0),
            detail: format!("capture {:.1}k vs analysis {:.1}k pps", c / 1e3, a / 1e3),
        });
        if let Some(b) = basic.and_then(|b| b.median("analysis_pps")) {
            // Where congestion's own offered rate was lower (top speed varies with what the
            // tool leaves the sender), it cannot analyse more than it was offered.
            let offered = cong.median("sender_pps").unwrap_or(f64::INFINITY);
            let bar = b.min(offered);
            not_lower.push(Check {
                point: at,
                ok: a >= bar * (1.0 - tolerance),
                detail: format!(
                    "analysis {:.1}k vs basic {:.1}k pps = {:.2}{}",
                    a / 1e3,
                    b / 1e3,
                    a / b.max(1.0),
                    if offered < b * (1.0 - tolerance) {
                        format!(" (offered only {:.1}k)", offered / 1e3)
                    } else {
                        String::new()
                    }
                ),
            });
        }
    }
    vec![
        checks_line(
            "with congestion control capture throughput = analysis throughput (medians, within 1%)",
            &equal,
        ),
        checks_line(
            &format!(
                "with congestion control analysis throughput ≥ basic's (medians, within {:.0}%)",
                tolerance * 100.0
            ),
            &not_lower,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_suite_has_one_name_and_its_own_implementation() {
        use std::collections::BTreeSet;
        let (mut titles, mut intros) = (BTreeSet::new(), BTreeSet::new());
        for s in Suite::ALL {
            let name = clap::ValueEnum::to_possible_value(&s).unwrap();
            assert_eq!(name.get_name(), s.name(), "{s:?}");
            assert_eq!(serde_json::to_value(s).unwrap(), s.name(), "{s:?}");
            assert!(titles.insert(s.def().title), "{s:?}: title taken");
            assert!(intros.insert(s.def().intro), "{s:?}: intro taken");
        }
    }

    /// A calibration as the manager would have measured it.
    pub(super) fn calibration(ns_per_iteration: f64, top_pps: Option<f64>) -> Calibration {
        Calibration {
            ns_per_iteration,
            top_pps,
            disk_mb_s: None,
        }
    }

    #[test]
    fn calibration_picks_loads() {
        let c = calibration(1.0, Some(500e3));
        assert_eq!(c.half_load(), 4000);
        assert!((c.pps_at(4000) - 250e3).abs() < 1e-6);
        assert_eq!(c.load_for(70e3), 14286);
        let assumed = Calibration { top_pps: None, ..c };
        assert_eq!(assumed.top(), ASSUMED_TOP_PPS);
        assert_eq!(
            c.top_speed_note(" over 16 flows"),
            "calibration: x-loop 1.000 ns per iteration on CPU 1; offered top speed of 64 B \
             frames over 16 flows 500000 pps (median)"
        );
        assert!(assumed
            .top_speed_note("")
            .ends_with("frames 500000 pps (assumed)"));
    }

    #[test]
    fn quiet_pacing_sends_a_batch_per_millisecond() {
        let t = paced_quietly(64, 100_000, 3.0, 16);
        assert_eq!((t.count, t.batch, t.flows), (300_000, Some(100), 16));
        assert_eq!(paced_quietly(64, 2_000, 1.0, 1).batch, Some(4));
        assert_eq!(k(25_000), "25k");
        assert_eq!(k(1_500), "1500");
    }

    #[test]
    fn every_suite_plans_points_at_every_scale() {
        let cal = calibration(1.4, Some(500e3));
        for s in Suite::ALL {
            let smoke = plan(s, Scale::Smoke, &cal).points;
            let quick = plan(s, Scale::Quick, &cal).points;
            let full = plan(s, Scale::Full, &cal).points;
            assert!(!smoke.is_empty() && smoke.len() <= quick.len(), "{s:?}");
            assert!(quick.len() <= full.len(), "{s:?}");
            for p in quick.iter().chain(&full) {
                assert!(!p.subjects.is_empty(), "{s:?} {}", p.id);
                let mut ids: Vec<&str> = p.subjects.iter().map(|x| x.name.as_str()).collect();
                ids.sort();
                ids.dedup();
                assert_eq!(
                    ids.len(),
                    p.subjects.len(),
                    "{s:?} {}: duplicate names",
                    p.id
                );
            }
            let mut ids: Vec<&str> = full.iter().map(|p| p.id.as_str()).collect();
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len(), full.len(), "{s:?}: duplicate point ids");
        }
    }
}
