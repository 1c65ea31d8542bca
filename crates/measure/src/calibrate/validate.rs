//! Predicted against measured loss: every point and subject of a bench result (its rows,
//! [`crate::report::aggregate`]) is turned back into the scenario it measured (tool,
//! frame size, offered rate, snaplen, buffers, load, file, compression, bursts, `--rps`) and
//! predicted with a profile. `poolcap predict --validate DIR` and `poolcap bench predict` both
//! come here, so they judge alike.
//!
//! The offered rate is what the generator achieved (on veth the capture's kernel work slows
//! the sender, so the nominal rate would overstate it); within bursts it is the frames over
//! the sending time without the idle gaps. Runs are summarised by their median. The target:
//! relative error at most 20% where the measured loss is at least 1%, and "no
//! loss" predicted where none was measured; points with a measured loss between 0 and 1% are
//! shown but not judged. A prediction of fewer than one lost frame over the point's offered
//! frames is a "no loss" verdict ([`predicts_no_loss`]): the model is a fluid and its
//! fractions of a frame are not losses a capture can have. The rule reads the model's output
//! the same way at every point; it fits nothing. Calibration points ([`super::POINT_PREFIX`]) are never validated:
//! the profile comes from them.

use std::fmt::Write as _;

use poolcap_doctor::predict::{self, DiskIo, Edge, Output, Scenario, Tool as ModelTool};
use poolcap_doctor::profile::Profile;
use serde::Serialize;

use crate::peer::Tool;
use crate::report::{md_cell, pct, Row};

/// Relative error allowed where loss was measured.
pub const TOLERANCE: f64 = 0.2;
/// Measured loss from which the relative error is judged.
pub const JUDGED_FROM: f64 = 0.01;

/// How a prediction compares with the measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Within 20% (measured ≥ 1%), or no loss predicted where none was measured.
    Hit,
    /// Off by more than 20%, or a wrong loss / no-loss verdict.
    Miss,
    /// Measured loss between 0 and 1%: not judged.
    Unjudged,
}

/// `|predicted - measured| / measured` where the measured loss is judged (≥ 1%).
pub fn relative_error(measured: f64, predicted: f64) -> Option<f64> {
    (measured >= JUDGED_FROM).then(|| (predicted - measured).abs() / measured)
}

/// Whether a predicted loss fraction over `offered` frames is a "no loss" verdict: fewer
/// than one frame lost.
pub fn predicts_no_loss(predicted: f64, offered: f64) -> bool {
    predicted * offered < 1.0
}

/// Judges `predicted` against `measured` (fractions of `offered` frames).
pub fn verdict(measured: f64, predicted: f64, offered: f64) -> Verdict {
    match relative_error(measured, predicted) {
        Some(e) if e <= TOLERANCE => Verdict::Hit,
        Some(_) => Verdict::Miss,
        None if measured == 0.0 && predicts_no_loss(predicted, offered) => Verdict::Hit,
        None if measured == 0.0 => Verdict::Miss,
        None => Verdict::Unjudged,
    }
}

/// One point and subject.
#[derive(Debug, Clone, Serialize)]
pub struct Compared {
    /// Point id.
    pub point: String,
    /// Subject name.
    pub subject: String,
    /// The tool.
    pub tool: String,
    /// The kernel's receive work ran on the tool's CPU.
    pub rps: bool,
    /// Runs summarised.
    pub runs: usize,
    /// Offered rate (within bursts), frames/s.
    pub offered_pps: f64,
    /// Frames offered (median over the runs).
    pub offered: f64,
    /// Median measured loss.
    pub measured: f64,
    /// The lowest and highest loss of a run: how far the runs themselves spread.
    pub measured_range: (f64, f64),
    /// Predicted loss.
    pub predicted: f64,
    /// Where the model puts the point at the edge (`poolcap_doctor::predict::Edge`): the
    /// loss if the tool keeps up, the loss once behind, and the chance it falls behind; the
    /// measured loss may then lie anywhere between the two, and `predicted` is the likelier.
    pub edge: Option<Edge>,
    /// Predicted kernel share.
    pub kernel: f64,
    /// Predicted application share.
    pub app: f64,
    /// [`relative_error`].
    pub rel_error: Option<f64>,
    /// The verdict.
    pub verdict: Verdict,
}

