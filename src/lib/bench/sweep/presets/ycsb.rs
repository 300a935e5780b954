//! The **ycsb** preset (figures 15-17): YCSB's core workloads per protocol and value
//! size: `recordcount` R loaded, then N operations of the mix, Zipfian.

use std::path::Path;

use super::super::check_values;
use super::super::context::{f3, file_name, ms3, on_target, pick, Stat};
use super::super::paper;
use super::super::plot::{per_protocol_across, range_note, LineFigure, XAxis, YAxis};
use super::super::summary::{interval_note_unjudged, paired_change, paper_text, us, TextTable};
use super::prelude::*;
use crate::bench::runner;
use crate::client::ClientOptions;
use crate::units::short_bytes;
use crate::wire::Protocol;
use crate::workload::{names, CoreWorkload, WorkloadSpec};

/// This preset.
pub const PRESET: Preset = Preset::new(&Ycsb);

/// The preset's CSV columns, in order.
pub const COLUMNS: &[&str] = cols!(
    "mix",
    "protocol",
    "size",
    "records",
    "ops",
    "runtime_ms",
    "ops_per_sec",
    "all_avg_us",
    "all_p50_us",
    "all_p99_us",
    "read_avg_us",
    "read_p99_us",
    "update_avg_us",
    "update_p99_us",
    "insert_avg_us",
    "insert_p99_us",
    "rmw_avg_us",
    "rmw_p99_us",
    "errors",
    "hlog",
);

/// A point: one mix, protocol and value size.
#[derive(Clone, Copy, Debug)]
struct At {
    mix: char,
    protocol: Protocol,
    size: u64,
}

struct Ycsb;

impl PresetDef for Ycsb {
    fn meta(&self) -> &'static Meta {
        &Meta {
            name: "ycsb",
            about: "YCSB A, B, C, D, F average and p99 latency per protocol and size",
            reproduces: "figures 15-17",
            method: "ycsb: YCSB's mix, recordcount R loaded, N operations, Zipfian (quick: R = 1000, N = 1000; full: R = 10000, \
         N = 20000).",
            columns: COLUMNS,
            needs_embedded: false,
            axes: &["mixes", "protocols", "sizes", "ops", "workers"],
        }
    }

    fn grid(&self, o: &SweepOptions) -> Result<Vec<Point>> {
        let a = &o.axes;
        let q = o.quick;
        let mixes =
            a.mixes.clone().unwrap_or_else(|| if q { vec!['a', 'b', 'c'] } else { vec!['a', 'b', 'c', 'd', 'f'] });
        let sizes =
            a.sizes.clone().unwrap_or_else(|| if q { vec![64, 4096] } else { vec![32, 256, 1024, 4096, 16384] });
        check_values(&sizes)?;
        let mut pts = Vec::new();
        for &mix in &mixes {
            for &size in &sizes {
                for protocol in o.protocols() {
                    pts.push(Point::new(PRESET, format!("{mix}/{protocol}/{size}"), At { mix, protocol, size }));
                }
            }
        }
        Ok(pts)
    }

    fn run(&self, cx: &mut Context<'_>, pt: &Point, row: &mut Row) -> Result<()> {
        let at = *pt.params::<At>()?;
        run_point(cx, pt, at.mix, at.protocol, at.size, row)
    }

    fn plots(&self, t: &Table, dir: &Path) -> Result<Vec<Figure>> {
        figures(t, dir)
    }

    fn summarize(&self, t: &Table, b: &mut Builder, _dir: &Path) -> Result<()> {
        summary(t, b)
    }
}

