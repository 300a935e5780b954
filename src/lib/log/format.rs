//! THE ON-MEDIA FORMAT. Every byte BOOM-KV keeps in persistent memory is defined here,
//! but for pDPM-Direct's cell table and its descriptor (`log/cells.rs`) and Clover's
//! arena and its descriptor (`log/clover.rs`), runs of segments without segment
//! headers; everything that reads a pool (the server, `recover`, `inspect-log`, the
//! crash checker) decodes it through these modules: the decoders and encoders below,
//! or, for a single word, its named offset (`SEG_*_OFF`, `ENTRY_*_OFF`,
//! [`POOL_HWM_OFFS`]) and length. It imports `error`, and `pmem` for one copy.
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
//! | 8 | 4 | format_version | [`FORMAT_VERSION`] (2 and 3 are read too) |
//! | 12 | 4 | header_size | 4096; segments start here |
//! | 16 | 16 | uuid | random, identifies the pool |
//! | 32 | 8 | pool_size | bytes of the pool file |
//! | 40 | 8 | segment_size | bytes per segment, a multiple of 4096 |
//! | 48 | 8 | segment_count | segments in the pool |
//! | 56 | 8 | created | creation time, seconds since the Unix epoch |
//! | 64 | 16 | seal_key | random SipHash key of the entry seals and `count` checks (never sent to clients) |
//! | 80 | 44 | reserved | zero |
//! | 124 | 4 | checksum | CRC-32C of bytes 0..124 |
//! | 128 | 8 | hwm_a | version high-water mark, an [`encode_hwm`] word (own cache line) |
//! | 192 | 8 | hwm_b | second copy of the high-water mark (own cache line) |
//!
//! The header lies outside every segment, so no client region covers it: clients never
//! see `seal_key` and cannot move the high-water mark.
//!
//! ### Version high-water mark
//!
//! Every version the server assigns is below the durable high-water mark (HWM). The
//! server leases versions in blocks of [`VERSION_LEASE`]: when the counter reaches the
//! HWM it persists `hwm_a`, then `hwm_b`, with the HWM raised by a block, before the
//! version is used, so assigning a version costs no persist except once per block.
//! Each copy is one aligned 8-byte word: the mark in the low 56 bits and a CRC-8 of
//! them in the high byte, so a flipped bit is detected and the other copy used (both
//! valid: the larger, since a crash can fall between the two stores). Recovery rejects
//! every entry whose version is at or above the HWM and restarts the counter at the
//! HWM, never below. The counter stops at [`MAX_VERSION`] with
//! [`crate::error::Error::VersionsExhausted`], never wrapping.
//!
//! ## Segment header (at the start of every segment, 128 bytes)
//!
//! The first cache line is written once when the segment is allocated and is covered by
//! its checksum; the second holds the words that change, each an aligned 8-byte store.
//!
//! | offset | size | field | meaning |
//! |---|---|---|---|
//! | 0 | 8 | magic | `BOOMSEG1` |
//! | 8 | 4 | format_version | [`SEGMENT_VERSION`] |
//! | 12 | 4 | checksum | CRC-32C of bytes 0..12 and 16..56 |
//! | 16 | 8 | segment_id | index of this segment in the pool |
//! | 24 | 8 | owner | client id owning this segment's log ([`CLEANER_OWNER`] for the cleaner, [`TOMBSTONE_OWNER`] for the server's tombstone log) |
//! | 32 | 8 | prev | previous segment of the owner's log, or [`NO_SEGMENT`] |
//! | 40 | 8 | log_seq | position in the owner's log, from 0 |
//! | 48 | 8 | generation | how many times this segment has been allocated |
//! | 56 | 8 | seal | SipHash-2-4 under `seal_key` of bytes 0..56: the server wrote this line |
//! | 64 | 8 | count | a checked count word (below): appended entries that are durable; past it recovery reads on only while entries verify in full |
//! | 72 | 8 | state | [`SegmentState`], a checked state word (below; in pools before version 4: 0 free, 1 active, 2 sealed) |
//! | 80 | 8 | next | next segment of the owner's log, or [`NO_SEGMENT`] |
//! | 88 | 40 | reserved | zero |
//!
//! A segment is in use only if its magic, version, checksum and seal are valid and
//! `state` is active or sealed: a client can rewrite its segment's first line (it is in
//! its region), but not into another owner, log position or generation. Allocation persists `count = 0` and `state = free`, then the first
//! line, then `state = active`, so a crash at any point leaves either a free segment or an
//! empty valid one.
//!
//! ### `count`
//!
//! The low 32 bits are the number of counted slots, the high 32 bits a check: the first
//! 32 bits of SipHash-2-4 under `seal_key` over (segment id, generation, count). A
//! flipped bit fails the check (recovery then tries the 64 one-bit repairs, and if none
//! verifies walks the slots by their links, believing only sealed entries); a client
//! cannot make a count the server never stored. Since every entry carries its own seal,
//! the count decides only how far recovery reads a segment, never what it believes.
//!
//! ### `state`
//!
//! The low 32 bits are the state (0 free, 1 active, 2 sealed), the high 32 bits a
//! check: the first 32 bits of SipHash-2-4 under `seal_key` over (segment id, state).
//! A flipped bit can no longer turn a sealed segment into a free one, which recovery
//! would have put on the free list with its entries unread: any two of a segment's
//! three words differ in many bits, so one flipped bit is repaired, and a word no
//! repair verifies keeps the segment in use and is reported. The word 0 is the free
//! state of a segment never allocated (a new pool is zero). Not bound to the
//! generation: allocation writes the free word before the header of the new
//! generation, and a crash between the two must leave a free segment.
//!
//! ## Entry (at 8-byte aligned offsets from 128 within a segment)
//!
//! | offset | size | field | meaning |
//! |---|---|---|---|
//! | 0 | 4 | checksum | CRC-32C of bytes 4..8, 24..40, key and value (not `version_num`, not `seal`) |
//! | 4 | 2 | magic | `0xB0E7` |
//! | 6 | 2 | flags | bit 0: tombstone (a DELETE) |
//! | 8 | 8 | version_num | assigned by the server; 0 = not assigned (never valid) |
//! | 16 | 8 | seal | stored by the server: SipHash-2-4 under `seal_key` of the entry's place and content |
//! | 24 | 4 | key_len | bytes of key, 1..=[`MAX_KEY_LEN`] |
//! | 28 | 4 | value_len | bytes of value |
//! | 32 | 8 | next_offset | segment offset of the next entry's slot |
//! | 40 | key_len | key | |
//! | 40+key_len | value_len | value | |
//!
//! The client writes everything but `version_num` and `seal` (zero) and computes the
//! checksum; the server then stores `version_num` and `seal`. `next_offset` is set when
//! the slot is appended (offset + slot size, 8-byte aligned) and every later in-place
//! rewrite of the slot writes the same value, so the chain of slots stays walkable even
//! across a torn rewrite. A slot's capacity is `next_offset - offset`; an in-place
//! entry must fit it.
//!
//! ### The seal: what the server committed
//!
//! Every byte of a client's segments is the client's to write, before and after the
//! acknowledgement, so recovery believes an entry only if its seal verifies:
//! SipHash-2-4 (keyed by `seal_key`) over the segment id, the segment's generation,
//! the slot offset, `version_num`, bytes 0..8 and 24..40 of the entry (checksum, magic,
//! flags, lengths, `next_offset`) and the key. The key is covered directly, the value
//! through the CRC (a client can find another value with the same CRC, but only for its
//! own entry, its own key and the version its own PUT was given: as if it had PUT that
//! value). A forged entry, a raised version, a copied entry (the place is sealed) or a
//! flipped bit in `version_num` or `seal` fails the check. A one-bit flip in either
//! word is repaired by trying the 128 single-bit variants (bounded per segment, so a
//! segment of forgeries cannot make recovery slow).
//!
//! Sizing: the seal is 64 bits. A forger learns nothing until a restart and must guess
//! each seal blindly; every slot of every segment it holds is one guess, each worth
//! at most 129 candidates because of the repair. A 1 TiB pool of minimal 48-byte slots
//! is 2^34.4 guesses, 2^41.4 candidates per restart: a chance of 2^-22.6 per restart
//! of landing one forgery. A 32-bit code in the version word would fall to one pool
//! fill (2^32 guesses fit in 192 GiB), which is why the seal is a word of its own.