/// `poolcap probe`'s kernel ring in KiB: `poolcap capture`'s default `-B`, as the probe
/// takes no option for it.
const PROBE_RING_KIB: u64 = 4096;

/// The scenario a row measured, with the offered rate `pps` (`None`: the tool or setting is
/// outside the model: netsniff-ng, pmacct and tshark, probe rules in the kernel, several
/// queues, AF_XDP, the in-place reader).
pub fn scenario(row: &Row, pps: f64) -> Option<Scenario> {
    let c = row.capture.as_ref()?;
    let tool = match c.tool {
        Tool::Poolcap | Tool::Probe => ModelTool::Poolcap,
        Tool::Tcpdump => ModelTool::Tcpdump,
        Tool::Dumpcap => ModelTool::Dumpcap,
        Tool::NetsniffNg
        | Tool::Pmacct
        | Tool::Tshark
        | Tool::Forward
        | Tool::NetsniffFwd
        | Tool::Bridge
        | Tool::XdpRedirect
        | Tool::Stenotype => return None,
    };
    let multi = c.queues.is_some_and(|q| q > 1) || c.workers.is_some_and(|w| w > 1);
    if multi || c.inplace || c.backend.as_deref() == Some("af_xdp") || c.in_kernel {
        return None;
    }
    // The probe's rules, on its one worker (at least its first rule), and its ring: it
    // takes no -B, so it has `poolcap capture`'s default.
    let (rules, buffer_kib) = if c.tool == Tool::Probe {
        (c.rules.unwrap_or(1).max(1), PROBE_RING_KIB)
    } else {
        (0, c.buffer_kib)
    };
    let t = &row.traffic;
    Some(Scenario {
        snaplen: c.snaplen.unwrap_or(262_144),
        buffer_bytes: buffer_kib * 1024,
        pool: c.pool.unwrap_or((256, 64)),
        load: c.load,
        rules,
        output: match (c.write, c.dev_null, c.pcapng) {
            (true, _, true) => Output::Pcapng,
            (true, _, false) => Output::Pcap,
            (false, true, _) => Output::DevNull,
            (false, false, _) => Output::Nothing,
        },
        compress: c.compress.clone(),
        burst: t.burst.zip(t.idle).map(|(b, i)| (b, i.as_secs_f64())),
        count: row.median("offered").map(|n| n as u64),
        kernel_on_app_cpu: row.rps,
        io: if c.buffered {
            DiskIo::Buffered
        } else {
            DiskIo::Direct
        },
        ..Scenario::steady(tool, pps, t.size as f64)
    })
}

/// The offered rate of a row: frames per second of sending (median), without the idle gaps
/// of bursts.
pub fn offered_pps(row: &Row) -> Option<f64> {
    let (frames, pps) = (row.median("offered")?, row.median("sender_pps")?);
    if !(frames > 0.0 && pps > 0.0) {
        return None;
    }
    let t = &row.traffic;
    let idle = match (t.burst, t.idle) {
        (Some(b), Some(i)) if b > 0 => {
            i.as_secs_f64() * ((frames as u64) / b).saturating_sub(1) as f64
        }
        _ => 0.0,
    };
    let busy = frames / pps - idle;
    Some(if busy > 0.0 { frames / busy } else { pps })
}

/// Compares every (point, subject) of `rows` that the model describes, calibration points
/// left out.
pub fn compare(rows: &[Row], profile: &Profile) -> Vec<Compared> {
    rows.iter()
        .filter(|r| r.ok > 0 && !r.point.starts_with(super::POINT_PREFIX))
        .filter_map(|r| {
            let loss = r.get("loss")?;
            let measured = loss.median.max(0.0);
            let pps = offered_pps(r)?;
            let offered = r.median("offered")?;
            let s = scenario(r, pps)?;
            let p = predict::predict(profile, &s).ok()?;
            Some(Compared {
                point: r.point.clone(),
                subject: r.subject.clone(),
                tool: format!("{:?}", s.tool).to_lowercase(),
                rps: r.rps,
                runs: r.ok,
                offered_pps: pps,
                offered,
                measured,
                measured_range: (loss.min.max(0.0), loss.max.max(0.0)),
                predicted: p.loss,
                edge: p.edge,
                kernel: p.kernel_loss,
                app: p.app_loss,
                rel_error: relative_error(measured, p.loss),
                verdict: verdict(measured, p.loss, offered),
            })
        })
        .collect()
}

