//! Latency recording: one HdrHistogram per measurement name, plus return-status
//! counts, with YCSB's naming rules, and the measurement settings a workload names
//! (`measurement.interval`, `hdrhistogram.percentiles`). Below both the workload and
//! the benchmarks, which share these types; the server's sampled step timings use its
//! histograms too.
//!
//! May import: `error`.
//!
//! Each client thread owns a [`Measurements`] (recording is a plain histogram
//! increment, no locks); at the end, or at every reporting interval, the runner
//! [`merge`](Measurements::merge)s them (and several processes merge through
//! `.hlog` files, see `bench::hlog`).
//!
//! Histograms hold **nanoseconds** with 3 significant digits and resize
//! automatically (any latency from 1 ns to hours); JSON and CSV report those. Each
//! series also keeps YCSB's own histogram: each latency truncated to whole
//! microseconds (`(end - start) / 1000` in YCSB's `DBWrapper`), which is what the YCSB
//! text report prints, so its average, minimum, maximum and percentiles are YCSB's
//! (rounding instead would add +1 us to half the operations at this scale).
//!
//! Naming follows YCSB's `DBWrapper` and `Measurements`:
//! - a latency is recorded under the op name (`READ`, `UPDATE`, `INSERT`, `SCAN`,
//!   `READ-MODIFY-WRITE`, or any other name) when its status is OK, else under
//!   `<op>-FAILED` (or `<op>-<STATUS>` with `reportlatencyforeacherror=true`);
//! - the status is counted under the op name either way (`[READ], Return=NOT_FOUND, 3`);
//! - with `measurement.interval=both` the intended latency (from when the operation
//!   should have started under a target throughput, which corrects coordinated
//!   omission) goes to `Intended-<name>`; with `intended` it replaces the measured one.
//!
//! ```
//! use std::time::Duration;
//! use boomkv::bench::measure::{Measurements, MeasurementInterval, Status};
//! let mut m = Measurements::new(MeasurementInterval::Both);
//! m.record_intended("READ", Duration::from_micros(8), Duration::from_micros(30), Status::Ok);
//! m.record("READ", Duration::from_micros(5), Status::NotFound);
//! assert_eq!(m.get("READ").unwrap().histogram().len(), 1);
//! assert_eq!(m.get("READ-FAILED").unwrap().histogram().len(), 1);
//! assert_eq!(m.get("Intended-READ").unwrap().histogram().len(), 1);
//! assert_eq!(m.get("READ").unwrap().status_count(Status::NotFound), 1);
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::error::{Error, Result};

/// Outcome of one operation, with YCSB's `site.ycsb.Status` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Status {
    /// `OK`
    Ok,
    /// `BATCHED_OK`
    BatchedOk,
    /// `NOT_FOUND`
    NotFound,
    /// `ERROR`
    Error,
    /// `NOT_IMPLEMENTED`
    NotImplemented,
    /// `UNEXPECTED_STATE`
    UnexpectedState,
    /// `BAD_REQUEST`
    BadRequest,
    /// `FORBIDDEN`
    Forbidden,
    /// `SERVICE_UNAVAILABLE`
    ServiceUnavailable,
}

impl Status {
    /// Every status, in report order.
    pub const ALL: [Status; 9] = [
        Status::Ok,
        Status::BatchedOk,
        Status::NotFound,
        Status::Error,
        Status::NotImplemented,
        Status::UnexpectedState,
        Status::BadRequest,
        Status::Forbidden,
        Status::ServiceUnavailable,
    ];

    /// YCSB's name (`OK`, `NOT_FOUND`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::BatchedOk => "BATCHED_OK",
            Status::NotFound => "NOT_FOUND",
            Status::Error => "ERROR",
            Status::NotImplemented => "NOT_IMPLEMENTED",
            Status::UnexpectedState => "UNEXPECTED_STATE",
            Status::BadRequest => "BAD_REQUEST",
            Status::Forbidden => "FORBIDDEN",
            Status::ServiceUnavailable => "SERVICE_UNAVAILABLE",
        }
    }

    /// The status with YCSB name `name`.
    pub fn from_name(name: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.name() == name)
    }

    /// OK or BATCHED_OK (YCSB `Status.isOk()`).
    pub fn is_ok(self) -> bool {
        matches!(self, Status::Ok | Status::BatchedOk)
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// YCSB's `measurement.interval`: which latency is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MeasurementInterval {
    /// The measured service time only (YCSB default).
    #[default]
    Op,
    /// The intended latency only, under the op's own name.
    Intended,
    /// Both: service time under the name, intended latency under `Intended-<name>`.
    Both,
}

