//! HdrHistogram interval logs (`.hlog`): write one per client process, read them
//! back, merge several into one report.
//!
//! The format is HdrHistogram's interval log (log format 1.3), written with the
//! `hdrhistogram` crate's `IntervalLogWriter` and its `V2DeflateSerializer`, so
//! HdrHistogram's own Java tools read it:
//!
//! ```text
//! java -cp /usr/share/java/hdrhistogram.jar org.HdrHistogram.HistogramLogProcessor -i run.hlog
//! java -cp /usr/share/java/hdrhistogram.jar org.HdrHistogram.HistogramLogProcessor \
//!      -i run.hlog -tag READ -outputValueUnitRatio 1000
//! ```
//!
//! Each interval has one untagged line first: every operation's latency together (all
//! series except `Intended-*`, `READ-MODIFY-WRITE`, which would count its read and
//! update twice, and `CLEANUP`). That is what the Java tools read when given no
//! `-tag`, as for a log from HdrHistogram's own `HistogramLogWriter`. Then one line
//! per measurement name (the tag: `READ`, `UPDATE`, `Intended-READ`...); readers here
//! skip the untagged line of a log that has tagged ones (it is their sum). Values are
//! latencies in **nanoseconds**
//! (HistogramLogProcessor's default `-outputValueUnitRatio 1000000` shows them in
//! milliseconds; use 1000 for microseconds). Timestamps are seconds since the
//! `BaseTime` header, which is the run's start.
//!
//! At the end, [`HlogWriter::write_summary`] adds comment lines (ignored by the Java
//! tools) that carry what histograms cannot: the run time, the operation count and
//! the `Return=` status counts per tag. With them, [`merge_hlogs`] turns the logs of
//! several client processes into one report with the same numbers a single process
//! would print.
//!
//! A runner with several client threads: each thread records into its own
//! [`Measurements`]; once per reporting interval it sends `m.take()` over a channel
//! to one logger thread, which merges the snapshots of that interval, writes them
//! with [`HlogWriter::write_interval`] and merges them into the run totals; at the
//! end it writes [`HlogWriter::write_summary`] with the totals and the run time.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use boomkv::bench::{hlog, measure::{Measurements, MeasurementInterval, Status}, report::RunInfo};
//! let start = SystemTime::now();
//! let mut log = hlog::HlogWriter::new(Vec::new(), start)?;
//! let mut interval = Measurements::new(MeasurementInterval::Op);
//! interval.record("READ", Duration::from_micros(8), Status::Ok);
//! log.write_interval(&interval, start, Duration::from_secs(1))?;
//! log.write_summary(&interval, &RunInfo { runtime: Duration::from_secs(1), operations: 1 })?;
//! let bytes = log.finish()?;
//! let file = hlog::HlogFile::parse(&bytes, "in memory")?;
//! let merged = hlog::merge_hlogs(&[file])?;
//! assert_eq!(merged.measurements.get("READ").unwrap().status_count(Status::Ok), 1);
//! # Ok::<(), boomkv::Error>(())
//! ```

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag};
use hdrhistogram::serialization::{Deserializer, Serializer as _, V2DeflateSerializer};
use hdrhistogram::Histogram;

use super::measure::{MeasurementInterval, Measurements, Status, INTENDED_PREFIX};
use super::report::RunInfo;
use crate::error::{Error, Result};

/// The log format version the header announces (what HdrHistogram 2.1.x writes).
pub const LOG_FORMAT_VERSION: &str = "1.3";

/// Tag given to untagged intervals when reading logs written by other tools.
pub const UNTAGGED: &str = "UNTAGGED";

const RUN_COMMENT: &str = "boomkv-run:";
const STATUS_COMMENT: &str = "boomkv-status:";

/// Is series `name` part of the untagged all-operations total?
pub fn counts_in_total(name: &str) -> bool {
    !name.starts_with(INTENDED_PREFIX) && name != "READ-MODIFY-WRITE" && name != "CLEANUP"
}

/// Writes an interval log.
pub struct HlogWriter<W: Write> {
    out: W,
    serializer: V2DeflateSerializer,
    base: SystemTime,
    /// What each interval's maximum is divided by on its line.
    max_divisor: f64,
    /// The last interval's encoding (kept for its allocation).
    encoded: Vec<u8>,
}

impl HlogWriter<BufWriter<File>> {
    /// Creates (truncates) `path` and writes the header; `start` is the run's start.
    pub fn create(path: &Path, start: SystemTime) -> Result<HlogWriter<BufWriter<File>>> {
        let file = File::create(path).map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        HlogWriter::new(BufWriter::new(file), start)
    }
}

fn io_err(e: std::io::Error) -> Error {
    Error::io("writing HdrHistogram log", e)
}

impl<W: Write> HlogWriter<W> {
    /// Writes the header to `out`: a comment, the format version, `StartTime` and
    /// `BaseTime` (both `start`) and the column legend, as Java's
    /// `HistogramLogWriter` does.
    pub fn new(out: W, start: SystemTime) -> Result<HlogWriter<W>> {
        HlogWriter::with_comments(
            out,
            start,
            &[format!("[Logged with boomkv {}; latencies in nanoseconds]", env!("CARGO_PKG_VERSION"))],
            1.0,
        )
    }

