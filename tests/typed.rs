//! Typed end to end: the statistics a client reads are the server's own, field by
//! field; refusals and broken connections come back as error variants a caller can
//! `match`, never as text to search.

use std::sync::Arc;
use std::time::Duration;

use boomkv::client::{Client, ClientOptions};
use boomkv::error::ErrorCode;
use boomkv::log::{Pool, PoolOptions};
use boomkv::server::{Server, ServerConfig, ServerStats};
use boomkv::transport::{Endpoint, TcpTransport};
use boomkv::wire::Protocol;
use boomkv::Error;

fn server(dir: &std::path::Path) -> Server<TcpTransport> {
    let mut o = PoolOptions { segment_size: 256 << 10, ..Default::default() };
    o.media.create_size = Some(8 << 20);
    let (pool, _) = Pool::open(dir, &o).unwrap();
    let cfg = ServerConfig { log_clients: false, cleaner: false, ..Default::default() };
    Server::start(TcpTransport::new().unwrap(), Arc::new(pool), &[Endpoint::parse("127.0.0.1:0").unwrap()], cfg)
        .unwrap()
}

fn client(s: &Server<TcpTransport>, p: Protocol) -> Client<TcpTransport> {
    let o = ClientOptions { protocol: p, timeout: Duration::from_secs(5), ..Default::default() };
    Client::connect(&TcpTransport::new().unwrap(), &s.endpoints()[0], o).unwrap()
}

#[test]
fn the_stats_a_client_reads_are_the_servers_field_by_field() {
    let d = tempfile::tempdir().unwrap();
    let s = server(d.path());
    let mut c = client(&s, Protocol::Boom);
    for i in 0..10u32 {
        c.put(format!("k{i}").as_bytes(), b"v").unwrap();
    }
    c.delete(b"k0").unwrap();
    assert!(c.get(b"k1").unwrap().is_some());
    assert!(c.get(b"absent").unwrap().is_none());
    let remote: ServerStats = c.stats().unwrap();
    let local = s.stats();
    assert_eq!((remote.puts, remote.dels, remote.gets, remote.not_found), (10, 1, 1, 1));
    assert_eq!(remote.space, local.space);
    assert_eq!(remote.index_entries, local.index_entries);
    assert_eq!(remote.grants, local.grants);
    // And the JSON form round-trips to the same value.
    let back: ServerStats = serde_json::from_slice(&serde_json::to_vec(&remote).unwrap()).unwrap();
    assert_eq!(back, remote);
}

