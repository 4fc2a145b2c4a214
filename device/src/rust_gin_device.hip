// The device library: one translation unit, compiled per GPU architecture
// (bitcode, code object, -fgpu-rdc archive) and for x86-64 (linked into the
// Rust crate). Definitions of the extern "C" entry points live here; the logic
// lives in the header-only layers under device/include/rust_gin/.
#include "rust_gin/bnxt/family.h"
#include "rust_gin/gin/lanes.h"
#include "rust_gin/ionic/family.h"
#include "rust_gin/mlx5/api.h"
#include "rust_gin/mlx5/sq.h"
#include "rust_gin/queue/api.h"

using namespace rust_gin;
using namespace rust_gin::mlx5;

namespace {
// Every request of a list checked before any is posted; returns false
// where one is invalid. *kind: the list's ListKind (mlx5/wqe.h), for the
// batch writer (mlx5/family.h, Family::batch). No early exit: lists are
// valid nearly always, and a branch per request costs more than it saves.
static_assert(__builtin_offsetof(rust_gin_mlx5_request, opcode) == 0 &&
                  __builtin_offsetof(rust_gin_mlx5_request, flags) == 1 &&
                  __builtin_offsetof(rust_gin_mlx5_request, length) == 4 && alignof(rust_gin_mlx5_request) >= 8,
              "check_list reads opcode, flags and length as one little-endian 8-byte word");
RG_INLINE bool check_list(const rust_gin_mlx5_request* reqs, uint32_t n, ListKind* kind) {
  *kind = ListKind::mixed;
  if (!n) return true;
  // Most lists repeat one opcode and, but for SIGNALED (which only asks
  // for a CQE), one set of flags: one rule for all, and a length test per
  // request.
  const uint8_t op = reqs[0].opcode;
  const uint8_t flags = reqs[0].flags & ~REQ_SIGNALED;
  const ShapeRule k = shape_rule(op, flags);
  // Branch-free accumulators over each request's first 8 bytes (opcode,
  // flags, reserved, length: one load), less lo in the length's half:
  // - a bit of opcode and flags is the same in every request where its OR
  //   and AND over the list agree;
  // - every length fits where the OR of (length - lo) does, as each operand
  //   of an OR is at most the OR. Where it does not, or the requests
  //   differ, the one-by-one check below decides; with each rule's hi - lo
  //   of the form 2^k - 1 (wqe.h) an OR over range means an invalid list.
  // x86: 16 -> 4.75 instructions per request (unrolled by 4).
  uint64_t any = 0, all = ~uint64_t{0};
  const uint64_t lo = uint64_t{k.lo} << 32;
#pragma GCC unroll 4
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t w;
    __builtin_memcpy(&w, &reqs[i], sizeof w);
    w -= lo;
    any |= w;
    all &= w;
  }
  const uint32_t differ = static_cast<uint32_t>(any ^ all) & (0xffffu & ~(uint32_t{REQ_SIGNALED} << 8));
  const uint32_t over = static_cast<uint32_t>(any >> 32);
  const bool same = differ == 0, fits = over <= k.hi - k.lo;
  if (same && fits) {
    const bool ok = k.shape != Shape::any;
    if (ok) *kind = list_kind(op, flags);
    return ok;
  }
  bool ok = true;
  for (uint32_t i = 0; i < n; ++i) ok &= request_valid(reqs[i]);
  return ok;
}

template <RingPolicy R>
RG_INLINE int post_list(const rust_gin_mlx5_sq* sq, const rust_gin_mlx5_request* reqs, uint32_t n) {
  RG_WAVE_ENTRY();
  if (!sq || (n && !reqs)) return RUST_GIN_ERR_INVALID;
  ListKind kind;
  if (!check_list(reqs, n, &kind)) return RUST_GIN_ERR_INVALID;
  // Each request read where the WQE builder needs it, not copied first.
  return gin::post_in_turn<R>(sq, [reqs](uint64_t i) -> const Request& { return reqs[i]; }, n, nullptr,
                              static_cast<uint8_t>(kind));
}

// The same for a family F whose requests `valid` checks.
template <class F, bool (*Valid)(const rust_gin_mlx5_request&), RingPolicy R = RingPolicy::now>
RG_INLINE int post_family(const typename F::Desc* sq, const rust_gin_mlx5_request* reqs, uint32_t n) {
  RG_WAVE_ENTRY();
  if (!sq || (n && !reqs)) return RUST_GIN_ERR_INVALID;
  for (uint32_t i = 0; i < n; ++i) {
    if (!Valid(reqs[i])) return RUST_GIN_ERR_INVALID;
  }
  return gin::post_in_turn<R, F>(sq, [reqs](uint64_t i) -> const Request& { return reqs[i]; }, n, nullptr, 0);
}
}  // namespace

