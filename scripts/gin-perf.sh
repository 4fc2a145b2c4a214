#!/usr/bin/env bash
# The main job (the README's first command): builds everything and runs the
# put/signal microbenchmark on the emulated NIC. Arguments go to gin-perf.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-debian.sh
rust_gin_setup
cargo build --locked --release
exec ./target/release/gin-perf "$@"
