//! The client library (in progress): hybrid-update bookkeeping.

pub mod hybrid;
