//! Bad clients: forged keys, writes outside their segments, malformed entries, idling,
//! too many clients, quotas. The server refuses the offender only, keeps serving the
//! others, and loses nothing it acknowledged.

use std::sync::Arc;
use std::time::Duration;

mod common;

use boomkv::client::{Client, ClientOptions};
use boomkv::error::Error;
use boomkv::log::format::{slot_size, ENTRY_HEADER_SIZE, ENTRY_VALUE_LEN_OFF, SEGMENT_HEADER_SIZE};
use boomkv::log::{Pool, PoolOptions};
use boomkv::server::{Server, ServerConfig, MAX_VALUE_LIMIT};
use boomkv::transport::{Endpoint, MemoryRegion, QueuePair, ShmTransport};
use boomkv::wire::{ErrorCode, Msg, Protocol};
use common::{entry, Raw};

fn server(dir: &std::path::Path, cfg: ServerConfig) -> Server<ShmTransport> {
    let ep = Endpoint::Shm(dir.join("abuse.sock"));
    Server::start(ShmTransport::new().unwrap(), pool(dir, 256 << 10, 8 << 20), &[ep], cfg).unwrap()
}

/// A new pool in `dir` of `size` bytes in segments of `segment` bytes.
fn pool(dir: &std::path::Path, segment: u64, size: u64) -> Arc<Pool> {
    let mut o = PoolOptions { segment_size: segment, ..Default::default() };
    o.media.create_size = Some(size);
    Arc::new(Pool::open(dir, &o).unwrap().0)
}

/// A client of `protocol` with a timeout long enough for the largest values.
fn client_of(s: &Server<ShmTransport>, protocol: Protocol) -> Client<ShmTransport> {
    let o = ClientOptions { protocol, timeout: Duration::from_secs(20), ..Default::default() };
    Client::connect(&ShmTransport::new().unwrap(), &s.endpoints()[0], o).unwrap()
}

fn quiet() -> ServerConfig {
    ServerConfig { log_clients: false, cleaner: false, ..Default::default() }
}

fn client(s: &Server<ShmTransport>) -> Client<ShmTransport> {
    let o = ClientOptions { timeout: Duration::from_secs(5), ..Default::default() };
    Client::connect(&ShmTransport::new().unwrap(), &s.endpoints()[0], o).unwrap()
}

fn raw_client(s: &Server<ShmTransport>) -> Raw<ShmTransport> {
    Raw::connect(&ShmTransport::new().unwrap(), &s.endpoints()[0])
}

#[test]
fn a_largest_value_no_transfer_carries_is_refused_and_each_protocol_is_told_its_own() {
    // Clients would be told they may PUT values that no transfer carries, and fail
    // only in their transport.
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path(), 32 << 20, 128 << 20);
    let ep = Endpoint::Shm(dir.path().join("big.sock"));
    let cfg = ServerConfig { max_value: MAX_VALUE_LIMIT + 1, ..quiet() };
    let r = Server::start(ShmTransport::new().unwrap(), pool.clone(), std::slice::from_ref(&ep), cfg);
    assert!(matches!(r, Err(Error::Invalid(_))), "{:?}", r.err());
    let cfg = ServerConfig { max_value: MAX_VALUE_LIMIT, ..quiet() };
    let s = Server::start(ShmTransport::new().unwrap(), pool, &[ep], cfg).unwrap();
    // Each protocol is told the largest value it carries (an RPC design's request is
    // one message, smaller than a transfer), and carries it with the longest key; one
    // byte more is refused by the client before it is sent.
    let key = vec![b'k'; 1024];
    for protocol in [Protocol::Boom, Protocol::Rpc, Protocol::Herd] {
        let mut c = client_of(&s, protocol);
        assert_eq!(c.max_value(), boomkv::proto::value_limit(protocol), "{protocol}");
        let val = vec![7u8; c.max_value() as usize];
        c.put(&key, &val).unwrap();
        assert!(c.get(&key).unwrap().unwrap() == val, "{protocol}");
        let over = vec![7u8; c.max_value() as usize + 1];
        assert!(matches!(c.put(&key, &over), Err(Error::TooLarge { what: "value", .. })), "{protocol}");
    }
}

