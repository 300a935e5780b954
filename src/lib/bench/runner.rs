//! The YCSB runner: `load` and `run` phases with client threads, throttling with
//! coordinated-omission correction, interval logging and progress.
//!
//! Each client has its own connection ([`Client`], or another store's [`Db`]) and its
//! own op stream; a thread drives one client, or several (`RunOptions::clients`): then
//! it keeps one read or write of each in flight ([`Db::read_start`],
//! [`Db::write_start`]) and collects the answers as they come, so that clients which
//! outnumber the CPUs cost no switch between threads per operation. A thread records
//! into its own [`Measurements`] and hands a snapshot to the collector once per
//! interval. The collector merges snapshots into the run totals, writes them to the
//! interval log (`--hdr-log`) and drives the progress display.
//!
//! With a target throughput, client `i` of `n` issues its `k`-th operation at
//! `start + k * n / target + p_i * min(n / target, 10 ms)`, where `p_i` in [0, 1)
//! spreads the clients over one interval (all in step they would send in bursts;
//! YCSB's threads first sleep a random part of one interval); the latency from that intended time is recorded too
//! (as YCSB's `measurement.interval=both` does), so stalls are not hidden.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::bench::hlog::{HlogWriter, YcsbHdrFiles};
use crate::bench::measure::{MeasurementInterval, Measurements, Status};
use crate::bench::report::RunInfo;
use crate::bench::status;
use crate::client::{Client, ClientCounters, ClientOptions};
use crate::error::{Error, ErrorCode, Result};
use crate::transport::{Endpoint, Transport};
use crate::workload::{CoreWorkload, Op, OpKind};

/// The longest sleep of a client waiting for its next operation's time under a target
/// rate: the run's stop and its end are looked at in between.
const PACE_SLICE: Duration = Duration::from_millis(100);

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// A live bar on standard error (a terminal).
    Bar,
    /// YCSB's status lines on standard error every `status_interval` (not a
    /// terminal, or YCSB's `-s`); see [`super::status`].
    Lines,
    /// Nothing.
    Quiet,
}

