//! The **breakdown** preset (figures 1, 2): where a request's time goes. The same
//! points and columns as [`latency`] over fewer sizes; the figures
//! stack the measured components of each median request
//! ([`super::super::components`]) and the server's own step timings.

use std::path::Path;

use plotters::style::RGBColor;

use super::super::components::{BREAKDOWN_CAPTION, BREAKDOWN_METHOD};
use super::super::paper;
use super::super::plot::{num, BarFigure, BLUE, BROWN, GREY, ORANGE, PURPLE, RED};
use super::super::summary::{row_at, us, TextTable};
use super::latency::{self, At, COLUMNS};
use super::prelude::*;
use crate::units::short_bytes;

/// This preset.
pub const PRESET: Preset = Preset::new(&Breakdown);

struct Breakdown;

impl PresetDef for Breakdown {
    fn meta(&self) -> &'static Meta {
        &Meta {
            name: "breakdown",
            about: "where a request's time goes: transport, metadata, copies, write-back, index",
            reproduces: "figures 1, 2",
            method: "breakdown: the latency preset's points at fewer sizes (quick: 64 B, 1 KiB, 16 KiB; full: 64 B .. 16 KiB).",
            columns: COLUMNS,
            needs_embedded: false,
            axes: &["sizes", "protocols", "ops", "workers"],
        }
    }

    fn grid(&self, o: &SweepOptions) -> Result<Vec<Point>> {
        latency::grid_of(PRESET, o, (&[64, 1024, 16384], &[64, 256, 1024, 4096, 16384]))
    }

    fn begin(&self, cx: &mut Context<'_>, points: &[Point]) {
        latency::begin_of(cx, points);
    }

    fn run(&self, cx: &mut Context<'_>, pt: &Point, row: &mut Row) -> Result<()> {
        let at = *pt.params::<At>()?;
        latency::run_point(cx, pt, at.protocol, at.size, row)
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
    let transport = transport_of(t);
    let mut figs = Vec::new();
    for (op, stem, fig) in [("put", "fig01-02-breakdown-put", "PUT"), ("get", "fig01-breakdown-get", "GET")] {
        let mut groups = Vec::new();
        let mut totals = Vec::new();
        let parts = [
            ("transport", "transport round trip", BLUE),
            ("metadata", "metadata RPC", RED),
            ("copies", "copies", ORANGE),
            ("writeback", "write-back", PURPLE),
            ("index", "index", BROWN),
            ("other", "other (protocol, checksums)", GREY),
        ];
        let mut stacks: Vec<(String, RGBColor, Vec<f64>)> =
            parts.iter().map(|(_, n, c)| (n.to_string(), *c, Vec::new())).collect();
        for i in 0..t.rows.len() {
            groups.push(format!("{} {}", t.str(i, "protocol")?, short_bytes(t.req(i, "size")? as u64)));
            totals.push(t.req(i, &format!("{op}_p50_us"))?);
            for (k, (c, _, _)) in parts.iter().enumerate() {
                stacks[k].2.push(num(t, i, &format!("{op}_{c}_us"))?.unwrap_or(0.0));
            }
        }
        figs.push(Figure::Bar(BarFigure {
            stem: stem.into(),
            title: format!("Where a {fig}'s time goes ({transport}, medians)"),
            x_label: "protocol and value size".into(),
            y_label: "latency (µs)".into(),
            groups,
            stacks,
            totals: Some((format!("measured median {fig} latency"), totals)),
            note: Some(BREAKDOWN_CAPTION.into()),
        }));
    }
    Ok(figs)
}

fn summary(t: &Table, b: &mut Builder) -> Result<()> {
    let mut tab = TextTable::new(&[
        "protocol",
        "size",
        "op",
        "p50 us",
        "transport",
        "metadata",
        "copies",
        "write-back",
        "index",
        "other",
    ]);
    for i in 0..t.rows.len() {
        for op in ["put", "get"] {
            let p50 = t.req(i, &format!("{op}_p50_us"))?;
            let mut cells = vec![
                t.str(i, "protocol")?.to_string(),
                short_bytes(t.req(i, "size")? as u64),
                op.to_uppercase(),
                us(p50),
            ];
            for c in ["transport", "metadata", "copies", "writeback", "index", "other"] {
                let v = t.num(i, &format!("{op}_{c}_us"))?.unwrap_or(0.0);
                cells.push(if p50 > 0.0 { format!("{} ({:.0}%)", us(v), v / p50 * 100.0) } else { us(v) });
            }
            tab.push(cells);
        }
    }
    b.table(&tab);
    for (op, size, col, pv) in [
        ("put", 64u64, "put_metadata_us", paper::METADATA_SHARE_PUT_64),
        ("get", 64, "get_metadata_us", paper::METADATA_SHARE_GET_64),
    ] {
        if let Some(r) = row_at(t, "rdmp", size)? {
            let m = t.req(r, col)?;
            let p50 = t.req(r, &format!("{op}_p50_us"))?;
            let share = |x: f64| if p50 > 0.0 { x / p50 * 100.0 } else { 0.0 };
            let diff = match row_at(t, "boom", size)? {
                Some(br) => {
                    let d = p50 - t.req(br, &format!("{op}_p50_us"))?;
                    format!("; RDMP-KV median minus BOOM-KV median: {} us = {:.1}%", us(d), share(d))
                }
                None => String::new(),
            };
            b.line(&format!(
                "RDMP-KV metadata phase of a 64 B {}: floor 64 B RPC {} us = {:.1}% of the median{diff} (paper: {}, fig. {})",
                op.to_uppercase(),
                us(m),
                share(m),
                pv.text,
                pv.figure
            ));
        }
    }
    for p in ["rdmp", "boom", "rpc"] {
        if let Some(r) = row_at(t, p, 16384)? {
            let w = t.req(r, "put_writeback_us")?;
            let p50 = t.req(r, "put_p50_us")?;
            b.line(&format!(
                "write-back of a 16 KiB {p} PUT: {:.1}% of the median (paper: {}, fig. {})",
                if p50 > 0.0 { w / p50 * 100.0 } else { 0.0 },
                paper::FLUSH_SHARE_PUT_16K.text,
                paper::FLUSH_SHARE_PUT_16K.figure
            ));
        }
    }
    server_phases(t, b)?;
    if let Some(r) = row_at(t, "boom", 64)? {
        b.line(&put_floor_target(t, r)?);
    }
    b.para(&format!("Method: {}", BREAKDOWN_METHOD));
    Ok(())
}

