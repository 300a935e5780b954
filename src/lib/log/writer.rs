//! The commit path of a PUT or DELETE, shared by every protocol, and a local writer.
//!
//! A client's entry lands in its active segment (by one-sided WRITE, or copied there by
//! the RPC baseline); [`Pool::commit`] then makes it durable and visible in the order the
//! crash promise needs:
//!
//! 1. validate the entry (bounds, lengths, checksum; placement) and copy its key: from
//!    here on the server uses only the header it validated and that copy, never the
//!    client-writable bytes again;
//! 2. assign `version_num` from the global counter (leased under the durable
//!    high-water mark) and compute the entry's **seal** (see [`format`](super::format)):
//!    the server's keyed word over the place, version, header and key; both are stored
//!    as aligned 8-byte words;
//! 3. an **append** writes its lines back, version and seal included, and fences; then
//!    stores and persists the checked `count` (one aligned 8-byte store, second fence).
//!    Until `count` covers the slot, recovery believes it only if it verifies in full
//!    (bounds, checksum, seal: it reads on past `count` while entries do), so a version
//!    durable with part of the content is rejected: that is the paper's order, two
//!    fences per append;
//! 4. an **in-place** rewrite sits in a slot `count` already covers, so its content
//!    (with `version_num` = `seal` = 0, as the client wrote it) is written back and
//!    fenced first, then the version and seal on their own (second fence). With this
//!    order every durable combination is the old entry, a torn one, the new content
//!    under version 0 or under a version and seal that do not match it (both
//!    rejected), or the new entry; the slot rewritten is never the key's newest
//!    (the hybrid rules), so a rejected slot loses nothing acknowledged;
//! 5. index it. The caller replies after `commit` returns.
//!
//! [`LocalWriter`] plays client and server at once (no transport): tests, the crash
//! checker and `recover --bench` use it to fill pools.

use super::format::*;
use super::Pool;
use crate::error::{Error, Result};
use crate::index::{Loc, Upsert};
use std::time::Instant;

/// The server's view of a client's active segment.
#[derive(Clone, Debug)]
pub struct ActiveSegment {
    /// Segment id.
    pub id: u64,
    /// The segment's allocation generation (bound into every seal and `count` check).
    pub generation: u64,
    /// Segment offset where the next append must start.
    pub tail: u64,
    /// Appended (counted) slots.
    pub count: u64,
    /// `(offset, next_offset)` of every appended slot, in order, so in-place rewrites
    /// can be checked against real slot boundaries.
    slots: Vec<(u32, u32)>,
}

impl ActiveSegment {
    /// A freshly allocated, empty segment.
    pub fn new(id: u64, generation: u64) -> ActiveSegment {
        ActiveSegment { id, generation, tail: SEGMENT_HEADER_SIZE, count: 0, slots: Vec::new() }
    }

    /// Continues a recovered segment: appends start at `tail`, `count` slots counted
    /// (their boundaries are not known, so none of them can be rewritten in place).
    pub(crate) fn resume_at(&mut self, tail: u64, count: u64) {
        self.tail = tail;
        self.count = count;
    }

    /// Records an appended, counted slot.
    pub(crate) fn push_slot(&mut self, offset: u64, next: u64) {
        self.count += 1;
        self.slots.push((offset as u32, next as u32));
        self.tail = next;
    }

    /// The `next_offset` of the slot starting at `offset`, if it is one.
    pub fn slot_end(&self, offset: u64) -> Option<u64> {
        let o = u32::try_from(offset).ok()?;
        self.slots.binary_search_by_key(&o, |s| s.0).ok().map(|i| self.slots[i].1 as u64)
    }
}

/// Durations of a commit's steps in nanoseconds (filled when a commit is timed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitTimes {
    /// Checking the entry.
    pub validate: u64,
    /// Taking a version and computing the entry's seal.
    pub seal: u64,
    /// Writing the entry back (with its version, for an append).
    pub writeback: u64,
    /// The second persist: `count` or `version_num`.
    pub second_persist: u64,
    /// Index upsert and space accounting.
    pub index: u64,
}

/// A stopwatch that records laps into a [`CommitTimes`] only when there is one.
struct Laps<'a>(Option<(&'a mut CommitTimes, Instant)>);

impl<'a> Laps<'a> {
    /// Starts timing into `t` (or does nothing with `None`).
    fn start(t: Option<&'a mut CommitTimes>) -> Laps<'a> {
        Laps(t.map(|t| (t, Instant::now())))
    }

    /// Adds the time since the last lap to the field `f` picks.
    #[inline]
    fn lap(&mut self, f: fn(&mut CommitTimes) -> &mut u64) {
        if let Some((t, last)) = &mut self.0 {
            let now = Instant::now();
            *f(t) += now.duration_since(*last).as_nanos() as u64;
            *last = now;
        }
    }
}

/// How an entry was written into its segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// At the segment's tail, as a new slot.
    Append,
    /// Over an older slot of the same segment.
    InPlace,
}

