//! THE CLOVER ARENA FORMAT: the bytes Clover keeps in a pool
//! ([`crate::proto::clover`]). Everything that reads the arena (the server that creates
//! it and hands out its chunks, recovery, `inspect-log`, the crash checker, the
//! protocol's client) decodes it through this module. Versions hold
//! [`format`](super::format)'s entries. It imports only `error`, `super::format` and `super::cells` (the home of a key).
//!
//! ## Where the arena lies
//!
//! At most one per pool: a run of whole, consecutive segments taken out of the
//! allocator, described by one line of the pool header (outside every segment):
//!
//! | pool offset | size | field | meaning |
//! |---|---|---|---|
//! | 384 | 8 | magic | `BOOMCLOV` |
//! | 392 | 8 | first_segment | the first segment of the run |
//! | 400 | 8 | segments | segments in the run |
//! | 408 | 8 | heads | head records |
//! | 416 | 8 | chunk_size | bytes of a chunk, a multiple of 4096 |
//! | 424 | 8 | chunks | chunks |
//! | 432 | 20 | reserved | zero |
//! | 452 | 4 | checksum | CRC-32C of bytes 384..452 |
//!
//! All zero: no arena. Written once, after the run is zeroed and persisted (a line
//! torn by a crash fails its checksum: the arena does not exist, its segments are free).
//!
//! ## Inside the arena (offsets from its first byte; 0 is never a version)
//!
//! ```text
//! [0, heads * 64)                     head records
//! [data_start + c * chunk_size, ...)  chunk c, for c in 0..chunks (data_start = heads * 64 rounded up to 4096)
//! ```
//!
//! A **head record** (64 bytes) names a key's chain: `first` (8 bytes, the arena offset
//! of the oldest version recovery starts from; 0 = no key) and `shortcut` (8 bytes, a
//! recent version, a hint written without waiting). A key lives in the first head of a
//! linear probe from [`home`] whose first version holds the key, or that is empty.
//!
//! A **version** (at an 8-byte aligned offset of a chunk): `next` (8 bytes, the arena
//! offset of the next newer version, 0 while this is the newest; set once, by
//! compare-and-swap), then an entry of [`format`](super::format) (`next_offset` zero)
//! whose `version_num` is the key's version (the previous one's plus one) and whose
//! `seal` is the writer's check: the CRC-32C of the version's arena offset,
//! `version_num` and the entry's checksum, with the offset's low 32 bits above it. A
//! version verifies only at its own offset and with its version.
//!
//! ## The durability and recovery rule
//!
//! A writer makes its version durable (WRITE, FLUSH) before it links it (the
//! compare-and-swap of the previous newest version's `next`, or of the head's `first`
//! for a new key), and acknowledges once the link is durable (FLUSH). So every version
//! a chain reaches is whole. Recovery walks each head's chain from `first` along `next`
//! while the versions verify and hold the key: the last is the key's value. Chunks no
//! chain reaches are free. The metadata server moves `first` forward to the newest
//! version (durably) before it frees the chunks of older ones.

use super::format::{self as fmt, EntryHeader, ENTRY_HEADER_SIZE};
use crate::error::{Error, Result};

/// Pool offset of the arena's descriptor line.
pub const DESCRIPTOR_OFF: u64 = 384;
/// Bytes of the descriptor line.
pub const DESCRIPTOR_LEN: usize = 72;
const DESCRIPTOR_MAGIC: [u8; 8] = *b"BOOMCLOV";
const DESCRIPTOR_CHECKSUM_OFF: usize = 68;
/// Bytes of a head record.
pub const HEAD_SIZE: u64 = 64;
/// Offset of `shortcut` in a head record.
pub const SHORTCUT_OFF: u64 = 8;
/// Bytes before a version's entry (its `next` word).
pub const NEXT_LEN: u64 = 8;
/// Most head records.
pub const MAX_HEADS: u64 = 1 << 32;

/// Where the arena lies and its geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Arena {
    /// First segment of the run.
    pub first_segment: u64,
    /// Segments in the run.
    pub segments: u64,
    /// Head records.
    pub heads: u64,
    /// Bytes per chunk.
    pub chunk_size: u64,
    /// Chunks.
    pub chunks: u64,
}

impl Arena {
    /// The arena offset of chunk 0.
    pub fn data_start(&self) -> u64 {
        (self.heads * HEAD_SIZE).div_ceil(4096) * 4096
    }

    /// Bytes of the arena.
    pub fn bytes(&self) -> u64 {
        self.data_start() + self.chunks * self.chunk_size
    }

