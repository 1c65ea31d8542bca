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
        let fail = |e: String| PlotError::Draw {
            path: path.to_path_buf(),
            msg: e,
        };
        match (self.log_x, self.log_y) {
            (false, false) => self.render(path, &kept, xr, yr),
            (true, false) => self.render(path, &kept, xr.log_scale(), yr),
            (false, true) => self.render(path, &kept, xr, yr.log_scale()),
            (true, true) => self.render(path, &kept, xr.log_scale(), yr.log_scale()),
        }
        .map_err(fail)
    }

    fn render<X, Y>(&self, path: &Path, series: &[Series], xr: X, yr: Y) -> Result<(), String>
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
        let area = match self.subtitle {
            Some(s) => area
                .titled(
                    s,
                    ("sans-serif", 16).into_font().color(&RGBColor(80, 80, 80)),
                )
                .map_err(|e| e.to_string())?,
            None => area,
        };
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
            let color = Palette99::pick(i).to_rgba();
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
            .position(SeriesLabelPosition::UpperRight)
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
/// when every value is non-negative; log axes extend to the enclosing powers of ten' halves.
fn axis_range(values: &[f64], log: bool, is_y: bool) -> Range<f64> {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if log {
        let (lo, hi) = (lo / 1.5, hi * 1.5);
        return lo..hi.max(lo * 10.0);
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
        let r = axis_range(&[1e-4, 1e-2], true, true);
        assert!(r.start > 0.0 && r.start < 1e-4 && r.end > 1e-2);
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
