// The send-queue producer, written once for every NIC family: many lanes and
// waves post to one RC send queue at once without losing, duplicating or
// reordering what they publish.
//
//   reserve   one atomic add on `resv` hands out a ticket range of WQEs;
//   credit    the range may be written once the NIC has consumed the WQEs
//             that last occupied it (`done`, advanced from CQEs);
//   write     each WQE is assembled in registers and stored (the family's
//             format: F::write);
//   publish   tickets are published strictly in order: wait for `ready` to
//             reach our base, then add our count (release);
//   ring      whoever holds the ring lock rings once for the published
//             prefix (the family's doorbell: F::ring): a producer that finds
//             the lock taken leaves, and the holder looks again after
//             unlocking, so concurrent publishers share one doorbell.
//
// What differs between families is a policy F chosen at compile time
// (docs/architecture.md, "NIC families"; mlx5/family.h, bnxt/family.h,
// ionic/family.h): the descriptor type, the WQE format, the doorbell
// sequence, the completion format and whether a flush WQE exists. Nothing
// here dispatches on the family at run time.
//
// The batch entry point `post` runs the same steps over an array of requests,
// and the wave layer (gin/lanes.h) runs the same steps with one leader per
// queue. Every wait goes through wave::spin, so a lockstep wave on the CPU
// runs these loops as a GPU wave would.
#pragma once

#include "rust_gin/core/error.h"
#include "rust_gin/port/wave.h"
#include "rust_gin/port/stage.h"
#include "rust_gin/queue/completion_queue.h"
#include "rust_gin/queue/request.h"

namespace rust_gin {
namespace queue {

// Whether family F's write is a template over the shape policy (mlx5); the
// other families have one builder and need declare nothing.
template <class F, class = void>
struct HasShapePolicy {
  static constexpr bool value = false;
};
template <class F>
struct HasShapePolicy<F, decltype(void(&F::template write<ShapePolicy::by_shape>))> {
  static constexpr bool value = true;
};

// Whether family F chooses a writer per batch (F::batch, mlx5/family.h).
template <class F, class = void>
struct HasBatch {
  static constexpr bool value = false;
};
struct AnyBatchBody {
  template <typename W>
  void operator()(const W&) const {}
};
template <class F>
struct HasBatch<F, decltype(void(F::batch(typename F::Slots{}, uint8_t{0}, AnyBatchBody{})))> {
  static constexpr bool value = true;
};

// Ring now, or leave the published WQEs for a later ring (aggregation).
enum class RingPolicy { now, defer };

// What an exclusive post returns where the caller does not own the queue:
// not an ABI status; the entry point turns it into RUST_GIN_ERR_INVALID
// with its record (one inlined record site, not one per post).
constexpr int kNotOwned = 0x100;

template <class F>
class SendQueue {
 public:
  typedef typename F::Desc Desc;

  // The descriptor is read-only: it is not copied (a copy made through a
  // per-lane pointer lives in vector registers all along), its fields are
  // read where they are needed (rd), through a wave-uniform pointer with
  // scalar loads.
  RG_INLINE explicit SendQueue(const Desc* d)
      : d_(d), st_(reinterpret_cast<rust_gin_mlx5_sq_state*>(load_invariant(&d->state))), cq_(d) {}

  RG_INLINE uint32_t depth() const { return 1u << rd(d_->log_wqe_cnt); }
  // Batches of at most a quarter of the queue, with a CQE requested at least
  // once per quarter, guarantee that a waiting producer always has a
  // signalled WQE of an earlier producer ahead of it (docs/architecture.md).
  RG_INLINE uint32_t max_batch() const { return depth() >> 2; }
  RG_INLINE bool failed() const { return atomic_load(&st_->failed, __ATOMIC_RELAXED, Scope::agent) != 0; }
  RG_INLINE uint64_t timeout_ns() const { return rd(d_->timeout_ns); }

