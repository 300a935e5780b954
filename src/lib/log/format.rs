//! THE ON-MEDIA FORMAT. Every byte BOOM-KV keeps in persistent memory is defined here,
//! and everything that reads a pool (the server, `recover`, `inspect-log`, the crash
//! checker) decodes it through this module.
//!
//! All integers are little-endian and fixed width. Fields that decide validity
//! (`count`, `state`, `version_num`) are aligned 8-byte words updated with single
//! stores, so they never tear.
//!
//! ## Pool layout
//!
//! ```text
//! [0, 4096)                           pool header
//! [4096 + i*segment_size, +segment_size)   segment i, for i in 0..segment_count
//! ```
//!
//! ## Pool header (at offset 0, 4096 bytes reserved)
//!
//! | offset | size | field | meaning |
//! |---|---|---|---|
//! | 0 | 8 | magic | `BOOMKVPL` |
//! | 8 | 4 | format_version | [`FORMAT_VERSION`] |
//! | 12 | 4 | header_size | 4096; segments start here |
//! | 16 | 16 | uuid | random, identifies the pool |
//! | 32 | 8 | pool_size | bytes of the pool file |
//! | 40 | 8 | segment_size | bytes per segment, a multiple of 4096 |
//! | 48 | 8 | segment_count | segments in the pool |
//! | 56 | 8 | created | creation time, seconds since the Unix epoch |
//! | 64 | 12 | reserved | zero |
//! | 76 | 4 | checksum | CRC-32C of bytes 0..76 |
//!
//! ## Segment header (at the start of every segment, 128 bytes)
//!
//! The first cache line is written once when the segment is allocated and is covered by
//! its checksum; the second holds the words that change, each an aligned 8-byte store.
//!
//! | offset | size | field | meaning |
//! |---|---|---|---|
//! | 0 | 8 | magic | `BOOMSEG1` |
//! | 8 | 4 | format_version | [`FORMAT_VERSION`] |
//! | 12 | 4 | checksum | CRC-32C of bytes 0..12 and 16..64 |
//! | 16 | 8 | segment_id | index of this segment in the pool |
//! | 24 | 8 | owner | client id owning this segment's log ([`CLEANER_OWNER`] for the cleaner) |
//! | 32 | 8 | prev | previous segment of the owner's log, or [`NO_SEGMENT`] |
//! | 40 | 8 | log_seq | position in the owner's log, from 0 |
//! | 48 | 8 | generation | how many times this segment has been allocated |
//! | 56 | 8 | reserved | zero |
//! | 64 | 8 | count | appended entries that are durable; recovery reads no further |
//! | 72 | 8 | state | [`SegmentState`]: 0 free, 1 active, 2 sealed |
//! | 80 | 8 | next | next segment of the owner's log, or [`NO_SEGMENT`] |
//! | 88 | 40 | reserved | zero |
//!
//! A segment is in use only if its magic, version and checksum are valid and `state` is
//! active or sealed. Allocation persists `count = 0` and `state = free`, then the first
//! line, then `state = active`, so a crash at any point leaves either a free segment or an
//! empty valid one.
//!
//! ## Entry (at 8-byte aligned offsets from 128 within a segment)
//!
//! | offset | size | field | meaning |
//! |---|---|---|---|
//! | 0 | 4 | checksum | CRC-32C of bytes 4..8, 16..32, key and value (not `version_num`) |
//! | 4 | 2 | magic | `0xB0E7` |
//! | 6 | 2 | flags | bit 0: tombstone (a DELETE) |
//! | 8 | 8 | version_num | assigned by the server; 0 = not assigned (never valid) |
//! | 16 | 4 | key_len | bytes of key, 1..=[`MAX_KEY_LEN`] |
//! | 20 | 4 | value_len | bytes of value |
//! | 24 | 8 | next_offset | segment offset of the next entry's slot |
//! | 32 | key_len | key | |
//! | 32+key_len | value_len | value | |
//!
//! The client writes everything but `version_num` and computes the checksum; the server
//! then stores `version_num`. `next_offset` is set when the slot is appended
//! (offset + slot size, 8-byte aligned) and every later in-place rewrite of the slot
//! writes the same value, so the chain of slots stays walkable even across a torn
//! rewrite. A slot's capacity is `next_offset - offset`; an in-place entry must fit it.

