//! `boomctl sweep`: grids of benchmark runs that reproduce the paper's figures, their
//! raw results, plots and a summary against the paper.
//!
//! A sweep runs one or more [`Preset`]s. Each preset expands into a grid of
//! [`Point`]s (the axes can be overridden, see [`SweepOptions`]); each point is one
//! measurement whose parameters and results become **one CSV row** in
//! `<out>/<preset>.csv`, written as soon as the point finishes, so an interrupted
//! sweep loses at most one point and `--resume` skips the points already in the CSV
//! (matched by the `point` column).
//!
//! After the runs, [`render`] reads the CSV files back (and only them): it writes the
//! comparisons (`<preset>-compare.csv`, `SUMMARY.md`, and the table on stdout) and draws
//! every figure as PNG and SVG ([`plot`]). `boomctl sweep --plot-only DIR` calls
//! [`render`] alone. [`setup`] writes `SETUP.md` (machine, transport, flush primitive,
//! durability, version, the exact command).
//!
//! Each preset is one file under [`presets`] behind [`PresetDef`] (its grid, CSV
//! columns, what a point runs, its figures and summary); this driver knows none by
//! name. What each measures, and how, is in its module doc and in `SETUP.md`.

pub mod components;
pub mod context;
pub mod paper;
pub mod plot;
pub mod presets;
pub mod resume;
pub mod setup;
pub mod summary;

pub use presets::{Meta, Preset, PresetDef};

/// The column that numbers a point's repeats (0, 1, ...).
pub const REPEAT: &str = "repeat";

/// The column with the machine's speed sample before the run (see
/// [`context::COMMON`]).
pub const SPEED: &str = "speed_us";

/// The column with the cache-line round trip between two CPUs before the run (see
/// [`context::COMMON`]).
pub const HANDOFF: &str = "handoff_ns";

/// Columns later versions added, with what a file written before each reads as: no
/// `repeat` column is one run per point (repeat 0); no `speed_us` or `handoff_ns`, no
/// sample (empty); no `client_threads` (peers), one thread per client (empty).
const ADDED_COLUMNS: [(&str, &str); 4] = [(REPEAT, "0"), (SPEED, ""), (HANDOFF, ""), ("client_threads", "")];

use std::any::Any;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Instant;

use crate::bench::runner::Progress;
use crate::pmem::FlushKind;
use crate::transport::{Backend, Endpoint};
use crate::units::{parse_bytes, short_bytes};
use crate::wire::Protocol;

/// Errors of a sweep: the library's, plus files that cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// A library call failed.
    #[error(transparent)]
    Lib(#[from] crate::error::Error),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A results file does not parse.
    #[error("{}{}: {problem}", path.display(), line.map(|l| format!(", line {l}")).unwrap_or_default())]
    Csv {
        /// The file.
        path: PathBuf,
        /// The line (1-based, the header is line 1), when known.
        line: Option<usize>,
        /// What is wrong.
        problem: String,
    },
    /// A grid file or axis value is invalid.
    #[error("{0}")]
    Invalid(String),
    /// A figure could not be drawn.
    #[error("drawing {figure}: {problem}")]
    Plot {
        /// The figure's file stem.
        figure: String,
        /// What failed.
        problem: String,
    },
}

/// Result of sweep functions.
pub type Result<T, E = SweepError> = std::result::Result<T, E>;

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SweepError + '_ {
    move |source| SweepError::Io { path: path.to_path_buf(), source }
}

/// Removes the HdrHistogram logs of `preset`'s earlier runs in `dir` (`--overwrite`):
/// a log whose point is not in the new grid would stay beside results that no longer
/// name it, and a reader could not tell it from this run's.
fn remove_logs(preset: Preset, dir: &Path) -> Result<()> {
    let prefix = format!("{}-", preset.name());
    // Another preset whose name begins with this one's and a dash owns its own logs.
    let others: Vec<String> = Preset::ALL
        .iter()
        .filter(|p| p.name() != preset.name() && p.name().starts_with(&prefix))
        .map(|p| format!("{}-", p.name()))
        .collect();
    for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let path = e.map_err(io_err(dir))?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else { continue };
        if name.starts_with(&prefix) && name.ends_with(".hlog") && !others.iter().any(|o| name.starts_with(o)) {
            std::fs::remove_file(&path).map_err(io_err(&path))?;
        }
    }
    Ok(())
}

/// Parses a preset list: `all` or names separated by commas.
pub fn parse_presets(s: &str) -> Result<Vec<Preset>> {
    if s.trim().eq_ignore_ascii_case("all") {
        return Ok(Preset::ALL.to_vec());
    }
    s.split(',').map(Preset::from_str).collect()
}

/// A request distribution of the skew axis: uniform, or a Zipf law with this theta.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Skew {
    /// Uniform over the keys.
    Uniform,
    /// True Zipf over the key space with this constant.
    Zipf(f64),
}

impl Skew {
    /// `uniform` or the theta (`0.99`).
    pub fn label(self) -> String {
        match self {
            Skew::Uniform => "uniform".into(),
            Skew::Zipf(t) => format!("{t}"),
        }
    }
}

impl FromStr for Skew {
    type Err = SweepError;
    fn from_str(s: &str) -> Result<Skew> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("uniform") || t == "0" {
            return Ok(Skew::Uniform);
        }
        match t.parse::<f64>() {
            Ok(v) if v > 0.0 && v.is_finite() && v < 100.0 => Ok(Skew::Zipf(v)),
            _ => Err(SweepError::Invalid(format!("'{s}' is not a skew (uniform, or a Zipf theta such as 0.99)"))),
        }
    }
}

/// The axes a user can override (`None`: the preset's own values).
#[derive(Clone, Debug, Default)]
pub struct Axes {
    /// Value (or message) sizes in bytes.
    pub sizes: Option<Vec<u64>>,
    /// Protocols.
    pub protocols: Option<Vec<Protocol>>,
    /// Client threads.
    pub threads: Option<Vec<usize>>,
    /// Request skews.
    pub thetas: Option<Vec<Skew>>,
    /// Segment sizes in bytes.
    pub segment_sizes: Option<Vec<u64>>,
    /// YCSB mixes (`a`..`f`).
    pub mixes: Option<Vec<char>>,
    /// Flush instructions (writeback preset).
    pub flushes: Option<Vec<FlushKind>>,
    /// Measured operations per run.
    pub ops: Option<u64>,
    /// Keys of the space experiments.
    pub keys: Option<u64>,
    /// Server worker threads of embedded servers.
    pub workers: Option<usize>,
    /// peers: the threads that carry the clients. With it, each count of the threads
    /// axis is a number of clients, spread over this many threads (fewer when the count
    /// is smaller), each keeping its clients' requests in flight together
    /// (`RunOptions::clients`); without it, one thread per client, as YCSB has.
    pub client_threads: Option<usize>,
}

