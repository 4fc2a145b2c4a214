// What the families without a doorbell record (bnxt_re, ionic) share as
// policies of the producer protocol: the descriptor rust_gin_nic_sq, no
// flush WQE, and a doorbell that is one 64-bit store behind a system-scope
// release (docs/architecture.md, "NIC families"). A family derives from
// NicSqFamily<itself> and supplies sq_doorbell(d, pi), write and its CQE
// format (bnxt/family.h, ionic/family.h).
#pragma once

#include "rust_gin/abi/nic_queue.h"
#include "rust_gin/queue/request.h"

namespace rust_gin {
namespace queue {

template <class Derived>
struct NicSqFamily {
  typedef rust_gin_nic_sq Desc;
  // No NOP or DUMP: every batch's last WQE asks for a CQE instead.
  static constexpr bool kFlushWqe = false;
  // WQEs the ring keeps free (see mlx5/family.h).
  static constexpr uint32_t kRingSlack = 0;
  // Whether the family keeps a PSN table the producer writes in ticket order
  // (bnxt_re's MSN search table; see mlx5/family.h). Families that do supply
  // packets(d, req) and note_psn(d, index, start, next).
  static constexpr bool kPsnTable = false;
  // Bytes one WQE moves at most (see mlx5/family.h).
  static constexpr uint64_t kMaxWqeBytes = uint64_t{1} << 30;
  // Whether the family may ring once per WQE (bnxt_re's doorbell policy,
  // SendQueue::ring): then the descriptor's doorbell_group says per WQE (0)
  // or per published batch (1).
  static constexpr bool kDoorbellPerWqe = false;

  RG_INLINE static uint32_t mask(uint32_t log) { return (1u << log) - 1; }

  // What the WQE writes of a batch read of the descriptor, read once
  // (SendQueue::Writer).
  struct Slots {
    uint64_t buf;
    uint32_t log;  // log2 of the ring's WQEs
  };
  RG_INLINE static Slots slots(const Desc* d) { return Slots{load_invariant(&d->wqe_buf), load_invariant(&d->log_wqe_cnt)}; }

  // WQEs, then one 64-bit doorbell carrying the producer index, behind a
  // system-scope release. Doorbells are serialised: only the holder of the
  // protocol's ring lock rings (SendQueue::ring), so they reach the NIC one
  // at a time and in order (ionic's GDA mode requires it; torchcomms#3116
  // saw the NIC drop concurrent stores).
  RG_INLINE static void ring(const Desc* d, uint64_t pi) {
#if !defined(RUST_GIN_ISA_FAULT_MISSING_FENCE)
    fence_release_system();
#endif
    mmio_store64(reinterpret_cast<volatile uint64_t*>(load_invariant(&d->sq_db)), Derived::sq_doorbell(d, pi),
                 host_doorbell(d));
  }

  typedef uint32_t CqRing;  // log2 of the CQ's entries
  RG_INLINE static CqRing cq_ring(const Desc* d) { return load_invariant(&d->log_cq_cnt); }

  // The CQ doorbell `value`, behind a release like every doorbell (the ISA
  // checks hold every 64-bit store of these families to that).
  RG_INLINE static void ring_cq(const Desc* d, uint64_t value) {
    fence_release_system();
    mmio_store64(reinterpret_cast<volatile uint64_t*>(load_invariant(&d->cq_db)), value, host_doorbell(d));
  }
};

}  // namespace queue
}  // namespace rust_gin
