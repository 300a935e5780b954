//! The on-media format and the log (in progress).
