//! The log: a pool of segments, each client's persistent log of segments, entries,
//! recovery and space accounting.
//!
//! - [`format`](mod@format) defines every on-media byte (tables there).
//! - [`Pool`] opens or creates a pool, allocates and links segments, and gives the
//!   protocols the operations of the PUT path (validate an entry, assign its version,
//!   write it back, bump `count`, index it).
//! - [`recovery`] scans a pool into the index; `recover` and `inspect-log` use it.
//! - [`space`] counts bytes appended, rewritten in place, live and garbage.
//!
//! Only [`format`](mod@format) knows where a field lies: the rest of the log (and every
//! reader outside it) reads and writes media fields through its decoders, encoders and
//! named offsets, never by literal offset. The log imports `pmem` (the media), `index`,
//! `cpus` (recovery's thread count) and `error`, nothing above them.

pub mod arena;
pub mod cells;
pub mod cleaner;
pub mod clover;
pub mod format;
pub mod inspect;
pub mod recovery;
pub mod space;
pub mod table;
#[cfg(test)]
mod tests;
pub mod writer;

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::error::{Error, Result};
use crate::index::{Index, IndexKind, KeySource, Loc, Upsert};
use crate::pmem::{resolve_pool_path, Media, MediaOptions};
use format::*;
pub use recovery::RecoveryReport;
pub use space::{SpaceCounters, SpaceReport};
pub use writer::{ActiveSegment, CommitError, CommitTimes, Committed, LocalWriter, ServerLog, WriteMode};

/// How to open a pool.
#[derive(Clone, Debug)]
pub struct PoolOptions {
    /// Media options (size on creation, read-only, flush instruction, durability).
    pub media: MediaOptions,
    /// Segment size for a new pool (an existing pool keeps its own).
    pub segment_size: u64,
    /// Index variant to rebuild.
    pub index: IndexKind,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions { media: MediaOptions::default(), segment_size: DEFAULT_SEGMENT_SIZE, index: IndexKind::Hash }
    }
}

/// What the allocator knows of one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SegMeta {
    /// Life-cycle state.
    pub state: SegmentState,
    /// Owning client (0 for free segments).
    pub owner: u64,
    /// Previous segment of the owner's log.
    pub prev: u64,
    /// Next segment of the owner's log.
    pub next: u64,
    /// Position in the owner's log.
    pub log_seq: u64,
    /// Allocation generation.
    pub generation: u64,
}

impl SegMeta {
    fn free(generation: u64) -> SegMeta {
        SegMeta { state: SegmentState::Free, owner: 0, prev: NO_SEGMENT, next: NO_SEGMENT, log_seq: 0, generation }
    }
}

struct Allocator {
    /// Free segment ids, highest first so `pop` hands out the lowest.
    free: Vec<u64>,
    segs: Vec<SegMeta>,
}

/// An open pool: media, header, allocator, index and counters.
pub struct Pool {
    media: Media,
    header: PoolHeader,
    alloc: Mutex<Allocator>,
    index: Index,
    sealer: Sealer,
    next_version: AtomicU64,
    /// The durable version high-water mark: every version handed out is below it.
    hwm: AtomicU64,
    /// Serialises leases of new version blocks.
    lease: Mutex<()>,
    next_client: AtomicU64,
    /// Largest value a commit accepts (the serving server's `--max-value`).
    value_limit: AtomicU32,
    /// Per segment: the `count` the server itself stored (the media word is client-writable).
    seg_count: Vec<AtomicU64>,
    seg_used: Vec<AtomicU64>,
    seg_live: Vec<AtomicU64>,
    /// Per reader part, per segment: server-side reads of its entries in progress
    /// ([`ReadPin`]s held); [`Pool::free_segment`] frees no segment with one in any
    /// part. A part is allocated when its first reader pins (a two-worker server has
    /// two), with a cache line to spare at both ends (see `PinPart`).
    seg_readers: [OnceLock<PinPart>; crate::cpus::WORKER_PARTS],
    /// Per segment: until when (milliseconds after `opened`) a client may still READ an
    /// entry the server named the place of ([`Pool::lookup_leased`]); not freed before.
    seg_lease_until: Vec<AtomicU64>,
    /// The clock of `seg_lease_until`.
    opened: std::time::Instant,
    /// Per segment: recovery's walk ended on damage (or its `count` word was damaged),
    /// so counted slots may lie past the end it found: nothing is appended there.
    seg_torn: Vec<std::sync::atomic::AtomicBool>,
    space: SpaceCounters,
    /// The cell table (pDPM-Direct), once created or recovered.
    cells: OnceLock<cells::CellTable>,
    /// Serialises the table's (and the arena's) creation.
    cells_create: Mutex<()>,
    /// The Clover arena, once created or recovered.
    clover: OnceLock<clover::Arena>,
    /// The arena's chunks (the metadata server's space).
    clover_chunks: Mutex<arena::Chunks>,
}

/// A server-side read of an entry in progress (see [`Pool::lookup_pinned`]): its
/// segment is not freed until the pin is handed back with [`Pool::unpin`]. A pin that
/// is never handed back only keeps that one segment from being reused.
#[must_use = "hand the pin back with Pool::unpin when the read is over"]
#[derive(Debug, PartialEq, Eq)]
pub struct ReadPin {
    segment: u32,
    part: u32,
}

