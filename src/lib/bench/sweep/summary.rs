//! The headline comparisons against the paper, from the CSV files only: a table on
//! stdout, a section of `SUMMARY.md`, and (for the latency preset) the derived
//! `latency-compare.csv` that the reduction figure draws.

use std::fmt::Write as _;
use std::path::Path;

use super::paper;
use super::{Preset, Result, SweepError, Table};

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
    /// A table with this header.
    pub fn new(h: &[&str]) -> TextTable {
        TextTable { header: h.iter().map(ToString::to_string).collect(), rows: Vec::new() }
    }

    /// Adds a row.
    pub fn push(&mut self, r: Vec<String>) {
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

/// Signed percent, one decimal.
pub fn pct(v: f64) -> String {
    format!("{v:+.1}%")
}

/// Microseconds: no decimals from 100 up, two below.
pub fn us(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Percent change of `a` against `b`.
pub fn change(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| (a / b - 1.0) * 100.0)
}

/// The paper's value and figure, or `-`.
pub fn paper_text(p: Option<paper::PaperValue>) -> String {
    p.map(|p| format!("{} (fig. {})", p.text, p.figure)).unwrap_or_else(|| "-".into())
}

/// A preset's summary being written: terminal text and Markdown side by side.
pub struct Builder {
    title: String,
    text: String,
    md: String,
}

impl Builder {
    fn new(p: Preset) -> Builder {
        let title = format!("{} ({})", p.name(), p.figures());
        Builder { text: format!("== {title} ==\n"), md: format!("## {title}\n\n"), title }
    }

    /// Adds a table.
    pub fn table(&mut self, t: &TextTable) {
        self.text.push_str(&t.text());
        self.md.push_str(&t.markdown());
        self.md.push('\n');
    }

    /// Adds a bullet line.
    pub fn line(&mut self, s: &str) {
        let _ = writeln!(self.text, "  {s}");
        let _ = writeln!(self.md, "- {s}");
    }

    /// Adds a paragraph.
    pub fn para(&mut self, s: &str) {
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
    preset.def().summarize(t, &mut b, dir)?;
    let errors: f64 = (0..t.rows.len()).map(|i| t.num(i, "errors").ok().flatten().unwrap_or(0.0)).sum();
    if errors > 0.0 {
        b.line(&format!("WARNING: {errors} operations failed in these runs (column `errors`)."));
    }
    Ok(b.done())
}

/// The distinct whole numbers of column `col`, ascending.
pub fn sizes_of(t: &Table, col: &str) -> Result<Vec<u64>> {
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
pub fn row_at(t: &Table, protocol: &str, size: u64) -> Result<Option<usize>> {
    let ps = t.rows_where("protocol", protocol)?;
    let ss = t.rows_where("size", &size.to_string())?;
    Ok(ps.into_iter().rev().find(|i| ss.contains(i)))
}

/// `32 B`, `4 KiB`.
pub fn size_label(size: u64) -> String {
    if size >= 1024 && size % 1024 == 0 {
        format!("{} KiB", size / 1024)
    } else {
        format!("{size} B")
    }
}
