// Building one WQE from a request: a pure function of its inputs, so the same
// bytes come out of the GPU build, the host build and the oracle tests.
#pragma once

#include "rust_gin/abi/mlx5_queue.h"
#include "rust_gin/mlx5/wire.h"
#include "rust_gin/queue/request.h"

namespace rust_gin {
namespace mlx5 {

// One operation for a send queue (family-neutral: queue/request.h).
using queue::Request;
using queue::REQ_FENCE;
using queue::REQ_INLINE;
using queue::REQ_SIGNALED;
using queue::REQ_SMALL_FENCE;
using queue::REQ_SOLICITED;
using queue::kKnownFlags;

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
    case OP_DUMP:
      return !inl && r.length >= 1 && r.length <= kMaxMessage;
    case OP_ATOMIC_FA:
    case OP_ATOMIC_CS:
      return !inl && r.length == 8;
    default:
      return false;
  }
}

// Every WQE this library posts is one WQEBB: ctrl + raddr + data (DS 3),
// ctrl + raddr + inline (DS 3), ctrl + raddr + atomic + data (DS 4),
// ctrl + data (DUMP, DS 2) or a lone ctrl (NOP, DS 1). Keeping to one WQEBB
// lets completion credit be computed from a CQE's wqe_counter alone.
//
// The WQE goes out as four 16-byte segments, each computed by selects (no
// branch per opcode) and handed to `store(i, seg)` as soon as it exists:
// only one segment is live at a time, which keeps the register cost of the
// builder low in every kernel that posts.
template <typename Store>
RG_INLINE void emit_wqe(const Request& r, uint16_t index, uint32_t qpn, bool cq_update, Store store) {
  const uint8_t op = r.opcode;
  const bool nop = op == OP_NOP;
  const bool dump = op == OP_DUMP;
  const bool atomic = op == OP_ATOMIC_FA || op == OP_ATOMIC_CS;
  // Inline only for WRITEs (a READ has a scatter list, never inline data).
  const bool inl = (r.flags & REQ_INLINE) && op != OP_RDMA_READ;
  const uint8_t ds = nop ? 1 : dump ? 2 : atomic ? 4 : 3;
  const Seg zero = {0, 0, 0, 0};
  store(0, seg_ctrl(index, op, 0, qpn, fm_ce_se_of(r, cq_update), ds, 0, op == OP_RDMA_WRITE_IMM ? r.imm : 0));
  // An atomic's result segment has byte_count 8, as rdma-core writes it.
  const Seg data = seg_data(atomic ? 8 : r.length, r.lkey, r.laddr);
  store(1, nop ? zero : dump ? data : seg_raddr(r.raddr, r.rkey));
  store(2, nop || dump ? zero
           : atomic    ? seg_atomic(r.operand0, op == OP_ATOMIC_CS ? r.operand1 : 0)
           : inl       ? seg_inline8(r.operand0, r.length)
                       : data);
  store(3, atomic ? data : zero);
}

// A DC initiator's WQE for ticket `ticket`: two WQEBBs (eight 16-byte
// segments), starting at WQEBB index 2 * ticket, so that every ticket is the
// same size and completion credit stays a function of the CQE's wqe_counter
// (family.h). `av` is the target's 48-byte datagram segment (three
// segments, wire order: mlx5/wire.h, set_dc_addr), read here and stored
// as it is.
//   WRITE, READ:  ctrl (DS 6) | datagram x3 | raddr | data or inline | pad x2
//   atomic:       ctrl (DS 7) | datagram x3 | raddr | atomic | data | pad
// rdma-core's order (mlx5_send_wr_set_dc_addr puts the datagram segment
// right after ctrl, _mlx5_send_wr_rdma the raddr segment after it). NOP and
// DUMP go nowhere, so they carry no address: the RC WQE (one WQEBB, DS 1 or
// 2, no CQE) then a DS-1 NOP in the second WQEBB that takes the CQE, which
// completions in order make cover the first. UNVERIFIED on hardware: that
// a DCI executes a NOP or DUMP without a datagram segment.
template <typename Store>
RG_INLINE void emit_dc_wqe(const Request& r, uint64_t ticket, uint32_t qpn, bool cq_update, const Seg* av,
                           Store store) {
  const uint8_t op = r.opcode;
  const uint16_t index = static_cast<uint16_t>(ticket << 1);
  const Seg zero = {0, 0, 0, 0};
  if (op == OP_NOP || op == OP_DUMP) {
    emit_wqe(r, index, qpn, false, store);
    store(4, seg_ctrl(static_cast<uint16_t>(index + 1), OP_NOP, 0, qpn,
                      cq_update ? static_cast<uint8_t>(CTRL_CQ_UPDATE) : 0, 1, 0, 0));
    store(5, zero);
    store(6, zero);
    store(7, zero);
    return;
  }
  const bool atomic = op == OP_ATOMIC_FA || op == OP_ATOMIC_CS;
  const bool inl = (r.flags & REQ_INLINE) && op != OP_RDMA_READ;
  store(0, seg_ctrl(index, op, 0, qpn, fm_ce_se_of(r, cq_update), atomic ? 7 : 6, 0,
                    op == OP_RDMA_WRITE_IMM ? r.imm : 0));
  for (unsigned k = 0; k < 3; ++k) store(1 + k, av[k]);
  store(4, seg_raddr(r.raddr, r.rkey));
  const Seg data = seg_data(atomic ? 8 : r.length, r.lkey, r.laddr);
  store(5, atomic ? seg_atomic(r.operand0, op == OP_ATOMIC_CS ? r.operand1 : 0) : inl ? seg_inline8(r.operand0, r.length) : data);
  store(6, atomic ? data : zero);
  store(7, zero);
}

// The same bytes as one 64-byte value (the entry point and the oracle tests).
RG_INLINE Wqe64 build_wqe(const Request& r, uint16_t index, uint32_t qpn, bool cq_update) {
  Wqe64 q;
  emit_wqe(r, index, qpn, cq_update, [&q](unsigned i, const Seg& seg) {
    for (unsigned k = 0; k < 4; ++k) q.w[4 * i + k] = seg[k];
  });
  return q;
}

// A DC WQE as 128 bytes (the oracle tests).
struct alignas(16) Wqe128 {
  uint32_t w[32];
};
RG_INLINE Wqe128 build_dc_wqe(const Request& r, uint64_t ticket, uint32_t qpn, bool cq_update, const Seg* av) {
  Wqe128 q;
  emit_dc_wqe(r, ticket, qpn, cq_update, av, [&q](unsigned i, const Seg& seg) {
    for (unsigned k = 0; k < 4; ++k) q.w[4 * i + k] = seg[k];
  });
  return q;
}

}  // namespace mlx5
}  // namespace rust_gin
