// The GIN operations behind the device ABI (rust_gin_device.h): argument
// checks, translation of windows, signals and counters into requests for
// the context's NIC family (gin/family.h), and the completion-side waits.
#pragma once

#include "rust_gin/abi/gin.h"
#include "rust_gin/gin/family.h"
#include "rust_gin/gin/lanes.h"
#include "rust_gin/gin/signal_slots.h"

namespace rust_gin {
namespace gin {

// What one WQE of family F moves at most: larger puts and gets are split
// into WQEs of this size (bnxt_re: 16 MiB, a field quirk; the others 1 GiB,
// below RC's 2 GiB).
template <class F>
RG_INLINE constexpr uint64_t max_chunk() {
  return F::kMaxWqeBytes;
}

struct Ctx {
  const rust_gin_handle* h;
  const rust_gin_context* c;
  rust_gin_error* err;
};

// An invalid argument: recorded (which argument, its value, its limit), never
// trapped on.
RG_INLINE int invalid(rust_gin_error* err, uint32_t peer, uint8_t arg, uint64_t value, uint64_t limit) {
  if (err) {
    ErrorInfo e = {};
    e.code = RUST_GIN_ERR_INVALID;
    e.peer = peer;
    e.wait_kind = arg;
    e.observed = value;
    e.expected = limit;
    record_error(err, e);
  }
  return RUST_GIN_ERR_INVALID;
}

RG_INLINE int resolve(const void* handle, uint32_t context, Ctx* out) {
  const rust_gin_handle* h = static_cast<const rust_gin_handle*>(handle);
  if (!h || h->magic != RUST_GIN_HANDLE_MAGIC) return RUST_GIN_ERR_INVALID;  // nowhere to record it
  rust_gin_error* err = reinterpret_cast<rust_gin_error*>(h->error);
  if (context >= h->n_contexts) return invalid(err, 0, RUST_GIN_ARG_CONTEXT, context, h->n_contexts);
  out->h = h;
  out->c = reinterpret_cast<const rust_gin_context*>(h->contexts) + context;
  out->err = err;
  return RUST_GIN_OK;
}

// The RC per-peer descriptor of `peer` in a context of family F.
template <class F>
RG_INLINE const typename PeerOf<F>::T* peer_of(const Ctx& x, uint32_t peer) {
  return reinterpret_cast<const typename PeerOf<F>::T*>(x.c->peers) + peer;
}

// The DC transport (docs/architecture.md, "DC transport"): the context's
// n_dci DC initiators carry every peer's requests, and the per-peer state is
// a rust_gin_dc_peer. The branch is per context, the same for every lane of
// a wave that names one context. mlx5 only: for the other families it is
// false at compile time (createContext refuses DC on them).
template <class F>
RG_INLINE bool dc(const Ctx& x) {
  if constexpr (IsMlx5<F>::value) return x.c->n_dci != 0;
  return false;
}
RG_INLINE const rust_gin_dc_peer* dc_peer_of(const Ctx& x, uint32_t peer) {
  return reinterpret_cast<const rust_gin_dc_peer*>(x.c->peers) + peer;
}

// The send queue of `peer`'s requests. DC: always DCI peer % n_dci (n_dci a
// power of two, so a mask: a per-lane division costs registers), so all
// of one peer's requests (a put and the signal behind it) sit in one send
// queue, which the NIC executes in order: a signal never overtakes its data,
// as with RC's queue per peer. A DCI serves its next peer only once the
// previous one acknowledged everything (DCI reuse: the NIC's, modelled by
// host/emu).
template <class F>
RG_INLINE const typename F::Desc* queue_of(const Ctx& x, uint32_t peer) {
  if constexpr (IsMlx5<F>::value) {
    if (dc<F>(x)) {
      // isa-path: dc
      return reinterpret_cast<const rust_gin_mlx5_sq*>(x.c->dcis) + (peer & (x.c->n_dci - 1));
    }
  }
  return &peer_of<F>(x, peer)->sq;
}

// Where `peer`'s signal table for this context is, and its rkey.
template <class F>
RG_INLINE uint64_t signal_table(const Ctx& x, uint32_t peer) {
  return dc<F>(x) ? dc_peer_of(x, peer)->signal_raddr : peer_of<F>(x, peer)->signal_raddr;
}
template <class F>
RG_INLINE uint32_t signal_table_rkey(const Ctx& x, uint32_t peer) {
  return dc<F>(x) ? dc_peer_of(x, peer)->signal_rkey : peer_of<F>(x, peer)->signal_rkey;
}

// Whether the context set has a queue pair to `peer` (in range): a GIN v15
// peer array may leave ranks out, and their descriptors carry no queue
// state (host/gin/context.rs).
template <class F>
RG_INLINE bool connected(const Ctx& x, uint32_t peer) {
  if (dc<F>(x)) return load_invariant(&dc_peer_of(x, peer)->connected) != 0;
  return load_invariant(&peer_of<F>(x, peer)->sq.state) != 0;
}

// An invalid argument a check found: the record's argument, value and
// limit. The checks fill it and say false; an operation records it once
// (one inlined record site per operation instead of one per check: each
// site keeps its values live, and the put's checks had eight).
struct BadArg {
  uint8_t arg;
  uint64_t value;
  uint64_t limit;
};
RG_INLINE bool bad(BadArg* b, uint8_t arg, uint64_t value, uint64_t limit) {
  *b = BadArg{arg, value, limit};
  return false;
}
RG_INLINE int record(const Ctx& x, uint32_t peer, const BadArg& b) {
  return invalid(x.err, peer, b.arg, b.value, b.limit);
}

// A peer an operation may address: in range and connected.
template <class F>
RG_INLINE bool peer_ok(const Ctx& x, uint32_t peer, BadArg* b) {
  if (peer >= x.h->nranks) return bad(b, RUST_GIN_ARG_PEER, peer, x.h->nranks);
  if (!connected<F>(x, peer)) return bad(b, RUST_GIN_ARG_PEER_NOT_CONNECTED, peer, x.h->nranks);
  return true;
}
template <class F>
RG_INLINE int check_peer(const Ctx& x, uint32_t peer) {
  BadArg b;
  return peer_ok<F>(x, peer, &b) ? static_cast<int>(RUST_GIN_OK) : record(x, peer, b);
}

// A window and a byte range in it: registered, for this communicator, in bounds.
RG_INLINE bool window_ok(const Ctx& x, const void* w, uint64_t off, uint64_t bytes, BadArg* b) {
  const rust_gin_window* win = static_cast<const rust_gin_window*>(w);
  if (!win || win->magic != RUST_GIN_WINDOW_MAGIC || win->nranks != x.h->nranks) {
    return bad(b, RUST_GIN_ARG_WINDOW, reinterpret_cast<uint64_t>(w), 0);
  }
  // Registered on the context's rail too (a window of another comm, with
  // fewer rails, is not a window of this one).
  if (x.c->rail >= win->rails) return bad(b, RUST_GIN_ARG_WINDOW, reinterpret_cast<uint64_t>(w), 0);
  if (off > win->size || bytes > win->size - off) return bad(b, RUST_GIN_ARG_OFFSET, off + bytes, win->size);
  return true;
}

// A peer's registration of a window, as the context's rail (NIC) knows it:
// each rail's NIC hands out its own keys (docs/architecture.md, "Rails").
RG_INLINE const rust_gin_window_peer& remote(const Ctx& x, const void* w, uint32_t peer) {
  const rust_gin_window* win = static_cast<const rust_gin_window*>(w);
  return reinterpret_cast<const rust_gin_window_peer*>(win->peers)[x.c->rail * win->nranks + peer];
}

// The window's local key on the context's rail.
RG_INLINE uint32_t local_key(const Ctx& x, const rust_gin_window* win) {
  return reinterpret_cast<const uint32_t*>(win->lkeys)[x.c->rail];
}

// Whether `s` names a signal this context can deliver to `peer`.
RG_INLINE bool signal_ok(const Ctx& x, uint32_t peer, const rust_gin_signal& s, BadArg* b) {
  if (s.type == RUST_GIN_SIGNAL_INDEXED) {
    if (s.id >= x.c->n_signals) return bad(b, RUST_GIN_ARG_SIGNAL, s.id, x.c->n_signals);
  } else if (s.type == RUST_GIN_SIGNAL_VA) {
    // A VA signal needs an atomic into an arbitrary window word: a context
    // whose signals are slot writes has none to offer (getGinProperties then
    // says supportsVASignals = 0).
    if (write_mode(x.c)) return bad(b, RUST_GIN_ARG_VA_SIGNAL_WRITE_MODE, s.offset, 0);
    if (!window_ok(x, s.window, s.offset, 8, b)) return false;
    // The target's own address must be 8-byte aligned, not just the offset:
    // a misaligned atomic is a remote access error that kills the QP.
    const uint64_t raddr = remote(x, s.window, peer).base + s.offset;
    if (raddr % 8) return bad(b, RUST_GIN_ARG_SIGNAL, raddr, 8);
  } else {
    return bad(b, RUST_GIN_ARG_SIGNAL_OP, s.type, RUST_GIN_SIGNAL_VA);
  }
  if (s.op != RUST_GIN_SIGNAL_OP_INC && s.op != RUST_GIN_SIGNAL_OP_ADD) {
    return bad(b, RUST_GIN_ARG_SIGNAL_OP, s.op, RUST_GIN_SIGNAL_OP_ADD);
  }
  return true;
}

// The request that delivers a checked signal to `peer`: a fetch-and-add on
// the peer's signal word, or in write mode (gin/signal_slots.h) the WRITE of
// this rank's running total into its slot there, valued at publish. Cheap to
// build again from the descriptors: an operation builds it right before it
// posts it, not before its data, so that it does not hold registers meanwhile.
template <class F>
RG_INLINE Request signal_wqe(const Ctx& x, uint32_t peer, const rust_gin_signal& s) {
  const uint64_t addend = s.op == RUST_GIN_SIGNAL_OP_INC ? 1 : s.value;
  if (write_mode(x.c)) {
    // check_signal let only indexed signals through. The peer's slot row is
    // where its descriptor's signal address points, on RC or DC (the DC
    // peer layout differs: read through signal_table, never peer_of).
    const uint64_t total = x.c->signal_totals + 8 * (uint64_t{peer} * x.c->n_signals + s.id);
    return slot_request(signal_table<F>(x, peer) + 8 * s.id, signal_table_rkey<F>(x, peer), total, addend);
  }
  Request r = {};
  r.opcode = queue::OP_ATOMIC_FA;
  r.length = 8;
  if (s.type == RUST_GIN_SIGNAL_INDEXED) {
    r.raddr = signal_table<F>(x, peer) + 8 * s.id;
    r.rkey = signal_table_rkey<F>(x, peer);
  } else {
    r.raddr = remote(x, s.window, peer).base + s.offset;
    r.rkey = remote(x, s.window, peer).rkey;
  }
  r.laddr = x.c->sink;  // the old value nobody reads
  r.lkey = x.c->sink_lkey;
  r.operand0 = addend;
  return r;
}

template <typename T>
RG_INLINE T* word(uint64_t base, uint32_t i) {
  return reinterpret_cast<T*>(base) + i;
}

// Posts r for one lane when `has` holds (the lanes without take part; see
// post_lane), honouring the aggregation flag; `more` says that the lane
// posts another request right after this one, which rings for both. With a
// counter tag (1 + a counter id) the request asks for a CQE and the counter
// advances once it completed, credited by whoever polls the queue (cq.h); no
// lane waits for it here: counter reads and waits poll the queues with
// counted puts (progress_counters).
//
// kExclusive: the wave owns the queue (rust_gin_put_exclusive; RCCL's THREAD
// sharing) and posts with no ticket or turn (post_lane). A DCI serves
// several peers, which that mode may give to other threads (DeepEP: one
// thread per context and peer): on DC it is refused (kNotOwned) rather than
// carrying the shared instance along (its registers are over the budget).
template <class F, bool kExclusive = false>
RG_INLINE int post(const Ctx& x, uint32_t peer, Request r, uint32_t flags, uint32_t counter_tag = 0, bool has = true,
                   bool more = false) {
  uint64_t last = 0;
  if (counter_tag) r.flags |= queue::REQ_SIGNALED;
  const bool ring = !(flags & RUST_GIN_FLAG_AGGREGATE) && !more;
  r.dc_target = peer;  // the DCI's WQE addresses this peer's DCT (RC: unused)
  const auto q = queue_of<F>(x, peer);
  int s;
  if constexpr (kExclusive) {
    // Refused as kNotOwned, which the entry point records (one site).
    s = dc<F>(x) ? queue::kNotOwned : post_lane<F, true>(q, r, has, ring, &last, counter_tag);
  } else {
    s = post_lane<F, false>(q, r, has, ring, &last, counter_tag);
  }
  // After the post, which raised the queue's counted_end: a counter wait
  // that clears the bit looks at counted_end again (progress_counters).
  if (!s && has && counter_tag) {
    atomic_fetch_or(word<uint64_t>(x.c->counted_peers, peer / 64), uint64_t{1} << (peer % 64), __ATOMIC_RELAXED,
                    Scope::agent);
  }
  return s;
}

// Credits the counters of completed counted puts: rings and polls every
// queue of the context that holds counted puts, and forgets the queues with
// none left. QP_FAILED when such a queue failed: a counted put on it may
// never count, so no counter wait of the context can be trusted to end.
template <class F>
RG_INLINE int progress_counters(const Ctx& x) {
  const uint32_t words = (x.h->nranks + 63) / 64;
  int status = RUST_GIN_OK;
  for (uint32_t w = 0; w < words; ++w) {
    uint64_t* bits = word<uint64_t>(x.c->counted_peers, w);
    uint64_t m = atomic_load(bits, __ATOMIC_RELAXED, Scope::agent);
    while (m) {
      const uint32_t b = __builtin_ctzll(m);
      m &= m - 1;
      FamilyQueue<F> sq(queue_of<F>(x, w * 64 + b));
      if (sq.unrung()) sq.ring();
      sq.poll();
      sq.credit_counters();
      if (sq.failed()) {
        // Its counted puts from the failure on never count: the bit stays,
        // so every later wait learns it too.
        status = RUST_GIN_ERR_QP_FAILED;
      } else if (!sq.counted_pending()) {
        atomic_fetch_and(bits, ~(uint64_t{1} << b), __ATOMIC_RELAXED, Scope::agent);
        // A put counted meanwhile raised counted_end before setting the bit.
        if (sq.counted_pending()) atomic_fetch_or(bits, uint64_t{1} << b, __ATOMIC_RELAXED, Scope::agent);
      }
    }
  }
  return status;
}

// Rolling comparison as RCCL's waits use it: `v` has reached `least`.
RG_INLINE bool reached(uint64_t v, uint64_t least) { return static_cast<int64_t>(v - least) >= 0; }

// With a family F, each turn polls the context's queues whose completions
// advance counters (progress_counters) and fails when one of them failed: a
// counter wait. NoFamily: no queue is polled (a signal wait). With `fold` (a
// write-mode signal), each turn folds the signal's slots into the word first
// (gin/signal_slots.h).
template <class F>
RG_INLINE int wait_word(const Ctx& x, const uint64_t* w, const uint64_t* offset, uint64_t least, uint8_t what,
                        uint32_t id, const uint32_t* abort_flag, uint64_t timeout_cycles, bool fold = false) {
  constexpr bool counter = !IsNoFamily<F>::value;
  // Descriptor fields through load_invariant: in a reader of NIC-written
  // memory every other load is scoped (tests/isa_path.rs, NIC-written loads).
  Bound bound(load_invariant(&x.h->timeout_ns), abort_flag, timeout_cycles);
  const uint32_t nranks = load_invariant(&x.h->nranks);
  return wave::spin([&] {
#if defined(RUST_GIN_ISA_FAULT_PLAIN_SIGNAL_LOAD)
    // Planted fault for the NIC-written-load rule (tests/isa_path.rs).
    const uint64_t raw = fold ? fold_signal(x.c, nranks, id) : *w;
#else
    const uint64_t raw = fold ? fold_signal(x.c, nranks, id) : atomic_load(w, __ATOMIC_ACQUIRE, Scope::system);
#endif
    const uint64_t v = raw - (offset ? atomic_load(offset, __ATOMIC_RELAXED, Scope::agent) : 0);
    if (reached(v, least)) return static_cast<int>(RUST_GIN_OK);
    if constexpr (counter) {
      if (progress_counters<F>(x)) return static_cast<int>(RUST_GIN_ERR_QP_FAILED);
    }
    const int b = bound.check();
    if (b == RUST_GIN_ERR_ABORTED) return b;
    if (b) {
      ErrorInfo e = {};
      e.code = RUST_GIN_ERR_TIMEOUT;
      e.peer = load_invariant(&x.h->rank);
      e.wqe_index = id;
      e.wait_kind = what;
      e.expected = least;
      e.observed = v;
      record_error(x.err, e);
      return b;
    }
    return wave::kSpinAgain;
  }, counter || fold ? nullptr : w);  // a counter wait also needs other queues' CQEs; NICs write slots, not w
}

}  // namespace gin
}  // namespace rust_gin
