// RCCL's generic GIN device code run over rust-gin on the CPU: the caller's
// door. RCCL's kernels never call rust_gin_put or rust_gin_counter_wait; they
// call ncclGin's methods (nccl_device/impl/gin__funcs.h), which call the
// ncclGinApi_* specialisations of patch 0004 and then run RCCL's own loops.
// This file restates those methods, sequence for sequence, over the patch's
// real gin_rust.h (build.rs takes it out of the patch), so that tests drive
// rust-gin exactly as RCCL does, lockstep waves and all.
//
// Every method cites the pinned RCCL (rocm-systems 66e4315f,
// projects/rccl/src/include/nccl_device/impl/gin__funcs.h, "F:<line>") as
// patch 0004 leaves it; each site marked PATCH is a line that patch adds.
// Restated, not copied: the code is this project's, the sequence RCCL's.
//
// What the restatement models of a GPU (docs/architecture.md, "The caller's
// door"):
//   - `if (coop.thread_rank() == 0) {...}` in RCCL and in the patch is a
//     divergent branch; the lanes outside it wait at the next coop.sync(),
//     which is therefore where this file ends one lockstep region and starts
//     the next (Coop::sync);
//   - a workgroup is several waves, each on its own thread; its sync adds a
//     barrier across them;
//   - clock64() is the device library's host clock (cycles are ns here).
#include "nccl_device/gin/gin_device_common.h"
#include "nccl_device/gin/rust/gin_rust.h"

#include "rust_gin/abi/rccl_caller.h"

#include <pthread.h>
#include <stdlib.h>

extern "C" {
// The lockstep runtime's hooks (rust_gin/port/wave.h; that header cannot be
// included beside the patch's ABI mirror, which defines the same names).
int rust_gin_ls_lane(void);
uint64_t rust_gin_ls_readlane(uint64_t v, uint32_t lane, const char* file, int line);
void rust_gin_ls_barrier(const char* file, int line);
int rust_gin_ls_region_begin(int cond, const char* file, int line);
void rust_gin_ls_region_end(const char* file, int line);
uint64_t rust_gin_host_clock_ns(void);
}

