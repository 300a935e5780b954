//! Sampled timings of the server's request phases, measured in place.
//!
//! Every [`SAMPLE_EVERY`]-th PUT (DELETE) and GET a worker serves is timed step by step
//! (the commit's steps through [`crate::log::CommitTimes`])
//! with the monotonic clock; the others are not, so the clock reads (tens of ns each on
//! a VM) stay off the typical request. Benchmarks read the medians through the stats
//! ([`PhaseReport`]) to show where a request's time goes inside the server, next to the
//! microbenchmarked components of the breakdown, which miss cache and cross-core
//! effects of the real request path.

use std::sync::Mutex;
use std::time::Instant;

use hdrhistogram::Histogram;

/// One request in this many (per worker) is timed.
pub const SAMPLE_EVERY: u32 = 64;

/// A timed step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// PUT: bounds, lengths and checksum of the entry in PM.
    PutValidate,
    /// PUT: copying the key, taking a version and computing the entry's seal.
    PutSeal,
    /// PUT: the entry's lines written back and fenced (an append's include its version).
    PutWriteback,
    /// PUT: the second persist: `count` (append) or `version_num` (in place).
    PutSecondPersist,
    /// PUT: the index upsert and the space accounting.
    PutIndex,
    /// PUT: in-flight GET lookup and posting the reply.
    PutReply,
    /// PUT: from the commit's start to the reply posted.
    PutTotal,
    /// GET: the index lookup (the key compared in PM).
    GetLookup,
    /// GET: posting the entry (BOOM: WRITE_WITH_IMM into the client's buffer; RDMP: the
    /// location reply; RPC: the copy to DRAM and the SEND).
    GetWrite,
    /// GET: from the lookup's start to the data (or reply) posted.
    GetTotal,
}

const PHASES: usize = 10;

/// Times one sampled GET: the lookup, then posting the data (or reply).
pub struct GetTimer {
    t0: Instant,
    lookup: u64,
}

impl GetTimer {
    /// Starts when `sampled`.
    pub fn start(sampled: bool) -> Option<GetTimer> {
        sampled.then(|| GetTimer { t0: Instant::now(), lookup: 0 })
    }

    /// The index lookup is done.
    pub fn looked_up(t: &mut Option<GetTimer>) {
        if let Some(t) = t {
            t.lookup = t.t0.elapsed().as_nanos() as u64;
        }
    }

    /// The data (or reply) is posted: records the GET.
    pub fn posted(t: Option<GetTimer>, phases: &Phases) {
        if let Some(t) = t {
            let total = t.t0.elapsed().as_nanos() as u64;
            phases.record(&[
                (Phase::GetLookup, t.lookup),
                (Phase::GetWrite, total.saturating_sub(t.lookup)),
                (Phase::GetTotal, total),
            ]);
        }
    }
}

/// The histograms of every phase.
pub struct Phases {
    h: Mutex<Vec<Histogram<u64>>>,
}

impl Default for Phases {
    fn default() -> Self {
        let h = (0..PHASES).map(|_| crate::measure::new_histogram()).collect();
        Phases { h: Mutex::new(h) }
    }
}

impl Phases {
    /// Records one sampled request's steps (nanoseconds).
    pub fn record(&self, steps: &[(Phase, u64)]) {
        let mut h = self.h.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for &(p, ns) in steps {
            // The histograms resize themselves; a value they still cannot hold is dropped.
            let _ = h[p as usize].record(ns.max(1));
        }
    }

    /// Medians so far.
    pub fn report(&self) -> PhaseReport {
        let h = self.h.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let p50 = |p: Phase| {
            let h = &h[p as usize];
            if h.is_empty() {
                0.0
            } else {
                h.value_at_quantile(0.5) as f64 / 1000.0
            }
        };
        PhaseReport {
            sample_every: SAMPLE_EVERY,
            put_samples: h[Phase::PutTotal as usize].len(),
            put_validate_us: p50(Phase::PutValidate),
            put_seal_us: p50(Phase::PutSeal),
            put_writeback_us: p50(Phase::PutWriteback),
            put_second_persist_us: p50(Phase::PutSecondPersist),
            put_index_us: p50(Phase::PutIndex),
            put_reply_us: p50(Phase::PutReply),
            put_total_us: p50(Phase::PutTotal),
            get_samples: h[Phase::GetTotal as usize].len(),
            get_lookup_us: p50(Phase::GetLookup),
            get_write_us: p50(Phase::GetWrite),
            get_total_us: p50(Phase::GetTotal),
        }
    }
}

/// Medians (microseconds) of the sampled phases, in the server's stats.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PhaseReport {
    /// One request in this many is timed.
    pub sample_every: u32,
    /// PUTs and DELETEs timed.
    pub put_samples: u64,
    /// [`Phase::PutValidate`].
    pub put_validate_us: f64,
    /// [`Phase::PutSeal`] (absent from servers older than the seal: 0).
    #[serde(default)]
    pub put_seal_us: f64,
    /// [`Phase::PutWriteback`].
    pub put_writeback_us: f64,
    /// [`Phase::PutSecondPersist`].
    pub put_second_persist_us: f64,
    /// [`Phase::PutIndex`].
    pub put_index_us: f64,
    /// [`Phase::PutReply`].
    pub put_reply_us: f64,
    /// [`Phase::PutTotal`].
    pub put_total_us: f64,
    /// GETs timed.
    pub get_samples: u64,
    /// [`Phase::GetLookup`].
    pub get_lookup_us: f64,
    /// [`Phase::GetWrite`].
    pub get_write_us: f64,
    /// [`Phase::GetTotal`].
    pub get_total_us: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_gives_medians_in_microseconds() {
        let p = Phases::default();
        assert_eq!(p.report().put_samples, 0);
        for ns in [1000, 2000, 3000] {
            p.record(&[(Phase::PutIndex, ns), (Phase::PutTotal, ns * 10)]);
        }
        p.record(&[(Phase::GetLookup, 500), (Phase::GetTotal, 900)]);
        let r = p.report();
        assert_eq!(r.put_samples, 3);
        assert_eq!(r.get_samples, 1);
        assert!((r.put_index_us - 2.0).abs() < 0.01, "{r:?}");
        assert!((r.put_total_us - 20.0).abs() < 0.05, "{r:?}");
        assert!((r.get_lookup_us - 0.5).abs() < 0.01, "{r:?}");
        assert_eq!(r.put_validate_us, 0.0);
    }
}
