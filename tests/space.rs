//! Space that cannot deadlock (issue 18, items 6 and 7): DELETEs succeed on a full
//! pool in every protocol, before and after a restart; one-shot clients do not each
//! strand a segment.

mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use boomkv::client::{Client, ClientOptions};
use boomkv::log::format::POOL_HEADER_SIZE;
use boomkv::log::{Pool, PoolOptions};
use boomkv::server::{Server, ServerConfig};
use boomkv::transport::{Endpoint, ShmTransport};
use boomkv::wire::Protocol;

fn open(dir: &std::path::Path) -> (Pool, boomkv::log::RecoveryReport) {
    let mut o = PoolOptions { segment_size: 64 << 10, ..Default::default() };
    o.media.create_size = Some(POOL_HEADER_SIZE + 16 * (64 << 10));
    // The stopped server's last threads may hold the pool's lock for a moment.
    let t0 = Instant::now();
    loop {
        match Pool::open(dir, &o) {
            Ok(r) => return r,
            Err(e) if t0.elapsed() < Duration::from_secs(5) => {
                eprintln!("reopening: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

fn start(dir: &std::path::Path, pool: Pool) -> Server<ShmTransport> {
    // No cleaner: the pool stays full, so only the delete path can make room.
    let cfg = ServerConfig { log_clients: false, cleaner: false, ..Default::default() };
    let ep = Endpoint::Shm(dir.join("space.sock"));
    let _ = std::fs::remove_file(dir.join("space.sock"));
    Server::start(ShmTransport::new().unwrap(), Arc::new(pool), &[ep], cfg).unwrap()
}

fn client(s: &Server<ShmTransport>, protocol: Protocol) -> Client<ShmTransport> {
    let o = ClientOptions {
        protocol,
        timeout: Duration::from_secs(5),
        pool_full_wait: Duration::from_millis(10),
        ..Default::default()
    };
    Client::connect(&ShmTransport::new().unwrap(), &s.endpoints()[0], o).unwrap()
}

#[test]
fn deletes_succeed_on_a_full_pool_in_every_protocol_and_after_a_restart() {
    for protocol in [Protocol::Boom, Protocol::Rdmp, Protocol::Rpc] {
        let dir = tempfile::tempdir().unwrap();
        let s = start(dir.path(), open(dir.path()).0);
        let mut c = client(&s, protocol);
        let value = vec![7u8; 3000];
        let mut keys = Vec::new();
        loop {
            let k = format!("key{}", keys.len());
            match c.put(k.as_bytes(), &value) {
                Ok(_) => keys.push(k),
                Err(_) => break,
            }
            assert!(keys.len() < 10_000, "{protocol}: the pool never filled");
        }
        assert!(keys.len() > 50, "{protocol}: {} keys", keys.len());
        // full: a new client cannot write either
        let mut other = client(&s, protocol);
        assert!(other.put(b"late", &value).is_err(), "{protocol}: the pool should be full");
        for k in &keys[..keys.len() / 2] {
            c.delete(k.as_bytes()).unwrap_or_else(|e| panic!("{protocol}: DELETE of {k} on a full pool: {e}"));
        }
        other.delete(b"late").unwrap_or_else(|e| panic!("{protocol}: a new client's DELETE: {e}"));
        assert_eq!(c.get(keys[0].as_bytes()).unwrap(), None);
        assert_eq!(c.get(keys[keys.len() - 1].as_bytes()).unwrap().unwrap(), value);
        drop((c, other));
        s.shutdown();
        // restarted on the still-full pool: the rest can be deleted too
        let s = start(dir.path(), open(dir.path()).0);
        let mut c = client(&s, protocol);
        for k in &keys[keys.len() / 2..] {
            c.delete(k.as_bytes()).unwrap_or_else(|e| panic!("{protocol} after a restart: DELETE of {k}: {e}"));
        }
        for k in &keys {
            assert_eq!(c.get(k.as_bytes()).unwrap(), None, "{protocol}: {k}");
        }
        drop(c);
        s.shutdown();
        let (p, rep) = open(dir.path());
        assert_eq!((rep.keys, rep.tombstones), (0, keys.len() as u64 + 1), "{protocol}");
        drop(p);
    }
}

fn boomctl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_boomctl"))
}

#[test]
fn two_hundred_one_shot_puts_into_a_256_mib_pool_are_all_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    let server = format!("shm:{}", sock.display());
    let mut child = boomctl()
        .args(["serve", "--pool-size", "256M", "--stats-interval", "0", "--quiet", "--pmem"])
        .arg(dir.path())
        .args(["--listen", &server])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_for_server(&server);
    let mut refused = Vec::new();
    for i in 0..200 {
        let out = boomctl().args(["put", "--server", &server, &format!("one-shot-{i}"), "v"]).output().unwrap();
        if !out.status.success() {
            refused.push(format!("{i}: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
    }
    let del = boomctl().args(["del", "--server", &server, "one-shot-7"]).output().unwrap();
    let get = boomctl().args(["get", "--server", &server, "one-shot-199"]).output().unwrap();
    // The cleaner works in the background (and a slow machine may still be behind
    // the last puts): the segments must come back, within a bound.
    let deadline = Instant::now() + Duration::from_secs(20);
    let s = loop {
        let stats = boomctl().args(["stats", "--server", &server, "--json"]).output().unwrap();
        let s: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
        if s["free_segments"].as_u64().unwrap() > 8 || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(refused.is_empty(), "{} of 200 refused: {:?}", refused.len(), &refused[..refused.len().min(3)]);
    assert!(del.status.success(), "{}", String::from_utf8_lossy(&del.stderr));
    assert_eq!(get.stdout, b"v");
    assert!(s["free_segments"].as_u64().unwrap() > 8, "segments stranded: {s}");
}