impl FromStr for MeasurementInterval {
    type Err = Error;
    fn from_str(s: &str) -> Result<MeasurementInterval> {
        match s.trim() {
            "op" => Ok(MeasurementInterval::Op),
            "intended" => Ok(MeasurementInterval::Intended),
            "both" => Ok(MeasurementInterval::Both),
            other => Err(Error::invalid(format!("measurement interval `{other}`: expected op, intended or both"))),
        }
    }
}

/// Prefix of intended-latency series (YCSB: `"Intended-" + operation`).
pub const INTENDED_PREFIX: &str = "Intended-";

/// Suffix of the latency series of failed operations (YCSB: `op + "-FAILED"`).
pub const FAILED_SUFFIX: &str = "-FAILED";

/// Significant decimal digits of every histogram (YCSB: `new Recorder(3)`).
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// An empty auto-resizing latency histogram (nanoseconds, 3 significant digits).
pub fn new_histogram() -> Histogram<u64> {
    // 3 significant digits is always within HdrHistogram's 0..=5.
    Histogram::new(SIGNIFICANT_DIGITS).expect("3 significant digits is a valid precision")
}

/// The latency histogram and status counts of one measurement name.
#[derive(Clone, Debug)]
pub struct Series {
    histogram: Histogram<u64>,
    truncated_us: Histogram<u64>,
    statuses: [u64; Status::ALL.len()],
}

impl Default for Series {
    fn default() -> Self {
        Series { histogram: new_histogram(), truncated_us: new_histogram(), statuses: [0; Status::ALL.len()] }
    }
}

impl Series {
    /// Latencies in nanoseconds.
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.histogram
    }

    /// How many operations ended with `status`.
    pub fn status_count(&self, status: Status) -> u64 {
        self.statuses[status.index()]
    }

    /// Non-zero status counts, in [`Status::ALL`] order.
    pub fn statuses(&self) -> impl Iterator<Item = (Status, u64)> + '_ {
        Status::ALL.into_iter().map(|s| (s, self.statuses[s.index()])).filter(|(_, n)| *n > 0)
    }

    /// Sum of all status counts.
    pub fn status_total(&self) -> u64 {
        self.statuses.iter().sum()
    }

    /// Latencies truncated to whole microseconds, as YCSB records them.
    pub fn truncated_us(&self) -> &Histogram<u64> {
        &self.truncated_us
    }

    fn record_ns(&mut self, ns: u64) {
        // Auto-resize covers every u64 value HdrHistogram can track; beyond that, clamp.
        if self.histogram.record(ns).is_err() {
            self.histogram.saturating_record(ns);
        }
        if self.truncated_us.record(ns / 1000).is_err() {
            self.truncated_us.saturating_record(ns / 1000);
        }
    }

    fn merge(&mut self, other: &Series) -> Result<()> {
        self.histogram.add(&other.histogram).map_err(|e| Error::invalid(format!("cannot merge histograms: {e:?}")))?;
        self.truncated_us
            .add(&other.truncated_us)
            .map_err(|e| Error::invalid(format!("cannot merge histograms: {e:?}")))?;
        for (a, b) in self.statuses.iter_mut().zip(other.statuses) {
            *a += b;
        }
        Ok(())
    }

    /// Adds nanosecond latencies that come without their exact values (an interval
    /// log): the truncated-microsecond histogram gets each bucket's highest equivalent
    /// value (HdrHistogram's reporting convention), truncated, so a merged report can
    /// differ from YCSB's by one microsecond for latencies in a bucket that straddles a
    /// microsecond (buckets are at most 512 ns wide below 1 ms).
    fn add_histogram(&mut self, h: &Histogram<u64>) -> Result<()> {
        self.histogram.add(h).map_err(|e| Error::invalid(format!("cannot merge histograms: {e:?}")))?;
        for v in h.iter_recorded() {
            let us = h.highest_equivalent(v.value_iterated_to()) / 1000;
            if self.truncated_us.record_n(us, v.count_at_value()).is_err() {
                self.truncated_us.saturating_record_n(us, v.count_at_value());
            }
        }
        Ok(())
    }
}

