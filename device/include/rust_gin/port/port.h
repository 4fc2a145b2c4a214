// Portability layer: the one place where the device library differs between
// its GPU build (clang HIP mode, amdgcn) and its x86-64 host build (cc, for
// tests and the emulated NIC). Everything above this header is shared code.
//
// GPU build: compiled with -nogpuinc -nogpulib, so only clang builtins are
// used; no HIP headers and no ROCm device libraries are needed.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "rust_gin/abi/host_doorbell.h"

#if defined(__HIP__)
#define RG_GPU 1
#else
#define RG_GPU 0
#endif

#if RG_GPU
#define RG_DEV __attribute__((device))
#define RG_GLOBAL __attribute__((global))
#else
#define RG_DEV
#define RG_GLOBAL
#endif

// Everything internal is forced inline, as DOCA GPUNetIO and rocSHMEM do:
// a call costs registers and spills on the GPU, and the ISA checks want the
// whole ring sequence in the entry point's own instruction stream. Moving
// rare paths (error recording) out of line was measured and made kernels
// larger (call ABI registers, callee-saved VGPRs), so nothing uses
// RG_NOINLINE today; `inline` there is for the linkage of header code.
#define RG_INLINE RG_DEV __attribute__((always_inline)) inline
#define RG_NOINLINE RG_DEV __attribute__((noinline)) inline

#define RG_LIKELY(x) __builtin_expect(!!(x), 1)
#define RG_UNLIKELY(x) __builtin_expect(!!(x), 0)

#ifdef __cplusplus
#define RG_EXTERN_C extern "C"
#else
#define RG_EXTERN_C
#endif

#if !RG_GPU
#include <sched.h>
#include <time.h>
// Host-build hooks, implemented by the Rust crate (host/emu/bus.rs).
RG_EXTERN_C uint64_t rust_gin_host_clock_ns(void);
// A doorbell for a queue whose descriptor names no host doorbell: counted
// and reported by the host crate, never stored (nothing owns the address).
RG_EXTERN_C void rust_gin_host_doorbell_unowned(volatile uint64_t* reg, uint64_t value);
// Parking (host/park.rs), for wave::spin: begin registers the calling thread
// as parked on `key` (an address the NIC writes; NULL: any NIC write) and
// returns a token; the caller checks its condition once more, then end
// sleeps until the NIC wakes it or `timeout_ns` passes (0: no sleep) and
// unregisters. A token of 0 means no registration.
RG_EXTERN_C uint32_t rust_gin_host_park_begin(const volatile void* key);
RG_EXTERN_C void rust_gin_host_park_end(uint32_t token, uint64_t timeout_ns);
#endif

namespace rust_gin {

// Memory scopes, as the HIP atomics spell them.
enum class Scope : int {
#if RG_GPU
  wave = __HIP_MEMORY_SCOPE_WAVEFRONT,
  block = __HIP_MEMORY_SCOPE_WORKGROUP,
  agent = __HIP_MEMORY_SCOPE_AGENT,
  system = __HIP_MEMORY_SCOPE_SYSTEM,
#else
  wave = 0,
  block = 1,
  agent = 2,
  system = 3,
#endif
};

#if RG_GPU
#define RG_SCOPE_ARG(s) static_cast<int>(s)
// s_waitcnt vmcnt(0) on gfx9 (expcnt and lgkmcnt left at their maximum).
#define RG_WAITCNT_VMCNT0 0x0F70

// Every release at agent or system scope is spelt out: the release fence
// (gfx90a: `buffer_wbl2` for system scope, nothing for agent scope;
// gfx942/950: `buffer_wbl2 sc0 sc1` for system scope, `buffer_wbl2 sc1` for
// agent scope), then an explicit `s_waitcnt vmcnt(0)`, then the atomic itself
// without its release part. The explicit wait is not redundant: clang 22 for
// gfx942 drops the fence's own wait after the write-back when no load is
// outstanding (LLVM PR 178316; the ISA checks caught it in the post path),
// which would let the next store overtake the write-back. When nothing is in
// flight it costs nothing. The ISA checks hold every kernel to "a write-back
// is followed by vmcnt(0) before the next vector-memory access".
RG_INLINE void fence_release(Scope s) {
  if (s == Scope::system) {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "");
  } else if (s == Scope::agent) {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "agent");
  } else if (s == Scope::block) {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    return;
  } else {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
    return;
  }
  __builtin_amdgcn_s_waitcnt(RG_WAITCNT_VMCNT0);
}