  // --- the steps -------------------------------------------------------------
  RG_INLINE uint64_t reserve(uint32_t n) {
    const uint64_t base = atomic_fetch_add(&st_->resv, static_cast<uint64_t>(n), __ATOMIC_RELAXED, Scope::agent);
    RG_STAGE(RUST_GIN_STAGE_RESERVED, st_, base);
    return base;
  }

  // Waits until WQEBBs [base, base+n) are free. Credit returns only for WQEs
  // the NIC was told about, so a producer that must wait rings whatever is
  // published but not rung first (an aggregated burst longer than the queue
  // would otherwise wait for a doorbell nobody rings).
  RG_INLINE int wait_credit(uint64_t base, uint32_t n, Bound& bound) {
    // The fast path is the loop's first test, not an `if` around it: lanes
    // that skip a loop wait at its end on hardware, and must in lockstep.
    const uint64_t room = depth() - F::kRingSlack;
    const uint64_t need = base + n > room ? base + n - room : 0;
    return wave::spin([&] {
      if (!need || reusable() >= need) return static_cast<int>(RUST_GIN_OK);
      if (failed()) return static_cast<int>(RUST_GIN_ERR_QP_FAILED);
#if !defined(RUST_GIN_HAZARD_CREDIT_WAIT_WITHOUT_RING)
      if (unrung()) ring();
#endif
      cq_.poll();
      credit_counters();
      const uint64_t done = reusable();
      if (done >= need) return static_cast<int>(RUST_GIN_OK);
      const int b = bound.check();
      if (b) return fail_wait(b, RUST_GIN_WAIT_SQ_CREDIT, need, done);
      return wave::kSpinAgain;
    }, cq_ring());
  }

  // What credit and completion waits wait for: the NIC writing the CQ ring
  // (the key a host-build waiter parks on, port/wave.h).
  RG_INLINE const void* cq_ring() const { return reinterpret_cast<const void*>(rd(d_->cq_buf)); }

  // WQEBBs below this may be written again: completed and, where counters
  // are kept, credited (a slot's counter_log entry must be read first).
  RG_INLINE uint64_t reusable() const {
    return atomic_load(rd(d_->counter_log) ? &st_->credited : &st_->done, __ATOMIC_ACQUIRE, Scope::agent);
  }

  // Published WQEs the doorbell has not announced yet.
  RG_INLINE bool unrung() const {
    return atomic_load(&st_->ready, __ATOMIC_RELAXED, Scope::agent) !=
           atomic_load(&st_->rung, __ATOMIC_RELAXED, Scope::agent);
  }

  // Whether WQE i of the batch [base, base+n) requests a CQE: the last one,
  // when the batch crosses a signalling boundary, or when asked to. A flush
  // that finds the newest WQE unsignalled posts a signalled flush WQE
  // (flush_target). A family without NOP or DUMP can do that only where the
  // queue has a flush byte and the peer's landing byte (its flush WRITE);
  // without them it asks for a CQE at the end of every batch instead.
  RG_INLINE bool wants_cqe(uint64_t base, uint32_t n, uint32_t i, const Request& r) const {
    if (r.flags & REQ_SIGNALED) return true;
    return i + 1 == n && end_wants_cqe(base, n);
  }
  // Whether the last WQE of the batch [base, base+n) requests a CQE
  // whatever its request says.
  RG_INLINE bool end_wants_cqe(uint64_t base, uint32_t n) const {
    if (!F::kFlushWqe && !rd(d_->flush_lkey)) return true;
    const uint32_t p = rd(d_->log_signal_period);
    return ((base + n) >> p) != (base >> p);
  }

  // A READ is about to be published at or below `index`: a later flush must
  // prove its data landed (flush_target). Before the publish, whose release
  // (by this lane, or by the wave's leader after this wave's stores) orders it.
  RG_INLINE void note_read(uint64_t index) {
    atomic_fetch_max(&st_->read_end, index + 1, __ATOMIC_RELAXED, Scope::agent);
  }

