//! Recovery tests: round trips through real pool files, a model-checked crash property,
//! and a corrupt-pool suite.

use std::collections::HashMap;

use proptest::prelude::*;

use super::format::*;
use super::*;
use crate::error::ErrorCode;
use crate::pmem::{CrashOptions, FlushKind, Media};

/// An empty pool of `len` bytes in 64 KiB segments, in simulated media.
pub(super) fn empty_pool(len: u64) -> Pool {
    let media = Media::simulated(len, FlushKind::None).unwrap();
    Pool::format(&media, 64 << 10).unwrap();
    Pool::from_media(media, Default::default()).unwrap().0
}

fn value_of(pool: &Pool, key: &[u8]) -> Option<Vec<u8>> {
    let loc = pool.lookup(key)?;
    let e = pool.read_entry(&loc).ok()?;
    let h = EntryHeader::decode(&e).ok()?;
    Some(e[(ENTRY_HEADER_SIZE as usize + h.key_len as usize)..].to_vec())
}

fn small_opts(dir: &Path) -> (std::path::PathBuf, PoolOptions) {
    let mut o = PoolOptions { segment_size: 64 << 10, ..Default::default() };
    o.media.create_size = Some(4 << 20);
    (dir.join("p.pool"), o)
}

#[test]
fn reopen_recovers_last_values_tombstones_and_counters() {
    let dir = tempfile::tempdir().unwrap();
    let (path, opts) = small_opts(dir.path());
    {
        let (pool, rep) = Pool::open(&path, &opts).unwrap();
        assert_eq!(rep.keys, 0);
        let mut w = LocalWriter::new(&pool);
        for round in 0..3u8 {
            for i in 0..500u32 {
                w.append(format!("key{i}").as_bytes(), &vec![round; (i % 300) as usize], false).unwrap();
            }
        }
        w.append(b"key7", b"", true).unwrap();
        assert!(pool.space_report().bytes_appended > 0);
    }
    let (pool, rep) = Pool::open(&path, &opts).unwrap();
    assert_eq!(rep.keys, 499);
    assert_eq!(rep.tombstones, 1);
    assert_eq!(rep.entries_valid, 1501);
    assert_eq!(rep.entries_superseded, 1001, "key7: three puts and the tombstone");
    assert_eq!(rep.rejected(), 0);
    assert_eq!(rep.next_version, rep.version_hwm, "the counter restarts at the durable mark");
    assert!(rep.version_hwm > 1501);
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert!(rep.garbage_bytes > 0 && rep.live_bytes > 0);
    assert_eq!(value_of(&pool, b"key3").unwrap(), vec![2u8; 3]);
    assert!(value_of(&pool, b"key7").is_none());
    // new writes after recovery get higher versions and a fresh client id
    let mut w = LocalWriter::new(&pool);
    let c = w.append(b"key3", b"new", false).unwrap();
    assert!(c.version >= 1502);
    assert_eq!(value_of(&pool, b"key3").unwrap(), b"new");
    assert_eq!(rep.segments_per_client.len(), 1);
    assert!(*rep.segments_per_client.values().next().unwrap() > 1, "the log spans several linked segments");
}

#[test]
fn in_place_rewrite_is_recovered_and_counted() {
    let pool = empty_pool(2 << 20);
    let mut w = LocalWriter::new(&pool);
    let a = w.append(b"k", &[1u8; 100], false).unwrap();
    let _b = w.append(b"k", &[2u8; 100], false).unwrap();
    let c = w.rewrite(a.loc.offset as u64, b"k", &[3u8; 90], false).unwrap();
    assert_eq!(c.loc.offset, a.loc.offset);
    assert_eq!(value_of(&pool, b"k").unwrap(), vec![3u8; 90]);
    let sp = pool.space_report();
    assert_eq!(sp.entries_in_place, 1);
    assert_eq!(sp.entries_appended, 2);
    let img = pool.media().durable_image().unwrap();
    let (p2, rep) =
        Pool::from_media(Media::simulated_from(&img, FlushKind::None).unwrap(), Default::default()).unwrap();
    assert_eq!(value_of(&p2, b"k").unwrap(), vec![3u8; 90]);
    assert_eq!(rep.entries_valid, 2);
    // too big for the slot, or not a slot: refused
    assert!(w.rewrite(a.loc.offset as u64, b"k", &[3u8; 200], false).is_err());
    assert!(w.rewrite(a.loc.offset as u64 + 8, b"k", &[3u8; 8], false).is_err());
}

