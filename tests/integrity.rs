//! Versions that cannot lie (issue 18, item 2): flipped bits in version fields, seals,
//! `count` and entry bodies, and hostile clients rewriting their own segments, never
//! make a stale value or a deleted key visible; damage is reported by `recover`,
//! `inspect-log` and the server's recovery.

mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use boomkv::client::{Client, ClientOptions};
use boomkv::index::{IndexKind, Loc};
use boomkv::log::format::{
    entry_checksum, slot_size, EntryHeader, Sealer, SegmentHeader, ENTRY_HEADER_SIZE, ENTRY_SEAL_OFF,
    ENTRY_VERSION_OFF, NO_SEGMENT, POOL_HEADER_SIZE, SEGMENT_HEADER_SIZE, SEG_COUNT_OFF, TOMBSTONE_OWNER,
};
use boomkv::log::{LocalWriter, Pool, PoolOptions, RecoveryReport};
use boomkv::pmem::{FlushKind, Media};
use boomkv::server::{Server, ServerConfig};
use boomkv::transport::{Endpoint, ShmTransport};
use boomkv::wire::{Msg, Protocol};
use common::entry;

// ---- the pool-corruption suite (library) ----

/// A small pool: `stale` written twice (old, then new), `gone` written then deleted,
/// `other` once, in one log. Returns the durable image and where each entry is.
struct Built {
    image: Vec<u8>,
    segment_size: u64,
    old: Loc,
    new: Loc,
    gone_put: Loc,
    gone_del: Loc,
}

fn build() -> Built {
    let media = Media::simulated(1 << 20, FlushKind::None).unwrap();
    Pool::format(&media, 64 << 10).unwrap();
    let (pool, _) = Pool::from_media(media, IndexKind::Hash).unwrap();
    // both halves of the version word in play
    pool.raise_version_floor((1 << 32) - 2);
    let mut w = LocalWriter::new(&pool);
    let old = w.append(b"stale", b"old value", false).unwrap().loc;
    let gone_put = w.append(b"gone", b"deleted value", false).unwrap().loc;
    let new = w.append(b"stale", b"new value", false).unwrap().loc;
    let gone_del = w.append(b"gone", b"", true).unwrap().loc;
    w.append(b"other", b"o", false).unwrap();
    Built { image: pool.media().durable_image().unwrap(), segment_size: 64 << 10, old, new, gone_put, gone_del }
}

fn entry_off(b: &Built, l: &Loc) -> usize {
    (POOL_HEADER_SIZE + l.segment as u64 * b.segment_size + l.offset as u64) as usize
}

fn reopen(image: &[u8]) -> (Pool, RecoveryReport) {
    Pool::from_media(Media::simulated_from(image, FlushKind::None).unwrap(), IndexKind::Hash).unwrap()
}

fn value_of(p: &Pool, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let Some(l) = p.lookup(key) else { return Ok(None) };
    let e = p.read_entry(&l).unwrap();
    let h = EntryHeader::decode(&e).map_err(|e| e.to_string())?;
    if entry_checksum(&e) != h.checksum {
        return Err("damaged".into());
    }
    Ok(Some(e[ENTRY_HEADER_SIZE as usize + h.key_len as usize..].to_vec()))
}

/// The promise: `stale` reads its last value, `gone` stays deleted, `other` is there.
fn assert_truth(p: &Pool, what: &str) {
    assert_eq!(value_of(p, b"stale"), Ok(Some(b"new value".to_vec())), "{what}");
    assert_eq!(value_of(p, b"gone"), Ok(None), "{what}: the deleted key came back");
    assert_eq!(value_of(p, b"other"), Ok(Some(b"o".to_vec())), "{what}");
}

#[test]
fn every_single_bit_flip_in_a_version_or_seal_word_is_repaired_and_reported() {
    let b = build();
    let (p, rep) = reopen(&b.image);
    assert_truth(&p, "untouched");
    assert_eq!(rep.damaged(), 0, "{rep:?}");
    for (name, l) in [("old", b.old), ("new", b.new), ("gone put", b.gone_put), ("gone del", b.gone_del)] {
        for word in [ENTRY_VERSION_OFF, ENTRY_SEAL_OFF] {
            for bit in 0..64 {
                let mut img = b.image.clone();
                img[entry_off(&b, &l) + word as usize + bit / 8] ^= 1 << (bit % 8);
                let (p, rep) = reopen(&img);
                let what = format!("{name} entry, word at {word}, bit {bit}");
                assert_truth(&p, &what);
                assert_eq!(rep.entries_repaired, 1, "{what}: {rep:?}");
                assert!(rep.damaged() >= 1, "{what}");
            }
        }
    }
}

