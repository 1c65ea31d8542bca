//! `imbalance`: two queues, 16 flows of which one carries 80% of the frames, and an x-loop
//! load with which one worker cannot keep up with the hot queue but two together can. basic
//! mode against buddy offloading at T = 60, 70, 80, 90% and against the plain fanout reader
//! with the same load (WireCAP Figs 11-12); then congestion control against basic at
//! x = 1000 and 25000 over offered rates (capture vs analysis throughput, as in `rates`).

use super::rates::{self, sweep, throughput_figures, RING_KIB, THROUGHPUT};
use super::{checks_line, congestion_targets, k, paced_quietly, pct, rows_where, Calibration};
use super::{Check, Plan, Scale, Table, Text, BOTH_CPUS, BUFFER_KIB, CPUS_SPLIT};
use super::{CPUS_SPLIT_READER, GEN_CPU, TOOL_CPU};
use crate::figure::{by_key, percent, Figure};
use crate::meta::Meta;
use crate::peer::{CaptureSpec, Tool};
use crate::plot::Series;
use crate::point::{Point, Subject};
use crate::report::Row;

/// For BENCHMARKS.md.
pub const INTRO: &str = "WireCAP (IMC 2014) Figs 11-12: two receive queues, 16 \
UDP flows of which one (the elephant) carries 80% of the frames, and an x-loop load with \
which one worker cannot keep up with the hot queue while two together can. In basic mode the \
hot queue's worker falls behind and its pool overflows; with buddy offloading (`buddy:T`) \
chunks past T% backlog go to the other queue's worker. The plain AF_PACKET fanout reader \
(`--inplace`) with the same load is the baseline. Read: loss per policy, and the share of \
packets processed away from their home queue. Target: loss of buddy:60 ≤ 0.1 × loss of basic \
and of the reader. The second part reruns the `rates` experiment on this skewed traffic: \
congestion control against basic at x = 1000 and 25000 — with congestion control capture and \
analysis throughput should be equal and analysis throughput not lower than basic's.";

/// Offered rate of the offloading part.
pub const RATE: u64 = 50_000;
/// One core analyses this share of [`RATE`] at the calibrated load.
pub const ONE_CORE_SHARE: f64 = 0.75;
/// Flows and skew of the traffic.
pub const FLOWS: usize = 16;
/// Share of the elephant flow.
pub const SKEW: f64 = 0.8;
/// The thresholds.
pub const THRESHOLDS: [u32; 4] = [60, 70, 80, 90];
/// Prefix of the offloading point's id.
const OFFLOAD: &str = "offload";
/// Prefix of the congestion points' ids.
const CONGESTION: &str = "congestion ";

/// poolcap on both queues with `load` and `offload`, placed on both CPUs.
fn poolcap(load: u32, offload: &str) -> CaptureSpec {
    CaptureSpec {
        load,
        queues: Some(2),
        workers: Some(2),
        offload: Some(offload.to_owned()),
        cpus: Some(CPUS_SPLIT.to_owned()),
        taskset: Some(BOTH_CPUS.to_owned()),
        ..CaptureSpec::new(Tool::Poolcap, BUFFER_KIB)
    }
}

/// The plain fanout reader on both queues with `load`, placed like poolcap.
fn reader(load: u32) -> CaptureSpec {
    CaptureSpec {
        load,
        queues: Some(2),
        inplace: true,
        cpus: Some(CPUS_SPLIT_READER.to_owned()),
        taskset: Some(BOTH_CPUS.to_owned()),
        ..CaptureSpec::new(Tool::Poolcap, BUFFER_KIB)
    }
}

/// The points.
pub fn plan(scale: Scale, c: &Calibration) -> Plan {
    let load = c.load_for(ONE_CORE_SHARE * RATE as f64);
    let seconds = scale.pick(0.2, 5.0, 10.0);
    let mut subjects = vec![Subject::named("basic", poolcap(load, "basic"))];
    for t in THRESHOLDS {
        subjects.push(Subject::named(
            format!("buddy:{t}"),
            poolcap(load, &format!("buddy:{t}")),
        ));
    }
    subjects.push(Subject::baseline("reader (--inplace)", reader(load)));
    if scale == Scale::Smoke {
        subjects.truncate(2);
    }
    let traffic = super::super::peer::Traffic {
        skew: Some(SKEW),
        ..paced_quietly(64, RATE, seconds, FLOWS)
    };
    let mut points = vec![Point::new(
        format!("{OFFLOAD} {}k pps x={load}", RATE / 1000),
        traffic,
        subjects,
    )];
    if scale != Scale::Smoke {
        let rates: Vec<Option<u64>> = match scale {
            Scale::Full => [50, 100, 200, 300]
                .iter()
                .map(|r| Some(r * 1000))
                .chain([None])
                .collect(),
            _ => vec![Some(50_000), Some(200_000), None],
        };
        let mut cong = Vec::new();
        for x in [1000u32, 25_000] {
            for c in [false, true] {
                let name = format!("x={x} {}", if c { "congestion" } else { "basic" });
                cong.push(Subject::named(name, rates::poolcap(x, 2, c)).in_group(format!("x={x}")));
            }
        }
        points.extend(sweep(
            CONGESTION,
            64,
            &rates,
            scale.pick(0.2, 2.0, 5.0),
            FLOWS,
            Some(SKEW),
            &cong,
        ));
    }
    Plan {
        points,
        notes: vec![format!(
            "{}; load X = {load} iterations per packet, so one core analyses about {:.0} pps \
             ({:.0}% of the offered {} pps): the hot queue (≥ {:.0}% of the frames) needs more \
             than one core, both queues together less than two",
            c.x_loop_note(),
            c.pps_at(load),
            ONE_CORE_SHARE * 100.0,
            k(RATE),
            SKEW * 100.0
        )],
    }
}