impl Progress {
    /// A bar on a terminal, lines otherwise, nothing when `quiet`.
    pub fn auto(quiet: bool) -> Progress {
        use std::io::IsTerminal;
        if quiet {
            Progress::Quiet
        } else if std::io::stderr().is_terminal() {
            Progress::Bar
        } else {
            Progress::Lines
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Client threads (YCSB's threadcount).
    pub threads: usize,
    /// Clients in all, one connection each, spread over the threads (`None`: one per
    /// thread). A thread with several clients keeps a read or write of each in flight
    /// at once and collects the answers as they come, so that clients outnumbering the
    /// CPUs cost no switch between threads per operation (see [`Db::read_start`]).
    pub clients: Option<usize>,
    /// Operations in all (run phase), split over the clients.
    pub ops: u64,
    /// Stop after this long even if operations remain.
    pub duration: Option<Duration>,
    /// Target throughput in ops/s over all clients.
    pub target: Option<f64>,
    /// Unmeasured operations per client before the measured phase.
    pub warmup_ops: u64,
    /// Seed of the op streams.
    pub seed: u64,
    /// Progress display.
    pub progress: Progress,
    /// Interval log to write.
    pub hlog: Option<PathBuf>,
    /// YCSB's per-measurement logs to write, `<prefix><NAME>.hdr` (the prefix is
    /// `hdrhistogram.output.path`; see [`crate::bench::hlog::YcsbHdrFiles`]).
    pub hdr_files: Option<String>,
    /// Reporting interval of the interval log.
    pub interval: Duration,
    /// Interval of the status lines (YCSB's `status.interval`, default 10 s).
    pub status_interval: Duration,
    /// What latencies to record.
    pub measurement: MeasurementInterval,
    /// A label for progress output ("load", "run", "boom 2k").
    pub label: String,
    /// Put before every status line, as it is (YCSB's `-l`, property `label`).
    pub status_label: String,
    /// Show the progress bar under these (a sweep's overall bar) instead of on its own.
    pub bars: Option<indicatif::MultiProgress>,
    /// Run the client threads on these CPUs only (`None`: wherever the scheduler puts
    /// them); see [`crate::cpus::Layout`]. Unless `colocated`, these must be CPUs no
    /// server worker uses: the client threads also poll with yields before they sleep
    /// in a wait ([`crate::transport::set_yield_wait`]).
    pub client_cpus: Option<crate::cpus::CpuList>,
    /// The server's workers share the CPUs of `client_cpus` with the client threads,
    /// worker `i` on the `i`-th ([`crate::cpus::Layout::colocate`]): each client thread
    /// runs on the CPU of the worker that serves its first client ([`Db::worker`]; a
    /// store that does not say leaves the thread unpinned), and waits yielding it
    /// ([`crate::transport::set_colocated_wait`]).
    pub colocated: bool,
    /// A log written as the run goes (`hlog`, `hdr_files`) that cannot be (a full
    /// disk) stops, and the phase goes on and hands back its measurements with the
    /// failure in [`RunResult::log_error`]. Otherwise (the default) the phase still
    /// runs to its end, then fails with that error.
    pub logs_may_stop: bool,
}

impl RunOptions {
    /// Places the client threads as `layout` says (`None`: wherever the scheduler puts
    /// them).
    pub fn place(&mut self, layout: Option<&crate::cpus::Layout>) {
        self.client_cpus = layout.map(|l| l.clients.clone());
        self.colocated = layout.is_some_and(|l| l.colocated);
    }
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            threads: 1,
            clients: None,
            ops: 1000,
            duration: None,
            target: None,
            warmup_ops: 0,
            seed: 1,
            progress: Progress::Quiet,
            hlog: None,
            hdr_files: None,
            interval: Duration::from_secs(1),
            status_interval: Duration::from_secs(10),
            measurement: MeasurementInterval::Op,
            label: "run".into(),
            status_label: String::new(),
            bars: None,
            client_cpus: None,
            colocated: false,
            logs_may_stop: false,
        }
    }
}

/// The outcome of a phase.
#[derive(Debug)]
pub struct RunResult {
    /// Everything recorded.
    pub measurements: Measurements,
    /// Run time and operation count.
    pub run: RunInfo,
    /// Operations that failed.
    pub errors: u64,
    /// The first failure's message, if any failed.
    pub first_error: Option<String>,
    /// What boomkv's clients counted during the phase (warm-up excluded), summed over
    /// the threads; `None` for a store whose binding counts nothing (Redis).
    pub client: Option<ClientCounters>,
    /// Why a log written as the run goes ([`RunOptions::hlog`],
    /// [`RunOptions::hdr_files`]) stopped, the first failure, under
    /// [`RunOptions::logs_may_stop`]: that log stops, not the run, whose measurements
    /// are whole.
    pub log_error: Option<Error>,
}

/// A source of values: a fixed random buffer, sliced.
fn value_buffer(max: usize, seed: u64) -> Vec<u8> {
    use rand::{Rng, SeedableRng};
    let mut v = vec![0u8; max.max(1)];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

struct Shared {
    /// Each thread's count of finished operations, on cache lines of its own: one count
    /// that every thread added to was a line the two CPUs of a crowded run passed back
    /// and forth on every operation (and `stop`, beside it, with it).
    done: Box<[super::wake::Line]>,
    errors: AtomicU64,
    stop: AtomicBool,
    fatal: std::sync::Mutex<Option<(ErrorCode, String)>>,
    first_error: std::sync::Mutex<Option<String>>,
    client: std::sync::Mutex<Option<ClientCounters>>,
    /// When the client threads began and ended the measured phase (the first start,
    /// the last end): the run time. The main thread's own clock, read when it got a CPU
    /// after the barrier, began late on a machine whose CPUs the clients and the server
    /// keep busy: 200 GETs of 1.5 us reported a 195 us run.
    span: std::sync::Mutex<(Option<Instant>, Option<Instant>)>,
}

/// A store a YCSB thread drives, as YCSB's DB bindings are: boomkv's own client, or a
/// peer store measured in the same harness (`bench::redis`).
pub trait Db: Send {
    /// Reads `key`'s value into `out`; whether the key exists.
    fn read(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;
    /// Stores `value` under `key` (YCSB's INSERT and UPDATE; durable when acknowledged,
    /// as far as the store promises).
    fn write(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Up to `count` records from `start` on, in key order; how many came back.
    fn scan(&mut self, start: &[u8], count: u32) -> Result<usize>;
    /// Starts a read of `key` for a thread that keeps the reads of several clients in
    /// flight (`RunOptions::clients`): `Some(found)` when the read is already done (the
    /// default: a whole [`Db::read`]), `None` while it is in flight, to be collected by
    /// [`Db::read_poll`] before anything else is asked of this client.
    fn read_start(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<Option<bool>> {
        self.read(key, out).map(Some)
    }
    /// The read [`Db::read_start`] left in flight, if its answer has come (a binding
    /// may wait for it here); as [`Db::read`] returns it.
    fn read_poll(&mut self, _key: &[u8], _out: &mut Vec<u8>) -> Result<Option<bool>> {
        Err(Error::invalid("no read in flight"))
    }
    /// Starts a write as [`Db::read_start`] starts a read: `true` when it is already
    /// done (the default: a whole [`Db::write`]), `false` while it is in flight.
    fn write_start(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.write(key, value).map(|()| true)
    }
    /// Whether the write [`Db::write_start`] left in flight is done (acknowledged).
    fn write_poll(&mut self, _key: &[u8]) -> Result<bool> {
        Err(Error::invalid("no write in flight"))
    }
    /// The largest value the store accepts, when it says.
    fn max_value(&self) -> Option<u64>;
    /// The client's own counters so far (torn reads retried, segments granted, ...),
    /// for a binding that keeps them.
    fn counters(&self) -> Option<ClientCounters> {
        None
    }
    /// The server worker that serves this client, when the store says (a colocated
    /// run places the client's thread on that worker's CPU, see
    /// [`RunOptions::colocated`]).
    fn worker(&self) -> Option<usize> {
        None
    }
}

impl<T: Transport> Db for Client<T> {
    fn read(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.get_into(key, out)
    }

    fn write(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.put(key, value).map(|_| ())
    }

    fn read_start(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<Option<bool>> {
        self.get_start(key, out)
    }

    fn read_poll(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<Option<bool>> {
        self.get_poll(key, out)
    }

    fn write_start(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.put_start(key, value).map(|p| p.is_some())
    }

    fn write_poll(&mut self, key: &[u8]) -> Result<bool> {
        self.put_poll(key).map(|p| p.is_some())
    }

    fn scan(&mut self, start: &[u8], count: u32) -> Result<usize> {
        Client::scan(self, start, count).map(|v| v.len())
    }

    fn max_value(&self) -> Option<u64> {
        Some(u64::from(Client::max_value(self)))
    }

    fn counters(&self) -> Option<ClientCounters> {
        Some(Client::counters(self))
    }

    fn worker(&self) -> Option<usize> {
        Some(usize::from(Client::worker(self)))
    }
}

/// The outcome of one operation: its status, an error message, and for a
/// read-modify-write the read's status and the instant the read ended.
struct Outcome {
    status: Status,
    error: Option<Error>,
    rmw_read: Option<(Status, Instant)>,
}

fn execute<D: Db>(c: &mut D, op: &Op, values: &[u8], buf: &mut Vec<u8>) -> Outcome {
    let key = op.key.as_bytes();
    let val = value_of(op, values);
    match op.kind {
        OpKind::ReadModifyWrite => {
            // YCSB times the read and the update separately (each a READ and an UPDATE
            // of its own) and the pair as READ-MODIFY-WRITE; like YCSB it updates
            // whatever the read returned.
            let read = outcome(c.read(key, buf).map(found_status));
            let read_end = Instant::now();
            let update = outcome(c.write(key, val).map(|()| Status::Ok));
            Outcome {
                status: update.status,
                error: read.error.or(update.error),
                rmw_read: Some((read.status, read_end)),
            }
        }
        OpKind::Read => outcome(c.read(key, buf).map(found_status)),
        OpKind::Update | OpKind::Insert => outcome(c.write(key, val).map(|()| Status::Ok)),
        OpKind::Scan => outcome(c.scan(key, op.scan_len as u32).map(|_| Status::Ok)),
    }
}

/// Records one operation as YCSB does: a read-modify-write as a READ (start to end
/// of the read), an UPDATE (end of the read to the end) and a READ-MODIFY-WRITE
/// (the whole, no status: YCSB prints no Return line for it); intended latencies all
/// from the operation's intended start.
fn record(m: &mut Measurements, op: &Op, o: &Outcome, start: Instant, end: Instant, intended: Instant) {
    match o.rmw_read {
        Some((read_status, read_end)) => {
            m.record_intended("READ", read_end - start, read_end - intended, read_status);
            m.record_intended("UPDATE", end - read_end, end - intended, o.status);
            m.measure("READ-MODIFY-WRITE", end - start, end - intended);
        }
        None => m.record_intended(op.kind.name(), end - start, end - intended, o.status),
    }
}

/// Loads the workload's records (`recordcount` keys from `insertstart`).
pub fn load<T: Transport>(
    t: &T,
    ep: &Endpoint,
    copts: &ClientOptions,
    w: &CoreWorkload,
    opts: &RunOptions,
) -> Result<RunResult> {
    let total = w.config().insert_count;
    phase(|| Client::connect(t, ep, copts.clone()), w, opts, total, true)
}

/// Which of YCSB's phases a run has (`-load`, `-t`, or both as `boomctl ycsb` does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Phases {
    /// Insert the records first.
    pub load: bool,
    /// Run the operations (YCSB's `dotransactions`).
    pub run: bool,
}

/// What [`load_and_run`] measured: the run phase (or the load phase, when it is the only
/// one) and the server's space report after it.
#[derive(Debug)]
pub struct PhasesResult {
    /// The reported phase.
    pub result: RunResult,
    /// The server's space accounting afterwards (`None`: it did not say).
    pub space: Option<crate::log::SpaceReport>,
}

/// YCSB's phases against the server at `ep`: the load (its inserts must all succeed
/// before a run measures anything), then the run; without `run`, the load is the
/// report, as with YCSB's `-load`. Errors say which phase failed ([`Error::Phase`]).
pub fn load_and_run<T: Transport>(
    t: &T,
    ep: &Endpoint,
    copts: &ClientOptions,
    w: &CoreWorkload,
    o: &RunOptions,
    phases: Phases,
) -> Result<PhasesResult> {
    let space = || Client::connect(t, ep, copts.clone()).and_then(|mut c| c.stats()).ok().map(|s| s.space);
    phases_with(|| Client::connect(t, ep, copts.clone()), space, w, o, phases)
}

/// [`load_and_run`] against another store (one connection per thread from `connect`);
/// it reports no space.
pub fn load_and_run_db<D: Db + 'static>(
    connect: impl Fn() -> Result<D>,
    w: &CoreWorkload,
    o: &RunOptions,
    phases: Phases,
) -> Result<PhasesResult> {
    phases_with(connect, || None, w, o, phases)
}

fn phases_with<D: Db + 'static>(
    connect: impl Fn() -> Result<D>,
    space: impl Fn() -> Option<crate::log::SpaceReport>,
    w: &CoreWorkload,
    o: &RunOptions,
    phases: Phases,
) -> Result<PhasesResult> {
    let in_phase = |phase: &'static str| move |e: Error| Error::Phase { phase, error: Box::new(e) };
    if !phases.run {
        // The load is the measured phase: a target throttles it, as YCSB's `-load -target`.
        let lo = RunOptions { label: "load".into(), warmup_ops: 0, ..o.clone() };
        let result = load_db(&connect, w, &lo).map_err(in_phase("load"))?;
        return Ok(PhasesResult { result, space: space() });
    }
    // A run with scans against a store that cannot scan (a hash index, a protocol
    // without SCAN) fails at its first scan: ask once before loading, not after.
    if w.config().scan_proportion > 0.0 {
        // A store that cannot be reached fails the phase that would have come first.
        let mut db = connect().map_err(in_phase(if phases.load { "load" } else { "run" }))?;
        if let Err(e) = db.scan(b"", 1) {
            if e.is_fatal() {
                return Err(in_phase("run")(e));
            }
        }
    }
    if phases.load {
        // Preparation, not measured: as fast as it goes, so no intended start times,
        // and every record, whatever the run's time limit (in YCSB load and run are two
        // invocations, and `maxexecutiontime` limits only the one it is given to: cut
        // short here, the run would measure a partial data set full of misses).
        let lo = RunOptions {
            label: "load".into(),
            hlog: None,
            hdr_files: None,
            target: None,
            duration: None,
            warmup_ops: 0,
            measurement: MeasurementInterval::Op,
            ..o.clone()
        };
        let r = load_db(&connect, w, &lo).map_err(in_phase("load"))?;
        if r.errors > 0 {
            let why = format!(
                "{} of {} inserts failed (first: {})",
                r.errors,
                r.run.operations,
                r.first_error.as_deref().unwrap_or("unknown")
            );
            return Err(in_phase("load")(Error::Invalid(why)));
        }
        // A line of its own, unless the caller draws bars (a sweep) or asked for quiet.
        if o.progress != Progress::Quiet && o.bars.is_none() {
            eprintln!(
                "load: {} records in {} ms ({:.0} ops/s)",
                r.run.operations,
                r.run.runtime_ms(),
                RunInfo { ..r.run }.throughput()
            );
        }
    }
    let result = run_db(&connect, w, o).map_err(in_phase("run"))?;
    Ok(PhasesResult { result, space: space() })
}

/// Runs the transaction phase.
pub fn run<T: Transport>(
    t: &T,
    ep: &Endpoint,
    copts: &ClientOptions,
    w: &CoreWorkload,
    opts: &RunOptions,
) -> Result<RunResult> {
    phase(|| Client::connect(t, ep, copts.clone()), w, opts, opts.ops, false)
}

/// Loads the workload's records into the store `connect` opens (one connection per
/// thread), as [`load`] does for boomkv.
pub fn load_db<D: Db + 'static>(
    connect: impl Fn() -> Result<D>,
    w: &CoreWorkload,
    opts: &RunOptions,
) -> Result<RunResult> {
    phase(connect, w, opts, w.config().insert_count, true)
}

/// Runs the transaction phase against the store `connect` opens, as [`run`] does for
/// boomkv.
pub fn run_db<D: Db + 'static>(
    connect: impl Fn() -> Result<D>,
    w: &CoreWorkload,
    opts: &RunOptions,
) -> Result<RunResult> {
    phase(connect, w, opts, opts.ops, false)
}

/// One phase (load or run): connects the clients, runs the worker threads (each
/// drives its share of the clients), collects their measurements while it shows
/// progress, and assembles the result.
fn phase<D: Db + 'static>(
    connect: impl Fn() -> Result<D>,
    w: &CoreWorkload,
    opts: &RunOptions,
    total: u64,
    loading: bool,
) -> Result<RunResult> {
    let threads = opts.threads.max(1);
    let n = opts.clients.unwrap_or(threads);
    if n < threads {
        return Err(Error::invalid(format!("{n} clients for {threads} threads: each thread needs a client at least")));
    }
    if let Some(c) = &opts.client_cpus {
        c.check_allowed("the client threads")?;
    }
    let clients = connect_clients(connect, w, n)?;
    let sh = Arc::new(Shared {
        done: (0..threads).map(|_| super::wake::Line::default()).collect(),
        errors: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        fatal: std::sync::Mutex::new(None),
        first_error: std::sync::Mutex::new(None),
        client: std::sync::Mutex::new(None),
        span: std::sync::Mutex::new((None, None)),
    });
    let values = Arc::new(value_buffer(w.config().value_size.max() as usize, opts.seed ^ 0x5EED));
    let (tx, rx) = mpsc::channel::<Measurements>();
    let barrier = Arc::new(std::sync::Barrier::new(threads + 1));
    // Client i goes to thread i % threads; each has its own op stream, its share of the
    // operations and of the target rate, as YCSB's threads have.
    let mut shares: Vec<Vec<Lane<D>>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, c) in clients.into_iter().enumerate() {
        // Loading shares one key sequence (the stream ends it); the run splits the ops.
        let ops = if loading { u64::MAX } else { total / n as u64 + u64::from((i as u64) < total % n as u64) };
        shares[i % threads].push(Lane {
            client: c,
            stream: w.stream(opts.seed, i as u64),
            ops,
            done: 0,
            buf: Vec::new(),
            in_flight: None,
            phase: unit_fraction(opts.seed, i as u64),
        });
    }
    let mut handles = Vec::new();
    for (slot, lanes) in shares.into_iter().enumerate() {
        // Colocated, beside the worker of the thread's first client: the server told it
        // which worker that is, and the same layout put that worker on that CPU.
        // A store that does not say which worker serves it leaves the thread to the
        // scheduler: on the workers' CPUs its yields would be their time.
        let (cpus, colocated) = match (&opts.client_cpus, lanes.first().and_then(|l| l.client.worker())) {
            (Some(c), Some(w)) if opts.colocated => (Some(c.pick(w)), true),
            (Some(_), None) if opts.colocated => (None, false),
            (c, _) => (c.clone(), false),
        };
        let job = Worker {
            lanes,
            loading,
            // Measurements go to the collector at least four times per status line, so a
            // line never goes out just before the batch that belongs in it arrives.
            send_every: opts.interval.min(opts.status_interval / 4).max(Duration::from_millis(10)),
            measurement: opts.measurement,
            warmup: opts.warmup_ops,
            duration: opts.duration,
            rate: opts.target.map(|r| r / n as f64).filter(|r| *r > 0.0),
            sh: sh.clone(),
            slot,
            values: values.clone(),
            tx: tx.clone(),
            barrier: barrier.clone(),
            colocated,
            cpus,
        };
        handles.push(std::thread::spawn(move || job.run()));
    }
    drop(tx);
    barrier.wait();
    let mut col = Collector::new(opts, total, &sh)?;
    col.collect(&rx)?;
    let collected = col.t0.elapsed();
    let mut first_err: Option<Error> = None;
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert(Error::invalid("a client thread panicked"));
            }
        }
    }
    let totals = col.finish()?;
    if let Some(e) = first_err {
        return Err(e);
    }
    if let Some((code, message)) = sh.fatal.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
        return Err(Error::Stopped { code, message });
    }
    let runtime = sh.runtime().unwrap_or(collected);
    let run = RunInfo { runtime, operations: sh.done() };
    let mut log_error = col.log_error;
    if let Some(mut h) = col.hlog {
        if let Err(e) = h.write_summary(&totals, &run).and_then(|()| h.finish().map(drop)) {
            log_error.get_or_insert(hlog_error(opts, e));
        }
    }
    if let Some(Err(e)) = col.hdr_files.map(YcsbHdrFiles::finish) {
        log_error.get_or_insert(e);
    }
    if let Some(e) = log_error.take_if(|_| !opts.logs_may_stop) {
        return Err(e);
    }
    let first_error = sh.first_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    let client = sh.client.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    Ok(RunResult {
        measurements: totals,
        run,
        errors: sh.errors.load(Ordering::Relaxed),
        first_error,
        client,
        log_error,
    })
}

