//! Thread placement (`cpus`): a server's workers run on the CPUs asked for, a CPU the
//! process may not use is refused before anything runs, and the YCSB runner's client
//! threads run on theirs. Checked through the kernel's own account of each thread
//! (`/proc/self/task/*/status`, `sched_getaffinity`), not through our bookkeeping.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use boomkv::bench::runner::{self, Db, Phases, RunOptions};
use boomkv::client::{Client, ClientOptions};
use boomkv::cpus::CpuList;
use boomkv::error::{Error, Result};
use boomkv::log::{Pool, PoolOptions};
use boomkv::server::{Server, ServerConfig};
use boomkv::transport::{Endpoint, ShmTransport};
use boomkv::workload::{names, CoreWorkload, WorkloadSpec};

/// The tests that start servers take turns: the first counts the process's worker
/// threads by name, and another test's server would add its own.
static SERVERS: Mutex<()> = Mutex::new(());

/// The CPU list the kernel reports for each of our threads whose name starts with `prefix`.
fn affinity_of_threads(prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = t.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.trim().starts_with(prefix) {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap_or("?").trim();
        out.push(list.to_string());
    }
    out
}

fn pool(dir: &std::path::Path) -> Arc<Pool> {
    let mut o = PoolOptions { segment_size: 4 << 20, ..Default::default() };
    o.media.create_size = Some(64 << 20);
    Arc::new(Pool::open(dir, &o).unwrap().0)
}

fn last_cpu() -> CpuList {
    let allowed = CpuList::allowed().expect("Linux reports the affinity");
    CpuList::from_cpus(vec![*allowed.cpus().last().unwrap()]).unwrap()
}

#[test]
fn server_workers_run_on_the_cpus_asked_for_and_serve() {
    let _turn = SERVERS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let want = last_cpu();
    let cfg = ServerConfig {
        workers: 2,
        log_clients: false,
        cleaner: false,
        worker_cpus: Some(want.clone()),
        ..Default::default()
    };
    let ep = Endpoint::Shm(dir.path().join("s.sock"));
    let s = Server::start(ShmTransport::new().unwrap(), pool(dir.path()), &[ep], cfg).unwrap();
    let seen = affinity_of_threads("boomkv-worker-");
    assert_eq!(seen, vec![want.to_string(); 2], "both workers restricted to CPU {want}");
    // Pinned workers serve (two clients: one per worker, round robin).
    for i in 0..2u8 {
        let mut c =
            Client::connect(&ShmTransport::new().unwrap(), &s.endpoints()[0], ClientOptions::default()).unwrap();
        c.put(b"k", &[i; 100]).unwrap();
        assert_eq!(c.get(b"k").unwrap().unwrap(), vec![i; 100]);
    }
    s.shutdown();
}

#[test]
fn a_cpu_the_process_may_not_use_is_refused_before_serving() {
    let _turn = SERVERS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let allowed = CpuList::allowed().unwrap();
    let outside = (0..rustix::thread::CpuSet::MAX_CPU).rev().find(|c| !allowed.cpus().contains(c)).unwrap();
    let cfg = ServerConfig {
        log_clients: false,
        cleaner: false,
        worker_cpus: CpuList::from_cpus(vec![outside]),
        ..Default::default()
    };
    let ep = Endpoint::Shm(dir.path().join("s.sock"));
    let e = Server::start(ShmTransport::new().unwrap(), pool(dir.path()), &[ep], cfg).err().expect("refused");
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    assert!(e.to_string().contains(&format!("CPUs {outside} are not available")), "{e}");
}

/// A store that remembers on which CPUs the threads that call it may run.
struct Recorder(Arc<Mutex<BTreeSet<String>>>);

impl Db for Recorder {
    fn read(&mut self, _key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        self.note();
        Ok(true)
    }
    fn write(&mut self, _key: &[u8], _value: &[u8]) -> Result<()> {
        self.note();
        Ok(())
    }
    fn scan(&mut self, _start: &[u8], _count: u32) -> Result<usize> {
        Ok(0)
    }
    fn max_value(&self) -> Option<u64> {
        None
    }
}

impl Recorder {
    fn note(&self) {
        let a = CpuList::this_thread().map(|l| l.to_string()).unwrap_or_default();
        self.0.lock().unwrap().insert(a);
    }
}