/// A committed entry.
#[derive(Clone, Debug)]
pub struct Committed {
    /// Its version.
    pub version: u64,
    /// Where it lives.
    pub loc: Loc,
    /// What the index did with it.
    pub upsert: Upsert,
    /// Its key.
    pub key: Vec<u8>,
    /// Its header.
    pub header: EntryHeader,
}

/// Why a commit was refused (the entry is never counted or indexed).
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The entry is malformed.
    #[error("invalid entry at offset {offset}: {fault}")]
    Invalid {
        /// Segment offset.
        offset: u64,
        /// What is wrong.
        fault: EntryFault,
    },
    /// An append not at the tail, or an in-place write not over a slot.
    #[error("{0}")]
    Misplaced(String),
    /// The value is over the server's limit.
    #[error("value of {len} bytes is over the server's limit of {limit} bytes")]
    TooLarge {
        /// Bytes of the value.
        len: u32,
        /// The limit.
        limit: u32,
    },
    /// The media failed, or no version is left.
    #[error(transparent)]
    Media(#[from] Error),
}

impl Pool {
    /// Commits the entry a client wrote at `offset` of `seg` (see the module docs).
    /// `writeback(pool_offset, len)` writes the lines back and fences; the protocols pass
    /// the cooperative write-back here. With `times`, the steps are timed into it.
    pub fn commit(
        &self,
        seg: &mut ActiveSegment,
        offset: u64,
        mode: WriteMode,
        writeback: &mut dyn FnMut(u64, usize) -> Result<()>,
        times: Option<&mut CommitTimes>,
    ) -> std::result::Result<Committed, CommitError> {
        match mode {
            WriteMode::Append if offset != seg.tail => {
                return Err(CommitError::Misplaced(format!(
                    "append at offset {offset} but the segment's tail is {}",
                    seg.tail
                )))
            }
            WriteMode::InPlace if seg.slot_end(offset).is_none() => {
                return Err(CommitError::Misplaced(format!("in-place write at {offset} is not over an appended slot")))
            }
            _ => {}
        }
        let mut laps = Laps::start(times);
        let (h, key) = self.validate_entry(seg.id, offset).map_err(|fault| CommitError::Invalid { offset, fault })?;
        laps.lap(|t| &mut t.validate);
        self.commit_steps(seg, offset, mode, h, key, writeback, laps)
    }

    /// [`Pool::commit`] for an entry whose header `h` and `key` were already validated
    /// (the server built it itself, as the RPC baseline does). Placement is still
    /// checked.
    #[allow(clippy::too_many_arguments)]
    pub fn commit_validated(
        &self,
        seg: &mut ActiveSegment,
        offset: u64,
        mode: WriteMode,
        h: EntryHeader,
        key: Vec<u8>,
        writeback: &mut dyn FnMut(u64, usize) -> Result<()>,
        times: Option<&mut CommitTimes>,
    ) -> std::result::Result<Committed, CommitError> {
        self.commit_steps(seg, offset, mode, h, key, writeback, Laps::start(times))
    }

