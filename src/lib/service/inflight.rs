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
    shards: Vec<Mutex<HashMap<u64, Vec<u64>>>>,
    /// GETs in flight over all keys, so a PUT's reply skips the lock when there are none.
    total: AtomicUsize,
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
    fn slot(&self, key: &[u8]) -> (usize, u64) {
        let h = self.hasher.hash_one(key);
        ((h >> 59) as usize % SHARDS, h)
    }

    /// A GET of `key` starts reading `version`.
    pub fn begin(&self, key: &[u8], version: u64) {
        let (s, h) = self.slot(key);
        // Counted before it is recorded: a PUT that sees zero cannot miss a recorded GET.
        self.total.fetch_add(1, Ordering::SeqCst);
        self.shards[s].lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(h).or_default().push(version);
    }

    /// That GET's data has been written to the client.
    pub fn end(&self, key: &[u8], version: u64) {
        let (s, h) = self.slot(key);
        let mut m = self.shards[s].lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(v) = m.get_mut(&h) {
            if let Some(i) = v.iter().position(|&x| x == version) {
                v.swap_remove(i);
                self.total.fetch_sub(1, Ordering::SeqCst);
            }
            if v.is_empty() {
                m.remove(&h);
            }
        }
    }

    /// Smallest version any in-flight GET of `key` reads (`u64::MAX` if none).
    pub fn min_version(&self, key: &[u8]) -> u64 {
        if self.total.load(Ordering::SeqCst) == 0 {
            return u64::MAX;
        }
        let (s, h) = self.slot(key);
        let m = self.shards[s].lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        m.get(&h).and_then(|v| v.iter().min().copied()).unwrap_or(u64::MAX)
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
        f.begin(b"a", 7);
        f.begin(b"a", 5);
        f.begin(b"b", 1);
        assert_eq!(f.min_version(b"a"), 5);
        f.end(b"a", 5);
        assert_eq!(f.min_version(b"a"), 7);
        f.end(b"a", 7);
        assert_eq!(f.min_version(b"a"), u64::MAX);
        assert_eq!(f.len(), 1);
    }
}