/// One part of the read pins (reader `r`, a server worker, pins in part
/// [`crate::cpus::worker_part`]`(r)`: one count per segment, sixteen to a line, had every
/// GET of a busy two-CPU server fetch a line from the other CPU): a count per segment,
/// after a cache line of padding and before another, so that no other allocation
/// shares a line with the counts.
struct PinPart(Box<[AtomicU32]>);

impl PinPart {
    const PAD: usize = 64 / size_of::<AtomicU32>();

    fn new(segments: usize) -> PinPart {
        PinPart((0..segments + 2 * Self::PAD).map(|_| AtomicU32::new(0)).collect())
    }

    /// Segment `s`'s count (none past the segments).
    fn count(&self, s: usize) -> Option<&AtomicU32> {
        (s + 2 * Self::PAD < self.0.len()).then(|| &self.0[s + Self::PAD])
    }
}

/// What [`Pool::scan_pinned`] found, in key order, and the pins of its entries (with
/// what its `also` made of each).
pub type PinnedScan<A> = (Vec<(Vec<u8>, Loc)>, Vec<(ReadPin, A)>);

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("media", &self.media).field("header", &self.header).finish()
    }
}

/// Bytes of the slot an indexed entry occupies (its length rounded to the slot alignment).
fn slot_bytes(l: &Loc) -> u64 {
    slot_for(l.len as u64)
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl Pool {
    /// Opens the pool that `--pmem ARG` names (a directory, a file or a DAX device),
    /// creating and formatting it if it does not exist (unless read-only), then recovers.
    pub fn open(arg: &Path, opts: &PoolOptions) -> Result<(Pool, RecoveryReport)> {
        let path = resolve_pool_path(arg)?;
        if opts.media.create && !opts.media.read_only && !path.exists() {
            // Validate the layout before creating anything, so bad options leave no file.
            let size = opts.media.create_size.unwrap_or(crate::pmem::DEFAULT_POOL_SIZE);
            PoolHeader::new(size, opts.segment_size, [0; 16], 0)
                .map_err(|e| Error::Path { path: path.clone(), problem: e.to_string() })?;
        }
        let (media, created) = Media::open(&path, &opts.media)?;
        if created {
            Self::format(&media, opts.segment_size).inspect_err(|_| {
                let _ = std::fs::remove_file(&path);
            })?;
        }
        let (pool, mut report) = Self::from_media(media, opts.index)?;
        report.created = created;
        Ok((pool, report))
    }

    /// Keys with a live value now (tombstones not counted), as recovery counts them.
    pub fn live_keys(&self) -> u64 {
        self.index.len().saturating_sub(self.index.tombstones()) as u64
    }

    /// Writes a fresh pool header (with a new uuid and seal key, and a high-water mark
    /// of 1) to `media`, whose segments must be zero.
    pub fn format(media: &Media, segment_size: u64) -> Result<PoolHeader> {
        Pool::format_as(media, segment_size, FORMAT_VERSION)
    }

    /// Formats `media` as a pool of an older format `version` (what an older build
    /// made), for tests of how this build reads and writes such pools.
    #[doc(hidden)]
    pub fn format_as(media: &Media, segment_size: u64, version: u32) -> Result<PoolHeader> {
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(Error::invalid(format!("no pool format version {version} to make")));
        }
        let mut uuid = [0u8; 16];
        let mut rng = rand::rng();
        rand::RngExt::fill(&mut rng, &mut uuid);
        let mut h = PoolHeader::new(media.len(), segment_size, uuid, now_secs())
            .map_err(|e| Error::Path { path: media.path().into(), problem: e.to_string() })?;
        while h.seal_key == [0; 16] {
            rand::RngExt::fill(&mut rng, &mut h.seal_key);
        }
        h.format_version = version;
        media.map().write(0, &h.encode())?;
        for off in POOL_HWM_OFFS {
            media.store_u64(off, encode_hwm(1))?;
        }
        media.persist(0, POOL_HWM_OFFS[1] as usize + POOL_HWM_LEN)?;
        Ok(h)
    }

    /// Decodes the header of `media` and recovers its contents.
    pub fn from_media(media: Media, index: IndexKind) -> Result<(Pool, RecoveryReport)> {
        let hb = media.map().view(0, POOL_HEADER_LEN.min(media.len() as usize))?;
        let header = PoolHeader::decode(hb, media.len())
            .map_err(|e| Error::BadPool { path: media.path().into(), problem: e.to_string() })?;
        let n = header.segment_count as usize;
        let pool = Pool {
            alloc: Mutex::new(Allocator { free: Vec::new(), segs: vec![SegMeta::free(0); n] }),
            index: Index::new(index),
            sealer: header.sealer(),
            next_version: AtomicU64::new(1),
            hwm: AtomicU64::new(1),
            lease: Mutex::new(()),
            next_client: AtomicU64::new(1),
            value_limit: AtomicU32::new(u32::MAX),
            seg_count: (0..n).map(|_| AtomicU64::new(0)).collect(),
            seg_used: (0..n).map(|_| AtomicU64::new(0)).collect(),
            seg_live: (0..n).map(|_| AtomicU64::new(0)).collect(),
            seg_readers: Default::default(),
            seg_lease_until: (0..n).map(|_| AtomicU64::new(0)).collect(),
            opened: std::time::Instant::now(),
            seg_torn: (0..n).map(|_| std::sync::atomic::AtomicBool::new(false)).collect(),
            space: SpaceCounters::default(),
            cells: OnceLock::new(),
            cells_create: Mutex::new(()),
            clover: OnceLock::new(),
            clover_chunks: Mutex::new(arena::Chunks::default()),
            media,
            header,
        };
        let report = recovery::recover(&pool)?;
        Ok((pool, report))
    }

    /// The media.
    pub fn media(&self) -> &Media {
        &self.media
    }

    /// The pool header.
    pub fn header(&self) -> &PoolHeader {
        &self.header
    }

    /// Bytes per segment.
    pub fn segment_size(&self) -> u64 {
        self.header.segment_size
    }

    /// Number of segments.
    pub fn segment_count(&self) -> u64 {
        self.header.segment_count
    }

    /// Pool offset of segment `id`.
    pub fn segment_offset(&self, id: u64) -> u64 {
        self.header.segment_offset(id)
    }

    /// The index.
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Space counters.
    pub fn space(&self) -> &SpaceCounters {
        &self.space
    }

    fn lock(&self) -> MutexGuard<'_, Allocator> {
        self.alloc.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A copy of the allocator's view of segment `id`.
    pub fn seg_meta(&self, id: u64) -> Option<SegMeta> {
        self.lock().segs.get(id as usize).copied()
    }

    /// All segments' metadata.
    pub fn seg_metas(&self) -> Vec<SegMeta> {
        self.lock().segs.clone()
    }

    /// Segments not allocated.
    pub fn free_segments(&self) -> u64 {
        self.lock().free.len() as u64
    }

    /// Sets the largest value a commit accepts (a server's `--max-value`: enforced
    /// here, not only by well-behaved clients).
    pub fn set_value_limit(&self, limit: u32) {
        self.value_limit.store(limit, Ordering::Relaxed);
    }

    /// The largest value a commit accepts.
    pub fn value_limit(&self) -> u32 {
        self.value_limit.load(Ordering::Relaxed)
    }

    /// The pool's keyed checks.
    pub fn sealer(&self) -> &Sealer {
        &self.sealer
    }

    /// Takes the next version number (versions start at 1 and never repeat). When the
    /// counter reaches the durable high-water mark, the next block is leased first (one
    /// persist per [`VERSION_LEASE`] versions); at [`MAX_VERSION`] it fails, never wraps.
    pub fn next_version(&self) -> Result<u64> {
        let v = self.next_version.fetch_add(1, Ordering::AcqRel);
        if v >= MAX_VERSION {
            self.next_version.store(MAX_VERSION, Ordering::Release);
            return Err(Error::VersionsExhausted { limit: MAX_VERSION });
        }
        if v >= self.hwm.load(Ordering::Acquire) {
            self.lease_versions(v)?;
        }
        Ok(v)
    }

    /// Makes the high-water mark durable above `v` before `v` is used.
    fn lease_versions(&self, v: u64) -> Result<()> {
        let _l = self.lease.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if v < self.hwm.load(Ordering::Acquire) {
            return Ok(());
        }
        let new = v.saturating_add(VERSION_LEASE).min(MAX_VERSION);
        let w = encode_hwm(new);
        // One copy after the other, each durable before the next: a crash leaves at
        // least one valid copy, and recovery takes the larger valid one.
        for off in POOL_HWM_OFFS {
            self.media.store_u64(off, w)?;
            if !planted("late-lease") {
                self.media.persist(off, POOL_HWM_LEN)?;
            }
            self.media.crash_point();
        }
        self.hwm.store(new, Ordering::Release);
        Ok(())
    }

    /// The durable version high-water mark.
    pub fn version_hwm(&self) -> u64 {
        self.hwm.load(Ordering::Acquire)
    }

    /// What recovery and the cleaner believe of entries now: the seal key and the
    /// high-water mark.
    pub fn trust(&self) -> Trust {
        Trust { sealer: self.sealer, hwm: self.version_hwm() }
    }

    /// Raises the version counter to at least `v` (tests start it near 2^32 so that
    /// both halves of `version_num` matter).
    pub fn raise_version_floor(&self, v: u64) {
        self.next_version.fetch_max(v, Ordering::AcqRel);
    }

    /// The version the next PUT would get.
    pub fn peek_version(&self) -> u64 {
        self.next_version.load(Ordering::Acquire)
    }

    /// A client id never used in this pool.
    pub fn new_client_id(&self) -> u64 {
        self.next_client.fetch_add(1, Ordering::AcqRel)
    }

    /// Allocates a free segment as the next segment of `owner`'s log after `prev`,
    /// persisting it (see the allocation order in [`format`](mod@format)) and linking `prev` to it.
    pub fn alloc_segment(&self, owner: u64, prev: Option<u64>) -> Result<u64> {
        let mut a = self.lock();
        // A `prev` that is no longer `owner`'s (the cleaner freed it, and it may have
        // been granted again) is not linked: the new segment starts a log of its own.
        // Linking it would write its `next`, or make it the new segment's own `prev`.
        let prev =
            prev.filter(|&p| a.segs.get(p as usize).is_some_and(|m| m.owner == owner && m.state != SegmentState::Free));
        // The last free segments are the cleaner's: without a segment to copy live
        // entries into, a full pool could never be compacted again. The one before is
        // the tombstone log's, so that DELETEs succeed on a pool clients have filled.
        let reserve = match owner {
            CLEANER_OWNER => 0,
            TOMBSTONE_OWNER => self.cleaner_reserve(),
            _ => self.cleaner_reserve() + self.tombstone_reserve(),
        };
        let id = if a.free.len() > reserve { a.free.pop() } else { None };
        let Some(id) = id else {
            let (segments, segment_size) = (self.header.segment_count, self.header.segment_size);
            return Err(Error::PoolFull { segments, segment_size, kept: a.free.len() });
        };
        let base = self.segment_offset(id);
        let log_seq = match prev {
            Some(p) => a.segs.get(p as usize).map(|m| m.log_seq + 1).unwrap_or(0),
            None => 0,
        };
        let generation = a.segs[id as usize].generation + 1;
        let m = &self.media;
        let r = (|| -> Result<()> {
            m.store_u64(base + SEG_STATE_OFF, self.header.state_word(&self.sealer, id, SegmentState::Free))?;
            m.store_u64(base + SEG_COUNT_OFF, self.sealer.count_word(id, generation, 0))?;
            m.store_u64(base + SEG_NEXT_OFF, NO_SEGMENT)?;
            m.persist(base + SEG_COUNT_OFF, SEG_WORDS_LEN)?;
            let h = SegmentHeader { segment_id: id, owner, prev: prev.unwrap_or(NO_SEGMENT), log_seq, generation };
            m.map().write(base, &h.encode(&self.sealer))?;
            m.persist(base, SEG_FIXED_LEN)?;
            self.persist_state(id, SegmentState::Active)?;
            if let Some(p) = prev {
                self.persist_next(p, id)?;
            }
            Ok(())
        })();
        if let Err(e) = r {
            a.free.push(id);
            return Err(e);
        }
        a.segs[id as usize] = SegMeta {
            state: SegmentState::Active,
            owner,
            prev: prev.unwrap_or(NO_SEGMENT),
            next: NO_SEGMENT,
            log_seq,
            generation,
        };
        if let Some(p) = prev {
            if let Some(pm) = a.segs.get_mut(p as usize) {
                pm.next = id;
            }
        }
        self.seg_used[id as usize].store(0, Ordering::Relaxed);
        self.seg_live[id as usize].store(0, Ordering::Relaxed);
        self.seg_count[id as usize].store(0, Ordering::Relaxed);
        self.seg_torn[id as usize].store(false, Ordering::Relaxed);
        Ok(id)
    }

    /// Free segments kept for the cleaner's output (none in pools of fewer than 4
    /// segments, which could not spare one).
    pub fn cleaner_reserve(&self) -> usize {
        usize::from(self.header.segment_count >= 4)
    }

    /// Free segments kept for the tombstone log (none in pools of fewer than 4 segments).
    pub fn tombstone_reserve(&self) -> usize {
        self.cleaner_reserve()
    }

    /// Makes the last segment of `owner`'s log active again (recovery sealed it) and
    /// returns it, positioned after its recovered slots; `None` if `owner` has none.
    ///
    /// A last segment whose walk ended on damage is not reopened: counted slots may lie
    /// past the end recovery found, and appending there would overwrite them. It is
    /// returned full instead, so the next append links a new segment after it.
    pub fn reopen_last_segment(&self, owner: u64) -> Result<Option<ActiveSegment>> {
        let mut a = self.lock();
        let last = a
            .segs
            .iter()
            .enumerate()
            .filter(|(_, m)| m.owner == owner && m.state != SegmentState::Free)
            .max_by_key(|(_, m)| m.log_seq)
            .map(|(id, m)| (id as u64, *m));
        let Some((id, meta)) = last else { return Ok(None) };
        let mut s = ActiveSegment::new(id, meta.generation);
        if self.is_torn(id) {
            s.resume_at(self.segment_size(), self.segment_slots(id));
            return Ok(Some(s));
        }
        if meta.state == SegmentState::Sealed {
            self.persist_state(id, SegmentState::Active)?;
            a.segs[id as usize].state = SegmentState::Active;
        }
        s.resume_at(SEGMENT_HEADER_SIZE + self.segment_used(id), self.segment_slots(id));
        Ok(Some(s))
    }

    /// Whether recovery found segment `id` torn: its walk ended on damage, or no repair
    /// verified its `count`, so counted slots may lie past the end it reached. Nothing
    /// is appended to it. The cleaner still moves its reachable live entries and frees
    /// it: a client can tear its own segment (it may write any byte of it), and torn
    /// segments kept for ever would let it fill the pool.
    pub fn is_torn(&self, id: u64) -> bool {
        self.seg_torn.get(id as usize).is_some_and(|t| t.load(Ordering::Relaxed))
    }

    /// Seals segment `id` if it is still `owner`'s active segment of `generation`:
    /// what a log does with its last segment when it takes the next. One the cleaner
    /// freed meanwhile, and perhaps granted to another client, is left alone.
    pub fn seal_owned(&self, id: u64, owner: u64, generation: u64) -> Result<()> {
        let mut a = self.lock();
        let Some(meta) = a.segs.get_mut(id as usize) else { return Ok(()) };
        if meta.state != SegmentState::Active || meta.owner != owner || meta.generation != generation {
            return Ok(());
        }
        self.persist_state(id, SegmentState::Sealed)?;
        meta.state = SegmentState::Sealed;
        Ok(())
    }

    /// Marks an active segment sealed (no more appends).
    pub fn seal_segment(&self, id: u64) -> Result<()> {
        let mut a = self.lock();
        let meta = a.segs.get_mut(id as usize).ok_or_else(|| Error::invalid(format!("no segment {id}")))?;
        if meta.state != SegmentState::Active {
            return Ok(());
        }
        self.persist_state(id, SegmentState::Sealed)?;
        meta.state = SegmentState::Sealed;
        Ok(())
    }

    /// Returns a segment to the free list (the cleaner, after moving its live entries):
    /// `false`, and nothing done, while a server-side read of one of its entries is in
    /// progress ([`Pool::lookup_pinned`]); the segment is freed by a later call.
    pub fn free_segment(&self, id: u64) -> Result<bool> {
        let mut a = self.lock();
        let meta = a.segs.get_mut(id as usize).ok_or_else(|| Error::invalid(format!("no segment {id}")))?;
        if meta.state == SegmentState::Free {
            return Ok(true);
        }
        // Every entry of the segment has left the index (moved or superseded) before this
        // call, and a pin is taken inside the index look-up that found it (see
        // `Index::get_then`): a reader is either counted here or found the entry's new
        // place. Acquire pairs with `unpin`'s release: the reader's copy is over.
        if self.segment_held(id) {
            return Ok(false);
        }
        self.persist_state(id, SegmentState::Free)?;
        *meta = SegMeta::free(meta.generation);
        a.free.push(id);
        a.free.sort_unstable_by(|x, y| y.cmp(x));
        self.seg_used[id as usize].store(0, Ordering::Relaxed);
        self.seg_live[id as usize].store(0, Ordering::Relaxed);
        Ok(true)
    }

    /// The `count` of segment `id` the server stored (or recovery verified): never the
    /// media word, which the segment's client can overwrite.
    pub fn segment_slots(&self, id: u64) -> u64 {
        self.seg_count.get(id as usize).map(|a| a.load(Ordering::Acquire)).unwrap_or(0)
    }

    /// Stores and persists the `state` word of segment `id` (one aligned 8-byte store).
    fn persist_state(&self, id: u64, state: SegmentState) -> Result<()> {
        self.persist_word(id, SEG_STATE_OFF, self.header.state_word(&self.sealer, id, state))
    }

    /// Stores and persists the `next` word of segment `id`: the link to `next`.
    fn persist_next(&self, id: u64, next: u64) -> Result<()> {
        self.persist_word(id, SEG_NEXT_OFF, next)
    }

    /// Stores and persists the validity word at `word_off` (`count`, `state` or
    /// `next`) of segment `id`.
    fn persist_word(&self, id: u64, word_off: u64, value: u64) -> Result<()> {
        let off = self.segment_offset(id) + word_off;
        self.media.store_u64(off, value)?;
        self.media.persist(off, SEG_WORD_LEN)
    }

    /// Stores and persists `count` of segment `id` of `generation` (one aligned 8-byte
    /// store of the checked count word, see [`format`](mod@format)).
    pub fn persist_count(&self, id: u64, generation: u64, count: u64) -> Result<()> {
        self.persist_word(id, SEG_COUNT_OFF, self.sealer.count_word(id, generation, count))?;
        if let Some(a) = self.seg_count.get(id as usize) {
            a.store(count, Ordering::Release);
        }
        Ok(())
    }

    /// Validates the entry a client wrote at `offset` of segment `seg` (not yet
    /// versioned) on copies of its bytes, each taken once: its client may still write
    /// them (see [`format::check_entry_copied`]). Returns the header and key checked.
    pub fn validate_entry(&self, seg: u64, offset: u64) -> std::result::Result<(EntryHeader, Vec<u8>), EntryFault> {
        let size = self.segment_size();
        if seg >= self.segment_count() || offset >= size {
            return Err(EntryFault::HeaderOutOfBounds);
        }
        check_entry_copied(self.slot_reader(seg, offset), offset, size)
    }

    /// Copies bytes of the slot at `offset` of segment `seg` from `at` on into a
    /// buffer, as [`format::check_entry_copied`] reads: false past the segment's end.
    pub fn slot_reader(&self, seg: u64, offset: u64) -> impl FnMut(u64, &mut [u8]) -> bool + '_ {
        let (base, room, m) =
            (self.pool_offset(seg, offset), self.segment_size().saturating_sub(offset), self.media.map());
        move |at: u64, buf: &mut [u8]| at.saturating_add(buf.len() as u64) <= room && m.read(base + at, buf).is_ok()
    }

    /// Stores `version` and its `seal` into the entry at `offset` of `seg` (two aligned
    /// 8-byte stores; not yet written back).
    pub fn store_version(&self, seg: u64, offset: u64, version: u64, seal: u64) -> Result<()> {
        let off = self.segment_offset(seg) + offset + ENTRY_VERSION_OFF;
        self.media.store_u64(off, version)?;
        self.media.store_u64(self.segment_offset(seg) + offset + ENTRY_SEAL_OFF, seal)
    }

    /// Pool offset of byte `offset` of segment `seg`.
    pub fn pool_offset(&self, seg: u64, offset: u64) -> u64 {
        self.segment_offset(seg) + offset
    }

    /// Installs a durable entry in the index and updates live/garbage accounting.
    /// Returns what the index did.
    pub fn index_entry(&self, key: &[u8], loc: Loc) -> Upsert {
        // Counted while the index still holds the change: a cleaner that finds the old
        // entry superseded also finds its bytes off its segment's live count (counted
        // after, a cleaning in between saw live bytes no entry held and took the
        // segment for stuck, never to be cleaned again).
        self.index.upsert_then(key, loc, self, &mut |r| match r {
            Upsert::Inserted => {
                self.seg_live[loc.segment as usize].fetch_add(slot_bytes(&loc), Ordering::Relaxed);
            }
            Upsert::Replaced(old) => {
                self.seg_live[loc.segment as usize].fetch_add(slot_bytes(&loc), Ordering::Relaxed);
                self.seg_live[old.segment as usize].fetch_sub(slot_bytes(old), Ordering::Relaxed);
            }
            Upsert::Stale(_) => {}
        })
    }

    /// Moves live-byte accounting from `old` to `new` (the cleaner relocated an entry).
    pub fn move_live(&self, old: &Loc, new: &Loc) {
        self.seg_live[new.segment as usize].fetch_add(slot_bytes(new), Ordering::Relaxed);
        let o = &self.seg_live[old.segment as usize];
        let _ = o.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(slot_bytes(old))));
    }

    /// Records that `bytes` of segment `seg` were appended (space accounting).
    pub fn note_append(&self, seg: u64, bytes: u64) {
        self.seg_used[seg as usize].fetch_add(bytes, Ordering::Relaxed);
        self.space.bytes_appended.fetch_add(bytes, Ordering::Relaxed);
        self.space.entries_appended.fetch_add(1, Ordering::Relaxed);
    }

    /// Records that the cleaner copied `bytes` into segment `seg` (not client traffic).
    pub fn note_cleaner_copy(&self, seg: u64, bytes: u64) {
        self.seg_used[seg as usize].fetch_add(bytes, Ordering::Relaxed);
        self.space.bytes_cleaned.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Records that `bytes` were rewritten in place (space accounting).
    pub fn note_in_place(&self, bytes: u64) {
        self.space.bytes_in_place.fetch_add(bytes, Ordering::Relaxed);
        self.space.entries_in_place.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads the entry at `loc` (header + key + value) into a new buffer.
    pub fn read_entry(&self, loc: &Loc) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; loc.len as usize];
        self.media.map().read(self.segment_offset(loc.segment as u64) + loc.offset as u64, &mut buf)?;
        Ok(buf)
    }

    /// Looks `key` up; `None` if absent or deleted.
    pub fn lookup(&self, key: &[u8]) -> Option<Loc> {
        self.index.get(key, self).filter(|l| !l.tombstone)
    }

    /// [`Pool::lookup`] for a read of the entry by the server itself (a GET's copy or
    /// data write): the entry's segment is pinned, so the cleaner does not free it
    /// (and it is not granted to another client, who could write over the entry while
    /// the copy reads it) until the pin is handed back with [`Pool::unpin`], when the
    /// read is over. `also` runs where the pin is taken, before any later change of
    /// `key` can reach the index. A read a client makes by itself (RDMP-KV's READ) is
    /// not pinned: the server never learns when it is over. `reader` is the serving
    /// worker: its pins count in a part of their own (`cpus::worker_part`), and the pin
    /// remembers which, for [`Pool::unpin`].
    pub fn lookup_pinned<A>(
        &self,
        reader: usize,
        key: &[u8],
        also: impl FnOnce(&Loc) -> A,
    ) -> Option<(Loc, ReadPin, A)> {
        let mut also = Some(also);
        let mut taken = None;
        let found = self.index.get_then(key, self, &mut |l| {
            if let (false, Some(f)) = (l.tombstone, also.take()) {
                taken = Some((self.pin(reader, l.segment), f(l)));
            }
        });
        let (pin, a) = taken?;
        Some((found?, pin, a))
    }

    /// [`Index::scan`] for a read of the entries by the server itself: one pin per
    /// entry, as [`Pool::lookup_pinned`] takes, and what `also` made of each key and
    /// entry where its pin was taken.
    pub fn scan_pinned<A>(
        &self,
        reader: usize,
        start: &[u8],
        n: usize,
        mut also: impl FnMut(&[u8], &Loc) -> A,
    ) -> Result<PinnedScan<A>> {
        let mut pins = Vec::new();
        // An error (no ordered index) comes before any entry is visited: nothing pinned.
        let items = self.index.scan_then(start, n, &mut |k, l| pins.push((self.pin(reader, l.segment), also(k, l))))?;
        Ok((items, pins))
    }

    /// Segment `id`'s pins, all parts.
    fn pins_of(&self, id: usize) -> u32 {
        self.seg_readers.iter().filter_map(|p| p.get()?.count(id)).map(|a| a.load(Ordering::Acquire)).sum()
    }

    fn pin(&self, reader: usize, segment: u32) -> ReadPin {
        let part = crate::cpus::worker_part(reader);
        // Relaxed is enough: the index lock the caller holds orders the pin before any
        // later change of the entry, and the cleaner sees that change before it frees.
        let counts = self.seg_readers[part].get_or_init(|| PinPart::new(self.seg_count.len()));
        if let Some(a) = counts.count(segment as usize) {
            a.fetch_add(1, Ordering::Relaxed);
        }
        ReadPin { segment, part: part as u32 }
    }

    /// Hands back a pin of [`Pool::lookup_pinned`]: the read it was taken for is over.
    pub fn unpin(&self, pin: ReadPin) {
        if let Some(a) = self.seg_readers.get(pin.part as usize).and_then(|p| p.get()?.count(pin.segment as usize)) {
            a.fetch_sub(1, Ordering::Release);
        }
    }

    /// Pins held on segment `id` (server-side reads in progress).
    pub fn segment_readers(&self, id: u64) -> u32 {
        self.pins_of(id as usize)
    }

    /// [`Pool::lookup`] for a client that READs the entry by itself once told its place
    /// (RDMP-KV's GET): the entry's segment is not freed for `lease` from now (taken
    /// inside the look-up, as [`Pool::lookup_pinned`] pins), and the client takes a
    /// READ that completes after half of it as late, and asks again. The server never learns when such
    /// a READ is over; without the lease the segment could be freed and granted to
    /// another client, whose entry of the same key, at the same place, the READ would
    /// then return.
    pub fn lookup_leased(&self, key: &[u8], lease: std::time::Duration) -> Option<Loc> {
        let until = self.lease_clock().saturating_add(lease.as_millis() as u64 + 1);
        self.index
            .get_then(key, self, &mut |l| {
                if !l.tombstone {
                    // Written only when the lease grows (at most once a millisecond per
                    // segment): a write per GET made the word's cache line cross
                    // between the workers' CPUs on every GET of the segment. A load
                    // never sees more than the word holds: the lease only grows.
                    let lease = &self.seg_lease_until[l.segment as usize];
                    if lease.load(Ordering::Relaxed) < until {
                        lease.fetch_max(until, Ordering::Relaxed);
                    }
                }
            })
            .filter(|l| !l.tombstone)
    }

    /// Milliseconds since the pool was opened (the clock of the leases).
    fn lease_clock(&self) -> u64 {
        self.opened.elapsed().as_millis() as u64
    }

    /// Whether segment `id` may still be read from: a server-side read is in progress
    /// ([`Pool::lookup_pinned`]) or a client's READ may still come ([`Pool::lookup_leased`]).
    pub fn segment_held(&self, id: u64) -> bool {
        let i = id as usize;
        self.pins_of(i) > 0
            || self.seg_lease_until.get(i).is_some_and(|a| a.load(Ordering::Relaxed) > self.lease_clock())
    }

    /// Bytes of segment `id` holding entries (appended slots).
    pub fn segment_used(&self, id: u64) -> u64 {
        self.seg_used.get(id as usize).map(|a| a.load(Ordering::Relaxed)).unwrap_or(0)
    }

    /// Bytes of segment `id` holding the newest entry of some key.
    pub fn segment_live(&self, id: u64) -> u64 {
        self.seg_live.get(id as usize).map(|a| a.load(Ordering::Relaxed)).unwrap_or(0)
    }

    /// The space report now.
    pub fn space_report(&self) -> SpaceReport {
        let metas = self.seg_metas();
        let in_use = metas.iter().filter(|m| m.state != SegmentState::Free).count() as u64;
        let used: u64 = self.seg_used.iter().map(|a| a.load(Ordering::Relaxed)).sum();
        let live: u64 = self.seg_live.iter().map(|a| a.load(Ordering::Relaxed)).sum();
        self.space.report(in_use, self.segment_size(), used, live)
    }
}