/// Refuses an axis of `axes` that none of `presets` uses: given on the command line,
/// it would be ignored without a word. (A grid file's axes may serve other presets.)
pub fn check_axes_used(presets: &[Preset], axes: &Axes) -> Result<()> {
    for axis in axes.given() {
        if presets.iter().any(|p| p.def().meta().axes.contains(&axis)) {
            continue;
        }
        let names: Vec<String> = presets.iter().map(ToString::to_string).collect();
        let mut uses: Vec<String> = Vec::new();
        for a in presets.iter().flat_map(|p| p.def().meta().axes.iter()) {
            let flag = format!("--{}", a.replace('_', "-"));
            if !uses.contains(&flag) {
                uses.push(flag);
            }
        }
        return Err(SweepError::Invalid(format!(
            "--{}: {} does not use it (it uses {})",
            axis.replace('_', "-"),
            names.join(", "),
            uses.join(", ")
        )));
    }
    Ok(())
}

/// Parses a comma-separated list with `f`, naming the axis in errors.
pub fn parse_list<T>(axis: &str, s: &str, f: impl Fn(&str) -> Result<T>) -> Result<Vec<T>> {
    let v: Vec<T> = s
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| f(x).map_err(|e| SweepError::Invalid(format!("--{axis}: {e}"))))
        .collect::<Result<_>>()?;
    if v.is_empty() {
        return Err(SweepError::Invalid(format!("--{axis}: empty list")));
    }
    Ok(v)
}

/// Parses a byte size (`32`, `1k`, `64M`).
pub fn parse_size(s: &str) -> Result<u64> {
    parse_bytes(s).map_err(|e| SweepError::Invalid(e.to_string()))
}

impl Axes {
    /// The axes given, by field name (as [`presets::Meta::axes`] lists them).
    pub fn given(&self) -> Vec<&'static str> {
        let a = self;
        [
            ("sizes", a.sizes.is_some()),
            ("protocols", a.protocols.is_some()),
            ("threads", a.threads.is_some()),
            ("thetas", a.thetas.is_some()),
            ("segment_sizes", a.segment_sizes.is_some()),
            ("mixes", a.mixes.is_some()),
            ("flushes", a.flushes.is_some()),
            ("ops", a.ops.is_some()),
            ("keys", a.keys.is_some()),
            ("workers", a.workers.is_some()),
            ("client_threads", a.client_threads.is_some()),
        ]
        .into_iter()
        .filter_map(|(n, given)| given.then_some(n))
        .collect()
    }

    /// Sets one axis from its name and a list (`sizes`, `protocols`, ...); the names
    /// are the long options without dashes, `_` or `-` both accepted.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let key = name.trim().replace('_', "-").to_ascii_lowercase();
        match key.as_str() {
            "sizes" => self.sizes = Some(parse_list("sizes", value, parse_size)?),
            "protocols" => {
                // `all`: every protocol, as when the axis is not given.
                self.protocols = if value.trim().eq_ignore_ascii_case("all") {
                    Some(Protocol::ALL.to_vec())
                } else {
                    Some(parse_list("protocols", value, |x| x.parse::<Protocol>().map_err(SweepError::Invalid))?)
                };
            }
            "threads" => self.threads = Some(parse_list("threads", value, thread_count)?),
            "thetas" => self.thetas = Some(parse_list("thetas", value, Skew::from_str)?),
            "segment-sizes" => self.segment_sizes = Some(parse_list("segment-sizes", value, parse_size)?),
            "mixes" => {
                self.mixes = Some(parse_list("mixes", value, |x| {
                    let c = x.trim_start_matches("workload").chars().next().unwrap_or(' ').to_ascii_lowercase();
                    if x.trim_start_matches("workload").len() == 1 && ('a'..='f').contains(&c) && c != 'e' {
                        Ok(c)
                    } else {
                        Err(SweepError::Invalid(format!(
                            "'{x}' is not a YCSB mix the sweep runs (a, b, c, d, f; e needs scans, BOOM only)"
                        )))
                    }
                })?);
            }
            "flushes" => {
                self.flushes =
                    Some(parse_list("flushes", value, |x| x.parse::<FlushKind>().map_err(SweepError::Invalid))?);
            }
            "ops" => self.ops = Some(parse_count("ops", value)?),
            "keys" => self.keys = Some(parse_count("keys", value)?),
            "workers" => self.workers = Some(parse_count("workers", value)? as usize),
            "client-threads" => {
                self.client_threads = Some(
                    thread_count(value.trim()).map_err(|e| SweepError::Invalid(format!("--client-threads: {e}")))?,
                );
            }
            other => {
                return Err(SweepError::Invalid(format!(
                    "unknown axis '{other}' (expected sizes, protocols, threads, thetas, segment-sizes, mixes, \
                     flushes, ops, keys, workers, client-threads)"
                )))
            }
        }
        Ok(())
    }

    /// Takes every axis `other` sets.
    pub fn override_with(&mut self, other: &Axes) {
        macro_rules! take {
            ($($f:ident),*) => { $( if other.$f.is_some() { self.$f = other.$f.clone(); } )* };
        }
        take!(sizes, protocols, threads, thetas, segment_sizes, mixes, flushes, ops, keys, workers, client_threads);
    }
}

/// A count of threads, 1 to 1024.
fn thread_count(x: &str) -> Result<usize> {
    match x.parse::<usize>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n),
        _ => Err(SweepError::Invalid(format!("'{x}' is not a thread count (1..1024)"))),
    }
}

fn parse_count(axis: &str, s: &str) -> Result<u64> {
    let v = parse_bytes(s).map_err(|e| SweepError::Invalid(format!("--{axis}: {e}")))?;
    if v == 0 {
        return Err(SweepError::Invalid(format!("--{axis} must be at least 1")));
    }
    Ok(v)
}

/// A grid from a file (`--grid workloads/sweep-small.grid`): `key = value` lines,
/// `#` comments. Keys: `preset` (names or `all`), `transport`, `quick` (true/false),
/// `repeats`, and any axis of [`Axes::set`].
#[derive(Clone, Debug, Default)]
pub struct GridFile {
    /// Presets named in the file.
    pub presets: Option<Vec<Preset>>,
    /// Transport named in the file.
    pub transport: Option<Backend>,
    /// Quick mode.
    pub quick: Option<bool>,
    /// Runs of every point.
    pub repeats: Option<usize>,
    /// Axes.
    pub axes: Axes,
}

impl GridFile {
    /// Reads and parses `path`.
    pub fn read(path: &Path) -> Result<GridFile> {
        let text = std::fs::read_to_string(path).map_err(io_err(path))?;
        GridFile::parse(&text).map_err(|e| SweepError::Csv {
            path: path.to_path_buf(),
            line: None,
            problem: e.to_string(),
        })
    }

