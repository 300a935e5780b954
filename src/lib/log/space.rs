//! Space accounting: what the log has spent of the pool, and what in-place updates saved.
//!
//! The counters are cumulative since the pool was opened; live and garbage bytes are
//! kept per segment by the [`Pool`](super::Pool) as entries are indexed and superseded.

use std::sync::atomic::{AtomicU64, Ordering};

/// Cumulative counters of log writes since open.
#[derive(Debug, Default)]
pub struct SpaceCounters {
    /// Slot bytes appended.
    pub bytes_appended: AtomicU64,
    /// Entry bytes rewritten in place (bytes an append-only log would have appended).
    pub bytes_in_place: AtomicU64,
    /// Entries appended.
    pub entries_appended: AtomicU64,
    /// Slot bytes the cleaner copied.
    pub bytes_cleaned: AtomicU64,
    /// Entries rewritten in place.
    pub entries_in_place: AtomicU64,
}

/// A snapshot of the pool's space use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SpaceReport {
    /// Slot bytes appended since open.
    pub bytes_appended: u64,
    /// Bytes rewritten in place since open (saved against append-only).
    pub bytes_in_place: u64,
    /// Entries appended since open.
    pub entries_appended: u64,
    /// Entries rewritten in place since open.
    pub entries_in_place: u64,
    /// Slot bytes the cleaner copied since open.
    pub bytes_cleaned: u64,
    /// Logical bytes written since open: appended + in place.
    pub logical_bytes: u64,
    /// Bytes of entry slots in the pool (appended, including before open).
    pub pm_bytes_used: u64,
    /// Bytes of the newest entry of every key (tombstones included).
    pub live_bytes: u64,
    /// Used bytes that are not live.
    pub garbage_bytes: u64,
    /// Segments allocated.
    pub segments_in_use: u64,
    /// Bytes of allocated segments.
    pub segment_bytes: u64,
}

impl SpaceCounters {
    /// Builds a report from the counters and the pool's per-segment totals.
    pub fn report(&self, segments_in_use: u64, segment_size: u64, used: u64, live: u64) -> SpaceReport {
        let a = self.bytes_appended.load(Ordering::Relaxed);
        let i = self.bytes_in_place.load(Ordering::Relaxed);
        SpaceReport {
            bytes_appended: a,
            bytes_in_place: i,
            entries_appended: self.entries_appended.load(Ordering::Relaxed),
            entries_in_place: self.entries_in_place.load(Ordering::Relaxed),
            bytes_cleaned: self.bytes_cleaned.load(Ordering::Relaxed),
            logical_bytes: a + i,
            pm_bytes_used: used,
            live_bytes: live.min(used),
            garbage_bytes: used.saturating_sub(live),
            segments_in_use,
            segment_bytes: segments_in_use * segment_size,
        }
    }
}
