//! Loss-curve plots: `fp8c plot a.csv b.csv -o loss.svg`, `fp8c train --plot`, and the
//! examples' `loss.svg`.
//!
//! plotters is built without font libraries (no `ttf` feature): SVG text is written as
//! `<text>` elements the viewer lays out, which needs no font. A PNG cannot draw glyphs without
//! a font rasteriser, so PNG plots have the curves, grid and a colour key but no text; the
//! SVG is the labelled one.

use plotters::prelude::*;
use std::path::Path;

/// One curve: a label and `(step, value)` points.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// `(x, y)` points in order.
    pub points: Vec<(f64, f64)>,
}

/// Curve colours, in series order (Okabe–Ito, readable for colour-blind viewers).
const COLORS: [RGBColor; 6] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
];

/// Line width of series `i` of `n`: earlier curves are drawn wider, so curves that coincide
/// (the point of a parity plot) all stay visible.
fn width(i: usize, n: usize) -> u32 {
    2 + 2 * (n - 1 - i.min(n - 1)) as u32
}

/// The most rows a log may have (a plot of more says nothing more, and a bad file must not
/// exhaust memory): 10 million.
pub const MAX_ROWS: usize = 10_000_000;

/// Reads a training log (`step,loss,...` with a header) as a series labelled `label`.
pub fn read_csv(path: &Path, label: &str) -> Result<Series, String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", path.display()));
    }
    if meta.len() > 1 << 30 {
        return Err(format!(
            "{}: {} bytes is more than a training log of {MAX_ROWS} rows needs",
            path.display(),
            meta.len()
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let mut lines = text.lines();
    let header = lines
        .next()
        .ok_or_else(|| format!("{}: empty file (expected a CSV header)", path.display()))?;
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    let find = |name: &str| {
        cols.iter().position(|c| *c == name).ok_or_else(|| {
            format!(
                "{}: no `{name}` column (the header is `{header}`)",
                path.display()
            )
        })
    };
    let (xs, ys) = (find("step")?, find("loss")?);
    let mut points = Vec::new();
    for (i, line) in lines.enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let num = |k: usize| -> Result<f64, String> {
            f.get(k).and_then(|s| s.parse::<f64>().ok()).ok_or_else(|| {
                format!(
                    "{}: line {}: not a number in column {k}",
                    path.display(),
                    i + 2
                )
            })
        };
        points.push((num(xs)?, num(ys)?));
        if points.len() > MAX_ROWS {
            return Err(format!("{}: more than {MAX_ROWS} rows", path.display()));
        }
    }
    if points.is_empty() {
        return Err(format!("{}: no data rows", path.display()));
    }
    Ok(Series {
        label: label.to_string(),
        points,
    })
}

/// A trailing moving average over `window` points (the first points average what exists).
pub fn smooth(points: &[(f64, f64)], window: usize) -> Vec<(f64, f64)> {
    let w = window.max(1);
    let mut sum = 0.0;
    let mut out = Vec::with_capacity(points.len());
    for (i, &(x, y)) in points.iter().enumerate() {
        sum += y;
        if i >= w {
            sum -= points[i - w].1;
        }
        out.push((x, sum / (i + 1).min(w) as f64));
    }
    out
}

/// Checks a plot target before the work that makes the plot: a `.svg` or `.png` name that
/// may be written ([`crate::files::Output::check`]).
pub fn check_target(path: &Path) -> Result<(), String> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    if !matches!(ext.as_deref(), Some("svg") | Some("png")) {
        return Err(format!(
            "{}: the plot's file name must end in .svg or .png",
            path.display()
        ));
    }
    crate::files::Output::check("", path, &[])
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Plots `series` to `path` (`.svg`, or `.png` without text), smoothed over `window` steps;
/// the file is written atomically after checks ([`crate::files::Output`]).
pub fn plot(series: &[Series], title: &str, window: usize, path: &Path) -> Result<(), String> {
    check_target(path)?;
    let out = crate::files::Output::check("", path, &[]).map_err(|e| e.to_string())?;
    let mut failure = None;
    out.write_path(|tmp| {
        draw(series, title, window, path, tmp).map_err(|e| {
            failure = Some(e.clone());
            crate::Error::invalid(e)
        })
    })
    .map_err(|e| failure.unwrap_or_else(|| e.to_string()))
}

/// Draws the plot into `file` (`path` decides the format and names it in messages).
fn draw(
    series: &[Series],
    title: &str,
    window: usize,
    path: &Path,
    file: &Path,
) -> Result<(), String> {
    let visible: Vec<&Series> = series.iter().filter(|s| !s.points.is_empty()).collect();
    if visible.is_empty() {
        return Err("nothing to plot: every series is empty".into());
    }
    let finite = |v: f64| v.is_finite();
    let xs = visible
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .filter(|v| finite(*v));
    let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    let smoothed: Vec<Vec<(f64, f64)>> = visible
        .iter()
        .map(|s| {
            smooth(&s.points, window)
                .into_iter()
                .filter(|p| finite(p.0) && finite(p.1))
                .collect()
        })
        .collect();
    let ys = smoothed.iter().flatten().map(|p| p.1);
    let (y0, y1) = ys.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    if x0 > x1 || y0 > y1 {
        return Err("nothing to plot: no finite values".into());
    }
    if !(x1 - x0).is_finite() || !(y1 - y0).is_finite() {
        return Err(format!(
            "cannot plot: the values span more than a float can hold (steps {x0:e} to {x1:e}, losses {y0:e} to {y1:e})"
        ));
    }
    let pad = ((y1 - y0) * 0.05).max(1e-6);
    let (y0, y1) = (y0 - pad, y1 + pad);
    let x1 = if x1 > x0 { x1 } else { x0 + 1.0 };
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    match ext.as_deref() {
        Some("svg") => {
            let root = SVGBackend::new(file, (960, 600)).into_drawing_area();
            root.fill(&WHITE).map_err(|e| err(&e))?;
            let caption = if window > 1 {
                format!("{title} ({window}-step moving average)")
            } else {
                title.to_string()
            };
            let mut chart = ChartBuilder::on(&root)
                .caption(caption, ("sans-serif", 22))
                .margin(16)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d(x0..x1, y0..y1)
                .map_err(|e| err(&e))?;
            chart
                .configure_mesh()
                .x_label_formatter(&|x| format!("{x:.0}"))
                .x_desc("step")
                .y_desc("loss")
                .light_line_style(RGBColor(235, 235, 235))
                .draw()
                .map_err(|e| err(&e))?;
            for (i, (s, pts)) in visible.iter().zip(&smoothed).enumerate() {
                let c = COLORS[i % COLORS.len()];
                chart
                    .draw_series(LineSeries::new(
                        pts.iter().copied(),
                        c.stroke_width(width(i, visible.len())),
                    ))
                    .map_err(|e| err(&e))?
                    .label(s.label.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3))
                    });
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.9))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(|e| err(&e))?;
            root.present().map_err(|e| err(&e))
        }
        Some("png") => {
            // No glyphs without a font rasteriser: curves, a grid and a colour key only.
            let root = BitMapBackend::new(file, (960, 600)).into_drawing_area();
            root.fill(&WHITE).map_err(|e| err(&e))?;
            let mut chart = ChartBuilder::on(&root)
                .margin(24)
                .build_cartesian_2d(x0..x1, y0..y1)
                .map_err(|e| err(&e))?;
            // The grid as plain lines in data coordinates (a mesh would draw label text).
            let grid = RGBColor(225, 225, 225);
            for k in 0..=10 {
                let x = x0 + (x1 - x0) * k as f64 / 10.0;
                let y = y0 + (y1 - y0) * k as f64 / 10.0;
                chart
                    .draw_series(LineSeries::new([(x, y0), (x, y1)], grid))
                    .map_err(|e| err(&e))?;
                chart
                    .draw_series(LineSeries::new([(x0, y), (x1, y)], grid))
                    .map_err(|e| err(&e))?;
            }
            for (i, pts) in smoothed.iter().enumerate() {
                let c = COLORS[i % COLORS.len()];
                chart
                    .draw_series(LineSeries::new(
                        pts.iter().copied(),
                        c.stroke_width(width(i, smoothed.len())),
                    ))
                    .map_err(|e| err(&e))?;
            }
            // Colour key: one swatch per series, top right, in series order.
            for i in 0..visible.len() {
                let c = COLORS[i % COLORS.len()];
                let (x, y) = (900, 30 + 22 * i as i32);
                root.draw(&Rectangle::new([(x, y), (x + 30, y + 10)], c.filled()))
                    .map_err(|e| err(&e))?;
            }
            root.present().map_err(|e| err(&e))
        }
        _ => Err(format!(
            "{}: the plot's file name must end in .svg or .png",
            path.display()
        )),
    }
}
