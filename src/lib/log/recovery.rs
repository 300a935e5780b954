//! Recovery: rebuilding the volatile state of a pool from its media.
//!
//! Every segment whose header is valid and whose `state` is active or sealed is walked
//! by `next_offset` for its `count` slots (a `count` whose check fails is repaired
//! if one flipped bit explains it, else the slots are walked by their links and the
//! segment reported), then on past `count` for as long as each next slot holds an entry
//! that verifies in full ([`WalkLimit::CountThenSealed`]); a writable pool then gets
//! its `count` raised over them.
//!
//! Why past `count`: a client-durable entry. RDMP-CC's client WRITEs its entry and
//! FLUSHes it itself, without the server's CPU, and the server counts it only later (at
//! the client's next request, or when it leaves). The decision is that such an entry
//! still carries the server's version and seal, both given in the allocation phase
//! (the seal covers the slot, the version, the header with the checksum the client
//! computes over the value, and the key), so recovery's rule does not change: it
//! believes only sealed entries, and the seal binds the generation and offset, so no
//! stale entry of an earlier use of the segment passes. What changes is only how far it
//! reads. Past `count` no bit repair is tried, and the walk stops at the first slot that
//! does not verify (a client writes its slots in order, each durable before the next
//! is allocated). A slot's entry is accepted only if its magic, lengths, bounds and
//! checksum are valid and its seal verifies with a version below the pool's high-water
//! mark ([`check_entry`]): recovery believes only what the server committed, never the
//! client-writable bytes around it. Per key the highest `version_num` wins and
//! tombstones delete. Torn, forged or garbage entries are counted by fault and never
//! indexed; repaired ones are counted. The version counter restarts at the durable
//! high-water mark (never below), and client ids above every owner found.
//!
//! Segments are scanned by several threads (one per core); the index is sharded, so
//! they insert concurrently. The same walker ([`walk_segment`]) serves `inspect-log`.
//!
//! `recover` runs its steps in order, one function each: read the high-water mark,
//! scan the segments (the shared `Scan`: per segment its header, then per slot index
//! or count), rebuild the allocator, recover the cell table and the Clover arena (if
//! the pool has them: `log::table`, `log::arena`), check the owners' logs (repairing a
//! missing link), seal and repair segments and rewrite the words of entries repaired
//! from one flipped bit (writable opens), count the index, restart the counters.
//!
//! Owns: reading the media back (segment header words, slot walks) and the recovery
//! report. Every field is decoded through [`format`](super::format); it imports only
//! the pool (`super`), `index` (the locations it inserts), `pmem` (the mapping it
//! reads), `cpus` (how many threads scan) and `error`.

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
    /// A flipped bit in the entry's version or seal was repaired.
    pub repaired: bool,
    /// The entry's checksum fails but its seal verifies: the server committed this key
    /// and version here and the value is damaged ([`check_damaged_value`]).
    #[serde(skip)]
    pub damaged: Option<EntryHeader>,
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
    /// What the `state` word's check said.
    #[serde(skip)]
    pub state_check: StateCheck,
    /// Counted slots (decoded from the `count` word; repaired if one bit flipped).
    pub count: u64,
    /// Raw `count` word.
    pub count_word: u64,
    /// What the `count` word's check said (`None`: the header is not valid).
    #[serde(skip)]
    pub count_check: Option<CountCheck>,
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
            && matches!(self.state, Some(SegmentState::Active | SegmentState::Sealed))
    }
}

impl SegmentFound {
    /// What is wrong with the `state` word of a segment in use, if anything.
    pub fn state_damage(&self) -> Option<String> {
        let st = self.state.map_or("", SegmentState::name);
        match self.state_check {
            StateCheck::Repaired(_) => {
                Some(format!("state word {:#018x} fails its check; one flipped bit repaired: {st}", self.state_word))
            }
            StateCheck::Damaged if self.in_use() => Some(format!(
                "state word {:#018x} fails its check and no one-bit repair verifies; kept as {st}, its entries read",
                self.state_word
            )),
            _ => None,
        }
    }

