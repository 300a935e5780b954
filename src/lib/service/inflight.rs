//! GETs in flight, per key: the server tells a PUT's client the smallest version any
//! GET of that key is still reading, so the client never rewrites that entry in place.
//!
//! Keys are tracked by a 64-bit hash: a collision can only make a client append when it
//! could have rewritten in place, never the reverse.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use hashbrown::HashMap;

/// In-flight GET versions by key, in parts: worker `w` records its GETs in part
/// [`crate::cpus::worker_part`]`(w)` (a GET ends on the worker that began it), so two
/// workers on two CPUs never write one cache line per GET; a PUT, much rarer here than
/// GETs, looks in every part.
pub struct InflightGets {
    hasher: foldhash::fast::FixedState,
    parts: Box<[Part]>,
}

/// One part: its own count and map, two cache lines apart from the next part's. Its
/// lock is its worker's but for a PUT's look (and workers past
/// [`crate::cpus::WORKER_PARTS`]).
#[derive(Default)]
#[repr(align(128))]
struct Part {
    /// GETs in flight in this part, so a PUT's reply skips its lock when there are none.
    total: AtomicUsize,
    readers: Mutex<HashMap<u64, Readers>>,
}

/// One GET in flight: what [`InflightGets::end`] needs to find it again (the key's hash,
/// not the key, so the server keeps no copy of it, and the part it is in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GetTicket {
    hash: u64,
    version: u64,
    part: usize,
}

/// The versions GETs of one key are reading: the first without an allocation (two GETs
/// of one key at once are rare), any others in `more`.
#[derive(Default)]
struct Readers {
    first: Option<u64>,
    more: Vec<u64>,
}

impl Readers {
    fn add(&mut self, v: u64) {
        if self.first.is_none() {
            self.first = Some(v);
        } else {
            self.more.push(v);
        }
    }

    /// Removes one reader of `v`; false if there was none.
    fn remove(&mut self, v: u64) -> bool {
        if self.first == Some(v) {
            self.first = self.more.pop();
            return true;
        }
        match self.more.iter().position(|&x| x == v) {
            Some(i) => {
                self.more.swap_remove(i);
                true
            }
            None => false,
        }
    }

    fn min(&self) -> Option<u64> {
        self.more.iter().copied().chain(self.first).min()
    }
}

impl Default for InflightGets {
    fn default() -> Self {
        InflightGets {
            hasher: foldhash::fast::FixedState::with_seed(0x6E7),
            parts: (0..crate::cpus::WORKER_PARTS).map(|_| Part::default()).collect(),
        }
    }
}

impl InflightGets {
    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// A GET of `key` that worker `worker` serves starts reading `version`; hand the
    /// ticket to [`Self::end`].
    pub fn begin(&self, worker: usize, key: &[u8], version: u64) -> GetTicket {
        let hash = self.hash(key);
        let part = crate::cpus::worker_part(worker);
        let p = &self.parts[part];
        // Counted before it is recorded: a PUT that sees zero cannot miss a recorded GET.
        p.total.fetch_add(1, Ordering::SeqCst);
        p.readers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(hash).or_default().add(version);
        GetTicket { hash, version, part }
    }

    /// That GET's data has been written to the client.
    pub fn end(&self, t: GetTicket) {
        let Some(p) = self.parts.get(t.part) else { return };
        let mut m = p.readers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(r) = m.get_mut(&t.hash) {
            if r.remove(t.version) {
                p.total.fetch_sub(1, Ordering::SeqCst);
            }
            if r.first.is_none() {
                m.remove(&t.hash);
            }
        }
    }

    /// Smallest version any in-flight GET of `key` reads (`u64::MAX` if none).
    pub fn min_version(&self, key: &[u8]) -> u64 {
        let hash = self.hash(key);
        let mut min = u64::MAX;
        for p in self.parts.iter().filter(|p| p.total.load(Ordering::SeqCst) > 0) {
            let m = p.readers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(v) = m.get(&hash).and_then(Readers::min) {
                min = min.min(v);
            }
        }
        min
    }

    /// GETs in flight, all keys.
    pub fn len(&self) -> usize {
        self.parts.iter().map(|p| p.total.load(Ordering::SeqCst)).sum()
    }

    /// Whether no GET is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_minimum_per_key() {
        let f = InflightGets::default();
        assert_eq!(f.min_version(b"a"), u64::MAX);
        let a7 = f.begin(0, b"a", 7);
        let a5 = f.begin(1, b"a", 5);
        let a5_again = f.begin(crate::cpus::WORKER_PARTS + 1, b"a", 5);
        f.begin(0, b"b", 1);
        assert_eq!(f.min_version(b"a"), 5);
        f.end(a5);
        assert_eq!(f.min_version(b"a"), 5, "the other GET of version 5 still reads it");
        f.end(a5_again);
        assert_eq!(f.min_version(b"a"), 7);
        f.end(a7);
        assert_eq!(f.min_version(b"a"), u64::MAX);
        f.end(a7);
        assert_eq!(f.len(), 1, "ending a GET twice counts it once");
    }
}