use crate::error::{Error, Result};

/// Format version written in the pool and segment headers.
pub const FORMAT_VERSION: u32 = 1;

/// Pool header magic.
pub const POOL_MAGIC: [u8; 8] = *b"BOOMKVPL";
/// Bytes reserved for the pool header; segment 0 starts here.
pub const POOL_HEADER_SIZE: u64 = 4096;
/// Offset of the pool header checksum.
pub const POOL_CHECKSUM_OFF: usize = 76;

/// Segment header magic.
pub const SEGMENT_MAGIC: [u8; 8] = *b"BOOMSEG1";
/// Bytes of a segment header; the first entry starts here.
pub const SEGMENT_HEADER_SIZE: u64 = 128;
/// Offset of the segment header checksum.
pub const SEG_CHECKSUM_OFF: usize = 12;
/// Offset of `count` within a segment.
pub const SEG_COUNT_OFF: u64 = 64;
/// Offset of `state` within a segment.
pub const SEG_STATE_OFF: u64 = 72;
/// Offset of `next` within a segment.
pub const SEG_NEXT_OFF: u64 = 80;
/// "No segment" in `prev`/`next`.
pub const NO_SEGMENT: u64 = u64::MAX;
/// Owner id used for segments written by the cleaner.
pub const CLEANER_OWNER: u64 = u64::MAX - 1;
/// Smallest segment size accepted.
pub const MIN_SEGMENT_SIZE: u64 = 64 << 10;
/// Default segment size (the paper's 64 MiB).
pub const DEFAULT_SEGMENT_SIZE: u64 = 64 << 20;

/// Entry magic.
pub const ENTRY_MAGIC: u16 = 0xB0E7;
/// Bytes of an entry header.
pub const ENTRY_HEADER_SIZE: u64 = 32;
/// Entry slots start at multiples of this.
pub const ENTRY_ALIGN: u64 = 8;
/// Offset of `version_num` within an entry.
pub const ENTRY_VERSION_OFF: u64 = 8;
/// Offset of `next_offset` within an entry.
pub const ENTRY_NEXT_OFF: u64 = 24;
/// Entry flag: this entry deletes its key.
pub const FLAG_TOMBSTONE: u16 = 1;
/// Longest key accepted.
pub const MAX_KEY_LEN: u32 = 1024;

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

/// The decoded pool header.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PoolHeader {
    /// Random pool id.
    pub uuid: [u8; 16],
    /// Bytes of the pool.
    pub pool_size: u64,
    /// Bytes per segment.
    pub segment_size: u64,
    /// Number of segments.
    pub segment_count: u64,
    /// Creation time (seconds since the epoch).
    pub created: u64,
}

impl PoolHeader {
    /// Lays out a pool of `pool_size` bytes with segments of `segment_size`.
    pub fn new(pool_size: u64, segment_size: u64, uuid: [u8; 16], created: u64) -> Result<PoolHeader> {
        if segment_size < MIN_SEGMENT_SIZE || segment_size % 4096 != 0 {
            return Err(Error::invalid(format!(
                "segment size {segment_size} must be a multiple of 4096 and at least {MIN_SEGMENT_SIZE}"
            )));
        }
        if segment_size > (1u64 << 32) {
            return Err(Error::invalid(format!("segment size {segment_size} is over the 4 GiB limit")));
        }
        let segment_count = pool_size.saturating_sub(POOL_HEADER_SIZE) / segment_size;
        if segment_count == 0 {
            return Err(Error::invalid(format!(
                "a pool of {pool_size} bytes cannot hold one {segment_size}-byte segment; use a larger --pool-size or a smaller --segment-size"
            )));
        }
        Ok(PoolHeader { uuid, pool_size, segment_size, segment_count, created })
    }

