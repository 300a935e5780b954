//! What `boomctl inspect-log` shows: the pool header, every segment and optionally every
//! entry, decoded by the same walker recovery uses.
//!
//! Owns: the rows of the inspection and how keys and values are made printable. Every
//! field is read through [`format`](super::format) and the walker of
//! [`recovery`](super::recovery); it imports only the pool (`super`).

use super::format::*;
use super::recovery::{read_segment, walk_segment, RecoveryReport, ScannedEntry, SegmentFound};
use super::Pool;

/// Which parts of the pool to show.
#[derive(Clone, Debug, Default)]
pub struct InspectFilter {
    /// Only this segment.
    pub segment: Option<u64>,
    /// Only entries with this key (implies entries).
    pub key: Option<Vec<u8>>,
    /// Only segments owned by this client.
    pub client: Option<u64>,
    /// List entries, not only segments.
    pub entries: bool,
    /// Include free segments.
    pub free: bool,
    /// Include each entry's value, printable (as keys are).
    pub values: bool,
}

/// One segment as found.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SegmentRow {
    /// Segment id.
    pub id: u64,
    /// free, active, sealed, or damaged.
    pub state: String,
    /// Owning client.
    pub owner: Option<u64>,
    /// Position in the owner's log.
    pub log_seq: Option<u64>,
    /// Previous segment in the owner's log.
    pub prev: Option<u64>,
    /// Next segment in the owner's log.
    pub next: Option<u64>,
    /// Durable appended slots.
    pub count: u64,
    /// Bytes of slots.
    pub used_bytes: u64,
    /// Bytes of newest entries.
    pub live_bytes: u64,
    /// Used bytes not live.
    pub garbage_bytes: u64,
    /// Used bytes as a percentage of the segment's data area.
    pub fill_percent: f64,
    /// Damage found.
    pub problem: Option<String>,
}

/// One slot as found.
#[derive(Clone, Debug, serde::Serialize)]
pub struct EntryRow {
    /// Segment id.
    pub segment: u64,
    /// Slot index within the segment.
    pub slot: u64,
    /// Segment offset.
    pub offset: u64,
    /// Stored next_offset.
    pub next_offset: u64,
    /// Stored version (0 if none or unreadable).
    pub version: u64,
    /// Key, printable (non-printable bytes as `\xNN`).
    pub key: String,
    /// Value bytes.
    pub value_len: u64,
    /// A DELETE.
    pub tombstone: bool,
    /// Whether the checksum (and every other check) passed.
    pub checksum_ok: bool,
    /// A flipped bit in its version or seal was repaired.
    pub repaired: bool,
    /// Why the slot was rejected.
    pub fault: Option<String>,
    /// live, deleted (live tombstone), superseded, damaged (value fails its checksum
    /// under a valid seal), or rejected.
    pub status: &'static str,
    /// The value, printable (with [`InspectFilter::values`]; valid entries only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// The whole picture.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Inspection {
    /// Pool path.
    pub path: String,
    /// Pool header.
    pub header: PoolHeader,
    /// Pool uuid as hex.
    pub uuid: String,
    /// Another process held the pool open for writing when it was opened (a running
    /// server?): entries it wrote meanwhile may look torn here.
    pub served: bool,
    /// What recovery found.
    pub recovery: RecoveryReport,
    /// Segments shown.
    pub segments: Vec<SegmentRow>,
    /// Entries shown (with `entries` or `key`).
    pub entries: Vec<EntryRow>,
    /// Cells of the cell table shown (pDPM-Direct; with `entries` or `key`).
    pub cells: Vec<CellRow>,
    /// Keys of the Clover arena shown (with `entries` or `key`).
    pub clover: Vec<CloverRow>,
}

