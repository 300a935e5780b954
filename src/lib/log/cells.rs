//! THE CELL TABLE FORMAT: the bytes pDPM-Direct keeps in a pool
//! ([`crate::proto::pdpm_direct`]). Everything that reads the table (the server that
//! creates it, recovery, `inspect-log`, the crash checker, the protocol's client)
//! decodes it through this module. The entries in its slots are
//! [`format`](super::format)'s; this module adds where the table lies, how a cell is
//! laid out, the lock word, and the check that stands in for the server's seal.
//! It imports only `error` and `super::format`.
//!
//! ## Where the table lies
//!
//! A pool has at most one cell table: a run of whole, consecutive segments taken out
//! of the allocator, described by one line of the pool header (outside every segment,
//! so no client region covers it):
//!
//! | pool offset | size | field | meaning |
//! |---|---|---|---|
//! | 256 | 8 | magic | `BOOMCELL` |
//! | 264 | 8 | first_segment | the first segment of the run |
//! | 272 | 8 | segments | segments in the run |
//! | 280 | 8 | cells | cells in the table |
//! | 288 | 8 | slot_size | bytes of each of a cell's two slots, a multiple of 64 |
//! | 296 | 28 | reserved | zero |
//! | 324 | 4 | checksum | CRC-32C of bytes 256..324 |
//!
//! All zero: no table (every pool before the first pDPM-Direct client). The line is
//! written once, after the run's bytes are zeroed and persisted, and persisted itself;
//! a line torn by a crash fails its checksum and the table does not exist (no client
//! was told of it), so its segments are free again (their state words were zeroed).
//! The table's segments have no segment headers: from the run's first byte on, the
//! bytes are cells.
//!
//! ## A cell (at `first_segment`'s offset + `i * cell_size`)
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | lock word: bits 16..64 the cell's version, bits 0..16 the holder (0 = free) |
//! | 8 | 56 | zero |
//! | 64 | slot_size | the committed slot |
//! | 64 + slot_size | slot_size | the uncommitted slot |
//!
//! A word of zero is an empty cell (no key has committed there). A slot holds one
//! entry of [`format`](super::format) (header, key, value; `next_offset` zero) whose
//! `seal` field is not the server's seal (the server takes no part in a write) but the
//! writer's check: the CRC-32C of the cell index, `version_num` and the entry's
//! checksum in the low 32 bits and the cell index's low 32 bits above. So a slot
//! verifies only in its own cell, and a version torn from its value fails. A slot is
//! empty when its first 40 bytes are zero. Keys are at most [`CELL_KEY_MAX`] bytes.
//!
//! Which cell holds a key: linear probing from [`home`] (FNV-1a of the key), past
//! cells whose committed slot holds another key, to the first empty cell or the key's.
//!
//! ## The recovery rule ([`recover_cell`])
//!
//! The committed slot if it verifies, unless the uncommitted slot verifies too with a
//! newer version of the same key: then a writer had made that version durable and was
//! writing the committed slot, which a reader may already have read (the paper's rule
//! would take the value back; this one keeps what a GET returned durable). Else the
//! uncommitted slot if it verifies (a writer persists it in full before it starts on
//! the committed one); else an empty
//! cell if both slots are empty or only the uncommitted one is torn (a first write
//! that never reached its committed slot); else the cell is damaged. Every lock is
//! released: the lock word becomes the recovered version with no holder (zero for an
//! empty cell, version 1 for a damaged one, so that it is never claimed as empty: a
//! probe that meets it fails loudly).

use super::format::{self as fmt, EntryHeader, ENTRY_HEADER_SIZE};
use crate::error::{Error, Result};

/// Pool offset of the table's descriptor line.
pub const DESCRIPTOR_OFF: u64 = 256;
/// Bytes of the descriptor line.
pub const DESCRIPTOR_LEN: usize = 72;
const DESCRIPTOR_MAGIC: [u8; 8] = *b"BOOMCELL";
const DESCRIPTOR_CHECKSUM_OFF: usize = 68;
/// Bytes before a cell's committed slot (the lock word's line).
pub const LOCK_LINE: u64 = 64;
/// Longest key a cell holds.
pub const CELL_KEY_MAX: u32 = 128;
/// Most cells in a table.
pub const MAX_CELLS: u64 = 1 << 32;

/// Largest slot a cell table's descriptor may name.
pub const MAX_SLOT_SIZE: u64 = 1 << 30;
/// Largest cell version (48 bits of the lock word).
pub const MAX_CELL_VERSION: u64 = (1 << 48) - 1;