/// Latency histograms and status counts by measurement name.
#[derive(Clone, Debug, Default)]
pub struct Measurements {
    interval: MeasurementInterval,
    latency_for_each_error: bool,
    series: Vec<(String, Series)>,
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Does `name` equal `prefix + op + suffix`?
fn is_name(name: &str, prefix: &str, op: &str, suffix: &str) -> bool {
    // One pass over a few bytes, which stops at the first that differs (READ against
    // UPDATE: the first): this runs for every operation a client thread records, and
    // three slice comparisons (three calls of the C library's memcmp) per series were
    // 6% of a 16-thread shm run's client CPU.
    let n = name.as_bytes();
    n.len() == prefix.len() + op.len() + suffix.len()
        && prefix.bytes().chain(op.bytes()).chain(suffix.bytes()).zip(n).all(|(a, &b)| a == b)
}

/// Well-known operation names, in report order (longest first where one is a prefix).
const OP_ORDER: [&str; 6] = ["READ-MODIFY-WRITE", "READ", "UPDATE", "INSERT", "SCAN", "DELETE"];

fn report_rank(name: &str) -> (bool, usize, String) {
    let intended = name.starts_with(INTENDED_PREFIX);
    let base = name.strip_prefix(INTENDED_PREFIX).unwrap_or(name);
    let rank = OP_ORDER
        .iter()
        .position(|op| base == *op || base.strip_prefix(op).is_some_and(|rest| rest.starts_with('-')))
        .map(|i| match OP_ORDER[i] {
            // Report READ before READ-MODIFY-WRITE although it is matched after it.
            "READ-MODIFY-WRITE" => 4,
            "READ" => 0,
            "UPDATE" => 1,
            "INSERT" => 2,
            "SCAN" => 3,
            _ => 5,
        })
        .unwrap_or(OP_ORDER.len());
    (intended, rank, name.to_string())
}

impl Measurements {
    /// Empty measurements recording per `interval`.
    pub fn new(interval: MeasurementInterval) -> Measurements {
        Measurements { interval, ..Measurements::default() }
    }

    /// YCSB's `reportlatencyforeacherror`: failed latencies go to `<op>-<STATUS>`
    /// instead of `<op>-FAILED`.
    pub fn with_latency_for_each_error(mut self, on: bool) -> Measurements {
        self.latency_for_each_error = on;
        self
    }

    /// The recording mode.
    pub fn interval(&self) -> MeasurementInterval {
        self.interval
    }

    fn series_mut(&mut self, prefix: &str, op: &str, suffix: &str) -> &mut Series {
        let idx = match self.series.iter().position(|(n, _)| is_name(n, prefix, op, suffix)) {
            Some(i) => i,
            None => {
                self.series.push((format!("{prefix}{op}{suffix}"), Series::default()));
                self.series.len() - 1
            }
        };
        &mut self.series[idx].1
    }

    /// Records one operation whose intended latency equals its service time.
    pub fn record(&mut self, op: &str, latency: Duration, status: Status) {
        self.record_intended(op, latency, latency, status);
    }

    /// Records one operation: `latency` measured from when it was issued, `intended`
    /// from when it should have been issued (its slot under the target throughput).
    pub fn record_intended(&mut self, op: &str, latency: Duration, intended: Duration, status: Status) {
        let suffix: &str = match (status.is_ok(), self.latency_for_each_error) {
            (true, _) => "",
            (false, false) => FAILED_SUFFIX,
            (false, true) => match status {
                Status::Ok | Status::BatchedOk => "",
                Status::NotFound => "-NOT_FOUND",
                Status::Error => "-ERROR",
                Status::NotImplemented => "-NOT_IMPLEMENTED",
                Status::UnexpectedState => "-UNEXPECTED_STATE",
                Status::BadRequest => "-BAD_REQUEST",
                Status::Forbidden => "-FORBIDDEN",
                Status::ServiceUnavailable => "-SERVICE_UNAVAILABLE",
            },
        };
        let (ns, intended_ns) = match self.interval {
            MeasurementInterval::Op => (duration_ns(latency), None),
            MeasurementInterval::Intended => (duration_ns(intended), None),
            MeasurementInterval::Both => (duration_ns(latency), Some(duration_ns(intended))),
        };
        let s = self.series_mut("", op, suffix);
        s.record_ns(ns);
        // The status goes under the op's own name: the same series when the operation
        // succeeded, so the common case (once per operation of every client thread)
        // looks it up once.
        if suffix.is_empty() {
            s.statuses[status.index()] += 1;
        } else {
            self.series_mut("", op, "").statuses[status.index()] += 1;
        }
        if let Some(i) = intended_ns {
            self.series_mut(INTENDED_PREFIX, op, suffix).record_ns(i);
        }
    }