/// One key of the Clover arena: its newest version.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CloverRow {
    /// Head record.
    pub head: u64,
    /// Key, printable.
    pub key: String,
    /// Version of the newest.
    pub version: u64,
    /// Arena offset of the newest.
    pub offset: u64,
    /// Versions from the chain's start to the newest.
    pub chain: u64,
    /// Value bytes.
    pub value_len: u64,
    /// A DELETE.
    pub tombstone: bool,
    /// The value, printable (with [`InspectFilter::values`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// One cell of the cell table (pDPM-Direct) that holds a key or is damaged.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CellRow {
    /// Cell index.
    pub cell: u64,
    /// Key, printable.
    pub key: String,
    /// Version (per key).
    pub version: u64,
    /// Value bytes.
    pub value_len: u64,
    /// A DELETE.
    pub tombstone: bool,
    /// The lock word's holder tag (0: free).
    pub holder: u16,
    /// The committed slot: ok, empty, or why it fails.
    pub committed: String,
    /// The uncommitted slot: ok, empty, or why it fails.
    pub uncommitted: String,
    /// The value, printable (with [`InspectFilter::values`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// Renders a key printable and unambiguous, the one way every command shows one:
/// valid UTF-8 as typed (`clé`), `\` doubled, control characters and bytes that are
/// not UTF-8 as `\xNN` (each byte). Whole: keys are short (at most
/// [`crate::log::format::MAX_KEY_LEN`] bytes), and a listing that cut them would show two keys
/// alike. Messages and value previews cut with [`printable_upto`].
pub fn printable_key(k: &[u8]) -> String {
    printable_upto(k, usize::MAX)
}

/// [`printable_key`] of any bytes, cut after `cut` of them with `...` (a character is
/// never split).
pub fn printable_upto(k: &[u8], cut: usize) -> String {
    let mut s = String::new();
    let mut at = 0;
    let hex = |s: &mut String, bytes: &[u8]| {
        for b in bytes {
            s.push_str(&format!("\\x{b:02x}"));
        }
    };
    for chunk in k.utf8_chunks() {
        for c in chunk.valid().chars() {
            at += c.len_utf8();
            if at > cut {
                s.push_str("...");
                return s;
            }
            match c {
                '\\' => s.push_str("\\\\"),
                c if c.is_control() => hex(&mut s, c.encode_utf8(&mut [0; 4]).as_bytes()),
                c => s.push(c),
            }
        }
        for &b in chunk.invalid() {
            at += 1;
            if at > cut {
                s.push_str("...");
                return s;
            }
            hex(&mut s, &[b]);
        }
    }
    s
}

/// How many bytes of a value `--values` shows.
const VALUE_SHOWN: usize = 128;

/// Builds the inspection of a recovered pool.
pub fn inspect(pool: &Pool, recovery: &RecoveryReport, f: &InspectFilter) -> Inspection {
    let ph = pool.header().clone();
    let trust = pool.trust();
    let mut segments = Vec::new();
    let mut entries = Vec::new();
    let table = pool.cell_table();
    for id in 0..ph.segment_count {
        if f.segment.is_some_and(|s| s != id) {
            continue;
        }
        if let Some(t) = table.filter(|t| t.holds_segment(id)) {
            if f.client.is_none() {
                segments.push(passive_row(id, id - t.first_segment, "cells"));
            }
            continue;
        }
        if let Some(a) = pool.clover_arena().filter(|a| a.holds_segment(id)) {
            if f.client.is_none() {
                segments.push(passive_row(id, id - a.first_segment, "clover"));
            }
            continue;
        }
        let sf = read_segment(pool.media().map(), &ph, id);
        if !sf.in_use() && sf.problem.is_none() && !f.free && f.segment.is_none() {
            continue;
        }
        if f.client.is_some() && sf.header.map(|h| h.owner) != f.client {
            continue;
        }
        segments.push(segment_row(pool, &trust, &sf, f, &mut entries));
    }
    Inspection {
        path: pool.media().path().display().to_string(),
        uuid: ph.uuid_hex(),
        served: pool.media().held_by_writer(),
        header: ph,
        recovery: recovery.clone(),
        segments,
        entries,
        cells: if f.entries || f.key.is_some() { cell_rows(pool, f) } else { Vec::new() },
        clover: if f.entries || f.key.is_some() { clover_rows(pool, f) } else { Vec::new() },
    }
}

