#!/usr/bin/env bash
# Installs the RMA plugin for RCCL's proxy GIN (docs/rma-plugin.md).
#
#   scripts/install-rma-plugin.sh DIR            build (release) and install
#   scripts/install-rma-plugin.sh --from SO DIR  install an already built cdylib
#
# Cargo cannot give a library a name with dashes: the crate's cdylib is
# target/<profile>/librccl_rust_gin.so. RCCL resolves NCCL_RMA_PLUGIN=rust to
# librccl-rma-rust.so, so this copies the cdylib to DIR/librccl-rma-rust.so
# and checks that it exports the RMA plugin symbols. Then:
#
#   export LD_LIBRARY_PATH=DIR:$LD_LIBRARY_PATH
#   export NCCL_RMA_PLUGIN=rust NCCL_GIN_TYPE=2 RCCL_RUST_GIN_PROVIDER=mlx5
#
# or NCCL_RMA_PLUGIN=DIR/librccl-rma-rust.so without LD_LIBRARY_PATH.
set -euo pipefail

usage() {
  echo "usage: $0 [--from PATH/librccl_rust_gin.so] DIR" >&2
  exit 2
}

from=""
dest=""
while [ $# -gt 0 ]; do
  case "$1" in
    --from) [ $# -ge 2 ] || usage; from="$2"; shift 2 ;;
    -h|--help) usage ;;
    -*) usage ;;
    *) [ -z "$dest" ] || usage; dest="$1"; shift ;;
  esac
done
[ -n "$dest" ] || usage

if [ -z "$from" ]; then
  cd "$(dirname "$0")/.."
  source scripts/setup-debian.sh
  rust_gin_setup
  cargo build --locked --release --lib
  from="${CARGO_TARGET_DIR:-target}/release/librccl_rust_gin.so"
fi
[ -f "$from" ] || { echo "error: $from does not exist (build with cargo build --lib)" >&2; exit 1; }

if command -v nm >/dev/null 2>&1; then
  syms=$(nm -D --defined-only "$from")
  for v in 17 16 15 14 13; do
    grep -q " ncclRmaPlugin_v$v\$" <<<"$syms" \
      || { echo "error: $from does not export ncclRmaPlugin_v$v" >&2; exit 1; }
  done
fi

mkdir -p "$dest"
# Copy to a temporary name and rename: a process that has the old file mapped
# keeps it, and nobody sees a half-written library.
tmp="$dest/.librccl-rma-rust.so.$$"
cp "$from" "$tmp"
mv -f "$tmp" "$dest/librccl-rma-rust.so"
echo "installed $dest/librccl-rma-rust.so (ncclRmaPlugin_v17, _v16, _v15, _v14, _v13)"
echo "use: LD_LIBRARY_PATH=$dest:\$LD_LIBRARY_PATH NCCL_RMA_PLUGIN=rust NCCL_GIN_TYPE=2"