/// Where the cell table lies and its geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CellTable {
    /// First segment of the run.
    pub first_segment: u64,
    /// Segments in the run.
    pub segments: u64,
    /// Cells.
    pub cells: u64,
    /// Bytes of each slot.
    pub slot_size: u64,
}

impl CellTable {
    /// The slot size for values of up to `value_max` bytes under keys of up to
    /// [`CELL_KEY_MAX`].
    pub fn slot_size_for(value_max: u32) -> u64 {
        (ENTRY_HEADER_SIZE + u64::from(CELL_KEY_MAX) + u64::from(value_max)).div_ceil(64) * 64
    }

    /// Bytes of one cell.
    pub fn cell_size(&self) -> u64 {
        LOCK_LINE + 2 * self.slot_size
    }

    /// Bytes of all the cells (saturating: a geometry this large fits no pool, and
    /// [`CellTable::validate`] refuses it).
    pub fn bytes(&self) -> u64 {
        self.cells.saturating_mul(self.cell_size())
    }

    /// The largest value a cell holds under a key of `key_len` bytes.
    pub fn value_max(&self, key_len: usize) -> u64 {
        self.slot_size.saturating_sub(ENTRY_HEADER_SIZE + key_len as u64)
    }

    /// Offset of cell `i`'s lock word from the table's first byte.
    pub fn lock_offset(&self, i: u64) -> u64 {
        i * self.cell_size()
    }

    /// Offset of cell `i`'s committed slot from the table's first byte.
    pub fn committed_offset(&self, i: u64) -> u64 {
        self.lock_offset(i) + LOCK_LINE
    }

    /// Offset of cell `i`'s uncommitted slot from the table's first byte.
    pub fn uncommitted_offset(&self, i: u64) -> u64 {
        self.committed_offset(i) + self.slot_size
    }

    /// Whether segment `id` belongs to the table.
    pub fn holds_segment(&self, id: u64) -> bool {
        id >= self.first_segment && id - self.first_segment < self.segments
    }

