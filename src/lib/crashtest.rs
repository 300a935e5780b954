//! The crash checker behind `boomctl crashtest`.
//!
//! One iteration: a fresh pool on the crash-simulating media, a server over a software
//! transport, several clients doing PUTs (appends and in-place rewrites), DELETEs and
//! GETs with values of every size, small segments so logs roll over, and the cleaner
//! running (RFP's clients take its three result modes in turn: fetch, server-reply,
//! hybrid). The simulator is armed to fail at a random crash point: a write-back, a
//! fence, or a step of the commit or cleaner path. The image captured there (durable
//! lines plus a random subset of dirty ones, torn at 8-byte granularity) is recovered
//! and checked against a model of what the clients were told:
//!
//! - every acknowledged write is present with its last acknowledged value, or a value
//!   of a later write to the same key that was still unacknowledged;
//! - no value, and no version, that was never written;
//! - deleted keys stay deleted (unless a later unacknowledged PUT brought them back);
//! - every entry recovery accepted passes its checksum;
//! - `count` never covers a slot that is not a valid entry, except a slot an
//!   unacknowledged in-place rewrite was writing at the time.
//!
//! The version counter starts just below 2^32 so both halves of `version_num` matter.
//! A write counts as acknowledged only if its reply arrived before the crash was
//! captured (checked after the reply), so the model never over-claims.
//!
//! Owns: the iteration (pool, server, clients, crash) and the check of its image. It
//! uses the client, the server and the transports as a user would, and reads the image
//! back through `log` (recovery's walker, `log::format`'s decoders); nothing of `bench`.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::client::{Client, ClientOptions, WriteHook, WriteIntent};
use crate::error::{Error, Result};
use crate::index::IndexKind;
use crate::log::format::{entry_checksum, entry_key, entry_value, stored_checksum, EntryHeader};
use crate::log::recovery::{read_segment, walk_segment};
use crate::log::Pool;
use crate::pmem::{CrashOptions, FlushKind, Media};
use crate::proto::rfp::ResultMode;
use crate::server::{Server, ServerConfig};
use crate::transport::{Backend, Endpoint, Transport};
use crate::wire::Protocol;

/// The most client threads a crash test runs (each is a connection to the simulated
/// server and a thread, in every iteration).
pub const MAX_THREADS: usize = 256;

/// What to run.
#[derive(Clone, Debug)]
pub struct CrashTestOptions {
    /// Iterations (crashes).
    pub iterations: u64,
    /// Seed of iteration 0; iteration `i` uses `seed + i`.
    pub seed: u64,
    /// Protocol the clients speak.
    pub protocol: Protocol,
    /// Client threads.
    pub threads: usize,
    /// Operations per client per iteration (at most).
    pub ops: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Largest value.
    pub max_value: usize,
    /// Pool size.
    pub pool_size: u64,
    /// Segment size.
    pub segment_size: u64,
    /// Probability that a non-durable line survives the crash.
    pub keep_probability: f64,
    /// Tear kept lines at 8-byte granularity.
    pub tear: bool,
    /// Run the cleaner.
    pub cleaner: bool,
    /// Keep the crash image of every failing iteration here (`crash-<seed>.pool`).
    pub save_failures: Option<std::path::PathBuf>,
    /// Stop at the first failing iteration.
    pub stop_on_failure: bool,
}

impl Default for CrashTestOptions {
    fn default() -> Self {
        CrashTestOptions {
            iterations: 100,
            seed: 1,
            protocol: Protocol::Boom,
            threads: 3,
            ops: 60,
            keys: 24,
            max_value: 6000,
            pool_size: 2 << 20,
            segment_size: 64 << 10,
            keep_probability: 0.5,
            tear: true,
            cleaner: true,
            save_failures: None,
            stop_on_failure: false,
        }
    }
}

