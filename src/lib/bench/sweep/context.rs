//! What the presets' points share: the [`Context`] (options, progress bars, the
//! transport floor and request components measured once per repeat, embedded servers,
//! run options, latency-log names), the common CSV columns, and helpers that turn a
//! run into CSV cells (`Stat`, `Counters`) and build workloads.
//!
//! May import: the sweep's driver types and the rooms below `bench` (runner, floor,
//! embedded servers, client, server configuration, workload).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;

use super::components::{index_us, memcpy_us, writeback_us, Components};
use super::{Point, Result, Row, Skew, SweepError, SweepOptions};
use crate::bench::embedded::EmbeddedOptions;
use crate::bench::floor::{self, FloorOptions, FloorReport, FloorTest};
use crate::bench::measure::{new_histogram, Measurements};
use crate::bench::runner::{Progress, RunOptions};
use crate::client::{Client, ClientOptions};
use crate::index::IndexKind;
use crate::log::format::ENTRY_HEADER_SIZE;
use crate::pmem::FlushKind;
use crate::server::ServerConfig;
use crate::transport::{Backend, Endpoint, Transport};
use crate::workload::{names, CoreWorkload, WorkloadSpec};

/// Columns every preset starts with. `speed_us` is the machine's speed sample taken
/// just before the run ([`crate::bench::busy::speed_sample`]: a fixed loop, in
/// microseconds) and `handoff_ns` the round trip of a cache line between two of its
/// CPUs then ([`crate::bench::wake::handoff_probe`]; empty when it gave no figure: one
/// CPU, a thread it could not place, no answer in time; SETUP.md counts each reason), so a reader can set each run
/// beside the machine's state at the time.
pub const COMMON: [&str; 7] = ["point", "unix_time", "transport", "quick", "repeat", "speed_us", "handoff_ns"];

/// A preset's column list: [`COMMON`] and then its own.
macro_rules! cols {
    ($($c:literal),* $(,)?) => {
        &["point", "unix_time", "transport", "quick", "repeat", "speed_us", "handoff_ns", $($c),*]
    };
}
pub(crate) use cols;

/// The machine's samples taken just before a run (see [`COMMON`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Probes {
    /// [`crate::bench::busy::speed_sample`], microseconds.
    pub speed_us: f64,
    /// [`crate::bench::wake::handoff_ns`], nanoseconds.
    pub handoff_ns: Option<f64>,
}

/// Runs grid points and keeps what they share (transport floors, components).
pub struct Context<'a> {
    /// The sweep.
    pub o: &'a SweepOptions,
    bars: Option<indicatif::MultiProgress>,
    /// Per backend and repeat: each repeat measures its own, so the repeats' spread is
    /// the floor's too.
    floors: HashMap<(Backend, u64), FloorReport>,
    /// Per size and repeat.
    components: HashMap<(u64, u64), Components>,
    wanted_sizes: Vec<u64>,
    repeat: u64,
}

fn now_unix() -> String {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0).to_string()
}

/// Three decimals (microsecond cells).
pub(crate) fn f3(v: f64) -> String {
    format!("{v:.3}")
}

/// A run time in milliseconds to the microsecond (a `runtime_ms` cell): whole
/// milliseconds made a 0.3 ms run 0, beside an exact `ops_per_sec`.
pub(crate) fn ms3(d: std::time::Duration) -> String {
    f3(d.as_secs_f64() * 1e3)
}

/// Default op counts: (quick, full).
pub(crate) fn pick(quick: bool, q: u64, full: u64) -> u64 {
    if quick {
        q
    } else {
        full
    }
}

/// Runs `$body` with `$t` (the sweep's transport) and `$ep`: the `--server`, or a fresh
/// embedded server started with `$eo` and shut down after the body.
macro_rules! on_target {
    ($o:expr, $eo:expr, |$t:ident, $ep:ident| $body:expr) => {{
        let o: &$crate::bench::sweep::SweepOptions = $o;
        $crate::with_transport!(o.transport(), $t => {
            let r: $crate::bench::sweep::Result<_> = on_target!(@inner o, $eo, $t, $ep, $body);
            r
        })
    }};
    (@inner $o:ident, $eo:expr, $t:ident, $ep:ident, $body:expr) => {{
        match &$o.server {
            Some(e) => {
                let $ep: $crate::transport::Endpoint = e.clone();
                $body
            }
            None => {
                let emb = $crate::bench::embedded::Embedded::start($t.clone(), $o.backend, &$eo)?;
                let $ep: $crate::transport::Endpoint = emb.endpoint().clone();
                let r = $body;
                // Join the server's housekeeping thread from here: if it held the last
                // reference to the server core, it would try to join itself on drop.
                if let Some(s) = emb.server() {
                    s.core().shutdown();
                }
                drop(emb);
                r
            }
        }
    }};
}
pub(crate) use on_target;