/// `e`, a failure of the interval log, said of its file.
fn hlog_error(opts: &RunOptions, e: Error) -> Error {
    match &opts.hlog {
        Some(p) => crate::bench::hlog::said_of(p, e),
        None => e,
    }
}

/// Connects every client first, so connection set-up is not measured, and refuses a
/// workload whose values the store would refuse (it would only fail every write).
fn connect_clients<D: Db>(connect: impl Fn() -> Result<D>, w: &CoreWorkload, n: usize) -> Result<Vec<D>> {
    let mut clients = Vec::new();
    for _ in 0..n {
        clients.push(connect()?);
    }
    if let Some(limit) = clients.first().and_then(Db::max_value) {
        let largest = w.config().value_size.max();
        if largest > limit {
            return Err(Error::TooLarge { what: "workload value size", len: largest, limit });
        }
    }
    Ok(clients)
}

/// One client of a thread: its connection, its op stream and its share of the work.
struct Lane<D: Db> {
    client: D,
    stream: crate::workload::OpStream,
    /// Operations to run (`u64::MAX` when loading: the stream ends the phase).
    ops: u64,
    /// Operations run (measured ones).
    done: u64,
    /// Where its reads' values go.
    buf: Vec<u8>,
    /// The read or write in flight (a thread with several clients): the operation,
    /// when it started, and when it was meant to start.
    in_flight: Option<(Op, Instant, Instant)>,
    /// Under a target rate, where in its first interval this client starts, as a
    /// fraction of the interval (or of [`MAX_SPREAD_S`] when that is shorter): clients
    /// in step would send in bursts, all at once. YCSB's threads likewise first sleep a
    /// random part of one interval.
    phase: f64,
}

