//! Reports: YCSB's text format, CSV rows, JSON.
//!
//! All three take the merged [`Measurements`] and a [`RunInfo`] (run time and the
//! number of operations the client threads executed).
//!
//! **Text** is byte-for-byte YCSB's `TextMeasurementsExporter` over
//! `OneMeasurementHdrHistogram`: `[OVERALL], RunTime(ms), <long>`,
//! `[OVERALL], Throughput(ops/sec), <double>`, then per series `Operations`,
//! `AverageLatency(us)` (a Java `double`), `MinLatency(us)`, `MaxLatency(us)`, one
//! `<p>PercentileLatency(us)` line per percentile (`95th`, `99th`, `99.9`, as YCSB
//! names them), and
//! `Return=<STATUS>, <count>` lines. Doubles print like Java's `Double.toString`
//! (`98911.0`, `1.0E7`). Every figure comes from the series' histogram of latencies
//! truncated to whole microseconds, as YCSB records them, so min, max, average and
//! percentiles equal YCSB's for the same latencies. [`LatencyUnit::Ns`]
//! (`--latency-unit ns`) prints the same report from the nanosecond histograms instead
//! (`AverageLatency(ns)`, ...), for figures below a microsecond.
//!
//! **CSV** ([`append_csv`]) writes one row per run; the header is written when the
//! file is new or empty, and an existing file's header must match (a different
//! column set is an error, never a silently misaligned row). Columns are fixed by a
//! [`CsvSchema`]: `unix_time`, the caller's context columns, `runtime_ms`,
//! `operations`, `throughput_ops_sec`, then for each series `<s>_operations`,
//! `<s>_ok`, `<s>_failed`, `<s>_avg_us`, `<s>_min_us`, `<s>_max_us`,
//! `<s>_p<P>_us`... where `<s>` is the lower-cased series name with `-` as `_`
//! (`read_modify_write`, `intended_read`) and `<P>` the percentile with `.` as `_`
//! (`p99_9`). Latencies keep nanosecond precision (3 decimals of microseconds). An
//! `Intended-` series' `ok` and `failed` cells are empty: the outcome is its
//! operation's.
//!
//! **JSON** ([`json_report`]) has the same numbers plus, on request, each series'
//! full percentile spectrum for plotting.

use std::fs::OpenOptions;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use serde_json::json;

use super::measure::{Measurements, Series, Status, INTENDED_PREFIX};
use crate::error::{Error, Result};

/// The run-wide numbers of a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunInfo {
    /// Wall time of the measured phase.
    pub runtime: Duration,
    /// Operations the client threads executed (YCSB counts a read-modify-write once).
    pub operations: u64,
}

impl RunInfo {
    /// YCSB's `RunTime(ms)`: whole milliseconds.
    pub fn runtime_ms(&self) -> u64 {
        u64::try_from(self.runtime.as_millis()).unwrap_or(u64::MAX)
    }

    /// Operations per second over the exact run time: what the sweeps record. YCSB's
    /// whole milliseconds ([`RunInfo::throughput`]) put 200 operations of 0.3 ms at
    /// 200,000 or 1,000,000 ops/s, and a 300 us run at 200 operations per millisecond.
    pub fn ops_per_sec(&self) -> f64 {
        if self.runtime > Duration::ZERO {
            self.operations as f64 / self.runtime.as_secs_f64()
        } else {
            0.0
        }
    }

    /// YCSB's `Throughput(ops/sec)`: `1000.0 * operations / runtime_ms`. Runs shorter
    /// than a millisecond use the exact run time instead of dividing by zero.
    pub fn throughput(&self) -> f64 {
        let ms = self.runtime_ms();
        if ms > 0 {
            1000.0 * self.operations as f64 / ms as f64
        } else if self.runtime > Duration::ZERO {
            self.operations as f64 / self.runtime.as_secs_f64()
        } else {
            0.0
        }
    }
}

