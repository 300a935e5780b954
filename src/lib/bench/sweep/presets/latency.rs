//! The **latency** preset (figures 13, 14; the paper's 6 and 7 are their RDMP-KV lines):
//! PUT then GET latency of each protocol at each value size, with the breakdown of the
//! median request into measured components ([`super::super::components`]).
//!
//! Per (protocol, size): a warm-up load of `W` keys (unmeasured), then `N` PUTs of new
//! keys (measured: the load phase's INSERTs), then `N` GETs of uniformly chosen keys
//! among those (after `W` warm-up GETs). The [`breakdown`](super::breakdown) preset
//! runs the same points over fewer sizes and reads the breakdown columns.

use std::path::Path;

use super::super::components::copies;
use super::super::context::{f3, file_name, insert_spec, mix_spec, on_target, pick, Stat};
use super::super::paper::{self, Op};
use super::super::plot::{
    per_protocol_across, points, protocol_name, range_note, rows_with, series, LineFigure, LineSeries, XAxis, YAxis,
    PALETTE,
};
use super::super::summary::{
    change, interval_note, paper_text, pct, row_at, size_label, sizes_of, us, Paired, TextTable, Verdict,
};
use super::super::{check_values, io_err, Skew};
use super::prelude::*;
use crate::bench::runner;
use crate::client::{Client, ClientOptions};
use crate::pmem::FlushKind;
use crate::units::short_bytes;
use crate::wire::Protocol;

/// This preset.
pub const PRESET: Preset = Preset::new(&Latency);

/// The preset's CSV columns, in order (the breakdown preset's too).
pub const COLUMNS: &[&str] = cols!(
    "protocol",
    "size",
    "warmup",
    "ops",
    "put_ops",
    "put_avg_us",
    "put_p50_us",
    "put_p99_us",
    "put_p999_us",
    "put_min_us",
    "put_max_us",
    "put_ops_per_sec",
    "get_ops",
    "get_avg_us",
    "get_p50_us",
    "get_p99_us",
    "get_p999_us",
    "get_min_us",
    "get_max_us",
    "get_ops_per_sec",
    "errors",
    "put_transport_us",
    "put_metadata_us",
    "put_copies_us",
    "put_writeback_us",
    "put_index_us",
    "put_other_us",
    "get_transport_us",
    "get_metadata_us",
    "get_copies_us",
    "get_writeback_us",
    "get_index_us",
    "get_other_us",
    "entry_writeback_us",
    "count_persist_us",
    "srv_put_validate_us",
    "srv_put_seal_us",
    "srv_put_writeback_us",
    "srv_put_second_persist_us",
    "srv_put_index_us",
    "srv_put_reply_us",
    "srv_put_total_us",
    "srv_get_lookup_us",
    "srv_get_write_us",
    "srv_get_total_us",
    "flush",
    "put_hlog",
    "get_hlog",
);

/// A point: one protocol at one value size (the breakdown preset's points too).
#[derive(Clone, Copy, Debug)]
pub(super) struct At {
    pub(super) protocol: Protocol,
    pub(super) size: u64,
}

/// The grid of both presets: every protocol at every size (`defaults`: quick, full).
pub(super) fn grid_of(preset: Preset, o: &SweepOptions, defaults: (&[u64], &[u64])) -> Result<Vec<Point>> {
    let sizes = o.axes.sizes.clone().unwrap_or_else(|| if o.quick { defaults.0 } else { defaults.1 }.to_vec());
    check_values(&sizes)?;
    let mut pts = Vec::new();
    for &size in &sizes {
        for protocol in o.protocols() {
            pts.push(Point::new(preset, format!("{protocol}/{size}"), At { protocol, size }));
        }
    }
    Ok(pts)
}

/// Both presets measure the floor once for all their sizes.
pub(super) fn begin_of(cx: &mut Context<'_>, points: &[Point]) {
    cx.want_floor_sizes(points.iter().filter_map(|p| p.params::<At>().ok()).map(|a| a.size));
}