#[derive(Clone, Debug)]
enum Op {
    Put { writer: usize, key: u8, len: u16 },
    Del { writer: usize, key: u8 },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, 0..12u8, 0..400u16).prop_map(|(writer, key, len)| Op::Put { writer, key, len }),
        1 => (0..3usize, 0..12u8).prop_map(|(writer, key)| Op::Del { writer, key }),
    ]
}

/// Per writer and key: (first, second) slots in the writer's current segment.
type Hybrid = HashMap<(usize, u8), (u64, Option<u64>)>;

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// Random appends, in-place rewrites and tombstones from three client logs; a power
    /// failure at a random point (possibly in the middle of an un-acknowledged write);
    /// recovery must equal the model of acknowledged writes.
    #[test]
    fn crash_recovery_matches_model(ops in proptest::collection::vec(op_strategy(), 1..120),
                                    crash_at in 0usize..120, mid_op in any::<bool>(),
                                    seed in any::<u64>(), tear in any::<bool>()) {
        let pool = empty_pool(1 << 20);
        let mut writers: Vec<LocalWriter> = (0..3).map(|_| LocalWriter::new(&pool)).collect();
        let mut hybrid: Hybrid = HashMap::new();
        let mut model: HashMap<u8, Option<Vec<u8>>> = HashMap::new();
        let mut in_flight: Option<(u8, Option<Vec<u8>>)> = None;
        let crash_at = crash_at.min(ops.len());
        for (i, op) in ops.iter().enumerate() {
            let (writer, key, value, tomb) = match op {
                Op::Put { writer, key, len } => (*writer, *key, vec![i as u8; *len as usize], false),
                Op::Del { writer, key } => (*writer, *key, Vec::new(), true),
            };
            let kb = [b'k', key];
            if i == crash_at && mid_op {
                // The client's WRITE landed (partly cached), the server never acknowledged it.
                let seg = writers[writer].segment().cloned();
                if let Some(s) = seg {
                    let slot = slot_size(2, value.len());
                    if s.tail + slot <= pool.segment_size() {
                        let mut buf = vec![0u8; ENTRY_HEADER_SIZE as usize + 2 + value.len()];
                        encode_entry(&mut buf, &kb, &value, tomb, s.tail + slot).unwrap();
                        pool.media().map().write(pool.pool_offset(s.id, s.tail), &buf).unwrap();
                        in_flight = Some((key, if tomb { None } else { Some(value.clone()) }));
                    }
                }
            }
            if i == crash_at {
                break;
            }
            let seg_before = writers[writer].segment().map(|s| s.id);
            let h = hybrid.get(&(writer, key)).copied();
            let fits = |off: u64| {
                writers[writer].segment().and_then(|s| s.slot_end(off)).is_some_and(|end| {
                    ENTRY_HEADER_SIZE + 2 + value.len() as u64 <= end - off
                })
            };
            let c = match h {
                Some((first, Some(second))) if fits(second) => {
                    let c = writers[writer].rewrite(second, &kb, &value, tomb).unwrap();
                    hybrid.insert((writer, key), (second, Some(first)));
                    c
                }
                _ => {
                    let c = writers[writer].append(&kb, &value, tomb).unwrap();
                    if writers[writer].segment().map(|s| s.id) != seg_before {
                        hybrid.retain(|(w, _), _| *w != writer);
                    }
                    let prev = hybrid.get(&(writer, key)).map(|p| p.0);
                    hybrid.insert((writer, key), (c.loc.offset as u64, prev));
                    c
                }
            };
            prop_assert!(c.version > 0);
            model.insert(key, if tomb { None } else { Some(value) });
        }
        let img = pool.media().crash_image(&CrashOptions { seed, keep_probability: 0.5, tear }).unwrap();
        let (rec, rep) = Pool::from_media(Media::simulated_from(&img, FlushKind::None).unwrap(), Default::default()).unwrap();
        prop_assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        for key in 0..12u8 {
            let got = value_of(&rec, &[b'k', key]);
            let want = model.get(&key).cloned().flatten();
            let alt = in_flight.as_ref().filter(|(k, _)| *k == key).map(|(_, v)| v.clone());
            prop_assert!(got == want || alt.as_ref().is_some_and(|a| *a == got),
                "key {}: recovered {:?}, acknowledged {:?}, in flight {:?}", key,
                got.as_ref().map(Vec::len), want.as_ref().map(Vec::len), alt);
        }
    }
}