/// The longest a throttled client's start is put off to spread the clients (seconds):
/// a burst matters where the interval is short; a client at 0.01 ops/s still starts at
/// once rather than up to 100 s late.
const MAX_SPREAD_S: f64 = 0.010;

/// A number in [0, 1) fixed by `seed` and the client `i`: the same run spreads its
/// clients the same way. From the workload's random source, on a stream apart from the
/// clients' operation streams (which are numbered from 0).
fn unit_fraction(seed: u64, i: u64) -> f64 {
    crate::workload::rng::WorkloadRng::new(seed, u64::MAX - i).next_f64()
}

/// One client thread's job.
struct Worker<D: Db> {
    lanes: Vec<Lane<D>>,
    loading: bool,
    /// Hand measurements to the collector this often.
    send_every: Duration,
    measurement: MeasurementInterval,
    warmup: u64,
    duration: Option<Duration>,
    /// Each client's share of the target rate (operations per second).
    rate: Option<f64>,
    sh: Arc<Shared>,
    /// Its count in `sh.done`.
    slot: usize,
    values: Arc<Vec<u8>>,
    tx: mpsc::Sender<Measurements>,
    barrier: Arc<std::sync::Barrier>,
    cpus: Option<crate::cpus::CpuList>,
    /// It shares its CPU with the server worker it waits for.
    colocated: bool,
}

