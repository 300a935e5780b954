//! The volatile index: key -> location of the newest entry of that key in the pool.
//!
//! Two variants:
//! - [`IndexKind::Hash`] (default): a sharded hash table that keeps **no key bytes in
//!   DRAM**. Each slot is 32 bytes: the entry's segment, offset, length and flags, its
//!   version, and the key's 64-bit hash under a secret key (SipHash-1-3, keyed afresh by
//!   each process). A lookup compares the key against the entry in persistent memory
//!   through a [`KeySource`], as PM stores such as FlatStore do. Memory per key is about
//!   32 bytes / 0.875 load factor + 1 control byte.
//!
//!   The key bytes in PM are the writing client's until its segment is sealed, so a
//!   slot matches a key only when both its secret hash and its key in PM do, and a
//!   look-up takes the newest of the slots that match: a client that rewrites its own
//!   entry's key can hide that entry, never another key's. (With a public hash and the
//!   first match, a client could rewrite its key so that a newer PUT of the key by
//!   another client went into a second slot, then restore it: GETs read its older
//!   value; and with a key whose public tag collides, it could answer GETs of a key it
//!   never wrote.)
//! - [`IndexKind::Ordered`]: a B-tree with the key bytes, for range scans (YCSB
//!   workload E). Costs the key plus roughly 40 bytes per entry.
//!
//! Tombstones stay in the index (a DELETE's version must still beat an older PUT that
//! a slower worker indexes later); lookups report them as deleted.

use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::sync::RwLock;

use hashbrown::HashTable;

use crate::error::{Error, Result};

/// Where the newest entry of a key lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Loc {
    /// Segment id.
    pub segment: u32,
    /// Offset of the entry within the segment.
    pub offset: u32,
    /// Entry length (header + key + value).
    pub len: u32,
    /// Entry version.
    pub version: u64,
    /// The entry is a DELETE.
    pub tombstone: bool,
}

/// Resolves keys of indexed entries (the pool implements it by reading the entry).
pub trait KeySource {
    /// Whether the entry at `loc` has key `key`.
    fn key_matches(&self, loc: &Loc, key: &[u8]) -> bool;
}

/// Which index variant to build.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IndexKind {
    /// Hash index (point lookups only).
    #[default]
    Hash,
    /// Ordered index (point lookups and scans).
    Ordered,
}

impl std::str::FromStr for IndexKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "hash" => Ok(IndexKind::Hash),
            "ordered" | "btree" => Ok(IndexKind::Ordered),
            o => Err(format!("unknown index '{o}' (expected hash or ordered)")),
        }
    }
}

/// What an [`Index::upsert`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upsert {
    /// The key was new.
    Inserted,
    /// The key's older entry was replaced; it is garbage now.
    Replaced(Loc),
    /// The index already held a newer entry; the offered one is garbage.
    Stale(Loc),
}

const SHARDS: usize = 64;

#[derive(Clone, Copy)]
struct Slot {
    version: u64,
    /// The key's secret 64-bit hash.
    tag: u64,
    segment: u32,
    offset: u32,
    len_flags: u32,
}

const TOMB_BIT: u32 = 1 << 31;

impl Slot {
    fn loc(&self) -> Loc {
        Loc {
            segment: self.segment,
            offset: self.offset,
            len: self.len_flags & !TOMB_BIT,
            version: self.version,
            tombstone: self.len_flags & TOMB_BIT != 0,
        }
    }
    fn new(loc: &Loc, tag: u64) -> Slot {
        Slot {
            version: loc.version,
            segment: loc.segment,
            offset: loc.offset,
            len_flags: (loc.len & !TOMB_BIT) | if loc.tombstone { TOMB_BIT } else { 0 },
            tag,
        }
    }
}

/// The table's hash of a slot: its tag (already a hash), the top bits used for the shard.
fn spread(tag: u64) -> u64 {
    tag.rotate_left(6)
}

struct HashIndex {
    /// SipHash-1-3 under keys drawn by the process: a client cannot choose keys whose
    /// tags collide.
    hasher: std::hash::RandomState,
    shards: Vec<RwLock<HashTable<Slot>>>,
}

impl HashIndex {
    fn new() -> HashIndex {
        HashIndex {
            hasher: std::hash::RandomState::new(),
            shards: (0..SHARDS).map(|_| RwLock::new(HashTable::new())).collect(),
        }
    }

