//! Isolation between clients, written as a hostile client would try it (issue: integrity
//! and isolation). Every attack runs over tcp and shm against a real server:
//!
//! - another client's rkey used on my own connection (the victim's segment);
//! - blind rkey guessing with zero-length WRITEs (a free probe before);
//! - slow and silent sockets beside an honest client (handshakes off the accept path);
//! - a client that sends requests and posts no receive for the replies (over shm the
//!   worker's reply waited for one, for the whole RNR timeout, with every other client
//!   of that worker behind it);
//! - HERD/RFP: a forged request slot beside an honest client, WRITEs into another
//!   client's request region or into a result region;
//! - RDMP-CC: another value written under the seal the server gave;
//! - pDPM-Direct: a WRITE past the cell table, garbage in a cell, a lock never released;
//! - Clover: a WRITE past the arena, garbage over a key's newest version.
//!
//! The offender loses its connection; the victim keeps its data and its service.

use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use boomkv::client::{Client, ClientOptions};
use boomkv::log::format::SEGMENT_HEADER_SIZE;
use boomkv::log::{Pool, PoolOptions};
use boomkv::server::{Server, ServerConfig};
use boomkv::transport::{
    Access, CompletionQueue, Endpoint, MemoryRegion, QueuePair, ShmTransport, TcpTransport, Transport, TransportConfig,
    WcOpcode,
};
use boomkv::wire::{slot, Hello, Msg, Protocol, Welcome};
use common::{entry, Raw};

fn quiet() -> ServerConfig {
    ServerConfig { log_clients: false, cleaner: false, ..Default::default() }
}

fn pool(dir: &std::path::Path) -> Arc<Pool> {
    let mut o = PoolOptions { segment_size: 256 << 10, ..Default::default() };
    o.media.create_size = Some(16 << 20);
    Arc::new(Pool::open(dir, &o).unwrap().0)
}

fn tcp_server(dir: &std::path::Path, cfg: ServerConfig) -> Server<TcpTransport> {
    let ep = Endpoint::parse("tcp://127.0.0.1:0").unwrap();
    Server::start(TcpTransport::new().unwrap(), pool(dir), &[ep], cfg).unwrap()
}

fn shm_server(dir: &std::path::Path, cfg: ServerConfig) -> Server<ShmTransport> {
    let ep = Endpoint::Shm(dir.join("iso.sock"));
    Server::start(ShmTransport::new().unwrap(), pool(dir), &[ep], cfg).unwrap()
}

fn opts() -> ClientOptions {
    ClientOptions { timeout: Duration::from_secs(5), ..Default::default() }
}

/// The victim's acknowledged entry, then the attacker writes a forged, checksummed entry
/// for the same key into the victim's segment with the victim's rkey, on its own
/// connection. `counted`: the backend counts the violation in the server's stats (verbs
/// devices report it to the requester only).
fn foreign_rkey<T: Transport>(t: &T, s: &Server<T>, counted: bool) {
    let ep = &s.endpoints()[0];
    let mut victim = Raw::connect(t, ep);
    let seg = victim.grant();
    let at = SEGMENT_HEADER_SIZE;
    let good = entry(b"victim", b"acknowledged", at + 64);
    assert!(matches!(victim.put_raw(&seg, at, &good, false), Some(Msg::PutOk { .. })));

    let mut attacker = Raw::connect(t, ep);
    let _own = attacker.grant();
    let forged = entry(b"victim", b"forged by the attacker", at + 64);
    attacker.buf.write(0, &forged).unwrap();
    assert!(!attacker.write(seg.at(at), seg.rkey, forged.len() as u32), "a foreign rkey must be refused");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !attacker.qp.is_error() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(attacker.qp.is_error(), "the offender's connection is closed");

    // The victim's data and service are untouched; the violation is counted.
    let mut reader = Client::connect(t, ep, opts()).unwrap();
    assert_eq!(reader.get(b"victim").unwrap().unwrap(), b"acknowledged");
    let next = entry(b"victim2", b"still served", at + 64 + 64);
    assert!(matches!(victim.put_raw(&seg, at + 64, &next, false), Some(Msg::PutOk { .. })));
    assert_eq!(reader.get(b"victim2").unwrap().unwrap(), b"still served");
    if counted {
        assert!(s.stats().access_violations >= 1, "{:?}", s.stats().access_violations);
    }
}

/// A segment's rkey dies with the grant: once the client is granted its next segment (the
/// old one sealed), a WRITE into the old one with its rkey is refused, and the entries
/// acknowledged there read back unchanged.
fn revoked_rkey<T: Transport>(t: &T, s: &Server<T>) {
    let ep = &s.endpoints()[0];
    let mut c = Raw::connect(t, ep);
    let old = c.grant();
    let at = SEGMENT_HEADER_SIZE;
    let good = entry(b"sealed", b"acknowledged", at + 64);
    assert!(matches!(c.put_raw(&old, at, &good, false), Some(Msg::PutOk { .. })));
    let _new = c.grant();
    let forged = entry(b"sealed", b"rewritten after the seal", at + 64);
    c.buf.write(0, &forged).unwrap();
    assert!(!c.write(old.at(at), old.rkey, forged.len() as u32), "the rkey of a revoked grant must be refused");
    let mut reader = Client::connect(t, ep, opts()).unwrap();
    assert_eq!(reader.get(b"sealed").unwrap().unwrap(), b"acknowledged");
}

