//! Number generators with YCSB's algorithms and constants (`site.ycsb.generator`).
//!
//! | YCSB class | here | notes |
//! |---|---|---|
//! | `Utils.fnvhash64` | [`fnvhash64`] | bit-exact, including `Math.abs` |
//! | `ZipfianGenerator` | [`ZipfianGenerator`] | Gray et al. (SIGMOD'94), incremental zeta, YCSB's quirks kept |
//! | `ScrambledZipfianGenerator` | [`ScrambledZipfianGenerator::ycsb`] | 10^10 items, zetan 26.46902820178302, FNV-64 fold |
//! | (none) | [`ScrambledZipfianGenerator::with_theta`], [`TrueZipf`] | `--theta`: any theta >= 0, a true Zipf over the real key span (`rand_distr::Zipf`) |
//! | `SkewedLatestGenerator` | [`SkewedLatestGenerator`] | over an [`AcknowledgedCounter`] |
//! | `HotspotIntegerGenerator` | [`HotspotGenerator`] | bad fractions are errors, not silently 0 |
//! | `UniformLongGenerator` | [`UniformGenerator`] | without modulo bias |
//! | `SequentialGenerator` | [`SequentialGenerator`] | counter shared by all threads |
//! | `ExponentialGenerator` | [`ExponentialGenerator`] | `exponential.percentile`, `exponential.frac` |
//! | `AcknowledgedCounterGenerator` | [`AcknowledgedCounter`] | same 2^20 window limit |
//! | `DiscreteGenerator` | [`DiscreteGenerator`] | same normalisation and walk |
//!
//! Generators take the random source as an argument ([`WorkloadRng`]) instead of
//! using a thread-local one, which is what makes streams reproducible. Where YCSB
//! truncates key numbers to `int` (`nextValue().intValue()`), boomkv keeps 64 bits;
//! the two agree for key numbers below 2^31.
//!
//! ## Zeta without the O(n) cost
//!
//! YCSB sums `zeta(n, theta) = sum_{i=1..n} i^-theta` term by term: over a minute for
//! 10^8 items, and hours for its own 10^10-item scrambled generator at any theta
//! other than 0.99 (hence its hard-coded constant). [`zeta`] sums the first terms
//! directly (bit-identical to YCSB's loop for n <= 10,000) and the tail with the
//! Euler-Maclaurin formula, accurate to about 1e-15 relative, in constant time:
//! `zeta(10^10, 0.99)` reproduces YCSB's constant 26.46902820178302.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::rng::WorkloadRng;
use crate::error::{Error, Result};

/// YCSB's default Zipfian constant (`ZipfianGenerator.ZIPFIAN_CONSTANT`).
pub const ZIPFIAN_CONSTANT: f64 = 0.99;

/// The item count of YCSB's scrambled Zipfian inner generator
/// (`ScrambledZipfianGenerator.ITEM_COUNT`, 10^10).
pub const YCSB_ITEM_COUNT: u64 = 10_000_000_000;

/// YCSB's precomputed `zeta(10^10, 0.99)` (`ScrambledZipfianGenerator.ZETAN`).
pub const YCSB_ZETAN: f64 = 26.46902820178302;

/// FNV offset basis used by YCSB (`Utils.FNV_OFFSET_BASIS_64`).
pub const FNV_OFFSET_BASIS_64: u64 = 0xCBF2_9CE4_8422_2325;

/// FNV prime used by YCSB (`Utils.FNV_PRIME_64`).
pub const FNV_PRIME_64: u64 = 1_099_511_628_211;

/// YCSB's `Utils.fnvhash64`: FNV-1a over the 8 bytes of `val`, low byte first, then
/// `Math.abs` (so the result is non-negative except for the one input whose hash is
/// `i64::MIN`, exactly as in Java).
pub fn fnvhash64(val: i64) -> i64 {
    let mut hash = FNV_OFFSET_BASIS_64;
    let mut v = val;
    for _ in 0..8 {
        let octet = (v & 0xff) as u64;
        v >>= 8; // arithmetic shift, like Java's `>>`
        hash ^= octet;
        hash = hash.wrapping_mul(FNV_PRIME_64);
    }
    (hash as i64).wrapping_abs()
}

/// Number of leading terms of zeta summed one by one before switching to
/// Euler-Maclaurin.
const ZETA_DIRECT_TERMS: u64 = 10_000;

/// Below this index the Euler-Maclaurin tail is not used (its remainder term is
/// negligible from here on).
const ZETA_EM_START: u64 = 1_000;

/// `zeta(n, theta) = sum_{i=1..n} i^-theta` (YCSB's `zetastatic(n, theta)`).
pub fn zeta(n: u64, theta: f64) -> f64 {
    zeta_from(0, n, theta, 0.0)
}

/// `initial + sum_{i=st+1..n} i^-theta`: YCSB's incremental `zetastatic(st, n, theta,
/// initialsum)`, used when the item count grows from `st` to `n`.
pub fn zeta_from(st: u64, n: u64, theta: f64, initial: f64) -> f64 {
    if n <= st {
        return initial;
    }
    if n - st <= ZETA_DIRECT_TERMS {
        return direct_sum(st, n, theta, initial);
    }
    let (a, sum) =
        if st < ZETA_EM_START { (ZETA_EM_START, direct_sum(st, ZETA_EM_START, theta, initial)) } else { (st, initial) };
    sum + euler_maclaurin_tail(a, n, theta)
}