    fn place(&self, key: &[u8]) -> (usize, u64) {
        let h = self.hasher.hash_one(key);
        ((h >> 58) as usize % SHARDS, h)
    }

    fn get(&self, key: &[u8], ks: &dyn KeySource, then: &mut dyn FnMut(&Loc)) -> Option<Loc> {
        let (s, tag) = self.place(key);
        let t = self.shards[s].read().unwrap_or_else(std::sync::PoisonError::into_inner);
        // The newest of the slots that match: more than one only when a client
        // rewrote the key of its own entry and restored it (see the module docs).
        let found = t
            .iter_hash(spread(tag))
            .filter(|sl| sl.tag == tag && ks.key_matches(&sl.loc(), key))
            .map(Slot::loc)
            .max_by_key(|l| l.version);
        if let Some(l) = &found {
            then(l);
        }
        found
    }

    fn upsert(&self, key: &[u8], loc: Loc, ks: &dyn KeySource, then: &mut dyn FnMut(&Upsert)) -> Upsert {
        let (s, tag) = self.place(key);
        let mut t = self.shards[s].write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let newest = t
            .iter_hash_mut(spread(tag))
            .filter(|sl| sl.tag == tag && ks.key_matches(&sl.loc(), key))
            .max_by_key(|sl| sl.version);
        let u = match newest {
            Some(sl) if sl.version >= loc.version => Upsert::Stale(sl.loc()),
            Some(sl) => {
                let old = sl.loc();
                *sl = Slot::new(&loc, tag);
                Upsert::Replaced(old)
            }
            None => {
                t.insert_unique(spread(tag), Slot::new(&loc, tag), |sl| spread(sl.tag));
                Upsert::Inserted
            }
        };
        then(&u);
        u
    }

    fn replace_exact(&self, key: &[u8], old: &Loc, new: Option<Loc>, ks: &dyn KeySource) -> bool {
        let (s, tag) = self.place(key);
        let mut t = self.shards[s].write().unwrap_or_else(std::sync::PoisonError::into_inner);
        // The slot that holds `old` itself (of several that match, the one meant).
        match t.find_entry(spread(tag), |sl| sl.tag == tag && sl.loc() == *old && ks.key_matches(&sl.loc(), key)) {
            Ok(e) => {
                match new {
                    Some(n) => *e.into_mut() = Slot::new(&n, tag),
                    None => {
                        e.remove();
                    }
                }
                true
            }
            _ => false,
        }
    }

    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().unwrap_or_else(std::sync::PoisonError::into_inner).len()).sum()
    }

    fn for_each(&self, f: &mut dyn FnMut(&Loc)) {
        for s in &self.shards {
            for sl in s.read().unwrap_or_else(std::sync::PoisonError::into_inner).iter() {
                f(&sl.loc());
            }
        }
    }
}

/// The volatile index (see the module docs).
pub struct Index {
    kind: IndexKind,
    hash: Option<HashIndex>,
    ordered: Option<RwLock<BTreeMap<Box<[u8]>, Loc>>>,
    /// Entries that are tombstones: keys deleted, not live (kept as each change
    /// happens, so counting live keys never walks the index).
    tombstones: std::sync::atomic::AtomicI64,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index").field("kind", &self.kind).field("len", &self.len()).finish()
    }
}

impl Index {
    /// An empty index of the given kind.
    pub fn new(kind: IndexKind) -> Index {
        match kind {
            IndexKind::Hash => {
                Index { kind, hash: Some(HashIndex::new()), ordered: None, tombstones: Default::default() }
            }
            IndexKind::Ordered => {
                Index { kind, hash: None, ordered: Some(RwLock::new(BTreeMap::new())), tombstones: Default::default() }
            }
        }
    }

    /// Which variant this is.
    pub fn kind(&self) -> IndexKind {
        self.kind
    }

    /// The newest entry of `key`, tombstones included.
    pub fn get(&self, key: &[u8], ks: &dyn KeySource) -> Option<Loc> {
        self.get_then(key, ks, &mut |_| {})
    }

