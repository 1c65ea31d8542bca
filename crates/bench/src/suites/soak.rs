//! `soak`: one long capture at 80% of the generator's calibrated top rate, writing a rotated
//! file set (`-C 100 -W 5`) under /var/tmp, with the tool's memory, open files and threads
//! sampled from `/proc` every few seconds ([`crate::sampler`], `samples.csv`). A leak
//! in the pool, the writer or rotation shows as growth after warm-up long before it fails a
//! short run; the accounting equation at the end shows that no packet went missing over the
//! whole run.

use std::time::Duration;

use super::{paced_quietly, spec, Calibration, Plan, Scale, Table, Text, ACCOUNTING, BUFFER_KIB};
use crate::meta::Meta;
use crate::peer::Tool;
use crate::point::{Point, Subject};
use crate::report::Row;
use crate::sampler::RSS_TOLERANCE_KIB;

/// Open files a sample may see above the steady count: a descriptor open for an instant.
const FDS_TOLERANCE: f64 = 1.0;

/// For BENCHMARKS.md.
pub const INTRO: &str = "A soak run: poolcap captures for 10 minutes (30 s with --quick) at \
80% of the generator's calibrated top rate of 64-byte frames, writing pcap files under \
/var/tmp rotated by size (`-C 100 -W 5`), while the bench samples its resident memory, open \
files and threads from /proc every few seconds (`samples.csv`). Read: whether anything grew \
after warm-up (the first third of the run), and the accounting equation at the end \
(sent = captured + drops + filtered + not_taken).";

/// Share of the calibrated top rate sent.
pub const RATE_SHARE: f64 = 0.8;
/// Rotation: files of this many MB ...
pub const ROTATE_MB: u64 = 100;
/// ... and this many files kept.
pub const ROTATE_FILES: u32 = 5;

/// The sampling period of a run of `seconds`: about 120 samples, between 0.5 and 5 s apart.
fn period(seconds: f64) -> Duration {
    Duration::from_secs_f64((seconds / 120.0).clamp(0.5, 5.0))
}

/// The one point at `scale`: 4 s (smoke), 30 s (quick) or 10 minutes.
pub fn plan(scale: Scale, cal: &Calibration) -> Plan {
    match scale {
        // A smoke run has no calibration (the assumed top speed may be far above what a busy
        // shared machine sends): a modest fixed rate keeps it short and honest.
        Scale::Smoke => point(4.0, 50_000, cal),
        Scale::Quick => plan_for(30.0, cal),
        Scale::Full => plan_for(600.0, cal),
    }
}

/// The one point of a soak of `seconds` at 80% of the calibrated top rate (`--minutes`).
pub fn plan_for(seconds: f64, cal: &Calibration) -> Plan {
    point(seconds, (cal.top() * RATE_SHARE).round() as u64, cal)
}

/// poolcap writing a rotated set at `rate` pps for `seconds`.
fn point(seconds: f64, rate: u64, cal: &Calibration) -> Plan {
    let every = period(seconds);
    let mut capture = spec(Tool::Poolcap, BUFFER_KIB, true);
    capture.rotate = Some((ROTATE_MB, ROTATE_FILES));
    let mut point = Point::new(
        format!("64B {}k {:.0}s", rate / 1000, seconds),
        paced_quietly(64, rate, seconds, 1),
        vec![Subject::capture(capture)],
    );
    point.sample_every = Some(every);
    Plan {
        points: vec![point],
        notes: vec![format!(
            "{}; sent at {:.0}% of it: {rate} pps for {seconds:.0} s, sampled every {every:?}",
            cal.top_speed_note(""),
            RATE_SHARE * 100.0
        )],
    }
}

