// Sticky device-side errors and bounded waits.
#pragma once

#include "rust_gin/abi/error.h"
#include "rust_gin/port/port.h"

namespace rust_gin {

// What one error looks like before it is stored.
struct ErrorInfo {
  uint32_t code;
  uint32_t peer;
  uint32_t qpn;
  uint32_t wqe_index;
  uint8_t syndrome;
  uint8_t vendor_syndrome;
  uint8_t wqe_opcode;
  uint8_t wait_kind;
  uint64_t expected;
  uint64_t observed;
};

// Keeps the first error (claimed by CAS, published last) and counts the rest.
// Fields are written with atomic exchanges, never plain stores: on the GPU
// plain stores are reserved for WQEs, doorbell records and the doorbell,
// which lets the ISA checks tell them apart.
RG_INLINE void record_error(rust_gin_error* rec, const ErrorInfo& e) {
  atomic_fetch_add(&rec->count, uint64_t{1}, __ATOMIC_RELAXED, Scope::system);
  uint32_t empty = RUST_GIN_ERROR_EMPTY;
  if (!atomic_cas(&rec->state, &empty, uint32_t{RUST_GIN_ERROR_WRITING}, __ATOMIC_ACQUIRE, Scope::system)) {
    return;
  }
  atomic_exchange(&rec->code, e.code, __ATOMIC_RELAXED, Scope::system);
  atomic_exchange(&rec->peer, e.peer, __ATOMIC_RELAXED, Scope::system);
  atomic_exchange(&rec->qpn, e.qpn, __ATOMIC_RELAXED, Scope::system);
  atomic_exchange(&rec->wqe_index, e.wqe_index, __ATOMIC_RELAXED, Scope::system);
  // The four bytes after wqe_index travel as one word.
  uint32_t bytes = static_cast<uint32_t>(e.syndrome) | (static_cast<uint32_t>(e.vendor_syndrome) << 8) |
                   (static_cast<uint32_t>(e.wqe_opcode) << 16) | (static_cast<uint32_t>(e.wait_kind) << 24);
  atomic_exchange(reinterpret_cast<uint32_t*>(&rec->syndrome), bytes, __ATOMIC_RELAXED, Scope::system);
  atomic_exchange(&rec->expected, e.expected, __ATOMIC_RELAXED, Scope::system);
  atomic_exchange(&rec->observed, e.observed, __ATOMIC_RELAXED, Scope::system);
  atomic_exchange(&rec->state, uint32_t{RUST_GIN_ERROR_VALID}, __ATOMIC_RELEASE, Scope::system);
}

RG_INLINE bool has_error(const rust_gin_error* rec) {
  return atomic_load(&rec->state, __ATOMIC_ACQUIRE, Scope::system) != RUST_GIN_ERROR_EMPTY;
}

// The clock RCCL's timeoutCycles counts (clock64(): s_memtime on gfx9); the
// host build counts nanoseconds instead.
RG_INLINE uint64_t cycles() {
#if RG_GPU
  return __builtin_readcyclecounter();
#else
  return clock_ns();
#endif
}

// A bound on one wait: the context's own timeout (there is no unbounded
// mode; 0 means the default), RCCL's optional cycle budget, and RCCL's abort
// flag. The clocks are read only once a wait actually spins, so the fast path
// pays nothing.
class Bound {
 public:
  RG_INLINE explicit Bound(uint64_t timeout_ns, const uint32_t* abort_flag = nullptr, uint64_t timeout_cycles = 0)
      : timeout_(timeout_ns ? timeout_ns : RUST_GIN_DEFAULT_TIMEOUT_NS),
        cycle_budget_(timeout_cycles),
        abort_(abort_flag),
        end_(0),
        cycle_end_(0) {}

  // RUST_GIN_OK while the wait may go on; RUST_GIN_ERR_ABORTED once the abort
  // flag is raised; RUST_GIN_ERR_TIMEOUT once a bound has passed.
  RG_INLINE int check() {
    if (abort_ && atomic_load(abort_, __ATOMIC_RELAXED, Scope::system) != 0) return RUST_GIN_ERR_ABORTED;
    const uint64_t now = clock_ns();
    if (end_ == 0) {
      end_ = now + timeout_;
      if (cycle_budget_) cycle_end_ = cycles() + cycle_budget_;
      return RUST_GIN_OK;
    }
    if (now >= end_) return RUST_GIN_ERR_TIMEOUT;
    if (cycle_budget_ && cycles() >= cycle_end_) return RUST_GIN_ERR_TIMEOUT;
    return RUST_GIN_OK;
  }

 private:
  uint64_t timeout_;
  uint64_t cycle_budget_;
  const uint32_t* abort_;
  uint64_t end_;
  uint64_t cycle_end_;
};

}  // namespace rust_gin