    /// How far to walk the segment.
    pub fn limit(&self) -> WalkLimit {
        match self.count_check {
            Some(CountCheck::Damaged) => WalkLimit::Links,
            _ => WalkLimit::CountThenSealed(self.count),
        }
    }

    /// What is wrong with the `count` word, if anything.
    pub fn count_damage(&self) -> Option<String> {
        match self.count_check {
            Some(CountCheck::Repaired(n)) => Some(format!(
                "count word {:#018x} fails its check; one flipped bit repaired: {n} slots",
                self.count_word
            )),
            Some(CountCheck::Damaged) => Some(format!(
                "count word {:#018x} fails its check and no one-bit repair verifies; slots walked by their links",
                self.count_word
            )),
            _ => None,
        }
    }
}

/// Reads segment `id`'s header words, checking `count` under the pool's seal key.
pub fn read_segment(map: &Mapping, ph: &PoolHeader, id: u64) -> SegmentFound {
    let base = ph.segment_offset(id);
    let word = |o: u64| map.read_u64(base + o).unwrap_or(0);
    let sealer = ph.sealer();
    let state_word = word(SEG_STATE_OFF);
    let state_check = ph.check_state(&sealer, id, state_word);
    let state = match state_check {
        StateCheck::Ok(s) | StateCheck::Repaired(s) => Some(s),
        StateCheck::Damaged => None,
    };
    let count_word = word(SEG_COUNT_OFF);
    let mut f = SegmentFound {
        id,
        header: None,
        state,
        state_word,
        state_check,
        count: 0,
        count_word,
        count_check: None,
        next: word(SEG_NEXT_OFF),
        problem: None,
    };
    // A state word that fails its check may be a sealed segment's: kept out of the
    // free list and reported, never freed unread.
    let looks_allocated = matches!(state, Some(SegmentState::Active | SegmentState::Sealed) | None);
    match map
        .view(base, SEG_FIXED_LEN)
        .map_err(|e| e.to_string())
        .and_then(|b| SegmentHeader::decode(b, &sealer).map_err(|e| e.to_string()))
    {
        Ok(h) if h.segment_id != id => {
            f.problem = Some(format!("header names segment {} but sits at {id}", h.segment_id));
        }
        Ok(h) => {
            let c = sealer.check_count(id, h.generation, count_word);
            f.count = match c {
                CountCheck::Ok(n) | CountCheck::Repaired(n) => n,
                CountCheck::Damaged => 0,
            };
            f.count_check = Some(c);
            f.header = Some(h);
        }
        // A torn header with a free state is an allocation a crash interrupted: free.
        Err(e) if looks_allocated => f.problem = Some(e),
        Err(_) => {}
    }
    if f.header.is_some() && state.is_none() {
        if ph.checks_state() {
            // A checked word that lost more than one bit: believing the segment's
            // sealed entries loses nothing (versions decide), while freeing it could
            // lose the only copy of a value.
            f.state = Some(SegmentState::Sealed);
        } else {
            f.problem.get_or_insert_with(|| format!("unknown state word {state_word:#x}"));
        }
    }
    f
}

/// How far a segment walk goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkLimit {
    /// Exactly this many slots (a verified `count`).
    Count(u64),
    /// This many slots, then on along the links while each slot holds an entry that
    /// verifies in full (seal, version below the high-water mark, checksum; no repair):
    /// entries made durable before the server counted them. RDMP-CC's client writes its
    /// sealed entry and FLUSHes it itself, and the server counts it later; a BOOM entry
    /// sealed and written back just before a crash (its `count` not yet stored) is
    /// found the same way. Such an entry was sealed for this segment's generation and
    /// slot by the server, so nothing is believed that the server did not seal.
    CountThenSealed(u64),
    /// While slots carry the entry magic and a usable `next_offset` (a damaged `count`:
    /// every entry met is still checked by its seal).
    Links,
}