/// Summary text.
pub fn text(_meta: &Meta, rows: &[Row]) -> Text {
    Text {
        settings: vec![format!(
            "poolcap -w FILE -C {ROTATE_MB} -W {ROTATE_FILES} under /var/tmp, {BUFFER_KIB} KiB \
             kernel ring; warm-up is the first third of the sampled time; RSS may grow by \
             {RSS_TOLERANCE_KIB} KiB after it"
        )],
        tables: vec![Table::results(
            rows,
            &[
                &ACCOUNTING[..],
                &[
                    "unaccounted",
                    "rss_growth_kib",
                    "fds_change",
                    "threads_change",
                    "cpu_s",
                ],
            ]
            .concat(),
            &[],
        )],
        targets: targets(rows),
        headline: headline(rows),
        ..Text::default()
    }
}

/// Largest value of `key` over the runs of every row (the worst run).
fn worst(rows: &[Row], key: &str) -> Option<f64> {
    rows.iter()
        .filter_map(|r| r.get(key).map(|s| s.max))
        .reduce(f64::max)
}

fn targets(rows: &[Row]) -> Vec<String> {
    let line = |name: &str, key: &str, limit: f64| match worst(rows, key) {
        None => format!("{name}: not measured"),
        Some(x) => format!("{name}: worst run {x:.0} {}", super::verdict(x <= limit)),
    };
    vec![
        line(
            &format!("RSS growth after warm-up ≤ {RSS_TOLERANCE_KIB} KiB"),
            "rss_growth_kib",
            RSS_TOLERANCE_KIB as f64,
        ),
        // A sample may catch a descriptor open for an instant (the supervisor reads the
        // interface's state from /sys, rotation opens the next file): one is not a leak.
        line(
            "open files after warm-up vary by at most one (a transient)",
            "fds_change",
            FDS_TOLERANCE,
        ),
        line("threads constant after warm-up", "threads_change", 0.0),
        line(
            "sent = captured + drops + filtered + not_taken (unaccounted)",
            "unaccounted",
            0.0,
        ),
    ]
}

fn headline(rows: &[Row]) -> String {
    let grew = ["rss_growth_kib", "fds_change", "threads_change"]
        .iter()
        .zip([RSS_TOLERANCE_KIB as f64, FDS_TOLERANCE, 0.0])
        .filter_map(|(k, limit)| Some((k, worst(rows, k)? > limit)))
        .filter(|(_, g)| *g)
        .map(|(k, _)| *k)
        .collect::<Vec<_>>();
    // The calibration's rows (generator alone) have no loss: take the capture's.
    let loss = rows
        .iter()
        .find(|r| r.capture.is_some())
        .and_then(|r| r.median("loss"));
    format!(
        "{}; loss {}, unaccounted {}.",
        if grew.is_empty() {
            "Nothing grew after warm-up".to_owned()
        } else {
            format!("Grew after warm-up: {}", grew.join(", "))
        },
        super::pct_or_dash(loss),
        worst(rows, "unaccounted").map_or("–".into(), |x| format!("{x:.0}"))
    )
}

/// The soak suite (see [`INTRO`]).
pub const DEF: super::SuiteDef = super::SuiteDef {
    calibration: super::CalibrationKind::TopSpeed { flows: 1 },
    ..super::SuiteDef::new(
        "Soak: growth of memory, open files, threads over a long rotated capture",
        INTRO,
        plan,
        text,
    )
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_at_80_percent_of_top_for_the_scale_and_rotates() {
        let cal = Calibration {
            ns_per_iteration: 1.0,
            top_pps: Some(500e3),
            disk_mb_s: None,
        };
        let p = &plan(Scale::Quick, &cal).points[0];
        assert_eq!(p.traffic.rate, Some(400_000));
        assert_eq!(p.traffic.count, 12_000_000);
        assert_eq!(p.sample_every, Some(Duration::from_millis(500)));
        let c = p.subjects[0].capture.as_ref().unwrap();
        assert!(c.write && c.rotate == Some((100, 5)));
        let full = &plan(Scale::Full, &cal).points[0];
        assert_eq!(full.traffic.count, 240_000_000);
        assert_eq!(full.sample_every, Some(Duration::from_secs(5)));
        assert_eq!(
            plan_for(3600.0, &cal).points[0].traffic.count,
            1_440_000_000
        );
    }
}