    /// [`HlogWriter::new`] with `comments` (each `[...]`) for the first lines, and
    /// each interval's maximum written divided by `max_divisor` (Java's
    /// `HistogramLogWriter` divides by 10^6 unless told otherwise; the histograms
    /// themselves are whole either way).
    fn with_comments(mut out: W, start: SystemTime, comments: &[String], max_divisor: f64) -> Result<HlogWriter<W>> {
        let mut serializer = V2DeflateSerializer::new();
        let mut builder = IntervalLogWriterBuilder::new();
        for c in comments {
            builder.add_comment(c);
        }
        builder
            .add_comment(&format!("[Histogram log format version {LOG_FORMAT_VERSION}]"))
            .with_start_time(start)
            .with_base_time(start)
            .with_max_value_divisor(max_divisor)
            .begin_log_with(&mut out, &mut serializer)
            .map_err(io_err)?;
        out.write_all(b"\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n")
            .map_err(io_err)?;
        Ok(HlogWriter { out, serializer, base: start, max_divisor, encoded: Vec::new() })
    }

    /// Writes one interval histogram (nanoseconds) tagged `tag`.
    pub fn write_histogram(
        &mut self,
        tag: &str,
        histogram: &Histogram<u64>,
        interval_start: SystemTime,
        duration: Duration,
    ) -> Result<()> {
        let tag = Tag::new(tag).ok_or_else(|| {
            Error::invalid(format!("`{tag}` cannot be an HdrHistogram log tag (no commas, spaces or line breaks)"))
        })?;
        self.write_line(Some(tag), histogram, interval_start, duration)
    }

    fn write_line(
        &mut self,
        tag: Option<Tag<'_>>,
        histogram: &Histogram<u64>,
        interval_start: SystemTime,
        duration: Duration,
    ) -> Result<()> {
        let offset = interval_start.duration_since(self.base).unwrap_or(Duration::ZERO);
        // The line as the crate's (and Java's) writer makes it: `[Tag=T,]start,length,
        // max,histogram`, seconds with three decimals, the histogram in the crate's V2
        // compressed encoding, base64. Written here, not by the crate's line writer,
        // which cannot divide the maximum without a header comment on every line.
        self.encoded.clear();
        self.serializer
            .serialize(histogram, &mut self.encoded)
            .map_err(|e| Error::invalid(format!("encoding an HdrHistogram interval: {e:?}")))?;
        let tag = tag.map(|t| format!("Tag={},", t.as_str())).unwrap_or_default();
        writeln!(
            self.out,
            "{tag}{:.3},{:.3},{:.3},{}",
            offset.as_secs_f64(),
            duration.as_secs_f64(),
            histogram.max() as f64 / self.max_divisor,
            base64::engine::general_purpose::STANDARD.encode(&self.encoded)
        )
        .map_err(io_err)
    }

    /// Writes every non-empty series of `interval` (one line per series).
    pub fn write_interval(
        &mut self,
        interval: &Measurements,
        interval_start: SystemTime,
        duration: Duration,
    ) -> Result<()> {
        let mut total = super::measure::new_histogram();
        for (name, series) in interval.series() {
            if counts_in_total(name) {
                total.add(series.histogram()).map_err(|e| Error::invalid(format!("summing histograms: {e:?}")))?;
            }
        }
        if !total.is_empty() {
            self.write_line(None, &total, interval_start, duration)?;
        }
        for (name, series) in interval.series() {
            if !series.histogram().is_empty() {
                self.write_histogram(name, series.histogram(), interval_start, duration)?;
            }
        }
        // On disk as the run goes (one write per interval): a run that is stopped, or
        // killed, leaves the intervals it measured, and a reader can follow it.
        self.flush()
    }

    fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(io_err)
    }

    /// Writes the run summary as comment lines: run time, operation count and the
    /// status counts of every series of `totals`.
    pub fn write_summary(&mut self, totals: &Measurements, run: &RunInfo) -> Result<()> {
        writeln!(self.out, "#{RUN_COMMENT} runtime_ms={} operations={}", run.runtime_ms(), run.operations)
            .map_err(io_err)?;
        for (name, series) in totals.series() {
            let counts: Vec<String> = series.statuses().map(|(s, n)| format!("{s}={n}")).collect();
            if !counts.is_empty() {
                writeln!(self.out, "#{STATUS_COMMENT} tag={name} {}", counts.join(" ")).map_err(io_err)?;
            }
        }
        Ok(())
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(mut self) -> Result<W> {
        self.flush()?;
        Ok(self.out)
    }
}

/// YCSB's own HdrHistogram logs (`hdrhistogram.fileoutput=true`): one file per
/// measurement name, `<hdrhistogram.output.path><NAME>.hdr` (`READ.hdr`,
/// `UPDATE.hdr`, `READ-FAILED.hdr`, `Intended-READ.hdr`, `CLEANUP.hdr`...), as YCSB's
/// `OneMeasurementHdrHistogram` writes them: untagged intervals of latencies in
/// **microseconds**, each truncated as YCSB records it, with the header
/// `[Logging for: NAME]`. So scripts written for YCSB's files read these.
///
/// Each line's `Interval_Max` is the maximum divided by 10^6, as Java's writer puts it
/// by default (the histogram itself holds whole microseconds).
///
/// A file is made when its measurement first has a latency (YCSB makes it when the
/// measurement is first recorded, which for a status without a latency is sooner);
/// from then on it gets a line every interval, an empty one when the interval had
/// none. Unlike YCSB, whose intervals are its status lines' (or the whole run without
/// `-s`), the intervals are those of the run's interval log (1 s), and every file's
/// `StartTime` and `BaseTime` is the run's start.
pub struct YcsbHdrFiles {
    prefix: String,
    start: SystemTime,
    files: Vec<HdrFile>,
}

