// gin_perf_hw: the gin-perf figures measured through RCCL's device API on
// real hardware (MI300X/MI355X + ConnectX-7), for GIN type 8 (rust-gin) and
// type 2 (RCCL's proxy over NCCL_RMA_PLUGIN=rust). UNVERIFIED: written
// against the device API of the pinned RCCL revision and NCCL's published
// device-API examples; it has not been compiled against a patched RCCL or
// run (docs/benchmarks.md has the exact commands).
//
// Two processes (ranks 0 and 1), one GPU each. Rank 0 writes the unique id
// to $GIN_PERF_ID_FILE; rank 1 waits for it. Set RANK=0|1.
//
// Measured, per message size:
//   latency    put + signal ping-pong, one thread (median and p99 RTT, wall clock)
//   bandwidth  one CTA streams puts, then flush (hipEvent timing)
//   rate       8-byte puts from every thread of 16 CTAs (one signal, weak)

#include <hip/hip_runtime.h>
#include <rccl/rccl.h>
#include <nccl_device.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <vector>

#define HIPCHECK(x)                                                                    \
  do {                                                                                 \
    hipError_t e_ = (x);                                                               \
    if (e_ != hipSuccess) {                                                            \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, hipGetErrorString(e_)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)
#define NCCLCHECK(x)                                                                      \
  do {                                                                                    \
    ncclResult_t r_ = (x);                                                                \
    if (r_ != ncclSuccess) {                                                              \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_)); \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

constexpr int kIters = 1000;
constexpr int kWarmup = 100;
constexpr int kRateCtas = 16;
constexpr int kRateThreads = 256;

// Ping-pong: rank 0 puts+signals, rank 1 waits and answers. RTTs in wall-clock ticks.
__global__ void pingpong(ncclDevComm comm, ncclWindow_t src, ncclWindow_t dst, size_t bytes, int iters,
                         uint64_t* rtt_ticks) {
  if (threadIdx.x != 0) return;
  ncclGin gin{comm, 0};
  const int peer = 1 - comm.rank;
  const uint64_t base = gin.readSignal(0);
  for (int k = 1; k <= iters; ++k) {
    if (comm.rank == 0) {
      const uint64_t t0 = wall_clock64();
      gin.put(ncclTeamWorld(comm), peer, dst, 0, src, 0, bytes, ncclGin_StrongSignalInc{0});
      gin.waitSignal(ncclCoopThread(), 0, base + k);
      rtt_ticks[k - 1] = wall_clock64() - t0;
    } else {
      gin.waitSignal(ncclCoopThread(), 0, base + k);
      gin.put(ncclTeamWorld(comm), peer, dst, 0, src, 0, bytes, ncclGin_StrongSignalInc{0});
    }
  }
  gin.flush(ncclCoopThread());
}

// Stream: one thread posts `count` puts of `bytes` to rank 1, then flushes.
__global__ void stream(ncclDevComm comm, ncclWindow_t src, ncclWindow_t dst, size_t bytes, int count) {
  if (comm.rank != 0 || threadIdx.x != 0) return;
  ncclGin gin{comm, 0};
  for (int i = 0; i < count; ++i) gin.put(ncclTeamWorld(comm), 1, dst, 0, src, 0, bytes, ncclGin_None{});
  gin.flush(ncclCoopThread());
}

// Rate: every thread of every CTA posts 8-byte puts (wave-aggregated by rust-gin).
__global__ void rate(ncclDevComm comm, ncclWindow_t src, ncclWindow_t dst, int per_thread) {
  if (comm.rank != 0) return;
  ncclGin gin{comm, 0};
  const size_t off = 8 * (blockIdx.x * blockDim.x + threadIdx.x);
  for (int i = 0; i < per_thread; ++i) gin.put(ncclTeamWorld(comm), 1, dst, off, src, off, 8, ncclGin_None{});
  gin.flush(ncclCoopCta());
}

int main() {
  const char* rank_s = getenv("RANK");
  const char* id_file = getenv("GIN_PERF_ID_FILE");
  if (!rank_s || !id_file) {
    fprintf(stderr, "set RANK=0|1 and GIN_PERF_ID_FILE=<shared path>\n");
    return 2;
  }
  const int rank = atoi(rank_s);
  HIPCHECK(hipSetDevice(0));
  ncclUniqueId id;
  if (rank == 0) {
    NCCLCHECK(ncclGetUniqueId(&id));
    std::ofstream(id_file, std::ios::binary).write(reinterpret_cast<char*>(&id), sizeof id);
  } else {
    for (;;) {
      std::ifstream f(id_file, std::ios::binary);
      if (f.read(reinterpret_cast<char*>(&id), sizeof id)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, 2, id, rank));

  const size_t max_bytes = 16 << 20;
  void *sbuf, *dbuf;
  NCCLCHECK(ncclMemAlloc(&sbuf, max_bytes));
  NCCLCHECK(ncclMemAlloc(&dbuf, max_bytes));
  ncclWindow_t swin, dwin;
  NCCLCHECK(ncclCommWindowRegister(comm, sbuf, max_bytes, &swin, NCCL_WIN_COLL_SYMMETRIC));
  NCCLCHECK(ncclCommWindowRegister(comm, dbuf, max_bytes, &dwin, NCCL_WIN_COLL_SYMMETRIC));
  ncclDevComm dev;
  ncclDevCommRequirements reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
  reqs.ginSignalCount = 1;
  reqs.ginConnectionType = NCCL_GIN_CONNECTION_FULL;
  NCCLCHECK(ncclDevCommCreate(comm, &reqs, &dev));

  int wall_khz = 0;
  HIPCHECK(hipDeviceGetAttribute(&wall_khz, hipDeviceAttributeWallClockRate, 0));
  uint64_t* rtts;
  HIPCHECK(hipMalloc(&rtts, sizeof(uint64_t) * (kIters + kWarmup)));
  hipEvent_t a, b;
  HIPCHECK(hipEventCreate(&a));
  HIPCHECK(hipEventCreate(&b));
  if (rank == 0) printf("bytes,rtt_median_us,rtt_p99_us,bandwidth_gbs\n");
  for (size_t bytes = 8; bytes <= max_bytes; bytes *= 2) {
    hipLaunchKernelGGL(pingpong, 1, 64, 0, 0, dev, swin, dwin, bytes, kIters + kWarmup, rtts);
    HIPCHECK(hipDeviceSynchronize());
    const int count = static_cast<int>(std::max<size_t>(16, (64u << 20) / bytes));
    HIPCHECK(hipEventRecord(a));
    hipLaunchKernelGGL(stream, 1, 64, 0, 0, dev, swin, dwin, bytes, count);
    HIPCHECK(hipEventRecord(b));
    HIPCHECK(hipEventSynchronize(b));
    float ms = 0;
    HIPCHECK(hipEventElapsedTime(&ms, a, b));
    if (rank == 0) {
      std::vector<uint64_t> h(kIters + kWarmup);
      HIPCHECK(hipMemcpy(h.data(), rtts, h.size() * sizeof(uint64_t), hipMemcpyDeviceToHost));
      std::vector<double> us(h.begin() + kWarmup, h.end());
      for (double& x : us) x = x * 1000.0 / wall_khz;
      std::sort(us.begin(), us.end());
      printf("%zu,%.2f,%.2f,%.3f\n", bytes, us[us.size() / 2], us[us.size() * 99 / 100],
             bytes * double(count) / (ms * 1e6));
    }
  }
  const int per_thread = 64;
  HIPCHECK(hipEventRecord(a));
  hipLaunchKernelGGL(rate, kRateCtas, kRateThreads, 0, 0, dev, swin, dwin, per_thread);
  HIPCHECK(hipEventRecord(b));
  HIPCHECK(hipEventSynchronize(b));
  float ms = 0;
  HIPCHECK(hipEventElapsedTime(&ms, a, b));
  if (rank == 0) printf("message_rate_mops,%.2f\n", double(kRateCtas) * kRateThreads * per_thread / (ms * 1e3));

  NCCLCHECK(ncclDevCommDestroy(comm, &dev));
  NCCLCHECK(ncclCommWindowDeregister(comm, swin));
  NCCLCHECK(ncclCommWindowDeregister(comm, dwin));
  NCCLCHECK(ncclMemFree(sbuf));
  NCCLCHECK(ncclMemFree(dbuf));
  NCCLCHECK(ncclCommFinalize(comm));
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}