  // The put whose last WQE sits at `index` names counter `tag - 1`: whoever
  // polls the CQ credits it once that WQE completed (cq.h). Before the
  // publish, as note_read.
  RG_INLINE void note_counter(uint64_t index, uint32_t tag) {
    uint32_t* log = reinterpret_cast<uint32_t*>(rd(d_->counter_log));
    atomic_store(&log[index & (depth() - 1)], tag, __ATOMIC_RELAXED, Scope::agent);
    atomic_fetch_max(&st_->counted_end, index + 1, __ATOMIC_RELAXED, Scope::agent);
  }

  // Whether counted puts wait for credit (counters still to advance).
  RG_INLINE bool counted_pending() const {
    return atomic_load(&st_->counted_end, __ATOMIC_RELAXED, Scope::agent) >
           atomic_load(&st_->credited, __ATOMIC_ACQUIRE, Scope::agent);
  }

  // Credits the counters of counted puts that completed. Whoever takes the
  // credit lock reads and clears the counter_log entries of the WQEs that
  // completed since `credited`, adds 1 to each entry's counter unless the
  // WQE is at or after the first failure, and only then raises `credited`
  // (release): a producer reusing a slot waits for `credited`, so it never
  // overwrites an entry nobody has read yet (claiming the range first and
  // reading it after let a reused slot's new entry be credited in place of
  // the old one: the lockstep soak caught a counter one off). A caller that
  // finds the lock taken leaves; the holder looks again after unlocking, as
  // ring() does, so the loop is no wait.
  RG_INLINE void credit_counters() {
    uint32_t* log = reinterpret_cast<uint32_t*>(rd(d_->counter_log));
    if (!log) return;
    for (;;) {
      if (atomic_exchange(&st_->credit_lock, 1u, __ATOMIC_ACQ_REL, Scope::agent) != 0) return;
      const uint64_t done = atomic_load(&st_->done, __ATOMIC_ACQUIRE, Scope::agent);
      const uint64_t from = atomic_load(&st_->credited, __ATOMIC_RELAXED, Scope::agent);
      if (from < done) {
        const uint64_t failed = atomic_load(&st_->failed_end, __ATOMIC_RELAXED, Scope::agent);
        const uint64_t good_end = failed ? failed - 1 : done;
        uint64_t* counters = reinterpret_cast<uint64_t*>(rd(d_->counters));
        for (uint64_t i = from; i < done; ++i) {
          uint32_t* e = &log[i & (depth() - 1)];
          const uint32_t c = atomic_load(e, __ATOMIC_RELAXED, Scope::agent);
          if (!c) continue;
          atomic_store(e, 0u, __ATOMIC_RELAXED, Scope::agent);
          if (i < good_end) atomic_fetch_add(&counters[c - 1], uint64_t{1}, __ATOMIC_RELEASE, Scope::agent);
        }
        // An exchange, not a store: the device code's only plain 64-bit
        // stores are doorbells (the ISA checks hold it to that).
        atomic_exchange(&st_->credited, done, __ATOMIC_RELEASE, Scope::agent);
      }
      atomic_store(&st_->credit_lock, 0u, __ATOMIC_RELEASE, Scope::agent);
      if (atomic_load(&st_->done, __ATOMIC_ACQUIRE, Scope::agent) == done) return;
    }
  }

  // Writes the request's WQE into ring slot `index` in the family's format
  // (mlx5: one 16-byte store per segment as it is built, mlx5/wqe.h).
  // F::write gets the ring slot (index mod depth) and the index itself, and
  // the shape policy P where the family's write takes one (HasShapePolicy).
  template <ShapePolicy P = ShapePolicy::select>
  RG_INLINE void write(uint64_t index, const Request& r, bool cq_update) {
    writer().template write<P>(index, r, cq_update);
  }