    /// Commits the entry whose header `h` and `key` were validated (on private copies:
    /// the seal covers, and the index keys on, these, whatever the client writes into
    /// its segment now).
    #[allow(clippy::too_many_arguments)]
    fn commit_steps(
        &self,
        seg: &mut ActiveSegment,
        offset: u64,
        mode: WriteMode,
        h: EntryHeader,
        key: Vec<u8>,
        writeback: &mut dyn FnMut(u64, usize) -> Result<()>,
        mut laps: Laps<'_>,
    ) -> std::result::Result<Committed, CommitError> {
        if mode == WriteMode::Append && offset != seg.tail {
            return Err(CommitError::Misplaced(format!("append at {offset}, tail is {}", seg.tail)));
        }
        if mode == WriteMode::InPlace && seg.slot_end(offset) != Some(h.next_offset) {
            return Err(CommitError::Invalid { offset, fault: EntryFault::BadNextOffset });
        }
        if h.value_len > self.value_limit() {
            return Err(CommitError::TooLarge { len: h.value_len, limit: self.value_limit() });
        }
        let pool_off = self.pool_offset(seg.id, offset);
        let len = h.entry_len() as usize;
        let count_first = planted("count-first") && mode == WriteMode::Append;
        if count_first {
            self.persist_count(seg.id, seg.generation, seg.count + 1)?;
        }
        let version = self.next_version()?;
        let place = SlotPlace { segment: seg.id, generation: seg.generation, offset };
        let seal = self.sealer().entry_seal(place, version, &h, &key);
        laps.lap(|t| &mut t.seal);
        if mode == WriteMode::Append {
            // 1. The version and seal go into the entry first, then the entry's lines
            //    (both included) are written back under one fence: nothing counts the
            //    slot yet, so no crash image can pair them wrongly.
            self.store_version(seg.id, offset, version, seal)?;
            self.media().crash_point();
            if !planted("skip-writeback") {
                writeback(pool_off, len)?;
            }
            laps.lap(|t| &mut t.writeback);
            self.media().crash_point();
        } else {
            // 1. An in-place rewrite sits in a counted slot: its content (version and
            //    seal 0 as the client wrote it) is durable first ...
            if !planted("skip-writeback") {
                writeback(pool_off, len)?;
            }
            laps.lap(|t| &mut t.writeback);
            self.media().crash_point();
            // 2. ... then its version and seal, written back on their own.
            self.store_version(seg.id, offset, version, seal)?;
            self.media().crash_point();
            self.media().persist(pool_off + ENTRY_VERSION_OFF, ENTRY_VERSION_SEAL_LEN)?;
            laps.lap(|t| &mut t.second_persist);
            self.media().crash_point();
        }
        // 2. For an append, `count` now covers it.
        if mode == WriteMode::Append {
            if !count_first {
                self.persist_count(seg.id, seg.generation, seg.count + 1)?;
            }
            laps.lap(|t| &mut t.second_persist);
            seg.push_slot(offset, h.next_offset);
            self.note_append(seg.id, h.next_offset - offset);
        } else {
            self.note_in_place(len as u64);
        }
        let header = EntryHeader { version, seal, ..h };
        let loc = Loc {
            segment: seg.id as u32,
            offset: offset as u32,
            len: len as u32,
            version,
            tombstone: h.is_tombstone(),
        };
        let upsert = self.index_entry(&key, loc);
        laps.lap(|t| &mut t.index);
        Ok(Committed { version, loc, upsert, key, header })
    }

    /// The default write-back: lines of `[pool_off, pool_off + len)`, then a fence.
    pub fn writeback(&self, pool_off: u64, len: usize) -> Result<()> {
        self.media().persist(pool_off, len)
    }

    /// Seals `prev` (if any) and grants `owner` a new active segment linked after it.
    pub fn grant_segment(&self, owner: u64, prev: Option<&ActiveSegment>) -> Result<ActiveSegment> {
        self.grant_segment_revoking(owner, prev, || {})
    }

    /// [`Pool::grant_segment`], calling `revoke` once the new segment is allocated and
    /// before `prev` is sealed: a connection takes its client's write access to `prev`
    /// away there, since a sealed segment is the cleaner's to move and free (and then
    /// another client's), and nothing may be written into it after.
    pub fn grant_segment_revoking(
        &self,
        owner: u64,
        prev: Option<&ActiveSegment>,
        revoke: impl FnOnce(),
    ) -> Result<ActiveSegment> {
        let id = self.alloc_segment(owner, prev.map(|p| p.id))?;
        revoke();
        if let Some(p) = prev {
            self.seal_owned(p.id, owner, p.generation)?;
        }
        let generation = self.seg_meta(id).map(|m| m.generation).unwrap_or(0);
        Ok(ActiveSegment::new(id, generation))
    }
}

#[cfg(feature = "planted-bugs")]
fn planted(which: &str) -> bool {
    match which {
        "count-first" => super::planted::count_before_entry(),
        "skip-writeback" => super::planted::skip_writeback(),
        _ => false,
    }
}

#[cfg(not(feature = "planted-bugs"))]
#[inline(always)]
fn planted(_: &str) -> bool {
    false
}

/// A log the server writes itself, as client and server together: the tombstone log
/// (DELETEs that find no room in their client's segment, so a full pool can always be
/// emptied), and the engine of [`LocalWriter`].
#[derive(Debug)]
pub struct ServerLog {
    owner: u64,
    seg: Option<ActiveSegment>,
    buf: Vec<u8>,
}

impl ServerLog {
    /// An empty log of `owner` (its first append allocates a segment).
    pub fn new(owner: u64) -> ServerLog {
        ServerLog { owner, seg: None, buf: Vec::new() }
    }

    /// The log of `owner` continuing in its last segment, if the pool has one: a
    /// restarted server keeps filling its tombstone segment instead of taking another
    /// (on a full pool there would be none).
    pub fn resume(pool: &Pool, owner: u64) -> Result<ServerLog> {
        let seg = pool.reopen_last_segment(owner)?;
        Ok(ServerLog { owner, seg, buf: Vec::new() })
    }

