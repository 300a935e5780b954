//! The YCSB runner: `load` and `run` phases with client threads, throttling with
//! coordinated-omission correction, interval logging and progress.
//!
//! Each thread has its own [`Client`] (its own connection) and its own op stream; it
//! records into its own [`Measurements`] and hands a snapshot to the collector once per
//! interval. The collector merges snapshots into the run totals, writes them to the
//! interval log (`--hdr-log`) and drives the progress display.
//!
//! With a target throughput, thread `i` of `n` issues its `k`-th operation at
//! `start + k * n / target`; the latency from that intended time is recorded too (as
//! YCSB's `measurement.interval=both` does), so stalls are not hidden.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::bench::hlog::HlogWriter;
use crate::bench::measure::{MeasurementInterval, Measurements, Status};
use crate::bench::report::RunInfo;
use crate::bench::status;
use crate::client::{Client, ClientOptions};
use crate::error::{Error, Result};
use crate::transport::{Endpoint, Transport};
use crate::workload::{CoreWorkload, Op, OpKind};

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
    /// Client threads, one connection each.
    pub threads: usize,
    /// Operations in all (run phase), split over the threads.
    pub ops: u64,
    /// Stop after this long even if operations remain.
    pub duration: Option<Duration>,
    /// Target throughput in ops/s over all threads.
    pub target: Option<f64>,
    /// Unmeasured operations per thread before the measured phase.
    pub warmup_ops: u64,
    /// Seed of the op streams.
    pub seed: u64,
    /// Progress display.
    pub progress: Progress,
    /// Interval log to write.
    pub hlog: Option<PathBuf>,
    /// Reporting interval of the interval log.
    pub interval: Duration,
    /// Interval of the status lines (YCSB's `status.interval`, default 10 s).
    pub status_interval: Duration,
    /// What latencies to record.
    pub measurement: MeasurementInterval,
    /// A label for progress output ("load", "run", "boom 2k").
    pub label: String,
    /// Show the progress bar under these (a sweep's overall bar) instead of on its own.
    pub bars: Option<indicatif::MultiProgress>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            threads: 1,
            ops: 1000,
            duration: None,
            target: None,
            warmup_ops: 0,
            seed: 1,
            progress: Progress::Quiet,
            hlog: None,
            interval: Duration::from_secs(1),
            status_interval: Duration::from_secs(10),
            measurement: MeasurementInterval::Op,
            label: "run".into(),
            bars: None,
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
}

/// A source of values: a fixed random buffer, sliced.
fn value_buffer(max: usize, seed: u64) -> Vec<u8> {
    use rand::{Rng, SeedableRng};
    let mut v = vec![0u8; max.max(1)];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

struct Shared {
    done: AtomicU64,
    errors: AtomicU64,
    stop: AtomicBool,
    fatal: std::sync::Mutex<Option<String>>,
    first_error: std::sync::Mutex<Option<String>>,
}

/// The outcome of one operation: its status, an error message, and for a
/// read-modify-write the read's status and the instant the read ended.
struct Outcome {
    status: Status,
    error: Option<Error>,
    rmw_read: Option<(Status, Instant)>,
}

fn execute<T: Transport>(c: &mut Client<T>, op: &Op, values: &[u8], buf: &mut Vec<u8>) -> Outcome {
    let key = op.key.as_bytes();
    let val = &values[..op.value_len.min(values.len())];
    let status = |r: Result<Status>| match r {
        Ok(s) => (s, None),
        Err(e) => (Status::Error, Some(e)),
    };
    let found = |f: bool| if f { Status::Ok } else { Status::NotFound };
    match op.kind {
        OpKind::ReadModifyWrite => {
            // YCSB times the read and the update separately (each a READ and an UPDATE
            // of its own) and the pair as READ-MODIFY-WRITE; like YCSB it updates
            // whatever the read returned.
            let (rs, re) = status(c.get_into(key, buf).map(found));
            let read_end = Instant::now();
            let (us, ue) = status(c.put(key, val).map(|_| Status::Ok));
            Outcome { status: us, error: re.or(ue), rmw_read: Some((rs, read_end)) }
        }
        _ => {
            let r = match op.kind {
                OpKind::Read => c.get_into(key, buf).map(found),
                OpKind::Update | OpKind::Insert => c.put(key, val).map(|_| Status::Ok),
                OpKind::Scan => c.scan(key, op.scan_len as u32).map(|_| Status::Ok),
                OpKind::ReadModifyWrite => unreachable!("handled above"),
            };
            let (s, e) = status(r);
            Outcome { status: s, error: e, rmw_read: None }
        }
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
    phase(t, ep, copts, w, opts, total, true)
}

/// Runs the transaction phase.
pub fn run<T: Transport>(
    t: &T,
    ep: &Endpoint,
    copts: &ClientOptions,
    w: &CoreWorkload,
    opts: &RunOptions,
) -> Result<RunResult> {
    phase(t, ep, copts, w, opts, opts.ops, false)
}

#[allow(clippy::too_many_arguments)]
fn phase<T: Transport>(
    t: &T,
    ep: &Endpoint,
    copts: &ClientOptions,
    w: &CoreWorkload,
    opts: &RunOptions,
    total: u64,
    loading: bool,
) -> Result<RunResult> {
    let threads = opts.threads.max(1);
    let max_value = w.config().value_size.max() as usize;
    let values = Arc::new(value_buffer(max_value, opts.seed ^ 0x5EED));
    let sh = Arc::new(Shared {
        done: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        fatal: std::sync::Mutex::new(None),
        first_error: std::sync::Mutex::new(None),
    });
    // Connect every client first, so connection set-up is not measured.
    let mut clients = Vec::new();
    for _ in 0..threads {
        clients.push(Client::connect(t, ep, copts.clone())?);
    }
    // The server announces its value limit: a workload above it would only fail every
    // write, so say why before running anything.
    if let Some(c) = clients.first() {
        let largest = w.config().value_size.max();
        if largest > u64::from(c.max_value()) {
            return Err(Error::TooLarge { what: "workload value size", len: largest, limit: u64::from(c.max_value()) });
        }
    }
    let (tx, rx) = mpsc::channel::<Measurements>();
    let mut handles = Vec::new();
    let barrier = Arc::new(std::sync::Barrier::new(threads + 1));
    for (i, mut c) in clients.into_iter().enumerate() {
        // Loading shares one key sequence (the stream ends it); the run splits the ops.
        let per =
            if loading { u64::MAX } else { total / threads as u64 + u64::from((i as u64) < total % threads as u64) };
        let mut stream = w.stream(opts.seed, i as u64);
        let (sh, values, tx, barrier) = (sh.clone(), values.clone(), tx.clone(), barrier.clone());
        // Workers hand over their measurements at least four times per status line, so a
        // line never goes out just before the batch that belongs in it arrives.
        let send_every = opts.interval.min(opts.status_interval / 4).max(Duration::from_millis(10));
        let (interval, measurement, warmup, duration) = (send_every, opts.measurement, opts.warmup_ops, opts.duration);
        let rate = opts.target.map(|r| r / threads as f64).filter(|r| *r > 0.0);
        handles.push(std::thread::spawn(move || -> Result<()> {
            let mut m = Measurements::new(measurement);
            let mut buf = Vec::new();
            if !loading {
                for _ in 0..warmup {
                    let op = stream.next_op();
                    let _ = execute(&mut c, &op, &values, &mut buf);
                    stream.complete(&op)?;
                }
            }
            barrier.wait();
            let t0 = Instant::now();
            let mut last_send = t0;
            let mut k = 0u64;
            while k < per && !sh.stop.load(Ordering::Relaxed) {
                let op = if loading {
                    match stream.next_load_op() {
                        Some(op) => op,
                        None => break,
                    }
                } else {
                    stream.next_op()
                };
                let intended = match rate {
                    Some(r) => {
                        let at = t0 + Duration::from_secs_f64(k as f64 / r);
                        let now = Instant::now();
                        if at > now {
                            std::thread::sleep(at - now);
                        }
                        at
                    }
                    None => Instant::now(),
                };
                let s = Instant::now();
                let outcome = execute(&mut c, &op, &values, &mut buf);
                let end = Instant::now();
                record(&mut m, &op, &outcome, s, end, intended);
                stream.complete(&op)?;
                if let Some(e) = outcome.error {
                    if sh.errors.fetch_add(1, Ordering::Relaxed) == 0 {
                        sh.first_error
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .get_or_insert(e.to_string());
                    }
                    if e.is_fatal() {
                        sh.fatal.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get_or_insert(e.to_string());
                        sh.stop.store(true, Ordering::Relaxed);
                    }
                }
                sh.done.fetch_add(1, Ordering::Relaxed);
                k += 1;
                if end.duration_since(last_send) >= interval {
                    last_send = end;
                    let _ = tx.send(m.take());
                }
                if duration.is_some_and(|d| end.duration_since(t0) >= d) {
                    break;
                }
            }
            // YCSB's DBWrapper.cleanup: each thread's DB cleanup (here: closing the
            // connection) is measured as CLEANUP, without a status.
            let cleanup = Instant::now();
            drop(c);
            let took = cleanup.elapsed();
            m.measure("CLEANUP", took, took);
            let _ = tx.send(m.take());
            Ok(())
        }));
    }
    drop(tx);
    barrier.wait();
    let t0 = Instant::now();
    let start_measured = SystemTime::now();
    let mut hlog = match &opts.hlog {
        Some(p) => Some(HlogWriter::create(p, start_measured)?),
        None => None,
    };
    let mut totals = Measurements::new(opts.measurement);
    let mut interval = Measurements::new(opts.measurement);
    // A run bounded by time only (`--duration` without `--ops`): the bar and the
    // status lines follow the clock, not an operation count.
    let timed = opts.duration.filter(|_| total == u64::MAX);
    let bar_len = match timed {
        Some(d) => u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
        None => total,
    };
    let bar = progress_bar(opts.progress, bar_len, &opts.label, timed.is_some()).map(|b| match &opts.bars {
        Some(m) => m.add(b),
        None => b,
    });
    let mut last_tick = Instant::now();
    let lines = opts.progress == Progress::Lines;
    let mut status_acc = Measurements::new(opts.measurement);
    let mut last_line = Instant::now();
    let mut last_done = 0u64;
    let status_line = |acc: &Measurements, last_line: Instant, last_done: u64, done: u64| {
        let p = status::StatusPoint {
            elapsed_ms: t0.elapsed().as_millis() as u64,
            interval_ms: last_line.elapsed().as_millis() as u64,
            total_ops: done,
            last_total_ops: last_done,
            todo_ops: if timed.is_some() { 0 } else { total.saturating_sub(done) },
        };
        eprintln!("{}", status::line(SystemTime::now(), &p, acc));
    };
    if lines {
        status_line(&status_acc, last_line, 0, 0);
    }
    let mut interval_start = start_measured;
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(m) => {
                interval.merge(&m)?;
                if lines {
                    status_acc.merge(&m)?;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if last_tick.elapsed() >= opts.interval {
            let now = SystemTime::now();
            if let Some(h) = hlog.as_mut() {
                h.write_interval(&interval, interval_start, now.duration_since(interval_start).unwrap_or_default())?;
            }
            totals.merge(&interval.take())?;
            interval_start = now;
            last_tick = Instant::now();
        }
        let done = sh.done.load(Ordering::Relaxed);
        if let Some(b) = &bar {
            let secs = t0.elapsed().as_secs_f64();
            let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
            match timed {
                Some(_) => {
                    b.set_position(u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX).min(bar_len));
                    b.set_message(format!("{done} ops, {}", readable_rate(rate)));
                }
                None => {
                    b.set_position(done);
                    b.set_message(readable_rate(rate));
                }
            }
        } else if lines && last_line.elapsed() >= opts.status_interval {
            status_line(&status_acc.take(), last_line, last_done, done);
            last_line = Instant::now();
            last_done = done;
        }
    }
    if lines {
        status_line(&status_acc.take(), last_line, last_done, sh.done.load(Ordering::Relaxed));
    }
    let runtime = t0.elapsed();
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
    if let Some(b) = bar {
        b.finish_and_clear();
        // A finished bar stays in a MultiProgress (as an empty line that pushes the
        // sweep's overall bar down, run after run) until it is removed.
        if let Some(m) = &opts.bars {
            m.remove(&b);
        }
    }
    let now = SystemTime::now();
    if let Some(h) = hlog.as_mut() {
        h.write_interval(&interval, interval_start, now.duration_since(interval_start).unwrap_or_default())?;
    }
    totals.merge(&interval)?;
    if let Some(e) = first_err {
        return Err(e);
    }
    if let Some(f) = sh.fatal.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
        return Err(Error::Invalid(f));
    }
    let run = RunInfo { runtime, operations: sh.done.load(Ordering::Relaxed) };
    if let Some(mut h) = hlog {
        h.write_summary(&totals, &run)?;
        h.finish()?;
    }
    let first_error = sh.first_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    Ok(RunResult { measurements: totals, run, errors: sh.errors.load(Ordering::Relaxed), first_error })
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
