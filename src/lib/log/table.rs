//! The pool's cell table (pDPM-Direct's passive memory): creating it, finding a key in
//! it, and its recovery step. The bytes are [`cells`]'s; this module is
//! the pool's side: which segments the table takes, zeroing and persisting them, the
//! descriptor line, releasing locks and repairing cells after a crash.
//!
//! The server takes no part in a pDPM-Direct write, so nothing here runs on the data
//! path: the table is created once (at the first pDPM-Direct client's request), and
//! recovery is the only other writer.
//!
//! Imports the pool (`super`), `cells`, `format`, `pmem` (through the pool's media) and
//! `error`.

use super::cells::{self, CellState, CellTable, SlotFault};
use super::format::{EntryHeader, SegmentState, CELLS_OWNER, NO_SEGMENT};
use super::{Pool, SegMeta};
use crate::error::{Error, Result};

/// What recovery did to the cell table.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CellsReport {
    /// The table (none in most pools).
    pub table: Option<CellTable>,
    /// Cells holding a key (live or deleted).
    pub cells_in_use: u64,
    /// Cells whose committed slot was restored from the uncommitted one.
    pub cells_restored: u64,
    /// Cells neither of whose slots verifies (their key reads as absent).
    pub cells_damaged: u64,
    /// Locks that were held at the crash and are released.
    pub locks_released: u64,
    /// Locks found held, released or not (a read-only open releases none).
    pub locks_held: u64,
}

/// One cell holding a key, as recovery or a lookup found it.
#[derive(Clone, Debug)]
pub struct FoundCell {
    /// Cell index.
    pub cell: u64,
    /// The committed slot's header.
    pub header: EntryHeader,
    /// The committed entry (header, key, value).
    pub entry: Vec<u8>,
}

impl Pool {
    /// The cell table, if the pool has one.
    pub fn cell_table(&self) -> Option<CellTable> {
        self.cells.get().copied()
    }

    /// Pool offset of the table's first byte.
    pub fn cell_table_base(&self, t: &CellTable) -> u64 {
        self.segment_offset(t.first_segment)
    }

    /// Creates the cell table with `cells` cells for values of up to `value_max` bytes,
    /// or returns the one the pool has (whatever its geometry): a run of segments
    /// (`Pool::take_run`) zeroed and persisted before the descriptor line is.
    pub fn create_cell_table(&self, cells: u64, value_max: u32) -> Result<CellTable> {
        let _one = self.cells_create.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(t) = self.cell_table() {
            return Ok(t);
        }
        if cells == 0 || cells > cells::MAX_CELLS {
            return Err(Error::invalid(format!("a cell table of {cells} cells (1..={})", cells::MAX_CELLS)));
        }
        let slot_size = CellTable::slot_size_for(value_max);
        let mut t = CellTable { first_segment: 0, segments: 0, cells, slot_size };
        let what = format!("a cell table of {cells} cells of {} bytes", t.cell_size());
        // What recovery will refuse is refused before anything is taken.
        if t.slot_size > cells::MAX_SLOT_SIZE || cells.checked_mul(t.cell_size()).is_none() {
            return Err(Error::invalid(format!(
                "{what}: too large (slots of at most {} bytes, a table of at most 2^64 bytes)",
                cells::MAX_SLOT_SIZE
            )));
        }
        (t.first_segment, t.segments) = self.take_run(t.bytes(), &what)?;
        self.publish_run(t.first_segment, t.segments, cells::DESCRIPTOR_OFF, &t.encode())?;
        let _ = self.cells.set(t);
        Ok(t)
    }