/// The full grid's sizes: 32 B .. 16 KiB, powers of two.
const FULL_SIZES: [u64; 10] = [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384];

struct Latency;

impl PresetDef for Latency {
    fn meta(&self) -> &'static Meta {
        &Meta {
            name: "latency",
            about: "PUT and GET latency, 32 B .. 16 KiB, all protocols, reductions vs the paper",
            reproduces: "figures 13, 14; 6, 7 are their RDMP-KV lines",
            method: "latency/breakdown: a warm-up load of W keys (unmeasured), N PUTs of new keys (measured), then N GETs of \
         uniformly chosen loaded keys after W warm-up GETs (quick: N = 20000, full: N = 100000, W = N/10 clamped to \
         100..2000; each measured phase also stops after 2 s quick / 20 s full unless --ops is given).",
            columns: COLUMNS,
            needs_embedded: false,
            axes: &["sizes", "protocols", "ops", "workers"],
        }
    }

    fn grid(&self, o: &SweepOptions) -> Result<Vec<Point>> {
        grid_of(PRESET, o, (&[32, 256, 1024, 4096, 16384], &FULL_SIZES))
    }

    fn begin(&self, cx: &mut Context<'_>, points: &[Point]) {
        begin_of(cx, points);
    }

    fn run(&self, cx: &mut Context<'_>, pt: &Point, row: &mut Row) -> Result<()> {
        let at = *pt.params::<At>()?;
        run_point(cx, pt, at.protocol, at.size, row)
    }

    fn plots(&self, t: &Table, dir: &Path) -> Result<Vec<Figure>> {
        figures(t, dir)
    }

    fn summarize(&self, t: &Table, b: &mut Builder, dir: &Path) -> Result<()> {
        summary(t, b, dir)
    }
}

