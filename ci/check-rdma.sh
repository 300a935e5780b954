#!/usr/bin/env bash
# The `rdma` feature (the ibverbs backend, src/lib/transport/verbs/): builds, lints and
# runs the unit tests that need no RDMA device. The device-gated suites run over
# soft-RoCE in a VM in ci/check-rdma-vm.sh.
#
# Needs pkg-config, libibverbs-dev, librdmacm-dev and libclang (ci/install.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --features rdma
cargo clippy --all-targets --features rdma -- -D warnings
cargo test --features rdma --lib transport::verbs
