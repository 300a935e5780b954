//! Figures (PNG and SVG, 800x500) drawn with plotters from the CSV files alone.
//!
//! This module only reads values out of [`Table`]s and draws them: every number on a
//! figure is a cell of a CSV file (the latency reduction figure reads
//! `latency-compare.csv`, which the summary derives from `latency.csv`). Tick labels
//! format units (bytes as KiB/MiB, throughput as kops/s); nothing else is computed.
//!
//! Each figure has a title, axis labels with units, one series per protocol (or per
//! setting), error bars from p50 to p99 where the CSV has them, and a legend in its
//! own strip under the plot, so it never covers data. The font is DejaVu Sans,
//! bundled (registered once; PNG text needs it, there are no system fonts).

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::{Preset, Result, SweepError, Table};

/// Figure size in pixels.
pub const SIZE: (u32, u32) = (800, 500);

const FONT: &str = "sans-serif";

/// Registers the bundled font with plotters (once per process).
pub fn register_font() -> Result<()> {
    static DONE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
            .and_then(|()| plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold()))
            .map_err(|_| "the bundled DejaVu font does not load".to_string())
    })
    .clone()
    .map_err(|problem| SweepError::Plot { figure: "(font)".into(), problem })
}

/// How the x axis is scaled and labelled.
#[derive(Clone, Debug, PartialEq)]
pub enum XAxis {
    /// Byte sizes, log2 scale, labelled `32 B`, `1 KiB`.
    Bytes,
    /// Counts, log2 scale (threads).
    Log2,
    /// Named positions 0, 1, 2 ...
    Categories(Vec<String>),
}

/// How the y axis is labelled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum YAxis {
    /// Plain numbers.
    Plain,
    /// Bytes, labelled in MiB.
    Mib,
    /// Operations per second, labelled in kops/s.
    Kops,
}

/// A point of a series: `(x, y, Some((low, high)))`, the error bar from p50 to p99.
pub type Pt = (f64, f64, Option<(f64, f64)>);

/// One series of a line figure.
#[derive(Clone, Debug)]
pub struct LineSeries {
    /// Legend text.
    pub name: String,
    /// Colour.
    pub color: RGBColor,
    /// `(x, y, Some((low, high)))`: the point and its p50..p99 error bar.
    pub points: Vec<Pt>,
    /// Markers only (the paper's values), drawn as crosses.
    pub markers_only: bool,
    /// Dashed line (reference lines).
    pub dashed: bool,
}

/// A line figure.
#[derive(Clone, Debug)]
pub struct LineFigure {
    /// File stem (`fig13-put-latency`).
    pub stem: String,
    /// Title.
    pub title: String,
    /// X axis kind.
    pub x: XAxis,
    /// Y axis kind.
    pub y: YAxis,
    /// X axis label, with units.
    pub x_label: String,
    /// Y axis label, with units.
    pub y_label: String,
    /// Series.
    pub series: Vec<LineSeries>,
    /// A note under the legend (method, machine).
    pub note: Option<String>,
    /// Use a log y axis when the values span more than a decade and a half (latency
    /// tails); for positive quantities only.
    pub y_log_auto: bool,
}

/// A stacked bar figure (breakdowns).
#[derive(Clone, Debug)]
pub struct BarFigure {
    /// File stem.
    pub stem: String,
    /// Title.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label, with units.
    pub y_label: String,
    /// Bar labels.
    pub groups: Vec<String>,
    /// Stack components: name, colour, one value per group (negative values are drawn as 0).
    pub stacks: Vec<(String, RGBColor, Vec<f64>)>,
    /// The measured total per group, drawn as a black tick.
    pub totals: Option<(String, Vec<f64>)>,
    /// A note under the legend.
    pub note: Option<String>,
}

/// A figure of either kind.
#[derive(Clone, Debug)]
pub enum Figure {
    /// Lines.
    Line(LineFigure),
    /// Stacked bars.
    Bar(BarFigure),
}

impl Figure {
    fn stem(&self) -> &str {
        match self {
            Figure::Line(f) => &f.stem,
            Figure::Bar(f) => &f.stem,
        }
    }
}

