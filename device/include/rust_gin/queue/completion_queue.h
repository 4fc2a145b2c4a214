// Completion polling for one send queue's CQ, written once for every NIC
// family: ownership of the next CQE (the family's validity bit: mlx5's owner
// bit, bnxt_re's phase, ionic's colour), credit from the completion's WQE
// count, and error CQEs turned into the sticky error. One poller at a time
// (try-lock); others simply retry later. The family policy F reads its own
// CQE format (F::cqe_next, cqe_end, cqe_failed, cqe_error) and tells the NIC
// how far the CQ was consumed (F::cq_consumed).
#pragma once

#include "rust_gin/abi/mlx5_queue.h"
#include "rust_gin/core/error.h"
#include "rust_gin/port/stage.h"
#include "rust_gin/queue/request.h"

namespace rust_gin {
namespace queue {

template <class F>
class CompletionQueue {
 public:
  typedef typename F::Desc Desc;

  RG_INLINE explicit CompletionQueue(const Desc* d)
      : d_(d), st_(reinterpret_cast<rust_gin_mlx5_sq_state*>(load_invariant(&d->state))) {}

  // Consumes every CQE the NIC has written. Returns RUST_GIN_ERR_CQE if one of
  // them was an error completion.
  RG_INLINE int poll() {
    if (atomic_exchange(&st_->poll_lock, 1u, __ATOMIC_ACQUIRE, Scope::agent) != 0) return RUST_GIN_OK;
    uint64_t ci = atomic_load(&st_->cq_ci, __ATOMIC_RELAXED, Scope::agent);
    uint64_t done = atomic_load(&st_->done, __ATOMIC_RELAXED, Scope::agent);
    // What the family computes once per poll (mlx5: the ring mask).
    const typename F::CqRing ring = F::cq_ring(d_);
    int status = RUST_GIN_OK;
    uint32_t consumed = 0;
    for (;;) {
      typename F::Cqe c;
      if (!F::cqe_next(d_, ring, ci, &c)) break;
      fence_acquire_system();
      // One end per CQE, computed before the error path: recomputed after
      // it (its loads are atomics, never merged across the error record's
      // stores) it kept the CQE's fields live through the error record and
      // cost ionic's put and get 4 VGPRs (tests/isa_checks.rs).
      const uint64_t end = F::cqe_end(d_, c, done);
      if (F::cqe_failed(c)) {
        on_error_cqe(c, end);
        status = RUST_GIN_ERR_CQE;
      }
      done = end;
      ++ci;
      ++consumed;
    }
    if (consumed) {
      // Tell the NIC how far we consumed (mlx5: the CQ doorbell record;
      // bnxt_re, ionic: the CQ doorbell) before handing out the credit: new
      // WQEs may produce new CQEs, and the NIC must already see the room
      // they need.
      F::cq_consumed(d_, ci);
      atomic_exchange(&st_->cq_ci, ci, __ATOMIC_RELAXED, Scope::agent);
      atomic_fetch_max(&st_->done, done, __ATOMIC_RELEASE, Scope::agent);
      RG_STAGE(RUST_GIN_STAGE_CQE, st_, done);
    }
    atomic_exchange(&st_->poll_lock, 0u, __ATOMIC_RELEASE, Scope::agent);
    return status;
  }

 private:
  // `end` is 1 + the failed WQE's index.
  RG_INLINE void on_error_cqe(const typename F::Cqe& c, uint64_t end) {
    // The family's fields first (what its CQE says), then ours.
    ErrorInfo e = F::cqe_error(d_, c, end);
    e.code = RUST_GIN_ERR_CQE;
    e.peer = load_invariant(&d_->peer);
    // The first error CQE is the cause; flush errors that follow only count.
    record_error(reinterpret_cast<rust_gin_error*>(load_invariant(&d_->error)), e);
    // The first failed WQE: counted puts from there on never advance.
    uint64_t none = 0;
    atomic_cas(&st_->failed_end, &none, end, __ATOMIC_RELAXED, Scope::agent);
    atomic_exchange(&st_->failed, 1u, __ATOMIC_RELAXED, Scope::agent);
  }

  const Desc* d_;  // read-only: read field by field, never copied
  rust_gin_mlx5_sq_state* st_;
};

}  // namespace queue
}  // namespace rust_gin