#[test]
fn a_get_over_an_rpc_design_of_a_value_larger_than_its_one_reply_is_refused_and_the_connection_stays() {
    // A value BOOM stored, larger than an RPC design's one reply: a GET through one
    // is refused with its code (the connection was closed for a "protocol error",
    // and the client said only that the peer had gone).
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path(), 8 << 20, 64 << 20);
    let ep = Endpoint::Shm(dir.path().join("big.sock"));
    let s = Server::start(ShmTransport::new().unwrap(), pool, &[ep], ServerConfig { max_value: 4 << 20, ..quiet() })
        .unwrap();
    let mut c = client_of(&s, Protocol::Boom);
    c.put(b"two", &vec![9u8; 2_000_000]).unwrap();
    c.put(b"small", b"s").unwrap();
    for protocol in [Protocol::Rpc, Protocol::Herd, Protocol::Rfp] {
        let mut c = client_of(&s, protocol);
        match c.get(b"two") {
            Err(e @ Error::Server { code: ErrorCode::TooLarge, .. }) => {
                assert!(e.to_string().contains("over the 1052"), "{protocol}: {e}");
            }
            other => panic!("{protocol}: {other:?}"),
        }
        assert_eq!(c.get(b"small").unwrap().unwrap(), b"s", "{protocol}: the connection stays");
    }
}

#[test]
fn malformed_entries_get_an_error_and_are_never_counted() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), quiet());
    let mut good = client(&s);
    good.put(b"safe", b"acknowledged").unwrap();
    let mut raw = raw_client(&s);
    let seg = raw.grant();
    let at = SEGMENT_HEADER_SIZE;
    let is_invalid = |m: Option<Msg>| matches!(m, Some(Msg::Error { code: ErrorCode::InvalidEntry, .. }));
    // garbage
    assert!(is_invalid(raw.put_raw(&seg, at, &[0xAB; 100], false)));
    // bad checksum
    let mut e = entry(b"k", b"v", at + slot_size(1, 1));
    e[ENTRY_HEADER_SIZE as usize + 1] ^= 1;
    assert!(is_invalid(raw.put_raw(&seg, at, &e, false)));
    // next_offset pointing backwards
    assert!(is_invalid(raw.put_raw(&seg, at, &entry(b"k", b"v", at - 8), false)));
    // value length past the segment
    let mut e = entry(b"k", b"v", at + slot_size(1, 1));
    let vl = ENTRY_VALUE_LEN_OFF as usize;
    e[vl..vl + 4].copy_from_slice(&(1u32 << 30).to_le_bytes());
    assert!(is_invalid(raw.put_raw(&seg, at, &e, false)));
    // an append that is not at the tail, an in-place write over no slot
    assert!(is_invalid(raw.put_raw(&seg, at + 64, &entry(b"k", b"v", at + 64 + slot_size(1, 1)), false)));
    assert!(is_invalid(raw.put_raw(&seg, at, &entry(b"k", b"v", at + slot_size(1, 1)), true)));
    // and after all that, a valid entry at the tail works
    assert!(matches!(raw.put_raw(&seg, at, &entry(b"k", b"v", at + slot_size(1, 1)), false), Some(Msg::PutOk { .. })));
    assert_eq!(good.get(b"k").unwrap().unwrap(), b"v");
    assert_eq!(good.get(b"safe").unwrap().unwrap(), b"acknowledged");
    assert_eq!(s.stats().puts, 2, "only the valid entries were committed");
}

#[test]
fn forged_keys_and_out_of_segment_writes_cut_off_only_the_offender() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), quiet());
    let mut good = client(&s);
    good.put(b"before", b"1").unwrap();
    let mut raw = raw_client(&s);
    let seg = raw.grant();
    // past the end of the granted segment
    let e = entry(b"x", b"y", 0);
    raw.buf.write(0, &e).unwrap();
    raw.qp.post_write(7, &raw.buf, 0, e.len() as u32, seg.at(seg.len), seg.rkey, true).unwrap();
    let c = raw.completion_of(7);
    assert!(!c.status.is_ok(), "a write past the segment must fail: {c:?}");
    // a forged rkey on a fresh connection
    let mut raw2 = raw_client(&s);
    let seg2 = raw2.grant();
    raw2.qp.post_write(8, &raw2.buf, 0, 64, seg2.addr, seg2.rkey ^ 0x5555, true).unwrap();
    let c = raw2.completion_of(8);
    assert!(!c.status.is_ok(), "a forged rkey must fail: {c:?}");
    // everyone else is fine
    good.put(b"after", b"2").unwrap();
    let mut fresh = client(&s);
    assert_eq!(fresh.get(b"before").unwrap().unwrap(), b"1");
    assert_eq!(fresh.get(b"after").unwrap().unwrap(), b"2");
}

