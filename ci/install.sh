#!/usr/bin/env bash
# Installs what CI needs on a clean Debian machine. The default build needs nothing
# beyond Rust; the optional checks need the packages below.
set -euo pipefail
pkgs=()
# The `rdma` feature (ibverbs through rdma-sys): headers, pkg-config and libclang for bindgen.
pkgs+=(pkg-config libibverbs-dev librdmacm-dev libclang1-14 libclang-common-14-dev)
# The YCSB binding for Redis is tested against a real server (tests/redis_peer.rs).
pkgs+=(redis-server)
# HdrHistogram's own Java tools read our .hlog files in ci/check-hdr-java.sh.
pkgs+=(libhdrhistogram-java default-jre-headless)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "ci/install.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt
