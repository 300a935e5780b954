//! Several clients per runner thread (`RunOptions::clients`, `boomctl ycsb --clients`):
//! each client keeps its read or write in flight while the thread starts the others,
//! every operation is counted once, a target rate still paces each client, and the
//! real clients (boomkv over shm and tcp, with and without split requests) serve a
//! whole run that way.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use boomkv::bench::runner::{self, Db, Phases, RunOptions};
use boomkv::error::Result;
use boomkv::measure::MeasurementInterval;
use boomkv::workload::{names, CoreWorkload, WorkloadSpec};

/// What the slow store saw, over all its clients.
#[derive(Default)]
struct Seen {
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    finished: AtomicU64,
    /// Requests started split (`read_start`, `write_start`), not whole.
    split: AtomicU64,
    /// Clients that ran on each thread, by thread name.
    threads: Mutex<std::collections::BTreeMap<String, usize>>,
}

/// A store whose reads and writes answer on the third poll after they start.
struct Slow {
    seen: Arc<Seen>,
    polls: u32,
    noted: bool,
}

impl Slow {
    fn begin(&mut self) {
        let n = self.seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.seen.most_in_flight.fetch_max(n, Ordering::SeqCst);
        self.polls = 0;
        if !self.noted {
            self.noted = true;
            let name = format!("{:?}", std::thread::current().id());
            *self.seen.threads.lock().unwrap().entry(name).or_default() += 1;
        }
    }

    fn poll(&mut self) -> bool {
        self.polls += 1;
        if self.polls < 3 {
            return false;
        }
        self.seen.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.seen.finished.fetch_add(1, Ordering::SeqCst);
        true
    }
}

/// Connects slow stores that report to `seen`.
fn slow(seen: &Arc<Seen>) -> impl Fn() -> Result<Slow> + '_ {
    move || Ok(Slow { seen: seen.clone(), polls: 0, noted: false })
}

impl Db for Slow {
    fn read(&mut self, _key: &[u8], _out: &mut Vec<u8>) -> Result<bool> {
        self.begin();
        while !self.poll() {}
        Ok(true)
    }
    fn write(&mut self, _key: &[u8], _value: &[u8]) -> Result<()> {
        self.begin();
        while !self.poll() {}
        Ok(())
    }
    fn scan(&mut self, _start: &[u8], _count: u32) -> Result<usize> {
        Ok(0)
    }
    fn read_start(&mut self, _key: &[u8], _out: &mut Vec<u8>) -> Result<Option<bool>> {
        self.seen.split.fetch_add(1, Ordering::SeqCst);
        self.begin();
        Ok(None)
    }
    fn read_poll(&mut self, _key: &[u8], _out: &mut Vec<u8>) -> Result<Option<bool>> {
        Ok(self.poll().then_some(true))
    }
    fn write_start(&mut self, _key: &[u8], _value: &[u8]) -> Result<bool> {
        self.seen.split.fetch_add(1, Ordering::SeqCst);
        self.begin();
        Ok(false)
    }
    fn write_poll(&mut self, _key: &[u8]) -> Result<bool> {
        Ok(self.poll())
    }
    fn max_value(&self) -> Option<u64> {
        None
    }
}

fn workload(mix: char, records: u64, ops: u64) -> CoreWorkload {
    let mut s = WorkloadSpec::from_mix(mix).unwrap();
    s.set(names::RECORD_COUNT, &records.to_string()).unwrap();
    s.set(names::OPERATION_COUNT, &ops.to_string()).unwrap();
    CoreWorkload::new(&s).unwrap()
}

fn count(r: &runner::PhasesResult, series: &str) -> u64 {
    r.result.measurements.get(series).map_or(0, |s| s.histogram().len())
}

#[test]
fn a_thread_keeps_one_request_of_each_of_its_clients_in_flight() {
    let w = workload('a', 100, 2000);
    let seen = Arc::new(Seen::default());
    let o = RunOptions { threads: 2, clients: Some(6), ops: 2000, ..Default::default() };
    let connect = slow(&seen);
    let r = runner::load_and_run_db(connect, &w, &o, Phases { load: true, run: true }).unwrap();
    assert_eq!(r.result.run.operations, 2000);
    assert_eq!(count(&r, "READ") + count(&r, "UPDATE"), 2000);
    // Load (100 inserts) and run, each started and finished once.
    assert_eq!(seen.finished.load(Ordering::SeqCst), 2100);
    assert_eq!(seen.in_flight.load(Ordering::SeqCst), 0);
    // Three clients a thread, all in flight at once on each of the two threads; never
    // more than the six clients.
    let most = seen.most_in_flight.load(Ordering::SeqCst);
    assert!((3..=6).contains(&most), "at most {most} in flight");
    let per_thread: Vec<usize> = seen.threads.lock().unwrap().values().copied().collect();
    assert!(per_thread.iter().all(|&n| n >= 3), "clients per thread: {per_thread:?}");
    // One CLEANUP per client, as YCSB has one per thread.
    assert_eq!(count(&r, "CLEANUP"), 6);
}