/// A colour of the figures.
pub const BLUE: RGBColor = RGBColor(31, 119, 180);
/// A colour of the figures.
pub const RED: RGBColor = RGBColor(214, 39, 40);
/// A colour of the figures.
pub const GREEN: RGBColor = RGBColor(44, 160, 44);
/// A colour of the figures.
pub const ORANGE: RGBColor = RGBColor(255, 127, 14);
/// A colour of the figures.
pub const PURPLE: RGBColor = RGBColor(148, 103, 189);
/// A colour of the figures.
pub const BROWN: RGBColor = RGBColor(140, 86, 75);
/// A colour of the figures.
pub const PINK: RGBColor = RGBColor(227, 119, 194);
/// A colour of the figures.
pub const OLIVE: RGBColor = RGBColor(188, 189, 34);
/// A colour of the figures.
pub const GREY: RGBColor = RGBColor(127, 127, 127);
/// The colours of series in order.
pub const PALETTE: [RGBColor; 9] = [BLUE, RED, GREEN, ORANGE, PURPLE, BROWN, PINK, OLIVE, GREY];

/// The colour of a protocol (same on every figure).
pub fn protocol_color(p: &str) -> RGBColor {
    match p {
        "boom" => BLUE,
        "rdmp" => RED,
        "rpc" => GREEN,
        "rdmp-cc" => ORANGE,
        "herd" => PURPLE,
        "rfp" => BROWN,
        "pdpm-direct" => PINK,
        "clover" => OLIVE,
        _ => GREY,
    }
}

/// The legend name of a protocol.
pub fn protocol_name(p: &str) -> String {
    match p {
        "boom" => "BOOM-KV".into(),
        "rdmp" => "RDMP-KV (two-phase)".into(),
        "rpc" => "RDMA-KV (RPC)".into(),
        "rdmp-cc" => "RDMP-CC (client FLUSH)".into(),
        "herd" => "HERD (polled WRITE)".into(),
        "rfp" => "RFP (remote fetching)".into(),
        "pdpm-direct" => "pDPM-Direct (passive, CAS lock)".into(),
        "clover" => "Clover (passive, CAS-linked versions)".into(),
        o => o.into(),
    }
}

/// Labels a byte size: `32 B`, `1 KiB`, `64 MiB`.
pub fn bytes_label(v: f64) -> String {
    let b = v.round().max(0.0) as u64;
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if b >= 1 << shift && b % (1 << shift) == 0 {
            return format!("{} {unit}", b >> shift);
        }
    }
    if b >= 1024 {
        format!("{:.1} KiB", v / 1024.0)
    } else {
        format!("{b} B")
    }
}

fn plot_err(figure: &str) -> impl Fn(String) -> SweepError + '_ {
    move |problem| SweepError::Plot { figure: figure.to_string(), problem }
}

/// Draws `fig` into `dir` as `<stem>.png` and `<stem>.svg`; returns both paths.
pub fn draw(fig: &Figure, dir: &Path) -> Result<Vec<PathBuf>> {
    register_font()?;
    let png = dir.join(format!("{}.png", fig.stem()));
    let svg = dir.join(format!("{}.svg", fig.stem()));
    let e = plot_err(fig.stem());
    {
        let root = BitMapBackend::new(&png, SIZE).into_drawing_area();
        draw_on(&root, fig).map_err(&e)?;
        root.present().map_err(|x| e(x.to_string()))?;
    }
    {
        let root = SVGBackend::new(&svg, SIZE).into_drawing_area();
        draw_on(&root, fig).map_err(&e)?;
        root.present().map_err(|x| e(x.to_string()))?;
    }
    Ok(vec![png, svg])
}

fn draw_on<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, fig: &Figure) -> std::result::Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    match fig {
        Figure::Line(f) => draw_line(root, f),
        Figure::Bar(f) => draw_bars(root, f),
    }
}

/// Legend entries: name, colour, marker-only.
type Entry = (String, RGBColor, bool, bool);