// ---- corrupt pools: recovery reports damage and never panics ----

fn filled_pool_bytes() -> Vec<u8> {
    filled_pool_bytes_of(FORMAT_VERSION)
}

/// A pool of format `version` that this build wrote.
fn filled_pool_bytes_of(version: u32) -> Vec<u8> {
    let media = Media::simulated(1 << 20, FlushKind::None).unwrap();
    Pool::format_as(&media, 64 << 10, version).unwrap();
    let (pool, _) = Pool::from_media(media, Default::default()).unwrap();
    let mut w1 = LocalWriter::new(&pool);
    let mut w2 = LocalWriter::new(&pool);
    for i in 0..400u32 {
        w1.append(format!("a{i}").as_bytes(), &[1u8; 200], false).unwrap();
        w2.append(format!("b{}", i % 50).as_bytes(), &[2u8; 100], i % 7 == 0).unwrap();
    }
    pool.media().durable_image().unwrap()
}

fn recover_image(img: &[u8]) -> Result<(Pool, RecoveryReport)> {
    Pool::from_media(Media::simulated_from(img, FlushKind::None)?, Default::default())
}

#[test]
fn corrupt_headers_are_clear_errors() {
    let img = filled_pool_bytes();
    let mut bad = img.clone();
    bad[0] = b'X';
    assert!(recover_image(&bad).unwrap_err().to_string().contains("not a BOOM-KV pool"));
    let mut bad = img.clone();
    bad[45] ^= 0xff;
    assert!(recover_image(&bad).unwrap_err().to_string().contains("checksum"));
    assert!(recover_image(&img[..300_000]).unwrap_err().to_string().contains("truncated"));
    assert!(recover_image(&vec![0u8; 1 << 20]).is_err());
}

