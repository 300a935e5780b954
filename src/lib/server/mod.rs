//! The server: worker threads, the global version counter (in the pool), GETs in
//! flight, cooperative write-back, and the cleaner thread.

pub mod coop;
pub mod inflight;