/// Blind guessing: every wrong guess costs the guesser its connection, so a search of
/// the 32-bit rkey space needs a new handshake per guess.
/// `len`: bytes per probe. tcp and shm check the rkey of a zero-length WRITE too; verbs
/// devices do not (InfiniBand checks no rkey for zero bytes, so such a probe learns
/// nothing), so probes over verbs carry bytes.
fn blind_probe<T: Transport>(t: &T, s: &Server<T>, len: u32) {
    let ep = &s.endpoints()[0];
    let mut victim = Raw::connect(t, ep);
    let seg = victim.grant();
    let mut probes = 0;
    let mut connections = 0;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let start = Instant::now();
    while probes < 40 && start.elapsed() < Duration::from_secs(20) {
        let mut a = Raw::connect(t, ep);
        connections += 1;
        let own = a.grant();
        // Guess near our own rkey and at random; zero-length writes, as the old probe.
        for _ in 0..4 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let guess = if probes % 2 == 0 { own.rkey.wrapping_add(1 + probes as u32) } else { rng as u32 };
            probes += 1;
            if guess == seg.rkey {
                continue;
            }
            let ok = a.write(seg.addr, guess, len);
            assert!(!ok, "a guessed rkey {guess:#x} was accepted");
            if a.qp.is_error() {
                break;
            }
        }
    }
    assert!(connections >= probes / 4, "each connection made at most a few guesses");
    let mut reader = Client::connect(t, ep, opts()).unwrap();
    reader.put(b"after", b"fine").unwrap();
    assert_eq!(reader.get(b"after").unwrap().unwrap(), b"fine");
}

#[test]
fn tcp_another_clients_rkey_is_refused_on_my_connection() {
    let dir = tempfile::tempdir().unwrap();
    let s = tcp_server(dir.path(), quiet());
    foreign_rkey(&TcpTransport::new().unwrap(), &s, true);
}

#[test]
fn shm_another_clients_rkey_is_refused_on_my_connection() {
    let dir = tempfile::tempdir().unwrap();
    let s = shm_server(dir.path(), quiet());
    foreign_rkey(&ShmTransport::new().unwrap(), &s, true);
}

#[test]
fn tcp_a_revoked_grants_rkey_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = tcp_server(dir.path(), quiet());
    revoked_rkey(&TcpTransport::new().unwrap(), &s);
}

#[test]
fn shm_a_revoked_grants_rkey_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = shm_server(dir.path(), quiet());
    revoked_rkey(&ShmTransport::new().unwrap(), &s);
}

#[test]
fn tcp_blind_rkey_probes_cost_a_connection_each() {
    let dir = tempfile::tempdir().unwrap();
    let s = tcp_server(dir.path(), quiet());
    blind_probe(&TcpTransport::new().unwrap(), &s, 0);
}

#[test]
fn shm_blind_rkey_probes_cost_a_connection_each() {
    let dir = tempfile::tempdir().unwrap();
    let s = shm_server(dir.path(), quiet());
    blind_probe(&ShmTransport::new().unwrap(), &s, 0);
}

#[test]
fn rkeys_next_to_my_own_name_nothing_i_may_use_over_shm() {
    // rkeys were a slot number and a generation, so the neighbours of my own rkey named
    // the server's other regions (receive buffers, other clients' segments), and a look-up
    // was answered for any of them. Now they name nothing, and each try costs the asker
    // its connection.
    let dir = tempfile::tempdir().unwrap();
    let s = shm_server(dir.path(), quiet());
    let t = ShmTransport::new().unwrap();
    let mut a = Raw::connect(&t, &s.endpoints()[0]);
    let own = a.grant();
    let mut refused = 0;
    for k in 1..=8u32 {
        let mut b = Raw::connect(&t, &s.endpoints()[0]);
        if !b.write(own.addr, own.rkey.wrapping_sub(k), 8) {
            refused += 1;
        }
    }
    assert_eq!(refused, 8);
    let mut c = Client::connect(&t, &s.endpoints()[0], opts()).unwrap();
    c.put(b"k", b"v").unwrap();
    assert_eq!(c.get(b"k").unwrap().unwrap(), b"v");
}

/// How many slow or silent sockets the handshake tests hold open (each costs the test
/// two descriptors; the limit here is far above).
const LORISES: usize = 1000;