RG_EXTERN_C RG_DEV int rust_gin_mlx5_post(const rust_gin_mlx5_sq* sq, const rust_gin_mlx5_request* reqs, uint32_t n) {
  return post_list<RingPolicy::now>(sq, reqs, n);
}

RG_EXTERN_C RG_DEV int rust_gin_mlx5_post_deferred(const rust_gin_mlx5_sq* sq, const rust_gin_mlx5_request* reqs,
                                                   uint32_t n) {
  return post_list<RingPolicy::defer>(sq, reqs, n);
}

RG_EXTERN_C RG_DEV void rust_gin_mlx5_ring(const rust_gin_mlx5_sq* sq) {
  SendQueue q(sq);
  q.ring();
}

RG_EXTERN_C RG_DEV int rust_gin_mlx5_quiet(const rust_gin_mlx5_sq* sq) {
  RG_WAVE_ENTRY();
  uint64_t target = 0;
  const int s = gin::flush_target(sq, true, &target);
  if (s) return s;
  SendQueue q(sq);
  Bound bound(q.timeout_ns());
  return q.wait_done(target, RUST_GIN_WAIT_FLUSH, bound);
}

RG_EXTERN_C RG_DEV int rust_gin_mlx5_poll(const rust_gin_mlx5_sq* sq) {
  SendQueue q(sq);
  return q.poll();
}

RG_EXTERN_C RG_DEV int rust_gin_mlx5_build_wqe(const rust_gin_mlx5_request* req, uint16_t index, uint32_t qpn,
                                               int cq_update, void* out64) {
  if (!req || !out64 || !request_valid(*req)) return RUST_GIN_ERR_INVALID;
  // Written as the send queue writes WQEs (4 x 16 bytes): the device code's
  // only plain stores are WQE segments, doorbell records and doorbells.
  Seg* out = static_cast<Seg*>(out64);
  emit_wqe(*req, index, qpn, cq_update != 0, [out](unsigned i, const Seg& seg) { out[i] = seg; });
  return RUST_GIN_OK;
}

// --- bnxt_re and ionic (queue/api.h) --------------------------------------------
RG_EXTERN_C RG_DEV int rust_gin_bnxt_post(const rust_gin_nic_sq* sq, const rust_gin_mlx5_request* reqs, uint32_t n) {
  return post_family<bnxt::Family, bnxt::request_valid>(sq, reqs, n);
}

RG_EXTERN_C RG_DEV int rust_gin_ionic_post(const rust_gin_nic_sq* sq, const rust_gin_mlx5_request* reqs, uint32_t n) {
  return post_family<ionic::Family, ionic::request_valid>(sq, reqs, n);
}

RG_EXTERN_C RG_DEV int rust_gin_bnxt_post_deferred(const rust_gin_nic_sq* sq, const rust_gin_mlx5_request* reqs,
                                                   uint32_t n) {
  return post_family<bnxt::Family, bnxt::request_valid, RingPolicy::defer>(sq, reqs, n);
}

RG_EXTERN_C RG_DEV int rust_gin_ionic_post_deferred(const rust_gin_nic_sq* sq, const rust_gin_mlx5_request* reqs,
                                                    uint32_t n) {
  return post_family<ionic::Family, ionic::request_valid, RingPolicy::defer>(sq, reqs, n);
}

RG_EXTERN_C RG_DEV void rust_gin_bnxt_ring(const rust_gin_nic_sq* sq) {
  queue::SendQueue<bnxt::Family> q(sq);
  q.ring();
}

RG_EXTERN_C RG_DEV void rust_gin_ionic_ring(const rust_gin_nic_sq* sq) {
  queue::SendQueue<ionic::Family> q(sq);
  q.ring();
}

RG_EXTERN_C RG_DEV int rust_gin_bnxt_poll(const rust_gin_nic_sq* sq) {
  queue::CompletionQueue<bnxt::Family> cq(sq);
  return cq.poll();
}

RG_EXTERN_C RG_DEV int rust_gin_ionic_poll(const rust_gin_nic_sq* sq) {
  queue::CompletionQueue<ionic::Family> cq(sq);
  return cq.poll();
}

