// The wave: lane id, ballot, readlane, wave barrier, divergent regions and
// spin loops. The one place where the device library meets AMD's execution
// model; every wave-level step and every wait loop goes through here.
//
//   GPU            the amdgcn builtins; Region and the site arguments vanish.
//   host, lockstep the calling code runs as a lane of a lockstep wave
//                  (device/src/host_only/lockstep.cpp): 64 lanes that meet
//                  at every primitive below, with the exec mask, divergence
//                  and reconvergence of a real wave (docs/architecture.md).
//   host, plain    any other host thread is a wave of one lane (lane 0).
//
// So the code above this header has no `#if RG_GPU` of its own: the path a
// kernel takes is the path every host test takes.
#pragma once

#include <limits.h>

#include "rust_gin/port/port.h"

#if !RG_GPU
// Hooks of the lockstep runtime (device/src/host_only/lockstep.cpp). Each
// `file`/`line` pair names the call site, which is how the runtime tells
// one sync point from another.
RG_EXTERN_C int rust_gin_ls_lane(void);  // the lane, or -1 outside a lockstep wave
// How many lockstep waves are running in the process, on any thread
// (lockstep.cpp counts them). While it is 0 no thread can be a lane: the wave
// primitives below then cost a load, not a call per primitive.
RG_EXTERN_C __attribute__((visibility("hidden"))) uint32_t rust_gin_ls_waves_running;
RG_EXTERN_C uint64_t rust_gin_ls_ballot(int p, const char* file, int line);
RG_EXTERN_C uint64_t rust_gin_ls_readlane(uint64_t v, uint32_t lane, const char* file, int line);
RG_EXTERN_C void rust_gin_ls_barrier(const char* file, int line);
RG_EXTERN_C int rust_gin_ls_region_begin(int cond, const char* file, int line);
RG_EXTERN_C void rust_gin_ls_region_end(const char* file, int line);
RG_EXTERN_C void rust_gin_ls_spin_enter(const char* file, int line);
// Returns 1 when the whole loop is over (every lane has left it).
RG_EXTERN_C int rust_gin_ls_spin_report(int left, const char* file, int line);
#endif

#define RG_SITE_PARAMS const char *rg_file = __builtin_FILE(), int rg_line = __builtin_LINE()
#define RG_SITE rg_file, rg_line

