// gin-smoke: the GPU smoke test without RCCL (docs/bring-up.md, stage 2).
//
// Drives rust-gin's GIN v14 vtable (ncclGinRustPlugin_v14, librccl_rust_gin.a)
// as RCCL would: one rank per entry of --gpus, all in this process, each with
// init, listen, connect (every rank's handle), createContext and regMrSym.
// Then one kernel per rank, one thread, calls the device library's C entry
// points (rust_gin_device.h) on the handle createContext returned, for
// --rounds rounds (the first is the cold one):
//   1. to every rank, itself included: rust_gin_put of --bytes with an
//      indexed signal, then flush_async + wait (the put's CQE);
//   2. to every rank, on mlx5 RC: one RDMA WRITE posted in steps through the
//      library's queue entry points (mlx5/api.h): post_deferred (reserve a
//      ticket, write the WQE, publish), ring (doorbell), quiet (CQE); then a
//      signal, which lands after the write (one RC queue per peer, in order);
//   3. then from every rank: wait for both signals, check every byte.
// Each step is timed with wall_clock64() around the call. A kernel sees
// rust_gin_put as one call; built with --stage-hooks the library reports its
// ticket, publish, doorbell and CQE poll too (port/stage.h). The same source
// builds two ways (scripts/build-gin-smoke.sh):
//   GPU    hipcc, linked with the -fgpu-rdc device archive RCCL links;
//   host   the system C++ compiler for x86-64: the kernel body runs on each
//          rank's CPU thread against the library's x86-64 build in
//          librccl_rust_gin.a and the emulated NIC (tests/gin_smoke.rs).
// Exit status: 0 every check passed, 1 a check failed, 2 it could not run.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__HIP__)
#include <hip/hip_runtime.h>
#define SMOKE_GPU 1
#else
#define SMOKE_GPU 0
#define __global__
#define __device__
#define __host__
#endif

#include "gin_v14.h"
#include "rust_gin/mlx5/api.h"
#include "rust_gin/mlx5/wire.h"
#include "rust_gin/port/stage.h"
#include "rust_gin/rust_gin_device.h"

// ---- what a kernel records -------------------------------------------------

// Times are wall_clock64() ticks (GPU) or host nanoseconds (x86-64 build).
// Round 0 is the cold one (first doorbell, first CQE, cold caches and TLBs);
// later rounds are the warm figures.
constexpr int kMaxRanks = 8, kMaxRounds = 16;
struct PeerRecord {
  // Sender side, to this peer: the first status that was not RUST_GIN_OK.
  int32_t put_status, cqe_status, staged_status, staged_signal_status;
  uint64_t put_begin[kMaxRounds], put_end[kMaxRounds], put_cqe[kMaxRounds];  // put; flush_async + wait returned
  uint64_t st_begin[kMaxRounds], st_written[kMaxRounds], st_doorbell[kMaxRounds],
      st_cqe[kMaxRounds];  // post_deferred, ring, quiet returned
  // Receiver side, from this peer, after every round.
  int32_t signal_status, staged_wait_status;
  uint64_t signal_seen, staged_seen;
  uint32_t bad_bytes, first_bad, staged_bad_bytes, staged_first_bad;
};

struct RankRecord {
  uint64_t kernel_begin;  // receive times print relative to it: GPUs' clocks differ
  PeerRecord peer[kMaxRanks];
};

struct KernelArgs {
  const void* handle;    // ncclNetDeviceHandle.handle
  const void* src_win;   // ginHandle of the source window
  const void* dst_win;   // ginHandle of the destination window
  const uint8_t* dst;    // this rank's destination window (local address)
  uint32_t me, nranks, rounds;
  uint64_t bytes;
  const uint32_t* abort_flag;
  uint32_t plant_fault;  // test only: expect a wrong byte, so the check must fail
  RankRecord* rec;       // host-visible
};

// Bytes of rank `r`'s source: kind 0 is the GIN put, kind 1 the staged write.
__host__ __device__ static inline uint8_t pattern(uint32_t r, uint32_t kind, uint64_t i) {
  return static_cast<uint8_t>(r * 97u + kind * 61u + i * 7u + 1u);
}

// Destination layout: round r's kind-k bytes from sender q at
// ((r * nranks + q) * 2 + k) * bytes: no round overwrites another's.
__host__ __device__ static inline uint64_t dst_off(uint32_t r, uint32_t n, uint32_t q, uint32_t kind, uint64_t bytes) {
  return ((static_cast<uint64_t>(r) * n + q) * 2 + kind) * bytes;
}

__device__ static inline uint64_t now() {
#if SMOKE_GPU && defined(__HIP_DEVICE_COMPILE__)
  return wall_clock64();  // s_memrealtime: a constant rate (Rank::tick_ns)
#elif SMOKE_GPU
  return 0;  // the host pass of a HIP compile (HIP 5.2 declares wall_clock64 for the device only)
#else
  return rust_gin_host_clock_ns();
#endif
}