impl CrashTestOptions {
    /// Checks, before anything runs, the options a crash test can run with: an
    /// iteration, an operation, a key and 1 to [`MAX_THREADS`] client threads, a keep
    /// probability in [0, 1], and values that fit a segment (a larger one was
    /// generated, bytes and all, before the server refused it: 10 GB values took all
    /// the memory).
    fn check(&self) -> Result<()> {
        use crate::log::format::{ENTRY_HEADER_SIZE, MAX_KEY_LEN, SEGMENT_HEADER_SIZE};
        if self.threads == 0 || self.keys == 0 {
            return Err(Error::invalid(format!("{} threads and {} keys: at least 1 of each", self.threads, self.keys)));
        }
        if self.threads > MAX_THREADS {
            return Err(Error::invalid(format!(
                "{} client threads: at most {MAX_THREADS} (each is a connection and a thread per iteration)",
                self.threads
            )));
        }
        if self.iterations == 0 || self.ops == 0 {
            return Err(Error::invalid(format!(
                "{} iterations of {} operations per client: nothing would be checked; at least 1 of each",
                self.iterations, self.ops
            )));
        }
        if !(0.0..=1.0).contains(&self.keep_probability) {
            return Err(Error::invalid(format!(
                "keep probability {}: a probability is between 0 and 1",
                self.keep_probability
            )));
        }
        let fits = self.segment_size.saturating_sub(SEGMENT_HEADER_SIZE + ENTRY_HEADER_SIZE + MAX_KEY_LEN as u64);
        if self.max_value as u64 > fits {
            return Err(Error::invalid(format!(
                "largest value of {} bytes: the crash test's {}-byte segments hold values of at most {fits} bytes",
                self.max_value, self.segment_size
            )));
        }
        Ok(())
    }
}

/// A violation found in one iteration.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Violation {
    /// Lost (an acknowledged write is gone) or corrupt (something never written came back).
    pub kind: &'static str,
    /// What exactly.
    pub detail: String,
}

/// The outcome of one iteration.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Outcome {
    /// Seed of the iteration (replays it).
    pub seed: u64,
    /// Crash point the crash happened at.
    pub crash_point: u64,
    /// Acknowledged writes checked.
    pub acked: u64,
    /// Violations.
    pub violations: Vec<Violation>,
}

/// Totals over iterations.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CrashTestReport {
    /// Iterations run (= crashes simulated).
    pub crashes: u64,
    /// Acknowledged writes checked.
    pub acked_checked: u64,
    /// Lost-write violations.
    pub lost: u64,
    /// Corruption violations.
    pub corrupted: u64,
    /// Failing iterations (first 20).
    pub failures: Vec<Outcome>,
    /// Wall time, seconds.
    pub elapsed_s: f64,
}

#[derive(Clone, Debug)]
struct Write {
    value: Option<Vec<u8>>,
    version: Option<u64>,
    acked: bool,
}

/// A value nobody else writes: key, writer and sequence, repeated to `len` bytes.
fn make_value(key: u64, thread: usize, seq: u64, len: usize) -> Vec<u8> {
    format!("k{key}/t{thread}/n{seq}|").into_bytes().into_iter().cycle().take(len).collect()
}

fn pick_size(rng: &mut StdRng, max: usize) -> usize {
    match rng.random_range(0..10) {
        0 => 0,
        1..=3 => rng.random_range(1..64),
        4..=7 => rng.random_range(64..1024),
        _ => rng.random_range(1024..=max.max(1024)),
    }
    .min(max)
}

/// Runs one iteration over transport `t` (`backend` picks the listen address),
/// with scratch files in `dir`.
pub fn run_iteration<T: Transport>(
    t: &T,
    backend: Backend,
    dir: &Path,
    o: &CrashTestOptions,
    seed: u64,
) -> Result<Outcome> {
    // The order of the draws from `rng` is part of what a seed replays.
    let mut rng = StdRng::seed_from_u64(seed);
    let (pool, floor) = simulated_pool(o, &mut rng)?;
    let server = start_server(t, backend, dir, seed, &pool, o.cleaner, &mut rng)?;
    let ep = server.endpoints()[0].clone();
    let total_ops = o.ops * o.threads as u64;
    let estimate = (total_ops * 9).max(10);
    let crash_at = rng.random_range(1..=estimate);
    let copts = CrashOptions { seed: rng.random(), keep_probability: o.keep_probability, tear: o.tear };
    if let Some(s) = pool.media().crash_sim() {
        s.arm(crash_at, copts);
    }
    let shared = Clients {
        o,
        ep: &ep,
        pool: &pool,
        model: Mutex::new(HashMap::new()),
        inflight: Arc::new(Mutex::new(HashSet::new())),
        acked: AtomicU64::new(0),
    };
    let thread_seeds: Vec<u64> = (0..o.threads).map(|_| rng.random()).collect();
    std::thread::scope(|s| -> Result<()> {
        let shared = &shared;
        let hs: Vec<_> =
            thread_seeds.iter().enumerate().map(|(ti, &ts)| s.spawn(move || shared.client_thread(t, ti, ts))).collect();
        for h in hs {
            h.join().map_err(|_| Error::invalid("a crash-test client panicked"))??;
        }
        Ok(())
    })?;
    let media = pool.media();
    let sim = media.crash_sim().ok_or_else(|| Error::invalid("crash test needs simulated media"))?;
    if !sim.has_crashed() {
        sim.crash_now(media.map());
    }
    let image = sim.take_captured().ok_or_else(|| Error::invalid("no crash image was captured"))?;
    let crash_point = crash_at.min(sim.events());
    let max_assigned = pool.peek_version() - 1;
    server.shutdown();
    let inflight_inplace = shared.inflight.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let acked = shared.acked.load(Ordering::Relaxed);
    let model = shared.model.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut out = Outcome { seed, crash_point, acked, violations: Vec::new() };
    check(&image, o, &model, floor, max_assigned, &inflight_inplace, &mut out)?;
    if !out.violations.is_empty() {
        if let Some(dir) = &o.save_failures {
            save_failure(dir, seed, &image, &model, &inflight_inplace)?;
        }
    }
    Ok(out)
}

/// A pool on crash-simulating media whose version counter starts close below 2^32, so
/// that most iterations cross it (both halves of the word matter); returns it and the
/// floor.
fn simulated_pool(o: &CrashTestOptions, rng: &mut StdRng) -> Result<(Arc<Pool>, u64)> {
    let media = Media::simulated(o.pool_size, FlushKind::None)?;
    Pool::format(&media, o.segment_size)?;
    let (pool, _) = Pool::from_media(media, IndexKind::Hash)?;
    let floor = (1u64 << 32) - rng.random_range(1..(o.ops * o.threads as u64).max(2));
    pool.raise_version_floor(floor);
    Ok((Arc::new(pool), floor))
}

/// A server on `pool` with a random worker count and cooperative write-back on or off,
/// and, with `cleaner`, a cleaner that runs often (it moves entries while clients write).
fn start_server<T: Transport>(
    t: &T,
    backend: Backend,
    dir: &Path,
    seed: u64,
    pool: &Arc<Pool>,
    cleaner: bool,
    rng: &mut StdRng,
) -> Result<Server<T>> {
    let listen = match backend {
        Backend::Shm => Endpoint::Shm(dir.join(format!("crash-{seed}.sock"))),
        Backend::Verbs => Endpoint::Verbs("127.0.0.1:0".into()),
        Backend::Tcp => Endpoint::parse("127.0.0.1:0")?,
    };
    let cfg = ServerConfig {
        workers: rng.random_range(1..=2),
        coop_writeback: rng.random_bool(0.5),
        coop_chunk: 1024,
        log_clients: false,
        cleaner,
        clean_below: 0.6,
        clean_when_free: 0.9,
        clean_interval: Duration::from_millis(1),
        ..Default::default()
    };
    Server::start(t.clone(), pool.clone(), &[listen], cfg)
}

/// What the client threads of one iteration share: the model of every write and its
/// acknowledgement, the in-place rewrites in flight, the count of acknowledged writes.
struct Clients<'a> {
    o: &'a CrashTestOptions,
    ep: &'a Endpoint,
    pool: &'a Arc<Pool>,
    model: Mutex<HashMap<u64, Vec<Write>>>,
    inflight: Arc<Mutex<HashSet<(u64, u64)>>>,
    acked: AtomicU64,
}