/// One measurement's file.
struct HdrFile {
    name: String,
    path: PathBuf,
    log: HlogWriter<BufWriter<File>>,
}

/// What Java's `HistogramLogWriter` divides an interval's maximum by by default.
const JAVA_MAX_DIVISOR: f64 = 1_000_000.0;

impl YcsbHdrFiles {
    /// Files `<prefix><NAME>.hdr`, none made yet; `start` is the run's start.
    pub fn new(prefix: &str, start: SystemTime) -> YcsbHdrFiles {
        YcsbHdrFiles { prefix: prefix.to_string(), start, files: Vec::new() }
    }

    /// The file of measurement `name`.
    pub fn path(prefix: &str, name: &str) -> PathBuf {
        PathBuf::from(format!("{prefix}{name}.hdr"))
    }

    /// The measurement whose file `<prefix><NAME>.hdr` would be `file_name` (a file
    /// name, no directory), if a run can record one so named: `[Intended-]OP[-FAILED]`
    /// or `[Intended-]OP-STATUS` (a failed status) for an operation the runner measures (`READ`, `UPDATE`, `INSERT`, `SCAN`,
    /// `READ-MODIFY-WRITE`, `CLEANUP`). Lets a caller refuse another output that one of
    /// these files would overwrite, before the run.
    pub fn measurement_of(prefix: &str, file_name: &str) -> Option<String> {
        let prefix_name = prefix.rsplit('/').next().unwrap_or(prefix);
        let name = file_name.strip_prefix(prefix_name)?.strip_suffix(".hdr")?;
        let op = name.strip_prefix(INTENDED_PREFIX).unwrap_or(name);
        let ops = crate::workload::OpKind::ALL.map(crate::workload::OpKind::name);
        // A failure's series: `-FAILED`, or `-STATUS` with `reportlatencyforeacherror`.
        let failed = |s: &str| {
            Some(s) == crate::measure::FAILED_SUFFIX.strip_prefix('-')
                || Status::from_name(s).is_some_and(|s| !s.is_ok())
        };
        let measured = ops
            .iter()
            .chain(&["CLEANUP"])
            .any(|o| op == *o || op.strip_prefix(o).and_then(|r| r.strip_prefix('-')).is_some_and(failed));
        measured.then(|| name.to_string())
    }

    /// Writes one interval: a line in the file of every measurement seen so far (a new
    /// file for each one `interval` has first).
    pub fn write_interval(
        &mut self,
        interval: &Measurements,
        interval_start: SystemTime,
        duration: Duration,
    ) -> Result<()> {
        for (name, series) in interval.series() {
            if series.truncated_us().is_empty() || self.files.iter().any(|f| f.name == name) {
                continue;
            }
            // Measurement names are the runner's (an operation, a status, a prefix),
            // never a peer's; still, a name that would leave the prefix's directory is
            // refused rather than followed.
            if name.contains('/') || name.contains('\0') {
                return Err(Error::invalid(format!("`{name}` cannot name an HdrHistogram file")));
            }
            let path = YcsbHdrFiles::path(&self.prefix, name);
            let file = File::create(&path).map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
            let comments = [
                format!("[Logging for: {name}]"),
                format!("[Logged with boomkv {}; latencies in microseconds, as YCSB's]", env!("CARGO_PKG_VERSION")),
            ];
            let log = HlogWriter::with_comments(BufWriter::new(file), self.start, &comments, JAVA_MAX_DIVISOR)
                .map_err(|e| said_of(&path, e))?;
            self.files.push(HdrFile { name: name.to_string(), path, log });
        }
        let empty = super::measure::new_histogram();
        for f in &mut self.files {
            let h = interval.get(&f.name).map_or(&empty, |s| s.truncated_us());
            // On disk as the run goes, as the interval log.
            f.log
                .write_line(None, h, interval_start, duration)
                .and_then(|()| f.log.flush())
                .map_err(|e| said_of(&f.path, e))?;
        }
        Ok(())
    }

    /// Flushes every file.
    pub fn finish(self) -> Result<()> {
        for f in self.files {
            f.log.finish().map_err(|e| said_of(&f.path, e))?;
        }
        Ok(())
    }
}

/// `e`, a failure of the log at `path`, said of that file.
pub(crate) fn said_of(path: &Path, e: Error) -> Error {
    Error::invalid(format!("{}: {e}", path.display()))
}

/// One interval read back from a log.
#[derive(Clone, Debug)]
pub struct HlogInterval {
    /// The tag (measurement name), [`UNTAGGED`] if the line had none.
    pub tag: String,
    /// Start of the interval, seconds since the Unix epoch.
    pub start: Duration,
    /// Length of the interval.
    pub duration: Duration,
    /// The latencies (nanoseconds for boomkv's logs).
    pub histogram: Histogram<u64>,
}

/// A parsed interval log.
#[derive(Clone, Debug)]
pub struct HlogFile {
    /// Where it came from (for messages).
    pub source: String,
    /// `StartTime` header, since the Unix epoch.
    pub start_time: Option<Duration>,
    /// The intervals, in file order.
    pub intervals: Vec<HlogInterval>,
    /// The run summary, if the log has one (logs written by boomkv do).
    pub run: Option<RunInfo>,
    /// Status counts per tag from the summary.
    pub statuses: Vec<(String, Status, u64)>,
    /// Bytes after the last line end, left out: a line whose write was cut short (a
    /// full disk, a crash mid-write).
    pub torn: usize,
}