/// Summary text.
pub fn text(meta: &Meta, rows: &[Row]) -> Text {
    let offload = rows_where(rows, |r| r.point.starts_with(OFFLOAD));
    let cong = rows_where(rows, |r| r.point.starts_with(CONGESTION));
    let mut settings = vec![
        format!(
            "traffic: {FLOWS} UDP flows, the heaviest carrying {:.0}% of the frames \
             (`poolcap gen --flows {FLOWS} --skew {SKEW}`), paced at the point's rate in batches \
             of rate/1000 frames one millisecond apart, from CPU {GEN_CPU}; the kernel's flow \
             hash (random per boot) decides which queue gets the elephant: the hot queue share \
             column says how much of the traffic its queue got",
            SKEW * 100.0
        ),
        format!(
            "pinning: sender on CPU {GEN_CPU}; every subject `taskset -c {BOTH_CPUS}`; poolcap \
             `--queues 2 --workers 2 --cpus {CPUS_SPLIT}`: queue 0's capture thread and worker \
             on CPU {TOOL_CPU}, queue 1's on CPU {GEN_CPU} (shared with the sender, which sleeps \
             between batches; workers run at nice 10); the fanout reader `--queues 2 --cpus \
             {CPUS_SPLIT_READER}`: queue 0's reader on CPU {TOOL_CPU}, queue 1's on CPU {GEN_CPU}"
        ),
        format!(
            "offloading part: poolcap's default pool (256×64 cells per queue) and a \
             {BUFFER_KIB} KiB kernel ring per queue, the reader the same ring"
        ),
    ];
    if !cong.is_empty() {
        settings.push("congestion part (the `rates` setup on this traffic):".into());
        let secs = meta.scale.pick("0.2 s", "2 s", "5 s");
        settings.extend(
            rates::settings(&format!("{secs} of sending"))
                .into_iter()
                .map(|s| format!("congestion part: {s}")),
        );
    }
    let mut tables = vec![Table::new(
        "Offloading: basic vs buddy vs the fanout reader",
        offload.clone(),
        &[
            "offered",
            "sender_pps",
            "captured",
            "loss",
            "pool_drop",
            "kernel_drop",
            "hot_share",
            "away_share",
            "cpu_s",
        ],
        &["loss"],
    )];
    if !cong.is_empty() {
        tables.push(Table::new(
            "Congestion control vs basic (capture and analysis throughput)",
            cong.clone(),
            &THROUGHPUT,
            &[],
        ));
    }
    let mut targets = offload_targets(&offload);
    if !cong.is_empty() {
        targets.extend(congestion_targets(&cong, 0.02));
    }
    Text {
        settings,
        tables,
        targets,
        headline: headline(&offload, &cong),
        ..Text::default()
    }
}

fn headline(offload: &[Row], cong: &[Row]) -> String {
    let loss = |s: &str| super::med(offload, |_| true, s, "loss");
    let away = super::med(offload, |_| true, "buddy:60", "away_share");
    let mut s = format!(
        "Loss with the elephant flow: basic {}, buddy:60 {} ({} of the packets processed on \
         the other queue), buddy:90 {}, fanout reader {}.",
        super::pct_or_dash(loss("basic")),
        super::pct_or_dash(loss("buddy:60")),
        super::pct_or_dash(away),
        super::pct_or_dash(loss("buddy:90")),
        super::pct_or_dash(loss("reader (--inplace)")),
    );
    let c = rates::capacity_line(cong, &["x=25000 basic", "x=25000 congestion"]);
    if !c.is_empty() {
        s.push(' ');
        s.push_str(&c);
    }
    s
}