/// Walks the slots of in-use segment `found` up to `limit`, checking every entry under
/// `trust`, calling `f(entry, slot_bytes)` for each. Returns the offset after the last
/// slot walked and, if a counted walk could not reach `count` slots, why.
pub fn walk_segment(
    map: &Mapping,
    ph: &PoolHeader,
    trust: &Trust,
    found: &SegmentFound,
    limit: WalkLimit,
    mut f: impl FnMut(&ScannedEntry, &[u8]),
) -> (u64, Option<String>) {
    let size = ph.segment_size;
    let id = found.id;
    let generation = found.header.map(|h| h.generation).unwrap_or(0);
    let base = ph.segment_offset(id);
    let seg = match map.view(base, size as usize) {
        Ok(s) => s,
        Err(e) => return (SEGMENT_HEADER_SIZE, Some(e.to_string())),
    };
    let (count, counted) = match limit {
        WalkLimit::Count(n) => (n, n),
        WalkLimit::CountThenSealed(n) => (u64::MAX, n),
        WalkLimit::Links => (u64::MAX, u64::MAX),
    };
    let mut repairs = REPAIRS_PER_SEGMENT;
    let mut off = SEGMENT_HEADER_SIZE;
    let mut i = 0u64;
    while i < count {
        // Past `count` (CountThenSealed): only entries that verify in full.
        let probing = i >= counted;
        if off + ENTRY_HEADER_SIZE > size {
            if limit == WalkLimit::Links || probing {
                break;
            }
            return (off, Some(format!("count is {count} but slot {i} would start at {off}, past the segment")));
        }
        let slot = &seg[off as usize..];
        let next = EntryHeader::decode(slot).map(|h| h.next_offset);
        if limit == WalkLimit::Links && !next.as_ref().is_ok_and(|&n| next_offset_ok(off, n, size)) {
            break;
        }
        let next = next.unwrap_or_else(|_| stored_next_offset(slot).unwrap_or(0));
        let place = SlotPlace { segment: id, generation, offset: off };
        if probing {
            match check_entry(slot, place, size, trust, &mut 0) {
                Ok(c) if next_offset_ok(off, c.header.next_offset, size) => {}
                _ => break,
            }
        }
        let checked = check_entry(slot, place, size, trust, &mut repairs);
        let damaged = match checked {
            Err(EntryFault::BadChecksum) => check_damaged_value(slot, place, size, trust),
            _ => None,
        };
        let e = ScannedEntry {
            slot: i,
            offset: off,
            next_offset: next,
            repaired: checked.is_ok_and(|c| c.repaired),
            damaged,
            result: checked.map(|c| c.header),
        };
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
        i += 1;
    }
    (off, None)
}

/// What recovery found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RecoveryReport {
    /// The pool was created (and formatted) by this open: there was nothing to recover.
    pub created: bool,
    /// Keys with a live value.
    pub keys: u64,
    /// Keys whose newest entry is a tombstone.
    pub tombstones: u64,
    /// Entries accepted (valid), newest or not.
    pub entries_valid: u64,
    /// Valid entries superseded by a newer version.
    pub entries_superseded: u64,
    /// Valid entries whose version or seal had a flipped bit, repaired.
    pub entries_repaired: u64,
    /// Segments whose `count` word failed its check (repaired or walked by links).
    pub counts_damaged: u64,
    /// Words of the pool header that failed their check: a copy of the version
    /// high-water mark, the cell table's or the arena's descriptor.
    pub header_problems: u64,
    /// The durable version high-water mark found.
    pub version_hwm: u64,
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
    /// The cell table (pDPM-Direct) and what recovery did to it.
    pub cells: super::table::CellsReport,
    /// The Clover arena and what recovery did to it.
    pub clover: super::arena::CloverReport,
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

    /// Rejected slots no version was ever stored in: writes a crash interrupted.
    pub fn interrupted(&self) -> u64 {
        self.entries_rejected.get(&EntryFault::NoVersion.to_string()).copied().unwrap_or(0)
    }

    /// Damage found: rejected slots other than those no version was ever stored in
    /// (an interrupted write), repaired entries, damaged `count` words, segments and
    /// header words, cells neither of whose slots verifies, and Clover heads whose
    /// first version does not verify. What a crash leaves by itself (an interrupted
    /// write, a cell restored from its other slot, a held lock) is not damage.
    pub fn damaged(&self) -> u64 {
        self.rejected() - self.interrupted()
            + self.entries_repaired
            + self.counts_damaged
            + self.segments_damaged
            + self.header_problems
            + self.cells.cells_damaged
            + self.clover.heads_damaged
    }
}