// --- GIN operations (rust_gin_device.h) ----------------------------------------
#include "rust_gin/gin/ops.h"
#include "rust_gin/rust_gin_device.h"

using namespace rust_gin::gin;

namespace {
// Each operation below is written once over the family F (gin/family.h);
// its entry point resolves the context and runs its family's instance.
template <class F, bool kExclusive = false>
RG_INLINE int put_on(const Ctx& x, uint32_t peer, const void* dst_window, uint64_t dst_off, const void* src_window,
                     uint64_t src_off, uint64_t bytes, const rust_gin_signal& signal, uint32_t has_counter,
                     uint32_t counter_id, uint32_t flags) {
  // Every argument checked, the first bad one recorded once (BadArg).
  BadArg b;
  const bool has_signal = signal.type != RUST_GIN_SIGNAL_NONE;
  bool ok = peer_ok<F>(x, peer, &b);
  if (ok && bytes) {
    ok = window_ok(x, dst_window, dst_off, bytes, &b);          // isa-path: put.dst
    ok = ok && window_ok(x, src_window, src_off, bytes, &b);  // isa-path: put.src
  }
  if (ok && has_counter && counter_id >= x.c->n_counters) ok = bad(&b, RUST_GIN_ARG_COUNTER, counter_id, x.c->n_counters);
  if (ok && has_signal) ok = signal_ok(x, peer, signal, &b);
  if (!ok) return record(x, peer, b);
  int s = RUST_GIN_OK;
  if (flags & RUST_GIN_FLAG_RELEASE_SYSTEM) fence_release_system();

  const rust_gin_window* src = static_cast<const rust_gin_window*>(src_window);
  uint64_t done_bytes = 0;
  {
    // All but the last chunk of a put larger than one WQE may move. Lanes
    // with such a put take this loop (of a different length each); the
    // others wait at the region's end.
    wave::Region big(bytes > max_chunk<F>());
    while (big && bytes - done_bytes > max_chunk<F>()) {
      Request w = {};
      w.opcode = OP_RDMA_WRITE;
      w.length = static_cast<uint32_t>(max_chunk<F>());
      w.lkey = local_key(x, src);
      w.laddr = src->local_base + src_off + done_bytes;
      w.raddr = remote(x, dst_window, peer).base + dst_off + done_bytes;
      w.rkey = remote(x, dst_window, peer).rkey;
      if ((s = post<F, kExclusive>(x, peer, w, flags & ~RUST_GIN_FLAG_AGGREGATE))) break;  // isa-path: put.big
      done_bytes += max_chunk<F>();
    }
  }
  if (s) return s;
  Request w = {};
  if (bytes) {
    w.opcode = OP_RDMA_WRITE;
    w.length = static_cast<uint32_t>(bytes - done_bytes);
    w.lkey = local_key(x, src);
    w.laddr = src->local_base + src_off + done_bytes;
    w.raddr = remote(x, dst_window, peer).base + dst_off + done_bytes;
    w.rkey = remote(x, dst_window, peer).rkey;
  }
  // The signal rides the same queue behind the data: the responder executes
  // it after the writes, so the signal is seen only after the data. The
  // data goes first, the signal is built and posted after it (post: one
  // request live at a time), and the signal's post rings for both.
  // A counter advances when the put's last WQE completed (credited by a
  // poller of the queue): the lane does not wait for it.
  const uint32_t counter_tag = has_counter ? counter_id + 1 : 0;
  if (bytes || has_signal) {
    // A step no lane of the wave needs is skipped (a wave-uniform test: its
    // ballots and group steps would post nothing).
    if (wave::any(bytes != 0)) {
      s = post<F, kExclusive>(x, peer, w, flags, has_signal ? 0 : counter_tag, bytes != 0, has_signal);  // isa-path: put.data
      if (s) return s;
    }
    if (wave::any(has_signal)) {
      // isa-path: put.signal
      s = post<F, kExclusive>(x, peer, has_signal ? signal_wqe<F>(x, peer, signal) : Request{}, flags, counter_tag, has_signal);
    }
  } else if (has_counter) {
    // A zero-byte put without a signal moves nothing: complete at once.
    atomic_fetch_add(word<uint64_t>(x.c->counters, counter_id), uint64_t{1}, __ATOMIC_RELEASE, Scope::agent);
  }
  return s;
}

template <class F, bool kExclusive = false>
RG_INLINE int put_value_on(const Ctx& x, uint32_t peer, const void* dst_window, uint64_t dst_off, uint64_t value,
                           uint32_t size, const rust_gin_signal& signal, uint32_t flags) {
  BadArg b;
  const bool has_signal = signal.type != RUST_GIN_SIGNAL_NONE;
  bool ok = peer_ok<F>(x, peer, &b);
  if (ok && size != 1 && size != 2 && size != 4 && size != 8) ok = bad(&b, RUST_GIN_ARG_SIZE, size, 8);
  ok = ok && window_ok(x, dst_window, dst_off, size, &b);  // isa-path: put_value.dst
  if (ok && has_signal) ok = signal_ok(x, peer, signal, &b);
  if (!ok) return record(x, peer, b);
  int s;
  Request w = {};
  w.opcode = OP_RDMA_WRITE;
  w.flags = REQ_INLINE;
  w.length = size;
  w.operand0 = value;
  w.raddr = remote(x, dst_window, peer).base + dst_off;
  w.rkey = remote(x, dst_window, peer).rkey;
  if (flags & RUST_GIN_FLAG_RELEASE_SYSTEM) fence_release_system();
  // As in rust_gin_put: the data, then the signal built and posted behind it.
  if ((s = post<F, kExclusive>(x, peer, w, flags, 0, true, has_signal))) return s;  // isa-path: put_value.data
  if (!wave::any(has_signal)) return RUST_GIN_OK;  // no lane has a signal step
  // isa-path: put_value.signal
  return post<F, kExclusive>(x, peer, has_signal ? signal_wqe<F>(x, peer, signal) : Request{}, flags, 0, has_signal);
}

template <class F, bool kExclusive = false>
RG_INLINE int signal_peer_on(const Ctx& x, uint32_t peer, const rust_gin_signal& signal, uint32_t flags) {
  BadArg b;
  if (!peer_ok<F>(x, peer, &b) || !signal_ok(x, peer, signal, &b)) return record(x, peer, b);
  if (flags & RUST_GIN_FLAG_RELEASE_SYSTEM) fence_release_system();
  return post<F, kExclusive>(x, peer, signal_wqe<F>(x, peer, signal), flags);  // isa-path: signal.post
}

template <class F, bool kExclusive = false>
RG_INLINE int get_on(const Ctx& x, uint32_t peer, const void* remote_window, uint64_t remote_off,
                     const void* local_window, uint64_t local_off, uint64_t bytes, uint32_t flags) {
  BadArg b;
  bool ok = peer_ok<F>(x, peer, &b);
  if (ok && bytes == 0) return RUST_GIN_OK;
  ok = ok && window_ok(x, remote_window, remote_off, bytes, &b);  // isa-path: get.remote
  ok = ok && window_ok(x, local_window, local_off, bytes, &b);    // isa-path: get.local
  if (!ok) return record(x, peer, b);
  int s = RUST_GIN_OK;
  const rust_gin_window* local = static_cast<const rust_gin_window*>(local_window);
  auto read = [&](uint64_t off, uint64_t len) {
    Request r = {};
    r.opcode = OP_RDMA_READ;
    r.length = static_cast<uint32_t>(len);
    r.lkey = local_key(x, local);
    r.laddr = local->local_base + local_off + off;
    r.raddr = remote(x, remote_window, peer).base + remote_off + off;
    r.rkey = remote(x, remote_window, peer).rkey;
    return r;
  };
  uint64_t off = 0;
  {
    // All but the last chunk of a get larger than one WQE, as in rust_gin_put.
    wave::Region big(bytes > max_chunk<F>());
    while (big && bytes - off > max_chunk<F>()) {
      if ((s = post<F, kExclusive>(x, peer, read(off, max_chunk<F>()), flags & ~RUST_GIN_FLAG_AGGREGATE))) break;  // isa-path: get.big
      off += max_chunk<F>();
    }
  }
  if (s) return s;
  return post<F, kExclusive>(x, peer, read(off, bytes - off), flags);  // isa-path: get.post
}

template <class F>
RG_INLINE int flush_on(const Ctx& x, uint32_t coop_rank, uint32_t coop_size, const uint32_t* abort_flag,
                       uint64_t timeout_cycles) {
  typedef typename F::Desc Desc;
  int s = RUST_GIN_OK;
  Bound bound(x.h->timeout_ns, abort_flag, timeout_cycles);
  int first_error = RUST_GIN_OK;
  // Lanes walk their peers (coop_rank, coop_rank + coop_size, ...) in step,
  // a lane with no peer left sitting a step out, so that lanes which reach
  // one queue together share its flush (DC: the peers of one DCI share it).
  // Start every flush first, then wait: the peers' NICs work in parallel.
  const uint64_t nranks = x.h->nranks;
  // Ranks the context set has no queue pair to (a v15 peer array) have
  // nothing to flush.
  for (uint64_t p = coop_rank; wave::any(p < nranks); p += coop_size) {
    const bool mine = p < nranks && connected<F>(x, static_cast<uint32_t>(p));
    uint64_t target = 0;
    s = gin::flush_target<F>(mine ? queue_of<F>(x, static_cast<uint32_t>(p)) : nullptr, mine, &target);
    if (mine && s && !first_error) first_error = s;
  }
  for (uint64_t p = coop_rank; wave::any(p < nranks); p += coop_size) {
    const bool mine = p < nranks && connected<F>(x, static_cast<uint32_t>(p));
    const Desc* q = mine ? queue_of<F>(x, static_cast<uint32_t>(p)) : nullptr;
    uint64_t target = 0;
    if (gin::flush_target<F>(q, mine, &target) || !mine) continue;
    FamilyQueue<F> sq(q);
    s = sq.wait_done(target, RUST_GIN_WAIT_FLUSH, bound);
    if (s == RUST_GIN_ERR_ABORTED) return s;
    if (s && !first_error) first_error = s;
  }
  return first_error;
}

template <class F>
RG_INLINE int flush_async_on(const Ctx& x, uint32_t peer, uint64_t* target) {
  const int s = check_peer<F>(x, peer);
  if (s) return s;
  return gin::flush_target<F>(queue_of<F>(x, peer), true, target);
}

template <class F>
RG_INLINE int wait_on(const Ctx& x, const rust_gin_request& request, const uint32_t* abort_flag,
                      uint64_t timeout_cycles) {
  const int s = check_peer<F>(x, request.peer);
  if (s) return s;
  FamilyQueue<F> sq(queue_of<F>(x, request.peer));
  Bound bound(x.h->timeout_ns, abort_flag, timeout_cycles);
  return sq.wait_done(request.target, RUST_GIN_WAIT_FLUSH, bound);
}
}  // namespace