#[test]
fn hostile_versions_in_old_entries_are_rejected_not_believed() {
    let b = build();
    // u64::MAX, the next version, and the newest version + 1 over superseded entries,
    // the way a client could write them: none is sealed, so none is believed.
    for v in [u64::MAX, b.new.version + 1, b.gone_del.version + 1, 1u64 << 55] {
        for l in [b.old, b.gone_put] {
            let mut img = b.image.clone();
            let o = entry_off(&b, &l) + ENTRY_VERSION_OFF as usize;
            img[o..o + 8].copy_from_slice(&v.to_le_bytes());
            let (p, rep) = reopen(&img);
            assert_truth(&p, &format!("version {v:#x} at segment {} offset {}", l.segment, l.offset));
            assert!(rep.damaged() >= 1 && rep.rejected() >= 1, "{rep:?}");
            assert!(rep.next_version > b.gone_del.version, "the counter never restarts below what was used");
            assert!(rep.next_version < 1 << 40, "and is not pushed up by a forged version: {rep:?}");
        }
    }
}

#[test]
fn every_single_bit_flip_in_count_is_detected_and_nothing_rolls_back() {
    let b = build();
    let seg = POOL_HEADER_SIZE as usize + b.new.segment as usize * b.segment_size as usize;
    let mut img = b.image.clone();
    for bit in 0..64 {
        img.copy_from_slice(&b.image);
        img[seg + SEG_COUNT_OFF as usize + bit / 8] ^= 1 << (bit % 8);
        let (p, rep) = reopen(&img);
        assert_truth(&p, &format!("count bit {bit}"));
        assert_eq!(rep.counts_damaged, 1, "bit {bit}");
        assert!(rep.problems.iter().any(|p| p.contains("count word")), "{:?}", rep.problems);
    }
    // a sealed segment whose count reads 0, or any value its check does not cover
    for word in [0u64, 1, 3, u64::MAX] {
        img.copy_from_slice(&b.image);
        img[seg + SEG_COUNT_OFF as usize..][..8].copy_from_slice(&word.to_le_bytes());
        let (p, rep) = reopen(&img);
        assert_truth(&p, &format!("count word {word:#x}"));
        assert_eq!(rep.counts_damaged, 1);
        assert!(rep.problems.iter().any(|p| p.contains("walked by their links")), "{:?}", rep.problems);
    }
}

#[test]
fn a_flipped_bit_in_the_newest_value_reads_as_damaged_never_as_the_older_value() {
    let b = build();
    let start = entry_off(&b, &b.new) + ENTRY_HEADER_SIZE as usize + 5;
    for i in 0..b"new value".len() * 8 {
        let mut img = b.image.clone();
        img[start + i / 8] ^= 1 << (i % 8);
        let (p, rep) = reopen(&img);
        assert_eq!(value_of(&p, b"stale"), Err("damaged".into()), "bit {i}: never the old value");
        assert!(rep.damaged() >= 1);
        assert!(rep.problems.iter().any(|p| p.contains("stale") && p.contains("damaged")), "{:?}", rep.problems);
        assert_eq!(value_of(&p, b"gone"), Ok(None));
        if i == 0 {
            // inspect-log shows the damaged entry with the lengths its header holds
            // (its value length read 0).
            let f = boomkv::log::inspect::InspectFilter { key: Some(b"stale".to_vec()), ..Default::default() };
            let ins = boomkv::log::inspect::inspect(&p, &rep, &f);
            let row = ins.entries.iter().find(|e| e.status == "damaged").expect("a damaged row");
            assert_eq!(row.value_len, b"new value".len() as u64, "{row:?}");
        }
    }
    // a flip in an older entry's body just rejects that entry
    let mut img = b.image.clone();
    img[entry_off(&b, &b.old) + ENTRY_HEADER_SIZE as usize + 7] ^= 4;
    let (p, rep) = reopen(&img);
    assert_truth(&p, "old body");
    assert!(rep.damaged() >= 1);
}