// The order an atomic keeps once release_first() has issued its release
// part as a fence: release becomes relaxed, acq_rel becomes acquire.
// Wave- and workgroup-scope orders stay as they are (no write-back there).
RG_INLINE int release_first(int order, Scope s) {
  if (s != Scope::agent && s != Scope::system) return order;
  if (order == __ATOMIC_RELEASE) {
    fence_release(s);
    return __ATOMIC_RELAXED;
  }
  if (order == __ATOMIC_ACQ_REL) {
    fence_release(s);
    return __ATOMIC_ACQUIRE;
  }
  return order;  // relaxed, consume, acquire; seq_cst is not used
}

template <typename T>
RG_INLINE T atomic_load(const T* p, int order, Scope s) {
  return __hip_atomic_load(const_cast<T*>(p), order, RG_SCOPE_ARG(s));
}
template <typename T>
RG_INLINE void atomic_store(T* p, T v, int order, Scope s) {
  order = release_first(order, s);
  __hip_atomic_store(p, v, order, RG_SCOPE_ARG(s));
}
template <typename T>
RG_INLINE T atomic_fetch_add(T* p, T v, int order, Scope s) {
  order = release_first(order, s);
  return __hip_atomic_fetch_add(p, v, order, RG_SCOPE_ARG(s));
}
template <typename T>
RG_INLINE T atomic_fetch_max(T* p, T v, int order, Scope s) {
  order = release_first(order, s);
  return __hip_atomic_fetch_max(p, v, order, RG_SCOPE_ARG(s));
}
template <typename T>
RG_INLINE T atomic_exchange(T* p, T v, int order, Scope s) {
  order = release_first(order, s);
  return __hip_atomic_exchange(p, v, order, RG_SCOPE_ARG(s));
}
template <typename T>
RG_INLINE T atomic_fetch_or(T* p, T v, int order, Scope s) {
  order = release_first(order, s);
  return __hip_atomic_fetch_or(p, v, order, RG_SCOPE_ARG(s));
}
template <typename T>
RG_INLINE T atomic_fetch_and(T* p, T v, int order, Scope s) {
  order = release_first(order, s);
  return __hip_atomic_fetch_and(p, v, order, RG_SCOPE_ARG(s));
}
template <typename T>
RG_INLINE bool atomic_cas(T* p, T* expected, T desired, int order, Scope s) {
  order = release_first(order, s);
  return __hip_atomic_compare_exchange_strong(p, expected, desired, order,
                                              __ATOMIC_RELAXED, RG_SCOPE_ARG(s));
}
// System-scope release: on gfx90a `buffer_wbl2`, on gfx942/950
// `buffer_wbl2 sc0 sc1`, then `s_waitcnt vmcnt(0)`; the ISA checks hold us
// to that (see fence_release for why the wait is explicit).
RG_INLINE void fence_release_system() { fence_release(Scope::system); }
RG_INLINE void fence_acquire_system() { __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, ""); }
RG_INLINE void fence_acq_rel_agent() {
  fence_release(Scope::agent);
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "agent");
}
RG_INLINE void backoff(uint32_t) { __builtin_amdgcn_s_sleep(1); }
// s_memrealtime runs at a constant 100 MHz on gfx90a/gfx942/gfx950.
RG_INLINE uint64_t clock_ns() { return __builtin_amdgcn_s_memrealtime() * 10ull; }
#else
template <typename T>
RG_INLINE T atomic_load(const T* p, int order, Scope) {
  return __atomic_load_n(p, order);
}
template <typename T>
RG_INLINE void atomic_store(T* p, T v, int order, Scope) {
  __atomic_store_n(p, v, order);
}
template <typename T>
RG_INLINE T atomic_fetch_add(T* p, T v, int order, Scope) {
  return __atomic_fetch_add(p, v, order);
}
template <typename T>
RG_INLINE T atomic_fetch_max(T* p, T v, int order, Scope) {
  T cur = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (cur < v && !__atomic_compare_exchange_n(p, &cur, v, false, order, __ATOMIC_RELAXED)) {
  }
  return cur;
}
template <typename T>
RG_INLINE T atomic_exchange(T* p, T v, int order, Scope) {
  return __atomic_exchange_n(p, v, order);
}
template <typename T>
RG_INLINE T atomic_fetch_or(T* p, T v, int order, Scope) {
  return __atomic_fetch_or(p, v, order);
}
template <typename T>
RG_INLINE T atomic_fetch_and(T* p, T v, int order, Scope) {
  return __atomic_fetch_and(p, v, order);
}
template <typename T>
RG_INLINE bool atomic_cas(T* p, T* expected, T desired, int order, Scope) {
  return __atomic_compare_exchange_n(p, expected, desired, false, order, __ATOMIC_RELAXED);
}
RG_INLINE void fence_release_system() { __atomic_thread_fence(__ATOMIC_RELEASE); }
RG_INLINE void fence_acquire_system() { __atomic_thread_fence(__ATOMIC_ACQUIRE); }
RG_INLINE void fence_acq_rel_agent() { __atomic_thread_fence(__ATOMIC_ACQ_REL); }
// The host build stands threads in for lanes; with NIC-emulating threads on
// the same few cores, a waiter must give them the CPU. backoff() is the brief
// spin: a yield per turn. A wait that outlasts it parks (wave::spin) until
// the NIC writes what it waits on, so long waits neither storm the cores
// with yields nor oversleep.
RG_INLINE void backoff(uint32_t) { sched_yield(); }
RG_INLINE uint64_t clock_ns() { return rust_gin_host_clock_ns(); }
#endif

}  // namespace rust_gin

