//! What each grid point runs, and the CSV columns it fills.
//!
//! Every point runs against a fresh embedded server on a temporary pool (or the
//! `--server` given), through the YCSB runner ([`crate::bench::runner`]), so the
//! numbers are the same a `boomctl ycsb` run would print.
//!
//! - **transport**: the transport floor ([`crate::bench::floor`]), one run per backend
//!   over every size of the grid; a row per (backend, size).
//! - **latency**, **breakdown**: per (protocol, size): a warm-up load of `W` keys
//!   (unmeasured), then `N` PUTs of new keys (measured: the load phase's INSERTs), then
//!   `N` GETs of uniformly chosen keys among those (after `W` warm-up GETs). Each row
//!   also holds the per-request components measured on this machine for the same size
//!   (see [`Components`]) and what is left of the median latency when they are taken
//!   away.
//! - **ycsb**: YCSB's mix (`recordcount` R loaded, then N operations, Zipfian).
//! - **segment-size**, **skew**: 100% PUT of 1 KiB values over `K` keys (true Zipf over
//!   the key space with the point's theta, or uniform), `N` PUTs, one client; PM bytes
//!   used and logical bytes come from the server's space accounting (before/after
//!   differences), so the saving is what in-place updates really saved in the pool.
//! - **writeback**: 2 client threads PUT `N` new keys of the size into a server with 2
//!   workers, the flush instruction of the point, cooperative write-back on or off.
//! - **threads**: PUT `N` new 2 KiB keys, then GET `N` uniform keys, with the point's
//!   client threads.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;

use super::{Params, Point, Preset, Result, Row, Skew, SweepError, SweepOptions};
use crate::bench::embedded::{Embedded, EmbeddedOptions};
use crate::bench::floor::{self, FloorOptions, FloorReport, FloorTest};
use crate::bench::measure::{new_histogram, Measurements};
use crate::bench::runner::{self, Progress, RunOptions};
use crate::client::hybrid::UpdateMode;
use crate::client::{Client, ClientOptions};
use crate::index::{Index, IndexKind, KeySource, Loc};
use crate::log::format::ENTRY_HEADER_SIZE;
use crate::pmem::{FlushKind, Media, MediaOptions};
use crate::server::ServerConfig;
use crate::transport::{Backend, Endpoint, Transport};
use crate::units::short_bytes;
use crate::wire::Protocol;
use crate::workload::{names, CoreWorkload, WorkloadSpec};

/// Columns every preset starts with.
const COMMON: [&str; 4] = ["point", "unix_time", "transport", "quick"];

macro_rules! cols {
    ($($c:literal),* $(,)?) => { &["point", "unix_time", "transport", "quick", $($c),*] };
}

const LATENCY_COLUMNS: &[&str] = cols!(
    "protocol",
    "size",
    "warmup",
    "ops",
    "put_ops",
    "put_avg_us",
    "put_p50_us",
    "put_p99_us",
    "put_p999_us",
    "put_min_us",
    "put_max_us",
    "put_ops_per_sec",
    "get_ops",
    "get_avg_us",
    "get_p50_us",
    "get_p99_us",
    "get_p999_us",
    "get_min_us",
    "get_max_us",
    "get_ops_per_sec",
    "errors",
    "put_transport_us",
    "put_metadata_us",
    "put_copies_us",
    "put_writeback_us",
    "put_index_us",
    "put_other_us",
    "get_transport_us",
    "get_metadata_us",
    "get_copies_us",
    "get_writeback_us",
    "get_index_us",
    "get_other_us",
    "entry_writeback_us",
    "count_persist_us",
    "srv_put_validate_us",
    "srv_put_seal_us",
    "srv_put_writeback_us",
    "srv_put_second_persist_us",
    "srv_put_index_us",
    "srv_put_reply_us",
    "srv_put_total_us",
    "srv_get_lookup_us",
    "srv_get_write_us",
    "srv_get_total_us",
    "flush",
    "put_hlog",
    "get_hlog",
);

/// The CSV columns of `preset`, in order.
pub fn columns(preset: Preset) -> &'static [&'static str] {
    match preset {
        Preset::Transport => cols!(
            "backend",
            "size",
            "iterations",
            "write_p50_us",
            "write_p99_us",
            "write_imm_reply_p50_us",
            "write_imm_reply_avg_us",
            "write_imm_reply_p99_us",
            "send_recv_p50_us",
            "send_recv_avg_us",
            "send_recv_p99_us",
            "read_p50_us",
            "read_p99_us",
            "msg_rate_mpps",
            "bw_mb_per_s",
            "baseline",
            "baseline_p50_us",
        ),
        Preset::Latency | Preset::Breakdown => LATENCY_COLUMNS,
        Preset::Ycsb => cols!(
            "mix",
            "protocol",
            "size",
            "records",
            "ops",
            "runtime_ms",
            "ops_per_sec",
            "all_avg_us",
            "all_p50_us",
            "all_p99_us",
            "read_avg_us",
            "read_p99_us",
            "update_avg_us",
            "update_p99_us",
            "insert_avg_us",
            "insert_p99_us",
            "rmw_avg_us",
            "rmw_p99_us",
            "errors",
            "hlog",
        ),
        Preset::SegmentSize | Preset::Skew => cols!(
            "segment_size",
            "theta",
            "mode",
            "keys",
            "value_size",
            "ops",
            "put_ops_per_sec",
            "put_avg_us",
            "put_p50_us",
            "put_p99_us",
            "logical_bytes",
            "pm_bytes_used",
            "bytes_in_place",
            "entries_in_place",
            "space_change_pct",
            "grants",
            "errors",
            "hlog",
        ),
        Preset::Writeback => cols!(
            "flush",
            "coop",
            "size",
            "clients",
            "workers",
            "ops",
            "put_ops_per_sec",
            "put_avg_us",
            "put_p50_us",
            "put_p99_us",
            "coop_ranges",
            "coop_steals",
            "flush_lines",
            "errors",
            "hlog",
        ),
        Preset::Threads => cols!(
            "protocol",
            "threads",
            "size",
            "workers",
            "cores",
            "ops",
            "put_ops_per_sec",
            "put_avg_us",
            "put_p99_us",
            "get_ops_per_sec",
            "get_avg_us",
            "get_p99_us",
            "errors",
            "put_hlog",
            "get_hlog",
        ),
    }
}

