// The two hazards that the lockstep wave was built to expose, rebuilt from the
// code as it stood before the fix, so that tests/lockstep.rs can prove, every
// run, that the instrument still catches them (as the ISA checks prove
// themselves on planted faults):
//   - lanes of one wave posting to one queue each on their own (how
//     flushAsync's NOP and rust_gin_mlx5_post posted): they deadlock in the
//     in-order publish;
//   - a deferred (aggregated) burst longer than the queue, with a credit wait
//     that does not ring what is published: it waits for a doorbell nobody
//     rings.
// Everything here lives in its own namespace (the macro below renames
// rust_gin::), so these copies never meet the real ones at link time.
#define RUST_GIN_HAZARD_CREDIT_WAIT_WITHOUT_RING 1
#define rust_gin rust_gin_hazard
#include "rust_gin/mlx5/sq.h"

using rust_gin_hazard::mlx5::RingPolicy;
using rust_gin_hazard::mlx5::SendQueue;

extern "C" {

// SendQueue::flush_target called by every lane on its own.
int rust_gin_hazard_flush_target_per_lane(const rust_gin_mlx5_sq* q, uint64_t* target) {
  SendQueue sq(q);
  return sq.flush_target(target);
}

// SendQueue::post called by every lane on its own (no turns).
int rust_gin_hazard_post_per_lane(const rust_gin_mlx5_sq* q, const rust_gin_mlx5_request* reqs, uint32_t n) {
  SendQueue sq(q);
  return sq.post_array<RingPolicy::now>(reqs, n);
}

// A deferred post whose credit wait never rings.
int rust_gin_hazard_post_deferred_no_ring(const rust_gin_mlx5_sq* q, const rust_gin_mlx5_request* reqs, uint32_t n) {
  SendQueue sq(q);
  return sq.post_array<RingPolicy::defer>(reqs, n);
}

}  // extern "C"
