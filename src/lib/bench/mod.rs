//! Benchmarks and their reporting.
//!
//! - [`measure`]: latency histograms per operation; [`report`]: YCSB text, CSV and JSON
//!   reports; [`hlog`]: HdrHistogram interval logs that merge across client processes.
//! - [`runner`]: the YCSB runner; [`status`]: its YCSB status lines; [`embedded`]: a
//!   server on a temporary pool; [`redis`]: the same runner against a Redis server.
//! - [`floor`]: the transport floor: raw latency and message rate of each transport
//!   backend, next to the hardware baselines (a cross-core cache-line ping-pong and a
//!   plain TCP ping-pong over loopback). Every protocol result is compared against it.
//! - [`sweep`]: `boomctl sweep`: grids of runs that reproduce the paper's figures, CSV,
//!   plots and a summary against the paper.
//! - [`LatencySummary`]: perftest-style statistics of a latency sample.
//! - [`busy`]: whether other processes or the hypervisor took CPU time during a run;
//!   [`wake`]: what waking a sleeping thread costs on this machine.

pub mod busy;
pub mod embedded;
pub mod floor;
pub mod hlog;
/// The measurement types live below the workload and the benchmarks ([`crate::measure`]).
pub use crate::measure;
pub mod redis;
pub mod report;
pub mod runner;
pub mod status;
pub mod sweep;
pub mod wake;

/// Statistics of one latency sample, in microseconds (perftest's columns).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct LatencySummary {
    /// Samples.
    pub count: usize,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Median (perftest's `t_typical`).
    pub median: f64,
    /// Mean.
    pub avg: f64,
    /// Standard deviation.
    pub stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

impl LatencySummary {
    /// Summarizes samples given in nanoseconds (sorts them in place). Empty input gives
    /// all zeros.
    pub fn from_ns(samples: &mut [u64]) -> LatencySummary {
        if samples.is_empty() {
            return LatencySummary::default();
        }
        samples.sort_unstable();
        let n = samples.len();
        let us = |ns: u64| ns as f64 / 1000.0;
        let pct = |p: f64| {
            // Nearest rank: the smallest sample with at least p of the samples at or below it.
            let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
            us(samples[rank - 1])
        };
        let avg = samples.iter().map(|&s| s as f64).sum::<f64>() / n as f64;
        let var = samples.iter().map(|&s| (s as f64 - avg).powi(2)).sum::<f64>() / n as f64;
        LatencySummary {
            count: n,
            min: us(samples[0]),
            max: us(samples[n - 1]),
            median: pct(0.5),
            avg: avg / 1000.0,
            stdev: var.sqrt() / 1000.0,
            p99: pct(0.99),
            p999: pct(0.999),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_samples() {
        let mut v: Vec<u64> = (1..=1000).rev().map(|i| i * 1000).collect();
        let s = LatencySummary::from_ns(&mut v);
        assert_eq!(s.count, 1000);
        assert_eq!((s.min, s.max, s.median), (1.0, 1000.0, 500.0));
        assert_eq!((s.p99, s.p999), (990.0, 999.0));
        assert!((s.avg - 500.5).abs() < 1e-9);
        assert!((s.stdev - 288.6749).abs() < 1e-3);
        assert_eq!(LatencySummary::from_ns(&mut []), LatencySummary::default());
    }
}