use crate::error::{Error, Result};

/// Format version a new pool's header carries. 4: segment `state` words are checked
/// words, which a reader of version 3 would take for damage. 3: the pool may hold a cell table or a
/// Clover arena (descriptor lines at pool offsets 256 and up, runs of segments without
/// segment headers), which a reader of version 2 would take for free segments and
/// overwrite; so it must refuse the pool instead. Version 2 pools (entry seals, checked
/// `count`, the version high-water mark) are read as they are, but a cell table or an
/// arena is not created in them ([`PoolHeader::holds_runs`]); versions 2 and 3 keep
/// plain `state` words ([`PoolHeader::checks_state`]); version 1 is refused.
pub const FORMAT_VERSION: u32 = 4;

/// Oldest pool header version this build reads.
pub const OLDEST_FORMAT_VERSION: u32 = 2;

/// First pool header version whose pools may hold a cell table or a Clover arena.
pub const RUNS_FORMAT_VERSION: u32 = 3;

/// First pool header version whose segments' `state` words are checked; older pools
/// keep their plain words, which their readers understand.
pub const CHECKED_STATE_FORMAT_VERSION: u32 = 4;

/// Format version in every segment header: the segment header has not changed since
/// pool version 2, and an older reader must accept the segments of a version 2 pool
/// that a newer build wrote to.
pub const SEGMENT_VERSION: u32 = 2;

/// Pool header magic.
pub const POOL_MAGIC: [u8; 8] = *b"BOOMKVPL";
/// Bytes reserved for the pool header; segment 0 starts here.
pub const POOL_HEADER_SIZE: u64 = 4096;
/// Offset of the pool header checksum.
pub const POOL_CHECKSUM_OFF: usize = 124;
/// Bytes of the encoded (checksummed) pool header.
pub const POOL_HEADER_LEN: usize = 128;
/// Offsets of the two copies of the version high-water mark.
pub const POOL_HWM_OFFS: [u64; 2] = [128, 192];
/// Versions are leased in blocks of this many: one persist of the high-water mark per block.
pub const VERSION_LEASE: u64 = 1 << 16;
/// The first version that can never be assigned (the high-water mark has 56 bits).
pub const MAX_VERSION: u64 = (1 << 56) - 1;

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
/// Bytes of the checksummed part of the segment header ([`SegmentHeader::encode`]).
pub const SEG_FIXED_LEN: usize = 64;
/// Bytes of one of the segment's validity words (`count`, `state`, `next`): each is
/// one aligned 8-byte store, written back on its own.
pub const SEG_WORD_LEN: usize = 8;
/// Bytes of the segment's validity words, `count`, `state` and `next`, from
/// [`SEG_COUNT_OFF`] on (written back together when a segment is reset).
pub const SEG_WORDS_LEN: usize = (SEG_NEXT_OFF + SEG_WORD_LEN as u64 - SEG_COUNT_OFF) as usize;
/// Bytes of one copy of the version high-water mark.
pub const POOL_HWM_LEN: usize = 8;
/// "No segment" in `prev`/`next`.
pub const NO_SEGMENT: u64 = u64::MAX;
/// Owner id used for segments written by the cleaner.
pub const CLEANER_OWNER: u64 = u64::MAX - 1;
/// Owner id of the server's tombstone log (DELETEs with no room in their client's segment).
pub const TOMBSTONE_OWNER: u64 = u64::MAX - 2;
/// Owner recorded (in the allocator only: the table's segments have no headers) for
/// the segments of the cell table ([`super::cells`]).
pub const CELLS_OWNER: u64 = u64::MAX - 3;
/// The log of `owner`, for people: "client 7's log", "the cleaner's log", "the
/// tombstone log", "the cell table".
pub fn log_name(owner: u64) -> String {
    match owner {
        CLEANER_OWNER => "the cleaner's log".to_string(),
        TOMBSTONE_OWNER => "the tombstone log".to_string(),
        CELLS_OWNER => "the cell table".to_string(),
        id => format!("client {id}'s log"),
    }
}

/// Smallest segment size accepted.
pub const MIN_SEGMENT_SIZE: u64 = 64 << 10;
/// Default segment size (the paper's 64 MiB).
pub const DEFAULT_SEGMENT_SIZE: u64 = 64 << 20;

/// The segment size for a new pool of `pool_size` bytes when none is given: the
/// paper's 64 MiB, smaller for pools under 4 GiB so that a pool holds about 64 segments
/// (a 256 MiB pool of 64 MiB segments would hold 3, and 3 clients would fill it); a
/// multiple of 64 KiB, at least [`MIN_SEGMENT_SIZE`].
pub fn default_segment_size(pool_size: u64) -> u64 {
    (pool_size / 64 / MIN_SEGMENT_SIZE * MIN_SEGMENT_SIZE).clamp(MIN_SEGMENT_SIZE, DEFAULT_SEGMENT_SIZE)
}

/// Entry magic.
pub const ENTRY_MAGIC: u16 = 0xB0E7;
/// Bytes of an entry header.
pub const ENTRY_HEADER_SIZE: u64 = 40;
/// Entry slots start at multiples of this.
pub const ENTRY_ALIGN: u64 = 8;
/// Offset of the entry checksum (the first field, 4 bytes).
pub const ENTRY_CHECKSUM_OFF: u64 = 0;
/// Offset of `version_num` within an entry.
pub const ENTRY_VERSION_OFF: u64 = 8;
/// Offset of `seal` within an entry.
pub const ENTRY_SEAL_OFF: u64 = 16;
/// Bytes of `version_num` and `seal` together, from [`ENTRY_VERSION_OFF`] (the words
/// the server stores; an in-place rewrite writes them back on their own).
pub const ENTRY_VERSION_SEAL_LEN: usize = 16;
/// Offset of `key_len` within an entry.
pub const ENTRY_KEY_LEN_OFF: u64 = 24;
/// Offset of `value_len` within an entry.
pub const ENTRY_VALUE_LEN_OFF: u64 = 28;
/// Offset of `next_offset` within an entry.
pub const ENTRY_NEXT_OFF: u64 = 32;
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
    /// Key of the entry seals and `count` checks (never shown, never sent).
    #[serde(skip)]
    pub seal_key: [u8; 16],
    /// The header's format version: [`FORMAT_VERSION`] for a pool this build made,
    /// down to [`OLDEST_FORMAT_VERSION`] for an older one.
    pub format_version: u32,
}

/// Whether a pool can have segments of `segment_size` bytes: a multiple of 4096, at
/// least [`MIN_SEGMENT_SIZE`], at most 4 GiB.
pub fn check_segment_size(segment_size: u64) -> Result<()> {
    if segment_size < MIN_SEGMENT_SIZE || segment_size % 4096 != 0 {
        return Err(Error::invalid(format!(
            "segment size {segment_size} must be a multiple of 4096 and at least {MIN_SEGMENT_SIZE}"
        )));
    }
    if segment_size > (1u64 << 32) {
        return Err(Error::invalid(format!("segment size {segment_size} is over the 4 GiB limit")));
    }
    Ok(())
}

impl PoolHeader {
    /// Lays out a pool of `pool_size` bytes with segments of `segment_size`.
    pub fn new(pool_size: u64, segment_size: u64, uuid: [u8; 16], created: u64) -> Result<PoolHeader> {
        check_segment_size(segment_size)?;
        let segment_count = pool_size.saturating_sub(POOL_HEADER_SIZE) / segment_size;
        if segment_count == 0 {
            return Err(Error::invalid(format!(
                "a pool of {pool_size} bytes cannot hold one {segment_size}-byte segment; use a larger --pool-size or a smaller --segment-size"
            )));
        }
        Ok(PoolHeader {
            uuid,
            pool_size,
            segment_size,
            segment_count,
            created,
            seal_key: [0; 16],
            format_version: FORMAT_VERSION,
        })
    }

