// Building one WQE from a request: a pure function of its inputs, so the same
// bytes come out of the GPU build, the host build and the oracle tests.
#pragma once

#include "rust_gin/abi/mlx5_queue.h"
#include "rust_gin/mlx5/wire.h"

namespace rust_gin {
namespace mlx5 {

// One operation for a send queue (layout shared with the host: abi/mlx5_queue.h).
typedef rust_gin_mlx5_request Request;
enum RequestFlags : uint8_t {
  REQ_SIGNALED = RUST_GIN_REQ_SIGNALED,
  REQ_FENCE = RUST_GIN_REQ_FENCE,
  REQ_SMALL_FENCE = RUST_GIN_REQ_SMALL_FENCE,
  REQ_INLINE = RUST_GIN_REQ_INLINE,
  REQ_SOLICITED = RUST_GIN_REQ_SOLICITED,
};

RG_INLINE uint8_t fm_ce_se_of(const Request& r, bool cq_update) {
  uint8_t f = cq_update ? static_cast<uint8_t>(CTRL_CQ_UPDATE) : 0;
  if (r.flags & REQ_FENCE) f |= CTRL_FENCE;
  else if (r.flags & REQ_SMALL_FENCE) f |= CTRL_INITIATOR_SMALL_FENCE;
  if (r.flags & REQ_SOLICITED) f |= CTRL_SOLICITED;
  return f;
}

// The largest inline payload: operand0's 8 bytes (ctrl + raddr + inline
// header + 8 bytes = 44 bytes, DS 3, one WQEBB).
constexpr uint32_t kMaxInline = 8;
// The largest message of one RC WQE (2^31 bytes).
constexpr uint32_t kMaxMessage = 0x80000000u;
constexpr uint8_t kKnownFlags = REQ_SIGNALED | REQ_FENCE | REQ_SMALL_FENCE | REQ_INLINE | REQ_SOLICITED;

// Whether build_wqe can encode `r` as the NIC will read it. Refused: unknown
// opcodes and flags; a WRITE or READ of 0 bytes (a data segment's
// byte_count of 0 means 2 GiB to mlx5) or of more than 2 GiB; inline data
// other than 1..8 bytes, or on anything but a WRITE; atomics not of 8 bytes.
RG_INLINE bool request_valid(const Request& r) {
  if (r.flags & ~kKnownFlags) return false;
  const bool inl = (r.flags & REQ_INLINE) != 0;
  switch (r.opcode) {
    case OP_NOP:
      return !inl;
    case OP_RDMA_WRITE:
    case OP_RDMA_WRITE_IMM:
      return inl ? r.length >= 1 && r.length <= kMaxInline : r.length >= 1 && r.length <= kMaxMessage;
    case OP_RDMA_READ:
      return !inl && r.length >= 1 && r.length <= kMaxMessage;
    case OP_ATOMIC_FA:
    case OP_ATOMIC_CS:
      return !inl && r.length == 8;
    default:
      return false;
  }
}

// Every WQE this library posts is one WQEBB: ctrl + raddr + data (DS 3),
// ctrl + raddr + inline (DS 3), ctrl + raddr + atomic + data (DS 4), or a
// lone ctrl (NOP, DS 1). Keeping to one WQEBB lets completion credit be
// computed from a CQE's wqe_counter alone.
RG_INLINE Wqe64 build_wqe(const Request& r, uint16_t index, uint32_t qpn, bool cq_update) {
  Wqe64 q;
  const uint8_t fm = fm_ce_se_of(r, cq_update);
  switch (r.opcode) {
    case OP_NOP:
      set_ctrl(q, index, OP_NOP, 0, qpn, fm, 1, 0, 0);
      zero_from(q, 4);
      break;
    case OP_ATOMIC_FA:
    case OP_ATOMIC_CS:
      set_ctrl(q, index, r.opcode, 0, qpn, fm, 4, 0, 0);
      set_raddr(q, 4, r.raddr, r.rkey);
      set_atomic(q, 8, r.operand0, r.opcode == OP_ATOMIC_CS ? r.operand1 : 0);
      set_data(q, 12, 8, r.lkey, r.laddr);
      break;
    default:  // RDMA_WRITE, RDMA_WRITE_IMM, RDMA_READ
      set_ctrl(q, index, r.opcode, 0, qpn, fm, 3, 0, r.opcode == OP_RDMA_WRITE_IMM ? r.imm : 0);
      set_raddr(q, 4, r.raddr, r.rkey);
      // Inline only for WRITEs (a READ has a scatter list, never inline data).
      if ((r.flags & REQ_INLINE) && r.opcode != OP_RDMA_READ) {
        set_inline8(q, 8, r.operand0, r.length);
      } else {
        set_data(q, 8, r.length, r.lkey, r.laddr);
      }
      zero_from(q, 12);
      break;
  }
  return q;
}

}  // namespace mlx5
}  // namespace rust_gin