// ---- the library's stage hooks (built with --stage-hooks) ---------------------

// With RUST_GIN_STAGE_HOOKS the device library calls rust_gin_stage at each
// step inside a post (port/stage.h): it appends to a log of the GPU (the host
// build: of the process). Kernels of several ranks may share it (loopback);
// the queue state each entry names tells them apart.
struct StageEntry {
  uint64_t t, index;
  const void* state;
  uint32_t stage, pad;
};
constexpr uint32_t kStageLog = 16384;
#if defined(RUST_GIN_STAGE_HOOKS)
constexpr bool kStageHooks = true;
__device__ StageEntry g_stage_log[kStageLog];
__device__ uint32_t g_stage_n;
extern "C" __device__ void rust_gin_stage(uint32_t stage, const void* state, uint64_t index) {
#if SMOKE_GPU
  const uint32_t i = __hip_atomic_fetch_add(&g_stage_n, 1u, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#else
  const uint32_t i = __atomic_fetch_add(&g_stage_n, 1u, __ATOMIC_RELAXED);
#endif
  if (i < kStageLog) g_stage_log[i] = StageEntry{now(), index, state, stage, 0};
}
#else
constexpr bool kStageHooks = false;
#endif

__device__ static uint32_t check(const uint8_t* got, uint32_t q, uint32_t kind, uint64_t bytes, uint32_t plant,
                                 uint32_t* first_bad) {
  uint32_t bad = 0;
  *first_bad = 0xffffffffu;
  for (uint64_t i = 0; i < bytes; ++i) {
    uint8_t want = pattern(q, kind, i);
    if (plant && q == 0 && kind == 0 && i == bytes / 2) want ^= 0x5a;
    if (got[i] != want) {
      if (bad == 0) *first_bad = static_cast<uint32_t>(i);
      ++bad;
    }
  }
  return bad;
}

// The staged write's request: src kind 1 to the peer's dst region (me, 1),
// with the keys of the context's rail (abi/gin.h).
__device__ static rust_gin_mlx5_request staged_request(const KernelArgs& a, const rust_gin_context& c, uint32_t p,
                                                      uint32_t round) {
  const rust_gin_window* s = static_cast<const rust_gin_window*>(a.src_win);
  const rust_gin_window* d = static_cast<const rust_gin_window*>(a.dst_win);
  const rust_gin_window_peer& dp =
      reinterpret_cast<const rust_gin_window_peer*>(d->peers)[static_cast<uint64_t>(c.rail) * a.nranks + p];
  rust_gin_mlx5_request r = {};
  r.opcode = rust_gin::mlx5::OP_RDMA_WRITE;
  r.flags = RUST_GIN_REQ_SIGNALED;
  r.length = static_cast<uint32_t>(a.bytes);
  r.lkey = reinterpret_cast<const uint32_t*>(s->lkeys)[c.rail];
  r.rkey = dp.rkey;
  r.laddr = s->local_base + a.bytes;  // kind 1 sits after kind 0
  r.raddr = dp.base + dst_off(round, a.nranks, a.me, 1, a.bytes);
  return r;
}

__device__ static inline void keep_first(int32_t& status, int32_t s) {
  if (status == RUST_GIN_OK) status = s;
}

__global__ void gin_smoke_kernel(KernelArgs a) {
  const uint32_t ctx = 0;
  const rust_gin_handle* h = static_cast<const rust_gin_handle*>(a.handle);
  const rust_gin_context& c = reinterpret_cast<const rust_gin_context*>(h->contexts)[ctx];
  const bool staged = c.family == RUST_GIN_FAMILY_MLX5 && c.n_dci == 0;
  a.rec->kernel_begin = now();
  for (uint32_t p = 0; p < a.nranks; ++p) {
    PeerRecord& r = a.rec->peer[p];
    r.put_status = r.cqe_status = r.staged_status = r.staged_signal_status = RUST_GIN_OK;
    if (!staged) r.staged_status = r.staged_signal_status = -1;  // -1: not run (not mlx5 RC)
  }
  for (uint32_t round = 0; round < a.rounds; ++round) {
    for (uint32_t p = 0; p < a.nranks; ++p) {
      PeerRecord& r = a.rec->peer[p];
      rust_gin_signal sig = {RUST_GIN_SIGNAL_INDEXED, RUST_GIN_SIGNAL_OP_ADD, 1, a.me, nullptr, 0};
      r.put_begin[round] = now();
      int s = rust_gin_put(a.handle, ctx, p, a.dst_win, dst_off(round, a.nranks, a.me, 0, a.bytes), a.src_win, 0,
                           a.bytes, sig, 0, 0, 0);
      r.put_end[round] = now();
      keep_first(r.put_status, s);
      if (s == RUST_GIN_OK) {
        rust_gin_request req;
        s = rust_gin_flush_async(a.handle, ctx, p, &req);
        if (s == RUST_GIN_OK) s = rust_gin_wait(a.handle, req, a.abort_flag, 0);
      }
      r.put_cqe[round] = now();
      keep_first(r.cqe_status, s);
      if (!staged) continue;
      const rust_gin_mlx5_sq* sq = &reinterpret_cast<const rust_gin_peer*>(c.peers)[p].sq;
      const rust_gin_mlx5_request req = staged_request(a, c, p, round);
      r.st_begin[round] = now();
      s = rust_gin_mlx5_post_deferred(sq, &req, 1);
      r.st_written[round] = now();
      if (s == RUST_GIN_OK) {
        rust_gin_mlx5_ring(sq);
        r.st_doorbell[round] = now();
        s = rust_gin_mlx5_quiet(sq);
        r.st_cqe[round] = now();
      }
      keep_first(r.staged_status, s);
      // Behind the write on the same RC queue: seen only after it landed.
      rust_gin_signal ssig = {RUST_GIN_SIGNAL_INDEXED, RUST_GIN_SIGNAL_OP_ADD, 1, a.nranks + a.me, nullptr, 0};
      keep_first(r.staged_signal_status, s == RUST_GIN_OK ? rust_gin_signal_peer(a.handle, ctx, p, ssig, 0) : s);
    }
  }
  for (uint32_t q = 0; q < a.nranks; ++q) {
    PeerRecord& r = a.rec->peer[q];
    r.signal_status = rust_gin_signal_wait(a.handle, ctx, q, a.rounds, a.abort_flag, 0);
    r.signal_seen = now();
    r.staged_wait_status = staged ? rust_gin_signal_wait(a.handle, ctx, a.nranks + q, a.rounds, a.abort_flag, 0) : -1;
    r.staged_seen = now();
    r.bad_bytes = r.staged_bad_bytes = 0;
    r.first_bad = r.staged_first_bad = 0xffffffffu;
    for (uint32_t round = 0; round < a.rounds; ++round) {
      uint32_t first;
      uint32_t bad = check(a.dst + dst_off(round, a.nranks, q, 0, a.bytes), q, 0, a.bytes, a.plant_fault, &first);
      if (bad && !r.bad_bytes) r.first_bad = first;
      r.bad_bytes += bad;
      if (!staged) continue;
      bad = check(a.dst + dst_off(round, a.nranks, q, 1, a.bytes), q, 1, a.bytes, 0, &first);
      if (bad && !r.staged_bad_bytes) r.staged_first_bad = first;
      r.staged_bad_bytes += bad;
    }
  }
}

// ---- the host side ----------------------------------------------------------

#define SMOKE_FAIL(...)                                   \
  do {                                                    \
    char m_[512];                                         \
    snprintf(m_, sizeof m_, __VA_ARGS__);                 \
    rk.error = m_;                                        \
    return;                                               \
  } while (0)

#if SMOKE_GPU
#define HIP_OK(call)                                                                        \
  do {                                                                                      \
    hipError_t e_ = (call);                                                                 \
    if (e_ != hipSuccess) SMOKE_FAIL("%s: %s", #call, hipGetErrorString(e_));               \
  } while (0)
#endif

static bool g_info = false;

// RCCL's logger, for the plugin's WARN and (NCCL_DEBUG=INFO) INFO lines.
static void smoke_logger(int level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level > GIN_SMOKE_LOG_INFO || (level == GIN_SMOKE_LOG_INFO && !g_info)) return;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "gin-smoke: plugin %s: %s\n", level == GIN_SMOKE_LOG_INFO ? "INFO" : "WARN", buf);
}

