//! The YCSB binding for Redis (`boomctl ycsb --db redis://`) against a real
//! `redis-server` on a loopback port, started and stopped here (CI installs it; on a
//! machine without it the test says so and passes only outside CI).

use std::net::TcpListener;
use std::process::Command;

use boomkv::bench::redis::{Persistence, RedisServer};

/// A redis-server without persistence on a free loopback port (killed on drop), or
/// `None` where it is not installed (never in CI, which installs it).
fn redis() -> Option<RedisServer> {
    if !RedisServer::installed() {
        assert!(std::env::var_os("CI").is_none(), "CI must install redis-server (ci/install.sh)");
        eprintln!("redis-server is not installed: the Redis binding is not tested here");
        return None;
    }
    Some(RedisServer::start(Persistence::None, None).expect("start redis-server"))
}

fn boomctl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_boomctl")).args(args).output().expect("run boomctl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `boomctl ycsb --db URL` on workload A, 300 records, 3000 operations of 100 bytes,
/// with `threads` (and whatever else); its report.
fn ycsb_a(url: &str, threads: &[&str]) -> String {
    let base = ["ycsb", "--db", url, "--mix", "a", "--records", "300", "--ops", "3000", "--size", "100", "--quiet"];
    let (ok, out, err) = boomctl(&[&base[..], threads].concat());
    assert!(ok, "{err}");
    out
}

/// The value of the report row `[name], metric, value` (0 when there is none).
fn count(out: &str, name: &str, metric: &str) -> u64 {
    out.lines()
        .find(|l| l.starts_with(&format!("[{name}], {metric}, ")))
        .and_then(|l| l.rsplit(", ").next())
        .and_then(|n| n.trim().parse::<u64>().ok())
        .unwrap_or(0)
}

/// Every operation of a workload-A report answered, and every read found its record.
fn all_answered(out: &str) {
    let (reads, updates) = (count(out, "READ", "Operations"), count(out, "UPDATE", "Operations"));
    assert_eq!(reads + updates, 3000, "{out}");
    assert_eq!(count(out, "READ", "Return=OK"), reads, "{out}");
    assert_eq!(count(out, "UPDATE", "Return=OK"), updates, "{out}");
    assert!(!out.contains("NOT_FOUND") && !out.contains("ERROR"), "{out}");
}

#[test]
fn ycsb_runs_against_redis_with_the_same_report() {
    let Some(r) = redis() else { return };
    let url = r.url();
    let out = ycsb_a(&url, &["--threads", "2"]);
    assert!(out.contains("[CONFIG], protocol, redis"), "{out}");
    assert!(out.contains(&format!("[CONFIG], transport, {url}")), "{out}");
    assert!(out.contains("[OVERALL], Throughput(ops/sec)"), "{out}");
    // The load wrote every record, so every read finds one.
    all_answered(&out);
    // Scans are refused with a reason, before anything runs.
    let (ok, _, err) = boomctl(&["ycsb", "--db", &url, "--mix", "e", "--records", "10", "--ops", "10", "--quiet"]);
    assert!(!ok && err.contains("scans"), "{err}");
}

#[test]
fn a_redis_that_is_not_there_is_one_clear_error() {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("redis://127.0.0.1:{port}");
    let (ok, _, err) = boomctl(&["ycsb", "--db", &url, "--mix", "a", "--records", "10", "--ops", "10", "--quiet"]);
    assert!(!ok);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("cannot connect") && err.contains(&url), "{err}");
    let (ok, _, err) = boomctl(&["ycsb", "--db", "memcached://127.0.0.1:1", "--records", "10", "--quiet"]);
    assert!(!ok && err.contains("redis://"), "{err}");
}

/// A quick `sweep peers` of workload B (400 operations, 200 keys) into `out`, with
/// `args`; its standard output.
fn sweep_peers(out: &std::path::Path, args: &[&str]) -> String {
    let base = ["sweep", "peers", "--quick", "--mixes", "b", "--ops", "400", "--keys", "200", "--quiet", "--out"];
    let (ok, stdout, err) = boomctl(&[&base[..], &[out.to_str().unwrap()], args].concat());
    assert!(ok, "{err}");
    stdout
}