/// What a thread has counted since the measured phase began.
struct Tally {
    m: Measurements,
    t0: Instant,
    last_send: Instant,
}

impl<D: Db> Worker<D> {
    fn run(mut self) -> Result<()> {
        // A thread that cannot be pinned stops the run after the barrier (the collector
        // waits for every thread there).
        if let Some(Err(e)) = self.cpus.as_ref().map(crate::cpus::CpuList::pin_current_thread) {
            self.sh.stop.store(true, Ordering::Relaxed);
            self.barrier.wait();
            return Err(e);
        }
        // On CPUs of their own (no server worker there), clients poll with yields
        // before they sleep: the yields go to the other clients, and a client that
        // does not sleep needs no wake-up.
        // Beside the worker it waits for, a client yields at every poll instead.
        if self.colocated {
            crate::transport::set_colocated_wait(true);
        } else {
            crate::transport::set_yield_wait(self.cpus.is_some());
        }
        if !self.loading {
            // The warm-up is bounded like the run: by its own `duration` (from its
            // start) and by a stop, or a huge --warmup would never end.
            let until = self.duration.and_then(|d| Instant::now().checked_add(d));
            let over = || self.sh.stop.load(Ordering::Relaxed) || until.is_some_and(|u| Instant::now() >= u);
            // Round robin over a thread's clients, so a bound that cuts the warm-up
            // short leaves none of them cold.
            'warm: for _ in 0..self.warmup {
                for lane in &mut self.lanes {
                    if over() {
                        break 'warm;
                    }
                    let op = lane.stream.next_op();
                    let _ = execute(&mut lane.client, &op, &self.values, &mut lane.buf);
                    lane.stream.complete(&op)?;
                }
            }
        }
        self.barrier.wait();
        let counted_from: Vec<Option<ClientCounters>> = self.lanes.iter().map(|l| l.client.counters()).collect();
        let t0 = Instant::now();
        self.sh.began(t0);
        let mut tally = Tally { m: Measurements::new(self.measurement), t0, last_send: t0 };
        let r = if self.lanes.len() == 1 { self.run_one(&mut tally) } else { self.run_many(&mut tally) };
        self.sh.ended(Instant::now());
        r?;
        let mut m = tally.m;
        for (lane, before) in self.lanes.iter().zip(counted_from) {
            if let (Some(before), Some(now)) = (before, lane.client.counters()) {
                let mut total = self.sh.client.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                total.get_or_insert_with(ClientCounters::default).add(&now.since(&before));
            }
        }
        // YCSB's DBWrapper.cleanup: each client's DB cleanup (here: closing the
        // connection) is measured as CLEANUP, without a status.
        for lane in self.lanes {
            let cleanup = Instant::now();
            drop(lane.client);
            let took = cleanup.elapsed();
            m.measure("CLEANUP", took, took);
        }
        let _ = self.tx.send(m.take());
        Ok(())
    }

    /// The next operation of `lane`, or `None` when its share (or the load) is done.
    fn next_op(&self, lane: &mut Lane<D>) -> Option<Op> {
        if lane.done >= lane.ops {
            None
        } else if self.loading {
            let op = lane.stream.next_load_op();
            if op.is_none() {
                lane.ops = lane.done;
            }
            op
        } else {
            Some(lane.stream.next_op())
        }
    }

    /// One client on this thread: each operation waits for its answer.
    fn run_one(&mut self, tally: &mut Tally) -> Result<()> {
        let mut lane = self.lanes.pop().ok_or_else(|| Error::invalid("a client thread without a client"))?;
        let r = (|| {
            while !self.sh.stop.load(Ordering::Relaxed) {
                let Some(op) = self.next_op(&mut lane) else { break };
                let ControlFlow::Continue(intended) = self.pace(tally.t0, lane.done, lane.phase) else { break };
                let s = Instant::now();
                let outcome = execute(&mut lane.client, &op, &self.values, &mut lane.buf);
                if self.finish(tally, &mut lane, &op, &outcome, s, intended)? {
                    break;
                }
            }
            Ok(())
        })();
        self.lanes.push(lane);
        r
    }

    /// Several clients on this thread: each keeps its read or write in flight while
    /// the thread starts the others' operations and collects the answers as they come
    /// (read-modify-writes and scans run whole, as with one client). A client under a
    /// target rate whose next operation is not due yet is passed over; when none has
    /// anything to do but wait for its time, the thread sleeps until the first is due.
    fn run_many(&mut self, tally: &mut Tally) -> Result<()> {
        let mut lanes = std::mem::take(&mut self.lanes);
        let r = (|| {
            let mut issuing = true;
            let mut idle_rounds = 0u32;
            loop {
                issuing &= !self.sh.stop.load(Ordering::Relaxed);
                let mut in_flight = false;
                let mut progressed = false;
                let mut first_due: Option<Instant> = None;
                for lane in &mut lanes {
                    if let Some((op, s, intended)) = lane.in_flight.take() {
                        let Some(outcome) = poll_op(lane, &op) else {
                            lane.in_flight = Some((op, s, intended));
                            in_flight = true;
                            continue;
                        };
                        progressed = true;
                        if self.finish(tally, lane, &op, &outcome, s, Some(intended))? {
                            issuing = false;
                        }
                    }
                    // A client whose share is done waits for nothing, not even its time.
                    if !issuing || lane.done >= lane.ops {
                        continue;
                    }
                    let intended = self.due(tally.t0, lane.done, lane.phase);
                    if let Some(at) = intended.filter(|&at| at > Instant::now()) {
                        first_due = Some(first_due.map_or(at, |d| d.min(at)));
                        continue;
                    }
                    let Some(op) = self.next_op(lane) else { continue };
                    progressed = true;
                    let s = Instant::now();
                    let intended = intended.unwrap_or(s);
                    match start_op(lane, &op, &self.values) {
                        None => {
                            lane.in_flight = Some((op, s, intended));
                            in_flight = true;
                        }
                        Some(outcome) => {
                            if self.finish(tally, lane, &op, &outcome, s, Some(intended))? {
                                issuing = false;
                            }
                        }
                    }
                }
                if progressed {
                    idle_rounds = 0;
                    continue;
                }
                if !in_flight {
                    match first_due {
                        // In slices: the run may stop, or its time run out, first.
                        Some(at) if issuing && self.end(tally.t0).is_none_or(|e| Instant::now() < e) => {
                            std::thread::sleep(at.saturating_duration_since(Instant::now()).min(PACE_SLICE));
                        }
                        _ => break,
                    }
                    continue;
                }
                // Nothing came this round: a short pause, and now and then the CPU to
                // whoever shares it (a server worker, when the threads are not placed).
                idle_rounds += 1;
                if idle_rounds % 64 == 0 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            Ok(())
        })();
        self.lanes = lanes;
        r
    }

    /// Records `lane`'s finished operation `op` (started at `s`, meant to start at
    /// `intended`) and hands the measurements on when it is time; whether the
    /// thread's run is over (its time is up).
    fn finish(
        &self,
        tally: &mut Tally,
        lane: &mut Lane<D>,
        op: &Op,
        outcome: &Outcome,
        s: Instant,
        intended: Option<Instant>,
    ) -> Result<bool> {
        let end = Instant::now();
        record(&mut tally.m, op, outcome, s, end, intended.unwrap_or(s));
        lane.stream.complete(op)?;
        if let Some(e) = &outcome.error {
            self.sh.note_error(e);
        }
        if let Some(d) = self.sh.done.get(self.slot) {
            d.0.fetch_add(1, Ordering::Relaxed);
        }
        lane.done += 1;
        if end.duration_since(tally.last_send) >= self.send_every {
            tally.last_send = end;
            let _ = self.tx.send(tally.m.take());
        }
        Ok(self.duration.is_some_and(|d| end.duration_since(tally.t0) >= d))
    }

    /// Under a target rate, a client's `k`-th operation's intended start (`None`
    /// without one), `phase` (0..1) of an interval (of [`MAX_SPREAD_S`] at most) after
    /// the run's start.
    fn due(&self, t0: Instant, k: u64, phase: f64) -> Option<Instant> {
        // A rate so low that the start is past what an Instant holds: as good as never
        // (the run's time or its stop ends the wait).
        let never = || t0.checked_add(Duration::from_secs(100 * 365 * 86400)).unwrap_or(t0);
        self.rate.map(|r| {
            Duration::try_from_secs_f64(k as f64 / r + phase * (1.0 / r).min(MAX_SPREAD_S))
                .ok()
                .and_then(|d| t0.checked_add(d))
                .unwrap_or_else(never)
        })
    }

    /// When the run's time is up (`None` without a duration).
    fn end(&self, t0: Instant) -> Option<Instant> {
        self.duration.and_then(|d| t0.checked_add(d))
    }

    /// Under a target rate, waits for a client's `k`-th operation's intended start and
    /// returns it; otherwise `None`: the intended start is the start (no clock
    /// reading for it). `Break` when the run stopped or its time ran out first: the
    /// wait goes in slices, so a low rate never outlasts the run.
    fn pace(&self, t0: Instant, k: u64, phase: f64) -> ControlFlow<(), Option<Instant>> {
        let Some(at) = self.due(t0, k, phase) else { return ControlFlow::Continue(None) };
        let wake = self.end(t0).map_or(at, |e| e.min(at));
        loop {
            let now = Instant::now();
            if now >= wake {
                break;
            }
            if self.sh.stop.load(Ordering::Relaxed) {
                return ControlFlow::Break(());
            }
            std::thread::sleep((wake - now).min(PACE_SLICE));
        }
        if wake < at {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(Some(at))
        }
    }
}