namespace {

// --- the device's side of RCCL's world ----------------------------------------

bool in_wave() { return rust_gin_ls_lane() >= 0; }

struct Group {
  pthread_barrier_t barrier;
  uint64_t bcast;
};

// A coop as RCCL's templates use it (coop.h): thread_rank, size, sync.
struct Coop {
  rust_gin_rccl_coop c;
  NCCL_DEVICE_INLINE int thread_rank() const { return static_cast<int>(c.rank); }
  NCCL_DEVICE_INLINE int size() const { return static_cast<int>(c.size); }
  NCCL_DEVICE_INLINE int num_threads() const { return static_cast<int>(c.size); }
  // The join point of the coop: lanes that skipped a thread_rank() == 0
  // branch wait here for those in it; a workgroup's waves meet too.
  void sync() const {
    if (c.kind == RUST_GIN_RCCL_COOP_THREAD) return;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (in_wave()) rust_gin_ls_region_end(__FILE__, __LINE__);
    if (c.kind == RUST_GIN_RCCL_COOP_WORKGROUP) {
      const bool leader = c.rank % 64 == 0;
      const bool lockstep = in_wave();
      if (!lockstep || rust_gin_ls_region_begin(leader, __FILE__, __LINE__)) {
        if (leader) pthread_barrier_wait(&static_cast<Group*>(c.group)->barrier);
      }
      if (lockstep) rust_gin_ls_region_end(__FILE__, __LINE__);
    }
    if (in_wave()) rust_gin_ls_region_begin(1, __FILE__, __LINE__);
  }
  // ncclCoopBcast(coop, v, 0, entrySync=false): thread 0's value to all.
  uint64_t bcast(uint64_t v) const {
    if (c.kind == RUST_GIN_RCCL_COOP_THREAD) return v;
    Group* g = static_cast<Group*>(c.group);
    if (c.kind == RUST_GIN_RCCL_COOP_WORKGROUP && c.rank == 0) __atomic_store_n(&g->bcast, v, __ATOMIC_RELEASE);
    sync();
    if (c.kind == RUST_GIN_RCCL_COOP_WORKGROUP) return __atomic_load_n(&g->bcast, __ATOMIC_ACQUIRE);
    return in_wave() ? rust_gin_ls_readlane(v, 0, __FILE__, __LINE__) : v;
  }
};

// ncclCoopThread, as the methods pass it to the specialisations.
struct CoopThread {
  NCCL_DEVICE_INLINE int thread_rank() const { return 0; }
  NCCL_DEVICE_INLINE int size() const { return 1; }
  NCCL_DEVICE_INLINE int num_threads() const { return 1; }
  NCCL_DEVICE_INLINE void sync() const {}
};

// The end of a divergent branch inside a method, where a wave's lanes meet
// again without a coop sync (a loop's exit).
void reconverge() {
  if (in_wave()) {
    rust_gin_ls_region_end(__FILE__, __LINE__);
    rust_gin_ls_region_begin(1, __FILE__, __LINE__);
  }
}

// Every method runs as one lockstep region, so that Coop::sync can end and
// restart it (and lanes reconverge at the method's end).
struct Method {
  Method() {
    if (in_wave()) rust_gin_ls_region_begin(1, __FILE__, __LINE__);
  }
  ~Method() {
    if (in_wave()) rust_gin_ls_region_end(__FILE__, __LINE__);
  }
};

uint64_t clock64() { return rust_gin_host_clock_ns(); }

int order_of(cuda::memory_order ord) {
  switch (ord) {
    case cuda::memory_order_relaxed: return __ATOMIC_RELAXED;
    case cuda::memory_order_consume:
    case cuda::memory_order_acquire: return __ATOMIC_ACQUIRE;
    default: return __ATOMIC_SEQ_CST;
  }
}
// cuda::atomic_ref<uint64_t>{*p}.load(ord)
uint64_t atomic_load(const uint64_t* p, cuda::memory_order ord) {
  switch (order_of(ord)) {
    case __ATOMIC_RELAXED: return __atomic_load_n(p, __ATOMIC_RELAXED);
    case __ATOMIC_ACQUIRE: return __atomic_load_n(p, __ATOMIC_ACQUIRE);
    default: return __atomic_load_n(p, __ATOMIC_SEQ_CST);
  }
}

// utility.h: rollingLessEq and testAbort (NCCL's abort design: the flag is
// read every 100,000 steps).
bool rollingLessEq(uint64_t a, uint64_t b, int bits) {
  const uint64_t m = uint64_t(-1) >> (64 - bits);
  return ((b - a) & m) <= (m >> 1);
}
bool testAbort(const uint32_t* abortFlag, uint32_t& steps, bool* left_by_abort) {
  if (++steps < 100000) return false;
  steps = 0;
  const bool a = abortFlag != nullptr && __atomic_load_n(abortFlag, __ATOMIC_RELAXED) != 0;
  if (a && left_by_abort) *left_by_abort = true;
  return a;
}

// ncclGinCall (gin_device_common.h): the case for type 8 of ncclGinCallImpl.
template <template <ncclNetDeviceType> class ApiFn, typename... Arg>
decltype(auto) ncclGinCall(ncclGinCtx ctx, Arg&&... arg) {
  if (ctx.backend != NCCL_NET_DEVICE_GIN_RUST) abort();  // __builtin_unreachable() in RCCL
  return ApiFn<NCCL_NET_DEVICE_GIN_RUST>::call(ctx, static_cast<Arg&&>(arg)...);
}

// --- waitRollingLessEq and its progress step (F:84, PATCH) --------------------

// PATCH: NoProgress, WaitProgress, signalProgress and counterProgress.
struct NoProgress {
  void operator()() const {}
};
struct WaitProgress {
  ncclGinCtx ctx;
  ncclGinProgressTarget target;
  uint32_t id;
  void operator()() const { ncclGinCall<ncclGinApi_Progress>(ctx, target, id); }
};
WaitProgress signalProgress(ncclGinCtx ctx, ncclGinSignal_t signal) {
  return WaitProgress{ctx, ncclGinProgressSignal, signal};
}
WaitProgress counterProgress(ncclGinCtx ctx, ncclGinCounter_t counter) {
  return WaitProgress{ctx, ncclGinProgressCounter, counter};
}

template <bool EnableTimeout, typename Progress = NoProgress>
ncclResult_t waitRollingLessEq(ncclGinOffsetPtr ref, uint64_t least, int bits, cuda::memory_order ord,
                               uint32_t* abortFlag, uint64_t timeoutCycles, bool* left_by_abort,
                               Progress progress = Progress()) {
  uint32_t steps = 0;
  uint64_t startCycle = 0;
  if (EnableTimeout) startCycle = clock64();
  least += ref.offset;
  while (true) {
    progress();  // PATCH
    const uint64_t got = atomic_load(ref.ptr, ord);
    if (rollingLessEq(least, got, bits)) return ncclSuccess;
    if (EnableTimeout) {
      if (clock64() - startCycle >= timeoutCycles) return ncclTimeout;
    }
    if (testAbort(abortFlag, steps, left_by_abort)) return ncclSuccess;
  }
}

// Which overload a method calls: the one without a timeout for UINT64_MAX
// (rccl_caller.h), else the one with.
template <typename Progress = NoProgress>
ncclResult_t waitEitherOverload(ncclGinOffsetPtr ref, uint64_t least, int bits, uint32_t* abortFlag,
                                uint64_t timeout_cycles, bool* left_by_abort, Progress progress = Progress()) {
  if (timeout_cycles == UINT64_MAX)
    return waitRollingLessEq<false>(ref, least, bits, cuda::memory_order_acquire, abortFlag, 0, left_by_abort,
                                    progress);
  return waitRollingLessEq<true>(ref, least, bits, cuda::memory_order_acquire, abortFlag, timeout_cycles,
                                 left_by_abort, progress);
}

// --- ncclGin ------------------------------------------------------------------

struct Window {
  const rust_gin_rccl_window* w;
};

// ncclGin_BackendMask<beMask> for one connection on backend 8: the members
// ncclGinInitCommon (F:112) sets, and _makeCtx (F:158).
struct Gin {
  const rust_gin_rccl_comm& comm;
  uint32_t connectionId;
  uint32_t contextId;
  uint64_t* _signalShadows;