/// `sweep peers`: boomkv over tcp and shm and two Redis servers it starts itself, every
/// (mix, threads) point interleaved and repeated, ratios and verdicts in the summary.
#[test]
fn sweep_peers_compares_boomkv_with_redis() {
    let Some(_installed) = redis() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("peers");
    let stdout = sweep_peers(&out, &["--threads", "1,2", "--repeats", "2"]);
    let t = boomkv::bench::sweep::Table::read(&out.join("peers.csv")).unwrap();
    assert_eq!(t.rows.len(), 2 * 4 * 2, "threads x peers x repeats");
    for peer in ["boom-tcp", "boom-shm", "redis", "redis-aof"] {
        let rows = t.rows_where("peer", peer).unwrap();
        assert_eq!(rows.len(), 4, "{peer}");
        for i in rows {
            assert!(t.req(i, "ops_per_sec").unwrap() > 0.0, "{peer}");
            // The run time to the microsecond, the same run as ops_per_sec (whole
            // milliseconds read 0 for a short run beside a finite rate).
            let (ops, ms) = (t.req(i, "ops").unwrap(), t.req(i, "runtime_ms").unwrap());
            let rate = ops / (ms / 1e3);
            assert!((rate / t.req(i, "ops_per_sec").unwrap() - 1.0).abs() < 0.01, "{peer}: {ops} in {ms} ms");
            assert_eq!(t.req(i, "errors").unwrap(), 0.0, "{peer}");
            // What the row ran over (every row said the sweep's --transport, shm).
            let over = if peer == "boom-shm" { "shm" } else { "tcp" };
            assert_eq!(t.str(i, "transport").unwrap(), over, "{peer}");
        }
    }
    // Interleaved: the four peers of a point run one after another.
    assert_eq!(t.str(0, "peer").unwrap(), "boom-tcp");
    assert_eq!(t.str(3, "peer").unwrap(), "redis-aof");
    assert!(stdout.contains("target B: boomkv over tcp >= 1.0x Redis at every thread count: "), "{stdout}");
    assert!(stdout.contains("target B: no collapse, boomkv over tcp at 2 threads"), "{stdout}");
    assert!(stdout.contains("2 interleaved repeats per point"), "{stdout}");
    for stem in ["peers-b-throughput", "peers-b-p99"] {
        assert!(out.join(format!("{stem}.svg")).exists(), "{stem}");
    }
    // A results file from before --client-threads (no such column) still renders.
    let old = dir.path().join("old");
    std::fs::create_dir(&old).unwrap();
    let csv = std::fs::read_to_string(out.join("peers.csv")).unwrap();
    let at = t.col("client_threads").unwrap();
    let strip = |line: &str| -> String {
        line.split(',').enumerate().filter(|(i, _)| *i != at).map(|(_, f)| f).collect::<Vec<_>>().join(",")
    };
    let old_csv: Vec<String> = csv.lines().map(strip).collect();
    std::fs::write(old.join("peers.csv"), old_csv.join("\n") + "\n").unwrap();
    let (ok, stdout, err) = boomctl(&["sweep", "--plot-only", old.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(stdout.contains("at every thread count: "), "{stdout}");

    // --client-threads: the counts are of clients, on (up to) that many threads, for
    // every peer; the summary and the CSV say so.
    let out = dir.path().join("clients");
    let stdout = sweep_peers(&out, &["--threads", "1,4", "--client-threads", "1", "--repeats", "1"]);
    let t = boomkv::bench::sweep::Table::read(&out.join("peers.csv")).unwrap();
    assert_eq!(t.rows.len(), 2 * 4, "counts x peers");
    for i in 0..t.rows.len() {
        assert_eq!(t.req(i, "client_threads").unwrap(), 1.0, "row {i}");
        assert_eq!(t.req(i, "errors").unwrap(), 0.0, "row {i}");
    }
    assert!(stdout.contains("mix  clients  tcp kops/s"), "{stdout}");
    assert!(stdout.contains("at every client count: "), "{stdout}");
    assert!(stdout.contains("on up to 1 thread (--client-threads)"), "{stdout}");
}

#[test]
fn several_redis_clients_per_thread_send_before_they_read() {
    // Each client's GET or SET goes out before the thread reads any reply; the replies
    // are read in order. Every operation still gets its own reply.
    let Some(r) = redis() else { return };
    let out = ycsb_a(&r.url(), &["--threads", "1", "--clients", "4"]);
    assert!(out.contains("[CONFIG], clients, 4"), "{out}");
    assert!(out.contains("[CLEANUP], Operations, 4"), "{out}");
    all_answered(&out);
}