/// Starts `op` on `lane`'s client: `None` while it is in flight (a read or a write
/// the store can leave in flight), else its outcome (everything else runs whole).
fn start_op<D: Db>(lane: &mut Lane<D>, op: &Op, values: &[u8]) -> Option<Outcome> {
    let key = op.key.as_bytes();
    match op.kind {
        OpKind::Read => match lane.client.read_start(key, &mut lane.buf) {
            Ok(None) => None,
            Ok(Some(found)) => Some(outcome(Ok(found_status(found)))),
            Err(e) => Some(outcome(Err(e))),
        },
        OpKind::Update | OpKind::Insert => match lane.client.write_start(key, value_of(op, values)) {
            Ok(false) => None,
            Ok(true) => Some(outcome(Ok(Status::Ok))),
            Err(e) => Some(outcome(Err(e))),
        },
        OpKind::ReadModifyWrite | OpKind::Scan => Some(execute(&mut lane.client, op, values, &mut lane.buf)),
    }
}

/// The outcome of `lane`'s operation `op` in flight, if its answer has come.
fn poll_op<D: Db>(lane: &mut Lane<D>, op: &Op) -> Option<Outcome> {
    let key = op.key.as_bytes();
    let r = if op.kind == OpKind::Read {
        lane.client.read_poll(key, &mut lane.buf).map(|f| f.map(found_status))
    } else {
        lane.client.write_poll(key).map(|done| done.then_some(Status::Ok))
    };
    match r {
        Ok(None) => None,
        Ok(Some(s)) => Some(outcome(Ok(s))),
        Err(e) => Some(outcome(Err(e))),
    }
}

