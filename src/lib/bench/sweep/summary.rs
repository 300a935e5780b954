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
    if let Some(s) = spread_warning(t)? {
        b.line(&s);
    }
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

/// A comparison of two series measured in the same repeats (paired by repeat number,
/// so drift that hits one repeat hits both sides): the median of the per-repeat
/// values and an order-statistic interval for that median: from the `rank`-th lowest
/// value to the `rank`-th highest, with `rank` the largest whose interval covers the
/// true median with probability at least [`INTERVAL_COVERAGE`]. Below 9 repeats no
/// interval inside the range reaches it, and the interval is the range (75% for 3
/// repeats, 94% for 5): one odd repeat then decides; from 9 on the extremes are left out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Paired {
    /// Repeats with both sides.
    pub n: usize,
    /// The median per-repeat value ([`median_sorted`]: for an even count the mean of the two
    /// middle ones).
    pub median: f64,
    /// The interval's low end: the `rank`-th lowest per-repeat value.
    pub lo: f64,
    /// The interval's high end: the `rank`-th highest per-repeat value.
    pub hi: f64,
    /// Which order statistics bound the interval (1: the range).
    pub rank: usize,
}

/// The median of values sorted ascending: the middle one, or for an even count the
/// mean of the two middle ones (the lower middle alone, used before, leaned to one
/// side: with 4 repeats of a change, always the more favourable second). `NaN` for
/// none.
pub fn median_sorted(v: &[f64]) -> f64 {
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The coverage an interval of [`Paired`] aims at (the range when none reaches it).
pub const INTERVAL_COVERAGE: f64 = 0.95;

/// The probability that the interval from the `rank`-th lowest to the `rank`-th highest
/// of `n` independent values covers their distribution's median: each value falls
/// below it with probability 1/2, so it misses only when fewer than `rank` fall on one
/// side, `1 - 2 P(Binomial(n, 1/2) < rank)`.
pub fn median_coverage(n: usize, rank: usize) -> f64 {
    if n < 2 || rank == 0 || 2 * rank > n {
        return 0.0;
    }
    // P(B < rank) = sum_{i < rank} C(n, i) / 2^n, in floating point (n is small).
    let mut c = 1.0f64;
    let mut below = 0.0f64;
    for i in 0..rank {
        below += c;
        c = c * (n - i) as f64 / (i + 1) as f64;
    }
    1.0 - 2.0 * below / 2f64.powi(n as i32)
}

/// The `rank` of [`Paired`] for `n` repeats: the largest reaching [`INTERVAL_COVERAGE`],
/// else 1 (the range).
fn interval_rank(n: usize) -> usize {
    (1..=n / 2).rev().find(|&k| median_coverage(n, k) >= INTERVAL_COVERAGE).unwrap_or(1)
}

impl Paired {
    /// `f(a, b)` for every repeat both `a` and `b` have (`(repeat, value)` pairs).
    pub fn of(a: &[(u64, f64)], b: &[(u64, f64)], f: impl Fn(f64, f64) -> Option<f64>) -> Option<Paired> {
        let mut v: Vec<f64> = per_repeat(a, b, f).into_iter().map(|p| p.1).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let (n, rank) = (v.len(), interval_rank(v.len()));
        Some(Paired { n, median: median_sorted(&v), lo: v[rank - 1], hi: v[n - rank], rank })
    }

    /// The probability that the interval covers the true median ([`median_coverage`];
    /// for the range, `1 - 2^(1-n)`).
    pub fn coverage(&self) -> f64 {
        median_coverage(self.n, self.rank)
    }

    /// Met when the whole interval is at least `want`, missed when it is wholly below,
    /// inconclusive otherwise (or with one repeat: no interval).
    pub fn at_least(&self, want: f64) -> Verdict {
        if self.n < 2 {
            Verdict::OneRun
        } else if self.lo >= want {
            Verdict::Met
        } else if self.hi < want {
            Verdict::Missed
        } else {
            Verdict::Noisy
        }
    }

    /// Met when the whole interval is at most `want`, missed when it is wholly above.
    pub fn at_most(&self, want: f64) -> Verdict {
        if self.n < 2 {
            Verdict::OneRun
        } else if self.hi <= want {
            Verdict::Met
        } else if self.lo > want {
            Verdict::Missed
        } else {
            Verdict::Noisy
        }
    }

    /// `median [lo, hi]` with `fmt` for each number.
    pub fn text(&self, fmt: impl Fn(f64) -> String) -> String {
        if self.n < 2 {
            fmt(self.median)
        } else {
            format!("{} [{}, {}]", fmt(self.median), fmt(self.lo), fmt(self.hi))
        }
    }
}

/// A target judged on repeats: only an interval that lies wholly on one side decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The whole interval meets it.
    Met,
    /// No part of the interval meets it.
    Missed,
    /// The repeats disagree: the noise could flip a verdict.
    Noisy,
    /// One repeat: no interval, no verdict.
    OneRun,
}