    /// Takes the lowest run of consecutive free segments holding `bytes` that leaves
    /// the allocator's reserves, out of the allocator (owner [`CELLS_OWNER`]); returns
    /// its first segment and length. `what` names the structure in the error.
    pub(crate) fn take_run(&self, bytes: u64, what: &str) -> Result<(u64, u64)> {
        if self.media.is_read_only() {
            return Err(Error::Unsupported(format!("the pool is read-only: {what} cannot be created")));
        }
        if !self.header.holds_runs() {
            return Err(Error::Unsupported(format!(
                "the pool has format version {}: builds that read it know no cell tables or arenas and would take {what} for free space and write over it, so it goes only into a pool of version {} or later; load the data into a new pool",
                self.header.format_version,
                crate::log::format::RUNS_FORMAT_VERSION
            )));
        }
        let ss = self.segment_size();
        let need = bytes.div_ceil(ss).max(1);
        let mut a = self.lock();
        let reserve = (self.cleaner_reserve() + self.tombstone_reserve()) as u64;
        let mut free: Vec<u64> = a.free.clone();
        free.sort_unstable();
        let mut run: Option<u64> = None;
        let mut i = 0usize;
        while i < free.len() {
            let mut j = i;
            while j + 1 < free.len() && free[j + 1] == free[j] + 1 && ((j + 1 - i) as u64) < need {
                j += 1;
            }
            if (j - i + 1) as u64 >= need {
                run = Some(free[i]);
                break;
            }
            i = j + 1;
        }
        let fits = (free.len() as u64).saturating_sub(reserve) >= need;
        let Some(first) = run.filter(|_| fits) else {
            return Err(Error::NoRoom(format!(
                "{what} needs {need} consecutive free segments of {ss} bytes ({bytes} bytes); the pool has {} free segments ({reserve} kept in reserve): serve a larger pool (--pool-size) or ask for less",
                free.len()
            )));
        };
        a.free.retain(|id| *id < first || *id >= first + need);
        for (k, id) in (first..first + need).enumerate() {
            a.segs[id as usize] = cell_meta(k as u64, a.segs[id as usize].generation);
        }
        Ok((first, need))
    }

    /// Zeroes and persists the run `first..first + segments` (what is zero already, a
    /// fresh pool's sparse pages, is left untouched: a free segment's bytes are durable
    /// as they are), then writes and persists its descriptor `line` at pool offset
    /// `at`. On failure the run goes back to the allocator.
    pub(super) fn publish_run(&self, first: u64, segments: u64, at: u64, line: &[u8]) -> Result<()> {
        let r = (|| -> Result<()> {
            let base = self.segment_offset(first);
            let len = segments * self.segment_size();
            let zero = vec![0u8; (1 << 20).min(len as usize)];
            let mut off = 0u64;
            while off < len {
                let n = (len - off).min(zero.len() as u64) as usize;
                if self.media.map().view(base + off, n)? != &zero[..n] {
                    self.media.map().write(base + off, &zero[..n])?;
                    self.media.persist(base + off, n)?;
                }
                off += n as u64;
            }
            self.media.map().write(at, line)?;
            self.media.persist(at, line.len())
        })();
        if r.is_err() {
            let mut a = self.lock();
            for id in first..first + segments {
                a.segs[id as usize] = SegMeta::free(a.segs[id as usize].generation);
                a.free.push(id);
            }
            a.free.sort_unstable_by(|x, y| y.cmp(x));
        }
        r
    }

    /// The committed slot of cell `i` as it is now (header and entry), or why it holds
    /// no entry.
    pub fn read_cell(&self, t: &CellTable, i: u64) -> std::result::Result<FoundCell, SlotFault> {
        let off = self.cell_table_base(t) + t.committed_offset(i);
        let b = self.media.map().view(off, t.slot_size as usize).map_err(|_| SlotFault::Bad("outside the pool"))?;
        let h = cells::check_slot(b, i, t.slot_size)?;
        Ok(FoundCell { cell: i, header: h, entry: b[..h.entry_len() as usize].to_vec() })
    }

    /// The cell holding `key` (live or deleted), probing as a client does; `None` if
    /// the probe meets an empty cell (or every cell) first. A cell that does not
    /// verify ends the probe too (recovery reported it).
    pub fn cell_lookup(&self, key: &[u8]) -> Option<FoundCell> {
        let t = self.cell_table()?;
        let mut i = cells::home(key, t.cells);
        for _ in 0..t.cells {
            let c = self.read_cell(&t, i).ok()?;
            if super::format::entry_key(&c.entry, &c.header) == key {
                return Some(c);
            }
            i = (i + 1) % t.cells;
        }
        None
    }