#[test]
fn bad_counts_and_links_are_reported() {
    let img = filled_pool_bytes();
    let (_, clean) = recover_image(&img).unwrap();
    assert!(clean.problems.is_empty());
    let seg0 = POOL_HEADER_SIZE as usize;
    // count far beyond the slots
    let mut bad = img.clone();
    let count = seg0 + SEG_COUNT_OFF as usize;
    bad[count..count + SEG_WORD_LEN].copy_from_slice(&u64::MAX.to_le_bytes());
    let (_, rep) = recover_image(&bad).unwrap();
    assert!(rep.problems.iter().any(|p| p.contains("count") || p.contains("next_offset")), "{:?}", rep.problems);
    // a cycle: segment 0's header claims segment 0 as prev (rewrite with a valid checksum)
    let mut bad = img.clone();
    let sealer = PoolHeader::decode(&bad[..POOL_HEADER_LEN], bad.len() as u64).unwrap().sealer();
    let mut h = SegmentHeader::decode(&bad[seg0..seg0 + SEG_FIXED_LEN], &sealer).unwrap();
    h.prev = 0;
    bad[seg0..seg0 + SEG_FIXED_LEN].copy_from_slice(&h.encode(&sealer));
    let (_, rep) = recover_image(&bad).unwrap();
    assert!(rep.keys > 0);
    // a damaged (allocated but bad checksum) segment header is quarantined
    let mut bad = img.clone();
    bad[seg0 + 30] ^= 1;
    let (_, rep) = recover_image(&bad).unwrap();
    assert_eq!(rep.segments_damaged, 1);
    assert!(rep.keys < clean.keys);
    // a broken next_offset stops the walk of that segment only
    let mut bad = img.clone();
    let first = seg0 + SEGMENT_HEADER_SIZE as usize;
    let n = first + ENTRY_NEXT_OFF as usize;
    bad[n..n + 8].copy_from_slice(&3u64.to_le_bytes());
    let (_, rep) = recover_image(&bad).unwrap();
    assert!(rep.problems.iter().any(|p| p.contains("unreachable")), "{:?}", rep.problems);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]
    #[test]
    fn random_corruption_never_panics(flips in proptest::collection::vec((4096usize..(1 << 20), any::<u8>()), 1..64),
                                      zero_from in proptest::option::of(4096usize..(1 << 20))) {
        static IMG: OnceLock<Vec<u8>> = OnceLock::new();
        let mut img = IMG.get_or_init(filled_pool_bytes).clone();
        for (at, x) in flips {
            img[at] ^= x | 1;
        }
        if let Some(z) = zero_from {
            img[z..].fill(0);
        }
        let (pool, rep) = recover_image(&img).unwrap();
        // whatever was accepted passes its checksum, except values reported damaged
        // under a valid seal (indexed so that no older value takes their place)
        let mut n = 0;
        let mut bad = 0;
        pool.index().for_each(|l| {
            let e = pool.read_entry(l).unwrap();
            if Some(entry_checksum(&e)) != stored_checksum(&e) {
                bad += 1;
            }
            n += 1;
        });
        prop_assert_eq!(n as u64, rep.keys + rep.tombstones);
        let reported = rep.entries_rejected.get(recovery::DAMAGED_VALUE).copied().unwrap_or(0);
        prop_assert!(bad <= reported, "{} indexed entries fail their checksum, {} reported", bad, reported);
    }
}

#[test]
fn versions_are_leased_in_blocks_and_never_restart_below_the_mark() {
    let media = Media::simulated(1 << 20, FlushKind::None).unwrap();
    Pool::format(&media, 64 << 10).unwrap();
    let (pool, rep) = Pool::from_media(media, Default::default()).unwrap();
    assert_eq!((rep.next_version, rep.version_hwm), (1, 1));
    let fences0 = pool.media().flush_counts().fences;
    let first = pool.next_version().unwrap();
    assert_eq!(first, 1);
    assert_eq!(pool.version_hwm(), 1 + VERSION_LEASE, "the first version leases a block");
    let fences1 = pool.media().flush_counts().fences;
    assert!(fences1 > fences0);
    for _ in 0..1000 {
        pool.next_version().unwrap();
    }
    assert_eq!(pool.media().flush_counts().fences, fences1, "no persist per version inside a block");
    // a restart starts at the durable mark, above every version handed out
    let img = pool.media().durable_image().unwrap();
    let (p2, rep) = recover_image(&img).unwrap();
    assert_eq!(rep.version_hwm, 1 + VERSION_LEASE);
    assert_eq!(p2.next_version().unwrap(), 1 + VERSION_LEASE);
    // a torn lease (only the first copy written) and a flipped copy both still read
    let mut img2 = img.clone();
    img2[POOL_HWM_OFFS[1] as usize..][..POOL_HWM_LEN].copy_from_slice(&encode_hwm(1).to_le_bytes());
    assert_eq!(recover_image(&img2).unwrap().1.version_hwm, 1 + VERSION_LEASE);
    let mut img3 = img;
    img3[POOL_HWM_OFFS[0] as usize + 2] ^= 0x20;
    let (_, rep) = recover_image(&img3).unwrap();
    assert_eq!(rep.version_hwm, 1 + VERSION_LEASE);
    assert!(rep.problems.iter().any(|p| p.contains("high-water mark copy 0")), "{:?}", rep.problems);
}

