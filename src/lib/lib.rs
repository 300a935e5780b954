//! # boomkv
//!
//! BOOM-KV ("BOOM-KV: an RDMA-enabled high-performance NVM key-value store",
//! High Technology Letters 2023) and the suite that measures it against two baselines.
//!
//! Clients write entries straight into segments of the server's persistent memory with
//! one-sided RDMA operations; a PUT and a GET each take one network round trip.
//!
//! Modules, bottom up (docs/ARCHITECTURE.md has the layers; `tests/layering.rs` checks
//! that no module uses one of its own or a higher layer):
//! - [`error`], [`units`], [`cpus`]: the typed error; byte sizes as users type them; CPU
//!   lists and thread affinity.
//! - [`pmem`]: the mapped pool, cache-line write-back, the crash-simulating media.
//! - [`index`]: the volatile index from key to entry location.
//! - [`measure`]: latency histograms and measurement settings.
//! - [`log`]: the on-media format (pool, segment and entry layouts), segment
//!   allocation, the commit path, recovery, space accounting and the cleaner.
//! - [`transport`]: the verbs-like seam the protocols run on, with `shm` (one host),
//!   `tcp` (any two hosts) and, with feature `rdma`, `verbs` backends.
//! - [`wire`]: the wire format (handshake, messages, immediates).
//! - [`link`] and [`service`]: what a protocol's client half and server half run on (a
//!   client's connection; the server's shared state and the context of a request).
//! - [`proto`]: the protocols, one file each (BOOM, RDMP-KV, RDMA-KV, RDMP-CC, HERD, RFP,
//!   pDPM-Direct, Clover).
//! - [`client`], [`server`]: the client library and the server's threads.
//! - [`workload`]: YCSB-compatible workloads (generators, property files, op streams).
//! - `bench` (feature `bench`): the YCSB runner, reports, the transport floor, sweeps
//!   and plots; [`crashtest`]: the crash checker.
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
pub mod cpus;
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
