//! Bench results against the loss model: the profile a `poolcap bench predict` run
//! calibrated for itself ([`of_run`]), the figure of predicted against measured loss
//! ([`series`]), for `poolcap bench predict` and `poolcap-bench validate DIR`. The comparison
//! itself is [`poolcap_measure::calibrate::validate`], beside the calibration it checks.

use poolcap_doctor::profile::Profile;
use poolcap_measure::calibrate::{self, validate::Compared};
use poolcap_measure::report::Row;
use poolcap_measure::scratch::timestamp;

use crate::meta::Meta;
use crate::plot::Series;

/// The profile calibrated by a bench run with calibration points ([`calibrate::points`], as
/// `poolcap bench predict` runs first): from its calibration rows alone and its x-loop cost
/// (`None`: the run has none).
pub fn of_run(meta: &Meta, rows: &[Row]) -> Option<Profile> {
    let samples = calibrate::samples(rows);
    samples.keys().next()?;
    let source = format!(
        "poolcap bench {} calibration points ({} run started {} UTC)",
        meta.suite.name(),
        meta.scale.name(),
        timestamp(meta.started)
    );
    Some(calibrate::of_rows(
        rows,
        meta.calibration.ns_per_iteration,
        meta.disk.clone(),
        source,
    ))
}

/// Predicted against measured loss in percent, one series per tool, and the diagonal.
pub fn series(rows: &[Compared]) -> Vec<Series> {
    let mut v: Vec<Series> = ["poolcap", "tcpdump", "dumpcap"]
        .iter()
        .map(|tool| {
            let mut pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.tool == *tool)
                .map(|r| (r.measured * 100.0, r.predicted * 100.0))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series::new(*tool, pts)
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    let top = rows
        .iter()
        .map(|r| r.measured.max(r.predicted) * 100.0)
        .fold(1.0, f64::max);
    v.push(Series::new(
        "predicted = measured",
        vec![(0.0, 0.0), (top, top)],
    ));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use poolcap_measure::calibrate::validate::compare;
    use poolcap_measure::report::aggregate;
    use poolcap_measure::testing::record;

    #[test]
    fn one_series_per_tool_measured_and_the_diagonal() {
        let rows = aggregate(&[
            record("B=1000", "poolcap", 0.2),
            record("B=2000", "poolcap", 0.4),
        ]);
        let s = series(&compare(&rows, &Profile::built_in()));
        let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["poolcap", "predicted = measured"]);
        let measured: Vec<f64> = s[0].points.iter().map(|p| p.0).collect();
        assert_eq!(measured, [20.0, 40.0], "measured loss in percent, in order");
        let top = s[1].points[1].0;
        assert!(top >= 40.0, "the diagonal reaches the largest loss: {top}");
    }
}
