//! `probe`: Zabala et al. Figs 6-9 with real analysis instead of the x-loop: capture and
//! analysis throughput of `poolcap probe` against the offered rate, for 1, 10, 100 and 1000
//! rules, in basic mode and with congestion control, beside pmacctd and tshark doing the
//! same job (per-flow and per-host totals every second) in the same run, and the same rule sets
//! in the kernel (`--in-kernel`: counts, sizes and flow tables in the tc program).

use super::rates::{sweep, CONGESTION, FLOWS, POOL, RING_KIB};
use super::{kpps, med, pct_or_dash, Plan, Scale, Table, Text};
use crate::figure::{by_subject, diagonal, median, offered, Figure};
use crate::meta::Meta;
use crate::peer::{CaptureSpec, Tool};
use crate::point::Subject;
use crate::probe_peers::PERIOD_S;
use crate::report::Row;

/// For BENCHMARKS.md.
pub const INTRO: &str = "Zabala et al. (ICN 2014), Figs 6-9, with real analysis: capture \
throughput (packets taken from the kernel) and analysis throughput (packets the rules ran on) \
of `poolcap probe` against the offered rate, for generated rule sets of 1, 10, 100 and 1000 \
rules over distinct filters (counts, frame sizes and flow tables), in basic mode and with \
congestion control, beside pmacct's `pmacctd` (per-flow and per-host aggregation, print \
plugin) and `tshark -q -z conv,ip` doing the same job on the same traffic in the same run. \
The paper's conclusion, that the kernel-level probe with congestion avoidance analyses more \
than the user-level one, is checked once `poolcap probe --in-kernel` exists. Read: where each \
line flattens (the analysis capacity) and how it falls with the number of rules.";

/// Rule-set sizes.
pub const RULES: [usize; 4] = [1, 10, 100, 1000];

/// The columns of the results table.
const COLUMNS: [&str; 8] = [
    "sender_pps",
    "capture_pps",
    "analysis_pps",
    "loss",
    "kernel_drop",
    "pool_drop",
    "cpu_s",
    "cpu_s_per_mpkt",
];

/// `poolcap probe` with `rules` rules, with congestion control or not, in the kernel or not.
pub fn probe(rules: usize, congestion: bool, in_kernel: bool) -> CaptureSpec {
    CaptureSpec {
        pool: Some(POOL),
        offload: congestion.then(|| CONGESTION.to_owned()),
        rules: Some(rules),
        in_kernel,
        ..CaptureSpec::new(Tool::Probe, RING_KIB)
    }
}

/// The subject name of a probe setting.
fn name(rules: usize, mode: &str) -> String {
    format!("probe {rules}r {mode}")
}

/// Every probe setting for `rules` (user space and in the kernel), then the peers.
pub fn subjects(rules: &[usize]) -> Vec<Subject> {
    let mut v = Vec::new();
    for &n in rules {
        let g = format!("{n} rules");
        v.push(Subject::named(name(n, "basic"), probe(n, false, false)).in_group(&g));
        v.push(Subject::named(name(n, "congestion"), probe(n, true, false)).in_group(&g));
        v.push(Subject::named(name(n, "in-kernel"), probe(n, false, true)).in_group(&g));
        v.push(Subject::named(name(n, "in-kernel congestion"), probe(n, true, true)).in_group(&g));
    }
    for tool in [Tool::Pmacct, Tool::Tshark] {
        v.push(Subject::named(
            tool.name(),
            CaptureSpec::new(tool, RING_KIB),
        ));
    }
    v
}

/// The points: 64-byte frames over [`FLOWS`] flows at paced rates and at top speed.
pub fn plan(scale: Scale) -> Plan {
    let (rates, seconds): (Vec<Option<u64>>, f64) = match scale {
        Scale::Smoke => (vec![Some(50_000)], 0.4),
        Scale::Quick => (vec![Some(100_000), None], 2.0),
        Scale::Full => (
            [50, 100, 150, 200, 250, 300]
                .iter()
                .map(|r| Some(r * 1000))
                .chain([None])
                .collect(),
            5.0,
        ),
    };
    let mut subj = subjects(&RULES);
    if scale == Scale::Smoke {
        subj.retain(|s| {
            s.name == name(10, "basic")
                || s.name == name(10, "in-kernel")
                || s.capture.as_ref().is_some_and(|c| c.tool != Tool::Probe)
        });
    }
    Plan {
        points: sweep("", 64, &rates, seconds, FLOWS, None, &subj),
        notes: Vec::new(),
    }
}