const MAX_PROBLEMS: usize = 100;

/// How recovery reports an entry whose version or seal had one flipped bit.
pub const REPAIRED_ENTRY: &str =
    "one flipped bit in its version or seal word, repaired (it reads as written; a writable open rewrites the word)";

/// How recovery reports an entry [`check_damaged_value`] found.
pub const DAMAGED_VALUE: &str = "value damaged under a valid seal (the key reads as damaged, never as an older value)";

/// Scans `pool`'s media into its index, allocator and counters.
pub(super) fn recover(pool: &Pool) -> Result<RecoveryReport> {
    let t0 = Instant::now();
    let (hwm, early_problems) = read_high_water(pool.media.map())?;
    let n = pool.header.segment_count;
    let threads = crate::cpus::count().min(n as usize).max(1);
    let (cells, cells_problem) = super::table::read_descriptor(pool);
    let (arena, arena_problem) = super::arena::read_descriptor(pool);
    let mut early_problems = early_problems;
    early_problems.extend(cells_problem);
    early_problems.extend(arena_problem);
    let header_problems = early_problems.len() as u64;
    let mut scan = Scan::new(pool, Trust { sealer: pool.sealer, hwm }, early_problems);
    scan.cells = cells;
    scan.arena = arena;
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| scan.worker());
        }
    });
    let scanned = scan.finish();
    let mut report = RecoveryReport {
        header_problems,
        entries_rejected: scanned.rejected,
        problems: scanned.problems,
        threads,
        segments_total: n,
        entries_valid: scanned.valid,
        ..Default::default()
    };
    let mut owners = rebuild_allocator(pool, &scanned.found, &mut report);
    let writable = !pool.media.is_read_only();
    if let Some(t) = cells {
        report.cells = super::table::recover_cells(pool, t, writable)?;
        report.segments_in_use += t.segments;
    }
    if let Some(a) = arena {
        report.clover = super::arena::recover_clover(pool, a, writable)?;
        report.segments_in_use += a.segments;
    }
    check_owner_logs(pool, &mut owners.logs, writable, &mut report)?;
    if writable {
        repair_segments(pool, &scanned.found, &mut report)?;
        rewrite_repaired(pool, &scanned.repaired, &mut report)?;
    }
    count_index(pool, &mut report);
    report.entries_repaired = scanned.repaired.len() as u64;
    report.counts_damaged = scanned.counts_damaged;
    restart_counters(pool, hwm, scanned.max_version, owners.max_owner, &mut report);
    report.problems.truncate(MAX_PROBLEMS);
    report.elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
    Ok(report)
}

/// The durable version high-water mark from its two copies, and the damage found in
/// them. Without a valid mark: [`MAX_VERSION`] (believe every sealed version).
fn read_high_water(map: &Mapping) -> Result<(u64, Vec<String>)> {
    let mut problems = Vec::new();
    let hwm = match read_hwm(map.read_u64(POOL_HWM_OFFS[0])?, map.read_u64(POOL_HWM_OFFS[1])?) {
        Ok(h) => h,
        Err(p) => {
            // Without a mark, believe every sealed version; the counter restarts above
            // the largest one found and the next lease rewrites both copies.
            problems.push(format!("pool header: {p}"));
            MAX_VERSION
        }
    };
    for (i, off) in POOL_HWM_OFFS.iter().enumerate() {
        if decode_hwm(map.read_u64(*off)?).is_none() && hwm != MAX_VERSION {
            problems.push(format!("pool header: high-water mark copy {i} fails its check (the other is used)"));
        }
    }
    Ok((hwm, problems))
}

