//! Recovery: rebuilding the volatile state of a pool from its media.
//!
//! Every segment whose header is valid and whose `state` is active or sealed is walked
//! by `next_offset` for exactly `count` slots. A slot's entry is accepted only if its
//! magic, lengths, bounds and checksum are valid and it has a version; per key the
//! highest `version_num` wins and tombstones delete. Torn or garbage entries are
//! counted by fault and never indexed. The global version counter restarts above every
//! version found, and client ids above every owner found.
//!
//! Segments are scanned by several threads (one per core); the index is sharded, so
//! they insert concurrently. The same walker ([`walk_segment`]) serves `inspect-log`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::format::*;
use super::{Pool, SegMeta};
use crate::error::Result;
use crate::index::Loc;
use crate::pmem::Mapping;

/// One slot met by a segment walk.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct ScannedEntry {
    /// Index of the slot in the segment (0-based).
    pub slot: u64,
    /// Segment offset of the slot.
    pub offset: u64,
    /// `next_offset` stored in the slot.
    pub next_offset: u64,
    /// The entry, or why it was rejected.
    #[serde(skip)]
    pub result: std::result::Result<EntryHeader, EntryFault>,
}

/// The header part of a segment as found on the media.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SegmentFound {
    /// Segment id (its position in the pool).
    pub id: u64,
    /// The decoded first line, if valid.
    pub header: Option<SegmentHeader>,
    /// The `state` word, decoded.
    pub state: Option<SegmentState>,
    /// Raw `state` word.
    pub state_word: u64,
    /// `count` word.
    pub count: u64,
    /// `next` word.
    pub next: u64,
    /// Why the segment is not usable although it looks allocated.
    pub problem: Option<String>,
}

impl SegmentFound {
    /// Whether recovery uses the segment (valid header, active or sealed).
    pub fn in_use(&self) -> bool {
        self.problem.is_none()
            && self.header.is_some()
            && matches!(self.state, Some(SegmentState::Active) | Some(SegmentState::Sealed))
    }
}

/// Reads segment `id`'s header words.
pub fn read_segment(map: &Mapping, ph: &PoolHeader, id: u64) -> SegmentFound {
    let base = ph.segment_offset(id);
    let word = |o: u64| map.read_u64(base + o).unwrap_or(0);
    let state_word = word(SEG_STATE_OFF);
    let state = SegmentState::from_word(state_word);
    let mut f = SegmentFound {
        id,
        header: None,
        state,
        state_word,
        count: word(SEG_COUNT_OFF),
        next: word(SEG_NEXT_OFF),
        problem: None,
    };
    let looks_allocated = matches!(state, Some(SegmentState::Active) | Some(SegmentState::Sealed));
    match map
        .view(base, 64)
        .map_err(|e| e.to_string())
        .and_then(|b| SegmentHeader::decode(b).map_err(|e| e.to_string()))
    {
        Ok(h) if h.segment_id != id => {
            f.problem = Some(format!("header names segment {} but sits at {id}", h.segment_id));
        }
        Ok(h) => f.header = Some(h),
        // A torn header with a free state is an allocation a crash interrupted: free.
        Err(e) if looks_allocated => f.problem = Some(e),
        Err(_) => {}
    }
    if f.header.is_some() && state.is_none() {
        f.problem.get_or_insert_with(|| format!("unknown state word {state_word:#x}"));
    }
    f
}

/// Walks the `count` slots of an in-use segment, calling `f(entry, slot_bytes)` for each.
/// Returns the offset after the last slot walked and, if the walk could not reach
/// `count` slots, why.
pub fn walk_segment(
    map: &Mapping,
    ph: &PoolHeader,
    id: u64,
    count: u64,
    mut f: impl FnMut(&ScannedEntry, &[u8]),
) -> (u64, Option<String>) {
    let size = ph.segment_size;
    let base = ph.segment_offset(id);
    let seg = match map.view(base, size as usize) {
        Ok(s) => s,
        Err(e) => return (SEGMENT_HEADER_SIZE, Some(e.to_string())),
    };
    let mut off = SEGMENT_HEADER_SIZE;
    for i in 0..count {
        if off + ENTRY_HEADER_SIZE > size {
            return (off, Some(format!("count is {count} but slot {i} would start at {off}, past the segment")));
        }
        let slot = &seg[off as usize..];
        let next = u64::from_le_bytes(slot[24..32].try_into().unwrap_or([0; 8]));
        let e = ScannedEntry { slot: i, offset: off, next_offset: next, result: check_entry(slot, off, size) };
        f(&e, slot);
        if !next_offset_ok(off, next, size) {
            return (
                off,
                Some(format!(
                    "slot {i} at offset {off} has next_offset {next}: {} counted slots unreachable",
                    count - i - 1
                )),
            );
        }
        off = next;
    }
    (off, None)
}

