// AMD ionic (Pollara) as a NIC-family policy of the family-neutral producer
// and completion protocol (queue/send_queue.h): WQEs, doorbells and CQEs
// from ionic/wire.h. docs/architecture.md, "NIC families", has the interface
// and what this first pass leaves out.
//
// - One 64-byte WQE per ticket; its colour (the SQ's pass parity) is in its
//   flags, its index is the ring position.
// - The opcodes and atomic body of the firmware's WQE ABI version, which
//   the host read from the NIC (rust_gin_nic_sq.wqe_abi): version 1 writes
//   enum ionic_v1_op and ionic_v1_atomic_bdy (the result's SGE at @48),
//   version 2 the v2 ones (lkey @44, local_va @48). The tables overlap, so
//   a v2 FETCH_ADD on a v1 NIC would run as a WRITE_IMM.
// - No doorbell record: the doorbell (qid << 24 | next free index) carries
//   the index; WQEs are made visible by a system-scope release before it.
//   The QP must be in GDA mode for the GPU's doorbell to count (host side).
// - The CQ doorbell returns CQ credit after every poll that consumed CQEs.
// - No NOP or DUMP: every batch's last WQE asks for a CQE (kFlushWqe false).
#pragma once

#include "rust_gin/abi/nic_queue.h"
#include "rust_gin/core/error.h"
#include "rust_gin/ionic/wire.h"
#include "rust_gin/queue/nic_family.h"
#include "rust_gin/queue/request.h"

namespace rust_gin {
namespace ionic {

using queue::Request;

RG_INLINE uint16_t wqe_flags_of(const Request& r, bool cq_update) {
  uint16_t f = cq_update ? static_cast<uint16_t>(FLAG_SIG) : 0;
  if (r.flags & (queue::REQ_FENCE | queue::REQ_SMALL_FENCE)) f |= FLAG_FENCE;
  if (r.flags & queue::REQ_SOLICITED) f |= FLAG_SOL;
  return f;
}

// Whether the family can encode `r` (queue/request.h): no NOP or DUMP.
RG_INLINE bool request_valid(const Request& r) { return queue::request_valid_without_flush_wqe(r); }

// The 64-byte WQE for `r` at ring position `idx` with pass colour `color`:
// the bytes ionic/wire.h's builders (wqe_rdma, wqe_write_inline8,
// wqe_atomic_v1/v2) make, computed 16 bytes at a time by selects and handed
// to `store(i, quad)` as soon as each exists (as mlx5's emit_wqe). `v1`: the
// NIC's firmware WQE ABI is version 1.
typedef uint32_t Quad __attribute__((vector_size(16)));
RG_INLINE uint8_t opcode_of(uint8_t op, bool v1) {
  typedef uint8_t U;
  return op == queue::OP_ATOMIC_FA        ? (v1 ? U{V1_OP_ATOMIC_FA} : U{V2_OP_ATOMIC_FA})
         : op == queue::OP_ATOMIC_CS      ? (v1 ? U{V1_OP_ATOMIC_CS} : U{V2_OP_ATOMIC_CS})
         : op == queue::OP_RDMA_READ      ? (v1 ? U{V1_OP_RDMA_READ} : U{V2_OP_RDMA_READ})
         : op == queue::OP_RDMA_WRITE_IMM ? (v1 ? U{V1_OP_RDMA_WRITE_IMM} : U{V2_OP_RDMA_WRITE_IMM})
                                          : (v1 ? U{V1_OP_RDMA_WRITE} : U{V2_OP_RDMA_WRITE});
}
template <typename Store>
RG_INLINE void emit_wqe(const Request& r, uint16_t idx, uint32_t color, bool cq_update, bool v1, Store store) {
  const uint8_t op = r.opcode;
  const bool atomic = op == queue::OP_ATOMIC_FA || op == queue::OP_ATOMIC_CS;
  const bool inl = (r.flags & queue::REQ_INLINE) && op == queue::OP_RDMA_WRITE;
  const uint8_t iop = opcode_of(op, v1);
  uint16_t f = wqe_flags_of(r, cq_update);
  f = atomic ? static_cast<uint16_t>(f & ~(FLAG_INL | FLAG_SOL)) : inl ? static_cast<uint16_t>(f | FLAG_INL) : f;
  f = wqe_flags(f, color);
  const uint32_t imm = op == queue::OP_RDMA_WRITE_IMM ? r.imm : 0u;  // as given (wire order)
  store(0, Quad{idx, 0, iop | (static_cast<uint32_t>(inl ? 0 : 1) << 8) | (static_cast<uint32_t>(bswap16(f)) << 16),
                imm});
  const uint64_t compare = op == queue::OP_ATOMIC_CS ? r.operand1 : 0;
  store(1, Quad{bswap32(static_cast<uint32_t>(r.raddr >> 32)), bswap32(static_cast<uint32_t>(r.raddr)), bswap32(r.rkey),
                bswap32(atomic ? static_cast<uint32_t>(r.operand0 >> 32) : r.length)});
  const uint64_t va = bswap64(r.laddr);
  uint64_t value = r.operand0;
  if (r.length < 8) value &= (uint64_t{1} << (8 * r.length)) - 1;
  // Atomics: v2 keeps lkey @44 and local_va @48; v1 leaves @44 reserved
  // and puts the result's SGE (va, len 8, lkey) at @48.
  store(2, atomic ? Quad{bswap32(static_cast<uint32_t>(r.operand0)), bswap32(static_cast<uint32_t>(compare >> 32)),
                         bswap32(static_cast<uint32_t>(compare)), v1 ? 0u : bswap32(r.lkey)}
           : inl ? Quad{static_cast<uint32_t>(value), static_cast<uint32_t>(value >> 32), 0, 0}
                 : Quad{static_cast<uint32_t>(va), static_cast<uint32_t>(va >> 32), bswap32(r.length), bswap32(r.lkey)});
  store(3, atomic ? Quad{static_cast<uint32_t>(va), static_cast<uint32_t>(va >> 32), v1 ? bswap32(8u) : 0u,
                         v1 ? bswap32(r.lkey) : 0u}
                  : Quad{0, 0, 0, 0});
}

struct Family : queue::NicSqFamily<Family> {
  // The doorbell names the producer modulo the ring, so a full ring would
  // read as an empty one: one WQE stays free, as rdma-core's ionic_queue_full
  // keeps it ((prod + 1) & mask == cons). tests/emu_families.rs hangs without.
  static constexpr uint32_t kRingSlack = 1;
  // The batch's read of the descriptor (queue/nic_family.h) plus the
  // firmware WQE ABI version the host read from the NIC.
  struct Slots {
    uint64_t buf;
    uint32_t log;
    bool v1;
  };
  RG_INLINE static Slots slots(const Desc* d) {
    return Slots{load_invariant(&d->wqe_buf), load_invariant(&d->log_wqe_cnt), load_invariant(&d->wqe_abi) == 1};
  }
  RG_INLINE static void write(const Slots& s, uint64_t index, const Request& r, bool cq_update) {
    const uint64_t slot = index & mask(s.log);
    Quad* dst = reinterpret_cast<Quad*>(s.buf + slot * WQE_BYTES);
    emit_wqe(r, static_cast<uint16_t>(slot), color_for(index, 1u << s.log), cq_update, s.v1,
             [dst](unsigned i, const Quad& q) { dst[i] = q; });
  }