/// Per-request costs measured on this machine for one value size (microseconds,
/// medians), used to break a request's latency down. How each is measured:
///
/// - `wir`: the transport floor's WRITE_WITH_IMM of the size plus a 16 B SEND reply,
///   round trip: the shape of a BOOM PUT (and, reversed, of a BOOM GET and of an RPC
///   request/reply that carries the value one way).
/// - `read`: the floor's READ of the size (the RDMP GET's data phase).
/// - `meta`: the floor's 64 B SEND/RECV round trip: the metadata RPC of RDMP.
/// - `writeback`: [`Media::persist`] of one freshly written entry of the size (header +
///   24 B key + value) on a pool file in the embedded servers' directory, with the
///   flush instruction the servers use.
/// - `count`: [`Media::persist`] of one freshly stored 8-byte word: the second fence of
///   an append (`count`), or of an in-place rewrite (`version_num`).
/// - `index_put`, `index_get`: [`Index::upsert`] / [`Index::get`] of one key in a hash
///   index of 100 000 keys (keys compared through a [`KeySource`], as on PM).
/// - `memcpy`: one copy of an entry of the size between two DRAM buffers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Components {
    /// WRITE_WITH_IMM + reply round trip.
    pub wir: f64,
    /// READ.
    pub read: f64,
    /// 64 B SEND/RECV round trip.
    pub meta: f64,
    /// Write-back of one entry.
    pub writeback: f64,
    /// Persist of one 8-byte word (`count`).
    pub count: f64,
    /// Index upsert.
    pub index_put: f64,
    /// Index lookup.
    pub index_get: f64,
    /// One entry copy.
    pub memcpy: f64,
}

/// Entry-size copies outside the transport per request, from the code paths:
/// BOOM and RDMP PUT encode the entry and stage it in the registered buffer (2); their
/// GETs copy the entry out of the response buffer and the value out of the entry (2).
/// RPC PUT encodes the entry, encodes the message, and the server copies it from DRAM
/// into PM (3); RPC GET copies PM -> DRAM on the server, receive buffer -> entry and
/// entry -> value on the client (3).
pub fn copies(p: Protocol) -> (f64, f64) {
    match p {
        Protocol::Boom | Protocol::Rdmp => (2.0, 2.0),
        Protocol::Rpc => (3.0, 3.0),
    }
}

/// How the breakdown is measured, for SETUP.md and the figure captions.
pub const BREAKDOWN_METHOD: &str = "transport = the floor's WRITE_WITH_IMM+16 B reply round trip of the size \
(RDMP GET: READ of the size); metadata = the floor's 64 B SEND/RECV round trip (RDMP only); copies = \
entry-size memcpy x copies on the code path (BOOM/RDMP 2, RPC 3); write-back = Media::persist of one entry \
plus Media::persist of one 8-byte word (PUT only: every protocol's commit fences twice, the entry with its version, \
then count); index = hash index upsert/get at 100k keys; other = median latency minus all of these \
(protocol processing, checksums, scheduling; negative when the parts overlap). All medians.";

/// What each preset runs, for SETUP.md.
pub const METHOD: &str = "Every point runs against a fresh embedded server on a temporary pool (or the --server \
given) through the YCSB runner, one client thread unless stated. latency/breakdown: a warm-up load of W keys \
(unmeasured), N PUTs of new keys (measured), then N GETs of uniformly chosen loaded keys after W warm-up GETs \
(quick: N = 20000, full: N = 100000, W = N/10 clamped to 100..2000; each measured phase also stops \
after 2 s quick / 20 s full unless --ops is given). ycsb: YCSB's mix, recordcount R loaded, N \
operations, Zipfian (quick: R = 1000, N = 1000; full: R = 10000, N = 20000). segment-size, skew: 100% PUT of 1 KiB \
values over K keys (true Zipf over the key space with the point's theta, or uniform), N PUTs, one client, cleaner \
off; PM bytes used and logical bytes from the server's space accounting (quick: K = N = 2^14, 1 MiB segments for \
skew, 256 KiB..4 MiB for segment-size; full: K = N = 2^20 = 1 GiB logical, 64 MiB segments for skew, 16/64/256 MiB \
for segment-size). writeback: 2 client threads PUT new keys into a server with 2 \
workers, the point's flush instruction, cooperative write-back on or off, for 1 s (quick) or 5 s (full), at most \
50000 / 500000 PUTs. threads: new 2 KiB keys PUT, then uniform GETs of those keys, each phase for 1 s (quick) or \
5 s (full) with the point's client threads (threads 1,2,4 quick; 1..16 full), at most 200000 / 2000000 operations. transport: the transport floor (bench-transport) with 2000 (quick) or 20000 (full) iterations per size.";