#[test]
fn tcp_an_honest_client_connects_beside_a_thousand_slow_and_silent_sockets() {
    use std::io::Write;
    let n = LORISES;
    let dir = tempfile::tempdir().unwrap();
    let s = tcp_server(dir.path(), quiet());
    let Endpoint::Tcp(addr) = s.endpoints()[0].clone() else { unreachable!() };
    let mut socks = Vec::new();
    for i in 0..n {
        let mut c = std::net::TcpStream::connect(&addr).unwrap();
        if i % 2 == 0 {
            // A slow one: the start of a valid hello, then nothing more for now.
            c.write_all(b"BOOMKVTC").unwrap();
        }
        socks.push(c);
    }
    // Keep the slow ones trickling: one byte each, while the honest client connects.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut slow: Vec<_> = socks.iter().step_by(2).map(|c| c.try_clone().unwrap()).collect();
    let stop2 = stop.clone();
    let trickle = std::thread::spawn(move || {
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            for c in &mut slow {
                let _ = c.write_all(&[1]);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let t = TcpTransport::new().unwrap();
    let start = Instant::now();
    let o = ClientOptions { timeout: Duration::from_secs(3), ..Default::default() };
    let mut c = Client::connect(&t, &s.endpoints()[0], o).expect("the honest client got in while the lorises waited");
    let took = start.elapsed();
    c.put(b"k", b"v").unwrap();
    assert_eq!(c.get(b"k").unwrap().unwrap(), b"v");
    eprintln!("honest tcp client connected in {took:?} beside {n} slow or silent sockets");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    trickle.join().unwrap();
}

#[test]
fn shm_an_honest_client_connects_beside_a_thousand_silent_sockets() {
    let n = LORISES;
    let dir = tempfile::tempdir().unwrap();
    let s = shm_server(dir.path(), quiet());
    let Endpoint::Shm(path) = s.endpoints()[0].clone() else { unreachable!() };
    let mut socks = Vec::new();
    for _ in 0..n {
        // A silent one: connected, never says hello.
        let fd =
            rustix::net::socket(rustix::net::AddressFamily::UNIX, rustix::net::SocketType::SEQPACKET, None).unwrap();
        rustix::net::connect(&fd, &rustix::net::SocketAddrUnix::new(path.as_path()).unwrap()).unwrap();
        socks.push(fd);
    }
    let t = ShmTransport::new().unwrap();
    let start = Instant::now();
    let o = ClientOptions { timeout: Duration::from_secs(3), ..Default::default() };
    let mut c = Client::connect(&t, &s.endpoints()[0], o).expect("the honest client got in beside the silent ones");
    let took = start.elapsed();
    c.put(b"k", b"v").unwrap();
    assert_eq!(c.get(b"k").unwrap().unwrap(), b"v");
    eprintln!("honest shm client connected in {took:?} beside {n} silent sockets");
    let mode = std::fs::metadata(&path).map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777);
    assert_eq!(mode.unwrap(), 0o600, "the shm socket is for the server's own user");
}

#[test]
fn shm_a_response_buffer_the_client_could_shrink_is_refused() {
    // The server maps the file behind a client's response region to WRITE GET data into
    // it. A plain file (not a memfd sealed against shrinking) could be truncated under
    // that mapping, and the server's next copy would die of SIGBUS: it is refused, and
    // the client with it.
    let dir = tempfile::tempdir().unwrap();
    let s = shm_server(dir.path(), quiet());
    let t = ShmTransport::new().unwrap();
    let mut honest = Client::connect(&t, &s.endpoints()[0], opts()).unwrap();
    honest.put(b"k", b"value").unwrap();

    let f = tempfile::tempfile().unwrap();
    f.set_len(1 << 20).unwrap();
    let m = boomkv::pmem::Mapping::map_file(&f, 0, 1 << 20, false).unwrap();
    let buf = t
        .register(
            Arc::new(m),
            Some(Arc::new(f.try_clone().unwrap())),
            0,
            1 << 20,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .unwrap();
    let evil = Raw::connect_with(&t, &s.endpoints()[0], buf.clone());
    evil.qp.post_send_bytes(1, &Msg::Get { key: b"k".to_vec(), buf: buf.remote() }.encode(1)).unwrap();
    // The reply never lands: the connection closes instead.
    let mut landed = false;
    let end = Instant::now() + Duration::from_secs(5);
    while !evil.qp.is_error() && Instant::now() < end {
        if let Ok(c) = evil.cq.wait(Duration::from_millis(50)) {
            landed |= c.opcode == WcOpcode::RecvWithImm && c.status.is_ok();
        }
    }
    assert!(!landed, "the server wrote into an unsealed client file");
    assert!(evil.qp.is_error(), "the client with the unsealed file is disconnected");
    f.set_len(0).unwrap();
    // The server is alive and serves everyone else.
    assert_eq!(honest.get(b"k").unwrap().unwrap(), b"value");
    let mut fresh = Client::connect(&t, &s.endpoints()[0], opts()).unwrap();
    assert_eq!(fresh.get(b"k").unwrap().unwrap(), b"value");
}

/// A client that asks and never posts a receive for the answer. Its replies wait for a
/// receive (RNR) in its own queue pair; the worker that sent them goes on serving the
/// honest client beside it, which shares the only worker. The server's RNR timeout is
/// far longer than the honest client's: a worker that waited for the receive would make
/// every honest request time out.
fn no_receives<T: Transport>(client_t: &T, s: &Server<T>) {
    let ep = &s.endpoints()[0];
    let mut honest = Client::connect(client_t, ep, opts()).unwrap();
    honest.put(b"before", b"acknowledged").unwrap();
    for protocol in [Protocol::Rpc, Protocol::Boom] {
        let cq = client_t.create_cq().unwrap();
        let response = client_t.alloc_mr(1 << 20, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
        let hello = Hello { protocol, recv_size: 4096, response: response.remote() };
        let (qp, w) = client_t.connect(ep, &cq, &cq, &hello.encode(), Duration::from_secs(5)).unwrap();
        assert!(matches!(Welcome::decode(&w).unwrap(), Welcome::Accepted { .. }));
        let ask = match protocol {
            Protocol::Rpc => Msg::RpcGet { key: b"before".to_vec() },
            _ => Msg::Get { key: b"before".to_vec(), buf: response.remote() },
        };
        for i in 0..4u32 {
            qp.post_send_bytes(u64::from(i), &ask.encode(i + 1)).unwrap();
        }
        let t0 = Instant::now();
        for i in 0..50 {
            let k = format!("k{i}");
            honest.put(k.as_bytes(), b"v").unwrap();
            assert_eq!(honest.get(k.as_bytes()).unwrap().unwrap(), b"v", "{protocol:?} attacker beside");
        }
        assert_eq!(honest.get(b"before").unwrap().unwrap(), b"acknowledged");
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(20), "50 PUT+GET beside a {protocol:?} client without receives: {took:?}");
        drop(qp);
    }
}

#[test]
fn shm_a_client_without_receives_costs_the_others_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let slow_rnr = TransportConfig { rnr_timeout: Duration::from_secs(60), ..Default::default() };
    let ep = Endpoint::Shm(dir.path().join("iso.sock"));
    let cfg = ServerConfig { workers: 1, ..quiet() };
    let s = Server::start(ShmTransport::with_config(slow_rnr).unwrap(), pool(dir.path()), &[ep], cfg).unwrap();
    no_receives(&ShmTransport::new().unwrap(), &s);
}

#[test]
fn tcp_a_client_without_receives_costs_the_others_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let slow_rnr = TransportConfig { rnr_timeout: Duration::from_secs(60), ..Default::default() };
    let ep = Endpoint::parse("tcp://127.0.0.1:0").unwrap();
    let cfg = ServerConfig { workers: 1, ..quiet() };
    let s = Server::start(TcpTransport::with_config(slow_rnr).unwrap(), pool(dir.path()), &[ep], cfg).unwrap();
    no_receives(&TcpTransport::new().unwrap(), &s);
}

/// The request region of a HERD or RFP client, from its setup call.
fn rings<T: Transport>(raw: &mut Raw<T>) -> (u64, u32, u32, u64, u32) {
    match raw.call(&Msg::RingsReq) {
        Some(Msg::Rings { req_addr, req_rkey, req_len, res_addr, res_rkey, .. }) => {
            (req_addr, req_rkey, req_len, res_addr, res_rkey)
        }
        m => panic!("expected the regions, got {m:?}"),
    }
}

/// HERD and RFP: requests WRITTEN into memory the server polls. A client that leaves a
/// slot with the awaited sequence number, the largest length and a bad CRC is never
/// served from it and costs an honest client on the same worker nothing but time; its
/// WRITEs into another client's request region (or its own result region) are refused
/// and cost it its connection.
fn polled_slots<T: Transport>(t: &T, s: &Server<T>, p: Protocol) {
    let ep = &s.endpoints()[0];
    let mut victim = Client::connect(t, ep, ClientOptions { protocol: p, ..opts() }).unwrap();
    victim.put(b"victim", b"acknowledged").unwrap();
    let mut other = Raw::speaking(t, ep, p);
    let (v_addr, v_rkey, _, _, _) = rings(&mut other);

    let mut attacker = Raw::speaking(t, ep, p);
    let (addr, rkey, len, res_addr, res_rkey) = rings(&mut attacker);
    // A slot that claims to be request 1 with the longest payload, whose CRC is wrong.
    let mut forged = vec![0xa5u8; 64 << 10];
    forged[0..4].copy_from_slice(&1u32.to_le_bytes());
    forged[4..8].copy_from_slice(&(len - slot::HEADER as u32).to_le_bytes());
    attacker.buf.write(0, &forged).unwrap();
    assert!(attacker.write(addr, rkey, forged.len() as u32), "its own region takes the WRITE");
    // The honest client keeps its data and service (one worker serves both).
    let t0 = Instant::now();
    for i in 0..300 {
        let k = format!("k{i}");
        victim.put(k.as_bytes(), b"v").unwrap();
        assert_eq!(victim.get(k.as_bytes()).unwrap().unwrap(), b"v");
    }
    assert_eq!(victim.get(b"victim").unwrap().unwrap(), b"acknowledged");
    let honest = t0.elapsed();
    assert!(honest < Duration::from_secs(20), "300 PUT+GET beside the forged slot took {honest:?}");
    // Nothing came of the forged slot, and the attacker still gets an honest request
    // served once it writes one whole.
    let payload = Msg::RpcGet { key: b"nothing here".to_vec() }.encode(9);
    // RFP's in server-reply mode (the slot's protocol word 1), so its result is SENT too.
    let mode = u32::from(p == Protocol::Rfp);
    let mut whole = slot::encode(1, mode, &payload).to_vec();
    whole.extend_from_slice(&payload);
    attacker.buf.write(0, &whole).unwrap();
    assert!(attacker.write(addr, rkey, whole.len() as u32));
    assert!(matches!(attacker.next_msg(), Some(Msg::NotFound)), "a whole slot is served");
    if p == Protocol::Rfp {
        // A result mode no client asks for costs its sender the connection, no one
        // else anything.
        let mut a4 = Raw::speaking(t, ep, p);
        let (addr4, rkey4, ..) = rings(&mut a4);
        let mut odd = slot::encode(1, 7, &payload).to_vec();
        odd.extend_from_slice(&payload);
        a4.buf.write(0, &odd).unwrap();
        assert!(a4.write(addr4, rkey4, odd.len() as u32));
        let t0 = Instant::now();
        while !a4.qp.is_error() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(a4.qp.is_error(), "a request slot with result mode 7 closes the connection");
        assert_eq!(victim.get(b"victim").unwrap().unwrap(), b"acknowledged");
    }
    // Another client's request region, and the attacker's own result region (RFP), are
    // not writable by the attacker: the WRITE fails and the connection is lost.
    let mut a2 = Raw::speaking(t, ep, p);
    let _ = rings(&mut a2);
    assert!(!a2.write(v_addr, v_rkey, 64), "another client's request region");
    if p == Protocol::Rfp {
        let mut a3 = Raw::speaking(t, ep, p);
        let (_, _, _, r_addr, r_rkey) = rings(&mut a3);
        assert!(!a3.write(r_addr, r_rkey, 64), "a result region is read-only");
        assert!(res_addr != 0 && res_rkey != r_rkey);
    }
    assert_eq!(victim.get(b"victim").unwrap().unwrap(), b"acknowledged");
}

#[test]
fn shm_polled_request_slots_are_believed_only_whole() {
    let dir = tempfile::tempdir().unwrap();
    let s = shm_server(dir.path(), ServerConfig { workers: 1, ..quiet() });
    for p in [Protocol::Herd, Protocol::Rfp] {
        polled_slots(&ShmTransport::new().unwrap(), &s, p);
    }
}

#[test]
fn tcp_polled_request_slots_are_believed_only_whole() {
    let dir = tempfile::tempdir().unwrap();
    let s = tcp_server(dir.path(), ServerConfig { workers: 1, ..quiet() });
    for p in [Protocol::Herd, Protocol::Rfp] {
        polled_slots(&TcpTransport::new().unwrap(), &s, p);
    }
}

/// RDMP-CC: the client WRITEs its entry into the slot the server sealed for it and
/// FLUSHes it itself. An attacker that writes another value under the seal it was given
/// (or garbage, or nothing) is never counted or indexed: readers keep the last
/// acknowledged value, and the server keeps serving.
fn cc_forged_slot<T: Transport>(t: &T, s: &Server<T>) {
    use boomkv::log::format::{slot_size, value_crc, ENTRY_SEAL_OFF, ENTRY_VERSION_OFF};
    let ep = &s.endpoints()[0];
    let mut honest = Client::connect(t, ep, ClientOptions { protocol: Protocol::RdmpCc, ..opts() }).unwrap();
    honest.put(b"shared", b"acknowledged").unwrap();
    let mut attacker = Raw::speaking(t, ep, Protocol::RdmpCc);
    let claimed = b"what the allocation announced";
    let alloc = Msg::CcAlloc {
        key: b"shared".to_vec(),
        value_len: claimed.len() as u32,
        value_crc: value_crc(claimed),
        tomb: false,
    };
    let (addr, rkey, offset, version, seal) = match attacker.call(&alloc) {
        Some(Msg::CcPlaced { addr, rkey, offset, version, seal }) => (addr, rkey, offset, version, seal),
        m => panic!("expected a placement, got {m:?}"),
    };
    // Another value of the same length under the server's version and seal.
    let forged_value = b"what the attacker wrote instead";
    let mut e = entry(b"shared", &forged_value[..claimed.len()], offset + slot_size(6, claimed.len()));
    e[ENTRY_VERSION_OFF as usize..][..8].copy_from_slice(&version.to_le_bytes());
    e[ENTRY_SEAL_OFF as usize..][..8].copy_from_slice(&seal.to_le_bytes());
    attacker.buf.write(0, &e).unwrap();
    assert!(attacker.write(addr, rkey, e.len() as u32), "its own slot takes the WRITE");
    // A GET of the key checks the pending slot: it does not verify, so it is not indexed.
    assert_eq!(honest.get(b"shared").unwrap().unwrap(), b"acknowledged");
    // The attacker's next request settles its last PUT: not counted either.
    let again = Msg::CcAlloc { key: b"other".to_vec(), value_len: 1, value_crc: value_crc(b"x"), tomb: false };
    assert!(matches!(attacker.call(&again), Some(Msg::CcPlaced { .. })));
    assert_eq!(honest.get(b"shared").unwrap().unwrap(), b"acknowledged");
    honest.put(b"shared", b"second").unwrap();
    assert_eq!(honest.get(b"shared").unwrap().unwrap(), b"second");
}

#[test]
fn shm_rdmp_cc_a_value_forged_under_the_seal_is_never_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let s = shm_server(dir.path(), quiet());
    cc_forged_slot(&ShmTransport::new().unwrap(), &s);
}

