// Signals without remote atomics (RUST_GIN_SIGNAL_MODE_WRITE; the design and
// why: docs/nic-families.md, section 7).
//
// Sender: a signal is an 8-byte inline RDMA WRITE of the sender's running
// total for (peer, signal) into the sender's own slot at the peer, on the
// same queue pair behind the data (so it lands after the data, as a strong
// signal must). The total is assigned while the batch holds the queue's
// publish turn (gin/lanes.h), in lane order: totals then rise in queue
// order, and the NIC, executing the queue in order, never writes a smaller
// total after a larger one. Assigned anywhere else, a lane that added later
// but published earlier would write the smaller total last and an update
// would be lost for good.
//
// Receiver: the signal word is the sum of the slots of one signal, folded in
// by whoever reads or waits (our read/wait calls, and RCCL's waits through
// the RefreshSignal hook of patch 0004). Folds raise the word with an atomic
// max, so concurrent folds never move it backwards; a reset still moves the
// offset only, so updates in flight are never lost.
#pragma once

#include "rust_gin/abi/gin.h"
#include "rust_gin/port/wave.h"
#include "rust_gin/queue/request.h"

namespace rust_gin {
namespace gin {

// Marks a request as a write-mode signal whose inline value is assigned at
// publish: laddr holds the address of the sender's running total for its
// (peer, signal), operand0 the addend. Never reaches a NIC: the value is
// assigned and the mark cleared before the WQE is written.
constexpr uint8_t kReqSlotTotal = 1u << 7;
static_assert((kReqSlotTotal & queue::kKnownFlags) == 0, "the slot mark must not be a NIC request flag");

RG_INLINE bool is_slot_total(const queue::Request& r) { return (r.flags & kReqSlotTotal) != 0; }

// The write-mode signal request: `slot` is where this rank's total for the
// signal lands at the peer, `total` this rank's running total word for it.
RG_INLINE queue::Request slot_request(uint64_t slot, uint32_t rkey, uint64_t total, uint64_t addend) {
  queue::Request r = {};
  r.opcode = queue::OP_RDMA_WRITE;
  r.flags = queue::REQ_INLINE | kReqSlotTotal;
  r.length = 8;
  r.raddr = slot;
  r.rkey = rkey;
  r.laddr = total;
  r.operand0 = addend;
  return r;
}

// The running total each lane with `slot` set gets for its request: the
// lanes are taken in lane order (their order in the queue), lanes naming the
// same total word add up one after the other, and each word is stored back
// once. The caller holds the queue's publish turn, so nothing else touches
// these words meanwhile (one queue pair per (context, peer), and the words
// are per (context, peer)). Called by every lane of the batch's group.
RG_INLINE uint64_t assign_totals(bool slot, uint64_t total_addr, uint64_t addend) {
  const uint32_t me = wave::lane_id();
  uint64_t mine = 0;
  uint64_t todo = wave::ballot(slot);
  while (todo) {
    const uint32_t first = __builtin_ctzll(todo);
    const uint64_t key = wave::readlane64(total_addr, first);
    const uint64_t same = wave::ballot(slot && total_addr == key);
    uint64_t* word = reinterpret_cast<uint64_t*>(assume_uniform(key));
    uint64_t run = 0;
    {
      wave::Region r(me == first);
      if (r) run = atomic_load(word, __ATOMIC_RELAXED, Scope::agent);
    }
    run = wave::readlane64(run, first);
    for (uint64_t m = same; m; m &= m - 1) {
      const uint32_t k = __builtin_ctzll(m);
      run += wave::readlane64(addend, k);
      if (k == me) mine = run;
    }
    {
      wave::Region r(me == first);
      // A read-modify-write, as every device write but WQEs and doorbells
      // (the ISA checks tell stores apart by width).
      if (r) atomic_exchange(word, run, __ATOMIC_RELAXED, Scope::agent);
    }
    todo &= ~same;
  }
  return mine;
}

// Folds the slots of signal `id` into its word and returns the word: the sum
// of every sender's slot, raised into the word with an atomic max (a fold
// that read older slots never lowers what a later one stored). Slots are
// NIC-written uncached words read relaxed; the acquire fence after them
// makes data that arrived before a slot visible to what the caller reads
// next, as the acquire load of the word does in atomic mode.
RG_INLINE uint64_t fold_signal(const rust_gin_context* c, uint32_t nranks, uint32_t id) {
  // Descriptor fields through load_invariant: in a reader of NIC-written
  // memory every other load is scoped (tests/isa_path.rs, NIC-written loads).
  const uint64_t* slot = reinterpret_cast<const uint64_t*>(load_invariant(&c->signal_slots)) + id;
  const uint64_t stride = load_invariant(&c->n_signals);
  uint64_t sum = 0;
  for (uint32_t s = 0; s < nranks; ++s) sum += atomic_load(slot + s * stride, __ATOMIC_RELAXED, Scope::system);
  fence_acquire_system();
  uint64_t* w = reinterpret_cast<uint64_t*>(load_invariant(&c->signals)) + id;
  const uint64_t old = atomic_fetch_max(w, sum, __ATOMIC_RELAXED, Scope::agent);
  return old > sum ? old : sum;
}

RG_INLINE bool write_mode(const rust_gin_context* c) {
  return load_invariant(&c->signal_mode) == RUST_GIN_SIGNAL_MODE_WRITE;
}

}  // namespace gin
}  // namespace rust_gin
