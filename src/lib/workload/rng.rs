//! The seeded random source behind every generator.
//!
//! YCSB draws from `ThreadLocalRandom`, which cannot be seeded. boomkv draws from
//! ChaCha8 (`rand_chacha`, whose output is specified and portable), seeded with the
//! run's seed and using the thread id as the ChaCha stream number, so every thread
//! of every run with the same `(seed, thread id)` sees the same sequence of numbers
//! on every platform. Doubles and bounded integers are derived here by fixed
//! formulas (not by `rand`'s distribution code, which may change between versions).

use std::convert::Infallible;

use rand::{Rng, SeedableRng, TryRng};
use rand_chacha::ChaCha8Rng;

/// A seeded, reproducible random source (ChaCha8; one stream per thread).
#[derive(Clone, Debug)]
pub struct WorkloadRng {
    inner: ChaCha8Rng,
}

impl WorkloadRng {
    /// The random source for thread `stream` of a run seeded with `seed`.
    pub fn new(seed: u64, stream: u64) -> WorkloadRng {
        let mut inner = ChaCha8Rng::seed_from_u64(seed);
        inner.set_stream(stream);
        WorkloadRng { inner }
    }

    /// 64 uniformly random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }

    /// A double uniform in `[0, 1)` with 53 random bits, like Java's `Random.nextDouble()`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// An integer uniform in `[0, n)`, without modulo bias (Lemire's multiply-and-reject).
    ///
    /// `n == 0` returns 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = u128::from(self.next_u64()) * u128::from(n);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// An integer uniform in `[lo, hi]` (inclusive).
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        debug_assert!(lo <= hi);
        let span = hi.wrapping_sub(lo).wrapping_add(1);
        if span == 0 {
            // The full 64-bit range.
            return self.next_u64();
        }
        lo + self.below(span)
    }
}

/// `rand`'s interface (an infallible [`TryRng`], hence a [`rand::Rng`]), for
/// distributions from `rand_distr` (the true Zipf of `--theta`). The numbers are this
/// source's ChaCha8 stream.
impl TryRng for WorkloadRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok(self.inner.next_u32())
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(self.inner.next_u64())
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), Infallible> {
        self.inner.fill_bytes(dest);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_and_stream_same_sequence() {
        let mut a = WorkloadRng::new(7, 3);
        let mut b = WorkloadRng::new(7, 3);
        let mut c = WorkloadRng::new(7, 4);
        let va: Vec<u64> = (0..16).map(|_| a.next_u64()).collect();
        let vb: Vec<u64> = (0..16).map(|_| b.next_u64()).collect();
        let vc: Vec<u64> = (0..16).map(|_| c.next_u64()).collect();
        assert_eq!(va, vb);
        assert_ne!(va, vc);
    }

    #[test]
    fn doubles_in_unit_interval_and_bounded_ints_in_range() {
        let mut r = WorkloadRng::new(1, 0);
        let mut hist = [0u32; 10];
        for _ in 0..100_000 {
            let d = r.next_f64();
            assert!((0.0..1.0).contains(&d));
            let i = r.below(10);
            hist[i as usize] += 1;
            let j = r.between(5, 7);
            assert!((5..=7).contains(&j));
        }
        // Each bucket expects 10_000 with sd ~95; 600 is more than 6 sd.
        for &h in &hist {
            assert!((9_400..=10_600).contains(&h), "{hist:?}");
        }
        assert_eq!(r.below(0), 0);
        assert_eq!(r.between(9, 9), 9);
    }
}