  // What the WQE writes of a batch need of the descriptor, read once (the
  // family's Slots).
  struct Writer {
    typename F::Slots slots;
    template <ShapePolicy P = ShapePolicy::select>
    RG_INLINE void write(uint64_t index, const Request& r, bool cq_update) const {
      if constexpr (HasShapePolicy<F>::value) {
        F::template write<P>(slots, index, r, cq_update);
      } else {
        F::write(slots, index, r, cq_update);
      }
    }
    // A WQE of a batch (post): the shape picked per request.
    RG_INLINE void wqe(uint64_t index, const Request& r, bool cq_update) const {
      write<ShapePolicy::by_shape>(index, r, cq_update);
    }
    // Whether r is a READ (a batch writer may know it never is).
    RG_INLINE static bool is_read(const Request& r) { return r.opcode == OP_RDMA_READ; }
    // Runs body(w) with the family's writer for a batch of a list whose
    // requests have `kind` in common (family-defined; F::batch), where the
    // family has one (HasBatch), else with this one. w.wqe(index, r,
    // cq_update) writes one WQE, and w.is_read(r) says whether r is a READ.
    template <typename Body>
    RG_INLINE void batch(uint8_t kind, Body body) const {
      if constexpr (HasBatch<F>::value) {
        F::batch(slots, kind, body);
      } else {
        body(*this);
      }
    }
  };
  RG_INLINE Writer writer() const { return Writer{F::slots(d_)}; }

  // Publishes [base, base+n) after every earlier ticket. `signaled_end` is
  // base+n when the batch's last WQE requests a CQE, else 0. Only one lane of
  // a wave may wait here per queue: lanes spinning here together would wait
  // for each other forever (gin/lanes.h posts accordingly).
  RG_INLINE int publish(uint64_t base, uint32_t n, uint64_t signaled_end, Bound& bound) {
    const int s = wait_turn(base, bound);
    if (s) return s;
    release(n, signaled_end);
    return RUST_GIN_OK;
  }

  // The two halves of publish. Between them the caller holds the queue's
  // publish turn: no later ticket publishes, so work done there happens in
  // queue order (write-mode signal totals, gin/lanes.h). The same one-waiter
  // rule holds for wait_turn as for publish.
  RG_INLINE int wait_turn(uint64_t base, Bound& bound) {
    {
      const int s = wave::spin([&] {
        const uint64_t ready = atomic_load(&st_->ready, __ATOMIC_ACQUIRE, Scope::agent);
        if (ready == base) return static_cast<int>(RUST_GIN_OK);
        // Behind a failed queue nothing will be published again: leave now.
        if (failed()) return static_cast<int>(RUST_GIN_ERR_QP_FAILED);
        // Not abortable: a producer that gave up here would leave its ticket
        // unpublished and wedge the queue for everyone behind it.
        if (bound.check() == RUST_GIN_ERR_TIMEOUT) {
          return fail_wait(RUST_GIN_ERR_TIMEOUT, RUST_GIN_WAIT_SQ_PUBLISH, base, ready);
        }
        return wave::kSpinAgain;
      });
      if (s) return s;
    }
    return RUST_GIN_OK;
  }

  // Gives WQEs [base, base + m) their PSN ranges, for families that keep a
  // PSN table (F::kPsnTable: bnxt_re's MSN table), else nothing. The caller
  // holds the publish turn, so PSNs follow ticket order. req(i) is the
  // request of WQE base + i.
  template <typename ReqAt>
  RG_INLINE void note_psns(uint64_t base, uint32_t m, ReqAt req) {
    if constexpr (F::kPsnTable) {
      if (!psn_table()) return;
      uint64_t psn = atomic_load(&st_->psn, __ATOMIC_RELAXED, Scope::agent);
      for (uint32_t i = 0; i < m; ++i) {
        const uint32_t pk = F::packets(d_, req(i));
        F::note_psn(d_, base + i, psn, psn + pk);
        psn += pk;
      }
      atomic_exchange(&st_->psn, psn, __ATOMIC_RELAXED, Scope::agent);
    }
  }
  // Whether this queue keeps a PSN table (wave-uniform).
  RG_INLINE bool psn_table() const {
    if constexpr (F::kPsnTable) return rd(d_->path_mtu) != 0;
    return false;
  }