    /// Parses grid file text.
    pub fn parse(text: &str) -> Result<GridFile> {
        let mut g = GridFile::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = |e: SweepError| SweepError::Invalid(format!("line {}: {e}", i + 1));
            let (k, v) = line
                .split_once('=')
                .ok_or_else(|| SweepError::Invalid(format!("line {}: expected key = value, got '{line}'", i + 1)))?;
            let (k, v) = (k.trim(), v.trim());
            match k {
                "preset" | "presets" => g.presets = Some(parse_presets(v).map_err(at)?),
                "transport" => {
                    g.transport = Some(v.parse::<Backend>().map_err(|e| at(SweepError::Invalid(e.to_string())))?);
                }
                "repeats" => {
                    g.repeats = Some(match v.parse::<usize>() {
                        Ok(n) if (1..=100).contains(&n) => n,
                        _ => return Err(at(SweepError::Invalid(format!("repeats = '{v}': expected 1..100")))),
                    });
                }
                "quick" => {
                    g.quick = Some(match v {
                        "true" | "yes" | "1" => true,
                        "false" | "no" | "0" => false,
                        _ => return Err(at(SweepError::Invalid(format!("quick = '{v}': expected true or false")))),
                    });
                }
                _ => g.axes.set(k, v).map_err(at)?,
            }
        }
        Ok(g)
    }
}

/// Everything a sweep needs.
#[derive(Clone, Debug)]
pub struct SweepOptions {
    /// Presets to run, in order.
    pub presets: Vec<Preset>,
    /// Small op counts and fewer points.
    pub quick: bool,
    /// Output directory.
    pub out: PathBuf,
    /// Transport (embedded servers, and the transport floor).
    pub backend: Backend,
    /// A running server to drive instead of embedded ones.
    pub server: Option<Endpoint>,
    /// Axis overrides.
    pub axes: Axes,
    /// Skip points already in the CSV files.
    pub resume: bool,
    /// Start the CSV files again when they exist.
    pub overwrite: bool,
    /// Progress display.
    pub progress: Progress,
    /// Directory for the embedded servers' temporary pools.
    pub pmem_dir: Option<PathBuf>,
    /// Seed of the operation streams.
    pub seed: u64,
    /// Runs of every point, interleaved (every point once, then again).
    pub repeats: usize,
    /// The command line, for SETUP.md.
    pub command: String,
    /// Where embedded servers' workers and the client threads run
    /// ([`crate::cpus::Layout::place`]); SETUP.md says where each ran.
    pub pin: crate::cpus::Placement,
}

impl SweepOptions {
    /// Options for `presets` writing into `out`, everything else default.
    pub fn new(presets: Vec<Preset>, out: PathBuf) -> SweepOptions {
        SweepOptions {
            presets,
            quick: false,
            out,
            backend: Backend::Shm,
            server: None,
            axes: Axes::default(),
            resume: false,
            overwrite: false,
            progress: Progress::Quiet,
            pmem_dir: None,
            seed: 1,
            repeats: 1,
            command: String::new(),
            pin: crate::cpus::Placement::Auto,
        }
    }

    /// Where embedded servers' workers and the client threads run for a point of one
    /// client thread over the sweep's transport (`None`: not pinned: `pin` off, a
    /// `--server`, or fewer than two CPUs).
    pub fn layout(&self) -> Option<crate::cpus::Layout> {
        self.layout_for(1, self.transport())
    }

    /// [`SweepOptions::layout`] for a point of `threads` client threads over `backend`.
    pub fn layout_for(&self, threads: usize, backend: Backend) -> Option<crate::cpus::Layout> {
        if self.server.is_some() {
            return None;
        }
        let allowed = crate::cpus::CpuList::allowed()?;
        let default = crate::server::default_workers();
        let colocatable = backend != Backend::Verbs;
        crate::cpus::Layout::place(&allowed, self.pin, self.axes.workers, default, threads, colocatable)
    }

    /// The protocols of the grids: the `--protocols` axis, or every protocol.
    pub fn protocols(&self) -> Vec<Protocol> {
        self.axes.protocols.clone().unwrap_or_else(|| Protocol::ALL.to_vec())
    }

    /// The transport actually used: the server's, or the chosen backend.
    pub fn transport(&self) -> Backend {
        self.server.as_ref().map(Endpoint::backend).unwrap_or(self.backend)
    }
}

/// The default output directory: `plots/<date>-<host>`.
pub fn default_out_dir() -> PathBuf {
    PathBuf::from("plots").join(format!("{}-{}", setup::today(), setup::hostname()))
}

/// One grid point: a preset and its coordinates (of the preset's own type; the
/// driver only reads the point's id).
#[derive(Clone)]
pub struct Point {
    /// The preset.
    pub preset: Preset,
    id: String,
    params: Arc<dyn Any + Send + Sync>,
}

impl Point {
    /// A point of `preset` with key `id` in the CSV and the preset's coordinates.
    pub fn new<P: Any + Send + Sync>(preset: Preset, id: String, params: P) -> Point {
        Point { preset, id, params: Arc::new(params) }
    }

    /// The point's key in the CSV (`point` column): the coordinates, `/`-separated.
    pub fn id(&self) -> String {
        self.id.clone()
    }

    /// A short label for progress output.
    pub fn label(&self) -> String {
        format!("{} {}", self.preset, self.id)
    }

    /// The coordinates, as the type the preset stored.
    pub fn params<P: Any>(&self) -> Result<&P> {
        self.params.downcast_ref::<P>().ok_or_else(|| {
            SweepError::Invalid(format!("internal: point {} has another preset's coordinates", self.label()))
        })
    }
}

impl fmt::Debug for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Point({})", self.label())
    }
}

impl PartialEq for Point {
    fn eq(&self, other: &Point) -> bool {
        self.preset == other.preset && self.id == other.id
    }
}

/// The preset's grid: defaults (quick or full) with the user's overrides.
pub fn grid(preset: Preset, o: &SweepOptions) -> Result<Vec<Point>> {
    let pts = preset.def().grid(o)?;
    if preset.needs_embedded() && o.server.is_some() {
        return Err(SweepError::Invalid(format!(
            "the {preset} preset varies the server's settings, so it runs its own embedded servers: drop --server"
        )));
    }
    Ok(pts)
}

pub(crate) fn check_values(sizes: &[u64]) -> Result<()> {
    match sizes.iter().find(|&&s| s == 0 || s > 1 << 20) {
        Some(bad) => Err(SweepError::Invalid(format!("--sizes: {bad} is outside 1 B..1 MiB (the largest value)"))),
        None => Ok(()),
    }
}