    /// Encodes the descriptor line.
    pub fn encode(&self) -> [u8; DESCRIPTOR_LEN] {
        let mut b = [0u8; DESCRIPTOR_LEN];
        b[0..8].copy_from_slice(&DESCRIPTOR_MAGIC);
        b[8..16].copy_from_slice(&self.first_segment.to_le_bytes());
        b[16..24].copy_from_slice(&self.segments.to_le_bytes());
        b[24..32].copy_from_slice(&self.cells.to_le_bytes());
        b[32..40].copy_from_slice(&self.slot_size.to_le_bytes());
        let c = crate::log::format::crc32c(&b[..DESCRIPTOR_CHECKSUM_OFF]);
        b[DESCRIPTOR_CHECKSUM_OFF..].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Checks the geometry against a pool of `segment_count` segments of `segment_size`.
    pub fn validate(&self, segment_count: u64, segment_size: u64) -> std::result::Result<(), String> {
        if self.cells == 0 || self.cells > MAX_CELLS {
            return Err(format!("{} cells (1..={MAX_CELLS})", self.cells));
        }
        if self.slot_size % 64 != 0 || self.slot_size < Self::slot_size_for(0) || self.slot_size > MAX_SLOT_SIZE {
            return Err(format!("slot size {}", self.slot_size));
        }
        let end = self.first_segment.checked_add(self.segments);
        if self.segments == 0 || end.is_none_or(|e| e > segment_count) {
            return Err(format!("segments {}+{} of a pool of {segment_count}", self.first_segment, self.segments));
        }
        // Checked: a wrapped product let a one-segment table claim billions of cells,
        // and recovery then wrote lock words far past it.
        let bytes = self
            .cells
            .checked_mul(self.cell_size())
            .ok_or_else(|| format!("{} cells of {} bytes overflow a 64-bit size", self.cells, self.cell_size()))?;
        if bytes > self.segments.saturating_mul(segment_size) {
            return Err(format!("{bytes} bytes of cells in {} segments", self.segments));
        }
        Ok(())
    }

    /// Decodes the descriptor line: `Ok(None)` when there is no table, `Err` when the
    /// line is damaged (a creation a crash interrupted, or a flipped bit).
    pub fn decode(b: &[u8], segment_count: u64, segment_size: u64) -> std::result::Result<Option<CellTable>, String> {
        if b.len() < DESCRIPTOR_LEN {
            return Err("short descriptor".into());
        }
        if b[..DESCRIPTOR_LEN].iter().all(|&x| x == 0) {
            return Ok(None);
        }
        if b[0..8] != DESCRIPTOR_MAGIC {
            return Err("cell table descriptor: wrong magic".into());
        }
        let stored = u32::from_le_bytes([b[68], b[69], b[70], b[71]]);
        if crate::log::format::crc32c(&b[..DESCRIPTOR_CHECKSUM_OFF]) != stored {
            return Err("cell table descriptor: checksum mismatch".into());
        }
        let w = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        let t = CellTable { first_segment: w(8), segments: w(16), cells: w(24), slot_size: w(32) };
        t.validate(segment_count, segment_size).map_err(|e| format!("cell table descriptor: {e}"))?;
        Ok(Some(t))
    }
}

/// The cell a probe for `key` starts at: FNV-1a (64-bit) of the key, modulo `cells`.
pub fn home(key: &[u8], cells: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h % cells.max(1)
}

/// A lock word: `version` with `holder` (0 = free).
pub fn lock_word(version: u64, holder: u16) -> u64 {
    (version << 16) | u64::from(holder)
}

/// The version of a lock word.
pub fn lock_version(w: u64) -> u64 {
    w >> 16
}

/// The holder of a lock word (0 = free).
pub fn lock_holder(w: u64) -> u16 {
    (w & 0xffff) as u16
}

/// The holder tag of client `id` (never 0).
pub fn holder_tag(id: u64) -> u16 {
    (id % 0xffff) as u16 + 1
}

/// The writer's check stored in a slot's `seal` field.
pub fn slot_check(cell: u64, version: u64, checksum: u32) -> u64 {
    let mut b = [0u8; 20];
    b[..8].copy_from_slice(&cell.to_le_bytes());
    b[8..16].copy_from_slice(&version.to_le_bytes());
    b[16..].copy_from_slice(&checksum.to_le_bytes());
    u64::from(crate::log::format::crc32c(&b)) | ((cell & 0xffff_ffff) << 32)
}

/// Why a slot holds no entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotFault {
    /// Never written.
    Empty,
    /// The entry is longer than the bytes given: read this many.
    Short(u64),
    /// Torn or damaged.
    Bad(&'static str),
}

/// Checks the slot of cell `cell` whose bytes start `b` (at least the entry, or
/// [`SlotFault::Short`] says how much), in a table of `slot_size`-byte slots.
pub fn check_slot(b: &[u8], cell: u64, slot_size: u64) -> std::result::Result<EntryHeader, SlotFault> {
    let head = ENTRY_HEADER_SIZE as usize;
    if b.len() < head {
        return Err(SlotFault::Short(ENTRY_HEADER_SIZE));
    }
    if b[..head].iter().all(|&x| x == 0) {
        return Err(SlotFault::Empty);
    }
    let h = EntryHeader::decode(b).map_err(|_| SlotFault::Bad("no entry magic"))?;
    if h.key_len == 0 || h.key_len > CELL_KEY_MAX {
        return Err(SlotFault::Bad("key length"));
    }
    let len = h.entry_len();
    if len > slot_size {
        return Err(SlotFault::Bad("entry longer than its slot"));
    }
    if (b.len() as u64) < len {
        return Err(SlotFault::Short(len));
    }
    if fmt::entry_checksum(&b[..len as usize]) != h.checksum {
        return Err(SlotFault::Bad("checksum"));
    }
    if h.version == 0 || h.version > MAX_CELL_VERSION || h.seal != slot_check(cell, h.version, h.checksum) {
        return Err(SlotFault::Bad("version check"));
    }
    Ok(h)
}

/// Stores `version` and the slot check into the encoded entry `b` of cell `cell`.
pub fn seal_slot(b: &mut [u8], cell: u64, version: u64) -> Result<()> {
    let c = fmt::stored_checksum(b).ok_or_else(|| Error::invalid("slot shorter than an entry header"))?;
    fmt::store_version_seal(b, version, slot_check(cell, version, c));
    Ok(())
}

/// What recovery makes of a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CellState {
    /// No key.
    Empty,
    /// The committed slot verifies.
    Committed(EntryHeader),
    /// Only the uncommitted slot verifies: it is copied over the committed one.
    FromUncommitted(EntryHeader),
    /// Neither slot verifies and the committed one is not empty.
    Damaged(&'static str),
}

/// The recovery rule (module docs) for cell `cell` whose slots are `c` and `u`.
pub fn recover_cell(c: &[u8], u: &[u8], cell: u64, slot_size: u64) -> CellState {
    match (check_slot(c, cell, slot_size), check_slot(u, cell, slot_size)) {
        (Ok(hc), Ok(hu)) if hu.version > hc.version && fmt::claimed_key(u) == fmt::claimed_key(c) => {
            CellState::FromUncommitted(hu)
        }
        (Ok(h), _) => CellState::Committed(h),
        (Err(_), Ok(h)) => CellState::FromUncommitted(h),
        (Err(SlotFault::Empty), Err(_)) => CellState::Empty,
        (Err(SlotFault::Bad(why)), Err(_)) => CellState::Damaged(why),
        (Err(SlotFault::Short(_)), Err(_)) => CellState::Damaged("short slot"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(cell: u64, key: &[u8], value: &[u8], version: u64, slot_size: u64) -> Vec<u8> {
        let mut b = vec![0u8; slot_size as usize];
        fmt::encode_entry(&mut b, key, value, false, 0).unwrap();
        seal_slot(&mut b, cell, version).unwrap();
        b
    }

    #[test]
    fn descriptor_round_trips_and_rejects_damage() {
        let t = CellTable { first_segment: 3, segments: 2, cells: 10, slot_size: CellTable::slot_size_for(100) };
        let b = t.encode();
        assert_eq!(CellTable::decode(&b, 8, 64 << 10), Ok(Some(t)));
        assert_eq!(CellTable::decode(&[0u8; DESCRIPTOR_LEN], 8, 64 << 10), Ok(None));
        let mut bad = b;
        bad[20] ^= 1;
        assert!(CellTable::decode(&bad, 8, 64 << 10).is_err());
        // A table past the pool's end.
        assert!(CellTable::decode(&b, 4, 64 << 10).is_err());
    }

    #[test]
    fn a_slot_verifies_only_in_its_cell_and_with_its_version() {
        let s = CellTable::slot_size_for(64);
        let b = slot(7, b"k", b"value", 3, s);
        assert_eq!(check_slot(&b, 7, s).map(|h| h.version), Ok(3));
        assert!(matches!(check_slot(&b, 8, s), Err(SlotFault::Bad(_))));
        let mut v = b.clone();
        v[8] ^= 1; // version_num
        assert!(matches!(check_slot(&v, 7, s), Err(SlotFault::Bad(_))));
        assert_eq!(check_slot(&vec![0u8; s as usize], 7, s), Err(SlotFault::Empty));
        assert_eq!(check_slot(&b[..44], 7, s), Err(SlotFault::Short(46)));
    }

    #[test]
    fn recovery_prefers_the_committed_slot_then_the_uncommitted_one() {
        let s = CellTable::slot_size_for(64);
        let (old, new) = (slot(1, b"k", b"old", 1, s), slot(1, b"k", b"new", 2, s));
        let empty = vec![0u8; s as usize];
        let mut torn = new.clone();
        torn[42] ^= 0xff; // a value byte
        assert!(matches!(recover_cell(&new, &new, 1, s), CellState::Committed(h) if h.version == 2));
        // The committed slot's new version may have been read before its FLUSH: the
        // uncommitted copy, durable first, wins over the old committed one.
        assert!(matches!(recover_cell(&old, &new, 1, s), CellState::FromUncommitted(h) if h.version == 2));
        assert!(matches!(recover_cell(&new, &old, 1, s), CellState::Committed(h) if h.version == 2));
        let other = slot(1, b"x", b"new", 2, s);
        assert!(matches!(recover_cell(&old, &other, 1, s), CellState::Committed(h) if h.version == 1));
        assert!(matches!(recover_cell(&torn, &new, 1, s), CellState::FromUncommitted(h) if h.version == 2));
        assert_eq!(recover_cell(&empty, &torn, 1, s), CellState::Empty);
        assert_eq!(recover_cell(&empty, &empty, 1, s), CellState::Empty);
        assert!(matches!(recover_cell(&torn, &torn, 1, s), CellState::Damaged(_)));
    }

    #[test]
    fn lock_words_and_homes() {
        let w = lock_word(5, 9);
        assert_eq!((lock_version(w), lock_holder(w)), (5, 9));
        assert_ne!(holder_tag(0xffff - 1), 0);
        assert_ne!(holder_tag(u64::MAX), 0);
        assert!(home(b"user1", 10) < 10);
        assert_eq!(home(b"user1", 10), home(b"user1", 10));
    }
}
