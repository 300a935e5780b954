//! Workload specifications: YCSB property files, the built-in workloads A-F, and
//! `-p key=value` overrides.
//!
//! Files are read with `java.util.Properties` syntax: `key=value`, `key: value` or
//! `key value`; `#` and `!` comment lines; a trailing `\` continues a line; `\t`,
//! `\n`, `\uXXXX` escapes. Later settings win (a later file, then `-p`).
//!
//! Every property is checked against the list of properties YCSB's `Client` and
//! `CoreWorkload` read plus boomkv's own (`boomkv.*`). Unknown properties are kept
//! and reported by [`WorkloadSpec::warnings`] (with a suggestion when the name is
//! close to a known one), never silently dropped; so are known properties that have
//! no effect in boomkv (e.g. `table`, `dataintegrity`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::measure::{parse_percentiles, MeasurementInterval, Measurements};

/// Names of the properties boomkv adds to YCSB's, and of the YCSB ones the runner reads.
pub mod names {
    /// Value size in `--size` syntax (`2k`, `32..16k`); overrides the YCSB record model.
    pub const VALUE_SIZE: &str = "boomkv.valuesize";
    /// Zipfian constant for `zipfian` and `latest` (`--theta`); see
    /// [`ScrambledZipfianGenerator::with_theta`](crate::workload::generator::ScrambledZipfianGenerator::with_theta).
    pub const THETA: &str = "boomkv.theta";
    /// Seed of the random streams (`--seed`).
    pub const SEED: &str = "boomkv.seed";
    /// Seconds between status lines.
    pub const STATUS_INTERVAL: &str = "status.interval";
    /// true: status lines (YCSB's `-s`).
    pub const STATUS: &str = "status";
    /// Put before every status line (YCSB's `-l`).
    pub const LABEL: &str = "label";
    /// false: run the load phase only.
    pub const DO_TRANSACTIONS: &str = "dotransactions";
    /// File for the text report.
    pub const EXPORT_FILE: &str = "exportfile";
    /// Write YCSB's HdrHistogram log per measurement (`<path><NAME>.hdr`), and
    /// boomkv's tagged `<path>ycsb.hlog`.
    pub const HDR_FILE_OUTPUT: &str = "hdrhistogram.fileoutput";
    /// Prefix of those files' paths (a directory ends in `/`).
    pub const HDR_OUTPUT_PATH: &str = "hdrhistogram.output.path";
    /// YCSB `recordcount`.
    pub const RECORD_COUNT: &str = "recordcount";
    /// YCSB `operationcount`.
    pub const OPERATION_COUNT: &str = "operationcount";
    /// YCSB `threadcount`.
    pub const THREAD_COUNT: &str = "threadcount";
    /// YCSB `target` (operations per second, all threads; 0 = unthrottled).
    pub const TARGET: &str = "target";
    /// YCSB `maxexecutiontime` (seconds).
    pub const MAX_EXECUTION_TIME: &str = "maxexecutiontime";
    /// YCSB `hdrhistogram.percentiles` (default `95,99`).
    pub const PERCENTILES: &str = "hdrhistogram.percentiles";
    /// YCSB `measurement.interval` (`op`, `intended`, `both`).
    pub const MEASUREMENT_INTERVAL: &str = "measurement.interval";
    /// YCSB `reportlatencyforeacherror`.
    pub const LATENCY_FOR_EACH_ERROR: &str = "reportlatencyforeacherror";
}

/// How boomkv uses a known property.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Use {
    /// Read by [`CoreConfig`](super::CoreConfig).
    Workload,
    /// Read by the runner (threads, throttling, measurement, output).
    Runner,
    /// Recognised, but has no effect in boomkv; the reason is shown as a warning.
    NoEffect(&'static str),
}

