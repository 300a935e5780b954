//! The cleaner: compacts sealed segments whose live fraction is low.
//!
//! For a victim segment, every entry the index still points to is copied, with its
//! version unchanged, to the cleaner's own log (segments owned by
//! [`super::format::CLEANER_OWNER`] as owner), written back and counted, then
//! swapped into the index only if the index still points at the original (a concurrent
//! PUT wins). When all live entries have moved, the victim is freed, unless the server
//! is still reading one of its entries for a client ([`Pool::lookup_pinned`]): then a
//! later round, which finds it all dead, frees it.
//!
//! Crash safety at any point: until the victim's `state = free` is persisted both copies
//! are valid and carry the same version, so recovery keeps one of them (either is the
//! same value); after it, only the copy remains, already durable and counted. Live
//! tombstones are copied too, so a deleted key cannot come back from an older entry in
//! another segment.
//!
//! Trust: a victim was a client's segment, and its client may have rewritten any of
//! its bytes. The cleaner walks it as far as the `count` the server stored (and on past
//! it only while entries verify in full, as recovery does), copies
//! an entry only if its seal verifies with the version the index holds (then seals the
//! copy for its new place), and frees the victim only if every live byte moved; a
//! segment holding a live entry that fails its seal is left alone (and reported), since
//! freeing it would bring back an older value of that key.

use super::format::*;
use super::writer::ActiveSegment;
use super::Pool;
use crate::error::{Error, Result};
use crate::index::Loc;

/// What one cleaning pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CleanStats {
    /// Segments freed.
    pub segments_freed: u64,
    /// Entries copied.
    pub entries_moved: u64,
    /// Bytes copied.
    pub bytes_moved: u64,
    /// Garbage bytes reclaimed.
    pub bytes_reclaimed: u64,
}

impl CleanStats {
    /// Adds what another pass did.
    pub fn add(&mut self, o: CleanStats) {
        self.segments_freed += o.segments_freed;
        self.entries_moved += o.entries_moved;
        self.bytes_moved += o.bytes_moved;
        self.bytes_reclaimed += o.bytes_reclaimed;
    }
}

/// Sealed segments at most this live (of their capacity) are compacted whatever the
/// free space: what short-lived clients leave behind.
pub const EAGER_CLEAN_LIVE: f64 = 1.0 / 64.0;

/// Almost-empty segments compacted per round ([`EAGER_CLEAN_LIVE`]).
pub const EAGER_PER_ROUND: usize = 16;

/// Fuller segments compacted per round under pressure: each may move up to
/// `clean_below` of a segment, so fewer at once keeps the round short.
pub const PRESSURE_PER_ROUND: usize = 2;

/// Once clients are refused segments and no segment is as empty as the policy asks,
/// the emptiest are compacted whatever their live fraction, up to this one: a segment
/// still gains its garbage when it is moved. A pool whose every segment held 27%
/// garbage refused every DELETE for good, since none was at most half live.
pub const FULL_POOL_CLEAN_LIVE: f64 = 0.97;

/// When and what the cleaner compacts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CleanPolicy {
    /// Under pressure, compact sealed segments at most this live.
    pub clean_below: f64,
    /// Under pressure: at most this fraction of the segments is free.
    pub clean_when_free: f64,
}

/// What one [`Cleaner::round`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Round {
    /// What was moved and freed.
    pub stats: CleanStats,
    /// The pool was short of free segments when the round began: the caller should
    /// come back at once if this round freed something, not after its usual pause.
    pub pressure: bool,
}

/// The cleaner's output log.
#[derive(Debug, Default)]
pub struct Cleaner {
    seg: Option<ActiveSegment>,
    buf: Vec<u8>,
    /// Segments holding live entries that fail their seal: never cleaned.
    stuck: std::collections::BTreeSet<u64>,
    /// Segments emptied but not yet freed (still read from), and the bytes moved out
    /// of each: moved, not reclaimed, when a later round frees it.
    moved_out: std::collections::HashMap<u64, u64>,
}

impl Cleaner {
    /// A cleaner with no output segment yet.
    pub fn new() -> Cleaner {
        Cleaner::default()
    }

    /// The cleaner of a restarted server: its log continues in its last segment, if
    /// the pool has one. A cleaner that began a new log instead would put a second
    /// segment at log position 0, which recovery reports as a broken log.
    pub fn resume(pool: &Pool) -> Result<Cleaner> {
        Ok(Cleaner { seg: pool.reopen_last_segment(CLEANER_OWNER)?, ..Cleaner::default() })
    }

    /// Sealed segments whose live bytes are at most `max_live` of their capacity,
    /// emptiest first (at most `n`). Capacity, not bytes used: a segment sealed early
    /// (its client left) wastes its unused tail as surely as garbage.
    pub fn victims(&self, pool: &Pool, max_live: f64, n: usize) -> Vec<u64> {
        let own = self.seg.as_ref().map(|s| s.id);
        let capacity = pool.segment_size().saturating_sub(SEGMENT_HEADER_SIZE).max(1) as f64;
        let mut v: Vec<(f64, u64)> = pool
            .seg_metas()
            .iter()
            .enumerate()
            .filter(|(id, m)| {
                m.state == SegmentState::Sealed && Some(*id as u64) != own && !self.stuck.contains(&(*id as u64))
            })
            .filter_map(|(id, _)| {
                let live = pool.segment_live(id as u64);
                // All dead but still read from: nothing to move, and not free until then.
                if live == 0 && pool.segment_held(id as u64) {
                    return None;
                }
                let frac = live as f64 / capacity;
                (frac <= max_live).then_some((frac, id as u64))
            })
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v.into_iter().take(n).map(|(_, id)| id).collect()
    }

