#!/usr/bin/env bash
# Line coverage of host/ under the whole test suite (docs/coverage.md).
# Not part of scripts/test.sh: an instrumented build of everything plus the
# suite takes several times the suite's own budget.
#
#   ./scripts/coverage.sh            # build, run the suite, print the tables
#   ./scripts/coverage.sh --report   # tables again from the last run's profiles
#
# Runs the same tests as scripts/test.sh (cargo test --locked --all-targets)
# through cargo-llvm-cov, in its own target directory (target/cov, or
# $CARGO_TARGET_DIR) so the normal build is left alone. Child processes the
# tests start (the test binary re-executed, with %p/%m in LLVM_PROFILE_FILE)
# write their own profiles and are counted; so is the dlopened cdylib
# (librccl_rust_gin.so), which cargo-llvm-cov passes to llvm-cov as an object.
# Writes target/cov/coverage.txt (per file) and target/cov/coverage-dirs.txt
# (per directory).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-debian.sh
rust_gin_setup

report_only=0
if [ "${1:-}" = "--report" ]; then report_only=1; shift; fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/cov}"

# llvm-cov and llvm-profdata must match rustc's LLVM major version: rustup's
# llvm-tools component when rustup is there, else the Debian llvm-<major>
# tools (llvm-22 is one of setup-debian.sh's packages).
if [ -z "${LLVM_COV:-}" ] || [ -z "${LLVM_PROFDATA:-}" ]; then
  major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
  if command -v rustup >/dev/null 2>&1 && rustup component add llvm-tools >/dev/null 2>&1; then
    : # cargo-llvm-cov finds them in the sysroot
  elif command -v "llvm-cov-$major" >/dev/null 2>&1 && command -v "llvm-profdata-$major" >/dev/null 2>&1; then
    export LLVM_COV="$(command -v "llvm-cov-$major")" LLVM_PROFDATA="$(command -v "llvm-profdata-$major")"
  else
    echo "error: no llvm-cov/llvm-profdata for rustc's LLVM $major (rustup component add llvm-tools, or apt-get install llvm-$major)" >&2
    exit 1
  fi
fi
if ! cargo llvm-cov --version >/dev/null 2>&1; then
  echo "rust-gin coverage: installing cargo-llvm-cov (cargo install --locked)"
  cargo install cargo-llvm-cov --locked
fi

# host/ only: not tests/, benches/, the build script (build.rs, build/) or
# the bindgen output under the target directory.
ignore='(^|/)(tests|benches|build)/|/build\.rs$|/target/'

start=$(date +%s)
if [ "$report_only" -eq 0 ]; then
  # --no-fail-fast: a failing test still leaves the others' profiles.
  cargo llvm-cov --no-report --locked --all-targets --no-fail-fast "$@"
fi
cargo llvm-cov report --ignore-filename-regex "$ignore" > "$CARGO_TARGET_DIR/coverage.txt"

# Per directory of host/ (a file directly in host/ is its own row; provider/
# and bin/ split one level further), from the per-file table, whose names
# llvm-cov gives relative to host/: Filename Regions Missed Cover Functions
# Missed Executed Lines Missed Cover ...
awk '
  $1 ~ /\.rs$/ {
    n = split($1, p, "/")
    if (n == 1) key = $1
    else if ((p[1] == "provider" || p[1] == "bin") && n > 2) key = p[1] "/" p[2]
    else key = p[1]
    lines[key] += $8; missed[key] += $9; tl += $8; tm += $9
  }
  END {
    printf "%-22s %7s %7s %7s\n", "host/ module", "lines", "missed", "cover"
    for (k in lines) printf "%-22s %7d %7d %6.1f%%\n", k, lines[k], missed[k], 100 * (lines[k] - missed[k]) / lines[k] | "sort"
    close("sort")
    printf "%-22s %7d %7d %6.1f%%\n", "TOTAL host/", tl, tm, tl ? 100 * (tl - tm) / tl : 0
  }' "$CARGO_TARGET_DIR/coverage.txt" > "$CARGO_TARGET_DIR/coverage-dirs.txt"

cat "$CARGO_TARGET_DIR/coverage.txt"
echo
cat "$CARGO_TARGET_DIR/coverage-dirs.txt"
echo "rust-gin: coverage finished in $(( $(date +%s) - start )) s ($CARGO_TARGET_DIR/coverage.txt, coverage-dirs.txt)"