#[test]
fn one_client_per_thread_keeps_nothing_in_flight_behind_another() {
    let w = workload('b', 50, 600);
    let seen = Arc::new(Seen::default());
    let o = RunOptions { threads: 3, ops: 600, ..Default::default() };
    let connect = slow(&seen);
    let r = runner::load_and_run_db(connect, &w, &o, Phases { load: false, run: true }).unwrap();
    assert_eq!(r.result.run.operations, 600);
    assert!(seen.most_in_flight.load(Ordering::SeqCst) <= 3);
    // Each operation ran whole, as before clients per thread: none was started split.
    assert_eq!(seen.split.load(Ordering::SeqCst), 0);
    assert_eq!(seen.finished.load(Ordering::SeqCst), 600);
}

#[test]
fn fewer_clients_than_threads_is_refused() {
    let w = workload('b', 10, 10);
    let seen = Arc::new(Seen::default());
    let o = RunOptions { threads: 4, clients: Some(2), ops: 10, ..Default::default() };
    let connect = slow(&seen);
    let Err(e) = runner::load_and_run_db(connect, &w, &o, Phases { load: false, run: true }) else {
        panic!("fewer clients than threads ran")
    };
    assert!(e.to_string().contains("2 clients for 4 threads"), "{e}");
    assert_eq!(seen.finished.load(Ordering::SeqCst), 0);
}

#[test]
fn a_target_rate_paces_each_client_of_a_thread() {
    // 400 operations at 2000 ops/s over 4 clients on one thread: 0.2 s at the least
    // (each client's k-th operation is not started before t0 + k / 500 s).
    let w = workload('c', 50, 400);
    let seen = Arc::new(Seen::default());
    let o = RunOptions {
        threads: 1,
        clients: Some(4),
        ops: 400,
        target: Some(2000.0),
        measurement: MeasurementInterval::Both,
        ..Default::default()
    };
    let connect = slow(&seen);
    let t = Instant::now();
    let r = runner::load_and_run_db(connect, &w, &o, Phases { load: false, run: true }).unwrap();
    assert_eq!(r.result.run.operations, 400);
    assert!(t.elapsed() >= Duration::from_millis(195), "{:?}", t.elapsed());
    assert_eq!(count(&r, "Intended-READ"), 400);
}

#[test]
fn a_paced_thread_stops_when_its_clients_are_done() {
    // 8 operations at 8 ops/s over 4 clients on one thread: each client's two are due
    // at 0 and 0.5 s, so the run ends just after 0.5 s, not a client's interval later.
    let w = workload('c', 10, 8);
    let seen = Arc::new(Seen::default());
    let o = RunOptions { threads: 1, clients: Some(4), ops: 8, target: Some(8.0), ..Default::default() };
    let connect = slow(&seen);
    let r = runner::load_and_run_db(connect, &w, &o, Phases { load: false, run: true }).unwrap();
    assert_eq!(r.result.run.operations, 8);
    let took = r.result.run.runtime_ms();
    assert!((490..900).contains(&took), "run time {took} ms: 500 expected, 1000 if it waited past the last");
}

/// A store whose every operation takes `d` (spinning: a sleep would measure the timer).
struct Busy(Duration);

impl Db for Busy {
    fn read(&mut self, _key: &[u8], _out: &mut Vec<u8>) -> Result<bool> {
        let t = Instant::now();
        while t.elapsed() < self.0 {}
        Ok(true)
    }
    fn write(&mut self, _key: &[u8], _value: &[u8]) -> Result<()> {
        let t = Instant::now();
        while t.elapsed() < self.0 {}
        Ok(())
    }
    fn scan(&mut self, _start: &[u8], _count: u32) -> Result<usize> {
        Ok(0)
    }
    fn max_value(&self) -> Option<u64> {
        None
    }
}

#[test]
fn one_clients_run_time_holds_all_its_operations() {
    // The run time was the main thread's, whose clock started when it got a CPU after
    // the client threads' barrier: on a machine the clients kept busy it began late, and
    // 200 GETs of 1.5 us each were reported as a 195 us run. One client's operations
    // follow each other, so together they cannot take longer than the run.
    for _ in 0..5 {
        let w = workload('c', 20, 300);
        let o = RunOptions { threads: 1, ops: 300, ..Default::default() };
        let r =
            runner::load_and_run_db(|| Ok(Busy(Duration::from_micros(20))), &w, &o, Phases { load: false, run: true })
                .unwrap();
        let read = r.result.measurements.get("READ").unwrap().histogram();
        let busy_ns = read.mean() * read.len() as f64;
        let run_ns = r.result.run.runtime.as_nanos() as f64;
        assert!(busy_ns <= run_ns * 1.01, "operations took {busy_ns} ns in a run of {run_ns} ns");
        assert!(r.result.run.ops_per_sec() <= 1e6 / 20.0, "{}", r.result.run.ops_per_sec());
    }
}