    /// One round of the server's background cleaning: the almost-empty segments
    /// short-lived clients leave behind (one-shot `boomctl put`s each seal a segment
    /// holding one entry) are compacted at once whatever the free space, since they
    /// cost little to move and would otherwise pile up; under pressure, some fuller
    /// ones too. Always both: under pressure the cheap ones free the most space soonest
    /// (a burst of one-shot clients outpaced a cleaner that switched to the fuller
    /// segments alone, two per round, and filled the pool).
    ///
    /// Clients refused a segment (the free ones are down to the cleaner's and the
    /// tombstone log's reserves) are pressure whatever the fraction free: in a pool of
    /// 7 segments, 2 free were both the reserves and above a quarter, and the cleaner
    /// left five segments 3% live while every PUT was refused. Then, if nothing was as
    /// empty as the policy asks, the emptiest segments are compacted up to
    /// [`FULL_POOL_CLEAN_LIVE`].
    pub fn round(&mut self, pool: &Pool, policy: &CleanPolicy) -> Result<Round> {
        let total = pool.segment_count().max(1);
        let free = pool.free_segments();
        let refusing = free as usize <= pool.cleaner_reserve() + pool.tombstone_reserve();
        let pressure = refusing || (free as f64) <= policy.clean_when_free * total as f64;
        let mut stats = self.run(pool, EAGER_CLEAN_LIVE, EAGER_PER_ROUND)?;
        if pressure {
            stats.add(self.run(pool, policy.clean_below, PRESSURE_PER_ROUND)?);
        }
        if refusing && stats.segments_freed == 0 {
            stats.add(self.run(pool, FULL_POOL_CLEAN_LIVE.max(policy.clean_below), PRESSURE_PER_ROUND)?);
        }
        Ok(Round { stats, pressure })
    }

    /// Cleans up to `n` victims with live fraction at most `max_live`.
    pub fn run(&mut self, pool: &Pool, max_live: f64, n: usize) -> Result<CleanStats> {
        let mut total = CleanStats::default();
        for id in self.victims(pool, max_live, n) {
            total.add(self.clean_segment(pool, id)?);
        }
        Ok(total)
    }

    /// Moves the live entries of sealed segment `id` and frees it.
    pub fn clean_segment(&mut self, pool: &Pool, id: u64) -> Result<CleanStats> {
        let meta = pool.seg_meta(id).ok_or_else(|| Error::invalid(format!("no segment {id}")))?;
        if meta.state != SegmentState::Sealed {
            return Err(Error::invalid(format!("segment {id} is not sealed")));
        }
        let ph = pool.header().clone();
        let used = pool.segment_used(id);
        let trust = pool.trust();
        let found = super::recovery::read_segment(pool.media().map(), &ph, id);
        let found = super::recovery::SegmentFound {
            header: Some(SegmentHeader {
                segment_id: id,
                owner: meta.owner,
                prev: meta.prev,
                log_seq: meta.log_seq,
                generation: meta.generation,
            }),
            ..found
        };
        // Collect first: the walk borrows the mapping, the copies write to it.
        let mut live: Vec<(Loc, Vec<u8>)> = Vec::new();
        let limit = super::recovery::WalkLimit::CountThenSealed(pool.segment_slots(id));
        super::recovery::walk_segment(pool.media().map(), &ph, &trust, &found, limit, |e, slot| {
            if let Ok(h) = &e.result {
                let key = entry_key(slot, h);
                if let Some(cur) = pool.index().get(key, pool) {
                    if cur.segment as u64 == id && cur.offset as u64 == e.offset && cur.version == h.version {
                        live.push((cur, key.to_vec()));
                    }
                }
            }
        });
        let mut st = CleanStats::default();
        for (old, key) in live {
            let Some(new) = self.copy_entry(pool, &old, meta.generation, &trust)? else { continue };
            if pool.index().replace_exact(&key, &old, Some(new), pool) {
                pool.move_live(&old, &new);
            }
            st.entries_moved += 1;
            st.bytes_moved += old.len as u64;
        }
        // A PUT that superseded an entry here took its bytes off the live count inside
        // its index change (`Pool::index_entry`): what is left is entries that failed
        // their seal, or that the walk never reached.
        if pool.segment_live(id) > 0 {
            self.stuck.insert(id);
            return Err(Error::corrupt(
                "segment",
                format!(
                    "segment {id} holds {} live bytes whose entries fail their seal (rewritten by its client?); it is not cleaned",
                    pool.segment_live(id)
                ),
            ));
        }
        // A server-side read of one of its entries still in progress keeps it: it is
        // all dead now, so a later round picks it again and frees it then.
        let moved = self.moved_out.remove(&id).unwrap_or(0) + st.bytes_moved;
        if pool.free_segment(id)? {
            st.bytes_reclaimed = used.saturating_sub(moved);
            st.segments_freed = 1;
        } else {
            self.moved_out.insert(id, moved);
        }
        Ok(st)
    }