    /// Records a latency under `name` without counting a status (YCSB's
    /// `measure` + `measureIntended` without `reportStatus`: `READ-MODIFY-WRITE`,
    /// `CLEANUP`), honouring the measurement interval like [`record_intended`](Self::record_intended).
    pub fn measure(&mut self, name: &str, latency: Duration, intended: Duration) {
        match self.interval {
            MeasurementInterval::Op => self.series_mut("", name, "").record_ns(duration_ns(latency)),
            MeasurementInterval::Intended => self.series_mut("", name, "").record_ns(duration_ns(intended)),
            MeasurementInterval::Both => {
                self.series_mut("", name, "").record_ns(duration_ns(latency));
                self.series_mut(INTENDED_PREFIX, name, "").record_ns(duration_ns(intended));
            }
        }
    }

    /// Records a latency under `name` exactly (no status, no naming rules).
    pub fn record_latency(&mut self, name: &str, latency: Duration) {
        self.series_mut("", name, "").record_ns(duration_ns(latency));
    }

    /// Adds `count` operations with `status` under `name` exactly.
    pub fn add_status_count(&mut self, name: &str, status: Status, count: u64) {
        self.series_mut("", name, "").statuses[status.index()] += count;
    }

    /// Adds the latencies of `histogram` (nanoseconds) to `name`.
    pub fn add_histogram(&mut self, name: &str, histogram: &Histogram<u64>) -> Result<()> {
        self.series_mut("", name, "").add_histogram(histogram)
    }

    /// Adds everything in `other` (another thread's, or another interval's).
    pub fn merge(&mut self, other: &Measurements) -> Result<()> {
        for (name, s) in &other.series {
            self.series_mut("", name, "").merge(s)?;
        }
        Ok(())
    }

    /// Returns what was recorded since the last `take` and starts empty again (for
    /// interval logs: take each interval, write it, merge it into the totals).
    pub fn take(&mut self) -> Measurements {
        let mut fresh = Measurements::new(self.interval).with_latency_for_each_error(self.latency_for_each_error);
        std::mem::swap(self, &mut fresh);
        fresh
    }

    /// The series named `name`.
    pub fn get(&self, name: &str) -> Option<&Series> {
        self.series.iter().find(|(n, _)| n == name).map(|(_, s)| s)
    }

    /// Every series in report order: READ, UPDATE, INSERT, SCAN, READ-MODIFY-WRITE,
    /// DELETE (each followed by its failure series), other names alphabetically, then
    /// the `Intended-` series in the same order.
    pub fn series(&self) -> Vec<(&str, &Series)> {
        let mut v: Vec<(&str, &Series)> = self.series.iter().map(|(n, s)| (n.as_str(), s)).collect();
        v.sort_by_cached_key(|(n, _)| report_rank(n));
        v
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.series.iter().all(|(_, s)| s.histogram.is_empty() && s.status_total() == 0)
    }