/// The server's own sampled step timings, per row that has them.
fn server_phases(t: &Table, b: &mut Builder) -> Result<()> {
    // In CSV order: PUT validate .. total, GET lookup, post, total.
    let cols: Vec<&str> = COLUMNS.iter().copied().filter(|c| c.starts_with("srv_")).collect();
    let mut tab = TextTable::new(&[
        "protocol",
        "size",
        "PUT validate",
        "version+seal",
        "write-back",
        "2nd persist",
        "index",
        "reply",
        "PUT total",
        "GET lookup",
        "post",
        "GET total",
    ]);
    let mut any = false;
    for i in 0..t.rows.len() {
        let mut cells = vec![t.str(i, "protocol")?.to_string(), short_bytes(t.req(i, "size")? as u64)];
        let mut have = false;
        for &c in &cols {
            match t.num(i, c)? {
                Some(v) => {
                    have = true;
                    cells.push(us(v));
                }
                None => cells.push("-".into()),
            }
        }
        if have {
            any = true;
            tab.push(cells);
        }
    }
    if any {
        b.line(&format!(
            "Inside the server (us, medians of 1 request in {} timed step by step where it runs; 2nd persist: \
             `count` of an append or `version_num` of an in-place rewrite):",
            crate::server::phases::SAMPLE_EVERY
        ));
        b.table(&tab);
    }
    Ok(())
}

/// Issue 4's bound: over shm, 1 client and 1 worker, BOOM PUT p50 at 64 B at most 1.5x
/// (the WRITE_WITH_IMM + reply floor + the write-back of the entry), all from one run.
const PUT_FLOOR_FACTOR: f64 = 1.5;

fn put_floor_target(t: &Table, r: usize) -> Result<String> {
    let p50 = t.req(r, "put_p50_us")?;
    let wir = t.req(r, "put_transport_us")?;
    let Some(ewb) = t.num(r, "entry_writeback_us")? else {
        return Ok("target: BOOM PUT p50 at 64 B vs floor + write-back: no entry_writeback_us column".into());
    };
    let count = t.num(r, "count_persist_us")?.unwrap_or(0.0);
    let limit = PUT_FLOOR_FACTOR * (wir + ewb);
    let met = p50 <= limit;
    let mut s = format!(
        "target: BOOM PUT p50 at 64 B <= {PUT_FLOOR_FACTOR}x (WRITE_WITH_IMM+reply floor {} us + entry write-back {} \
         us) = {} us: measured {} us = {:.2}x the sum: {}",
        us(wir),
        us(ewb),
        us(limit),
        us(p50),
        if wir + ewb > 0.0 { p50 / (wir + ewb) } else { 0.0 },
        if met { "met" } else { "MISSED" }
    );
    if !met {
        let mech = wir + ewb + count;
        s.push_str(&format!(
            ". The commit fences twice per append (the entry with its version, then `count`: {} + {} us), so floor \
             and persists alone are {} us = {:.2}x the sum; the other {} us is request processing (validation, \
             index, in-flight GETs, reply) and cache-line transfers between the client's and the server's cores",
            us(ewb),
            us(count),
            us(mech),
            if wir + ewb > 0.0 { mech / (wir + ewb) } else { 0.0 },
            us((p50 - mech).max(0.0))
        ));
        let seal = t.num(r, "srv_put_seal_us").ok().flatten().unwrap_or(0.0);
        if let (Some(v), Some(i), Some(rp), Some(tot)) = (
            t.num(r, "srv_put_validate_us")?,
            t.num(r, "srv_put_index_us")?,
            t.num(r, "srv_put_reply_us")?,
            t.num(r, "srv_put_total_us")?,
        ) {
            s.push_str(&format!(
                ". Measured inside the server: validation {} us, version and seal {} us, index {} us, reply {} us; the \
                 server's whole part {} us",
                us(v),
                us(seal),
                us(i),
                us(rp),
                us(tot)
            ));
        }
    }
    Ok(s)
}