/// The keys of the Clover arena the filter shows.
fn clover_rows(pool: &Pool, f: &InspectFilter) -> Vec<CloverRow> {
    let mut rows = Vec::new();
    pool.for_each_clover_key(|v| {
        let key = entry_key(&v.entry, &v.header);
        if f.key.as_deref().is_some_and(|k| k != key) {
            return;
        }
        rows.push(CloverRow {
            head: v.head,
            key: printable_key(key),
            version: v.header.version,
            offset: v.offset,
            chain: v.walked,
            value_len: u64::from(v.header.value_len),
            tombstone: v.header.is_tombstone(),
            value: f.values.then(|| printable_upto(entry_value(&v.entry, &v.header), VALUE_SHOWN)),
        });
    });
    rows
}

/// The row of segment `id`, the `k`-th of the cell table or the Clover arena (`what`).
fn passive_row(id: u64, k: u64, what: &str) -> SegmentRow {
    SegmentRow {
        id,
        state: what.into(),
        owner: None,
        log_seq: Some(k),
        prev: None,
        next: None,
        count: 0,
        used_bytes: 0,
        live_bytes: 0,
        garbage_bytes: 0,
        fill_percent: 0.0,
        problem: None,
    }
}

/// The cells holding a key (or damaged) that the filter shows.
fn cell_rows(pool: &Pool, f: &InspectFilter) -> Vec<CellRow> {
    use super::cells::{self, SlotFault};
    let Some(t) = pool.cell_table() else { return Vec::new() };
    let base = pool.cell_table_base(&t);
    let m = pool.media().map();
    let status = |r: &Result<EntryHeader, SlotFault>| match r {
        Ok(_) => "ok".to_string(),
        Err(SlotFault::Empty) => "empty".to_string(),
        Err(SlotFault::Short(_)) => "short".to_string(),
        Err(SlotFault::Bad(why)) => (*why).to_string(),
    };
    let mut rows = Vec::new();
    for i in 0..t.cells {
        let (Ok(c), Ok(u), Ok(word)) = (
            m.view(base + t.committed_offset(i), t.slot_size as usize),
            m.view(base + t.uncommitted_offset(i), t.slot_size as usize),
            m.read_u64(base + t.lock_offset(i)),
        ) else {
            continue;
        };
        let (rc, ru) = (cells::check_slot(c, i, t.slot_size), cells::check_slot(u, i, t.slot_size));
        if matches!(rc, Err(SlotFault::Empty)) && matches!(ru, Err(SlotFault::Empty)) && word == 0 {
            continue;
        }
        let key = claimed_key(c);
        if f.key.as_deref().is_some_and(|k| k != key) {
            continue;
        }
        let h = rc.as_ref().ok();
        rows.push(CellRow {
            cell: i,
            key: printable_key(key),
            version: h.map_or(cells::lock_version(word), |h| h.version),
            value_len: h.map_or(0, |h| u64::from(h.value_len)),
            tombstone: h.is_some_and(EntryHeader::is_tombstone),
            holder: cells::lock_holder(word),
            committed: status(&rc),
            uncommitted: status(&ru),
            value: h.filter(|_| f.values).map(|h| printable_upto(entry_value(c, h), VALUE_SHOWN)),
        });
    }
    rows
}

/// The row of segment `sf`; if it is in use, its slots are walked under `trust` and the
/// entries the filter asks for are added to `entries`.
fn segment_row(
    pool: &Pool,
    trust: &Trust,
    sf: &SegmentFound,
    f: &InspectFilter,
    entries: &mut Vec<EntryRow>,
) -> SegmentRow {
    let ph = pool.header();
    let (id, in_use) = (sf.id, sf.in_use());
    let state = match (&sf.problem, sf.state) {
        (Some(_), _) => "damaged".to_string(),
        (None, Some(s)) if in_use => s.name().to_string(),
        _ => "free".to_string(),
    };
    let mut problem = sf.problem.clone().or_else(|| sf.state_damage()).or_else(|| sf.count_damage());
    let (used, live) = if in_use {
        let (end, damage) = walk_segment(pool.media().map(), ph, trust, sf, sf.limit(), |e, slot| {
            if let Some(row) = entry_row(pool, id, e, slot, f) {
                entries.push(row);
            }
        });
        if let Some(d) = damage {
            problem = Some(match problem {
                Some(p) => format!("{p}; {d}"),
                None => d,
            });
        }
        (end - SEGMENT_HEADER_SIZE, pool.segment_live(id))
    } else {
        (0, 0)
    };
    let h = sf.header;
    let link = |v: u64| if v == NO_SEGMENT { None } else { Some(v) };
    SegmentRow {
        id,
        state,
        owner: h.map(|h| h.owner),
        log_seq: h.map(|h| h.log_seq),
        prev: h.and_then(|h| link(h.prev)),
        next: if in_use { link(sf.next) } else { None },
        count: if in_use { sf.count } else { 0 },
        used_bytes: used,
        live_bytes: live.min(used),
        garbage_bytes: used.saturating_sub(live),
        fill_percent: used as f64 * 100.0 / (ph.segment_size - SEGMENT_HEADER_SIZE) as f64,
        problem,
    }
}

