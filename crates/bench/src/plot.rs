//! Line charts as PNG files, for `poolcap sim` sweeps and the benchmarks: a title, two axis
//! labels, one line (with point markers) per series and a legend, linear or logarithmic axes.
//!
//! Why this small wrapper: every experiment draws the same kind of figure (a metric against
//! a swept parameter, one line per engine or policy), so the choices that make a chart
//! readable (size, fonts, ranges that include zero, log axes that skip zeros) live here once.
//!
//! Text is drawn with `plotters`' pure-Rust `ab_glyph` renderer, which loads no system font
//! by itself: the first chart registers DejaVu Sans from the file system
//! (`/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf`, Debian's `fonts-dejavu-core`), or the
//! TrueType file named by `POOLCAP_FONT`. No C library (fontconfig, freetype) is involved.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::prelude::*;
use plotters::style::register_font;

/// One line of a chart: a legend entry and its (x, y) points, drawn in the given order.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// The points, in drawing order (usually by increasing x).
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A series named `name` through `points`.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
        }
    }
}

/// Why a chart could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// No usable TrueType font was found.
    #[error("no font for chart text: {0} (install fonts-dejavu-core or set POOLCAP_FONT)")]
    Font(String),
    /// Nothing to draw: no series has a finite point (a positive y, on a log axis).
    #[error("nothing to plot in `{0}`: no finite points")]
    Empty(String),
    /// The drawing backend or the PNG encoder failed.
    #[error("drawing {path}: {msg}")]
    Draw {
        /// The file being written.
        path: PathBuf,
        /// What went wrong.
        msg: String,
    },
}

/// Line colours (Tableau 10: distinct, and readable on white).
const PALETTE: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

/// Font files tried in order when `POOLCAP_FONT` is not set.
const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// Registers a font as plotters' "sans-serif" once per process.
fn ensure_font() -> Result<(), PlotError> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let candidates: Vec<PathBuf> = match std::env::var_os("POOLCAP_FONT") {
            Some(p) => vec![PathBuf::from(p)],
            None => FONT_CANDIDATES.iter().map(PathBuf::from).collect(),
        };
        for path in &candidates {
            if let Ok(bytes) = std::fs::read(path) {
                // plotters keeps fonts for the life of the process: leak the one file once.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return Ok(());
                }
            }
        }
        Err(format!(
            "tried {}",
            candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
    .clone()
    .map_err(PlotError::Font)
}

/// A chart's layout; [`Chart::draw`] writes it with some series.
#[derive(Debug, Clone)]
pub struct Chart<'a> {
    /// Title above the plot area.
    pub title: &'a str,
    /// A smaller line under the title (e.g. the fixed parameters of an experiment).
    pub subtitle: Option<&'a str>,
    /// Label of the x axis.
    pub x_label: &'a str,
    /// Label of the y axis.
    pub y_label: &'a str,
    /// Logarithmic x axis (points with x <= 0 are skipped).
    pub log_x: bool,
    /// Logarithmic y axis (points with y <= 0 are skipped).
    pub log_y: bool,
    /// Image width in pixels.
    pub width: u32,
    /// Image height in pixels.
    pub height: u32,
}

impl<'a> Chart<'a> {
    /// A 1000x640 chart with linear axes.
    pub fn new(title: &'a str, x_label: &'a str, y_label: &'a str) -> Self {
        Self {
            title,
            subtitle: None,
            x_label,
            y_label,
            log_x: false,
            log_y: false,
            width: 1000,
            height: 640,
        }
    }