fn offload_targets(rows: &[Row]) -> Vec<String> {
    let med = |s: &str, k: &str| {
        rows.iter()
            .find(|r| r.subject == s)
            .and_then(|r| r.median(k))
    };
    let mut t = Vec::new();
    let b60 = med("buddy:60", "loss");
    for (peer, name) in [
        ("basic", "basic"),
        ("reader (--inplace)", "the fanout reader"),
    ] {
        let checks: Vec<Check> = match (b60, med(peer, "loss")) {
            (Some(a), Some(b)) => vec![Check {
                point: rows.first().map(|r| r.point.clone()).unwrap_or_default(),
                ok: a <= 0.1 * b,
                detail: format!(
                    "buddy:60 {} vs {name} {} = {}",
                    pct(a),
                    pct(b),
                    if b > 0.0 {
                        format!("{:.3}", a / b)
                    } else {
                        "– (no loss to reduce)".into()
                    }
                ),
            }],
            _ => Vec::new(),
        };
        t.push(checks_line(
            &format!("loss of buddy:60 ≤ 0.1 × loss of {name} (medians)"),
            &checks,
        ));
    }
    for th in THRESHOLDS {
        let s = format!("buddy:{th}");
        if let (Some(l), Some(a)) = (med(&s, "loss"), med(&s, "away_share")) {
            t.push(format!(
                "{s}: loss {}, {} of the captured packets processed away from their home queue",
                pct(l),
                pct(a)
            ));
        }
    }
    t
}

/// The figures.
pub fn figures(meta: &Meta, rows: &[Row]) -> Vec<Figure> {
    let offload = rows_where(rows, |r| r.point.starts_with(OFFLOAD));
    let threshold = |r: &Row| {
        let off = r.capture.as_ref()?.offload.as_deref()?;
        off.strip_prefix("buddy:")?.parse::<f64>().ok()
    };
    let mut lines = by_key(
        &offload,
        |r| threshold(r).is_some(),
        |_| "loss, buddy:T".into(),
        threshold,
        percent("loss"),
    );
    lines.extend(by_key(
        &offload,
        |r| threshold(r).is_some(),
        |_| "processed away from home, buddy:T".into(),
        threshold,
        percent("away_share"),
    ));
    let (lo, hi) = (f64::from(THRESHOLDS[0]), f64::from(THRESHOLDS[3]));
    for (s, label) in [
        ("basic", "loss, basic"),
        ("reader (--inplace)", "loss, fanout reader"),
    ] {
        if let Some(l) = offload
            .iter()
            .find(|r| r.subject == s)
            .and_then(|r| r.median("loss"))
        {
            lines.push(Series::new(label, vec![(lo, l * 100.0), (hi, l * 100.0)]));
        }
    }
    let load = offload
        .first()
        .and_then(|r| r.capture.as_ref())
        .map_or(0, |c| c.load);
    let mut v = vec![Figure::new(
        "imbalance-buddy.png",
        "Skewed load on 2 queues: loss and offloading vs threshold T",
        "buddy threshold T (% backlog)",
        "% of packets",
    )
    .with_subtitle(format!(
        "{FLOWS} flows, elephant {:.0}%, {} pps, x = {load}; queue 0 on CPU 1, queue 1 on CPU 0 \
         (with the sender); basic and reader drawn flat across T; rps {}",
        SKEW * 100.0,
        k(RATE),
        if meta.rps { "on" } else { "off" }
    ))
    .lines(lines)];
    let what = format!(
        "{FLOWS} flows, elephant {:.0}%; 2 workers on CPUs 1 and 0; pool {}x{}, ring {RING_KIB} KiB",
        SKEW * 100.0,
        rates::POOL.0,
        rates::POOL.1
    );
    v.extend(throughput_figures(
        "imbalance-congestion",
        &what,
        rows,
        |r| r.point.starts_with(CONGESTION),
    ));
    v
}

/// The imbalance suite (see [`INTRO`]).
pub const DEF: super::SuiteDef = super::SuiteDef {
    queues: 2,
    figures,
    ..super::SuiteDef::new(
        "Load imbalance and offloading (WireCAP Figs 11-12)",
        INTRO,
        plan,
        text,
    )
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_worker_cannot_keep_up_but_two_can() {
        let c = super::super::tests::calibration(1.4, None);
        let p = plan(Scale::Quick, &c).points;
        let a = &p[0];
        let load = a.subjects[0].capture.as_ref().unwrap().load;
        let per_core = c.pps_at(load);
        assert!(per_core < SKEW * RATE as f64 && 2.0 * per_core > RATE as f64);
        assert_eq!(a.traffic.skew, Some(SKEW));
        assert_eq!(a.traffic.flows, FLOWS);
        assert_eq!(a.subjects.len(), 6);
        assert!(!a.subjects[5].is_poolcap());
        assert_eq!(p.len(), 4);
        assert!(p[1].id.starts_with(CONGESTION) && p[1].subjects.len() == 4);
        assert_eq!(plan(Scale::Smoke, &c).points.len(), 1);
    }
}