impl Compared {
    /// A point at the edge whose measured loss lies between the loss keeping up and the loss
    /// once behind, each widened by the tolerance (a measured 0 where no loss is predicted
    /// keeping up).
    pub fn within_edge(&self) -> bool {
        let Some(e) = self.edge else {
            return false;
        };
        let above = self.measured >= e.loss_keeping_up * (1.0 - TOLERANCE)
            || (self.measured == 0.0 && predicts_no_loss(e.loss_keeping_up, self.offered));
        above && self.measured <= e.loss_behind * (1.0 + TOLERANCE)
    }

    /// A judged point (measured loss ≥ 1%) whose prediction lies between its lowest and
    /// highest run: a miss there is no larger than the runs' own spread.
    pub fn within_runs(&self) -> bool {
        let (lo, hi) = self.measured_range;
        self.rel_error.is_some() && (lo..=hi).contains(&self.predicted)
    }

    /// A judged point whose every run lost within 20% of the median: the one point the
    /// target can hold a prediction to. Where the runs spread further (a capture at the edge
    /// that kept up in one run and fell behind in the next: poolcap writing 1514 B frames
    /// behind the receive work lost 0.8%, 28% and 34% in three runs) no single number lies
    /// within 20% of them all.
    pub fn repeatable(&self) -> bool {
        let (lo, hi) = self.measured_range;
        self.rel_error.is_some()
            && lo >= self.measured * (1.0 - TOLERANCE)
            && hi <= self.measured * (1.0 + TOLERANCE)
    }
}

/// The verdicts of a set of compared points.
#[derive(Debug, Clone, PartialEq)]
pub struct Tally {
    /// Points compared.
    pub points: usize,
    /// Points with a measured loss of at least 1%.
    pub judged: usize,
    /// ... of which predicted within 20%.
    pub within: usize,
    /// ... of which predicted between the lowest and highest run ([`Compared::within_runs`]).
    pub within_runs: usize,
    /// ... of which repeatable ([`Compared::repeatable`]).
    pub repeatable: usize,
    /// ... of those predicted within 20%.
    pub within_repeatable: usize,
    /// Points with no measured loss.
    pub no_loss: usize,
    /// ... of which loss was predicted (misses of the no-loss verdict).
    pub no_loss_misses: usize,
    /// Points with a measured loss of at least 1% predicted as no loss (under one frame).
    pub loss_missed: usize,
    /// Points the model put at the edge (keeping up or falling behind).
    pub edge: usize,
    /// ... of which measured between the two ([`Compared::within_edge`]).
    pub within_edge: usize,
    /// Misses (judged or no-loss) among the points at the edge.
    pub edge_misses: usize,
    /// Largest relative error.
    pub worst: Option<f64>,
    /// Median relative error.
    pub median: Option<f64>,
}

