//! What a server shares, and what a protocol's server half may use.
//!
//! - [`ServerCore`]: one pool's server state, shared by every transport serving it: the
//!   pool, the configuration, the counters and [`ServerStats`], GETs in flight
//!   ([`inflight`]), sampled step timings ([`phases`]), the server's tombstone log, and
//!   the housekeeping thread (the cleaner and the stats line).
//! - `Shared`: one transport's view of a core (its cooperative write-back, [`coop`],
//!   and the local regions over segments).
//! - `Conn` and `Ctx` ([`context`]): a client's protocol-neutral state, and the context a
//!   protocol's server half (`crate::proto::ServerSide`) runs a request in: reply,
//!   refuse, commit an entry, grant a segment, log a tombstone, look up, time.
//!
//! No protocol is named here; [`crate::server`] runs the threads, [`crate::proto`] the
//! message flows.
//!
//! May import: `error`, `index`, `log`, `pmem`, `transport`, `units`, `cpus`, `wire`, `measure`
//! (histograms).

pub mod context;
pub mod coop;
pub mod inflight;
pub(crate) mod pending;
pub mod phases;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::index::IndexKind;
use crate::log::cleaner::{CleanPolicy, Cleaner};
use crate::log::format as fmt;
use crate::log::{Pool, ServerLog};
use crate::transport::{Access, Transport};
use crate::wire::Protocol;
use coop::CoopWriteback;
use inflight::InflightGets;
use phases::Phases;

pub(crate) use context::{Conn, Ctx, ServerRead, WorkerState};
/// with its fast default hasher, since they are touched on every completion.
pub(crate) type ConnMap<K, V> = hashbrown::HashMap<K, V>;

/// Largest value the server accepts by default (1 MiB).
pub const DEFAULT_MAX_VALUE: u32 = 1 << 20;

/// The largest value any protocol carries with the longest key: one transfer
/// ([`crate::transport::MAX_MESSAGE`]) holds an RPC PUT's message header and length
/// word, the entry header, the key and the value (a GET reply holds less).
pub const MAX_VALUE_LIMIT: u32 = crate::transport::MAX_MESSAGE
    - (crate::wire::MSG_HEADER + 4) as u32
    - fmt::ENTRY_HEADER_SIZE as u32
    - fmt::MAX_KEY_LEN;

/// Server settings.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Polling worker threads.
    pub workers: usize,
    /// Cooperative write-back between workers.
    pub coop_writeback: bool,
    /// Range size of cooperative write-back.
    pub coop_chunk: usize,
    /// Clients connected at once; more are refused.
    pub max_clients: usize,
    /// Disconnect clients idle this long (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// Largest value.
    pub max_value: u32,
    /// Segments one client may hold (0: no limit).
    pub segment_quota: u64,
    /// Protocols accepted (empty: all).
    pub protocols: Vec<Protocol>,
    /// Run the cleaner.
    pub cleaner: bool,
    /// The cleaner compacts sealed segments at most this live.
    pub clean_below: f64,
    /// The cleaner runs when at most this fraction of the segments is free.
    pub clean_when_free: f64,
    /// How often the cleaner looks.
    pub clean_interval: Duration,
    /// Print a stats line this often (`None`: never).
    pub stats_interval: Option<Duration>,
    /// Log connects and disconnects on stderr.
    pub log_clients: bool,
    /// Run the polling workers on these CPUs only (`None`: wherever the scheduler puts
    /// them). Benchmarks give them CPUs the clients do not use ([`crate::cpus::Layout`]).
    pub worker_cpus: Option<crate::cpus::CpuList>,
    /// Each worker runs on the one CPU of `worker_cpus` its number picks (worker `i` on
    /// the `i`-th, counting round the list), which it shares with client threads: an idle
    /// worker yields its CPU between polls instead of spinning on it
    /// ([`crate::cpus::Layout::colocate`]).
    pub colocated: bool,
}