    /// [`Index::get`], calling `then` with what it found before the look-up lets go of
    /// the index: a change of `key` (an upsert, the cleaner's [`Index::replace_exact`])
    /// comes wholly before the look-up or wholly after `then`. A server pins the
    /// entry's segment there, so the cleaner either sees the pin or has already moved
    /// the look-up on to the entry's new place.
    pub fn get_then(&self, key: &[u8], ks: &dyn KeySource, then: &mut dyn FnMut(&Loc)) -> Option<Loc> {
        match (&self.hash, &self.ordered) {
            (Some(h), _) => h.get(key, ks, then),
            (_, Some(o)) => {
                let m = o.read().unwrap_or_else(std::sync::PoisonError::into_inner);
                let found = m.get(key).copied();
                if let Some(l) = &found {
                    then(l);
                }
                found
            }
            _ => None,
        }
    }

    /// Installs `loc` for `key` if it is newer than what the index holds.
    pub fn upsert(&self, key: &[u8], loc: Loc, ks: &dyn KeySource) -> Upsert {
        self.upsert_then(key, loc, ks, &mut |_| {})
    }

    /// [`Index::upsert`], calling `then` with what it did before the upsert lets go of
    /// the index: whoever looks `key` up after the change also sees what `then` did (the
    /// pool's live-byte accounting, which the cleaner reads).
    pub fn upsert_then(&self, key: &[u8], loc: Loc, ks: &dyn KeySource, then: &mut dyn FnMut(&Upsert)) -> Upsert {
        let u = self.upsert_inner(key, loc, ks, then);
        match u {
            Upsert::Inserted => self.count_tombstones(None, Some(&loc)),
            Upsert::Replaced(old) => self.count_tombstones(Some(&old), Some(&loc)),
            Upsert::Stale(_) => {}
        }
        u
    }