const KNOWN: &[(&str, Use)] = &[
    // CoreWorkload
    ("recordcount", Use::Workload),
    ("operationcount", Use::Workload),
    ("insertstart", Use::Workload),
    ("insertcount", Use::Workload),
    ("fieldcount", Use::Workload),
    ("fieldlength", Use::Workload),
    ("minfieldlength", Use::Workload),
    ("fieldlengthdistribution", Use::Workload),
    ("readallfields", Use::Workload),
    ("writeallfields", Use::Workload),
    ("readproportion", Use::Workload),
    ("updateproportion", Use::Workload),
    ("insertproportion", Use::Workload),
    ("scanproportion", Use::Workload),
    ("readmodifywriteproportion", Use::Workload),
    ("requestdistribution", Use::Workload),
    ("zeropadding", Use::Workload),
    ("minscanlength", Use::Workload),
    ("maxscanlength", Use::Workload),
    ("scanlengthdistribution", Use::Workload),
    ("insertorder", Use::Workload),
    ("hotspotdatafraction", Use::Workload),
    ("hotspotopnfraction", Use::Workload),
    ("exponential.percentile", Use::Workload),
    ("exponential.frac", Use::Workload),
    ("workload", Use::Workload),
    (names::VALUE_SIZE, Use::Workload),
    (names::THETA, Use::Workload),
    // Client and measurements
    ("threadcount", Use::Runner),
    ("target", Use::Runner),
    ("maxexecutiontime", Use::Runner),
    ("measurementtype", Use::Runner),
    ("measurement.interval", Use::Runner),
    (
        "measurement.histogram.verbose",
        Use::NoEffect("the report always has the configured percentiles; --json has full spectra"),
    ),
    ("hdrhistogram.percentiles", Use::Runner),
    (names::HDR_FILE_OUTPUT, Use::Runner),
    (names::HDR_OUTPUT_PATH, Use::Runner),
    (names::STATUS_INTERVAL, Use::Runner),
    (names::STATUS, Use::Runner),
    (names::LABEL, Use::Runner),
    ("reportlatencyforeacherror", Use::Runner),
    ("latencytrackederrors", Use::NoEffect("use reportlatencyforeacherror=true to split failed latencies by status")),
    ("exporter", Use::Runner),
    (names::EXPORT_FILE, Use::Runner),
    (names::DO_TRANSACTIONS, Use::Runner),
    ("db", Use::NoEffect("the database is always boomkv (choose its protocol with --protocol)")),
    (names::SEED, Use::Runner),
    // Known, without effect here
    ("table", Use::NoEffect("boomkv has one key space; there are no tables")),
    ("fieldnameprefix", Use::NoEffect("values are opaque byte strings, not named fields")),
    ("dataintegrity", Use::NoEffect("not implemented; entries are checksummed by the store itself")),
    ("readallfieldsbyname", Use::NoEffect("values are opaque byte strings, not named fields")),
    ("fieldlengthhistogram", Use::NoEffect("fieldlengthdistribution=histogram is not supported")),
    ("core_workload_insertion_retry_limit", Use::NoEffect("failed inserts are counted, not retried")),
    ("core_workload_insertion_retry_interval", Use::NoEffect("failed inserts are counted, not retried")),
    ("measurement.trackjvm", Use::NoEffect("there is no JVM")),
    ("histogram.buckets", Use::NoEffect("latencies are always recorded in HdrHistograms")),
    ("timeseries.granularity", Use::NoEffect("latencies are always recorded in HdrHistograms")),
    ("measurement.raw.output_file", Use::NoEffect("latencies are always recorded in HdrHistograms")),
    ("measurement.raw.no_summary", Use::NoEffect("latencies are always recorded in HdrHistograms")),
];

fn known(key: &str) -> Option<Use> {
    KNOWN.iter().find(|(k, _)| *k == key).map(|(_, u)| *u)
}

/// Where a property's value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A property file, at a line.
    File {
        /// The file.
        path: PathBuf,
        /// 1-based line of the property.
        line: usize,
    },
    /// One of the built-in workloads (`--mix`).
    BuiltIn {
        /// `a` to `f`.
        mix: char,
        /// 1-based line in the built-in file.
        line: usize,
    },
    /// A `-p key=value` override (or [`WorkloadSpec::set`]).
    Override,
    /// A command-line option that maps to a property ([`WorkloadSpec::set_from_option`]),
    /// such as `--records`.
    Option(String),
}

impl Origin {
    /// Same file, or same built-in workload (lines aside)?
    fn same_source(&self, other: &Origin) -> bool {
        match (self, other) {
            (Origin::File { path: a, .. }, Origin::File { path: b, .. }) => a == b,
            (Origin::BuiltIn { mix: a, .. }, Origin::BuiltIn { mix: b, .. }) => a == b,
            (Origin::Override, Origin::Override) => true,
            (Origin::Option(a), Origin::Option(b)) => a == b,
            _ => false,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File { path, line } => write!(f, "{}:{line}", path.display()),
            Origin::BuiltIn { mix, line } => write!(f, "built-in workload{mix}:{line}"),
            Origin::Override => f.write_str("-p override"),
            Origin::Option(o) => f.write_str(o),
        }
    }
}

/// One property's value and origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Property {
    /// The value, unescaped (leading whitespace removed, as Java does).
    pub value: String,
    /// Where it was set.
    pub origin: Origin,
}

/// The built-in workloads, YCSB's `workloads/workloada` .. `workloadf`.
pub const BUILTIN_WORKLOADS: [(char, &str); 6] = [
    ('a', include_str!("../../../workloads/workloada")),
    ('b', include_str!("../../../workloads/workloadb")),
    ('c', include_str!("../../../workloads/workloadc")),
    ('d', include_str!("../../../workloads/workloadd")),
    ('e', include_str!("../../../workloads/workloade")),
    ('f', include_str!("../../../workloads/workloadf")),
];

/// The text of built-in workload `mix` (`a`..`f`, any case).
pub fn builtin_text(mix: char) -> Option<&'static str> {
    let m = mix.to_ascii_lowercase();
    BUILTIN_WORKLOADS.iter().find(|(c, _)| *c == m).map(|(_, t)| *t)
}