    /// The active segment, if one was granted.
    pub fn segment(&self) -> Option<&ActiveSegment> {
        self.seg.as_ref()
    }

    /// Encodes the entry for slot `[offset, next)` of segment `seg` and writes it there.
    fn write_entry(
        &mut self,
        pool: &Pool,
        (seg, offset, next): (u64, u64, u64),
        key: &[u8],
        value: &[u8],
        tomb: bool,
    ) -> Result<()> {
        let len = ENTRY_HEADER_SIZE as usize + key.len() + value.len();
        self.buf.resize(len, 0);
        encode_entry(&mut self.buf, key, value, tomb, next)?;
        pool.media().map().write(pool.pool_offset(seg, offset), &self.buf)
    }

    /// Appends `key = value` (or a tombstone), granting a new segment when full.
    pub fn append(&mut self, pool: &Pool, key: &[u8], value: &[u8], tombstone: bool) -> Result<Committed> {
        let slot = slot_size(key.len(), value.len());
        if slot > pool.segment_size() - SEGMENT_HEADER_SIZE {
            return Err(Error::TooLarge {
                what: "value",
                len: value.len() as u64,
                limit: pool.segment_size() - SEGMENT_HEADER_SIZE - ENTRY_HEADER_SIZE - key.len() as u64,
            });
        }
        let need_new = match &self.seg {
            None => true,
            Some(s) => s.tail + slot > pool.segment_size(),
        };
        if need_new {
            self.seg = Some(pool.grant_segment(self.owner, self.seg.as_ref())?);
        }
        let (id, tail) = self.seg.as_ref().map(|s| (s.id, s.tail)).ok_or_else(|| Error::invalid("no segment"))?;
        self.write_entry(pool, (id, tail, tail + slot), key, value, tombstone)?;
        self.commit(pool, tail, WriteMode::Append)
    }

    /// Rewrites the slot at `offset` of the active segment in place with `key = value`.
    pub fn rewrite(
        &mut self,
        pool: &Pool,
        offset: u64,
        key: &[u8],
        value: &[u8],
        tombstone: bool,
    ) -> Result<Committed> {
        let seg = self.seg.as_ref().ok_or_else(|| Error::invalid("no active segment"))?;
        let next = seg.slot_end(offset).ok_or_else(|| Error::invalid(format!("no slot at {offset}")))?;
        if ENTRY_HEADER_SIZE + (key.len() + value.len()) as u64 > next - offset {
            return Err(Error::invalid("entry does not fit the slot"));
        }
        let id = seg.id;
        self.write_entry(pool, (id, offset, next), key, value, tombstone)?;
        self.commit(pool, offset, WriteMode::InPlace)
    }

    fn commit(&mut self, pool: &Pool, offset: u64, mode: WriteMode) -> Result<Committed> {
        let seg = self.seg.as_mut().ok_or_else(|| Error::invalid("no active segment"))?;
        pool.commit(seg, offset, mode, &mut |o, l| pool.writeback(o, l), None).map_err(|e| match e {
            CommitError::Media(e) => e,
            other => Error::Protocol(other.to_string()),
        })
    }
}

/// Writes entries into one client log of a pool directly, as client and server together.
pub struct LocalWriter<'a> {
    pool: &'a Pool,
    log: ServerLog,
}

impl<'a> LocalWriter<'a> {
    /// A writer with a new client id.
    pub fn new(pool: &'a Pool) -> LocalWriter<'a> {
        LocalWriter { pool, log: ServerLog::new(pool.new_client_id()) }
    }

    /// The active segment, if one was granted.
    pub fn segment(&self) -> Option<&ActiveSegment> {
        self.log.segment()
    }

    /// Appends `key = value` (or a tombstone), granting a new segment when full.
    pub fn append(&mut self, key: &[u8], value: &[u8], tombstone: bool) -> Result<Committed> {
        self.log.append(self.pool, key, value, tombstone)
    }

    /// Rewrites the slot at `offset` of the active segment in place with `key = value`.
    pub fn rewrite(&mut self, offset: u64, key: &[u8], value: &[u8], tombstone: bool) -> Result<Committed> {
        self.log.rewrite(self.pool, offset, key, value, tombstone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laps_fill_only_when_timed() {
        let mut t = CommitTimes::default();
        {
            let mut l = Laps::start(Some(&mut t));
            std::thread::sleep(std::time::Duration::from_millis(2));
            l.lap(|t| &mut t.writeback);
            l.lap(|t| &mut t.index);
        }
        assert!(t.writeback >= 2_000_000, "{t:?}");
        assert!(t.index < t.writeback, "{t:?}");
        let mut off = Laps::start(None);
        off.lap(|t| &mut t.writeback);
    }
}