    /// Encodes the header (with checksum) into 80 bytes.
    pub fn encode(&self) -> [u8; 80] {
        let mut b = [0u8; 80];
        b[0..8].copy_from_slice(&POOL_MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(POOL_HEADER_SIZE as u32).to_le_bytes());
        b[16..32].copy_from_slice(&self.uuid);
        b[32..40].copy_from_slice(&self.pool_size.to_le_bytes());
        b[40..48].copy_from_slice(&self.segment_size.to_le_bytes());
        b[48..56].copy_from_slice(&self.segment_count.to_le_bytes());
        b[56..64].copy_from_slice(&self.created.to_le_bytes());
        let c = crc32c::crc32c(&b[..POOL_CHECKSUM_OFF]);
        b[76..80].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Decodes and validates a pool header; `file_len` is the size of the pool file.
    pub fn decode(b: &[u8], file_len: u64) -> Result<PoolHeader> {
        let bad = |p: String| Error::corrupt("pool header", p);
        if b.len() < 80 {
            return Err(bad(format!("file is {} bytes, too short for a pool header", b.len())));
        }
        if b[0..8] != POOL_MAGIC {
            return Err(bad("wrong magic: this is not a BOOM-KV pool".into()));
        }
        let ver = u32_at(b, 8);
        if ver != FORMAT_VERSION {
            return Err(bad(format!("format version {ver}, this boomctl reads version {FORMAT_VERSION}")));
        }
        let stored = u32_at(b, 76);
        let c = crc32c::crc32c(&b[..POOL_CHECKSUM_OFF]);
        if stored != c {
            return Err(bad(format!("checksum mismatch (stored {stored:#010x}, computed {c:#010x})")));
        }
        if u32_at(b, 12) as u64 != POOL_HEADER_SIZE {
            return Err(bad(format!("header size {} is not {POOL_HEADER_SIZE}", u32_at(b, 12))));
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[16..32]);
        let h = PoolHeader {
            uuid,
            pool_size: u64_at(b, 32),
            segment_size: u64_at(b, 40),
            segment_count: u64_at(b, 48),
            created: u64_at(b, 56),
        };
        let check = PoolHeader::new(h.pool_size, h.segment_size, uuid, h.created).map_err(|e| bad(e.to_string()))?;
        if check.segment_count != h.segment_count {
            return Err(bad(format!("segment count {} does not match the layout", h.segment_count)));
        }
        if h.pool_size > file_len {
            return Err(bad(format!(
                "header says {} bytes but the file has only {file_len} (truncated?)",
                h.pool_size
            )));
        }
        Ok(h)
    }

    /// Pool offset of segment `id`.
    pub fn segment_offset(&self, id: u64) -> u64 {
        POOL_HEADER_SIZE + id * self.segment_size
    }

    /// The pool's uuid as hex.
    pub fn uuid_hex(&self) -> String {
        self.uuid.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Life-cycle state of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SegmentState {
    /// Not allocated.
    Free,
    /// Owned by a client that may still append.
    Active,
    /// Full; no more appends (in-place rewrites of its slots are also over).
    Sealed,
}

impl SegmentState {
    /// The on-media word.
    pub fn to_word(self) -> u64 {
        match self {
            SegmentState::Free => 0,
            SegmentState::Active => 1,
            SegmentState::Sealed => 2,
        }
    }
    /// Decodes the on-media word (`None` for an unknown value).
    pub fn from_word(w: u64) -> Option<SegmentState> {
        match w {
            0 => Some(SegmentState::Free),
            1 => Some(SegmentState::Active),
            2 => Some(SegmentState::Sealed),
            _ => None,
        }
    }
}

/// The immutable first line of a segment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SegmentHeader {
    /// Index of the segment in the pool.
    pub segment_id: u64,
    /// Client whose log this segment belongs to.
    pub owner: u64,
    /// Previous segment of the owner's log.
    pub prev: u64,
    /// Position in the owner's log.
    pub log_seq: u64,
    /// Allocation generation of this segment.
    pub generation: u64,
}

impl SegmentHeader {
    /// Encodes the first line (64 bytes) with its checksum.
    pub fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..8].copy_from_slice(&SEGMENT_MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[16..24].copy_from_slice(&self.segment_id.to_le_bytes());
        b[24..32].copy_from_slice(&self.owner.to_le_bytes());
        b[32..40].copy_from_slice(&self.prev.to_le_bytes());
        b[40..48].copy_from_slice(&self.log_seq.to_le_bytes());
        b[48..56].copy_from_slice(&self.generation.to_le_bytes());
        let c = seg_checksum(&b);
        b[12..16].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Decodes the first line; `Err` says why the segment is not a valid in-use header.
    pub fn decode(b: &[u8]) -> Result<SegmentHeader> {
        let bad = |p: String| Error::corrupt("segment header", p);
        if b.len() < 64 {
            return Err(bad("short".into()));
        }
        if b[0..8] != SEGMENT_MAGIC {
            return Err(bad("no segment magic".into()));
        }
        let ver = u32_at(b, 8);
        if ver != FORMAT_VERSION {
            return Err(bad(format!("format version {ver}")));
        }
        let stored = u32_at(b, 12);
        if stored != seg_checksum(b) {
            return Err(bad("checksum mismatch".into()));
        }
        Ok(SegmentHeader {
            segment_id: u64_at(b, 16),
            owner: u64_at(b, 24),
            prev: u64_at(b, 32),
            log_seq: u64_at(b, 40),
            generation: u64_at(b, 48),
        })
    }
}

fn seg_checksum(b: &[u8]) -> u32 {
    let c = crc32c::crc32c(&b[0..12]);
    crc32c::crc32c_append(c, &b[16..64])
}

/// The decoded fixed part of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct EntryHeader {
    /// Stored checksum.
    pub checksum: u32,
    /// Flags ([`FLAG_TOMBSTONE`]).
    pub flags: u16,
    /// Version assigned by the server (0 = none).
    pub version: u64,
    /// Key bytes.
    pub key_len: u32,
    /// Value bytes.
    pub value_len: u32,
    /// Segment offset of the next slot.
    pub next_offset: u64,
}

impl EntryHeader {
    /// Whether the entry deletes its key.
    pub fn is_tombstone(&self) -> bool {
        self.flags & FLAG_TOMBSTONE != 0
    }

