//! The crash promise, checked by simulated power failures (a short run of what
//! `boomctl crashtest` does), for every protocol.

mod common;

use std::sync::Arc;

use boomkv::client::{Client, ClientOptions};
use boomkv::crashtest::{self, CrashTestOptions};
use boomkv::index::IndexKind;
use boomkv::log::{cells, clover, format::entry_value, Pool};
use boomkv::pmem::{FlushKind, Media};
use boomkv::server::{Server, ServerConfig};
use boomkv::transport::{Backend, Endpoint, MemoryRegion, ShmTransport};
use boomkv::wire::Protocol;

#[test]
fn simulated_power_failures_lose_nothing_acknowledged() {
    let t = ShmTransport::new().unwrap();
    for (i, p) in Protocol::ALL.into_iter().enumerate() {
        let o = CrashTestOptions { iterations: 12, seed: 1000 + 100 * i as u64, protocol: p, ..Default::default() };
        let r = crashtest::run(&t, Backend::Shm, &o, |_, _| {}).unwrap();
        assert_eq!(r.crashes, 12);
        assert!(r.acked_checked > 100, "{p}: the workload must acknowledge writes ({})", r.acked_checked);
        assert_eq!((r.lost, r.corrupted), (0, 0), "{p}: {:#?}", r.failures);
    }
}

/// A server over shm on a fresh pool on crash-simulating media (the socket in `dir`).
fn simulated_server(dir: &std::path::Path) -> (Arc<Pool>, Server<ShmTransport>) {
    let media = Media::simulated(16 << 20, FlushKind::None).unwrap();
    Pool::format(&media, 256 << 10).unwrap();
    let pool = Arc::new(Pool::from_media(media, IndexKind::Hash).unwrap().0);
    let cfg = ServerConfig { log_clients: false, cleaner: false, ..Default::default() };
    let s = Server::start(ShmTransport::new().unwrap(), pool.clone(), &[Endpoint::Shm(dir.join("s.sock"))], cfg);
    (pool, s.unwrap())
}

/// The pool recovered from what a power failure now would leave if no dirty line
/// survived (the simulator's durable image).
fn recover_durable(pool: &Pool) -> Pool {
    let img = pool.media().durable_image().unwrap();
    Pool::from_media(Media::simulated_from(&img, FlushKind::None).unwrap(), IndexKind::Hash).unwrap().0
}