/// YCSB's loop: `for (i = st; i < n; i++) sum += 1 / Math.pow(i + 1, theta)`.
fn direct_sum(st: u64, n: u64, theta: f64, initial: f64) -> f64 {
    let mut sum = initial;
    for i in st..n {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

/// `sum_{i=a+1..b} i^-theta` by Euler-Maclaurin with terms up to the fifth derivative.
fn euler_maclaurin_tail(a: u64, b: u64, theta: f64) -> f64 {
    let (af, bf) = (a as f64, b as f64);
    let f = |x: f64| x.powf(-theta);
    // f'(x) = -t x^(-t-1); f'''(x) = -t(t+1)(t+2) x^(-t-3); f^(5) = -t(t+1)(t+2)(t+3)(t+4) x^(-t-5)
    let d1 = |x: f64| -theta * x.powf(-theta - 1.0);
    let c3 = theta * (theta + 1.0) * (theta + 2.0);
    let d3 = |x: f64| -c3 * x.powf(-theta - 3.0);
    let c5 = c3 * (theta + 3.0) * (theta + 4.0);
    let d5 = |x: f64| -c5 * x.powf(-theta - 5.0);
    let one_minus = 1.0 - theta;
    let ln_ratio = (bf / af).ln();
    let integral =
        if one_minus == 0.0 { ln_ratio } else { af.powf(one_minus) * (one_minus * ln_ratio).exp_m1() / one_minus };
    integral + (f(bf) - f(af)) / 2.0 + (d1(bf) - d1(af)) / 12.0 - (d3(bf) - d3(af)) / 720.0
        + (d5(bf) - d5(af)) / 30_240.0
}

fn check_theta(theta: f64) -> Result<()> {
    if !theta.is_finite() || theta <= 0.0 || theta == 1.0 {
        return Err(Error::invalid(format!(
            "zipfian theta must be a number > 0 and != 1 (Gray et al.'s generator divides by 1 - theta), got {theta}"
        )));
    }
    Ok(())
}

/// YCSB's `ZipfianGenerator`: items `min..=max`, `min` the most popular.
///
/// The algorithm is Gray et al., "Quickly Generating Billion-Record Synthetic
/// Databases" (SIGMOD'94), with YCSB's constants and behaviour:
/// `alpha = 1/(1-theta)`, `eta = (1-(2/n)^(1-theta)) / (1-zeta(2)/zetan)`; a uniform
/// `u` gives `min` if `u*zetan < 1`, `min+1` if `u*zetan < 1+0.5^theta`, else
/// `min + (long)(itemcount * (eta*u - eta + 1)^alpha)`.
///
/// As in YCSB, [`next_for`](Self::next_for) with a larger item count extends zeta
/// incrementally but recomputes `eta` with the item count given at construction,
/// and a smaller item count keeps the old zeta.
#[derive(Clone, Debug)]
pub struct ZipfianGenerator {
    base: u64,
    items: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    zeta2theta: f64,
    half_pow_theta: f64,
    count_for_zeta: u64,
}

impl ZipfianGenerator {
    /// Items `min..=max` with YCSB's constant 0.99.
    pub fn new(min: u64, max: u64) -> Result<ZipfianGenerator> {
        ZipfianGenerator::with_theta(min, max, ZIPFIAN_CONSTANT)
    }

    /// Items `min..=max` with Zipfian constant `theta` (zeta computed here).
    pub fn with_theta(min: u64, max: u64, theta: f64) -> Result<ZipfianGenerator> {
        check_theta(theta)?;
        let items = Self::item_count(min, max)?;
        ZipfianGenerator::with_zetan(min, max, theta, zeta(items, theta))
    }

    /// Items `min..=max` with a precomputed `zetan` (YCSB's four-argument constructor).
    pub fn with_zetan(min: u64, max: u64, theta: f64, zetan: f64) -> Result<ZipfianGenerator> {
        check_theta(theta)?;
        let items = Self::item_count(min, max)?;
        if !(zetan.is_finite() && zetan >= 1.0) {
            return Err(Error::invalid(format!("zipfian zetan must be >= 1, got {zetan}")));
        }
        let zeta2theta = zeta(2, theta);
        let mut g = ZipfianGenerator {
            base: min,
            items,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: 0.0,
            zeta2theta,
            half_pow_theta: 0.5f64.powf(theta),
            count_for_zeta: items,
        };
        g.eta = g.compute_eta();
        Ok(g)
    }

    fn item_count(min: u64, max: u64) -> Result<u64> {
        if min > max {
            return Err(Error::invalid(format!("zipfian range {min}..={max} is empty")));
        }
        (max - min).checked_add(1).ok_or_else(|| Error::invalid("zipfian range covers all 2^64 values"))
    }

    /// YCSB computes eta with the constructor's item count, also after the item count grows.
    fn compute_eta(&self) -> f64 {
        (1.0 - (2.0 / self.items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2theta / self.zetan)
    }

    /// The next value for the constructor's item count (YCSB `nextValue()`).
    pub fn next(&mut self, rng: &mut WorkloadRng) -> u64 {
        self.next_for(self.items, rng)
    }

    /// The next value for `itemcount` items (YCSB `nextLong(itemcount)`).
    pub fn next_for(&mut self, itemcount: u64, rng: &mut WorkloadRng) -> u64 {
        if itemcount > self.count_for_zeta {
            self.zetan = zeta_from(self.count_for_zeta, itemcount, self.theta, self.zetan);
            self.count_for_zeta = itemcount;
            self.eta = self.compute_eta();
        }
        let u = rng.next_f64();
        self.value_for(u, itemcount)
    }

    /// The value a uniform draw `u` in `[0, 1)` maps to, for `itemcount` items.
    pub fn value_for(&self, u: f64, itemcount: u64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + self.half_pow_theta {
            return self.base + 1;
        }
        // Java's (long) cast truncates toward zero; Rust's `as` does too (and saturates).
        self.base + (itemcount as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
    }

    /// The probability that [`next`](Self::next) returns `min + index`, as implied by
    /// the generator's formula (not by the exact Zipf law, which it approximates for
    /// `index >= 2`).
    pub fn probability(&self, index: u64) -> f64 {
        let lo = self.zetan.recip();
        let hi = (1.0 + self.half_pow_theta) / self.zetan;
        match index {
            0 => lo.min(1.0),
            1 => (hi.min(1.0) - lo.min(1.0)).max(0.0),
            k => {
                let n = self.items as f64;
                let u_at = |x: f64| {
                    let u = 1.0 + ((x / n).powf(1.0 - self.theta) - 1.0) / self.eta;
                    u.clamp(hi.min(1.0), 1.0)
                };
                (u_at(k as f64 + 1.0) - u_at(k as f64)).max(0.0)
            }
        }
    }

    /// The current zeta value (`zetan`).
    pub fn zetan(&self) -> f64 {
        self.zetan
    }

    /// The current `eta`.
    pub fn eta(&self) -> f64 {
        self.eta
    }

    /// The Zipfian constant.
    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// The item count given at construction.
    pub fn items(&self) -> u64 {
        self.items
    }
}

/// A true Zipf law over `n` items: rank `k` (0-based) has probability
/// `(k+1)^-theta / zeta(n, theta)`, for any `theta >= 0` (including 1).
///
/// This is `--theta`'s generator. It samples with `rand_distr::Zipf` (rejection-inversion,
/// Hörmann and Derflinger), which is exact, unlike Gray et al.'s formula in
/// [`ZipfianGenerator`] (exact for the first two ranks only, with rank 3 about 10 to 20%
/// too frequent and the tail too rare). Its draws depend on `rand_distr`'s algorithm,
/// not only on the uniform stream, so `--theta` streams are reproducible for a given
/// build, not across `rand_distr` major versions.
#[derive(Clone, Debug)]
pub struct TrueZipf {
    items: u64,
    theta: f64,
    dist: rand_distr::Zipf<f64>,
}

impl TrueZipf {
    /// A Zipf(`theta`) law over `items` ranks (`items >= 1`, `theta >= 0` and finite).
    pub fn new(items: u64, theta: f64) -> Result<TrueZipf> {
        if !theta.is_finite() || theta < 0.0 {
            return Err(Error::invalid(format!("zipfian theta must be a finite number >= 0, got {theta}")));
        }
        if items == 0 {
            return Err(Error::invalid("a Zipf law needs at least one item"));
        }
        let dist = rand_distr::Zipf::new(items as f64, theta)
            .map_err(|e| Error::invalid(format!("Zipf law over {items} items with theta {theta}: {e}")))?;
        Ok(TrueZipf { items, theta, dist })
    }

    /// The next rank, `0..items` (0 the most popular).
    pub fn next(&self, rng: &mut WorkloadRng) -> u64 {
        use rand_distr::Distribution;
        // The sample is an integer-valued float in 1..=items.
        let x = self.dist.sample(rng);
        (x as u64).clamp(1, self.items) - 1
    }

    /// The exact probability of rank `k` (0-based): `(k+1)^-theta / zeta(items, theta)`.
    pub fn probability(&self, k: u64) -> f64 {
        if k >= self.items {
            return 0.0;
        }
        ((k + 1) as f64).powf(-self.theta) / zeta(self.items, self.theta)
    }

    /// The number of items.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// The exponent.
    pub fn theta(&self) -> f64 {
        self.theta
    }
}

/// A fixed pseudo-random bijection of `0..n` (a 4-round Feistel network over FNV-64
/// with cycle walking).
///
/// It does not depend on the run's seed: every thread and every client process maps
/// ranks to the same keys, so they agree on which keys are hot.
#[derive(Clone, Debug)]
pub struct KeyPermutation {
    n: u64,
    half_bits: u32,
    mask: u64,
}

const FEISTEL_KEYS: [u64; 4] =
    [0x9E37_79B9_7F4A_7C15, 0xC2B2_AE3D_27D4_EB4F, 0x1656_67B1_9E37_79F9, 0x27D4_EB2F_1656_67C5];

impl KeyPermutation {
    /// A permutation of `0..n` (`n >= 1`).
    pub fn new(n: u64) -> KeyPermutation {
        let bits = if n <= 1 { 1 } else { 64 - (n - 1).leading_zeros() };
        let half_bits = bits.div_ceil(2).max(1);
        let mask = if half_bits >= 64 { u64::MAX } else { (1u64 << half_bits) - 1 };
        KeyPermutation { n: n.max(1), half_bits, mask }
    }

    fn round_trip(&self, x: u64) -> u64 {
        let mut left = x >> self.half_bits;
        let mut right = x & self.mask;
        for key in FEISTEL_KEYS {
            let f = (fnvhash64((right ^ key) as i64) as u64) & self.mask;
            let next_right = left ^ f;
            left = right;
            right = next_right;
        }
        (left << self.half_bits) | right
    }

    /// The image of `x` (`x < n`).
    pub fn apply(&self, x: u64) -> u64 {
        debug_assert!(x < self.n);
        let mut y = self.round_trip(x);
        while y >= self.n {
            y = self.round_trip(y);
        }
        y
    }
}

/// The rank generator behind a [`ScrambledZipfianGenerator`].
#[derive(Clone, Debug)]
pub enum ZipfRanks {
    /// YCSB's Gray et al. generator over 10^10 + 1 ranks (folded with FNV-64).
    Ycsb(ZipfianGenerator),
    /// A true Zipf law over the key span (`--theta`), scattered by a [`KeyPermutation`].
    True(TrueZipf, KeyPermutation),
}

/// YCSB's `ScrambledZipfianGenerator` (the default request distribution), and boomkv's
/// true-Zipf variant for `--theta`.
///
/// [`ycsb`](Self::ycsb) is exactly YCSB's: a Zipfian generator over 10^10 + 1 items
/// with theta 0.99 and the precomputed zetan 26.46902820178302, folded into the key
/// span with `min + fnvhash64(rank) % itemcount`. Because of the fold, the result is
/// not a Zipf law over the key span (YCSB issue 1495), and theta cannot change
/// without summing 10^10 terms (issues 685, 1620).
///
/// [`with_theta`](Self::with_theta) is boomkv's `--theta`: a true Zipf(theta) law
/// ([`TrueZipf`]) over the real key span, rank `r` becoming key `min + P(r)` for a
/// fixed bijection `P` ([`KeyPermutation`]), so the keys follow Zipf(theta) exactly,
/// scattered over the span. This is a documented difference from YCSB, even for
/// theta = 0.99.
#[derive(Clone, Debug)]
pub struct ScrambledZipfianGenerator {
    min: u64,
    itemcount: u64,
    ranks: ZipfRanks,
}

impl ScrambledZipfianGenerator {
    /// YCSB's generator for keys `min..=max`.
    pub fn ycsb(min: u64, max: u64) -> Result<ScrambledZipfianGenerator> {
        let itemcount = ZipfianGenerator::item_count(min, max)?;
        if itemcount > i64::MAX as u64 {
            return Err(Error::invalid("scrambled zipfian key span over 2^63"));
        }
        // YCSB: new ZipfianGenerator(0, ITEM_COUNT, 0.99, ZETAN), i.e. ITEM_COUNT + 1 items.
        let inner = ZipfianGenerator::with_zetan(0, YCSB_ITEM_COUNT, ZIPFIAN_CONSTANT, YCSB_ZETAN)?;
        Ok(ScrambledZipfianGenerator { min, itemcount, ranks: ZipfRanks::Ycsb(inner) })
    }

    /// A true Zipf(`theta`) law over keys `min..=max` (any `theta >= 0`), scattered by a
    /// fixed bijection.
    pub fn with_theta(min: u64, max: u64, theta: f64) -> Result<ScrambledZipfianGenerator> {
        let itemcount = ZipfianGenerator::item_count(min, max)?;
        let zipf = TrueZipf::new(itemcount, theta)?;
        Ok(ScrambledZipfianGenerator { min, itemcount, ranks: ZipfRanks::True(zipf, KeyPermutation::new(itemcount)) })
    }

    /// The next key number.
    pub fn next(&mut self, rng: &mut WorkloadRng) -> u64 {
        let rank = match &mut self.ranks {
            ZipfRanks::Ycsb(g) => g.next(rng),
            ZipfRanks::True(z, _) => z.next(rng),
        };
        self.key_of_rank(rank)
    }

    /// The key number that popularity rank `rank` (0 = most popular draw of the rank
    /// generator) maps to.
    pub fn key_of_rank(&self, rank: u64) -> u64 {
        match &self.ranks {
            ZipfRanks::Ycsb(_) => {
                let h = fnvhash64(rank as i64);
                self.min + h.rem_euclid(self.itemcount as i64) as u64
            }
            ZipfRanks::True(_, p) => self.min + p.apply(rank.min(self.itemcount - 1)),
        }
    }

    /// The rank generator.
    pub fn ranks(&self) -> &ZipfRanks {
        &self.ranks
    }

    /// The probability of popularity rank `rank` (for the YCSB generator, of the
    /// unfolded rank).
    pub fn rank_probability(&self, rank: u64) -> f64 {
        match &self.ranks {
            ZipfRanks::Ycsb(g) => g.probability(rank),
            ZipfRanks::True(z, _) => z.probability(rank),
        }
    }

    /// A short description for report headers.
    pub fn describe(&self) -> String {
        match &self.ranks {
            ZipfRanks::Ycsb(_) => "YCSB scrambled zipfian (Gray et al., theta 0.99, FNV fold)".into(),
            ZipfRanks::True(z, _) => format!("true Zipf theta {} over {} keys", z.theta(), self.itemcount),
        }
    }

    /// Number of keys in the span.
    pub fn item_count(&self) -> u64 {
        self.itemcount
    }
}

/// YCSB's `AcknowledgedCounterGenerator`: hands out increasing numbers (insert key
/// numbers) and tracks the highest one below which every number has been
/// acknowledged (the insert completed), so key choosers never pick a key whose
/// insert is still in flight.
///
/// Shared by all threads (`Arc`); [`next_value`](Self::next_value) is one atomic
/// add; [`acknowledge`](Self::acknowledge) takes a short lock. As in YCSB, at most
/// 2^20 numbers may be outstanding (handed out and not yet acknowledged).
#[derive(Debug)]
pub struct AcknowledgedCounter {
    next: AtomicU64,
    /// Every value below this has been acknowledged.
    limit: AtomicU64,
    pending: Mutex<BTreeSet<u64>>,
}

/// YCSB's acknowledgement window (`AcknowledgedCounterGenerator.WINDOW_SIZE`).
pub const ACK_WINDOW: u64 = 1 << 20;

impl AcknowledgedCounter {
    /// A counter whose first value is `start`; every value below `start` counts as
    /// acknowledged (the loaded records).
    pub fn new(start: u64) -> AcknowledgedCounter {
        AcknowledgedCounter {
            next: AtomicU64::new(start),
            limit: AtomicU64::new(start),
            pending: Mutex::new(BTreeSet::new()),
        }
    }

    /// The next number (YCSB `nextValue()`).
    pub fn next_value(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Marks `value` as done; advances the limit over every contiguous done value.
    pub fn acknowledge(&self, value: u64) -> Result<()> {
        let mut pending = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let limit = self.limit.load(Ordering::Acquire);
        if value < limit || pending.contains(&value) {
            return Err(Error::invalid(format!("insert key number {value} acknowledged twice")));
        }
        if value >= self.next.load(Ordering::Relaxed) {
            return Err(Error::invalid(format!("insert key number {value} acknowledged but never handed out")));
        }
        if value - limit >= ACK_WINDOW {
            return Err(Error::invalid(format!(
                "too many unacknowledged insertion keys: {value} is {} past the acknowledged limit {limit} (window {ACK_WINDOW})",
                value - limit
            )));
        }
        let mut new_limit = limit;
        if value == limit {
            new_limit += 1;
            while pending.remove(&new_limit) {
                new_limit += 1;
            }
            self.limit.store(new_limit, Ordering::Release);
        } else {
            pending.insert(value);
        }
        Ok(())
    }

    /// Every value below this has been acknowledged (YCSB's `lastValue()` + 1).
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }

    /// YCSB's `lastValue()`: the highest acknowledged value of the contiguous prefix,
    /// `None` if nothing is acknowledged (YCSB: -1).
    pub fn last_value(&self) -> Option<u64> {
        self.limit().checked_sub(1)
    }

    /// The value the next call to [`next_value`](Self::next_value) returns.
    pub fn peek_next(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }
}

/// YCSB's `SkewedLatestGenerator`: `last - zipfian(last)` where `last` is the
/// acknowledged limit of the insert counter, so recently inserted keys are the most
/// popular. The Zipfian part is per thread; its zeta grows incrementally as inserts
/// are acknowledged. With `--theta` the Zipfian part is a [`TrueZipf`] over `last`
/// items, rebuilt (in constant time) when `last` moves.
#[derive(Clone, Debug)]
pub struct SkewedLatestGenerator {
    basis: Arc<AcknowledgedCounter>,
    skew: LatestSkew,
}

#[derive(Clone, Debug)]
enum LatestSkew {
    Ycsb(ZipfianGenerator),
    True { theta: f64, zipf: TrueZipf },
}

impl SkewedLatestGenerator {
    /// Over `basis` with YCSB's Zipfian generator (theta 0.99).
    pub fn ycsb(basis: Arc<AcknowledgedCounter>) -> Result<SkewedLatestGenerator> {
        // YCSB: new ZipfianGenerator(basis.lastValue()) = items 0..lastValue-1.
        let items = basis.last_value().unwrap_or(0).max(1);
        let zipf = ZipfianGenerator::with_theta(0, items - 1, ZIPFIAN_CONSTANT)?;
        Ok(SkewedLatestGenerator { basis, skew: LatestSkew::Ycsb(zipf) })
    }

    /// Over `basis` with a true Zipf(`theta`) law (`--theta`).
    pub fn with_theta(basis: Arc<AcknowledgedCounter>, theta: f64) -> Result<SkewedLatestGenerator> {
        let items = basis.last_value().unwrap_or(0).max(1);
        let zipf = TrueZipf::new(items, theta)?;
        Ok(SkewedLatestGenerator { basis, skew: LatestSkew::True { theta, zipf } })
    }

    /// The next key number.
    pub fn next(&mut self, rng: &mut WorkloadRng) -> u64 {
        let max = match self.basis.last_value() {
            Some(m) if m > 0 => m,
            _ => return 0,
        };
        let rank = match &mut self.skew {
            LatestSkew::Ycsb(z) => z.next_for(max, rng),
            LatestSkew::True { theta, zipf } => {
                if zipf.items() != max {
                    // max >= 1 and theta was validated at construction.
                    if let Ok(z) = TrueZipf::new(max, *theta) {
                        *zipf = z;
                    }
                }
                zipf.next(rng)
            }
        };
        max - rank.min(max)
    }
}

/// YCSB's `HotspotIntegerGenerator`: a hot set (the first `hotset_fraction` of
/// `lower..=upper`) receives `hot_opn_fraction` of the draws, uniform within each set.
#[derive(Clone, Debug)]
pub struct HotspotGenerator {
    lower: u64,
    hot_interval: u64,
    cold_interval: u64,
    hot_opn_fraction: f64,
}

impl HotspotGenerator {
    /// Over `lower..=upper`.
    pub fn new(lower: u64, upper: u64, hotset_fraction: f64, hot_opn_fraction: f64) -> Result<HotspotGenerator> {
        if !(0.0..=1.0).contains(&hotset_fraction) {
            return Err(Error::invalid(format!("hotspotdatafraction must be in [0, 1], got {hotset_fraction}")));
        }
        if !(0.0..=1.0).contains(&hot_opn_fraction) {
            return Err(Error::invalid(format!("hotspotopnfraction must be in [0, 1], got {hot_opn_fraction}")));
        }
        let interval = ZipfianGenerator::item_count(lower, upper)?;
        // YCSB: (int) (interval * hotsetFraction)
        let hot_interval = (interval as f64 * hotset_fraction) as u64;
        Ok(HotspotGenerator { lower, hot_interval, cold_interval: interval - hot_interval, hot_opn_fraction })
    }

    /// The next key number.
    pub fn next(&mut self, rng: &mut WorkloadRng) -> u64 {
        let hot = rng.next_f64() < self.hot_opn_fraction;
        if (hot && self.hot_interval > 0) || self.cold_interval == 0 {
            self.lower + rng.below(self.hot_interval)
        } else {
            self.lower + self.hot_interval + rng.below(self.cold_interval)
        }
    }

    /// Number of keys in the hot set.
    pub fn hot_count(&self) -> u64 {
        self.hot_interval
    }
}

/// YCSB's `UniformLongGenerator`: uniform over `lb..=ub`.
#[derive(Clone, Debug)]
pub struct UniformGenerator {
    lb: u64,
    ub: u64,
}

impl UniformGenerator {
    /// Over `lb..=ub`.
    pub fn new(lb: u64, ub: u64) -> Result<UniformGenerator> {
        if lb > ub {
            return Err(Error::invalid(format!("uniform range {lb}..={ub} is empty")));
        }
        Ok(UniformGenerator { lb, ub })
    }

    /// The next value.
    pub fn next(&mut self, rng: &mut WorkloadRng) -> u64 {
        rng.between(self.lb, self.ub)
    }
}

/// YCSB's `SequentialGenerator`: `start + counter++ % interval`, the counter shared
/// by every thread (clones share it).
#[derive(Clone, Debug)]
pub struct SequentialGenerator {
    start: u64,
    interval: u64,
    counter: Arc<AtomicU64>,
}

impl SequentialGenerator {
    /// Over `start..=end`.
    pub fn new(start: u64, end: u64) -> Result<SequentialGenerator> {
        let interval = ZipfianGenerator::item_count(start, end)?;
        Ok(SequentialGenerator { start, interval, counter: Arc::new(AtomicU64::new(0)) })
    }

    /// The next value.
    pub fn next_value(&mut self) -> u64 {
        self.start + self.counter.fetch_add(1, Ordering::Relaxed) % self.interval
    }
}

/// YCSB's `ExponentialGenerator`: `-ln(u) / gamma` with
/// `gamma = -ln(1 - percentile/100) / range`, so `percentile`% of the draws fall
/// below `range`.
#[derive(Clone, Debug)]
pub struct ExponentialGenerator {
    gamma: f64,
}

impl ExponentialGenerator {
    /// `percentile`% of draws below `range` (YCSB: `exponential.percentile`, and
    /// `recordcount * exponential.frac`).
    pub fn new(percentile: f64, range: f64) -> Result<ExponentialGenerator> {
        if !(percentile > 0.0 && percentile < 100.0) {
            return Err(Error::invalid(format!("exponential.percentile must be in (0, 100), got {percentile}")));
        }
        if !(range > 0.0 && range.is_finite()) {
            return Err(Error::invalid(format!(
                "exponential range (recordcount * exponential.frac) must be > 0, got {range}"
            )));
        }
        Ok(ExponentialGenerator { gamma: -(1.0 - percentile / 100.0).ln() / range })
    }

    /// The next value (may be infinite when the uniform draw is exactly 0).
    pub fn next(&mut self, rng: &mut WorkloadRng) -> f64 {
        -rng.next_f64().ln() / self.gamma
    }

    /// The mean, `1/gamma`.
    pub fn mean(&self) -> f64 {
        1.0 / self.gamma
    }

    /// The rate `gamma`.
    pub fn gamma(&self) -> f64 {
        self.gamma
    }
}

/// YCSB's `DiscreteGenerator`: picks one of several values with probability
/// proportional to its weight, walking the values in insertion order.
#[derive(Clone, Debug)]
pub struct DiscreteGenerator<T> {
    values: Vec<(f64, T)>,
}

impl<T: Clone> DiscreteGenerator<T> {
    /// No values yet.
    pub fn new() -> DiscreteGenerator<T> {
        DiscreteGenerator { values: Vec::new() }
    }

    /// Adds `value` with `weight` (ignored unless > 0, like CoreWorkload's chooser).
    pub fn add(&mut self, weight: f64, value: T) {
        if weight > 0.0 {
            self.values.push((weight, value));
        }
    }

    /// True when no value has a positive weight.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The probability of each value, in insertion order.
    pub fn probabilities(&self) -> Vec<(f64, T)> {
        let sum: f64 = self.values.iter().map(|(w, _)| w).sum();
        self.values.iter().map(|(w, v)| (w / sum, v.clone())).collect()
    }

    /// The next value; `None` only when empty.
    pub fn next(&self, rng: &mut WorkloadRng) -> Option<T> {
        let sum: f64 = self.values.iter().map(|(w, _)| w).sum();
        let mut val = rng.next_f64();
        for (w, v) in &self.values {
            let pw = w / sum;
            if val < pw {
                return Some(v.clone());
            }
            val -= pw;
        }
        // Rounding can leave val a hair above the last weight; YCSB would throw here.
        self.values.last().map(|(_, v)| v.clone())
    }
}

impl<T: Clone> Default for DiscreteGenerator<T> {
    fn default() -> Self {
        DiscreteGenerator::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values in these tests were computed by running YCSB's formulas
    // (Utils.fnvhash64, ZipfianGenerator.zetastatic / nextLong) under OpenJDK 17.

    #[test]
    fn fnvhash64_matches_java() {
        let cases: [(i64, i64); 10] = [
            (0, 6284781860667377211),
            (1, 8517097267634966620),
            (2, 1820151046732198393),
            (42, 55488592825689361),
            (999, 2071219101098386137),
            (1000, 5952875239596136740),
            (123456789, 2350796791908741607),
            (-1, 8289690350564177859),
            (i64::MAX, 8289549613075766851),
            (10_000_000_000, 1201321332300452516),
        ];
        for (input, expected) in cases {
            assert_eq!(fnvhash64(input), expected, "fnvhash64({input})");
        }
    }

    #[test]
    fn zeta_matches_java_sums() {
        // (n, zeta(n, 0.99), zeta(n, 0.5), zeta(n, 1.1)) from Java's term-by-term loop.
        let cases: [(u64, f64, f64, f64); 7] = [
            (2, 1.5034777750283594, 1.7071067811865475, 1.4665164957684036),
            (3, 1.840493339007644, 2.284457050376173, 1.7651693157153243),
            (10, 2.9561075165103636, 5.0209978992926665, 2.6801551813632853),
            (1000, 7.728953217284729, 61.80100876524318, 5.572826676352752),
            (1001, 7.730023676840303, 61.83261574230523, 5.573327312858695),
            (100_000, 12.778338062551246, 630.9967586623756, 7.4221723859184845),
            (1_000_000, 15.391849746037371, 1998.5401454911987, 8.072562159035538),
        ];
        for (n, z099, z05, z11) in cases {
            for (theta, expected) in [(0.99, z099), (0.5, z05), (1.1, z11)] {
                let got = zeta(n, theta);
                let rel = ((got - expected) / expected).abs();
                // Direct sums (n <= 10^4) are bit-identical; the Euler-Maclaurin tail
                // agrees with Java's 10^6-term float sum to its rounding noise.
                let tol = if n <= ZETA_DIRECT_TERMS { 1e-15 } else { 1e-12 };
                assert!(rel <= tol, "zeta({n}, {theta}) = {got}, Java {expected}, rel {rel}");
            }
        }
    }

    #[test]
    fn zeta_for_ten_billion_items_is_ycsbs_constant() {
        let got = zeta(YCSB_ITEM_COUNT, 0.99);
        assert!((got - YCSB_ZETAN).abs() < 1e-9, "zeta(10^10, 0.99) = {got}, YCSB {YCSB_ZETAN}");
    }

    #[test]
    fn incremental_zeta_equals_full_zeta() {
        for (st, n) in [(10u64, 20u64), (500, 50_000), (2_000, 3_000_000), (1_000_000, 5_000_000)] {
            let full = zeta(n, 0.99);
            let inc = zeta_from(st, n, 0.99, zeta(st, 0.99));
            assert!(((full - inc) / full).abs() < 1e-13, "{st}->{n}: {full} vs {inc}");
        }
        assert_eq!(zeta_from(5, 5, 0.99, 3.0), 3.0);
    }

    const US: [f64; 13] = [0.0, 0.01, 0.03, 0.037, 0.04, 0.06, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999999];

    #[test]
    fn zipfian_maps_uniform_draws_like_java() {
        let g = ZipfianGenerator::new(0, 999).unwrap();
        let got: Vec<u64> = US.iter().map(|&u| g.value_for(u, 1000)).collect();
        assert_eq!(got, [0, 0, 0, 0, 0, 0, 0, 3, 22, 151, 471, 927, 999]);

        let g = ZipfianGenerator::with_theta(0, 999, 1.1).unwrap();
        let got: Vec<u64> = US.iter().map(|&u| g.value_for(u, 1000)).collect();
        assert_eq!(got, [0, 0, 0, 0, 0, 0, 0, 1, 10, 76, 330, 890, 999]);

        // ScrambledZipfianGenerator's inner generator: 10^10 + 1 items, YCSB's zetan.
        let s = ScrambledZipfianGenerator::ycsb(0, 999).unwrap();
        let ZipfRanks::Ycsb(inner) = s.ranks() else { panic!("ycsb() must use YCSB's generator") };
        let n = inner.items();
        assert_eq!(n, YCSB_ITEM_COUNT + 1);
        let got: Vec<u64> = US.iter().map(|&u| inner.value_for(u, n)).collect();
        assert_eq!(got, [0, 0, 0, 0, 1, 2, 6, 296, 134552, 42924421, 1170869537, 8086205587, 9999787803]);
    }

    #[test]
    fn zipfian_constants() {
        let g = ZipfianGenerator::new(0, 999).unwrap();
        assert_eq!(g.zetan(), 7.728953217284729);
        // Java: 1 - theta with theta = 0.99 is 0.010000000000000009.
        let expected_eta = (1.0 - (2.0f64 / 1000.0).powf(1.0 - 0.99)) / (1.0 - 1.5034777750283594 / 7.728953217284729);
        assert_eq!(g.eta(), expected_eta);
        // The implied probabilities sum to 1.
        let total: f64 = (0..1000).map(|i| g.probability(i)).sum();
        assert!((total - 1.0).abs() < 1e-9, "{total}");
        assert!(ZipfianGenerator::with_theta(0, 9, 1.0).is_err());
        assert!(ZipfianGenerator::with_theta(0, 9, -0.5).is_err());
        assert!(ZipfianGenerator::new(5, 4).is_err());
    }

    /// Bounds for an observed count of an event with probability p in n trials: 6 sd.
    fn assert_frequency(count: u64, n: u64, p: f64, what: &str) {
        let mean = n as f64 * p;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        let diff = (count as f64 - mean).abs();
        assert!(diff <= 6.0 * sd + 1.0, "{what}: observed {count}, expected {mean:.1} +- {sd:.1} (n={n}, p={p})");
    }

    #[test]
    fn zipfian_top_items_frequencies() {
        for theta in [0.99, 0.5, 1.1] {
            let mut g = ZipfianGenerator::with_theta(0, 999, theta).unwrap();
            let mut rng = WorkloadRng::new(42, 0);
            let n = 200_000u64;
            let mut counts = vec![0u64; 1000];
            for _ in 0..n {
                counts[g.next(&mut rng) as usize] += 1;
            }
            for (k, &count) in counts.iter().enumerate().take(5) {
                assert_frequency(count, n, g.probability(k as u64), &format!("theta {theta} item {k}"));
            }
            // Item 0 and 1 are exactly Zipf: 1/zetan and 2^-theta/zetan.
            let z = zeta(1000, theta);
            assert!((g.probability(0) - 1.0 / z).abs() < 1e-15);
            assert!((g.probability(1) - 0.5f64.powf(theta) / z).abs() < 1e-15);
        }
    }

    #[test]
    fn scrambled_zipfian_ycsb_hot_key_is_fnv_of_rank_zero() {
        let mut g = ScrambledZipfianGenerator::ycsb(0, 999).unwrap();
        let mut rng = WorkloadRng::new(7, 0);
        let n = 200_000u64;
        let mut counts = vec![0u64; 1000];
        for _ in 0..n {
            counts[g.next(&mut rng) as usize] += 1;
        }
        let hottest = (0..1000).max_by_key(|&k| counts[k]).unwrap() as u64;
        assert_eq!(hottest, (fnvhash64(0) % 1000) as u64);
        assert_eq!(g.key_of_rank(0), 6284781860667377211 % 1000);
        // Rank 0 has probability 1/ZETAN; the other 10^10 ranks fold onto the 1000 keys,
        // adding roughly (1 - mass of the top ranks)/1000 to each.
        let p0 = 1.0 / YCSB_ZETAN;
        let upper = p0 + 2.0 / 1000.0;
        let f = counts[hottest as usize] as f64 / n as f64;
        assert!(f > p0 - 0.003 && f < upper + 0.003, "hot key frequency {f}, rank-0 mass {p0}");
    }

    #[test]
    fn scrambled_zipfian_with_theta_is_true_zipf_over_keys() {
        let mut g = ScrambledZipfianGenerator::with_theta(100, 1099, 0.99).unwrap();
        let mut rng = WorkloadRng::new(9, 1);
        let n = 200_000u64;
        let mut counts = vec![0u64; 1000];
        for _ in 0..n {
            let k = g.next(&mut rng);
            assert!((100..=1099).contains(&k));
            counts[(k - 100) as usize] += 1;
        }
        for rank in 0..4 {
            let key = g.key_of_rank(rank);
            let p = g.rank_probability(rank);
            assert_frequency(counts[(key - 100) as usize], n, p, &format!("rank {rank} (key {key})"));
        }
        // The ranks are scattered: the top keys are not the first keys of the span.
        let top: Vec<u64> = (0..4).map(|r| g.key_of_rank(r)).collect();
        assert_ne!(top, vec![100, 101, 102, 103]);
    }

    /// The chi-square statistic of rank counts against probabilities `p(rank)`, and its
    /// degrees of freedom. Ranks are binned from the top so every bin expects >= 20.
    fn chi_square(counts: &[u64], n: u64, p: impl Fn(u64) -> f64) -> (f64, usize) {
        let (mut stat, mut bins) = (0.0, 0usize);
        let (mut obs, mut exp) = (0.0, 0.0);
        for (k, &c) in counts.iter().enumerate() {
            obs += c as f64;
            exp += n as f64 * p(k as u64);
            if exp >= n as f64 / 100.0 || k + 1 == counts.len() {
                stat += (obs - exp) * (obs - exp) / exp.max(1e-9);
                bins += 1;
                obs = 0.0;
                exp = 0.0;
            }
        }
        (stat, bins.saturating_sub(1))
    }

    /// The chi-square critical value at significance 1e-4 (Wilson-Hilferty; z = 3.719).
    fn chi_square_critical(df: usize) -> f64 {
        let d = df as f64;
        let h = 2.0 / (9.0 * d);
        d * (1.0 - h + 3.719 * h.sqrt()).powi(3)
    }

    const CHI_THETAS: [f64; 5] = [0.5, 0.99, 1.0, 1.1, 1.5];

    #[test]
    fn true_zipf_rank_frequencies_pass_chi_square() {
        let items = 1000u64;
        let n = 1_000_000u64;
        for (i, theta) in CHI_THETAS.into_iter().enumerate() {
            // Through the whole --theta key generator: count keys, then read them by rank.
            let mut g = ScrambledZipfianGenerator::with_theta(0, items - 1, theta).unwrap();
            let mut rng = WorkloadRng::new(1234, i as u64);
            let mut by_key = vec![0u64; items as usize];
            for _ in 0..n {
                by_key[g.next(&mut rng) as usize] += 1;
            }
            let by_rank: Vec<u64> = (0..items).map(|r| by_key[g.key_of_rank(r) as usize]).collect();
            let exact = |k: u64| ((k + 1) as f64).powf(-theta) / zeta(items, theta);
            let (stat, df) = chi_square(&by_rank, n, exact);
            let crit = chi_square_critical(df);
            assert!(stat < crit, "theta {theta}: chi-square {stat:.1} >= {crit:.1} (df {df})");
            assert!((g.rank_probability(2) - exact(2)).abs() < 1e-15);
        }
    }

    #[test]
    fn gray_approximation_fails_the_same_chi_square() {
        // The check above must be able to fail: Gray et al.'s formula (YCSB's
        // ZipfianGenerator, which --theta used before) is rejected for every theta it accepts.
        let items = 1000u64;
        let n = 1_000_000u64;
        for (i, theta) in CHI_THETAS.into_iter().filter(|t| *t != 1.0).enumerate() {
            let mut g = ZipfianGenerator::with_theta(0, items - 1, theta).unwrap();
            let mut rng = WorkloadRng::new(1234, i as u64);
            let mut counts = vec![0u64; items as usize];
            for _ in 0..n {
                counts[g.next(&mut rng) as usize] += 1;
            }
            let exact = |k: u64| ((k + 1) as f64).powf(-theta) / zeta(items, theta);
            let (stat, df) = chi_square(&counts, n, exact);
            assert!(stat > chi_square_critical(df), "theta {theta}: Gray passed with {stat:.1} (df {df})");
        }
    }

    #[test]
    fn theta_one_and_zero_are_accepted_by_the_true_zipf() {
        assert!(ScrambledZipfianGenerator::with_theta(0, 99, 1.0).is_ok());
        let z = TrueZipf::new(10, 0.0).unwrap();
        assert!((z.probability(7) - 0.1).abs() < 1e-12);
        for bad in [-0.1, f64::NAN, f64::INFINITY] {
            assert!(TrueZipf::new(10, bad).is_err(), "{bad}");
        }
        assert!(TrueZipf::new(0, 1.0).is_err());
    }

    #[test]
    fn latest_with_theta_prefers_the_newest_key() {
        let basis = Arc::new(AcknowledgedCounter::new(1000));
        let mut g = SkewedLatestGenerator::with_theta(Arc::clone(&basis), 1.0).unwrap();
        let mut rng = WorkloadRng::new(3, 0);
        let n = 100_000u64;
        let newest = basis.last_value().unwrap();
        let hits = (0..n).filter(|_| g.next(&mut rng) == newest).count() as u64;
        assert_frequency(hits, n, 1.0 / zeta(newest, 1.0), "latest rank 0");
    }

    #[test]
    fn key_permutation_is_a_bijection() {
        for n in [1u64, 2, 3, 7, 64, 1000, 4097] {
            let p = KeyPermutation::new(n);
            let mut seen = vec![false; n as usize];
            for x in 0..n {
                let y = p.apply(x);
                assert!(y < n);
                assert!(!seen[y as usize], "n={n}: {y} hit twice");
                seen[y as usize] = true;
            }
        }
        let big = KeyPermutation::new(u64::MAX);
        assert_ne!(big.apply(0), big.apply(1));
    }

    #[test]
    fn acknowledged_counter_advances_over_contiguous_acks() {
        let c = AcknowledgedCounter::new(10);
        assert_eq!(c.last_value(), Some(9));
        let (a, b, d) = (c.next_value(), c.next_value(), c.next_value());
        assert_eq!((a, b, d), (10, 11, 12));
        c.acknowledge(11).unwrap();
        assert_eq!(c.limit(), 10);
        c.acknowledge(10).unwrap();
        assert_eq!(c.limit(), 12);
        assert!(c.acknowledge(10).is_err(), "double ack");
        assert!(c.acknowledge(99).is_err(), "never handed out");
        c.acknowledge(12).unwrap();
        assert_eq!(c.last_value(), Some(12));
        assert_eq!(AcknowledgedCounter::new(0).last_value(), None);
    }

    #[test]
    fn acknowledged_counter_window_limit() {
        let c = AcknowledgedCounter::new(0);
        let first = c.next_value();
        for _ in 0..ACK_WINDOW {
            c.next_value();
        }
        // first is still outstanding; ACK_WINDOW past it is too far.
        assert!(c.acknowledge(first + ACK_WINDOW).is_err());
        c.acknowledge(first + ACK_WINDOW - 1).unwrap();
    }

    #[test]
    fn acknowledged_counter_across_threads() {
        let c = Arc::new(AcknowledgedCounter::new(1000));
        std::thread::scope(|s| {
            for t in 0..4 {
                let c = Arc::clone(&c);
                s.spawn(move || {
                    let mut rng = WorkloadRng::new(3, t);
                    let mut held = Vec::new();
                    for _ in 0..5_000 {
                        held.push(c.next_value());
                        if rng.below(3) == 0 {
                            let i = rng.below(held.len() as u64) as usize;
                            c.acknowledge(held.swap_remove(i)).unwrap();
                        }
                    }
                    for v in held {
                        c.acknowledge(v).unwrap();
                    }
                });
            }
        });
        assert_eq!(c.limit(), 1000 + 20_000);
    }

    #[test]
    fn skewed_latest_prefers_recent_keys() {
        let basis = Arc::new(AcknowledgedCounter::new(1000));
        let mut g = SkewedLatestGenerator::ycsb(Arc::clone(&basis)).unwrap();
        let mut rng = WorkloadRng::new(5, 0);
        let n = 100_000u64;
        let mut top = 0;
        for _ in 0..n {
            let k = g.next(&mut rng);
            assert!((1..=999).contains(&k), "{k}");
            if k == 999 {
                top += 1;
            }
        }
        // last - zipf: key 999 is zipf item 0, probability 1/zeta(999).
        assert_frequency(top, n, 1.0 / zeta(999, 0.99), "latest key");
        // After acknowledging inserts the newest key becomes the favourite.
        for _ in 0..10 {
            let v = basis.next_value();
            basis.acknowledge(v).unwrap();
        }
        let hits = (0..10_000).filter(|_| g.next(&mut rng) == 1009).count();
        assert!(hits > 800, "{hits}");
    }

    #[test]
    fn hotspot_fractions() {
        let mut g = HotspotGenerator::new(0, 999, 0.2, 0.8).unwrap();
        assert_eq!(g.hot_count(), 200);
        let mut rng = WorkloadRng::new(11, 0);
        let n = 100_000u64;
        let hot = (0..n).filter(|_| g.next(&mut rng) < 200).count() as u64;
        assert_frequency(hot, n, 0.8, "hot set share");
        assert!(HotspotGenerator::new(0, 9, 1.5, 0.8).is_err());
        assert!(HotspotGenerator::new(0, 9, 0.2, -0.1).is_err());
        let mut all_hot = HotspotGenerator::new(0, 9, 1.0, 0.0).unwrap();
        assert!((0..100).all(|_| all_hot.next(&mut rng) < 10));
    }

    #[test]
    fn exponential_matches_ycsb_gamma() {
        // Java: gamma = -ln(1 - 95/100) / (1000 * 0.8571428571); -ln(0.5)/gamma.
        let g = ExponentialGenerator::new(95.0, 1000.0 * 0.8571428571).unwrap();
        assert!((g.gamma() - 0.003495020985987739).abs() < 1e-18);
        let mut g = g;
        let mut rng = WorkloadRng::new(1, 0);
        let n = 100_000u64;
        let below = (0..n).filter(|_| g.next(&mut rng) < 857.1428571).count() as u64;
        assert_frequency(below, n, 0.95, "share below range");
    }

    #[test]
    fn sequential_and_uniform() {
        let mut s = SequentialGenerator::new(5, 7).unwrap();
        let mut t = s.clone();
        assert_eq!([s.next_value(), t.next_value(), s.next_value(), t.next_value()], [5, 6, 7, 5]);
        let mut u = UniformGenerator::new(3, 5).unwrap();
        let mut rng = WorkloadRng::new(0, 0);
        let mut seen = [0u32; 3];
        for _ in 0..3000 {
            seen[(u.next(&mut rng) - 3) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 800), "{seen:?}");
        assert!(UniformGenerator::new(2, 1).is_err());
    }

    #[test]
    fn discrete_generator_proportions() {
        let mut d = DiscreteGenerator::new();
        d.add(0.95, 'r');
        d.add(0.0, 'x');
        d.add(0.05, 'u');
        assert_eq!(d.probabilities().len(), 2);
        let mut rng = WorkloadRng::new(2, 0);
        let n = 100_000u64;
        let reads = (0..n).filter(|_| d.next(&mut rng) == Some('r')).count() as u64;
        assert_frequency(reads, n, 0.95, "reads");
        assert_eq!(DiscreteGenerator::<char>::new().next(&mut rng), None);
    }
}
