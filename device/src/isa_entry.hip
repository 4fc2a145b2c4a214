// Kernels that wrap each device entry point, so the code object carries every
// entry point's instruction stream and register counts for the ISA checks
// (tests/isa_checks.rs). Naming: rust_gin_isa_db_<entry> for entry points
// that may ring a doorbell, rust_gin_isa_nodb_<entry> for the others. The
// checks fail if an entry point declared in the API headers has no kernel here.
#include "rust_gin_device.hip"

#if defined(RUST_GIN_ISA_FAULT_SCRATCH)
// Planted fault for the ISA checks' own test: a dynamically indexed local
// array cannot live in registers and goes to scratch.
RG_EXTERN_C RG_GLOBAL void rust_gin_isa_nodb_scratch_fault(uint64_t* out, uint32_t i, uint32_t j) {
  volatile uint64_t tmp[64];
  for (uint32_t k = 0; k < 64; ++k) tmp[k] = out[k];
  tmp[i & 63] = 1;
  out[0] = tmp[j & 63];
}
#endif

#if defined(RUST_GIN_ISA_FAULT_DROPPED_WAIT)
// Planted fault for the ISA checks' own test: a system-scope write-back whose
// s_waitcnt vmcnt(0) was dropped (as clang 22 does on gfx942, LLVM PR
// 178316), with the next store right behind it. Written in assembly so that
// it comes out the same on every architecture and compiler version.
RG_EXTERN_C RG_GLOBAL void rust_gin_isa_nodb_dropped_wait_fault(uint32_t* out, uint32_t v) {
#if defined(__gfx90a__)
  asm volatile("buffer_wbl2" ::: "memory");
#else
  asm volatile("buffer_wbl2 sc0 sc1" ::: "memory");
#endif
  __hip_atomic_store(out, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
#endif

#define RG_ISA_KERNEL(kind, entry, params, args) \
  RG_EXTERN_C RG_GLOBAL void rust_gin_isa_##kind##_##entry params { entry args; }

RG_ISA_KERNEL(db, rust_gin_mlx5_post, (const rust_gin_mlx5_sq* sq, const rust_gin_mlx5_request* r, uint32_t n),
              (sq, r, n))
// db: a deferred post that must wait for credit rings what is published
// first (SendQueue::wait_credit), so it may ring a doorbell too.
RG_ISA_KERNEL(db, rust_gin_mlx5_post_deferred,
              (const rust_gin_mlx5_sq* sq, const rust_gin_mlx5_request* r, uint32_t n), (sq, r, n))
RG_ISA_KERNEL(db, rust_gin_mlx5_ring, (const rust_gin_mlx5_sq* sq), (sq))
RG_ISA_KERNEL(db, rust_gin_mlx5_quiet, (const rust_gin_mlx5_sq* sq), (sq))
RG_ISA_KERNEL(nodb, rust_gin_mlx5_poll, (const rust_gin_mlx5_sq* sq), (sq))
RG_ISA_KERNEL(nodb, rust_gin_mlx5_build_wqe,
              (const rust_gin_mlx5_request* r, uint16_t i, uint32_t q, int c, void* o), (r, i, q, c, o))
// The other NIC families (queue/api.h): the same protocol over their
// policies. db: their polls ring the CQ doorbell (a 64-bit store behind a
// release, as every doorbell).
RG_ISA_KERNEL(db, rust_gin_bnxt_post, (const rust_gin_nic_sq* sq, const rust_gin_mlx5_request* r, uint32_t n),
              (sq, r, n))
RG_ISA_KERNEL(db, rust_gin_bnxt_post_deferred,
              (const rust_gin_nic_sq* sq, const rust_gin_mlx5_request* r, uint32_t n), (sq, r, n))
RG_ISA_KERNEL(db, rust_gin_bnxt_ring, (const rust_gin_nic_sq* sq), (sq))
RG_ISA_KERNEL(db, rust_gin_bnxt_poll, (const rust_gin_nic_sq* sq), (sq))
RG_ISA_KERNEL(db, rust_gin_ionic_post, (const rust_gin_nic_sq* sq, const rust_gin_mlx5_request* r, uint32_t n),
              (sq, r, n))
RG_ISA_KERNEL(db, rust_gin_ionic_post_deferred,
              (const rust_gin_nic_sq* sq, const rust_gin_mlx5_request* r, uint32_t n), (sq, r, n))
RG_ISA_KERNEL(db, rust_gin_ionic_ring, (const rust_gin_nic_sq* sq), (sq))
RG_ISA_KERNEL(db, rust_gin_ionic_poll, (const rust_gin_nic_sq* sq), (sq))

// GIN operations. Out-parameters stay in registers (consumed by an empty asm
// statement), as they do once RCCL's inline wrappers call these functions.
#define RG_SINK(v) asm volatile("" ::"v"(v))
RG_ISA_KERNEL(db, rust_gin_put,
              (const void* h, uint32_t c, uint32_t p, const void* dw, uint64_t doff, const void* sw, uint64_t soff,
               uint64_t n, rust_gin_signal sig, uint32_t hc, uint32_t cid, uint32_t f),
              (h, c, p, dw, doff, sw, soff, n, sig, hc, cid, f))
// The put as RCCL's kernels compile it: the flags are constants there
// (patch 0004's postFlags of compile-time options), and the sharing mode
// picks the entry. The instruction-path counter (tests/support/isa_path.rs)
// reads the put here.
RG_EXTERN_C RG_GLOBAL void rust_gin_isa_db_rccl_put_shared(const void* h, uint32_t c, uint32_t p, const void* dw,
                                                           uint64_t doff, const void* sw, uint64_t soff, uint64_t n,
                                                           rust_gin_signal sig, uint32_t hc, uint32_t cid) {
  rust_gin_put(h, c, p, dw, doff, sw, soff, n, sig, hc, cid, 0);
}
RG_EXTERN_C RG_GLOBAL void rust_gin_isa_db_rccl_put_exclusive(const void* h, uint32_t c, uint32_t p, const void* dw,
                                                              uint64_t doff, const void* sw, uint64_t soff,
                                                              uint64_t n, rust_gin_signal sig, uint32_t hc,
                                                              uint32_t cid) {
  rust_gin_put_exclusive(h, c, p, dw, doff, sw, soff, n, sig, hc, cid, 0);
}
RG_ISA_KERNEL(db, rust_gin_put_exclusive,
              (const void* h, uint32_t c, uint32_t p, const void* dw, uint64_t doff, const void* sw, uint64_t soff,
               uint64_t n, rust_gin_signal sig, uint32_t hc, uint32_t cid, uint32_t f),
              (h, c, p, dw, doff, sw, soff, n, sig, hc, cid, f))
RG_ISA_KERNEL(db, rust_gin_put_value_exclusive,
              (const void* h, uint32_t c, uint32_t p, const void* dw, uint64_t doff, uint64_t v, uint32_t sz,
               rust_gin_signal sig, uint32_t f),
              (h, c, p, dw, doff, v, sz, sig, f))
RG_ISA_KERNEL(db, rust_gin_signal_peer_exclusive,
              (const void* h, uint32_t c, uint32_t p, rust_gin_signal sig, uint32_t f), (h, c, p, sig, f))
RG_ISA_KERNEL(db, rust_gin_get_exclusive,
              (const void* h, uint32_t c, uint32_t p, const void* rw, uint64_t roff, const void* lw, uint64_t loff,
               uint64_t n, uint32_t f),
              (h, c, p, rw, roff, lw, loff, n, f))
RG_ISA_KERNEL(db, rust_gin_put_value,
              (const void* h, uint32_t c, uint32_t p, const void* dw, uint64_t doff, uint64_t v, uint32_t sz,
               rust_gin_signal sig, uint32_t f),
              (h, c, p, dw, doff, v, sz, sig, f))
RG_ISA_KERNEL(db, rust_gin_signal_peer, (const void* h, uint32_t c, uint32_t p, rust_gin_signal sig, uint32_t f),
              (h, c, p, sig, f))
RG_ISA_KERNEL(db, rust_gin_get,
              (const void* h, uint32_t c, uint32_t p, const void* rw, uint64_t roff, const void* lw, uint64_t loff,
               uint64_t n, uint32_t f),
              (h, c, p, rw, roff, lw, loff, n, f))
RG_ISA_KERNEL(db, rust_gin_flush, (const void* h, uint32_t c, uint32_t r, uint32_t s, const uint32_t* a, uint64_t t),
              (h, c, r, s, a, t))
RG_EXTERN_C RG_GLOBAL void rust_gin_isa_db_rust_gin_flush_async(const void* h, uint32_t c, uint32_t p) {
  rust_gin_request r;
  rust_gin_flush_async(h, c, p, &r);
  RG_SINK(r.target);
  RG_SINK(r.peer);
}
RG_ISA_KERNEL(nodb, rust_gin_wait, (const void* h, rust_gin_request r, const uint32_t* a, uint64_t t), (h, r, a, t))
RG_EXTERN_C RG_GLOBAL void rust_gin_isa_nodb_rust_gin_signal_ptr(const void* h, uint32_t c, uint32_t id) {
  uint64_t off;
  uint64_t* p = rust_gin_signal_ptr(h, c, id, &off);
  RG_SINK(off);
  RG_SINK(p);
}
RG_EXTERN_C RG_GLOBAL void rust_gin_isa_nodb_rust_gin_signal_read(const void* h, uint32_t c, uint32_t id) {
  RG_SINK(rust_gin_signal_read(h, c, id));
}
RG_ISA_KERNEL(nodb, rust_gin_signal_wait,
              (const void* h, uint32_t c, uint32_t id, uint64_t least, const uint32_t* a, uint64_t t),
              (h, c, id, least, a, t))
RG_ISA_KERNEL(nodb, rust_gin_signal_reset, (const void* h, uint32_t c, uint32_t id), (h, c, id))
RG_ISA_KERNEL(nodb, rust_gin_va_signal_reset, (const void* w, uint64_t off), (w, off))
// Counter pointers, reads and waits, and the progress hook ring: they drive
// queues holding counted puts.
RG_EXTERN_C RG_GLOBAL void rust_gin_isa_db_rust_gin_counter_ptr(const void* h, uint32_t c, uint32_t id) {
  RG_SINK(rust_gin_counter_ptr(h, c, id));
}
RG_ISA_KERNEL(db, rust_gin_progress, (const void* h, uint32_t c, uint32_t w, uint32_t id), (h, c, w, id))
RG_EXTERN_C RG_GLOBAL void rust_gin_isa_db_rust_gin_counter_read(const void* h, uint32_t c, uint32_t id) {
  RG_SINK(rust_gin_counter_read(h, c, id));
}
RG_ISA_KERNEL(db, rust_gin_counter_wait,
              (const void* h, uint32_t c, uint32_t id, uint64_t least, const uint32_t* a, uint64_t t),
              (h, c, id, least, a, t))
RG_ISA_KERNEL(nodb, rust_gin_counter_reset, (const void* h, uint32_t c, uint32_t id), (h, c, id))
RG_EXTERN_C RG_GLOBAL void rust_gin_isa_nodb_rust_gin_supports_strong_signal(const void* h) {
  RG_SINK(rust_gin_supports_strong_signal(h));
}