#[test]
fn idle_clients_are_disconnected_and_limits_refuse_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let cfg =
        ServerConfig { max_clients: 2, idle_timeout: Some(Duration::from_millis(300)), segment_quota: 1, ..quiet() };
    let s = server(dir.path(), cfg);
    let mut a = client(&s);
    let mut idle = client(&s);
    let o = ClientOptions { timeout: Duration::from_secs(5), ..Default::default() };
    let e = Client::connect(&ShmTransport::new().unwrap(), &s.endpoints()[0], o.clone()).err().unwrap().to_string();
    assert!(e.contains("too many clients"), "{e}");
    // keep `a` busy while `idle` sleeps past the idle timeout
    for i in 0..10 {
        a.put(format!("k{i}").as_bytes(), b"v").unwrap();
        std::thread::sleep(Duration::from_millis(60));
    }
    assert!(idle.put(b"late", b"v").is_err(), "the idle client was disconnected");
    // the quota: one segment per client
    let mut err = None;
    for i in 0..200 {
        if let Err(e) = a.put(format!("fill{i}").as_bytes(), &[0u8; 4000]) {
            err = Some(e.to_string());
            break;
        }
    }
    let err = err.expect("the quota must stop the client");
    assert!(err.contains("quota"), "{err}");
    // its reads still work
    assert_eq!(a.get(b"k3").unwrap().unwrap(), b"v");
    drop((a, idle));
    std::thread::sleep(Duration::from_millis(250));
    assert!(Client::connect(&ShmTransport::new().unwrap(), &s.endpoints()[0], o).is_ok(), "slots free up");
}

#[test]
fn a_closed_connection_frees_its_place_for_the_next_client_at_once() {
    // One place: a client that closes its connection and the next that connects at
    // once. The worker notices the close when it next polls; the acceptor used to
    // refuse the next client ("too many clients") if it asked first, as a flood of
    // short connections did to honest clients while few were connected.
    for (name, backend) in [("tcp", boomkv::transport::Backend::Tcp), ("shm", boomkv::transport::Backend::Shm)] {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool(dir.path(), 256 << 10, 8 << 20);
        let cfg = ServerConfig { max_clients: 1, ..quiet() };
        let refused = match backend {
            boomkv::transport::Backend::Tcp => {
                let ep = Endpoint::parse("127.0.0.1:0").unwrap();
                let s = Server::start(boomkv::transport::TcpTransport::new().unwrap(), pool, &[ep], cfg).unwrap();
                churn(&boomkv::transport::TcpTransport::new().unwrap(), &s.endpoints()[0])
            }
            _ => {
                let ep = Endpoint::Shm(dir.path().join("one.sock"));
                let s = Server::start(ShmTransport::new().unwrap(), pool, &[ep], cfg).unwrap();
                churn(&ShmTransport::new().unwrap(), &s.endpoints()[0])
            }
        };
        assert_eq!(refused, 0, "{name}: clients refused although the one before had closed");
    }
}

/// 100 one-GET clients, one after the other: how many were refused.
fn churn<T: boomkv::transport::Transport>(t: &T, ep: &Endpoint) -> usize {
    let o = ClientOptions { timeout: Duration::from_secs(5), ..Default::default() };
    let mut refused = 0;
    for i in 0..100 {
        match Client::connect(t, ep, o.clone()) {
            Ok(mut c) => assert!(c.get(format!("k{i}").as_bytes()).unwrap().is_none()),
            Err(e) if e.to_string().contains("too many clients") => refused += 1,
            Err(e) => panic!("client {i}: {e}"),
        }
    }
    refused
}