/// What recovery found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RecoveryReport {
    /// Keys with a live value.
    pub keys: u64,
    /// Keys whose newest entry is a tombstone.
    pub tombstones: u64,
    /// Entries accepted (valid), newest or not.
    pub entries_valid: u64,
    /// Valid entries superseded by a newer version.
    pub entries_superseded: u64,
    /// Slots rejected, by reason.
    pub entries_rejected: BTreeMap<String, u64>,
    /// Bytes of slots in use.
    pub used_bytes: u64,
    /// Bytes of newest entries.
    pub live_bytes: u64,
    /// Used bytes that are not live.
    pub garbage_bytes: u64,
    /// Segments in the pool.
    pub segments_total: u64,
    /// Segments in use.
    pub segments_in_use: u64,
    /// Segments free.
    pub segments_free: u64,
    /// Segments that look allocated but are damaged (kept out of the free list).
    pub segments_damaged: u64,
    /// Segments per owning client.
    pub segments_per_client: BTreeMap<u64, u64>,
    /// The version the next PUT gets.
    pub next_version: u64,
    /// Damage found (first 100).
    pub problems: Vec<String>,
    /// Repairs made (read-write opens only).
    pub repairs: Vec<String>,
    /// Threads used.
    pub threads: usize,
    /// Wall time of the scan, milliseconds.
    pub elapsed_ms: f64,
}

impl RecoveryReport {
    /// Total rejected slots.
    pub fn rejected(&self) -> u64 {
        self.entries_rejected.values().sum()
    }
}

const MAX_PROBLEMS: usize = 100;

