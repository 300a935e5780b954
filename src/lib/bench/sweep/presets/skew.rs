//! The **skew** preset (figure 9): PM space used by 100% PUT against the request skew,
//! BOOM-KV's hybrid updates against append-only ([`space`] runs it).

use std::path::Path;

use super::super::context::pick;
use super::super::paper;
use super::super::plot::{num, rows_with, series, LineFigure, LineSeries, XAxis, YAxis, BLUE, GREY, RED};
use super::super::summary::{paper_text, pct, TextTable};
use super::super::Skew;
use super::prelude::*;
use super::space::{self, COLUMNS};
use crate::units::short_bytes;

/// This preset.
pub const PRESET: Preset = Preset::new(&SkewPreset);

/// A point: one skew, hybrid or append-only updates.
#[derive(Clone, Copy, Debug)]
struct At {
    skew: Skew,
    hybrid: bool,
}

struct SkewPreset;

impl PresetDef for SkewPreset {
    fn meta(&self) -> &'static Meta {
        &Meta {
            name: "skew",
            about: "PM space used vs Zipf skew, hybrid vs append-only",
            reproduces: "figure 9",
            method: space::METHOD,
            columns: COLUMNS,
            needs_embedded: false,
            axes: &["thetas", "segment_sizes", "keys", "ops", "workers"],
        }
    }

    fn grid(&self, o: &SweepOptions) -> Result<Vec<Point>> {
        let skews = o.axes.thetas.clone().unwrap_or_else(|| {
            vec![Skew::Uniform, Skew::Zipf(0.5), Skew::Zipf(0.8), Skew::Zipf(0.99), Skew::Zipf(1.1), Skew::Zipf(1.2)]
        });
        let mut pts = Vec::new();
        for &skew in &skews {
            for hybrid in [true, false] {
                let id = format!("{}/{}", skew.label(), if hybrid { "hybrid" } else { "append" });
                pts.push(Point::new(PRESET, id, At { skew, hybrid }));
            }
        }
        Ok(pts)
    }

    fn run(&self, cx: &mut Context<'_>, pt: &Point, row: &mut Row) -> Result<()> {
        let at = *pt.params::<At>()?;
        let seg = match &cx.o.axes.segment_sizes {
            Some(v) if !v.is_empty() => v[0],
            _ => pick(cx.o.quick, 1 << 20, 64 << 20),
        };
        space::run_point(cx, pt, seg, at.skew, at.hybrid, row)
    }

    fn plots(&self, t: &Table, dir: &Path) -> Result<Vec<Figure>> {
        figures(t, dir)
    }

    fn summarize(&self, t: &Table, b: &mut Builder, _dir: &Path) -> Result<()> {
        summary(t, b)
    }
}

/// The figures, from the preset's table (and derived CSVs in `dir`).
fn figures(t: &Table, _dir: &Path) -> Result<Vec<Figure>> {
    let mut figs = Vec::new();
    let thetas = t.distinct("theta")?;
    let mut s = Vec::new();
    for (k, mode) in ["hybrid", "append"].into_iter().enumerate() {
        let mut pts = Vec::new();
        for (xi, th) in thetas.iter().enumerate() {
            for i in rows_with(t, &[("theta", th), ("mode", mode)])? {
                if let Some(v) = num(t, i, "pm_bytes_used")? {
                    pts.push((xi as f64, v, None));
                }
            }
        }
        let name = if mode == "hybrid" { "BOOM-KV hybrid update" } else { "append-only" };
        s.push(series(name.into(), [BLUE, RED][k], pts));
    }
    let mut logical = Vec::new();
    for (xi, th) in thetas.iter().enumerate() {
        if let Some(i) = rows_with(t, &[("theta", th), ("mode", "hybrid")])?.first() {
            if let Some(v) = num(t, *i, "logical_bytes")? {
                logical.push((xi as f64, v, None));
            }
        }
    }
    s.push(LineSeries {
        name: "logical bytes written".into(),
        color: GREY,
        points: logical,
        markers_only: false,
        dashed: true,
    });
    figs.push(Figure::Line(LineFigure {
        stem: "fig09-skew-space".into(),
        title: "PM space used by 100% PUT vs request skew".into(),
        x: XAxis::Categories(
            thetas.iter().map(|t| if t == "uniform" { t.clone() } else { format!("Zipf {t}") }).collect(),
        ),
        y: YAxis::Mib,
        x_label: "request distribution (Zipf theta over the key space)".into(),
        y_label: "PM bytes used (MiB)".into(),
        series: s,
        note: None,
        y_log_auto: false,
    }));
    Ok(figs)
}

fn summary(t: &Table, b: &mut Builder) -> Result<()> {
    let mut tab =
        TextTable::new(&["theta", "mode", "logical MiB", "PM used MiB", "in place", "space change", "paper (hybrid)"]);
    for i in 0..t.rows.len() {
        let theta = t.str(i, "theta")?.to_string();
        let mode = t.str(i, "mode")?.to_string();
        tab.push(vec![
            theta.clone(),
            mode.clone(),
            format!("{:.1}", t.req(i, "logical_bytes")? / 1048576.0),
            format!("{:.1}", t.req(i, "pm_bytes_used")? / 1048576.0),
            format!("{:.0}", t.req(i, "entries_in_place")?),
            t.num(i, "space_change_pct")?.map(pct).unwrap_or_else(|| "-".into()),
            if mode == "hybrid" { paper_text(paper::skew_saving(&theta)) } else { "-".into() },
        ]);
    }
    b.table(&tab);
    if let Some(i) = (0..t.rows.len()).next() {
        b.para(&format!(
            "100% PUT of {} B values over {} keys, {} operations, segments of {}; space change = PM bytes used / \
             logical bytes - 1, both from the server's space accounting (in-place updates counted in the pool).",
            t.str(i, "value_size")?,
            t.str(i, "keys")?,
            t.str(i, "ops")?,
            short_bytes(t.req(i, "segment_size")? as u64)
        ));
    }
    Ok(())
}