/// The value `op` writes: the first `value_len` bytes of the value buffer.
fn value_of<'v>(op: &Op, values: &'v [u8]) -> &'v [u8] {
    &values[..op.value_len.min(values.len())]
}

fn found_status(found: bool) -> Status {
    if found {
        Status::Ok
    } else {
        Status::NotFound
    }
}

/// A single operation's outcome (not a read-modify-write).
fn outcome(r: Result<Status>) -> Outcome {
    match r {
        Ok(status) => Outcome { status, error: None, rmw_read: None },
        Err(e) => Outcome { status: Status::Error, error: Some(e), rmw_read: None },
    }
}

impl Shared {
    /// Operations finished so far, all threads.
    fn done(&self) -> u64 {
        self.done.iter().map(|d| d.0.load(Ordering::Relaxed)).sum()
    }

    /// A client thread began its measured phase at `t`.
    fn began(&self, t: Instant) {
        let mut s = self.span.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        s.0 = Some(s.0.map_or(t, |b| b.min(t)));
    }

    /// A client thread ended its measured phase at `t`.
    fn ended(&self, t: Instant) {
        let mut s = self.span.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        s.1 = Some(s.1.map_or(t, |e| e.max(t)));
    }

    /// From the first client thread's start to the last one's end.
    fn runtime(&self) -> Option<Duration> {
        match *self.span.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
            (Some(b), Some(e)) => Some(e.saturating_duration_since(b)),
            _ => None,
        }
    }

    /// Counts an operation's error; a fatal one stops every thread.
    fn note_error(&self, e: &Error) {
        if self.errors.fetch_add(1, Ordering::Relaxed) == 0 {
            self.first_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get_or_insert(e.to_string());
        }
        if e.is_fatal() {
            self.fatal
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get_or_insert_with(|| (e.refusal_code(), e.to_string()));
            self.stop.store(true, Ordering::Relaxed);
        }
    }
}

/// The phase's side of the measurements: merges what the workers send, writes the
/// HdrHistogram log's intervals, and shows progress (a bar, or YCSB's status lines).
struct Collector<'a> {
    opts: &'a RunOptions,
    sh: &'a Shared,
    total: u64,
    t0: Instant,
    hlog: Option<HlogWriter<std::io::BufWriter<std::fs::File>>>,
    hdr_files: Option<YcsbHdrFiles>,
    /// Why `hlog` or `hdr_files` stopped, if one did (the first failure).
    log_error: Option<Error>,
    totals: Measurements,
    interval: Measurements,
    interval_start: SystemTime,
    last_tick: Instant,
    /// A run bounded by time only (`--duration` without `--ops`): the bar and the
    /// status lines follow the clock, not an operation count.
    timed: Option<Duration>,
    bar_len: u64,
    bar: Option<indicatif::ProgressBar>,
    lines: bool,
    status_acc: Measurements,
    last_line: Instant,
    last_done: u64,
}