#[test]
fn refusals_and_unsupported_operations_are_typed() {
    let d = tempfile::tempdir().unwrap();
    let s = server(d.path());
    // The hash index cannot scan: the server refuses with its code.
    let mut boom = client(&s, Protocol::Boom);
    match boom.scan(b"a", 10) {
        Err(e @ Error::Server { code: ErrorCode::NoScan, .. }) => assert!(e.is_fatal()),
        other => panic!("expected a NoScan refusal, got {other:?}"),
    }
    // Scans are BOOM's: another protocol says so before asking the server.
    let mut rdmp = client(&s, Protocol::Rdmp);
    match rdmp.scan(b"a", 10) {
        Err(e @ Error::Unsupported(_)) => assert!(e.is_fatal()),
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // A value over the server's limit is refused locally, typed, and is not fatal.
    let big = vec![0u8; rdmp.max_value() as usize + 1];
    match rdmp.put(b"big", &big) {
        Err(e @ Error::TooLarge { what: "value", .. }) => assert!(!e.is_fatal()),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(rdmp.put(b"small", b"ok").is_ok(), "a refused request leaves the connection usable");
}

#[test]
fn a_server_that_goes_away_is_a_lost_connection() {
    for p in [Protocol::Boom, Protocol::Rdmp, Protocol::Rpc] {
        let d = tempfile::tempdir().unwrap();
        let s = server(d.path());
        let mut c = client(&s, p);
        c.put(b"k", b"v").unwrap();
        s.shutdown();
        let e = c.get(b"k").expect_err("the server is gone");
        assert!(matches!(e, Error::ConnectionLost { .. }), "{p}: {e:?}");
        assert!(e.is_fatal(), "{p}");
        let e = c.put(b"k", b"w").expect_err("the server is gone");
        assert!(matches!(e, Error::ConnectionLost { .. }), "{p}, a later request: {e:?}");
    }
}

#[test]
fn a_scan_across_segments_returns_every_live_entry_in_key_order() {
    let d = tempfile::tempdir().unwrap();
    let mut o = PoolOptions { segment_size: 64 << 10, index: boomkv::index::IndexKind::Ordered, ..Default::default() };
    o.media.create_size = Some(8 << 20);
    let (pool, _) = Pool::open(d.path(), &o).unwrap();
    let cfg = ServerConfig { log_clients: false, cleaner: false, ..Default::default() };
    let s =
        Server::start(TcpTransport::new().unwrap(), Arc::new(pool), &[Endpoint::parse("127.0.0.1:0").unwrap()], cfg)
            .unwrap();
    // Two writers interleave, so neighbouring keys sit in different segments; 2 KiB
    // values fill several 64 KiB segments each.
    let (mut a, mut b) = (client(&s, Protocol::Boom), client(&s, Protocol::Boom));
    for i in 0..120u32 {
        let c = if i % 2 == 0 { &mut a } else { &mut b };
        c.put(format!("key{i:04}").as_bytes(), &vec![i as u8; 2048]).unwrap();
    }
    a.delete(b"key0005").unwrap();
    let got = a.scan(b"key0000", 50).unwrap();
    let want: Vec<u32> = (0..51).filter(|&i| i != 5).collect();
    assert_eq!(got.len(), want.len());
    for ((k, v), i) in got.iter().zip(want) {
        assert_eq!(k, format!("key{i:04}").as_bytes());
        assert_eq!(v, &vec![i as u8; 2048]);
    }
    assert!(s.stats().grants >= 4, "the keys must span several segments");
}

#[test]
fn a_pool_that_cannot_hold_a_cell_table_or_an_arena_refuses_with_its_code() {
    let ask = |s: &Server<TcpTransport>, protocol: Protocol, cells: u64| {
        let o = ClientOptions {
            protocol,
            cells,
            cell_value: 1000,
            clover_data: 1 << 20,
            timeout: Duration::from_secs(5),
            ..Default::default()
        };
        Client::connect(&TcpTransport::new().unwrap(), &s.endpoints()[0], o).and_then(|mut c| c.put(b"k", b"v"))
    };
    // Free segments, but not the run a table of 100,000 cells needs: the pool is full
    // for it.
    let d = tempfile::tempdir().unwrap();
    let s = server(d.path());
    match ask(&s, Protocol::PdpmDirect, 100_000) {
        Err(e @ Error::Server { code: ErrorCode::PoolFull, .. }) => {
            assert!(e.is_fatal());
            assert!(e.to_string().contains("consecutive free segments"), "{e}");
        }
        other => panic!("expected a PoolFull refusal, got {other:?}"),
    }
    drop(s);
    // A pool of format version 2 holds neither (its readers would take them for free
    // space): the server cannot, whatever the space, and says so with its own code.
    let path = boomkv::pmem::resolve_pool_path(d.path()).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let len = bytes.len() as u64;
    let mut h = boomkv::log::format::PoolHeader::decode(&bytes, len).unwrap();
    h.format_version = 2;
    bytes[..boomkv::log::format::POOL_HEADER_LEN].copy_from_slice(&h.encode());
    std::fs::write(&path, &bytes).unwrap();
    let s = server(d.path());
    for p in [Protocol::PdpmDirect, Protocol::Clover] {
        match ask(&s, p, 64) {
            Err(e @ Error::Server { code: ErrorCode::Unsupported, .. }) => {
                assert!(e.is_fatal());
                assert!(e.to_string().contains("format version 2"), "{p:?}: {e}");
            }
            other => panic!("{p:?}: expected an Unsupported refusal, got {other:?}"),
        }
    }
    // The pool itself still serves the log's protocols.
    let mut boom = client(&s, Protocol::Boom);
    boom.put(b"k", b"v").unwrap();
    assert_eq!(boom.get(b"k").unwrap().unwrap(), b"v");
}