    /// Copies the live entry at `old` (in a segment of `generation`) to the cleaner's
    /// log, sealed for its new place; `None` if it no longer verifies.
    fn copy_entry(&mut self, pool: &Pool, old: &Loc, generation: u64, trust: &Trust) -> Result<Option<Loc>> {
        let len = old.len as usize;
        let slot = slot_for(old.len as u64);
        self.buf.resize(len, 0);
        pool.media().map().read(pool.pool_offset(old.segment as u64, old.offset as u64), &mut self.buf)?;
        let place = SlotPlace { segment: old.segment as u64, generation, offset: old.offset as u64 };
        // One repair: an entry whose version or seal had a flipped bit was repaired by
        // recovery (the index holds the true version); the copy carries the repaired words.
        let h = match check_entry(&self.buf, place, pool.segment_size(), trust, &mut 1) {
            Ok(c) if c.header.version == old.version && c.header.entry_len() == old.len as u64 => c.header,
            _ => return Ok(None),
        };
        let need_new = match &self.seg {
            None => true,
            Some(s) => s.tail + slot > pool.segment_size(),
        };
        if need_new {
            self.seg = Some(pool.grant_segment(CLEANER_OWNER, self.seg.as_ref())?);
        }
        let seg = self.seg.as_mut().ok_or_else(|| Error::invalid("no cleaner segment"))?;
        // Same entry, new slot: next_offset (inside the checksum) and the seal change.
        let next = seg.tail + slot;
        let c = relink_entry(&mut self.buf, next)?;
        let moved = EntryHeader { checksum: c, next_offset: next, ..h };
        let new_place = SlotPlace { segment: seg.id, generation: seg.generation, offset: seg.tail };
        let key = entry_key(&self.buf, &moved).to_vec();
        let seal = pool.sealer().entry_seal(new_place, h.version, &moved, &key);
        store_version_seal(&mut self.buf, h.version, seal);
        let dst = pool.pool_offset(seg.id, seg.tail);
        pool.media().map().write(dst, &self.buf)?;
        pool.media().crash_point();
        pool.writeback(dst, len)?;
        let new = Loc { segment: seg.id as u32, offset: seg.tail as u32, ..*old };
        seg.push_slot(seg.tail, next);
        pool.persist_count(seg.id, seg.generation, seg.count)?;
        pool.note_cleaner_copy(seg.id, slot);
        Ok(Some(new))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::LocalWriter;
    use crate::pmem::{FlushKind, Media};

    #[test]
    fn under_pressure_a_round_still_frees_the_almost_empty_segments_first() {
        // 63 segments of 64 KiB; 50 short-lived writers each leave a sealed segment
        // holding one small entry (what one-shot `boomctl put`s do), plus two fuller
        // segments: the pool is short of free segments.
        let pool = crate::log::tests::empty_pool(4 << 20);
        for i in 0..50u32 {
            let mut w = LocalWriter::new(&pool);
            w.append(format!("one-shot-{i}").as_bytes(), b"v", false).unwrap();
            pool.seal_segment(w.segment().unwrap().id).unwrap();
        }
        let mut w = LocalWriter::new(&pool);
        for i in 0..200u32 {
            w.append(format!("full-{}", i % 40).as_bytes(), &[7; 500], false).unwrap();
        }
        let policy = CleanPolicy { clean_below: 0.5, clean_when_free: 0.25 };
        let free = pool.free_segments();
        assert!((free as f64) <= 0.25 * pool.segment_count() as f64, "{free} free: not under pressure");
        let r = Cleaner::new().round(&pool, &policy).unwrap();
        assert!(r.pressure);
        assert!(r.stats.segments_freed >= EAGER_PER_ROUND as u64, "{r:?}");
        assert!(pool.free_segments() >= free + EAGER_PER_ROUND as u64 - 1, "the cleaner's own segment at most");
        for i in 0..50u32 {
            let k = format!("one-shot-{i}");
            let l = pool.lookup(k.as_bytes()).unwrap();
            let e = pool.read_entry(&l).unwrap();
            assert_eq!(entry_value(&e, &EntryHeader::decode(&e).unwrap()), b"v", "{k}");
        }
        drop(w);
    }

    #[test]
    fn a_full_pool_whose_segments_are_all_mostly_live_is_compacted_until_clients_are_served_again() {
        // Every fourth entry overwrites the key written three before it: each segment
        // ends about a quarter garbage, none at most half live. Filled until a
        // client's grant is refused: only the reserves are free.
        let pool = crate::log::tests::empty_pool(4 << 20);
        let mut w = LocalWriter::new(&pool);
        let mut last = std::collections::BTreeMap::new();
        for i in 0u32.. {
            let k = if i % 4 == 3 { i - 3 } else { i };
            let v = i.to_le_bytes().repeat(125);
            match w.append(format!("k{k}").as_bytes(), &v, false) {
                Ok(_) => last.insert(k, v),
                Err(e) if e.is_pool_full() => break,
                Err(e) => panic!("{e}"),
            };
        }
        drop(w);
        let reserves = (pool.cleaner_reserve() + pool.tombstone_reserve()) as u64;
        assert_eq!(pool.free_segments(), reserves);
        let policy = CleanPolicy { clean_below: 0.5, clean_when_free: 0.25 };
        let mut c = Cleaner::new();
        assert!(c.victims(&pool, policy.clean_below, usize::MAX).is_empty(), "no segment at most half live");
        let mut rounds = 0;
        while pool.free_segments() <= reserves {
            let r = c.round(&pool, &policy).unwrap();
            assert!(r.pressure && r.stats.segments_freed > 0, "round {rounds}: {r:?}");
            rounds += 1;
            assert!(rounds < 50, "{} free after {rounds} rounds", pool.free_segments());
        }
        // A client is served again, and every key reads its last value.
        LocalWriter::new(&pool).append(b"after", b"room again", false).unwrap();
        for (k, v) in &last {
            let l = pool.lookup(format!("k{k}").as_bytes()).unwrap();
            let e = pool.read_entry(&l).unwrap();
            assert_eq!(entry_value(&e, &EntryHeader::decode(&e).unwrap()), &v[..], "k{k}");
        }
    }

    #[test]
    fn in_a_small_pool_refused_grants_are_pressure_even_with_a_quarter_free() {
        // 7 segments; five clients each leave a segment about 3% live (above the
        // eager threshold): the 2 left are the reserves, so clients are refused.
        let pool = crate::log::tests::empty_pool(512 << 10);
        assert_eq!(pool.segment_count(), 7);
        for i in 0..5u32 {
            let mut w = LocalWriter::new(&pool);
            w.append(format!("one-{i}").as_bytes(), &[i as u8; 2000], false).unwrap();
            pool.seal_segment(w.segment().unwrap().id).unwrap();
        }
        assert!(LocalWriter::new(&pool).append(b"sixth", b"v", false).unwrap_err().is_pool_full());
        assert!(pool.free_segments() as f64 > 0.25 * 7.0, "a quarter free: not pressure by the fraction");
        let r = Cleaner::new().round(&pool, &CleanPolicy { clean_below: 0.5, clean_when_free: 0.25 }).unwrap();
        assert!(r.pressure && r.stats.segments_freed > 0, "{r:?}");
        LocalWriter::new(&pool).append(b"sixth", b"v", false).unwrap();
    }

    fn value_at(pool: &Pool, l: &Loc) -> Vec<u8> {
        let e = pool.read_entry(l).unwrap();
        entry_value(&e, &EntryHeader::decode(&e).unwrap()).to_vec()
    }

    /// A segment one entry of which the server is still reading for a client.
    fn segment_being_read(pool: &Pool, reader: usize) -> (Loc, crate::log::ReadPin, u64) {
        let mut w = LocalWriter::new(pool);
        w.append(b"read", &[1; 300], false).unwrap();
        w.append(b"other", &[2; 300], false).unwrap();
        let seg = w.segment().unwrap().id;
        pool.seal_segment(seg).unwrap();
        let (loc, pin, ()) = pool.lookup_pinned(reader, b"read", |_| ()).unwrap();
        assert_eq!(loc.segment as u64, seg);
        assert_eq!(pool.segment_readers(seg), 1);
        (loc, pin, seg)
    }

    #[test]
    fn a_segment_the_server_reads_from_is_not_freed_until_the_read_is_over() {
        // The attack: a GET's data write (or copy) reads an entry; meanwhile a newer PUT
        // supersedes it and the cleaner frees its segment, which is granted to another
        // client, who writes its own entry of the key there; the data write sends that.
        let pool = crate::log::tests::empty_pool(4 << 20);
        let (loc, pin, seg) = segment_being_read(&pool, 0);
        let mut w = LocalWriter::new(&pool);
        w.append(b"read", &[3; 300], false).unwrap();
        w.append(b"other", &[4; 300], false).unwrap();
        assert_eq!(pool.segment_live(seg), 0, "all dead");
        let mut c = Cleaner::new();
        let st = c.run(&pool, 1.0, 100).unwrap();
        assert_eq!(st.segments_freed, 0, "{st:?}");
        assert_eq!(pool.seg_meta(seg).unwrap().state, SegmentState::Sealed);
        // Nothing can be granted over it: the entry being read is as it was.
        let e = pool.read_entry(&loc).unwrap();
        let h = EntryHeader::decode(&e).unwrap();
        assert_eq!((entry_key(&e, &h), entry_value(&e, &h)), (&b"read"[..], &[1u8; 300][..]));
        assert!(c.victims(&pool, 1.0, 100).is_empty(), "all dead and read from: not walked again");
        pool.unpin(pin);
        assert_eq!(pool.segment_readers(seg), 0);
        let st = c.run(&pool, 1.0, 100).unwrap();
        assert_eq!(st.segments_freed, 1, "{st:?}");
        assert_eq!(pool.seg_meta(seg).unwrap().state, SegmentState::Free);
    }

    #[test]
    fn every_worker_s_pin_holds_the_segment() {
        // Each worker pins in a part of its own (and workers past the parts share one):
        // the segment stays until the last pin of any part is back.
        let pool = crate::log::tests::empty_pool(4 << 20);
        let (_, first, seg) = segment_being_read(&pool, 1);
        let (_, same_part, ()) = pool.lookup_pinned(1 + crate::cpus::WORKER_PARTS, b"read", |_| ()).unwrap();
        let (_, other_part, ()) = pool.lookup_pinned(crate::cpus::WORKER_PARTS - 1, b"read", |_| ()).unwrap();
        assert_eq!(pool.segment_readers(seg), 3);
        let mut w = LocalWriter::new(&pool);
        w.append(b"read", &[3; 300], false).unwrap();
        w.append(b"other", &[4; 300], false).unwrap();
        let mut c = Cleaner::new();
        for (i, pin) in [first, other_part, same_part].into_iter().enumerate() {
            let st = c.run(&pool, 1.0, 100).unwrap();
            assert_eq!(st.segments_freed, 0, "{} pins still held: {st:?}", 3 - i);
            assert!(pool.segment_held(seg));
            pool.unpin(pin);
        }
        assert_eq!(pool.segment_readers(seg), 0);
        let st = c.run(&pool, 1.0, 100).unwrap();
        assert_eq!(st.segments_freed, 1, "{st:?}");
    }

    #[test]
    fn live_entries_move_under_a_read_and_their_segment_waits_for_it() {
        let pool = crate::log::tests::empty_pool(4 << 20);
        let (loc, pin, seg) = segment_being_read(&pool, 0);
        let mut c = Cleaner::new();
        let st = c.run(&pool, 1.0, 100).unwrap();
        assert_eq!((st.entries_moved, st.segments_freed), (2, 0), "{st:?}");
        let moved = pool.lookup(b"read").unwrap();
        assert_ne!(moved.segment as u64, seg, "a new GET reads the copy");
        assert_eq!(value_at(&pool, &loc), vec![1; 300], "the read goes on, unchanged");
        pool.unpin(pin);
        let st = c.run(&pool, 1.0, 100).unwrap();
        assert_eq!((st.segments_freed, st.entries_moved), (1, 0), "{st:?}");
        assert!(st.bytes_reclaimed < 300, "both entries moved: at most their slots' padding is reclaimed ({st:?})");
        assert_eq!(value_at(&pool, &moved), vec![1; 300]);
    }

    #[test]
    fn a_segment_whose_entry_a_client_was_told_to_read_is_kept_for_the_lease() {
        // RDMP-KV: the server names the entry's place, the client READs it later. Freed
        // and granted to another client meanwhile, the place could hold that client's
        // entry of the same key.
        let pool = crate::log::tests::empty_pool(4 << 20);
        let mut w = LocalWriter::new(&pool);
        w.append(b"located", &[1; 300], false).unwrap();
        w.append(b"brief", &[1; 300], false).unwrap();
        let seg = w.segment().unwrap().id;
        pool.seal_segment(seg).unwrap();
        let loc = pool.lookup_leased(b"located", std::time::Duration::from_secs(600)).unwrap();
        assert_eq!(loc.segment as u64, seg);
        assert!(pool.segment_held(seg));
        assert_eq!(pool.segment_readers(seg), 0, "a lease is no pin");
        let mut c = Cleaner::new();
        let st = c.run(&pool, 1.0, 100).unwrap();
        assert_eq!((st.entries_moved, st.segments_freed), (2, 0), "{st:?}");
        assert_eq!(value_at(&pool, &loc), vec![1; 300], "the READ finds the entry where it was told");
        assert!(c.victims(&pool, 1.0, 100).is_empty(), "all moved and leased: not walked again");
        // A lease that is over keeps nothing.
        let w2 = {
            let mut w2 = LocalWriter::new(&pool);
            w2.append(b"short", &[2; 300], false).unwrap();
            w2
        };
        let seg2 = w2.segment().unwrap().id;
        pool.seal_segment(seg2).unwrap();
        pool.lookup_leased(b"short", std::time::Duration::ZERO).unwrap();
        let t0 = std::time::Instant::now();
        while pool.segment_held(seg2) {
            assert!(t0.elapsed() < std::time::Duration::from_secs(5), "a zero lease never ended");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(pool.lookup_leased(b"absent", std::time::Duration::from_secs(600)).is_none());
        assert_eq!(c.run(&pool, 1.0, 100).unwrap().segments_freed, 1, "the short one only");
        assert_eq!(pool.seg_meta(seg2).unwrap().state, SegmentState::Free);
        assert_eq!(pool.seg_meta(seg).unwrap().state, SegmentState::Sealed);
    }

    #[test]
    fn puts_racing_the_cleaner_never_make_a_segment_stuck() {
        // Writers supersede each other's entries while the cleaner cleans: a cleaning
        // between a PUT's index change and its live-byte accounting found bytes no
        // entry held and marked the segment stuck for the server's life.
        let pool = std::sync::Arc::new(crate::log::tests::empty_pool(8 << 20));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writers: Vec<_> = (0..2u8)
            .map(|t| {
                let (pool, stop) = (pool.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut w = LocalWriter::new(&pool);
                    for i in 0..20_000u32 {
                        if stop.load(std::sync::atomic::Ordering::Relaxed) {
                            break;
                        }
                        let k = format!("k{}", i % 8);
                        if let Err(e) = w.append(k.as_bytes(), &[t; 200], false) {
                            assert!(e.is_pool_full(), "{e}");
                            std::thread::sleep(std::time::Duration::from_millis(1));
                        }
                    }
                })
            })
            .collect();
        let mut c = Cleaner::new();
        let policy = CleanPolicy { clean_below: 1.0, clean_when_free: 1.0 };
        while !writers.iter().all(std::thread::JoinHandle::is_finished) {
            if let Err(e) = c.round(&pool, &policy) {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                panic!("{e}");
            }
        }
        writers.into_iter().for_each(|w| w.join().unwrap());
        assert!(c.stuck.is_empty(), "{:?}", c.stuck);
    }

    #[test]
    fn a_deleted_key_takes_no_pin() {
        let pool = crate::log::tests::empty_pool(4 << 20);
        let mut w = LocalWriter::new(&pool);
        w.append(b"gone", b"v", false).unwrap();
        w.append(b"gone", b"", true).unwrap();
        let seg = w.segment().unwrap().id;
        let mut ran = false;
        assert!(pool.lookup_pinned(0, b"gone", |_| ran = true).is_none());
        assert!(pool.lookup_pinned(0, b"never", |_| ran = true).is_none());
        assert!(!ran);
        assert_eq!(pool.segment_readers(seg), 0);
    }

    #[test]
    fn cleaning_frees_segments_and_keeps_every_value() {
        let pool = crate::log::tests::empty_pool(4 << 20);
        let mut w = LocalWriter::new(&pool);
        for round in 0..6u8 {
            for i in 0..100u32 {
                if round < 5 || i % 10 == 0 {
                    w.append(format!("k{i}").as_bytes(), &vec![round; 500], false).unwrap();
                }
            }
        }
        w.append(b"k3", b"", true).unwrap();
        let before = pool.space_report();
        let free_before = pool.free_segments();
        let mut c = Cleaner::new();
        let st = c.run(&pool, 0.5, 100).unwrap();
        assert!(st.segments_freed >= 3, "{st:?}");
        assert!(pool.free_segments() > free_before);
        let after = pool.space_report();
        assert!(after.garbage_bytes < before.garbage_bytes, "{before:?} {after:?}");
        let check = |p: &Pool| {
            for i in 0..100u32 {
                let k = format!("k{i}");
                let want: Option<u8> = if i == 3 {
                    None
                } else if i % 10 == 0 {
                    Some(5)
                } else {
                    Some(4)
                };
                assert_eq!(p.lookup(k.as_bytes()).map(|_| ()), want.map(|_| ()), "{k}");
                if let Some(l) = p.lookup(k.as_bytes()) {
                    let e = p.read_entry(&l).unwrap();
                    let h = EntryHeader::decode(&e).unwrap();
                    assert_eq!(entry_value(&e, &h)[0], want.unwrap(), "{k}");
                }
            }
        };
        check(&pool);
        // and the same after a restart from what is durable
        let img = pool.media().durable_image().unwrap();
        let (p2, rep) = from_image(&img);
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        check(&p2);
        assert_eq!(rep.tombstones, 1, "the tombstone of k3 survives cleaning");
    }

    /// A pool whose cleaner has copied a few entries into a segment of its log, and
    /// that segment.
    fn pool_with_a_cleaner_segment() -> (Pool, u64) {
        let pool = crate::log::tests::empty_pool(8 << 20);
        churn(&pool, "a-", 6);
        let mut c = Cleaner::new();
        assert!(c.run(&pool, 0.9, 100).unwrap().entries_moved > 2);
        let own = c.seg.as_ref().unwrap().id;
        (pool, own)
    }

    /// A pool recovered from the image `img`, with its recovery report.
    fn from_image(img: &[u8]) -> (Pool, crate::log::RecoveryReport) {
        Pool::from_media(Media::simulated_from(img, FlushKind::None).unwrap(), Default::default()).unwrap()
    }

    /// A pool restarted from what is durable in `pool`, with its recovery report.
    fn restart(pool: &Pool) -> (Pool, crate::log::RecoveryReport) {
        from_image(&pool.media().durable_image().unwrap())
    }

    /// Cleans the clients' sealed segments that are at most 90% live (not the
    /// cleaner's own); returns the entries moved.
    fn clean_clients(c: &mut Cleaner, pool: &Pool) -> u64 {
        let mut moved = 0;
        for id in c.victims(pool, 0.9, 100) {
            if pool.seg_meta(id).unwrap().owner != CLEANER_OWNER {
                moved += c.clean_segment(pool, id).unwrap().entries_moved;
            }
        }
        moved
    }

    #[test]
    fn a_segment_its_client_tore_is_still_cleaned() {
        // A client may write any byte of its segment, its count word too: segments
        // kept for being torn would let it fill the pool.
        let pool = crate::log::tests::empty_pool(4 << 20);
        let mut w = LocalWriter::new(&pool);
        w.append(b"kept", b"value", false).unwrap();
        let id = w.segment().unwrap().id;
        pool.seal_segment(id).unwrap();
        let mut img = pool.media().durable_image().unwrap();
        let at = (pool.segment_offset(id) + SEG_COUNT_OFF) as usize;
        img[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        let (p2, _) = from_image(&img);
        assert!(p2.is_torn(id));
        assert!(Cleaner::new().victims(&p2, 1.0, 100).contains(&id), "a victim like any other");
        let st = Cleaner::new().clean_segment(&p2, id).unwrap();
        assert_eq!(st.segments_freed, 1);
        let e = p2.read_entry(&p2.lookup(b"kept").unwrap()).unwrap();
        assert_eq!(entry_value(&e, &EntryHeader::decode(&e).unwrap()), b"value");
        assert_eq!(p2.seg_meta(id).unwrap().state, SegmentState::Free);
        drop(w);
    }

    /// Fills segments with garbage and some live entries: `rounds` overwrites of 100
    /// keys of 500 bytes, the last of only every tenth key.
    fn churn(pool: &Pool, tag: &str, rounds: u8) {
        let mut w = LocalWriter::new(pool);
        for round in 0..rounds {
            for i in (0..100u32).filter(|i| round + 1 < rounds || i % 10 == 0) {
                w.append(format!("{tag}{i}").as_bytes(), &vec![round; 500], false).unwrap();
            }
        }
    }

    #[test]
    fn a_restarted_server_s_cleaner_continues_its_log() {
        // Each server run's cleaner began a new log at position 0, so after two runs
        // that cleaned, recovery reported two cleaner segments at position 0.
        let mut pool = crate::log::tests::empty_pool(8 << 20);
        for run in 0..3 {
            churn(&pool, &format!("run{run}-"), 6);
            let mut c = Cleaner::resume(&pool).unwrap();
            // not the full ones, so that earlier runs' cleaner segments stay
            let st = c.run(&pool, 0.9, 100).unwrap();
            assert!(st.entries_moved > 0, "run {run}: {st:?}");
            // more than one cleaner segment per run, so runs must link up
            if run == 1 {
                for i in 0..60u32 {
                    LocalWriter::new(&pool).append(format!("single-{i}").as_bytes(), &[1; 1000], false).unwrap();
                }
                c.run(&pool, 0.9, 1000).unwrap();
            }
            drop(c);
            let (p2, rep) = restart(&pool);
            assert!(rep.problems.is_empty(), "after run {run}: {:?}", rep.problems);
            pool = p2;
        }
        let seqs: Vec<u64> = pool
            .seg_metas()
            .iter()
            .filter(|m| m.owner == CLEANER_OWNER && m.state != SegmentState::Free)
            .map(|m| m.log_seq)
            .collect();
        assert!(seqs.len() >= 2, "{seqs:?}");
        let mut dedup = seqs.clone();
        dedup.sort_unstable();
        dedup.dedup();
        assert_eq!(dedup.len(), seqs.len(), "each cleaner segment its own position: {seqs:?}");
    }

    #[test]
    fn a_cleaner_log_begun_again_at_position_zero_by_an_older_server_is_no_problem() {
        // boomkv 0.1 began the cleaner's log anew in each server run: pools it wrote
        // hold several cleaner segments at position 0, and lose nothing by it.
        let pool = crate::log::tests::empty_pool(8 << 20);
        for run in 0..2 {
            churn(&pool, &format!("run{run}-"), 6);
            assert!(Cleaner::new().run(&pool, 0.9, 100).unwrap().entries_moved > 0);
        }
        let at_zero =
            pool.seg_metas().iter().filter(|m| m.owner == CLEANER_OWNER && m.state != SegmentState::Free).count();
        assert_eq!(at_zero, 2);
        let (p2, rep) = restart(&pool);
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        // and the resumed cleaner goes on after one of them
        let mut c = Cleaner::resume(&p2).unwrap();
        churn(&p2, "run2-", 6);
        c.run(&p2, 0.9, 100).unwrap();
        let (_, rep) = restart(&p2);
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    }

    #[test]
    fn a_resumed_cleaner_never_writes_into_a_segment_whose_walk_ended_on_damage() {
        let (pool, own) = pool_with_a_cleaner_segment();
        // One flipped bit in the link of the cleaner segment's first slot: the slots
        // after it are counted but unreachable.
        let mut img = pool.media().durable_image().unwrap();
        let base = pool.pool_offset(own, SEGMENT_HEADER_SIZE) as usize;
        img[base + ENTRY_NEXT_OFF as usize + 1] ^= 0x10;
        let (p2, rep) = from_image(&img);
        assert!(rep.problems.iter().any(|p| p.contains("unreachable")), "{:?}", rep.problems);
        let seg_bytes = |im: &[u8]| im[base..base + (64 << 10) - SEGMENT_HEADER_SIZE as usize].to_vec();
        let before = seg_bytes(&img);
        let mut c = Cleaner::resume(&p2).unwrap();
        churn(&p2, "b-", 6);
        assert!(clean_clients(&mut c, &p2) > 0);
        assert_ne!(c.seg.as_ref().unwrap().id, own, "the copies went to a new segment");
        assert_eq!(seg_bytes(&p2.media().durable_image().unwrap()), before, "the damaged segment is untouched");
        // and the new segment follows it in the cleaner's log
        let (_, rep) = restart(&p2);
        assert!(!rep.problems.iter().any(|p| p.contains("log position")), "{:?}", rep.problems);
    }

    #[test]
    fn logs_are_still_checked_link_by_link() {
        // An older server's pool: two cleaner segments at position 0, then a resumed
        // cleaner's at position 1.
        let pool = crate::log::tests::empty_pool(8 << 20);
        for run in 0..2 {
            churn(&pool, &format!("run{run}-"), 6);
            Cleaner::new().run(&pool, 0.9, 100).unwrap();
        }
        let (p2, _) = restart(&pool);
        let mut c = Cleaner::resume(&p2).unwrap();
        // past the reopened segment's room, so that the log takes position 1
        // (the clients' segments only: the old cleaner segments stay)
        for run in 2..5 {
            churn(&p2, &format!("run{run}-"), 6);
            for id in c.victims(&p2, 0.9, 100) {
                if p2.seg_meta(id).unwrap().owner != CLEANER_OWNER {
                    c.clean_segment(&p2, id).unwrap();
                }
            }
        }
        drop(c);
        let metas = p2.seg_metas();
        let cleaner: Vec<(usize, crate::log::SegMeta)> = metas
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, m)| m.owner == CLEANER_OWNER && m.state != SegmentState::Free)
            .collect();
        let (one, m1) = *cleaner.iter().find(|(_, m)| m.log_seq == 1).expect("a cleaner segment at position 1");
        assert_eq!(cleaner.iter().filter(|(_, m)| m.log_seq == 0).count(), 2, "{cleaner:?}");
        let img = p2.media().durable_image().unwrap();
        let (_, rep) = restart(&p2);
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);