namespace rust_gin {

// Stores that cross the bus to the NIC. On the GPU they are plain system-scope
// stores; in the host build they go through the host doorbell of the queue's
// provider (abi/host_doorbell.h): real MMIO for mlx5, the emulated NIC for
// emu. `host` is that rust_gin_host_doorbell* (ignored on the GPU).

// The doorbell: exactly one 64-bit store to the UAR register. The ISA checks
// assert that it stays one store on every architecture.
RG_INLINE void mmio_store64(volatile uint64_t* reg, uint64_t value, uint64_t host) {
#if RG_GPU
#if defined(RUST_GIN_ISA_FAULT_SPLIT_DOORBELL)
  // Planted fault for the ISA checks' own test: a torn doorbell.
  volatile uint32_t* half = reinterpret_cast<volatile uint32_t*>(reg);
  __hip_atomic_store(const_cast<uint32_t*>(half), static_cast<uint32_t>(value), __ATOMIC_RELAXED,
                     __HIP_MEMORY_SCOPE_SYSTEM);
  __hip_atomic_store(const_cast<uint32_t*>(half + 1), static_cast<uint32_t>(value >> 32),
                     __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  __hip_atomic_store(const_cast<uint64_t*>(reg), value, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
#endif
  (void)host;
#else
  const rust_gin_host_doorbell* p = reinterpret_cast<const rust_gin_host_doorbell*>(host);
  if (p && p->ring) {
    p->ring(p->ctx, reg, value);
  } else {
    rust_gin_host_doorbell_unowned(reg, value);
  }
#endif
}

// A doorbell record: a 32-bit word in NIC-read memory (host-pinned or VRAM).
RG_INLINE void dbr_store32(volatile uint32_t* dbr, uint32_t value, uint64_t host) {
#if RG_GPU
  (void)host;
  __hip_atomic_store(const_cast<uint32_t*>(dbr), value, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  __atomic_store_n(const_cast<uint32_t*>(dbr), value, __ATOMIC_RELEASE);
  const rust_gin_host_doorbell* p = reinterpret_cast<const rust_gin_host_doorbell*>(host);
  if (p && p->record) p->record(p->ctx, dbr, value);
#endif
}

// The identity, for a 64-bit value that is the same on every active lane
// (a readlane's result, or a value compared equal to one). On the GPU it is
// read from the first active lane, which keeps it in scalar registers: where
// a branch is guarded by `divergent == uniform`, GVN substitutes the
// divergent value for the uniform one inside it, and a descriptor that
// should be read with scalar loads through a scalar pointer is read with
// vector loads through a vector one (more VGPRs). Not a wave primitive in
// the lockstep sense: no lane waits for another, since all hold the value.
RG_INLINE uint64_t assume_uniform(uint64_t v) {
#if RG_GPU
  const uint32_t lo = __builtin_amdgcn_readfirstlane(static_cast<uint32_t>(v));
  const uint32_t hi = __builtin_amdgcn_readfirstlane(static_cast<uint32_t>(v >> 32));
  return (static_cast<uint64_t>(hi) << 32) | lo;
#else
  return v;
#endif
}

// Reads a field of read-only memory (a queue descriptor, set up before any
// kernel runs). On the GPU through the constant address space: through a
// wave-uniform pointer that is a scalar load into scalar registers, and the
// compiler may reload it instead of keeping it live in vector registers.
template <typename T>
RG_INLINE T load_invariant(const T* p) {
#if RG_GPU
  return *(const __attribute__((address_space(4))) T*)p;
#else
  return *p;
#endif
}

RG_INLINE uint32_t bswap32(uint32_t v) { return __builtin_bswap32(v); }
RG_INLINE uint64_t bswap64(uint64_t v) { return __builtin_bswap64(v); }
RG_INLINE uint16_t bswap16(uint16_t v) { return __builtin_bswap16(v); }

}  // namespace rust_gin