#[test]
fn tcp_rdmp_cc_a_value_forged_under_the_seal_is_never_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let s = tcp_server(dir.path(), quiet());
    cc_forged_slot(&TcpTransport::new().unwrap(), &s);
}

/// A split GET of `key` (what a thread with several clients does), polled until it is
/// answered.
fn split_get<T: Transport>(c: &mut Client<T>, key: &[u8]) -> boomkv::Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    let mut found = c.get_start(key, &mut out)?;
    while found.is_none() {
        found = c.get_poll(key, &mut out)?;
    }
    Ok(found.unwrap_or(false).then_some(out))
}

/// pDPM-Direct: passive memory, so the table trusts its clients (the module docs say
/// so): a client can damage or lock any key in it. What the server still guarantees:
/// the table is the only memory a pDPM-Direct client reaches (a WRITE past it costs the
/// connection), nothing outside the table is touched (a BOOM client's data), a damaged
/// cell reads as an error, never as a value, a lock held forever makes writers of that
/// key fail after their timeout (naming the cell), and recovery releases every lock and
/// reports the damage without stopping.
fn pdpm_table<T: Transport>(t: &T, dir: &std::path::Path, s: Server<T>) {
    use boomkv::log::cells;
    let ep = s.endpoints()[0].clone();
    let mut boom = Client::connect(t, &ep, opts()).unwrap();
    boom.put(b"boom-key", b"boom-value").unwrap();
    let po = ClientOptions { protocol: Protocol::PdpmDirect, cells: 64, cell_value: 1000, ..opts() };
    let mut honest = Client::connect(t, &ep, po.clone()).unwrap();
    honest.put(b"shared", b"acknowledged").unwrap();
    honest.put(b"locked", b"before").unwrap();

    let mut attacker = Raw::speaking(t, &ep, Protocol::PdpmDirect);
    let (addr, rkey, geo) = attacker.cell_table();
    assert_eq!(geo.cells, 64, "the first client's geometry stands");
    // Past the table: refused, and the connection is gone.
    assert!(!attacker.write(addr + geo.bytes(), rkey, 64), "a WRITE past the table");

    let mut a2 = Raw::speaking(t, &ep, Protocol::PdpmDirect);
    // Its own region of the table (regions are bound to their connection).
    let (addr, rkey, _) = a2.cell_table();
    // Garbage over the committed slot of "shared" (its home cell: the table was empty).
    let shared = cells::home(b"shared", geo.cells);
    a2.buf.write(0, &[0xa5u8; 200]).unwrap();
    assert!(a2.write(addr + geo.committed_offset(shared), rkey, 200));
    let e = honest.get(b"shared").unwrap_err();
    assert!(matches!(e, boomkv::Error::Corrupt { .. }), "a damaged cell is an error, never a value: {e:?}");
    // The split GET (several clients per thread) takes the same way.
    let e = split_get(&mut honest, b"shared").unwrap_err();
    assert!(matches!(e, boomkv::Error::Corrupt { .. }), "split: {e:?}");
    // A lock taken and never released: writers of that key give up, naming the cell.
    let locked = cells::home(b"locked", geo.cells);
    assert_ne!(locked, shared);
    a2.buf.write(0, &cells::lock_word(1, 0xbeef).to_le_bytes()).unwrap();
    assert!(a2.write(addr + geo.lock_offset(locked), rkey, 8));
    let mut hurried =
        Client::connect(t, &ep, ClientOptions { timeout: Duration::from_millis(300), ..po.clone() }).unwrap();
    let e = hurried.put(b"locked", b"after").unwrap_err();
    assert!(e.to_string().contains(&format!("cell {locked} stayed locked")), "{e}");
    // A cell locked with its committed slot torn, for ever (a write in progress that
    // never ends): a GET reads again after back-offs and gives up after its timeout,
    // whole or split (the split one's back-off is a time to READ again from, polled,
    // not a sleep of the thread).
    let busy = cells::home(b"busy", geo.cells);
    assert!(![shared, locked].contains(&busy));
    honest.put(b"busy", b"x").unwrap();
    a2.buf.write(0, &[0x5au8; 200]).unwrap();
    assert!(a2.write(addr + geo.committed_offset(busy), rkey, 200));
    a2.buf.write(0, &cells::lock_word(1, 0xbeef).to_le_bytes()).unwrap();
    assert!(a2.write(addr + geo.lock_offset(busy), rkey, 8));
    for split in [false, true] {
        let torn = hurried.counters().torn_retries;
        let e = if split { split_get(&mut hurried, b"busy") } else { hurried.get(b"busy") }.unwrap_err();
        let gave_up = matches!(e, boomkv::Error::Timeout(..)) || e.to_string().contains("stayed locked");
        assert!(gave_up, "split {split}: {e:?}");
        assert!(hurried.counters().torn_retries > torn + 1, "split {split}: read again");
    }
    // A compare-and-swap the device executed twice (a retransmission it ran again, as
    // soft-RoCE does under load) returns the very word it installs: the writer takes
    // the lock as its own, writes, and releases it, instead of waiting on itself.
    let replayed = cells::home(b"replayed", geo.cells);
    assert!(![shared, locked].contains(&replayed));
    honest.put(b"replayed", b"one").unwrap();
    let mine = cells::lock_word(1, cells::holder_tag(honest.id()));
    a2.buf.write(0, &mine.to_le_bytes()).unwrap();
    assert!(a2.write(addr + geo.lock_offset(replayed), rkey, 8), "the first run of the compare-and-swap");
    honest.put(b"replayed", b"two").unwrap();
    assert_eq!(honest.counters().cas_replays, 1);
    assert_eq!(hurried.get(b"replayed").unwrap().unwrap(), b"two");
    hurried.put(b"replayed", b"three").expect("the lock was released");
    assert_eq!(honest.get(b"replayed").unwrap().unwrap(), b"three");
    // Readers are not blocked by a lock, and the rest of the table and pool serve on.
    assert_eq!(honest.get(b"locked").unwrap().unwrap(), b"before");
    honest.put(b"fresh", b"ok").unwrap();
    assert_eq!(honest.get(b"fresh").unwrap().unwrap(), b"ok");
    assert_eq!(boom.get(b"boom-key").unwrap().unwrap(), b"boom-value");
    drop((honest, hurried, boom, attacker, a2));
    s.shutdown();

    // Recovery: the lock is released, the damage reported, nothing else lost. A
    // read-only open first: it finds the locks held and releases none (it said 0
    // locks, as if none were held).
    let read_only = boomkv::pmem::MediaOptions { create: false, read_only: true, ..Default::default() };
    let ro = Pool::open(dir, &PoolOptions { media: read_only, ..Default::default() });
    let (_, rep) = ro.unwrap();
    assert_eq!((rep.cells.locks_held, rep.cells.locks_released), (2, 0), "{:?}", rep.cells);
    let (p, rep) = Pool::open(dir, &PoolOptions::default()).unwrap();
    assert_eq!(rep.cells.locks_released, 2, "{:?}", rep.cells);
    assert_eq!(rep.cells.locks_held, 2, "{:?}", rep.cells);
    assert_eq!(
        rep.cells.cells_restored, 2,
        "the uncommitted copies of \"shared\" and \"busy\" verify: {:?}",
        rep.cells
    );
    assert_eq!(
        p.cell_lookup(b"shared").map(|c| boomkv::log::format::entry_value(&c.entry, &c.header).to_vec()),
        Some(b"acknowledged".to_vec())
    );
    assert_eq!(
        p.cell_lookup(b"busy").map(|c| boomkv::log::format::entry_value(&c.entry, &c.header).to_vec()),
        Some(b"x".to_vec())
    );
    assert!(p.lookup(b"boom-key").is_some());
}