/// Splits off a legend strip at the bottom sized for `entries` and `note`, draws it,
/// and returns the area left for the chart.
fn legend_strip<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    entries: &[Entry],
    note: Option<&str>,
) -> std::result::Result<DrawingArea<DB, Shift>, String> {
    let longest = entries.iter().map(|e| e.0.chars().count()).max().unwrap_or(0);
    let cols = if longest > 30 { 2 } else { 3 };
    let rows = entries.len().div_ceil(cols);
    let note_lines: Vec<String> = note.map(wrap_note).unwrap_or_default();
    let h = (rows as u32 * 22 + 8 + note_lines.len() as u32 * 16).min(SIZE.1 / 2) as i32;
    let (w, total_h) = root.dim_in_pixel();
    let (chart, strip) = root.split_vertically(total_h as i32 - h);
    let col_w = (w as i32 - 40) / cols as i32;
    let font = (FONT, 14).into_font();
    for (i, (name, color, markers, dashed)) in entries.iter().enumerate() {
        let x = 20 + (i % cols) as i32 * col_w;
        let y = 4 + (i / cols) as i32 * 22;
        let style = ShapeStyle::from(color).stroke_width(2);
        if *markers {
            strip.draw(&Cross::new((x + 15, y + 9), 5, style)).map_err(|e| e.to_string())?;
        } else if *dashed {
            for k in 0..3 {
                strip
                    .draw(&PathElement::new(vec![(x + k * 11, y + 9), (x + k * 11 + 7, y + 9)], style))
                    .map_err(|e| e.to_string())?;
            }
        } else {
            strip.draw(&PathElement::new(vec![(x, y + 9), (x + 30, y + 9)], style)).map_err(|e| e.to_string())?;
            strip.draw(&Circle::new((x + 15, y + 9), 3, style.filled())).map_err(|e| e.to_string())?;
        }
        strip.draw(&Text::new(name.clone(), (x + 38, y + 1), font.clone())).map_err(|e| e.to_string())?;
    }
    let nf = (FONT, 12).into_font().color(&RGBColor(80, 80, 80));
    for (k, line) in note_lines.iter().enumerate() {
        let y = 4 + rows as i32 * 22 + k as i32 * 16;
        strip.draw(&Text::new(line.clone(), (20, y), nf.clone())).map_err(|e| e.to_string())?;
    }
    Ok(chart)
}

fn wrap_note(s: &str) -> Vec<String> {
    let mut lines = vec![String::new()];
    for w in s.split_whitespace() {
        let cur = lines.last_mut().map(|l| l.chars().count()).unwrap_or(0);
        if cur + w.len() + 1 > 118 {
            lines.push(String::new());
        }
        if let Some(l) = lines.last_mut() {
            if !l.is_empty() {
                l.push(' ');
            }
            l.push_str(w);
        }
    }
    lines.truncate(4);
    lines
}

fn y_range(f: &LineFigure) -> Range<f64> {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for s in &f.series {
        for &(_, y, band) in &s.points {
            lo = lo.min(y);
            hi = hi.max(y);
            if let Some((a, b)) = band {
                lo = lo.min(a);
                hi = hi.max(b);
            }
        }
    }
    if !lo.is_finite() || !hi.is_finite() {
        return 0.0..1.0;
    }
    let lo = lo.min(0.0);
    let hi = if hi <= lo { lo + 1.0 } else { hi };
    let pad = (hi - lo) * 0.08;
    (if lo < 0.0 { lo - pad } else { lo })..hi + pad
}

fn x_values(f: &LineFigure) -> (f64, f64) {
    let xs = f.series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let lo = xs.clone().fold(f64::INFINITY, f64::min);
    let hi = xs.fold(f64::NEG_INFINITY, f64::max);
    if lo.is_finite() && hi.is_finite() {
        (lo, hi)
    } else {
        (1.0, 2.0)
    }
}

fn y_fmt(kind: YAxis) -> impl Fn(&f64) -> String {
    move |v: &f64| match kind {
        YAxis::Plain => {
            let a = v.abs();
            if a >= 100.0 || v.fract() == 0.0 {
                format!("{v:.0}")
            } else if a >= 10.0 {
                format!("{v:.1}")
            } else {
                format!("{v:.2}")
            }
        }
        // Values are already in MiB or kops/s (see draw_line).
        YAxis::Mib | YAxis::Kops => {
            if v.fract() == 0.0 || v.abs() >= 100.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            }
        }
    }
}

fn positive_span(f: &LineFigure) -> Option<(f64, f64)> {
    let vals = f
        .series
        .iter()
        .flat_map(|s| s.points.iter().flat_map(|&(_, y, b)| [Some(y), b.map(|b| b.0), b.map(|b| b.1)]).flatten());
    let lo = vals.clone().fold(f64::INFINITY, f64::min);
    let hi = vals.fold(f64::NEG_INFINITY, f64::max);
    (lo > 0.0 && hi.is_finite() && hi / lo > 30.0).then_some((lo, hi))
}

