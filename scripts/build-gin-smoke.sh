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
#   scripts/build-gin-smoke.sh --host [output]     x86-64 build for the emulated NIC
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

if [[ "${1:-}" == "--host" ]]; then
  out=${2:-gin-smoke-host}
  set -x
  # The kernel body becomes a host function; the device entry points resolve
  # to the library's x86-64 build inside librccl_rust_gin.a.
  "${CXX:-c++}" -std=c++17 -O2 -Wall -Wextra -Werror -x c++ -Idevice/include -Ismoke smoke/gin_smoke.hip -x none \
    "$host_lib" "${native[@]}" -o "$out"
  exit 0
fi

root=${1:?usage: $0 <RCCL_HOME|device-dir> [gfx] [output] | --host [output]}
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
obj="${out}.o"
set -x
"${HIPCC:-hipcc}" -x hip -std=c++17 -O3 --offload-arch="$gfx" -fgpu-rdc "${hip_flags[@]}" "${hip_cflags[@]}" \
  -Idevice/include -Ismoke -c smoke/gin_smoke.hip -o "$obj"
"${HIPCC:-hipcc}" --hip-link --offload-arch="$gfx" -fgpu-rdc "${hip_flags[@]}" "$obj" "$archive" "$host_lib" \
  "${native[@]}" -lstdc++ -o "$out"
