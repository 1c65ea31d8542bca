//! The experiments: loss against the number of queues for several policies (WireCAP
//! Figure 11, extended to 64 queues) and loss against the offload threshold T (Figure 12).
//!
//! Why a module of its own: a sweep is a list of independent runs ([`Job`]s) that differ from
//! one baseline in one or two fields; running them on every core, then writing one CSV row
//! per run and one PNG line per series, is the same for every sweep and for the tests.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::engine;
use super::model::{policy_label, Config};
use super::report::{write_csv, Row};
use crate::plot::{Chart, Series};
use poolcap_core::policy::PolicySpec;

/// Queue counts of the queue sweep: WireCAP's 4, 5, 6, then what two cores cannot show.
pub const QUEUE_COUNTS: &[usize] = &[4, 5, 6, 8, 16, 64];
/// Thresholds T of the threshold sweep, in percent (WireCAP Figure 12).
pub const THRESHOLDS: &[f64] = &[60.0, 70.0, 80.0, 90.0];
/// Policies of the queue sweep, as written on the command line.
pub const POLICIES: &[&str] = &["basic", "buddy:60", "buddy:90", "congestion:90,50"];

/// One run of a sweep.
#[derive(Debug, Clone)]
pub struct Job {
    /// Which sweep.
    pub sweep: &'static str,
    /// The chart line it belongs to.
    pub series: String,
    /// Its x on the chart.
    pub x: f64,
    /// Buddy threshold, for the CSV.
    pub threshold: Option<f64>,
    /// For a reference run (x = NaN): the series whose legend shows its drop rate, instead
    /// of a line of its own on the chart.
    pub annotates: Option<String>,
    /// The run.
    pub cfg: Config,
}

/// Seeds `base.seed`, `base.seed + 1`, ... (`seeds` of them).
fn seed_list(base: &Config, seeds: u64) -> Vec<u64> {
    (0..seeds.max(1))
        .map(|i| base.seed.wrapping_add(i))
        .collect()
}

/// Loss vs queues: every policy at every queue count (and every seed).
pub fn queues_jobs(
    base: &Config,
    policies: &[PolicySpec],
    counts: &[usize],
    seeds: u64,
) -> Vec<Job> {
    let mut jobs = Vec::new();
    for p in policies {
        for &n in counts {
            for seed in seed_list(base, seeds) {
                jobs.push(Job {
                    sweep: "queues",
                    series: policy_label(p),
                    x: n as f64,
                    threshold: match p {
                        PolicySpec::Buddy { threshold } => Some(*threshold),
                        _ => None,
                    },
                    annotates: None,
                    cfg: Config {
                        queues: n,
                        policy: p.clone(),
                        groups: None,
                        seed,
                        ..base.clone()
                    },
                });
            }
        }
    }
    jobs
}

/// Loss vs T: buddy:T for every threshold at every queue count, and basic at each queue
/// count as the reference (a flat line in the table, a note in the chart's legend).
pub fn threshold_jobs(base: &Config, thresholds: &[f64], counts: &[usize], seeds: u64) -> Vec<Job> {
    let mut jobs = Vec::new();
    for &n in counts {
        for seed in seed_list(base, seeds) {
            for &t in thresholds {
                jobs.push(Job {
                    sweep: "threshold",
                    series: format!("buddy:T, {n} queues"),
                    x: t,
                    threshold: Some(t),
                    annotates: None,
                    cfg: Config {
                        queues: n,
                        policy: PolicySpec::Buddy { threshold: t },
                        groups: None,
                        seed,
                        ..base.clone()
                    },
                });
            }
            jobs.push(Job {
                sweep: "threshold",
                series: format!("basic, {n} queues"),
                x: f64::NAN,
                threshold: None,
                annotates: Some(format!("buddy:T, {n} queues")),
                cfg: Config {
                    queues: n,
                    policy: PolicySpec::Basic,
                    groups: None,
                    seed,
                    ..base.clone()
                },
            });
        }
    }
    jobs
}

/// Runs every job on up to `threads` threads; rows come back in job order.
pub fn run_jobs(jobs: &[Job], threads: usize) -> Result<Vec<Row>, String> {
    for j in jobs {
        j.cfg.validate()?;
    }
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<Result<Row, String>>>> = Mutex::new(vec![None; jobs.len()]);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, jobs.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(j) = jobs.get(i) else { break };
                let t0 = Instant::now();
                let r = engine::run(&j.cfg).map(|report| Row {
                    sweep: j.sweep.to_string(),
                    policy: policy_label(&j.cfg.policy),
                    queues: j.cfg.queues,
                    threshold: j.threshold,
                    seed: j.cfg.seed,
                    report,
                    wall_s: t0.elapsed().as_secs_f64(),
                });
                if let Ok(mut o) = out.lock() {
                    o[i] = Some(r);
                }
            });
        }
    });
    out.into_inner()
        .map_err(|_| "a sweep thread panicked".to_string())?
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("a run did not finish".into())))
        .collect()
}

