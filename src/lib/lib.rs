//! # boomkv
//!
//! BOOM-KV ("BOOM-KV: an RDMA-enabled high-performance NVM key-value store",
//! High Technology Letters 2023) and the suite that measures it against two baselines.
//!
//! Clients write entries straight into segments of the server's persistent memory with
//! one-sided RDMA operations; a PUT and a GET each take one network round trip.
//!
//! Modules, bottom up:
//! - [`pmem`]: the mapped pool, cache-line write-back, the crash-simulating media.
//! - [`log`]: the on-media format (pool, segment and entry layouts), segment
//!   allocation, recovery and space accounting.
//! - [`index`]: the volatile index from key to entry location.
//! - [`workload`]: YCSB-compatible workloads (generators, property files, op streams).
//! - [`bench`](mod@bench): latency histograms and the YCSB text, CSV, JSON and HdrHistogram log reports.
//! - [`transport`]: the verbs-like seam the protocols run on, with `shm` (one host)
//!   and `tcp` (any two hosts) backends.
//!
//! ## The durability promise
//!
//! An acknowledged PUT or DELETE survives any crash: a process kill, or a power loss in
//! which any subset of not-yet-written-back cache lines is lost and 8-byte words tear
//! between lines. Recovery never returns a value that was never written. What a given
//! machine can promise depends on its media: see [`pmem::Media::durability_statement`].

#[cfg(feature = "bench")]
pub mod bench;
pub mod client;
pub mod crashtest;
pub mod error;
pub mod index;
pub mod link;
pub mod log;
pub mod measure;
pub mod pmem;
pub mod proto;
pub mod server;
pub mod service;
pub mod transport;
pub mod units;
pub mod wire;
pub mod workload;

pub use error::{Error, Result};