impl Verdict {
    /// The word for tables and lines.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::Missed => "MISSED",
            Verdict::Noisy => "inconclusive (noisy)",
            Verdict::OneRun => "inconclusive (one run: --repeats 3 or more gives an interval)",
        }
    }
}

/// The change of row `a` against row `b` of an aggregated table in column `col`,
/// paired by repeat: `median [lo, hi]` in percent, or `-`.
pub fn paired_change(t: &Table, a: usize, b: usize, col: &str) -> Result<String> {
    Ok(Paired::of(&t.across(a, col)?, &t.across(b, col)?, change).map(|p| p.text(pct)).unwrap_or_else(|| "-".into()))
}

/// Repeats that disagree by more than this (max - min over the median) make a point noisy.
pub const NOISY_SPREAD: f64 = 0.25;

/// A warning when the repeats of some points disagree by more than [`NOISY_SPREAD`] in
/// a headline column (medians and throughputs): a busy or unsteady machine, or a
/// bimodal effect worth a look. `None` when they agree or a point ran once.
pub fn spread_warning(t: &Table) -> Result<Option<String>> {
    let cols: Vec<&String> = t.header.iter().filter(|c| c.ends_with("_p50_us") || c.ends_with("ops_per_sec")).collect();
    let mut noisy = 0;
    let mut worst: Option<(f64, String)> = None;
    for i in 0..t.rows.len() {
        let mut hit = false;
        for c in &cols {
            let v: Vec<f64> = t.across(i, c)?.into_iter().map(|p| p.1).collect();
            if v.len() < 2 {
                continue;
            }
            let mut s = v.clone();
            s.sort_by(f64::total_cmp);
            let med = median_sorted(&s);
            if med <= 0.0 {
                continue;
            }
            let spread = (s[s.len() - 1] - s[0]) / med;
            if spread > NOISY_SPREAD {
                hit = true;
                if worst.as_ref().is_none_or(|w| spread > w.0) {
                    let id = t.str(i, "point")?;
                    worst = Some((spread, format!("{id} {c}: {:.3} .. {:.3}", s[0], s[s.len() - 1])));
                }
            }
        }
        noisy += usize::from(hit);
    }
    Ok(worst.map(|(spread, w)| {
        let mut s = format!(
            "NOISY: the repeats of {noisy} of {} points differ by more than {:.0}% (max - min over the median) in a \
             median or a throughput; the widest: {w} ({:.0}%). A busy machine (see SETUP.md for the load during the \
             run) or a bimodal effect; a target judged above stays inconclusive where the repeats disagree.",
            t.rows.len(),
            NOISY_SPREAD * 100.0,
            spread * 100.0
        );
        if let Some((lo, hi)) = handoff_range(t).filter(|&(lo, hi)| crate::bench::busy::handoff_moved(lo, hi)) {
            s.push_str(&format!(
                " The round trip of a cache line between the CPUs, sampled before each run, ranged {lo:.0} .. {hi:.0} \
                 ns (column `{}`): shared-memory (shm) results move with it.",
                super::HANDOFF
            ));
        }
        s
    }))
}

/// The `handoff_ns` samples of the table's runs (empty cells left out).
fn handoff_samples(t: &Table) -> Vec<f64> {
    let Ok(c) = t.col(super::HANDOFF) else { return Vec::new() };
    let src = if t.runs.is_empty() { &t.rows } else { &t.runs };
    src.iter().filter_map(|r| r.get(c)?.trim().parse::<f64>().ok()).filter(|x| *x > 0.0).collect()
}