  // Publishes the n WQEs after the caller's turn came (wait_turn).
  RG_INLINE void release(uint32_t n, uint64_t signaled_end) {
    if (signaled_end) atomic_fetch_max(&st_->last_signaled, signaled_end, __ATOMIC_RELAXED, Scope::agent);
    // Release at agent scope: the ringer's system-scope release that follows
    // its acquire of `ready` carries these WQE stores to the NIC.
    const uint64_t before = atomic_fetch_add(&st_->ready, static_cast<uint64_t>(n), __ATOMIC_RELEASE, Scope::agent);
    RG_STAGE(RUST_GIN_STAGE_PUBLISHED, st_, before + n);
    (void)before;
#if defined(RUST_GIN_ISA_FAULT_PATH_NOP) && RG_GPU
    asm volatile("s_nop 0");  // planted: one more instruction on every post's path (tests/isa_path.rs)
#endif
  }

  // --- exclusive ownership (rust_gin_put_exclusive) ----------------------------
  // The calling wave is the queue's only producer while it posts (RCCL: an
  // ncclGin of NCCL_GIN_RESOURCE_SHARING_THREAD; the contract in
  // docs/architecture.md, "Exclusive queues"): it needs no ticket and no
  // turn: it reads the state words and writes them outright, so the shared
  // protocol finds them as it left them. It rings as everyone does (ring()):
  // a counter wait elsewhere may ring this queue for counted puts left
  // unrung (progress_counters), and two ringers without the lock could write
  // the doorbell record backwards.

  // The owner's writes of the 64-bit state words: exchanges whose result
  // nobody reads (non-returning atomics, issued as stores are), not stores:
  // the device code's only plain 64-bit store is the doorbell, which the
  // ISA checks find by that.
  RG_INLINE static void put64(uint64_t* p, uint64_t v, int order) { (void)atomic_exchange(p, v, order, Scope::agent); }

  // Claims [resv, resv + n) without a ticket, or says no when another
  // producer's tickets are still in flight (resv ahead of ready): then the
  // caller does not own the queue.
  RG_INLINE bool reserve_exclusive(uint32_t n, uint64_t* base) {
    const uint64_t r = atomic_load(&st_->resv, __ATOMIC_RELAXED, Scope::agent);
    if (r != atomic_load(&st_->ready, __ATOMIC_RELAXED, Scope::agent)) return false;
    put64(&st_->resv, r + n, __ATOMIC_RELAXED);
    RG_STAGE(RUST_GIN_STAGE_RESERVED, st_, r);
    *base = r;
    return true;
  }

  // Publishes [base, base + n) claimed by reserve_exclusive: written
  // outright, as the only producer's prefix is its own.
  RG_INLINE void release_exclusive(uint64_t base, uint32_t n, uint64_t signaled_end) {
    if (signaled_end) put64(&st_->last_signaled, signaled_end, __ATOMIC_RELAXED);
    put64(&st_->ready, base + n, __ATOMIC_RELEASE);
    RG_STAGE(RUST_GIN_STAGE_PUBLISHED, st_, base + n);
    (void)atomic_fetch_add(&st_->owned_batches, uint64_t{1}, __ATOMIC_RELAXED, Scope::agent);
#if defined(RUST_GIN_ISA_FAULT_PATH_NOP) && RG_GPU
    asm volatile("s_nop 0");  // planted: one more instruction on every post's path (tests/isa_path.rs)
#endif
  }

