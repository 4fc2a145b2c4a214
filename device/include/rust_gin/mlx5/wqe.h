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
using queue::ShapePolicy;
using queue::kKnownFlags;

// Bit arithmetic, not selects: each request flag moves to its control-
// segment bit, and a strong fence drops the small one (as the selects did,
// which cost x86 two branches per WQE).
static_assert(REQ_FENCE << 6 == CTRL_FENCE && REQ_SMALL_FENCE << 3 == CTRL_INITIATOR_SMALL_FENCE &&
                  REQ_SOLICITED >> 3 == CTRL_SOLICITED && REQ_FENCE << 1 == REQ_SMALL_FENCE,
              "request flags map onto fm_ce_se by shifts");
RG_INLINE uint8_t fm_ce_se_of(const Request& r, bool cq_update) {
  const uint32_t f = r.flags;
  const uint32_t small = f & ~(f << 1) & REQ_SMALL_FENCE;  // a FENCE clears it
  return static_cast<uint8_t>((cq_update ? CTRL_CQ_UPDATE : 0) | ((f & REQ_FENCE) << 6) | (small << 3) |
                              ((f & REQ_SOLICITED) >> 3));
}

// The largest inline payload: operand0's 8 bytes (ctrl + raddr + inline
// header + 8 bytes = 44 bytes, DS 3, one WQEBB).
constexpr uint32_t kMaxInline = 8;
// The largest message of one RC WQE (2^31 bytes).
constexpr uint32_t kMaxMessage = 0x80000000u;
// Each length range of shape_rule spans 2^k values (hi - lo = 2^k - 1: the
// data, inline, atomic and NOP ranges), so that a list's lengths fit where
// the OR of their (length - lo) does (check_list, rust_gin_device.hip).
// Another range stays correct but sends its lists to the one-by-one check.
static_assert(((kMaxMessage - 1) & kMaxMessage) == 0 && ((kMaxInline - 1) & kMaxInline) == 0,
              "a length range of shape_rule no longer spans 2^k values");

// Every WQE this library posts is one WQEBB: ctrl + raddr + data (DS 3),
// ctrl + raddr + inline (DS 3), ctrl + raddr + atomic + data (DS 4),
// ctrl + data (DUMP, DS 2) or a lone ctrl (NOP, DS 1). Keeping to one WQEBB
// lets completion credit be computed from a CQE's wqe_counter alone.
//
// The shapes, and `any`: the shape chosen at run time by selects (and, from
// request_shape, no shape: a request build_wqe cannot encode).
enum class Shape : uint8_t { any, nop, dump, data, inl, atomic };

// What build_wqe makes of requests of one opcode and flags: their shape
// (Shape::any: none, it cannot encode them) where their length lies in
// [lo, hi]. Refused: unknown opcodes and flags; a WRITE or READ of 0 bytes
// (a data segment's byte_count of 0 means 2 GiB to mlx5) or of more than
// 2 GiB; inline data other than 1..8 bytes, or on anything but a WRITE;
// atomics not of 8 bytes. A NOP moves nothing: any length.
struct ShapeRule {
  Shape shape;
  uint32_t lo, hi;
};
RG_INLINE ShapeRule shape_rule(uint8_t opcode, uint8_t flags) {
  const ShapeRule none = {Shape::any, 1, 0};
  if (flags & ~kKnownFlags) return none;
  const bool inl = (flags & REQ_INLINE) != 0;
  switch (opcode) {
    case OP_NOP:
      return inl ? none : ShapeRule{Shape::nop, 0, 0xffffffffu};
    case OP_RDMA_WRITE:
    case OP_RDMA_WRITE_IMM:
      return inl ? ShapeRule{Shape::inl, 1, kMaxInline} : ShapeRule{Shape::data, 1, kMaxMessage};
    case OP_RDMA_READ:
      return inl ? none : ShapeRule{Shape::data, 1, kMaxMessage};
    case OP_DUMP:
      return inl ? none : ShapeRule{Shape::dump, 1, kMaxMessage};
    case OP_ATOMIC_FA:
    case OP_ATOMIC_CS:
      return inl ? none : ShapeRule{Shape::atomic, 8, 8};
    default:
      return none;
  }
}
RG_INLINE bool length_fits(const ShapeRule& k, uint32_t length) { return length - k.lo <= k.hi - k.lo; }

// The shape build_wqe gives `r`, or Shape::any where it cannot encode `r`
// as the NIC will read it (shape_rule).
RG_INLINE Shape request_shape(const Request& r) {
  const ShapeRule k = shape_rule(r.opcode, r.flags);
  return length_fits(k, r.length) ? k.shape : Shape::any;
}
RG_INLINE bool request_valid(const Request& r) { return request_shape(r) != Shape::any; }

