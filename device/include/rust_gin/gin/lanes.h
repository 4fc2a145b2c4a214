// Posting from the lanes of a wave: lanes that target the same queue share
// one ticket, one publish and one doorbell, with a single leader doing the
// queue-wide steps of the producer (queue/send_queue.h). Every function is
// a template over the NIC family (F, mlx5 by default: the GIN operations
// post to mlx5 queues), chosen at compile time.
//
// The rule behind every function here: two lanes of one wave never wait in
// the same queue's in-order publish at once. In a wave the lane whose turn
// has come leaves that loop and parks at its end, while the lane it parked
// for still spins: a deadlock no timeout can clear (the lockstep tests,
// tests/lockstep.rs, reproduce it). So per queue either one leader posts for
// the whole group, or the group's lanes take turns.
//
// Written once over port/wave.h: on the GPU these are the wave builtins, in a
// lockstep test they are the same steps over 64 emulated lanes, and on a
// plain host thread the wave has one lane.
#pragma once

#include "rust_gin/gin/signal_slots.h"
#include "rust_gin/mlx5/sq.h"
#include "rust_gin/port/wave.h"

namespace rust_gin {
namespace gin {

using mlx5::Request;
using mlx5::RingPolicy;
using mlx5::SendQueue;
// The queue of family F (SendQueue above is mlx5's).
template <class F>
using FamilyQueue = queue::SendQueue<F>;

RG_INLINE uint64_t lanes_below(uint32_t me) { return (uint64_t{1} << me) - 1; }

// Runs body() once per group of the lanes in `todo` that share a queue,
// group after group (the lowest remaining lane's queue first);
// body(group, leader, gq) runs on the lanes of the group only. `gq` is the
// group's queue read from the leader, so it is wave-uniform: on the GPU it
// lives in scalar registers and the descriptor is read with scalar loads.
template <typename Desc, typename Body>
RG_INLINE void for_each_queue_group(const Desc* q, uint64_t todo, Body body) {
  const uint32_t me = wave::lane_id();
  while (todo) {
    const uint32_t leader = __builtin_ctzll(todo);
    const uint64_t q_leader = wave::readlane64(reinterpret_cast<uint64_t>(q), leader);
    const bool mine = ((todo >> me) & 1) && reinterpret_cast<uint64_t>(q) == q_leader;
    const uint64_t group = wave::ballot(mine);
    {
      wave::Region r(mine);
      if (r) body(group, leader, reinterpret_cast<const Desc*>(assume_uniform(q_leader)));
    }
    todo &= ~group;
  }
}

// Each lane of `group` runs body() alone, in lane order.
template <typename Body>
RG_INLINE void in_lane_order(uint64_t group, Body body) {
  const uint32_t me = wave::lane_id();
  while (group) {
    const uint32_t l = __builtin_ctzll(group);
    group &= group - 1;
    wave::Region r(l == me);
    if (r) body();
  }
}

// Posts r to `q` for the calling lane when `has` holds and returns the index
// of its WQE in *last; a lane with nothing to post still takes part in its
// group's steps. One request per lane and call: an operation of two requests
// (a put and its signal) makes two calls, so that only one request is live
// in registers at a time (two cost put 10 more VGPRs on the GPU), and the
// first call leaves the ringing to the second (`ring` is false), so the wave
// still rings once. Requests travel as values, never as an indexed array,
// which would cost scratch memory on the GPU.
//
// Per queue, the group's requests go out in batches of at most max_batch()
// lanes (a quarter of the queue: docs/architecture.md, deadlock freedom),
// lowest lanes first: one batch when they fit, else several, one ticket,
// publish and doorbell each. The group's other lanes go through each batch
// with nothing to post. The batch rings when any of its lanes asked to.
//
// kExclusive (the *_exclusive entries): this wave is the only producer of
// the queues it posts to (SendQueue::reserve_exclusive): no ticket and no
// turn; a queue with another producer's post in flight refuses the batch
// (queue::kNotOwned) instead of taking the shared path, whose code would be
// carried along. A template parameter, so that each entry point holds one
// instance (patch 0004 picks the entry by the ncclGin's sharing mode).
template <class F = mlx5::Family, bool kExclusive = false>
RG_INLINE int post_lane(const typename F::Desc* q, const Request& r, bool has, bool ring, uint64_t* last,
                        uint32_t counter_tag = 0) {
  typedef typename F::Desc Desc;
  const uint32_t me = wave::lane_id();
  int status = RUST_GIN_OK;
  for_each_queue_group(q, wave::ballot(true), [&](uint64_t group, uint32_t, const Desc* gq) {
    FamilyQueue<F> sq(gq);
    uint64_t todo = wave::ballot(has) & group;
    const uint32_t max_batch = sq.max_batch();
    // One bound per lane's post, as SendQueue::post has (only a batch's
    // leader waits, on its own bound).
    Bound bound(sq.timeout_ns());
    while (todo) {
      const uint32_t leader = __builtin_ctzll(todo);
      // All of todo, or its lowest max_batch lanes (wave-uniform: scalar work).
      uint64_t rest = 0;
      if (static_cast<uint32_t>(__builtin_popcountll(todo)) > max_batch) {
        rest = todo;
        for (uint32_t k = 0; k < max_batch; ++k) rest &= rest - 1;
      }
      const uint64_t batch = todo & ~rest;
      const bool member = (batch >> me) & 1;
      const uint32_t total = __builtin_popcountll(batch);
      const uint32_t i = __builtin_popcountll(batch & lanes_below(me));
      const bool ring_batch = wave::ballot(member && ring) != 0;
      uint64_t base = 0;
      int s = RUST_GIN_OK;
      {
        wave::Region lead(me == leader);
        if (lead) {
          s = sq.failed() ? RUST_GIN_ERR_QP_FAILED : RUST_GIN_OK;
          if (!s) {
            if constexpr (kExclusive) {
              // Another producer's ticket in flight: the caller does not own
              // the queue (the entry point records RUST_GIN_ARG_NOT_EXCLUSIVE).
              if (!sq.reserve_exclusive(total, &base)) s = queue::kNotOwned;
            } else {
              base = sq.reserve(total);
            }
            if (!s) s = sq.wait_credit(base, total, bound);
          }
        }
      }
      base = wave::readlane64(base, leader);
      s = wave::readlane_int(s, leader);
      // Write-mode signals (gin/signal_slots.h) get their totals in queue
      // order: the leader takes the publish turn before the WQEs are
      // written, and the lanes assign the totals while it is held. So do
      // the PSN ranges of a family with a PSN table (bnxt_re's MSN table:
      // a prefix sum over the WQEs in ticket order, as SendQueue::post
      // assigns them). psn_table() reads the group's descriptor: uniform.
      const bool slot = member && is_slot_total(r);
      const bool psn = sq.psn_table();
      const bool take_turn = wave::any(slot) || psn;
      if (take_turn && !s) {
        {
          wave::Region lead(me == leader);
          // Alone, the turn is ours already (ready == base).
          if (lead && !kExclusive) s = sq.wait_turn(base, bound);
        }
        s = wave::readlane_int(s, leader);
      }
      Request w = r;
      if (take_turn && !s) {
        const uint64_t t = assign_totals(slot, r.laddr, r.operand0);
        if (slot) {
          w.operand0 = t;
          w.laddr = 0;
          w.flags = static_cast<uint8_t>(w.flags & ~kReqSlotTotal);
        }
      }
      if constexpr (F::kPsnTable) {
        if (psn && !s) {
          // Each member's next PSN: the queue's PSN word plus the packets of
          // the members up to and including it (lane order is ticket order).
          const uint32_t pk = member ? F::packets(gq, w) : 0u;
          const uint64_t word = reinterpret_cast<uint64_t>(&reinterpret_cast<rust_gin_mlx5_sq_state*>(load_invariant(&gq->state))->psn);
          const uint64_t next = assign_totals(member, word, pk);
          if (member) F::note_psn(gq, base + i, next - pk, next);
        }
      }
      bool my_cqe = false;
      if (!s && member) {
        my_cqe = sq.wants_cqe(base, total, i, w);
        if (w.opcode == queue::OP_RDMA_READ) sq.note_read(base + i);
        if (counter_tag) sq.note_counter(base + i, counter_tag);
        sq.write(base + i, w, my_cqe);
        *last = base + i;
      }
      // Every lane's WQE stores before the leader publishes.
      wave::barrier();
      const bool tail_cqe = wave::ballot(my_cqe && i + 1 == total) != 0;
      {
        wave::Region lead(me == leader);
        if (lead && !s) {
          if (kExclusive) {
            sq.release_exclusive(base, total, tail_cqe ? base + total : 0);
          } else if (take_turn) {
            sq.release(total, tail_cqe ? base + total : 0);
          } else {
            s = sq.publish(base, total, tail_cqe ? base + total : 0, bound);
          }
          if (!s && ring_batch) sq.ring();
        }
      }
      s = wave::readlane_int(s, leader);
      if (member && s) status = s;
      todo &= ~batch;
    }
  });
  return status;
}

// Posts a lane's list of requests of any length: per queue, the lanes take
// turns (the mlx5-level entry points; the GIN operations use post_lane).
// `kind`: what the requests have in common (SendQueue::post_list).
template <RingPolicy R, class F = mlx5::Family, typename ReqAt>
RG_INLINE int post_in_turn(const typename F::Desc* q, ReqAt req, uint32_t n, uint64_t* last, uint8_t kind) {
  typedef typename F::Desc Desc;
  int status = RUST_GIN_OK;
  for_each_queue_group(q, wave::ballot(true), [&](uint64_t group, uint32_t, const Desc* gq) {
    in_lane_order(group, [&] {
      FamilyQueue<F> sq(gq);
      status = sq.template post_list<R>(req, n, last, kind);
    });
  });
  return status;
}

// The completion index that covers everything published on the lane's queue
// (SendQueue::flush_target), for the lanes where `participate` holds. Lanes
// sharing a queue share one flush: its leader posts at most one NOP.
template <class F = mlx5::Family>
RG_INLINE int flush_target(const typename F::Desc* q, bool participate, uint64_t* target) {
  typedef typename F::Desc Desc;
  const uint32_t me = wave::lane_id();
  int status = RUST_GIN_OK;
  for_each_queue_group(q, wave::ballot(participate), [&](uint64_t, uint32_t leader, const Desc* gq) {
    uint64_t t = 0;
    int s = RUST_GIN_OK;
    {
      wave::Region lead(me == leader);
      if (lead) {
        FamilyQueue<F> sq(gq);
        s = sq.flush_target(&t);
      }
    }
    *target = wave::readlane64(t, leader);
    status = wave::readlane_int(s, leader);
  });
  return status;
}

}  // namespace gin
}  // namespace rust_gin