  // Rings for everything published so far, unless another producer holds the
  // lock (it looks again after unlocking, so nothing is left unrung). The
  // loop is no wait: each turn rings for WQEs published meanwhile, and it
  // ends as soon as a turn finds nothing new.
  RG_INLINE void ring() {
    for (;;) {
      if (atomic_exchange(&st_->ring_lock, 1u, __ATOMIC_ACQ_REL, Scope::agent) != 0) return;
      const uint64_t pi = atomic_load(&st_->ready, __ATOMIC_ACQUIRE, Scope::agent);
      const uint64_t rung = atomic_load(&st_->rung, __ATOMIC_RELAXED, Scope::agent);
      if (pi != rung) {
        // A family that rings per WQE (bnxt_re unless its descriptor asks
        // for one doorbell per batch) names every WQE in turn.
        uint64_t rings = 1;
        if constexpr (F::kDoorbellPerWqe) {
          if (!rd(d_->doorbell_group)) {
            for (uint64_t p = rung + 1; p < pi; ++p) F::ring(d_, p);
            rings = pi - rung;
          }
        }
        // The family's doorbell sequence, with its system-scope releases
        // (WQEs before the doorbell, and before a doorbell record if any).
        F::ring(d_, pi);
        RG_STAGE(RUST_GIN_STAGE_DOORBELL, st_, pi);
        atomic_exchange(&st_->rung, pi, __ATOMIC_RELAXED, Scope::agent);
        atomic_fetch_add(&st_->doorbells, rings, __ATOMIC_RELAXED, Scope::agent);
      }
      // RMW unlock: a producer whose exchange saw the lock held is ordered
      // before it, so the load below sees that producer's publish.
      atomic_exchange(&st_->ring_lock, 0u, __ATOMIC_ACQ_REL, Scope::agent);
      if (atomic_load(&st_->ready, __ATOMIC_ACQUIRE, Scope::agent) == pi) return;
    }
  }

  // --- whole operations ------------------------------------------------------
  // Posts n requests in order (split into batches of at most max_batch()).
  // For one lane: lanes of a wave that post to one queue must take turns
  // (gin/lanes.h does), or they wait for each other in publish.
  // `req(i)` yields request i: an array read, or one value for a single
  // request, which then never takes a trip through (scratch) memory.
  template <RingPolicy R = RingPolicy::now, typename ReqAt>
  RG_INLINE int post(ReqAt req, uint32_t n, uint64_t* last = nullptr) {
    return post_batches<R, false>(req, n, last, 0);
  }
  // The same for a list whose requests have `kind` in common, as the
  // family's batch writer reads it (Writer::batch): the entry points that
  // post a caller's list (rust_gin_device.hip), which alone carry the
  // batch writer's copies of the loop.
  template <RingPolicy R = RingPolicy::now, typename ReqAt>
  RG_INLINE int post_list(ReqAt req, uint32_t n, uint64_t* last, uint8_t kind) {
    return post_batches<R, true>(req, n, last, kind);
  }

  template <RingPolicy R, bool kList, typename ReqAt>
  RG_INLINE int post_batches(ReqAt req, uint32_t n, uint64_t* last, uint8_t kind) {
    if (failed()) return RUST_GIN_ERR_QP_FAILED;
    Bound bound(rd(d_->timeout_ns));
    uint32_t first = 0;
    while (first < n) {
      const uint32_t left = n - first;
      const uint32_t m = left < max_batch() ? left : max_batch();
      const uint64_t base = reserve(m);
      int s = wait_credit(base, m, bound);
      if (s) return s;
      bool reads = false, last_cqe = false;
      const bool end_cqe = end_wants_cqe(base, m);
      const auto each = [&](const auto& w) {
        // All but the batch's last WQE, whose CQE flags are the requests'
        // own, then the last, which may also take the batch's end CQE: the
        // test of the end per WQE cost x86 five instructions per WQE. The
        // last WQE's CQE flag is the batch's too (release's signaled_end).
        for (uint32_t i = 0; i + 1 < m; ++i) {
          // A reference where req yields one (an array: rust_gin_device.hip's
          // post_list), else the value; copying an array's request first
          // cost the GPU build registers and x86 ~14 instructions per WQE.
          // A 64-bit index, so that the compiler may step a pointer.
          const Request& r = req(uint64_t{first} + i);
          reads |= w.is_read(r);
          w.wqe(base + i, r, (r.flags & REQ_SIGNALED) != 0);
        }
        const Request& r = req(uint64_t{first} + m - 1);
        reads |= w.is_read(r);
        last_cqe = end_cqe || (r.flags & REQ_SIGNALED);
        w.wqe(base + m - 1, r, last_cqe);
      };
      if constexpr (kList) {
        writer().batch(kind, each);
      } else {
        each(writer());
      }
      // Once per batch: the batch's end covers its READs.
      if (reads) note_read(base + m - 1);
      s = wait_turn(base, bound);
      if (s) return s;
      note_psns(base, m, [&](uint32_t i) { return req(first + i); });
      release(m, last_cqe ? base + m : 0);
      if (R == RingPolicy::now) ring();
      if (last) *last = base + m - 1;
      first += m;
    }
    return RUST_GIN_OK;
  }