/// The row of slot `e` (bytes `slot`) of segment `id`, if the filter shows it.
fn entry_row(pool: &Pool, id: u64, e: &ScannedEntry, slot: &[u8], f: &InspectFilter) -> Option<EntryRow> {
    if !(f.entries || f.key.is_some()) {
        return None;
    }
    let key_bytes = claimed_key(slot);
    if f.key.as_deref().is_some_and(|k| k != key_bytes) {
        return None;
    }
    let version = match &e.result {
        Ok(h) => h.version,
        Err(_) => EntryHeader::decode(slot).map_or(0, |h| h.version),
    };
    // The header's lengths were checked: the value is all there.
    let value = match &e.result {
        Ok(h) if f.values => Some(printable_upto(entry_value(slot, h), VALUE_SHOWN)),
        _ => None,
    };
    let (status, value_len, tombstone) = match &e.result {
        Ok(h) => {
            let cur = pool.index().get(key_bytes, pool);
            let is_live = cur.is_some_and(|l| l.segment as u64 == id && l.offset as u64 == e.offset);
            let st = match (is_live, h.is_tombstone()) {
                (true, false) => "live",
                (true, true) => "deleted",
                _ => "superseded",
            };
            (st, h.value_len as u64, h.is_tombstone())
        }
        // The header held (only the content fails its checksum): its lengths are shown.
        Err(_) => match &e.damaged {
            Some(h) => ("damaged", h.value_len as u64, h.is_tombstone()),
            None => ("rejected", 0, false),
        },
    };
    Some(EntryRow {
        segment: id,
        slot: e.slot,
        offset: e.offset,
        next_offset: e.next_offset,
        version,
        key: printable_key(key_bytes),
        value_len,
        tombstone,
        checksum_ok: e.result.is_ok(),
        repaired: e.repaired,
        fault: e.result.as_ref().err().map(ToString::to_string),
        status,
        value,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn keys_are_shown_as_typed_unambiguous_where_unprintable_and_cut() {
        use super::printable_key as shown;
        assert_eq!(shown("clé".as_bytes()), "clé");
        assert_eq!(shown(b"a\nb\x07 c"), "a\\x0ab\\x07 c");
        assert_eq!(shown(b"k\xff\xfe!"), "k\\xff\\xfe!");
        // A backslash is doubled: the key `\xff` (four characters) is not the byte.
        assert_eq!(shown(b"\\xff"), "\\\\xff");
        // A control character beyond ASCII (U+0085) is its bytes.
        assert_eq!(shown("a\u{85}".as_bytes()), "a\\xc2\\x85");
        // Whole, however long: two keys that differ at their end stay two.
        let long = [b'b'; 1024];
        assert_eq!(shown(&long).len(), 1024);
        let long = "é".repeat(100);
        let s = super::printable_upto(long.as_bytes(), 128);
        assert!(s.ends_with("...") && s.len() <= 131, "{s}");
        assert_eq!(s.trim_end_matches("...").chars().count(), 64);
        let s = super::printable_upto(&[0xffu8; 200], 128);
        assert_eq!(s.trim_end_matches("..."), "\\xff".repeat(128));
        assert_eq!(super::printable_upto(b"abcdef", 3), "abc...");
    }
}