/// Formats a double as Java's `Double.toString` does (`7.9`, `98911.0`, `1.0E7`,
/// `1.0E-4`, `NaN`, `Infinity`).
pub fn java_double(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    let a = v.abs();
    if (1e-3..1e7).contains(&a) {
        let s = format!("{v}");
        if s.contains('.') {
            s
        } else {
            s + ".0"
        }
    } else {
        let s = format!("{v:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        if mantissa.contains('.') {
            format!("{mantissa}E{exp}")
        } else {
            format!("{mantissa}.0E{exp}")
        }
    }
}

/// YCSB's name for a percentile: `95th`, `1st`, `22nd`, `13th` for whole numbers,
/// Java's `Double.toString` otherwise (`99.9`).
pub fn percentile_label(p: f64) -> String {
    if p.fract() == 0.0 && p.abs() < 1e15 {
        let j = p as i64;
        let suffix = match j.rem_euclid(100) {
            11..=13 => "th",
            _ => ["th", "st", "nd", "rd", "th", "th", "th", "th", "th", "th"][j.rem_euclid(10) as usize],
        };
        format!("{j}{suffix}")
    } else {
        java_double(p)
    }
}

pub use crate::measure::parse_percentiles;

/// The numbers reported for one series. Latencies in microseconds with nanosecond
/// precision (reports truncate where YCSB prints integers).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SeriesStats {
    /// Measurement name.
    pub name: String,
    /// Latencies recorded.
    pub operations: u64,
    /// Mean latency.
    pub average_us: f64,
    /// Smallest latency (HdrHistogram's lowest equivalent value).
    pub min_us: f64,
    /// Largest latency (HdrHistogram's highest equivalent value).
    pub max_us: f64,
    /// `(percentile, latency)` for each requested percentile.
    pub percentiles_us: Vec<(f64, f64)>,
    /// Non-zero status counts.
    pub returns: Vec<(Status, u64)>,
}

fn ns_to_us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

impl SeriesStats {
    /// Computes the statistics of `series`.
    pub fn new(name: &str, series: &Series, percentiles: &[f64]) -> SeriesStats {
        let h = series.histogram();
        let empty = h.is_empty();
        let at = |p: f64| if empty { 0.0 } else { ns_to_us(h.value_at_percentile(p)) };
        SeriesStats {
            name: name.to_string(),
            operations: h.len(),
            average_us: if empty { 0.0 } else { h.mean() / 1000.0 },
            min_us: if empty { 0.0 } else { ns_to_us(h.min()) },
            max_us: if empty { 0.0 } else { ns_to_us(h.max()) },
            percentiles_us: percentiles.iter().map(|&p| (p, at(p))).collect(),
            returns: series.statuses().collect(),
        }
    }
}

/// The unit of the YCSB text report's latencies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LatencyUnit {
    /// Whole microseconds, truncated per operation, as YCSB prints them.
    #[default]
    Us,
    /// Nanoseconds (3 significant digits), labelled `(ns)`.
    Ns,
}

impl std::str::FromStr for LatencyUnit {
    type Err = Error;
    fn from_str(s: &str) -> Result<LatencyUnit> {
        match s {
            "us" => Ok(LatencyUnit::Us),
            "ns" => Ok(LatencyUnit::Ns),
            other => Err(Error::invalid(format!("latency unit `{other}`: expected us or ns"))),
        }
    }
}

/// Writes the YCSB text report (YCSB's truncated microseconds).
pub fn write_ycsb_text(out: &mut dyn Write, m: &Measurements, run: &RunInfo, percentiles: &[f64]) -> io::Result<()> {
    write_ycsb_text_in(out, m, run, percentiles, LatencyUnit::Us)
}