impl KeySource for Pool {
    fn key_matches(&self, loc: &Loc, key: &[u8]) -> bool {
        // On copies of the bytes, each taken once: the entry may be in a segment its
        // client still writes. A key is compared a piece at a time, so that a key
        // differing early costs one small copy.
        const PIECE: usize = 64;
        let base = self.segment_offset(loc.segment as u64) + loc.offset as u64;
        let m = self.media.map();
        let mut head = [0u8; ENTRY_HEADER_SIZE as usize];
        if m.read(base, &mut head).is_err() || stored_key_len(&head) != Some(key.len() as u32) {
            return false;
        }
        let mut piece = [0u8; PIECE];
        let mut at = base + ENTRY_HEADER_SIZE;
        for want in key.chunks(PIECE) {
            let got = &mut piece[..want.len()];
            if m.read(at, got).is_err() || got != want {
                return false;
            }
            at += want.len() as u64;
        }
        true
    }
}

#[cfg(feature = "planted-bugs")]
pub mod planted {
    //! Test-only switches that plant known durability bugs (feature `planted-bugs`),
    //! so the crash checker can show it catches them. The initial plant comes from the
    //! environment variable `BOOMKV_PLANT`; [`set`] changes it.

    use std::sync::atomic::{AtomicU8, Ordering};

