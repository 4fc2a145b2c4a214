#!/usr/bin/env bash
# Installs what rust-gin needs on Debian 12 (bookworm), idempotently, and says
# what it installs. Sourced by the README's two commands; safe to run alone.
#   clang-22 lld-22 llvm-22   the only Debian compiler that knows gfx90a, gfx942
#                             and gfx950, and its llvm-objdump for the ISA checks
#   libclang-15-dev           libclang for rdma-sys's bindgen 0.59 (breaks on >= 16)
#   libibverbs-dev librdmacm-dev rdma-core ibverbs-providers pkg-config
#                             rdma-core headers and libraries (mlx5dv.h, libmlx5)
#   libamdhip64-dev           HIP headers and libamdhip64 for hip-sys
#   rocm-device-libs          ROCm device libraries (HIP programs that link the
#                             device library's -fgpu-rdc archive, tested here)
set -euo pipefail

RUST_GIN_DEBIAN_PACKAGES=(clang-22 lld-22 llvm-22 libclang-15-dev libibverbs-dev librdmacm-dev rdma-core
  ibverbs-providers pkg-config libamdhip64-dev rocm-device-libs)
RUST_GIN_MIN_RUST=1.88

rust_gin_setup() {
  local missing=()
  for p in "${RUST_GIN_DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "rust-gin setup: installing Debian packages: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "rust-gin setup: Debian packages present (${RUST_GIN_DEBIAN_PACKAGES[*]})"
  fi
  if ! command -v cargo >/dev/null 2>&1; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
  fi
  if ! command -v cargo >/dev/null 2>&1; then
    echo "rust-gin setup: no cargo found; installing Rust with rustup (https://sh.rustup.rs)"
    command -v curl >/dev/null 2>&1 || apt-get install -y -qq curl >/dev/null
    curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal >/dev/null \
      || { echo "error: cannot install Rust; install Rust >= $RUST_GIN_MIN_RUST (rustup.rs) and rerun" >&2; exit 1; }
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
  local have
  have=$(rustc --version | awk '{print $2}')
  if [ "$(printf '%s\n%s\n' "$RUST_GIN_MIN_RUST" "$have" | sort -V | head -n1)" != "$RUST_GIN_MIN_RUST" ]; then
    echo "error: rustc $have is older than $RUST_GIN_MIN_RUST; run 'rustup update stable'" >&2
    exit 1
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  rust_gin_setup
fi
