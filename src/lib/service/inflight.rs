//! GETs in flight, per key: the server tells a PUT's client the smallest version any
//! GET of that key is still reading, so the client never rewrites that entry in place.
//!
//! Keys are tracked by a 64-bit hash: a collision can only make a client append when it
//! could have rewritten in place, never the reverse.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use hashbrown::HashMap;

const SHARDS: usize = 32;

/// In-flight GET versions by key.
pub struct InflightGets {
    hasher: foldhash::fast::FixedState,
    shards: Vec<Mutex<HashMap<u64, Readers>>>,
    /// GETs in flight over all keys, so a PUT's reply skips the lock when there are none.
    total: AtomicUsize,
}

/// One GET in flight: what [`InflightGets::end`] needs to find it again (the key's hash,
/// not the key, so the server keeps no copy of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GetTicket {
    hash: u64,
    version: u64,
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
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            total: AtomicUsize::new(0),
        }
    }
}

impl InflightGets {
    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    fn shard(&self, hash: u64) -> &Mutex<HashMap<u64, Readers>> {
        &self.shards[(hash >> 59) as usize % SHARDS]
    }

    /// A GET of `key` starts reading `version`; hand the ticket to [`Self::end`].
    pub fn begin(&self, key: &[u8], version: u64) -> GetTicket {
        let hash = self.hash(key);
        // Counted before it is recorded: a PUT that sees zero cannot miss a recorded GET.
        self.total.fetch_add(1, Ordering::SeqCst);
        self.shard(hash)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(hash)
            .or_default()
            .add(version);
        GetTicket { hash, version }
    }

    /// That GET's data has been written to the client.
    pub fn end(&self, t: GetTicket) {
        let mut m = self.shard(t.hash).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(r) = m.get_mut(&t.hash) {
            if r.remove(t.version) {
                self.total.fetch_sub(1, Ordering::SeqCst);
            }
            if r.first.is_none() {
                m.remove(&t.hash);
            }
        }
    }

    /// Smallest version any in-flight GET of `key` reads (`u64::MAX` if none).
    pub fn min_version(&self, key: &[u8]) -> u64 {
        if self.total.load(Ordering::SeqCst) == 0 {
            return u64::MAX;
        }
        let hash = self.hash(key);
        let m = self.shard(hash).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        m.get(&hash).and_then(Readers::min).unwrap_or(u64::MAX)
    }

    /// GETs in flight, all keys.
    pub fn len(&self) -> usize {
        self.total.load(Ordering::SeqCst)
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
        let a7 = f.begin(b"a", 7);
        let a5 = f.begin(b"a", 5);
        let a5_again = f.begin(b"a", 5);
        f.begin(b"b", 1);
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