    /// Whether the pool's version lets it hold runs of segments without segment
    /// headers (a cell table, a Clover arena): a version 2 reader would take them for
    /// free segments and write over them, so they go only into version 3 pools.
    pub fn holds_runs(&self) -> bool {
        self.format_version >= RUNS_FORMAT_VERSION
    }

    /// Whether the pool's segment `state` words are checked words.
    pub fn checks_state(&self) -> bool {
        self.format_version >= CHECKED_STATE_FORMAT_VERSION
    }

    /// The `state` word of segment `id` in this pool, under `sealer` (this pool's).
    pub fn state_word(&self, sealer: &Sealer, id: u64, state: SegmentState) -> u64 {
        if self.checks_state() {
            sealer.state_word(id, state)
        } else {
            state.to_word()
        }
    }

    /// Decodes the `state` word of segment `id` in this pool, under `sealer` (this pool's).
    pub fn check_state(&self, sealer: &Sealer, id: u64, word: u64) -> StateCheck {
        if self.checks_state() {
            sealer.check_state(id, word)
        } else {
            SegmentState::from_word(word).map_or(StateCheck::Damaged, StateCheck::Ok)
        }
    }

    /// The keyed checks of this pool's entries and counts.
    pub fn sealer(&self) -> Sealer {
        Sealer::new(&self.seal_key)
    }

    /// Encodes the header (with checksum) into [`POOL_HEADER_LEN`] bytes.
    pub fn encode(&self) -> [u8; POOL_HEADER_LEN] {
        let mut b = [0u8; POOL_HEADER_LEN];
        b[0..8].copy_from_slice(&POOL_MAGIC);
        b[8..12].copy_from_slice(&self.format_version.to_le_bytes());
        b[12..16].copy_from_slice(&(POOL_HEADER_SIZE as u32).to_le_bytes());
        b[16..32].copy_from_slice(&self.uuid);
        b[32..40].copy_from_slice(&self.pool_size.to_le_bytes());
        b[40..48].copy_from_slice(&self.segment_size.to_le_bytes());
        b[48..56].copy_from_slice(&self.segment_count.to_le_bytes());
        b[56..64].copy_from_slice(&self.created.to_le_bytes());
        b[64..80].copy_from_slice(&self.seal_key);
        let c = crc32c(&b[..POOL_CHECKSUM_OFF]);
        b[POOL_CHECKSUM_OFF..POOL_HEADER_LEN].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Decodes and validates a pool header; `file_len` is the size of the pool file.
    pub fn decode(b: &[u8], file_len: u64) -> Result<PoolHeader> {
        let bad = |p: String| Error::corrupt("pool header", p);
        if b.len() < POOL_HEADER_LEN {
            return Err(bad(format!("file is {} bytes, too short for a pool header", b.len())));
        }
        if b[0..8] != POOL_MAGIC {
            return Err(bad("wrong magic: this is not a BOOM-KV pool".into()));
        }
        let ver = u32_at(b, 8);
        if ver == 1 {
            return Err(bad(format!(
                "format version 1 (written before entry seals and the version high-water mark); this boomctl reads versions {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION} and does not migrate: load the data into a new pool"
            )));
        }
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&ver) {
            return Err(bad(format!(
                "format version {ver}, this boomctl reads versions {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION} (a newer boomctl made the pool?)"
            )));
        }
        let stored = u32_at(b, POOL_CHECKSUM_OFF);
        let c = crc32c(&b[..POOL_CHECKSUM_OFF]);
        if stored != c {
            return Err(bad(format!("checksum mismatch (stored {stored:#010x}, computed {c:#010x})")));
        }
        if u32_at(b, 12) as u64 != POOL_HEADER_SIZE {
            return Err(bad(format!("header size {} is not {POOL_HEADER_SIZE}", u32_at(b, 12))));
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[16..32]);
        let mut seal_key = [0u8; 16];
        seal_key.copy_from_slice(&b[64..80]);
        let h = PoolHeader {
            uuid,
            pool_size: u64_at(b, 32),
            segment_size: u64_at(b, 40),
            segment_count: u64_at(b, 48),
            created: u64_at(b, 56),
            seal_key,
            format_version: ver,
        };
        let check = PoolHeader::new(h.pool_size, h.segment_size, uuid, h.created).map_err(|e| bad(e.to_string()))?;
        if seal_key == [0; 16] {
            return Err(bad("no seal key".into()));
        }
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

/// CRC-8 (polynomial 0x07) of `b`: every single-bit error changes it.
fn crc8(b: &[u8]) -> u8 {
    let mut c = 0u8;
    for &x in b {
        c ^= x;
        for _ in 0..8 {
            c = if c & 0x80 != 0 { (c << 1) ^ 0x07 } else { c << 1 };
        }
    }
    c
}

/// Encodes a version high-water mark as its 8-byte word (mark and CRC-8).
pub fn encode_hwm(hwm: u64) -> u64 {
    let v = hwm.min(MAX_VERSION);
    v | (crc8(&v.to_le_bytes()[..7]) as u64) << 56
}

/// Decodes one copy of the high-water mark (`None`: it fails its check).
pub fn decode_hwm(word: u64) -> Option<u64> {
    let v = word & MAX_VERSION;
    (crc8(&v.to_le_bytes()[..7]) as u64 == word >> 56).then_some(v)
}

/// The high-water mark from its two copies: the larger valid one (a crash may fall
/// between the two stores of a lease), or `Err` with both words if neither is valid.
pub fn read_hwm(a: u64, b: u64) -> std::result::Result<u64, String> {
    match (decode_hwm(a), decode_hwm(b)) {
        (Some(x), Some(y)) => Ok(x.max(y)),
        (Some(x), None) | (None, Some(x)) => Ok(x),
        (None, None) => {
            Err(format!("both copies of the version high-water mark fail their check ({a:#018x}, {b:#018x})"))
        }
    }
}

/// Where a slot is: what its seal binds besides its content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotPlace {
    /// Segment id.
    pub segment: u64,
    /// The segment's allocation generation.
    pub generation: u64,
    /// Segment offset of the slot.
    pub offset: u64,
}

/// The keyed checks of one pool: entry seals and `count` checks (SipHash-2-4 under the
/// pool's `seal_key`).
#[derive(Clone, Copy)]
pub struct Sealer {
    k0: u64,
    k1: u64,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(..)")
    }
}

/// What a `count` word says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountCheck {
    /// The check verifies.
    Ok(u64),
    /// One flipped bit, repaired.
    Repaired(u64),
    /// The check fails and no one-bit repair verifies.
    Damaged,
}

impl Sealer {
    /// The checks under `key`.
    pub fn new(key: &[u8; 16]) -> Sealer {
        let k0 = u64::from_le_bytes([key[0], key[1], key[2], key[3], key[4], key[5], key[6], key[7]]);
        let k1 = u64::from_le_bytes([key[8], key[9], key[10], key[11], key[12], key[13], key[14], key[15]]);
        Sealer { k0, k1 }
    }

    fn hasher(&self, domain: u64, place: SlotPlace) -> siphasher::sip::SipHasher24 {
        use std::hash::Hasher;
        let mut h = siphasher::sip::SipHasher24::new_with_keys(self.k0, self.k1);
        let mut b = [0u8; 32];
        b[0..8].copy_from_slice(&domain.to_le_bytes());
        b[8..16].copy_from_slice(&place.segment.to_le_bytes());
        b[16..24].copy_from_slice(&place.generation.to_le_bytes());
        b[24..32].copy_from_slice(&place.offset.to_le_bytes());
        h.write(&b);
        h
    }

    /// The seal of the entry `h` with `key` at `place` under `version`.
    pub fn entry_seal(&self, place: SlotPlace, version: u64, h: &EntryHeader, key: &[u8]) -> u64 {
        use std::hash::Hasher;
        let mut s = self.hasher(1, place);
        let mut b = [0u8; 32];
        b[0..8].copy_from_slice(&version.to_le_bytes());
        b[8..12].copy_from_slice(&h.checksum.to_le_bytes());
        b[12..14].copy_from_slice(&ENTRY_MAGIC.to_le_bytes());
        b[14..16].copy_from_slice(&h.flags.to_le_bytes());
        b[16..20].copy_from_slice(&h.key_len.to_le_bytes());
        b[20..24].copy_from_slice(&h.value_len.to_le_bytes());
        b[24..32].copy_from_slice(&h.next_offset.to_le_bytes());
        s.write(&b);
        s.write(key);
        s.finish()
    }

