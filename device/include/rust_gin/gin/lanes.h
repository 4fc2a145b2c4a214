// Posting one lane's requests, with the lanes of a wave that target the same
// queue sharing one ticket and one doorbell.
//
// The host build has no waves: each call posts its own requests through the
// batch path (SendQueue::post), which is the same code the GPU leader runs.
// On the GPU this file only gathers the lanes (ballot, prefix counts,
// readlane) around the shared steps of mlx5/sq.h.
#pragma once

#include "rust_gin/mlx5/sq.h"

namespace rust_gin {
namespace gin {

using mlx5::Request;
using mlx5::RingPolicy;
using mlx5::SendQueue;

// A lane contributes at most this many requests per call (a put and its
// signal); longer lists go through SendQueue::post directly.
constexpr uint32_t kMaxLaneRequests = 2;

#if RG_GPU
RG_INLINE uint32_t lane_id() { return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)); }
RG_INLINE uint64_t ballot(bool p) { return __builtin_amdgcn_ballot_w64(p); }
RG_INLINE uint64_t readlane64(uint64_t v, uint32_t lane) {
  const uint32_t lo = __builtin_amdgcn_readlane(static_cast<uint32_t>(v), lane);
  const uint32_t hi = __builtin_amdgcn_readlane(static_cast<uint32_t>(v >> 32), lane);
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
#endif

// Posts r0 (and r1 when n == 2) to `q` for the calling lane and returns the
// index of the lane's last WQE in *last. Requests travel as values, never as
// an indexed array, which would cost scratch memory on the GPU.
template <RingPolicy R>
RG_INLINE int post_lane(const rust_gin_mlx5_sq* q, const Request& r0, const Request& r1, uint32_t n,
                        uint64_t* last) {
  const auto req = [&](uint32_t i) { return i ? r1 : r0; };
#if !RG_GPU
  SendQueue sq(q);
  return sq.post<R>(req, n, last);
#else
  const uint32_t me = lane_id();
  const uint64_t below = (uint64_t{1} << me) - 1;
  uint64_t todo = ballot(true);
  int status = RUST_GIN_OK;
  bool done = false;
  while (todo) {
    const uint32_t leader = __builtin_ctzll(todo);
    const uint64_t q_leader = readlane64(reinterpret_cast<uint64_t>(q), leader);
    const bool mine = !done && reinterpret_cast<uint64_t>(q) == q_leader;
    const uint64_t group = ballot(mine);
    if (mine) {
      // Prefix sums of the group's request counts (each 0..3) from two ballots.
      const uint64_t b0 = ballot(n & 1) & group;
      const uint64_t b1 = ballot(n & 2) & group;
      const uint32_t total = __builtin_popcountll(b0) + 2 * __builtin_popcountll(b1);
      const uint32_t before = __builtin_popcountll(b0 & below) + 2 * __builtin_popcountll(b1 & below);
      SendQueue sq(q);
      if (total > sq.max_batch()) {
        // More than a batch may hold: each lane posts on its own, in lane order.
        for (uint32_t l = 0; l < 64; ++l) {
          if (((group >> l) & 1) && l == me) status = sq.post<R>(req, n, last);
        }
      } else {
        Bound bound(sq.desc().timeout_ns);
        uint64_t base = 0;
        int s = RUST_GIN_OK;
        if (me == leader) {
          s = sq.failed() ? RUST_GIN_ERR_QP_FAILED : RUST_GIN_OK;
          if (!s) {
            base = sq.reserve(total);
            s = sq.wait_credit(base, total, bound);
          }
        }
        base = readlane64(base, leader);
        s = __builtin_amdgcn_readlane(s, leader);
        bool my_last_cqe = false;
        if (!s) {
          for (uint32_t k = 0; k < n; ++k) {
            const uint32_t i = before + k;
            const Request r = req(k);
            const bool cqe = sq.wants_cqe(base, total, i, r);
            sq.write(base + i, sq.build(r, base + i, cqe));
            my_last_cqe = cqe;
          }
          *last = base + before + n - 1;
        }
        // Every lane's WQE stores before the leader publishes.
        __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
        __builtin_amdgcn_wave_barrier();
        const bool tail_cqe = ballot(my_last_cqe && before + n == total) != 0;
        if (me == leader && !s) {
          s = sq.publish(base, total, tail_cqe ? base + total : 0, bound);
          if (!s && R == RingPolicy::now) sq.ring();
        }
        status = __builtin_amdgcn_readlane(s, leader);
      }
      done = true;
    }
    todo &= ~group;
  }
  return status;
#endif
}

}  // namespace gin
}  // namespace rust_gin