    /// Writes the chart with `series` to `path` as a PNG.
    pub fn draw(&self, path: &Path, series: &[Series]) -> Result<(), PlotError> {
        ensure_font()?;
        let kept: Vec<Series> = series
            .iter()
            .map(|s| Series {
                name: s.name.clone(),
                points: s
                    .points
                    .iter()
                    .copied()
                    .filter(|&(x, y)| {
                        x.is_finite()
                            && y.is_finite()
                            && (!self.log_x || x > 0.0)
                            && (!self.log_y || y > 0.0)
                    })
                    .collect(),
            })
            .collect();
        let xs: Vec<f64> = kept
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .collect();
        let ys: Vec<f64> = kept
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .collect();
        if xs.is_empty() {
            return Err(PlotError::Empty(path.display().to_string()));
        }
        let xr = axis_range(&xs, self.log_x, false);
        let yr = axis_range(&ys, self.log_y, true);
        let legend = self.legend_position(&kept, &xr, &yr);
        let fail = |e: String| PlotError::Draw {
            path: path.to_path_buf(),
            msg: e,
        };
        // Log axes get explicit ticks: plotters' own are sparse on short ranges.
        let xt = log_ticks(&xs, &xr, 12);
        let yt = log_ticks(&ys, &yr, 0);
        match (self.log_x, self.log_y) {
            (false, false) => self.render(path, &kept, legend, xr, yr),
            (true, false) => {
                self.render(path, &kept, legend, xr.log_scale().with_key_points(xt), yr)
            }
            (false, true) => {
                self.render(path, &kept, legend, xr, yr.log_scale().with_key_points(yt))
            }
            (true, true) => self.render(
                path,
                &kept,
                legend,
                xr.log_scale().with_key_points(xt),
                yr.log_scale().with_key_points(yt),
            ),
        }
        .map_err(fail)
    }

    /// The corner where the legend covers the fewest points of the lines.
    fn legend_position(
        &self,
        series: &[Series],
        xr: &Range<f64>,
        yr: &Range<f64>,
    ) -> SeriesLabelPosition {
        let unit = |v: f64, r: &Range<f64>, log: bool| {
            if log {
                (v.ln() - r.start.ln()) / (r.end.ln() - r.start.ln())
            } else {
                (v - r.start) / (r.end - r.start)
            }
        };
        // Points along every segment, in 0..1 plot coordinates.
        let mut pts = Vec::new();
        for s in series {
            let p: Vec<(f64, f64)> = s
                .points
                .iter()
                .map(|&(x, y)| (unit(x, xr, self.log_x), unit(y, yr, self.log_y)))
                .collect();
            pts.extend(p.iter().copied());
            for w in p.windows(2) {
                for k in 1..16 {
                    let f = k as f64 / 16.0;
                    pts.push((
                        w[0].0 + f * (w[1].0 - w[0].0),
                        w[0].1 + f * (w[1].1 - w[0].1),
                    ));
                }
            }
        }
        // Rough legend size as a share of the plot area.
        let longest = series.iter().map(|s| s.name.len()).max().unwrap_or(0) as f64;
        let w = ((longest * 9.0 + 60.0) / (self.width as f64 - 130.0)).min(0.9);
        let h = ((series.len() as f64 * 21.0 + 16.0) / (self.height as f64 - 160.0)).min(0.9);
        let candidates = [
            (SeriesLabelPosition::UpperRight, 1.0 - w, 1.0 - h),
            (SeriesLabelPosition::UpperLeft, 0.0, 1.0 - h),
            (SeriesLabelPosition::LowerRight, 1.0 - w, 0.0),
            (SeriesLabelPosition::LowerLeft, 0.0, 0.0),
            (SeriesLabelPosition::MiddleRight, 1.0 - w, 0.5 - h / 2.0),
        ];
        candidates
            .into_iter()
            .map(|(pos, x0, y0)| {
                let covered = pts
                    .iter()
                    .filter(|&&(x, y)| x >= x0 && x <= x0 + w && y >= y0 && y <= y0 + h)
                    .count();
                (covered, pos)
            })
            .min_by_key(|(c, _)| *c)
            .map_or(SeriesLabelPosition::UpperRight, |(_, p)| p)
    }

