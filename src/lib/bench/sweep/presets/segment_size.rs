//! The **segment-size** preset (figures 8, 10): 1 KiB PUT throughput, latency and the
//! space hybrid updates save, per log segment size ([`space`] runs it).

use std::path::Path;

use super::super::paper;
use super::super::plot::{points, series, LineFigure, XAxis, YAxis, PALETTE};
use super::super::summary::{pct, us, TextTable};
use super::super::{check_segments, Skew};
use super::prelude::*;
use super::space::{self, COLUMNS};
use crate::units::short_bytes;

/// This preset.
pub const PRESET: Preset = Preset::new(&SegmentSize);

/// A point: one segment size under one skew.
#[derive(Clone, Copy, Debug)]
struct At {
    segment_size: u64,
    skew: Skew,
}

struct SegmentSize;

impl PresetDef for SegmentSize {
    fn meta(&self) -> &'static Meta {
        &Meta {
            name: "segment-size",
            about: "1 KiB PUT throughput/latency and space saving vs segment size",
            reproduces: "figures 8, 10",
            method: space::METHOD,
            columns: COLUMNS,
            needs_embedded: true,
            axes: &["segment_sizes", "thetas", "keys", "ops", "workers"],
        }
    }

    fn grid(&self, o: &SweepOptions) -> Result<Vec<Point>> {
        let segs = o.axes.segment_sizes.clone().unwrap_or_else(|| {
            if o.quick {
                // The full grid scaled down with the logical size (1/64).
                vec![256 << 10, 1 << 20, 4 << 20]
            } else {
                vec![16 << 20, 64 << 20, 256 << 20]
            }
        });
        check_segments(&segs)?;
        let skews = o.axes.thetas.clone().unwrap_or_else(|| vec![Skew::Zipf(0.99)]);
        let mut pts = Vec::new();
        for &skew in &skews {
            for &segment_size in &segs {
                let id = format!("{}/{}", short_bytes(segment_size), skew.label());
                pts.push(Point::new(PRESET, id, At { segment_size, skew }));
            }
        }
        Ok(pts)
    }

    fn run(&self, cx: &mut Context<'_>, pt: &Point, row: &mut Row) -> Result<()> {
        let at = *pt.params::<At>()?;
        space::run_point(cx, pt, at.segment_size, at.skew, true, row)
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
    let mut tp = Vec::new();
    let mut sp = Vec::new();
    for (k, th) in thetas.iter().enumerate() {
        let rows = t.rows_where("theta", th)?;
        let name = if th == "uniform" { "uniform".to_string() } else { format!("Zipf {th}") };
        tp.push(series(name.clone(), PALETTE[k % 7], points(t, &rows, "segment_size", "put_ops_per_sec", None)?));
        sp.push(series(name, PALETTE[k % 7], points(t, &rows, "segment_size", "space_change_pct", None)?));
    }
    figs.push(Figure::Line(LineFigure {
        stem: "fig08-segment-throughput".into(),
        title: "1 KiB PUT throughput vs log segment size".into(),
        x: XAxis::Bytes,
        y: YAxis::Kops,
        x_label: "segment size (bytes, log scale)".into(),
        y_label: "PUT throughput (kops/s)".into(),
        series: tp,
        note: None,
        y_log_auto: false,
    }));
    figs.push(Figure::Line(LineFigure {
        stem: "fig10-segment-space".into(),
        title: "Space change of hybrid updates vs segment size".into(),
        x: XAxis::Bytes,
        y: YAxis::Plain,
        x_label: "segment size (bytes, log scale)".into(),
        y_label: "PM used vs logical bytes (%)".into(),
        series: sp,
        note: Some("Negative: in-place updates saved space (server space accounting).".into()),
        y_log_auto: false,
    }));
    Ok(figs)
}

fn summary(t: &Table, b: &mut Builder) -> Result<()> {
    let mut tab = TextTable::new(&[
        "segment",
        "theta",
        "PUT kops/s",
        "avg us",
        "p99 us",
        "logical MiB",
        "PM used MiB",
        "space change",
    ]);
    for i in 0..t.rows.len() {
        tab.push(vec![
            short_bytes(t.req(i, "segment_size")? as u64),
            t.str(i, "theta")?.to_string(),
            format!("{:.1}", t.req(i, "put_ops_per_sec")? / 1000.0),
            us(t.req(i, "put_avg_us")?),
            us(t.req(i, "put_p99_us")?),
            format!("{:.1}", t.req(i, "logical_bytes")? / 1048576.0),
            format!("{:.1}", t.req(i, "pm_bytes_used")? / 1048576.0),
            t.num(i, "space_change_pct")?.map(pct).unwrap_or_else(|| "-".into()),
        ]);
    }
    b.table(&tab);
    b.line(&format!("paper: {}", paper::SEGMENT_SIZE));
    Ok(())
}