// What a WQE's control segment takes from its request besides the index
// and the CQE flag: the opcode, and fm_ce_se's fence and solicited bits.
// The writer of a list of one ListKind (below) builds with a constant one.
struct Head {
  uint8_t op;
  uint8_t fm;
};
RG_INLINE Head head_of(const Request& r) { return Head{r.opcode, fm_ce_se_of(r, false)}; }

// One WQE of shape S (or of r's shape, S == any), with the opcode and fence
// bits from `h` (head_of(r), or a list's constant Head) and every other
// field from r. The WQE goes out as four 16-byte segments, each handed to
// `store(i, seg)` as soon as it exists: only one segment is live at a time,
// which keeps the register cost of the builder low in every kernel that
// posts. One body for every shape: for a fixed S the selects below are
// compile-time constants and fold into a straight-line builder of that
// shape's segments alone. `ds_extra` octowords of transport segment (DC:
// the datagram segment) sit between ctrl and the rest; the caller stores
// them and places the rest.
template <Shape S, typename Store>
RG_INLINE void emit_shape_with(Head h, const Request& r, uint16_t index, uint32_t qpn, bool cq_update, Store store,
                               uint8_t ds_extra) {
  const uint8_t op = h.op;
  const bool any = S == Shape::any;
  const bool nop = any ? op == OP_NOP : S == Shape::nop;
  const bool dump = any ? op == OP_DUMP : S == Shape::dump;
  const bool atomic = any ? op == OP_ATOMIC_FA || op == OP_ATOMIC_CS : S == Shape::atomic;
  // Inline only for WRITEs (a READ has a scatter list, never inline data).
  const bool inl = any ? (r.flags & REQ_INLINE) && op != OP_RDMA_READ : S == Shape::inl;
  const uint8_t ds = (nop ? 1 : dump ? 2 : atomic ? 4 : 3) + ds_extra;
  const Seg zero = {0, 0, 0, 0};
  // A shift, not a select: g++ made the select a branch per WQE.
  static_assert(CTRL_CQ_UPDATE == 1u << 3, "cq_update moves onto CQ_UPDATE by a shift");
  const uint8_t fm = static_cast<uint8_t>(h.fm | (static_cast<uint8_t>(cq_update) << 3));
  store(0, seg_ctrl(index, op, 0, qpn, fm, ds, 0, op == OP_RDMA_WRITE_IMM ? r.imm : 0));
  // An atomic's result segment has byte_count 8, as rdma-core writes it.
  const Seg data = seg_data(atomic ? 8 : r.length, r.lkey, r.laddr);
  store(1, nop ? zero : dump ? data : seg_raddr(r.raddr, r.rkey));
  store(2, nop || dump ? zero
           : atomic    ? seg_atomic(r.operand0, op == OP_ATOMIC_CS ? r.operand1 : 0)
           : inl       ? seg_inline8(r.operand0, r.length)
                       : data);
  store(3, atomic ? data : zero);
}

// The same with the request's own opcode and fence bits.
template <Shape S, typename Store>
RG_INLINE void emit_shape(const Request& r, uint16_t index, uint32_t qpn, bool cq_update, Store store,
                          uint8_t ds_extra) {
  emit_shape_with<S>(head_of(r), r, index, qpn, cq_update, store, ds_extra);
}

// The lists whose WQEs are built with shape, opcode and fence bits all
// known at compile time (Family::batch): every request of one of these
// operations, with no flag but SIGNALED (and INLINE for inline WRITEs).
// What GIN puts, values and signals post in bulk; any other list is
// `mixed`, and each of its requests is built by its own shape.
enum class ListKind : uint8_t { mixed, write, write_inline, fetch_add };

// The kind of a list whose requests share `op` and, but for SIGNALED,
// `flags`.
RG_INLINE ListKind list_kind(uint8_t op, uint8_t flags) {
  const uint8_t f = flags & ~REQ_SIGNALED;
  if (op == OP_RDMA_WRITE) return f == 0 ? ListKind::write : f == REQ_INLINE ? ListKind::write_inline : ListKind::mixed;
  return op == OP_ATOMIC_FA && f == 0 ? ListKind::fetch_add : ListKind::mixed;
}