// ---- hostile clients rewriting their own segments (shm transport) ----

fn open_pool(dir: &std::path::Path) -> (Pool, RecoveryReport) {
    let mut o = PoolOptions { segment_size: 256 << 10, ..Default::default() };
    o.media.create_size = Some(8 << 20);
    Pool::open(dir, &o).unwrap()
}

fn start(dir: &std::path::Path, pool: Pool) -> Server<ShmTransport> {
    start_with(dir, pool, ServerConfig { log_clients: false, cleaner: false, ..Default::default() })
}

fn start_with(dir: &std::path::Path, pool: Pool, cfg: ServerConfig) -> Server<ShmTransport> {
    let ep = Endpoint::Shm(dir.join("integrity.sock"));
    let _ = std::fs::remove_file(dir.join("integrity.sock"));
    Server::start(ShmTransport::new().unwrap(), Arc::new(pool), &[ep], cfg).unwrap()
}

fn client(s: &Server<ShmTransport>) -> Client<ShmTransport> {
    let o = ClientOptions { timeout: Duration::from_secs(5), ..Default::default() };
    Client::connect(&ShmTransport::new().unwrap(), &s.endpoints()[0], o).unwrap()
}

/// A hand-driven BOOM client that writes whatever it likes into its own segment.
type Raw = common::Raw<ShmTransport>;

fn raw_client(s: &Server<ShmTransport>) -> Raw {
    Raw::connect(&ShmTransport::new().unwrap(), &s.endpoints()[0])
}

#[test]
fn a_client_writing_u64_max_over_its_acknowledged_version_cannot_freeze_later_puts() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, _) = open_pool(dir.path());
    let s = start(dir.path(), pool);
    let mut raw = raw_client(&s);
    let seg = raw.grant();
    let at = SEGMENT_HEADER_SIZE;
    raw.put(&seg, at, b"k", b"old");
    raw.write_at(&seg, at + ENTRY_VERSION_OFF, &u64::MAX.to_le_bytes());
    drop(raw);
    s.shutdown();
    // restart on the same pool
    let (pool, rep) = open_pool(dir.path());
    assert!(rep.damaged() >= 1, "the overwritten version is reported: {rep:?}");
    assert!(rep.next_version < 1 << 40, "the counter is not pushed to the end: {rep:?}");
    let s = start(dir.path(), pool);
    let mut c = client(&s);
    let v = c.put(b"k", b"new").unwrap().version;
    assert!(v > 1, "version {v}");
    assert_eq!(c.get(b"k").unwrap().unwrap(), b"new");
    c.put(b"k", b"newer").unwrap();
    drop(c);
    s.shutdown();
    let (pool, _) = open_pool(dir.path());
    let s = start(dir.path(), pool);
    assert_eq!(client(&s).get(b"k").unwrap().unwrap(), b"newer", "and after another restart");
}

#[test]
fn forged_entries_in_a_clients_own_segment_never_beat_another_clients_acknowledged_entry() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, _) = open_pool(dir.path());
    let s = start(dir.path(), pool);
    let mut victim = client(&s);
    let victim_v = victim.put(b"victim", b"real").unwrap().version;
    victim.put(b"deleted", b"was").unwrap();
    victim.delete(b"deleted").unwrap();
    let mut raw = raw_client(&s);
    let seg = raw.grant();
    let at = SEGMENT_HEADER_SIZE;
    let mine = raw.put(&seg, at, b"mine", b"1");
    // In place over its own counted slot: the victim's key with a version just above
    // the victim's (below the high-water mark), a valid checksum and a guessed seal.
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut forged = |key: &[u8], value: &[u8], at: u64, version: u64| {
        let mut e = entry(key, value, at + slot_size(key.len(), value.len()));
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        e[ENTRY_VERSION_OFF as usize..][..8].copy_from_slice(&version.to_le_bytes());
        e[ENTRY_SEAL_OFF as usize..][..8].copy_from_slice(&rng.to_le_bytes());
        e
    };
    let e = forged(b"victim", b"forged", at, victim_v + 1);
    raw.write_at(&seg, at, &e);
    // and a thousand more past its tail, with its count word zeroed so that recovery
    // walks them all by their links
    let mut off = at + slot_size(6, 6);
    for i in 0..1000u64 {
        let (k, v): (&[u8], &[u8]) = if i % 2 == 0 { (b"victim", b"forged") } else { (b"deleted", b"back") };
        let e = forged(k, v, off, victim_v + 1 + i % 7);
        raw.write_at(&seg, off, &e);
        off += slot_size(k.len(), v.len());
    }
    raw.write_at(&seg, SEG_COUNT_OFF, &0u64.to_le_bytes());
    assert_eq!(victim.get(b"victim").unwrap().unwrap(), b"real", "the running server never believed it");
    drop((raw, victim));
    s.shutdown();
    let (pool, rep) = open_pool(dir.path());
    assert!(rep.entries_rejected.get("bad seal").copied().unwrap_or(0) >= 1000, "{rep:?}");
    assert!(rep.damaged() >= 1000);
    assert!(rep.next_version > mine);
    let s = start(dir.path(), pool);
    let mut c = client(&s);
    assert_eq!(c.get(b"victim").unwrap().unwrap(), b"real");
    assert_eq!(c.get(b"deleted").unwrap(), None);
}

