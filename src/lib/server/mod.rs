//! The server: accepts clients, runs worker threads that poll completion queues and
//! execute the three protocols' server sides against the pool, tracks GETs in flight,
//! shares write-back work cooperatively, and runs the cleaner.
//!
//! Threads: one acceptor per listen address; `workers` polling workers, each owning
//! its clients' queue pairs and one send and one receive completion queue; one cleaner.
//! A client is handed to a worker round robin at connect time and stays there, so one
//! client's appends are committed (and counted) in order. Idle workers steal
//! write-back ranges from busy ones ([`coop`]).

pub mod coop;
pub mod inflight;
pub mod phases;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::index::IndexKind;
use crate::log::cleaner::Cleaner;
use crate::log::format::{self as fmt, EntryHeader};
use crate::log::{ActiveSegment, CommitError, CommitTimes, Pool, ServerLog, WriteMode};
use crate::transport::{
    Access, Completion, CompletionQueue, Endpoint, Listener, MemoryRegion, QueuePair, Transport, WcOpcode,
};
use crate::wire::{ErrorCode, Hello, Msg, Protocol, PutImm, Welcome, MAX_MESSAGE};
use coop::CoopWriteback;
use inflight::InflightGets;
use phases::{Phase, Phases};

/// The worker's small maps (connections by queue pair, GETs by work request): hashbrown
/// with its fast default hasher, since they are touched on every completion.
pub(crate) type ConnMap<K, V> = hashbrown::HashMap<K, V>;

/// Largest value the server accepts by default (1 MiB).
pub const DEFAULT_MAX_VALUE: u32 = 1 << 20;
/// Receive buffer size for the one-sided protocols' control messages.
const SMALL_RECV: u32 = 4096;
/// Receive buffers posted per client.
const RECV_DEPTH: u32 = 8;
/// Receive buffers per client for the RPC baseline (each holds a whole request).
const RPC_RECV_DEPTH: u32 = 4;
/// Where the entry of an RpcPut message starts (header, then a u32 length).
const RPC_PUT_OFF: usize = crate::wire::MSG_HEADER + 4;

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
        }
    }
}

/// One worker on machines with up to 4 cores, else half the cores (at most 8).
pub fn default_workers() -> usize {
    let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if n <= 4 {
        1
    } else {
        (n / 2).min(8)
    }
}

/// Operation counters.
#[derive(Debug, Default)]
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
    /// Requests refused with an error.
    pub errors: AtomicU64,
    /// Clients accepted since start.
    pub clients_total: AtomicU64,
    /// Clients refused.
    pub clients_refused: AtomicU64,
    /// Bytes of entries written to clients (GET data).
    pub bytes_out: AtomicU64,
    /// Clients disconnected for going over a per-connection bound.
    pub over_limit: AtomicU64,
}

/// A snapshot of the server's statistics (what `boomctl stats` prints).
#[derive(Clone, Debug, serde::Serialize)]
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
    /// Errors returned.
    pub errors: u64,
    /// Peers' one-sided operations refused by the transports (a foreign or unknown
    /// rkey, out of bounds, missing access); each closed the connection it came on.
    pub access_violations: u64,
    /// Clients disconnected for going over a per-connection bound (GETs in flight,
    /// send backlog).
    pub over_limit: u64,
    /// Keys indexed (tombstones included).
    pub index_entries: usize,
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

/// What every transport's server shares for one pool: the pool, GETs in flight,
/// counters, client accounting, the cleaner and the shutdown flag.
pub struct ServerCore {
    pub(crate) pool: Arc<Pool>,
    pub(crate) cfg: ServerConfig,
    pub(crate) inflight: InflightGets,
    pub(crate) counters: ServerCounters,
    pub(crate) phases: Phases,
    pub(crate) cleaned: Mutex<crate::log::cleaner::CleanStats>,
    pub(crate) coop: Mutex<coop::CoopStats>,
    pub(crate) clients: AtomicUsize,
    pub(crate) shutdown: AtomicBool,
    pub(crate) started: Instant,
    pub(crate) housekeeping: Mutex<Option<JoinHandle<()>>>,
    /// One counter of refused one-sided operations per transport serving this core.
    pub(crate) violation_sources: Mutex<Vec<Box<dyn Fn() -> u64 + Send + Sync>>>,
    /// The server's own log of DELETEs that found no room in their client's segment.
    pub(crate) tombstones: Mutex<ServerLog>,
}