/// The fastest and the slowest `handoff_ns` sample of the table's runs, if it has any.
fn handoff_range(t: &Table) -> Option<(f64, f64)> {
    let v = handoff_samples(t);
    let lo = v.iter().copied().reduce(f64::min)?;
    let hi = v.iter().copied().reduce(f64::max)?;
    Some((lo, hi))
}

/// `(repeat, f(a, b))` for every repeat both `a` and `b` have, in `a`'s order.
fn per_repeat(a: &[(u64, f64)], b: &[(u64, f64)], f: impl Fn(f64, f64) -> Option<f64>) -> Vec<(u64, f64)> {
    a.iter().filter_map(|&(r, x)| b.iter().find(|p| p.0 == r).and_then(|p| f(x, p.1)).map(|y| (r, y))).collect()
}

/// For a target `f(a, b) >= want` judged per repeat over the points `(label, a, b)`
/// (rows of an aggregated table): the repeats that fall below it, each with the round
/// trip of a cache line between the CPUs sampled before its run of `a` (column
/// `handoff_ns`), against the median of the table's samples. A reader can then tell a
/// miss the CPUs' placement explains from one it does not. `None` when no repeat falls
/// below or no round trip was sampled.
pub fn below_with_handoff(
    t: &Table,
    points: &[(String, usize, usize)],
    want: f64,
    f: impl Fn(f64, f64) -> Option<f64>,
) -> Result<Option<String>> {
    let mut all = handoff_samples(t);
    if all.is_empty() {
        return Ok(None);
    }
    all.sort_by(f64::total_cmp);
    let med = median_sorted(&all);
    let mut below = Vec::new();
    let mut moved = 0;
    for (label, a, b) in points {
        let h = t.across(*a, super::HANDOFF)?;
        let ratios = per_repeat(&t.across(*a, "ops_per_sec")?, &t.across(*b, "ops_per_sec")?, &f);
        for (rep, y) in ratios.into_iter().filter(|p| p.1 < want) {
            match h.iter().find(|p| p.0 == rep).map(|p| p.1).filter(|ns| *ns > 0.0) {
                Some(ns) => {
                    moved += usize::from(crate::bench::busy::handoff_moved(ns, med));
                    below.push(format!("{label} repeat {rep}: {y:.2}x at {ns:.0} ns"));
                }
                None => below.push(format!("{label} repeat {rep}: {y:.2}x, no round trip sampled")),
            }
        }
    }
    if below.is_empty() {
        return Ok(None);
    }
    Ok(Some(format!(
        "the repeats below {want}x, with the round trip of a cache line between the CPUs before each (column `{}`; \
         median of all runs {med:.0} ns): {}; {moved} of these {} ran with it {}x the median or more away from it",
        super::HANDOFF,
        below.join("; "),
        below.len(),
        crate::bench::busy::HANDOFF_MOVED
    )))
}

/// How a paired interval was made, for the summaries of presets that judge targets
/// ([`interval_note_unjudged`] for the others).
pub fn interval_note(n: usize) -> String {
    match interval_how(n) {
        Some(how) => format!("{how}; a verdict is given only when the whole interval lies on one side of the target"),
        None => "one run per point: no interval and no verdict (use --repeats)".into(),
    }
}

/// [`interval_note`] for a preset that judges no target: the paper's figures beside
/// its comparisons are for reading, and no verdict is printed.
pub fn interval_note_unjudged(n: usize) -> String {
    match interval_how(n) {
        Some(how) => format!("{how}; the paper's figures beside them are for comparison: this preset judges no target"),
        None => "one run per point: no interval (use --repeats)".into(),
    }
}

/// How `n` repeats make a comparison and its interval; `None` for one run.
fn interval_how(n: usize) -> Option<String> {
    if n < 2 {
        return None;
    }
    let k = interval_rank(n);
    let how = if k == 1 {
        format!(
            "their range, which covers the true median with probability {:.0}% (1 - 2^(1-{n}))",
            median_coverage(n, 1) * 100.0
        )
    } else {
        format!(
            "an order-statistic interval, from the {} lowest to the {} highest, which covers the true median with \
             probability {:.1}%",
            ordinal(k),
            ordinal(k),
            median_coverage(n, k) * 100.0
        )
    };
    Some(format!(
        "{n} interleaved repeats per point; a comparison is the median of the {n} per-repeat values with {how}"
    ))
}