/// Writes the YCSB text report with latencies in `unit`.
pub fn write_ycsb_text_in(
    out: &mut dyn Write,
    m: &Measurements,
    run: &RunInfo,
    percentiles: &[f64],
    unit: LatencyUnit,
) -> io::Result<()> {
    writeln!(out, "[OVERALL], RunTime(ms), {}", run.runtime_ms())?;
    writeln!(out, "[OVERALL], Throughput(ops/sec), {}", java_double(run.throughput()))?;
    let u = match unit {
        LatencyUnit::Us => "us",
        LatencyUnit::Ns => "ns",
    };
    for (name, series) in m.series() {
        let h = match unit {
            LatencyUnit::Us => series.truncated_us(),
            LatencyUnit::Ns => series.histogram(),
        };
        let empty = h.is_empty();
        let mean = if empty { 0.0 } else { h.mean() };
        writeln!(out, "[{name}], Operations, {}", h.len())?;
        writeln!(out, "[{name}], AverageLatency({u}), {}", java_double(mean))?;
        writeln!(out, "[{name}], MinLatency({u}), {}", if empty { 0 } else { h.min() })?;
        writeln!(out, "[{name}], MaxLatency({u}), {}", if empty { 0 } else { h.max() })?;
        for p in percentiles {
            let v = if empty { 0 } else { h.value_at_percentile(*p) };
            writeln!(out, "[{name}], {}PercentileLatency({u}), {v}", percentile_label(*p))?;
        }
        for (status, n) in series.statuses() {
            writeln!(out, "[{name}], Return={status}, {n}")?;
        }
    }
    Ok(())
}

/// The YCSB text report as a string.
pub fn ycsb_text(m: &Measurements, run: &RunInfo, percentiles: &[f64]) -> String {
    let mut buf = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = write_ycsb_text(&mut buf, m, run, percentiles);
    String::from_utf8_lossy(&buf).into_owned()
}

/// The columns of a CSV results file.
#[derive(Clone, Debug, PartialEq)]
pub struct CsvSchema {
    context: Vec<String>,
    series: Vec<String>,
    percentiles: Vec<f64>,
}

/// Series in a default CSV row.
pub const CSV_DEFAULT_SERIES: [&str; 5] = ["READ", "UPDATE", "INSERT", "SCAN", "READ-MODIFY-WRITE"];

/// Percentiles in a default CSV row.
pub const CSV_DEFAULT_PERCENTILES: [f64; 6] = [50.0, 90.0, 95.0, 99.0, 99.9, 99.99];

/// `READ-MODIFY-WRITE` -> `read_modify_write`.
fn slug(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect()
}

/// `99.9` -> `p99_9`.
fn percentile_slug(p: f64) -> String {
    format!("p{}", java_double(p).trim_end_matches(".0").replace('.', "_"))
}

impl CsvSchema {
    /// `context` columns (e.g. `protocol`, `transport`, `mix`, `value_size`,
    /// `threads`) followed by the default series and percentiles.
    pub fn new(context: &[&str]) -> CsvSchema {
        CsvSchema {
            context: context.iter().map(ToString::to_string).collect(),
            series: CSV_DEFAULT_SERIES.iter().map(ToString::to_string).collect(),
            percentiles: CSV_DEFAULT_PERCENTILES.to_vec(),
        }
    }

    /// Replaces the series columns (e.g. add `Intended-READ`).
    pub fn with_series(mut self, series: &[&str]) -> CsvSchema {
        self.series = series.iter().map(ToString::to_string).collect();
        self
    }

    /// Adds an `Intended-<s>` series after the series `<s>` already there: the
    /// latencies from each operation's intended start, which a throttled run
    /// (`-target`) records to correct coordinated omission. Their cells are empty in
    /// a run without a target.
    pub fn with_intended(mut self) -> CsvSchema {
        let intended: Vec<String> = self.series.iter().map(|s| format!("{INTENDED_PREFIX}{s}")).collect();
        self.series.extend(intended);
        self
    }

    /// Replaces the percentile columns.
    pub fn with_percentiles(mut self, percentiles: &[f64]) -> CsvSchema {
        self.percentiles = percentiles.to_vec();
        self
    }

    /// The header row.
    pub fn header(&self) -> Vec<String> {
        let mut h = vec!["unix_time".to_string()];
        h.extend(self.context.iter().cloned());
        h.extend(["runtime_ms", "operations", "throughput_ops_sec"].map(String::from));
        for s in &self.series {
            let s = slug(s);
            for col in ["operations", "ok", "failed", "avg_us", "min_us", "max_us"] {
                h.push(format!("{s}_{col}"));
            }
            for p in &self.percentiles {
                h.push(format!("{s}_{}_us", percentile_slug(*p)));
            }
        }
        h
    }