// Threads standing in for ranks: an allgather of listen handles and barriers
// that give up after a while, so a rank that failed never leaves the others
// hanging.
struct Exchange {
  std::mutex m;
  std::condition_variable cv;
  int n = 0, arrived = 0, generation = 0;
  bool broken = false;
  std::vector<std::vector<uint8_t>> handles;
  bool barrier() {
    std::unique_lock<std::mutex> l(m);
    if (broken) return false;
    int gen = generation;
    if (++arrived == n) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return true;
    }
    if (!cv.wait_for(l, std::chrono::seconds(120), [&] { return generation != gen || broken; }) || broken) {
      broken = true;
      cv.notify_all();
      return false;
    }
    return true;
  }
  void fail() {
    std::lock_guard<std::mutex> l(m);
    broken = true;
    cv.notify_all();
  }
};

struct Rank {
  int rank = 0, gpu = 0, dev = 0;
  std::string nic, error, dev_error;
  int family = -1, signal_mode = -1, n_dci = 0;
  bool has_error = false;
  double tick_ns = 1.0;
  bool ran = false;  // the kernel ran and `rec` holds what it recorded
  RankRecord rec = {};
  // Stage hooks: per peer and round, the ticks from the put's call to its
  // reserve, publish (WQE written), doorbell and CQE; UINT64_MAX: not seen.
  uint64_t hook[kMaxRanks][kMaxRounds][4];
};