  Gin(const rust_gin_rccl_comm& c, int contextIndex) : comm(c) {
    // One GIN connection: connectionId = contextIndex & 0, contextId =
    // contextIndex >> 0.
    connectionId = 0;
    contextId = static_cast<uint32_t>(contextIndex);
    _signalShadows = comm.signal_shadows + static_cast<uint64_t>(contextIndex) * comm.signal_count;
  }

  ncclGinCtx _makeCtx() const {
    ncclGinCtx ans = {};
    ans.backendMask = 1u << NCCL_NET_DEVICE_GIN_RUST;
    ans.backend = static_cast<ncclNetDeviceType>(comm.gin_backend);
    ans.rank = comm.rank;
    ans.nRanks = comm.n_ranks;
    ans.handle = comm.gin_handle;
    ans.contextId = static_cast<int>(contextId);
    ans.resourceSharingMode = static_cast<uint8_t>(comm.resource_sharing);  // F:172
    return ans;
  }

  // getGinWindow (F:24) and the offset every method computes:
  // 4096 * ginOffset4K + offset (windowOffsetToGinOffset, F:19).
  static ncclGinWindow_t ginWin(const rust_gin_rccl_window* w) { return const_cast<void*>(w->gin_win); }
  static size_t ginOff(const rust_gin_rccl_window* w, size_t off) { return 4096 * size_t(w->gin_offset_4k) + off; }

  // ncclGin_getSignalDescriptor and friends (F:237-451) for one action.
  ncclGinSignalDescriptor descriptor(const rust_gin_rccl_action& a) const {
    ncclGinSignalDescriptor d{};
    d.type = NCCL_GIN_SIGNAL_TYPE_NONE;
    const bool legacy = comm.strong_legacy_signals != 0;
    d.isStrong = a.strength == RUST_GIN_RCCL_STRENGTH_STRONG ? true
                 : a.strength == RUST_GIN_RCCL_STRENGTH_WEAK ? false
                                                               : legacy;
    if (a.kind == RUST_GIN_RCCL_ACTION_SIGNAL_INC || a.kind == RUST_GIN_RCCL_ACTION_SIGNAL_ADD) {
      d.type = NCCL_GIN_SIGNAL_TYPE_INDEXED;
      d.indexedSignal.signalId = a.signal;
    } else if (a.kind == RUST_GIN_RCCL_ACTION_VA_SIGNAL_INC || a.kind == RUST_GIN_RCCL_ACTION_VA_SIGNAL_ADD) {
      d.type = NCCL_GIN_SIGNAL_TYPE_VA;
      d.vaSignal.signalWindow = ginWin(a.va_window);
      d.vaSignal.signalOffset = ginOff(a.va_window, a.va_offset);
      d.vaSignal.ncclWindow = nullptr;
    } else {
      d.isStrong = false;  // the primary template: a value-initialised descriptor
    }
    return d;
  }
  static ncclGinSignalOp_t signalOp(const rust_gin_rccl_action& a) {
    return a.kind == RUST_GIN_RCCL_ACTION_SIGNAL_ADD || a.kind == RUST_GIN_RCCL_ACTION_VA_SIGNAL_ADD ? ncclGinSignalAdd
                                                                                                     : ncclGinSignalInc;
  }
  static uint64_t signalOpArg(const rust_gin_rccl_action& a) {
    switch (a.kind) {
      case RUST_GIN_RCCL_ACTION_SIGNAL_ADD:
      case RUST_GIN_RCCL_ACTION_VA_SIGNAL_ADD: return a.value;
      case RUST_GIN_RCCL_ACTION_NONE: return 0;
      default: return 1;
    }
  }
};

}  // namespace