  RG_INLINE static uint64_t sq_doorbell(const Desc* d, uint64_t pi) {
    return db_value(load_invariant(&d->qpn), static_cast<uint16_t>(pi & mask(load_invariant(&d->log_wqe_cnt))));
  }

  struct Cqe {
    const uint8_t* p;
    uint32_t qtf;  // qid_type_flags, host order
  };
  RG_INLINE static bool cqe_next(const Desc* d, CqRing log, uint64_t ci, Cqe* c) {
    c->p = reinterpret_cast<const uint8_t*>(load_invariant(&d->cq_buf)) + ((ci & mask(log)) * CQE_BYTES);
    c->qtf = cqe_qtf(atomic_load(reinterpret_cast<const uint32_t*>(c->p + offsetof(ionic::Cqe, qid_type_flags)),
                                 __ATOMIC_RELAXED, Scope::system));
    return cqe_is_valid(c->qtf, ci, 1u << log);
  }
  // SEND_MSN (remote operations): msg_msn counts the completed messages, so
  // it is one past the newest completed WQE; SEND_NPG names the WQE. Taken
  // modulo the ring, a CQE completes 1..depth WQEs.
  RG_INLINE static uint64_t cqe_end(const Desc* d, const Cqe& c, uint64_t done) {
    uint32_t end;
    if (cqe_type(c.qtf) == CQE_TYPE_SEND_NPG) {
      end = 1 + atomic_load(reinterpret_cast<const uint32_t*>(c.p + offsetof(ionic::Cqe, npg_wqe_idx_timestamp)),
                            __ATOMIC_RELAXED, Scope::system);
    } else {
      end = bswap32(atomic_load(reinterpret_cast<const uint32_t*>(c.p + offsetof(ionic::Cqe, msg_msn)),
                                __ATOMIC_RELAXED, Scope::system));
    }
    const uint32_t m = mask(load_invariant(&d->log_wqe_cnt));
    const uint32_t n = (end - static_cast<uint32_t>(done)) & m;
    return done + (n ? n : m + 1);
  }
  RG_INLINE static bool cqe_failed(const Cqe& c) { return ionic::cqe_error(c.qtf); }
  RG_INLINE static ErrorInfo cqe_error(const Desc* d, const Cqe& c, uint64_t end) {
    ErrorInfo e = {};
    e.qpn = cqe_qid(c.qtf);
    (void)d;
    e.wqe_index = static_cast<uint32_t>((end - 1) & 0xffff);
    e.syndrome = static_cast<uint8_t>(bswap32(atomic_load(
        reinterpret_cast<const uint32_t*>(c.p + offsetof(ionic::Cqe, status_length)), __ATOMIC_RELAXED,
        Scope::system)));  // enum ionic_status
    e.vendor_syndrome = static_cast<uint8_t>(cqe_type(c.qtf));
    return e;
  }
  // The CQ doorbell (cqid << 24 | consumer index) returns CQ credit, behind
  // a release like every doorbell.
  RG_INLINE static void cq_consumed(const Desc* d, uint64_t ci) {
    ring_cq(d, db_value(load_invariant(&d->cqn), static_cast<uint16_t>(ci & mask(load_invariant(&d->log_cq_cnt)))));
  }
};

}  // namespace ionic
}  // namespace rust_gin
