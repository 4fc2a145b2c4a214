// Completion polling for one send queue's CQ: owner-bit ownership, credit
// from the cumulative wqe_counter, and error CQEs turned into the sticky
// error. One poller at a time (try-lock); others simply retry later.
#pragma once

#include "rust_gin/abi/mlx5_queue.h"
#include "rust_gin/core/error.h"
#include "rust_gin/mlx5/wire.h"

namespace rust_gin {
namespace mlx5 {

// Extends a 16-bit wqe_counter to the 64-bit index space: the completed WQE
// lies less than 2^16 WQEBBs ahead of `done`.
RG_INLINE uint64_t extend_done(uint64_t done, uint16_t wqe_counter) {
  return done + static_cast<uint16_t>(static_cast<uint16_t>(wqe_counter + 1) - static_cast<uint16_t>(done));
}

// The queue's host doorbell (abi/host_doorbell.h), for the host build's
// stores to the NIC; the GPU never reads it.
RG_INLINE uint64_t host_doorbell(const rust_gin_mlx5_sq* d) {
#if RG_GPU
  (void)d;
  return 0;
#else
  return d->host_doorbell;
#endif
}

class CompletionQueue {
 public:
  RG_INLINE explicit CompletionQueue(const rust_gin_mlx5_sq* d)
      : d_(d), st_(reinterpret_cast<rust_gin_mlx5_sq_state*>(load_invariant(&d->state))) {}

  // Consumes every CQE the NIC has written. Returns RUST_GIN_ERR_CQE if one of
  // them was an error completion.
  RG_INLINE int poll() {
    if (atomic_exchange(&st_->poll_lock, 1u, __ATOMIC_ACQUIRE, Scope::agent) != 0) return RUST_GIN_OK;
    uint64_t ci = atomic_load(&st_->cq_ci, __ATOMIC_RELAXED, Scope::agent);
    uint64_t done = atomic_load(&st_->done, __ATOMIC_RELAXED, Scope::agent);
    const uint32_t mask = (1u << rd(d_->log_cq_cnt)) - 1;
    int status = RUST_GIN_OK;
    uint32_t consumed = 0;
    for (;;) {
      const uint8_t* cqe = reinterpret_cast<const uint8_t*>(rd(d_->cq_buf)) + ((ci & mask) * CQE_SIZE);
      // wqe_counter, signature and op_own in one load, as the NIC writes them together.
      const uint32_t tail = atomic_load(reinterpret_cast<const uint32_t*>(cqe + 60), __ATOMIC_RELAXED, Scope::system);
      const uint8_t op_own = static_cast<uint8_t>(tail >> 24);
      if (!cqe_is_sw_owned(op_own, static_cast<uint32_t>(ci), rd(d_->log_cq_cnt))) break;
      fence_acquire_system();
      const uint16_t wqe_counter = bswap16(static_cast<uint16_t>(tail));
      const uint8_t opcode = cqe_opcode(op_own);
      if (opcode == CQE_REQ_ERR || opcode == CQE_RESP_ERR) {
        on_error_cqe(cqe, wqe_counter, extend_done(done, wqe_counter));
        status = RUST_GIN_ERR_CQE;
      }
      done = extend_done(done, wqe_counter);
      ++ci;
      ++consumed;
    }
    if (consumed) {
      // Tell the NIC how far we consumed (CQ doorbell record, 24-bit ci)
      // before handing out the credit: new WQEs may produce new CQEs, and the
      // NIC must already see the room they need.
      dbr_store32(reinterpret_cast<volatile uint32_t*>(rd(d_->cq_dbrec)), bswap32(static_cast<uint32_t>(ci) & 0xffffffu),
                  host_doorbell(d_));
      atomic_exchange(&st_->cq_ci, ci, __ATOMIC_RELAXED, Scope::agent);
      atomic_fetch_max(&st_->done, done, __ATOMIC_RELEASE, Scope::agent);
    }
    atomic_exchange(&st_->poll_lock, 0u, __ATOMIC_RELEASE, Scope::agent);
    return status;
  }

 private:
  // `end` is 1 + the failed WQE's index.
  RG_INLINE void on_error_cqe(const uint8_t* cqe, uint16_t wqe_counter, uint64_t end) {
    const uint32_t synd_word =
        atomic_load(reinterpret_cast<const uint32_t*>(cqe + 52), __ATOMIC_RELAXED, Scope::system);
    const uint32_t opcode_qpn =
        bswap32(atomic_load(reinterpret_cast<const uint32_t*>(cqe + 56), __ATOMIC_RELAXED, Scope::system));
    ErrorInfo e = {};
    e.code = RUST_GIN_ERR_CQE;
    e.peer = rd(d_->peer);
    e.qpn = opcode_qpn & 0xffffffu;
    e.wqe_index = wqe_counter;
    e.vendor_syndrome = static_cast<uint8_t>(synd_word >> 16);  // byte 54
    e.syndrome = static_cast<uint8_t>(synd_word >> 24);         // byte 55
    e.wqe_opcode = static_cast<uint8_t>(opcode_qpn >> 24);
    // The first error CQE is the cause; flush errors that follow only count.
    record_error(reinterpret_cast<rust_gin_error*>(rd(d_->error)), e);
    // The first failed WQE: counted puts from there on never advance.
    uint64_t none = 0;
    atomic_cas(&st_->failed_end, &none, end, __ATOMIC_RELAXED, Scope::agent);
    atomic_exchange(&st_->failed, 1u, __ATOMIC_RELAXED, Scope::agent);
  }

  template <typename T>
  RG_INLINE static T rd(const T& field) {
    return load_invariant(&field);
  }

  const rust_gin_mlx5_sq* d_;  // read-only: read field by field (rd), never copied
  rust_gin_mlx5_sq_state* st_;
};

}  // namespace mlx5
}  // namespace rust_gin