    fn render<X, Y>(
        &self,
        path: &Path,
        series: &[Series],
        legend: SeriesLabelPosition,
        xr: X,
        yr: Y,
    ) -> Result<(), String>
    where
        X: AsRangedCoord<Value = f64>,
        Y: AsRangedCoord<Value = f64>,
        X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
        Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let root = BitMapBackend::new(path, (self.width, self.height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let area = root
            .margin(10, 0, 0, 0)
            .titled(self.title, ("sans-serif", 26))
            .map_err(|e| e.to_string())?;
        // The subtitle wraps at "; " or ", " where it would not fit the width.
        let mut area = area;
        if let Some(sub) = self.subtitle {
            let style = ("sans-serif", 16).into_font().color(&RGBColor(80, 80, 80));
            let room = self.width.saturating_sub(40);
            let fits = |t: &str| {
                area.estimate_text_size(t, &style)
                    .map_or(true, |(w, _)| w <= room)
            };
            let mut lines: Vec<String> = Vec::new();
            for part in sub.split_inclusive("; ") {
                match lines.last_mut() {
                    Some(l) if fits(&format!("{l}{part}")) => l.push_str(part),
                    _ => lines.push(part.to_string()),
                }
            }
            for line in lines {
                area = area
                    .titled(line.trim_end_matches("; "), style.clone())
                    .map_err(|e| e.to_string())?;
            }
        }
        let mut chart = ChartBuilder::on(&area)
            .margin(16)
            .x_label_area_size(52)
            .y_label_area_size(80)
            .build_cartesian_2d(xr, yr)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc(self.x_label)
            .y_desc(self.y_label)
            .axis_desc_style(("sans-serif", 18))
            .label_style(("sans-serif", 15))
            .x_label_formatter(&|v| short_number(*v))
            .y_label_formatter(&|v| short_number(*v))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, s) in series.iter().enumerate() {
            let (r, g, b) = PALETTE[i % PALETTE.len()];
            let color = RGBColor(r, g, b);
            let style = color.stroke_width(2);
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), style).point_size(4))
                .map_err(|e| e.to_string())?
                .label(s.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
        }
        chart
            .configure_series_labels()
            .label_font(("sans-serif", 16))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(legend)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())
    }
}

/// Writes a line chart of `series` to `path` (PNG): one line per series with a legend.
/// With `log_y` the y axis is logarithmic and points with y <= 0 are left out.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_y: bool,
) -> Result<(), PlotError> {
    let mut c = Chart::new(title, x_label, y_label);
    c.log_y = log_y;
    c.draw(path, series)
}

/// The axis range for `values` (not empty): linear axes pad by 5% and, for y, include zero
/// when every value is non-negative; a log x axis gets 12% of room on either side, a log y
/// axis reaches out to the 1-2-5 ticks around the data.
fn axis_range(values: &[f64], log: bool, is_y: bool) -> Range<f64> {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if log {
        if !is_y {
            return lo / 1.12..(hi * 1.12).max(lo * 1.5);
        }
        // y: out to the 1-2-5 ticks around the data, so the extremes are labelled.
        let lo = snap_125(lo / 1.02, false);
        return lo..snap_125(hi * 1.02, true).max(lo * 10.0);
    }
    let lo = if is_y && lo >= 0.0 { 0.0 } else { lo };
    let span = hi - lo;
    if span <= 0.0 || !span.is_finite() {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        return (lo - if is_y && lo >= 0.0 { 0.0 } else { pad })..(hi + pad);
    }
    let pad = span * 0.05;
    let start = if is_y && lo == 0.0 { 0.0 } else { lo - pad };
    start..hi + pad
}

/// The 1, 2, 5 times a power of ten just below (or above, with `up`) `v` > 0.
fn snap_125(v: f64, up: bool) -> f64 {
    let decade = 10f64.powf(v.log10().floor());
    let steps = [1.0, 2.0, 5.0, 10.0];
    if up {
        steps
            .iter()
            .map(|m| m * decade)
            .find(|&t| t >= v)
            .unwrap_or(10.0 * decade)
    } else {
        steps
            .iter()
            .rev()
            .map(|m| m * decade)
            .find(|&t| t <= v)
            .unwrap_or(decade)
    }
}