    /// Counts the change of one entry from `old` to `new` in [`Index::tombstones`].
    fn count_tombstones(&self, old: Option<&Loc>, new: Option<&Loc>) {
        let d = i64::from(new.is_some_and(|l| l.tombstone)) - i64::from(old.is_some_and(|l| l.tombstone));
        if d != 0 {
            self.tombstones.fetch_add(d, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn upsert_inner(&self, key: &[u8], loc: Loc, ks: &dyn KeySource, then: &mut dyn FnMut(&Upsert)) -> Upsert {
        match (&self.hash, &self.ordered) {
            (Some(h), _) => h.upsert(key, loc, ks, then),
            (_, Some(o)) => {
                let mut m = o.write().unwrap_or_else(std::sync::PoisonError::into_inner);
                let u = match m.get_mut(key) {
                    Some(cur) if cur.version >= loc.version => Upsert::Stale(*cur),
                    Some(cur) => Upsert::Replaced(std::mem::replace(cur, loc)),
                    None => {
                        m.insert(key.into(), loc);
                        Upsert::Inserted
                    }
                };
                then(&u);
                u
            }
            _ => {
                then(&Upsert::Inserted);
                Upsert::Inserted
            }
        }
    }

    /// Replaces `key`'s entry with `new` (or removes it with `None`) only if the index
    /// still holds exactly `old`. The cleaner uses it to move entries and drop tombstones
    /// without undoing a concurrent update.
    pub fn replace_exact(&self, key: &[u8], old: &Loc, new: Option<Loc>, ks: &dyn KeySource) -> bool {
        let done = self.replace_exact_inner(key, old, new, ks);
        if done {
            self.count_tombstones(Some(old), new.as_ref());
        }
        done
    }

    fn replace_exact_inner(&self, key: &[u8], old: &Loc, new: Option<Loc>, ks: &dyn KeySource) -> bool {
        match (&self.hash, &self.ordered) {
            (Some(h), _) => h.replace_exact(key, old, new, ks),
            (_, Some(o)) => {
                let mut m = o.write().unwrap_or_else(std::sync::PoisonError::into_inner);
                match m.get_mut(key) {
                    Some(cur) if cur == old => {
                        match new {
                            Some(n) => *cur = n,
                            None => {
                                m.remove(key);
                            }
                        }
                        true
                    }
                    _ => false,
                }
            }
            _ => false,
        }
    }

    /// Up to `n` live (non-deleted) keys from `start` on, in key order.
    pub fn scan(&self, start: &[u8], n: usize) -> Result<Vec<(Vec<u8>, Loc)>> {
        self.scan_then(start, n, &mut |_, _| {})
    }

    /// [`Index::scan`], calling `then` with each key and entry found before the scan
    /// lets go of the index (see [`Index::get_then`]).
    pub fn scan_then(&self, start: &[u8], n: usize, then: &mut dyn FnMut(&[u8], &Loc)) -> Result<Vec<(Vec<u8>, Loc)>> {
        let o = self
            .ordered
            .as_ref()
            .ok_or_else(|| Error::invalid("scans need the ordered index: start the server with --index ordered"))?;
        let m = o.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(m.range::<[u8], _>((std::ops::Bound::Included(start), std::ops::Bound::Unbounded))
            .filter(|(_, l)| !l.tombstone)
            .take(n)
            .map(|(k, l)| {
                then(k, l);
                (k.to_vec(), *l)
            })
            .collect())
    }

    /// Entries held, tombstones included.
    pub fn len(&self) -> usize {
        match (&self.hash, &self.ordered) {
            (Some(h), _) => h.len(),
            (_, Some(o)) => o.read().unwrap_or_else(std::sync::PoisonError::into_inner).len(),
            _ => 0,
        }
    }

    /// Entries that are tombstones (deleted keys).
    pub fn tombstones(&self) -> usize {
        self.tombstones.load(std::sync::atomic::Ordering::Relaxed).max(0) as usize
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Visits every location (tombstones included), in no particular order.
    pub fn for_each(&self, mut f: impl FnMut(&Loc)) {
        match (&self.hash, &self.ordered) {
            (Some(h), _) => h.for_each(&mut f),
            (_, Some(o)) => o.read().unwrap_or_else(std::sync::PoisonError::into_inner).values().for_each(f),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Keys live "in the pool": here a map from (segment, offset) to key.
    struct Keys(HashMap<(u32, u32), Vec<u8>>);
    impl KeySource for Keys {
        fn key_matches(&self, loc: &Loc, key: &[u8]) -> bool {
            self.0.get(&(loc.segment, loc.offset)).is_some_and(|k| k == key)
        }
    }

    fn loc(seg: u32, off: u32, v: u64, tomb: bool) -> Loc {
        Loc { segment: seg, offset: off, len: 40, version: v, tombstone: tomb }
    }

    #[test]
    fn a_client_that_rewrites_its_own_key_cannot_shadow_a_newer_put_of_it() {
        // B's entry of K (v10) in B's writable segment 1; B rewrites its key in PM, A's
        // newer PUT of K (v11) finds no slot of K and takes a second one, B restores the
        // key: both slots match K. The first match in probe order was B's older one.
        let idx = Index::new(IndexKind::Hash);
        let mut keys = Keys(HashMap::new());
        let (b, a) = (loc(1, 0, 10, false), loc(2, 0, 11, false));
        keys.0.insert((1, 0), b"K".to_vec());
        assert_eq!(idx.upsert(b"K", b, &keys), Upsert::Inserted);
        keys.0.insert((1, 0), b"X".to_vec());
        keys.0.insert((2, 0), b"K".to_vec());
        assert_eq!(idx.upsert(b"K", a, &keys), Upsert::Inserted);
        keys.0.insert((1, 0), b"K".to_vec());
        assert_eq!(idx.get(b"K", &keys), Some(a));
        // The next PUT replaces the newest, and the stale duplicate stays B's garbage:
        // the cleaner's move of it finds its own slot, not A's.
        let c = loc(3, 0, 12, false);
        keys.0.insert((3, 0), b"K".to_vec());
        assert_eq!(idx.upsert(b"K", c, &keys), Upsert::Replaced(a));
        assert_eq!(idx.upsert(b"K", loc(4, 0, 11, false), &keys), Upsert::Stale(c));
        assert!(idx.replace_exact(b"K", &b, None, &keys));
        assert_eq!(idx.get(b"K", &keys), Some(c));
    }

    #[test]
    fn tombstones_are_counted_as_entries_change() {
        for kind in [IndexKind::Hash, IndexKind::Ordered] {
            let mut keys = Keys(HashMap::new());
            for i in 0..4u32 {
                keys.0.insert((0, i), b"a".to_vec());
                keys.0.insert((1, i), b"b".to_vec());
            }
            let idx = Index::new(kind);
            let tombs = |idx: &Index| {
                let mut n = 0;
                idx.for_each(|l| n += usize::from(l.tombstone));
                n
            };
            let steps: [&dyn Fn(&Index); 8] = [
                &|i| assert_eq!(i.upsert(b"a", loc(0, 0, 1, false), &keys), Upsert::Inserted),
                &|i| assert!(matches!(i.upsert(b"a", loc(0, 1, 2, true), &keys), Upsert::Replaced(_))),
                &|i| assert!(matches!(i.upsert(b"a", loc(0, 2, 1, true), &keys), Upsert::Stale(_))),
                &|i| assert_eq!(i.upsert(b"b", loc(1, 0, 3, true), &keys), Upsert::Inserted),
                &|i| assert!(i.replace_exact(b"b", &loc(1, 0, 3, true), Some(loc(1, 1, 3, true)), &keys)),
                &|i| assert!(!i.replace_exact(b"b", &loc(1, 0, 3, true), None, &keys)),
                &|i| assert!(matches!(i.upsert(b"a", loc(0, 3, 4, false), &keys), Upsert::Replaced(_))),
                &|i| assert!(i.replace_exact(b"b", &loc(1, 1, 3, true), None, &keys)),
            ];
            for (n, step) in steps.iter().enumerate() {
                step(&idx);
                assert_eq!(idx.tombstones(), tombs(&idx), "{kind:?}, after step {n}");
            }
            assert_eq!((idx.len(), idx.tombstones()), (1, 0));
        }
    }

    #[test]
    fn newest_version_wins_in_both_variants() {
        for kind in [IndexKind::Hash, IndexKind::Ordered] {
            let mut keys = Keys(HashMap::new());
            let idx = Index::new(kind);
            let n = 20_000u32;
            for i in 0..n {
                keys.0.insert((0, i), format!("user{i}").into_bytes());
                keys.0.insert((1, i), format!("user{i}").into_bytes());
            }
            for i in 0..n {
                assert_eq!(idx.upsert(format!("user{i}").as_bytes(), loc(0, i, 10, false), &keys), Upsert::Inserted);
            }
            for i in 0..n {
                let k = format!("user{i}");
                let v = if i % 2 == 0 { 5 } else { 15 };
                let r = idx.upsert(k.as_bytes(), loc(1, i, v, i % 3 == 0), &keys);
                if v == 5 {
                    assert!(matches!(r, Upsert::Stale(l) if l.version == 10));
                } else {
                    assert!(matches!(r, Upsert::Replaced(l) if l.version == 10));
                }
            }
            assert_eq!(idx.len(), n as usize);
            for i in 0..n {
                let l = idx.get(format!("user{i}").as_bytes(), &keys).unwrap();
                if i % 2 == 0 {
                    assert_eq!((l.segment, l.version, l.tombstone), (0, 10, false));
                } else {
                    assert_eq!((l.segment, l.version, l.tombstone), (1, 15, i % 3 == 0));
                }
            }
            assert!(idx.get(b"nope", &keys).is_none());
        }
    }

    #[test]
    fn replace_exact_only_when_unchanged() {
        let mut keys = Keys(HashMap::new());
        keys.0.insert((0, 0), b"k".to_vec());
        keys.0.insert((2, 8), b"k".to_vec());
        for kind in [IndexKind::Hash, IndexKind::Ordered] {
            let idx = Index::new(kind);
            idx.upsert(b"k", loc(0, 0, 3, false), &keys);
            assert!(!idx.replace_exact(b"k", &loc(0, 0, 2, false), Some(loc(2, 8, 3, false)), &keys));
            assert!(idx.replace_exact(b"k", &loc(0, 0, 3, false), Some(loc(2, 8, 3, false)), &keys));
            assert_eq!(idx.get(b"k", &keys).unwrap().segment, 2);
            assert!(idx.replace_exact(b"k", &loc(2, 8, 3, false), None, &keys));
            assert!(idx.is_empty());
        }
    }

    #[test]
    fn scan_needs_ordered_and_skips_tombstones() {
        let keys = Keys(HashMap::new());
        assert!(Index::new(IndexKind::Hash).scan(b"a", 3).unwrap_err().to_string().contains("--index ordered"));
        let idx = Index::new(IndexKind::Ordered);
        for (i, k) in ["a", "b", "c", "d"].iter().enumerate() {
            idx.upsert(k.as_bytes(), loc(0, i as u32, 1, *k == "c"), &keys);
        }
        let got: Vec<_> = idx.scan(b"b", 5).unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(got, vec![b"b".to_vec(), b"d".to_vec()]);
    }

    #[test]
    fn hash_slot_is_32_bytes() {
        assert_eq!(size_of::<Slot>(), 32);
    }
}