namespace rust_gin {
namespace wave {

constexpr uint32_t kWaveSize = 64;

#if RG_GPU
RG_INLINE uint32_t lane_id() { return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)); }
RG_INLINE uint64_t ballot(bool p, RG_SITE_PARAMS) {
  (void)rg_file, (void)rg_line;
  return __builtin_amdgcn_ballot_w64(p);
}
RG_INLINE uint32_t readlane32(uint32_t v, uint32_t lane, RG_SITE_PARAMS) {
  (void)rg_file, (void)rg_line;
  return __builtin_amdgcn_readlane(v, lane);
}
RG_INLINE uint64_t readlane64(uint64_t v, uint32_t lane, RG_SITE_PARAMS) {
  (void)rg_file, (void)rg_line;
  const uint32_t lo = __builtin_amdgcn_readlane(static_cast<uint32_t>(v), lane);
  const uint32_t hi = __builtin_amdgcn_readlane(static_cast<uint32_t>(v >> 32), lane);
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
// Every lane's earlier stores are ordered before what any lane does next.
RG_INLINE void barrier(RG_SITE_PARAMS) {
  (void)rg_file, (void)rg_line;
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
}
#else
// The calling thread's lane in a lockstep wave, or -1 (a plain thread).
RG_INLINE int lockstep_lane() {
  if (RG_LIKELY(__atomic_load_n(&rust_gin_ls_waves_running, __ATOMIC_RELAXED) == 0)) return -1;
  return rust_gin_ls_lane();
}
RG_INLINE uint32_t lane_id() {
  const int l = lockstep_lane();
  return l < 0 ? 0u : static_cast<uint32_t>(l);
}
RG_INLINE uint64_t ballot(bool p, RG_SITE_PARAMS) {
  if (lockstep_lane() < 0) return p ? 1u : 0u;
  return rust_gin_ls_ballot(p, RG_SITE);
}
RG_INLINE uint64_t readlane64(uint64_t v, uint32_t lane, RG_SITE_PARAMS) {
  if (lockstep_lane() < 0) return v;  // a one-lane wave: lane is 0
  return rust_gin_ls_readlane(v, lane, RG_SITE);
}
RG_INLINE uint32_t readlane32(uint32_t v, uint32_t lane, RG_SITE_PARAMS) {
  return static_cast<uint32_t>(readlane64(v, lane, RG_SITE));
}
RG_INLINE void barrier(RG_SITE_PARAMS) {
  __atomic_thread_fence(__ATOMIC_RELEASE);
  if (lockstep_lane() >= 0) rust_gin_ls_barrier(RG_SITE);
}
#endif

RG_INLINE bool any(bool p, RG_SITE_PARAMS) { return ballot(p, RG_SITE) != 0; }
RG_INLINE int32_t readlane_int(int32_t v, uint32_t lane, RG_SITE_PARAMS) {
  return static_cast<int32_t>(readlane32(static_cast<uint32_t>(v), lane, RG_SITE));
}

// A divergent region: the lanes for which `cond` holds run the body, the
// others wait at its end, and all leave together (the reconvergence point of
// an `if` on hardware). Needed around any code with wave primitives or spin
// loops that only some lanes run, and at the top of every entry point (an
// early return reconverges at the function's end).
//   { wave::Region r(me == leader); if (r) { ... } }
class Region {
 public:
#if RG_GPU
  RG_INLINE explicit Region(bool cond, RG_SITE_PARAMS) : in_(cond) { (void)rg_file, (void)rg_line; }
  RG_INLINE ~Region() {}
#else
  RG_INLINE explicit Region(bool cond, RG_SITE_PARAMS)
      : in_(cond), lockstep_(lockstep_lane() >= 0), file_(rg_file), line_(rg_line) {
    if (lockstep_) in_ = rust_gin_ls_region_begin(cond, RG_SITE) != 0;
  }
  RG_INLINE ~Region() {
    if (lockstep_) rust_gin_ls_region_end(file_, line_);
  }
#endif
  RG_INLINE explicit operator bool() const { return in_; }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

 private:
  bool in_;
#if !RG_GPU
  bool lockstep_;
  const char* file_;
  int line_;
#endif
};

// The first statement of every entry point: lanes that return early wait at
// the function's end for the others, as they reconverge there on hardware.
#define RG_WAVE_ENTRY() ::rust_gin::wave::Region rg_wave_entry_(true)

// What a spin step returns to ask for another iteration; anything else ends
// the loop and is its result. (RUST_GIN_* codes are small and non-negative.)
constexpr int kSpinAgain = INT_MIN;

#if !RG_GPU
// A plain host thread's wait: kSpinTurns yields (backoff), then it parks on
// `key` (port.h, host/park.rs) and the NIC wakes it when it writes there; a
// park lasts at most kParkMinNs, doubling up to kParkMaxNs, for writers that
// wake nobody (another thread's store, a real NIC). Registration comes
// before the last look at the condition, so a write in between is not
// missed.
constexpr uint32_t kSpinTurns = 32;
constexpr uint64_t kParkMinNs = 50000;
constexpr uint64_t kParkMaxNs = 800000;
template <typename Step>
RG_INLINE int park(Step& step, const volatile void* key, uint32_t turn) {
  const uint32_t parks = turn - kSpinTurns;
  const uint64_t timeout = parks < 4 ? kParkMinNs << parks : kParkMaxNs;
  const uint32_t token = rust_gin_host_park_begin(key);
  const int r = step();
  rust_gin_host_park_end(token, r == kSpinAgain ? timeout : 0);
  return r;
}
#endif

// The one wait loop of the device library: calls step() until it returns
// something other than kSpinAgain, backing off between tries. In a lockstep
// wave this is a loop as the hardware runs it: the lanes that entered it
// together iterate together, a lane whose step is done waits at the loop's
// end, and the loop ends for all only when every lane has left it; the other
// lanes of the wave wait meanwhile. A step must not itself use wave
// primitives or spin. `key` names what the loop waits for, an address the
// NIC writes (a signal word, a CQ ring), so that the host build's waiter is
// woken by exactly that write; NULL (the form without a key): a wait on
// several things, woken by any NIC write. The GPU ignores it.
template <typename Step>
RG_INLINE int spin(Step step, const volatile void* key, RG_SITE_PARAMS) {
#if RG_GPU
  (void)rg_file, (void)rg_line;
  (void)key;
#else
  if (lockstep_lane() >= 0) {
    rust_gin_ls_spin_enter(RG_SITE);
    int r = kSpinAgain;
    for (;;) {
      if (r == kSpinAgain) r = step();
      if (rust_gin_ls_spin_report(r != kSpinAgain, RG_SITE)) return r;
    }
  }
#endif
  for (uint32_t turn = 0;; ++turn) {
    const int r = step();
    if (r != kSpinAgain) return r;
#if RG_GPU
    backoff(turn);
#else
    if (turn < kSpinTurns) {
      backoff(turn);
    } else {
      const int p = park(step, key, turn);
      if (p != kSpinAgain) return p;
    }
#endif
  }
}

template <typename Step>
RG_INLINE int spin(Step step, RG_SITE_PARAMS) {
  return spin(step, static_cast<const volatile void*>(nullptr), RG_SITE);
}

}  // namespace wave
}  // namespace rust_gin