impl HlogFile {
    /// Reads and parses the log at `path`.
    pub fn read(path: &Path) -> Result<HlogFile> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        HlogFile::parse(&bytes, &path.display().to_string())
    }

    /// Parses a log; `source` names it in errors.
    pub fn parse(bytes: &[u8], source: &str) -> Result<HlogFile> {
        let bad = |why: String| Error::corrupt("HdrHistogram log", format!("{source}: {why}"));
        // Every line a writer finished ends with a line end; what follows the last one
        // was cut short, and is left out (said by `merge_hlogs`), not the whole log.
        let whole = super::report::whole_lines_len(bytes);
        let torn = if bytes[whole..].iter().all(u8::is_ascii_whitespace) { 0 } else { bytes.len() - whole };
        let bytes = if torn > 0 { &bytes[..whole] } else { bytes };
        let mut start_time = None;
        let mut base_time = None;
        let mut raw = Vec::new();
        for entry in IntervalLogIterator::new(bytes) {
            let entry = entry.map_err(|e| {
                let hdrhistogram::serialization::interval_log::LogIteratorError::ParseError { offset } = e;
                let line = 1 + bytes[..offset.min(bytes.len())].iter().filter(|&&b| b == b'\n').count();
                bad(format!("line {line}: not a line of an HdrHistogram interval log"))
            })?;
            match entry {
                LogEntry::StartTime(t) => start_time = Some(t),
                LogEntry::BaseTime(t) => base_time = Some(t),
                LogEntry::Interval(h) => {
                    let decoded = base64::engine::general_purpose::STANDARD
                        .decode(h.encoded_histogram())
                        .map_err(|e| bad(format!("interval at {:?}: bad base64: {e}", h.start_timestamp())))?;
                    let histogram: Histogram<u64> = Deserializer::new()
                        .deserialize(&mut decoded.as_slice())
                        .map_err(|e| bad(format!("interval at {:?}: bad histogram: {e:?}", h.start_timestamp())))?;
                    let tag = h.tag().map(|t| t.as_str().to_string()).unwrap_or_else(|| UNTAGGED.to_string());
                    raw.push((tag, h.start_timestamp(), h.duration(), histogram));
                }
            }
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            // An empty report merged from nothing would look like a run that did nothing.
            return Err(bad("an empty file: no interval log here".into()));
        }
        // Interval timestamps: relative to BaseTime; else to StartTime when clearly
        // not absolute (Java HistogramLogReader's one-year heuristic); else absolute.
        const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
        let offset = match (base_time, start_time) {
            (Some(b), _) => b,
            (None, Some(s)) if raw.first().is_some_and(|(_, ts, _, _)| ts.saturating_add(YEAR) < s) => s,
            _ => Duration::ZERO,
        };
        let intervals = raw
            .into_iter()
            .map(|(tag, ts, duration, histogram)| HlogInterval {
                tag,
                start: offset.saturating_add(ts),
                duration,
                histogram,
            })
            .collect();

        let mut run = None;
        let mut statuses = Vec::new();
        let text = String::from_utf8_lossy(bytes);
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix('#').and_then(|l| l.strip_prefix(RUN_COMMENT)) {
                let field = |name: &str| -> Result<u64> {
                    rest.split_whitespace()
                        .find_map(|kv| kv.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
                        .and_then(|v| v.parse().ok())
                        .ok_or_else(|| bad(format!("summary line without {name}: `{line}`")))
                };
                run = Some(RunInfo {
                    runtime: Duration::from_millis(field("runtime_ms")?),
                    operations: field("operations")?,
                });
            } else if let Some(rest) = line.strip_prefix('#').and_then(|l| l.strip_prefix(STATUS_COMMENT)) {
                let mut parts = rest.split_whitespace();
                let tag = parts
                    .next()
                    .and_then(|t| t.strip_prefix("tag="))
                    .ok_or_else(|| bad(format!("status line without tag: `{line}`")))?;
                for kv in parts {
                    let (name, n) = kv.split_once('=').ok_or_else(|| bad(format!("bad status count `{kv}`")))?;
                    let status = Status::from_name(name).ok_or_else(|| bad(format!("unknown status `{name}`")))?;
                    let n: u64 = n.parse().map_err(|_| bad(format!("bad status count `{kv}`")))?;
                    statuses.push((tag.to_string(), status, n));
                }
            }
        }
        Ok(HlogFile { source: source.to_string(), start_time, intervals, run, statuses, torn })
    }

    /// All intervals merged per tag, plus the summary's status counts.
    pub fn totals(&self) -> Result<Measurements> {
        let mut m = Measurements::new(MeasurementInterval::Op);
        let tagged = self.intervals.iter().any(|i| i.tag != UNTAGGED);
        for i in self.intervals.iter().filter(|i| !(tagged && i.tag == UNTAGGED)) {
            m.add_histogram(&i.tag, &i.histogram)
                .map_err(|e| Error::corrupt("HdrHistogram log", format!("{}: tag {}: {e}", self.source, i.tag)))?;
        }
        for (tag, status, n) in &self.statuses {
            m.add_status_count(tag, *status, *n);
        }
        Ok(m)
    }

    /// The run's wall-clock span, since the Unix epoch: from `StartTime` (else the
    /// first interval) for the summary's run time (else to the end of the last
    /// interval).
    pub fn span(&self) -> Option<(Duration, Duration)> {
        let first = self.intervals.iter().map(|i| i.start).min();
        let start = self.start_time.or(first)?;
        let end = match &self.run {
            Some(run) => start.saturating_add(run.runtime),
            None => self.intervals.iter().map(|i| i.start.saturating_add(i.duration)).max().unwrap_or(start),
        };
        Some((start, end))
    }
}

