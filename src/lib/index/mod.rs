//! The volatile index (in progress).