#if defined(RUST_GIN_STAGE_HOOKS)
// Finds each GIN put's stages in the hook log: the entries of the queue to
// that peer between the call and its return (reserve: the first; publish and
// doorbell: the last, after the signal's), and the first CQE consumed up to
// what was published, before flush_async + wait returned.
static void attribute_stages(Rank& rk, const std::vector<StageEntry>& log, const std::vector<const void*>& states,
                             uint32_t rounds) {
  for (size_t p = 0; p < states.size(); ++p) {
    const PeerRecord& r = rk.rec.peer[p];
    for (uint32_t k = 0; k < rounds; ++k) {
      uint64_t* h = rk.hook[p][k];
      for (int st = 0; st < 4; ++st) h[st] = UINT64_MAX;
      uint64_t published = UINT64_MAX;
      for (const StageEntry& e : log) {
        if (e.state != states[p] || e.t < r.put_begin[k]) continue;
        const uint64_t at = e.t - r.put_begin[k];
        if (e.t <= r.put_end[k]) {
          if (e.stage == RUST_GIN_STAGE_RESERVED && h[0] == UINT64_MAX) h[0] = at;
          if (e.stage == RUST_GIN_STAGE_PUBLISHED) h[1] = at, published = e.index;
          if (e.stage == RUST_GIN_STAGE_DOORBELL) h[2] = at;
        }
        if (e.stage == RUST_GIN_STAGE_CQE && e.t <= r.put_cqe[k] && published != UINT64_MAX && e.index >= published &&
            h[3] == UINT64_MAX)
          h[3] = at;
      }
    }
  }
}
#endif

struct Options {
  std::vector<int> gpus{0, 0};
  std::vector<int> devs;  // NIC (plugin device index) per rank; empty: automatic
  uint64_t bytes = 4096;
  uint32_t rounds = 3;  // round 0 cold, the rest warm
  bool plant_fault = false;
};

static const char* family_name(int f) {
  return f == RUST_GIN_FAMILY_MLX5 ? "mlx5" : f == RUST_GIN_FAMILY_BNXT ? "bnxt_re" : f == RUST_GIN_FAMILY_IONIC ? "ionic" : "?";
}

static void copy_from_device(void* dst, const void* src, size_t n) {
#if SMOKE_GPU
  (void)hipMemcpy(dst, src, n, hipMemcpyDefault);
#else
  memcpy(dst, src, n);
#endif
}

