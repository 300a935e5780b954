//! The **transport** preset: the transport floor (WRITE, WRITE_WITH_IMM + reply,
//! SEND/RECV, READ) of a backend at each message size. No figure of the paper: the
//! floor every protocol stands on.
//!
//! One run of [`crate::bench::floor`] per backend covers every size of the grid; a row
//! per (backend, size).

use std::path::Path;

use super::super::context::f3;
use super::super::plot::{points, series, LineFigure, LineSeries, XAxis, YAxis, GREY, PALETTE};
use super::super::summary::{us, TextTable};
use super::prelude::*;
use crate::bench::floor::FloorTest;
use crate::transport::Backend;
use crate::units::short_bytes;

/// This preset.
pub const PRESET: Preset = Preset::new(&Transport);

/// The preset's CSV columns, in order.
pub const COLUMNS: &[&str] = cols!(
    "backend",
    "size",
    "iterations",
    "write_p50_us",
    "write_p99_us",
    "write_imm_reply_p50_us",
    "write_imm_reply_avg_us",
    "write_imm_reply_p99_us",
    "send_recv_p50_us",
    "send_recv_avg_us",
    "send_recv_p99_us",
    "read_p50_us",
    "read_p99_us",
    "msg_rate_mpps",
    "bw_mb_per_s",
    "baseline",
    "baseline_p50_us",
);

/// A point: one backend at one message size.
#[derive(Clone, Copy, Debug)]
struct At {
    backend: Backend,
    size: u64,
}

struct Transport;

impl PresetDef for Transport {
    fn meta(&self) -> &'static Meta {
        &Meta {
            name: "transport",
            about: "the transport floor: WRITE, WRITE_WITH_IMM + reply, SEND/RECV, READ per backend",
            reproduces: "the transport floor (no figure)",
            method: "transport: the transport floor (bench-transport) with 2000 (quick) or 20000 (full) iterations per size.",
            columns: COLUMNS,
            needs_embedded: false,
            axes: &["sizes", "ops"],
        }
    }

    fn grid(&self, o: &SweepOptions) -> Result<Vec<Point>> {
        let a = &o.axes;
        let sizes = a.sizes.clone().unwrap_or_else(|| {
            if o.quick {
                vec![32, 64, 1024, 16384]
            } else {
                crate::bench::floor::DEFAULT_SIZES.iter().map(|&s| s as u64).collect()
            }
        });
        if let Some(&bad) = sizes.iter().find(|&&s| s == 0 || s > 1 << 24) {
            return Err(SweepError::Invalid(format!("--sizes: {bad} is outside 1 B..16 MiB")));
        }
        let backends = match &o.server {
            Some(_) => vec![o.transport()],
            None if a.sizes.is_none() && !o.quick => vec![Backend::Shm, Backend::Tcp],
            None => vec![o.backend],
        };
        let mut pts = Vec::new();
        for backend in backends {
            for &size in &sizes {
                pts.push(Point::new(PRESET, format!("{backend}/{size}"), At { backend, size }));
            }
        }
        Ok(pts)
    }

    fn begin(&self, cx: &mut Context<'_>, points: &[Point]) {
        cx.want_floor_sizes(points.iter().filter_map(|p| p.params::<At>().ok()).map(|a| a.size));
        // This preset's rows are the floor itself: measure it afresh.
        cx.clear_floors();
    }

    fn run(&self, cx: &mut Context<'_>, pt: &Point, row: &mut Row) -> Result<()> {
        let at = *pt.params::<At>()?;
        run_point(cx, at.backend, at.size, row)
    }

    fn plots(&self, t: &Table, dir: &Path) -> Result<Vec<Figure>> {
        figures(t, dir)
    }

    fn summarize(&self, t: &Table, b: &mut Builder, _dir: &Path) -> Result<()> {
        summary(t, b)
    }
}