/// A set of YCSB properties with their origins, plus the warnings found so far.
///
/// ```
/// use boomkv::workload::WorkloadSpec;
/// let mut spec = WorkloadSpec::from_mix('b')?;
/// spec.set_override("recordcount=100000")?;
/// spec.set("boomkv.valuesize", "2k")?;
/// assert_eq!(spec.get("readproportion"), Some("0.95"));
/// assert!(spec.warnings().is_empty());
/// # Ok::<(), boomkv::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct WorkloadSpec {
    name: String,
    props: BTreeMap<String, Property>,
    warnings: Vec<String>,
}

impl WorkloadSpec {
    /// An empty specification: YCSB's defaults everywhere.
    pub fn new(name: impl Into<String>) -> WorkloadSpec {
        WorkloadSpec { name: name.into(), ..WorkloadSpec::default() }
    }

    /// Built-in workload `mix`: `a` to `f` (YCSB's workloada .. workloadf).
    pub fn from_mix(mix: char) -> Result<WorkloadSpec> {
        let m = mix.to_ascii_lowercase();
        let text = builtin_text(m)
            .ok_or_else(|| Error::invalid(format!("unknown workload mix `{mix}`: choose one of a, b, c, d, e, f")))?;
        let mut spec = WorkloadSpec::new(format!("workload{m}"));
        spec.load_text(text, |line| Origin::BuiltIn { mix: m, line })?;
        Ok(spec)
    }

    /// A YCSB property file.
    pub fn from_file(path: &Path) -> Result<WorkloadSpec> {
        let mut spec = WorkloadSpec::new(path.display().to_string());
        spec.load_file(path)?;
        Ok(spec)
    }

    /// Adds the properties of another file; its values win over earlier ones (like
    /// several `-P` options to YCSB).
    pub fn load_file(&mut self, path: &Path) -> Result<()> {
        let bytes =
            std::fs::read(path).map_err(|e| Error::io(format!("reading workload file {}", path.display()), e))?;
        // Java would read a binary file as properties too, and run YCSB's defaults
        // (2^31 - 1 records) after a page of warnings: a wrong path, not a workload.
        if let Some(at) = bytes.iter().position(|&b| b < 0x20 && !b"\t\n\r\x0c".contains(&b)) {
            return Err(Error::invalid(format!(
                "workload file {} is not a properties file: control byte 0x{:02x} at offset {at} (a YCSB workload \
                 file is text, one key=value per line)",
                path.display(),
                bytes[at]
            )));
        }
        // java.util.Properties reads ISO-8859-1; accept UTF-8 too.
        let text = match String::from_utf8(bytes) {
            Ok(t) => t,
            Err(e) => e.into_bytes().iter().map(|&b| b as char).collect(),
        };
        self.load_text(&text, |line| Origin::File { path: path.to_path_buf(), line })
    }

    /// Parses properties from `text` (Java properties syntax).
    pub fn load_text(&mut self, text: &str, origin: impl Fn(usize) -> Origin) -> Result<()> {
        let lines =
            parse_java_properties(text).map_err(|(line, why)| Error::invalid(format!("{}: {why}", origin(line))))?;
        for PropertyLine { line, key, value } in lines {
            self.insert(key, value, origin(line));
        }
        Ok(())
    }