static void run_rank(Rank& rk, const Options& o, Exchange& ex) {
  const ncclGin_v14_t& v = ncclGinRustPlugin_v14;
  const int n = static_cast<int>(o.gpus.size());
  struct Fail {
    Exchange& ex;
    Rank& rk;
    ~Fail() {
      if (!rk.error.empty()) ex.fail();
    }
  } on_fail{ex, rk};
#if SMOKE_GPU
  HIP_OK(hipSetDevice(rk.gpu));
  int khz = 0;
#if HIP_VERSION_MAJOR >= 6
  if (hipDeviceGetAttribute(&khz, hipDeviceAttributeWallClockRate, rk.gpu) != hipSuccess) khz = 0;
#endif
  // wall_clock64 (s_memrealtime) runs at 100 MHz on gfx90a, gfx942, gfx950.
  rk.tick_ns = 1e6 / (khz > 0 ? khz : 100000);
#endif
  void* ctx = nullptr;
  if (v.init(&ctx, 0x534d4f4b45ull /* "SMOKE" */, smoke_logger) != GIN_SMOKE_NCCL_SUCCESS) SMOKE_FAIL("init failed");
  int ndev = 0;
  if (v.devices(&ndev) != GIN_SMOKE_NCCL_SUCCESS || ndev < 1) SMOKE_FAIL("devices: no NIC (%d)", ndev);
  rk.dev = o.devs.empty() ? (o.gpus[rk.rank] == o.gpus[0] ? 0 : rk.rank) % ndev : o.devs[rk.rank];
  if (rk.dev >= ndev) SMOKE_FAIL("NIC %d asked, the plugin has %d", rk.dev, ndev);
  ncclNetProperties_v12_t props;
  memset(&props, 0, sizeof props);
  if (v.getProperties(rk.dev, &props) != GIN_SMOKE_NCCL_SUCCESS) SMOKE_FAIL("getProperties(%d) failed", rk.dev);
  rk.nic = props.name ? props.name : "?";
  if (static_cast<uint32_t>(props.netDeviceVersion) != RUST_GIN_DEVICE_ABI_VERSION)
    SMOKE_FAIL("device ABI %d, this program was built for %d: rebuild it against the same tree",
               props.netDeviceVersion, RUST_GIN_DEVICE_ABI_VERSION);
  std::vector<uint8_t> handle(GIN_SMOKE_NET_HANDLE_MAXSIZE);
  void* lc = nullptr;
  if (v.listen(ctx, rk.dev, handle.data(), &lc) != GIN_SMOKE_NCCL_SUCCESS) SMOKE_FAIL("listen failed");
  ex.handles[rk.rank] = handle;
  if (!ex.barrier()) SMOKE_FAIL("another rank failed before connect");
  std::vector<std::vector<uint8_t>> all = ex.handles;
  std::vector<void*> ptrs;
  for (auto& hd : all) ptrs.push_back(hd.data());
  if (!ex.barrier()) SMOKE_FAIL("another rank failed at connect");
  void* coll = nullptr;
  if (v.connect(ctx, ptrs.data(), n, rk.rank, lc, &coll) != GIN_SMOKE_NCCL_SUCCESS) SMOKE_FAIL("connect failed");
  v.closeListen(lc);
  ncclGinConfig_v14_t cfg = {2 * n, 1, 1, 128, -1, 0, 1};
  void* gctx = nullptr;
  ncclNetDeviceHandle_v11_t* dh = nullptr;
  if (v.createContext(coll, &cfg, &gctx, &dh) != GIN_SMOKE_NCCL_SUCCESS || !dh || !dh->handle)
    SMOKE_FAIL("createContext failed");
  rust_gin_handle hh;
  copy_from_device(&hh, dh->handle, sizeof hh);
  rust_gin_context c0;
  copy_from_device(&c0, reinterpret_cast<const void*>(hh.contexts), sizeof c0);
  rk.family = static_cast<int>(c0.family);
  rk.signal_mode = static_cast<int>(c0.signal_mode);
  rk.n_dci = static_cast<int>(c0.n_dci);

  // Windows in GPU memory, as RCCL's: the source holds both kinds, the
  // destination a region per (sender, kind).
  const size_t src_len = 2 * o.bytes, dst_len = 2 * o.bytes * n * o.rounds;
  std::vector<uint8_t> src_host(src_len);
  for (uint64_t i = 0; i < o.bytes; ++i) {
    src_host[i] = pattern(rk.rank, 0, i);
    src_host[o.bytes + i] = pattern(rk.rank, 1, i);
  }
  uint8_t *src = nullptr, *dst = nullptr;
  uint32_t* abort_flag = nullptr;
  RankRecord* rec = nullptr;
  const size_t rec_len = sizeof(RankRecord);
#if SMOKE_GPU
  HIP_OK(hipMalloc(&src, src_len));
  HIP_OK(hipMalloc(&dst, dst_len));
  HIP_OK(hipMemcpy(src, src_host.data(), src_len, hipMemcpyHostToDevice));
  HIP_OK(hipMemset(dst, 0, dst_len));
  HIP_OK(hipHostMalloc(&abort_flag, sizeof(uint32_t), hipHostMallocCoherent));
  HIP_OK(hipHostMalloc(&rec, rec_len, hipHostMallocCoherent));
#else
  src = static_cast<uint8_t*>(aligned_alloc(4096, (src_len + 4095) & ~size_t{4095}));
  dst = static_cast<uint8_t*>(aligned_alloc(4096, (dst_len + 4095) & ~size_t{4095}));
  abort_flag = new uint32_t;
  rec = new RankRecord;
  memcpy(src, src_host.data(), src_len);
  memset(dst, 0, dst_len);
#endif
  *abort_flag = 0;
  memset(rec, 0, rec_len);
  void *smh = nullptr, *sgh = nullptr, *dmh = nullptr, *dgh = nullptr;
  if (v.regMrSym(coll, src, src_len, GIN_SMOKE_PTR_CUDA, 0, &smh, &sgh) != GIN_SMOKE_NCCL_SUCCESS ||
      v.regMrSym(coll, dst, dst_len, GIN_SMOKE_PTR_CUDA, 0, &dmh, &dgh) != GIN_SMOKE_NCCL_SUCCESS)
    SMOKE_FAIL("regMrSym failed");
  // Every window registered everywhere before any put can land.
  if (!ex.barrier()) SMOKE_FAIL("another rank failed before the kernel");

  KernelArgs a = {dh->handle, sgh, dgh, dst, static_cast<uint32_t>(rk.rank), static_cast<uint32_t>(n), o.rounds, o.bytes,
                  abort_flag, o.plant_fault ? 1u : 0u, rec};
#if SMOKE_GPU
  hipStream_t stream;
  HIP_OK(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking));
  hipLaunchKernelGGL(gin_smoke_kernel, dim3(1), dim3(1), 0, stream, a);
  HIP_OK(hipGetLastError());
  HIP_OK(hipStreamSynchronize(stream));
  HIP_OK(hipStreamDestroy(stream));
#else
  gin_smoke_kernel(a);  // the kernel body on this rank's thread: a one-lane wave