fn run_point(cx: &mut Context<'_>, backend: Backend, size: u64, row: &mut Row) -> Result<()> {
    let r = cx.floor(backend, size)?.clone();
    let b = backend.to_string();
    let lat = |test: FloorTest| r.latency.iter().find(|l| l.backend == b && l.test == test && l.bytes as u64 == size);
    let mut iters = 0;
    for (test, p50, avg, p99) in [
        (FloorTest::Write, "write_p50_us", "", "write_p99_us"),
        (FloorTest::WriteImmReply, "write_imm_reply_p50_us", "write_imm_reply_avg_us", "write_imm_reply_p99_us"),
        (FloorTest::SendRecv, "send_recv_p50_us", "send_recv_avg_us", "send_recv_p99_us"),
        (FloorTest::Read, "read_p50_us", "", "read_p99_us"),
    ] {
        if let Some(l) = lat(test) {
            iters = l.summary.count;
            row.insert(p50, f3(l.summary.median));
            row.insert(p99, f3(l.summary.p99));
            if !avg.is_empty() {
                row.insert(avg, f3(l.summary.avg));
            }
        }
    }
    if let Some(m) = r.rates.iter().find(|m| m.backend == b && m.bytes as u64 == size) {
        row.insert("msg_rate_mpps", format!("{:.4}", m.mpps));
        row.insert("bw_mb_per_s", format!("{:.2}", m.mb_per_s));
    }
    let base = if backend == Backend::Shm { FloorTest::CacheLinePingPong } else { FloorTest::TcpPingPong };
    if let Some(l) = r.latency.iter().find(|l| l.backend == "baseline" && l.test == base) {
        row.insert("baseline", base.name().to_string());
        row.insert("baseline_p50_us", f3(l.summary.median));
    }
    row.insert("backend", b);
    row.insert("size", size.to_string());
    row.insert("iterations", iters.to_string());
    Ok(())
}

/// The figures, from the preset's table (and derived CSVs in `dir`).
fn figures(t: &Table, _dir: &Path) -> Result<Vec<Figure>> {
    let mut figs = Vec::new();
    for b in t.distinct("backend")? {
        let rows = t.rows_where("backend", &b)?;
        let mut s = Vec::new();
        for (k, (name, p50, p99)) in [
            ("WRITE (to local completion)", "write_p50_us", "write_p99_us"),
            ("WRITE_WITH_IMM + 16 B reply", "write_imm_reply_p50_us", "write_imm_reply_p99_us"),
            ("SEND/RECV ping-pong", "send_recv_p50_us", "send_recv_p99_us"),
            ("READ (to local completion)", "read_p50_us", "read_p99_us"),
        ]
        .into_iter()
        .enumerate()
        {
            s.push(series(name.into(), PALETTE[k], points(t, &rows, "size", p50, Some((p50, p99)))?));
        }
        let base = t.str(rows[0], "baseline")?.replace('_', " ");
        let mut bl = points(t, &rows, "size", "baseline_p50_us", None)?;
        bl.retain(|p| p.1 > 0.0);
        s.push(LineSeries {
            name: format!("baseline: {base} (64 B)"),
            color: GREY,
            points: bl,
            markers_only: false,
            dashed: true,
        });
        figs.push(Figure::Line(LineFigure {
            stem: format!("transport-{b}"),
            title: format!("Transport floor, {b} backend (median, bars p50-p99)"),
            x: XAxis::Bytes,
            y: YAxis::Plain,
            x_label: "message size (bytes, log scale)".into(),
            y_label: "latency (µs)".into(),
            series: s,
            note: None,
            y_log_auto: true,
        }));
    }
    Ok(figs)
}

fn summary(t: &Table, b: &mut Builder) -> Result<()> {
    let mut tab = TextTable::new(&[
        "backend",
        "size",
        "WRITE p50 us",
        "WRITE_IMM+reply p50 us",
        "SEND/RECV p50 us",
        "READ p50 us",
        "baseline p50 us",
    ]);
    for i in 0..t.rows.len() {
        let f = |c: &str| t.num(i, c).map(|v| v.map(us).unwrap_or_else(|| "-".into()));
        tab.push(vec![
            t.str(i, "backend")?.to_string(),
            short_bytes(t.req(i, "size")? as u64),
            f("write_p50_us")?,
            f("write_imm_reply_p50_us")?,
            f("send_recv_p50_us")?,
            f("read_p50_us")?,
            format!("{} ({})", f("baseline_p50_us")?, t.str(i, "baseline")?),
        ]);
    }
    b.table(&tab);
    b.line("Round trips are what every protocol pays per round trip; the baselines are a cross-core cache-line ping-pong (shm) and a plain TCP ping-pong (tcp).");
    Ok(())
}
