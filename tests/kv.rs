//! The key-value conformance suite: every protocol over every software transport, with
//! a real server in-process, plus `boomctl serve` as a child process. With the `rdma`
//! feature the same suite runs over verbs too (module `verbs`, ignored unless run with
//! `--ignored` where `BOOMKV_RDMA_DEVICE` names a device; `ci/check-rdma-vm.sh` runs it on
//! soft-RoCE in a VM).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use boomkv::client::hybrid::UpdateMode;
use boomkv::client::{Client, ClientOptions};
use boomkv::log::{Pool, PoolOptions};
use boomkv::proto::rfp::{FetchSize, ResultMode};
use boomkv::server::{Server, ServerConfig};
use boomkv::transport::{Endpoint, QpStats, ShmTransport, TcpTransport, Transport};
use boomkv::wire::Protocol;

fn open_pool(dir: &Path, size: u64, seg: u64) -> Arc<Pool> {
    let mut o = PoolOptions { segment_size: seg, ..Default::default() };
    o.media.create_size = Some(size);
    Arc::new(Pool::open(dir, &o).unwrap().0)
}

fn cfg(workers: usize, coop: bool) -> ServerConfig {
    ServerConfig { workers, coop_writeback: coop, log_clients: false, cleaner: false, ..Default::default() }
}

fn opts(p: Protocol) -> ClientOptions {
    // A full pool is final in these tests (the cleaner is off unless a test turns it on).
    ClientOptions {
        protocol: p,
        timeout: Duration::from_secs(10),
        pool_full_wait: Duration::from_millis(100),
        // pDPM-Direct's cell table (16 MiB): every key of these tests, values to 16 KiB.
        cells: 512,
        cell_value: PDPM_VALUE_MAX as u32,
        // Clover's arena: 16 MiB of chunks.
        clover_data: 16 << 20,
        ..Default::default()
    }
}

/// The largest value the kv tests' pDPM-Direct cells hold.
const PDPM_VALUE_MAX: usize = 16384;

trait Backend: Transport {
    fn make() -> Self;
    fn listen_at(dir: &Path) -> Endpoint;
}

impl Backend for TcpTransport {
    fn make() -> Self {
        TcpTransport::new().unwrap()
    }
    fn listen_at(_: &Path) -> Endpoint {
        Endpoint::parse("127.0.0.1:0").unwrap()
    }
}

impl Backend for ShmTransport {
    fn make() -> Self {
        ShmTransport::new().unwrap()
    }
    fn listen_at(dir: &Path) -> Endpoint {
        Endpoint::Shm(dir.join(format!("s{}.sock", rand_suffix())))
    }
}