#[test]
fn an_exhausted_version_counter_is_an_error_never_a_wrap() {
    let pool = empty_pool(1 << 20);
    pool.raise_version_floor(MAX_VERSION - 2);
    assert_eq!(pool.next_version().unwrap(), MAX_VERSION - 2);
    assert_eq!(pool.next_version().unwrap(), MAX_VERSION - 1);
    for _ in 0..3 {
        assert!(matches!(pool.next_version(), Err(Error::VersionsExhausted { .. })));
    }
    let mut w = LocalWriter::new(&pool);
    let e = w.append(b"k", b"v", false).unwrap_err();
    assert!(matches!(e, Error::VersionsExhausted { .. }), "{e}");
    assert!(e.to_string().contains("version counter exhausted"));
}

#[test]
fn a_version_2_pool_is_read_and_written_but_gets_no_cell_table_or_arena() {
    let img = filled_pool_bytes();
    assert_eq!(u32::from_le_bytes(img[8..12].try_into().unwrap()), FORMAT_VERSION, "a new pool is the current version");
    let keys = recover_image(&img).unwrap().1.keys;
    // What a build of version 2 wrote: plain state words.
    let mut img = filled_pool_bytes_of(2);
    let (pool, rep) = recover_image(&img).unwrap();
    assert_eq!(rep.keys, keys);
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert_eq!(pool.header().format_version, 2);
    let state = |im: &[u8], id: u64| {
        let at = (pool.segment_offset(id) + SEG_STATE_OFF) as usize;
        u64::from_le_bytes(im[at..at + 8].try_into().unwrap())
    };
    assert_eq!(state(&img, 0), SegmentState::Sealed.to_word(), "a version 2 reader's word");
    assert_eq!(value_of(&pool, b"a17").unwrap(), vec![1u8; 200]);
    let mut w = LocalWriter::new(&pool);
    w.append(b"a17", b"after", false).unwrap();
    let seg = w.segment().unwrap().id;
    assert_eq!(state(&pool.media().durable_image().unwrap(), seg), SegmentState::Active.to_word());
    // A cell table or an arena would be free segments to a version 2 reader: refused.
    for e in [pool.create_cell_table(16, 64).unwrap_err(), pool.create_clover_arena(16, 64 << 10, 64).unwrap_err()] {
        assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
        assert_eq!(e.refusal_code(), ErrorCode::Unsupported);
        assert!(e.to_string().contains("format version 2"), "{e}");
    }
    let after = pool.media().durable_image().unwrap();
    assert_eq!(
        PoolHeader::decode(&after, after.len() as u64).unwrap().format_version,
        2,
        "the header is not rewritten"
    );
    let (pool, _) = recover_image(&after).unwrap();
    assert_eq!(value_of(&pool, b"a17").unwrap(), b"after", "segments written by this build read back");
    // A version this build does not know is refused, not guessed at.
    let mut h = PoolHeader::decode(&img, img.len() as u64).unwrap();
    h.format_version = FORMAT_VERSION + 1;
    img[..POOL_HEADER_LEN].copy_from_slice(&h.encode());
    let e = recover_image(&img).unwrap_err().to_string();
    assert!(e.contains(&format!("format version {}", FORMAT_VERSION + 1)) && e.contains("newer"), "{e}");
}

/// Pool offset of segment `id`'s state word in a pool of 64 KiB segments.
fn state_at(id: u64) -> usize {
    (POOL_HEADER_SIZE + id * (64 << 10) + SEG_STATE_OFF) as usize
}