    /// One data row; `context_values` must match the context columns.
    pub fn row(&self, context_values: &[&str], m: &Measurements, run: &RunInfo) -> Result<Vec<String>> {
        if context_values.len() != self.context.len() {
            return Err(Error::invalid(format!(
                "CSV row has {} context values for {} context columns ({})",
                context_values.len(),
                self.context.len(),
                self.context.join(", ")
            )));
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let mut r = vec![now.to_string()];
        r.extend(context_values.iter().map(ToString::to_string));
        r.push(run.runtime_ms().to_string());
        r.push(run.operations.to_string());
        r.push(format!("{:.3}", run.throughput()));
        let us = |v: f64| format!("{v:.3}");
        for name in &self.series {
            match m.get(name) {
                Some(series) => {
                    let s = SeriesStats::new(name, series, &self.percentiles);
                    r.push(s.operations.to_string());
                    if name.starts_with(INTENDED_PREFIX) {
                        // An intended time has no outcome of its own: its operation's
                        // is in the operation's series.
                        r.extend([String::new(), String::new()]);
                    } else {
                        let ok = series.status_count(Status::Ok) + series.status_count(Status::BatchedOk);
                        r.push(ok.to_string());
                        r.push((series.status_total() - ok).to_string());
                    }
                    if s.operations == 0 {
                        r.extend(std::iter::repeat_n(String::new(), 3 + self.percentiles.len()));
                    } else {
                        r.extend([us(s.average_us), us(s.min_us), us(s.max_us)]);
                        r.extend(s.percentiles_us.iter().map(|(_, v)| us(*v)));
                    }
                }
                None => r.extend(std::iter::repeat_n(String::new(), 6 + self.percentiles.len())),
            }
        }
        Ok(r)
    }
}

/// The header of the CSV file at `path`: `None` if there is no such file or it is
/// empty.
pub fn csv_header(path: &Path) -> Result<Option<Vec<String>>> {
    let ctx = |what: &str| format!("{what} CSV file {}", path.display());
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(ctx("reading"), e)),
    };
    // A device or a pipe (`/dev/stdout`, a FIFO) holds no earlier rows to read: reading
    // one would wait for ever or, from /dev/zero, fill memory with one endless line.
    if !file.metadata().map_err(|e| Error::io(ctx("reading"), e))?.is_file() {
        return Ok(None);
    }
    let mut first = String::new();
    BufReader::new(&file).take(MAX_CSV_HEADER).read_line(&mut first).map_err(|e| Error::io(ctx("reading"), e))?;
    if first.is_empty() {
        return Ok(None);
    }
    if !first.ends_with('\n') && first.len() as u64 == MAX_CSV_HEADER {
        return Err(Error::invalid(format!(
            "{}: its first line is over {MAX_CSV_HEADER} bytes, no CSV header of a report",
            path.display()
        )));
    }
    Ok(Some(
        csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(first.as_bytes())
            .records()
            .next()
            .and_then(std::result::Result::ok)
            .map(|r| r.iter().map(String::from).collect())
            .unwrap_or_default(),
    ))
}

/// The length of `bytes` up to and with its last line end (0 if it has none): what a
/// writer finished. What follows was cut short (a full disk, a crash mid-write).
pub fn whole_lines_len(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)
}

/// The longest first line [`csv_header`] reads (a report's header is a few KiB).
const MAX_CSV_HEADER: u64 = 1 << 20;