extern "C" {

void* rust_gin_rccl_group_new(uint32_t waves) {
  Group* g = new Group();
  pthread_barrier_init(&g->barrier, nullptr, waves);
  return g;
}

void rust_gin_rccl_group_free(void* group) {
  Group* g = static_cast<Group*>(group);
  pthread_barrier_destroy(&g->barrier);
  delete g;
}

// ncclGin::put, device-only segments (F:544, the call at F:560): thread 0 of the coop calls Put
// with ncclCoopThread and the team peer (world team: the rank itself).
void rust_gin_rccl_put(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop c, int32_t peer,
                       const rust_gin_rccl_window* dst, uint64_t dst_off, const rust_gin_rccl_window* src,
                       uint64_t src_off, uint64_t bytes, rust_gin_rccl_action remote, int32_t counter,
                       uint32_t opt_flags) {
  Method m;
  Gin gin(*comm, static_cast<int>(context));
  Coop coop{c};
  ncclGinCtx ctx = gin._makeCtx();
  coop.sync();
  if (coop.thread_rank() == 0) {
    ncclGinCall<ncclGinApi_Put>(ctx, CoopThread(), peer, /*hasWins=*/true, Gin::ginWin(dst), Gin::ginOff(dst, dst_off),
                                Gin::ginWin(src), Gin::ginOff(src, src_off), bytes, gin.descriptor(remote),
                                Gin::signalOp(remote), Gin::signalOpArg(remote), counter >= 0,
                                static_cast<ncclGinCounter_t>(counter >= 0 ? counter : -1), false, nullptr,
                                cuda::thread_scope_device, cuda::thread_scope_thread, opt_flags);
  }
  coop.sync();
}

// ncclGin::putValue (F:656, the call at F:669).
void rust_gin_rccl_put_value(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop c, int32_t peer,
                             const rust_gin_rccl_window* dst, uint64_t dst_off, uint64_t value, uint32_t size,
                             rust_gin_rccl_action remote) {
  Method m;
  Gin gin(*comm, static_cast<int>(context));
  Coop coop{c};
  coop.sync();
  if (coop.thread_rank() == 0) {
    const ncclGinCtx ctx = gin._makeCtx();
    const ncclGinSignalDescriptor d = gin.descriptor(remote);
    const auto call = [&](auto v) {
      ncclGinCall<ncclGinApi_PutValue>(ctx, CoopThread(), peer, Gin::ginWin(dst), Gin::ginOff(dst, dst_off), v, d,
                                       Gin::signalOp(remote), Gin::signalOpArg(remote), false, nullptr,
                                       cuda::thread_scope_device, cuda::thread_scope_thread);
    };
    // The T of putValue<T>, as ncclGinPutValue_v2 picks it by size (F:697-721).
    if (size == 1) call(static_cast<uint8_t>(value));
    else if (size == 2) call(static_cast<uint16_t>(value));
    else if (size == 4) call(static_cast<uint32_t>(value));
    else call(value);
  }
  coop.sync();
}

// ncclGin::signal (F:752, the call at F:761): a Put without windows.
void rust_gin_rccl_signal(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop c, int32_t peer,
                          rust_gin_rccl_action remote) {
  Method m;
  Gin gin(*comm, static_cast<int>(context));
  Coop coop{c};
  coop.sync();
  if (coop.thread_rank() == 0) {
    ncclGinCall<ncclGinApi_Put>(gin._makeCtx(), CoopThread(), peer, /*hasWins=*/false, nullptr, 0, nullptr, 0, 0,
                                gin.descriptor(remote), Gin::signalOp(remote), Gin::signalOpArg(remote),
                                /*hasCounter=*/false, 0, false, nullptr, cuda::thread_scope_device,
                                cuda::thread_scope_thread, 0u);
  }
  coop.sync();
}

// ncclGin::get, device-only segments (F:990, the call at F:1001): the whole coop calls Get.
void rust_gin_rccl_get(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop c, int32_t peer,
                       const rust_gin_rccl_window* remote, uint64_t remote_off, const rust_gin_rccl_window* local,
                       uint64_t local_off, uint64_t bytes) {
  Method m;
  Gin gin(*comm, static_cast<int>(context));
  Coop coop{c};
  ncclGinCtx ctx = gin._makeCtx();
  coop.sync();
  ncclGinCall<ncclGinApi_Get>(ctx, coop, peer, Gin::ginWin(remote), Gin::ginOff(remote, remote_off),
                              Gin::ginWin(local), Gin::ginOff(local, local_off), bytes, false, nullptr, 0u);
  coop.sync();
}

// ncclGin::flush (F:804, and the timeout overload F:814): the whole coop
// calls Flush with the abort flag.
int rust_gin_rccl_flush(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop c,
                        uint64_t timeout_cycles) {
  Method m;
  Gin gin(*comm, static_cast<int>(context));
  Coop coop{c};
  int ret = ncclSuccess;
  coop.sync();
  if (timeout_cycles == UINT64_MAX) {
    ncclGinCall<ncclGinApi_Flush>(gin._makeCtx(), coop, false, nullptr, cuda::memory_order_acquire, comm->abort_flag);
  } else {
    ret = ncclGinCall<ncclGinApi_Flush>(gin._makeCtx(), coop, false, nullptr, cuda::memory_order_acquire,
                                        comm->abort_flag, timeout_cycles);
  }
  coop.sync();
  return ret;
}

// ncclGin::flushAsync (F:976).
void rust_gin_rccl_flush_async(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop c, int32_t peer,
                               uint64_t request[2]) {
  Method m;
  Gin gin(*comm, static_cast<int>(context));
  Coop coop{c};
  coop.sync();
  if (coop.thread_rank() == 0) {
    ncclGinCall<ncclGinApi_FlushAsync>(gin._makeCtx(), static_cast<uint32_t>(peer),
                                       reinterpret_cast<ncclGinRequest_t*>(request), false, nullptr, 0u);
  }
  coop.sync();
}

// ncclGin::wait (F:949, and the timeout overload F:961).
int rust_gin_rccl_wait(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop c, uint64_t request[2],
                       uint64_t timeout_cycles) {
  Method m;
  Gin gin(*comm, static_cast<int>(context));
  Coop coop{c};
  int ret = ncclSuccess;
  coop.sync();
  if (coop.thread_rank() == 0) {
    ncclGinRequest_t& req = *reinterpret_cast<ncclGinRequest_t*>(request);
    if (timeout_cycles == UINT64_MAX) {
      ncclGinCall<ncclGinApi_Wait>(gin._makeCtx(), req, false, nullptr, cuda::memory_order_acquire, comm->abort_flag);
    } else {
      ret = ncclGinCall<ncclGinApi_Wait>(gin._makeCtx(), req, false, nullptr, cuda::memory_order_acquire,
                                         comm->abort_flag, timeout_cycles);
    }
  }
  coop.sync();
  return ret;
}

// ncclGin::readSignal (F:920): GetSignalPtr, one load, minus the offset.
uint64_t rust_gin_rccl_read_signal(const rust_gin_rccl_comm* comm, uint32_t context, uint32_t signal, int32_t bits) {
  Method m;
  Gin gin(*comm, static_cast<int>(context));
  const ncclGinOffsetPtr sig = ncclGinCall<ncclGinApi_GetSignalPtr>(gin._makeCtx(), signal);
  const uint64_t mask = uint64_t(-1) >> (64 - bits);
  const uint64_t raw = atomic_load(sig.ptr, cuda::memory_order_acquire);
  return (raw - sig.offset) & mask;
}

// ncclGin::readSignal of a VA signal (F:929): a load of the local word.
uint64_t rust_gin_rccl_read_va_signal(const rust_gin_rccl_comm*, uint32_t, const rust_gin_rccl_window* window,
                                      uint64_t offset, int32_t bits) {
  Method m;
  const uint64_t* ptr = reinterpret_cast<const uint64_t*>(static_cast<char*>(window->local) + offset);
  const uint64_t mask = uint64_t(-1) >> (64 - bits);
  return mask & atomic_load(ptr, cuda::memory_order_acquire);
}

// ncclGin::waitSignal (F:1066, timeout overload F:1079).
int rust_gin_rccl_wait_signal(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop c,
                              uint32_t signal, uint64_t least, int32_t bits, uint64_t timeout_cycles) {
  Method m;
  Gin gin(*comm, static_cast<int>(context));
  Coop coop{c};
  int ret = ncclSuccess;
  bool aborted = false;
  coop.sync();
  if (coop.thread_rank() == 0) {
    const ncclGinOffsetPtr sig = ncclGinCall<ncclGinApi_GetSignalPtr>(gin._makeCtx(), signal);
    ret = waitEitherOverload(sig, least, bits, comm->abort_flag, timeout_cycles, &aborted,
                             signalProgress(gin._makeCtx(), signal));  // PATCH
  }
  coop.sync();
  return aborted ? RUST_GIN_RCCL_LEFT_BY_ABORT : ret;
}

// ncclGin::waitSignal on a VA signal (F:1094, F:1107): the local word, no
// backend call at all.
int rust_gin_rccl_wait_va_signal(const rust_gin_rccl_comm* comm, uint32_t, rust_gin_rccl_coop c,
                                 const rust_gin_rccl_window* window, uint64_t offset, uint64_t least, int32_t bits,
                                 uint64_t timeout_cycles) {
  Method m;
  Coop coop{c};
  int ret = ncclSuccess;
  bool aborted = false;
  coop.sync();
  if (coop.thread_rank() == 0) {
    uint64_t* ptr = reinterpret_cast<uint64_t*>(static_cast<char*>(window->local) + offset);
    ret = waitEitherOverload({ptr, 0}, least, bits, comm->abort_flag, timeout_cycles, &aborted);
  }
  coop.sync();
  return aborted ? RUST_GIN_RCCL_LEFT_BY_ABORT : ret;
}

// ncclGin::waitSignalMeetShadow (F:1138): wait until the signal reaches the
// shadow.
int rust_gin_rccl_wait_signal_meet_shadow(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop c,
                                          uint32_t signal, int32_t bits) {
  Method m;
  Gin gin(*comm, static_cast<int>(context));
  Coop coop{c};
  bool aborted = false;
  coop.sync();
  if (coop.thread_rank() == 0) {
    const ncclGinOffsetPtr sig = ncclGinCall<ncclGinApi_GetSignalPtr>(gin._makeCtx(), signal);
    (void)waitRollingLessEq<false>(sig, gin._signalShadows[signal], bits, cuda::memory_order_acquire,
                                   comm->abort_flag, 0, &aborted, signalProgress(gin._makeCtx(), signal));  // PATCH
  }
  coop.sync();
  return aborted ? RUST_GIN_RCCL_LEFT_BY_ABORT : ncclSuccess;
}

// ncclGin::waitSignalFollowShadow (F:1153): its own loop, then the shadow
// moves to what was seen and thread 0 broadcasts it.
int rust_gin_rccl_wait_signal_follow_shadow(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop c,
                                            uint32_t signal, uint64_t least_delta, uint64_t* before, uint64_t* delta,
                                            int32_t bits) {
  Method m;
  Gin gin(*comm, static_cast<int>(context));
  Coop coop{c};
  uint32_t steps = 0;
  bool aborted = false;
  coop.sync();
  const uint64_t before64 = gin._signalShadows[signal];
  // A wave's lanes read the shadow in one instruction, before thread 0's
  // loop can move it; the model's fibers run one after another until a
  // wave primitive, so mark that step. (Waves of a workgroup coop have no
  // such step in RCCL: docs/architecture.md, "The caller's door".)
  if (in_wave()) rust_gin_ls_barrier(__FILE__, __LINE__);
  uint64_t after64 = 0;
  if (coop.thread_rank() == 0) {
    const ncclGinOffsetPtr sig = ncclGinCall<ncclGinApi_GetSignalPtr>(gin._makeCtx(), signal);
    const uint64_t offset = sig.offset;
    const uint64_t least = before64 + least_delta + offset;
    do {
      ncclGinCall<ncclGinApi_Progress>(gin._makeCtx(), ncclGinProgressSignal, signal);  // PATCH
      after64 = atomic_load(sig.ptr, cuda::memory_order_acquire);
    } while (!rollingLessEq(least, after64, bits) && !testAbort(comm->abort_flag, steps, &aborted));
    after64 = after64 - offset;
    gin._signalShadows[signal] = after64;
  }
  const uint64_t mask = uint64_t(-1) >> (64 - bits);
  after64 = coop.bcast(after64);
  *before = mask & before64;
  *delta = mask & (after64 - before64);
  return aborted ? RUST_GIN_RCCL_LEFT_BY_ABORT : ncclSuccess;
}

// ncclGinBarrierSession<Coop>::sync over a team of the whole world
// (syncInternal<false>), in the version the pinned RCCL's
// nccl_device/gin_barrier.h:23-101 declares (ncclGinFenceLevel,
// ncclGinAllContexts): the pinned snapshot holds no implementation file, and
// this one is NCCL's impl/gin_barrier__funcs.h as RCCL syncs it (its
// NVIDIA/nccl snapshot here, 51c58fd6, is the older sync without fences;
// the fenced one was read from a public mirror of NCCL 2.30's tree).
// The session's signals are signal0 + index * nRanks; `contexts` 0 binds it
// to `context`, k > 0 is ncclGinAllContexts over contexts 0..k-1 (signal on
// each, as puts and signals on different queues are not ordered). With the
// Put fence every rank signals itself too; with the Get fence a flush
// follows, per (context, peer) when all contexts are fenced.
int rust_gin_rccl_gin_barrier(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop c,
                              uint32_t signal0, uint32_t index, uint32_t contexts, uint32_t fence) {
  Method m;
  Gin gin(*comm, contexts ? 0 : static_cast<int>(context));
  Coop coop{c};
  const int n = comm->n_ranks;
  const int rank = comm->rank;
  const uint32_t signal = signal0 + index * static_cast<uint32_t>(n);
  int ret = ncclSuccess;
  bool aborted = false;
  // signalAndWait: SignalInc{signal + rank} to `peer` as one thread with
  // the default strength, bump the shadow of the peer's slot, wait for it.
  auto signalAndWait = [&](Gin& net, int peer) {
    rust_gin_rccl_action inc{};
    inc.kind = RUST_GIN_RCCL_ACTION_SIGNAL_INC;
    inc.signal = signal + static_cast<uint32_t>(rank);
    ncclGinCall<ncclGinApi_Put>(net._makeCtx(), CoopThread(), peer, /*hasWins=*/false, nullptr, 0, nullptr, 0, 0,
                                net.descriptor(inc), Gin::signalOp(inc), Gin::signalOpArg(inc),
                                /*hasCounter=*/false, 0, false, nullptr, cuda::thread_scope_device,
                                cuda::thread_scope_thread, 0u);
    uint32_t* shadow = reinterpret_cast<uint32_t*>(net._signalShadows + signal + peer);  // getSignalShadowPtr
    const uint32_t waitVal = ++*shadow;
    const ncclGinOffsetPtr sig = ncclGinCall<ncclGinApi_GetSignalPtr>(net._makeCtx(), signal + peer);
    const int r = waitRollingLessEq<false>(sig, waitVal, 32, cuda::memory_order_acquire, comm->abort_flag, 0,
                                           &aborted, signalProgress(net._makeCtx(), signal + peer));  // PATCH
    if (r != ncclSuccess) ret = r;
  };
  coop.sync();
  const int nPeerSigs = (fence & RUST_GIN_RCCL_FENCE_PUT) ? n : n - 1;
  const int nCtx = contexts ? static_cast<int>(contexts) : 1;
  for (int i = coop.thread_rank(); i < nCtx * nPeerSigs; i += coop.size()) {
    const int ctx = i / nPeerSigs;
    int peer = 1 + rank + (i - ctx * nPeerSigs);
    if (n <= peer) peer -= n;
    Gin scratch(*comm, contexts ? ctx : static_cast<int>(context));
    signalAndWait(scratch, peer);
  }
  // A wave reconverges at the loop's exit (structured control flow): lanes
  // past it wait there for the lanes still signalling and waiting, before any
  // runs the flush. The model's lanes run ahead unless the region ends here.
  reconverge();
  if (fence & RUST_GIN_RCCL_FENCE_GET) {
    if (contexts) {
      for (int i = coop.thread_rank(); i < nCtx * n; i += coop.size()) {
        Gin scratch(*comm, i / n);
        ncclGinRequest_t req;
        ncclGinCall<ncclGinApi_FlushAsync>(scratch._makeCtx(), static_cast<uint32_t>(i % n), &req, false, nullptr,
                                           0u);
        ncclGinCall<ncclGinApi_Wait>(scratch._makeCtx(), req, false, nullptr, cuda::memory_order_acquire,
                                     comm->abort_flag);
      }
      reconverge();
    } else {
      ncclGinCall<ncclGinApi_Flush>(gin._makeCtx(), coop, false, nullptr, cuda::memory_order_acquire,
                                    comm->abort_flag);
    }
  }
  coop.sync();
  return aborted ? RUST_GIN_RCCL_LEFT_BY_ABORT : ret;
}

// ncclGin::increaseSignalShadow (F:908): a workgroup-scope relaxed add.
void rust_gin_rccl_increase_signal_shadow(const rust_gin_rccl_comm* comm, uint32_t context, uint32_t signal,
                                          uint64_t delta) {
  Gin gin(*comm, static_cast<int>(context));
  __atomic_fetch_add(gin._signalShadows + signal, delta, __ATOMIC_RELAXED);
}

// ncclGin::readCounter (F:877): GetCounterPtr, one load.
uint64_t rust_gin_rccl_read_counter(const rust_gin_rccl_comm* comm, uint32_t context, uint32_t counter, int32_t bits) {
  Method m;
  Gin gin(*comm, static_cast<int>(context));
  const ncclGinOffsetPtr ctr = ncclGinCall<ncclGinApi_GetCounterPtr>(gin._makeCtx(), counter);
  const uint64_t mask = uint64_t(-1) >> (64 - bits);
  const uint64_t raw = atomic_load(ctr.ptr, cuda::memory_order_acquire);
  return (raw - ctr.offset) & mask;
}

// ncclGin::waitCounter (F:835, timeout overload F:848; ncclGinWaitCounter F:863): GetCounterPtr once,
// then RCCL's loop over that word.
int rust_gin_rccl_wait_counter(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop c,
                               uint32_t counter, uint64_t least, int32_t bits, uint64_t timeout_cycles) {
  Method m;
  Gin gin(*comm, static_cast<int>(context));
  Coop coop{c};
  int ret = ncclSuccess;
  bool aborted = false;
  coop.sync();
  if (coop.thread_rank() == 0) {
    const ncclGinOffsetPtr ctr = ncclGinCall<ncclGinApi_GetCounterPtr>(gin._makeCtx(), counter);
    ret = waitEitherOverload(ctr, least, bits, comm->abort_flag, timeout_cycles, &aborted,
                             counterProgress(gin._makeCtx(), counter));  // PATCH
  }
  coop.sync();
  return aborted ? RUST_GIN_RCCL_LEFT_BY_ABORT : ret;
}

// ncclGin::resetSignal (F:1206): ResetSignal, then the shadow to 0.
void rust_gin_rccl_reset_signal(const rust_gin_rccl_comm* comm, uint32_t context, uint32_t signal) {
  Method m;
  Gin gin(*comm, static_cast<int>(context));
  ncclGinSignalDescriptor d;
  d.type = NCCL_GIN_SIGNAL_TYPE_INDEXED;
  d.indexedSignal.signalId = signal;
  ncclGinCall<ncclGinApi_ResetSignal>(gin._makeCtx(), d);
  gin._signalShadows[signal] = 0;
}

// ncclGin::resetSignal of a VA signal (F:1215).
void rust_gin_rccl_reset_va_signal(const rust_gin_rccl_comm* comm, uint32_t context,
                                   const rust_gin_rccl_window* window, uint64_t offset) {
  Method m;
  Gin gin(*comm, static_cast<int>(context));
  ncclGinSignalDescriptor d;
  d.type = NCCL_GIN_SIGNAL_TYPE_VA;
  d.vaSignal.signalWindow = Gin::ginWin(window);
  d.vaSignal.signalOffset = Gin::ginOff(window, offset);
  d.vaSignal.ncclWindow = nullptr;
  ncclGinCall<ncclGinApi_ResetSignal>(gin._makeCtx(), d);
}

// ncclGin::resetCounter (F:1194).
void rust_gin_rccl_reset_counter(const rust_gin_rccl_comm* comm, uint32_t context, uint32_t counter) {
  Method m;
  Gin gin(*comm, static_cast<int>(context));
  ncclGinCall<ncclGinApi_ResetCounter>(gin._makeCtx(), counter);
}

// ncclGin::_supportsStrongSignal (F:634).
int rust_gin_rccl_supports_strong_signal(const rust_gin_rccl_comm* comm, uint32_t context) {
  Gin gin(*comm, static_cast<int>(context));
  return ncclGinCall<ncclGinApi_SupportsStrongSignal>(gin._makeCtx()) ? 1 : 0;
}

}  // extern "C"