/// `1st`, `2nd`, `3rd`, `4th`.
fn ordinal(k: usize) -> String {
    let suffix = match (k % 10, k % 100) {
        (1, x) if x != 11 => "st",
        (2, x) if x != 12 => "nd",
        (3, x) if x != 13 => "rd",
        _ => "th",
    };
    format!("{k}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preset_that_judges_no_target_promises_no_verdict() {
        for n in [1, 3, 9] {
            let note = interval_note_unjudged(n);
            assert!(!note.contains("verdict"), "{note}");
            assert!(interval_note(n).contains("verdict"));
        }
        assert!(interval_note_unjudged(3).ends_with("this preset judges no target"));
    }

    #[test]
    fn paired_verdicts_need_every_repeat_on_one_side() {
        let a = [(0, 10.0), (1, 12.0), (2, 11.0)];
        let b = [(0, 20.0), (1, 20.0), (2, 20.0), (3, 5.0)];
        let p = Paired::of(&a, &b, |x, y| Some(x / y)).unwrap();
        assert_eq!(p.n, 3);
        assert_eq!((p.lo, p.median, p.hi), (0.5, 0.55, 0.6));
        assert_eq!(p.at_most(0.6), Verdict::Met);
        assert_eq!(p.at_most(0.55), Verdict::Noisy);
        assert_eq!(p.at_most(0.4), Verdict::Missed);
        assert_eq!(p.at_least(0.5), Verdict::Met);
        assert_eq!(p.at_least(0.7), Verdict::Missed);
        assert!((p.coverage() - 0.75).abs() < 1e-9);
        let one = Paired::of(&a[..1], &b, |x, y| Some(x / y)).unwrap();
        assert_eq!(one.at_most(1.0), Verdict::OneRun);
        assert!(Paired::of(&a, &[], |x, y| Some(x / y)).is_none());
    }

    #[test]
    fn noisy_repeats_name_the_cpus_round_trip_when_it_moved() {
        let table = |handoff: [&str; 4]| {
            let header = ["point", "repeat", "handoff_ns", "ops_per_sec"].map(String::from).to_vec();
            let runs: Vec<Vec<String>> = [("a", "0", 300.0), ("a", "1", 600.0), ("b", "0", 500.0), ("b", "1", 510.0)]
                .iter()
                .zip(handoff)
                .map(|(&(p, r, ops), h)| vec![p.into(), r.into(), h.into(), ops.to_string()])
                .collect();
            Table { path: "t.csv".into(), header, rows: runs.clone(), runs: Vec::new() }.aggregate().unwrap()
        };
        // Point a's repeats differ by 67% of their median (300 and 600: 450).
        let w = spread_warning(&table(["620", "240", "250", "255"])).unwrap().expect("noisy");
        assert!(w.starts_with("NOISY: the repeats of 1 of 2 points"), "{w}");
        assert!(w.contains("ranged 240 .. 620 ns (column `handoff_ns`)"), "{w}");
        // A steady round trip, or none sampled: not named.
        let w = spread_warning(&table(["240", "250", "260", "255"])).unwrap().expect("noisy");
        assert!(w.starts_with("NOISY") && !w.contains("handoff_ns"), "{w}");
        let w = spread_warning(&table(["", "", "", ""])).unwrap().expect("noisy");
        assert!(!w.contains("handoff_ns"), "{w}");
    }

    #[test]
    fn repeats_below_a_target_are_named_with_the_cpus_round_trip() {
        // Point s (shm) against point r (Redis), three repeats: repeat 1 is below 5x and
        // ran with the CPUs far apart; repeat 2 is below with no figure.
        let header = ["point", "repeat", "handoff_ns", "ops_per_sec"].map(String::from).to_vec();
        let runs: Vec<Vec<String>> = [
            ("s", "0", "100", "500"),
            ("s", "1", "395", "300"),
            ("s", "2", "", "450"),
            ("r", "0", "98", "80"),
            ("r", "1", "101", "80"),
            ("r", "2", "99", "100"),
        ]
        .iter()
        .map(|&(p, r, h, ops)| vec![p.into(), r.into(), h.into(), ops.into()])
        .collect();
        let t = Table { path: "t.csv".into(), header, rows: runs, runs: Vec::new() }.aggregate().unwrap();
        let (s, r) = (t.rows_where("point", "s").unwrap()[0], t.rows_where("point", "r").unwrap()[0]);
        let ratio = |a: f64, b: f64| (b > 0.0).then(|| a / b);
        let w = below_with_handoff(&t, &[("4 threads".into(), s, r)], 5.0, ratio).unwrap().expect("two below");
        assert!(w.contains("median of all runs 100 ns"), "{w}");
        assert!(w.contains("4 threads repeat 1: 3.75x at 395 ns"), "{w}");
        assert!(w.contains("4 threads repeat 2: 4.50x, no round trip sampled"), "{w}");
        assert!(w.contains("1 of these 2 ran with it 1.5x the median or more away"), "{w}");
        assert!(!w.contains("repeat 0"), "{w}");
        // Every repeat at the target: nothing to say; nor without any round trip.
        assert_eq!(below_with_handoff(&t, &[("4".into(), s, r)], 3.0, ratio).unwrap(), None);
        let mut bare = t.clone();
        let c = bare.col("handoff_ns").unwrap();
        for row in bare.runs.iter_mut().chain(bare.rows.iter_mut()) {
            row[c].clear();
        }
        assert_eq!(below_with_handoff(&bare, &[("4".into(), s, r)], 5.0, ratio).unwrap(), None);
    }

    #[test]
    fn from_nine_repeats_the_interval_leaves_out_the_extremes() {
        // Up to 8 repeats no interval inside the range reaches 95%: the range it is.
        for n in 2..=8u64 {
            let a: Vec<(u64, f64)> = (0..n).map(|r| (r, r as f64)).collect();
            let p = Paired::of(&a, &a, |x, _| Some(x)).unwrap();
            assert_eq!((p.rank, p.lo, p.hi), (1, 0.0, (n - 1) as f64), "{n}");
            assert!((p.coverage() - (1.0 - 0.5f64.powi(n as i32 - 1))).abs() < 1e-12, "{n}");
        }
        // 10 repeats: [2nd, 9th] covers the median with 1 - 2 * 11/1024 = 97.9%; the
        // 3rd and 8th would be 89%. One slow outlier no longer decides.
        let v = [0.7, 1.2, 1.25, 1.3, 1.18, 1.22, 1.21, 1.19, 1.24, 1.23];
        let a: Vec<(u64, f64)> = v.iter().enumerate().map(|(r, x)| (r as u64, *x)).collect();
        let p = Paired::of(&a, &a, |x, _| Some(x)).unwrap();
        // The median of an even count: the mean of the middle two (1.21 and 1.22).
        assert_eq!((p.n, p.rank, p.lo, p.hi), (10, 2, 1.18, 1.25));
        assert!((p.median - 1.215).abs() < 1e-12, "{}", p.median);
        assert!((p.coverage() - (1.0 - 22.0 / 1024.0)).abs() < 1e-12);
        assert_eq!(p.at_least(1.0), Verdict::Met);
        // Two slow ones on the same side: inconclusive again.
        let mut w = v;
        w[1] = 0.9;
        let a: Vec<(u64, f64)> = w.iter().enumerate().map(|(r, x)| (r as u64, *x)).collect();
        assert_eq!(Paired::of(&a, &a, |x, _| Some(x)).unwrap().at_least(1.0), Verdict::Noisy);
        // 20 repeats: [6th, 15th] (95.9%); the 7th and 14th would be 88.5%.
        let a: Vec<(u64, f64)> = (0..20u64).map(|r| (r, r as f64)).collect();
        let p = Paired::of(&a, &a, |x, _| Some(x)).unwrap();
        assert_eq!((p.rank, p.lo, p.hi), (6, 5.0, 14.0));
        assert!(p.coverage() >= 0.95 && p.coverage() < 0.96, "{}", p.coverage());
    }
}