#[test]
fn a_flipped_bit_in_a_state_word_is_repaired_not_taken_for_a_free_segment() {
    let img = filled_pool_bytes();
    let (_, clean) = recover_image(&img).unwrap();
    let seg0 = u64::from_le_bytes(img[state_at(0)..state_at(0) + 8].try_into().unwrap());
    for bit in [0, 1, 33, 63] {
        let mut bad = img.clone();
        bad[state_at(0)..state_at(0) + 8].copy_from_slice(&(seg0 ^ 1 << bit).to_le_bytes());
        let (pool, rep) = recover_image(&bad).unwrap();
        assert_eq!(rep.keys, clean.keys, "bit {bit}: every key is still there");
        assert_eq!(value_of(&pool, b"a0").unwrap(), vec![1u8; 200], "bit {bit}");
        assert!(
            rep.problems.iter().any(|p| p.contains("segment 0: state word") && p.contains("repaired: sealed")),
            "{:?}",
            rep.problems
        );
        assert!(rep.repairs.iter().any(|r| r == "segment 0: state word rewritten as sealed"), "{:?}", rep.repairs);
        let (_, again) = recover_image(&pool.media().durable_image().unwrap()).unwrap();
        assert!(again.problems.is_empty(), "bit {bit}: rewritten: {:?}", again.problems);
    }
    // The plain words of a version 3 pool had no such defence: sealed (2) with bit 1
    // flipped is free (0), and the segment's keys were gone without a word.
    assert_eq!(SegmentState::Sealed.to_word() ^ 2, SegmentState::Free.to_word());
}

#[test]
fn a_state_word_no_repair_verifies_keeps_its_segment_in_use_and_is_reported() {
    let img = filled_pool_bytes();
    let (_, clean) = recover_image(&img).unwrap();
    let mut bad = img.clone();
    bad[state_at(0)..state_at(0) + 8].copy_from_slice(&0x0123_4567_89ab_cdefu64.to_le_bytes());
    let (pool, rep) = recover_image(&bad).unwrap();
    assert_eq!(rep.keys, clean.keys);
    assert_eq!(rep.segments_damaged, 0);
    assert!(
        rep.problems.iter().any(|p| p.contains(
            "segment 0: state word 0x0123456789abcdef fails its check and no one-bit repair verifies; kept as sealed"
        )),
        "{:?}",
        rep.problems
    );
    let (_, again) = recover_image(&pool.media().durable_image().unwrap()).unwrap();
    assert!(again.problems.is_empty(), "{:?}", again.problems);
}

#[test]
fn a_flipped_bit_in_a_free_segment_s_state_word_is_rewritten() {
    let pool = empty_pool(1 << 20);
    let mut w = LocalWriter::new(&pool);
    w.append(b"k", b"v", false).unwrap();
    let id = w.segment().unwrap().id;
    pool.seal_segment(id).unwrap();
    assert!(pool.free_segment(id).unwrap());
    let mut img = pool.media().durable_image().unwrap();
    img[state_at(id) + 5] ^= 0x20;
    let (p2, rep) = recover_image(&img).unwrap();
    assert!(rep.problems.iter().any(|p| p.contains("repaired: free")), "{:?}", rep.problems);
    assert!(rep.repairs.contains(&format!("segment {id}: state word rewritten as free")), "{:?}", rep.repairs);
    let (_, again) = recover_image(&p2.media().durable_image().unwrap()).unwrap();
    assert!(again.problems.is_empty(), "{:?}", again.problems);
}

#[test]
fn a_cell_table_whose_size_would_wrap_is_refused() {
    // 2,684,518,405 cells of 6.87 GB wrapped to a 64-byte table of one segment, and
    // recovery then wrote lock words all over the pool.
    let pool = empty_pool(1 << 20);
    let free = pool.free_segments();
    let e = pool.create_cell_table(2_684_518_405, 3_435_763_928).unwrap_err().to_string();
    assert!(e.contains("too large"), "{e}");
    assert!(pool.cell_table().is_none());
    assert_eq!(pool.free_segments(), free, "nothing taken");
    // and a descriptor naming such a geometry does not validate
    let t = cells::CellTable { first_segment: 0, segments: 1, cells: 1 << 32, slot_size: 1 << 30 };
    assert!(t.validate(16, 64 << 10).is_err());
    let t = cells::CellTable { first_segment: 0, segments: 1, cells: 2_684_518_405, slot_size: 3_435_763_968 };
    assert!(t.validate(16, 64 << 10).is_err());
}