  template <RingPolicy R = RingPolicy::now>
  RG_INLINE int post_array(const Request* reqs, uint32_t n, uint64_t* last = nullptr) {
    return post<R>([reqs](uint32_t i) { return reqs[i]; }, n, last);
  }

  template <RingPolicy R = RingPolicy::now>
  RG_INLINE int post_one(const Request& r, uint64_t* last = nullptr) {
    return post<R>([&r](uint32_t) { return r; }, 1, last);
  }

  // Makes every WQE published so far observable as complete: returns the
  // completion index to wait for. Completions are in order on a send queue,
  // so one CQE covers all WQEs before it. A flush WQE is posted when READs
  // were published since the last DUMP (a READ's own CQE does not prove its
  // data landed) or when the newest WQE requests no CQE. It is a signalled
  // DUMP when the queue has a flush byte (mlx5/wire.h, OP_DUMP: its read of
  // local memory cannot pass the READs' data writes), else a NOP; either
  // way its small fence holds it behind earlier READs and atomics. The
  // families without NOP or DUMP post a fenced 1-byte WRITE instead, after
  // READs only. Rings whatever is published but not rung.
  RG_INLINE int flush_target(uint64_t* target) {
    if (failed()) return RUST_GIN_ERR_QP_FAILED;
    const uint32_t lkey = rd(d_->flush_lkey);
    if (flush_covered(lkey, target)) {
      if (*target == 0 || atomic_load(&st_->done, __ATOMIC_ACQUIRE, Scope::agent) >= *target) return RUST_GIN_OK;
      // Without a flush byte, a family without NOP or DUMP signals every
      // batch's last WQE (wants_cqe): nothing to post.
      if ((!F::kFlushWqe && !lkey) ||
          atomic_load(&st_->last_signaled, __ATOMIC_RELAXED, Scope::agent) >= *target) {
        ring();
        return RUST_GIN_OK;
      }
    }
    uint64_t idx = 0;
    int s;
    if constexpr (!F::kFlushWqe) {
      // No NOP or DUMP (bnxt_re, ionic): a 1-byte WRITE read from the flush
      // byte to the peer's (abi/nic_queue.h), after READs as a DUMP (its
      // gather is the local read that cannot pass the READs' data writes;
      // the small fence starts it after the READs completed), else as the
      // NOP that signals the newest WQE. Built where the post writes it, after its
      // credit wait: built before, its addresses and keys stayed live
      // through the wait's CQ poll and cost the flush kernels 6-8 VGPRs (68
      // on bnxt_re and ionic; tests/isa_checks.rs holds them to 64).
      s = post(
          [this](uint32_t) {
            Request w = {};
            w.opcode = OP_RDMA_WRITE;
            w.flags = REQ_SIGNALED | REQ_SMALL_FENCE;
            w.length = 1;
            w.lkey = rd(d_->flush_lkey);
            w.laddr = rd(d_->flush_addr);
            w.rkey = rd(d_->flush_rkey);
            w.raddr = rd(d_->flush_raddr);
            return w;
          },
          1, &idx);
    } else {
      Request r = {};
      r.flags = REQ_SIGNALED | REQ_SMALL_FENCE;
      r.length = 1;
      r.lkey = lkey;
      r.laddr = rd(d_->flush_addr);
      // Two posts, each of a known opcode: a WQE builder for an opcode known
      // only at run time costs 9 more VGPRs in every kernel that flushes.
      if (lkey) {
        r.opcode = OP_DUMP;
        s = post_one(r, &idx);
      } else {
        r.opcode = OP_NOP;
        s = post_one(r, &idx);
      }
    }
    if (s) return s;
    // After the post: a flush that sees dump_end finds the flush WQE published.
    if (lkey) atomic_fetch_max(&st_->dump_end, idx + 1, __ATOMIC_RELAXED, Scope::agent);
    *target = idx + 1;
    return RUST_GIN_OK;
  }

