// mlx5 (ConnectX) as a NIC-family policy of the family-neutral producer and
// completion protocol (queue/send_queue.h, queue/completion_queue.h): its
// descriptor, WQE writes, doorbell sequence and CQE format. The interface
// every family implements is described in docs/architecture.md, "NIC
// families".
#pragma once

#include "rust_gin/abi/mlx5_queue.h"
#include "rust_gin/core/error.h"
#include "rust_gin/mlx5/wire.h"
#include "rust_gin/mlx5/wqe.h"
#include "rust_gin/queue/request.h"

namespace rust_gin {
namespace mlx5 {

// The send doorbell: the first 8 bytes of a control segment that names the
// QP and the new producer index (as NVSHMEM's IBGDA writes it).
RG_INLINE uint64_t doorbell_value(uint32_t qpn, uint64_t pi) {
  const uint64_t lo = ctrl_opmod_idx_opcode(static_cast<uint16_t>(pi), 0, 0);
  const uint64_t hi = ctrl_qpn_ds(qpn, 0);
  return lo | (hi << 32);
}

// Extends a 16-bit wqe_counter to the 64-bit index space: the completed WQE
// lies less than 2^16 WQEBBs ahead of `done`.
RG_INLINE uint64_t extend_done(uint64_t done, uint16_t wqe_counter) {
  return queue::extend16(done, static_cast<uint16_t>(wqe_counter + 1));
}

struct Family {
  typedef rust_gin_mlx5_sq Desc;
  // NOP and DUMP exist: a flush posts one when the newest WQE requests no
  // CQE or READs need proving (SendQueue::flush_target).
  static constexpr bool kFlushWqe = true;
  // WQEs the ring keeps free so that the producer index the NIC reads tells
  // a full ring from an empty one: none for mlx5, whose doorbell record
  // counts to 2^16, past any ring.
  static constexpr uint32_t kRingSlack = 0;
  // No PSN table to keep: a ConnectX tracks its PSNs itself. Families that
  // keep one (bnxt_re) have the producer give each WQE its PSN range in
  // ticket order, while the publish turn is held (SendQueue::note_psns).
  static constexpr bool kPsnTable = false;
  // Bytes one WQE moves at most (the RC limit is 2 GiB): the GIN operations
  // split larger puts and gets (gin/ops.h max_chunk).
  static constexpr uint64_t kMaxWqeBytes = uint64_t{1} << 30;
  // One doorbell per published prefix (the ring lock's), never per WQE.
  static constexpr bool kDoorbellPerWqe = false;

  // What a batch's WQE writes read of the descriptor, read once per batch:
  // a CPU compiler must assume the ring's stores alias the descriptor's
  // words and re-read each field per WQE (a GPU hoists its invariant loads
  // either way).
  struct Slots {
    uint64_t buf;
    uint64_t mask;
    const uint64_t* dc_targets;
    uint32_t qpn;
    uint32_t shift;
  };
  RG_INLINE static Slots slots(const Desc* d) {
    Slots s;
    s.buf = load_invariant(&d->wqe_buf);
    s.mask = (uint64_t{1} << load_invariant(&d->log_wqe_cnt)) - 1;
    s.dc_targets = &d->dc_targets;
    s.qpn = load_invariant(&d->qpn);
    s.shift = load_invariant(&d->wqe_shift);
    return s;
  }

  // An RC WQE is one 64-byte WQEBB, written one 16-byte store per segment as
  // it is built (mlx5/wqe.h); a DC initiator's (wqe_shift 1) is two, with
  // the target's datagram segment from the queue's dc_targets. The choice
  // is per queue, read from its wave-uniform descriptor: no lane diverges.
  // P: how the builder picks the request's shape (mlx5/wqe.h, emit_wqe).
  template <ShapePolicy P = ShapePolicy::select>
  RG_INLINE static void write(const Slots& s, uint64_t index, const Request& r, bool cq_update) {
    Seg* dst = reinterpret_cast<Seg*>(s.buf + ((index & s.mask) << (SEND_WQE_SHIFT + s.shift)));
    emit_queue_wqe<P>(r, index, s.shift, s.qpn, cq_update, s.dc_targets, dst);
  }