impl ServerConfig {
    /// Places the workers as `layout` says (`None`: wherever the scheduler puts
    /// them); colocated, a worker on each CPU of the layout at least (more take the
    /// CPUs round again, as the clients' threads do).
    pub fn place(&mut self, layout: Option<&crate::cpus::Layout>) {
        self.worker_cpus = layout.map(|l| l.server.clone());
        self.colocated = layout.is_some_and(|l| l.colocated);
        if let Some(l) = layout.filter(|l| l.colocated) {
            self.workers = self.workers.max(l.server.len());
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            workers: default_workers(),
            coop_writeback: true,
            coop_chunk: 4096,
            max_clients: 256,
            idle_timeout: None,
            max_value: DEFAULT_MAX_VALUE,
            segment_quota: 0,
            protocols: Vec::new(),
            cleaner: true,
            clean_below: 0.5,
            clean_when_free: 0.25,
            clean_interval: Duration::from_millis(50),
            stats_interval: None,
            log_clients: true,
            worker_cpus: None,
            colocated: false,
        }
    }
}

/// One worker on machines with up to 4 cores, else half the cores (at most 8).
pub fn default_workers() -> usize {
    let n = crate::cpus::count();
    if n <= 4 {
        1
    } else {
        (n / 2).min(8)
    }
}

/// Operation counters: one worker's part of the server's (which
/// [`ServerCore::stats`] sums). Aligned to two cache lines so that parts never share
/// one (nor the line an adjacent prefetch pairs with).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct ServerCounters {
    /// PUTs committed.
    pub puts: AtomicU64,
    /// DELETEs committed.
    pub dels: AtomicU64,
    /// GETs answered with data.
    pub gets: AtomicU64,
    /// GETs of absent keys.
    pub not_found: AtomicU64,
    /// Scans answered.
    pub scans: AtomicU64,
    /// Segments granted.
    pub grants: AtomicU64,
    /// Requests refused with an error (a full pool's refusals apart).
    pub errors: AtomicU64,
    /// Requests refused because the pool had no free segment to grant.
    pub pool_full: AtomicU64,
    /// Clients accepted since start.
    pub clients_total: AtomicU64,
    /// Clients refused.
    pub clients_refused: AtomicU64,
    /// Bytes of entries written to clients (GET data).
    pub bytes_out: AtomicU64,
    /// Clients disconnected for going over a per-connection bound.
    pub over_limit: AtomicU64,
}

/// Parts of the server's counters. Worker `w` counts in part
/// [`crate::cpus::worker_part`]`(w)`, and the acceptor in part 0; [`ServerCore::stats`]
/// sums them. One shared set of counters had both workers of a two-CPU server write one
/// cache line on every GET: a line that crosses between CPUs costs as much as the
/// look-up itself.
pub(crate) struct Counters {
    parts: Box<[ServerCounters]>,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters { parts: (0..crate::cpus::WORKER_PARTS).map(|_| ServerCounters::default()).collect() }
    }
}

impl Counters {
    /// The part worker `worker` counts in.
    pub(crate) fn part(&self, worker: usize) -> &ServerCounters {
        &self.parts[crate::cpus::worker_part(worker)]
    }

    /// One counter summed over the parts.
    fn sum(&self, counter: impl Fn(&ServerCounters) -> &AtomicU64) -> u64 {
        self.parts.iter().map(|p| counter(p).load(Ordering::Relaxed)).sum()
    }
}

