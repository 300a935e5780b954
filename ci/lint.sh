#!/usr/bin/env bash
# Formatting, lints and docs, all with warnings denied.
set -euo pipefail
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
# The client library builds without the benchmark and plotting stack.
cargo clippy --lib --no-default-features -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet
