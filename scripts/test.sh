#!/usr/bin/env bash
# The whole test suite (the README's second command; .ci/run runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-debian.sh
rust_gin_setup
# Timings for CI's budget: print how long each stage took.
start=$(date +%s)
cargo test --locked --all-targets "$@"
echo "rust-gin: test suite finished in $(( $(date +%s) - start )) s"