/// Scans `pool`'s media into its index, allocator and counters.
pub(super) fn recover(pool: &Pool) -> Result<RecoveryReport> {
    let t0 = Instant::now();
    let ph = pool.header.clone();
    let map = pool.media.map();
    let n = ph.segment_count;
    let threads = std::thread::available_parallelism().map(|p| p.get()).unwrap_or(1).min(n as usize).max(1);
    let found: Mutex<Vec<Option<SegmentFound>>> = Mutex::new(vec![None; n as usize]);
    let rejected: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
    let problems: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let max_version = AtomicU64::new(0);
    let valid = AtomicU64::new(0);
    let next_seg = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut local_rej: BTreeMap<String, u64> = BTreeMap::new();
                let mut local_max = 0u64;
                let mut local_valid = 0u64;
                loop {
                    let id = next_seg.fetch_add(1, Ordering::Relaxed);
                    if id >= n {
                        break;
                    }
                    let f = read_segment(map, &ph, id);
                    if let Some(p) = &f.problem {
                        let mut pr = problems.lock().unwrap_or_else(|e| e.into_inner());
                        if pr.len() < MAX_PROBLEMS {
                            pr.push(format!("segment {id}: {p}"));
                        }
                    }
                    if f.in_use() {
                        let (end, damage) = walk_segment(map, &ph, id, f.count, |e, slot| {
                            let v = u64::from_le_bytes(slot[8..16].try_into().unwrap_or([0; 8]));
                            if u16::from_le_bytes([slot[4], slot[5]]) == ENTRY_MAGIC {
                                local_max = local_max.max(v);
                            }
                            match &e.result {
                                Ok(h) => {
                                    local_valid += 1;
                                    let key = &slot[ENTRY_HEADER_SIZE as usize..][..h.key_len as usize];
                                    let loc = Loc {
                                        segment: id as u32,
                                        offset: e.offset as u32,
                                        len: h.entry_len() as u32,
                                        version: h.version,
                                        tombstone: h.is_tombstone(),
                                    };
                                    pool.index_entry(key, loc);
                                }
                                Err(fault) => *local_rej.entry(fault.to_string()).or_default() += 1,
                            }
                        });
                        pool.seg_used[id as usize].store(end - SEGMENT_HEADER_SIZE, Ordering::Relaxed);
                        if let Some(d) = damage {
                            let mut pr = problems.lock().unwrap_or_else(|e| e.into_inner());
                            if pr.len() < MAX_PROBLEMS {
                                pr.push(format!("segment {id}: {d}"));
                            }
                        }
                    }
                    found.lock().unwrap_or_else(|e| e.into_inner())[id as usize] = Some(f);
                }
                max_version.fetch_max(local_max, Ordering::Relaxed);
                valid.fetch_add(local_valid, Ordering::Relaxed);
                let mut r = rejected.lock().unwrap_or_else(|e| e.into_inner());
                for (k, v) in local_rej {
                    *r.entry(k).or_default() += v;
                }
            });
        }
    });
    let found: Vec<SegmentFound> =
        found.into_inner().unwrap_or_else(|e| e.into_inner()).into_iter().flatten().collect();
    let mut report = RecoveryReport {
        entries_rejected: rejected.into_inner().unwrap_or_else(|e| e.into_inner()),
        problems: problems.into_inner().unwrap_or_else(|e| e.into_inner()),
        threads,
        segments_total: n,
        entries_valid: valid.load(Ordering::Relaxed),
        ..Default::default()
    };

    // Allocator state and the owners' logs.
    let mut by_owner: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    let mut max_owner = 0u64;
    {
        let mut a = pool.lock();
        a.free.clear();
        for f in &found {
            let gen = f.header.map(|h| h.generation).unwrap_or(0);
            if f.in_use() {
                let (Some(h), Some(state)) = (f.header, f.state) else { continue };
                a.segs[f.id as usize] =
                    SegMeta { state, owner: h.owner, prev: h.prev, next: f.next, log_seq: h.log_seq, generation: gen };
                by_owner.entry(h.owner).or_default().push((h.log_seq, f.id));
                if h.owner != CLEANER_OWNER {
                    max_owner = max_owner.max(h.owner);
                }
                report.segments_in_use += 1;
            } else if f.problem.is_some() {
                report.segments_damaged += 1;
            } else {
                a.segs[f.id as usize] = SegMeta::free(gen);
                a.free.push(f.id);
                report.segments_free += 1;
            }
        }
        a.free.sort_unstable_by(|x, y| y.cmp(x));
    }
    let writable = !pool.media.is_read_only();
    for (owner, segs) in by_owner.iter_mut() {
        segs.sort_unstable();
        report.segments_per_client.insert(*owner, segs.len() as u64);
        for w in segs.windows(2) {
            let ((s0, a), (s1, b)) = (w[0], w[1]);
            if s0 == s1 {
                report.problems.push(format!("client {owner}: segments {a} and {b} both claim log position {s0}"));
                continue;
            }
            let meta_b = pool.seg_meta(b);
            if meta_b.map(|m| m.prev) != Some(a) {
                report
                    .problems
                    .push(format!("client {owner}: segment {b} links back to {:?}, not {a}", meta_b.map(|m| m.prev)));
            }
            if pool.seg_meta(a).map(|m| m.next) != Some(b) {
                // The allocation of `b` persisted before the link from `a` did.
                if writable {
                    let off = pool.segment_offset(a) + SEG_NEXT_OFF;
                    pool.media.store_u64(off, b)?;
                    pool.media.persist(off, 8)?;
                    pool.lock().segs[a as usize].next = b;
                    report.repairs.push(format!("client {owner}: linked segment {a} -> {b}"));
                }
            }
        }
    }
    if writable {
        // Writers of active segments are gone with the old process: seal them.
        for f in &found {
            if f.in_use() && f.state == Some(SegmentState::Active) {
                pool.seal_segment(f.id)?;
            }
        }
    }

    let mut keys = 0u64;
    let mut tombs = 0u64;
    let mut indexed = 0u64;
    pool.index.for_each(|l| {
        indexed += 1;
        if l.tombstone {
            tombs += 1
        } else {
            keys += 1
        }
    });
    report.keys = keys;
    report.tombstones = tombs;
    report.entries_superseded = report.entries_valid.saturating_sub(indexed);
    report.used_bytes = pool.seg_used.iter().map(|a| a.load(Ordering::Relaxed)).sum();
    report.live_bytes = pool.seg_live.iter().map(|a| a.load(Ordering::Relaxed)).sum();
    report.garbage_bytes = report.used_bytes.saturating_sub(report.live_bytes);
    report.next_version = max_version.load(Ordering::Relaxed) + 1;
    pool.next_version.store(report.next_version, Ordering::Release);
    pool.next_client.store(max_owner + 1, Ordering::Release);
    report.problems.truncate(MAX_PROBLEMS);
    report.elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
    Ok(report)
}