/// A snapshot of the server's statistics (what `boomctl stats` prints).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ServerStats {
    /// Seconds since start.
    pub uptime_s: f64,
    /// Clients connected now.
    pub clients: usize,
    /// Clients accepted since start.
    pub clients_total: u64,
    /// Clients refused since start.
    pub clients_refused: u64,
    /// PUTs.
    pub puts: u64,
    /// DELETEs.
    pub dels: u64,
    /// GETs with data.
    pub gets: u64,
    /// GETs of absent keys.
    pub not_found: u64,
    /// Scans.
    pub scans: u64,
    /// Segments granted.
    pub grants: u64,
    /// Errors returned, a full pool's refusals apart.
    pub errors: u64,
    /// Requests refused because the pool had no free segment to grant: a client
    /// waiting for room asks again and again, so one waiting PUT counts many.
    #[serde(default)]
    pub pool_full: u64,
    /// Peers' one-sided operations refused by the transports (a foreign or unknown
    /// rkey, out of bounds, missing access); each closed the connection it came on.
    pub access_violations: u64,
    /// Regions the server's transports expose now (a remote right, not yet revoked):
    /// granted segments of the protocols whose clients write them, request and reply
    /// regions, RDMP read regions, the passive protocols' tables. Everything registered
    /// with a remote right on those transports counts: an embedded server's (`ycsb`)
    /// shares its transport with its clients, whose reply buffers count too; a region
    /// whose connection has ended counts until the server has revoked it.
    #[serde(default)]
    pub exposed_regions: u64,
    /// Clients disconnected for going over a per-connection bound (GETs in flight,
    /// send backlog).
    pub over_limit: u64,
    /// Keys indexed (tombstones included).
    pub index_entries: usize,
    /// Of those, deleted keys' tombstones.
    #[serde(default)]
    pub index_tombstones: usize,
    /// Space accounting.
    pub space: crate::log::SpaceReport,
    /// Free segments.
    pub free_segments: u64,
    /// Cache lines written back, fences, msyncs.
    pub flush: crate::pmem::FlushCounts,
    /// Cooperative write-back ranges and steals.
    pub coop: coop::CoopStats,
    /// Cleaner totals.
    pub cleaner: crate::log::cleaner::CleanStats,
    /// Workers.
    pub workers: usize,
    /// Write-back instruction.
    pub flush_kind: String,
    /// Index kind.
    pub index: IndexKind,
    /// Sampled in-server timings of PUT and GET steps (medians).
    pub phases: phases::PhaseReport,
}

/// A transport's refused one-sided operations and exposed regions, now.
pub(crate) type TransportCounts = Box<dyn Fn() -> (u64, u64) + Send + Sync>;

/// What every transport's server shares for one pool: the pool, GETs in flight,
/// counters, client accounting, the cleaner and the shutdown flag.
pub struct ServerCore {
    pub(crate) pool: Arc<Pool>,
    pub(crate) cfg: ServerConfig,
    pub(crate) inflight: InflightGets,
    pub(crate) counters: Counters,
    pub(crate) phases: Phases,
    pub(crate) cleaned: Mutex<crate::log::cleaner::CleanStats>,
    pub(crate) coop: Mutex<coop::CoopStats>,
    pub(crate) clients: AtomicUsize,
    pub(crate) shutdown: AtomicBool,
    pub(crate) started: Instant,
    pub(crate) housekeeping: Mutex<Option<JoinHandle<()>>>,
    /// One source per transport serving this core: its refused one-sided operations
    /// and its exposed regions, now.
    pub(crate) transport_counts: Mutex<Vec<TransportCounts>>,
    /// The server's own log of DELETEs that found no room in their client's segment.
    pub(crate) tombstones: Mutex<ServerLog>,
    /// PUTs made durable by their clients and not yet counted (RDMP-CC).
    pub(crate) pending_puts: pending::PendingPuts,
}