  // A batch of a caller's list (SendQueue::post_list): `body(w)` runs the
  // batch's loop with a writer w chosen once for the batch, not per WQE:
  // for the queue's transport and, for a list of one kind (`kind`, a
  // ListKind: mlx5/wqe.h), one whose shape, opcode and fence bits are
  // constants. x86 (posting_timing, 8-byte WRITEs in batches of 64): 157
  // -> 66.5 instructions per WQE with mlx5_post's list check. Only these
  // three kinds get a loop of their own, and DC lists take the run-time
  // selects: each loop copy holds registers of its own (a loop per shape
  // for all five shapes and DC by shape cost mlx5_post 68 VGPRs, 3 spilled
  // at 64; one per shape with the list's opcode and fence bits in
  // registers, 66). docs/performance.md, "Posting core".
  template <ListKind K>
  struct RcWriter {
    Slots s;
    RG_INLINE static bool is_read(const Request& r) { return K == ListKind::mixed && r.opcode == OP_RDMA_READ; }
    RG_INLINE void wqe(uint64_t index, const Request& r, bool cq_update) const {
      Seg* dst = reinterpret_cast<Seg*>(s.buf + ((index & s.mask) << SEND_WQE_SHIFT));
      const auto store = [dst](unsigned i, const Seg& seg) { store_seg(dst + i, seg); };
      const uint16_t idx = static_cast<uint16_t>(index);
      if constexpr (K == ListKind::write) {
        emit_shape_with<Shape::data>(Head{OP_RDMA_WRITE, 0}, r, idx, s.qpn, cq_update, store, 0);
      } else if constexpr (K == ListKind::write_inline) {
        emit_shape_with<Shape::inl>(Head{OP_RDMA_WRITE, 0}, r, idx, s.qpn, cq_update, store, 0);
      } else if constexpr (K == ListKind::fetch_add) {
        emit_shape_with<Shape::atomic>(Head{OP_ATOMIC_FA, 0}, r, idx, s.qpn, cq_update, store, 0);
      } else {
        emit_wqe<ShapePolicy::by_shape>(r, idx, s.qpn, cq_update, store);
      }
    }
  };
  struct DcWriter {
    Slots s;
    RG_INLINE static bool is_read(const Request& r) { return r.opcode == OP_RDMA_READ; }
    RG_INLINE void wqe(uint64_t index, const Request& r, bool cq_update) const {
      Family::write<ShapePolicy::select>(s, index, r, cq_update);
    }
  };
  template <typename Body>
  RG_INLINE static void batch(const Slots& s, uint8_t kind, Body body) {
    if (s.shift) return body(DcWriter{s});
    switch (static_cast<ListKind>(kind)) {
      case ListKind::write: return body(RcWriter<ListKind::write>{s});
      case ListKind::write_inline: return body(RcWriter<ListKind::write_inline>{s});
      case ListKind::fetch_add: return body(RcWriter<ListKind::fetch_add>{s});
      default: return body(RcWriter<ListKind::mixed>{s});
    }
  }

  // WQEs, then the doorbell record (be32, 16 bits of the producer index),
  // then the 8-byte doorbell to the UAR, each behind a system-scope release.
  // `pi` counts tickets; the NIC counts WQEBBs (pi << wqe_shift).
  RG_INLINE static void ring(const Desc* d, uint64_t tickets) {
    const uint64_t pi = tickets << load_invariant(&d->wqe_shift);
    volatile uint32_t* dbr = reinterpret_cast<volatile uint32_t*>(load_invariant(&d->dbrec)) + SND_DBR;
#if !defined(RUST_GIN_ISA_FAULT_MISSING_FENCE)
    fence_release_system();  // WQEs before the doorbell record
#endif
    dbr_store32(dbr, bswap32(static_cast<uint32_t>(pi) & 0xffffu), queue::host_doorbell(d));
    fence_release_system();  // doorbell record before the doorbell
    mmio_store64(reinterpret_cast<volatile uint64_t*>(load_invariant(&d->uar_db)),
                 doorbell_value(load_invariant(&d->qpn), pi), queue::host_doorbell(d));
  }

