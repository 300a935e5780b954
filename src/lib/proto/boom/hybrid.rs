//! The client's hybrid-update bookkeeping (the paper's section 3.2).
//!
//! Per key, the client remembers `(first, second)`: its newest and previous entry of
//! that key in its current segment (offset, slot capacity, version). A PUT rewrites
//! `second` in place only when all three conditions of the paper hold:
//!
//! 1. `second` exists: the newest entry (`first`) is never overwritten, so a crash in
//!    the middle of a rewrite cannot destroy the latest value;
//! 2. the new entry fits `second`'s slot, so the next entry is not overwritten;
//! 3. no GET in flight reads `second`: its version is below the smallest in-flight GET
//!    version the server returned with the last PUT of this key.
//!
//! Otherwise it appends. Moving to a new segment forgets everything.

use hashbrown::HashMap;

/// One of a key's entries in the current segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotInfo {
    /// Segment offset.
    pub offset: u64,
    /// Bytes of the slot (`next_offset - offset`).
    pub capacity: u64,
    /// Version the server assigned.
    pub version: u64,
}

/// How to write the next entry of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// At the segment's tail.
    Append,
    /// Over this (older) slot.
    InPlace(SlotInfo),
}

/// Whether the client may rewrite in place at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UpdateMode {
    /// Append or rewrite in place by the three conditions (BOOM's default).
    #[default]
    Hybrid,
    /// Always append (for measuring what hybrid updates save).
    Append,
}

impl std::str::FromStr for UpdateMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "hybrid" => Ok(UpdateMode::Hybrid),
            "append" => Ok(UpdateMode::Append),
            o => Err(format!("unknown update mode '{o}' (expected hybrid or append)")),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct KeyState {
    first: SlotInfo,
    second: Option<SlotInfo>,
    min_get_version: u64,
}

/// The per-key table of one client's current segment.
#[derive(Debug, Default)]
pub struct HybridTable {
    mode: UpdateMode,
    keys: HashMap<Vec<u8>, KeyState>,
}

impl HybridTable {
    /// An empty table.
    pub fn new(mode: UpdateMode) -> HybridTable {
        HybridTable { mode, keys: HashMap::new() }
    }

    /// The update mode.
    pub fn mode(&self) -> UpdateMode {
        self.mode
    }

    /// Decides how to write an entry of `entry_len` bytes for `key`.
    pub fn decide(&self, key: &[u8], entry_len: u64) -> Decision {
        if self.mode == UpdateMode::Append {
            return Decision::Append;
        }
        match self.keys.get(key) {
            Some(KeyState { second: Some(s), min_get_version, .. })
                if entry_len <= s.capacity && s.version < *min_get_version =>
            {
                Decision::InPlace(*s)
            }
            _ => Decision::Append,
        }
    }

    /// Records a PUT the server acknowledged: `slot` is where the entry now is (for an
    /// in-place write, `second`'s slot with the new version), `min_get_version` what the
    /// server returned.
    pub fn record(&mut self, key: &[u8], slot: SlotInfo, min_get_version: u64) {
        match self.keys.get_mut(key) {
            Some(st) => {
                st.second = Some(st.first);
                st.first = slot;
                st.min_get_version = min_get_version;
            }
            None => {
                self.keys.insert(key.to_vec(), KeyState { first: slot, second: None, min_get_version });
            }
        }
    }

    /// Forgets every key (the client moved to a new segment).
    pub fn reset(&mut self) {
        self.keys.clear();
    }

    /// Keys tracked.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(offset: u64, capacity: u64, version: u64) -> SlotInfo {
        SlotInfo { offset, capacity, version }
    }

    #[test]
    fn first_put_and_second_put_append() {
        let mut t = HybridTable::new(UpdateMode::Hybrid);
        assert_eq!(t.decide(b"k", 100), Decision::Append, "no entry of the key in this segment");
        t.record(b"k", slot(128, 104, 1), u64::MAX);
        assert_eq!(t.decide(b"k", 100), Decision::Append, "condition 1: never overwrite the newest entry");
        t.record(b"k", slot(232, 104, 2), u64::MAX);
        assert_eq!(t.decide(b"k", 100), Decision::InPlace(slot(128, 104, 1)));
    }

    #[test]
    fn condition_2_the_entry_must_fit_the_slot() {
        let mut t = HybridTable::new(UpdateMode::Hybrid);
        t.record(b"k", slot(128, 64, 1), u64::MAX);
        t.record(b"k", slot(192, 200, 2), u64::MAX);
        assert_eq!(t.decide(b"k", 65), Decision::Append);
        assert_eq!(t.decide(b"k", 64), Decision::InPlace(slot(128, 64, 1)));
    }

    #[test]
    fn condition_3_no_get_in_flight_reads_second() {
        let mut t = HybridTable::new(UpdateMode::Hybrid);
        t.record(b"k", slot(128, 104, 5), u64::MAX);
        t.record(b"k", slot(232, 104, 9), 5); // a GET reading version 5 was in flight
        assert_eq!(t.decide(b"k", 100), Decision::Append);
        t.record(b"k", slot(336, 104, 12), 9); // GETs of 9 in flight: second (9) unsafe
        assert_eq!(t.decide(b"k", 100), Decision::Append);
        t.record(b"k", slot(440, 104, 13), 13); // only newer GETs: second (12) is safe
        assert_eq!(t.decide(b"k", 100), Decision::InPlace(slot(336, 104, 12)));
    }

    #[test]
    fn in_place_rotates_first_and_second() {
        let mut t = HybridTable::new(UpdateMode::Hybrid);
        t.record(b"k", slot(128, 104, 1), u64::MAX);
        t.record(b"k", slot(232, 104, 2), u64::MAX);
        let Decision::InPlace(s) = t.decide(b"k", 100) else { panic!("expected in place") };
        t.record(b"k", SlotInfo { version: 3, ..s }, u64::MAX);
        // now first = 128 (v3), second = 232 (v2)
        assert_eq!(t.decide(b"k", 100), Decision::InPlace(slot(232, 104, 2)));
    }

    #[test]
    fn append_mode_and_reset() {
        let mut t = HybridTable::new(UpdateMode::Append);
        t.record(b"k", slot(128, 104, 1), u64::MAX);
        t.record(b"k", slot(232, 104, 2), u64::MAX);
        assert_eq!(t.decide(b"k", 10), Decision::Append);
        let mut t = HybridTable::new(UpdateMode::Hybrid);
        t.record(b"k", slot(128, 104, 1), u64::MAX);
        t.record(b"k", slot(232, 104, 2), u64::MAX);
        t.reset();
        assert_eq!(t.decide(b"k", 10), Decision::Append);
        assert!(t.is_empty());
    }
}