impl ServerCore {
    /// Wraps `pool` and starts the cleaner / stats thread.
    pub fn new(pool: Arc<Pool>, cfg: ServerConfig) -> Result<Arc<ServerCore>> {
        if cfg.max_value > MAX_VALUE_LIMIT {
            return Err(Error::invalid(format!(
                "largest value {} bytes: one transfer carries values of at most {MAX_VALUE_LIMIT} bytes",
                cfg.max_value
            )));
        }
        let tombstones = ServerLog::resume(&pool, fmt::TOMBSTONE_OWNER)?;
        let cleaner = if cfg.cleaner { Cleaner::resume(&pool)? } else { Cleaner::new() };
        pool.set_value_limit(cfg.max_value);
        let core = Arc::new(ServerCore {
            pool,
            cfg: ServerConfig { workers: cfg.workers.max(1), ..cfg },
            inflight: InflightGets::default(),
            counters: Counters::default(),
            phases: Phases::default(),
            cleaned: Mutex::new(Default::default()),
            coop: Mutex::new(Default::default()),
            clients: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            started: Instant::now(),
            housekeeping: Mutex::new(None),
            transport_counts: Mutex::new(Vec::new()),
            tombstones: Mutex::new(tombstones),
            pending_puts: pending::PendingPuts::default(),
        });
        if core.cfg.cleaner || core.cfg.stats_interval.is_some() {
            let c = core.clone();
            let h = std::thread::Builder::new()
                .name("boomkv-cleaner".into())
                .spawn(move || housekeeping(c, cleaner))
                .map_err(|e| Error::io("spawn cleaner", e))?;
            *core.housekeeping.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(h);
        }
        Ok(core)
    }