    /// The seal of a segment header's first line (`b` = its bytes 0..56).
    pub fn line_seal(&self, b: &[u8]) -> u64 {
        use std::hash::Hasher;
        let mut s = self.hasher(3, SlotPlace { segment: 0, generation: 0, offset: 0 });
        s.write(b);
        s.finish()
    }

    /// The `count` word of segment `segment` (generation `generation`) counting `count` slots.
    pub fn count_word(&self, segment: u64, generation: u64, count: u64) -> u64 {
        use std::hash::Hasher;
        let c = count & 0xffff_ffff;
        let mut s = self.hasher(2, SlotPlace { segment, generation, offset: 0 });
        s.write(&c.to_le_bytes());
        c | (s.finish() & 0xffff_ffff_0000_0000)
    }

    /// The checked `state` word of segment `segment` in `state`.
    pub fn state_word(&self, segment: u64, state: SegmentState) -> u64 {
        use std::hash::Hasher;
        let code = state.to_word();
        let mut s = self.hasher(4, SlotPlace { segment, generation: 0, offset: 0 });
        s.write(&code.to_le_bytes());
        code | (s.finish() & 0xffff_ffff_0000_0000)
    }

    /// Decodes a checked `state` word, repairing one flipped bit; 0 is free.
    pub fn check_state(&self, segment: u64, word: u64) -> StateCheck {
        if word == 0 {
            return StateCheck::Ok(SegmentState::Free);
        }
        if word.count_ones() == 1 {
            // A flipped bit in a never-allocated segment's zero word.
            return StateCheck::Repaired(SegmentState::Free);
        }
        let words = [SegmentState::Free, SegmentState::Active, SegmentState::Sealed]
            .map(|st| (st, self.state_word(segment, st)));
        if let Some(&(st, _)) = words.iter().find(|(_, w)| *w == word) {
            return StateCheck::Ok(st);
        }
        match words.iter().find(|(_, w)| (w ^ word).count_ones() == 1) {
            Some(&(st, _)) => StateCheck::Repaired(st),
            None => StateCheck::Damaged,
        }
    }

    /// Decodes a `count` word, repairing one flipped bit.
    pub fn check_count(&self, segment: u64, generation: u64, word: u64) -> CountCheck {
        if self.count_word(segment, generation, word) == word {
            return CountCheck::Ok(word & 0xffff_ffff);
        }
        for bit in 0..64 {
            let w = word ^ (1 << bit);
            if self.count_word(segment, generation, w) == w {
                return CountCheck::Repaired(w & 0xffff_ffff);
            }
        }
        CountCheck::Damaged
    }
}

/// A decoded `state` word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateCheck {
    /// The word verifies.
    Ok(SegmentState),
    /// One flipped bit was repaired.
    Repaired(SegmentState),
    /// No state's word is within one bit of it.
    Damaged,
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
    /// Its name for people (as serialized): free, active, sealed.
    pub fn name(self) -> &'static str {
        match self {
            SegmentState::Free => "free",
            SegmentState::Active => "active",
            SegmentState::Sealed => "sealed",
        }
    }

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
    /// Encodes the first line (64 bytes) with its checksum and seal.
    pub fn encode(&self, sealer: &Sealer) -> [u8; SEG_FIXED_LEN] {
        let mut b = [0u8; 64];
        b[0..8].copy_from_slice(&SEGMENT_MAGIC);
        b[8..12].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
        b[16..24].copy_from_slice(&self.segment_id.to_le_bytes());
        b[24..32].copy_from_slice(&self.owner.to_le_bytes());
        b[32..40].copy_from_slice(&self.prev.to_le_bytes());
        b[40..48].copy_from_slice(&self.log_seq.to_le_bytes());
        b[48..56].copy_from_slice(&self.generation.to_le_bytes());
        let c = seg_checksum(&b);
        b[12..16].copy_from_slice(&c.to_le_bytes());
        let s = sealer.line_seal(&b[..56]);
        b[56..64].copy_from_slice(&s.to_le_bytes());
        b
    }

    /// Decodes the first line; `Err` says why the segment is not a valid in-use header.
    pub fn decode(b: &[u8], sealer: &Sealer) -> Result<SegmentHeader> {
        let bad = |p: String| Error::corrupt("segment header", p);
        if b.len() < 64 {
            return Err(bad("short".into()));
        }
        if b[0..8] != SEGMENT_MAGIC {
            return Err(bad("no segment magic".into()));
        }
        let ver = u32_at(b, 8);
        if ver != SEGMENT_VERSION {
            return Err(bad(format!("format version {ver}")));
        }
        let stored = u32_at(b, 12);
        if stored != seg_checksum(b) {
            return Err(bad("checksum mismatch".into()));
        }
        if sealer.line_seal(&b[..56]) != u64_at(b, 56) {
            return Err(bad("seal mismatch: not a header the server wrote".into()));
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
    let c = crc32c(&b[0..12]);
    crc32c_append(c, &b[16..56])
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
    /// Seal stored by the server (0 = none).
    pub seal: u64,
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

    /// Decodes the header bytes. Only the magic is checked here; use
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
            seal: u64_at(b, 16),
            key_len: u32_at(b, 24),
            value_len: u32_at(b, 28),
            next_offset: u64_at(b, 32),
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

/// Encodes an entry as the client writes it (`version_num` = `seal` = 0) into `out`, which must
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
    out[8..24].fill(0);
    out[24..28].copy_from_slice(&(key.len() as u32).to_le_bytes());
    out[28..32].copy_from_slice(&value_len.to_le_bytes());
    out[32..40].copy_from_slice(&next_offset.to_le_bytes());
    let k = ENTRY_HEADER_SIZE as usize;
    out[k..k + key.len()].copy_from_slice(key);
    crate::pmem::copy_bytes(&mut out[k + key.len()..len], value);
    let c = entry_checksum(&out[..len]);
    out[0..4].copy_from_slice(&c.to_le_bytes());
    Ok(len)
}

/// The checksum of an encoded entry (`b` = header + key + value).
pub fn entry_checksum(b: &[u8]) -> u32 {
    entry_checksum_parts(b, &[])
}

/// The checksum of an entry held in two pieces: `head` (the header, at least
/// [`ENTRY_HEADER_SIZE`] bytes, and what follows of the key and value) and `rest` (the
/// bytes after it), so a reader can take the value straight into its own buffer.
pub fn entry_checksum_parts(head: &[u8], rest: &[u8]) -> u32 {
    // Everything after the checksum except version_num and seal (rewritten in place).
    let after = ENTRY_CHECKSUM_OFF as usize + 4;
    let c = crc32c(&head[after..ENTRY_VERSION_OFF as usize]);
    let c = crc32c_append(c, &head[ENTRY_KEY_LEN_OFF as usize..]);
    crc32c_append(c, rest)
}

/// The checksum of an entry fed in pieces, for bytes copied out a piece at a time:
/// [`EntryCrc::new`] with the header, then [`EntryCrc::add`] with the key and value
/// bytes in order. Equal to [`entry_checksum`] of the whole entry.
pub struct EntryCrc(crc_fast::Digest);

impl EntryCrc {
    /// Starts with the entry's header (the fields the checksum covers).
    pub fn new(header: &[u8; ENTRY_HEADER_SIZE as usize]) -> EntryCrc {
        let mut d = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
        d.update(&header[ENTRY_CHECKSUM_OFF as usize + 4..ENTRY_VERSION_OFF as usize]);
        d.update(&header[ENTRY_KEY_LEN_OFF as usize..]);
        EntryCrc(d)
    }

    /// The next bytes of the key and value.
    pub fn add(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The checksum of everything given.
    pub fn value(&self) -> u32 {
        self.0.finalize() as u32
    }
}

/// The checksum of an entry from its `head` (the header and the key, exactly) and the
/// CRC-32C of its value of `value_len` bytes, without the value: what RDMP-CC's server
/// seals in its allocation phase, where only the client holds the value. Equal to
/// [`entry_checksum`] of the whole entry.
pub fn entry_checksum_with_value_crc(head: &[u8], value_crc: u32, value_len: usize) -> u32 {
    crc32c_combine(entry_checksum_parts(head, &[]), value_crc, value_len)
}

/// CRC-32C's polynomial, bit-reflected.
const CRC32C_POLY: u32 = 0x82f6_3b78;

/// `a * b mod P` over GF(2), both bit-reflected (`1 << 31` is x^0).
const fn mul_mod_p(a: u32, mut b: u32) -> u32 {
    let mut m = 1u32 << 31;
    let mut p = 0u32;
    while m != 0 {
        if a & m != 0 {
            p ^= b;
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ CRC32C_POLY } else { b >> 1 };
    }
    p
}

/// `x^(2^k) mod P` for k = 0..32 (reflected), computed at compile time.
const X2N: [u32; 32] = {
    let mut t = [0u32; 32];
    let mut p = 1u32 << 30; // x^1
    let mut k = 0;
    while k < 32 {
        t[k] = p;
        p = mul_mod_p(p, p);
        k += 1;
    }
    t
};

/// The CRC-32C of `A ++ B` from `crc(A)`, `crc(B)` and `B`'s length: `crc(A)` shifted
/// over `len_b` zero bytes (a multiplication by `x^(8 len_b) mod P`, at most 64
/// multiplications), then xor'd with `crc(B)`. The crc32c crate's combine squared 32x32
/// matrices per bit of the length (microseconds per call); this runs on RDMP-CC's
/// allocation path, once per PUT.
fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: usize) -> u32 {
    let mut n = len_b as u64;
    let mut shift = 1u32 << 31; // x^0
    let mut k = 3; // one byte is x^(2^3)
    while n != 0 {
        if n & 1 != 0 {
            shift = mul_mod_p(X2N[k & 31], shift);
        }
        n >>= 1;
        k += 1;
    }
    mul_mod_p(shift, crc_a) ^ crc_b
}

/// The CRC-32C (Castagnoli) of `data`: the checksum of every checksummed structure of
/// the media and wire formats. Every module computes it through here.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(data)
}