pub(super) fn run_point(cx: &mut Context<'_>, pt: &Point, protocol: Protocol, size: u64, row: &mut Row) -> Result<()> {
    let n = cx.ops(20_000, 100_000);
    // Each measured phase stops after N operations or this long, whichever comes
    // first (unless --ops asks for an exact count), so a slow transport cannot make
    // a sweep unbounded.
    let cap = match cx.o.axes.ops {
        Some(_) => None,
        None => Some(std::time::Duration::from_secs(pick(cx.o.quick, 2, 20))),
    };
    let warm = (n / 10).clamp(100, 2000);
    let seed = cx.o.seed;
    let copts = ClientOptions { protocol, ..Default::default() }.size_passive(n + warm, 0, size);
    let eo = cx.embedded(
        crate::bench::embedded::pool_size_for_protocol(protocol, n + warm, 0, size, 1, 64 << 20),
        64 << 20,
        None,
        cx.server_cfg(),
    );
    let label = format!("{protocol} {}", short_bytes(size));
    let (put_hlog, get_hlog) = (cx.hlog(pt, "put"), cx.hlog(pt, "get"));
    let warm_w = insert_spec(size, 0, warm, n + warm, seed)?;
    let put_w = insert_spec(size, warm, n, n + warm, seed)?;
    let ro_warm = cx.run_opts(format!("{label} warm"), 1, warm, 0, None);
    let mut ro_put = cx.run_opts(format!("{label} PUT"), 1, n, 0, Some(put_hlog.clone()));
    ro_put.duration = cap;
    let mut ro_get = cx.run_opts(format!("{label} GET"), 1, n, warm, Some(get_hlog.clone()));
    ro_get.duration = cap;
    let (put, get, phases) = on_target!(cx.o, eo, |t, ep| {
        runner::load(&t, &ep, &copts, &warm_w, &ro_warm)?;
        let put = runner::load(&t, &ep, &copts, &put_w, &ro_put)?;
        // GETs over the keys stored so far (the PUT phase may have stopped early).
        let get_w = mix_spec(1.0, 0.0, warm + put.run.operations, n, size, Skew::Uniform, seed)?;
        let get = runner::run(&t, &ep, &copts, &get_w, &ro_get)?;
        // The server's own sampled step timings; a server too old to report them
        // leaves the columns empty.
        let phases = Client::connect(&t, &ep, copts.clone()).and_then(|mut c| c.stats()).ok().map(|s| s.phases);
        Ok::<_, SweepError>((put, get, phases))
    })?;
    // Each operation's steps only where the server timed some: a protocol whose server
    // never runs that path (RDMP-CC's PUTs, the passive designs') shows "-", not 0.00.
    if let Some(ph) = phases {
        let put = [
            ("srv_put_validate_us", ph.put_validate_us),
            ("srv_put_seal_us", ph.put_seal_us),
            ("srv_put_writeback_us", ph.put_writeback_us),
            ("srv_put_second_persist_us", ph.put_second_persist_us),
            ("srv_put_index_us", ph.put_index_us),
            ("srv_put_reply_us", ph.put_reply_us),
            ("srv_put_total_us", ph.put_total_us),
        ];
        let get = [
            ("srv_get_lookup_us", ph.get_lookup_us),
            ("srv_get_write_us", ph.get_write_us),
            ("srv_get_total_us", ph.get_total_us),
        ];
        let timed = |n: u64, cols: &[(&'static str, f64)]| if n > 0 { cols.to_vec() } else { Vec::new() };
        for (c, v) in timed(ph.put_samples, &put).into_iter().chain(timed(ph.get_samples, &get)) {
            row.insert(c, f3(v));
        }
    }
    let ps = Stat::series(&put.measurements, &["INSERT"])?;
    let gs = Stat::series(&get.measurements, &["READ"])?;
    row.insert("protocol", protocol.to_string());
    row.insert("size", size.to_string());
    row.insert("warmup", warm.to_string());
    row.insert("ops", n.to_string());
    let cols = COLUMNS;
    ps.put(row, "put_", &cols.iter().copied().filter(|c| c.starts_with("put_")).collect::<Vec<_>>());
    gs.put(row, "get_", &cols.iter().copied().filter(|c| c.starts_with("get_")).collect::<Vec<_>>());
    row.insert("put_ops_per_sec", format!("{:.1}", put.run.ops_per_sec()));
    row.insert("get_ops_per_sec", format!("{:.1}", get.run.ops_per_sec()));
    row.insert("errors", (put.errors + get.errors).to_string());
    row.insert("put_hlog", file_name(&put_hlog));
    row.insert("get_hlog", file_name(&get_hlog));
    // The breakdown of the median request.
    let c = cx.components(size)?;
    let (cp, cg) = copies(protocol);
    let (put_t, put_m, get_t, get_m) = match protocol {
        Protocol::Boom | Protocol::Rpc | Protocol::Herd => (c.wir, 0.0, c.wir, 0.0),
        // A WRITE and a READ of the result: a small one for a PUT, the entry for a GET.
        Protocol::Rfp => (c.wir, 0.0, c.read, 0.0),
        Protocol::Rdmp | Protocol::RdmpCc => (c.wir, c.meta, c.read, c.meta),
        // Two entry WRITEs (each with its FLUSH) between a lock CAS and its release
        // (two small round trips, counted as metadata); a GET is one READ.
        Protocol::PdpmDirect => (2.0 * c.wir, 2.0 * c.meta, c.read, 0.0),
        // The version's WRITE + FLUSH, then the link's CAS + FLUSH (a small round
        // trip); a GET is one READ (of the version, the head beside it).
        Protocol::Clover => (c.wir, c.meta, c.read, 0.0),
    };
    // Every server-committed PUT commits through the same path: two persists and an
    // index upsert. RDMP-CC's PUT persists the entry by the client's FLUSH (one persist
    // of the entry) and leaves counting and indexing to the server's later work.
    let (put_wb, put_index) = match protocol {
        Protocol::RdmpCc => (c.writeback, 0.0),
        // Both slots are made durable; no server index.
        Protocol::PdpmDirect => (2.0 * c.writeback, 0.0),
        Protocol::Clover => (c.writeback + c.count, 0.0),
        _ => (c.writeback + c.count, c.index_put),
    };
    let put_parts = [put_t, put_m, cp * c.memcpy, put_wb, put_index];
    let get_index = if matches!(protocol, Protocol::PdpmDirect | Protocol::Clover) { 0.0 } else { c.index_get };
    let get_parts = [get_t, get_m, cg * c.memcpy, 0.0, get_index];
    for (op, parts, total) in [("put", put_parts, ps.p50), ("get", get_parts, gs.p50)] {
        let names = part_columns(op)?;
        for (n, v) in names.iter().zip(parts) {
            row.insert(n, f3(v));
        }
        row.insert(names[5], f3(total - parts.iter().sum::<f64>()));
    }
    row.insert("entry_writeback_us", f3(c.writeback));
    row.insert("count_persist_us", f3(c.count));
    row.insert("flush", FlushKind::detect().to_string());
    Ok(())
}

/// Every protocol of the run side by side (the paper tables above hold BOOM-KV and
/// its two baselines): median latency per op and size, in `Protocol::ALL` order.
fn every_protocol(t: &Table, b: &mut Builder, sizes: &[u64]) -> Result<()> {
    let names = t.distinct("protocol")?;
    let present: Vec<Protocol> = Protocol::ALL.into_iter().filter(|p| names.iter().any(|n| n == p.name())).collect();
    if present.iter().all(|p| matches!(p, Protocol::Boom | Protocol::Rdmp | Protocol::Rpc)) {
        return Ok(());
    }
    let mut head = vec!["op".to_string(), "size".to_string()];
    head.extend(present.iter().map(|p| format!("{p} p50 us")));
    let refs: Vec<&str> = head.iter().map(String::as_str).collect();
    let mut tab = TextTable::new(&refs);
    for (op, col) in [(Op::Put, "put_p50_us"), (Op::Get, "get_p50_us")] {
        for &size in sizes {
            let mut cells = vec![op.name().to_string(), size_label(size)];
            for p in &present {
                let v = row_at(t, p.name(), size)?.map(|r| t.req(r, col)).transpose()?;
                cells.push(v.map(us).unwrap_or_else(|| "-".into()));
            }
            tab.push(cells);
        }
    }
    b.line("Every protocol (median latency, us):");
    b.table(&tab);
    Ok(())
}

/// The six breakdown columns of `op` (`put`, `get`) in [`COLUMNS`], in the order of
/// the parts: transport, metadata, copies, write-back, index, other.
fn part_columns(op: &str) -> Result<&'static [&'static str]> {
    let first = format!("{op}_transport_us");
    COLUMNS
        .iter()
        .position(|c| *c == first)
        .and_then(|at| COLUMNS.get(at..at + 6))
        .filter(|names| names[5] == format!("{op}_other_us"))
        .ok_or_else(|| SweepError::Invalid(format!("internal: no breakdown columns for {op}")))
}

/// The figures, from the preset's table (and derived CSVs in `dir`).
fn figures(t: &Table, dir: &Path) -> Result<Vec<Figure>> {
    let transport = transport_of(t);
    let mut figs = Vec::new();
    for (op, fig, y) in [("PUT", "fig13-put-latency", "put"), ("GET", "fig14-get-latency", "get")] {
        let s = per_protocol_across(t, &[], "size", &format!("{y}_p50_us"))?;
        figs.push(Figure::Line(LineFigure {
            stem: fig.into(),
            title: format!("{op} latency vs value size ({transport}, 1 client)"),
            x: XAxis::Bytes,
            y: YAxis::Plain,
            x_label: "value size (bytes, log scale)".into(),
            y_label: format!("median latency (µs), {}", range_note(t)?),
            series: s,
            note: Some(format!(
                "Lines: the median of the repeats' median latencies. Paper: figures 13, 14 (6, 7: the RDMP-KV \
                 lines). Transport: {transport}."
            )),
            y_log_auto: true,
        }));
    }
    let cp = dir.join("latency-compare.csv");
    if cp.exists() {
        let c = Table::read(&cp)?;
        let mut s = Vec::new();
        let mut k = 0;
        for op in ["put", "get"] {
            for base in ["rdmp", "rpc"] {
                let rows = rows_with(&c, &[("op", op), ("baseline", base)])?;
                let color = PALETTE[k];
                k += 1;
                let name = format!("{} vs {}", op.to_uppercase(), protocol_name(base));
                let band = c.col("change_p50_lo_pct").is_ok().then_some(("change_p50_lo_pct", "change_p50_hi_pct"));
                s.push(series(name.clone(), color, points(&c, &rows, "size", "change_p50_pct", band)?));
                let paper = points(&c, &rows, "size", "paper_pct", None)?;
                if !paper.is_empty() {
                    s.push(LineSeries {
                        name: format!("paper: {name}"),
                        color,
                        points: paper,
                        markers_only: true,
                        dashed: false,
                    });
                }
            }
        }
        figs.push(Figure::Line(LineFigure {
            stem: "latency-reduction".into(),
            title: "BOOM-KV latency change vs the baselines".into(),
            x: XAxis::Bytes,
            y: YAxis::Plain,
            x_label: "value size (bytes, log scale)".into(),
            y_label: format!("change of median latency (%), {}", range_note(t)?),
            series: s,
            note: Some(
                "Negative: BOOM-KV is faster. Lines: the median of the per-repeat changes. Crosses: the paper's \
                 values where it gives one."
                    .into(),
            ),
            y_log_auto: false,
        }));
    }
    Ok(figs)
}

/// The latency comparison: per size, BOOM's median PUT and GET latency against each
/// baseline (median of the per-repeat changes, with their interval), the paper's figure,
/// and whether the paper's headline reductions are reproduced: a verdict only where
/// the whole interval agrees.
fn summary(t: &Table, b: &mut Builder, dir: &Path) -> Result<()> {
    let sizes = sizes_of(t, "size")?;
    let mut compare = csv::Writer::from_writer(Vec::new());
    let cerr = |e: csv::Error| SweepError::Invalid(format!("CSV: {e}"));
    compare
        .write_record([
            "point",
            "op",
            "baseline",
            "size",
            "boom_avg_us",
            "baseline_avg_us",
            "change_pct",
            "change_p50_pct",
            "paper_pct",
            "paper",
            "target_pct",
            "target_met",
            "change_p50_lo_pct",
            "change_p50_hi_pct",
            "repeats",
            "verdict",
        ])
        .map_err(cerr)?;
    let mut targets = Vec::new();
    let mut repeats = 1;
    for op in [Op::Put, Op::Get] {
        let (avg_col, p50_col) =
            if op == Op::Put { ("put_avg_us", "put_p50_us") } else { ("get_avg_us", "get_p50_us") };
        let mut tab = TextTable::new(&[
            "size",
            &format!("{} boom p50 us", op.name()),
            "rdmp p50 us",
            "vs rdmp",
            "paper",
            "rpc p50 us",
            "vs rpc",
            "paper",
        ]);
        for &size in &sizes {
            let Some(boom) = row_at(t, "boom", size)? else { continue };
            let mine = t.req(boom, p50_col)?;
            let mut cells = vec![size_label(size), us(mine)];
            for base in [Protocol::Rdmp, Protocol::Rpc] {
                let other = row_at(t, base.name(), size)?;
                let other_p50 = other.map(|r| t.req(r, p50_col)).transpose()?;
                let ch_avg = match other {
                    Some(r) => change(t.req(boom, avg_col)?, t.req(r, avg_col)?),
                    None => None,
                };
                let paired = match other {
                    Some(r) => Paired::of(&t.across(boom, p50_col)?, &t.across(r, p50_col)?, change),
                    None => None,
                };
                if let Some(p) = paired {
                    repeats = repeats.max(p.n);
                }
                let pv = paper::latency_reduction(op, base, size);
                let target = paper::latency_target(op, base, size);
                let verdict = match (target, paired) {
                    (Some(tg), Some(p)) => Some(p.at_most(-tg.pct)),
                    _ => None,
                };
                let mut cell = paired.map(|p| p.text(pct)).unwrap_or_else(|| "-".into());
                if let (Some(v), Some(tg)) = (verdict, target) {
                    let word = match v {
                        Verdict::Met => "met",
                        Verdict::Missed => "MISSED",
                        Verdict::Noisy | Verdict::OneRun => "inconclusive",
                    };
                    cell.push_str(&format!(" ({word} -{}%)", tg.pct));
                }
                cells.push(other_p50.map(us).unwrap_or_else(|| "-".into()));
                cells.push(cell);
                cells.push(paper_text(pv));
                let f2 = |v: Option<f64>| v.map(|c| format!("{c:.2}")).unwrap_or_default();
                compare
                    .write_record([
                        format!("{}/{}/{size}", op.name().to_lowercase(), base.name()),
                        op.name().to_lowercase(),
                        base.name().to_string(),
                        size.to_string(),
                        format!("{:.3}", t.req(boom, avg_col)?),
                        other.map(|r| t.req(r, avg_col)).transpose()?.map(|o| format!("{o:.3}")).unwrap_or_default(),
                        f2(ch_avg),
                        f2(paired.map(|p| p.median)),
                        pv.and_then(|p| p.value).map(|v| format!("{v}")).unwrap_or_default(),
                        pv.map(|p| format!("{} (fig. {})", p.text, p.figure)).unwrap_or_default(),
                        target.map(|tg| format!("{}", -tg.pct)).unwrap_or_default(),
                        match verdict {
                            Some(Verdict::Met) => "true".into(),
                            Some(Verdict::Missed) => "false".into(),
                            _ => String::new(),
                        },
                        f2(paired.filter(|p| p.n > 1).map(|p| p.lo)),
                        f2(paired.filter(|p| p.n > 1).map(|p| p.hi)),
                        paired.map(|p| p.n.to_string()).unwrap_or_default(),
                        verdict.map(|v| v.word().to_string()).unwrap_or_default(),
                    ])
                    .map_err(cerr)?;
                if let (Some(tg), Some(p), Some(v)) = (target, paired, verdict) {
                    targets.push((tg, size, p, v));
                }
            }
            tab.push(cells);
        }
        b.table(&tab);
    }
    every_protocol(t, b, &sizes)?;
    if let Some(i) = (0..t.rows.len()).next() {
        b.para(&format!(
            "Median latency (p50) over up to {} operations per phase and repeat (see put_ops, get_ops), 1 client, \
             transport {}; change = BOOM-KV against the baseline (negative: BOOM-KV is faster), the median of the \
             per-repeat changes of the medians and [their interval]; {}. met/MISSED: whether this machine reproduces \
             the reduction the paper reports (figures 13, 14).",
            t.str(i, "ops")?,
            t.str(i, "transport")?,
            interval_note(repeats)
        ));
    }
    // BOOM-KV's saving over RDMP-KV (the metadata round trip it removes) in
    // microseconds. With repeats: the per-repeat differences of the medians, as every
    // other comparison here (a log's interval would speak for its one repeat only).
    for &size in &sizes {
        for (op, phase, tag) in [(Op::Put, "put", "INSERT"), (Op::Get, "get", "READ")] {
            if repeats > 1 {
                let (Some(br), Some(xr)) = (row_at(t, "boom", size)?, row_at(t, "rdmp", size)?) else { continue };
                let col = format!("{phase}_p50_us");
                let Some(d) = Paired::of(&t.across(br, &col)?, &t.across(xr, &col)?, |b, x| Some(x - b)) else {
                    continue;
                };
                b.line(&format!(
                    "{} {}: RDMP-KV's median minus BOOM-KV's (the metadata round trip BOOM-KV removes) is {} us: \
                     the median of the {} repeats' differences [and their interval, as above].",
                    size_label(size),
                    op.name(),
                    d.text(us),
                    d.n
                ));
                continue;
            }
            let (Some(bm), Some(xm)) =
                (median_interval(dir, "boom", size, phase, tag), median_interval(dir, "rdmp", size, phase, tag))
            else {
                continue;
            };
            b.line(&format!(
                "{} {}: RDMP-KV's median minus BOOM-KV's (the metadata round trip BOOM-KV removes) is {} us, 95% \
                 interval [{}, {}] us (each median's distribution-free 95% interval from the latency logs, {} and {} \
                 operations; the difference's interval from their ends).",
                size_label(size),
                op.name(),
                us(xm.1 - bm.1),
                us(xm.0 - bm.2),
                us(xm.2 - bm.0),
                bm.3,
                xm.3
            ));
        }
    }
    let path = dir.join("latency-compare.csv");
    let bytes = compare.into_inner().map_err(|e| SweepError::Invalid(format!("CSV: {e}")))?;
    std::fs::write(&path, bytes).map_err(io_err(&path))?;
    for (tg, size, p, v) in targets {
        let mut s =
            format!("paper: {} ({}): measured median change {}: {}", tg.text, size_label(size), p.text(pct), v.word());
        if v == Verdict::Missed {
            s.push_str(&format!(". {}", missed_note(t, tg, size)?));
        }
        b.line(&s);
    }
    Ok(())
}

/// `(low, median, high, samples)` in microseconds of the `tag` latencies in a latency
/// point's log: the median with its distribution-free 95% interval (the order
/// statistics at n/2 -/+ 0.98 sqrt(n)). `None` without a log or with under 10 samples.
fn median_interval(dir: &Path, protocol: &str, size: u64, phase: &str, tag: &str) -> Option<(f64, f64, f64, u64)> {
    let path = dir.join(format!("latency-{protocol}-{size}.{phase}.hlog"));
    let run = crate::bench::hlog::merge_hlog_files(&[path]).ok()?;
    let h = run.measurements.get(tag)?.histogram();
    let n = h.len();
    if n < 10 {
        return None;
    }
    let half = 0.98 / (n as f64).sqrt();
    let q = |p: f64| h.value_at_quantile(p.clamp(0.0, 1.0)) as f64 / 1000.0;
    Some((q(0.5 - half), q(0.5), q(0.5 + half), n))
}

/// Why a latency target is missed on this machine, from the measured breakdown.
fn missed_note(t: &Table, tg: paper::Target, size: u64) -> Result<String> {
    let op = if tg.op == Op::Put { "put" } else { "get" };
    let (Some(br), Some(xr)) = (row_at(t, "boom", size)?, row_at(t, tg.baseline.name(), size)?) else {
        return Ok(String::new());
    };
    const PARTS: [(&str, &str); 6] = [
        ("transport", "transport"),
        ("metadata", "metadata RPC"),
        ("copies", "copies"),
        ("writeback", "write-back"),
        ("index", "index"),
        ("other", "other"),
    ];
    let part = |r: usize, c: &str| -> Result<f64> { Ok(t.num(r, &format!("{op}_{c}_us"))?.unwrap_or(0.0)) };
    let parts = |r: usize| -> Result<String> {
        let mut v = Vec::new();
        for (c, name) in PARTS {
            v.push(format!("{name} {}", us(part(r, c)?)));
        }
        Ok(v.join(", "))
    };
    let bp50 = t.req(br, &format!("{op}_p50_us"))?;
    let xp50 = t.req(xr, &format!("{op}_p50_us"))?;
    let mut s = format!(
        "Median {} {} breakdown (us): BOOM-KV {} = {}; {} {} = {}.",
        size_label(size),
        tg.op.name(),
        us(bp50),
        parts(br)?,
        tg.baseline,
        us(xp50),
        parts(xr)?
    );
    if xp50 <= 0.0 || bp50 <= 0.0 {
        return Ok(s);
    }
    // What BOOM removes against this baseline, as measured.
    let diff = xp50 - bp50;
    match tg.baseline {
        Protocol::Rdmp => {
            let meta = part(xr, "metadata")?;
            s.push_str(&format!(
                " What BOOM-KV removes is RDMP-KV's metadata round trip: {} us by the transport floor's 64 B RPC, and \
                 RDMP-KV's median in the table minus BOOM-KV's is {} us = {:.0}% of RDMP-KV's median (the target asks \
                 for {}%).",
                us(meta),
                us(diff),
                diff / xp50 * 100.0,
                tg.pct
            ));
        }
        _ => {
            let copies = part(xr, "copies")? - part(br, "copies")?;
            s.push_str(&format!(
                " What BOOM-KV removes is RDMA-KV's extra copies (server DRAM staging, receive buffer): {} us measured \
                 as memcpy; RDMA-KV's median in the table minus BOOM-KV's is {} us = {:.0}% of RDMA-KV's median (the target asks \
                 for {}%).",
                us(copies),
                us(diff),
                diff / xp50 * 100.0,
                tg.pct
            ));
        }
    }
    if part(br, "other")? < 0.0 || part(xr, "other")? < 0.0 {
        s.push_str(
            " The parts, measured separately, add up to more than a median: the transport floor measured in this \
             run is slower than the round trips these requests saw, so it overstates the transport here and the \
             points are limited by the transport's latency (see the transport preset), not by write-back, index or \
             copies.",
        );
    } else {
        let (name, biggest) = PARTS
            .iter()
            .map(|(c, n)| (*n, part(br, c).unwrap_or(0.0)))
            .fold(("", f64::NEG_INFINITY), |a, b| if b.1 > a.1 { b } else { a });
        s.push_str(&format!(
            " The largest part of BOOM-KV's median is {name} ({} us, {:.0}%): what limits it on this machine.",
            us(biggest),
            biggest / bp50 * 100.0
        ));
    }
    Ok(s)
}
#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::median_interval;
    use crate::bench::hlog::HlogWriter;
    use crate::bench::measure::new_histogram;

    #[test]
    fn median_interval_from_a_latency_log() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, n: u64| {
            let mut h = new_histogram();
            // 1..=n microseconds, in nanoseconds.
            for i in 1..=n {
                h.record(i * 1000).unwrap();
            }
            let start = SystemTime::now();
            let mut w = HlogWriter::create(&dir.path().join(name), start).unwrap();
            w.write_histogram("READ", &h, start, Duration::from_secs(1)).unwrap();
        };
        write("latency-boom-32.get.hlog", 10_000);
        let (lo, med, hi, n) = median_interval(dir.path(), "boom", 32, "get", "READ").unwrap();
        assert_eq!(n, 10_000);
        assert!((med - 5000.0).abs() < 10.0, "{med}");
        // n/2 -/+ 0.98 sqrt(n) = 5000 -/+ 98 ranks: about 4902 and 5098 us.
        assert!((lo - 4902.0).abs() < 10.0 && (hi - 5098.0).abs() < 10.0, "[{lo}, {hi}]");
        // Too few samples, another tag, or no log: no interval.
        write("latency-rdmp-32.get.hlog", 5);
        assert!(median_interval(dir.path(), "rdmp", 32, "get", "READ").is_none());
        assert!(median_interval(dir.path(), "boom", 32, "get", "INSERT").is_none());
        assert!(median_interval(dir.path(), "rpc", 32, "get", "READ").is_none());
    }
}