// A family's operation behind an entry point: `call` with F the context's
// family (gin/family.h); a lane whose context's family differs from the
// wave's, or is not built, is refused, with its error recorded.
#define RG_ON_FAMILY(x, call)                                                                              \
  with_family(                                                                                             \
      (x).c->family, [&](auto f_) { typedef decltype(f_) F; return call; },                              \
      [&](uint32_t wave_family) {                                                                          \
        return invalid((x).err, (x).h->rank, RUST_GIN_ARG_FAMILY, (x).c->family, wave_family);     \
      })

// Credits counters from the queues with counted puts. A failed queue means
// a counted put may never count: recorded, so that queryLastError reports
// what RCCL's counter wait, which has no status to return, cannot.
RG_INLINE void progress_or_record(const Ctx& x, uint32_t id) {
  if (RG_ON_FAMILY(x, progress_counters<F>(x)) != RUST_GIN_ERR_QP_FAILED) return;
  ErrorInfo e = {};
  e.code = RUST_GIN_ERR_QP_FAILED;
  e.peer = x.h->rank;
  e.wqe_index = id;
  e.wait_kind = RUST_GIN_WAIT_COUNTER;
  record_error(x.err, e);
}

RG_EXTERN_C RG_DEV int rust_gin_put(const void* handle, uint32_t context, uint32_t peer, const void* dst_window,
                                    uint64_t dst_off, const void* src_window, uint64_t src_off, uint64_t bytes,
                                    rust_gin_signal signal, uint32_t has_counter, uint32_t counter_id,
                                    uint32_t flags) {
  RG_WAVE_ENTRY();
  Ctx x;
  const int s = resolve(handle, context, &x);
  if (s) return s;
  return RG_ON_FAMILY(x, put_on<F>(x, peer, dst_window, dst_off, src_window, src_off, bytes, signal, has_counter,
                                   counter_id, flags));
}

