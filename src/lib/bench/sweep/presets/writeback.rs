//! The **writeback** preset (figures 11, 12): PUT throughput of 2 client threads with
//! cooperative write-back on and off, per flush instruction and value size.
//!
//! 2 client threads PUT new keys into a server with 2 workers, the point's flush
//! instruction, for the run time (at most `N` PUTs), after an unmeasured warm-up.

use std::path::Path;

use super::super::check_values;
use super::super::context::{file_name, insert_spec, on_target, Counters, Stat};
use super::super::paper;
use super::super::plot::{points, rows_with, series, LineFigure, XAxis, YAxis, BLUE, RED};
use super::super::summary::{interval_note_unjudged, paired_change, paper_text, TextTable};
use super::prelude::*;
use crate::bench::runner;
use crate::client::ClientOptions;
use crate::pmem::FlushKind;
use crate::server::ServerConfig;
use crate::units::short_bytes;

/// This preset.
pub const PRESET: Preset = Preset::new(&Writeback);

/// The preset's CSV columns, in order.
pub const COLUMNS: &[&str] = cols!(
    "flush",
    "coop",
    "size",
    "clients",
    "workers",
    "ops",
    "put_ops_per_sec",
    "put_avg_us",
    "put_p50_us",
    "put_p99_us",
    "coop_ranges",
    "coop_steals",
    "flush_lines",
    "errors",
    "hlog",
);

/// A point: one flush instruction, cooperative write-back on or off, one value size.
#[derive(Clone, Copy, Debug)]
struct At {
    flush: FlushKind,
    coop: bool,
    size: u64,
}

struct Writeback;

impl PresetDef for Writeback {
    fn meta(&self) -> &'static Meta {
        &Meta {
            name: "writeback",
            about: "cooperative write-back on/off, clflush/clwb/clflushopt, 4/8/16 KiB, 2 clients",
            reproduces: "figures 11, 12",
            method:
                "writeback: 2 client threads PUT new keys into a server with 2 workers, the point's flush instruction, \
         cooperative write-back on or off, for 1 s (quick) or 5 s (full), at most 50000 / 500000 PUTs; no \
         cleaner (the pool holds them all), so `flush_lines` counts the PUTs' write-backs alone.",
            columns: COLUMNS,
            needs_embedded: true,
            axes: &["flushes", "sizes", "ops", "workers"],
        }
    }

    fn grid(&self, o: &SweepOptions) -> Result<Vec<Point>> {
        let flushes = o.axes.flushes.clone().unwrap_or_else(|| {
            [FlushKind::Clflush, FlushKind::Clwb, FlushKind::Clflushopt].into_iter().filter(|f| f.supported()).collect()
        });
        if let Some(f) = flushes.iter().find(|f| !f.supported()) {
            return Err(SweepError::Invalid(format!("--flushes: this CPU cannot execute {f}")));
        }
        let sizes = o.axes.sizes.clone().unwrap_or_else(|| vec![4 << 10, 8 << 10, 16 << 10]);
        check_values(&sizes)?;
        let mut pts = Vec::new();
        for &flush in &flushes {
            for &size in &sizes {
                for coop in [false, true] {
                    let id = format!("{flush}/{}/{size}", if coop { "coop-on" } else { "coop-off" });
                    pts.push(Point::new(PRESET, id, At { flush, coop, size }));
                }
            }
        }
        Ok(pts)
    }

    fn run(&self, cx: &mut Context<'_>, pt: &Point, row: &mut Row) -> Result<()> {
        let at = *pt.params::<At>()?;
        run_point(cx, pt, at.flush, at.coop, at.size, row)
    }

    fn plots(&self, t: &Table, dir: &Path) -> Result<Vec<Figure>> {
        figures(t, dir)
    }

    fn summarize(&self, t: &Table, b: &mut Builder, _dir: &Path) -> Result<()> {
        summary(t, b)
    }
}