#[test]
fn shm_pdpm_direct_clients_reach_only_the_table_and_damage_reads_as_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let s = shm_server(dir.path(), quiet());
    pdpm_table(&ShmTransport::new().unwrap(), dir.path(), s);
}

#[test]
fn tcp_pdpm_direct_clients_reach_only_the_table_and_damage_reads_as_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let s = tcp_server(dir.path(), quiet());
    pdpm_table(&TcpTransport::new().unwrap(), dir.path(), s);
}

/// Clover: passive data, so the arena trusts its clients (the module docs say so). What
/// the server still guarantees: the arena is the only memory a Clover client reaches (a
/// WRITE past it costs the connection), a BOOM client's data is untouched, a damaged
/// version reads as an error, never as a value, and recovery walks past nothing it
/// cannot verify (the chain ends at the last version that does).
fn clover_arena<T: Transport>(t: &T, dir: &std::path::Path, s: Server<T>) {
    use boomkv::log::clover;
    let ep = s.endpoints()[0].clone();
    let mut boom = Client::connect(t, &ep, opts()).unwrap();
    boom.put(b"boom-key", b"boom-value").unwrap();
    let co = ClientOptions { protocol: Protocol::Clover, cells: 64, cell_value: 1000, clover_data: 1 << 20, ..opts() };
    let mut honest = Client::connect(t, &ep, co.clone()).unwrap();
    honest.put(b"shared", b"first").unwrap();
    let mut reader = Client::connect(t, &ep, co.clone()).unwrap();
    assert_eq!(reader.get(b"shared").unwrap().unwrap(), b"first");
    honest.put(b"shared", b"acknowledged").unwrap();
    // A split GET (several clients per thread) from a version the reader knows that is
    // not the newest any more walks on to the newest.
    assert_eq!(split_get(&mut reader, b"shared").unwrap().unwrap(), b"acknowledged");

    let mut attacker = Raw::speaking(t, &ep, Protocol::Clover);
    let (addr, rkey, a) = attacker.clover_arena();
    assert_eq!(a.heads, 64, "the first client's geometry stands");
    assert!(!attacker.write(addr + a.bytes(), rkey, 64), "a WRITE past the arena");

    // Garbage over the newest version of "shared" (found from its head's shortcut).
    let mut a2 = Raw::speaking(t, &ep, Protocol::Clover);
    let (addr, rkey, _) = a2.clover_arena();
    let p = s.pool().clone();
    let newest = p.clover_lookup(b"shared").expect("the key is in the arena");
    assert_eq!(newest.header.version, 2);
    a2.buf.write(0, &[0xa5u8; 100]).unwrap();
    assert!(a2.write(addr + newest.offset + clover::NEXT_LEN + 40, rkey, 100));
    let mut fresh = Client::connect(t, &ep, co.clone()).unwrap();
    let e = fresh.get(b"shared").unwrap_err();
    assert!(matches!(e, boomkv::Error::Corrupt { .. }), "a damaged version is an error, never a value: {e:?}");
    // Split, by a client that knows the damaged version as the newest: the same.
    let e = split_get(&mut honest, b"shared").unwrap_err();
    assert!(matches!(e, boomkv::Error::Corrupt { .. }), "split: {e:?}");
    // The rest of the arena and the pool serve on.
    fresh.put(b"other", b"ok").unwrap();
    assert_eq!(fresh.get(b"other").unwrap().unwrap(), b"ok");
    assert_eq!(boom.get(b"boom-key").unwrap().unwrap(), b"boom-value");
    drop((honest, reader, fresh, boom, attacker, a2, p));
    s.shutdown();
    // Recovery: the chain of "shared" ends at the version before the damage; no panic.
    let (p, rep) = Pool::open(dir, &PoolOptions::default()).unwrap();
    assert_eq!(rep.clover.keys, 2, "{:?}", rep.clover);
    let v = p.clover_lookup(b"shared").unwrap();
    assert_eq!(boomkv::log::format::entry_value(&v.entry, &v.header), b"first");
    assert!(p.lookup(b"boom-key").is_some());
}