    /// Bytes of header + key + value.
    pub fn entry_len(&self) -> u64 {
        ENTRY_HEADER_SIZE + self.key_len as u64 + self.value_len as u64
    }

    /// Decodes the 32 header bytes. Only the magic is checked here; use
    /// [`check_entry`] for bounds and checksum.
    pub fn decode(b: &[u8]) -> Result<EntryHeader> {
        if b.len() < ENTRY_HEADER_SIZE as usize {
            return Err(Error::corrupt("entry", "short header"));
        }
        let magic = u16::from_le_bytes([b[4], b[5]]);
        if magic != ENTRY_MAGIC {
            return Err(Error::corrupt("entry", format!("magic {magic:#06x}")));
        }
        Ok(EntryHeader {
            checksum: u32_at(b, 0),
            flags: u16::from_le_bytes([b[6], b[7]]),
            version: u64_at(b, 8),
            key_len: u32_at(b, 16),
            value_len: u32_at(b, 20),
            next_offset: u64_at(b, 24),
        })
    }
}

/// Size of the slot an entry of `key_len` + `value_len` occupies when appended.
pub fn slot_size(key_len: usize, value_len: usize) -> u64 {
    slot_for(ENTRY_HEADER_SIZE + key_len as u64 + value_len as u64)
}

/// Size of the slot an entry of `entry_len` bytes (header + key + value) occupies.
pub fn slot_for(entry_len: u64) -> u64 {
    entry_len.div_ceil(ENTRY_ALIGN) * ENTRY_ALIGN
}

/// Encodes an entry as the client writes it (`version_num` = 0) into `out`, which must
/// be at least `ENTRY_HEADER_SIZE + key.len() + value.len()` bytes. Returns its length.
pub fn encode_entry(out: &mut [u8], key: &[u8], value: &[u8], tombstone: bool, next_offset: u64) -> Result<usize> {
    let len = ENTRY_HEADER_SIZE as usize + key.len() + value.len();
    if out.len() < len {
        return Err(Error::invalid(format!("entry buffer of {} bytes is too small for {len}", out.len())));
    }
    if key.is_empty() || key.len() > MAX_KEY_LEN as usize {
        return Err(Error::TooLarge { what: "key", len: key.len() as u64, limit: MAX_KEY_LEN as u64 });
    }
    let value_len = u32::try_from(value.len()).map_err(|_| Error::TooLarge {
        what: "value",
        len: value.len() as u64,
        limit: u32::MAX as u64,
    })?;
    out[4..6].copy_from_slice(&ENTRY_MAGIC.to_le_bytes());
    out[6..8].copy_from_slice(&(if tombstone { FLAG_TOMBSTONE } else { 0 }).to_le_bytes());
    out[8..16].fill(0);
    out[16..20].copy_from_slice(&(key.len() as u32).to_le_bytes());
    out[20..24].copy_from_slice(&value_len.to_le_bytes());
    out[24..32].copy_from_slice(&next_offset.to_le_bytes());
    out[32..32 + key.len()].copy_from_slice(key);
    out[32 + key.len()..len].copy_from_slice(value);
    let c = entry_checksum(&out[..len]);
    out[0..4].copy_from_slice(&c.to_le_bytes());
    Ok(len)
}

/// The checksum of an encoded entry (`b` = header + key + value).
pub fn entry_checksum(b: &[u8]) -> u32 {
    let c = crc32c::crc32c(&b[4..8]);
    crc32c::crc32c_append(c, &b[16..])
}

/// Why an entry was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryFault {
    /// The header does not fit in the segment.
    HeaderOutOfBounds,
    /// No entry magic (never written, or torn).
    BadMagic,
    /// `next_offset` is not after the entry, not aligned, or past the segment.
    BadNextOffset,
    /// Key length 0 or over the limit, or key + value do not fit the slot.
    BadLength,
    /// Stored and computed checksums differ (torn or corrupt).
    BadChecksum,
    /// `version_num` was never assigned.
    NoVersion,
}