fn run_point(cx: &mut Context<'_>, pt: &Point, flush: FlushKind, coop: bool, size: u64, row: &mut Row) -> Result<()> {
    // Throughput: as many PUTs as fit in the run time, at most `n` (and 1 GiB).
    let n = cx.ops(50_000, 500_000).min((1 << 30) / (size + 96)).max(100);
    let run_time = cx.run_time();
    let warm = (n / 20).clamp(100, 2000);
    let clients = 2;
    let workers = cx.o.axes.workers.unwrap_or(2);
    // No cleaner: the pool holds every PUT, and the cleaner's compaction of what the
    // warm-up's clients left would be write-backs of its own in `flush_lines` (up to 2.5x
    // the PUTs' own, in some repeats and not others) and work beside the PUTs timed.
    let cfg = ServerConfig { workers, coop_writeback: coop, log_clients: false, cleaner: false, ..Default::default() };
    let eo = cx.embedded(
        crate::bench::embedded::pool_size_for(n + warm, size, clients, 64 << 20),
        64 << 20,
        Some(flush),
        cfg,
    );
    let copts = ClientOptions::default();
    let warm_w = insert_spec(size, 0, warm, n + warm, cx.o.seed)?;
    let put_w = insert_spec(size, warm, n, n + warm, cx.o.seed)?;
    let hlog = cx.hlog(pt, "");
    let label = format!("{flush} coop {} {}", if coop { "on" } else { "off" }, short_bytes(size));
    // Not pinned (neither the workers, above, nor the clients): the point is workers
    // sharing write-back, and --pin's split would put both on one CPU of a small machine.
    let ro_warm = runner::RunOptions {
        client_cpus: None,
        colocated: false,
        ..cx.run_opts(format!("{label} warm"), clients as usize, 0, 0, None)
    };
    let mut ro = runner::RunOptions {
        client_cpus: None,
        colocated: false,
        ..cx.run_opts(label, clients as usize, 0, 0, Some(hlog.clone()))
    };
    ro.duration = Some(run_time);
    let (r, d) = on_target!(cx.o, eo, |t, ep| {
        runner::load(&t, &ep, &copts, &warm_w, &ro_warm)?;
        let before = Counters::read(&t, &ep)?;
        let r = runner::load(&t, &ep, &copts, &put_w, &ro)?;
        let after = Counters::read(&t, &ep)?;
        Ok::<_, SweepError>((r, after.since(&before)))
    })?;
    let st = Stat::series(&r.measurements, &["INSERT"])?;
    row.insert("flush", flush.to_string());
    row.insert("coop", if coop { "on" } else { "off" }.to_string());
    row.insert("size", size.to_string());
    row.insert("clients", clients.to_string());
    row.insert("workers", workers.to_string());
    row.insert("ops", r.run.operations.to_string());
    row.insert("put_ops_per_sec", format!("{:.1}", r.run.ops_per_sec()));
    st.put(row, "put_", &["put_avg_us", "put_p50_us", "put_p99_us"]);
    row.insert("coop_ranges", d.coop_ranges.to_string());
    row.insert("coop_steals", d.coop_steals.to_string());
    row.insert("flush_lines", d.flush_lines.to_string());
    row.insert("errors", r.errors.to_string());
    row.insert("hlog", file_name(&hlog));
    Ok(())
}

/// The figures, from the preset's table (and derived CSVs in `dir`).
fn figures(t: &Table, _dir: &Path) -> Result<Vec<Figure>> {
    let mut figs = Vec::new();
    for flush in t.distinct("flush")? {
        // The paper's figure number where it has one; `writeback-clflushopt` (it
        // was `writeback-writeback-clflushopt`) where it has none.
        let stem = match flush.as_str() {
            "clflush" => format!("fig11-writeback-{flush}"),
            "clwb" => format!("fig12-writeback-{flush}"),
            _ => format!("writeback-{flush}"),
        };
        let mut s = Vec::new();
        for (k, coop) in ["off", "on"].into_iter().enumerate() {
            let rows = rows_with(t, &[("flush", &flush), ("coop", coop)])?;
            s.push(series(
                format!("cooperative write-back {coop}"),
                [RED, BLUE][k],
                points(t, &rows, "size", "put_ops_per_sec", None)?,
            ));
        }
        figs.push(Figure::Line(LineFigure {
            stem,
            title: format!("PUT throughput, 2 clients, {flush}"),
            x: XAxis::Bytes,
            y: YAxis::Kops,
            x_label: "value size (bytes, log scale)".into(),
            y_label: "PUT throughput (kops/s)".into(),
            series: s,
            note: None,
            y_log_auto: false,
        }));
    }
    Ok(figs)
}

fn summary(t: &Table, b: &mut Builder) -> Result<()> {
    let mut tab = TextTable::new(&["flush", "size", "coop off kops/s", "coop on kops/s", "gain", "steals", "paper"]);
    for flush in t.distinct("flush")? {
        let fr = t.rows_where("flush", &flush)?;
        let mut sizes: Vec<u64> = fr.iter().filter_map(|&i| t.req(i, "size").ok().map(|v| v as u64)).collect();
        sizes.sort_unstable();
        sizes.dedup();
        for size in sizes {
            let find = |coop: &str| -> Result<Option<usize>> {
                let c = t.rows_where("coop", coop)?;
                Ok(fr
                    .iter()
                    .rev()
                    .copied()
                    .find(|i| c.contains(i) && t.str(*i, "size").ok() == Some(&size.to_string())))
            };
            let (off, on) = (find("off")?, find("on")?);
            let tp = |r: Option<usize>| -> Result<Option<f64>> { r.map(|r| t.req(r, "put_ops_per_sec")).transpose() };
            let (a, c) = (tp(off)?, tp(on)?);
            tab.push(vec![
                flush.clone(),
                short_bytes(size),
                a.map(|v| format!("{:.1}", v / 1000.0)).unwrap_or_else(|| "-".into()),
                c.map(|v| format!("{:.1}", v / 1000.0)).unwrap_or_else(|| "-".into()),
                match (on, off) {
                    (Some(on), Some(off)) => paired_change(t, on, off, "put_ops_per_sec")?,
                    _ => "-".into(),
                },
                on.map(|r| t.str(r, "coop_steals").map(String::from)).transpose()?.unwrap_or_else(|| "-".into()),
                paper_text(paper::writeback_gain(&flush, size)),
            ]);
        }
    }
    b.table(&tab);
    b.para(&format!(
        "PUT throughput of 2 client threads, new keys, 2 server workers (the median of the repeats); gain = coop \
         on against off: {}.",
        interval_note_unjudged(super::super::plot::repeats(t)?)
    ));
    Ok(())
}