pub(crate) fn check_segments(segs: &[u64]) -> Result<()> {
    let min = crate::log::format::MIN_SEGMENT_SIZE;
    match segs.iter().find(|&&s| s < min || s % 4096 != 0 || s > 1 << 32) {
        Some(bad) => Err(SweepError::Invalid(format!(
            "--segment-sizes: {bad} must be a multiple of 4 KiB between {} and 4 GiB",
            short_bytes(min)
        ))),
        None => Ok(()),
    }
}

/// A CSV file read back: the header and the rows, with the file name for errors.
#[derive(Clone, Debug)]
pub struct Table {
    /// The file.
    pub path: PathBuf,
    /// Column names.
    pub header: Vec<String>,
    /// Data rows (as many fields as the header).
    pub rows: Vec<Vec<String>>,
    /// After [`Table::aggregate`]: the rows read, one per repeat of a point (`rows`
    /// then holds one per point). Empty otherwise.
    pub runs: Vec<Vec<String>>,
}

impl Table {
    /// Reads `path`; every row must have as many fields as the header.
    pub fn read(path: &Path) -> Result<Table> {
        let bytes = std::fs::read(path).map_err(io_err(path))?;
        // What follows the last line end is a row whose write was cut short (a full
        // disk): not a result. `CsvSink::open` cuts it before the next row.
        let whole = crate::bench::report::whole_lines_len(&bytes);
        Table::parse(&bytes[..whole], path)
    }

    /// Parses CSV bytes; `path` names them in errors.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Table> {
        let csv_err =
            |line: Option<usize>, problem: String| SweepError::Csv { path: path.to_path_buf(), line, problem };
        let mut r = csv::ReaderBuilder::new().has_headers(true).flexible(false).from_reader(bytes);
        let header: Vec<String> =
            r.headers().map_err(|e| csv_err(Some(1), e.to_string()))?.iter().map(String::from).collect();
        if header.is_empty() || header[0] != "point" {
            return Err(csv_err(Some(1), "not a sweep results file (the first column must be `point`)".into()));
        }
        let mut rows = Vec::new();
        for (i, rec) in r.records().enumerate() {
            let rec = rec.map_err(|e| csv_err(Some(i + 2), e.to_string()))?;
            rows.push(rec.iter().map(String::from).collect());
        }
        Ok(Table { path: path.to_path_buf(), header, rows, runs: Vec::new() })
    }

    /// The index of column `name`.
    pub fn col(&self, name: &str) -> Result<usize> {
        self.header.iter().position(|h| h == name).ok_or_else(|| SweepError::Csv {
            path: self.path.clone(),
            line: Some(1),
            problem: format!("no column `{name}`"),
        })
    }

    /// The text of column `name` in row `i`.
    pub fn str(&self, i: usize, name: &str) -> Result<&str> {
        let c = self.col(name)?;
        Ok(self.rows.get(i).and_then(|r| r.get(c)).map(String::as_str).unwrap_or(""))
    }

    /// Column `name` of row `i` as a number (`None` when empty).
    pub fn num(&self, i: usize, name: &str) -> Result<Option<f64>> {
        let s = self.str(i, name)?.trim();
        if s.is_empty() {
            return Ok(None);
        }
        s.parse::<f64>().map(Some).map_err(|_| SweepError::Csv {
            path: self.path.clone(),
            line: Some(i + 2),
            problem: format!("column `{name}`: '{s}' is not a number"),
        })
    }

    /// Column `name` of row `i` as a number, required.
    pub fn req(&self, i: usize, name: &str) -> Result<f64> {
        self.num(i, name)?.ok_or_else(|| SweepError::Csv {
            path: self.path.clone(),
            line: Some(i + 2),
            problem: format!("column `{name}` is empty"),
        })
    }

    /// Reads a preset's CSV: its header must be the preset's columns. A file of an
    /// earlier version, without columns added since (listed in this module), reads with
    /// their defaults filled in.
    pub fn read_preset(preset: Preset, path: &Path) -> Result<Table> {
        let mut t = Table::read(path)?;
        let cols = preset.columns();
        // (position, name, what an older file reads as) of each added column it lacks.
        let absent: Vec<(usize, &str, &str)> = cols
            .iter()
            .enumerate()
            .filter(|(_, c)| !t.header.iter().any(|h| h == *c))
            .filter_map(|(at, c)| ADDED_COLUMNS.iter().find(|a| a.0 == *c).map(|a| (at, a.0, a.1)))
            .collect();
        let without: Vec<&str> = cols.iter().copied().filter(|c| !absent.iter().any(|a| a.1 == *c)).collect();
        if !absent.is_empty() && t.header == without {
            for &(at, name, default) in &absent {
                t.header.insert(at, name.to_string());
                for r in &mut t.rows {
                    r.insert(at.min(r.len()), default.into());
                }
            }
        }
        if t.header != cols {
            return Err(SweepError::Csv {
                path: path.to_path_buf(),
                line: Some(1),
                problem: "its columns are not the ones this version of boomctl writes; use --overwrite or another \
                          --out directory"
                    .into(),
            });
        }
        Ok(t)
    }

    /// One row per point (first-seen order) from the repeats of each: a column whose
    /// repeats all hold the same text keeps it; a numeric column whose repeats differ
    /// holds their median (for an even count the mean of the two middle ones, written
    /// with as many decimals as they have, one more for a half); any other column the
    /// first repeat's text. The rows read are
    /// kept in [`Table::runs`] for intervals across repeats.
    pub fn aggregate(&self) -> Result<Table> {
        let pc = self.col("point")?;
        let mut order: Vec<&str> = Vec::new();
        let mut groups: BTreeMap<&str, Vec<&Vec<String>>> = BTreeMap::new();
        for r in &self.rows {
            let id = r.get(pc).map(String::as_str).unwrap_or("");
            if !groups.contains_key(id) {
                order.push(id);
            }
            groups.entry(id).or_default().push(r);
        }
        let mut rows = Vec::new();
        for id in order {
            let g = &groups[id];
            let row = (0..self.header.len())
                .map(|c| {
                    let texts: Vec<&str> = g.iter().map(|r| r.get(c).map(String::as_str).unwrap_or("")).collect();
                    if texts.iter().all(|x| *x == texts[0]) {
                        return texts[0].to_string();
                    }
                    let nums: Option<Vec<f64>> = texts.iter().map(|x| x.trim().parse::<f64>().ok()).collect();
                    match nums {
                        Some(v) => median_text(&texts, v),
                        None => texts[0].to_string(),
                    }
                })
                .collect();
            rows.push(row);
        }
        Ok(Table { path: self.path.clone(), header: self.header.clone(), rows, runs: self.rows.clone() })
    }

    /// The values of column `name` in every repeat of the point of row `i` (of an
    /// aggregated table), by repeat number; empty cells skipped. One value for a point
    /// run once, or for a table that is not aggregated.
    pub fn across(&self, i: usize, name: &str) -> Result<Vec<(u64, f64)>> {
        let (pc, c) = (self.col("point")?, self.col(name)?);
        let rc = self.col(REPEAT).ok();
        let Some(id) = self.rows.get(i).and_then(|r| r.get(pc)) else { return Ok(Vec::new()) };
        let src = if self.runs.is_empty() { std::slice::from_ref(&self.rows[i]) } else { &self.runs[..] };
        let mut v: Vec<(u64, f64)> = src
            .iter()
            .filter(|r| r.get(pc) == Some(id))
            .filter_map(|r| {
                let x = r.get(c)?.trim().parse::<f64>().ok()?;
                let rep = rc.and_then(|rc| r.get(rc)).and_then(|s| s.parse().ok()).unwrap_or(0);
                Some((rep, x))
            })
            .collect();
        v.sort_by_key(|p| p.0);
        Ok(v)
    }

    /// Row indices whose column `name` equals `value`.
    pub fn rows_where(&self, name: &str, value: &str) -> Result<Vec<usize>> {
        let c = self.col(name)?;
        Ok((0..self.rows.len()).filter(|&i| self.rows[i].get(c).map(String::as_str) == Some(value)).collect())
    }

    /// The distinct values of column `name`, in first-seen order.
    pub fn distinct(&self, name: &str) -> Result<Vec<String>> {
        let c = self.col(name)?;
        let mut seen = Vec::new();
        for r in &self.rows {
            if let Some(v) = r.get(c) {
                if !seen.contains(v) {
                    seen.push(v.clone());
                }
            }
        }
        Ok(seen)
    }
}

