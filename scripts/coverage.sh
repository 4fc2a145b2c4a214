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
# Writes target/cov/coverage-files.txt (per file), coverage-dirs.txt (per
# directory) and coverage.lcov (per line, for genhtml or an editor).
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

# host/ only. cargo-llvm-cov's default filter is off because it drops
# tests/../host/bin/gin_perf/perf/gfd.rs, the name under which
# tests/gfd_format.rs and benches/proxy_drain.rs (#[path]) compile that file;
# this one drops the standard library, dependencies, the target directory
# (bindgen output), the build script (build.rs, build/), device/, and tests/
# and benches/ themselves.
root=$(pwd -P)
ignore="/rustc/|/\.cargo/registry/|/\.rustup/|^$root/(target|build|device)/|^$root/build\.rs\$|^$root/(tests|benches)/[^.]"

start=$(date +%s)
if [ "$report_only" -eq 0 ]; then
  # --no-fail-fast: a failing test still leaves the others' profiles.
  cargo llvm-cov --no-report --locked --all-targets --no-fail-fast "$@"
fi
lcov="$CARGO_TARGET_DIR/coverage.lcov"
cargo llvm-cov report --no-default-ignore-filename-regex --ignore-filename-regex "$ignore" \
  --lcov --output-path "$lcov"

# Line coverage per file: a line counts once (its highest count over every
# binary that compiled it; tests/../host/x and host/x are one file), covered
# when that count is above zero. Then per directory of host/ (a file directly
# in host/ is its own row; provider/ and bin/ split one level further).
awk -v root="$root/" '
  /^SF:/ {
    f = substr($0, 4); sub("^" root, "", f)
    while (match(f, /[^\/]+\/\.\.\//)) f = substr(f, 1, RSTART - 1) substr(f, RSTART + RLENGTH)
    next
  }
  /^DA:/ {
    split(substr($0, 4), a, ","); k = f SUBSEP a[1]
    if (!(k in hit)) { hit[k] = 0; lines[f]++ }
    if (a[2] + 0 > 0 && hit[k] == 0) { hit[k] = 1; covered[f]++ }
  }
  END {
    for (f in lines) printf "%-40s %6d %6d %6.1f%%\n", f, lines[f], lines[f] - covered[f], 100 * covered[f] / lines[f] | "sort"
  }' "$lcov" > "$CARGO_TARGET_DIR/coverage-files.txt"
awk '
  {
    n = split($1, p, "/")
    if (n == 2) key = $1
    else if ((p[2] == "provider" || p[2] == "bin") && n > 3) key = p[1] "/" p[2] "/" p[3]
    else key = p[1] "/" p[2]
    lines[key] += $2; missed[key] += $3; tl += $2; tm += $3
  }
  END {
    for (k in lines) printf "%-24s %6d %6d %6.1f%%\n", k, lines[k], missed[k], 100 * (lines[k] - missed[k]) / lines[k] | "sort"
    close("sort")
    printf "%-24s %6d %6d %6.1f%%\n", "TOTAL host/", tl, tm, 100 * (tl - tm) / tl
  }' "$CARGO_TARGET_DIR/coverage-files.txt" > "$CARGO_TARGET_DIR/coverage-dirs.txt"

printf '%-40s %6s %6s %7s\n' file lines missed cover
cat "$CARGO_TARGET_DIR/coverage-files.txt"
echo
printf '%-24s %6s %6s %7s\n' module lines missed cover
cat "$CARGO_TARGET_DIR/coverage-dirs.txt"
echo "rust-gin: coverage finished in $(( $(date +%s) - start )) s" \
  "($CARGO_TARGET_DIR/coverage-files.txt, coverage-dirs.txt, coverage.lcov)"
