#!/usr/bin/env bash
# The crash promise under simulated power failures, for every protocol, and the
# planted-bug controls (each known bug must be caught). Uses one release build with the
# test-only `planted-bugs` feature; without --plant that binary behaves normally.
set -euo pipefail
cargo build --release --features planted-bugs --quiet
bin=target/release/boomctl
for p in boom rdmp rpc rdmp-cc herd rfp pdpm-direct clover; do
  "$bin" crashtest --iterations "${CRASH_ITERATIONS:-300}" --protocol "$p" --quiet
done
cargo test --release --features planted-bugs --test planted -- --nocapture