fn draw_line<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, f: &LineFigure) -> std::result::Result<(), String> {
    // Display units only: bytes as MiB, operations/s as kops/s.
    let k = match f.y {
        YAxis::Plain => 1.0,
        YAxis::Mib => 1.0 / 1048576.0,
        YAxis::Kops => 1.0 / 1000.0,
    };
    let mut scaled = f.clone();
    for s in &mut scaled.series {
        for p in &mut s.points {
            *p = (p.0, p.1 * k, p.2.map(|(a, b)| (a * k, b * k)));
        }
    }
    let f = &scaled;
    let entries: Vec<Entry> = f
        .series
        .iter()
        .filter(|s| !s.points.is_empty())
        .map(|s| (s.name.clone(), s.color, s.markers_only, s.dashed))
        .collect();
    let area = legend_strip(root, &entries, f.note.as_deref())?;
    let yr = y_range(f);
    let ylog = if f.y_log_auto { positive_span(f) } else { None };
    let (x0, x1) = x_values(f);
    macro_rules! go {
        ($xr:expr, $fmt:expr, $n:expr) => {
            match ylog {
                Some((lo, hi)) => chart(&area, f, $xr, (lo / 1.5..hi * 1.5).log_scale(), $fmt, $n, true),
                None => chart(&area, f, $xr, yr, $fmt, $n, false),
            }
        };
    }
    match &f.x {
        XAxis::Bytes | XAxis::Log2 => {
            let (a, b) = if x1 > x0 { (x0 / 1.25, x1 * 1.25) } else { (x0 / 2.0, x0 * 2.0) };
            let bytes = f.x == XAxis::Bytes;
            let fmt = move |v: &f64| if bytes { bytes_label(*v) } else { format!("{v:.0}") };
            go!((a..b).log_scale().base(2.0), &fmt, 12)
        }
        XAxis::Categories(names) => {
            let names = names.clone();
            let n = names.len().max(1);
            let fmt = move |v: &f64| {
                let i = v.round();
                if (v - i).abs() < 1e-6 && i >= 0.0 {
                    names.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            };
            go!(-0.5..(n as f64 - 0.5), &fmt, n + 1)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn chart<DB, X, Y>(
    area: &DrawingArea<DB, Shift>,
    f: &LineFigure,
    xr: X,
    yr: Y,
    x_fmt: &dyn Fn(&f64) -> String,
    x_labels: usize,
    y_log: bool,
) -> std::result::Result<(), String>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut c = ChartBuilder::on(area)
        .caption(&f.title, (FONT, 22).into_font())
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(70)
        .build_cartesian_2d(xr, yr)
        .map_err(|e| e.to_string())?;
    let yf = y_fmt(f.y);
    let y_desc = if y_log { format!("{} (log scale)", f.y_label) } else { f.y_label.clone() };
    c.configure_mesh()
        .x_desc(&f.x_label)
        .y_desc(&y_desc)
        .x_labels(x_labels)
        .y_labels(8)
        .x_label_formatter(x_fmt)
        .y_label_formatter(&yf)
        .axis_desc_style((FONT, 16))
        .label_style((FONT, 13))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|e| e.to_string())?;
    // Error bars of the series at one x are spread a little apart so they stay readable.
    let with_bars: Vec<usize> =
        (0..f.series.len()).filter(|&k| f.series[k].points.iter().any(|p| p.2.is_some())).collect();
    let dodge = |k: usize, x: f64| {
        let slot = with_bars.iter().position(|&j| j == k).unwrap_or(0) as f64;
        let off = (slot - (with_bars.len().max(1) - 1) as f64 / 2.0) * 0.06;
        match f.x {
            XAxis::Categories(_) => x + off,
            _ => x * 2f64.powf(off),
        }
    };
    for (k, s) in f.series.iter().enumerate() {
        let style = ShapeStyle::from(&s.color).stroke_width(2);
        if s.markers_only {
            c.draw_series(s.points.iter().map(|&(x, y, _)| Cross::new((x, y), 6, style))).map_err(|e| e.to_string())?;
            continue;
        }
        if s.dashed {
            c.draw_series(DashedLineSeries::new(s.points.iter().map(|&(x, y, _)| (x, y)), 8, 5, style))
                .map_err(|e| e.to_string())?;
        } else {
            c.draw_series(plotters::series::LineSeries::new(s.points.iter().map(|&(x, y, _)| (x, y)), style))
                .map_err(|e| e.to_string())?;
            c.draw_series(s.points.iter().map(|&(x, y, _)| Circle::new((x, y), 3, style.filled())))
                .map_err(|e| e.to_string())?;
        }
        let bars = s.points.iter().filter_map(|&(x, y, b)| {
            b.map(|(lo, hi)| ErrorBar::new_vertical(dodge(k, x), lo, y, hi, style.stroke_width(1), 8))
        });
        c.draw_series(bars).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn draw_bars<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, f: &BarFigure) -> std::result::Result<(), String> {
    let mut entries: Vec<Entry> = f.stacks.iter().map(|(n, c, _)| (n.clone(), *c, false, false)).collect();
    if let Some((n, _)) = &f.totals {
        entries.push((n.clone(), RGBColor(0, 0, 0), true, false));
    }
    let area = legend_strip(root, &entries, f.note.as_deref())?;
    let n = f.groups.len().max(1);
    let mut hi: f64 = 0.0;
    for g in 0..n {
        let sum: f64 = f.stacks.iter().map(|(_, _, v)| v.get(g).copied().unwrap_or(0.0).max(0.0)).sum();
        hi = hi.max(sum);
        if let Some((_, t)) = &f.totals {
            hi = hi.max(t.get(g).copied().unwrap_or(0.0));
        }
    }
    let hi = if hi > 0.0 { hi * 1.08 } else { 1.0 };
    let groups = f.groups.clone();
    let fmt = move |v: &f64| {
        let i = v.round();
        if (v - i).abs() < 1e-6 && i >= 0.0 {
            groups.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let mut c = ChartBuilder::on(&area)
        .caption(&f.title, (FONT, 22).into_font())
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.6..(n as f64 - 0.4), 0.0..hi)
        .map_err(|e| e.to_string())?;
    let yf = y_fmt(YAxis::Plain);
    c.configure_mesh()
        .disable_x_mesh()
        .x_desc(&f.x_label)
        .y_desc(&f.y_label)
        .x_labels(n + 1)
        .x_label_formatter(&fmt)
        .y_label_formatter(&yf)
        .axis_desc_style((FONT, 16))
        .label_style((FONT, if n > 9 { 11 } else { 13 }))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|e| e.to_string())?;
    for g in 0..n {
        let x = g as f64;
        let mut base = 0.0;
        for (_, color, vals) in &f.stacks {
            let v = vals.get(g).copied().unwrap_or(0.0).max(0.0);
            if v > 0.0 {
                c.draw_series(std::iter::once(Rectangle::new(
                    [(x - 0.35, base), (x + 0.35, base + v)],
                    color.filled(),
                )))
                .map_err(|e| e.to_string())?;
            }
            base += v;
        }
        if let Some((_, t)) = &f.totals {
            if let Some(&tv) = t.get(g) {
                c.draw_series(std::iter::once(PathElement::new(
                    vec![(x - 0.42, tv), (x + 0.42, tv)],
                    ShapeStyle::from(&BLACK).stroke_width(3),
                )))
                .map_err(|e| e.to_string())?;
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// What the presets' figures are built with, from the CSV tables.

/// Column `c` of row `i` as a number (`None` when empty).
pub fn num(t: &Table, i: usize, c: &str) -> Result<Option<f64>> {
    t.num(i, c)
}

/// Points `(x, y, p50..p99)` of the rows `rows` of `t`.
pub fn points(t: &Table, rows: &[usize], x: &str, y: &str, band: Option<(&str, &str)>) -> Result<Vec<Pt>> {
    let mut v = Vec::new();
    for &i in rows {
        let (Some(xv), Some(yv)) = (num(t, i, x)?, num(t, i, y)?) else { continue };
        let b = match band {
            Some((lo, hi)) => match (num(t, i, lo)?, num(t, i, hi)?) {
                (Some(a), Some(b)) => Some((a, b)),
                _ => None,
            },
            None => None,
        };
        v.push((xv, yv, b));
    }
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(v)
}

/// Points `(x, y, range)` of the rows `rows` of an aggregated table: `y` is the median
/// across the point's repeats, the bar the lowest and highest repeat (none for a point
/// run once).
pub fn points_across(t: &Table, rows: &[usize], x: &str, y: &str) -> Result<Vec<Pt>> {
    let mut v = Vec::new();
    for &i in rows {
        let (Some(xv), Some(yv)) = (num(t, i, x)?, num(t, i, y)?) else { continue };
        let reps = t.across(i, y)?;
        let band = (reps.len() > 1).then(|| {
            let lo = reps.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
            let hi = reps.iter().map(|r| r.1).fold(f64::NEG_INFINITY, f64::max);
            (lo, hi)
        });
        v.push((xv, yv, band));
    }
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(v)
}

/// The most repeats any point of `t` has.
pub fn repeats(t: &Table) -> Result<usize> {
    let mut n = 1;
    for i in 0..t.rows.len() {
        n = n.max(t.across(i, "unix_time")?.len());
    }
    Ok(n)
}

/// The axis label's note on what the bars are: the range of the repeats.
pub fn range_note(t: &Table) -> Result<String> {
    let n = repeats(t)?;
    Ok(if n > 1 { format!("bars: range of {n} repeats") } else { "one run per point".into() })
}

/// One series per protocol of the rows that meet `conds`: `y` (median of the repeats)
/// against `x`, bars the range of the repeats.
pub fn per_protocol_across(t: &Table, conds: &[(&str, &str)], x: &str, y: &str) -> Result<Vec<LineSeries>> {
    let mut out = Vec::new();
    for p in t.distinct("protocol")? {
        let mut c = conds.to_vec();
        c.push(("protocol", &p));
        let rows = rows_with(t, &c)?;
        out.push(series(protocol_name(&p), protocol_color(&p), points_across(t, &rows, x, y)?));
    }
    Ok(out)
}

/// The rows where every `(column, value)` of `conds` holds.
pub fn rows_with(t: &Table, conds: &[(&str, &str)]) -> Result<Vec<usize>> {
    let mut rows: Vec<usize> = (0..t.rows.len()).collect();
    for (c, v) in conds {
        let keep = t.rows_where(c, v)?;
        rows.retain(|i| keep.contains(i));
    }
    Ok(rows)
}

/// A solid line series.
pub fn series(name: String, color: RGBColor, points: Vec<Pt>) -> LineSeries {
    LineSeries { name, color, points, markers_only: false, dashed: false }
}

/// One series per protocol of the rows that meet `conds`: `y` against `x`.
pub fn per_protocol(
    t: &Table,
    conds: &[(&str, &str)],
    x: &str,
    y: &str,
    band: Option<(&str, &str)>,
) -> Result<Vec<LineSeries>> {
    let mut out = Vec::new();
    for p in t.distinct("protocol")? {
        let mut c = conds.to_vec();
        c.push(("protocol", &p));
        let rows = rows_with(t, &c)?;
        out.push(series(protocol_name(&p), protocol_color(&p), points(t, &rows, x, y, band)?));
    }
    Ok(out)
}

/// Draws every figure of `preset` into `dir`.
pub fn render_preset(preset: Preset, t: &Table, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for f in preset.def().plots(t, dir)? {
        out.extend(draw(&f, dir)?);
    }
    Ok(out)
}

/// The text of every `<text>` element of an SVG file (for tests and checks).
pub fn svg_texts(svg: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find("<text") {
        rest = &rest[start..];
        let Some(gt) = rest.find('>') else { break };
        let Some(end) = rest.find("</text>") else { break };
        if end > gt {
            let inner = rest[gt + 1..end].trim();
            out.push(
                inner
                    .replace("&lt;", "<")
                    .replace("&gt;", ">")
                    .replace("&quot;", "\"")
                    .replace("&apos;", "'")
                    .replace("&#39;", "'")
                    .replace("&amp;", "&"),
            );
        }
        rest = &rest[end + 7..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(bytes_label(32.0), "32 B");
        assert_eq!(bytes_label(16384.0), "16 KiB");
        assert_eq!(bytes_label(64.0 * 1048576.0), "64 MiB");
        assert_eq!(svg_texts("<svg><text x=\"1\">a &amp; b</text><text>c</text></svg>"), ["a & b", "c"]);
    }

    #[test]
    fn a_line_figure_draws_with_its_texts() {
        let dir = tempfile::tempdir().unwrap();
        let f = Figure::Line(LineFigure {
            stem: "t".into(),
            title: "Title here".into(),
            x: XAxis::Bytes,
            y: YAxis::Plain,
            x_label: "value size (bytes, log scale)".into(),
            y_label: "latency (µs)".into(),
            series: vec![series("BOOM-KV".into(), BLUE, vec![(32.0, 5.0, Some((4.0, 9.0))), (1024.0, 7.0, None)])],
            note: Some("a note".into()),
            y_log_auto: true,
        });
        let files = draw(&f, dir.path()).unwrap();
        assert_eq!(files.len(), 2);
        let svg = std::fs::read_to_string(&files[1]).unwrap();
        let texts = svg_texts(&svg);
        for want in ["Title here", "value size (bytes, log scale)", "latency (µs)", "BOOM-KV", "a note"] {
            assert!(texts.iter().any(|t| t == want), "{want} not in {texts:?}");
        }
        assert!(std::fs::metadata(&files[0]).unwrap().len() > 1000);
    }

    /// A synthetic results table of `preset`: two rows with plausible values.
    fn synthetic(preset: Preset) -> Table {
        let header: Vec<String> = preset.columns().iter().map(ToString::to_string).collect();
        let rows = (0..2)
            .map(|k| {
                header
                    .iter()
                    .map(|c| match c.as_str() {
                        "point" => format!("p{k}"),
                        "transport" | "backend" => "shm".into(),
                        "quick" => "true".into(),
                        "protocol" => ["boom", "rdmp"][k].into(),
                        "mix" => "a".into(),
                        "peer" => ["boom-tcp", "redis"][k].into(),
                        "theta" => ["uniform", "0.99"][k].into(),
                        "mode" => "hybrid".into(),
                        "flush" => "clwb".into(),
                        "coop" => ["off", "on"][k].into(),
                        "baseline" => "cacheline_pingpong".into(),
                        "size" | "segment_size" => ["64", "4096"][k].into(),
                        "threads" => ["1", "2"][k].into(),
                        c if c.ends_with("hlog") => "x.hlog".into(),
                        _ => format!("{}", 10 * (k + 1)),
                    })
                    .collect()
            })
            .collect();
        Table { path: PathBuf::from(format!("{preset}.csv")), header, rows, runs: Vec::new() }
    }

    #[test]
    fn every_figure_has_a_title_axis_units_and_a_legend() {
        let dir = tempfile::tempdir().unwrap();
        for p in Preset::ALL {
            let t = synthetic(p);
            let figs = p.def().plots(&t, dir.path()).unwrap();
            assert!(!figs.is_empty(), "{p}");
            for f in figs {
                let (title, xl, yl, legend): (&str, &str, &str, Vec<String>) = match &f {
                    Figure::Line(l) => (
                        &l.title,
                        &l.x_label,
                        &l.y_label,
                        l.series.iter().filter(|s| !s.points.is_empty()).map(|s| s.name.clone()).collect(),
                    ),
                    Figure::Bar(b) => {
                        (&b.title, &b.x_label, &b.y_label, b.stacks.iter().map(|s| s.0.clone()).collect())
                    }
                };
                assert!(!legend.is_empty(), "{}: no legend entries", f.stem());
                assert!(yl.contains('(') && yl.contains(')'), "{}: y label without units: {yl}", f.stem());
                if matches!(&f, Figure::Line(l) if l.x != XAxis::Categories(vec![])) {
                    assert!(xl.contains('('), "{}: x label without units: {xl}", f.stem());
                }
                let files = draw(&f, dir.path()).unwrap();
                let texts = svg_texts(&std::fs::read_to_string(&files[1]).unwrap());
                for want in legend.iter().map(String::as_str).chain([title, xl]) {
                    assert!(texts.iter().any(|t| t == want), "{}: `{want}` not in the SVG", f.stem());
                }
                assert!(texts.iter().any(|t| t.starts_with(yl)), "{}: y label not in the SVG", f.stem());
            }
        }
    }
}