/// The short form of [`BREAKDOWN_METHOD`] for figure captions.
pub const BREAKDOWN_CAPTION: &str = "transport, metadata: transport-floor round trips of the request's shape; \
copies: memcpy x copies on the code path; write-back: Media::persist of one entry and of count; index: one hash-index \
operation; other: the rest of the median. Full method: SETUP.md.";

/// Runs grid points and keeps what they share (transport floors, components).
pub struct Context<'a> {
    o: &'a SweepOptions,
    bars: Option<indicatif::MultiProgress>,
    floors: HashMap<Backend, FloorReport>,
    components: HashMap<u64, Components>,
    wanted_sizes: Vec<u64>,
}

fn now_unix() -> String {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0).to_string()
}

fn f3(v: f64) -> String {
    format!("{v:.3}")
}

/// Default op counts: (quick, full).
fn pick(quick: bool, q: u64, full: u64) -> u64 {
    if quick {
        q
    } else {
        full
    }
}

macro_rules! on_target {
    ($o:expr, $eo:expr, |$t:ident, $ep:ident| $body:expr) => {{
        let o: &SweepOptions = $o;
        crate::with_transport!(o.transport(), $t => {
            let r: Result<_> = on_target!(@inner o, $eo, $t, $ep, $body);
            r
        })
    }};
    (@inner $o:ident, $eo:expr, $t:ident, $ep:ident, $body:expr) => {{
        match &$o.server {
            Some(e) => {
                let $ep: Endpoint = e.clone();
                $body
            }
            None => {
                let emb = Embedded::start($t.clone(), $o.backend, &$eo)?;
                let $ep: Endpoint = emb.endpoint().clone();
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

/// Space and write-back counters of a server, from its stats.
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    logical: u64,
    pm_used: u64,
    in_place_bytes: u64,
    in_place_entries: u64,
    grants: u64,
    segment_size: u64,
    coop_ranges: u64,
    coop_steals: u64,
    flush_lines: u64,
}

impl Counters {
    fn read<T: Transport>(t: &T, ep: &Endpoint) -> Result<Counters> {
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

    fn since(&self, before: &Counters) -> Counters {
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
struct Stat {
    ops: u64,
    avg: f64,
    p50: f64,
    p99: f64,
    p999: f64,
    min: f64,
    max: f64,
}

impl Stat {
    fn of(h: &Histogram<u64>) -> Stat {
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

    fn series(m: &Measurements, names: &[&str]) -> Result<Stat> {
        let mut h = new_histogram();
        for n in names {
            if let Some(s) = m.get(n) {
                h.add(s.histogram()).map_err(|e| SweepError::Invalid(format!("merging histograms: {e}")))?;
            }
        }
        Ok(Stat::of(&h))
    }

    fn put(&self, row: &mut Row, prefix: &'static str, wanted: &[&'static str]) {
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
fn insert_spec(size: u64, start: u64, n: u64, records: u64, seed: u64) -> Result<CoreWorkload> {
    let mut s = WorkloadSpec::from_mix('a')?;
    s.set(names::RECORD_COUNT, &records.max(start + n).to_string())?;
    s.set("insertstart", &start.to_string())?;
    s.set("insertcount", &n.to_string())?;
    s.set(names::VALUE_SIZE, &size.to_string())?;
    s.set(names::SEED, &seed.to_string())?;
    Ok(CoreWorkload::new(&s)?)
}

/// A workload of `ops` operations over `records` keys with the given proportions.
fn mix_spec(read: f64, update: f64, records: u64, ops: u64, size: u64, skew: Skew, seed: u64) -> Result<CoreWorkload> {
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
        Context { o, bars, floors: HashMap::new(), components: HashMap::new(), wanted_sizes: Vec::new() }
    }

    /// Called before a preset's points run: remembers the sizes they need, so shared
    /// measurements (the floor) run once for all of them.
    pub fn begin_preset(&mut self, preset: Preset, points: &[Point]) {
        self.wanted_sizes = points
            .iter()
            .filter_map(|p| match p.params {
                Params::Transport { size, .. } | Params::Latency { size, .. } => Some(size),
                _ => None,
            })
            .collect();
        self.wanted_sizes.sort_unstable();
        self.wanted_sizes.dedup();
        if preset == Preset::Transport {
            self.floors.clear();
        }
    }

    /// Cleans up after the last preset.
    pub fn finish(&mut self) {}

    fn ops(&self, q: u64, full: u64) -> u64 {
        self.o.axes.ops.unwrap_or(pick(self.o.quick, q, full))
    }

    /// Run time of the throughput experiments (writeback, threads): 1 s quick, 5 s full.
    fn run_time(&self) -> std::time::Duration {
        std::time::Duration::from_secs(pick(self.o.quick, 1, 5))
    }

    fn run_opts(&self, label: String, threads: usize, ops: u64, warmup: u64, hlog: Option<PathBuf>) -> RunOptions {
        RunOptions {
            threads,
            ops,
            warmup_ops: warmup,
            seed: self.o.seed,
            progress: if self.bars.is_some() { Progress::Bar } else { Progress::Quiet },
            hlog,
            label,
            bars: self.bars.clone(),
            ..Default::default()
        }
    }

    fn hlog(&self, pt: &Point, phase: &str) -> PathBuf {
        let id = pt.id().replace('/', "-");
        self.o.out.join(format!("{}-{id}{}{phase}.hlog", pt.preset, if phase.is_empty() { "" } else { "." }))
    }

    fn embedded(
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

    fn server_cfg(&self) -> ServerConfig {
        let mut s = ServerConfig { log_clients: false, ..Default::default() };
        if let Some(w) = self.o.axes.workers {
            s.workers = w;
        }
        s
    }

    fn base_row(&self, pt: &Point) -> Row {
        let mut r = Row::new();
        r.insert(COMMON[0], pt.id());
        r.insert(COMMON[1], now_unix());
        r.insert(COMMON[2], self.o.transport().to_string());
        r.insert(COMMON[3], self.o.quick.to_string());
        r
    }

    /// Runs one point and returns its CSV row.
    pub fn run_point(&mut self, pt: &Point) -> Result<Row> {
        let mut row = self.base_row(pt);
        match pt.params.clone() {
            Params::Transport { backend, size } => self.transport_point(backend, size, &mut row)?,
            Params::Latency { protocol, size } => self.latency_point(pt, protocol, size, &mut row)?,
            Params::Ycsb { mix, protocol, size } => self.ycsb_point(pt, mix, protocol, size, &mut row)?,
            Params::SegmentSize { segment_size, skew } => {
                self.space_point(pt, segment_size, skew, true, &mut row)?;
            }
            Params::Skew { skew, hybrid } => {
                let seg = match &self.o.axes.segment_sizes {
                    Some(v) if !v.is_empty() => v[0],
                    _ => pick(self.o.quick, 1 << 20, 64 << 20),
                };
                self.space_point(pt, seg, skew, hybrid, &mut row)?;
            }
            Params::Writeback { flush, coop, size } => self.writeback_point(pt, flush, coop, size, &mut row)?,
            Params::Threads { protocol, threads } => self.threads_point(pt, protocol, threads, &mut row)?,
        }
        Ok(row)
    }

    fn floor(&mut self, backend: Backend, size: u64) -> Result<&FloorReport> {
        let have = self
            .floors
            .get(&backend)
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
                // Pinning would pin this thread, and so every later run's threads.
                pin: false,
                socket_dir: self.o.pmem_dir.clone().unwrap_or_else(std::env::temp_dir),
                // The sweep needs the backend's own rows only.
                perftest: false,
                verbs_tuning_off: false,
            };
            let r = floor::run(&fo, &mut std::io::sink())?;
            self.floors.insert(backend, r);
        }
        self.floors.get(&backend).ok_or_else(|| SweepError::Invalid("internal: floor report missing".into()))
    }

    fn transport_point(&mut self, backend: Backend, size: u64, row: &mut Row) -> Result<()> {
        let r = self.floor(backend, size)?.clone();
        let b = backend.to_string();
        let lat =
            |test: FloorTest| r.latency.iter().find(|l| l.backend == b && l.test == test && l.bytes as u64 == size);
        let mut iters = 0;
        for (test, p50, avg, p99) in [
            (FloorTest::Write, "write_p50_us", "", "write_p99_us"),
            (FloorTest::WriteImmReply, "write_imm_reply_p50_us", "write_imm_reply_avg_us", "write_imm_reply_p99_us"),
            (FloorTest::SendRecv, "send_recv_p50_us", "send_recv_avg_us", "send_recv_p99_us"),
            (FloorTest::Read, "read_p50_us", "", "read_p99_us"),
        ] {
            if let Some(l) = lat(test) {
                iters = l.summary.count;
                row.insert(p50, f3(l.summary.median));
                row.insert(p99, f3(l.summary.p99));
                if !avg.is_empty() {
                    row.insert(avg, f3(l.summary.avg));
                }
            }
        }
        if let Some(m) = r.rates.iter().find(|m| m.backend == b && m.bytes as u64 == size) {
            row.insert("msg_rate_mpps", format!("{:.4}", m.mpps));
            row.insert("bw_mb_per_s", format!("{:.2}", m.mb_per_s));
        }
        let base = if backend == Backend::Shm { FloorTest::CacheLinePingPong } else { FloorTest::TcpPingPong };
        if let Some(l) = r.latency.iter().find(|l| l.backend == "baseline" && l.test == base) {
            row.insert("baseline", base.name().to_string());
            row.insert("baseline_p50_us", f3(l.summary.median));
        }
        row.insert("backend", b);
        row.insert("size", size.to_string());
        row.insert("iterations", iters.to_string());
        Ok(())
    }

    /// The per-request components for `size` (cached per size).
    fn components(&mut self, size: u64) -> Result<Components> {
        if let Some(c) = self.components.get(&size) {
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
        self.components.insert(size, c);
        Ok(c)
    }

    fn latency_point(&mut self, pt: &Point, protocol: Protocol, size: u64, row: &mut Row) -> Result<()> {
        let n = self.ops(20_000, 100_000);
        // Each measured phase stops after N operations or this long, whichever comes
        // first (unless --ops asks for an exact count), so a slow transport cannot make
        // a sweep unbounded.
        let cap = match self.o.axes.ops {
            Some(_) => None,
            None => Some(std::time::Duration::from_secs(pick(self.o.quick, 2, 20))),
        };
        let warm = (n / 10).clamp(100, 2000);
        let seed = self.o.seed;
        let copts = ClientOptions { protocol, ..Default::default() };
        let eo = self.embedded(
            crate::bench::embedded::pool_size_for(n + warm, size, 1, 64 << 20),
            64 << 20,
            None,
            self.server_cfg(),
        );
        let label = format!("{protocol} {}", short_bytes(size));
        let (put_hlog, get_hlog) = (self.hlog(pt, "put"), self.hlog(pt, "get"));
        let warm_w = insert_spec(size, 0, warm, n + warm, seed)?;
        let put_w = insert_spec(size, warm, n, n + warm, seed)?;
        let ro_warm = self.run_opts(format!("{label} warm"), 1, warm, 0, None);
        let mut ro_put = self.run_opts(format!("{label} PUT"), 1, n, 0, Some(put_hlog.clone()));
        ro_put.duration = cap;
        let mut ro_get = self.run_opts(format!("{label} GET"), 1, n, warm, Some(get_hlog.clone()));
        ro_get.duration = cap;
        let (put, get, phases) = on_target!(self.o, eo, |t, ep| {
            runner::load(&t, &ep, &copts, &warm_w, &ro_warm)?;
            let put = runner::load(&t, &ep, &copts, &put_w, &ro_put)?;
            // GETs over the keys stored so far (the PUT phase may have stopped early).
            let get_w = mix_spec(1.0, 0.0, warm + put.run.operations, n, size, Skew::Uniform, seed)?;
            let get = runner::run(&t, &ep, &copts, &get_w, &ro_get)?;
            // The server's own sampled step timings; a server too old to report them
            // leaves the columns empty.
            let phases = Client::connect(&t, &ep, copts.clone()).and_then(|mut c| c.stats()).ok().map(|s| s.phases);
            Ok::<_, SweepError>((put, get, phases))
        })?;
        if let Some(ph) = phases.filter(|p| p.put_samples > 0 || p.get_samples > 0) {
            for (c, v) in [
                ("srv_put_validate_us", ph.put_validate_us),
                ("srv_put_seal_us", ph.put_seal_us),
                ("srv_put_writeback_us", ph.put_writeback_us),
                ("srv_put_second_persist_us", ph.put_second_persist_us),
                ("srv_put_index_us", ph.put_index_us),
                ("srv_put_reply_us", ph.put_reply_us),
                ("srv_put_total_us", ph.put_total_us),
                ("srv_get_lookup_us", ph.get_lookup_us),
                ("srv_get_write_us", ph.get_write_us),
                ("srv_get_total_us", ph.get_total_us),
            ] {
                row.insert(c, f3(v));
            }
        }
        let ps = Stat::series(&put.measurements, &["INSERT"])?;
        let gs = Stat::series(&get.measurements, &["READ"])?;
        row.insert("protocol", protocol.to_string());
        row.insert("size", size.to_string());
        row.insert("warmup", warm.to_string());
        row.insert("ops", n.to_string());
        let cols = LATENCY_COLUMNS;
        ps.put(row, "put_", &cols.iter().copied().filter(|c| c.starts_with("put_")).collect::<Vec<_>>());
        gs.put(row, "get_", &cols.iter().copied().filter(|c| c.starts_with("get_")).collect::<Vec<_>>());
        row.insert("put_ops_per_sec", format!("{:.1}", put.run.throughput()));
        row.insert("get_ops_per_sec", format!("{:.1}", get.run.throughput()));
        row.insert("errors", (put.errors + get.errors).to_string());
        row.insert("put_hlog", file_name(&put_hlog));
        row.insert("get_hlog", file_name(&get_hlog));
        // The breakdown of the median request.
        let c = self.components(size)?;
        let (cp, cg) = copies(protocol);
        let (put_t, put_m, get_t, get_m) = match protocol {
            Protocol::Boom | Protocol::Rpc => (c.wir, 0.0, c.wir, 0.0),
            Protocol::Rdmp => (c.wir, c.meta, c.read, c.meta),
        };
        // Every protocol's PUT commits through the same path: two persists.
        let put_parts = [put_t, put_m, cp * c.memcpy, c.writeback + c.count, c.index_put];
        let get_parts = [get_t, get_m, cg * c.memcpy, 0.0, c.index_get];
        for (names, parts, total) in [
            (
                [
                    "put_transport_us",
                    "put_metadata_us",
                    "put_copies_us",
                    "put_writeback_us",
                    "put_index_us",
                    "put_other_us",
                ],
                put_parts,
                ps.p50,
            ),
            (
                [
                    "get_transport_us",
                    "get_metadata_us",
                    "get_copies_us",
                    "get_writeback_us",
                    "get_index_us",
                    "get_other_us",
                ],
                get_parts,
                gs.p50,
            ),
        ] {
            for (n, v) in names.iter().zip(parts) {
                row.insert(n, f3(v));
            }
            row.insert(names[5], f3(total - parts.iter().sum::<f64>()));
        }
        row.insert("entry_writeback_us", f3(c.writeback));
        row.insert("count_persist_us", f3(c.count));
        row.insert("flush", FlushKind::detect().to_string());
        Ok(())
    }

    fn ycsb_point(&mut self, pt: &Point, mix: char, protocol: Protocol, size: u64, row: &mut Row) -> Result<()> {
        let records = pick(self.o.quick, 1000, 10_000);
        let n = self.ops(1000, 20_000);
        let mut s = WorkloadSpec::from_mix(mix)?;
        s.set(names::RECORD_COUNT, &records.to_string())?;
        s.set(names::OPERATION_COUNT, &n.to_string())?;
        s.set(names::VALUE_SIZE, &size.to_string())?;
        s.set(names::SEED, &self.o.seed.to_string())?;
        let w = CoreWorkload::new(&s)?;
        let copts = ClientOptions { protocol, ..Default::default() };
        let entries = records + n;
        let eo = self.embedded(
            crate::bench::embedded::pool_size_for(entries, size, 1, 64 << 20),
            64 << 20,
            None,
            self.server_cfg(),
        );
        let hlog = self.hlog(pt, "");
        let label = format!("{mix} {protocol} {}", short_bytes(size));
        let ro = self.run_opts(label, 1, n, (n / 10).min(1000), Some(hlog.clone()));
        let phases = runner::Phases { load: true, run: true };
        let r = on_target!(self.o, eo, |t, ep| Ok(runner::load_and_run(&t, &ep, &copts, &w, &ro, phases)?.result))?;
        let m = &r.measurements;
        row.insert("mix", mix.to_string());
        row.insert("protocol", protocol.to_string());
        row.insert("size", size.to_string());
        row.insert("records", records.to_string());
        row.insert("ops", n.to_string());
        row.insert("runtime_ms", r.run.runtime_ms().to_string());
        row.insert("ops_per_sec", format!("{:.1}", r.run.throughput()));
        let all = Stat::series(m, &["READ", "UPDATE", "INSERT", "SCAN"])?;
        row.insert("all_avg_us", f3(all.avg));
        row.insert("all_p50_us", f3(all.p50));
        row.insert("all_p99_us", f3(all.p99));
        for (series, avg, p99) in [
            ("READ", "read_avg_us", "read_p99_us"),
            ("UPDATE", "update_avg_us", "update_p99_us"),
            ("INSERT", "insert_avg_us", "insert_p99_us"),
            ("READ-MODIFY-WRITE", "rmw_avg_us", "rmw_p99_us"),
        ] {
            let st = Stat::series(m, &[series])?;
            if st.ops > 0 {
                row.insert(avg, f3(st.avg));
                row.insert(p99, f3(st.p99));
            }
        }
        row.insert("errors", r.errors.to_string());
        row.insert("hlog", file_name(&hlog));
        Ok(())
    }

    fn space_point(&mut self, pt: &Point, segment: u64, skew: Skew, hybrid: bool, row: &mut Row) -> Result<()> {
        let keys = self.o.axes.keys.unwrap_or(pick(self.o.quick, 1 << 14, 1 << 20));
        let n = self.ops(1 << 14, 1 << 20);
        let size = 1024;
        let w = mix_spec(0.0, 1.0, keys, n, size, skew, self.o.seed)?;
        let mode = if hybrid { UpdateMode::Hybrid } else { UpdateMode::Append };
        let copts = ClientOptions { protocol: Protocol::Boom, update_mode: mode, ..Default::default() };
        let mut cfg = self.server_cfg();
        // The cleaner would reclaim garbage and blur what the log itself spends.
        cfg.cleaner = false;
        let eo = self.embedded(crate::bench::embedded::pool_size_for(n, size, 1, segment), segment, None, cfg);
        let hlog = self.hlog(pt, "");
        let ro = self.run_opts(
            format!("{} {} {}", skew.label(), if hybrid { "hybrid" } else { "append" }, short_bytes(segment)),
            1,
            n,
            0,
            Some(hlog.clone()),
        );
        let (r, d) = on_target!(self.o, eo, |t, ep| {
            let before = Counters::read(&t, &ep)?;
            let r = runner::run(&t, &ep, &copts, &w, &ro)?;
            let after = Counters::read(&t, &ep)?;
            Ok::<_, SweepError>((r, after.since(&before)))
        })?;
        let st = Stat::series(&r.measurements, &["UPDATE"])?;
        // A remote server has its own segment size.
        let segment = if self.o.server.is_some() && d.segment_size > 0 { d.segment_size } else { segment };
        row.insert("segment_size", segment.to_string());
        row.insert("theta", skew.label());
        row.insert("mode", if hybrid { "hybrid" } else { "append" }.to_string());
        row.insert("keys", keys.to_string());
        row.insert("value_size", size.to_string());
        row.insert("ops", n.to_string());
        row.insert("put_ops_per_sec", format!("{:.1}", r.run.throughput()));
        st.put(row, "put_", &["put_avg_us", "put_p50_us", "put_p99_us"]);
        row.insert("logical_bytes", d.logical.to_string());
        row.insert("pm_bytes_used", d.pm_used.to_string());
        row.insert("bytes_in_place", d.in_place_bytes.to_string());
        row.insert("entries_in_place", d.in_place_entries.to_string());
        if d.logical > 0 {
            row.insert("space_change_pct", format!("{:.2}", (d.pm_used as f64 / d.logical as f64 - 1.0) * 100.0));
        }
        row.insert("grants", d.grants.to_string());
        row.insert("errors", r.errors.to_string());
        row.insert("hlog", file_name(&hlog));
        Ok(())
    }

    fn writeback_point(&mut self, pt: &Point, flush: FlushKind, coop: bool, size: u64, row: &mut Row) -> Result<()> {
        // Throughput: as many PUTs as fit in the run time, at most `n` (and 1 GiB).
        let n = self.ops(50_000, 500_000).min((1 << 30) / (size + 96)).max(100);
        let run_time = self.run_time();
        let warm = (n / 20).clamp(100, 2000);
        let clients = 2;
        let workers = self.o.axes.workers.unwrap_or(2);
        let cfg = ServerConfig { workers, coop_writeback: coop, log_clients: false, ..Default::default() };
        let eo = self.embedded(
            crate::bench::embedded::pool_size_for(n + warm, size, clients, 64 << 20),
            64 << 20,
            Some(flush),
            cfg,
        );
        let copts = ClientOptions::default();
        let warm_w = insert_spec(size, 0, warm, n + warm, self.o.seed)?;
        let put_w = insert_spec(size, warm, n, n + warm, self.o.seed)?;
        let hlog = self.hlog(pt, "");
        let label = format!("{flush} coop {} {}", if coop { "on" } else { "off" }, short_bytes(size));
        let ro_warm = self.run_opts(format!("{label} warm"), clients as usize, 0, 0, None);
        let mut ro = self.run_opts(label, clients as usize, 0, 0, Some(hlog.clone()));
        ro.duration = Some(run_time);
        let (r, d) = on_target!(self.o, eo, |t, ep| {
            runner::load(&t, &ep, &copts, &warm_w, &ro_warm)?;
            let before = Counters::read(&t, &ep)?;
            let r = runner::load(&t, &ep, &copts, &put_w, &ro)?;
            let after = Counters::read(&t, &ep)?;
            Ok::<_, SweepError>((r, after.since(&before)))
        })?;
        let st = Stat::series(&r.measurements, &["INSERT"])?;
        row.insert("flush", flush.to_string());
        row.insert("coop", if coop { "on" } else { "off" }.to_string());
        row.insert("size", size.to_string());
        row.insert("clients", clients.to_string());
        row.insert("workers", workers.to_string());
        row.insert("ops", r.run.operations.to_string());
        row.insert("put_ops_per_sec", format!("{:.1}", r.run.throughput()));
        st.put(row, "put_", &["put_avg_us", "put_p50_us", "put_p99_us"]);
        row.insert("coop_ranges", d.coop_ranges.to_string());
        row.insert("coop_steals", d.coop_steals.to_string());
        row.insert("flush_lines", d.flush_lines.to_string());
        row.insert("errors", r.errors.to_string());
        row.insert("hlog", file_name(&hlog));
        Ok(())
    }

    fn threads_point(&mut self, pt: &Point, protocol: Protocol, threads: usize, row: &mut Row) -> Result<()> {
        let size = match &self.o.axes.sizes {
            Some(v) if !v.is_empty() => v[0],
            _ => 2048,
        };
        // Throughput: as many operations as fit in the run time, at most `n` (and 1 GiB).
        let n = self.ops(200_000, 2_000_000).min((1 << 30) / (size + 96)).max(threads as u64);
        let run_time = self.run_time();
        let cfg = self.server_cfg();
        let workers = cfg.workers;
        let eo = self.embedded(
            crate::bench::embedded::pool_size_for(n, size, threads as u64, 64 << 20),
            64 << 20,
            None,
            cfg,
        );
        let copts = ClientOptions { protocol, ..Default::default() };
        let put_w = insert_spec(size, 0, n, n, self.o.seed)?;
        let label = format!("{protocol} x{threads}");
        let (put_hlog, get_hlog) = (self.hlog(pt, "put"), self.hlog(pt, "get"));
        let mut ro_put = self.run_opts(format!("{label} PUT"), threads, 0, 0, Some(put_hlog.clone()));
        ro_put.duration = Some(run_time);
        let mut ro_get = self.run_opts(format!("{label} GET"), threads, n, 100, Some(get_hlog.clone()));
        ro_get.duration = Some(run_time);
        let seed = self.o.seed;
        let (put, get) = on_target!(self.o, eo, |t, ep| {
            let put = runner::load(&t, &ep, &copts, &put_w, &ro_put)?;
            // GETs over the keys the PUT phase stored.
            let get_w = mix_spec(1.0, 0.0, put.run.operations.max(1), n, size, Skew::Uniform, seed)?;
            let get = runner::run(&t, &ep, &copts, &get_w, &ro_get)?;
            Ok::<_, SweepError>((put, get))
        })?;
        let ps = Stat::series(&put.measurements, &["INSERT"])?;
        let gs = Stat::series(&get.measurements, &["READ"])?;
        row.insert("protocol", protocol.to_string());
        row.insert("threads", threads.to_string());
        row.insert("size", size.to_string());
        row.insert("workers", if self.o.server.is_some() { "remote".into() } else { workers.to_string() });
        row.insert("cores", std::thread::available_parallelism().map(std::num::NonZero::get).unwrap_or(1).to_string());
        row.insert("ops", (put.run.operations + get.run.operations).to_string());
        row.insert("put_ops_per_sec", format!("{:.1}", put.run.throughput()));
        ps.put(row, "put_", &["put_avg_us", "put_p99_us"]);
        row.insert("get_ops_per_sec", format!("{:.1}", get.run.throughput()));
        gs.put(row, "get_", &["get_avg_us", "get_p99_us"]);
        row.insert("errors", (put.errors + get.errors).to_string());
        row.insert("put_hlog", file_name(&put_hlog));
        row.insert("get_hlog", file_name(&get_hlog));
        Ok(())
    }
}

fn file_name(p: &std::path::Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median time (us) of [`Media::persist`] of `len` freshly written bytes, on a pool
/// file in `dir` (default: `/dev/shm` or the temp dir) with the CPU's best flush.
pub fn writeback_us(dir: Option<PathBuf>, len: usize, iters: usize) -> Result<f64> {
    let parent = dir.unwrap_or_else(|| {
        let shm = std::path::Path::new("/dev/shm");
        if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    });
    let tmp = tempfile::Builder::new()
        .prefix("boomkv-wb-")
        .tempdir_in(&parent)
        .map_err(|e| SweepError::Io { path: parent.clone(), source: e })?;
    let region = (len.next_power_of_two() * 64).max(4 << 20);
    let (media, _) = Media::open(
        &tmp.path().join("wb.pool"),
        &MediaOptions { create_size: Some(region as u64), ..Default::default() },
    )?;
    let data = vec![0xa5u8; len];
    let slots = (region / len.next_power_of_two()).max(1);
    let mut v = Vec::with_capacity(iters);
    for i in 0..iters + iters / 10 {
        let off = ((i % slots) * len.next_power_of_two()) as u64;
        media.map().write(off, &data)?;
        let t0 = Instant::now();
        media.persist(off, len)?;
        let dt = t0.elapsed().as_nanos() as f64 / 1000.0;
        if i >= iters / 10 {
            v.push(dt);
        }
    }
    Ok(median(&mut v))
}

struct Keys(Vec<Vec<u8>>);

impl KeySource for Keys {
    fn key_matches(&self, loc: &Loc, key: &[u8]) -> bool {
        self.0.get(loc.offset as usize).is_some_and(|k| k == key)
    }
}

/// Median time (us) of one hash-index upsert (`put`) or lookup of an existing key in
/// an index of `n` keys, timed over batches of 1000.
pub fn index_us(put: bool, n: usize) -> Result<f64> {
    let keys =
        Keys((0..n as u64).map(|i| format!("user{}", crate::workload::fnvhash64(i as i64)).into_bytes()).collect());
    let idx = Index::new(IndexKind::Hash);
    let loc = |i: usize, v: u64| Loc { segment: 1, offset: i as u32, len: 64, version: v, tombstone: false };
    for (i, k) in keys.0.iter().enumerate() {
        idx.upsert(k, loc(i, 1), &keys);
    }
    let batch = 1000.min(n.max(1));
    let mut v = Vec::new();
    let mut version = 2;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..50 {
        let picks: Vec<usize> = (0..batch)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % n as u64) as usize
            })
            .collect();
        let t0 = Instant::now();
        for &i in &picks {
            if put {
                std::hint::black_box(idx.upsert(&keys.0[i], loc(i, version), &keys));
                version += 1;
            } else {
                std::hint::black_box(idx.get(&keys.0[i], &keys));
            }
        }
        v.push(t0.elapsed().as_nanos() as f64 / 1000.0 / batch as f64);
    }
    Ok(median(&mut v))
}

/// Median time (us) of one copy of `len` bytes between two DRAM buffers.
pub fn memcpy_us(len: usize, iters: usize) -> f64 {
    let src = vec![0x5au8; len];
    let mut dst = vec![0u8; len];
    let batch = 100;
    let mut v = Vec::new();
    for _ in 0..(iters / batch).max(5) {
        let t0 = Instant::now();
        for _ in 0..batch {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        v.push(t0.elapsed().as_nanos() as f64 / 1000.0 / batch as f64);
    }
    median(&mut v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_measure_something() {
        assert!(memcpy_us(4096, 1000) > 0.0);
        assert!(index_us(true, 2000).unwrap() > 0.0);
        assert!(index_us(false, 2000).unwrap() > 0.0);
        assert!(writeback_us(None, 1024, 200).unwrap() >= 0.0);
    }

    #[test]
    fn every_preset_starts_with_the_common_columns() {
        for p in Preset::ALL {
            assert_eq!(&columns(p)[..4], &COMMON);
        }
    }
}