/// Space and write-back counters of a server, from its stats.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    pub(crate) logical: u64,
    pub(crate) pm_used: u64,
    pub(crate) in_place_bytes: u64,
    pub(crate) in_place_entries: u64,
    pub(crate) grants: u64,
    pub(crate) segment_size: u64,
    pub(crate) coop_ranges: u64,
    pub(crate) coop_steals: u64,
    pub(crate) flush_lines: u64,
}

impl Counters {
    pub(crate) fn read<T: Transport>(t: &T, ep: &Endpoint) -> Result<Counters> {
        let s = Client::connect(t, ep, ClientOptions::default())?.stats()?;
        Ok(Counters {
            logical: s.space.logical_bytes,
            pm_used: s.space.pm_bytes_used,
            in_place_bytes: s.space.bytes_in_place,
            in_place_entries: s.space.entries_in_place,
            grants: s.grants,
            segment_size: s.space.segment_bytes.checked_div(s.space.segments_in_use).unwrap_or(0),
            coop_ranges: s.coop.ranges,
            coop_steals: s.coop.steals,
            flush_lines: s.flush.lines,
        })
    }

    pub(crate) fn since(&self, before: &Counters) -> Counters {
        Counters {
            logical: self.logical.saturating_sub(before.logical),
            pm_used: self.pm_used.saturating_sub(before.pm_used),
            in_place_bytes: self.in_place_bytes.saturating_sub(before.in_place_bytes),
            in_place_entries: self.in_place_entries.saturating_sub(before.in_place_entries),
            grants: self.grants.saturating_sub(before.grants),
            segment_size: self.segment_size,
            coop_ranges: self.coop_ranges.saturating_sub(before.coop_ranges),
            coop_steals: self.coop_steals.saturating_sub(before.coop_steals),
            flush_lines: self.flush_lines.saturating_sub(before.flush_lines),
        }
    }
}