/// Several client processes' logs merged into one run.
#[derive(Clone, Debug)]
pub struct MergedRun {
    /// Histograms merged per tag, status counts summed.
    pub measurements: Measurements,
    /// Run time from the earliest start to the latest end; operations summed.
    pub run: RunInfo,
    /// Number of logs merged.
    pub logs: usize,
    /// What a reader of the merged figures should know, one sentence each: logs
    /// without boomkv's end line, logs whose runs do not overlap in time.
    pub warnings: Vec<String>,
}

/// Merges parsed logs: histograms per tag across all intervals of all logs, status
/// counts and operation counts summed, run time = union of the runs' spans.
///
/// For a log without a boomkv summary, its operations are counted as the
/// histogram counts of its operations' tags (failed operations included; not
/// `Intended-*` or `CLEANUP`), less one per `READ-MODIFY-WRITE`, whose READ and
/// UPDATE are in their tags: the count the run's summary would have given.
pub fn merge_hlogs(files: &[HlogFile]) -> Result<MergedRun> {
    if files.is_empty() {
        return Err(Error::invalid("no HdrHistogram logs to merge"));
    }
    let mut measurements = Measurements::new(MeasurementInterval::Op);
    let mut operations = 0;
    let mut span: Option<(Duration, Duration)> = None;
    let mut warnings = Vec::new();
    let mut spans = Vec::new();
    for f in files {
        if f.torn > 0 {
            warnings.push(format!(
                "{}: its last {} bytes are a line cut short (a write that did not finish, as on a full disk): \
                 left out",
                f.source, f.torn
            ));
        }
        if f.run.is_none() {
            warnings.push(format!(
                "{} has no boomkv end line (a run that was killed, or a log another tool wrote): its operations \
                 are its histograms' counts, and its run time ends with its last interval",
                f.source
            ));
        }
        let totals = f.totals()?;
        measurements.merge(&totals)?;
        let ops: u64 = match &f.run {
            Some(run) => run.operations,
            None => {
                let count = |keep: &dyn Fn(&str) -> bool| {
                    totals
                        .series()
                        .iter()
                        .filter(|(n, _)| keep(n))
                        .map(|(_, s)| s.histogram().len())
                        .fold(0u64, u64::saturating_add)
                };
                // A read-modify-write is one operation recorded as a READ and an
                // UPDATE too; CLEANUP is no operation.
                count(&|n: &str| counts_in_total(n)).saturating_sub(count(&|n: &str| n == "READ-MODIFY-WRITE"))
            }
        };
        operations = ops.saturating_add(operations);
        if let Some((s, e)) = f.span() {
            spans.push((s, e, f.source.as_str()));
            span = Some(match span {
                None => (s, e),
                Some((s0, e0)) => (s0.min(s), e0.max(e)),
            });
        }
    }
    let runtime = span.map(|(s, e)| e.saturating_sub(s)).unwrap_or(Duration::ZERO);
    if let Some((gap, before, after)) = largest_gap(&mut spans) {
        warnings.push(format!(
            "the runs do not all overlap in time: {:.3} s passed between the end of {before} and the start of \
             {after}; the run time spans the gap, so the throughput is below what the clients did together",
            gap.as_secs_f64()
        ));
    }
    Ok(MergedRun { measurements, run: RunInfo { runtime, operations }, logs: files.len(), warnings })
}

/// The longest time in which none of the runs `spans` (start, end, source) ran, if
/// any: the gap, the source that ended before it and the one that started after it.
fn largest_gap<'a>(spans: &mut [(Duration, Duration, &'a str)]) -> Option<(Duration, &'a str, &'a str)> {
    spans.sort_by_key(|s| s.0);
    let (mut end, mut last) = (spans.first()?.1, spans.first()?.2);
    let mut best: Option<(Duration, &str, &str)> = None;
    for &(s, e, src) in &spans[1..] {
        if s > end && best.is_none_or(|b| s - end > b.0) {
            best = Some((s - end, last, src));
        }
        if e >= end {
            (end, last) = (e, src);
        }
    }
    best
}

/// Reads and merges the logs at `paths`.
pub fn merge_hlog_files(paths: &[PathBuf]) -> Result<MergedRun> {
    let files = paths.iter().map(|p| HlogFile::read(p)).collect::<Result<Vec<_>>>()?;
    merge_hlogs(&files)
}