impl Clients<'_> {
    fn crashed(&self) -> bool {
        self.pool.media().crash_sim().is_some_and(super::pmem::crashsim::CrashSim::has_crashed)
    }

    /// Tells the model of BOOM's in-place rewrites: in flight until acknowledged before
    /// the crash (one acknowledged after the crash was in flight at the crash).
    fn write_hook(&self) -> WriteHook {
        let (inflight, pool) = (self.inflight.clone(), self.pool.clone());
        WriteHook(Arc::new(move |w: &WriteIntent| {
            if w.in_place {
                let mut f = inflight.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let crashed = pool.media().crash_sim().is_some_and(super::pmem::crashsim::CrashSim::has_crashed);
                if w.done && !crashed {
                    f.remove(&(w.segment, w.offset));
                } else {
                    f.insert((w.segment, w.offset));
                }
            }
        }))
    }

    /// One client: `o.ops` random GETs, PUTs and DELETEs until the crash, each write in
    /// the model before it is sent and marked acknowledged after.
    fn client_thread<T: Transport>(&self, t: &T, ti: usize, seed: u64) -> Result<()> {
        let o = self.o;
        let mut copts = ClientOptions {
            protocol: o.protocol,
            timeout: Duration::from_secs(10),
            on_write: Some(self.write_hook()),
            ..Default::default()
        }
        .size_passive(o.keys, o.ops * o.threads as u64, o.max_value as u64);
        // Clover: half the pool (the values' sizes vary; most are far below the largest).
        copts.clover_data = o.pool_size / 2;
        // RFP: every way a result comes back, side by side (the hybrid alone runs almost
        // only in server-reply mode over shm, which would leave fetched results unchecked).
        copts.rfp_mode = [ResultMode::Fetch, ResultMode::Reply, ResultMode::Hybrid][ti % 3];
        let mut trng = StdRng::seed_from_u64(seed);
        let mut c = Client::connect(t, self.ep, copts)?;
        for seq in 0..o.ops {
            if self.crashed() {
                break;
            }
            // Half the operations go to a few hot keys: repeated small writes to a key
            // in one segment are what the hybrid in-place path needs.
            let hot = trng.random_bool(0.5);
            let key = if hot { trng.random_range(0..o.keys.min(4)) } else { trng.random_range(0..o.keys) };
            let kb = format!("key{key}");
            let r = trng.random_range(0..100);
            if r < 10 {
                let _ = c.get(kb.as_bytes());
                continue;
            }
            let value = if r < 22 { None } else { Some(make_value(key, ti, seq, pick_size(&mut trng, o.max_value))) };
            let idx = {
                let mut m = self.model.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let v = m.entry(key).or_default();
                v.push(Write { value: value.clone(), version: None, acked: false });
                v.len() - 1
            };
            let res = match &value {
                Some(v) => c.put(kb.as_bytes(), v),
                None => c.delete(kb.as_bytes()),
            };
            if let Ok(info) = res {
                if !self.crashed() {
                    let mut m = self.model.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    if let Some(w) = m.get_mut(&key).and_then(|v| v.get_mut(idx)) {
                        w.acked = true;
                        w.version = Some(info.version);
                    }
                    self.acked.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }
}

/// Keeps a failing iteration for replay: the crash image and the write history.
fn save_failure(
    dir: &Path,
    seed: u64,
    image: &[u8],
    model: &HashMap<u64, Vec<Write>>,
    inflight_inplace: &HashSet<(u64, u64)>,
) -> Result<()> {
    let p = dir.join(format!("crash-{seed}.pool"));
    std::fs::write(&p, image).map_err(|e| Error::io(format!("writing {}", p.display()), e))?;
    let mut hist: Vec<String> = Vec::new();
    let mut keys: Vec<_> = model.keys().copied().collect();
    keys.sort_unstable();
    for k in keys {
        for w in &model[&k] {
            hist.push(format!(
                "key{k} {} len={} version={:?} acked={} head={:?}",
                if w.value.is_some() { "PUT" } else { "DEL" },
                w.value.as_ref().map_or(0, Vec::len),
                w.version,
                w.acked,
                w.value.as_ref().map(|v| String::from_utf8_lossy(&v[..v.len().min(16)]).into_owned())
            ));
        }
    }
    hist.push(format!("in-flight in-place targets: {inflight_inplace:?}"));
    let hp = dir.join(format!("crash-{seed}.history"));
    std::fs::write(&hp, hist.join("\n")).map_err(|e| Error::io(format!("writing {}", hp.display()), e))
}

/// Recovers the crash `image` and checks it against the model (see the module docs),
/// adding each violation to `out`.
fn check(
    image: &[u8],
    _o: &CrashTestOptions,
    model: &HashMap<u64, Vec<Write>>,
    floor: u64,
    max_assigned: u64,
    inflight_inplace: &HashSet<(u64, u64)>,
    out: &mut Outcome,
) -> Result<()> {
    let (rec, _) = Pool::from_media(Media::simulated_from(image, FlushKind::None)?, IndexKind::Hash)?;
    let mut c = Checker { rec: &rec, out };
    c.indexed_checksums();
    c.segments(floor, max_assigned, inflight_inplace);
    for (key, writes) in model {
        c.key(*key, writes)?;
    }
    c.no_unwritten_keys(model);
    c.cells(model);
    Ok(())
}

/// The checks of one recovered crash image.
struct Checker<'a> {
    rec: &'a Pool,
    out: &'a mut Outcome,
}

impl Checker<'_> {
    fn bad(&mut self, kind: &'static str, detail: String) {
        self.out.violations.push(Violation { kind, detail });
    }

    /// Every indexed entry passes its checksum.
    fn indexed_checksums(&mut self) {
        let rec = self.rec;
        rec.index().for_each(|l| match rec.read_entry(l) {
            Ok(e) => {
                if Some(entry_checksum(&e)) != stored_checksum(&e) {
                    self.bad(
                        "corrupt",
                        format!("accepted entry at segment {} offset {} fails its checksum", l.segment, l.offset),
                    );
                }
            }
            Err(e) => self.bad("corrupt", format!("cannot read accepted entry: {e}")),
        });
    }

    /// Every accepted entry carries a version the server assigned (`floor..=max_assigned`),
    /// and `count` covers only valid entries, except slots an in-place rewrite was writing.
    fn segments(&mut self, floor: u64, max_assigned: u64, inflight_inplace: &HashSet<(u64, u64)>) {
        let rec = self.rec;
        let ph = rec.header().clone();
        let trust = rec.trust();
        let (cells, arena) = (rec.cell_table(), rec.clover_arena());
        for id in 0..ph.segment_count {
            // A cell table's or an arena's segments are theirs from the first byte: no
            // segment header is there to check (recovery skips them too), and their
            // data read as a state word was a false "corrupt" (Clover, seed 40: a
            // version's bytes at a segment's start, about 1 run in 200).
            if cells.is_some_and(|t| t.holds_segment(id)) || arena.is_some_and(|a| a.holds_segment(id)) {
                continue;
            }
            let f = read_segment(rec.media().map(), &ph, id);
            // A crash stores whole words: a state word that fails its check was never written.
            if let Some(d) = f.state_damage() {
                self.bad("corrupt", format!("segment {id}: {d}"));
            }
            if !f.in_use() {
                continue;
            }
            if let Some(d) = f.count_damage() {
                self.bad("corrupt", format!("segment {id}: {d}"));
            }
            walk_segment(rec.media().map(), &ph, &trust, &f, f.limit(), |e, _| {
                match e.result {
                Ok(h) if h.version < floor || h.version > max_assigned => self.bad(
                    "corrupt",
                    format!(
                        "segment {id} offset {}: accepted version {:#x} was never assigned ({floor:#x}..={max_assigned:#x})",
                        e.offset, h.version
                    ),
                ),
                Err(fault) if !inflight_inplace.contains(&(id, e.offset)) => self.bad(
                    "corrupt",
                    format!("count of segment {id} covers slot {} at offset {} that is not valid ({fault}) and no in-place rewrite was in flight there", e.slot, e.offset),
                ),
                _ => {}
            }
            });
        }
    }

    /// Key `key` holds its last acknowledged write, or a later unacknowledged one: in
    /// the index, or for pDPM-Direct in the cell table (its own namespace).
    fn key(&mut self, key: u64, writes: &[Write]) -> Result<()> {
        let rec = self.rec;
        let kb = format!("key{key}");
        let latest_acked = writes.iter().filter(|w| w.acked).max_by_key(|w| w.version);
        let passive = if rec.cell_table().is_some() {
            Some(rec.cell_lookup(kb.as_bytes()).map(|c| (c.header, c.entry)))
        } else if rec.clover_arena().is_some() {
            Some(rec.clover_lookup(kb.as_bytes()).map(|v| (v.header, v.entry)))
        } else {
            None
        };
        let (got_version, got_value) = if let Some(found) = passive {
            match found {
                Some((h, e)) if !h.is_tombstone() => (Some(h.version), Some((h.version, entry_value(&e, &h).to_vec()))),
                Some((h, _)) => (Some(h.version), None),
                None => (None, None),
            }
        } else {
            let got = rec.index().get(kb.as_bytes(), rec);
            let got_value = match got {
                Some(l) if !l.tombstone => {
                    let e = rec.read_entry(&l)?;
                    let h = EntryHeader::decode(&e)?;
                    Some((l.version, entry_value(&e, &h).to_vec()))
                }
                _ => None,
            };
            (got.map(|l| l.version), got_value)
        };
        match (latest_acked, got_version) {
            (Some(a), None) => {
                if a.value.is_some() {
                    self.bad("lost", format!("{kb}: acknowledged PUT (version {:?}) is gone", a.version));
                }
            }
            (Some(a), Some(v)) if Some(v) < a.version => {
                self.bad("lost", format!("{kb}: recovered version {v} but version {:?} was acknowledged", a.version));
            }
            (Some(a), Some(v)) if Some(v) == a.version => {
                if got_value.as_ref().map(|g| &g.1) != a.value.as_ref() {
                    self.bad(
                        "corrupt",
                        format!("{kb}: version {v} recovered with a different value than acknowledged"),
                    );
                }
            }
            _ => {
                // Newer than anything acknowledged (or nothing was): it must be a write
                // that was issued and not acknowledged.
                let issued = |g: &Option<(u64, Vec<u8>)>| {
                    writes.iter().any(|w| {
                        !w.acked
                            && match (&w.value, g) {
                                (Some(x), Some((_, g))) => x == g,
                                (None, None) => true,
                                _ => false,
                            }
                    })
                };
                if let Some(v) = got_version.filter(|_| !issued(&got_value)) {
                    self.bad("corrupt", format!("{kb}: recovered version {v} matches no write issued for the key"));
                }
            }
        }
        Ok(())
    }

    /// The cell table (pDPM-Direct) or the Clover arena: no cell or chain damaged, no key
    /// in it that was never written, and every recovered version one that a write of
    /// its key could have been given (at most the number of writes issued for the key).
    fn cells(&mut self, model: &HashMap<u64, Vec<Write>>) {
        let rec = self.rec;
        if let Some(t) = rec.cell_table() {
            for i in 0..t.cells {
                if let Err(crate::log::cells::SlotFault::Bad(why)) = rec.read_cell(&t, i) {
                    self.bad("corrupt", format!("cell {i}: committed slot does not verify after recovery ({why})"));
                }
            }
        }
        if let Some(a) = rec.clover_arena() {
            for i in 0..a.heads {
                if let Err(why) = rec.clover_newest(&a, i) {
                    self.bad("corrupt", format!("Clover head {i}: its first version does not verify ({why})"));
                }
            }
        }
        let mut found = Vec::new();
        rec.for_each_cell(|c| found.push((c.cell, entry_key(&c.entry, &c.header).to_vec(), c.header.version)));
        rec.for_each_clover_key(|v| found.push((v.head, entry_key(&v.entry, &v.header).to_vec(), v.header.version)));
        for (cell, k, version) in found {
            let k = String::from_utf8_lossy(&k).into_owned();
            match k.strip_prefix("key").and_then(|n| n.parse::<u64>().ok()).and_then(|n| model.get(&n)) {
                None => self.bad("corrupt", format!("cell {cell}: recovered key {k:?} was never written")),
                Some(w) if version > w.len() as u64 => self.bad(
                    "corrupt",
                    format!("cell {cell}: {k} recovered at version {version} after {} writes", w.len()),
                ),
                Some(_) => {}
            }
        }
    }

    /// Nothing recovered under a key that was never written.
    fn no_unwritten_keys(&mut self, model: &HashMap<u64, Vec<Write>>) {
        let rec = self.rec;
        rec.index().for_each(|l| {
            let Ok(e) = rec.read_entry(l) else { return };
            let Ok(h) = EntryHeader::decode(&e) else { return };
            let k = String::from_utf8_lossy(entry_key(&e, &h)).into_owned();
            let known =
                k.strip_prefix("key").and_then(|n| n.parse::<u64>().ok()).is_some_and(|n| model.contains_key(&n));
            if !known {
                self.bad("corrupt", format!("recovered key {k:?} was never written"));
            }
        });
    }
}