fn is_probe(r: &Row) -> bool {
    r.capture.as_ref().is_some_and(|c| c.tool == Tool::Probe)
}

/// The point with the highest offered rate (the sender's median).
fn top_point(rows: &[Row]) -> Option<String> {
    rows.iter()
        .max_by(|a, b| {
            let o = |r: &Row| r.median("sender_pps").unwrap_or(0.0);
            o(a).total_cmp(&o(b))
        })
        .map(|r| r.point.clone())
}

/// Whether the paper's conclusion holds: at the highest offered rate, for every rule count,
/// the in-kernel probe with congestion control analyses more than the user-space one with
/// congestion control.
pub fn conclusion(rows: &[Row]) -> String {
    let kernel = rows
        .iter()
        .any(|r| r.capture.as_ref().is_some_and(|c| c.in_kernel));
    if !kernel {
        return "The paper's conclusion (the kernel-level probe with congestion avoidance \
                analyses more than the user-level one) is not tested here: in-kernel analysis \
                not available (`poolcap probe --in-kernel` missing)."
            .to_owned();
    }
    let Some(top) = top_point(rows) else {
        return String::new();
    };
    let mut parts = Vec::new();
    let mut holds = true;
    for n in RULES {
        let user = med(rows, |p| p == top, &name(n, "congestion"), "analysis_pps");
        let kern = med(
            rows,
            |p| p == top,
            &name(n, "in-kernel congestion"),
            "analysis_pps",
        );
        if let (Some(u), Some(k)) = (user, kern) {
            holds &= k > u;
            parts.push(format!(
                "{n} rules: in-kernel {} vs user {}",
                kpps(Some(k)),
                kpps(Some(u))
            ));
        }
    }
    if parts.is_empty() {
        return "The paper's conclusion could not be checked: no in-kernel run finished."
            .to_owned();
    }
    format!(
        "The paper's conclusion (the kernel-level probe with congestion avoidance analyses \
         more than the user-level one) {} here at the highest offered rate ({top}): {} pps.",
        if holds { "holds" } else { "does not hold" },
        parts.join(", ")
    )
}

/// Worst and median loss of the probe subjects, analysis throughput at the highest offered
/// rate per rule count, and the ratios to pmacctd and tshark there.
fn headline(rows: &[Row]) -> String {
    let probe_rows: Vec<&Row> = rows.iter().filter(|r| is_probe(r)).collect();
    let worst = probe_rows
        .iter()
        .filter_map(|r| Some((r.median("loss")?, r)))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let mut s = String::new();
    if let Some((loss, r)) = worst {
        let all: Vec<f64> = probe_rows.iter().filter_map(|r| r.median("loss")).collect();
        s.push_str(&format!(
            "Worst probe loss {} ({} at {}); median over every probe point {}. ",
            pct_or_dash(Some(loss)),
            r.subject,
            r.point,
            pct_or_dash(poolcap_measure::stats::median(all))
        ));
    }
    if let Some(top) = top_point(rows) {
        let at = |subject: &str| med(rows, |p| p == top, subject, "analysis_pps");
        let peers: Vec<(&str, f64)> = ["pmacctd", "tshark"]
            .into_iter()
            .filter_map(|p| Some((p, at(p)?)))
            .collect();
        let parts: Vec<String> = RULES
            .iter()
            .filter_map(|&n| {
                let subject = name(n, "congestion");
                let a = at(&subject)?;
                let ratios: Vec<String> = peers
                    .iter()
                    .filter(|(_, b)| *b > 0.0)
                    .map(|(p, b)| format!("{:.2}× {p}", a / b))
                    .collect();
                Some(format!(
                    "{subject} {} ({})",
                    kpps(Some(a)),
                    ratios.join(", ")
                ))
            })
            .collect();
        let peer_text: Vec<String> = peers
            .iter()
            .map(|(p, b)| format!("{p} {}", kpps(Some(*b))))
            .collect();
        let all: Vec<String> = parts.into_iter().chain(peer_text).collect();
        if !all.is_empty() {
            s.push_str(&format!(
                "Analysis throughput at the highest offered rate ({top}): {} pps. ",
                all.join(", ")
            ));
        }
    }
    s.push_str(&conclusion(rows));
    s
}