/// Seconds since the Unix epoch of `t` (0 before the epoch).
pub fn epoch(t: SystemTime) -> Duration {
    t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::ycsb_text;

    #[test]
    fn the_measurement_a_file_name_would_hold() {
        let m = |prefix: &str, name: &str| YcsbHdrFiles::measurement_of(prefix, name);
        assert_eq!(m("out/h-", "h-READ.hdr").as_deref(), Some("READ"));
        assert_eq!(m("", "READ-MODIFY-WRITE.hdr").as_deref(), Some("READ-MODIFY-WRITE"));
        assert_eq!(m("h-", "h-Intended-UPDATE-NOT_FOUND.hdr").as_deref(), Some("Intended-UPDATE-NOT_FOUND"));
        assert_eq!(m("h-", "h-SCAN-FAILED.hdr").as_deref(), Some("SCAN-FAILED"));
        assert_eq!(m("h-", "h-INSERT-SERVICE_UNAVAILABLE.hdr").as_deref(), Some("INSERT-SERVICE_UNAVAILABLE"));
        assert_eq!(m("h-", "h-CLEANUP.hdr").as_deref(), Some("CLEANUP"));
        for (prefix, name) in [
            ("h-", "READ.hdr"),
            ("h-", "h-READ.hlog"),
            ("h-", "h-notes.hdr"),
            ("h-", "h-READ-.hdr"),
            ("h-", "h-READ-failed.hdr"),
            ("h-", "h-READ-BACKUP.hdr"),
            ("h-", "h-READ-OK.hdr"),
            ("h-", "h-Intended-.hdr"),
            ("out/", "READS.hdr"),
        ] {
            assert_eq!(m(prefix, name), None, "{prefix} {name}");
        }
    }

    #[test]
    fn ycsb_files_are_one_per_measurement_in_microseconds_from_its_first_interval_on() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = format!("{}/r-", dir.path().display());
        let start = SystemTime::now();
        let mut files = YcsbHdrFiles::new(&prefix, start);
        let mut first = Measurements::new(MeasurementInterval::Op);
        first.record("READ", Duration::from_nanos(5_999), Status::Ok);
        first.record("READ", Duration::from_micros(1_700), Status::Ok);
        files.write_interval(&first, start, Duration::from_secs(1)).unwrap();
        let mut second = Measurements::new(MeasurementInterval::Op);
        second.record("UPDATE", Duration::from_micros(9), Status::Ok);
        files.write_interval(&second, start + Duration::from_secs(1), Duration::from_secs(1)).unwrap();
        files.finish().unwrap();

        let read = std::fs::read_to_string(YcsbHdrFiles::path(&prefix, "READ")).unwrap();
        assert!(read.starts_with("#[Logging for: READ]\n"), "{read}");
        // Java's writer puts the maximum in units of 10^6 (here seconds): 1700 us.
        let lines: Vec<&str> = read.lines().filter(|l| !l.starts_with('#') && !l.starts_with('"')).collect();
        assert_eq!(lines.len(), 2, "{read}");
        assert!(lines[0].starts_with("0.000,1.000,0.002,"), "{read}");
        assert!(lines[1].starts_with("1.000,1.000,0.000,"), "{read}");
        let f = HlogFile::read(&YcsbHdrFiles::path(&prefix, "READ")).unwrap();
        assert!(f.intervals.iter().all(|i| i.tag == UNTAGGED));
        // Whole microseconds, truncated as YCSB's: 5999 ns is 5 us.
        assert_eq!(f.intervals[0].histogram.len(), 2);
        assert_eq!(f.intervals[0].histogram.min(), 5);
        assert_eq!(f.intervals[0].histogram.max(), f.intervals[0].histogram.highest_equivalent(1_700));
        assert!(f.intervals[1].histogram.is_empty());
        // UPDATE's file begins with its first latency, in the second interval.
        let update = HlogFile::read(&YcsbHdrFiles::path(&prefix, "UPDATE")).unwrap();
        assert_eq!(update.intervals.len(), 1);
        assert_eq!(update.intervals[0].histogram.max(), 9);
    }

    #[test]
    fn a_ycsb_file_that_cannot_be_made_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = format!("{}/r-", dir.path().display());
        // A directory where UPDATE's file would go (which stops root too).
        std::fs::create_dir(YcsbHdrFiles::path(&prefix, "UPDATE")).unwrap();
        let start = SystemTime::now();
        let mut files = YcsbHdrFiles::new(&prefix, start);
        let mut m = Measurements::new(MeasurementInterval::Op);
        m.record("UPDATE", Duration::from_micros(9), Status::Ok);
        let e = files.write_interval(&m, start, Duration::from_secs(1)).unwrap_err().to_string();
        assert!(e.contains("r-UPDATE.hdr"), "{e}");
    }

    #[test]
    fn absurd_times_in_an_edited_log_are_no_panic() {
        // "overflow when adding durations" took down `ycsb --merge`.
        let text =
            "#[StartTime: 18446744073709551615.000 (seconds since epoch)]\n#boomkv-run: runtime_ms=1000 operations=1\n";
        let f = HlogFile::parse(text.as_bytes(), "edited.hlog").unwrap();
        let (start, end) = f.span().unwrap();
        assert!(end >= start);
        let m = merge_hlogs(&[f]).unwrap();
        assert_eq!(m.run.operations, 1);
    }

    fn record_run(m: &mut Measurements, seed: u64, n: u64) {
        for i in 0..n {
            let us = 1 + (i * 7919 + seed * 104_729) % 500;
            let status = if i % 50 == 0 { Status::NotFound } else { Status::Ok };
            m.record("READ", Duration::from_micros(us), status);
            if i % 10 == 0 {
                m.record("UPDATE", Duration::from_micros(us * 3), Status::Ok);
            }
        }
    }

    /// Writes a log of `intervals` one-second intervals; returns its bytes and totals.
    fn write_log(start: SystemTime, seed: u64, intervals: u64) -> (Vec<u8>, Measurements) {
        let mut log = HlogWriter::new(Vec::new(), start).unwrap();
        let mut totals = Measurements::new(MeasurementInterval::Both);
        let mut current = Measurements::new(MeasurementInterval::Both);
        for k in 0..intervals {
            record_run(&mut current, seed + k, 1000);
            let interval = current.take();
            log.write_interval(&interval, start + Duration::from_secs(k), Duration::from_secs(1)).unwrap();
            totals.merge(&interval).unwrap();
        }
        let run = RunInfo { runtime: Duration::from_millis(intervals * 1000), operations: intervals * 1100 };
        log.write_summary(&totals, &run).unwrap();
        (log.finish().unwrap(), totals)
    }

    #[test]
    fn round_trip_through_our_reader() {
        let start = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let (bytes, totals) = write_log(start, 1, 3);
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.starts_with("#[Logged with boomkv"), "{text}");
        assert!(
            text.contains("#[Histogram log format version 1.3]\n#[StartTime: 1700000000.000 (seconds since epoch)]\n")
        );
        assert!(text
            .contains("\n\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n"));
        assert!(text.contains("\nTag=READ,1.000,1.000,"));
        assert!(text.contains("\nTag=Intended-READ,2.000,1.000,"));

        let file = HlogFile::parse(&bytes, "test").unwrap();
        assert_eq!(file.start_time, Some(epoch(start)));
        // The untagged total, READ, READ-FAILED, UPDATE, Intended-READ, Intended-READ-FAILED,
        // Intended-UPDATE per interval.
        assert_eq!(file.intervals.len(), 3 * 7);
        assert_eq!(file.intervals[7].start, epoch(start) + Duration::from_secs(1));
        assert_eq!(file.intervals[7].tag, UNTAGGED);
        assert_eq!(file.run, Some(RunInfo { runtime: Duration::from_secs(3), operations: 3300 }));
        let back = file.totals().unwrap();
        for (name, series) in totals.series() {
            let b = back.get(name).unwrap();
            assert_eq!(b.histogram(), series.histogram(), "{name}");
            for s in Status::ALL {
                assert_eq!(b.status_count(s), series.status_count(s), "{name} {s}");
            }
        }
        assert_eq!(file.span(), Some((epoch(start), epoch(start) + Duration::from_secs(3))));
    }

    #[test]
    fn merging_processes_equals_one_process() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let (a, ta) = write_log(t0, 10, 2);
        let (b, tb) = write_log(t0 + Duration::from_millis(500), 20, 3);
        let merged = merge_hlogs(&[HlogFile::parse(&a, "a").unwrap(), HlogFile::parse(&b, "b").unwrap()]).unwrap();
        assert_eq!(merged.logs, 2);
        assert_eq!(merged.run.operations, 2200 + 3300);
        assert_eq!(merged.run.runtime, Duration::from_millis(3500));
        let mut one = Measurements::new(MeasurementInterval::Both);
        one.merge(&ta).unwrap();
        one.merge(&tb).unwrap();
        let pct = [50.0, 95.0, 99.0, 99.9];
        assert_eq!(ycsb_text(&merged.measurements, &merged.run, &pct), ycsb_text(&one, &merged.run, &pct));
        assert!(merged.warnings.is_empty(), "{:?}", merged.warnings);
    }

    #[test]
    fn a_merge_says_when_runs_did_not_overlap_or_did_not_end() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        // a: 0-2 s, b: 1-4 s, c: 10-12 s (6 s after the latest end), d: 12.5-14.5 s.
        let (a, _) = write_log(t0, 1, 2);
        let (b, _) = write_log(t0 + Duration::from_secs(1), 2, 3);
        let (c, _) = write_log(t0 + Duration::from_secs(10), 3, 2);
        let (d, _) = write_log(t0 + Duration::from_millis(12_500), 4, 2);
        let logs = [(&c, "c"), (&a, "a"), (&d, "d"), (&b, "b")];
        let files: Vec<HlogFile> = logs.iter().map(|(l, n)| HlogFile::parse(l, n).unwrap()).collect();
        let m = merge_hlogs(&files).unwrap();
        assert_eq!(m.warnings.len(), 1, "{:?}", m.warnings);
        assert!(m.warnings[0].contains("6.000 s passed between the end of b and the start of c"), "{:?}", m.warnings);
        // A killed run's log has no end line: it is merged, and said.
        let text = String::from_utf8(a.clone()).unwrap();
        let cut: String = text.lines().filter(|l| !l.starts_with("#boomkv-")).map(|l| format!("{l}\n")).collect();
        let killed = HlogFile::parse(cut.as_bytes(), "killed.hlog").unwrap();
        assert!(killed.run.is_none());
        let m = merge_hlogs(&[killed, HlogFile::parse(&b, "b").unwrap()]).unwrap();
        assert_eq!(m.run.operations, 2200 + 3300, "its histograms count what its summary said");
        assert_eq!(m.warnings.len(), 1, "{:?}", m.warnings);
        assert!(m.warnings[0].starts_with("killed.hlog has no boomkv end line"), "{:?}", m.warnings);
        // A log whose last line was cut short (a full disk) was refused whole ("line 6:
        // not a line of an HdrHistogram interval log"): the lines before it merge.
        let torn = &cut.as_bytes()[..cut.len() - 7];
        let f = HlogFile::parse(torn, "full.hlog").unwrap();
        assert_eq!(f.intervals.len(), killed_intervals(&cut) - 1);
        let m = merge_hlogs(&[f]).unwrap();
        assert!(m.warnings.iter().any(|w| w.starts_with("full.hlog: its last ")), "{:?}", m.warnings);
    }

    fn killed_intervals(log: &str) -> usize {
        HlogFile::parse(log.as_bytes(), "x").unwrap().intervals.len()
    }

    #[test]
    fn what_is_not_an_interval_log_is_refused_with_its_line() {
        let e = HlogFile::parse(b"", "empty.hlog").unwrap_err().to_string();
        assert!(e.contains("empty.hlog: an empty file: no interval log here"), "{e}");
        // A legend line alone (Java's writer after outputLegend only) is a log of nothing.
        let legend = b"\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n";
        assert!(HlogFile::parse(legend, "legend.hlog").unwrap().intervals.is_empty());
        let e = HlogFile::parse(&[0xff, 0x00, 0x13, b'\n'], "random.bin").unwrap_err().to_string();
        assert!(e.contains("random.bin: line 1: not a line of an HdrHistogram interval log"), "{e}");
        let e = HlogFile::parse(b"#[StartTime: 1 (seconds since epoch)]\nhello\n", "x.hlog").unwrap_err().to_string();
        assert!(e.contains("x.hlog: line 2: not a line"), "{e}");
        // A log of a run that recorded nothing: its header, no intervals, no error.
        let log = HlogWriter::new(Vec::new(), SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)).unwrap();
        let bytes = log.finish().unwrap();
        assert!(HlogFile::parse(&bytes, "none.hlog").unwrap().intervals.is_empty());
    }

    #[test]
    fn a_log_without_its_end_line_counts_operations_as_its_summary_would() {
        // Two READs, one read-modify-write (recorded as a READ, an UPDATE and the
        // whole) and the cleanup: 3 operations.
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut log = HlogWriter::new(Vec::new(), start).unwrap();
        let mut m = Measurements::new(MeasurementInterval::Both);
        for us in [5, 6, 7] {
            m.record_intended("READ", Duration::from_micros(us), Duration::from_micros(us), Status::Ok);
        }
        m.record_intended("UPDATE", Duration::from_micros(9), Duration::from_micros(9), Status::Ok);
        m.measure("READ-MODIFY-WRITE", Duration::from_micros(16), Duration::from_micros(16));
        m.measure("CLEANUP", Duration::from_micros(100), Duration::from_micros(100));
        log.write_interval(&m, start, Duration::from_secs(1)).unwrap();
        let file = HlogFile::parse(&log.finish().unwrap(), "killed").unwrap();
        assert!(file.run.is_none());
        assert_eq!(merge_hlogs(&[file]).unwrap().run.operations, 3);
    }

    #[test]
    fn writer_can_move_to_a_logger_thread() {
        fn assert_send<T: Send>() {}
        assert_send::<HlogWriter<BufWriter<File>>>();
        assert_send::<HlogFile>();
    }

    #[test]
    fn each_interval_has_an_untagged_total_that_readers_skip() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut log = HlogWriter::new(Vec::new(), start).unwrap();
        let mut m = Measurements::new(MeasurementInterval::Both);
        m.record("READ", Duration::from_micros(5), Status::Ok);
        m.record("UPDATE", Duration::from_micros(9), Status::Ok);
        m.measure("READ-MODIFY-WRITE", Duration::from_micros(14), Duration::from_micros(14));
        m.measure("CLEANUP", Duration::from_micros(100), Duration::from_micros(100));
        log.write_interval(&m, start, Duration::from_secs(1)).unwrap();
        log.write_summary(&m, &RunInfo { runtime: Duration::from_secs(1), operations: 2 }).unwrap();
        let bytes = log.finish().unwrap();
        let file = HlogFile::parse(&bytes, "mem").unwrap();
        let untagged: Vec<&HlogInterval> = file.intervals.iter().filter(|i| i.tag == UNTAGGED).collect();
        assert_eq!(untagged.len(), 1);
        // READ + UPDATE only: not the intended copies, the RMW pair or CLEANUP.
        assert_eq!(untagged[0].histogram.len(), 2);
        let text = String::from_utf8_lossy(&bytes);
        let first_interval = text.lines().find(|l| !l.starts_with('#') && !l.starts_with('"')).unwrap();
        assert!(!first_interval.starts_with("Tag="), "{first_interval}");
        let totals = file.totals().unwrap();
        assert!(totals.get(UNTAGGED).is_none());
        assert_eq!(totals.get("READ").unwrap().histogram().len(), 1);
    }

    #[test]
    fn files_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client.hlog");
        let start = SystemTime::now();
        let mut log = HlogWriter::create(&path, start).unwrap();
        let mut m = Measurements::new(MeasurementInterval::Op);
        record_run(&mut m, 3, 100);
        log.write_interval(&m, start, Duration::from_millis(250)).unwrap();
        assert!(log.write_histogram("BAD TAG", m.get("READ").unwrap().histogram(), start, Duration::ZERO).is_err());
        log.finish().unwrap();
        let merged = merge_hlog_files(std::slice::from_ref(&path)).unwrap();
        // No summary: operations from histogram counts (READ, READ-FAILED, UPDATE).
        assert_eq!(merged.run.operations, 110);
        assert_eq!(merged.run.runtime, Duration::from_millis(250));

        std::fs::write(&path, "Tag=READ,0.0,1.0,5.0,notbase64!!\n").unwrap();
        let e = HlogFile::read(&path).unwrap_err().to_string();
        assert!(e.contains("client.hlog") && e.contains("bad base64"), "{e}");
        assert!(merge_hlogs(&[]).is_err());
        assert!(merge_hlog_files(&[dir.path().join("missing.hlog")]).is_err());
    }
}