#[test]
fn the_runners_client_threads_run_on_their_cpus() {
    let mut s = WorkloadSpec::from_mix('b').unwrap();
    s.set(names::RECORD_COUNT, "50").unwrap();
    s.set(names::OPERATION_COUNT, "400").unwrap();
    let w = CoreWorkload::new(&s).unwrap();
    let want = last_cpu();
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let o = RunOptions {
        threads: 3,
        ops: 400,
        duration: Some(Duration::from_secs(20)),
        client_cpus: Some(want.clone()),
        ..Default::default()
    };
    let r = runner::load_and_run_db(|| Ok(Recorder(seen.clone())), &w, &o, Phases { load: true, run: true }).unwrap();
    assert_eq!(r.result.run.operations, 400);
    assert_eq!(*seen.lock().unwrap(), BTreeSet::from([want.to_string()]));
    // Without a placement the threads keep the process's.
    let free = Arc::new(Mutex::new(BTreeSet::new()));
    let o = RunOptions { client_cpus: None, ..o };
    runner::load_and_run_db(|| Ok(Recorder(free.clone())), &w, &o, Phases { load: false, run: true }).unwrap();
    assert_eq!(*free.lock().unwrap(), BTreeSet::from([CpuList::allowed().unwrap().to_string()]));
    // Colocated, a store that does not say which worker serves it is not placed on the
    // workers' CPUs at all.
    let unsaid = Arc::new(Mutex::new(BTreeSet::new()));
    let o = RunOptions { client_cpus: Some(want), colocated: true, ..o };
    runner::load_and_run_db(|| Ok(Recorder(unsaid.clone())), &w, &o, Phases { load: false, run: true }).unwrap();
    assert_eq!(*unsaid.lock().unwrap(), BTreeSet::from([CpuList::allowed().unwrap().to_string()]));
}

/// YCSB-B with 2 KiB values, 200 records, 4000 operations on 4 threads: the whole runs
/// below.
fn whole_run_spec() -> WorkloadSpec {
    let mut s = WorkloadSpec::from_mix('b').unwrap();
    s.set(names::RECORD_COUNT, "200").unwrap();
    s.set(names::OPERATION_COUNT, "4000").unwrap();
    s.set(names::VALUE_SIZE, "2048").unwrap();
    s.set(names::THREAD_COUNT, "4").unwrap();
    s
}

/// Starts an embedded server (`eo`) over `t`, loads and runs `w` against it with clients
/// that note their worker and CPUs in `seen`, and returns the result with the CPUs the
/// kernel let each worker thread use while the server was up (worker 0 first).
fn whole_run<T: boomkv::transport::Transport>(
    t: T,
    b: boomkv::transport::Backend,
    eo: &boomkv::bench::embedded::EmbeddedOptions,
    w: &CoreWorkload,
    o: &RunOptions,
    seen: &Arc<Mutex<BTreeSet<(usize, String)>>>,
) -> (runner::PhasesResult, Vec<String>) {
    let emb = boomkv::bench::embedded::Embedded::start(t.clone(), b, eo).unwrap();
    let ep = emb.endpoint().clone();
    let workers = (0..eo.server.workers).map(|i| affinity_of_threads(&format!("boomkv-worker-{i}")).concat()).collect();
    let connect = || Client::connect(&t, &ep, ClientOptions::default()).map(|db| Watched { db, seen: seen.clone() });
    let r = runner::load_and_run_db(connect, w, o, Phases { load: true, run: true }).unwrap();
    (r, workers)
}

/// The whole placement for real: an embedded server's workers on CPUs of their own and
/// the YCSB runner's client threads on the others, where they poll with yields before
/// they sleep. Every operation completes and every read finds its record, over both
/// software transports (with one CPU both share it: slower, still correct).
#[test]
fn pinned_clients_and_workers_serve_a_whole_run_over_tcp_and_shm() {
    let _turn = SERVERS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    use boomkv::bench::embedded::EmbeddedOptions;
    use boomkv::cpus::Layout;
    use boomkv::transport::{Backend, TcpTransport};

    let allowed = CpuList::allowed().unwrap();
    let layout = Layout::split(&allowed, 1).unwrap_or(Layout {
        server: allowed.clone(),
        clients: allowed.clone(),
        colocated: false,
    });
    let s = whole_run_spec();
    // A workload per run: a load consumes the workload's key sequence.
    let w = || CoreWorkload::new(&s).unwrap();
    let o = RunOptions {
        threads: 4,
        ops: 4000,
        duration: Some(Duration::from_secs(60)),
        client_cpus: Some(layout.clients.clone()),
        ..Default::default()
    };
    let eo = EmbeddedOptions {
        pool_size: 64 << 20,
        segment_size: 4 << 20,
        server: ServerConfig { log_clients: false, worker_cpus: Some(layout.server.clone()), ..Default::default() },
        ..Default::default()
    };
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    for (r, _) in [
        whole_run(TcpTransport::new().unwrap(), Backend::Tcp, &eo, &w(), &o, &seen),
        whole_run(ShmTransport::new().unwrap(), Backend::Shm, &eo, &w(), &o, &seen),
    ] {
        assert_eq!((r.result.run.operations, r.result.errors), (4000, 0), "{:?}", r.result.first_error);
        let reads = r.result.measurements.get("READ").expect("reads were measured");
        assert!(reads.status_total() > 3000, "{} reads", reads.status_total());
        let st: Vec<_> = reads.statuses().collect();
        assert_eq!(reads.status_total(), reads.status_count(boomkv::measure::Status::Ok), "every read finds: {st:?}");
    }
}