/// Chart lines: per series, the mean drop rate (in percent) over seeds at each x, in the
/// order series first appear. Jobs with x = NaN are reference lines drawn flat across the
/// x range of the other series.
pub fn series(jobs: &[Job], rows: &[Row]) -> Vec<Series> {
    let mut names: Vec<&str> = Vec::new();
    for j in jobs {
        if !names.contains(&j.series.as_str()) {
            names.push(&j.series);
        }
    }
    let xs: Vec<f64> = {
        let mut v: Vec<f64> = jobs.iter().map(|j| j.x).filter(|x| !x.is_nan()).collect();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v
    };
    names
        .iter()
        .map(|name| {
            let mut pts: Vec<(f64, f64, usize)> = Vec::new();
            for (j, r) in jobs.iter().zip(rows) {
                if j.series != *name {
                    continue;
                }
                let y = 100.0 * r.report.total().drop_rate();
                let key = |x: f64| pts.iter().position(|p| p.0.total_cmp(&x).is_eq());
                match key(j.x) {
                    Some(i) => {
                        pts[i].1 += y;
                        pts[i].2 += 1;
                    }
                    None => pts.push((j.x, y, 1)),
                }
            }
            let mean: Vec<(f64, f64)> = pts.iter().map(|&(x, s, c)| (x, s / c as f64)).collect();
            let points = match mean.as_slice() {
                [(x, y)] if x.is_nan() => xs.iter().map(|&x| (x, *y)).collect(),
                _ => {
                    let mut m = mean;
                    m.sort_by(|a, b| a.0.total_cmp(&b.0));
                    m
                }
            };
            Series::new(*name, points)
        })
        .collect()
}

/// What the chart draws: [`series`] without the reference runs, whose mean drop rate goes
/// into the legend of the series they annotate instead ("..., basic 10.5%").
pub fn chart_series(jobs: &[Job], rows: &[Row]) -> Vec<Series> {
    let all = series(jobs, rows);
    let mut notes: Vec<(String, String)> = Vec::new();
    for j in jobs {
        if let Some(target) = &j.annotates {
            let Some(s) = all.iter().find(|s| s.name == j.series) else {
                continue;
            };
            let y = s.points.first().map_or(0.0, |p| p.1);
            let what = j.series.split(',').next().unwrap_or("reference");
            if !notes.iter().any(|(t, _)| t == target) {
                notes.push((target.clone(), format!("{what} {y:.2}%")));
            }
        }
    }
    all.into_iter()
        .filter(|s| {
            !jobs
                .iter()
                .any(|j| j.series == s.name && j.annotates.is_some())
        })
        .map(|mut s| {
            if let Some((_, note)) = notes.iter().find(|(t, _)| *t == s.name) {
                s.name = format!("{} (vs {note})", s.name);
            }
            s
        })
        .collect()
}

/// Files a sweep wrote.
#[derive(Debug, Clone)]
pub struct Written {
    /// One row per run.
    pub csv: PathBuf,
    /// The chart.
    pub png: PathBuf,
}

/// Writes `<dir>/<name>.csv` and `<dir>/<name>.png` (drop rate in percent against x).
pub fn write(
    dir: &Path,
    name: &str,
    chart: &Chart<'_>,
    jobs: &[Job],
    rows: &[Row],
) -> Result<Written, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let csv = dir.join(format!("{name}.csv"));
    write_csv(&csv, rows).map_err(|e| format!("{}: {e}", csv.display()))?;
    let png = dir.join(format!("{name}.png"));
    chart
        .draw(&png, &chart_series(jobs, rows))
        .map_err(|e| format!("wrote {}, but not the chart: {e}", csv.display()))?;
    Ok(Written { csv, png })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::model::{Arrivals, Shape, Split};

    fn small() -> Config {
        Config {
            seconds: 0.05,
            arrivals: Arrivals {
                rate_pps: 200_000.0,
                split: Split::Zipf {
                    flows: 100,
                    exponent: 1.1,
                },
                shape: Shape::Poisson,
            },
            ..Config::default()
        }
    }

    #[test]
    fn jobs_cover_the_grid_and_rows_come_back_in_order() {
        let pols: Vec<PolicySpec> = ["basic", "buddy:60"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let jobs = queues_jobs(&small(), &pols, &[2, 4], 2);
        assert_eq!(jobs.len(), 8);
        let rows = run_jobs(&jobs, 3).unwrap();
        for (j, r) in jobs.iter().zip(&rows) {
            assert_eq!((j.cfg.queues, j.cfg.seed), (r.queues, r.seed));
            r.report.check().unwrap();
        }
        let s = series(&jobs, &rows);
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[0].points.iter().map(|p| p.0).collect::<Vec<_>>(),
            [2.0, 4.0]
        );
    }

    #[test]
    fn reference_lines_span_the_thresholds() {
        let jobs = threshold_jobs(&small(), &[60.0, 90.0], &[2], 1);
        assert_eq!(jobs.len(), 3);
        let rows = run_jobs(&jobs, 2).unwrap();
        let s = series(&jobs, &rows);
        assert_eq!(s[1].name, "basic, 2 queues");
        assert_eq!(s[1].points.len(), 2);
        assert_eq!(s[1].points[0].1, s[1].points[1].1);
        let c = chart_series(&jobs, &rows);
        assert_eq!(c.len(), 1, "the reference is folded into the legend");
        assert!(
            c[0].name.starts_with("buddy:T, 2 queues (vs basic "),
            "{}",
            c[0].name
        );
    }
}