        // A lost forward link is repaired.
        let mut lost = img.clone();
        let at = (p2.segment_offset(m1.prev) + SEG_NEXT_OFF) as usize;
        lost[at..at + 8].copy_from_slice(&NO_SEGMENT.to_le_bytes());
        let (_, rep) = from_image(&lost);
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        assert!(rep.repairs.iter().any(|r| r == &format!("the cleaner's log: linked segment {} -> {one}", m1.prev)));

        // A back link to a segment that is not one position before is reported.
        let mut wrong = img;
        let other = metas.iter().position(|m| m.owner != CLEANER_OWNER && m.state != SegmentState::Free).unwrap();
        let h = SegmentHeader {
            segment_id: one as u64,
            owner: CLEANER_OWNER,
            prev: other as u64,
            log_seq: 1,
            generation: m1.generation,
        };
        let at = p2.segment_offset(one as u64) as usize;
        wrong[at..at + SEG_FIXED_LEN].copy_from_slice(&h.encode(&p2.sealer));
        let (_, rep) = from_image(&wrong);
        assert!(
            rep.problems
                .iter()
                .any(|p| p.starts_with(&format!("the cleaner's log: segment {one} links back to Some({other}), not "))),
            "{:?}",
            rep.problems
        );
    }

    #[test]
    fn a_segment_whose_count_no_repair_verifies_stays_torn_across_restarts() {
        let (pool, own) = pool_with_a_cleaner_segment();
        // Two flipped bits in its count word: no one-bit repair verifies.
        let mut img = pool.media().durable_image().unwrap();
        let at = (pool.segment_offset(own) + SEG_COUNT_OFF) as usize;
        img[at] ^= 0x03;
        let base = pool.pool_offset(own, SEGMENT_HEADER_SIZE) as usize;
        let data = |im: &[u8]| im[base..base + (64 << 10) - SEGMENT_HEADER_SIZE as usize].to_vec();
        let before = data(&img);
        let (p2, rep) = from_image(&img);
        assert!(rep.problems.iter().any(|p| p.contains("no one-bit repair verifies")), "{:?}", rep.problems);
        // A restart that appends nothing must not make the next one forget it.
        let (p3, rep) = restart(&p2);
        assert!(rep.problems.iter().any(|p| p.contains("no one-bit repair verifies")), "{:?}", rep.problems);
        assert!(p3.is_torn(own));
        let mut c = Cleaner::resume(&p3).unwrap();
        churn(&p3, "b-", 6);
        assert!(clean_clients(&mut c, &p3) > 0);
        assert_ne!(c.seg.as_ref().unwrap().id, own, "the copies went to a new segment");
        assert_eq!(data(&p3.media().durable_image().unwrap()), before, "the torn segment is untouched");
    }

    #[test]
    fn a_log_with_a_segment_cleaned_from_its_middle_recovers_without_a_problem() {
        let pool = crate::log::tests::empty_pool(4 << 20);
        let mut w = LocalWriter::new(&pool);
        // first segment: keys that stay; second: keys overwritten later; third: the overwrites
        let mut segs = Vec::new();
        for (tag, n) in [("stay", 100u32), ("gone", 100), ("gone", 100), ("gone", 100), ("more", 100)] {
            for i in 0..n {
                w.append(format!("{tag}{i}").as_bytes(), &[3; 500], false).unwrap();
            }
            let id = w.segment().unwrap().id;
            if segs.last() != Some(&id) {
                segs.push(id);
            }
        }
        assert!(segs.len() >= 4, "{segs:?}");
        // a segment in the middle of the writer's log holding only superseded entries
        let mid =
            *segs[1..segs.len() - 1].iter().find(|&&s| pool.segment_live(s) == 0).expect("an all-garbage segment");
        let st = Cleaner::new().clean_segment(&pool, mid).unwrap();
        assert_eq!(st.segments_freed, 1);
        drop(w);
        let (p2, rep) = restart(&pool);
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        assert_eq!(p2.seg_meta(mid).unwrap().state, SegmentState::Free);
        assert!(p2.lookup(b"stay7").is_some() && p2.lookup(b"gone7").is_some());
    }

    #[test]
    fn an_entry_repaired_by_recovery_is_moved_with_its_true_version() {
        let pool = crate::log::tests::empty_pool(2 << 20);
        let mut w = LocalWriter::new(&pool);
        let keep = w.append(b"keep", b"kept value", false).unwrap();
        for i in 0..400u32 {
            w.append(b"churn", &i.to_le_bytes().repeat(50), false).unwrap();
        }
        let mut img = pool.media().durable_image().unwrap();
        // flip one bit of the version of `keep` (in the first segment, mostly garbage)
        let at = (POOL_HEADER_SIZE + keep.loc.segment as u64 * (64 << 10) + keep.loc.offset as u64) as usize;
        img[at + ENTRY_VERSION_OFF as usize + 6] ^= 0x04;
        let (p2, rep) = from_image(&img);
        assert_eq!(rep.entries_repaired, 1);
        let st = Cleaner::new().clean_segment(&p2, keep.loc.segment as u64).unwrap();
        assert_eq!(st.segments_freed, 1);
        let l = p2.lookup(b"keep").unwrap();
        assert_ne!(l.segment, keep.loc.segment, "moved");
        assert_eq!(l.version, keep.version);
        let img = p2.media().durable_image().unwrap();
        let (p3, rep) = from_image(&img);
        assert_eq!(rep.entries_repaired, 0, "the copy carries the repaired words");
        assert_eq!(p3.lookup(b"keep").unwrap().version, keep.version);
        let e = p3.read_entry(&p3.lookup(b"keep").unwrap()).unwrap();
        assert_eq!(entry_value(&e, &EntryHeader::decode(&e).unwrap()), b"kept value");
    }
}