#endif
  rk.rec = *rec;
  rk.ran = true;
  std::vector<const void*> states(n);
  if (kStageHooks && rk.family == RUST_GIN_FAMILY_MLX5 && rk.n_dci == 0) {
    std::vector<rust_gin_peer> peers(n);
    copy_from_device(peers.data(), reinterpret_cast<const void*>(c0.peers), sizeof(rust_gin_peer) * n);
    for (int p = 0; p < n; ++p) states[p] = reinterpret_cast<const void*>(peers[p].sq.state);
  }
  bool has = false;
  v.queryLastError(gctx, &has);
  rk.has_error = has;
  if (has) {
    rust_gin_error e;
    copy_from_device(&e, reinterpret_cast<const void*>(hh.error), sizeof e);
    char m[256];
    snprintf(m, sizeof m, "device error record: code %u, peer %u, qpn 0x%x, wqe %u, syndrome 0x%x, wait %u, expected %llu, "
             "observed %llu", e.code, e.peer, e.qpn, e.wqe_index, e.syndrome, e.wait_kind,
             (unsigned long long)e.expected, (unsigned long long)e.observed);
    rk.dev_error = m;
  }
  // No rank tears down while a peer may still be writing into its windows.
  const bool all_done = ex.barrier();
#if defined(RUST_GIN_STAGE_HOOKS)
  // Every kernel on this GPU has finished: its log is complete.
  if (all_done && states[0]) {
    uint32_t used = 0;
    std::vector<StageEntry> log(kStageLog);
#if SMOKE_GPU
    HIP_OK(hipMemcpyFromSymbol(&used, HIP_SYMBOL(g_stage_n), sizeof used, 0, hipMemcpyDeviceToHost));
    HIP_OK(hipMemcpyFromSymbol(log.data(), HIP_SYMBOL(g_stage_log), sizeof(StageEntry) * kStageLog, 0,
                               hipMemcpyDeviceToHost));
#else
    used = __atomic_load_n(&g_stage_n, __ATOMIC_ACQUIRE);
    memcpy(log.data(), g_stage_log, sizeof(StageEntry) * kStageLog);
#endif
    if (used > kStageLog) SMOKE_FAIL("the stage log overflowed (%u entries): fewer --rounds", used);
    log.resize(used);
    attribute_stages(rk, log, states, o.rounds);
  }
#endif
  v.deregMrSym(coll, smh);
  v.deregMrSym(coll, dmh);
  v.destroyContext(gctx);
  v.closeColl(coll);
  v.finalize(ctx);
#if SMOKE_GPU
  (void)hipFree(src);
  (void)hipFree(dst);
  (void)hipHostFree(abort_flag);
  (void)hipHostFree(rec);
#else
  free(src);
  free(dst);
  delete abort_flag;
  delete rec;
#endif
  if (!all_done) SMOKE_FAIL("another rank failed after the kernel");
}

static std::vector<int> int_list(const char* s) {
  std::vector<int> out;
  for (const char* p = s; *p;) {
    char* end;
    long x = strtol(p, &end, 10);
    if (end == p || x < 0) return {};
    out.push_back(static_cast<int>(x));
    p = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return {};
  }
  return out;
}

