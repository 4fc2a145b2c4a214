// The device library: one translation unit, compiled per GPU architecture
// (bitcode, code object, -fgpu-rdc archive) and for x86-64 (linked into the
// Rust crate). Definitions of the extern "C" entry points live here; the logic
// lives in the header-only layers under device/include/rust_gin/.
#include "rust_gin/mlx5/api.h"
#include "rust_gin/mlx5/sq.h"

using namespace rust_gin;
using namespace rust_gin::mlx5;

RG_EXTERN_C RG_DEV int rust_gin_mlx5_post(const rust_gin_mlx5_sq* sq, const rust_gin_mlx5_request* reqs, uint32_t n) {
  SendQueue q(sq);
  return q.post_array<RingPolicy::now>(reqs, n);
}

RG_EXTERN_C RG_DEV int rust_gin_mlx5_post_deferred(const rust_gin_mlx5_sq* sq, const rust_gin_mlx5_request* reqs,
                                                   uint32_t n) {
  SendQueue q(sq);
  return q.post_array<RingPolicy::defer>(reqs, n);
}

RG_EXTERN_C RG_DEV void rust_gin_mlx5_ring(const rust_gin_mlx5_sq* sq) {
  SendQueue q(sq);
  q.ring();
}

RG_EXTERN_C RG_DEV int rust_gin_mlx5_quiet(const rust_gin_mlx5_sq* sq) {
  SendQueue q(sq);
  return q.quiet();
}

RG_EXTERN_C RG_DEV int rust_gin_mlx5_poll(const rust_gin_mlx5_sq* sq) {
  SendQueue q(sq);
  return q.poll();
}

RG_EXTERN_C RG_DEV void rust_gin_mlx5_build_wqe(const rust_gin_mlx5_request* req, uint16_t index, uint32_t qpn,
                                                int cq_update, void* out64) {
  const Wqe64 w = build_wqe(*req, index, qpn, cq_update != 0);
  // Written as the send queue writes WQEs (4 x 16 bytes): the device code's
  // only plain stores are WQE-sized, doorbell records and doorbells.
  typedef uint32_t u32x4 __attribute__((vector_size(16)));
  u32x4* out = static_cast<u32x4*>(out64);
  const u32x4* src = reinterpret_cast<const u32x4*>(w.w);
  for (int i = 0; i < 4; ++i) out[i] = src[i];
}