/// Clover: a link is visible (its compare-and-swap) before it is durable (its FLUSH).
/// Another client that follows it in between must make it durable before its own
/// operation completes: a GET before returning what lies behind it, a PUT before its
/// acknowledgement. Here the first writer's link is never FLUSHed at all (it stalls
/// between the two), and the power fails with no dirty line surviving.
#[test]
fn clover_a_write_behind_another_writers_unflushed_link_survives() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, s) = simulated_server(dir.path());
    let (t, ep) = (ShmTransport::new().unwrap(), s.endpoints()[0].clone());
    let co = ClientOptions { protocol: Protocol::Clover, cells: 64, clover_data: 1 << 20, ..Default::default() };
    let recovered = |pool: &Pool| {
        let v = recover_durable(pool).clover_lookup(b"k").expect("the key survives");
        (v.header.version, entry_value(&v.entry, &v.header).to_vec())
    };

    let mut a = Client::connect(&t, &ep, co.clone()).unwrap();
    a.put(b"k", b"one").unwrap();
    assert_eq!(recovered(&pool), (1, b"one".to_vec()));

    // A second writer: its version 2 written and FLUSHed, then linked behind version 1
    // (the compare-and-swap's effect, a WRITE here), and stalled before its FLUSH.
    let mut w = common::Raw::speaking(&t, &ep, Protocol::Clover);
    let (addr, rkey, arena) = w.clover_arena();
    let v1 = pool.clover_lookup(b"k").unwrap().offset;
    let v2 = arena.chunk_offset(arena.chunks - 1);
    let mut e = common::entry(b"k", b"two", 0);
    clover::seal_version(&mut e, v2, 2).unwrap();
    let mut bytes = vec![0u8; clover::NEXT_LEN as usize];
    bytes.extend_from_slice(&e);
    w.buf.write(0, &bytes).unwrap();
    assert!(w.write(addr + v2, rkey, bytes.len() as u32));
    assert!(w.flush(addr + v2, rkey, bytes.len() as u32));
    w.buf.write(0, &v2.to_le_bytes()).unwrap();
    assert!(w.write(addr + v1, rkey, 8), "the link, not FLUSHed");
    assert_eq!(recovered(&pool).0, 1, "the stalled link is not durable");

    // A reader that walks past it: what it returns must survive.
    let mut r = Client::connect(&t, &ep, co.clone()).unwrap();
    assert_eq!(r.get(b"k").unwrap().unwrap(), b"two");
    assert_eq!(recovered(&pool), (2, b"two".to_vec()), "a GET returned a value a crash would take back");

    // The same for a writer (the link is made undone in the durable image by writing
    // version 1's `next` back to 0 and FLUSHing it, then stalled again).
    w.buf.write(0, &0u64.to_le_bytes()).unwrap();
    assert!(w.write(addr + v1, rkey, 8));
    assert!(w.flush(addr + v1, rkey, 8));
    w.buf.write(0, &v2.to_le_bytes()).unwrap();
    assert!(w.write(addr + v1, rkey, 8), "the link again, not FLUSHed");
    assert_eq!(recovered(&pool).0, 1);
    let mut b = Client::connect(&t, &ep, co).unwrap();
    let info = b.put(b"k", b"three").unwrap();
    assert_eq!(info.version, 3);
    assert_eq!(recovered(&pool), (3, b"three".to_vec()), "an acknowledged write a crash would take back");
    drop((a, r, b, w));
    s.shutdown();
}

/// pDPM-Direct: a GET reads the committed slot, which a writer may have written and not
/// yet FLUSHed (it holds the lock meanwhile); the uncommitted copy of that version was
/// FLUSHed first. What the GET returned must survive a power failure that keeps no dirty
/// line: recovery takes the newer uncommitted copy over the older committed slot.
#[test]
fn pdpm_direct_what_a_get_returned_survives() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, s) = simulated_server(dir.path());
    let (t, ep) = (ShmTransport::new().unwrap(), s.endpoints()[0].clone());
    let po = ClientOptions { protocol: Protocol::PdpmDirect, cells: 64, cell_value: 1000, ..Default::default() };
    let recovered = |pool: &Pool| {
        let c = recover_durable(pool).cell_lookup(b"k").expect("the key survives");
        entry_value(&c.entry, &c.header).to_vec()
    };
    let mut a = Client::connect(&t, &ep, po.clone()).unwrap();
    a.put(b"k", b"one").unwrap();
    assert_eq!(recovered(&pool), b"one");

    // A writer of version 2, stalled after its WRITE of the committed slot: the lock
    // held, the uncommitted slot written and FLUSHed, the committed slot only written.
    let mut w = common::Raw::speaking(&t, &ep, Protocol::PdpmDirect);
    let (addr, rkey, geo) = w.cell_table();
    let i = cells::home(b"k", geo.cells);
    let mut slot = common::entry(b"k", b"two", 0);
    cells::seal_slot(&mut slot, i, 2).unwrap();
    w.buf.write(0, &cells::lock_word(1, 0xbeef).to_le_bytes()).unwrap();
    assert!(w.write(addr + geo.lock_offset(i), rkey, 8));
    w.buf.write(0, &slot).unwrap();
    assert!(w.write(addr + geo.uncommitted_offset(i), rkey, slot.len() as u32));
    assert!(w.flush(addr + geo.uncommitted_offset(i), rkey, slot.len() as u32));
    assert!(w.write(addr + geo.committed_offset(i), rkey, slot.len() as u32), "not FLUSHed");

    let mut r = Client::connect(&t, &ep, po).unwrap();
    assert_eq!(r.get(b"k").unwrap().unwrap(), b"two");
    assert_eq!(recovered(&pool), b"two", "a GET returned a value a crash would take back");
    drop((a, r, w));
    s.shutdown();
}