fn run_point(cx: &mut Context<'_>, pt: &Point, mix: char, protocol: Protocol, size: u64, row: &mut Row) -> Result<()> {
    let records = pick(cx.o.quick, 1000, 10_000);
    let n = cx.ops(1000, 20_000);
    let mut s = WorkloadSpec::from_mix(mix)?;
    s.set(names::RECORD_COUNT, &records.to_string())?;
    s.set(names::OPERATION_COUNT, &n.to_string())?;
    s.set(names::VALUE_SIZE, &size.to_string())?;
    s.set(names::SEED, &cx.o.seed.to_string())?;
    let w = CoreWorkload::new(&s)?;
    let copts = ClientOptions { protocol, ..Default::default() }.size_passive(records, n, size);
    let pool = crate::bench::embedded::pool_size_for_protocol(protocol, records, n, size, 1, 64 << 20);
    let eo = cx.embedded(pool, 64 << 20, None, cx.server_cfg());
    let hlog = cx.hlog(pt, "");
    let label = format!("{mix} {protocol} {}", short_bytes(size));
    let ro = cx.run_opts(label, 1, n, (n / 10).min(1000), Some(hlog.clone()));
    let phases = runner::Phases { load: true, run: true };
    let r = on_target!(cx.o, eo, |t, ep| Ok(runner::load_and_run(&t, &ep, &copts, &w, &ro, phases)?.result))?;
    let m = &r.measurements;
    row.insert("mix", mix.to_string());
    row.insert("protocol", protocol.to_string());
    row.insert("size", size.to_string());
    row.insert("records", records.to_string());
    row.insert("ops", n.to_string());
    row.insert("runtime_ms", ms3(r.run.runtime));
    row.insert("ops_per_sec", format!("{:.1}", r.run.ops_per_sec()));
    let all = Stat::series(m, &["READ", "UPDATE", "INSERT", "SCAN"])?;
    row.insert("all_avg_us", f3(all.avg));
    row.insert("all_p50_us", f3(all.p50));
    row.insert("all_p99_us", f3(all.p99));
    for (series, avg, p99) in [
        ("READ", "read_avg_us", "read_p99_us"),
        ("UPDATE", "update_avg_us", "update_p99_us"),
        ("INSERT", "insert_avg_us", "insert_p99_us"),
        ("READ-MODIFY-WRITE", "rmw_avg_us", "rmw_p99_us"),
    ] {
        let st = Stat::series(m, &[series])?;
        if st.ops > 0 {
            row.insert(avg, f3(st.avg));
            row.insert(p99, f3(st.p99));
        }
    }
    row.insert("errors", r.errors.to_string());
    row.insert("hlog", file_name(&hlog));
    Ok(())
}

/// The figures, from the preset's table (and derived CSVs in `dir`).
fn figures(t: &Table, _dir: &Path) -> Result<Vec<Figure>> {
    let transport = transport_of(t);
    let mut figs = Vec::new();
    for mix in t.distinct("mix")? {
        let fig = match mix.as_str() {
            "a" => "fig15",
            "b" => "fig16",
            "c" => "fig17",
            _ => "ycsb",
        };
        let s = per_protocol_across(t, &[("mix", &mix)], "size", "all_p50_us")?;
        figs.push(Figure::Line(LineFigure {
            stem: format!("{fig}-ycsb-{mix}"),
            title: format!("YCSB workload {} ({transport})", mix.to_uppercase()),
            x: XAxis::Bytes,
            y: YAxis::Plain,
            x_label: "value size (bytes, log scale)".into(),
            y_label: format!("median latency (µs), {}", range_note(t)?),
            series: s,
            note: Some("Lines: the median of the repeats' median latencies of every operation.".into()),
            y_log_auto: true,
        }));
    }
    Ok(figs)
}

fn summary(t: &Table, b: &mut Builder) -> Result<()> {
    let mut tab = TextTable::new(&[
        "mix",
        "size",
        "boom p50 us",
        "boom p99 us",
        "vs rdmp (p50)",
        "vs rpc (p50)",
        "paper (vs rdmp)",
    ]);
    for mix in t.distinct("mix")? {
        let rows = t.rows_where("mix", &mix)?;
        let mut sizes: Vec<u64> = rows.iter().filter_map(|&i| t.req(i, "size").ok().map(|v| v as u64)).collect();
        sizes.sort_unstable();
        sizes.dedup();
        for size in sizes {
            let find = |p: &str| -> Result<Option<usize>> {
                let ps = t.rows_where("protocol", p)?;
                Ok(rows
                    .iter()
                    .rev()
                    .copied()
                    .find(|i| ps.contains(i) && t.str(*i, "size").ok() == Some(&size.to_string())))
            };
            let Some(br) = find("boom")? else { continue };
            let mine = t.req(br, "all_p50_us")?;
            let vs = |p: &str| -> Result<String> {
                Ok(match find(p)? {
                    Some(r) => paired_change(t, br, r, "all_p50_us")?,
                    None => "-".into(),
                })
            };
            tab.push(vec![
                mix.to_uppercase(),
                short_bytes(size),
                us(mine),
                us(t.req(br, "all_p99_us")?),
                vs("rdmp")?,
                vs("rpc")?,
                paper_text(mix.chars().next().and_then(paper::ycsb_reduction)),
            ]);
        }
    }
    b.table(&tab);
    b.para(&format!(
        "Median latency of every request (a read-modify-write counts as its GET and its PUT), the median of the \
         repeats; vs: {}. The paper's figures are averages.",
        interval_note_unjudged(super::super::plot::repeats(t)?)
    ));
    Ok(())
}