/// The index location of the entry `h` at `offset` of segment `id`.
fn loc_of(id: u64, offset: u64, h: &EntryHeader) -> Loc {
    Loc {
        segment: id as u32,
        offset: offset as u32,
        len: h.entry_len() as u32,
        version: h.version,
        tombstone: h.is_tombstone(),
    }
}

/// Locks `m`, whether or not another scanning thread panicked holding it.
fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The segment scan shared by the scanning threads: the next segment to take, and
/// what the threads found so far.
struct Scan<'a> {
    pool: &'a Pool,
    trust: Trust,
    next_seg: AtomicU64,
    found: Mutex<Vec<Option<SegmentFound>>>,
    rejected: Mutex<BTreeMap<String, u64>>,
    problems: Mutex<Vec<String>>,
    max_version: AtomicU64,
    valid: AtomicU64,
    /// The entries repaired from one flipped bit: where, with their true words.
    repaired: Mutex<Vec<RepairedEntry>>,
    counts_damaged: AtomicU64,
    /// The cell table, whose segments are not scanned.
    cells: Option<super::cells::CellTable>,
    /// The Clover arena, whose segments are not scanned.
    arena: Option<super::clover::Arena>,
}

/// What one scanning thread counts before it merges into the [`Scan`].
#[derive(Default)]
struct Tally {
    rejected: BTreeMap<String, u64>,
    max_version: u64,
    valid: u64,
}

/// What the scan found, all threads merged.
struct Scanned {
    found: Vec<SegmentFound>,
    rejected: BTreeMap<String, u64>,
    problems: Vec<String>,
    max_version: u64,
    valid: u64,
    repaired: Vec<RepairedEntry>,
    counts_damaged: u64,
}

/// An entry recovery believed after repairing one flipped bit of its version or
/// seal: where it is and the two words as they verify.
struct RepairedEntry {
    segment: u64,
    offset: u64,
    version: u64,
    seal: u64,
}

