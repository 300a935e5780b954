//! The **threads** preset (figures 18, 19): PUT and GET throughput against client
//! threads: new 2 KiB keys PUT, then uniform GETs of those keys, each phase for the
//! run time with the point's client threads.

use std::path::Path;

use super::super::context::{file_name, insert_spec, mix_spec, on_target, Stat};
use super::super::paper::{self, Op};
use super::super::plot::{per_protocol_across, range_note, repeats, LineFigure, XAxis, YAxis};
use super::super::summary::{interval_note_unjudged, paired_change, paper_text, sizes_of, TextTable};
use super::super::Skew;
use super::prelude::*;
use crate::bench::runner;
use crate::client::ClientOptions;
use crate::wire::Protocol;

/// This preset.
pub const PRESET: Preset = Preset::new(&Threads);

/// The preset's CSV columns, in order.
pub const COLUMNS: &[&str] = cols!(
    "protocol",
    "threads",
    "size",
    "workers",
    "cores",
    "ops",
    "put_ops_per_sec",
    "put_avg_us",
    "put_p99_us",
    "get_ops_per_sec",
    "get_avg_us",
    "get_p99_us",
    "errors",
    "put_hlog",
    "get_hlog",
);

/// A point: one protocol with this many client threads.
#[derive(Clone, Copy, Debug)]
struct At {
    protocol: Protocol,
    threads: usize,
}

struct Threads;

impl PresetDef for Threads {
    fn meta(&self) -> &'static Meta {
        &Meta {
            name: "threads",
            about: "throughput vs client threads at 2 KiB",
            reproduces: "figures 18, 19",
            method: "threads: new 2 KiB keys PUT, then uniform GETs of those keys, each phase for 1 s (quick) or 5 s (full) with \
         the point's client threads (threads 1,2,4 quick; 1..16 full), at most 200000 / 2000000 operations.",
            columns: COLUMNS,
            needs_embedded: false,
            axes: &["sizes", "threads", "protocols", "ops", "workers"],
        }
    }

    fn grid(&self, o: &SweepOptions) -> Result<Vec<Point>> {
        let threads =
            o.axes.threads.clone().unwrap_or_else(|| if o.quick { vec![1, 2, 4] } else { vec![1, 2, 4, 8, 16] });
        let mut pts = Vec::new();
        for protocol in o.protocols() {
            for &t in &threads {
                pts.push(Point::new(PRESET, format!("{protocol}/{t}"), At { protocol, threads: t }));
            }
        }
        Ok(pts)
    }

    fn run(&self, cx: &mut Context<'_>, pt: &Point, row: &mut Row) -> Result<()> {
        let at = *pt.params::<At>()?;
        run_point(cx, pt, at.protocol, at.threads, row)
    }

    fn plots(&self, t: &Table, dir: &Path) -> Result<Vec<Figure>> {
        figures(t, dir)
    }

    fn summarize(&self, t: &Table, b: &mut Builder, _dir: &Path) -> Result<()> {
        summary(t, b)
    }
}

fn run_point(cx: &mut Context<'_>, pt: &Point, protocol: Protocol, threads: usize, row: &mut Row) -> Result<()> {
    let size = match &cx.o.axes.sizes {
        Some(v) if !v.is_empty() => v[0],
        _ => 2048,
    };
    // Throughput: as many operations as fit in the run time, at most `n` (and 1 GiB).
    let n = cx.ops(200_000, 2_000_000).min((1 << 30) / (size + 96)).max(threads as u64);
    let run_time = cx.run_time();
    let mut cfg = cx.server_cfg();
    let layout = cx.place(threads, cx.o.transport(), &mut cfg);
    let workers = cfg.workers;
    let pool = crate::bench::embedded::pool_size_for_protocol(protocol, n, 0, size, threads as u64, 64 << 20);
    let eo = cx.embedded(pool, 64 << 20, None, cfg);
    let copts = ClientOptions { protocol, ..Default::default() }.size_passive(n, 0, size);
    let put_w = insert_spec(size, 0, n, n, cx.o.seed)?;
    let label = format!("{protocol} x{threads}");
    let (put_hlog, get_hlog) = (cx.hlog(pt, "put"), cx.hlog(pt, "get"));
    let mut ro_put = cx.run_opts(format!("{label} PUT"), threads, 0, 0, Some(put_hlog.clone()));
    ro_put.duration = Some(run_time);
    let mut ro_get = cx.run_opts(format!("{label} GET"), threads, n, 100, Some(get_hlog.clone()));
    ro_get.duration = Some(run_time);
    ro_put.place(layout.as_ref());
    ro_get.place(layout.as_ref());
    let seed = cx.o.seed;
    let (put, get) = on_target!(cx.o, eo, |t, ep| {
        let put = runner::load(&t, &ep, &copts, &put_w, &ro_put)?;
        // GETs over the keys the PUT phase stored.
        let get_w = mix_spec(1.0, 0.0, put.run.operations.max(1), n, size, Skew::Uniform, seed)?;
        let get = runner::run(&t, &ep, &copts, &get_w, &ro_get)?;
        Ok::<_, SweepError>((put, get))
    })?;
    let ps = Stat::series(&put.measurements, &["INSERT"])?;
    let gs = Stat::series(&get.measurements, &["READ"])?;
    row.insert("protocol", protocol.to_string());
    row.insert("threads", threads.to_string());
    row.insert("size", size.to_string());
    row.insert("workers", if cx.o.server.is_some() { "remote".into() } else { workers.to_string() });
    row.insert("cores", crate::cpus::count().to_string());
    row.insert("ops", (put.run.operations + get.run.operations).to_string());
    row.insert("put_ops_per_sec", format!("{:.1}", put.run.ops_per_sec()));
    ps.put(row, "put_", &["put_avg_us", "put_p99_us"]);
    row.insert("get_ops_per_sec", format!("{:.1}", get.run.ops_per_sec()));
    gs.put(row, "get_", &["get_avg_us", "get_p99_us"]);
    row.insert("errors", (put.errors + get.errors).to_string());
    row.insert("put_hlog", file_name(&put_hlog));
    row.insert("get_hlog", file_name(&get_hlog));
    Ok(())
}