impl Tally {
    /// Counts `rows`.
    pub fn of<'a>(rows: impl IntoIterator<Item = &'a Compared>) -> Tally {
        let rows: Vec<&Compared> = rows.into_iter().collect();
        let mut errors: Vec<f64> = rows.iter().filter_map(|r| r.rel_error).collect();
        errors.sort_by(f64::total_cmp);
        let count = |f: &dyn Fn(&Compared) -> bool| rows.iter().filter(|r| f(r)).count();
        Tally {
            points: rows.len(),
            judged: errors.len(),
            within: errors.iter().filter(|e| **e <= TOLERANCE).count(),
            within_runs: count(&|r| r.within_runs()),
            repeatable: count(&|r| r.repeatable()),
            within_repeatable: count(&|r| {
                r.repeatable() && r.rel_error.is_some_and(|e| e <= TOLERANCE)
            }),
            no_loss: count(&|r| r.measured == 0.0),
            no_loss_misses: count(&|r| r.measured == 0.0 && r.verdict == Verdict::Miss),
            loss_missed: count(&|r| {
                r.rel_error.is_some() && predicts_no_loss(r.predicted, r.offered)
            }),
            edge: count(&|r| r.edge.is_some()),
            within_edge: count(&|r| r.within_edge()),
            edge_misses: count(&|r| r.edge.is_some() && r.verdict == Verdict::Miss),
            worst: errors.last().copied(),
            median: (!errors.is_empty()).then(|| errors[errors.len() / 2]),
        }
    }

    /// `12 points: 3 of 5 with loss ≥ 1% within 20% (worst 45%, median 12%); 1 of 6
    /// without loss predicted to lose`, and the points at the edge when there are any.
    pub fn line(&self) -> String {
        let e = |x: Option<f64>| x.map_or("–".to_owned(), |x| format!("{:.0}%", x * 100.0));
        let edge = if self.edge > 0 {
            format!(
                "; {} at the edge (keeping up or falling behind; {} of the misses above), {} \
                 of them measured between the two",
                self.edge, self.edge_misses, self.within_edge
            )
        } else {
            String::new()
        };
        format!(
            "{} points: {} of {} with measured loss ≥ 1% predicted within 20% (worst error \
             {}, median {}; {} of the {} whose runs all lost within 20% of their median; {} \
             of them predicted as no loss; {} between the point's lowest and highest run); \
             {} of {} without loss predicted to lose (no-loss misses){}",
            self.points,
            self.within,
            self.judged,
            e(self.worst),
            e(self.median),
            self.within_repeatable,
            self.repeatable,
            self.loss_missed,
            self.within_runs,
            self.no_loss_misses,
            self.no_loss,
            edge
        )
    }
}

/// The median loss, and the runs' lowest and highest where they differ.
fn measured(r: &Compared) -> String {
    let (lo, hi) = r.measured_range;
    if lo == hi {
        pct(r.measured)
    } else {
        format!("{} ({}–{})", pct(r.measured), pct(lo), pct(hi))
    }
}

/// A markdown table of `rows`: offered rate, measured and predicted loss (kernel +
/// application), relative error, verdict.
pub fn markdown(rows: &[Compared]) -> String {
    let mut s = String::from(
        "| point | subject | rps | runs | offered pps | measured | predicted (kernel + app) \
         | rel. error | verdict |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.0}k | {} | {} ({} + {}{}) | {} | {:?} |",
            md_cell(&r.point),
            md_cell(&r.subject),
            if r.rps { "on" } else { "off" },
            r.runs,
            r.offered_pps / 1e3,
            measured(r),
            pct(r.predicted),
            pct(r.kernel),
            pct(r.app),
            r.edge.map_or(String::new(), |e| format!(
                "; keeping up {}, behind {}, falls behind {:.0}%",
                pct(e.loss_keeping_up),
                pct(e.loss_behind),
                e.falls_behind * 100.0
            )),
            r.rel_error
                .map_or("–".to_owned(), |e| format!("{:.0}%", e * 100.0)),
            r.verdict
        );
    }
    s
}