/// One result row: column name -> value, in any order.
pub type Row = BTreeMap<&'static str, String>;

/// Appends rows to a preset's CSV file, one flushed write per row.
pub struct CsvSink {
    path: PathBuf,
    columns: &'static [&'static str],
    file: std::fs::File,
    /// Bytes of a torn last row cut when the file was opened (see
    /// [`crate::bench::report::drop_torn_row`]).
    pub torn: u64,
}

impl CsvSink {
    /// Opens (or creates) the preset's CSV in `dir`. An existing file must have the
    /// preset's header; one of an earlier version, without columns added since, is first
    /// rewritten with them (filled in as [`Table::read_preset`] reads it), so a
    /// `--resume` extends it. `fresh` truncates it first.
    pub fn open(preset: Preset, dir: &Path, fresh: bool) -> Result<CsvSink> {
        let path = preset.csv_path(dir);
        let columns = preset.columns();
        if path.exists() && !fresh && Table::read(&path)?.header != columns {
            // Refused here unless the file is an earlier version's.
            let t = Table::read_preset(preset, &path)?;
            let b = csv_records(std::iter::once(&t.header).chain(&t.rows))?;
            // Written beside it and renamed over it: a crash leaves one file or the other.
            let tmp = path.with_extension("csv.upgrade");
            std::fs::write(&tmp, b).map_err(io_err(&tmp))?;
            std::fs::rename(&tmp, &path).map_err(io_err(&path))?;
        }
        let exists = path.exists() && !fresh;
        let mut opts = std::fs::OpenOptions::new();
        opts.create(true);
        if exists {
            opts.read(true).append(true);
        } else {
            opts.write(true).truncate(true);
        }
        let mut file = opts.open(&path).map_err(io_err(&path))?;
        let mut torn = 0;
        if exists {
            // A row cut short (a full disk) would join the next one into a line of the
            // wrong fields; the readers skip it, and so it goes.
            torn = crate::bench::report::drop_torn_row(&file).map_err(io_err(&path))?;
        } else {
            file.write_all(&csv_records([columns])?).map_err(io_err(&path))?;
        }
        Ok(CsvSink { path, columns, file, torn })
    }

    /// Writes one row (columns missing from `row` are empty).
    pub fn write(&mut self, row: &Row) -> Result<()> {
        if let Some(k) = row.keys().find(|k| !self.columns.contains(k)) {
            return Err(SweepError::Invalid(format!("internal: column `{k}` is not in {}", self.path.display())));
        }
        let rec: Vec<&str> = self.columns.iter().map(|c| row.get(c).map(String::as_str).unwrap_or("")).collect();
        self.file.write_all(&csv_records([rec])?).map_err(io_err(&self.path))?;
        self.file.flush().map_err(io_err(&self.path))
    }
}

/// `records` as CSV lines (quoted where a field needs it).
fn csv_records<R: AsRef<[F]>, F: AsRef<[u8]>>(records: impl IntoIterator<Item = R>) -> Result<Vec<u8>> {
    let csv_err = |e: &dyn fmt::Display| SweepError::Invalid(format!("CSV: {e}"));
    let mut w = csv::WriterBuilder::new().has_headers(false).from_writer(Vec::new());
    for r in records {
        w.write_record(r.as_ref()).map_err(|e| csv_err(&e))?;
    }
    w.into_inner().map_err(|e| csv_err(&e))
}

/// The `(point, repeat)` pairs already in a preset's CSV (for `--resume`).
pub fn done_points(preset: Preset, dir: &Path) -> Result<HashSet<(String, u64)>> {
    let path = preset.csv_path(dir);
    if !path.exists() {
        return Ok(HashSet::new());
    }
    let t = Table::read_preset(preset, &path)?;
    let (pc, rc) = (t.col("point")?, t.col(REPEAT)?);
    Ok(t.rows.iter().filter_map(|r| Some((r.get(pc)?.clone(), r.get(rc)?.parse::<u64>().ok()?))).collect())
}

/// What a sweep did.
#[derive(Debug, Default)]
pub struct SweepOutcome {
    /// Points run.
    pub ran: usize,
    /// Points skipped because `--resume` found them.
    pub skipped: usize,
    /// Points that failed (their error).
    pub failed: Vec<(String, String)>,
    /// What rendering wrote.
    pub rendered: Option<RenderOutcome>,
}

/// The median of numeric cells `texts` (their values `v`) as a cell: the middle
/// text itself for an odd count; for an even count the mean of the two middle values,
/// with the decimals of the more precise of them (one more when that cuts a half).
fn median_text(texts: &[&str], v: Vec<f64>) -> String {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let n = order.len();
    if n % 2 == 1 {
        return texts[order[n / 2]].trim().to_string();
    }
    let (a, b) = (order[n / 2 - 1], order[n / 2]);
    let decimals = |t: &str| t.trim().split_once('.').map_or(0, |(_, f)| f.len());
    let mut d = decimals(texts[a]).max(decimals(texts[b]));
    let m = (v[a] + v[b]) / 2.0;
    if (m * 10f64.powi(d as i32)).fract() != 0.0 {
        d += 1;
    }
    format!("{m:.d$}")
}