impl<'a> Scan<'a> {
    fn new(pool: &'a Pool, trust: Trust, early_problems: Vec<String>) -> Scan<'a> {
        Scan {
            pool,
            trust,
            next_seg: AtomicU64::new(0),
            found: Mutex::new(vec![None; pool.header.segment_count as usize]),
            rejected: Mutex::new(BTreeMap::new()),
            problems: Mutex::new(early_problems),
            max_version: AtomicU64::new(0),
            valid: AtomicU64::new(0),
            repaired: Mutex::new(Vec::new()),
            counts_damaged: AtomicU64::new(0),
            cells: None,
            arena: None,
        }
    }

    /// Records a problem (the first [`MAX_PROBLEMS`] are kept).
    fn problem(&self, p: String) {
        let mut pr = locked(&self.problems);
        if pr.len() < MAX_PROBLEMS {
            pr.push(p);
        }
    }

    /// One scanning thread: takes segments until none is left, then merges its tally.
    fn worker(&self) {
        let mut tally = Tally::default();
        loop {
            let id = self.next_seg.fetch_add(1, Ordering::Relaxed);
            if id >= self.pool.header.segment_count {
                break;
            }
            self.segment(id, &mut tally);
        }
        self.max_version.fetch_max(tally.max_version, Ordering::Relaxed);
        self.valid.fetch_add(tally.valid, Ordering::Relaxed);
        let mut r = locked(&self.rejected);
        for (k, v) in tally.rejected {
            *r.entry(k).or_default() += v;
        }
    }

    /// Reads segment `id`'s header and, if it is in use, indexes its entries. The cell
    /// table's segments are cells from their first byte: not read here.
    fn segment(&self, id: u64, tally: &mut Tally) {
        if self.cells.is_some_and(|t| t.holds_segment(id)) || self.arena.is_some_and(|a| a.holds_segment(id)) {
            return;
        }
        let f = read_segment(self.pool.media.map(), &self.pool.header, id);
        if let Some(p) = &f.problem {
            self.problem(format!("segment {id}: {p}"));
        }
        if let Some(p) = f.state_damage() {
            self.problem(format!("segment {id}: {p}"));
        }
        if f.in_use() {
            self.walk(&f, tally);
        }
        locked(&self.found)[id as usize] = Some(f);
    }

    /// Walks in-use segment `f`, indexing every entry believed, and records how far the
    /// walk went (the segment's used bytes and counted slots).
    fn walk(&self, f: &SegmentFound, tally: &mut Tally) {
        let (pool, id) = (self.pool, f.id);
        if let Some(d) = f.count_damage() {
            self.counts_damaged.fetch_add(1, Ordering::Relaxed);
            self.problem(format!("segment {id}: {d}"));
        }
        let mut walked = 0u64;
        let (end, damage) = walk_segment(pool.media.map(), &pool.header, &self.trust, f, f.limit(), |e, slot| {
            walked += 1;
            self.entry(id, e, slot, tally);
        });
        pool.seg_used[id as usize].store(end - SEGMENT_HEADER_SIZE, Ordering::Relaxed);
        pool.seg_count[id as usize].store(walked, Ordering::Relaxed);
        pool.seg_torn[id as usize]
            .store(damage.is_some() || f.count_check == Some(CountCheck::Damaged), Ordering::Relaxed);
        if let Some(d) = damage {
            self.problem(format!("segment {id}: {d}"));
        }
    }

    /// One slot of segment `id`: a believed entry is indexed, so is a damaged value
    /// under a valid seal (reported); anything else is counted by its fault.
    fn entry(&self, id: u64, e: &ScannedEntry, slot: &[u8], tally: &mut Tally) {
        match &e.result {
            Ok(h) => {
                tally.valid += 1;
                tally.max_version = tally.max_version.max(h.version);
                if e.repaired {
                    self.problem(format!(
                        "segment {id} offset {}: key {} version {}: {REPAIRED_ENTRY}",
                        e.offset,
                        super::inspect::printable_upto(entry_key(slot, h), 128),
                        h.version
                    ));
                    locked(&self.repaired).push(RepairedEntry {
                        segment: id,
                        offset: e.offset,
                        version: h.version,
                        seal: h.seal,
                    });
                }
                self.pool.index_entry(entry_key(slot, h), loc_of(id, e.offset, h));
            }
            Err(_) if e.damaged.is_some() => {
                let Some(h) = e.damaged else { return };
                *tally.rejected.entry(DAMAGED_VALUE.to_string()).or_default() += 1;
                tally.max_version = tally.max_version.max(h.version);
                let key = entry_key(slot, &h);
                self.problem(format!(
                    "segment {id} offset {}: key {} version {}: {DAMAGED_VALUE}",
                    e.offset,
                    super::inspect::printable_upto(key, 128),
                    h.version
                ));
                self.pool.index_entry(key, loc_of(id, e.offset, &h));
            }
            Err(fault) => *tally.rejected.entry(fault.to_string()).or_default() += 1,
        }
    }

    /// What every thread found, merged.
    fn finish(self) -> Scanned {
        Scanned {
            found: self
                .found
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .into_iter()
                .flatten()
                .collect(),
            rejected: self.rejected.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner),
            problems: self.problems.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner),
            max_version: self.max_version.into_inner(),
            valid: self.valid.into_inner(),
            repaired: self.repaired.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner),
            counts_damaged: self.counts_damaged.into_inner(),
        }
    }
}

/// The owners' logs found: per owner, `(log_seq, segment)` of its segments, and the
/// largest client id among them.
struct Owners {
    logs: BTreeMap<u64, Vec<(u64, u64)>>,
    max_owner: u64,
}