#[test]
fn a_client_rewriting_its_segment_header_cannot_pass_it_off_as_the_servers() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, _) = open_pool(dir.path());
    let s = start(dir.path(), pool);
    let mut victim = client(&s);
    victim.put(b"victim", b"real").unwrap();
    let mut raw = raw_client(&s);
    let seg = raw.grant();
    raw.put(&seg, SEGMENT_HEADER_SIZE, b"mine", b"1");
    // a first line with a valid checksum, claiming the server's tombstone log, far on
    let h = SegmentHeader { segment_id: 1, owner: TOMBSTONE_OWNER, prev: NO_SEGMENT, log_seq: 1 << 40, generation: 1 };
    let forged = h.encode(&Sealer::new(&[0x55; 16]));
    raw.write_at(&seg, 0, &forged);
    drop((raw, victim));
    s.shutdown();
    let (pool, rep) = open_pool(dir.path());
    assert_eq!(rep.segments_damaged, 1, "{rep:?}");
    assert!(rep.problems.iter().any(|p| p.contains("seal mismatch")), "{:?}", rep.problems);
    assert!(!rep.segments_per_client.contains_key(&TOMBSTONE_OWNER));
    let s = start(dir.path(), pool);
    let mut c = client(&s);
    assert_eq!(c.get(b"victim").unwrap().unwrap(), b"real");
    c.delete(b"victim").unwrap();
    assert_eq!(c.get(b"victim").unwrap(), None);
}

#[test]
fn max_value_is_enforced_by_the_server_for_boom_and_rdmp() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, _) = open_pool(dir.path());
    let cfg = ServerConfig { log_clients: false, cleaner: false, max_value: 100, ..Default::default() };
    let s = start_with(dir.path(), pool, cfg);
    let too_large = |m: Option<Msg>| matches!(m, Some(Msg::Error { code: boomkv::wire::ErrorCode::TooLarge, .. }));
    // BOOM: the entry is in the client's segment; the commit refuses it
    let mut raw = raw_client(&s);
    let seg = raw.grant();
    let at = SEGMENT_HEADER_SIZE;
    assert!(too_large(raw.put_msg(&seg, at, b"big", &[1u8; 101])));
    raw.put(&seg, at, b"small", &[1u8; 100]);
    // RDMP: the allocation is refused before anything is written
    let mut rdmp = Raw::speaking(&ShmTransport::new().unwrap(), &s.endpoints()[0], Protocol::Rdmp);
    let len = ENTRY_HEADER_SIZE as u32 + 1024 + 101;
    assert!(too_large(rdmp.call(&Msg::Alloc { len })), "RDMP allocation over --max-value");
    assert!(matches!(rdmp.call(&Msg::Alloc { len: len - 1 }), Some(Msg::Allocated { .. })));
    let mut c = client(&s);
    assert_eq!(c.get(b"big").unwrap(), None, "never committed");
    assert_eq!(c.get(b"small").unwrap().unwrap(), vec![1u8; 100]);
    assert_eq!(s.stats().puts, 1);
}

// ---- the same through the command line: recover, inspect-log, serve + get ----

fn boomctl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_boomctl"))
}