/// The runs of a preset still to make: `(point, repeat)`.
type Runs = Vec<(Point, u64)>;

/// Runs the sweep: every preset's grid, then [`render`]. Points that fail are
/// reported and skipped (the sweep runs unattended); a `--resume` runs them again.
pub fn run(o: &SweepOptions, out: &mut dyn Write) -> Result<SweepOutcome> {
    // Grids first: bad axes fail before anything runs (or any directory is made).
    let mut plan: Vec<(Preset, Vec<Point>)> = Vec::new();
    for &p in &o.presets {
        if p.needs_embedded() && o.server.is_some() && o.presets.len() > 1 {
            let _ = writeln!(
                out,
                "sweep: skipping {p}: it varies the server's settings, so it needs embedded servers (no --server)"
            );
            continue;
        }
        plan.push((p, grid(p, o)?));
    }
    std::fs::create_dir_all(&o.out).map_err(io_err(&o.out))?;
    // Existing results: refuse to mix into them unless asked.
    // Per preset: the (point, repeat) runs to make, and whether its CSV has no rows yet.
    let mut todo: Vec<(Preset, Runs, bool)> = Vec::new();
    let mut outcome = SweepOutcome::default();
    for (p, pts) in plan {
        let path = p.csv_path(&o.out);
        let done = if o.resume && !o.overwrite { done_points(p, &o.out)? } else { HashSet::new() };
        // A resume has just read them (once is enough).
        let rows = if o.resume {
            done.len()
        } else if path.exists() && !o.overwrite {
            Table::read(&path).map(|t| t.rows.len()).unwrap_or(0)
        } else {
            0
        };
        if rows > 0 && o.resume {
            resume::check(p, o)?;
        }
        if rows > 0 && !o.resume {
            return Err(SweepError::Invalid(format!(
                "{} already has {}: pass --resume to skip them, --overwrite to start again, or --out another \
                 directory",
                path.display(),
                crate::units::count(rows as u64, "result")
            )));
        }
        // Repeats interleaved: every point once, then every point again (A B C A B C),
        // so drift on the machine hits every point alike.
        let mut runs = Vec::new();
        for rep in 0..o.repeats.max(1) as u64 {
            for pt in &pts {
                if done.contains(&(pt.id(), rep)) {
                    outcome.skipped += 1;
                } else {
                    runs.push((pt.clone(), rep));
                }
            }
        }
        todo.push((p, runs, rows == 0));
    }
    let total: usize = todo.iter().map(|t| t.1.len()).sum();
    let resumed = setup::write_setup(o, total > 0)?;
    let prog = SweepProgress::new(o.progress, total as u64);
    if outcome.skipped > 0 {
        prog.println(&format!(
            "resume: {} already in the CSV files skipped",
            crate::units::count(outcome.skipped as u64, "run")
        ));
    }
    let started = Instant::now();
    let probe = crate::bench::busy::LoadProbe::start();
    let mut speed = crate::bench::busy::SampleLog::new(crate::bench::busy::Probe::Speed);
    let mut handoff = crate::bench::busy::SampleLog::new(crate::bench::busy::Probe::Handoff);
    let mut ctx = context::Context::new(o, prog.bars());
    for (preset, runs, starts) in &todo {
        let fresh = o.overwrite && !o.resume;
        if fresh {
            remove_logs(*preset, &o.out)?;
        }
        let mut sink = CsvSink::open(*preset, &o.out, fresh)?;
        if sink.torn > 0 {
            prog.warn(&format!(
                "{}: cut a torn last row ({} bytes without a line end: a write cut short, as by a full disk); its \
                 point runs again",
                preset.csv_path(&o.out).display(),
                sink.torn
            ));
        }
        if *starts {
            // The CSV has no rows yet: they will be measured under this invocation's.
            resume::write(*preset, o)?;
        }
        let pts: Vec<Point> = runs.iter().filter(|r| r.1 == runs[0].1).map(|r| r.0.clone()).collect();
        preset.def().begin(&mut ctx, &pts);
        for (pt, rep) in runs {
            let label = if o.repeats > 1 { format!("{} #{}", pt.label(), rep + 1) } else { pt.label() };
            prog.start(&label);
            // Before the run, not during it: the loop takes a millisecond of one CPU,
            // the round trips a few milliseconds of two.
            let speed_us = crate::bench::busy::speed_sample().as_secs_f64() * 1e6;
            speed.push(speed_us);
            let handoff_ns = match crate::bench::wake::handoff_probe() {
                Ok(ns) => {
                    handoff.push(ns);
                    Some(ns)
                }
                Err(why) => {
                    handoff.miss(&why.to_string());
                    None
                }
            };
            let t0 = Instant::now();
            match ctx.run_point(pt, *rep, context::Probes { speed_us, handoff_ns }) {
                Ok(row) => {
                    sink.write(&row)?;
                    outcome.ran += 1;
                    prog.done(&format!("{label} ({:.1} s)", t0.elapsed().as_secs_f64()));
                }
                Err(SweepError::Lib(e)) if o.server.is_some() && e.is_unreachable() => {
                    // Every other point would fail the same way, each after its timeout.
                    prog.done(&format!("{label} FAILED: {e}"));
                    prog.finish();
                    return Err(SweepError::Invalid(format!(
                        "{label}: {e}: is `boomctl serve` running there? The sweep stops here (--resume \
                         continues it)"
                    )));
                }
                Err(e) => {
                    prog.done(&format!("{label} FAILED: {e}"));
                    outcome.failed.push((label, e.to_string()));
                }
            }
        }
    }
    prog.finish();
    let _ = writeln!(
        out,
        "sweep: {} in {:.1} s ({} skipped, {} failed); results in {}",
        crate::units::count(outcome.ran as u64, "run"),
        started.elapsed().as_secs_f64(),
        outcome.skipped,
        outcome.failed.len(),
        o.out.display()
    );
    for (l, e) in &outcome.failed {
        let _ = writeln!(out, "  failed: {l}: {e}");
    }
    if let Some(load) = probe.finish() {
        let _ = writeln!(out, "sweep: machine {}", load.describe());
        let logs = [&speed, &handoff];
        for d in logs.iter().filter_map(|l| l.describe()) {
            let _ = writeln!(out, "sweep: {d}");
        }
        for w in load.warnings().into_iter().chain(logs.iter().filter_map(|l| l.warning())) {
            let _ = writeln!(out, "warning: {w}: these figures may measure the machine, not the protocols");
        }
        if total > 0 || !o.resume {
            setup::append_load(o, &load, &logs, resumed)?;
        }
    }
    outcome.rendered = Some(render(&o.out, out)?);
    Ok(outcome)
}