impl std::fmt::Display for EntryFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EntryFault::HeaderOutOfBounds => "header out of bounds",
            EntryFault::BadMagic => "bad magic",
            EntryFault::BadNextOffset => "bad next_offset",
            EntryFault::BadLength => "bad length",
            EntryFault::BadChecksum => "bad checksum",
            EntryFault::NoVersion => "no version",
        })
    }
}

/// Checks that `next_offset` of the slot at `offset` is usable to continue a walk in a
/// segment of `segment_size` bytes.
pub fn next_offset_ok(offset: u64, next_offset: u64, segment_size: u64) -> bool {
    next_offset > offset
        && next_offset - offset >= ENTRY_HEADER_SIZE
        && next_offset % ENTRY_ALIGN == 0
        && next_offset <= segment_size
}

/// Validates the slot at segment offset `offset` whose bytes start at `slot[0]`
/// (`slot` runs to the end of the segment): a durable, versioned entry. On success
/// returns the header.
pub fn check_entry(slot: &[u8], offset: u64, segment_size: u64) -> std::result::Result<EntryHeader, EntryFault> {
    let h = check_entry_body(slot, offset, segment_size)?;
    if h.version == 0 {
        return Err(EntryFault::NoVersion);
    }
    Ok(h)
}

/// Like [`check_entry`] but accepts `version_num` = 0: what the server checks of an entry
/// a client has just written, before it assigns the version.
pub fn check_entry_body(slot: &[u8], offset: u64, segment_size: u64) -> std::result::Result<EntryHeader, EntryFault> {
    if slot.len() < ENTRY_HEADER_SIZE as usize {
        return Err(EntryFault::HeaderOutOfBounds);
    }
    let h = EntryHeader::decode(slot).map_err(|_| EntryFault::BadMagic)?;
    if !next_offset_ok(offset, h.next_offset, segment_size) {
        return Err(EntryFault::BadNextOffset);
    }
    let cap = h.next_offset - offset;
    if h.key_len == 0 || h.key_len > MAX_KEY_LEN || h.entry_len() > cap || h.entry_len() > slot.len() as u64 {
        return Err(EntryFault::BadLength);
    }
    if entry_checksum(&slot[..h.entry_len() as usize]) != h.checksum {
        return Err(EntryFault::BadChecksum);
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pool_header_round_trip_and_rejections() {
        let h = PoolHeader::new(1 << 30, 64 << 20, [7; 16], 1234).unwrap();
        assert_eq!(h.segment_count, ((1u64 << 30) - 4096) / (64 << 20));
        let b = h.encode();
        assert_eq!(PoolHeader::decode(&b, 1 << 30).unwrap(), h);
        let mut bad = b;
        bad[0] = b'X';
        assert!(PoolHeader::decode(&bad, 1 << 30).unwrap_err().to_string().contains("not a BOOM-KV pool"));
        let mut bad = b;
        bad[40] ^= 1;
        assert!(PoolHeader::decode(&bad, 1 << 30).unwrap_err().to_string().contains("checksum"));
        let mut bad = b;
        bad[8] = 9;
        assert!(PoolHeader::decode(&bad, 1 << 30).unwrap_err().to_string().contains("version"));
        assert!(PoolHeader::decode(&b, 1 << 20).unwrap_err().to_string().contains("truncated"));
        assert!(PoolHeader::decode(&b[..10], 1 << 30).is_err());
        assert!(PoolHeader::new(1 << 20, 64 << 20, [0; 16], 0).is_err());
        assert!(PoolHeader::new(1 << 30, 1000, [0; 16], 0).is_err());
    }

    #[test]
    fn segment_header_round_trip() {
        let s = SegmentHeader { segment_id: 3, owner: 9, prev: NO_SEGMENT, log_seq: 0, generation: 2 };
        let b = s.encode();
        assert_eq!(SegmentHeader::decode(&b).unwrap(), s);
        let mut bad = b;
        bad[30] ^= 0x10;
        assert!(SegmentHeader::decode(&bad).is_err());
        assert!(SegmentHeader::decode(&[0u8; 64]).is_err());
    }

    #[test]
    fn entry_checks() {
        let mut buf = vec![0u8; 256];
        let off = SEGMENT_HEADER_SIZE;
        let n = encode_entry(&mut buf, b"key", b"value", false, off + slot_size(3, 5)).unwrap();
        assert_eq!(n, 40);
        assert_eq!(check_entry(&buf, off, 4096), Err(EntryFault::NoVersion));
        buf[8..16].copy_from_slice(&5u64.to_le_bytes());
        let h = check_entry(&buf, off, 4096).unwrap();
        assert_eq!((h.key_len, h.value_len, h.version, h.is_tombstone()), (3, 5, 5, false));
        // version is outside the checksum: the server may set it after the client wrote
        buf[8..16].copy_from_slice(&6u64.to_le_bytes());
        assert!(check_entry(&buf, off, 4096).is_ok());
        buf[35] ^= 1;
        assert_eq!(check_entry(&buf, off, 4096), Err(EntryFault::BadChecksum));
        buf[35] ^= 1;
        assert_eq!(check_entry(&buf, off, off + 8), Err(EntryFault::BadNextOffset));
        buf[4] = 0;
        assert_eq!(check_entry(&buf, off, 4096), Err(EntryFault::BadMagic));
        assert!(encode_entry(&mut buf, b"", b"v", false, 0).is_err());
        assert!(encode_entry(&mut buf, &[1u8; 2000], b"v", false, 0).is_err());
    }

    proptest! {
        #[test]
        fn entry_round_trip(key in proptest::collection::vec(any::<u8>(), 1..64),
                            value in proptest::collection::vec(any::<u8>(), 0..300),
                            tomb in any::<bool>(), version in 1u64..u64::MAX, slack in 0u64..4) {
            let off = 4096u64;
            let next = off + slot_size(key.len(), value.len()) + slack * 8;
            let mut buf = vec![0u8; (next - off) as usize];
            let n = encode_entry(&mut buf, &key, &value, tomb, next).unwrap();
            buf[8..16].copy_from_slice(&version.to_le_bytes());
            let h = check_entry(&buf, off, 1 << 20).unwrap();
            prop_assert_eq!(h.entry_len() as usize, n);
            prop_assert_eq!(h.version, version);
            prop_assert_eq!(h.is_tombstone(), tomb);
            prop_assert_eq!(&buf[32..32 + key.len()], &key[..]);
            prop_assert_eq!(&buf[32 + key.len()..n], &value[..]);
        }

        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), off in 0u64..10_000) {
            let _ = PoolHeader::decode(&bytes, 1 << 30);
            let _ = SegmentHeader::decode(&bytes);
            let _ = check_entry(&bytes, off, 1 << 16);
        }
    }
}
