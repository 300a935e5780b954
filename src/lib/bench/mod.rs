//! Benchmarks and their reporting.
//!
//! - [`floor`]: the transport floor: raw latency and message rate of each transport
//!   backend next to the hardware baselines (a cross-core cache-line ping-pong and a
//!   plain TCP ping-pong over loopback). Every protocol result is compared against it.

pub mod floor;