// What an exclusive entry returns: the operation's status, or, where the
// wave did not own the queue (queue::kNotOwned: another producer's post
// in flight, or a DC context), RUST_GIN_ERR_INVALID recorded as
// RUST_GIN_ARG_NOT_EXCLUSIVE (expected: the context's DCIs). One record
// site per entry: one per post cost the put 3 VGPRs over its budget.
RG_INLINE int owned_or_refused(const Ctx& x, uint32_t peer, int r) {
  if (r != queue::kNotOwned) return r;
  return invalid(x.err, peer, RUST_GIN_ARG_NOT_EXCLUSIVE, peer, x.c->n_dci);
}

RG_EXTERN_C RG_DEV int rust_gin_put_exclusive(const void* handle, uint32_t context, uint32_t peer,
                                              const void* dst_window, uint64_t dst_off, const void* src_window,
                                              uint64_t src_off, uint64_t bytes, rust_gin_signal signal,
                                              uint32_t has_counter, uint32_t counter_id, uint32_t flags) {
  RG_WAVE_ENTRY();
  Ctx x;
  const int s = resolve(handle, context, &x);
  if (s) return s;
  return owned_or_refused(x, peer,
                          RG_ON_FAMILY(x, (put_on<F, true>(x, peer, dst_window, dst_off, src_window, src_off, bytes,
                                                           signal, has_counter, counter_id, flags))));
}