    /// Arena offset of head `i`.
    pub fn head_offset(&self, i: u64) -> u64 {
        i * HEAD_SIZE
    }

    /// Arena offset of chunk `c`.
    pub fn chunk_offset(&self, c: u64) -> u64 {
        self.data_start() + c * self.chunk_size
    }

    /// The chunk holding arena offset `off`, if it is in the data area.
    pub fn chunk_of(&self, off: u64) -> Option<u64> {
        let c = off.checked_sub(self.data_start())? / self.chunk_size;
        (c < self.chunks).then_some(c)
    }

    /// Whether segment `id` belongs to the arena.
    pub fn holds_segment(&self, id: u64) -> bool {
        id >= self.first_segment && id - self.first_segment < self.segments
    }

    /// Whether a version of `len` bytes (next word and entry) can start at `off`: in
    /// one chunk, aligned.
    pub fn version_fits(&self, off: u64, len: u64) -> bool {
        off % 8 == 0
            && self
                .chunk_of(off)
                .is_some_and(|c| off.checked_add(len).is_some_and(|e| e <= self.chunk_offset(c) + self.chunk_size))
    }

    /// Encodes the descriptor line.
    pub fn encode(&self) -> [u8; DESCRIPTOR_LEN] {
        let mut b = [0u8; DESCRIPTOR_LEN];
        b[0..8].copy_from_slice(&DESCRIPTOR_MAGIC);
        for (i, v) in [self.first_segment, self.segments, self.heads, self.chunk_size, self.chunks].iter().enumerate() {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        let c = crate::log::format::crc32c(&b[..DESCRIPTOR_CHECKSUM_OFF]);
        b[DESCRIPTOR_CHECKSUM_OFF..].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Checks the geometry against a pool of `segment_count` segments of `segment_size`.
    pub fn validate(&self, segment_count: u64, segment_size: u64) -> std::result::Result<(), String> {
        if self.heads == 0 || self.heads > MAX_HEADS {
            return Err(format!("{} heads", self.heads));
        }
        if self.chunk_size == 0 || self.chunk_size % 4096 != 0 || self.chunk_size > 1 << 32 || self.chunks == 0 {
            return Err(format!("{} chunks of {} bytes", self.chunks, self.chunk_size));
        }
        let end = self.first_segment.checked_add(self.segments);
        if self.segments == 0 || end.is_none_or(|e| e > segment_count) {
            return Err(format!("segments {}+{} of a pool of {segment_count}", self.first_segment, self.segments));
        }
        let bytes = self.chunks.checked_mul(self.chunk_size).and_then(|d| d.checked_add(self.data_start()));
        if bytes.is_none_or(|b| b > self.segments.saturating_mul(segment_size)) {
            return Err(format!("an arena larger than its {} segments", self.segments));
        }
        Ok(())
    }

    /// Decodes the descriptor line: `Ok(None)` when there is no arena, `Err` when the
    /// line is damaged.
    pub fn decode(b: &[u8], segment_count: u64, segment_size: u64) -> std::result::Result<Option<Arena>, String> {
        if b.len() < DESCRIPTOR_LEN {
            return Err("short descriptor".into());
        }
        if b[..DESCRIPTOR_LEN].iter().all(|&x| x == 0) {
            return Ok(None);
        }
        if b[0..8] != DESCRIPTOR_MAGIC {
            return Err("Clover arena descriptor: wrong magic".into());
        }
        let stored = u32::from_le_bytes([b[68], b[69], b[70], b[71]]);
        if crate::log::format::crc32c(&b[..DESCRIPTOR_CHECKSUM_OFF]) != stored {
            return Err("Clover arena descriptor: checksum mismatch".into());
        }
        let w = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        let a = Arena { first_segment: w(8), segments: w(16), heads: w(24), chunk_size: w(32), chunks: w(40) };
        a.validate(segment_count, segment_size).map_err(|e| format!("Clover arena descriptor: {e}"))?;
        Ok(Some(a))
    }
}

/// The head a probe for `key` starts at (the cell table's hash, [`super::cells::home`]).
pub fn home(key: &[u8], heads: u64) -> u64 {
    super::cells::home(key, heads)
}

/// Bytes of a version of an entry of `entry_len` bytes, rounded to 8.
pub fn version_len(entry_len: u64) -> u64 {
    (NEXT_LEN + entry_len).div_ceil(8) * 8
}

/// The writer's check stored in a version's `seal` field.
pub fn version_check(off: u64, version: u64, checksum: u32) -> u64 {
    let mut b = [0u8; 20];
    b[..8].copy_from_slice(&off.to_le_bytes());
    b[8..16].copy_from_slice(&version.to_le_bytes());
    b[16..].copy_from_slice(&checksum.to_le_bytes());
    u64::from(crate::log::format::crc32c(&b)) | ((off & 0xffff_ffff) << 32)
}

/// Stores `version` and the check into the encoded entry `e` of the version at arena
/// offset `off`.
pub fn seal_version(e: &mut [u8], off: u64, version: u64) -> Result<()> {
    let c = fmt::stored_checksum(e).ok_or_else(|| Error::invalid("version shorter than an entry header"))?;
    fmt::store_version_seal(e, version, version_check(off, version, c));
    Ok(())
}

/// Why bytes are not a version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionFault {
    /// Longer than the bytes given: read this many (next word included).
    Short(u64),
    /// Torn, damaged, or not a version at this offset.
    Bad(&'static str),
}

/// Checks the version at arena offset `off` whose bytes (next word first) are `b`.
/// Returns its entry header and its `next` word.
pub fn check_version(b: &[u8], off: u64) -> std::result::Result<(EntryHeader, u64), VersionFault> {
    let head = (NEXT_LEN + ENTRY_HEADER_SIZE) as usize;
    if b.len() < head {
        return Err(VersionFault::Short(head as u64));
    }
    let next = u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
    let e = &b[NEXT_LEN as usize..];
    let h = EntryHeader::decode(e).map_err(|_| VersionFault::Bad("no entry magic"))?;
    if h.key_len == 0 || h.key_len > fmt::MAX_KEY_LEN {
        return Err(VersionFault::Bad("key length"));
    }
    let len = h.entry_len();
    if (e.len() as u64) < len {
        return Err(VersionFault::Short(NEXT_LEN + len));
    }
    if fmt::entry_checksum(&e[..len as usize]) != h.checksum {
        return Err(VersionFault::Bad("checksum"));
    }
    if h.version == 0 || h.seal != version_check(off, h.version, h.checksum) {
        return Err(VersionFault::Bad("version check"));
    }
    Ok((h, next))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(off: u64, key: &[u8], value: &[u8], v: u64, next: u64) -> Vec<u8> {
        let mut e = vec![0u8; ENTRY_HEADER_SIZE as usize + key.len() + value.len()];
        fmt::encode_entry(&mut e, key, value, false, 0).unwrap();
        seal_version(&mut e, off, v).unwrap();
        let mut b = next.to_le_bytes().to_vec();
        b.extend_from_slice(&e);
        b
    }

    #[test]
    fn descriptor_round_trips() {
        let a = Arena { first_segment: 2, segments: 3, heads: 100, chunk_size: 8192, chunks: 20 };
        assert_eq!(Arena::decode(&a.encode(), 8, 64 << 10), Ok(Some(a)));
        assert_eq!(Arena::decode(&[0u8; DESCRIPTOR_LEN], 8, 64 << 10), Ok(None));
        let mut bad = a.encode();
        bad[30] ^= 4;
        assert!(Arena::decode(&bad, 8, 64 << 10).is_err());
        assert!(Arena::decode(&a.encode(), 4, 64 << 10).is_err(), "past the pool");
        assert_eq!(a.chunk_of(a.data_start() + 8192 + 5), Some(1));
        assert_eq!(a.chunk_of(64), None);
        assert!(a.version_fits(a.chunk_offset(1), 8192) && !a.version_fits(a.chunk_offset(1) + 8, 8192));
    }

    #[test]
    fn a_version_verifies_only_at_its_offset_with_its_version() {
        let b = version(4096, b"k", b"v1", 3, 0);
        assert_eq!(check_version(&b, 4096).map(|(h, n)| (h.version, n)), Ok((3, 0)));
        assert!(matches!(check_version(&b, 4104), Err(VersionFault::Bad(_))));
        let mut linked = b.clone();
        linked[..8].copy_from_slice(&9000u64.to_le_bytes());
        assert_eq!(check_version(&linked, 4096).map(|(_, n)| n), Ok(9000), "next is not checksummed");
        let mut torn = b.clone();
        torn[16] ^= 1; // version_num
        assert!(matches!(check_version(&torn, 4096), Err(VersionFault::Bad(_))));
        assert_eq!(check_version(&b[..50], 4096), Err(VersionFault::Short(51)));
    }
}