    /// Calls `f` with every cell holding a key.
    pub fn for_each_cell(&self, mut f: impl FnMut(&FoundCell)) {
        let Some(t) = self.cell_table() else { return };
        for i in 0..t.cells {
            if let Ok(c) = self.read_cell(&t, i) {
                f(&c);
            }
        }
    }
}

/// The allocator's record of the `k`-th segment of the table.
fn cell_meta(k: u64, generation: u64) -> SegMeta {
    SegMeta {
        state: SegmentState::Active,
        owner: CELLS_OWNER,
        prev: NO_SEGMENT,
        next: NO_SEGMENT,
        log_seq: k,
        generation,
    }
}

/// Reads the descriptor line: the table, or a problem for the report.
pub(super) fn read_descriptor(pool: &Pool) -> (Option<CellTable>, Option<String>) {
    let h = &pool.header;
    match pool.media.map().view(cells::DESCRIPTOR_OFF, cells::DESCRIPTOR_LEN) {
        Ok(b) => match CellTable::decode(b, h.segment_count, h.segment_size) {
            Ok(t) => (t, None),
            Err(e) => (None, Some(e)),
        },
        Err(e) => (None, Some(format!("cell table descriptor: {e}"))),
    }
}

/// Takes the run `first..first + segments` out of the allocator (recovery).
pub(super) fn reserve_run(pool: &Pool, first: u64, segments: u64) {
    let mut a = pool.lock();
    a.free.retain(|id| *id < first || *id >= first + segments);
    for (k, id) in (first..first + segments).enumerate() {
        a.segs[id as usize] = cell_meta(k as u64, a.segs[id as usize].generation);
    }
}

/// Recovery's step for the table `t`: takes its segments out of the allocator, then
/// applies the recovery rule ([`cells`]) to every cell; `writable`, restores committed
/// slots from uncommitted ones and releases every lock (each word written and
/// persisted only where it changes).
pub(super) fn recover_cells(pool: &Pool, t: CellTable, writable: bool) -> Result<CellsReport> {
    reserve_run(pool, t.first_segment, t.segments);
    let _ = pool.cells.set(t);
    let mut rep = CellsReport { table: Some(t), ..Default::default() };
    let base = pool.cell_table_base(&t);
    let m = pool.media.map();
    let s = t.slot_size as usize;
    for i in 0..t.cells {
        let state = {
            let c = m.view(base + t.committed_offset(i), s)?;
            let u = m.view(base + t.uncommitted_offset(i), s)?;
            cells::recover_cell(c, u, i, t.slot_size)
        };
        let version = match state {
            CellState::Empty => 0,
            CellState::Committed(h) => h.version,
            CellState::FromUncommitted(h) => {
                if writable {
                    let n = h.entry_len() as usize;
                    let u = m.view(base + t.uncommitted_offset(i), n)?.to_vec();
                    m.write(base + t.committed_offset(i), &u)?;
                    pool.media.persist(base + t.committed_offset(i), n)?;
                }
                rep.cells_restored += 1;
                h.version
            }
            // Never claimable again as empty: keys past it in a probe stay reachable
            // (or fail loudly), and its own key reads as an error.
            CellState::Damaged(_) => {
                rep.cells_damaged += 1;
                1
            }
        };
        if version > 0 && !matches!(state, CellState::Damaged(_)) {
            rep.cells_in_use += 1;
        }
        let lock = base + t.lock_offset(i);
        let word = m.read_u64(lock)?;
        let want = cells::lock_word(version, 0);
        let held = cells::lock_holder(word) != 0;
        rep.locks_held += u64::from(held);
        if word != want && writable {
            rep.locks_released += u64::from(held);
            pool.media.store_u64(lock, want)?;
            pool.media.persist(lock, 8)?;
        }
    }
    Ok(rep)
}