#[cfg(feature = "rdma")]
impl Backend for boomkv::transport::VerbsTransport {
    fn make() -> Self {
        boomkv::transport::VerbsTransport::from_env().expect("open the RDMA device named by BOOMKV_RDMA_DEVICE")
    }
    fn listen_at(_: &Path) -> Endpoint {
        // The handshake goes over loopback TCP; the queue pairs use the device's GID.
        Endpoint::Verbs("127.0.0.1:0".into())
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

struct Fixture<T: Backend> {
    dir: tempfile::TempDir,
    server: Option<Server<T>>,
    ep: Endpoint,
}

impl<T: Backend> Fixture<T> {
    fn new(size: u64, seg: u64, c: ServerConfig) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let pool = open_pool(dir.path(), size, seg);
        let server = Server::start(T::make(), pool, &[T::listen_at(dir.path())], c).unwrap();
        let ep = server.endpoints()[0].clone();
        Fixture { dir, server: Some(server), ep }
    }

    fn client(&self, p: Protocol) -> Client<T> {
        Client::connect(&T::make(), &self.ep, opts(p)).unwrap()
    }

    /// Stops the server, reopens the pool (recovery), serves it again.
    fn restart(&mut self, c: ServerConfig) {
        let s = self.server.take().unwrap();
        let size = s.pool().media().len();
        let seg = s.pool().segment_size();
        s.shutdown();
        let pool = open_pool(self.dir.path(), size, seg);
        let server = Server::start(T::make(), pool, &[T::listen_at(self.dir.path())], c).unwrap();
        self.ep = server.endpoints()[0].clone();
        self.server = Some(server);
    }
}

const SIZES: [usize; 9] = [0, 1, 31, 100, 1000, 4096, 16384, 65536, 1 << 20];

fn value(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
}

fn round_trips_sizes_and_restart<T: Backend>(p: Protocol) {
    let mut f = Fixture::<T>::new(64 << 20, 4 << 20, cfg(1, false));
    let mut c = f.client(p);
    // pDPM-Direct's values live in fixed-size cells, Clover's versions in chunks (four
    // of the largest value the arena was made for): larger ones are refused, typed.
    let fits = |n: usize| match p {
        Protocol::PdpmDirect => n <= PDPM_VALUE_MAX,
        Protocol::Clover => n <= 4 * PDPM_VALUE_MAX,
        _ => true,
    };
    for (i, &n) in SIZES.iter().enumerate() {
        let k = format!("key-{i}");
        if !fits(n) {
            let e = c.put(k.as_bytes(), &value(i, n)).unwrap_err();
            let boomkv::Error::TooLarge { what: "value", len, limit } = e else { panic!("{p} size {n}: {e:?}") };
            // In the value's own bytes (Clover named its version's), and the limit is the
            // real one: a value of it is stored, one byte more is not.
            assert_eq!(len, n as u64, "{p}");
            let edge = format!("lim-{i}"); // as long as `k`: the limit depends on the key
            c.put(edge.as_bytes(), &value(i, limit as usize)).unwrap_or_else(|e| panic!("{p}: {limit} bytes: {e}"));
            assert_eq!(c.get(edge.as_bytes()).unwrap().unwrap(), value(i, limit as usize), "{p}");
            let e = c.put(edge.as_bytes(), &value(i, limit as usize + 1)).unwrap_err();
            assert!(matches!(e, boomkv::Error::TooLarge { .. }), "{p}: {limit} + 1 bytes: {e:?}");
            continue;
        }
        c.put(k.as_bytes(), &value(i, n)).unwrap();
        assert_eq!(c.get(k.as_bytes()).unwrap().unwrap(), value(i, n), "{p} size {n}");
    }
    // overwrite, delete, absent
    c.put(b"key-1", b"second").unwrap();
    assert_eq!(c.get(b"key-1").unwrap().unwrap(), b"second");
    c.delete(b"key-2").unwrap();
    assert_eq!(c.get(b"key-2").unwrap(), None);
    assert_eq!(c.get(b"never-written").unwrap(), None);
    c.delete(b"never-written").unwrap();
    // limits
    assert!(c.put(b"", b"x").is_err());
    assert!(c.put(&[b'k'; 2000], b"x").is_err());
    assert!(c.put(b"big", &vec![0u8; (1 << 20) + 1]).is_err());
    drop(c);
    f.restart(cfg(1, false));
    let mut c = f.client(p);
    for (i, &n) in SIZES.iter().enumerate() {
        let got = c.get(format!("key-{i}").as_bytes()).unwrap();
        match i {
            1 => assert_eq!(got.unwrap(), b"second"),
            2 => assert_eq!(got, None, "deleted stays deleted after restart"),
            _ if !fits(n) => assert_eq!(got, None, "{p} size {n} was refused"),
            _ => assert_eq!(got.unwrap(), value(i, n), "{p} size {n} after restart"),
        }
    }
}

fn many_clients_and_same_key<T: Backend>(p: Protocol, workers: usize, coop: bool) {
    let f = Fixture::<T>::new(128 << 20, 4 << 20, cfg(workers, coop));
    let results: Vec<HashMap<String, (u64, Vec<u8>)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let f = &f;
                s.spawn(move || {
                    let mut c = f.client(p);
                    let mut mine = HashMap::new();
                    for i in 0..150usize {
                        let own = format!("t{t}-k{}", i % 40);
                        let v = value(t * 1000 + i, 50 + (i * 97) % 9000);
                        c.put(own.as_bytes(), &v).unwrap_or_else(|e| panic!("{p}: {own}: {e}"));
                        mine.insert(own, (0, v));
                        let shared = format!("shared-{}", i % 5);
                        let v = value(t * 7 + i, 64);
                        let info = c.put(shared.as_bytes(), &v).unwrap();
                        let e = mine.entry(shared).or_insert((0, Vec::new()));
                        if info.version > e.0 {
                            *e = (info.version, v);
                        }
                    }
                    let replays = c.counters().cas_replays;
                    if replays > 0 {
                        // Seen over soft-RoCE: say so, the run is still checked in full.
                        eprintln!("{p}: {replays} compare-and-swaps executed twice by the device");
                    }
                    mine
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut c = f.client(p);
    let mut shared_best: HashMap<String, (u64, Vec<u8>)> = HashMap::new();
    for m in &results {
        for (k, (ver, v)) in m {
            if k.starts_with("shared") {
                let e = shared_best.entry(k.clone()).or_insert((0, Vec::new()));
                if *ver > e.0 {
                    *e = (*ver, v.clone());
                }
            } else {
                assert_eq!(&c.get(k.as_bytes()).unwrap().unwrap(), v, "{p} {k}");
            }
        }
    }
    for (k, (_, v)) in shared_best {
        assert_eq!(c.get(k.as_bytes()).unwrap().unwrap(), v, "{p}: the highest version of {k} wins");
    }
}

fn round_trip_counts<T: Backend>(p: Protocol) {
    let f = Fixture::<T>::new(32 << 20, 4 << 20, cfg(1, false));
    // RFP with a fixed fetch size, so that which results take a second READ is known
    // (auto profiles the transport: on rxe it picks less than these results).
    let fetch_size = FetchSize::Bytes(1024);
    // RFP fetches every result here (its hybrid would switch to server replies where
    // fetches keep finding nothing; `rfp_result_modes` checks those).
    let rfp_mode = ResultMode::Fetch;
    let mut c = Client::connect(&T::make(), &f.ep, ClientOptions { fetch_size, rfp_mode, ..opts(p) }).unwrap();
    c.put(b"warm", b"up").unwrap(); // the segment grant happens here for boom
    let (want_put, want_get) = match p {
        Protocol::Boom | Protocol::Rpc => (1, 1),
        Protocol::Rdmp => (2, 2),
        // 2 round trips and a FLUSH: allocation RPC, then WRITE + FLUSH.
        Protocol::RdmpCc => (3, 2),
        // One WRITE into the polled request region; the reply is the server's SEND.
        Protocol::Herd => (1, 1),
        // One WRITE and one READ of a ready result (fetches of a result not yet ready
        // are counted apart and checked below).
        Protocol::Rfp => (2, 2),
        // 4 round trips: the lock's CAS, WRITE + FLUSH of the uncommitted slot, WRITE +
        // FLUSH of the committed one, the release's WRITE (6 operations); a GET is 1 READ.
        Protocol::PdpmDirect => (6, 1),
        // 2 round trips: WRITE + FLUSH of the version, CAS + FLUSH of the link; then the
        // shortcut's WRITE, not waited for (5 operations). A GET: the cached version
        // and the head, 2 READs posted together (1 round trip).
        Protocol::Clover => (5, 2),
    };
    let d = |a: &QpStats, b: &QpStats, f: fn(&QpStats) -> u64| f(b) - f(a);
    for i in 0..20 {
        let (before, r0) = (c.transport_stats(), c.counters().fetch_retries);
        c.put(format!("k{i}").as_bytes(), &[7u8; 200]).unwrap();
        let (after, r1) = (c.transport_stats(), c.counters().fetch_retries);
        assert_eq!(after.network_ops() - before.network_ops() - (r1 - r0), want_put, "{p} PUT round trips");
        match p {
            Protocol::RdmpCc => {
                let n = (
                    d(&before, &after, |s| s.sends),
                    d(&before, &after, |s| s.writes),
                    d(&before, &after, |s| s.flushes),
                );
                assert_eq!(n, (1, 1, 1), "{p}: SEND, WRITE, FLUSH");
                assert_eq!(d(&before, &after, |s| s.writes_imm), 0, "{p}: nothing signals the server's CPU");
            }
            Protocol::PdpmDirect => {
                let n = (
                    d(&before, &after, |s| s.atomics),
                    d(&before, &after, |s| s.writes),
                    d(&before, &after, |s| s.flushes),
                );
                assert_eq!(n, (1, 3, 2), "{p}: CAS, 3 WRITEs, 2 FLUSHes");
                assert_eq!(d(&before, &after, |s| s.sends) + d(&before, &after, |s| s.writes_imm), 0, "{p}: no CPU");
            }
            Protocol::Clover => {
                let n = (
                    d(&before, &after, |s| s.atomics),
                    d(&before, &after, |s| s.writes),
                    d(&before, &after, |s| s.flushes),
                );
                assert_eq!(n, (1, 2, 2), "{p}: CAS, 2 WRITEs, 2 FLUSHes");
                assert_eq!(d(&before, &after, |s| s.sends) + d(&before, &after, |s| s.writes_imm), 0, "{p}: no CPU");
            }
            Protocol::Herd | Protocol::Rfp => {
                assert_eq!(d(&before, &after, |s| s.writes), 1, "{p}: the request is one WRITE");
                assert_eq!(d(&before, &after, |s| s.sends) + d(&before, &after, |s| s.writes_imm), 0, "{p}: no SEND");
            }
            _ => {}
        }
        if p != Protocol::Rfp {
            assert_eq!(r1, r0, "{p} fetches nothing");
        }
        let (before, r0) = (c.transport_stats(), c.counters().fetch_retries);
        c.get(format!("k{i}").as_bytes()).unwrap().unwrap();
        let (after, r1) = (c.transport_stats(), c.counters().fetch_retries);
        assert_eq!(after.network_ops() - before.network_ops() - (r1 - r0), want_get, "{p} GET round trips");
        if p == Protocol::Rfp || p == Protocol::PdpmDirect {
            assert_eq!(d(&before, &after, |s| s.reads) - (r1 - r0), 1, "{p}: one READ");
        }
        if p == Protocol::Clover {
            assert_eq!(d(&before, &after, |s| s.reads), 2, "{p}: the cached version and the head");
        }
    }
    if p == Protocol::Rfp {
        // A result over the fetch size takes a second READ.
        let big = vec![9u8; 64 << 10];
        c.put(b"big", &big).unwrap();
        let (before, r0) = (c.transport_stats(), c.counters().fetch_retries);
        assert_eq!(c.get(b"big").unwrap().unwrap(), big);
        let (after, r1) = (c.transport_stats(), c.counters().fetch_retries);
        let reads = d(&before, &after, |s| s.reads);
        assert!(reads >= 2 + (r1 - r0) && reads <= 2 + 2 * (r1 - r0), "{p}: {reads} READs, {} retries", r1 - r0);
    }
}

/// RFP's server-reply mode: every request one WRITE and the server's SEND, no READ,
/// every size; the hybrid gets every value right whichever way each result comes.
fn rfp_result_modes<T: Backend>() {
    let f = Fixture::<T>::new(64 << 20, 4 << 20, cfg(1, false));
    let connect = |rfp_mode| Client::connect(&T::make(), &f.ep, ClientOptions { rfp_mode, ..opts(Protocol::Rfp) });
    let mut c = connect(ResultMode::Reply).unwrap();
    // The first request sets the regions up; a client that never fetches times no
    // READs for a fetch size.
    assert_eq!(c.get(b"warm").unwrap(), None);
    assert_eq!(c.transport_stats().reads, 0, "a server-reply client READs nothing, not even at setup");
    for (i, &n) in SIZES.iter().enumerate() {
        let k = format!("r{i}");
        let (before, r0) = (c.transport_stats(), c.counters());
        c.put(k.as_bytes(), &value(i, n)).unwrap();
        assert_eq!(c.get(k.as_bytes()).unwrap().unwrap(), value(i, n), "size {n}");
        let (after, r1) = (c.transport_stats(), c.counters());
        assert_eq!((after.writes - before.writes, after.reads - before.reads), (2, 0), "size {n}: 2 WRITEs, no READ");
        assert_eq!(after.network_ops() - before.network_ops(), 2, "size {n}");
        assert_eq!((r1.server_replies - r0.server_replies, r1.fetch_retries - r0.fetch_retries), (2, 0));
    }
    assert_eq!(c.get(b"never-written").unwrap(), None);
    c.delete(b"r1").unwrap();
    assert_eq!(c.get(b"r1").unwrap(), None);
    // The hybrid, whichever way its results come (on this machine fetches may or may
    // not find them at once), and a fetching client reading what the others wrote.
    let mut h = connect(ResultMode::Hybrid).unwrap();
    for i in 0..300usize {
        let k = format!("h{}", i % 50);
        h.put(k.as_bytes(), &value(i, 100 + i * 37 % 3000)).unwrap();
        assert_eq!(h.get(k.as_bytes()).unwrap().unwrap(), value(i, 100 + i * 37 % 3000));
    }
    // A fetching client with a given fetch size times nothing at setup either: its
    // first GET READs only its result (a fetch, any vain ones, and the rest if longer).
    let mut fc = Client::connect(
        &T::make(),
        &f.ep,
        ClientOptions { rfp_mode: ResultMode::Fetch, fetch_size: FetchSize::Bytes(256), ..opts(Protocol::Rfp) },
    )
    .unwrap();
    assert_eq!(fc.get(b"h7").unwrap().unwrap(), value(257, 100 + 257 * 37 % 3000));
    let reads = fc.transport_stats().reads;
    assert!(reads <= fc.counters().fetch_retries + 2, "{reads} READs for one GET: setup timed READs");
    assert_eq!(fc.get(b"r0").unwrap().unwrap(), value(0, SIZES[0]));
    assert_eq!(fc.counters().server_replies, 0, "fetch mode never asks for a server reply");
}

fn hybrid_updates<T: Backend>() {
    let mut f = Fixture::<T>::new(32 << 20, 4 << 20, cfg(1, false));
    let mut c = f.client(Protocol::Boom);
    let a = c.put(b"hot", &[1u8; 500]).unwrap();
    let b = c.put(b"hot", &[2u8; 500]).unwrap();
    assert!(!a.in_place && !b.in_place, "condition 1: the first two writes append");
    let d = c.put(b"hot", &[3u8; 400]).unwrap();
    assert!(d.in_place, "the third write fits the oldest slot and rewrites it");
    assert_eq!(c.get(b"hot").unwrap().unwrap(), vec![3u8; 400]);
    let e = c.put(b"hot", &[4u8; 600]).unwrap();
    assert!(!e.in_place, "condition 2: a bigger entry appends");
    let mut ap =
        Client::connect(&T::make(), &f.ep, ClientOptions { update_mode: UpdateMode::Append, ..opts(Protocol::Boom) })
            .unwrap();
    for _ in 0..3 {
        assert!(!ap.put(b"cold", &[5u8; 100]).unwrap().in_place);
    }
    let st = f.server.as_ref().unwrap().stats();
    assert_eq!(st.space.entries_in_place, 1);
    assert!(st.space.bytes_in_place > 0);
    drop((c, ap));
    f.restart(cfg(1, false));
    let mut c = f.client(Protocol::Boom);
    assert_eq!(c.get(b"hot").unwrap().unwrap(), vec![4u8; 600]);
    assert_eq!(c.get(b"cold").unwrap().unwrap(), vec![5u8; 100]);
}

/// A grant exposes a segment only to a client that writes it itself (BOOM, RDMP-KV,
/// RDMP-CC); the RPC designs' clients send their entries, and their segments are the
/// server's alone: a hostile one that guessed an rkey would find nothing to write.
fn segments_exposed_only_to_clients_that_write_them<T: Backend>() {
    for p in [Protocol::Boom, Protocol::Rdmp, Protocol::RdmpCc, Protocol::Rpc, Protocol::Herd, Protocol::Rfp] {
        let f = Fixture::<T>::new(4 << 20, 1 << 20, cfg(1, false));
        let stats = || f.server.as_ref().unwrap().stats();
        let mut c = f.client(p);
        // A round trip first: whatever the connection itself exposes is in place.
        assert_eq!(c.get(b"k0").unwrap(), None);
        let before = stats();
        for i in 0..3 {
            c.put(format!("k{i}").as_bytes(), &[i as u8; 300]).unwrap();
        }
        let after = stats();
        assert!(after.grants > before.grants, "{p}: the PUTs took a segment: {after:?}");
        let writes = matches!(p, Protocol::Boom | Protocol::Rdmp | Protocol::RdmpCc);
        assert_eq!(
            after.exposed_regions,
            before.exposed_regions + u64::from(writes),
            "{p}: regions exposed {} -> {}",
            before.exposed_regions,
            after.exposed_regions
        );
        // (An RDMP GET exposes a region of its own while its client READs.)
        assert_eq!(c.get(b"k2").unwrap().unwrap(), vec![2u8; 300]);
        // Gone with the client.
        drop(c);
        let until = Instant::now() + Duration::from_secs(10);
        while stats().exposed_regions > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(stats().exposed_regions, 0, "{p}: a closed connection leaves nothing exposed");
    }
}

fn pool_full_keeps_serving_gets<T: Backend>(p: Protocol) {
    let f = Fixture::<T>::new(4 << 20, 1 << 20, cfg(1, false));
    // pDPM-Direct fills its cell table instead (8 cells of 1000-byte values), Clover its
    // arena (256 KiB of chunks).
    let o = ClientOptions { cells: 8, cell_value: 1000, clover_data: 256 << 10, ..opts(p) };
    let mut c = Client::connect(&T::make(), &f.ep, o.clone()).unwrap();
    c.put(b"survivor", b"still here").unwrap();
    let fill = if matches!(p, Protocol::PdpmDirect | Protocol::Clover) { 1000 } else { 200_000 };
    let mut err = None;
    for i in 0..1000 {
        if let Err(e) = c.put(format!("fill{i}").as_bytes(), &vec![0u8; fill]) {
            err = Some(e);
            break;
        }
    }
    let err = err.expect("the pool must fill up");
    assert!(err.to_string().contains("pool full"), "{err}");
    // Typed: the client decides by the code, never by the text.
    assert!(matches!(err, boomkv::Error::Server { code: boomkv::error::ErrorCode::PoolFull, .. }), "{err:?}");
    assert!(err.is_fatal(), "a full pool ends a YCSB thread's run");
    let mut c2 = Client::connect(&T::make(), &f.ep, o).unwrap();
    assert_eq!(c2.get(b"survivor").unwrap().unwrap(), b"still here");
    // The refusals are counted as a full pool's, not as errors: the client asked
    // again and again while it waited, and would have buried any real error.
    let st = f.server.as_ref().unwrap().stats();
    if !matches!(p, Protocol::PdpmDirect | Protocol::Clover) {
        // (Theirs fill a table of their own, with no grant to refuse.)
        assert!(st.pool_full >= 1, "{st:?}");
    }
    assert_eq!(st.errors, 0, "{st:?}");
}

/// One-shot clients (a CLI `put` each) take a segment apiece; once they leave, the
/// cleaner must give those segments back, or the pool fills with a few bytes of data.
fn short_lived_clients_do_not_fill_the_pool<T: Backend>() {
    let c = ServerConfig { cleaner: true, clean_interval: Duration::from_millis(5), ..cfg(1, false) };
    let f = Fixture::<T>::new(8 << 20, 1 << 20, c);
    let segments = 8;
    for i in 0..3 * segments {
        let o = ClientOptions { pool_full_wait: Duration::from_secs(10), ..opts(Protocol::Boom) };
        let mut c = Client::connect(&T::make(), &f.ep, o).unwrap();
        c.put(format!("k{i}").as_bytes(), format!("v{i}").as_bytes())
            .unwrap_or_else(|e| panic!("client {i} could not store its key: {e}"));
    }
    let mut c = f.client(Protocol::Boom);
    for i in 0..3 * segments {
        assert_eq!(c.get(format!("k{i}").as_bytes()).unwrap().unwrap(), format!("v{i}").as_bytes());
    }
    let st = c.stats().unwrap();
    assert!(st.cleaner.segments_freed >= segments as u64, "{st:?}");
}

/// A pool filled by PUTs, then every fourth key deleted by one-shot clients: every
/// segment is three quarters live (none at most half), and the tombstones fill the
/// tombstone log's reserved segment and want more. Every DELETE succeeds: the cleaner
/// compacts what clients are refused, and a DELETE waits for it as a grant does. (A
/// pool like this refused every DELETE for good after the first few thousand.)
fn deletes_spread_over_a_full_pool_all_succeed<T: Backend>(p: Protocol) {
    let c = ServerConfig { cleaner: true, clean_interval: Duration::from_millis(5), ..cfg(1, false) };
    let f = Fixture::<T>::new(4 << 20, 64 << 10, c);
    let key = |i: u32| format!("{i:0>400}");
    let mut w = f.client(p);
    let mut n = 0u32;
    loop {
        match w.put(key(n).as_bytes(), &[n as u8; 600]) {
            Ok(_) => n += 1,
            Err(e) if e.is_pool_full() => break,
            Err(e) => panic!("{p}: put {n}: {e}"),
        }
    }
    drop(w);
    assert!(n > 2000, "{p}: {n} keys");
    for i in (0..n).step_by(4) {
        let o = ClientOptions { pool_full_wait: Duration::from_secs(10), ..opts(p) };
        let mut d = Client::connect(&T::make(), &f.ep, o).unwrap();
        d.delete(key(i).as_bytes()).unwrap_or_else(|e| panic!("{p}: delete {i} of {n}: {e}"));
    }
    let mut r = f.client(p);
    for i in (0..n).step_by(97) {
        let got = r.get(key(i).as_bytes()).unwrap();
        assert_eq!(got, (i % 4 != 0).then(|| vec![i as u8; 600]), "{p}: key {i}");
    }
}

/// Two clients keep a request each in flight at once (what `ycsb --clients` does with
/// one thread): BOOM, RDMA-KV, HERD, RFP and RDMP-KV split their PUTs and GETs, RDMP-CC
/// its GETs (RDMP-KV's); the others run them whole in `*_start`. Either way every answer
/// is right, and right the first time (no torn read sent it to a whole GET).
fn split_requests_stay_in_flight_together<T: Backend>() {
    // Every protocol's clients take segments of their own (pDPM-Direct a cell table).
    let f = Fixture::<T>::new(256 << 20, 4 << 20, cfg(1, false));
    for p in Protocol::ALL {
        let splits = matches!(p, Protocol::Boom | Protocol::Rpc | Protocol::Herd | Protocol::Rfp | Protocol::Rdmp);
        let splits_gets = splits || matches!(p, Protocol::RdmpCc | Protocol::PdpmDirect | Protocol::Clover);
        let mut cs = [f.client(p), f.client(p)];
        for round in 0..3usize {
            let keys = [format!("{p}-a"), format!("{p}-b")];
            let vals = [value(round, 3000), value(round + 7, 5)];
            let mut done = [None, None];
            for (i, c) in cs.iter_mut().enumerate() {
                done[i] = c.put_start(keys[i].as_bytes(), &vals[i]).unwrap();
                assert_eq!(done[i].is_none(), splits, "{p}: PUT {i} in flight");
            }
            for (i, c) in cs.iter_mut().enumerate() {
                while done[i].is_none() {
                    done[i] = c.put_poll(keys[i].as_bytes()).unwrap();
                }
            }
            let mut outs = [Vec::new(), Vec::new()];
            let mut found = [None, None];
            for (i, c) in cs.iter_mut().enumerate() {
                found[i] = c.get_start(keys[i].as_bytes(), &mut outs[i]).unwrap();
                assert_eq!(found[i].is_none(), splits_gets, "{p}: GET {i} in flight");
            }
            for (i, c) in cs.iter_mut().enumerate() {
                while found[i].is_none() {
                    found[i] = c.get_poll(keys[i].as_bytes(), &mut outs[i]).unwrap();
                }
                assert_eq!(found[i], Some(true), "{p}");
                assert_eq!(outs[i], vals[i], "{p}: client {i}, round {round}");
            }
        }
        // An absent key comes back absent from a split GET too.
        let mut out = Vec::new();
        let mut found = cs[0].get_start(b"never-written", &mut out).unwrap();
        while found.is_none() {
            found = cs[0].get_poll(b"never-written", &mut out).unwrap();
        }
        assert_eq!(found, Some(false), "{p}");
        for c in &cs {
            assert_eq!(c.counters().torn_retries, 0, "{p}");
        }
    }
}

/// An RDMP GET whose READ finishes past half the server's lease on the place it read is
/// not trusted, whatever the READ found: the GET is asked again, and counted as a late
/// read, not as a torn entry.
fn a_late_read_is_asked_again<T: Backend>() {
    let f = Fixture::<T>::new(64 << 20, 4 << 20, cfg(1, false));
    for p in [Protocol::Rdmp, Protocol::RdmpCc] {
        let mut c = f.client(p);
        c.put(b"late", b"the value").unwrap();
        let mut out = Vec::new();
        assert_eq!(c.get_start(b"late", &mut out).unwrap(), None, "{p}: the GET is in flight");
        // The place is asked for now; its READ is posted at the first poll.
        std::thread::sleep(boomkv::wire::READ_LEASE / 2 + Duration::from_millis(50));
        let mut found = None;
        while found.is_none() {
            found = c.get_poll(b"late", &mut out).unwrap();
        }
        assert_eq!(found, Some(true), "{p}");
        assert_eq!(out, b"the value", "{p}");
        assert_eq!((c.counters().late_reads, c.counters().torn_retries), (1, 0), "{p}");
    }
}

/// A server restarted with a smaller largest value still serves the larger entries
/// written before: the client believes a reply up to the server's bound on GET replies
/// in flight (`wire::max_get_bytes`), not only one entry of the new largest value.
fn entries_over_a_lowered_value_limit_are_still_read<T: Backend>() {
    let mut f = Fixture::<T>::new(64 << 20, 4 << 20, cfg(1, false));
    let protocols = [Protocol::Boom, Protocol::Rdmp, Protocol::Rpc];
    for p in protocols {
        f.client(p).put(format!("big-{p}").as_bytes(), &value(3, 100_000)).unwrap();
    }
    f.restart(ServerConfig { max_value: 16 << 10, ..cfg(1, false) });
    for p in protocols {
        let mut c = f.client(p);
        assert_eq!(c.max_value(), 16 << 10);
        let got = c.get(format!("big-{p}").as_bytes()).unwrap();
        assert_eq!(got, Some(value(3, 100_000)), "{p}");
    }
}

/// An acknowledged RDMP-CC PUT is seen at once by every protocol's GET (and a scan),
/// though its client sends nothing more: the server learns that such a PUT finished
/// only at its client's next request, and only RDMP-CC's own look-up used to check.
fn client_durable_puts_are_seen_by_every_protocol<T: Backend>() {
    // The ordered index, for the scan.
    let dir = tempfile::tempdir().unwrap();
    let mut o = PoolOptions { segment_size: 4 << 20, index: boomkv::index::IndexKind::Ordered, ..Default::default() };
    o.media.create_size = Some(64 << 20);
    let pool = Arc::new(Pool::open(dir.path(), &o).unwrap().0);
    let server = Server::start(T::make(), pool, &[T::listen_at(dir.path())], cfg(1, false)).unwrap();
    let f = Fixture::<T> { ep: server.endpoints()[0].clone(), dir, server: Some(server) };
    let mut cc = f.client(Protocol::RdmpCc);
    cc.put(b"k", b"old").unwrap();
    // A second request counts the first PUT; the second stays pending.
    cc.put(b"k", b"new").unwrap();
    for p in [Protocol::Boom, Protocol::Rdmp, Protocol::Rpc, Protocol::Herd, Protocol::Rfp] {
        let got = f.client(p).get(b"k").unwrap();
        assert_eq!(got.as_deref(), Some(&b"new"[..]), "{p} read an older value");
    }
    cc.put(b"s", b"scanned").unwrap();
    let items = f.client(Protocol::Boom).scan(b"s", 1).unwrap();
    assert_eq!(items, vec![(b"s".to_vec(), b"scanned".to_vec())]);
    drop(cc);
}

/// Every read the server makes for a client (a GET's copy or data write, a SCAN's)
/// holds its entries' segments against the cleaner until it is over; when the clients
/// are done and gone, no segment is still held.
fn server_reads_hold_no_segment_once_over<T: Backend>() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = PoolOptions { segment_size: 4 << 20, index: boomkv::index::IndexKind::Ordered, ..Default::default() };
    o.media.create_size = Some(64 << 20);
    let pool = Arc::new(Pool::open(dir.path(), &o).unwrap().0);
    let server = Server::start(T::make(), pool.clone(), &[T::listen_at(dir.path())], cfg(2, false)).unwrap();
    let f = Fixture::<T> { ep: server.endpoints()[0].clone(), dir, server: Some(server) };
    let big = vec![9u8; 1 << 20];
    let mut w = f.client(Protocol::Boom);
    w.put(b"small", b"v").unwrap();
    // Larger than a client's first GET buffer: BOOM's answer is "too small" first.
    w.put(b"big", &big).unwrap();
    for p in [Protocol::Boom, Protocol::Rpc, Protocol::Herd, Protocol::Rfp, Protocol::Rdmp] {
        let mut c = f.client(p);
        for _ in 0..20 {
            assert_eq!(c.get(b"small").unwrap().as_deref(), Some(&b"v"[..]), "{p}");
            assert_eq!(c.get(b"absent").unwrap(), None, "{p}");
        }
        if p != Protocol::Rpc && p != Protocol::Herd && p != Protocol::Rfp {
            assert_eq!(c.get(b"big").unwrap().map(|v| v.len()), Some(big.len()), "{p}");
        }
    }
    let mut c = f.client(Protocol::Boom);
    assert_eq!(c.scan(b"", 10).unwrap().len(), 2);
    drop((c, w));
    let held = |pool: &Pool| (0..pool.segment_count()).map(|s| pool.segment_readers(s)).sum::<u32>();
    let until = Instant::now() + Duration::from_secs(10);
    while held(&pool) > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(held(&pool), 0, "segments still held after every read is over");
}

macro_rules! suite {
    ($m:ident, $t:ty) => {
        suite!(
            #[cfg(all())]
            $m,
            $t
        );
    };
    (#[$attr:meta] $m:ident, $t:ty) => {
        mod $m {
            use super::*;
            #[test]
            #[$attr]
            fn boom_round_trips() {
                round_trips_sizes_and_restart::<$t>(Protocol::Boom)
            }
            #[test]
            #[$attr]
            fn rdmp_round_trips() {
                round_trips_sizes_and_restart::<$t>(Protocol::Rdmp)
            }
            #[test]
            #[$attr]
            fn rpc_round_trips() {
                round_trips_sizes_and_restart::<$t>(Protocol::Rpc)
            }
            #[test]
            #[$attr]
            fn rdmp_cc_round_trips() {
                round_trips_sizes_and_restart::<$t>(Protocol::RdmpCc)
            }
            #[test]
            #[$attr]
            fn herd_round_trips() {
                round_trips_sizes_and_restart::<$t>(Protocol::Herd)
            }
            #[test]
            #[$attr]
            fn rfp_round_trips() {
                round_trips_sizes_and_restart::<$t>(Protocol::Rfp)
            }
            #[test]
            #[$attr]
            fn pdpm_direct_round_trips() {
                round_trips_sizes_and_restart::<$t>(Protocol::PdpmDirect)
            }
            #[test]
            #[$attr]
            fn clover_round_trips() {
                round_trips_sizes_and_restart::<$t>(Protocol::Clover)
            }
            #[test]
            #[$attr]
            fn many_clients_all_protocols() {
                for p in Protocol::ALL {
                    many_clients_and_same_key::<$t>(p, 1, false);
                }
            }
            #[test]
            #[$attr]
            fn coop_writeback_on_and_off_agree() {
                many_clients_and_same_key::<$t>(Protocol::Boom, 2, true);
                many_clients_and_same_key::<$t>(Protocol::Boom, 2, false);
            }
            #[test]
            #[$attr]
            fn round_trip_counts_per_protocol() {
                for p in Protocol::ALL {
                    round_trip_counts::<$t>(p);
                }
            }
            #[test]
            #[$attr]
            fn rfp_server_reply_and_hybrid() {
                rfp_result_modes::<$t>()
            }
            #[test]
            #[$attr]
            fn hybrid_update_decisions() {
                hybrid_updates::<$t>()
            }
            #[test]
            #[$attr]
            fn short_lived_clients() {
                short_lived_clients_do_not_fill_the_pool::<$t>()
            }
            #[test]
            #[$attr]
            fn split_requests_in_flight_together() {
                split_requests_stay_in_flight_together::<$t>()
            }
            #[test]
            #[$attr]
            fn late_reads_asked_again() {
                a_late_read_is_asked_again::<$t>()
            }
            #[test]
            #[$attr]
            fn larger_entries_after_a_lowered_value_limit() {
                entries_over_a_lowered_value_limit_are_still_read::<$t>()
            }
            #[test]
            #[$attr]
            fn deletes_over_a_full_pool() {
                for p in [Protocol::Boom, Protocol::Rpc, Protocol::Rdmp] {
                    deletes_spread_over_a_full_pool_all_succeed::<$t>(p);
                }
            }
            #[test]
            #[$attr]
            fn client_durable_puts_seen_by_every_protocol() {
                client_durable_puts_are_seen_by_every_protocol::<$t>()
            }
            #[test]
            #[$attr]
            fn server_reads_hold_nothing_once_over() {
                server_reads_hold_no_segment_once_over::<$t>()
            }
            #[test]
            #[$attr]
            fn segments_exposed_only_to_writers() {
                segments_exposed_only_to_clients_that_write_them::<$t>()
            }
            #[test]
            #[$attr]
            fn pool_full() {
                for p in Protocol::ALL {
                    pool_full_keeps_serving_gets::<$t>(p);
                }
            }
        }
    };
}

suite!(tcp, TcpTransport);
suite!(shm, ShmTransport);
#[cfg(feature = "rdma")]
suite!(
    #[ignore = "needs an RDMA device: BOOMKV_RDMA_DEVICE=rxe0 (ci/rdma-vm.sh)"]
    verbs,
    boomkv::transport::VerbsTransport
);