static void usage() {
  fprintf(stderr,
          "usage: gin-smoke [--gpus A,B,...] [--two-gpu] [--nics I,J,...] [--bytes N]\n"
          "  --gpus     the GPU of each rank (default 0,0: two ranks on GPU 0, the NIC in loopback)\n"
          "  --two-gpu  --gpus 0,1: rank 1 on the second GPU and, by default, the plugin's second NIC\n"
          "  --nics     the plugin device (listen's dev) of each rank (default: 0 for ranks on GPU 0's\n"
          "             GPU, else the rank's index)\n"
          "  --bytes    bytes per put (default 4096)\n"
          "  --rounds   rounds of every put (default 3, at most 16): the first is cold, the rest warm\n"
          "Every rank puts to every rank, itself included. RCCL_RUST_GIN_* variables apply.\n");
}

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    const char* val = i + 1 < argc ? argv[i + 1] : "";
    if (arg == "--gpus") {
      o.gpus = int_list(val), ++i;
    } else if (arg == "--two-gpu") {
      o.gpus = {0, 1};
    } else if (arg == "--nics") {
      o.devs = int_list(val), ++i;
    } else if (arg == "--bytes") {
      o.bytes = strtoull(val, nullptr, 0), ++i;
    } else if (arg == "--rounds") {
      o.rounds = static_cast<uint32_t>(strtoul(val, nullptr, 0)), ++i;
    } else if (arg == "--plant-fault") {
      o.plant_fault = true;  // tests/gin_smoke.rs: the byte check must be able to fail
    } else {
      usage();
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  const int n = static_cast<int>(o.gpus.size());
  if (n < 1 || n > kMaxRanks || o.bytes < 1 || o.bytes > (64u << 20) || o.rounds < 1 || o.rounds > kMaxRounds ||
      2 * o.bytes * n * o.rounds > (1ull << 30) || (!o.devs.empty() && o.devs.size() != o.gpus.size())) {
    usage();
    return 2;
  }
  const char* dbg = getenv("NCCL_DEBUG");
  g_info = dbg && (!strcmp(dbg, "INFO") || !strcmp(dbg, "TRACE"));
  // A smoke test should fail within seconds, not RCCL's minute.
  setenv("RCCL_RUST_GIN_TIMEOUT_MS", "10000", 0);
  // The plugin serves only the GIN type RCCL would select it as (8, or the
  // RUST_GIN_TYPE it was built with: then set NCCL_GIN_TYPE to that).
  setenv("NCCL_GIN_TYPE", "8", 0);
#if SMOKE_GPU
  int ngpu = 0;
  hipError_t e = hipGetDeviceCount(&ngpu);
  if (e != hipSuccess || ngpu == 0) {
    fprintf(stderr, "gin-smoke: no HIP device (hipGetDeviceCount: %s, %d devices)\n", hipGetErrorString(e), ngpu);
    return 2;
  }
  for (int g : o.gpus)
    if (g >= ngpu) {
      fprintf(stderr, "gin-smoke: GPU %d asked, %d present\n", g, ngpu);
      return 2;
    }
  printf("gin-smoke: GPU build, wall_clock64 timestamps; provider %s\n",
         getenv("RCCL_RUST_GIN_PROVIDER") ? getenv("RCCL_RUST_GIN_PROVIDER") : "mlx5 (default)");
#else
  const char* prov = getenv("RCCL_RUST_GIN_PROVIDER");
  if (!prov || strcmp(prov, "emu") != 0) {
    fprintf(stderr, "gin-smoke: the x86-64 build runs on the emulated NIC only: set RCCL_RUST_GIN_PROVIDER=emu\n");
    return 2;
  }
  printf("gin-smoke: x86-64 build on the EMULATED NIC: the kernel body runs on each rank's CPU thread against the "
         "device library's x86-64 build; times are host ns, not a GPU's. NOT a GPU or NIC check.\n");
#endif
  printf(kStageHooks ? "gin-smoke: stage hooks ON: the device library was compiled from this tree with "
                      "RUST_GIN_STAGE_HOOKS, not the archive RCCL links\n"
                    : "gin-smoke: stage hooks off (the library as RCCL links it): the steps inside rust_gin_put are "
                      "timed only as a whole; --stage-hooks splits them\n");
  bool loopback = true;
  for (int g : o.gpus) loopback = loopback && g == o.gpus[0];
  Exchange ex;
  ex.n = n;
  ex.handles.resize(n);
  std::vector<Rank> ranks(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    ranks[r].rank = r;
    ranks[r].gpu = o.gpus[r];
    threads.emplace_back([&, r] { run_rank(ranks[r], o, ex); });
  }
  for (auto& t : threads) t.join();

  int failures = 0;
  const uint32_t R = o.rounds;
  auto us = [](const Rank& rk, uint64_t a, uint64_t b) { return b >= a ? (b - a) * rk.tick_ns / 1000.0 : -1.0; };
  // A span's microseconds in round 0 (cold) and the median of the others (warm).
  auto span = [&](const Rank& rk, const uint64_t* from, const uint64_t* to, double* cold) {
    *cold = us(rk, from[0], to[0]);
    std::vector<double> w;
    for (uint32_t i = 1; i < R; ++i) w.push_back(us(rk, from[i], to[i]));
    std::sort(w.begin(), w.end());
    return w.empty() ? -1.0 : w[(w.size() - 1) / 2];
  };
  for (const Rank& rk : ranks) {
    printf("gin-smoke: rank %d: GPU %d, NIC %s (dev %d), family %s, signals %s, %s\n", rk.rank, rk.gpu, rk.nic.c_str(),
           rk.dev, family_name(rk.family), rk.signal_mode == RUST_GIN_SIGNAL_MODE_WRITE ? "write" : "atomic",
           rk.n_dci ? "DC" : "RC");
    if (!rk.error.empty()) {
      printf("gin-smoke: FAIL rank %d: %s\n", rk.rank, rk.error.c_str());
      ++failures;
      if (!rk.ran) continue;
    }
    if (rk.has_error) {
      printf("gin-smoke: FAIL rank %d: queryLastError: %s\n", rk.rank, rk.dev_error.c_str());
      ++failures;
    }
  }
  for (const Rank& rk : ranks) {
    if (!rk.ran) continue;
    for (int p = 0; p < n; ++p) {
      const PeerRecord& s = rk.rec.peer[p];
      const Rank& to = ranks[p];
      const bool to_ok = to.ran;
      const PeerRecord& rv = to_ok ? to.rec.peer[rk.rank] : s;
      const bool ok = s.put_status == 0 && s.cqe_status == 0 && to_ok && rv.signal_status == 0 && rv.bad_bytes == 0;
      double posted, cqe;
      const double wposted = span(rk, s.put_begin, s.put_end, &posted), wcqe = span(rk, s.put_begin, s.put_cqe, &cqe);
      printf("gin-smoke: rank %d -> %d put+signal %llu B x%u: cold: posted %.2f us, CQE %.2f us", rk.rank, p,
             (unsigned long long)o.bytes, R, posted, cqe);
      if (R > 1) printf("; warm: posted %.2f us, CQE %.2f us", wposted, wcqe);
      printf(" | at rank %d: signals %s at +%.2f us of its kernel, bytes %s", p,
             to_ok && rv.signal_status == 0 ? "seen" : "NOT seen", to_ok ? us(to, to.rec.kernel_begin, rv.signal_seen) : -1.0,
             to_ok && rv.bad_bytes == 0 ? "ok" : "DIFFER");
      if (!ok) {
        printf(" -- FAIL (put %d, CQE %d, signal wait %d, %u bytes differ, first at %d)", s.put_status, s.cqe_status,
               to_ok ? rv.signal_status : -1, to_ok ? rv.bad_bytes : 0, to_ok ? (int)rv.first_bad : -1);
        ++failures;
      }
      printf("\n");
      if (kStageHooks && rk.family == RUST_GIN_FAMILY_MLX5 && rk.n_dci == 0) {
        // Cold (round 0) and the warm median of each stage's time from the call.
        auto at = [&](int st, uint32_t k) { return rk.hook[p][k][st] == UINT64_MAX ? -1.0 : rk.hook[p][k][st] * rk.tick_ns / 1000.0; };
        auto warm = [&](int st) {
          std::vector<double> w;
          for (uint32_t k = 1; k < R; ++k) w.push_back(at(st, k));
          std::sort(w.begin(), w.end());
          return w.empty() ? -1.0 : w[(w.size() - 1) / 2];
        };
        bool seen = true;
        for (uint32_t k = 0; k < R; ++k)
          for (int st = 0; st < 4; ++st) seen = seen && rk.hook[p][k][st] != UINT64_MAX;
        printf("gin-smoke: rank %d -> %d inside rust_gin_put (stage hooks), from the call: cold: reserve +%.2f us, "
               "WQE written +%.2f us, doorbell +%.2f us, CQE +%.2f us", rk.rank, p, at(0, 0), at(1, 0), at(2, 0), at(3, 0));
        if (R > 1)
          printf("; warm: reserve +%.2f us, WQE written +%.2f us, doorbell +%.2f us, CQE +%.2f us", warm(0), warm(1),
                 warm(2), warm(3));
        if (!seen) {
          printf(" -- FAIL (a stage hook was not seen for every round)");
          ++failures;
        }
        printf("\n");
      }
      if (s.staged_status == -1) {
        printf("gin-smoke: rank %d -> %d stages: NOT MEASURED (%s %s: the staged write uses mlx5 RC queues)\n", rk.rank,
               p, family_name(rk.family), rk.n_dci ? "DC" : "RC");
        continue;
      }
      const bool sok = s.staged_status == 0 && s.staged_signal_status == 0 && to_ok && rv.staged_wait_status == 0 &&
                       rv.staged_bad_bytes == 0;
      double wr, db, cq;
      const double wwr = span(rk, s.st_begin, s.st_written, &wr), wdb = span(rk, s.st_written, s.st_doorbell, &db),
                   wcq = span(rk, s.st_doorbell, s.st_cqe, &cq);
      printf("gin-smoke: rank %d -> %d stages (RDMA WRITE %llu B x%u): cold: reserve+WQE written %.2f us, doorbell %.2f us, "
             "CQE %.2f us", rk.rank, p, (unsigned long long)o.bytes, R, wr, db, cq);
      if (R > 1) printf("; warm: reserve+WQE written %.2f us, doorbell %.2f us, CQE %.2f us", wwr, wdb, wcq);
      printf(" | at rank %d: bytes %s", p, to_ok && rv.staged_bad_bytes == 0 && rv.staged_wait_status == 0 ? "ok" : "DIFFER");
      if (!sok) {
        printf(" -- FAIL (post %d, signal %d, wait %d, %u bytes differ)", s.staged_status, s.staged_signal_status,
               to_ok ? rv.staged_wait_status : -1, to_ok ? rv.staged_bad_bytes : 0);
        ++failures;
      }
      printf("\n");
    }
  }
  if (failures) {
    printf("gin-smoke: FAIL: %d check(s) failed\n", failures);
    return 1;
  }
  const bool staged = ranks[0].family == RUST_GIN_FAMILY_MLX5 && ranks[0].n_dci == 0;
  printf("gin-smoke: PASS: %d ranks (%s), %d puts with signals, %d staged writes, every byte checked\n", n,
         loopback ? (n > 1 ? "one GPU, NIC loopback" : "one rank to itself") : "across GPUs and NICs", n * n * R,
         staged ? n * n * R : 0);
  return 0;
}
