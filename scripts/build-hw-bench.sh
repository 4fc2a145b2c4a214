#!/usr/bin/env bash
# Builds benches/hw/gin_perf_hw.hip against an installed RCCL patched with
# rust-gin (docs/benchmarks.md). Two things must be right, or a type-8
# communicator's kernels reach __builtin_unreachable() in ncclGinCallImpl:
#   -DENABLE_RUST_GIN      compiles the type-8 case of RCCL's device dispatch;
#   the device archive     librccl_rust_gin_device_<gfx>.a (installed by
#                          ./install.sh --rust-gin under lib/rust-gin/<gfx>/)
#                          supplies the rust_gin_* device functions, linked
#                          with -fgpu-rdc.
# Usage: scripts/build-hw-bench.sh <RCCL_HOME> [gfx942|gfx950|gfx90a] [output]
set -euo pipefail
rccl_home=${1:?usage: $0 <RCCL_HOME> [gfx] [output]}
gfx=${2:-gfx942}
out=${3:-gin_perf_hw}
cd "$(dirname "$0")/.."
archive="$rccl_home/lib/rust-gin/$gfx/librccl_rust_gin_device_$gfx.a"
if [[ ! -f "$archive" ]]; then
  echo "build-hw-bench: no $archive: build RCCL with ./install.sh --rust-gin --amdgpu_targets=$gfx" >&2
  exit 1
fi
set -x
"${HIPCC:-hipcc}" -O3 --offload-arch="$gfx" -fgpu-rdc -DENABLE_RUST_GIN \
  -I"$rccl_home/include" -I"$rccl_home/include/rccl" \
  benches/hw/gin_perf_hw.hip "$archive" \
  -L"$rccl_home/lib" -lrccl -Wl,-rpath,"$rccl_home/lib" -o "$out"
