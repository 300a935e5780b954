//! The YCSB binding for Redis (`boomctl ycsb --db redis://`) against a real
//! `redis-server` on a loopback port, started and stopped here (CI installs it; on a
//! machine without it the test says so and passes only outside CI).

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server child without persistence on a free loopback port; killed on drop.
struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    fn start() -> Option<Redis> {
        let found = Command::new("redis-server").arg("--version").stdout(Stdio::null()).status().is_ok();
        if !found {
            assert!(std::env::var_os("CI").is_none(), "CI must install redis-server (ci/install.sh)");
            eprintln!("redis-server is not installed: the Redis binding is not tested here");
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let end = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < end, "redis-server did not listen on port {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Redis { child, port })
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn boomctl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_boomctl")).args(args).output().expect("run boomctl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn ycsb_runs_against_redis_with_the_same_report() {
    let Some(r) = Redis::start() else { return };
    let url = r.url();
    let (ok, out, err) = boomctl(&[
        "ycsb",
        "--db",
        &url,
        "--mix",
        "a",
        "--records",
        "300",
        "--ops",
        "3000",
        "--threads",
        "2",
        "--size",
        "100",
        "--quiet",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("[CONFIG], protocol, redis"), "{out}");
    assert!(out.contains(&format!("[CONFIG], transport, {url}")), "{out}");
    assert!(out.contains("[OVERALL], Throughput(ops/sec)"), "{out}");
    // The load wrote every record, so every read finds one.
    let count = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("[{name}], Operations, ")))
            .and_then(|l| l.rsplit(", ").next())
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let (reads, updates) = (count("READ"), count("UPDATE"));
    assert_eq!(reads + updates, 3000, "{out}");
    assert!(out.contains(&format!("[READ], Return=OK, {reads}")), "{out}");
    assert!(!out.contains("NOT_FOUND") && !out.contains("ERROR"), "{out}");
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