RG_EXTERN_C RG_DEV int rust_gin_put_value_exclusive(const void* handle, uint32_t context, uint32_t peer,
                                                    const void* dst_window, uint64_t dst_off, uint64_t value,
                                                    uint32_t size, rust_gin_signal signal, uint32_t flags) {
  RG_WAVE_ENTRY();
  Ctx x;
  const int s = resolve(handle, context, &x);
  if (s) return s;
  return owned_or_refused(
      x, peer, RG_ON_FAMILY(x, (put_value_on<F, true>(x, peer, dst_window, dst_off, value, size, signal, flags))));
}

RG_EXTERN_C RG_DEV int rust_gin_signal_peer_exclusive(const void* handle, uint32_t context, uint32_t peer,
                                                      rust_gin_signal signal, uint32_t flags) {
  RG_WAVE_ENTRY();
  Ctx x;
  const int s = resolve(handle, context, &x);
  if (s) return s;
  return owned_or_refused(x, peer, RG_ON_FAMILY(x, (signal_peer_on<F, true>(x, peer, signal, flags))));
}

RG_EXTERN_C RG_DEV int rust_gin_get_exclusive(const void* handle, uint32_t context, uint32_t peer,
                                              const void* remote_window, uint64_t remote_off,
                                              const void* local_window, uint64_t local_off, uint64_t bytes,
                                              uint32_t flags) {
  RG_WAVE_ENTRY();
  Ctx x;
  const int s = resolve(handle, context, &x);
  if (s) return s;
  return owned_or_refused(x, peer,
                          RG_ON_FAMILY(x, (get_on<F, true>(x, peer, remote_window, remote_off, local_window,
                                                           local_off, bytes, flags))));
}

RG_EXTERN_C RG_DEV int rust_gin_put_value(const void* handle, uint32_t context, uint32_t peer,
                                          const void* dst_window, uint64_t dst_off, uint64_t value, uint32_t size,
                                          rust_gin_signal signal, uint32_t flags) {
  RG_WAVE_ENTRY();
  Ctx x;
  const int s = resolve(handle, context, &x);
  if (s) return s;
  return RG_ON_FAMILY(x, put_value_on<F>(x, peer, dst_window, dst_off, value, size, signal, flags));
}

RG_EXTERN_C RG_DEV int rust_gin_signal_peer(const void* handle, uint32_t context, uint32_t peer,
                                            rust_gin_signal signal, uint32_t flags) {
  RG_WAVE_ENTRY();
  Ctx x;
  const int s = resolve(handle, context, &x);
  if (s) return s;
  return RG_ON_FAMILY(x, signal_peer_on<F>(x, peer, signal, flags));
}

RG_EXTERN_C RG_DEV int rust_gin_get(const void* handle, uint32_t context, uint32_t peer, const void* remote_window,
                                    uint64_t remote_off, const void* local_window, uint64_t local_off,
                                    uint64_t bytes, uint32_t flags) {
  RG_WAVE_ENTRY();
  Ctx x;
  const int s = resolve(handle, context, &x);
  if (s) return s;
  return RG_ON_FAMILY(x, get_on<F>(x, peer, remote_window, remote_off, local_window, local_off, bytes, flags));
}

RG_EXTERN_C RG_DEV int rust_gin_flush(const void* handle, uint32_t context, uint32_t coop_rank, uint32_t coop_size,
                                      const uint32_t* abort_flag, uint64_t timeout_cycles) {
  RG_WAVE_ENTRY();
  Ctx x;
  const int s = resolve(handle, context, &x);
  if (s) return s;
  if (coop_size == 0) return invalid(x.err, 0, RUST_GIN_ARG_SIZE, 0, 1);
  return RG_ON_FAMILY(x, flush_on<F>(x, coop_rank, coop_size, abort_flag, timeout_cycles));
}