/// The CRC-32C of `A ++ data`, from `crc`, the CRC-32C of `A`.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    // The digest's state is the CRC register before the final inversion.
    let mut d = crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    d.update(data);
    d.finalize() as u32
}

/// The CRC-32C of a value alone (what an RDMP-CC client sends in its allocation).
pub fn value_crc(value: &[u8]) -> u32 {
    crc32c(value)
}

/// Encodes the header and key of an entry whose value, of `value_len` bytes with
/// [`value_crc`] `value_crc`, is not at hand (`version_num` = `seal` = 0), the checksum
/// computed as [`encode_entry`] computes it over the whole entry; returns the bytes and
/// the decoded header. RDMP-CC's server seals an entry this way before its client
/// writes it.
pub fn encode_entry_head(
    key: &[u8],
    value_len: u32,
    value_crc: u32,
    tombstone: bool,
    next_offset: u64,
) -> Result<(Vec<u8>, EntryHeader)> {
    let mut head = vec![0u8; ENTRY_HEADER_SIZE as usize + key.len()];
    encode_entry(&mut head, key, b"", tombstone, next_offset)?;
    head[28..32].copy_from_slice(&value_len.to_le_bytes());
    let c = entry_checksum_with_value_crc(&head, value_crc, value_len as usize);
    head[0..4].copy_from_slice(&c.to_le_bytes());
    let h = EntryHeader::decode(&head)?;
    Ok((head, h))
}

/// Moves an encoded entry to a new slot: sets its `next_offset` (inside the checksum)
/// and recomputes the checksum; returns the new checksum. The version and seal are the
/// commit path's to write.
pub fn relink_entry(b: &mut [u8], next_offset: u64) -> Result<u32> {
    if b.len() < ENTRY_HEADER_SIZE as usize {
        return Err(Error::corrupt("entry", format!("{} bytes is shorter than an entry header", b.len())));
    }
    let next = ENTRY_NEXT_OFF as usize;
    b[next..next + 8].copy_from_slice(&next_offset.to_le_bytes());
    let c = entry_checksum(b);
    let at = ENTRY_CHECKSUM_OFF as usize;
    b[at..at + 4].copy_from_slice(&c.to_le_bytes());
    Ok(c)
}

/// [`relink_entry`] of an entry in two pieces: its header, in `head`, and its key and
/// value, `rest` (read only). Returns the new checksum, which `head` then holds.
pub fn relink_head(head: &mut [u8; ENTRY_HEADER_SIZE as usize], rest: &[u8], next_offset: u64) -> u32 {
    let next = ENTRY_NEXT_OFF as usize;
    head[next..next + 8].copy_from_slice(&next_offset.to_le_bytes());
    let mut crc = EntryCrc::new(head);
    crc.add(rest);
    let c = crc.value();
    let at = ENTRY_CHECKSUM_OFF as usize;
    head[at..at + 4].copy_from_slice(&c.to_le_bytes());
    c
}

/// Stores `version` and `seal` into the encoded entry `b` (as the server does, or the
/// cleaner for a copy); `b` must hold at least the entry header.
pub fn store_version_seal(b: &mut [u8], version: u64, seal: u64) {
    let v = ENTRY_VERSION_OFF as usize;
    b[v..v + 8].copy_from_slice(&version.to_le_bytes());
    let s = ENTRY_SEAL_OFF as usize;
    b[s..s + 8].copy_from_slice(&seal.to_le_bytes());
}

/// The checksum field of the entry bytes `b`, as stored (`None` if `b` is too short).
pub fn stored_checksum(b: &[u8]) -> Option<u32> {
    let at = ENTRY_CHECKSUM_OFF as usize;
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The `key_len` field of the entry bytes `b`, as stored, unchecked (`None` if `b` is
/// too short).
pub fn stored_key_len(b: &[u8]) -> Option<u32> {
    let at = ENTRY_KEY_LEN_OFF as usize;
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The `next_offset` field of the slot bytes `b`, as stored, whether or not the slot
/// holds an entry (`None` if `b` is too short).
pub fn stored_next_offset(b: &[u8]) -> Option<u64> {
    let at = ENTRY_NEXT_OFF as usize;
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The key bytes a slot's header claims, unchecked, for showing a slot that may be
/// rejected: `key_len` (capped at [`MAX_KEY_LEN`]) bytes after the header, or none if
/// the slot has no entry magic or is too short.
pub fn claimed_key(slot: &[u8]) -> &[u8] {
    let kl = EntryHeader::decode(slot).map(|h| h.key_len.min(MAX_KEY_LEN)).unwrap_or(0) as usize;
    let k0 = ENTRY_HEADER_SIZE as usize;
    slot.get(k0..k0 + kl).unwrap_or(&[])
}

/// The key of an entry whose header `h` was checked (`b` = header + key + value).
pub fn entry_key<'a>(b: &'a [u8], h: &EntryHeader) -> &'a [u8] {
    b.get(ENTRY_HEADER_SIZE as usize..ENTRY_HEADER_SIZE as usize + h.key_len as usize).unwrap_or(&[])
}

/// The value of an entry whose header `h` was checked (`b` = header + key + value).
pub fn entry_value<'a>(b: &'a [u8], h: &EntryHeader) -> &'a [u8] {
    b.get(ENTRY_HEADER_SIZE as usize + h.key_len as usize..h.entry_len() as usize).unwrap_or(&[])
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
    /// `version_num` is at or above the pool's high-water mark.
    AboveHighWater,
    /// The seal does not verify: not what the server committed (forged, moved or flipped).
    BadSeal,
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
            EntryFault::AboveHighWater => "version at or above the high-water mark",
            EntryFault::BadSeal => "bad seal",
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

/// What recovery believes of an entry: the pool's seals and high-water mark.
#[derive(Clone, Copy, Debug)]
pub struct Trust {
    /// The pool's keyed checks.
    pub sealer: Sealer,
    /// The version high-water mark: versions at or above it were never assigned.
    pub hwm: u64,
}

/// An entry that passed [`check_entry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    /// Its header (with the repaired version or seal, if one was repaired).
    pub header: EntryHeader,
    /// A flipped bit in `version_num` or `seal` was repaired.
    pub repaired: bool,
}