/// Rebuilds the allocator from the segments found (in use, damaged and kept out of
/// the free list, or free) and collects the owners' logs.
fn rebuild_allocator(pool: &Pool, found: &[SegmentFound], report: &mut RecoveryReport) -> Owners {
    let mut owners = Owners { logs: BTreeMap::new(), max_owner: 0 };
    let mut a = pool.lock();
    a.free.clear();
    for f in found {
        let gen = f.header.map_or(0, |h| h.generation);
        if f.in_use() {
            let (Some(h), Some(state)) = (f.header, f.state) else { continue };
            a.segs[f.id as usize] =
                SegMeta { state, owner: h.owner, prev: h.prev, next: f.next, log_seq: h.log_seq, generation: gen };
            owners.logs.entry(h.owner).or_default().push((h.log_seq, f.id));
            if h.owner < CELLS_OWNER {
                owners.max_owner = owners.max_owner.max(h.owner);
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
    owners
}

/// Checks each owner's log is a chain of increasing positions, each segment linked
/// back to the one before it and that one forward to it; `writable`, a missing forward
/// link is repaired.
///
/// Gaps are no loss: the cleaner frees any sealed segment once its live entries have
/// moved, from the middle of a log too. Nor are repeated positions in the cleaner's
/// own log: boomkv 0.1 began that log at position 0 again with each server run, and
/// its segments hold copies that each carry their version, whatever their order. A
/// segment there may link back to any of the segments one position before it.
fn check_owner_logs(
    pool: &Pool,
    logs: &mut BTreeMap<u64, Vec<(u64, u64)>>,
    writable: bool,
    report: &mut RecoveryReport,
) -> Result<()> {
    for (owner, segs) in logs {
        segs.sort_unstable();
        report.segments_per_client.insert(*owner, segs.len() as u64);
        let log = log_name(*owner);
        for w in segs.windows(2).filter(|w| w[0].0 == w[1].0 && *owner != CLEANER_OWNER) {
            report
                .problems
                .push(format!("{log}: segments {} and {} both claim log position {}", w[0].1, w[1].1, w[0].0));
        }
        for &(seq, b) in segs.iter().filter(|(seq, _)| *seq > 0) {
            let lo = segs.partition_point(|&(s, _)| s < seq - 1);
            let hi = segs.partition_point(|&(s, _)| s < seq);
            let before: Vec<u64> = segs[lo..hi].iter().map(|&(_, id)| id).collect();
            if !before.is_empty() {
                check_link(pool, &log, &before, b, writable, report)?;
            }
        }
    }
    Ok(())
}

/// Checks that segment `b` links back to one of `before`, the segments of its log
/// one position before it, and that one forward to `b`.
fn check_link(
    pool: &Pool,
    log: &str,
    before: &[u64],
    b: u64,
    writable: bool,
    report: &mut RecoveryReport,
) -> Result<()> {
    let prev = pool.seg_meta(b).map(|m| m.prev);
    let Some(a) = prev.filter(|p| before.contains(p)) else {
        let want = before.iter().map(u64::to_string).collect::<Vec<_>>().join(" or ");
        report.problems.push(format!("{log}: segment {b} links back to {prev:?}, not {want}"));
        return Ok(());
    };
    // The allocation of `b` persisted before the link from `a` did: a crash leaves no
    // link, which is what is repaired (in a cleaner log with repeated positions two
    // segments may name the same one before them, and one link cannot serve both).
    if pool.seg_meta(a).map(|m| m.next) == Some(NO_SEGMENT) && writable {
        pool.persist_next(a, b)?;
        pool.lock().segs[a as usize].next = b;
        report.repairs.push(format!("{log}: linked segment {a} -> {b}"));
    }
    Ok(())
}

/// Seals the active segments (their writers are gone with the old process) and
/// rewrites the `state` and `count` words that failed their check.
///
/// A torn segment's `count` (its walk ended on damage, or no repair verified its
/// count) is never lowered to the slots reached: the next recovery must find it torn
/// again, so that nothing is appended after the end it reached.
fn repair_segments(pool: &Pool, found: &[SegmentFound], report: &mut RecoveryReport) -> Result<()> {
    // Free segments too: a damaged word decodes to a state only where it was repaired,
    // or kept as sealed on a segment in use.
    for f in found.iter().filter(|f| f.problem.is_none()) {
        if let (StateCheck::Repaired(_) | StateCheck::Damaged, Some(st)) = (f.state_check, f.state) {
            pool.persist_state(f.id, st)?;
            report.repairs.push(format!("segment {}: state word rewritten as {}", f.id, st.name()));
        }
    }
    for f in found.iter().filter(|f| f.in_use()) {
        if f.state == Some(SegmentState::Active) {
            pool.seal_segment(f.id)?;
        }
        let torn = pool.is_torn(f.id);
        if let (Some(h), Some(CountCheck::Repaired(true_count))) = (f.header, f.count_check) {
            let n = if torn { true_count } else { pool.segment_slots(f.id) };
            pool.persist_count(f.id, h.generation, n)?;
            report.repairs.push(format!("segment {}: count rewritten as {n} slots", f.id));
        } else if let (Some(h), Some(CountCheck::Ok(_))) = (f.header, f.count_check) {
            // Sealed entries found past `count` (made durable before they were counted):
            // count them, so the cleaner and later recoveries walk them as counted slots.
            let n = pool.segment_slots(f.id);
            if n > f.count {
                pool.persist_count(f.id, h.generation, n)?;
                report.repairs.push(format!("segment {}: count raised from {} to {n} slots", f.id, f.count));
            }
        }
    }
    Ok(())
}

/// Rewrites the version and seal words of the entries recovery repaired, as they
/// verify: else every later recovery finds the flipped bit again, and one more flip in
/// the same words would be past repair. One of the two words changes; each is one
/// aligned 8-byte store, so a crash leaves the old or the new word.
fn rewrite_repaired(pool: &Pool, repaired: &[RepairedEntry], report: &mut RecoveryReport) -> Result<()> {
    for r in repaired {
        pool.store_version(r.segment, r.offset, r.version, r.seal)?;
        pool.media.persist(pool.pool_offset(r.segment, r.offset) + ENTRY_VERSION_OFF, ENTRY_VERSION_SEAL_LEN)?;
        report.repairs.push(format!("segment {} offset {}: version and seal words rewritten", r.segment, r.offset));
    }
    Ok(())
}

/// Counts the keys, tombstones and superseded entries of the rebuilt index, and the
/// used, live and garbage bytes.
fn count_index(pool: &Pool, report: &mut RecoveryReport) {
    let mut keys = 0u64;
    let mut tombs = 0u64;
    let mut indexed = 0u64;
    pool.index.for_each(|l| {
        indexed += 1;
        if l.tombstone {
            tombs += 1;
        } else {
            keys += 1;
        }
    });
    report.keys = keys;
    report.tombstones = tombs;
    report.entries_superseded = report.entries_valid.saturating_sub(indexed);
    report.used_bytes = pool.seg_used.iter().map(|a| a.load(Ordering::Relaxed)).sum();
    report.live_bytes = pool.seg_live.iter().map(|a| a.load(Ordering::Relaxed)).sum();
    report.garbage_bytes = report.used_bytes.saturating_sub(report.live_bytes);
}

/// Restarts the version counter and the client ids: versions never below the durable
/// mark `hwm` (versions below it may have been acknowledged in entries that are gone or
/// damaged) nor at or below `max_version`, the largest found; without a valid mark,
/// a lease above every version found. Client ids above every owner found.
fn restart_counters(pool: &Pool, hwm: u64, max_version: u64, max_owner: u64, report: &mut RecoveryReport) {
    let (start, durable) = if hwm == MAX_VERSION {
        let s = (max_version + 1).saturating_add(VERSION_LEASE).min(MAX_VERSION);
        (s, s)
    } else {
        (hwm.max(max_version + 1), hwm)
    };
    report.version_hwm = durable;
    report.next_version = start;
    pool.hwm.store(durable, Ordering::Release);
    pool.next_version.store(start, Ordering::Release);
    pool.next_client.store(max_owner + 1, Ordering::Release);
}