  // What one poll reads of a CQE: wqe_counter, signature and op_own in one
  // load, as the NIC writes them together.
  struct Cqe {
    const uint8_t* p;
    uint32_t tail;
    uint16_t wqe_counter;
  };
  typedef uint32_t CqRing;  // the ring mask
  RG_INLINE static CqRing cq_ring(const Desc* d) { return (1u << load_invariant(&d->log_cq_cnt)) - 1; }
  RG_INLINE static bool cqe_next(const Desc* d, CqRing mask, uint64_t ci, Cqe* c) {
    c->p = reinterpret_cast<const uint8_t*>(load_invariant(&d->cq_buf)) + ((ci & mask) * CQE_SIZE);
#if defined(RUST_GIN_ISA_FAULT_PLAIN_CQE_LOAD)
    // Planted fault for the NIC-written-load rule (tests/isa_path.rs).
    c->tail = *reinterpret_cast<const uint32_t*>(c->p + 60);
#else
    c->tail = atomic_load(reinterpret_cast<const uint32_t*>(c->p + 60), __ATOMIC_RELAXED, Scope::system);
#endif
    const uint8_t op_own = static_cast<uint8_t>(c->tail >> 24);
    c->wqe_counter = bswap16(static_cast<uint16_t>(c->tail));
    return cqe_is_sw_owned(op_own, static_cast<uint32_t>(ci), load_invariant(&d->log_cq_cnt));
  }
  // 1 + the ticket of the completed WQE. RC: every WQE is one WQEBB. DC:
  // every ticket two WQEBBs, and the CQE names the first (a WRITE, READ or
  // atomic) or the second (the NOP behind a NOP or DUMP): either way the
  // ticket's end is (wqe_counter + 2) / 2, extended in WQEBBs against done.
  RG_INLINE static uint64_t cqe_end(const Desc* d, const Cqe& c, uint64_t done) {
    const uint32_t shift = load_invariant(&d->wqe_shift);
    return queue::extend16(done << shift, static_cast<uint16_t>(c.wqe_counter + (1u << shift))) >> shift;
  }
  RG_INLINE static bool cqe_failed(const Cqe& c) {
    const uint8_t opcode = cqe_opcode(static_cast<uint8_t>(c.tail >> 24));
    return opcode == CQE_REQ_ERR || opcode == CQE_RESP_ERR;
  }
  RG_INLINE static ErrorInfo cqe_error(const Desc*, const Cqe& c, uint64_t) {
    const uint32_t synd_word =
        atomic_load(reinterpret_cast<const uint32_t*>(c.p + 52), __ATOMIC_RELAXED, Scope::system);
    const uint32_t opcode_qpn =
        bswap32(atomic_load(reinterpret_cast<const uint32_t*>(c.p + 56), __ATOMIC_RELAXED, Scope::system));
    ErrorInfo e = {};
    e.qpn = opcode_qpn & 0xffffffu;
    e.wqe_index = c.wqe_counter;
    e.vendor_syndrome = static_cast<uint8_t>(synd_word >> 16);  // byte 54
    e.syndrome = static_cast<uint8_t>(synd_word >> 24);         // byte 55
    e.wqe_opcode = static_cast<uint8_t>(opcode_qpn >> 24);
    return e;
  }
  // The CQ doorbell record: 24 bits of the consumer index, be32.
  RG_INLINE static void cq_consumed(const Desc* d, uint64_t ci) {
    dbr_store32(reinterpret_cast<volatile uint32_t*>(load_invariant(&d->cq_dbrec)),
                bswap32(static_cast<uint32_t>(ci) & 0xffffffu), queue::host_doorbell(d));
  }
};

}  // namespace mlx5
}  // namespace rust_gin