/// The figures, from the preset's table (and derived CSVs in `dir`).
fn figures(t: &Table, _dir: &Path) -> Result<Vec<Figure>> {
    let transport = transport_of(t);
    let mut figs = Vec::new();
    let cores = t.rows.first().map(|_| t.str(0, "cores")).transpose()?.unwrap_or("?").to_string();
    let workers = t.rows.first().map(|_| t.str(0, "workers")).transpose()?.unwrap_or("?").to_string();
    for (op, fig, col) in [("PUT", "fig18", "put_ops_per_sec"), ("GET", "fig19", "get_ops_per_sec")] {
        let s = per_protocol_across(t, &[], "threads", col)?;
        figs.push(Figure::Line(LineFigure {
            stem: format!("{fig}-threads-{}", op.to_lowercase()),
            title: format!("{op} throughput vs client threads, 2 KiB ({cores} cores)"),
            x: XAxis::Log2,
            y: YAxis::Kops,
            x_label: "client threads (log scale)".into(),
            y_label: format!("{op} throughput (kops/s), {}", range_note(t)?),
            series: s,
            note: Some(format!(
                "This machine: {cores} cores, {workers} server worker(s), transport {transport}; the paper's server had 48 cores."
            )),
            y_log_auto: false,
        }));
    }
    Ok(figs)
}

fn summary(t: &Table, b: &mut Builder) -> Result<()> {
    let mut tab =
        TextTable::new(&["threads", "PUT boom kops/s", "vs rdmp", "vs rpc", "GET boom kops/s", "vs rdmp", "vs rpc"]);
    let counts = sizes_of(t, "threads")?;
    for n in counts {
        let find = |p: &str| -> Result<Option<usize>> {
            let ps = t.rows_where("protocol", p)?;
            Ok(t.rows_where("threads", &n.to_string())?.into_iter().rev().find(|i| ps.contains(i)))
        };
        let Some(br) = find("boom")? else { continue };
        let mut cells = vec![n.to_string()];
        for col in ["put_ops_per_sec", "get_ops_per_sec"] {
            let mine = t.req(br, col)?;
            cells.push(format!("{:.1}", mine / 1000.0));
            for p in ["rdmp", "rpc"] {
                cells.push(match find(p)? {
                    Some(r) => paired_change(t, br, r, col)?,
                    None => "-".into(),
                });
            }
        }
        tab.push(cells);
    }
    b.table(&tab);
    for (op, base) in
        [(Op::Put, Protocol::Rdmp), (Op::Put, Protocol::Rpc), (Op::Get, Protocol::Rdmp), (Op::Get, Protocol::Rpc)]
    {
        b.line(&format!("paper: {} throughput vs {base}: {}", op.name(), paper_text(paper::threads_gain(op, base))));
    }
    b.para(&format!("Throughput: the median of the repeats; vs: {}.", interval_note_unjudged(repeats(t)?)));
    if let Some(i) = (0..t.rows.len()).next() {
        b.para(&format!(
            "This machine: {} cores, {} server worker(s); the paper's servers had 2x Xeon 8260 (48 cores).",
            t.str(i, "cores")?,
            t.str(i, "workers")?
        ));
    }
    Ok(())
}
