#!/usr/bin/env bash
# The `rdma` feature (the ibverbs backend, src/lib/transport/verbs/): builds, lints and
# runs the unit tests that need no RDMA device. CI has no RDMA hardware, so the verbs
# conformance suite (ignored unless BOOMKV_RDMA_DEVICE names a device) does not run here.
#
# Needs pkg-config, libibverbs-dev, librdmacm-dev and libclang (ci/install.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --features rdma
cargo clippy --all-targets --features rdma -- -D warnings
cargo test --features rdma --lib transport::verbs
