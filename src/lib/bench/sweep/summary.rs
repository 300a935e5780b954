//! The headline comparisons against the paper, from the CSV files only: a table on
//! stdout, a section of `SUMMARY.md`, and (for the latency preset) the derived
//! `latency-compare.csv` that the reduction figure draws.

use std::fmt::Write as _;
use std::path::Path;

use super::paper::{self, Op};
use super::{io_err, Preset, Result, SweepError, Table};
use crate::units::short_bytes;
use crate::wire::Protocol;

/// A preset's summary.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Plain text for the terminal.
    pub text: String,
    /// Markdown for SUMMARY.md.
    pub markdown: String,
}

/// A simple table rendered as aligned text and as Markdown.
#[derive(Clone, Debug, Default)]
pub struct TextTable {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl TextTable {
    fn new(h: &[&str]) -> TextTable {
        TextTable { header: h.iter().map(ToString::to_string).collect(), rows: Vec::new() }
    }

    fn push(&mut self, r: Vec<String>) {
        self.rows.push(r);
    }

    fn text(&self) -> String {
        let n = self.header.len();
        let mut w = vec![0; n];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let mut s = String::new();
        for (k, r) in std::iter::once(&self.header).chain(&self.rows).enumerate() {
            let line: Vec<String> = r.iter().enumerate().map(|(i, c)| format!("{c:<width$}", width = w[i])).collect();
            let _ = writeln!(s, "  {}", line.join("  ").trim_end());
            if k == 0 {
                let _ = writeln!(s, "  {}", w.iter().map(|&x| "-".repeat(x)).collect::<Vec<_>>().join("  "));
            }
        }
        s
    }

    fn markdown(&self) -> String {
        let mut s = format!("| {} |\n|{}\n", self.header.join(" | "), "---|".repeat(self.header.len()));
        for r in &self.rows {
            let _ = writeln!(s, "| {} |", r.join(" | "));
        }
        s
    }
}

fn pct(v: f64) -> String {
    format!("{v:+.1}%")
}

fn us(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Percent change of `a` against `b`.
fn change(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| (a / b - 1.0) * 100.0)
}

fn paper_text(p: Option<paper::PaperValue>) -> String {
    p.map(|p| format!("{} (fig. {})", p.text, p.figure)).unwrap_or_else(|| "-".into())
}

struct Builder {
    title: String,
    text: String,
    md: String,
}

impl Builder {
    fn new(p: Preset) -> Builder {
        let title = format!("{} ({})", p.name(), p.figures());
        Builder { text: format!("== {title} ==\n"), md: format!("## {title}\n\n"), title }
    }

    fn table(&mut self, t: &TextTable) {
        self.text.push_str(&t.text());
        self.md.push_str(&t.markdown());
        self.md.push('\n');
    }

    fn line(&mut self, s: &str) {
        let _ = writeln!(self.text, "  {s}");
        let _ = writeln!(self.md, "- {s}");
    }

    fn para(&mut self, s: &str) {
        let _ = writeln!(self.text, "  {s}");
        let _ = writeln!(self.md, "{s}\n");
    }