    /// Operations counted by status over all series (each `record` counts once).
    pub fn status_total(&self) -> u64 {
        self.series.iter().map(|(_, s)| s.status_total()).sum()
    }
}

/// Parses a percentile list such as `50,95,99,99.9` (`--percentiles`,
/// `hdrhistogram.percentiles`).
pub fn parse_percentiles(text: &str) -> Result<Vec<f64>> {
    let mut out = Vec::new();
    for item in text.split(',') {
        let t = item.trim();
        let p: f64 = t.parse().map_err(|_| {
            Error::invalid(format!(
                "invalid percentile `{t}` in `{text}`: expected numbers from 0 to 100, comma-separated"
            ))
        })?;
        if !(0.0..=100.0).contains(&p) {
            return Err(Error::invalid(format!("percentile {t} in `{text}` is outside 0..100")));
        }
        out.push(p);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn a_series_name_is_prefix_operation_suffix_exactly() {
        assert!(is_name("READ", "", "READ", ""));
        assert!(is_name("READ-FAILED", "", "READ", "-FAILED"));
        assert!(is_name("Intended-READ", "Intended-", "READ", ""));
        assert!(!is_name("READ", "", "READ", "-FAILED"));
        assert!(!is_name("READ-FAILED", "", "READ", ""));
        assert!(!is_name("UPDATE", "", "READ", ""));
        assert!(!is_name("READX", "", "READ", "Y"));
        assert!(!is_name("Intended-READ", "", "READ", ""));
        assert!(!is_name("READ-MODIFY-WRITE", "", "READ", ""));
    }

    #[test]
    fn names_follow_ycsb() {
        let mut m = Measurements::new(MeasurementInterval::Op);
        m.record("READ", 10 * US, Status::Ok);
        m.record("READ", 20 * US, Status::NotFound);
        m.record("READ", 30 * US, Status::Error);
        m.record("READ-MODIFY-WRITE", 50 * US, Status::Ok);
        m.record("UPDATE", 40 * US, Status::BatchedOk);
        let names: Vec<&str> = m.series().iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["READ", "READ-FAILED", "UPDATE", "READ-MODIFY-WRITE"]);
        let read = m.get("READ").unwrap();
        assert_eq!(read.histogram().len(), 1);
        assert_eq!(read.statuses().collect::<Vec<_>>(), [(Status::Ok, 1), (Status::NotFound, 1), (Status::Error, 1)]);
        assert_eq!(m.get("READ-FAILED").unwrap().histogram().len(), 2);
        assert_eq!(m.status_total(), 5);

        let mut e = Measurements::new(MeasurementInterval::Op).with_latency_for_each_error(true);
        e.record("READ", 20 * US, Status::NotFound);
        assert!(e.get("READ-NOT_FOUND").is_some());
    }

    #[test]
    fn intended_latency_modes() {
        let mut both = Measurements::new(MeasurementInterval::Both);
        let mut intended = Measurements::new(MeasurementInterval::Intended);
        for m in [&mut both, &mut intended] {
            m.record_intended("READ", 5 * US, 500 * US, Status::Ok);
        }
        assert_eq!(both.get("READ").unwrap().histogram().max() / 1000, 5);
        assert_eq!(both.get("Intended-READ").unwrap().histogram().max() / 1000, 500);
        assert_eq!(intended.get("READ").unwrap().histogram().max() / 1000, 500);
        assert!(intended.get("Intended-READ").is_none());
        let names: Vec<&str> = both.series().iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["READ", "Intended-READ"]);
    }

    #[test]
    fn merge_and_take() {
        let mut a = Measurements::new(MeasurementInterval::Op);
        let mut b = Measurements::new(MeasurementInterval::Op);
        for i in 1..=1000u64 {
            a.record("READ", Duration::from_nanos(i * 1000), Status::Ok);
            b.record("READ", Duration::from_nanos(i * 1_000_000), Status::Ok);
        }
        b.record("CUSTOM-OP", 3 * US, Status::Error);
        let mut total = Measurements::new(MeasurementInterval::Op);
        total.merge(&a).unwrap();
        total.merge(&b).unwrap();
        let read = total.get("READ").unwrap();
        assert_eq!(read.histogram().len(), 2000);
        assert_eq!(read.status_count(Status::Ok), 2000);
        // The median of the union is the top of a's range (1 ms), within 0.1%.
        let median = read.histogram().value_at_quantile(0.5);
        assert!((999_000..=1_001_000).contains(&median), "{median}");
        assert_eq!(total.get("CUSTOM-OP").unwrap().status_count(Status::Error), 1);

        let taken = a.take();
        assert!(a.is_empty());
        assert_eq!(taken.get("READ").unwrap().histogram().len(), 1000);
    }

    #[test]
    fn interval_parsing() {
        assert_eq!("both".parse::<MeasurementInterval>().unwrap(), MeasurementInterval::Both);
        assert!("sometimes".parse::<MeasurementInterval>().is_err());
        assert_eq!(Status::from_name("NOT_FOUND"), Some(Status::NotFound));
        assert_eq!(Status::from_name("nope"), None);
    }
}