    /// A planted bug.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Plant {
        /// No bug.
        None,
        /// Skip the write-back of the entry's lines.
        SkipWriteback,
        /// Persist `count` before the entry is written back.
        CountFirst,
        /// Use a leased block of versions before its high-water mark is written back.
        LateLease,
        /// RDMP-CC: the client acknowledges its PUT after the WRITE, without the FLUSH
        /// that makes it durable.
        CcSkipFlush,
        /// HERD: the server SENDs a PUT's reply once the entry has its version, before
        /// the entry is written back.
        HerdEarlyReply,
        /// RFP: the server leaves a PUT's result for the client to fetch once the entry
        /// has its version, before the entry is written back.
        RfpEarlyResult,
        /// pDPM-Direct: the client writes the committed slot before the uncommitted
        /// copy is durable (both, then one FLUSH).
        PdpmEarlyCommit,
        /// Clover: the client links (and acknowledges) its version without FLUSHing it.
        CloverSkipFlush,
    }

    impl std::str::FromStr for Plant {
        type Err = String;
        fn from_str(s: &str) -> Result<Self, String> {
            match s {
                "" | "none" => Ok(Plant::None),
                "skip-writeback" => Ok(Plant::SkipWriteback),
                "count-first" => Ok(Plant::CountFirst),
                "late-lease" => Ok(Plant::LateLease),
                "cc-skip-flush" => Ok(Plant::CcSkipFlush),
                "herd-early-reply" => Ok(Plant::HerdEarlyReply),
                "rfp-early-result" => Ok(Plant::RfpEarlyResult),
                "pdpm-early-commit" => Ok(Plant::PdpmEarlyCommit),
                "clover-skip-flush" => Ok(Plant::CloverSkipFlush),
                o => Err(format!(
                    "unknown plant '{o}' (skip-writeback, count-first, late-lease, cc-skip-flush, herd-early-reply, \
                     rfp-early-result, pdpm-early-commit, clover-skip-flush)"
                )),
            }
        }
    }

    static PLANT: AtomicU8 = AtomicU8::new(u8::MAX);

    fn code(p: Plant) -> u8 {
        p as u8
    }

    /// The plant in force.
    pub fn current() -> Plant {
        let v = PLANT.load(Ordering::Relaxed);
        let v = if v == u8::MAX {
            let p: Plant = std::env::var("BOOMKV_PLANT").ok().and_then(|s| s.parse().ok()).unwrap_or(Plant::None);
            PLANT.store(code(p), Ordering::Relaxed);
            code(p)
        } else {
            v
        };
        match v {
            1 => Plant::SkipWriteback,
            2 => Plant::CountFirst,
            3 => Plant::LateLease,
            4 => Plant::CcSkipFlush,
            5 => Plant::HerdEarlyReply,
            6 => Plant::RfpEarlyResult,
            7 => Plant::PdpmEarlyCommit,
            8 => Plant::CloverSkipFlush,
            _ => Plant::None,
        }
    }

    /// Plants `p` (process-wide).
    pub fn set(p: Plant) {
        PLANT.store(code(p), Ordering::Relaxed);
    }

    /// Skip the write-back of the entry's lines.
    pub fn skip_writeback() -> bool {
        current() == Plant::SkipWriteback
    }
    /// Persist `count` before the entry is written back.
    pub fn count_before_entry() -> bool {
        current() == Plant::CountFirst
    }
    /// Use a leased block of versions before its high-water mark is written back.
    pub fn late_lease() -> bool {
        current() == Plant::LateLease
    }
    /// RDMP-CC: acknowledge a PUT without its FLUSH.
    pub fn cc_skip_flush() -> bool {
        current() == Plant::CcSkipFlush
    }
    /// HERD: reply to a PUT before its entry is written back.
    pub fn herd_early_reply() -> bool {
        current() == Plant::HerdEarlyReply
    }
    /// RFP: leave a PUT's result before its entry is written back.
    pub fn rfp_early_result() -> bool {
        current() == Plant::RfpEarlyResult
    }
    /// pDPM-Direct: write the committed slot before the uncommitted copy is durable.
    pub fn pdpm_early_commit() -> bool {
        current() == Plant::PdpmEarlyCommit
    }
    /// Clover: link and acknowledge a version without FLUSHing it.
    pub fn clover_skip_flush() -> bool {
        current() == Plant::CloverSkipFlush
    }
}

#[cfg(feature = "planted-bugs")]
fn planted(which: &str) -> bool {
    match which {
        "late-lease" => planted::late_lease(),
        _ => false,
    }
}

#[cfg(not(feature = "planted-bugs"))]
#[inline(always)]
fn planted(_: &str) -> bool {
    false
}

/// The name prefix of this process's temporary directories (embedded pools, crash
/// images): it carries the PID, so that what an interrupted run leaves can be told from
/// other processes' and removed (`bench::embedded::remove_own_temp_dirs`).
pub fn temp_prefix() -> String {
    format!("boomkv-{}-", std::process::id())
}