/// Runs `o.iterations` iterations, calling `progress(done, &report)` after each.
pub fn run<T: Transport>(
    t: &T,
    backend: Backend,
    o: &CrashTestOptions,
    mut progress: impl FnMut(u64, &CrashTestReport),
) -> Result<CrashTestReport> {
    if backend == Backend::Verbs && o.protocol.durable_by_client() {
        // The simulator learns of a FLUSH through the software transports
        // (`pmem::persist_remote`); an RDMA device writes the lines back itself, unseen.
        return Err(Error::Unsupported(format!(
            "crashtest --transport verbs with {}: its PUTs are made durable by the client's FLUSH, which an RDMA device carries out where the crash simulator cannot see it; run it over shm or tcp",
            o.protocol
        )));
    }
    o.check()?;
    let dir = tempfile::Builder::new()
        .prefix(&format!("{}crashtest-", crate::log::temp_prefix()))
        .tempdir()
        .map_err(|e| Error::io("temp dir", e))?;
    let t0 = Instant::now();
    let mut rep = CrashTestReport::default();
    for i in 0..o.iterations {
        let out = run_iteration(t, backend, dir.path(), o, o.seed.wrapping_add(i))?;
        rep.crashes += 1;
        rep.acked_checked += out.acked;
        let lost = out.violations.iter().filter(|v| v.kind == "lost").count() as u64;
        rep.lost += lost;
        rep.corrupted += out.violations.len() as u64 - lost;
        let failed = !out.violations.is_empty();
        if failed && rep.failures.len() < 20 {
            rep.failures.push(out);
        }
        progress(i + 1, &rep);
        if failed && o.stop_on_failure {
            break;
        }
    }
    rep.elapsed_s = t0.elapsed().as_secs_f64();
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::PoolOptions;

    #[test]
    fn an_arenas_data_at_a_segment_start_is_not_a_damaged_state_word() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.pool");
        let seg = 64u64 << 10;
        let (pool, _) = {
            let mut o = PoolOptions { segment_size: seg, ..Default::default() };
            o.media.create_size = Some(2 << 20);
            o.media.flush = Some(FlushKind::None);
            Pool::open(&path, &o).unwrap()
        };
        let a = pool.create_clover_arena(64, 8 * seg, 6000).unwrap();
        assert!(a.segments > 2 && a.holds_segment(a.first_segment + 1));
        drop(pool);
        // What a client's version could leave there: one bit away from a free state word.
        let mut img = std::fs::read(&path).unwrap();
        let at = (crate::log::format::POOL_HEADER_SIZE
            + (a.first_segment + 1) * seg
            + crate::log::format::SEG_STATE_OFF) as usize;
        img[at] = 0x10;
        let mut out = Outcome::default();
        check(&img, &CrashTestOptions::default(), &HashMap::new(), 0, u64::MAX, &HashSet::new(), &mut out).unwrap();
        assert!(out.violations.is_empty(), "{:?}", out.violations);
    }
}
