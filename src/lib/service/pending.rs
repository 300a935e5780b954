//! PUTs whose entries a client makes durable itself (RDMP-CC), between the allocation
//! that placed and sealed them and the moment the server counts and indexes them.
//!
//! The server learns that such a PUT finished only later (at its client's next request
//! or when the client leaves); a GET of the key in between must still see it once the
//! client was told it is durable. So a GET of a key with pending PUTs first checks
//! their slots ([`PendingPuts::take_key`]): an entry that verifies is indexed there and
//! then; one still being written is left for later.
//!
//! May import: `index` (locations) and the standard library.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// One placed, sealed, not yet counted entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PendingPut {
    /// Segment, its generation, slot offset, the slot's end.
    pub(crate) segment: u64,
    pub(crate) generation: u64,
    pub(crate) offset: u64,
    pub(crate) next_offset: u64,
    /// Version the allocation assigned.
    pub(crate) version: u64,
}

/// The pending PUTs of one server, by key.
#[derive(Debug, Default)]
pub(crate) struct PendingPuts {
    by_key: Mutex<HashMap<Vec<u8>, Vec<PendingPut>>>,
    /// Entries in `by_key` (a GET takes no lock while it is zero).
    n: AtomicUsize,
}

impl PendingPuts {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Vec<PendingPut>>> {
        self.by_key.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records `p` for `key`.
    pub(crate) fn add(&self, key: &[u8], p: PendingPut) {
        let mut m = self.map();
        m.entry(key.to_vec()).or_default().push(p);
        self.n.fetch_add(1, Ordering::AcqRel);
    }

    /// Forgets `p` of `key` (its owner counted it, or gave it up); true if it was there.
    pub(crate) fn remove(&self, key: &[u8], p: &PendingPut) -> bool {
        let mut m = self.map();
        let Some(v) = m.get_mut(key) else { return false };
        let before = v.len();
        v.retain(|q| q != p);
        let gone = before - v.len();
        if v.is_empty() {
            m.remove(key);
        }
        self.n.fetch_sub(gone, Ordering::AcqRel);
        gone > 0
    }

    /// Runs `done(p)` on every pending PUT of `key` under the table's lock; those for
    /// which it returns true (finished and indexed) are forgotten.
    pub(crate) fn take_key(&self, key: &[u8], mut done: impl FnMut(&PendingPut) -> bool) {
        if self.n.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut m = self.map();
        let Some(v) = m.get_mut(key) else { return };
        let before = v.len();
        v.retain(|p| !done(p));
        let gone = before - v.len();
        if v.is_empty() {
            m.remove(key);
        }
        self.n.fetch_sub(gone, Ordering::AcqRel);
    }

    /// [`PendingPuts::take_key`] for every key.
    pub(crate) fn take_all(&self, mut done: impl FnMut(&[u8], &PendingPut) -> bool) {
        if self.n.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut m = self.map();
        let mut gone = 0;
        m.retain(|key, v| {
            let before = v.len();
            v.retain(|p| !done(key, p));
            gone += before - v.len();
            !v.is_empty()
        });
        self.n.fetch_sub(gone, Ordering::AcqRel);
    }

    /// Pending PUTs in the table.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.n.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(offset: u64, version: u64) -> PendingPut {
        PendingPut { segment: 2, generation: 1, offset, next_offset: offset + 64, version }
    }

    #[test]
    fn add_take_and_remove() {
        let t = PendingPuts::default();
        t.add(b"a", p(128, 5));
        t.add(b"a", p(192, 6));
        t.add(b"b", p(256, 7));
        assert_eq!(t.len(), 3);
        let mut seen = Vec::new();
        t.take_key(b"a", |q| {
            seen.push(q.version);
            q.version == 6
        });
        assert_eq!(seen, [5, 6]);
        assert_eq!(t.len(), 2);
        assert!(t.remove(b"a", &p(128, 5)));
        assert!(!t.remove(b"a", &p(128, 5)), "already gone");
        assert!(t.remove(b"b", &p(256, 7)));
        assert_eq!(t.len(), 0);
        t.take_key(b"a", |_| panic!("nothing is pending"));
    }
}