    /// Sets `key` to `value` as a `-p` override (warnings as for files).
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let key = key.trim();
        if key.is_empty() {
            return Err(Error::invalid(format!("-p: empty property name (value `{value}`)")));
        }
        self.insert(key.to_string(), value.trim().to_string(), Origin::Override);
        Ok(())
    }

    /// Sets `key` to `value` from the command-line option `option` (named in errors
    /// and warnings, as `-p` is for overrides).
    pub fn set_from_option(&mut self, option: &str, key: &str, value: &str) {
        self.insert(key.trim().to_string(), value.trim().to_string(), Origin::Option(option.to_string()));
    }

    /// Applies one `-p key=value` argument.
    pub fn set_override(&mut self, assignment: &str) -> Result<()> {
        let (k, v) = assignment
            .split_once('=')
            .ok_or_else(|| Error::invalid(format!("-p expects key=value, got `{assignment}`")))?;
        self.set(k, v)
    }

    fn insert(&mut self, key: String, value: String, origin: Origin) {
        let at = origin.to_string();
        match known(&key) {
            None => {
                let hint = suggest(&key).map(|s| format!("; did you mean `{s}`?")).unwrap_or_default();
                self.warnings.push(format!("{at}: unknown property `{key}` is ignored{hint}"));
            }
            Some(Use::NoEffect(why)) => {
                self.warnings.push(format!("{at}: property `{key}` has no effect in boomkv: {why}"));
            }
            Some(Use::Runner) if key == "measurementtype" && !value.trim().eq_ignore_ascii_case("hdrhistogram") => {
                self.warnings.push(format!(
                    "{at}: measurementtype={} has no effect: boomkv always records HdrHistograms",
                    value.trim()
                ));
            }
            Some(Use::Runner) if key == "exporter" && !value.trim().ends_with(".TextMeasurementsExporter") => {
                self.warnings.push(format!(
                    "{at}: exporter={} has no effect: the report is YCSB's text format (use --json for JSON)",
                    value.trim()
                ));
            }
            Some(Use::Workload) if key == "readallfields" && value.trim().eq_ignore_ascii_case("false") => {
                self.warnings.push(format!("{at}: readallfields=false has no effect: boomkv reads whole values"));
            }
            Some(Use::Workload)
                if matches!(key.as_str(), "readallfields" | "writeallfields")
                    && !value.trim().eq_ignore_ascii_case("true")
                    && !value.trim().eq_ignore_ascii_case("false") =>
            {
                self.warnings.push(format!(
                    "{at}: {key}={} is neither true nor false (YCSB takes it for false); boomkv reads and writes \
                     whole values either way",
                    value.trim()
                ));
            }
            Some(Use::Workload) if key == "writeallfields" && value.trim().eq_ignore_ascii_case("false") => {
                self.warnings.push(format!(
                    "{at}: writeallfields=false has no effect: boomkv updates write whole values of the record size"
                ));
            }
            Some(_) => {}
        }
        if let Some(previous) = self.props.get(&key) {
            // Within one file a repeated key is likely a mistake; a later file or -p
            // overriding an earlier one is how YCSB users layer settings.
            if previous.origin.same_source(&origin) && previous.origin != Origin::Override && previous.value != value {
                self.warnings.push(format!(
                    "{at}: property `{key}` set again (was `{}` at {}); the later value wins",
                    previous.value, previous.origin
                ));
            }
            // Both given on one command line: which one wins is not obvious.
            if previous.origin == Origin::Override && matches!(origin, Origin::Option(_)) && previous.value != value {
                self.warnings.push(format!("{at} {value} overrides -p {key}={}", previous.value));
            }
        }
        self.props.insert(key, Property { value, origin });
    }

    /// A name for messages: `workloadb`, or the file path.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The raw value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.props.get(key).map(|p| p.value.as_str())
    }

    /// The value and origin of `key`.
    pub fn property(&self, key: &str) -> Option<&Property> {
        self.props.get(key)
    }

    /// All properties, sorted by name.
    pub fn properties(&self) -> impl Iterator<Item = (&str, &Property)> {
        self.props.iter().map(|(k, p)| (k.as_str(), p))
    }

    /// Warnings about unknown or ineffective properties, one line each, in the order found.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The properties of the runner (threads, throttling, measurement, output) set in
    /// a file or with `-p`, with where: what a command that only loads records (and
    /// takes none of them) must name rather than ignore. The seed is not among them:
    /// the load's keys depend on it.
    pub fn runner_properties(&self) -> Vec<(&str, &Origin)> {
        self.props
            .iter()
            .filter(|(k, p)| {
                k.as_str() != names::SEED
                    && matches!(known(k), Some(Use::Runner))
                    && !matches!(p.origin, Origin::BuiltIn { .. })
            })
            .map(|(k, p)| (k.as_str(), &p.origin))
            .collect()
    }

    fn bad(&self, key: &str, expected: &str) -> Error {
        let p = &self.props[key];
        Error::invalid(format!("property `{key}` = `{}` ({}): expected {expected}", p.value, p.origin))
    }

    fn parse_or<T: FromStr>(&self, key: &str, default: T, expected: &str) -> Result<T> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| self.bad(key, expected)),
        }
    }

    /// `key` as an unsigned integer, `default` when unset.
    pub fn get_u64(&self, key: &str, default: u64) -> Result<u64> {
        self.parse_or(key, default, "a non-negative integer")
    }

    /// `key` as a number, `default` when unset.
    pub fn get_f64(&self, key: &str, default: f64) -> Result<f64> {
        let v: f64 = self.parse_or(key, default, "a number")?;
        if v.is_nan() {
            return Err(self.bad(key, "a number"));
        }
        Ok(v)
    }

    /// `key` as `true`/`false` (any case), `default` when unset.
    pub fn get_bool(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key).map(str::trim) {
            None => Ok(default),
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
            Some(_) => Err(self.bad(key, "true or false")),
        }
    }

    /// `key` as a string, `default` when unset.
    pub fn get_str<'a>(&'a self, key: &str, default: &'a str) -> &'a str {
        self.get(key).map(str::trim).unwrap_or(default)
    }

    /// Parses `key` with `parse`, naming the property and its origin on error.
    pub fn get_with<T>(&self, key: &str, parse: impl FnOnce(&str) -> Result<T>) -> Result<Option<T>> {
        match self.props.get(key) {
            None => Ok(None),
            Some(p) => parse(&p.value)
                .map(Some)
                .map_err(|e| Error::invalid(format!("property `{key}` = `{}` ({}): {e}", p.value, p.origin))),
        }
    }

    /// `threadcount` (default 1, at least 1).
    pub fn thread_count(&self) -> Result<u64> {
        let n = self.get_u64(names::THREAD_COUNT, 1)?;
        if n == 0 {
            return Err(self.bad(names::THREAD_COUNT, "at least 1"));
        }
        Ok(n)
    }

    /// `target` in operations per second, `None` when unthrottled (unset or 0).
    pub fn target(&self) -> Result<Option<f64>> {
        let t = self.get_f64(names::TARGET, 0.0)?;
        // 0 is no target; below one operation in 1000 s a run would only wait.
        if !t.is_finite() || t < 0.0 || (t > 0.0 && t < 1e-3) {
            return Err(self.bad(names::TARGET, "0 (no target) or a rate of at least 0.001 ops/s"));
        }
        Ok((t > 0.0).then_some(t))
    }

    /// `maxexecutiontime` (seconds), `None` when unset or 0.
    pub fn max_execution_time(&self) -> Result<Option<Duration>> {
        let s = self.get_u64(names::MAX_EXECUTION_TIME, 0)?;
        Ok((s > 0).then(|| Duration::from_secs(s)))
    }

    /// `status.interval` in seconds (default 10, at least 1).
    pub fn status_interval(&self) -> Result<Duration> {
        let s = self.get_u64(names::STATUS_INTERVAL, 10)?;
        if s == 0 {
            return Err(self.bad(names::STATUS_INTERVAL, "at least 1 (seconds)"));
        }
        Ok(Duration::from_secs(s))
    }

    /// `status` (default false; true = status lines, YCSB's `-s`).
    pub fn status(&self) -> Result<bool> {
        self.get_bool(names::STATUS, false)
    }

    /// `label`: what YCSB puts before every status line (`-l`), as it is.
    pub fn label(&self) -> String {
        self.get(names::LABEL).unwrap_or_default().to_string()
    }

    /// `dotransactions` (default true; false = load only, YCSB's `-load`).
    pub fn do_transactions(&self) -> Result<bool> {
        self.get_bool(names::DO_TRANSACTIONS, true)
    }

    /// `exportfile`: where the text report goes instead of standard output.
    pub fn export_file(&self) -> Option<PathBuf> {
        self.get(names::EXPORT_FILE).filter(|v| !v.trim().is_empty()).map(|v| PathBuf::from(v.trim()))
    }

    /// The prefix of the files `hdrhistogram.fileoutput=true` asks for
    /// (`hdrhistogram.output.path`, default none): YCSB's one file per measurement,
    /// `<prefix><NAME>.hdr` (see `bench::hlog::YcsbHdrFiles`).
    pub fn hdr_file_prefix(&self) -> Result<Option<String>> {
        if !self.get_bool(names::HDR_FILE_OUTPUT, false)? {
            return Ok(None);
        }
        Ok(Some(self.get_str(names::HDR_OUTPUT_PATH, "").to_string()))
    }

    /// The interval log that `hdrhistogram.fileoutput=true` asks for besides YCSB's
    /// files: `<hdrhistogram.output.path>ycsb.hlog`, one log with every operation
    /// tagged by name (nanoseconds) and an untagged total, which `--merge` reads.
    pub fn hdr_file_output(&self) -> Result<Option<PathBuf>> {
        Ok(self.hdr_file_prefix()?.map(|prefix| PathBuf::from(format!("{prefix}ycsb.hlog"))))
    }

    /// `boomkv.seed`, if set.
    pub fn seed(&self) -> Result<Option<u64>> {
        self.get(names::SEED).map(|_| self.get_u64(names::SEED, 0)).transpose()
    }

    /// `hdrhistogram.percentiles` (default `95,99`).
    pub fn percentiles(&self) -> Result<Vec<f64>> {
        Ok(self.get_with(names::PERCENTILES, parse_percentiles)?.unwrap_or_else(|| vec![95.0, 99.0]))
    }

    /// `measurement.interval` (default `op`).
    pub fn measurement_interval(&self) -> Result<MeasurementInterval> {
        Ok(self.get_with(names::MEASUREMENT_INTERVAL, str::parse)?.unwrap_or(MeasurementInterval::Op))
    }

    /// `reportlatencyforeacherror` (default false).
    pub fn latency_for_each_error(&self) -> Result<bool> {
        self.get_bool(names::LATENCY_FOR_EACH_ERROR, false)
    }

    /// An empty [`Measurements`] configured by `measurement.interval` and
    /// `reportlatencyforeacherror` (one per client thread).
    pub fn new_measurements(&self) -> Result<Measurements> {
        Ok(Measurements::new(self.measurement_interval()?).with_latency_for_each_error(self.latency_for_each_error()?))
    }
}