/// Latency statistics of one series, microseconds.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Stat {
    pub(crate) ops: u64,
    pub(crate) avg: f64,
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) p999: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Stat {
    pub(crate) fn of(h: &Histogram<u64>) -> Stat {
        if h.is_empty() {
            return Stat::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Stat {
            ops: h.len(),
            avg: h.mean() / 1000.0,
            p50: us(h.value_at_quantile(0.5)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            min: us(h.min()),
            max: us(h.max()),
        }
    }

    pub(crate) fn series(m: &Measurements, names: &[&str]) -> Result<Stat> {
        let mut h = new_histogram();
        for n in names {
            if let Some(s) = m.get(n) {
                h.add(s.histogram()).map_err(|e| SweepError::Invalid(format!("merging histograms: {e}")))?;
            }
        }
        Ok(Stat::of(&h))
    }

    pub(crate) fn put(&self, row: &mut Row, prefix: &'static str, wanted: &[&'static str]) {
        for &c in wanted {
            let v = match c.strip_prefix(prefix).unwrap_or(c) {
                "ops" => self.ops.to_string(),
                "avg_us" => f3(self.avg),
                "p50_us" => f3(self.p50),
                "p99_us" => f3(self.p99),
                "p999_us" => f3(self.p999),
                "min_us" => f3(self.min),
                "max_us" => f3(self.max),
                _ => continue,
            };
            row.insert(c, v);
        }
    }
}

/// A workload of `n` inserts of `size`-byte values: keys `start .. start + n` of a key
/// space of `records` keys.
pub(crate) fn insert_spec(size: u64, start: u64, n: u64, records: u64, seed: u64) -> Result<CoreWorkload> {
    let mut s = WorkloadSpec::from_mix('a')?;
    s.set(names::RECORD_COUNT, &records.max(start + n).to_string())?;
    s.set("insertstart", &start.to_string())?;
    s.set("insertcount", &n.to_string())?;
    s.set(names::VALUE_SIZE, &size.to_string())?;
    s.set(names::SEED, &seed.to_string())?;
    Ok(CoreWorkload::new(&s)?)
}

/// A workload of `ops` operations over `records` keys with the given proportions.
pub(crate) fn mix_spec(
    read: f64,
    update: f64,
    records: u64,
    ops: u64,
    size: u64,
    skew: Skew,
    seed: u64,
) -> Result<CoreWorkload> {
    let mut s = WorkloadSpec::from_mix('a')?;
    s.set(names::RECORD_COUNT, &records.to_string())?;
    s.set(names::OPERATION_COUNT, &ops.to_string())?;
    s.set("readproportion", &read.to_string())?;
    s.set("updateproportion", &update.to_string())?;
    s.set(names::VALUE_SIZE, &size.to_string())?;
    s.set(names::SEED, &seed.to_string())?;
    match skew {
        Skew::Uniform => s.set("requestdistribution", "uniform")?,
        Skew::Zipf(t) => {
            s.set("requestdistribution", "zipfian")?;
            s.set(names::THETA, &t.to_string())?;
        }
    }
    Ok(CoreWorkload::new(&s)?)
}

impl<'a> Context<'a> {
    /// A context for the sweep `o`; `bars` shows the runs' progress bars.
    pub fn new(o: &'a SweepOptions, bars: Option<indicatif::MultiProgress>) -> Context<'a> {
        Context { o, bars, floors: HashMap::new(), components: HashMap::new(), wanted_sizes: Vec::new(), repeat: 0 }
    }

    pub(crate) fn ops(&self, q: u64, full: u64) -> u64 {
        self.o.axes.ops.unwrap_or(pick(self.o.quick, q, full))
    }

    /// Run time of the throughput experiments (writeback, threads): 1 s quick, 5 s full.
    pub(crate) fn run_time(&self) -> std::time::Duration {
        std::time::Duration::from_secs(pick(self.o.quick, 1, 5))
    }

    pub(crate) fn run_opts(
        &self,
        label: String,
        threads: usize,
        ops: u64,
        warmup: u64,
        hlog: Option<PathBuf>,
    ) -> RunOptions {
        let mut ro = RunOptions {
            threads,
            ops,
            warmup_ops: warmup,
            seed: self.o.seed,
            progress: if self.bars.is_some() { Progress::Bar } else { Progress::Quiet },
            hlog,
            label,
            bars: self.bars.clone(),
            ..Default::default()
        };
        // As `server_cfg` places the workers: the two must agree (colocated clients
        // follow their workers).
        ro.place(self.o.layout().as_ref());
        ro
    }

    /// Places the embedded server (`cfg`, from [`Context::server_cfg`]) of a point of
    /// `threads` client threads over `backend` as `--pin` gives for that many threads
    /// ([`crate::cpus::Layout::place`]; colocated past the CPUs a split leaves the
    /// clients, over shm and tcp), and returns the layout, for the run's client threads
    /// ([`RunOptions::place`]).
    pub(crate) fn place(
        &self,
        threads: usize,
        backend: Backend,
        cfg: &mut ServerConfig,
    ) -> Option<crate::cpus::Layout> {
        let layout = self.o.layout_for(threads, backend);
        cfg.place(layout.as_ref());
        layout
    }

    pub(crate) fn hlog(&self, pt: &Point, phase: &str) -> PathBuf {
        let id = pt.id().replace('/', "-");
        // The first repeat's log keeps the name of a sweep without repeats.
        let rep = if self.repeat == 0 { String::new() } else { format!(".r{}", self.repeat) };
        self.o.out.join(format!("{}-{id}{rep}{}{phase}.hlog", pt.preset, if phase.is_empty() { "" } else { "." }))
    }

    pub(crate) fn embedded(
        &self,
        pool_size: u64,
        segment_size: u64,
        flush: Option<FlushKind>,
        server: ServerConfig,
    ) -> EmbeddedOptions {
        EmbeddedOptions {
            parent: self.o.pmem_dir.clone(),
            pool_size,
            segment_size,
            index: IndexKind::Hash,
            flush,
            server,
        }
    }

    pub(crate) fn server_cfg(&self) -> ServerConfig {
        let mut s = ServerConfig { log_clients: false, ..Default::default() };
        if let Some(w) = self.o.axes.workers {
            s.workers = w;
        }
        s.place(self.o.layout().as_ref());
        s
    }

    pub(crate) fn base_row(&self, pt: &Point) -> Row {
        let mut r = Row::new();
        r.insert(COMMON[0], pt.id());
        r.insert(COMMON[1], now_unix());
        r.insert(COMMON[2], self.o.transport().to_string());
        r.insert(COMMON[3], self.o.quick.to_string());
        r
    }

    pub(crate) fn floor(&mut self, backend: Backend, size: u64) -> Result<&FloorReport> {
        let key = (backend, self.repeat);
        let have = self
            .floors
            .get(&key)
            .is_some_and(|r| r.latency.iter().any(|l| l.bytes as u64 == size && l.test == FloorTest::WriteImmReply));
        if !have {
            let mut sizes: Vec<usize> = self.wanted_sizes.iter().map(|&s| s as usize).collect();
            if !sizes.contains(&(size as usize)) {
                sizes.push(size as usize);
            }
            let iters = self.o.axes.ops.unwrap_or(pick(self.o.quick, 2000, 20_000)) as usize;
            let fo = FloorOptions {
                backends: vec![backend],
                sizes,
                iters,
                warmup: (iters / 10).max(10),
                // Its two threads on two CPUs, as `bench-transport` runs it and as the
                // runs place their server and clients (the floor gives this thread its
                // own CPUs back when it is done). Unpinned, the two sometimes shared
                // one CPU, and a round trip was a switch between them: 5.7 us against
                // 0.33 us, a floor longer than the whole PUT it is part of.
                pin: self.o.pin != crate::cpus::Placement::Off,
                socket_dir: self.o.pmem_dir.clone().unwrap_or_else(std::env::temp_dir),
                // The sweep needs the backend's own rows only.
                perftest: false,
                verbs_tuning_off: false,
            };
            // On a thread of its own: how a thread waits depends on how its earlier
            // waits went (`transport::spin_outcome`), and this one ran the points before
            // (their last waits parked): measured here, both ends of the floor parked in
            // every round trip, 29 us against 0.34 us.
            let r = std::thread::scope(|s| {
                s.spawn(|| floor::run(&fo, &mut std::io::sink()))
                    .join()
                    .unwrap_or_else(|_| Err(crate::error::Error::invalid("the transport floor's thread panicked")))
            })?;
            self.floors.insert(key, r);
        }
        self.floors.get(&key).ok_or_else(|| SweepError::Invalid("internal: floor report missing".into()))
    }

    /// The per-request components for `size` (cached per size and repeat).
    pub(crate) fn components(&mut self, size: u64) -> Result<Components> {
        if let Some(c) = self.components.get(&(size, self.repeat)) {
            return Ok(*c);
        }
        let backend = self.o.transport();
        let fl = self.floor(backend, size)?.clone();
        let b = backend.to_string();
        let med = |test: FloorTest, bytes: u64| {
            fl.latency
                .iter()
                .find(|l| l.backend == b && l.test == test && l.bytes as u64 == bytes)
                .map(|l| l.summary.median)
        };
        let entry = size + ENTRY_HEADER_SIZE + 24;
        let iters = pick(self.o.quick, 2000, 20_000) as usize;
        let c = Components {
            wir: med(FloorTest::WriteImmReply, size).unwrap_or(0.0),
            read: med(FloorTest::Read, size).unwrap_or(0.0),
            meta: med(FloorTest::SendRecv, 64).unwrap_or(0.0),
            writeback: writeback_us(self.o.pmem_dir.clone(), entry as usize, iters)?,
            count: writeback_us(self.o.pmem_dir.clone(), 8, iters)?,
            index_put: index_us(true, pick(self.o.quick, 20_000, 100_000) as usize)?,
            index_get: index_us(false, pick(self.o.quick, 20_000, 100_000) as usize)?,
            memcpy: memcpy_us(entry as usize, iters),
        };
        self.components.insert((size, self.repeat), c);
        Ok(c)
    }

    /// Runs repeat `repeat` of one point and returns its CSV row (`probes`: the
    /// machine's samples taken before it).
    pub fn run_point(&mut self, pt: &Point, repeat: u64, probes: Probes) -> Result<Row> {
        self.repeat = repeat;
        let mut row = self.base_row(pt);
        row.insert(COMMON[4], repeat.to_string());
        row.insert(COMMON[5], format!("{:.1}", probes.speed_us));
        row.insert(COMMON[6], probes.handoff_ns.map_or_else(String::new, |ns| format!("{ns:.0}")));
        pt.preset.def().run(self, pt, &mut row)?;
        Ok(row)
    }

    /// Remembers the sizes the preset's points need, so the floor runs once for all
    /// (once per repeat).
    pub fn want_floor_sizes(&mut self, sizes: impl IntoIterator<Item = u64>) {
        self.wanted_sizes = sizes.into_iter().collect();
        self.wanted_sizes.sort_unstable();
        self.wanted_sizes.dedup();
    }

    /// Forgets the floors measured so far (the next floor a point asks for is measured again).
    pub fn clear_floors(&mut self) {
        self.floors.clear();
    }
}

/// The file name of a path (the `hlog` cells).
pub(crate) fn file_name(p: &std::path::Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}