/// A client that notes, at every operation, the worker the server said serves it and
/// the CPUs the kernel lets the calling thread use.
struct Watched<D> {
    db: D,
    seen: Arc<Mutex<BTreeSet<(usize, String)>>>,
}

impl<D: Db> Watched<D> {
    fn note(&self) {
        let a = CpuList::this_thread().map(|l| l.to_string()).unwrap_or_default();
        self.seen.lock().unwrap().insert((self.db.worker().unwrap_or(usize::MAX), a));
    }
}

impl<D: Db> Db for Watched<D> {
    fn read(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.note();
        self.db.read(key, out)
    }
    fn write(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.note();
        self.db.write(key, value)
    }
    fn scan(&mut self, start: &[u8], count: u32) -> Result<usize> {
        self.db.scan(start, count)
    }
    fn max_value(&self) -> Option<u64> {
        self.db.max_value()
    }
    fn worker(&self) -> Option<usize> {
        self.db.worker()
    }
}

/// Each connection is told its worker, round robin over the workers.
#[test]
fn the_handshake_names_each_clients_worker_round_robin() {
    let _turn = SERVERS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let cfg = ServerConfig { workers: 3, log_clients: false, cleaner: false, ..Default::default() };
    let t = ShmTransport::new().unwrap();
    let srv = Server::start(t.clone(), pool(dir.path()), &[Endpoint::Shm(dir.path().join("s.sock"))], cfg).unwrap();
    let ep = srv.endpoints()[0].clone();
    let clients: Vec<_> = (0..7).map(|_| Client::connect(&t, &ep, ClientOptions::default()).unwrap()).collect();
    let workers: Vec<u16> = clients.iter().map(Client::worker).collect();
    assert_eq!(workers, [0, 1, 2, 0, 1, 2, 0]);
}

/// Colocated for real: three workers on two CPUs, each on the one its number picks,
/// and each of the YCSB runner's client threads on the CPU of the worker that serves
/// it, yielding it while it waits. Every operation completes and every read finds its
/// record, over both software transports, with every worker serving.
#[test]
fn colocated_clients_run_beside_their_workers_and_serve_a_whole_run() {
    let _turn = SERVERS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    use boomkv::bench::embedded::EmbeddedOptions;
    use boomkv::cpus::Layout;
    use boomkv::transport::{Backend, TcpTransport};

    let allowed = CpuList::allowed().unwrap();
    let Some(layout) = Layout::colocate(&allowed, 2) else {
        eprintln!("one CPU: nothing to colocate");
        return;
    };
    let s = whole_run_spec();
    let w = || CoreWorkload::new(&s).unwrap();
    let mut o = RunOptions { threads: 4, ops: 4000, duration: Some(Duration::from_secs(60)), ..Default::default() };
    o.place(Some(&layout));
    assert!(o.colocated);
    // One worker asked for, as on a small machine: colocated, one per CPU at least.
    let mut server = ServerConfig { workers: 1, log_clients: false, ..Default::default() };
    server.place(Some(&layout));
    assert_eq!((server.workers, server.colocated), (2, true));
    // Three, so that a connection's worker is not its thread's number (the run's
    // clients follow the load's four round the workers): worker 2 shares worker 0's
    // CPU.
    server.workers = 3;
    let eo = EmbeddedOptions { pool_size: 64 << 20, segment_size: 4 << 20, server, ..Default::default() };
    for (name, b) in [("tcp", Backend::Tcp), ("shm", Backend::Shm)] {
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        let (r, workers) = match b {
            Backend::Tcp => whole_run(TcpTransport::new().unwrap(), b, &eo, &w(), &o, &seen),
            _ => whole_run(ShmTransport::new().unwrap(), b, &eo, &w(), &o, &seen),
        };
        assert_eq!((r.result.run.operations, r.result.errors), (4000, 0), "{name}: {:?}", r.result.first_error);
        let reads = r.result.measurements.get("READ").expect("reads were measured");
        assert_eq!(reads.status_total(), reads.status_count(boomkv::measure::Status::Ok), "{name}: every read finds");
        // The kernel's account: each worker on the one CPU its number picks...
        let want: Vec<String> = (0..3).map(|i| layout.worker_cpus(i).to_string()).collect();
        assert_eq!(workers, want, "{name}");
        // ... and each client thread on its worker's, every worker serving.
        let seen = seen.lock().unwrap();
        for (worker, cpus) in seen.iter() {
            assert_eq!(*cpus, layout.worker_cpus(*worker).to_string(), "{name}: a client of worker {worker}");
        }
        let served: BTreeSet<usize> = seen.iter().map(|(w, _)| *w).collect();
        assert_eq!(served, BTreeSet::from([0, 1, 2]), "{name}");
    }
}