/// Summary text.
pub fn text(meta: &Meta, rows: &[Row]) -> Text {
    let secs = meta.scale.pick("0.4 s", "2 s", "5 s");
    Text {
        settings: vec![
            format!(
                "analysis throughput = share of the offered packets analysed × the sender's \
                 achieved rate; analysed: poolcap probe, the packets of its first rule (`ip`, \
                 every frame) summed over its periods; pmacctd, the packets of its per-flow \
                 print output summed; tshark, the total frames of its IPv4 conversations. \
                 Capture throughput adds the packets poolcap's pool dropped after taking them"
            ),
            format!(
                "rule sets: rule 1 `ip` with count and flows, then filters on the generator's \
                 source and destination ports and frame lengths (`udp src port N`, `udp dst \
                 port N`, `ip and greater N`), each distinct, cycling through the count, sizes \
                 and flows actions; period {PERIOD_S} s for every tool (pmacctd's \
                 print_refresh_time)"
            ),
            format!(
                "poolcap probe: 1 queue, 1 worker, pool {}×{}, kernel ring {RING_KIB} KiB, on \
                 CPU 1 with its capture thread; congestion control `--offload {CONGESTION}`; \
                 tshark gets the same ring (`-B`), pmacctd libpcap's default",
                POOL.0, POOL.1
            ),
            format!(
                "traffic: 64-byte frames over {FLOWS} flows, {secs} of sending per run; CPU \
                 includes every process of a tool (pmacctd's plugins, tshark's dumpcap)"
            ),
        ],
        tables: vec![Table::results(
            rows,
            &COLUMNS,
            &["analysis_pps", "loss", "cpu_s_per_mpkt"],
        )],
        headline: headline(rows),
        ..Text::default()
    }
}

/// Analysis and capture throughput against the offered rate, one figure per rule count with
/// the peers on each.
pub fn figures(meta: &Meta, rows: &[Row]) -> Vec<Figure> {
    let what = format!(
        "poolcap probe 1 queue on CPU 1, pool {}x{}; pmacctd, tshark; rps {}",
        POOL.0,
        POOL.1,
        if meta.rps { "on" } else { "off" }
    );
    let mut out = Vec::new();
    for n in RULES {
        let group = format!("{n} rules");
        let at = |r: &Row| r.group == group || !is_probe(r);
        if !rows.iter().any(|r| r.group == group) {
            continue;
        }
        for (key, label) in [
            ("analysis_pps", "analysis throughput"),
            ("capture_pps", "capture throughput"),
        ] {
            let mut lines = by_subject(rows, at, offered, median(key));
            if let Some(d) = diagonal("offered", &lines) {
                lines.insert(0, d);
            }
            let f = Figure::new(
                format!("probe-{n}r-{}.png", &key[..key.find('_').unwrap_or(0)]),
                format!("{label} vs offered rate, {n} rules, 64 B"),
                "offered rate (pps, sender's achieved)",
                &format!("{label} (pps)"),
            )
            .with_subtitle(what.clone())
            .lines(lines);
            out.push(f);
        }
    }
    out
}

/// The probe suite (see [`INTRO`]).
pub const DEF: super::SuiteDef = super::SuiteDef {
    figures,
    ..super::SuiteDef::new(
        "Probe analysis throughput vs pmacctd and tshark (Zabala et al., Figs 6-9)",
        INTRO,
        |scale, _| plan(scale),
        text,
    )
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_plan_measures_every_rule_count_and_both_peers() {
        let p = plan(Scale::Quick).points;
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].traffic.rate, None, "top speed");
        let names: Vec<&str> = p[0].subjects.iter().map(|s| s.name.as_str()).collect();
        for n in RULES {
            assert!(names.contains(&name(n, "basic").as_str()), "{names:?}");
            assert!(names.contains(&name(n, "congestion").as_str()));
        }
        assert!(names.contains(&"pmacctd") && names.contains(&"tshark"));
        let peer = p[0].subjects.iter().find(|s| s.name == "tshark").unwrap();
        assert!(!peer.is_poolcap() && peer.group.is_empty());
        let smoke = plan(Scale::Smoke).points;
        assert_eq!(smoke.len(), 1);
        let smoke_names: Vec<&str> = smoke[0].subjects.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            smoke_names,
            [
                name(10, "basic"),
                name(10, "in-kernel"),
                "pmacctd".into(),
                "tshark".into()
            ],
            "the smoke run: user space, in the kernel and both peers"
        );
        assert_eq!(smoke[0].traffic.count, 20_000);
        assert!(p[0]
            .subjects
            .iter()
            .any(|s| s.name == name(10, "in-kernel congestion")));
    }

    #[test]
    fn without_in_kernel_runs_the_conclusion_says_so() {
        assert!(conclusion(&[]).contains("in-kernel analysis not available"));
    }
}