/// The file in a sweep directory that lists the figures its last render drew, one file
/// name per line. The next render removes those it does not draw again: a figure of a
/// mix, backend or size no longer in the CSV files (an `--overwrite` with a smaller
/// grid) would otherwise stay beside results that no longer back it, and a reader
/// could not tell it from this run's. A file it does not list is never touched.
pub const FIGURE_LIST: &str = ".figures";

/// Removes the figures of `dir`'s last render (its [`FIGURE_LIST`]) that are not in
/// `drawn`, then lists `drawn` as the last render's; returns the removed files.
fn replace_figures(dir: &Path, drawn: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let list = dir.join(FIGURE_LIST);
    let names: Vec<&str> = drawn.iter().filter_map(|p| p.file_name()?.to_str()).collect();
    let mut removed = Vec::new();
    let old = match std::fs::read_to_string(&list) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(io_err(&list)(e)),
    };
    for name in old.lines() {
        // Only a figure's plain name: the list is a file like any other, and an edited
        // one must not make a render remove anything else.
        let plain = Path::new(name).file_name() == Some(std::ffi::OsStr::new(name)) && !name.contains(['/', '\\']);
        let figure = plain && (name.ends_with(".png") || name.ends_with(".svg"));
        if !figure || names.contains(&name) {
            continue;
        }
        let path = dir.join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&path)(e)),
        }
    }
    let text: String = names.iter().map(|n| format!("{n}\n")).collect();
    std::fs::write(&list, text).map_err(io_err(&list))?;
    Ok(removed)
}

/// What [`render`] wrote.
#[derive(Debug, Default)]
pub struct RenderOutcome {
    /// Figure files (PNG and SVG).
    pub figures: Vec<PathBuf>,
    /// Figures of the directory's last render that this one did not draw again, removed
    /// (see [`FIGURE_LIST`]).
    pub removed: Vec<PathBuf>,
    /// Presets found in the directory.
    pub presets: Vec<Preset>,
}

/// Reads every preset CSV in `dir`, writes the comparisons and `SUMMARY.md` (and
/// prints the summary to `out`), and draws every figure. Computes nothing that is not
/// in the CSV files.
pub fn render(dir: &Path, out: &mut dyn Write) -> Result<RenderOutcome> {
    let mut r = RenderOutcome::default();
    let mut spreads = Vec::new();
    let mut md = String::from("# Sweep summary\n\n");
    md.push_str(&format!(
        "Measured results against the paper's (BOOM-KV, HTL 2023). Raw results: the CSV files beside this one; \
         machine and settings: SETUP.md. Re-render with `boomctl sweep --plot-only {}`.\n\n",
        dir.display()
    ));
    for p in Preset::ALL {
        let path = p.csv_path(dir);
        if !path.exists() {
            continue;
        }
        let t = Table::read_preset(p, &path)?.aggregate()?;
        if let Some(w) = summary::spread_warning(&t)? {
            spreads.push(format!("- {p}: {w}"));
        }
        r.presets.push(p);
        let s = summary::summarize(p, &t, dir)?;
        let _ = writeln!(out, "\n{}", s.text);
        md.push_str(&s.markdown);
        md.push('\n');
        r.figures.extend(plot::render_preset(p, &t, dir)?);
    }
    if r.presets.is_empty() {
        return Err(SweepError::Invalid(format!("{}: no sweep CSV files (<preset>.csv) to render", dir.display())));
    }
    let sp = dir.join("SUMMARY.md");
    std::fs::write(&sp, md).map_err(io_err(&sp))?;
    setup::record_spread(dir, &spreads)?;
    r.removed = replace_figures(dir, &r.figures)?;
    let _ = writeln!(
        out,
        "\nwrote {} (PNG + SVG) and SUMMARY.md in {}",
        crate::units::count(r.figures.len() as u64 / 2, "figure"),
        dir.display()
    );
    if !r.removed.is_empty() {
        let names: Vec<String> =
            r.removed.iter().filter_map(|p| Some(p.file_name()?.to_string_lossy().into_owned())).collect();
        let _ = writeln!(
            out,
            "removed {} the last render drew and this one does not (no CSV row backs them): {}",
            crate::units::count(r.removed.len() as u64, "figure file"),
            names.join(", ")
        );
    }
    Ok(r)
}

/// Progress of a sweep: an overall bar (runs done / total, ETA) with the current
/// run's bar below it on a terminal; one line per run otherwise.
pub struct SweepProgress {
    mode: Progress,
    multi: Option<indicatif::MultiProgress>,
    overall: Option<indicatif::ProgressBar>,
    total: u64,
    done: std::cell::Cell<u64>,
    started: Instant,
}