/// One-bit repairs tried per segment walk ([`check_entry`]'s `repairs` budget).
pub const REPAIRS_PER_SEGMENT: u32 = 256;

/// Validates the slot at `place` whose bytes start at `slot[0]` (`slot` runs at least
/// to the entry's end, at most to the segment's): a durable entry the server sealed, with a version below the
/// high-water mark. A seal that fails is tried with each single bit of `version_num`
/// and of `seal` flipped, while `repairs` lasts (decremented per damaged entry).
pub fn check_entry(
    slot: &[u8],
    place: SlotPlace,
    segment_size: u64,
    trust: &Trust,
    repairs: &mut u32,
) -> std::result::Result<Checked, EntryFault> {
    let mut h = check_entry_body(slot, place.offset, segment_size)?;
    let key = entry_key(slot, &h);
    let good = |v: u64, s: u64| v != 0 && v < trust.hwm && trust.sealer.entry_seal(place, v, &h, key) == s;
    if good(h.version, h.seal) {
        return Ok(Checked { header: h, repaired: false });
    }
    let never_sealed = h.version == 0 && h.seal == 0;
    if !never_sealed && *repairs > 0 {
        *repairs -= 1;
        for bit in 0..64 {
            let v = h.version ^ (1 << bit);
            if good(v, h.seal) {
                h.version = v;
                return Ok(Checked { header: h, repaired: true });
            }
        }
        for bit in 0..64 {
            let s = h.seal ^ (1 << bit);
            if good(h.version, s) {
                h.seal = s;
                return Ok(Checked { header: h, repaired: true });
            }
        }
    }
    Err(if h.version == 0 {
        EntryFault::NoVersion
    } else if h.version >= trust.hwm {
        EntryFault::AboveHighWater
    } else {
        EntryFault::BadSeal
    })
}

/// An entry whose checksum fails although its seal verifies (over the stored checksum
/// field, so the key, version and place are what the server committed): its value is
/// damaged. Recovery indexes it, so that no older value of the key takes its place, and
/// readers see the key as damaged (its checksum keeps failing) instead of a stale value.
pub fn check_damaged_value(slot: &[u8], place: SlotPlace, segment_size: u64, trust: &Trust) -> Option<EntryHeader> {
    if check_entry_body(slot, place.offset, segment_size) != Err(EntryFault::BadChecksum) {
        return None;
    }
    let h = EntryHeader::decode(slot).ok()?;
    let key = slot.get(ENTRY_HEADER_SIZE as usize..ENTRY_HEADER_SIZE as usize + h.key_len as usize)?;
    let ok = h.version != 0 && h.version < trust.hwm && trust.sealer.entry_seal(place, h.version, &h, key) == h.seal;
    ok.then_some(h)
}

/// Bounds, lengths and checksum of an entry, not its version or seal: what recovery
/// checks of a slot before its version and seal (`slot` holds the bytes from the
/// slot's start, at least to the entry's end, and nobody writes them meanwhile; an
/// entry a client may still write is checked with [`check_entry_copied`]).
pub fn check_entry_body(slot: &[u8], offset: u64, segment_size: u64) -> std::result::Result<EntryHeader, EntryFault> {
    if slot.len() < ENTRY_HEADER_SIZE as usize {
        return Err(EntryFault::HeaderOutOfBounds);
    }
    let h = EntryHeader::decode(slot).map_err(|_| EntryFault::BadMagic)?;
    check_entry_lengths(&h, offset, segment_size, slot.len() as u64)?;
    if entry_checksum(&slot[..h.entry_len() as usize]) != h.checksum {
        return Err(EntryFault::BadChecksum);
    }
    Ok(h)
}

/// The placement and lengths of the entry with header `h` at `offset` of a segment of
/// `segment_size` bytes, of which `avail` are readable from the slot's start.
fn check_entry_lengths(
    h: &EntryHeader,
    offset: u64,
    segment_size: u64,
    avail: u64,
) -> std::result::Result<(), EntryFault> {
    if !next_offset_ok(offset, h.next_offset, segment_size) {
        return Err(EntryFault::BadNextOffset);
    }
    let cap = h.next_offset - offset;
    if h.key_len == 0 || h.key_len > MAX_KEY_LEN || h.entry_len() > cap || h.entry_len() > avail {
        return Err(EntryFault::BadLength);
    }
    Ok(())
}

/// Bytes of an entry's value copied and checksummed at a time by [`check_entry_copied`]
/// (a buffer on the stack, zeroed at every check: small).
const CHECK_CHUNK: usize = 1024;

/// [`check_entry_body`] of an entry in memory its client may still write (its own
/// segment, before the server seals it): each byte is taken once, by `read(at, buf)`,
/// which copies the slot's bytes from `at` on into `buf` (false past the segment's
/// end), and everything is checked on those copies. Returns the header and the key
/// that were checked, so what the server seals and indexes is what it validated,
/// whatever the client writes meanwhile (a view of such memory would let a length be
/// read again after its check, by the code or by the compiler).
pub fn check_entry_copied(
    mut read: impl FnMut(u64, &mut [u8]) -> bool,
    offset: u64,
    segment_size: u64,
) -> std::result::Result<(EntryHeader, Vec<u8>), EntryFault> {
    let mut head = [0u8; ENTRY_HEADER_SIZE as usize];
    if offset >= segment_size || !read(0, &mut head) {
        return Err(EntryFault::HeaderOutOfBounds);
    }
    let h = EntryHeader::decode(&head).map_err(|_| EntryFault::BadMagic)?;
    check_entry_lengths(&h, offset, segment_size, segment_size - offset)?;
    let mut key = vec![0u8; h.key_len as usize];
    if !read(ENTRY_HEADER_SIZE, &mut key) {
        return Err(EntryFault::BadLength);
    }
    let mut crc = EntryCrc::new(&head);
    crc.add(&key);
    let mut chunk = [0u8; CHECK_CHUNK];
    let (mut at, end) = (ENTRY_HEADER_SIZE + h.key_len as u64, h.entry_len());
    while at < end {
        let n = ((end - at) as usize).min(CHECK_CHUNK);
        if !read(at, &mut chunk[..n]) {
            return Err(EntryFault::BadLength);
        }
        crc.add(&chunk[..n]);
        at += n as u64;
    }
    if crc.value() != h.checksum {
        return Err(EntryFault::BadChecksum);
    }
    Ok((h, key))
}

