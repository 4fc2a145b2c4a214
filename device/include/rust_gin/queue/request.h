// What a producer posts, for every NIC family: one operation as the host
// ABI lays it out (rust_gin_mlx5_request, abi/mlx5_queue.h). Its opcodes are
// mlx5's numbers (mlx5/wire.h), used as the operation vocabulary of all
// families: each family's policy translates them into its own WQE
// (bnxt/family.h, ionic/family.h); mlx5 writes them as they are.
#pragma once

#include "rust_gin/abi/mlx5_queue.h"
#include "rust_gin/mlx5/wire.h"

namespace rust_gin {
namespace queue {

typedef rust_gin_mlx5_request Request;
enum RequestFlags : uint8_t {
  REQ_SIGNALED = RUST_GIN_REQ_SIGNALED,
  REQ_FENCE = RUST_GIN_REQ_FENCE,
  REQ_SMALL_FENCE = RUST_GIN_REQ_SMALL_FENCE,
  REQ_INLINE = RUST_GIN_REQ_INLINE,
  REQ_SOLICITED = RUST_GIN_REQ_SOLICITED,
};
constexpr uint8_t kKnownFlags = REQ_SIGNALED | REQ_FENCE | REQ_SMALL_FENCE | REQ_INLINE | REQ_SOLICITED;

// The operations, by their mlx5 numbers.
using mlx5::OP_ATOMIC_CS;
using mlx5::OP_ATOMIC_FA;
using mlx5::OP_DUMP;
using mlx5::OP_NOP;
using mlx5::OP_RDMA_READ;
using mlx5::OP_RDMA_WRITE;
using mlx5::OP_RDMA_WRITE_IMM;

// How a family's WQE builder picks a request's shape (mlx5/wqe.h): with
// run-time selects over every shape (`select`), or by one dispatch per
// request to a builder of that shape alone (`by_shape`). Same bytes either
// way; which is cheaper depends on the caller (SendQueue::post takes
// by_shape where the family offers it, gin/lanes.h's post_lane select).
enum class ShapePolicy : uint8_t { select, by_shape };

// Whether a family with neither NOP nor DUMP (bnxt_re, ionic) can encode
// `r`: a WRITE of 1 byte to 2 GiB or of 1..8 inline bytes, a WRITE_IMM or
// READ of 1 byte to 2 GiB, an 8-byte atomic; known flags only.
RG_INLINE bool request_valid_without_flush_wqe(const Request& r) {
  if (r.flags & ~kKnownFlags) return false;
  const bool inl = (r.flags & REQ_INLINE) != 0;
  switch (r.opcode) {
    case OP_RDMA_WRITE:
      return inl ? r.length >= 1 && r.length <= 8 : r.length >= 1 && r.length <= 0x80000000u;
    case OP_RDMA_WRITE_IMM:
    case OP_RDMA_READ:
      return !inl && r.length >= 1 && r.length <= 0x80000000u;
    case OP_ATOMIC_FA:
    case OP_ATOMIC_CS:
      return !inl && r.length == 8;
    default:
      return false;
  }
}

// The queue's host doorbell (abi/host_doorbell.h), for the host build's
// stores to the NIC; the GPU never reads it. Any family's descriptor.
template <typename Desc>
RG_INLINE uint64_t host_doorbell(const Desc* d) {
#if RG_GPU
  (void)d;
  return 0;
#else
  return d->host_doorbell;
#endif
}

// Extends a completion's 16-bit "one past the completed WQE" count to the
// 64-bit index space: it lies less than 2^16 WQEs ahead of `done`.
RG_INLINE uint64_t extend16(uint64_t done, uint16_t end16) {
  return done + static_cast<uint16_t>(end16 - static_cast<uint16_t>(done));
}

}  // namespace queue
}  // namespace rust_gin