#[test]
fn shm_clover_clients_reach_only_the_arena_and_damage_reads_as_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let s = shm_server(dir.path(), quiet());
    clover_arena(&ShmTransport::new().unwrap(), dir.path(), s);
}

#[test]
fn tcp_clover_clients_reach_only_the_arena_and_damage_reads_as_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let s = tcp_server(dir.path(), quiet());
    clover_arena(&TcpTransport::new().unwrap(), dir.path(), s);
}

/// Clover after a crash: a version whose link was lost (never acknowledged) stays in its
/// chunk, verifying, and the head's shortcut (written without a FLUSH) may still point at
/// it. Recovery must not let the next writer follow that shortcut and link its
/// acknowledged version after the orphan, outside the key's chain (the crash test found
/// this: "recovered version 7 but version 9 was acknowledged").
fn clover_orphan_behind_a_stale_shortcut<T: Transport>(
    t: &T,
    dir: &std::path::Path,
    server: fn(&std::path::Path, ServerConfig) -> Server<T>,
) {
    use boomkv::log::clover;
    let s = server(dir, quiet());
    let ep = s.endpoints()[0].clone();
    let co = ClientOptions { protocol: Protocol::Clover, cells: 64, cell_value: 1000, clover_data: 1 << 20, ..opts() };
    let mut honest = Client::connect(t, &ep, co.clone()).unwrap();
    honest.put(b"k", b"one").unwrap();
    let mut raw = Raw::speaking(t, &ep, Protocol::Clover);
    let (addr, rkey, a) = raw.clover_arena();
    // What the crash left: version 2 of "k", whole and verifying, in a chunk no chain
    // uses (its link never became durable), and the shortcut pointing at it.
    let orphan = a.chunk_offset(a.chunks - 1);
    let mut e = entry(b"k", b"never acknowledged", 0);
    clover::seal_version(&mut e, orphan, 2).unwrap();
    let mut v = vec![0u8; clover::NEXT_LEN as usize];
    v.extend_from_slice(&e);
    raw.buf.write(0, &v).unwrap();
    assert!(raw.write(addr + orphan, rkey, v.len() as u32));
    let head = a.head_offset(clover::home(b"k", a.heads));
    raw.buf.write(0, &orphan.to_le_bytes()).unwrap();
    assert!(raw.write(addr + head + clover::SHORTCUT_OFF, rkey, 8));
    drop((honest, raw));
    s.shutdown();

    // (The last client's leaving compacted the arena: recovery would do the same.)
    let s = server(dir, quiet());
    let mut c = Client::connect(t, &s.endpoints()[0], co).unwrap();
    let info = c.put(b"k", b"two").unwrap();
    assert_eq!(info.version, 2, "the write follows the key's newest linked version");
    drop(c);
    s.shutdown();
    let (p, _) = Pool::open(dir, &PoolOptions::default()).unwrap();
    let v = p.clover_lookup(b"k").unwrap();
    assert_eq!(boomkv::log::format::entry_value(&v.entry, &v.header), b"two", "the acknowledged write is in the chain");
}