impl ServerCore {
    /// Wraps `pool` and starts the cleaner / stats thread.
    pub fn new(pool: Arc<Pool>, cfg: ServerConfig) -> Result<Arc<ServerCore>> {
        let tombstones = ServerLog::resume(&pool, fmt::TOMBSTONE_OWNER)?;
        pool.set_value_limit(cfg.max_value);
        let core = Arc::new(ServerCore {
            pool,
            cfg: ServerConfig { workers: cfg.workers.max(1), ..cfg },
            inflight: InflightGets::default(),
            counters: ServerCounters::default(),
            phases: Phases::default(),
            cleaned: Mutex::new(Default::default()),
            coop: Mutex::new(Default::default()),
            clients: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            started: Instant::now(),
            housekeeping: Mutex::new(None),
            violation_sources: Mutex::new(Vec::new()),
            tombstones: Mutex::new(tombstones),
        });
        if core.cfg.cleaner || core.cfg.stats_interval.is_some() {
            let c = core.clone();
            let h = std::thread::Builder::new()
                .name("boomkv-cleaner".into())
                .spawn(move || housekeeping(c))
                .map_err(|e| Error::io("spawn cleaner", e))?;
            *core.housekeeping.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
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
        let h = self.housekeeping.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = h {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    /// Statistics now.
    pub fn stats(&self) -> ServerStats {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ServerStats {
            uptime_s: self.started.elapsed().as_secs_f64(),
            clients: self.clients.load(Ordering::Relaxed),
            clients_total: l(&c.clients_total),
            clients_refused: l(&c.clients_refused),
            puts: l(&c.puts),
            dels: l(&c.dels),
            gets: l(&c.gets),
            not_found: l(&c.not_found),
            scans: l(&c.scans),
            grants: l(&c.grants),
            errors: l(&c.errors),
            access_violations: self
                .violation_sources
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|f| f())
                .sum(),
            over_limit: l(&c.over_limit),
            index_entries: self.pool.index().len(),
            space: self.pool.space_report(),
            free_segments: self.pool.free_segments(),
            flush: self.pool.media().flush_counts(),
            coop: *self.coop.lock().unwrap_or_else(|e| e.into_inner()),
            cleaner: *self.cleaned.lock().unwrap_or_else(|e| e.into_inner()),
            workers: self.cfg.workers,
            flush_kind: self.pool.media().flush_kind().to_string(),
            index: self.pool.index().kind(),
            phases: self.phases.report(),
        }
    }

    fn log(&self, msg: &str) {
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

pub(crate) struct Shared<T: Transport> {
    pub(crate) core: Arc<ServerCore>,
    pub(crate) pool: Arc<Pool>,
    pub(crate) t: T,
    pub(crate) coop: CoopWriteback,
    /// Per segment: a region over it for local use only (the source of GET replies).
    /// Peers never get these rkeys: what a client may touch is registered bound to its
    /// own queue pair ([`Shared::bound_seg_mr`]).
    pub(crate) seg_mrs: Mutex<Vec<Option<T::Mr>>>,
}

impl<T: Transport> std::ops::Deref for Shared<T> {
    type Target = ServerCore;
    fn deref(&self) -> &ServerCore {
        &self.core
    }
}

impl<T: Transport> Shared<T> {
    pub(crate) fn seg_mr(&self, seg: u64) -> Result<T::Mr> {
        let mut v = self.seg_mrs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(Some(mr)) = v.get(seg as usize) {
            return Ok(mr.clone());
        }
        let media = self.pool.media();
        let mr = self.t.register(
            media.map_arc().clone(),
            media.file().cloned(),
            self.pool.segment_offset(seg),
            self.pool.segment_size(),
            Access::NONE,
        )?;
        if v.len() <= seg as usize {
            v.resize(seg as usize + 1, None);
        }
        v[seg as usize] = Some(mr.clone());
        Ok(mr)
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
        *self.core.coop.lock().unwrap_or_else(|e| e.into_inner()) = self.coop.stats();
        self.core.stats()
    }
}

/// A running server. Dropping it (or [`Server::shutdown`]) stops every thread.
pub struct Server<T: Transport> {
    shared: Arc<Shared<T>>,
    endpoints: Vec<Endpoint>,
    threads: Vec<JoinHandle<()>>,
}

pub(crate) struct Inbox<T: Transport> {
    pub(crate) send_cq: Arc<T::Cq>,
    pub(crate) recv_cq: Arc<T::Cq>,
    pub(crate) new: Mutex<Vec<Conn<T>>>,
    /// Connections pushed to `new` since the worker last looked (checked without the lock).
    pub(crate) pending: AtomicUsize,
}

impl<T: Transport> Server<T> {
    /// Starts serving `pool` on every endpoint of `listen` over transport `t`, with a
    /// core of its own.
    pub fn start(t: T, pool: Arc<Pool>, listen: &[Endpoint], cfg: ServerConfig) -> Result<Server<T>> {
        Self::start_on(t, ServerCore::new(pool, cfg)?, listen)
    }

    /// Starts serving `core`'s pool over transport `t` (several transports can share a core).
    pub fn start_on(t: T, core: Arc<ServerCore>, listen: &[Endpoint]) -> Result<Server<T>> {
        if listen.is_empty() {
            return Err(Error::invalid("no address to listen on"));
        }
        let workers = core.cfg.workers;
        {
            let t = t.clone();
            core.violation_sources
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Box::new(move || t.access_violations()));
        }
        let shared = Arc::new(Shared {
            coop: CoopWriteback::new(workers, core.cfg.coop_writeback, core.cfg.coop_chunk),
            seg_mrs: Mutex::new(Vec::new()),
            pool: core.pool.clone(),
            core,
            t,
        });
        let mut inboxes = Vec::new();
        for _ in 0..workers {
            inboxes.push(Arc::new(Inbox::<T> {
                send_cq: Arc::new(shared.t.create_cq()?),
                recv_cq: Arc::new(shared.t.create_cq()?),
                new: Mutex::new(Vec::new()),
                pending: AtomicUsize::new(0),
            }));
        }
        let mut listeners = Vec::new();
        for ep in listen {
            let l = shared.t.listen(ep).map_err(|e| Error::Transport(format!("cannot listen on {ep}: {e}")))?;
            listeners.push(l);
        }
        let endpoints: Vec<Endpoint> = listeners.iter().map(|l| l.endpoint()).collect();
        let mut threads = Vec::new();
        for (i, ib) in inboxes.iter().enumerate() {
            let (sh, ib) = (shared.clone(), ib.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("boomkv-worker-{i}"))
                    .spawn(move || Worker::new(i, sh, ib).run())
                    .map_err(|e| Error::io("spawn worker", e))?,
            );
        }
        let rr = Arc::new(AtomicUsize::new(0));
        for l in listeners {
            let (sh, ibs, rr) = (shared.clone(), inboxes.clone(), rr.clone());
            threads.push(
                std::thread::Builder::new()
                    .name("boomkv-accept".into())
                    .spawn(move || accept_loop(sh, l, ibs, rr))
                    .map_err(|e| Error::io("spawn acceptor", e))?,
            );
        }
        Ok(Server { shared, endpoints, threads })
    }

    /// The addresses clients can connect to (real ports when bound to port 0).
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// The pool being served.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.shared.pool
    }

    /// The shared core.
    pub fn core(&self) -> &Arc<ServerCore> {
        &self.shared.core
    }

    /// Statistics now.
    pub fn stats(&self) -> ServerStats {
        self.shared.stats()
    }

    /// Stops accepting, lets workers finish the requests they hold, and joins this
    /// server's threads (other servers on the same core stop too).
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.core.request_shutdown();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl<T: Transport> Drop for Server<T> {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop<T: Transport>(sh: Arc<Shared<T>>, l: T::Listener, ibs: Vec<Arc<Inbox<T>>>, rr: Arc<AtomicUsize>) {
    while !sh.shutdown.load(Ordering::Acquire) {
        let w = rr.load(Ordering::Relaxed) % ibs.len();
        let ib = &ibs[w];
        let mut accepted: Option<(Hello, u64)> = None;
        let r = l.accept(&ib.send_cq, &ib.recv_cq, Duration::from_millis(10), |private| {
            let hello = Hello::decode(private)?;
            let refuse = |reason: String| Welcome::Refused { reason }.encode();
            if !sh.cfg.protocols.is_empty() && !sh.cfg.protocols.contains(&hello.protocol) {
                sh.counters.clients_refused.fetch_add(1, Ordering::Relaxed);
                let list: Vec<&str> = sh.cfg.protocols.iter().map(|p| p.name()).collect();
                return Ok(refuse(format!(
                    "this server speaks only {} (started with --protocol); the client asked for {}",
                    list.join(", "),
                    hello.protocol
                )));
            }
            if sh.clients.load(Ordering::Acquire) >= sh.cfg.max_clients {
                sh.counters.clients_refused.fetch_add(1, Ordering::Relaxed);
                return Ok(refuse(format!("too many clients (the server allows {})", sh.cfg.max_clients)));
            }
            let id = sh.pool.new_client_id();
            let recv_size = if hello.protocol == Protocol::Rpc { MAX_MESSAGE as u32 } else { SMALL_RECV };
            accepted = Some((hello.clone(), id));
            Ok(Welcome::Accepted {
                protocol: hello.protocol,
                client_id: id,
                segment_size: sh.pool.segment_size(),
                max_key: fmt::MAX_KEY_LEN,
                max_value: sh.cfg.max_value,
                recv_size,
            }
            .encode())
        });
        match r {
            Ok(qp) => {
                let Some((hello, id)) = accepted else {
                    // Refused in the handshake: the client was told why.
                    continue;
                };
                match Conn::<T>::new(&sh, qp, hello, id) {
                    Ok(c) => {
                        sh.clients.fetch_add(1, Ordering::AcqRel);
                        sh.counters.clients_total.fetch_add(1, Ordering::Relaxed);
                        sh.log(&format!("client {id} connected ({}, worker {w})", c.protocol));
                        ib.new.lock().unwrap_or_else(|e| e.into_inner()).push(c);
                        ib.pending.fetch_add(1, Ordering::AcqRel);
                        rr.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => sh.log(&format!("client {id}: setup failed: {e}")),
                }
            }
            Err(Error::Timeout(..)) => {}
            Err(e) => {
                if !sh.shutdown.load(Ordering::Acquire) {
                    sh.log(&format!("refused a connection: {e}"));
                }
            }
        }
    }
}

/// Sealed segments at most this live (of their capacity) are compacted whatever the
/// free space: what short-lived clients leave behind.
pub const EAGER_CLEAN_LIVE: f64 = 1.0 / 64.0;

fn housekeeping(sh: Arc<ServerCore>) {
    let mut cleaner = Cleaner::new();
    let mut last_stats = Instant::now();
    while !sh.shutdown.load(Ordering::Acquire) {
        std::thread::sleep(sh.cfg.clean_interval.min(Duration::from_millis(100)));
        if sh.cfg.cleaner {
            let total = sh.pool.segment_count().max(1);
            let free = sh.pool.free_segments();
            // Below the free threshold, compact what is at most `clean_below` live.
            // Above it, still compact at once the segments short-lived clients left
            // almost empty (one-shot `boomctl put`s each seal a segment holding one
            // entry): they cost little to move and would otherwise pile up.
            let (max_live, n) = if (free as f64) <= sh.cfg.clean_when_free * total as f64 {
                (sh.cfg.clean_below, 2)
            } else {
                (EAGER_CLEAN_LIVE, 16)
            };
            {
                match cleaner.run(&sh.pool, max_live, n) {
                    Ok(st) if st.segments_freed > 0 => {
                        let mut c = sh.cleaned.lock().unwrap_or_else(|e| e.into_inner());
                        c.segments_freed += st.segments_freed;
                        c.entries_moved += st.entries_moved;
                        c.bytes_moved += st.bytes_moved;
                        c.bytes_reclaimed += st.bytes_reclaimed;
                    }
                    Ok(_) => {}
                    Err(e) => sh.log(&format!("cleaner: {e}")),
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
                    s.index_entries,
                    s.free_segments,
                    crate::units::human_bytes(s.space.garbage_bytes)
                );
            }
        }
    }
}

/// The server's state of one client.
pub(crate) struct Conn<T: Transport> {
    pub(crate) qp: T::Qp,
    pub(crate) id: u64,
    pub(crate) protocol: Protocol,
    pub(crate) recv_mr: T::Mr,
    pub(crate) recv_size: u32,
    /// Staging buffer for the RPC baseline's replies (DRAM).
    pub(crate) send_mr: Option<T::Mr>,
    pub(crate) seg: Option<ActiveSegment>,
    pub(crate) seg_mr: Option<T::Mr>,
    /// Read-only regions over segments this client READs (RDMP GET), bound to its queue
    /// pair; revoked when it leaves.
    pub(crate) read_mrs: ConnMap<u64, T::Mr>,
    pub(crate) segments: u64,
    /// wr_id -> (key, version) of GET data writes not yet completed.
    pub(crate) gets: ConnMap<u64, (Vec<u8>, u64)>,
    /// Bytes of those writes (bounded: [`MAX_GETS_IN_FLIGHT`], [`Conn::max_get_bytes`]).
    pub(crate) get_bytes: u64,
    pub(crate) next_wr: u64,
    pub(crate) last_active: Instant,
    pub(crate) dead: Option<String>,
}

const WR_SEND: u64 = 1 << 63;

/// Most GET replies one client may have in flight (written, not yet acknowledged by its
/// transport). A client that sends GETs and never reads the replies is disconnected at
/// this bound instead of piling them up in the server's send buffers.
pub const MAX_GETS_IN_FLIGHT: usize = 64;

impl<T: Transport> Conn<T> {
    pub(crate) fn new(sh: &Shared<T>, qp: T::Qp, hello: Hello, id: u64) -> Result<Conn<T>> {
        let (recv_size, depth) = if hello.protocol == Protocol::Rpc {
            (MAX_MESSAGE as u32, RPC_RECV_DEPTH)
        } else {
            (SMALL_RECV, RECV_DEPTH)
        };
        let recv_mr = sh.t.alloc_mr((recv_size * depth) as usize, Access::LOCAL_WRITE)?;
        for i in 0..depth {
            qp.post_recv(i as u64, &recv_mr, (i * recv_size) as u64, recv_size)?;
        }
        let send_mr =
            if hello.protocol == Protocol::Rpc { Some(sh.t.alloc_mr(MAX_MESSAGE, Access::NONE)?) } else { None };
        Ok(Conn {
            qp,
            id,
            protocol: hello.protocol,
            recv_mr,
            recv_size,
            send_mr,
            seg: None,
            seg_mr: None,
            read_mrs: ConnMap::default(),
            segments: 0,
            gets: ConnMap::default(),
            get_bytes: 0,
            next_wr: 0,
            last_active: Instant::now(),
            dead: None,
        })
    }

    /// Most bytes of GET replies one client may have in flight: room for two of the
    /// largest values, and at least 4 MiB.
    pub(crate) fn max_get_bytes(max_value: u32) -> u64 {
        (2 * max_value as u64 + (64 << 10)).max(4 << 20)
    }

    /// Counts a GET reply of `len` bytes as in flight, or says why the client is over
    /// its bound.
    pub(crate) fn admit_get(&mut self, len: u32, max_value: u32) -> std::result::Result<(), String> {
        if self.gets.len() >= MAX_GETS_IN_FLIGHT {
            return Err(format!(
                "over the limit of {MAX_GETS_IN_FLIGHT} GET replies in flight (the client does not read them)"
            ));
        }
        let limit = Self::max_get_bytes(max_value);
        if self.get_bytes + len as u64 > limit {
            return Err(format!(
                "over the limit of {} of GET replies in flight (the client does not read them)",
                crate::units::human_bytes(limit)
            ));
        }
        self.get_bytes += len as u64;
        Ok(())
    }

    pub(crate) fn wr(&mut self) -> u64 {
        self.next_wr += 1;
        WR_SEND | self.next_wr
    }

    pub(crate) fn reply(&mut self, msg: &Msg, req: u32, buf: &mut Vec<u8>) -> Result<()> {
        msg.encode_into(req, buf);
        let wr = self.wr();
        self.qp.post_send_bytes(wr, buf)
    }
}

pub(crate) struct Worker<T: Transport> {
    pub(crate) id: usize,
    pub(crate) sh: Arc<Shared<T>>,
    pub(crate) ib: Arc<Inbox<T>>,
    pub(crate) conns: ConnMap<u32, Conn<T>>,
    pub(crate) buf: Vec<u8>,
    /// Completions of connections the acceptor has not handed over yet: a client's
    /// first request can complete between its receives being posted and the hand-over.
    pub(crate) early: Vec<(bool, Completion, Instant)>,
    /// A coarse clock, refreshed by the polling loop (idle timeouts need ms, not ns).
    pub(crate) now: Instant,
    /// Requests seen, for sampling one in [`phases::SAMPLE_EVERY`].
    pub(crate) seen: u32,
    /// Refused segment grants are not logged again before this.
    pub(crate) pool_full_quiet: Instant,
    /// Queue pairs dropped lately: their flushed completions are dropped too, not
    /// mistaken for a connection not yet adopted.
    pub(crate) gone: ConnMap<u32, Instant>,
}

impl<T: Transport> Worker<T> {
    fn new(id: usize, sh: Arc<Shared<T>>, ib: Arc<Inbox<T>>) -> Worker<T> {
        Worker {
            id,
            sh,
            ib,
            conns: ConnMap::default(),
            buf: Vec::new(),
            early: Vec::new(),
            now: Instant::now(),
            seen: 0,
            pool_full_quiet: Instant::now(),
            gone: ConnMap::default(),
        }
    }

    /// Whether to time this request's steps (one in [`phases::SAMPLE_EVERY`]).
    pub(crate) fn sampled(&mut self) -> bool {
        self.seen = self.seen.wrapping_add(1);
        self.seen % phases::SAMPLE_EVERY == 0
    }

    pub(crate) fn run(mut self) {
        let mut comps: Vec<Completion> = Vec::with_capacity(64);
        // The clock is read once every CLOCK_EVERY rounds, not per completion: a PUT's
        // latency is a few hundred ns, of which a clock read would be a noticeable part.
        const CLOCK_EVERY: u32 = 64;
        let mut idle_since = self.now;
        let mut last_sweep = self.now;
        let mut idle_rounds = 0u32;
        let mut rounds = 0u32;
        loop {
            rounds = rounds.wrapping_add(1);
            if rounds % CLOCK_EVERY == 0 {
                self.now = Instant::now();
                if self.now.duration_since(last_sweep) > Duration::from_millis(100) {
                    last_sweep = self.now;
                    self.sweep();
                }
            }
            let stopping = self.sh.shutdown.load(Ordering::Acquire);
            self.adopt_new();
            comps.clear();
            let n = self.ib.recv_cq.poll(&mut comps, 32);
            for c in comps.drain(..) {
                self.on_recv(c);
            }
            let m = self.ib.send_cq.poll(&mut comps, 64);
            for c in comps.drain(..) {
                self.on_send(c);
            }
            if n + m > 0 {
                idle_rounds = 0;
                continue;
            }
            if stopping {
                break;
            }
            if self.sh.coop.help(self.id, self.sh.pool.media()) {
                idle_rounds = 0;
                continue;
            }
            idle_rounds += 1;
            if idle_rounds == 1 {
                idle_since = self.now;
            }
            if idle_rounds % CLOCK_EVERY != 0 {
                std::hint::spin_loop();
                continue;
            }
            self.now = Instant::now();
            let idle = self.now.duration_since(idle_since);
            if idle > Duration::from_millis(2) && !self.sh.coop.enabled() {
                // Park on the receive queue instead of burning a core.
                if let Ok(c) = self.ib.recv_cq.wait(Duration::from_millis(5)) {
                    self.now = Instant::now();
                    self.on_recv(c);
                    idle_rounds = 0;
                }
            } else if idle > Duration::from_millis(50) {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let ids: Vec<u32> = self.conns.keys().copied().collect();
        for q in ids {
            self.drop_conn(q, "server shutting down");
        }
    }

    pub(crate) fn adopt_new(&mut self) {
        if self.ib.pending.load(Ordering::Acquire) > 0 {
            self.ib.pending.store(0, Ordering::Release);
            let mut new = self.ib.new.lock().unwrap_or_else(|e| e.into_inner());
            for c in new.drain(..) {
                self.conns.insert(c.qp.qp_num(), c);
            }
        }
        if !self.early.is_empty() {
            let early = std::mem::take(&mut self.early);
            for (is_recv, c, since) in early {
                if self.conns.contains_key(&c.qp_num) {
                    if is_recv {
                        self.on_recv(c)
                    } else {
                        self.on_send(c)
                    }
                } else if self.now.duration_since(since) < Duration::from_secs(5) {
                    self.early.push((is_recv, c, since));
                }
            }
        }
    }

    pub(crate) fn sweep(&mut self) {
        let mut dead: Vec<(u32, String)> = Vec::new();
        for (q, c) in &self.conns {
            if let Some(why) = &c.dead {
                dead.push((*q, why.clone()));
            } else if c.qp.is_error() {
                dead.push((*q, c.qp.error_reason().unwrap_or_else(|| "connection error".into())));
            } else if let Some(t) = self.sh.cfg.idle_timeout {
                if self.now.duration_since(c.last_active) > t {
                    dead.push((*q, format!("idle for more than {t:?}")));
                }
            }
        }
        for (q, why) in dead {
            self.drop_conn(q, &why);
        }
        let now = self.now;
        self.gone.retain(|_, t| now.duration_since(*t) < Duration::from_secs(10));
    }

    pub(crate) fn drop_conn(&mut self, q: u32, why: &str) {
        if let Some(mut c) = self.conns.remove(&q) {
            for (_, (key, v)) in c.gets.drain() {
                self.sh.inflight.end(&key, v);
            }
            if let Some(mr) = c.seg_mr.take() {
                mr.deregister();
            }
            if let Some(s) = c.seg.take() {
                let _ = self.sh.pool.seal_segment(s.id);
            }
            c.read_mrs.clear();
            c.qp.close();
            self.gone.insert(q, self.now);
            self.sh.clients.fetch_sub(1, Ordering::AcqRel);
            self.sh.log(&format!("client {} disconnected: {why}", c.id));
        }
    }

    pub(crate) fn on_send(&mut self, c: Completion) {
        let Some(conn) = self.conns.get_mut(&c.qp_num) else {
            if !self.gone.contains_key(&c.qp_num) {
                self.early.push((false, c, self.now));
            }
            return;
        };
        if let Some((key, v)) = conn.gets.remove(&c.wr_id) {
            self.sh.inflight.end(&key, v);
            conn.get_bytes = conn.get_bytes.saturating_sub(c.byte_len as u64);
        }
        if !c.status.is_ok() && conn.dead.is_none() {
            conn.dead = Some(format!("{:?} completed with {}", c.opcode, c.status));
        }
        if let Some(why) = conn.dead.clone() {
            // Drop it now, not at the next sweep: a closed connection must not hold a
            // --max-clients place.
            self.drop_conn(c.qp_num, &why);
        }
    }

    pub(crate) fn on_recv(&mut self, c: Completion) {
        let Some(mut conn) = self.conns.remove(&c.qp_num) else {
            if !self.gone.contains_key(&c.qp_num) {
                self.early.push((true, c, self.now));
            }
            return;
        };
        conn.last_active = self.now;
        if !c.status.is_ok() {
            let why = match conn.qp.error_reason() {
                Some(r) if r.contains("peer closed") => "closed by the client".to_string(),
                Some(r) => r,
                None if c.status == crate::transport::WcStatus::WrFlushError => "closed by the client".to_string(),
                None => format!("receive completed with {}", c.status),
            };
            conn.dead.get_or_insert(why.clone());
            self.conns.insert(c.qp_num, conn);
            self.drop_conn(c.qp_num, &why);
            return;
        }
        let slot = c.wr_id;
        let r = match (c.opcode, c.imm) {
            (WcOpcode::RecvWithImm, Some(imm)) => self.on_put_imm(&mut conn, imm),
            (WcOpcode::Recv, _) => {
                // Read the request where it landed (DRAM receive buffer): no copy.
                let rmr = conn.recv_mr.clone();
                let (map, base) = rmr.mapping();
                match map.view(base + slot * conn.recv_size as u64, c.byte_len as usize) {
                    Ok(raw) if crate::wire::is_rpc_put(raw) && conn.protocol == Protocol::Rpc => {
                        self.rpc_put(&mut conn, &raw[RPC_PUT_OFF.min(raw.len())..])
                    }
                    Ok(raw) => Msg::decode(raw).and_then(|(m, req)| self.on_msg(&mut conn, m, req)),
                    Err(e) => Err(e),
                }
            }
            _ => Err(Error::Protocol(format!("unexpected completion {:?}", c.opcode))),
        };
        if let Err(e) = r {
            self.sh.counters.errors.fetch_add(1, Ordering::Relaxed);
            conn.dead.get_or_insert_with(|| format!("protocol error: {e}"));
        } else if let Err(e) = conn.qp.post_recv(slot, &conn.recv_mr, slot * conn.recv_size as u64, conn.recv_size) {
            let why = if e.to_string().contains("peer closed") {
                "closed by the client".into()
            } else {
                format!("cannot repost receive: {e}")
            };
            conn.dead.get_or_insert(why);
        }
        let dead = conn.dead.clone();
        self.conns.insert(c.qp_num, conn);
        if let Some(why) = dead {
            self.drop_conn(c.qp_num, &why);
        }
    }

    pub(crate) fn error_reply(&mut self, conn: &mut Conn<T>, req: u32, code: ErrorCode, message: String) -> Result<()> {
        self.sh.counters.errors.fetch_add(1, Ordering::Relaxed);
        self.sh.log(&format!("client {}: {message}", conn.id));
        let mut b = std::mem::take(&mut self.buf);
        let r = conn.reply(&Msg::Error { code, message }, req, &mut b);
        self.buf = b;
        r
    }

    pub(crate) fn send(&mut self, conn: &mut Conn<T>, msg: &Msg, req: u32) -> Result<()> {
        let mut b = std::mem::take(&mut self.buf);
        let r = conn.reply(msg, req, &mut b);
        self.buf = b;
        r
    }

    /// Commits the entry at `offset` of the client's segment and replies.
    pub(crate) fn commit_and_reply(
        &mut self,
        conn: &mut Conn<T>,
        offset: u64,
        mode: WriteMode,
        pre: Option<EntryHeader>,
    ) -> Result<()> {
        let Some(seg) = conn.seg.as_mut() else {
            return self.error_reply(conn, 0, ErrorCode::BadRequest, "PUT before any segment was granted".into());
        };
        let t0 = self.sampled().then(Instant::now);
        let mut times = CommitTimes::default();
        let (pool, coop, id) = (&self.sh.pool, &self.sh.coop, self.id);
        let mut wb = |o: u64, l: usize| coop.writeback(id, pool.media(), o, l);
        let tm = t0.map(|_| &mut times);
        let r = match pre {
            Some(h) => pool.commit_validated(seg, offset, mode, h, &mut wb, tm),
            None => pool.commit(seg, offset, mode, &mut wb, tm),
        };
        match r {
            Ok(c) => {
                let ctr = if c.loc.tombstone { &self.sh.counters.dels } else { &self.sh.counters.puts };
                ctr.fetch_add(1, Ordering::Relaxed);
                let t1 = t0.map(|_| Instant::now());
                let min = self.sh.inflight.min_version(&c.key);
                let r = self.send(conn, &Msg::PutOk { version: c.version, min_get_version: min }, 0);
                if let (Some(t0), Some(t1)) = (t0, t1) {
                    let now = Instant::now();
                    self.sh.phases.record(&[
                        (Phase::PutValidate, times.validate),
                        (Phase::PutSeal, times.seal),
                        (Phase::PutWriteback, times.writeback),
                        (Phase::PutSecondPersist, times.second_persist),
                        (Phase::PutIndex, times.index),
                        (Phase::PutReply, now.duration_since(t1).as_nanos() as u64),
                        (Phase::PutTotal, now.duration_since(t0).as_nanos() as u64),
                    ]);
                }
                r
            }
            Err(CommitError::Media(e @ Error::VersionsExhausted { .. })) => {
                self.error_reply(conn, 0, ErrorCode::Internal, e.to_string())
            }
            Err(CommitError::Media(e)) => self.error_reply(conn, 0, ErrorCode::Internal, format!("media error: {e}")),
            Err(e @ CommitError::TooLarge { .. }) => self.error_reply(conn, 0, ErrorCode::TooLarge, e.to_string()),
            Err(e) => self.error_reply(conn, 0, ErrorCode::InvalidEntry, e.to_string()),
        }
    }

    /// A DELETE that found no room in its client's segment (BOOM and RDMP clients send
    /// the tombstone as a message; the RPC baseline's own PUT path comes here when no
    /// segment can be granted): the server appends it to its tombstone log, which
    /// draws on a reserved segment, so a full pool can always be emptied.
    pub(crate) fn server_delete(&mut self, conn: &mut Conn<T>, entry: &[u8], req: u32) -> Result<()> {
        let h = match EntryHeader::decode(entry) {
            Ok(h)
                if h.is_tombstone()
                    && h.value_len == 0
                    && h.key_len >= 1
                    && h.key_len <= fmt::MAX_KEY_LEN
                    && h.entry_len() == entry.len() as u64 =>
            {
                h
            }
            _ => {
                let m = "a DELETE sent to the server must carry one tombstone entry".to_string();
                return self.error_reply(conn, req, ErrorCode::InvalidEntry, m);
            }
        };
        let key = fmt::entry_key(entry, &h);
        let r = self.sh.tombstones.lock().unwrap_or_else(|e| e.into_inner()).append(&self.sh.pool, key, b"", true);
        match r {
            Ok(c) => {
                self.sh.counters.dels.fetch_add(1, Ordering::Relaxed);
                let min = self.sh.inflight.min_version(&c.key);
                self.send(conn, &Msg::PutOk { version: c.version, min_get_version: min }, req)
            }
            Err(e @ Error::PoolFull { .. }) => self.error_reply(conn, req, ErrorCode::PoolFull, e.to_string()),
            Err(e) => self.error_reply(conn, req, ErrorCode::Internal, format!("tombstone log: {e}")),
        }
    }

    /// BOOM PUT, or RDMP phase 2: the entry is in the client's segment.
    pub(crate) fn on_put_imm(&mut self, conn: &mut Conn<T>, imm: u32) -> Result<()> {
        let p = PutImm::decode(imm);
        let mode = if p.in_place { WriteMode::InPlace } else { WriteMode::Append };
        match conn.protocol {
            Protocol::Boom => self.commit_and_reply(conn, p.offset, mode, None),
            Protocol::Rdmp if !p.in_place => self.commit_and_reply(conn, p.offset, WriteMode::Append, None),
            _ => self.error_reply(conn, 0, ErrorCode::BadRequest, "WRITE_WITH_IMM not valid here".into()),
        }
    }

    /// Seals the client's segment (if any) and grants a new one.
    pub(crate) fn grant(&mut self, conn: &mut Conn<T>) -> std::result::Result<(), (ErrorCode, String)> {
        let q = self.sh.cfg.segment_quota;
        if q > 0 && conn.segments >= q {
            return Err((ErrorCode::Quota, format!("client {} reached its quota of {q} segments", conn.id)));
        }
        let seg = self.sh.pool.grant_segment(conn.id, conn.seg.as_ref()).map_err(|e| match e {
            Error::PoolFull { .. } => (ErrorCode::PoolFull, e.to_string()),
            e => (ErrorCode::Internal, e.to_string()),
        })?;
        if let Some(old) = conn.seg_mr.take() {
            old.deregister();
        }
        let mr = self
            .sh
            .bound_seg_mr(&conn.qp, seg.id, Access::REMOTE_WRITE)
            .map_err(|e| (ErrorCode::Internal, e.to_string()))?;
        conn.seg = Some(seg);
        conn.seg_mr = Some(mr);
        conn.segments += 1;
        self.sh.counters.grants.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    pub(crate) fn on_msg(&mut self, conn: &mut Conn<T>, m: Msg, req: u32) -> Result<()> {
        match (conn.protocol, m) {
            (_, Msg::StatsReq) => {
                let json = serde_json::to_vec(&self.sh.stats()).unwrap_or_default();
                self.send(conn, &Msg::Stats { json }, req)
            }
            (Protocol::Boom, Msg::GrantSegment) => match self.grant(conn) {
                Ok(()) => {
                    let (Some(seg), Some(mr)) = (&conn.seg, &conn.seg_mr) else {
                        return Err(Error::Protocol("grant left no segment".into()));
                    };
                    let msg = Msg::SegmentGranted { segment: seg.id, region: mr.remote() };
                    self.send(conn, &msg, req)
                }
                Err((ErrorCode::PoolFull, message)) if self.now < self.pool_full_quiet => {
                    // Clients ask again while the cleaner works: log once a second.
                    self.sh.counters.errors.fetch_add(1, Ordering::Relaxed);
                    self.send(conn, &Msg::Error { code: ErrorCode::PoolFull, message }, req)
                }
                Err((code, msg)) => {
                    if code == ErrorCode::PoolFull {
                        self.pool_full_quiet = self.now + Duration::from_secs(1);
                    }
                    self.error_reply(conn, req, code, msg)
                }
            },
            (Protocol::Boom, Msg::Get { key, buf }) => self.boom_get(conn, key, buf),
            (Protocol::Boom, Msg::Scan { start, count, buf }) => self.boom_scan(conn, start, count, buf),
            (Protocol::Rdmp, Msg::Alloc { len }) => self.rdmp_alloc(conn, len, req),
            (Protocol::Rdmp, Msg::Locate { key }) => self.rdmp_locate(conn, &key, req),
            (Protocol::Rpc, Msg::RpcPut { entry }) => self.rpc_put(conn, &entry),
            (Protocol::Boom | Protocol::Rdmp, Msg::RpcPut { entry }) => self.server_delete(conn, &entry, req),
            (Protocol::Rpc, Msg::RpcGet { key }) => self.rpc_get(conn, &key, req),
            (p, m) => self.error_reply(conn, req, ErrorCode::BadRequest, format!("{m:?} is not a {p} request")),
        }
    }
}