#[test]
fn a_flipped_bit_in_a_never_allocated_segment_s_zero_state_word_is_repaired() {
    let pool = empty_pool(1 << 20);
    let id = pool.segment_count() - 1;
    let mut img = pool.media().durable_image().unwrap();
    img[state_at(id) + 2] ^= 0x08;
    let (p2, rep) = recover_image(&img).unwrap();
    assert_eq!(rep.segments_damaged, 0, "{:?}", rep.problems);
    assert!(rep.repairs.contains(&format!("segment {id}: state word rewritten as free")), "{:?}", rep.repairs);
    assert_eq!(p2.free_segments(), pool.free_segments());
    // A word no repair verifies, with no header: kept out of the free list, reported.
    img[state_at(id)..state_at(id) + 8].copy_from_slice(&0x0123_4567_89ab_cdefu64.to_le_bytes());
    let (p3, rep) = recover_image(&img).unwrap();
    assert_eq!(rep.segments_damaged, 1);
    assert!(rep.problems.iter().any(|p| p.starts_with(&format!("segment {id}:"))), "{:?}", rep.problems);
    assert_eq!(p3.free_segments(), pool.free_segments() - 1);
}

#[test]
fn a_full_pool_says_which_free_segments_it_keeps_back() {
    // 4 segments of 64 KiB: clients may take 2; the tombstone log one more; the cleaner
    // the last. "no free segment" while `stats` showed 2 free read as a contradiction.
    let pool = empty_pool(4096 + 4 * (64 << 10));
    assert_eq!(pool.header().segment_count, 4);
    pool.alloc_segment(7, None).unwrap();
    pool.alloc_segment(8, None).unwrap();
    let e = pool.alloc_segment(9, None).unwrap_err();
    assert!(matches!(e, Error::PoolFull { segments: 4, kept: 2, .. }), "{e:?}");
    assert!(e.to_string().contains("4 segments of 65536 bytes; its last 2 free segments are kept"), "{e}");
    pool.alloc_segment(TOMBSTONE_OWNER, None).unwrap();
    let e = pool.alloc_segment(TOMBSTONE_OWNER, None).unwrap_err();
    assert!(e.to_string().contains("its last free segment is kept for the cleaner"), "{e}");
    pool.alloc_segment(CLEANER_OWNER, None).unwrap();
    let e = pool.alloc_segment(CLEANER_OWNER, None).unwrap_err();
    assert!(matches!(e, Error::PoolFull { kept: 0, .. }) && e.to_string().ends_with("bytes)"), "{e}");
}

#[test]
fn a_log_never_links_or_seals_a_segment_that_stopped_being_its_own() {
    // The tombstone log's last segment X, torn at recovery, is kept as a full segment;
    // the cleaner frees it and another client is granted it. The log's next segment
    // used to link X -> new, take X as its `prev`, and seal X: another client's
    // active segment, which the cleaner would then free under it.
    let pool = empty_pool(4096 + 16 * (64 << 10));
    let x = pool.alloc_segment(TOMBSTONE_OWNER, None).unwrap();
    let old = ActiveSegment::new(x, pool.seg_meta(x).unwrap().generation);
    assert!(pool.free_segment(x).unwrap());
    let client = 42;
    // The lowest free segment goes first: X itself.
    assert_eq!(pool.alloc_segment(client, None).unwrap(), x);
    let y = pool.grant_segment_revoking(TOMBSTONE_OWNER, Some(&old), || {}).unwrap().id;
    let (mx, my) = (pool.seg_meta(x).unwrap(), pool.seg_meta(y).unwrap());
    assert_eq!((mx.owner, mx.state, mx.next), (client, SegmentState::Active, NO_SEGMENT));
    assert_eq!((my.owner, my.prev), (TOMBSTONE_OWNER, NO_SEGMENT));
    // And a log whose last segment is still its own links and seals it as before.
    let z = pool.grant_segment_revoking(TOMBSTONE_OWNER, Some(&ActiveSegment::new(y, my.generation)), || {});
    let z = z.unwrap().id;
    assert_eq!(pool.seg_meta(y).unwrap().state, SegmentState::Sealed);
    assert_eq!((pool.seg_meta(y).unwrap().next, pool.seg_meta(z).unwrap().prev), (z, y));
}
