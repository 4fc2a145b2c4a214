#!/usr/bin/env bash
# Builds gin-smoke, the GPU smoke test without RCCL (smoke/gin_smoke.hip;
# docs/bring-up.md, stage 2). It links the same two artefacts a librccl built
# with --rust-gin links:
#   librccl_rust_gin_device_<gfx>.a  the -fgpu-rdc device archive, from an RCCL
#                                    install (<RCCL_HOME>/lib/rust-gin/<gfx>/) or
#                                    from this crate's build
#                                    (target/release/rust-gin-device/<gfx>/);
#   librccl_rust_gin.a               the host staticlib with ncclGinRustPlugin_v14
#                                    (cargo build --release --lib; RCCL links it
#                                    into librccl and installs no copy).
# Usage:
#   scripts/build-gin-smoke.sh <RCCL_HOME|device-dir> [gfx942|gfx950|gfx90a] [output]
#   scripts/build-gin-smoke.sh --stage-hooks [gfx] [output]
#   scripts/build-gin-smoke.sh --host [--stage-hooks] [output]   x86-64, emulated NIC
# --stage-hooks compiles the device library from this tree with
# RUST_GIN_STAGE_HOOKS (device/include/rust_gin/port/stage.h) in place of the
# archive, so that gin-smoke also splits the steps inside rust_gin_put; the
# program then says it does not run the library RCCL links.
# Environment: HIPCC (default hipcc), HIP_FLAGS (compile and link),
# HIP_CFLAGS (compile only), CXX (--host; default c++), RUST_GIN_HOST_LIB
# (default target/release/librccl_rust_gin.a), RUST_GIN_NATIVE_LIBS (what the
# staticlib needs; the list RCCL's cmake/RustGin.cmake links).
set -euo pipefail
cd "$(dirname "$0")/.."
host_lib=${RUST_GIN_HOST_LIB:-target/release/librccl_rust_gin.a}
read -r -a native <<< "${RUST_GIN_NATIVE_LIBS:--libverbs -lmlx5 -lamdhip64 -lgcc_s -lutil -lrt -lpthread -lm -ldl}"
read -r -a hip_flags <<< "${HIP_FLAGS:-}"
read -r -a hip_cflags <<< "${HIP_CFLAGS:-}"
if [[ ! -f "$host_lib" ]]; then
  echo "build-gin-smoke: no $host_lib: run 'cargo build --release --lib' (or set RUST_GIN_HOST_LIB)" >&2
  exit 1
fi

host=0 hooks=0
while [[ "${1:-}" == --* ]]; do
  case "$1" in
    --host) host=1 ;;
    --stage-hooks) hooks=1 ;;
    *) echo "build-gin-smoke: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

if (( host )); then
  out=${1:-gin-smoke-host}
  lib=()
  # With hooks, the library's x86-64 build is compiled here as the crate's
  # build.rs compiles it; its object comes first, so the linker takes no
  # copy of it out of librccl_rust_gin.a (the crate's calls land on it too).
  (( hooks )) && lib=(-DRUST_GIN_STAGE_HOOKS -fno-exceptions -fno-rtti device/src/rust_gin_device.hip)
  set -x
  # The kernel body becomes a host function; the device entry points resolve
  # to the library's x86-64 build inside librccl_rust_gin.a.
  "${CXX:-c++}" -std=c++17 -O2 -Wall -Wextra -Werror -x c++ -Idevice/include -Ismoke smoke/gin_smoke.hip "${lib[@]}" \
    -x none "$host_lib" "${native[@]}" -o "$out"
  exit 0
fi

if (( hooks )); then
  gfx=${1:-gfx942}
  out=${2:-gin-smoke}
  # The flags build/device.rs compiles the archive with, plus the hooks
  # (RUST_GIN_FAMILIES: the mask of NIC families, mlx5 = 1, bnxt = 2, ionic = 4).
  archive="${out}.rust_gin_device.o"
  set -x
  "${HIPCC:-hipcc}" -x hip -std=c++17 -O3 -nogpuinc -nogpulib -DRUST_GIN_FAMILIES="${RUST_GIN_FAMILIES:-1}" \
    -DRUST_GIN_STAGE_HOOKS --offload-arch="$gfx" -Idevice/include -Xclang -mcode-object-version=none \
    -fgpu-rdc -fPIC -c device/src/rust_gin_device.hip -o "$archive"
  set +x
else
  root=${1:?usage: $0 <RCCL_HOME|device-dir> [gfx] [output] | --stage-hooks [gfx] [output] | --host [--stage-hooks] [output]}
  gfx=${2:-gfx942}
  out=${3:-gin-smoke}
  archive=""
  for cand in "$root/lib/rust-gin/$gfx/librccl_rust_gin_device_$gfx.a" "$root/$gfx/librccl_rust_gin_device_$gfx.a"; do
    [[ -f "$cand" ]] && { archive=$cand; break; }
  done
  if [[ -z "$archive" ]]; then
    echo "build-gin-smoke: no librccl_rust_gin_device_$gfx.a under $root/lib/rust-gin/$gfx/ or $root/$gfx/:" \
      "build RCCL with ./install.sh --rust-gin --amdgpu_targets=$gfx, or pass target/release/rust-gin-device" >&2
    exit 1
  fi
fi
obj="${out}.o"
defs=()
(( hooks )) && defs=(-DRUST_GIN_STAGE_HOOKS)
set -x
"${HIPCC:-hipcc}" -x hip -std=c++17 -O3 --offload-arch="$gfx" -fgpu-rdc "${hip_flags[@]}" "${hip_cflags[@]}" "${defs[@]}" \
  -Idevice/include -Ismoke -c smoke/gin_smoke.hip -o "$obj"
"${HIPCC:-hipcc}" --hip-link --offload-arch="$gfx" -fgpu-rdc "${hip_flags[@]}" "$obj" "$archive" "$host_lib" \
  "${native[@]}" -lstdc++ -o "$out"
