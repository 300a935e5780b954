//! Benchmark measurement and reporting: latency histograms per operation
//! ([`measure`]), YCSB text / CSV / JSON reports ([`report`]), and HdrHistogram
//! interval logs that merge across client processes ([`hlog`]).

pub mod embedded;
pub mod hlog;
pub mod measure;
pub mod report;
pub mod runner;