/// Cuts from `file` what follows its last line end: a row whose write was cut short
/// (a full disk, a crash mid-write), which a row appended after it would join into one
/// line of the wrong fields. Returns the bytes cut (0: the file ends with a whole
/// line, or is empty). `file` must be open for reading and writing.
pub fn drop_torn_row(file: &std::fs::File) -> io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let meta = file.metadata()?;
    let len = meta.len();
    if !meta.is_file() || len == 0 {
        return Ok(0);
    }
    let mut b = [0u8; 1];
    file.read_exact_at(&mut b, len - 1)?;
    if b[0] == b'\n' {
        return Ok(0);
    }
    // Back from the end, a block at a time, to the last line end (none: the whole
    // file is one torn line).
    let mut end = len;
    let mut block = vec![0u8; 64 << 10];
    let whole = loop {
        if end == 0 {
            break 0;
        }
        let n = (end as usize).min(block.len());
        let start = end - n as u64;
        file.read_exact_at(&mut block[..n], start)?;
        let w = whole_lines_len(&block[..n]);
        if w > 0 {
            break start + w as u64;
        }
        end = start;
    };
    file.set_len(whole)?;
    Ok(len - whole)
}

/// Checks that the CSV file at `path`, if it exists and is not empty, has `schema`'s
/// header: what a run checks before it starts, so a file it could not append to does
/// not cost the run.
pub fn check_csv_header(path: &Path, schema: &CsvSchema) -> Result<()> {
    let Some(existing) = csv_header(path)? else { return Ok(()) };
    let header = schema.header();
    if existing != header {
        let at = existing.iter().zip(&header).position(|(a, b)| a != b).unwrap_or(existing.len().min(header.len()));
        return Err(Error::invalid(format!(
            "{} has different columns than this run would write (first difference at column {}: `{}` vs `{}`); \
             write to a new file",
            path.display(),
            at + 1,
            existing.get(at).map(String::as_str).unwrap_or("<none>"),
            header.get(at).map(String::as_str).unwrap_or("<none>"),
        )));
    }
    Ok(())
}

/// Appends one row for this run to the CSV file at `path`, writing the header first
/// if the file is new or empty. Fails, without writing, if the file's header differs
/// from `schema`'s ([`check_csv_header`]).
pub fn append_csv(
    path: &Path,
    schema: &CsvSchema,
    context_values: &[&str],
    m: &Measurements,
    run: &RunInfo,
) -> Result<u64> {
    let row = schema.row(context_values, m, run)?;
    let ctx = |what: &str| format!("{what} CSV file {}", path.display());
    check_csv_header(path, schema)?;
    let mut file =
        OpenOptions::new().read(true).append(true).create(true).open(path).map_err(|e| Error::io(ctx("opening"), e))?;
    // One appender at a time: another's torn row is cut, and rows never interleave.
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| Error::io(ctx("locking"), e.into()))?;
    let torn = drop_torn_row(&file).map_err(|e| Error::io(ctx("repairing"), e))?;
    let len = file.metadata().map_err(|e| Error::io(ctx("reading"), e))?.len();
    let mut w = csv::WriterBuilder::new().has_headers(false).from_writer(Vec::new());
    if len == 0 {
        w.write_record(schema.header()).map_err(|e| Error::invalid(format!("CSV: {e}")))?;
    }
    w.write_record(&row).map_err(|e| Error::invalid(format!("CSV: {e}")))?;
    let bytes = w.into_inner().map_err(|e| Error::invalid(format!("CSV: {e}")))?;
    // One write of whole lines, so concurrent appenders do not interleave rows.
    file.write_all(&bytes).map_err(|e| Error::io(ctx("appending to"), e))?;
    Ok(torn)
}

/// The full percentile spectrum of `h` (nanoseconds) as `(percentile, latency_us,
/// count_at_or_below)`, 5 steps per halving of the remaining tail, up to 100%
/// (HdrHistogram's `outputPercentileDistribution` steps).
pub fn percentile_spectrum(h: &Histogram<u64>) -> Vec<(f64, f64, u64)> {
    if h.is_empty() {
        return Vec::new();
    }
    h.iter_quantiles(5)
        .map(|v| (v.quantile_iterated_to() * 100.0, ns_to_us(v.value_iterated_to()), v.count_since_last_iteration()))
        .scan(0u64, |cum, (p, us, n)| {
            *cum += n;
            Some((p, us, *cum))
        })
        .collect()
}