/// A known property name within edit distance 2 of `key`, if any.
fn suggest(key: &str) -> Option<&'static str> {
    let lower = key.to_ascii_lowercase();
    KNOWN
        .iter()
        .map(|(k, _)| (edit_distance(&lower, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// One `key=value` of a properties text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PropertyLine {
    /// 1-based line where the (possibly continued) line starts.
    pub line: usize,
    /// The unescaped key.
    pub key: String,
    /// The unescaped value.
    pub value: String,
}

/// A syntax error in a properties text: 1-based line and what is wrong.
pub type PropertySyntaxError = (usize, String);

/// Parses `java.util.Properties` text into its entries, in file order.
pub fn parse_java_properties(text: &str) -> std::result::Result<Vec<PropertyLine>, PropertySyntaxError> {
    let is_ws = |c: char| c == ' ' || c == '\t' || c == '\x0c';
    let mut out = Vec::new();
    let natural: Vec<&str> = split_natural_lines(text);
    let mut i = 0;
    while i < natural.len() {
        let start_line = i + 1;
        let first = natural[i].trim_start_matches(is_ws);
        i += 1;
        if first.is_empty() || first.starts_with('#') || first.starts_with('!') {
            continue;
        }
        // Join continuation lines: an odd number of trailing backslashes.
        let mut logical = String::from(first);
        while ends_with_odd_backslashes(&logical) {
            logical.pop();
            if i >= natural.len() {
                break;
            }
            logical.push_str(natural[i].trim_start_matches(is_ws));
            i += 1;
        }
        let (raw_key, raw_value) = split_key_value(&logical);
        let key = unescape(raw_key).map_err(|e| (start_line, e))?;
        let value = unescape(raw_value).map_err(|e| (start_line, e))?;
        out.push(PropertyLine { line: start_line, key, value });
    }
    Ok(out)
}

fn split_natural_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let bytes = text.as_bytes();
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => {
                lines.push(&text[start..i]);
                start = i + 1;
            }
            b'\r' => {
                lines.push(&text[start..i]);
                if bytes.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if start < bytes.len() {
        lines.push(&text[start..]);
    }
    lines
}

fn ends_with_odd_backslashes(s: &str) -> bool {
    s.chars().rev().take_while(|&c| c == '\\').count() % 2 == 1
}

/// Splits at the first unescaped `=`, `:` or whitespace, as `Properties.load` does.
fn split_key_value(line: &str) -> (&str, &str) {
    let is_ws = |c: char| c == ' ' || c == '\t' || c == '\x0c';
    let mut escaped = false;
    for (idx, c) in line.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        if c == '\\' {
            escaped = true;
            continue;
        }
        if c == '=' || c == ':' {
            return (&line[..idx], line[idx + 1..].trim_start_matches(is_ws));
        }
        if is_ws(c) {
            let rest = line[idx..].trim_start_matches(is_ws);
            let rest = match rest.strip_prefix(['=', ':']) {
                Some(r) => r.trim_start_matches(is_ws),
                None => rest,
            };
            return (&line[..idx], rest);
        }
    }
    (line, "")
}

fn unescape(s: &str) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            None => {}
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code = u32::from_str_radix(&hex, 16)
                    .ok()
                    .filter(|_| hex.len() == 4)
                    .ok_or_else(|| format!("malformed \\uXXXX escape `\\u{hex}`"))?;
                out.push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
            }
            Some(other) => out.push(other),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_properties_syntax() {
        let text = "# comment\n  ! other comment\n\nkey1=value1\nkey2 = value two  \nkey3:v3\nkey4 v4\n\
                    key5   :   v5\nlong = a\\\n    b\\\n  c\nesc\\=aped=x\\ty\\u0041\nempty\n\\#notcomment=1\r\nlast=\\\\";
        let got = parse_java_properties(text).unwrap();
        let kv: Vec<(usize, &str, &str)> = got.iter().map(|p| (p.line, p.key.as_str(), p.value.as_str())).collect();
        assert_eq!(
            kv,
            vec![
                (4, "key1", "value1"),
                (5, "key2", "value two  "),
                (6, "key3", "v3"),
                (7, "key4", "v4"),
                (8, "key5", "v5"),
                (9, "long", "abc"),
                (12, "esc=aped", "x\tyA"),
                (13, "empty", ""),
                (14, "#notcomment", "1"),
                (15, "last", "\\"),
            ]
        );
        assert_eq!(parse_java_properties("k=\\u12").unwrap_err().0, 1);
    }

    #[test]
    fn builtin_mixes_have_ycsbs_proportions() {
        let expect = [
            ('a', [0.5, 0.5, 0.0, 0.0, 0.0], "zipfian"),
            ('b', [0.95, 0.05, 0.0, 0.0, 0.0], "zipfian"),
            ('c', [1.0, 0.0, 0.0, 0.0, 0.0], "zipfian"),
            ('d', [0.95, 0.0, 0.0, 0.05, 0.0], "latest"),
            ('e', [0.0, 0.0, 0.95, 0.05, 0.0], "zipfian"),
            ('f', [0.5, 0.0, 0.0, 0.0, 0.5], "zipfian"),
        ];
        for (mix, props, dist) in expect {
            let spec = WorkloadSpec::from_mix(mix).unwrap();
            assert!(spec.warnings().is_empty(), "{mix}: {:?}", spec.warnings());
            let names = [
                "readproportion",
                "updateproportion",
                "scanproportion",
                "insertproportion",
                "readmodifywriteproportion",
            ];
            for (name, p) in names.iter().zip(props) {
                assert_eq!(spec.get_f64(name, 0.0).unwrap(), p, "workload{mix} {name}");
            }
            assert_eq!(spec.get("requestdistribution"), Some(dist));
            assert_eq!(spec.get("recordcount"), Some("1000"));
            assert_eq!(spec.get("operationcount"), Some("1000"));
            assert_eq!(spec.get("readallfields"), Some("true"));
            assert_eq!(spec.get("workload"), Some("site.ycsb.workloads.CoreWorkload"));
        }
        let e = WorkloadSpec::from_mix('E').unwrap();
        assert_eq!(e.get("maxscanlength"), Some("100"));
        assert_eq!(e.get("scanlengthdistribution"), Some("uniform"));
        assert!(WorkloadSpec::from_mix('g').is_err());
    }

    #[test]
    fn the_runners_properties_set_by_hand_are_listed() {
        let mut spec = WorkloadSpec::from_mix('a').unwrap();
        for p in ["threadcount=4", "seed=3", "recordcount=10", "exportfile=/tmp/x", "table=t"] {
            spec.set_override(p).unwrap();
        }
        let got: Vec<&str> = spec.runner_properties().into_iter().map(|(k, _)| k).collect();
        assert_eq!(got, ["exportfile", "threadcount"]);
        assert!(WorkloadSpec::from_mix('d').unwrap().runner_properties().is_empty());
    }

    #[test]
    fn unknown_and_ineffective_properties_are_warned_about() {
        let mut spec = WorkloadSpec::new("test");
        spec.load_text("readproportoin=0.5\ntable=t\nmongodb.url=x\nrecordcount=5\nrecordcount=6\n", |line| {
            Origin::File { path: "w.properties".into(), line }
        })
        .unwrap();
        let w = spec.warnings().join("\n");
        assert!(
            w.contains("w.properties:1: unknown property `readproportoin` is ignored; did you mean `readproportion`?"),
            "{w}"
        );
        assert!(w.contains("w.properties:2: property `table` has no effect"), "{w}");
        assert!(w.contains("w.properties:3: unknown property `mongodb.url` is ignored"), "{w}");
        assert!(w.contains("w.properties:5: property `recordcount` set again (was `5` at w.properties:4)"), "{w}");
        assert_eq!(spec.get("recordcount"), Some("6"));
        // Unknown properties are kept, not dropped.
        assert_eq!(spec.get("mongodb.url"), Some("x"));
    }

    #[test]
    fn an_option_that_overrides_a_p_of_the_same_command_line_says_so() {
        let mut spec = WorkloadSpec::new("test");
        spec.set_override("recordcount=5").unwrap();
        spec.set_from_option("--records", "recordcount", "7");
        assert_eq!(spec.get("recordcount"), Some("7"));
        let w = spec.warnings().join("\n");
        assert!(w.contains("--records 7 overrides -p recordcount=5"), "{w}");
        // The same value: nothing to say.
        let mut spec = WorkloadSpec::new("test");
        spec.set_override("recordcount=7").unwrap();
        spec.set_from_option("--records", "recordcount", "7");
        assert!(spec.warnings().is_empty(), "{:?}", spec.warnings());
    }

    #[test]
    fn a_binary_file_is_not_taken_for_a_workload() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("boomctl");
        std::fs::write(&bin, b"\x7fELF\x02\x01\x01\x00\x00recordcount=5\n").unwrap();
        let e = WorkloadSpec::from_file(&bin).unwrap_err().to_string();
        assert!(e.contains("is not a properties file: control byte 0x02 at offset 4"), "{e}");
        // tabs, form feeds and CRLF line ends are text
        let text = dir.path().join("w");
        std::fs::write(&text, "recordcount\t= 5\r\n\x0c# page\r\n").unwrap();
        assert_eq!(WorkloadSpec::from_file(&text).unwrap().get("recordcount"), Some("5"));
    }

    #[test]
    fn a_value_set_by_an_option_is_named_by_the_option() {
        let mut spec = WorkloadSpec::from_mix('a').unwrap();
        spec.set_from_option("--records", "recordcount", "12x");
        let e = spec.get_u64("recordcount", 0).unwrap_err().to_string();
        assert_eq!(e, "property `recordcount` = `12x` (--records): expected a non-negative integer");
    }

    #[test]
    fn overrides_and_typed_errors_name_the_property_and_origin() {
        let mut spec = WorkloadSpec::from_mix('a').unwrap();
        spec.set_override("recordcount=12x").unwrap();
        let e = spec.get_u64("recordcount", 0).unwrap_err().to_string();
        assert_eq!(e, "property `recordcount` = `12x` (-p override): expected a non-negative integer");
        let e = spec.get_f64("updateproportion", 0.0).map(|v| v.to_string()).unwrap();
        assert_eq!(e, "0.5");
        assert!(spec.set_override("novalue").is_err());
        assert!(spec.set_override("=3").is_err());
        spec.set_override("hdrhistogram.percentiles=50,99.9").unwrap();
        assert_eq!(spec.percentiles().unwrap(), vec![50.0, 99.9]);
        spec.set_override("hdrhistogram.percentiles=50,abc").unwrap();
        let e = spec.percentiles().unwrap_err().to_string();
        assert!(e.starts_with("property `hdrhistogram.percentiles` = `50,abc` (-p override):"), "{e}");
        spec.set("readallfields", "maybe").unwrap();
        assert!(spec.warnings().iter().any(|w| w.contains("readallfields=maybe is neither true nor false")));
        assert!(spec.get_bool("readallfields", true).is_err());
        assert_eq!(spec.thread_count().unwrap(), 1);
        assert_eq!(spec.target().unwrap(), None);
        assert_eq!(spec.seed().unwrap(), None);
        spec.set(names::SEED, "42").unwrap();
        assert_eq!(spec.seed().unwrap(), Some(42));
        spec.set("measurement.interval", "both").unwrap();
        assert_eq!(spec.new_measurements().unwrap().interval(), MeasurementInterval::Both);
        spec.set("measurement.interval", "never").unwrap();
        let e = spec.new_measurements().unwrap_err().to_string();
        assert!(e.contains("property `measurement.interval` = `never` (-p override)"), "{e}");
        let origin = WorkloadSpec::from_mix('b').unwrap().property("readproportion").unwrap().origin.to_string();
        assert!(origin.starts_with("built-in workloadb:"), "{origin}");
    }

    #[test]
    fn ycsb_client_properties_take_effect_or_warn() {
        let mut spec = WorkloadSpec::from_mix('a').unwrap();
        for kv in [
            "status.interval=3",
            "dotransactions=false",
            "exportfile=/tmp/out.txt",
            "hdrhistogram.fileoutput=true",
            "hdrhistogram.output.path=/tmp/h-",
            "measurementtype=hdrhistogram",
            "exporter=site.ycsb.measurements.exporter.TextMeasurementsExporter",
        ] {
            spec.set_override(kv).unwrap();
        }
        assert!(spec.warnings().is_empty(), "{:?}", spec.warnings());
        assert_eq!(spec.status_interval().unwrap(), Duration::from_secs(3));
        assert!(!spec.do_transactions().unwrap());
        assert_eq!(spec.export_file(), Some(PathBuf::from("/tmp/out.txt")));
        assert_eq!(spec.hdr_file_output().unwrap(), Some(PathBuf::from("/tmp/h-ycsb.hlog")));
        assert_eq!(spec.hdr_file_prefix().unwrap().as_deref(), Some("/tmp/h-"));

        let mut other = WorkloadSpec::from_mix('a').unwrap();
        for kv in [
            "measurementtype=timeseries",
            "exporter=site.ycsb.measurements.exporter.JSONMeasurementsExporter",
            "measurement.histogram.verbose=true",
            "db=site.ycsb.BasicDB",
            "latencytrackederrors=NOT_FOUND",
            "status.interval=0",
        ] {
            other.set_override(kv).unwrap();
        }
        let w = other.warnings().join("\n");
        for key in ["measurementtype", "exporter", "measurement.histogram.verbose", "`db`", "latencytrackederrors"] {
            assert!(w.contains(key), "no warning for {key}: {w}");
        }
        assert!(other.status_interval().is_err());
        assert!(other.do_transactions().unwrap());
        assert_eq!(other.hdr_file_output().unwrap(), None);
        assert_eq!(other.hdr_file_prefix().unwrap(), None);
    }

    #[test]
    fn reads_files_and_reports_missing_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("myworkload");
        std::fs::write(&path, "recordcount=10\nreadproportion=1\nbogus=1\n").unwrap();
        let mut spec = WorkloadSpec::from_file(&path).unwrap();
        assert_eq!(spec.get("recordcount"), Some("10"));
        assert_eq!(spec.warnings().len(), 1);
        // A second file overriding the first is layering, not a mistake.
        let more = dir.path().join("more");
        std::fs::write(&more, "recordcount=20\n").unwrap();
        spec.load_file(&more).unwrap();
        assert_eq!(spec.get("recordcount"), Some("20"));
        assert_eq!(spec.warnings().len(), 1);
        assert!(spec.warnings()[0].contains("myworkload:3: unknown property `bogus`"));
        let e = WorkloadSpec::from_file(&dir.path().join("nope")).unwrap_err().to_string();
        assert!(e.contains("reading workload file") && e.contains("nope"), "{e}");
    }
}