/// [`check_entry_copied`] and then the seal, with no repair: an entry at `place` that
/// the server has sealed while its client may still write it (RDMP-CC's, before its
/// client's FLUSH is known). Returns the header and key checked.
pub fn check_sealed_copied(
    read: impl FnMut(u64, &mut [u8]) -> bool,
    place: SlotPlace,
    segment_size: u64,
    trust: &Trust,
) -> std::result::Result<(EntryHeader, Vec<u8>), EntryFault> {
    let (h, key) = check_entry_copied(read, place.offset, segment_size)?;
    if h.version == 0 {
        return Err(EntryFault::NoVersion);
    }
    if h.version >= trust.hwm {
        return Err(EntryFault::AboveHighWater);
    }
    if trust.sealer.entry_seal(place, h.version, &h, &key) != h.seal {
        return Err(EntryFault::BadSeal);
    }
    Ok((h, key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The check values of the CRC catalogue (CRC-32/ISCSI) and of RFC 3720's test
    /// vectors: the pools and frames written before the checksum moved crates still check.
    #[test]
    fn crc32c_is_castagnoli() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62a8_ab43);
        let inc: Vec<u8> = (0u8..32).collect();
        assert_eq!(crc32c(&inc), 0x46dd_794e);
        assert_eq!(crc32c(b""), 0);
    }

    proptest! {
        #[test]
        fn append_equals_the_crc_of_the_concatenation(a in proptest::collection::vec(any::<u8>(), 0..300),
                                                      b in proptest::collection::vec(any::<u8>(), 0..5000)) {
            let whole: Vec<u8> = a.iter().chain(&b).copied().collect();
            prop_assert_eq!(crc32c_append(crc32c(&a), &b), crc32c(&whole));
        }

        #[test]
        fn combine_equals_the_crc_of_the_concatenation(a in proptest::collection::vec(any::<u8>(), 0..300),
                                                       b in proptest::collection::vec(any::<u8>(), 0..5000)) {
            let whole: Vec<u8> = a.iter().chain(&b).copied().collect();
            prop_assert_eq!(crc32c_combine(crc32c(&a), crc32c(&b), b.len()), crc32c(&whole));
        }
    }

    #[test]
    fn checksum_from_the_value_crc_equals_the_whole_entry_checksum() {
        for (key, value) in [(&b"k"[..], &b""[..]), (b"key", b"v"), (b"user42", &[7u8; 5000][..])] {
            let mut b = vec![0u8; ENTRY_HEADER_SIZE as usize + key.len() + value.len()];
            encode_entry(&mut b, key, value, false, 4096).unwrap();
            let head = &b[..ENTRY_HEADER_SIZE as usize + key.len()];
            let c = entry_checksum_with_value_crc(head, value_crc(value), value.len());
            assert_eq!(c, entry_checksum(&b));
            assert_eq!(c, EntryHeader::decode(&b).unwrap().checksum);
            let (h2, eh) = encode_entry_head(key, value.len() as u32, value_crc(value), false, 4096).unwrap();
            assert_eq!(&h2[..], head);
            assert_eq!(eh, EntryHeader::decode(&b).unwrap());
        }
    }

    const KEY: [u8; 16] = [9; 16];

    fn trust(hwm: u64) -> Trust {
        Trust { sealer: Sealer::new(&KEY), hwm }
    }

    fn place(offset: u64) -> SlotPlace {
        SlotPlace { segment: 3, generation: 1, offset }
    }

    /// Stores `version` and its seal into the encoded entry `buf` at `p`, as the server does.
    fn seal(buf: &mut [u8], p: SlotPlace, version: u64) {
        let h = EntryHeader::decode(buf).unwrap();
        let s = Sealer::new(&KEY).entry_seal(p, version, &h, entry_key(buf, &h));
        buf[8..16].copy_from_slice(&version.to_le_bytes());
        buf[16..24].copy_from_slice(&s.to_le_bytes());
    }

    #[test]
    fn pool_header_round_trip_and_rejections() {
        let mut h = PoolHeader::new(1 << 30, 64 << 20, [7; 16], 1234).unwrap();
        h.seal_key = KEY;
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
        bad[70] ^= 1;
        assert!(
            PoolHeader::decode(&bad, 1 << 30).unwrap_err().to_string().contains("checksum"),
            "the seal key is covered"
        );
        let mut bad = b;
        bad[8] = 9;
        assert!(PoolHeader::decode(&bad, 1 << 30).unwrap_err().to_string().contains("version"));
        let mut old = b;
        old[8] = 1;
        let e = PoolHeader::decode(&old, 1 << 30).unwrap_err().to_string();
        assert!(e.contains("format version 1") && e.contains("does not migrate"), "{e}");
        assert!(PoolHeader::decode(&b, 1 << 20).unwrap_err().to_string().contains("truncated"));
        assert!(PoolHeader::decode(&b[..10], 1 << 30).is_err());
        assert!(PoolHeader::new(1 << 20, 64 << 20, [0; 16], 0).is_err());
        assert!(PoolHeader::new(1 << 30, 1000, [0; 16], 0).is_err());
        assert!(!serde_json::to_string(&h).unwrap().contains("seal"), "the key is never shown");
    }

    #[test]
    fn segment_header_round_trip() {
        let s = SegmentHeader { segment_id: 3, owner: 9, prev: NO_SEGMENT, log_seq: 0, generation: 2 };
        let sealer = Sealer::new(&KEY);
        let b = s.encode(&sealer);
        assert_eq!(SegmentHeader::decode(&b, &sealer).unwrap(), s);
        let mut bad = b;
        bad[30] ^= 0x10;
        assert!(SegmentHeader::decode(&bad, &sealer).is_err());
        assert!(SegmentHeader::decode(&[0u8; 64], &sealer).is_err());
        // a client rewriting its header with a valid checksum: the seal fails
        let forged = SegmentHeader { owner: TOMBSTONE_OWNER, ..s };
        let mut f = forged.encode(&Sealer::new(&[1; 16]));
        assert!(SegmentHeader::decode(&f, &sealer).unwrap_err().to_string().contains("seal"));
        f[56..64].fill(0);
        assert!(SegmentHeader::decode(&f, &sealer).is_err());
    }

    #[test]
    fn hwm_words_detect_every_single_bit_flip() {
        for v in [1u64, VERSION_LEASE, (1 << 32) + 17, MAX_VERSION - 1] {
            let w = encode_hwm(v);
            assert_eq!(decode_hwm(w), Some(v));
            for bit in 0..64 {
                assert_eq!(decode_hwm(w ^ (1 << bit)), None, "{v:#x} bit {bit}");
                assert_eq!(read_hwm(w ^ (1 << bit), w), Ok(v));
            }
        }
        assert_eq!(read_hwm(encode_hwm(5), encode_hwm(9)), Ok(9), "a lease torn between the copies");
        assert!(read_hwm(1, 2).is_err());
    }

    #[test]
    fn count_words_detect_and_repair_one_flip() {
        let s = Sealer::new(&KEY);
        let w = s.count_word(4, 2, 37);
        assert_eq!(s.check_count(4, 2, w), CountCheck::Ok(37));
        for bit in 0..64 {
            assert_eq!(s.check_count(4, 2, w ^ (1 << bit)), CountCheck::Repaired(37), "bit {bit}");
        }
        assert_eq!(s.check_count(4, 2, 0), CountCheck::Damaged, "a zeroed count");
        assert_eq!(s.check_count(4, 2, 36), CountCheck::Damaged, "a plain count");
        assert_ne!(s.check_count(4, 3, w), CountCheck::Ok(37), "bound to the generation");
        assert_ne!(s.check_count(5, 2, w), CountCheck::Ok(37), "bound to the segment");
        assert_ne!(Sealer::new(&[1; 16]).check_count(4, 2, w), CountCheck::Ok(37), "bound to the key");
    }

    #[test]
    fn entry_checks() {
        let mut buf = vec![0u8; 256];
        let off = SEGMENT_HEADER_SIZE;
        let n = encode_entry(&mut buf, b"key", b"value", false, off + slot_size(3, 5)).unwrap();
        assert_eq!(n, 48);
        let t = trust(1 << 40);
        let mut r = 10;
        assert_eq!(check_entry(&buf, place(off), 4096, &t, &mut r), Err(EntryFault::NoVersion));
        assert_eq!(r, 10, "an entry never sealed costs no repair");
        seal(&mut buf, place(off), 5);
        let c = check_entry(&buf, place(off), 4096, &t, &mut r).unwrap();
        let h = c.header;
        assert_eq!((h.key_len, h.value_len, h.version, h.is_tombstone(), c.repaired), (3, 5, 5, false, false));
        assert_eq!(entry_key(&buf, &h), b"key");
        assert_eq!(entry_value(&buf, &h), b"value");
        // a raised version, a moved entry or another pool's key fail the seal
        let mut raised = buf.clone();
        raised[8..16].copy_from_slice(&6u64.to_le_bytes());
        raised[16] ^= 0x40;
        assert_eq!(check_entry(&raised, place(off), 4096, &t, &mut r), Err(EntryFault::BadSeal));
        let moved = SlotPlace { segment: 4, ..place(off) };
        assert_eq!(check_entry(&buf, moved, 4096, &t, &mut r), Err(EntryFault::BadSeal));
        let other = Trust { sealer: Sealer::new(&[1; 16]), hwm: 1 << 40 };
        assert_eq!(check_entry(&buf, place(off), 4096, &other, &mut r), Err(EntryFault::BadSeal));
        // at or above the high-water mark
        assert_eq!(check_entry(&buf, place(off), 4096, &trust(5), &mut 0), Err(EntryFault::AboveHighWater));
        // the checksum covers the body
        buf[45] ^= 1;
        assert_eq!(check_entry(&buf, place(off), 4096, &t, &mut r), Err(EntryFault::BadChecksum));
        buf[45] ^= 1;
        assert_eq!(check_entry(&buf, place(off), off + 8, &t, &mut r), Err(EntryFault::BadNextOffset));
        buf[4] = 0;
        assert_eq!(check_entry(&buf, place(off), 4096, &t, &mut r), Err(EntryFault::BadMagic));
        assert!(encode_entry(&mut buf, b"", b"v", false, 0).is_err());
        assert!(encode_entry(&mut buf, &[1u8; 2000], b"v", false, 0).is_err());
    }

    #[test]
    fn every_single_flip_of_version_or_seal_is_repaired_or_rejected() {
        let off = SEGMENT_HEADER_SIZE;
        let mut buf = vec![0u8; 64];
        encode_entry(&mut buf, b"k1", b"v", false, off + slot_size(2, 1)).unwrap();
        let version = (1u64 << 32) + 3;
        seal(&mut buf, place(off), version);
        let t = trust(1 << 40);
        for byte in 8..24 {
            for bit in 0..8 {
                let mut b = buf.clone();
                b[byte] ^= 1 << bit;
                let c = check_entry(&b, place(off), 4096, &t, &mut 1).unwrap();
                assert!(c.repaired);
                assert_eq!(c.header.version, version, "byte {byte} bit {bit}");
                assert_eq!(check_entry(&b, place(off), 4096, &t, &mut 0).map(|_| ()), Err(c_fault(&b)));
            }
        }
        fn c_fault(b: &[u8]) -> EntryFault {
            let v = u64::from_le_bytes(b[8..16].try_into().unwrap());
            if v >= 1 << 40 {
                EntryFault::AboveHighWater
            } else {
                EntryFault::BadSeal
            }
        }
    }

    proptest! {
        #[test]
        fn entry_round_trip(key in proptest::collection::vec(any::<u8>(), 1..64),
                            value in proptest::collection::vec(any::<u8>(), 0..300),
                            tomb in any::<bool>(), version in 1u64..MAX_VERSION, slack in 0u64..4) {
            let off = 4096u64;
            let next = off + slot_size(key.len(), value.len()) + slack * 8;
            let mut buf = vec![0u8; (next - off) as usize];
            let n = encode_entry(&mut buf, &key, &value, tomb, next).unwrap();
            seal(&mut buf, place(off), version);
            let h = check_entry(&buf, place(off), 1 << 20, &trust(MAX_VERSION), &mut 0).unwrap().header;
            prop_assert_eq!(h.entry_len() as usize, n);
            prop_assert_eq!(h.version, version);
            prop_assert_eq!(h.is_tombstone(), tomb);
            prop_assert_eq!(entry_key(&buf, &h), &key[..]);
            prop_assert_eq!(entry_value(&buf, &h), &value[..]);
        }

        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), off in 0u64..10_000) {
            let _ = PoolHeader::decode(&bytes, 1 << 30);
            let _ = SegmentHeader::decode(&bytes, &Sealer::new(&KEY));
            let _ = check_entry(&bytes, place(off), 1 << 16, &trust(1 << 40), &mut 2);
            let _ = check_entry_copied(|at, b| from_slice(&bytes, at, b), off, 1 << 16);
        }

        /// The check on copies gives the check on the bytes' verdict, for whole entries
        /// and for entries with any byte changed (values over a copy's chunk too).
        #[test]
        fn the_check_on_copies_agrees_with_the_check_in_place(
            key in proptest::collection::vec(any::<u8>(), 1..40),
            value_len in prop_oneof![0usize..300, 4000usize..9000],
            flip in proptest::option::of((any::<proptest::sample::Index>(), 1u8..=255)),
            cut in 0usize..3,
            version in prop_oneof![Just(0u64), 1u64..MAX_VERSION],
        ) {
            let off = 4096u64;
            let value: Vec<u8> = (0..value_len).map(|i| (i * 7) as u8).collect();
            let next = off + slot_size(key.len(), value.len());
            let mut buf = vec![0u8; (next - off) as usize];
            encode_entry(&mut buf, &key, &value, false, next).unwrap();
            if version > 0 {
                seal(&mut buf, place(off), version);
            }
            if let Some((i, x)) = flip {
                let i = i.index(buf.len());
                buf[i] ^= x;
            }
            // A segment that ends inside the entry, or just after it.
            let size = next - [0, 8, 40][cut].min(next - off - 1);
            let there = &buf[..buf.len().min((size - off) as usize)];
            let copied = check_entry_copied(|at, b| from_slice(there, at, b), off, size);
            let in_place = check_entry_body(there, off, size);
            prop_assert_eq!(copied.clone().map(|(h, _)| h), in_place);
            if let (Ok((h, k)), Ok(_)) = (copied, in_place) {
                prop_assert_eq!(&k[..], entry_key(&buf, &h));
            }
            // And with the seal (no repair), as the check of a sealed entry in place.
            let t = trust(MAX_VERSION);
            let sealed = check_sealed_copied(|at, b| from_slice(there, at, b), place(off), size, &t);
            let in_place = check_entry(there, place(off), size, &t, &mut 0).map(|c| c.header);
            prop_assert_eq!(sealed.map(|(h, _)| h), in_place);
        }
    }

    /// A reader of `bytes` for [`check_entry_copied`].
    fn from_slice(bytes: &[u8], at: u64, buf: &mut [u8]) -> bool {
        match bytes.get(at as usize..).and_then(|b| b.get(..buf.len())) {
            Some(b) => {
                buf.copy_from_slice(b);
                true
            }
            None => false,
        }
    }

    /// A client that rewrites its entry while the server checks it changes nothing the
    /// server decides on: every byte is read once, and the header and key returned are
    /// the ones the checksum covered, even when each byte read is changed right after.
    #[test]
    fn the_check_on_copies_reads_each_byte_once_and_returns_what_it_checked() {
        let off = 64u64;
        let (key, value) = (b"the key".to_vec(), vec![0x5au8; 9000]);
        let next = off + slot_size(key.len(), value.len());
        let mut buf = vec![0u8; (next - off) as usize];
        encode_entry(&mut buf, &key, &value, false, next).unwrap();
        let written = buf.clone();
        let mut seen = vec![0u32; buf.len()];
        let racing = |at: u64, b: &mut [u8]| {
            let r = at as usize..at as usize + b.len();
            if !from_slice(&buf, at, b) {
                return false;
            }
            for i in r {
                seen[i] += 1;
                // The client's next store: another key, a longer length, another value.
                buf[i] = buf[i].wrapping_add(1);
            }
            true
        };
        let (h, k) = check_entry_copied(racing, off, 1 << 20).unwrap();
        let len = h.entry_len() as usize;
        assert!(len < seen.len(), "the slot has padding after the entry");
        assert!(seen[..len].iter().all(|&n| n == 1), "every byte of the entry read exactly once: {:?}", &seen[..48]);
        assert!(seen[len..].iter().all(|&n| n == 0), "nothing past the entry read");
        assert_eq!(k, key);
        assert_eq!(h, EntryHeader::decode(&written).unwrap());
        assert_ne!(buf, written, "the bytes did change under the check");
    }

    #[test]
    fn an_entry_relinked_in_two_pieces_is_relinked_as_a_whole() {
        for value in [&b""[..], b"v", &[3u8; 5000][..]] {
            let mut whole = vec![0u8; ENTRY_HEADER_SIZE as usize + 4 + value.len()];
            encode_entry(&mut whole, b"user", value, false, 1 << 12).unwrap();
            let mut head: [u8; ENTRY_HEADER_SIZE as usize] = whole[..ENTRY_HEADER_SIZE as usize].try_into().unwrap();
            let rest = whole[ENTRY_HEADER_SIZE as usize..].to_vec();
            let c = relink_head(&mut head, &rest, 1 << 13);
            assert_eq!(c, relink_entry(&mut whole, 1 << 13).unwrap());
            assert_eq!(&head[..], &whole[..ENTRY_HEADER_SIZE as usize]);
            assert_eq!(EntryHeader::decode(&head).unwrap().next_offset, 1 << 13);
        }
    }
}