/// The JSON report: run numbers, then one object per series.
///
/// ```json
/// {"runtime_ms": 10110, "operations": 1000000, "throughput_ops_sec": 98911.0,
///  "series": [{"name": "READ", "operations": 950112, "average_us": 7.9, "min_us": 3.0,
///              "max_us": 812.5, "percentiles_us": [{"percentile": 99.0, "latency_us": 17.1}],
///              "returns": {"OK": 950112},
///              "spectrum": [{"percentile": 0.0, "latency_us": 3.0, "count": 12}, ...]}]}
/// ```
pub fn json_report(m: &Measurements, run: &RunInfo, percentiles: &[f64], spectrum: bool) -> serde_json::Value {
    let series: Vec<serde_json::Value> = m
        .series()
        .into_iter()
        .map(|(name, series)| {
            let s = SeriesStats::new(name, series, percentiles);
            let mut o = json!({
                "name": s.name,
                "operations": s.operations,
                "average_us": s.average_us,
                "min_us": s.min_us,
                "max_us": s.max_us,
                "percentiles_us": s.percentiles_us.iter()
                    .map(|(p, v)| json!({"percentile": p, "latency_us": v}))
                    .collect::<Vec<_>>(),
                "returns": s.returns.iter()
                    .map(|(st, n)| (st.name().to_string(), json!(n)))
                    .collect::<serde_json::Map<_, _>>(),
            });
            if spectrum {
                o["spectrum"] = percentile_spectrum(series.histogram())
                    .into_iter()
                    // The iterator's steps are sums of floats (30.000000000000004).
                    .map(|(p, us, n)| json!({"percentile": (p * 1e9).round() / 1e9, "latency_us": us, "count": n}))
                    .collect();
            }
            o
        })
        .collect();
    json!({
        "runtime_ms": run.runtime_ms(),
        "operations": run.operations,
        "throughput_ops_sec": run.throughput(),
        "series": series,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::measure::MeasurementInterval;

    #[test]
    fn doubles_print_like_java() {
        // From OpenJDK 17's Double.toString.
        let cases: [(f64, &str); 17] = [
            (0.0, "0.0"),
            (1.0, "1.0"),
            (7.9, "7.9"),
            (98911.0, "98911.0"),
            (1234.5678, "1234.5678"),
            (0.001, "0.001"),
            (0.0001, "1.0E-4"),
            (9999999.0, "9999999.0"),
            (10000000.0, "1.0E7"),
            (12345678.9, "1.23456789E7"),
            (1e21, "1.0E21"),
            (100.0 / 3.0, "33.333333333333336"),
            (2.0 / 3.0 * 1000.0, "666.6666666666666"),
            (99.9, "99.9"),
            (99.99, "99.99"),
            (0.5, "0.5"),
            (123456.789e3, "1.23456789E8"),
        ];
        for (v, s) in cases {
            assert_eq!(java_double(v), s, "{v}");
        }
        assert_eq!(java_double(f64::NAN), "NaN");
        assert_eq!(java_double(f64::INFINITY), "Infinity");
    }

    #[test]
    fn percentile_labels_are_ycsbs() {
        let cases = [
            (1.0, "1st"),
            (2.0, "2nd"),
            (3.0, "3rd"),
            (11.0, "11th"),
            (12.0, "12th"),
            (13.0, "13th"),
            (21.0, "21st"),
            (22.0, "22nd"),
            (23.0, "23rd"),
            (50.0, "50th"),
            (95.0, "95th"),
            (99.0, "99th"),
            (100.0, "100th"),
            (111.0, "111th"),
            (99.9, "99.9"),
            (99.99, "99.99"),
            (0.5, "0.5"),
            (99.999, "99.999"),
        ];
        for (p, s) in cases {
            assert_eq!(percentile_label(p), s);
        }
    }

    #[test]
    fn percentile_lists() {
        assert_eq!(parse_percentiles("50, 95,99,99.9").unwrap(), vec![50.0, 95.0, 99.0, 99.9]);
        assert!(parse_percentiles("50,,99").is_err());
        assert!(parse_percentiles("101").is_err());
        assert!(parse_percentiles("p99").unwrap_err().to_string().contains("invalid percentile `p99`"));
    }

    #[test]
    fn text_truncates_latencies_like_ycsb() {
        // YCSB records (end - start) / 1000: 10.999 us is 10, never 11.
        let mut m = Measurements::new(MeasurementInterval::Op);
        for ns in [10_999u64, 10_999, 12_600, 249_990] {
            m.record("READ", Duration::from_nanos(ns), Status::Ok);
        }
        let text = ycsb_text(&m, &RunInfo { runtime: Duration::from_millis(1), operations: 4 }, &[50.0, 75.0]);
        assert!(text.contains("[READ], MinLatency(us), 10\n"), "{text}");
        assert!(text.contains("[READ], 50thPercentileLatency(us), 10\n"), "{text}");
        assert!(text.contains("[READ], 75thPercentileLatency(us), 12\n"), "{text}");
        // 249 us sits in a histogram bucket (249.856..249.983) near 250: still 249.
        assert!(text.contains("[READ], MaxLatency(us), 249\n"), "{text}");
        // (10 + 10 + 12 + 249) / 4, as YCSB's histogram mean of whole microseconds.
        assert!(text.contains("[READ], AverageLatency(us), 70.25\n"), "{text}");
        let mut ns = Vec::new();
        write_ycsb_text_in(
            &mut ns,
            &m,
            &RunInfo { runtime: Duration::from_millis(1), operations: 4 },
            &[50.0],
            LatencyUnit::Ns,
        )
        .unwrap();
        let ns = String::from_utf8(ns).unwrap();
        assert!(ns.contains("[READ], 50thPercentileLatency(ns), 10999\n"), "{ns}");
        assert!(ns.contains("AverageLatency(ns)"), "{ns}");
    }

    fn sample() -> Measurements {
        let mut m = Measurements::new(MeasurementInterval::Op);
        // READ: 1..=100 us, one NOT_FOUND of 7 us; UPDATE: 10 ops of 250 us.
        for i in 1..=100u64 {
            m.record("READ", Duration::from_micros(i), Status::Ok);
        }
        m.record("READ", Duration::from_micros(7), Status::NotFound);
        for _ in 0..10 {
            m.record("UPDATE", Duration::from_micros(250), Status::Ok);
        }
        m
    }

    #[test]
    fn ycsb_text_format() {
        let run = RunInfo { runtime: Duration::from_millis(10110), operations: 111 };
        let text = ycsb_text(&sample(), &run, &[95.0, 99.0, 99.9]);
        let expected = "\
[OVERALL], RunTime(ms), 10110
[OVERALL], Throughput(ops/sec), 10.979228486646884
[READ], Operations, 100
[READ], AverageLatency(us), 50.5
[READ], MinLatency(us), 1
[READ], MaxLatency(us), 100
[READ], 95thPercentileLatency(us), 95
[READ], 99thPercentileLatency(us), 99
[READ], 99.9PercentileLatency(us), 100
[READ], Return=OK, 100
[READ], Return=NOT_FOUND, 1
[READ-FAILED], Operations, 1
[READ-FAILED], AverageLatency(us), 7.0
[READ-FAILED], MinLatency(us), 7
[READ-FAILED], MaxLatency(us), 7
[READ-FAILED], 95thPercentileLatency(us), 7
[READ-FAILED], 99thPercentileLatency(us), 7
[READ-FAILED], 99.9PercentileLatency(us), 7
[UPDATE], Operations, 10
[UPDATE], AverageLatency(us), 250.0
[UPDATE], MinLatency(us), 250
[UPDATE], MaxLatency(us), 250
[UPDATE], 95thPercentileLatency(us), 250
[UPDATE], 99thPercentileLatency(us), 250
[UPDATE], 99.9PercentileLatency(us), 250
[UPDATE], Return=OK, 10
";
        // Averages keep the histograms' nanosecond buckets (250 us sits in the bucket
        // 249.984..250.111 whose middle is 250.048); integer columns are rounded.
        assert_eq!(text, expected);
        assert_eq!(1000.0 * 111.0 / 10110.0, 10.979228486646884);
    }

    #[test]
    fn a_torn_last_row_is_cut_back_to_the_last_line_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        let cut = |content: &[u8]| {
            std::fs::write(&path, content).unwrap();
            let f = OpenOptions::new().read(true).append(true).open(&path).unwrap();
            (drop_torn_row(&f).unwrap(), std::fs::read(&path).unwrap())
        };
        assert_eq!(cut(b"a,b\n1,2\n"), (0, b"a,b\n1,2\n".to_vec()));
        assert_eq!(cut(b"a,b\n1,2\n3,"), (2, b"a,b\n1,2\n".to_vec()));
        assert_eq!(cut(b"a,"), (2, Vec::new()));
        assert_eq!(cut(b""), (0, Vec::new()));
        // A torn row longer than the block read back at a time.
        let mut long = b"a\n".to_vec();
        long.extend(std::iter::repeat_n(b'x', 200_000));
        assert_eq!(cut(&long), (200_000, b"a\n".to_vec()));
    }

    #[test]
    fn csv_rows_append_with_one_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.csv");
        let schema = CsvSchema::new(&["protocol", "mix"]).with_percentiles(&[50.0, 99.9]);
        let run = RunInfo { runtime: Duration::from_secs(2), operations: 111 };
        append_csv(&path, &schema, &["boom", "b"], &sample(), &run).unwrap();
        append_csv(&path, &schema, &["rdmp", "b"], &sample(), &run).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with(
            "unix_time,protocol,mix,runtime_ms,operations,throughput_ops_sec,read_operations,read_ok,read_failed,\
             read_avg_us,read_min_us,read_max_us,read_p50_us,read_p99_9_us,update_operations"
        ));
        assert!(lines[0].contains(",read_modify_write_p99_9_us"));
        let mut rdr = csv::Reader::from_path(&path).unwrap();
        let headers = rdr.headers().unwrap().clone();
        let rows: Vec<csv::StringRecord> = rdr.records().map(|r| r.unwrap()).collect();
        let col = |r: &csv::StringRecord, name: &str| r[headers.iter().position(|h| h == name).unwrap()].to_string();
        assert_eq!(col(&rows[1], "protocol"), "rdmp");
        assert_eq!(col(&rows[0], "throughput_ops_sec"), "55.500");
        assert_eq!(col(&rows[0], "read_operations"), "100");
        assert_eq!(col(&rows[0], "read_ok"), "100");
        assert_eq!(col(&rows[0], "read_failed"), "1");
        assert_eq!(col(&rows[0], "read_avg_us"), "50.504");
        assert_eq!(col(&rows[0], "update_min_us"), "249.984");
        assert_eq!(col(&rows[0], "update_p50_us"), "250.111");
        assert_eq!(col(&rows[0], "scan_operations"), "");

        // A different schema must not be appended to this file.
        let other = CsvSchema::new(&["protocol"]);
        let e = append_csv(&path, &other, &["x"], &sample(), &run).unwrap_err().to_string();
        assert!(e.contains("different columns") && e.contains("column 3"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);
        assert!(schema.row(&["only-one"], &sample(), &run).is_err());
    }

    #[test]
    fn json_has_stats_and_spectrum() {
        let run = RunInfo { runtime: Duration::from_secs(1), operations: 111 };
        let j = json_report(&sample(), &run, &[50.0, 99.0], true);
        assert_eq!(j["runtime_ms"], 1000);
        assert_eq!(j["throughput_ops_sec"], 111.0);
        let read = &j["series"][0];
        assert_eq!(read["name"], "READ");
        assert_eq!(read["operations"], 100);
        assert_eq!(read["returns"]["NOT_FOUND"], 1);
        assert_eq!(read["percentiles_us"][1]["percentile"], 99.0);
        let spectrum = read["spectrum"].as_array().unwrap();
        assert!(spectrum.len() > 10);
        let last = spectrum.last().unwrap();
        assert_eq!(last["percentile"], 100.0);
        assert_eq!(last["count"], 100);
        assert!((last["latency_us"].as_f64().unwrap() - 100.0).abs() < 0.1);
        assert!(json_report(&sample(), &run, &[], false)["series"][0].get("spectrum").is_none());
    }
}
