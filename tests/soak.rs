//! Soak: YCSB-A-like load (50% reads, 50% updates, Zipf-ish keys) from several clients
//! against one server with the cleaner running, for `BOOMKV_SOAK_SECS` seconds (default
//! 5, CI-sized). No errors, every read returns a value written for its key, every
//! acknowledged write is there at the end, and the server's memory stays flat.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use boomkv::client::{Client, ClientOptions};
use boomkv::log::{Pool, PoolOptions};
use boomkv::server::{Server, ServerConfig};
use boomkv::transport::{Endpoint, ShmTransport};
use rand::{RngExt, SeedableRng};

/// Per key: the highest acknowledged version and its value.
type Last = Arc<Mutex<HashMap<String, (u64, Vec<u8>)>>>;

/// The process's resident anonymous memory (its heap), in KiB. Not `VmRSS`: that counts
/// the pages of mapped files too (the pool, the connections' rings), which come and go
/// with the page cache and with connections mapping and unmapping them; a run of this
/// test saw them go from 75 to 186 MB and back while the heap stayed at 3 MB.
fn heap_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("RssAnon:")).map(ToString::to_string))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

#[test]
fn soak_ycsb_a_with_the_cleaner() {
    let secs: u64 = std::env::var("BOOMKV_SOAK_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let dir = tempfile::tempdir().unwrap();
    let mut o = PoolOptions { segment_size: 1 << 20, ..Default::default() };
    o.media.create_size = Some(32 << 20);
    let (pool, _) = Pool::open(dir.path(), &o).unwrap();
    let cfg = ServerConfig {
        log_clients: false,
        clean_when_free: 0.5,
        clean_interval: Duration::from_millis(5),
        ..Default::default()
    };
    let s =
        Server::start(ShmTransport::new().unwrap(), Arc::new(pool), &[Endpoint::Shm(dir.path().join("s.sock"))], cfg)
            .unwrap();
    let ep = s.endpoints()[0].clone();
    let last: Last = Arc::default();
    let end = Instant::now() + Duration::from_secs(secs);
    let handles: Vec<_> = (0..3u64)
        .map(|t| {
            let (ep, last) = (ep.clone(), last.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&ShmTransport::new().unwrap(), &ep, ClientOptions::default()).unwrap();
                let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                let mut ops = 0u64;
                let mut buf = Vec::new();
                while Instant::now() < end {
                    // skewed: a quarter of the keys take most of the load
                    let k: u64 = if rng.random_bool(0.8) { rng.random_range(0..50) } else { rng.random_range(0..200) };
                    let key = format!("user{k}");
                    if rng.random_bool(0.5) {
                        if c.get_into(key.as_bytes(), &mut buf).unwrap() {
                            assert!(buf.starts_with(key.as_bytes()), "{key} returned a value of another key");
                        }
                    } else {
                        let len = rng.random_range(16..3000);
                        let v: Vec<u8> =
                            format!("{key}/{t}/{ops}|").into_bytes().into_iter().cycle().take(len).collect();
                        let info = c.put(key.as_bytes(), &v).unwrap();
                        let mut l = last.lock().unwrap();
                        let e = l.entry(key).or_insert((0, Vec::new()));
                        if info.version > e.0 {
                            *e = (info.version, v);
                        }
                    }
                    ops += 1;
                }
                ops
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(secs) / 3);
    let heap_mid = heap_kib();
    let ops: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let heap_end = heap_kib();
    let st = s.stats();
    let mut c = Client::connect(&ShmTransport::new().unwrap(), &ep, ClientOptions::default()).unwrap();
    for (k, (_, v)) in last.lock().unwrap().iter() {
        assert_eq!(&c.get(k.as_bytes()).unwrap().unwrap(), v, "{k}");
    }
    eprintln!(
        "soak {secs} s: {ops} ops, {} errors, cleaner freed {} segments, heap {heap_mid} -> {heap_end} KiB",
        st.errors, st.cleaner.segments_freed
    );
    assert_eq!(st.errors, 0);
    assert!(ops > 1000);
    if secs >= 5 {
        assert!(st.cleaner.segments_freed > 0, "the load must make the cleaner work");
    }
    // The heap after the first third (index, buffers, connections all set up) is all
    // the run needs; what grows after would be a leak.
    assert!(heap_end < heap_mid + 32 * 1024, "heap grew from {heap_mid} to {heap_end} KiB");
}