impl SweepProgress {
    /// A display for `total` runs.
    pub fn new(mode: Progress, total: u64) -> SweepProgress {
        let (multi, overall) = if mode == Progress::Bar {
            let m = indicatif::MultiProgress::new();
            let b = m.add(indicatif::ProgressBar::new(total));
            let style = indicatif::ProgressStyle::with_template(
                "sweep [{elapsed_precise}] {wide_bar} {pos}/{len} runs, eta {eta} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            b.set_style(style);
            (Some(m), Some(b))
        } else {
            (None, None)
        };
        SweepProgress { mode, multi, overall, total, done: std::cell::Cell::new(0), started: Instant::now() }
    }

    /// The bars the runs add theirs to.
    pub fn bars(&self) -> Option<indicatif::MultiProgress> {
        self.multi.clone()
    }

    fn println(&self, s: &str) {
        match (&self.multi, self.mode) {
            (Some(m), _) => {
                let _ = m.println(s);
            }
            (None, Progress::Lines) => eprintln!("{s}"),
            _ => {}
        }
    }

    /// A warning: printed above the bars, or on standard error (also with --quiet).
    fn warn(&self, s: &str) {
        match &self.multi {
            Some(m) => {
                let _ = m.println(format!("warning: {s}"));
            }
            None => eprintln!("warning: {s}"),
        }
    }

    fn start(&self, label: &str) {
        if let Some(b) = &self.overall {
            b.set_message(label.to_string());
        }
    }

    fn done(&self, msg: &str) {
        let n = self.done.get() + 1;
        self.done.set(n);
        if let Some(b) = &self.overall {
            b.inc(1);
        }
        let el = self.started.elapsed().as_secs_f64();
        let eta = if n > 0 { el / n as f64 * (self.total.saturating_sub(n)) as f64 } else { 0.0 };
        self.println(&format!("[{n}/{}] {msg}; eta {eta:.0} s", self.total));
    }

    fn finish(&self) {
        if let Some(b) = &self.overall {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_of_repeats_is_the_mean_of_the_middle_two() {
        // The lower middle was shown: -17.8% for changes of -25.0, -17.8, -9.5, -5.8.
        let cells = |t: &[&str]| median_text(t, t.iter().map(|x| x.parse().unwrap()).collect());
        assert_eq!(cells(&["-24.97", "-17.81", "-9.54", "-5.76"]), "-13.675");
        assert_eq!(cells(&["1.292", "1.652", "1.523", "1.612"]), "1.5675");
        assert_eq!(cells(&["3", "1", "2"]), "2");
        assert_eq!(cells(&["10", "20"]), "15");
        assert_eq!(cells(&["1", "2"]), "1.5");
        assert_eq!(summary::median_sorted(&[1.0, 2.0, 4.0, 8.0]), 3.0);
    }

    #[test]
    fn grid_files_and_axes_parse() {
        let g = GridFile::parse(
            "# small\npreset = latency, skew\ntransport = tcp\nquick = true\nsizes = 32, 1k\nprotocols = boom,rdmp\n\
             thetas = uniform, 0.99\nsegment_sizes = 1M\nops = 2k\n",
        )
        .unwrap();
        assert_eq!(g.presets, Some(vec![presets::latency::PRESET, presets::skew::PRESET]));
        assert_eq!(g.transport, Some(Backend::Tcp));
        assert_eq!(g.axes.sizes, Some(vec![32, 1024]));
        assert_eq!(g.axes.protocols, Some(vec![Protocol::Boom, Protocol::Rdmp]));
        assert_eq!(g.axes.thetas, Some(vec![Skew::Uniform, Skew::Zipf(0.99)]));
        assert_eq!(g.axes.ops, Some(2048));
        assert!(GridFile::parse("sizes = 12q").is_err());
        assert!(GridFile::parse("nonsense").unwrap_err().to_string().contains("line 1"));
        assert!(GridFile::parse("colour = red").is_err());
        assert_eq!(parse_presets("all").unwrap().len(), Preset::ALL.len());
        assert!(parse_presets("latency,nope").is_err());
    }

    #[test]
    fn grids_have_stable_unique_ids() {
        for p in Preset::ALL {
            for quick in [true, false] {
                let mut o = SweepOptions::new(vec![p], PathBuf::from("/nonexistent"));
                o.quick = quick;
                let g = grid(p, &o).unwrap();
                assert!(!g.is_empty(), "{p}");
                let ids: HashSet<String> = g.iter().map(Point::id).collect();
                assert_eq!(ids.len(), g.len(), "{p}: ids are unique");
            }
        }
        let mut o = SweepOptions::new(vec![presets::latency::PRESET], PathBuf::from("/x"));
        o.axes.sizes = Some(vec![32, 4096]);
        o.axes.protocols = Some(vec![Protocol::Boom]);
        let g = grid(presets::latency::PRESET, &o).unwrap();
        assert_eq!(g.iter().map(Point::id).collect::<Vec<_>>(), ["boom/32", "boom/4096"]);
        o.server = Some(Endpoint::parse("127.0.0.1:1").unwrap());
        assert!(grid(presets::writeback::PRESET, &o).is_err());
    }

    #[test]
    fn tables_report_the_file_and_line() {
        let p = Path::new("x.csv");
        let t = Table::parse(b"point,a,b\np1,1.5,\np2,zz,3\n", p).unwrap();
        assert_eq!(t.req(0, "a").unwrap(), 1.5);
        assert_eq!(t.num(0, "b").unwrap(), None);
        let e = t.req(1, "a").unwrap_err().to_string();
        assert!(e.contains("x.csv, line 3") && e.contains("zz"), "{e}");
        assert!(t.col("nope").unwrap_err().to_string().contains("no column `nope`"));
        assert!(Table::parse(b"a,b\n1,2\n", p).is_err());
        assert!(Table::parse(b"point,a\np1,1,2\n", p).unwrap_err().to_string().contains("line 2"));
    }

    #[test]
    fn a_csv_written_before_a_column_was_added_reads_with_its_default() {
        let dir = tempfile::tempdir().unwrap();
        let preset = presets::transport::PRESET;
        let cols = preset.columns();
        let row = |skip: &[&str]| {
            cols.iter()
                .filter(|c| !skip.contains(c))
                .map(|c| if *c == "point" { "p1" } else { "1" })
                .collect::<Vec<_>>()
        };
        let write = |skip: &[&str]| {
            let header: Vec<&str> = cols.iter().copied().filter(|c| !skip.contains(c)).collect();
            let text = format!("{}\n{}\n", header.join(","), row(skip).join(","));
            let path = dir.path().join(format!("{}.csv", skip.len()));
            std::fs::write(&path, text).unwrap();
            path
        };
        // Before `handoff_ns`, and before `repeat`, `speed_us` and `handoff_ns`.
        for skip in [&[HANDOFF][..], &[REPEAT, SPEED, HANDOFF][..]] {
            let t = Table::read_preset(preset, &write(skip)).unwrap();
            assert_eq!(t.header, cols, "{skip:?}");
            assert_eq!(t.str(0, HANDOFF).unwrap(), "", "{skip:?}");
            assert_eq!(t.num(0, HANDOFF).unwrap(), None, "{skip:?}");
            let repeat = if skip.contains(&REPEAT) { "0" } else { "1" };
            assert_eq!(t.str(0, REPEAT).unwrap(), repeat, "{skip:?}");
        }
        // A column this version does not know of: refused.
        let path = dir.path().join("odd.csv");
        std::fs::write(&path, format!("{},odd\n{},1\n", cols.join(","), row(&[]).join(","))).unwrap();
        assert!(Table::read_preset(preset, &path).is_err());
        // A --resume extends an earlier version's file: rewritten with the columns added
        // since, its rows kept, then the new row appended.
        let out = tempfile::tempdir().unwrap();
        std::fs::copy(write(&[HANDOFF]), preset.csv_path(out.path())).unwrap();
        let mut sink = CsvSink::open(preset, out.path(), false).unwrap();
        let mut r = Row::new();
        r.insert("point", "p2".into());
        r.insert(HANDOFF, "99".into());
        sink.write(&r).unwrap();
        let t = Table::read(&preset.csv_path(out.path())).unwrap();
        assert_eq!(t.header, cols);
        assert_eq!((t.str(0, "point").unwrap(), t.str(0, HANDOFF).unwrap()), ("p1", ""));
        assert_eq!((t.str(1, "point").unwrap(), t.str(1, HANDOFF).unwrap()), ("p2", "99"));
        assert!(!preset.csv_path(out.path()).with_extension("csv.upgrade").exists());
        // A file of no version is left alone.
        let odd = std::fs::read(&path).unwrap();
        std::fs::copy(&path, preset.csv_path(out.path())).unwrap();
        assert!(CsvSink::open(preset, out.path(), false).is_err());
        assert_eq!(std::fs::read(preset.csv_path(out.path())).unwrap(), odd);
    }
}