RG_EXTERN_C RG_DEV int rust_gin_flush_async(const void* handle, uint32_t context, uint32_t peer,
                                            rust_gin_request* out) {
  RG_WAVE_ENTRY();
  Ctx x;
  int s = resolve(handle, context, &x);
  if (s) return s;
  uint64_t target = 0;
  s = RG_ON_FAMILY(x, flush_async_on<F>(x, peer, &target));
  if (s == RUST_GIN_ERR_INVALID) return s;
  out->context = context;
  out->peer = peer;
  out->target = target;
  return s;
}

RG_EXTERN_C RG_DEV int rust_gin_wait(const void* handle, rust_gin_request request, const uint32_t* abort_flag,
                                     uint64_t timeout_cycles) {
  RG_WAVE_ENTRY();
  Ctx x;
  const int s = resolve(handle, request.context, &x);
  if (s) return s;
  return RG_ON_FAMILY(x, wait_on<F>(x, request, abort_flag, timeout_cycles));
}

RG_EXTERN_C RG_DEV uint64_t* rust_gin_signal_ptr(const void* handle, uint32_t context, uint32_t id,
                                                 uint64_t* offset) {
  Ctx x;
  *offset = 0;
  if (resolve(handle, context, &x)) return nullptr;
  if (id >= x.c->n_signals) {
    invalid(x.err, x.h->rank, RUST_GIN_ARG_SIGNAL, id, x.c->n_signals);
    return word<uint64_t>(x.c->sink, 0);  // readable, never a crash
  }
  *offset = atomic_load(word<uint64_t>(x.c->signal_offsets, id), __ATOMIC_RELAXED, Scope::agent);
  // Write mode: the word is current as of this call; a caller that polls it
  // refreshes it each time (rust_gin_signal_refresh).
  if (write_mode(x.c)) fold_signal(x.c, x.h->nranks, id);
  return word<uint64_t>(x.c->signals, id);
}

// The one hook RCCL's generic waits call before each load of the word they
// poll (patch 0004, ncclGinApi_Progress): signal and counter waits alike,
// on every family. Non-blocking: one fold or one pass over the queues with
// counted puts, so RCCL's loop reads its abort flag between calls.
RG_EXTERN_C RG_DEV void rust_gin_progress(const void* handle, uint32_t context, uint32_t what, uint32_t id) {
  RG_WAVE_ENTRY();
  Ctx x;
  if (resolve(handle, context, &x)) return;
  if (what == RUST_GIN_PROGRESS_SIGNAL) {
    if (id >= x.c->n_signals) {
      invalid(x.err, x.h->rank, RUST_GIN_ARG_SIGNAL, id, x.c->n_signals);
      return;
    }
    if (write_mode(x.c)) fold_signal(x.c, x.h->nranks, id);
  } else if (what == RUST_GIN_PROGRESS_COUNTER) {
    if (id >= x.c->n_counters) {
      invalid(x.err, x.h->rank, RUST_GIN_ARG_COUNTER, id, x.c->n_counters);
      return;
    }
    progress_or_record(x, id);
  } else {
    invalid(x.err, x.h->rank, RUST_GIN_ARG_PROGRESS_TARGET, what, RUST_GIN_PROGRESS_COUNTER);
  }
}

RG_EXTERN_C RG_DEV uint64_t rust_gin_signal_read(const void* handle, uint32_t context, uint32_t id) {
  uint64_t offset = 0;
  const uint64_t* p = rust_gin_signal_ptr(handle, context, id, &offset);
  return p ? atomic_load(p, __ATOMIC_ACQUIRE, Scope::system) - offset : 0;
}

RG_EXTERN_C RG_DEV int rust_gin_signal_wait(const void* handle, uint32_t context, uint32_t id, uint64_t least,
                                            const uint32_t* abort_flag, uint64_t timeout_cycles) {
  RG_WAVE_ENTRY();
  Ctx x;
  int s = resolve(handle, context, &x);
  if (s) return s;
  if (id >= x.c->n_signals) return invalid(x.err, x.h->rank, RUST_GIN_ARG_SIGNAL, id, x.c->n_signals);
  return wait_word<NoFamily>(x, word<uint64_t>(x.c->signals, id), word<uint64_t>(x.c->signal_offsets, id), least,
                             RUST_GIN_WAIT_SIGNAL, id, abort_flag, timeout_cycles, write_mode(x.c));
}