    fn done(self) -> Summary {
        let _ = &self.title;
        Summary { text: self.text, markdown: self.md }
    }
}

/// Builds the summary of `preset` from its table (and writes derived CSVs into `dir`).
pub fn summarize(preset: Preset, t: &Table, dir: &Path) -> Result<Summary> {
    let mut b = Builder::new(preset);
    if t.rows.is_empty() {
        b.para("no results.");
        return Ok(b.done());
    }
    // SETUP.md names the CPU; an emulated one (QEMU TCG, e.g. soft-RoCE in
    // ci/rdma-vm.sh) says what kind of figures these are.
    if std::fs::read_to_string(dir.join("SETUP.md")).is_ok_and(|s| s.contains("QEMU TCG")) {
        b.para(
            "Measured in a QEMU TCG guest: an emulator's figures. Compare protocols with each other in this run, \
             never with hardware.",
        );
    }
    match preset {
        Preset::Transport => transport(t, &mut b)?,
        Preset::Latency => latency(t, &mut b, dir)?,
        Preset::Breakdown => breakdown(t, &mut b)?,
        Preset::Ycsb => ycsb(t, &mut b)?,
        Preset::SegmentSize => segment(t, &mut b)?,
        Preset::Skew => skew(t, &mut b)?,
        Preset::Writeback => writeback(t, &mut b)?,
        Preset::Threads => threads(t, &mut b)?,
    }
    let errors: f64 = (0..t.rows.len()).map(|i| t.num(i, "errors").ok().flatten().unwrap_or(0.0)).sum();
    if errors > 0.0 {
        b.line(&format!("WARNING: {errors} operations failed in these runs (column `errors`)."));
    }
    Ok(b.done())
}

fn sizes_of(t: &Table, col: &str) -> Result<Vec<u64>> {
    let mut v = Vec::new();
    for s in t.distinct(col)? {
        let n = s.parse::<u64>().map_err(|_| SweepError::Csv {
            path: t.path.clone(),
            line: None,
            problem: format!("column `{col}`: '{s}' is not a whole number"),
        })?;
        v.push(n);
    }
    v.sort_unstable();
    Ok(v)
}

/// The row of `protocol` at `size` (latency-like tables).
fn row_at(t: &Table, protocol: &str, size: u64) -> Result<Option<usize>> {
    let ps = t.rows_where("protocol", protocol)?;
    let ss = t.rows_where("size", &size.to_string())?;
    Ok(ps.into_iter().rev().find(|i| ss.contains(i)))
}

fn transport(t: &Table, b: &mut Builder) -> Result<()> {
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

/// `32 B`, `4 KiB`.
fn size_label(size: u64) -> String {
    if size >= 1024 && size % 1024 == 0 {
        format!("{} KiB", size / 1024)
    } else {
        format!("{size} B")
    }
}

/// The latency comparison: per size, BOOM's PUT and GET average latency against
/// each baseline, the paper's figure, and whether the paper's headline reductions are
/// reproduced.
fn latency(t: &Table, b: &mut Builder, dir: &Path) -> Result<()> {
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
        ])
        .map_err(cerr)?;
    let mut targets = Vec::new();
    for op in [Op::Put, Op::Get] {
        let col = if op == Op::Put { "put_avg_us" } else { "get_avg_us" };
        let mut tab = TextTable::new(&[
            "size",
            &format!("{} boom us", op.name()),
            "rdmp us",
            "vs rdmp",
            "paper",
            "rpc us",
            "vs rpc",
            "paper",
        ]);
        for &size in &sizes {
            let Some(boom) = row_at(t, "boom", size)? else { continue };
            let mine = t.req(boom, col)?;
            let mut cells = vec![size_label(size), us(mine)];
            for base in [Protocol::Rdmp, Protocol::Rpc] {
                let p50_col = col.replace("avg", "p50");
                let (other, other_p50) = match row_at(t, base.name(), size)? {
                    Some(r) => (Some(t.req(r, col)?), Some(t.req(r, &p50_col)?)),
                    None => (None, None),
                };
                let ch = other.and_then(|o| change(mine, o));
                let ch50 = other_p50.and_then(|o| change(t.req(boom, &p50_col).unwrap_or(0.0), o));
                let pv = paper::latency_reduction(op, base, size);
                let target = paper::latency_target(op, base, size);
                let met = match (target, ch) {
                    (Some(tg), Some(c)) => Some(-c >= tg.pct),
                    _ => None,
                };
                let mut cell = ch.map(pct).unwrap_or_else(|| "-".into());
                if let Some(c) = ch50 {
                    cell.push_str(&format!(" (p50 {})", pct(c)));
                }
                if let (Some(m), Some(tg)) = (met, target) {
                    cell.push_str(&format!(" ({} -{}%)", if m { "met" } else { "MISSED" }, tg.pct));
                }
                cells.push(other.map(us).unwrap_or_else(|| "-".into()));
                cells.push(cell);
                cells.push(paper_text(pv));
                compare
                    .write_record([
                        format!("{}/{}/{size}", op.name().to_lowercase(), base.name()),
                        op.name().to_lowercase(),
                        base.name().to_string(),
                        size.to_string(),
                        format!("{mine:.3}"),
                        other.map(|o| format!("{o:.3}")).unwrap_or_default(),
                        ch.map(|c| format!("{c:.2}")).unwrap_or_default(),
                        ch50.map(|c| format!("{c:.2}")).unwrap_or_default(),
                        pv.and_then(|p| p.value).map(|v| format!("{v}")).unwrap_or_default(),
                        pv.map(|p| format!("{} (fig. {})", p.text, p.figure)).unwrap_or_default(),
                        target.map(|tg| format!("{}", -tg.pct)).unwrap_or_default(),
                        met.map(|m| m.to_string()).unwrap_or_default(),
                    ])
                    .map_err(cerr)?;
                if let (Some(tg), Some(c)) = (target, ch) {
                    targets.push((tg, size, c, ch50, met == Some(true)));
                }
            }
            tab.push(cells);
        }
        b.table(&tab);
    }
    if let Some(i) = (0..t.rows.len()).next() {
        b.para(&format!(
            "Average latency over up to {} operations per phase (see put_ops, get_ops), 1 client, transport {}; change = BOOM-KV against the \
             baseline (negative: BOOM-KV is faster), of the average and (p50) of the median; targets are judged on \
             the average. met/MISSED: whether this machine reproduces the reduction the paper reports \
             (figures 13, 14), judged on these measurements.",
            t.str(i, "ops")?,
            t.str(i, "transport")?
        ));
    }
    // BOOM-KV's saving over RDMP-KV (the metadata round trip it removes), with an
    // interval from the runs' own latency logs.
    for &size in &sizes {
        for (op, phase, tag) in [(Op::Put, "put", "INSERT"), (Op::Get, "get", "READ")] {
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
    for (tg, size, c, c50, met) in targets {
        let at_median = c50.map(|m| -m >= tg.pct);
        let state = match (met, at_median) {
            (true, Some(false)) => "met on the average, NOT at the median (tail effects decide it)",
            (true, _) => "met",
            (false, Some(true)) => "MISSED on the average (met at the median)",
            (false, _) => "MISSED",
        };
        let p50 = c50.map(|m| format!(" (p50 {})", pct(m))).unwrap_or_default();
        let mut s = format!("paper: {} ({}): measured {}{p50}: {state}", tg.text, size_label(size), pct(c));
        if !met || at_median == Some(false) {
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
                 RDMP-KV's median minus BOOM-KV's is {} us = {:.0}% of RDMP-KV's median (the target asks for {}%).",
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
                 as memcpy; RDMA-KV's median minus BOOM-KV's is {} us = {:.0}% of RDMA-KV's median (the target asks \
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

fn breakdown(t: &Table, b: &mut Builder) -> Result<()> {
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
    b.para(&format!("Method: {}", super::points::BREAKDOWN_METHOD));
    Ok(())
}

/// The server's own sampled step timings, per row that has them.
fn server_phases(t: &Table, b: &mut Builder) -> Result<()> {
    // In CSV order: PUT validate .. total, GET lookup, post, total.
    let cols: Vec<&str> =
        super::points::columns(Preset::Breakdown).iter().copied().filter(|c| c.starts_with("srv_")).collect();
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
                None => cells.push(String::new()),
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

fn ycsb(t: &Table, b: &mut Builder) -> Result<()> {
    let mut tab =
        TextTable::new(&["mix", "size", "boom avg us", "boom p99 us", "vs rdmp", "vs rpc", "paper (vs rdmp)"]);
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
            let mine = t.req(br, "all_avg_us")?;
            let vs = |p: &str| -> Result<String> {
                Ok(match find(p)? {
                    Some(r) => change(mine, t.req(r, "all_avg_us")?).map(pct).unwrap_or_else(|| "-".into()),
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
    b.para("Average latency of every request (a read-modify-write counts as its GET and its PUT).");
    Ok(())
}

fn segment(t: &Table, b: &mut Builder) -> Result<()> {
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

fn skew(t: &Table, b: &mut Builder) -> Result<()> {
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

fn writeback(t: &Table, b: &mut Builder) -> Result<()> {
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
                match (a, c) {
                    (Some(a), Some(c)) => change(c, a).map(pct).unwrap_or_else(|| "-".into()),
                    _ => "-".into(),
                },
                on.map(|r| t.str(r, "coop_steals").map(String::from)).transpose()?.unwrap_or_else(|| "-".into()),
                paper_text(paper::writeback_gain(&flush, size)),
            ]);
        }
    }
    b.table(&tab);
    b.para("PUT throughput of 2 client threads, new keys, 2 server workers; gain = coop on against off.");
    Ok(())
}

fn threads(t: &Table, b: &mut Builder) -> Result<()> {
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
                    Some(r) => change(mine, t.req(r, col)?).map(pct).unwrap_or_else(|| "-".into()),
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
    if let Some(i) = (0..t.rows.len()).next() {
        b.para(&format!(
            "This machine: {} cores, {} server worker(s); the paper's servers had 2x Xeon 8260 (48 cores).",
            t.str(i, "cores")?,
            t.str(i, "workers")?
        ));
    }
    Ok(())
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
