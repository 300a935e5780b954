//! Cooperative write-back (the paper's section 3.3).
//!
//! The worker that owns a PUT splits the write-back of a large entry into address
//! ranges on its own queue and works through them; idle workers steal ranges from
//! other workers' queues instead of only polling. Each range is written back and fenced
//! by whichever thread runs it; the owner continues (bumps `count`, replies) only when
//! every range of its entry is done. With it off, or for entries of one range, the
//! owner writes everything back itself.
//!
//! Idle workers keep looking for ranges only while the server is busy: once a worker
//! has had no request and no worker has queued a range for a second, it parks on its
//! receive queue (see the server's worker loop) and looks again after each park (5 ms
//! at most). So the first large PUTs after a quiet second, and PUTs rarer than one a
//! second, are written back by their owner alone; the price of helping those too was
//! every idle worker waking 5000 times a second for ever.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::pmem::Media;

struct Job {
    remaining: AtomicUsize,
    failed: AtomicBool,
}

struct Range {
    off: u64,
    len: usize,
    job: Arc<Job>,
}

/// Work-stealing queues of write-back ranges, one per worker.
pub struct CoopWriteback {
    queues: Vec<Mutex<VecDeque<Range>>>,
    enabled: bool,
    chunk: usize,
    ranges: AtomicU64,
    steals: AtomicU64,
}

/// Counters of cooperative write-back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CoopStats {
    /// Ranges queued.
    pub ranges: u64,
    /// Ranges run by a worker other than the owner.
    pub steals: u64,
}

impl CoopWriteback {
    /// Queues for `workers` workers; entries larger than `chunk` bytes are split.
    pub fn new(workers: usize, enabled: bool, chunk: usize) -> CoopWriteback {
        CoopWriteback {
            queues: (0..workers.max(1)).map(|_| Mutex::new(VecDeque::new())).collect(),
            enabled: enabled && workers > 1,
            chunk: chunk.max(crate::pmem::CACHE_LINE),
            ranges: AtomicU64::new(0),
            steals: AtomicU64::new(0),
        }
    }

    /// Whether ranges are shared between workers.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Ranges queued so far by every worker (one relaxed load: idle workers watch it to
    /// tell a server that writes large entries from a quiet one).
    pub fn ranges_queued(&self) -> u64 {
        self.ranges.load(Ordering::Relaxed)
    }

    /// Counters so far.
    pub fn stats(&self) -> CoopStats {
        CoopStats { ranges: self.ranges.load(Ordering::Relaxed), steals: self.steals.load(Ordering::Relaxed) }
    }

    /// Writes back and fences `[off, off + len)` of `media` for `worker`, sharing the
    /// ranges with idle workers; returns when all of it is durable.
    pub fn writeback(&self, worker: usize, media: &Media, off: u64, len: usize) -> Result<()> {
        if !self.enabled || len <= self.chunk {
            return media.persist(off, len);
        }
        let n = len.div_ceil(self.chunk);
        let job = Arc::new(Job { remaining: AtomicUsize::new(n), failed: AtomicBool::new(false) });
        let q = &self.queues[worker % self.queues.len()];
        {
            let mut q = q.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for i in 0..n {
                let o = i * self.chunk;
                q.push_back(Range { off: off + o as u64, len: self.chunk.min(len - o), job: job.clone() });
            }
        }
        self.ranges.fetch_add(n as u64, Ordering::Relaxed);
        // Work through our own queue from the front; thieves take from the back.
        loop {
            let r = q.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop_front();
            match r {
                Some(r) => run(media, r),
                None => break,
            }
        }
        let mut spins = 0u32;
        while job.remaining.load(Ordering::Acquire) != 0 {
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        if job.failed.load(Ordering::Acquire) {
            return Err(Error::invalid("a cooperative write-back range failed"));
        }
        Ok(())
    }

    /// Called by an idle `worker`: runs one range stolen from another worker's queue.
    /// Returns whether it found one.
    pub fn help(&self, worker: usize, media: &Media) -> bool {
        if !self.enabled {
            return false;
        }
        let n = self.queues.len();
        for k in 1..n {
            let victim = (worker + k) % n;
            let r = self.queues[victim].lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop_back();
            if let Some(r) = r {
                self.steals.fetch_add(1, Ordering::Relaxed);
                run(media, r);
                return true;
            }
        }
        false
    }
}

fn run(media: &Media, r: Range) {
    if media.persist(r.off, r.len).is_err() {
        r.job.failed.store(true, Ordering::Release);
    }
    r.job.remaining.fetch_sub(1, Ordering::AcqRel);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmem::FlushKind;

    #[test]
    fn owner_and_helpers_together_make_everything_durable() {
        let media = Media::simulated(1 << 20, FlushKind::None).unwrap();
        media.map().write(0, &[7u8; 256 << 10]).unwrap();
        let coop = CoopWriteback::new(2, true, 4096);
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    if !coop.help(1, &media) {
                        std::thread::yield_now();
                    }
                }
            });
            for _ in 0..20 {
                coop.writeback(0, &media, 0, 256 << 10).unwrap();
            }
            stop.store(true, Ordering::Relaxed);
        });
        let d = media.durable_image().unwrap();
        assert!(d[..256 << 10].iter().all(|&b| b == 7), "every range reached the durable image");
        let st = coop.stats();
        assert_eq!(st.ranges, 20 * 64);
        assert!(st.steals <= st.ranges);
    }

    #[test]
    fn disabled_or_single_worker_writes_back_alone() {
        let media = Media::simulated(1 << 20, FlushKind::None).unwrap();
        media.map().write(0, &[1u8; 64 << 10]).unwrap();
        for c in [CoopWriteback::new(4, false, 4096), CoopWriteback::new(1, true, 4096)] {
            c.writeback(0, &media, 0, 64 << 10).unwrap();
            assert_eq!(c.stats().ranges, 0);
            assert!(!c.help(1, &media));
        }
        assert!(media.durable_image().unwrap()[..64 << 10].iter().all(|&b| b == 1));
    }
}