RG_EXTERN_C RG_DEV void rust_gin_signal_reset(const void* handle, uint32_t context, uint32_t id) {
  Ctx x;
  if (resolve(handle, context, &x)) return;
  // Descriptor fields through load_invariant: in a reader of NIC-written
  // memory every other load is scoped (tests/isa_path.rs, NIC-written loads).
  const uint32_t n_signals = load_invariant(&x.c->n_signals);
  if (id >= n_signals) {
    invalid(x.err, load_invariant(&x.h->rank), RUST_GIN_ARG_SIGNAL, id, n_signals);
    return;
  }
  // Move the offset instead of storing 0: an in-flight remote atomic (or
  // slot write) cannot be lost to a racing reset. Write mode folds first, so
  // the offset covers what has landed.
  const uint64_t v =
      write_mode(x.c) ? fold_signal(x.c, load_invariant(&x.h->nranks), id)
                      : atomic_load(word<uint64_t>(load_invariant(&x.c->signals), id), __ATOMIC_ACQUIRE, Scope::system);
  atomic_exchange(word<uint64_t>(load_invariant(&x.c->signal_offsets), id), v, __ATOMIC_RELEASE, Scope::agent);
}

RG_EXTERN_C RG_DEV void rust_gin_va_signal_reset(const void* window, uint64_t offset) {
  const rust_gin_window* w = static_cast<const rust_gin_window*>(window);
  if (!w || w->magic != RUST_GIN_WINDOW_MAGIC || offset % 8 || offset > w->size || w->size - offset < 8) return;
  atomic_exchange(reinterpret_cast<uint64_t*>(w->local_base + offset), uint64_t{0}, __ATOMIC_RELEASE, Scope::system);
}

RG_EXTERN_C RG_DEV uint64_t* rust_gin_counter_ptr(const void* handle, uint32_t context, uint32_t id) {
  RG_WAVE_ENTRY();
  Ctx x;
  if (resolve(handle, context, &x)) return nullptr;
  if (id >= x.c->n_counters) {
    invalid(x.err, x.h->rank, RUST_GIN_ARG_COUNTER, id, x.c->n_counters);
    return word<uint64_t>(x.c->sink, 0);
  }
  // RCCL's readCounter loads this word once, right after: make it current.
  progress_or_record(x, id);
  return word<uint64_t>(x.c->counters, id);
}

RG_EXTERN_C RG_DEV uint64_t rust_gin_counter_read(const void* handle, uint32_t context, uint32_t id) {
  Ctx x;
  if (resolve(handle, context, &x)) return 0;
  if (id >= x.c->n_counters) {
    invalid(x.err, x.h->rank, RUST_GIN_ARG_COUNTER, id, x.c->n_counters);
    return 0;
  }
  // Counters advance when their queues are polled: a reader polls them.
  RG_ON_FAMILY(x, progress_counters<F>(x));
  return atomic_load(word<uint64_t>(x.c->counters, id), __ATOMIC_ACQUIRE, Scope::agent);
}

RG_EXTERN_C RG_DEV int rust_gin_counter_wait(const void* handle, uint32_t context, uint32_t id, uint64_t least,
                                             const uint32_t* abort_flag, uint64_t timeout_cycles) {
  RG_WAVE_ENTRY();
  Ctx x;
  int s = resolve(handle, context, &x);
  if (s) return s;
  if (id >= x.c->n_counters) return invalid(x.err, x.h->rank, RUST_GIN_ARG_COUNTER, id, x.c->n_counters);
  return RG_ON_FAMILY(x, wait_word<F>(x, word<uint64_t>(x.c->counters, id), nullptr, least, RUST_GIN_WAIT_COUNTER,
                                      id, abort_flag, timeout_cycles));
}

RG_EXTERN_C RG_DEV void rust_gin_counter_reset(const void* handle, uint32_t context, uint32_t id) {
  Ctx x;
  if (resolve(handle, context, &x)) return;
  if (id >= x.c->n_counters) {
    invalid(x.err, x.h->rank, RUST_GIN_ARG_COUNTER, id, x.c->n_counters);
    return;
  }
  atomic_exchange(word<uint64_t>(x.c->counters, id), uint64_t{0}, __ATOMIC_RELEASE, Scope::agent);
}

RG_EXTERN_C RG_DEV int rust_gin_supports_strong_signal(const void*) { return 1; }