#[test]
fn shm_clover_an_orphan_behind_a_stale_shortcut_never_takes_a_write() {
    let dir = tempfile::tempdir().unwrap();
    clover_orphan_behind_a_stale_shortcut(&ShmTransport::new().unwrap(), dir.path(), shm_server);
}

#[test]
fn tcp_clover_an_orphan_behind_a_stale_shortcut_never_takes_a_write() {
    let dir = tempfile::tempdir().unwrap();
    clover_orphan_behind_a_stale_shortcut(&TcpTransport::new().unwrap(), dir.path(), tcp_server);
}

/// The same attacks over verbs (`ci/check-rdma-vm.sh` runs them on soft-RoCE in a VM):
/// the device enforces them, through a type-2 memory window per region a client may use,
/// bound to that client's queue pair.
#[cfg(feature = "rdma")]
mod verbs {
    use super::*;
    use boomkv::transport::VerbsTransport;

    fn transport() -> VerbsTransport {
        VerbsTransport::from_env().expect("open the RDMA device named by BOOMKV_RDMA_DEVICE")
    }

    fn server(dir: &std::path::Path) -> Server<VerbsTransport> {
        // The handshake goes over loopback TCP; the queue pairs use the device's GID.
        let ep = Endpoint::Verbs("127.0.0.1:0".into());
        Server::start(transport(), pool(dir), &[ep], quiet()).unwrap()
    }

    #[test]
    #[ignore = "needs an RDMA device: BOOMKV_RDMA_DEVICE=rxe0 (ci/rdma-vm.sh)"]
    fn another_clients_rkey_is_refused_on_my_connection() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(dir.path());
        foreign_rkey(&transport(), &s, false);
        // Not asserted: whether the responder raises IBV_EVENT_QP_ACCESS_ERR is the device's.
        eprintln!("access violations the device reported to the server: {}", s.stats().access_violations);
    }

    #[test]
    #[ignore = "needs an RDMA device: BOOMKV_RDMA_DEVICE=rxe0 (ci/rdma-vm.sh)"]
    fn a_revoked_grants_rkey_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(dir.path());
        revoked_rkey(&transport(), &s);
    }

    #[test]
    #[ignore = "needs an RDMA device: BOOMKV_RDMA_DEVICE=rxe0 (ci/rdma-vm.sh)"]
    fn blind_rkey_probes_cost_a_connection_each() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(dir.path());
        blind_probe(&transport(), &s, 8);
    }
}
