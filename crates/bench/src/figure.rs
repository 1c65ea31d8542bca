//! The figures of a suite: one PNG per figure (labelled axes, one line per tool or
//! configuration, log scales where the paper used them), drawn with [`crate::plot`] into the
//! run's directory and linked from `summary.md` and BENCHMARKS.md.

use std::path::Path;

use crate::plot::{Chart, Series};

use super::report::Row;

/// A figure to draw.
#[derive(Debug, Clone)]
pub struct Figure {
    /// File name in the run directory: `SUITE-WHAT.png`.
    pub file: String,
    /// Title.
    pub title: String,
    /// Fixed settings, and caveats that belong beside the figure.
    pub subtitle: String,
    /// x axis label.
    pub x_label: String,
    /// y axis label.
    pub y_label: String,
    /// Logarithmic x axis.
    pub log_x: bool,
    /// Logarithmic y axis.
    pub log_y: bool,
    /// The lines.
    pub series: Vec<Series>,
}

impl Figure {
    /// A figure with linear axes and no lines yet.
    pub fn new(file: impl Into<String>, title: impl Into<String>, x: &str, y: &str) -> Figure {
        Figure {
            file: file.into(),
            title: title.into(),
            subtitle: String::new(),
            x_label: x.to_owned(),
            y_label: y.to_owned(),
            log_x: false,
            log_y: false,
            series: Vec::new(),
        }
    }

    /// With a subtitle.
    pub fn with_subtitle(mut self, s: impl Into<String>) -> Figure {
        self.subtitle = s.into();
        self
    }

    /// With these lines.
    pub fn lines(mut self, s: Vec<Series>) -> Figure {
        self.series = s;
        self
    }

    /// Whether some line has a point to draw.
    pub fn has_points(&self) -> bool {
        self.series.iter().any(|s| !s.points.is_empty())
    }

    /// Draws the PNG into `dir`.
    pub fn draw(&self, dir: &Path) -> Result<(), String> {
        let mut c = Chart::new(&self.title, &self.x_label, &self.y_label);
        c.log_x = self.log_x;
        c.log_y = self.log_y;
        if !self.subtitle.is_empty() {
            c.subtitle = Some(&self.subtitle);
        }
        let kept: Vec<Series> = self
            .series
            .iter()
            .filter(|s| !s.points.is_empty())
            .cloned()
            .collect();
        c.draw(&dir.join(&self.file), &kept)
            .map_err(|e| e.to_string())
    }
}

/// One line per subject (in order of first appearance) through `(x(row), y(row))` for the
/// rows that pass `keep`, sorted by x. Rows without an x or y are left out.
pub fn by_subject(
    rows: &[Row],
    keep: impl Fn(&Row) -> bool,
    x: impl Fn(&Row) -> Option<f64>,
    y: impl Fn(&Row) -> Option<f64>,
) -> Vec<Series> {
    by_key(rows, keep, |r| r.subject.clone(), x, y)
}

/// One line per value of `name(row)`, as [`by_subject`].
pub fn by_key(
    rows: &[Row],
    keep: impl Fn(&Row) -> bool,
    name: impl Fn(&Row) -> String,
    x: impl Fn(&Row) -> Option<f64>,
    y: impl Fn(&Row) -> Option<f64>,
) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for r in rows.iter().filter(|r| keep(r)) {
        let n = name(r);
        let Some(p) = x(r).zip(y(r)) else { continue };
        match out.iter_mut().find(|s| s.name == n) {
            Some(s) => s.points.push(p),
            None => out.push(Series::new(n, vec![p])),
        }
    }
    for s in &mut out {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// The offered rate a row was measured at: the sender's achieved rate (median).
pub fn offered(r: &Row) -> Option<f64> {
    r.median("sender_pps")
}

/// A metric's median in percent.
pub fn percent(key: &'static str) -> impl Fn(&Row) -> Option<f64> {
    move |r| r.median(key).map(|v| v * 100.0)
}

/// A metric's median.
pub fn median(key: &'static str) -> impl Fn(&Row) -> Option<f64> {
    move |r| r.median(key)
}

/// The diagonal y = x over the x range of `series`, as a reference line.
pub fn diagonal(name: &str, series: &[Series]) -> Option<Series> {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (lo, hi) = xs.fold((f64::INFINITY, 0.0f64), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    (lo.is_finite() && hi > lo).then(|| Series::new(name, vec![(lo, lo), (hi, hi)]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::point::Record;
    use crate::report::aggregate;

    fn row(point: &str, subject: &str, pps: f64, loss: f64) -> Record {
        let mut r: Record = serde_json::from_value(serde_json::json!({
            "suite": "t", "point": point, "subject": subject, "poolcap": true, "run": 1,
            "rps": false, "traffic": {"size": 64, "count": 100, "rate": null, "burst": null,
            "idle": null}, "generator": "poolcap", "capture": null,
            "sent": {"frames": 100, "pps": pps, "seconds": 1.0, "batch": null},
            "counts": null, "in_file": null, "loss": loss, "cpu_s": null,
            "cpu_total_s": null, "spacing": null, "wall_s": 1.0, "busy_before": null,
            "error": null
        }))
        .unwrap();
        r.loss = Some(loss);
        r
    }

    #[test]
    fn lines_follow_subjects_and_sort_by_x() {
        let rows = aggregate(&[
            row("b", "a", 200.0, 0.2),
            row("a", "a", 100.0, 0.1),
            row("a", "b", 100.0, 0.0),
            row("b", "b", 200.0, 0.5),
        ]);
        let s = by_subject(&rows, |_| true, offered, percent("loss"));
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].name, "a");
        assert_eq!(s[0].points, vec![(100.0, 10.0), (200.0, 20.0)]);
        let only_b = by_subject(&rows, |r| r.subject == "b", offered, median("loss"));
        assert_eq!(only_b.len(), 1);
        let d = diagonal("offered", &s).unwrap();
        assert_eq!(d.points, vec![(100.0, 100.0), (200.0, 200.0)]);
        let f = Figure::new("t-x.png", "t", "x", "y").lines(s);
        assert!(f.has_points());
        let dir = tempfile::tempdir().unwrap();
        match f.draw(dir.path()) {
            Ok(()) => assert!(dir.path().join("t-x.png").exists()),
            Err(e) => assert!(e.contains("font"), "{e}"),
        }
    }
}