  // Whether everything published is covered without a flush WQE: true, with
  // the completion index to wait for in *target, unless READs were published
  // since the newest flush WQE and the queue has a flush byte (lkey). A
  // flush WQE posted by another flush covers our READs: its index is waited
  // for too.
  RG_INLINE bool flush_covered(uint32_t lkey, uint64_t* target) {
    const uint64_t t = atomic_load(&st_->ready, __ATOMIC_ACQUIRE, Scope::agent);
    // Ordered by the acquire above: every READ published below t is in read_end.
    const uint64_t reads = atomic_load(&st_->read_end, __ATOMIC_RELAXED, Scope::agent);
    const uint64_t dumped = atomic_load(&st_->dump_end, __ATOMIC_RELAXED, Scope::agent);
    if (lkey && reads && reads >= dumped) return false;
    *target = reads && dumped > t ? dumped : t;
    return true;
  }

  // Waits until every WQE published so far has completed.
  RG_INLINE int quiet(Bound& bound) {
    uint64_t target = 0;
    const int s = flush_target(&target);
    if (s) return s;
    return wait_done(target, RUST_GIN_WAIT_FLUSH, bound);
  }
  RG_INLINE int quiet() {
    Bound bound(rd(d_->timeout_ns));
    return quiet(bound);
  }

  // Waits until `done` reaches target, polling the CQ. Ends with a
  // system-scope acquire by the waiting lane itself: the lane that polled
  // the CQE may run on another CU, and what the NIC wrote into memory (a
  // READ's data) must not be read from this CU's stale caches.
  RG_INLINE int wait_done(uint64_t target, uint8_t what, Bound& bound) {
    const int status = wave::spin([&] {
      if (atomic_load(&st_->done, __ATOMIC_ACQUIRE, Scope::agent) >= target) {
        return static_cast<int>(failed() ? RUST_GIN_ERR_QP_FAILED : RUST_GIN_OK);
      }
      const int s = cq_.poll();
      if (s) return s;
      const uint64_t done = atomic_load(&st_->done, __ATOMIC_ACQUIRE, Scope::agent);
      if (done >= target) return static_cast<int>(failed() ? RUST_GIN_ERR_QP_FAILED : RUST_GIN_OK);
      if (failed()) return static_cast<int>(RUST_GIN_ERR_QP_FAILED);
      const int b = bound.check();
      if (b) return fail_wait(b, what, target, done);
      return wave::kSpinAgain;
    }, cq_ring());
    fence_acquire_system();
    return status;
  }

  RG_INLINE int poll() { return cq_.poll(); }

 private:
  // A wait ended early: an abort is returned as is; a timeout is recorded and
  // fails the queue (a producer that gave up may hold a ticket nobody will
  // publish, so the queue cannot make progress any more).
  RG_INLINE int fail_wait(int why, uint8_t what, uint64_t expected, uint64_t observed) {
    if (why != RUST_GIN_ERR_TIMEOUT) return why;
    ErrorInfo e = {};
    e.code = RUST_GIN_ERR_TIMEOUT;
    e.peer = rd(d_->peer);
    e.qpn = rd(d_->qpn);
    e.wqe_index = static_cast<uint32_t>(expected & 0xffff);
    e.wait_kind = what;
    e.expected = expected;
    e.observed = observed;
    record_error(reinterpret_cast<rust_gin_error*>(rd(d_->error)), e);
    atomic_exchange(&st_->failed, 1u, __ATOMIC_RELAXED, Scope::agent);
    return RUST_GIN_ERR_TIMEOUT;
  }

  template <typename T>
  RG_INLINE static T rd(const T& field) {
    return load_invariant(&field);
  }

  const Desc* d_;
  rust_gin_mlx5_sq_state* st_;
  CompletionQueue<F> cq_;
};

}  // namespace queue
}  // namespace rust_gin