#[test]
fn recover_inspect_log_and_serve_report_damage_and_serve_the_last_value() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("boomkv.pool");
    let (stale_old, gone_put, seg_size) = {
        let mut o = PoolOptions { segment_size: 64 << 10, ..Default::default() };
        o.media.create_size = Some(4 << 20);
        o.media.flush = Some(FlushKind::None);
        let (pool, _) = Pool::open(&path, &o).unwrap();
        let mut w = LocalWriter::new(&pool);
        let old = w.append(b"stale", b"old value", false).unwrap().loc;
        let gp = w.append(b"gone", b"deleted value", false).unwrap().loc;
        w.append(b"stale", b"new value", false).unwrap();
        w.append(b"gone", b"", true).unwrap();
        (old, gp, pool.segment_size())
    };
    // one flipped high bit in each superseded entry's version: both now look newest
    let mut img = std::fs::read(&path).unwrap();
    for l in [stale_old, gone_put] {
        let o = (POOL_HEADER_SIZE + l.segment as u64 * seg_size + l.offset as u64 + ENTRY_VERSION_OFF) as usize;
        img[o + 5] ^= 0x10;
    }
    std::fs::write(&path, &img).unwrap();
    let out = boomctl().args(["recover", "--pmem"]).arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    // The report is printed in full, and the exit status says damage was found.
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("holds damage (2 found; the report's `damage` and `problem` lines say"), "{err}");
    assert!(text.contains("damage      2 found: 2 entries repaired"), "{text}");
    assert!(text.contains("keys        1 live, 1 deleted"), "{text}");
    // Each repaired entry is named where it is, as the error line says.
    for key in ["stale", "gone"] {
        assert!(
            text.lines().any(|l| l.starts_with("problem ")
                && l.contains(&format!("key {key} version"))
                && l.contains("one flipped bit in its version or seal word, repaired")),
            "{key}: {text}"
        );
    }
    // A reader that stops reading (`recover --keys | head`) does not hide the damage:
    // the status is still 3 (a closed pipe alone ends with 0).
    for args in [&["recover", "--keys"][..], &["recover", "--json"]] {
        let mut child = boomctl().args(args).arg("--pmem").arg(&path).stdout(Stdio::piped()).spawn().unwrap();
        drop(child.stdout.take());
        assert_eq!(child.wait().unwrap().code(), Some(3), "{args:?}");
    }
    let out = boomctl().args(["inspect-log", "--entries", "--pmem"]).arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("2 damaged (2 repaired)"), "{text}");
    assert_eq!(text.matches("superseded (repaired)").count(), 2, "{text}");
    // inspect-log's status says so too, as recover's does, whatever part of the pool
    // it shows: a key with no damaged entry, or the JSON.
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    for args in [&["inspect-log", "--key", "nosuchkey"][..], &["inspect-log", "--json"]] {
        let out = boomctl().args(args).arg("--pmem").arg(&path).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {err}");
        assert!(err.contains("holds damage (2 found;"), "{args:?}: {err}");
        assert!(!out.stdout.is_empty(), "{args:?}: the report was printed");
    }
    // --repair writes the true words back: that run found the damage (3), and the
    // next finds none (it found the same flips for ever before).
    let copy = dir.path().join("copy.pool");
    std::fs::copy(&path, &copy).unwrap();
    let out = boomctl().args(["recover", "--repair", "--pmem"]).arg(&copy).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert_eq!(text.matches("version and seal words rewritten").count(), 2, "{text}");
    let out = boomctl().args(["recover", "--pmem"]).arg(&copy).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("damage      0 found") && text.contains("keys        1 live, 1 deleted"), "{text}");
    // serve it and read through a client
    let sock = dir.path().join("s.sock");
    let mut child = boomctl()
        .args(["serve", "--stats-interval", "0", "--pmem"])
        .arg(&path)
        .args(["--listen", &format!("shm:{}", sock.display())])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = format!("shm:{}", sock.display());
    let t0 = Instant::now();
    while boomctl().args(["stats", "--server", &server]).output().unwrap().status.code() != Some(0) {
        assert!(t0.elapsed() < Duration::from_secs(20), "server did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let get = |k: &str| boomctl().args(["get", "--server", &server, k]).output().unwrap();
    let stale = get("stale");
    let gone = get("gone");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(stale.stdout, b"new value");
    assert_eq!(gone.status.code(), Some(1), "{}", String::from_utf8_lossy(&gone.stdout));
    // The server's own open repaired the words too.
    let out = boomctl().args(["recover", "--pmem"]).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
}