/// Ticks of a log axis over `range`: the data values themselves when there are at most
/// `max_data` distinct ones (a sweep's x values), else 1, 2, 5 times powers of ten.
fn log_ticks(values: &[f64], range: &Range<f64>, max_data: usize) -> Vec<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| *x > 0.0).collect();
    v.sort_by(f64::total_cmp);
    v.dedup();
    if !v.is_empty() && v.len() <= max_data {
        return v;
    }
    let (lo, hi) = (range.start.max(f64::MIN_POSITIVE), range.end);
    let mut ticks = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi && ticks.len() < 64 {
        for m in [1.0, 2.0, 5.0] {
            let t = m * decade;
            if t >= lo && t <= hi {
                ticks.push(t);
            }
        }
        decade *= 10.0;
    }
    ticks
}

/// Tick labels without trailing noise: 4, 0.25, 1.5k, 2M, 1e-05.
fn short_number(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        return "0".into();
    }
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if a >= 1e9 {
        format!("{}G", trim(format!("{:.2}", v / 1e9)))
    } else if a >= 1e6 {
        format!("{}M", trim(format!("{:.2}", v / 1e6)))
    } else if a >= 1e4 {
        format!("{}k", trim(format!("{:.2}", v / 1e3)))
    } else if a >= 1e-3 {
        trim(format!("{v:.4}"))
    } else {
        format!("{v:.0e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_include_zero_and_pad() {
        let r = axis_range(&[0.5, 2.0], false, true);
        assert_eq!(r.start, 0.0);
        assert!(r.end > 2.0);
        let r = axis_range(&[4.0, 64.0], false, false);
        assert!(r.start < 4.0 && r.end > 64.0);
        let r = axis_range(&[0.0, 0.0], false, true);
        assert_eq!(r, 0.0..1.0, "all-zero data still gets a visible axis");
        let r = axis_range(&[0.023, 10.5], true, true);
        assert!(
            (r.start - 0.02).abs() < 1e-12 && (r.end - 20.0).abs() < 1e-9,
            "{r:?}"
        );
    }

    #[test]
    fn log_ticks_are_the_data_or_one_two_five() {
        assert_eq!(
            log_ticks(&[4.0, 8.0, 4.0, 64.0], &(3.5..70.0), 12),
            [4.0, 8.0, 64.0]
        );
        assert_eq!(
            log_ticks(&[0.3, 30.0], &(0.25..40.0), 0),
            [0.5, 1.0, 2.0, 5.0, 10.0, 20.0]
        );
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(short_number(0.0), "0");
        assert_eq!(short_number(4.0), "4");
        assert_eq!(short_number(0.25), "0.25");
        assert_eq!(short_number(2_000_000.0), "2M");
        assert_eq!(short_number(15_000.0), "15k");
        assert_eq!(short_number(0.00001), "1e-5");
    }

    #[test]
    fn writes_a_png_or_explains_the_missing_font() {
        let dir = std::env::temp_dir().join(format!("poolcap-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.png");
        let s = [
            Series::new("a", vec![(1.0, 0.0), (2.0, 1.0), (4.0, 3.0)]),
            Series::new("b", vec![(1.0, 2.0), (2.0, 2.0)]),
        ];
        match line_chart(&path, "test", "x", "y", &s, true) {
            Ok(()) => {
                let bytes = std::fs::read(&path).unwrap();
                assert_eq!(&bytes[1..4], b"PNG");
            }
            Err(PlotError::Font(_)) => {}
            Err(e) => panic!("{e}"),
        }
        assert!(matches!(
            line_chart(
                &path,
                "t",
                "x",
                "y",
                &[Series::new("z", vec![(1.0, 0.0)])],
                true
            ),
            Err(PlotError::Empty(_) | PlotError::Font(_))
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