/// `rows` as CSV.
pub fn csv(rows: &[Compared]) -> String {
    let mut s = String::from(
        "point,subject,tool,rps,runs,offered_pps,measured,measured_min,measured_max,predicted,\
         kernel,app,rel_error,verdict,keeping_up,behind,falls_behind\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{:.0},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{},{:?},{}",
            crate::report::csv_field(&r.point),
            crate::report::csv_field(&r.subject),
            r.tool,
            r.rps,
            r.runs,
            r.offered_pps,
            r.measured,
            r.measured_range.0,
            r.measured_range.1,
            r.predicted,
            r.kernel,
            r.app,
            r.rel_error.map_or(String::new(), |e| format!("{e:.4}")),
            r.verdict,
            r.edge.map_or(",,".to_owned(), |e| format!(
                "{:.6},{:.6},{:.4}",
                e.loss_keeping_up, e.loss_behind, e.falls_behind
            ))
        );
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::report::aggregate;
    use crate::testing::record;

    #[test]
    fn verdicts_follow_the_issue_targets() {
        let n = 1e6;
        assert_eq!(verdict(0.10, 0.119, n), Verdict::Hit);
        assert_eq!(verdict(0.10, 0.121, n), Verdict::Miss);
        assert_eq!(verdict(0.10, 0.081, n), Verdict::Hit);
        assert_eq!(verdict(0.0, 0.0, n), Verdict::Hit);
        assert_eq!(verdict(0.0, 0.02, n), Verdict::Miss);
        assert_eq!(verdict(0.005, 0.3, n), Verdict::Unjudged);
        assert_eq!(verdict(0.02, 0.0, n), Verdict::Miss);
        // Under one frame of a million predicted lost is "no loss"; one frame is a loss.
        assert_eq!(verdict(0.0, 0.9e-6, n), Verdict::Hit);
        assert_eq!(verdict(0.0, 1.0e-6, n), Verdict::Miss);
        assert!(predicts_no_loss(0.09, 10.0) && !predicts_no_loss(0.1, 10.0));
        assert_eq!(relative_error(0.5, 0.25), Some(0.5));
        assert_eq!(relative_error(0.005, 0.25), None);
    }

    #[test]
    fn a_bench_row_becomes_the_scenario_it_measured() {
        let rows = aggregate(&[record("B=1000", "poolcap", 0.0)]);
        let pps = offered_pps(&rows[0]).unwrap();
        assert!(
            (pps - 3000.0 / 0.01).abs() < 1e-3,
            "bursts sent in 10 ms: {pps}"
        );
        let s = scenario(&rows[0], pps).unwrap();
        assert_eq!(s.tool, ModelTool::Poolcap);
        assert_eq!(
            (s.buffer_bytes, s.pool, s.load),
            (512 * 1024, (64, 256), 3000)
        );
        assert_eq!(s.burst, Some((1000, 0.495)));
        assert_eq!(
            (s.count, s.output, s.kernel_on_app_cpu),
            (Some(3000), Output::Nothing, false)
        );
        // The sessions' `-w /dev/null` is an output of its own; a file is one whatever else.
        let mut r = record("B=1000", "poolcap", 0.0);
        r.capture.as_mut().unwrap().dev_null = true;
        let null = scenario(&aggregate(&[r.clone()])[0], pps).unwrap();
        assert_eq!(null.output, Output::DevNull);
        let c = r.capture.as_mut().unwrap();
        (c.write, c.pcapng) = (true, true);
        let file = scenario(&aggregate(&[r])[0], pps).unwrap();
        assert_eq!(file.output, Output::Pcapng);
        let other = aggregate(&[record("B=1000", "netsniff-ng", 0.0)]);
        assert!(scenario(&other[0], pps).is_none());
    }

    #[test]
    fn medians_of_runs_are_compared_and_calibration_points_left_out() {
        let rows = aggregate(&[
            record("B=1000", "poolcap", 0.0),
            record("B=1000", "poolcap", 0.2),
            record("B=1000", "poolcap", 0.3),
            record("calibrate 64B", "poolcap", 0.0),
        ]);
        let c = compare(&rows, &Profile::built_in());
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].runs, c[0].measured), (3, 0.2));
        assert_eq!(c[0].measured_range, (0.0, 0.3));
        let table = markdown(&c);
        assert!(
            table.contains("| B=1000 | poolcap | off | 3 | 300k | 20.00% (0–30.00%) |"),
            "{table}"
        );
        assert_eq!(csv(&c).lines().count(), 2);
    }

    fn compared(measured: f64, predicted: f64) -> Compared {
        Compared {
            point: "p".into(),
            subject: "poolcap".into(),
            tool: "poolcap".into(),
            rps: false,
            runs: 1,
            offered_pps: 1e5,
            offered: 1e5,
            measured,
            measured_range: (measured * 0.5, measured * 1.5),
            predicted,
            kernel: 0.0,
            app: predicted,
            rel_error: relative_error(measured, predicted),
            verdict: verdict(measured, predicted, 1e5),
            edge: None,
        }
    }

    #[test]
    fn a_tally_counts_hits_misses_and_errors() {
        // The first two repeatable (runs within 20% of their median), one of them a hit.
        let tight = |lo, hi, c: Compared| Compared {
            measured_range: (lo, hi),
            ..c
        };
        let rows = [
            tight(0.095, 0.11, compared(0.10, 0.11)),
            tight(0.09, 0.12, compared(0.10, 0.15)),
            compared(0.10, 0.0),
            compared(0.0, 0.0),
            compared(0.0, 0.05),
            compared(0.0, 0.5e-5),
            compared(0.10, 0.5e-5),
            compared(0.005, 0.0),
        ];
        let t = Tally::of(&rows);
        assert_eq!(
            (t.points, t.judged, t.within, t.no_loss, t.no_loss_misses),
            (8, 4, 1, 3, 1)
        );
        assert_eq!(t.loss_missed, 2);
        // 11% lies between its runs (9.5-11%), 15% not (9-12%), nor 0 and 0.0005% (5-15%).
        assert_eq!(t.within_runs, 1);
        assert_eq!((t.repeatable, t.within_repeatable), (2, 1));
        assert!((t.worst.unwrap() - 1.0).abs() < 1e-9);
        assert!((t.median.unwrap() - 1.0).abs() < 1e-3);
        assert!(
            t.line()
                .starts_with("8 points: 1 of 4 with measured loss ≥ 1% predicted within 20% (worst error 100%, median 100%; 1 of the 2 whose runs"),
            "{}",
            t.line()
        );
        assert_eq!(t.edge, 0);
        assert!(!t.line().contains("edge"), "{}", t.line());
    }

    #[test]
    fn points_at_the_edge_are_judged_against_both_losses() {
        // Each predicted behind (likelier), but for the last, predicted keeping up.
        let edge = |measured, keeping_up, behind| Compared {
            edge: Some(Edge {
                loss_keeping_up: keeping_up,
                loss_behind: behind,
                keeps_up_to_pps: 2e5,
                falls_behind: 0.9,
            }),
            ..compared(measured, behind)
        };
        let rows = [
            // Kept up: nothing lost, none predicted keeping up (a no-loss miss all the same).
            edge(0.0, 0.0, 0.3),
            // Fell behind part-way: between the two, a miss of the 20% target.
            edge(0.1, 0.0, 0.3),
            // Fell behind at once: within 20% of the loss once behind.
            edge(0.33, 0.0, 0.3),
            // Beyond both.
            edge(0.5, 0.0, 0.3),
            // Less than the loss keeping up.
            edge(0.01, 0.05, 0.3),
            // Predicted to keep up, and it did: a hit, between the two.
            Compared {
                edge: Some(Edge {
                    loss_keeping_up: 0.0,
                    loss_behind: 0.3,
                    keeps_up_to_pps: 2e5,
                    falls_behind: 0.2,
                }),
                ..compared(0.0, 0.0)
            },
        ];
        let within: Vec<bool> = rows.iter().map(Compared::within_edge).collect();
        assert_eq!(within, [true, true, true, false, false, true]);
        let t = Tally::of(&rows);
        assert_eq!((t.edge, t.within_edge, t.edge_misses), (6, 4, 4));
        assert!(
            t.line().ends_with(
                "; 6 at the edge (keeping up or falling behind; 4 of the misses above), 4 of \
                 them measured between the two"
            ),
            "{}",
            t.line()
        );
        assert!(markdown(&rows[..1])
            .contains("30.00% (0 + 30.00%; keeping up 0, behind 30.00%, falls behind 90%)"));
        assert!(csv(&rows[5..]).ends_with(",Hit,0.000000,0.300000,0.2000\n"));
        assert!(csv(&rows[..0])
            .trim_end()
            .ends_with("keeping_up,behind,falls_behind"));
    }
}
