#!/usr/bin/env bash
# Builds a hardware benchmark against an installed RCCL patched with rust-gin
# (docs/benchmarks.md): benches/hw/gin_perf_hw.hip (put/signal, two ranks;
# the default) or, with `ep` last, benches/hw/gin_ep_hw.hip (expert-parallel
# dispatch and combine, N ranks). Two things must be right, or a type-8
# communicator's kernels reach __builtin_unreachable() in ncclGinCallImpl:
#   -DENABLE_RUST_GIN      compiles the type-8 case of RCCL's device dispatch;
#   the device archive     librccl_rust_gin_device_<gfx>.a (installed by
#                          ./install.sh --rust-gin under lib/rust-gin/<gfx>/)
#                          supplies the rust_gin_* device functions, linked
#                          with -fgpu-rdc.
# Usage: scripts/build-hw-bench.sh <RCCL_HOME> [gfx942|gfx950|gfx90a] [output] [perf|ep]
set -euo pipefail
rccl_home=${1:?usage: $0 <RCCL_HOME> [gfx] [output] [perf|ep]}
gfx=${2:-gfx942}
which=${4:-perf}
case "$which" in
  perf) src=benches/hw/gin_perf_hw.hip ;;
  ep) src=benches/hw/gin_ep_hw.hip ;;
  *) echo "build-hw-bench: benchmark '$which': perf or ep" >&2; exit 2 ;;
esac
out=${3:-gin_${which}_hw}
cd "$(dirname "$0")/.."
archive="$rccl_home/lib/rust-gin/$gfx/librccl_rust_gin_device_$gfx.a"
if [[ ! -f "$archive" ]]; then
  echo "build-hw-bench: no $archive: build RCCL with ./install.sh --rust-gin --amdgpu_targets=$gfx" >&2
  exit 1
fi
set -x
"${HIPCC:-hipcc}" -O3 --offload-arch="$gfx" -fgpu-rdc -DENABLE_RUST_GIN \
  -I"$rccl_home/include" -I"$rccl_home/include/rccl" \
  "$src" "$archive" \
  -L"$rccl_home/lib" -lrccl -Wl,-rpath,"$rccl_home/lib" -o "$out"