impl<'a> Collector<'a> {
    fn new(opts: &'a RunOptions, total: u64, sh: &'a Shared) -> Result<Collector<'a>> {
        let t0 = Instant::now();
        let start_measured = SystemTime::now();
        let hlog = match &opts.hlog {
            Some(p) => Some(HlogWriter::create(p, start_measured)?),
            None => None,
        };
        let hdr_files = opts.hdr_files.as_deref().map(|p| YcsbHdrFiles::new(p, start_measured));
        let timed = opts.duration.filter(|_| total == u64::MAX);
        let bar_len = match timed {
            Some(d) => u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            None => total,
        };
        let bar = progress_bar(opts.progress, bar_len, &opts.label, timed.is_some()).map(|b| match &opts.bars {
            Some(m) => m.add(b),
            None => b,
        });
        let c = Collector {
            opts,
            sh,
            total,
            t0,
            hlog,
            hdr_files,
            log_error: None,
            totals: Measurements::new(opts.measurement),
            interval: Measurements::new(opts.measurement),
            interval_start: start_measured,
            last_tick: Instant::now(),
            timed,
            bar_len,
            bar,
            lines: opts.progress == Progress::Lines,
            status_acc: Measurements::new(opts.measurement),
            last_line: Instant::now(),
            last_done: 0,
        };
        if c.lines {
            c.status_line(&c.status_acc, 0);
        }
        Ok(c)
    }

    /// Prints one YCSB status line for what `acc` holds, `done` operations so far.
    fn status_line(&self, acc: &Measurements, done: u64) {
        let p = status::StatusPoint {
            elapsed_ms: self.t0.elapsed().as_millis() as u64,
            interval_ms: self.last_line.elapsed().as_millis() as u64,
            total_ops: done,
            last_total_ops: self.last_done,
            todo_ops: if self.timed.is_some() { 0 } else { self.total.saturating_sub(done) },
        };
        eprintln!("{}{}", self.opts.status_label, status::line(SystemTime::now(), &p, acc));
    }

    /// Takes what the workers send until every one has hung up.
    fn collect(&mut self, rx: &mpsc::Receiver<Measurements>) -> Result<()> {
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(m) => {
                    self.interval.merge(&m)?;
                    if self.lines {
                        self.status_acc.merge(&m)?;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            if self.last_tick.elapsed() >= self.opts.interval {
                self.close_interval()?;
                self.last_tick = Instant::now();
            }
            self.show_progress();
        }
        if self.lines {
            let acc = self.status_acc.take();
            self.status_line(&acc, self.sh.done());
        }
        Ok(())
    }

    /// Writes the current interval to the HdrHistogram log and adds it to the totals.
    fn close_interval(&mut self) -> Result<()> {
        let now = SystemTime::now();
        let len = now.duration_since(self.interval_start).unwrap_or_default();
        // Logs written beside the run are not worth its measurements: one that cannot
        // be written stops, and the phase says why at its end.
        if let Some(h) = self.hlog.as_mut() {
            if let Err(e) = h.write_interval(&self.interval, self.interval_start, len) {
                self.hlog = None;
                self.log_error.get_or_insert(hlog_error(self.opts, e));
            }
        }
        if let Some(h) = self.hdr_files.as_mut() {
            if let Err(e) = h.write_interval(&self.interval, self.interval_start, len) {
                self.hdr_files = None;
                self.log_error.get_or_insert(e);
            }
        }
        self.totals.merge(&self.interval.take())?;
        self.interval_start = now;
        Ok(())
    }

    fn show_progress(&mut self) {
        let done = self.sh.done();
        if let Some(b) = &self.bar {
            let secs = self.t0.elapsed().as_secs_f64();
            let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
            match self.timed {
                Some(_) => {
                    b.set_position(u64::try_from(self.t0.elapsed().as_millis()).unwrap_or(u64::MAX).min(self.bar_len));
                    b.set_message(format!("{done} ops, {}", readable_rate(rate)));
                }
                None => {
                    b.set_position(done);
                    b.set_message(readable_rate(rate));
                }
            }
        } else if self.lines && self.last_line.elapsed() >= self.opts.status_interval {
            let acc = self.status_acc.take();
            self.status_line(&acc, done);
            self.last_line = Instant::now();
            self.last_done = done;
        }
    }

    /// Clears the bar and closes the last interval; returns the phase's totals.
    fn finish(&mut self) -> Result<Measurements> {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
            // A finished bar stays in a MultiProgress (as an empty line that pushes the
            // sweep's overall bar down, run after run) until it is removed.
            if let Some(m) = &self.opts.bars {
                m.remove(&b);
            }
        }
        self.close_interval()?;
        Ok(std::mem::replace(&mut self.totals, Measurements::new(self.opts.measurement)))
    }
}

/// `12.3k ops/s`, `1.25M ops/s`, `950 ops/s`.
pub fn readable_rate(ops_per_sec: f64) -> String {
    if ops_per_sec >= 1e6 {
        format!("{:.2}M ops/s", ops_per_sec / 1e6)
    } else if ops_per_sec >= 1e4 {
        format!("{:.1}k ops/s", ops_per_sec / 1e3)
    } else {
        format!("{ops_per_sec:.0} ops/s")
    }
}

fn progress_bar(p: Progress, len: u64, label: &str, timed: bool) -> Option<indicatif::ProgressBar> {
    if p != Progress::Bar {
        return None;
    }
    let b = indicatif::ProgressBar::new(len);
    // A timed bar counts milliseconds: show the clock and the duration's ETA instead.
    let template = if timed {
        "{prefix:>8} [{elapsed_precise}] {wide_bar} {msg} eta {eta}"
    } else {
        "{prefix:>8} [{elapsed_precise}] {wide_bar} {pos}/{len} ops {msg} eta {eta}"
    };
    let style =
        indicatif::ProgressStyle::with_template(template).unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    b.set_style(style);
    b.set_prefix(label.to_string());
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::unit_fraction;

    #[test]
    fn throttled_clients_are_spread_over_an_interval() {
        let p: Vec<f64> = (0..1000).map(|i| unit_fraction(1, i)).collect();
        assert!(p.iter().all(|x| (0.0..1.0).contains(x)));
        let mean = p.iter().sum::<f64>() / p.len() as f64;
        assert!((0.45..0.55).contains(&mean), "{mean}");
        // Four clients start at four different points of their interval, and the same
        // seed spreads them the same way again.
        let four: Vec<f64> = (0..4).map(|i| unit_fraction(7, i)).collect();
        assert!(four.windows(2).all(|w| (w[0] - w[1]).abs() > 1e-9), "{four:?}");
        assert_eq!(four, (0..4).map(|i| unit_fraction(7, i)).collect::<Vec<_>>());
    }
}