// The shape picked by policy (queue/request.h): `select` builds with the
// run-time selects of S == any, `by_shape` dispatches once per request, on
// its opcode and inline flag, to the shape's own builder. by_shape takes
// fewer instructions per WQE where requests are read from memory (x86:
// 167 -> 157 per WQE in batches of 64) but costs registers where a kernel
// builds requests of several shapes in registers (rust_gin_put 62 -> 63
// VGPRs, rust_gin_signal_peer 50 -> 52): mixed lists take by_shape (lists
// of one ListKind their own loops, mlx5/family.h), the GIN operations
// select. docs/performance.md, "Posting core".
template <ShapePolicy P = ShapePolicy::select, typename Store>
RG_INLINE void emit_wqe(const Request& r, uint16_t index, uint32_t qpn, bool cq_update, Store store,
                        uint8_t ds_extra = 0) {
  if constexpr (P == ShapePolicy::select) {
    emit_shape<Shape::any>(r, index, qpn, cq_update, store, ds_extra);
  } else {
    const uint8_t op = r.opcode;
    if (op == OP_ATOMIC_FA || op == OP_ATOMIC_CS) {
      emit_shape<Shape::atomic>(r, index, qpn, cq_update, store, ds_extra);
    } else if (op == OP_NOP) {
      emit_shape<Shape::nop>(r, index, qpn, cq_update, store, ds_extra);
    } else if (op == OP_DUMP) {
      emit_shape<Shape::dump>(r, index, qpn, cq_update, store, ds_extra);
    } else if ((r.flags & REQ_INLINE) && op != OP_RDMA_READ) {
      emit_shape<Shape::inl>(r, index, qpn, cq_update, store, ds_extra);
    } else {
      emit_shape<Shape::data>(r, index, qpn, cq_update, store, ds_extra);
    }
  }
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
//
// One builder for both transports: the RC WQE's segments after ctrl move
// three places on (a uniform offset, `gap`), so a DCI costs a kernel no
// registers beyond RC's (a second builder did: 11 more VGPRs in put).
// `shift` is the queue's wqe_shift (0: RC, the one-WQEBB WQE; 1: DC).
template <ShapePolicy P = ShapePolicy::select>
RG_INLINE void emit_queue_wqe(const Request& r, uint64_t ticket, uint32_t shift, uint32_t qpn, bool cq_update,
                              const uint64_t* dc_targets, Seg* dst) {
  const uint8_t op = r.opcode;
  const bool local = op == OP_NOP || op == OP_DUMP;
  const uint32_t gap = shift && !local ? 3 : 0;
  const uint16_t index = static_cast<uint16_t>(ticket << shift);
  // The segments after ctrl go `gap` places on: through a pointer of their
  // own (one builder for both transports: two cost 11 more VGPRs in put).
  Seg* rest = dst + gap;
  emit_wqe<P>(r, index, qpn, cq_update && !(shift && local),
           [dst, rest](unsigned i, const Seg& seg) {
             if (i == 0) store_seg(dst, seg);
             else store_seg(rest + i, seg);
           },
           static_cast<uint8_t>(gap));
  if (!shift) return;
  const Seg zero = {0, 0, 0, 0};
  if (local) {
    store_seg(dst + 4, seg_ctrl(static_cast<uint16_t>(index + 1), OP_NOP, 0, qpn,
                                cq_update ? static_cast<uint8_t>(CTRL_CQ_UPDATE) : 0, 1, 0, 0));
    store_seg(dst + 5, zero);
    store_seg(dst + 6, zero);
  } else {
    // The datagram segment last, one segment at a time, when the request's
    // registers are free again: it is copied, not built, and a WQE's
    // stores may land in any order before it is published. Its address
    // only now, a 32-bit offset from the (scalar) table base.
    const Seg* table = reinterpret_cast<const Seg*>(load_invariant(dc_targets));
    const uint32_t at = r.dc_target * (RUST_GIN_MLX5_DC_TARGET_STRIDE / sizeof(Seg));
#if defined(__clang__)
#pragma unroll 1
#endif
    for (uint32_t k = 0; k < 3; ++k) store_seg(dst + 1 + k, table[at + k]);
  }
  store_seg(dst + 7, zero);
}

template <ShapePolicy P = ShapePolicy::select>
RG_INLINE void emit_dc_wqe(const Request& r, uint64_t ticket, uint32_t qpn, bool cq_update, const Seg* av, Seg* dst) {
  Request one = r;
  one.dc_target = 0;  // `av` is the one target
  const uint64_t table = reinterpret_cast<uint64_t>(av);
  emit_queue_wqe<P>(one, ticket, 1, qpn, cq_update, &table, dst);
}

// A DC WQE as 128 bytes (the oracle tests).
struct alignas(16) Wqe128 {
  uint32_t w[32];
};
RG_INLINE Wqe128 build_dc_wqe(const Request& r, uint64_t ticket, uint32_t qpn, bool cq_update, const Seg* av) {
  Wqe128 q;
  emit_dc_wqe(r, ticket, qpn, cq_update, av, reinterpret_cast<Seg*>(q.w));
  return q;
}

}  // namespace mlx5
}  // namespace rust_gin