    /// The pool.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.cfg
    }

    /// Asks every server on this core to stop (they finish what they hold).
    pub fn request_shutdown(&self) {
        self.shutdown.store(true, Ordering::Release);
    }

    /// Whether shutdown was requested.
    pub fn is_stopping(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// Requests shutdown and waits for the cleaner thread (unless called on it).
    pub fn shutdown(&self) {
        self.request_shutdown();
        let h = self.housekeeping.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(h) = h {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    /// Statistics now.
    pub fn stats(&self) -> ServerStats {
        let c = &self.counters;
        let (access_violations, exposed_regions) = self
            .transport_counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|f| f())
            .fold((0, 0), |(v, e), (v1, e1)| (v + v1, e + e1));
        ServerStats {
            uptime_s: self.started.elapsed().as_secs_f64(),
            clients: self.clients.load(Ordering::Relaxed),
            clients_total: c.sum(|p| &p.clients_total),
            clients_refused: c.sum(|p| &p.clients_refused),
            puts: c.sum(|p| &p.puts),
            dels: c.sum(|p| &p.dels),
            gets: c.sum(|p| &p.gets),
            not_found: c.sum(|p| &p.not_found),
            scans: c.sum(|p| &p.scans),
            grants: c.sum(|p| &p.grants),
            errors: c.sum(|p| &p.errors),
            pool_full: c.sum(|p| &p.pool_full),
            access_violations,
            exposed_regions,
            over_limit: c.sum(|p| &p.over_limit),
            index_entries: self.pool.index().len(),
            index_tombstones: self.pool.index().tombstones(),
            space: self.pool.space_report(),
            free_segments: self.pool.free_segments(),
            flush: self.pool.media().flush_counts(),
            coop: *self.coop.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
            cleaner: *self.cleaned.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
            workers: self.cfg.workers,
            flush_kind: self.pool.media().flush_kind().to_string(),
            index: self.pool.index().kind(),
            phases: self.phases.report(),
        }
    }

    /// Logs `msg` on stderr unless client logging is off.
    pub(crate) fn log(&self, msg: &str) {
        if self.cfg.log_clients {
            eprintln!("boomkv server: {msg}");
        }
    }
}

impl Drop for ServerCore {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Whether the slot of `p` now holds the complete entry its allocation sealed for `key`:
/// seal, version, checksum and key as placed. Returns its location.
pub(crate) fn check_pending(pool: &Pool, key: &[u8], p: &pending::PendingPut) -> Option<crate::index::Loc> {
    let size = pool.segment_size();
    // Checked on copies, each byte taken once: its client may still write the slot.
    let read = pool.slot_reader(p.segment, p.offset);
    let place = fmt::SlotPlace { segment: p.segment, generation: p.generation, offset: p.offset };
    let (h, stored) = fmt::check_sealed_copied(read, place, size, &pool.trust()).ok()?;
    let ok = h.version == p.version && h.next_offset == p.next_offset && stored == key;
    ok.then(|| crate::index::Loc {
        segment: p.segment as u32,
        offset: p.offset as u32,
        len: h.entry_len() as u32,
        version: h.version,
        tombstone: h.is_tombstone(),
    })
}

/// Indexes the pending PUTs (RDMP-CC's) of `key` that completed, written back first:
/// what every look-up does before it reads the index, whatever its protocol, so a GET
/// sees a PUT once its client was told it is durable, not only at that client's next
/// request.
pub(crate) fn index_completed(pool: &Pool, pending: &pending::PendingPuts, key: &[u8]) {
    pending.take_key(key, |p| index_pending(pool, key, p));
}

/// [`index_completed`] for every key (before a scan).
pub(crate) fn index_all_completed(pool: &Pool, pending: &pending::PendingPuts) {
    pending.take_all(|key, p| index_pending(pool, key, p));
}

/// Writes back and indexes pending PUT `p` of `key` if it completed (then true).
fn index_pending(pool: &Pool, key: &[u8], p: &pending::PendingPut) -> bool {
    let Some(loc) = check_pending(pool, key, p) else { return false };
    let wb = pool.writeback(pool.pool_offset(p.segment, p.offset), loc.len as usize);
    if wb.is_ok() {
        pool.index_entry(key, loc);
    }
    wb.is_ok()
}

/// Segments per chunk of [`Shared::seg_mrs`].
const SEG_MR_CHUNK: u64 = 1024;

/// The regions of [`SEG_MR_CHUNK`] segments, each set when first needed.
pub(crate) type SegMrChunk<T> = Box<[OnceLock<<T as Transport>::Mr>]>;

/// One transport's server state over a core: the core, the transport, cooperative
/// write-back between its workers, and the local regions over the segments.
pub(crate) struct Shared<T: Transport> {
    pub(crate) core: Arc<ServerCore>,
    pub(crate) pool: Arc<Pool>,
    pub(crate) t: T,
    pub(crate) coop: CoopWriteback,
    /// Per segment: a region over it for local use only (the source of GET replies).
    /// Peers never get these rkeys: what a client may touch is registered bound to its
    /// own queue pair ([`Shared::bound_seg_mr`]).
    /// Each is set once and never changes, so a GET borrows it: no lock and no
    /// reference count that every worker's GETs would write (on two CPUs such a shared
    /// line cost more than the rest of the look-up). In chunks of [`SEG_MR_CHUNK`]
    /// segments, made when a segment of theirs is first read.
    pub(crate) seg_mrs: Vec<OnceLock<SegMrChunk<T>>>,
}

impl<T: Transport> std::ops::Deref for Shared<T> {
    type Target = ServerCore;
    fn deref(&self) -> &ServerCore {
        &self.core
    }
}

impl<T: Transport> Shared<T> {
    /// `core` served over `t` by `workers` workers.
    pub(crate) fn new(t: T, core: Arc<ServerCore>) -> Shared<T> {
        let workers = core.cfg.workers;
        {
            let t = t.clone();
            core.transport_counts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(Box::new(move || (t.access_violations(), t.exposed_regions())));
        }
        Shared {
            coop: CoopWriteback::new(workers, core.cfg.coop_writeback, core.cfg.coop_chunk),
            seg_mrs: (0..core.pool.segment_count().div_ceil(SEG_MR_CHUNK)).map(|_| OnceLock::new()).collect(),
            pool: core.pool.clone(),
            core,
            t,
        }
    }

    pub(crate) fn seg_mr(&self, seg: u64) -> Result<&T::Mr> {
        let past = || Error::invalid(format!("segment {seg} is past the pool's {}", self.pool.segment_count()));
        if seg >= self.pool.segment_count() {
            return Err(past());
        }
        let chunk = self.seg_mrs.get((seg / SEG_MR_CHUNK) as usize).ok_or_else(past)?;
        let chunk = chunk.get_or_init(|| (0..SEG_MR_CHUNK).map(|_| OnceLock::new()).collect());
        let cell = chunk.get((seg % SEG_MR_CHUNK) as usize).ok_or_else(past)?;
        if let Some(mr) = cell.get() {
            return Ok(mr);
        }
        let media = self.pool.media();
        let mr = self.t.register(
            media.map_arc().clone(),
            media.file().cloned(),
            self.pool.segment_offset(seg),
            self.pool.segment_size(),
            Access::NONE,
        )?;
        // Two workers may race here: one region wins, the other is dropped (deregistered).
        let _ = cell.set(mr);
        cell.get().ok_or_else(|| Error::invalid("a segment's region was not kept"))
    }

    /// A region over segment `seg` that only the client on `qp` can reach, with `access`.
    pub(crate) fn bound_seg_mr(&self, qp: &T::Qp, seg: u64, access: Access) -> Result<T::Mr> {
        let media = self.pool.media();
        self.t.register_bound(
            qp,
            media.map_arc().clone(),
            media.file().cloned(),
            self.pool.segment_offset(seg),
            self.pool.segment_size(),
            access,
        )
    }

    pub(crate) fn stats(&self) -> ServerStats {
        *self.core.coop.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = self.coop.stats();
        self.core.stats()
    }
}

fn housekeeping(sh: Arc<ServerCore>, mut cleaner: Cleaner) {
    let mut last_stats = Instant::now();
    while !sh.shutdown.load(Ordering::Acquire) {
        std::thread::sleep(sh.cfg.clean_interval.min(Duration::from_millis(100)));
        if sh.cfg.cleaner {
            let policy = CleanPolicy { clean_below: sh.cfg.clean_below, clean_when_free: sh.cfg.clean_when_free };
            // Short of space and making progress: go on at once (bounded by the pool's
            // sealed segments), not after the pause.
            loop {
                match cleaner.round(&sh.pool, &policy) {
                    Ok(r) => {
                        if r.stats.segments_freed > 0 {
                            sh.cleaned.lock().unwrap_or_else(std::sync::PoisonError::into_inner).add(r.stats);
                        }
                        if !(r.pressure && r.stats.segments_freed > 0) || sh.shutdown.load(Ordering::Acquire) {
                            break;
                        }
                    }
                    Err(e) => {
                        sh.log(&format!("cleaner: {e}"));
                        break;
                    }
                }
            }
        }
        if let Some(iv) = sh.cfg.stats_interval {
            if last_stats.elapsed() >= iv {
                last_stats = Instant::now();
                let s = sh.stats();
                eprintln!(
                    "boomkv server: {} clients, {} puts, {} dels, {} gets ({} not found), {} keys, {} free segments, {} garbage",
                    s.clients,
                    s.puts,
                    s.dels,
                    s.gets,
                    s.not_found,
                    s.index_entries.saturating_sub(s.index_tombstones),
                    s.free_segments,
                    crate::units::human_bytes(s.space.garbage_bytes)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_of_every_worker_add_up_and_parts_share_no_cache_line() {
        let c = Counters::default();
        c.part(0).gets.fetch_add(2, Ordering::Relaxed);
        c.part(1).gets.fetch_add(3, Ordering::Relaxed);
        // A worker past the parts counts in a shared one, and is still summed.
        c.part(crate::cpus::WORKER_PARTS + 1).gets.fetch_add(4, Ordering::Relaxed);
        c.part(5).bytes_out.fetch_add(7, Ordering::Relaxed);
        assert_eq!(c.sum(|p| &p.gets), 9);
        assert_eq!(c.sum(|p| &p.bytes_out), 7);
        let (a, b) = (c.part(0) as *const ServerCounters as usize, c.part(1) as *const ServerCounters as usize);
        assert!(b - a >= 128 && a % 128 == 0, "parts {a:#x} and {b:#x}");
    }
}
