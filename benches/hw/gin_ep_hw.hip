// gin_ep_hw: expert-parallel dispatch and combine (the workload of gin-perf's -o ep-*) through
// RCCL's device API (ncclGin in a kernel), for whichever GIN backend the communicator gets:
// NCCL_GIN_TYPE=8 (rust-gin, device-initiated), 2 (RCCL's proxy over NCCL_RMA_PLUGIN=rust) or 6
// (rocSHMEM GDA, where RCCL was built with it). UNVERIFIED: written against the device API of the
// pinned RCCL revision (the one gin_perf_hw.hip uses); it has not been compiled against a patched
// RCCL or run (docs/benchmarks.md, "Expert-parallel dispatch and combine").
//
// N processes, one GPU each (RANK=0..N-1, NRANKS=N; rank 0 writes the unique id to
// $GIN_PERF_ID_FILE, the others wait for it). Every rank computes the same routing as gin-perf
// (host/bin/gin_perf/perf/ep/routing.rs: splitmix64, seeded top-k, tokens sent once per owning
// rank), so the layouts agree without an exchange:
//   receiver p keeps sender s's tokens at recv_off[p][s]..; sender r's combine results from p at
//   recv_slots + comb_off[r][p].. of its destination window.
// Low-latency mode: a warp per token copy (lane 0 posts one put); the warp that completes a peer's
// puts (a global atomic per peer) posts one strong signal adding count + 1. High-throughput mode:
// the copies packed per peer (once, before timing), puts of CHUNK tokens each carrying a weak
// signal adding its count (the last one plus one). Combine returns every received token the same
// way on signals N..2N-1. Each iteration is one kernel per phase (send, then CTA 0 waits for its N
// signals), timed with hipEvents; ranks align on a one-element all-reduce before each iteration,
// and rank 0 prints median and p99 of the slowest rank's time per iteration.
//
// Environment (defaults as gin-perf's): HIDDEN=7168 (bf16 elements) TOKENS=128 TOPK=8 EXPERTS=256
// MODE=ll|ht CHUNK=16 ROUTING=uniform|skewed SEED=28 ITERS=50 WARMUP=5.

#include <hip/hip_runtime.h>
#include <rccl/rccl.h>
#include <nccl_device.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
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

// ---- routing: the same as routing.rs ----------------------------------------------------------

struct Rng {
  uint64_t s;
  uint64_t next() {
    s += 0x9e3779b97f4a7c15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double unit() { return double(next() >> 11) / double(1ull << 53); }
};

constexpr int kHotExperts = 8;
constexpr double kHotWeight = 20.0;

struct Plan {
  int ranks, tokens;
  std::vector<std::vector<std::vector<uint32_t>>> sends;  // sends[r][p]: tokens r sends to p
  std::vector<std::vector<size_t>> recv_off, comb_off;
  size_t recv_slots = 0, comb_slots = 0;
};

static Plan route(int ranks, int tokens, int experts, int topk, bool hot, uint64_t seed) {
  Plan pl;
  pl.ranks = ranks;
  pl.tokens = tokens;
  const int per_rank = experts / ranks;
  auto weight = [&](int e) { return hot && e < kHotExperts ? kHotWeight : 1.0; };
  double total = 0;
  for (int e = 0; e < experts; ++e) total += weight(e);
  Rng rng{seed ^ (uint64_t(ranks) << 32) ^ uint64_t(tokens)};
  pl.sends.assign(ranks, std::vector<std::vector<uint32_t>>(ranks));
  std::vector<bool> chosen(experts);
  for (int r = 0; r < ranks; ++r) {
    for (int t = 0; t < tokens; ++t) {
      std::fill(chosen.begin(), chosen.end(), false);
      double left = total;
      for (int picked = 0; picked < topk; ++picked) {
        // Weighted draw without replacement; rounding past the end takes the last free expert.
        double x = rng.unit() * left;
        int e = -1;
        for (int i = 0; i < experts; ++i) {
          if (chosen[i]) continue;
          e = i;
          if (x < weight(i)) break;
          x -= weight(i);
        }
        chosen[e] = true;
        left -= weight(e);
      }
      int last = -1;
      for (int e = 0; e < experts; ++e)
        if (chosen[e] && e / per_rank != last) {
          last = e / per_rank;
          pl.sends[r][last].push_back(t);
        }
    }
  }
  pl.recv_off.assign(ranks, std::vector<size_t>(ranks));
  pl.comb_off.assign(ranks, std::vector<size_t>(ranks));
  for (int p = 0; p < ranks; ++p) {
    size_t acc = 0;
    for (int s = 0; s < ranks; ++s) pl.recv_off[p][s] = acc, acc += pl.sends[s][p].size();
    pl.recv_slots = std::max(pl.recv_slots, acc);
  }
  for (int r = 0; r < ranks; ++r) {
    size_t acc = 0;
    for (int p = 0; p < ranks; ++p) pl.comb_off[r][p] = acc, acc += pl.sends[r][p].size();
    pl.comb_slots = std::max(pl.comb_slots, acc);
  }
  return pl;
}

// ---- kernels ----------------------------------------------------------------------------------

// One put: from the source (0) or destination (1) window at src_off to the peer's destination
// window at dst_off. sig_add != 0 on a high-throughput chunk: a weak signal adding it rides along.
struct Op {
  int peer;
  int src_win;
  uint64_t src_off, dst_off, bytes;
  uint32_t sig_add;
};

// Sends one phase: warp w posts ops w, w + warps, ... (lane 0); with per_peer_signal (low latency),
// the warp completing peer p's `count[p]` puts adds count[p] + 1 to p's signal sig_base + rank.
// Peers without a token (count[p] == 0) are signalled by CTA 0. Then CTA 0 waits for its own
// signals sig_base + s to reach expect[s].
__global__ void phase(ncclDevComm comm, ncclWindow_t swin, ncclWindow_t dwin, const Op* ops, int nops,
                      const uint32_t* count, uint32_t* done, int per_peer_signal, int sig_base,
                      const uint64_t* expect) {
  ncclGin gin{comm, 0};
  const int lane = threadIdx.x % warpSize;
  const int warps = gridDim.x * (blockDim.x / warpSize);
  const int warp = blockIdx.x * (blockDim.x / warpSize) + threadIdx.x / warpSize;
  const int me = comm.rank;
  const int n = comm.nRanks;
  for (int i = warp; i < nops; i += warps) {
    if (lane != 0) continue;
    const Op o = ops[i];
    ncclWindow_t src = o.src_win ? dwin : swin;
    if (o.sig_add)
      gin.put(ncclTeamWorld(comm), o.peer, dwin, o.dst_off, src, o.src_off, o.bytes,
              ncclGin_WeakSignalAdd{ncclGinSignal_t(sig_base + me), o.sig_add});
    else
      gin.put(ncclTeamWorld(comm), o.peer, dwin, o.dst_off, src, o.src_off, o.bytes, ncclGin_None{});
    if (per_peer_signal) {
      __threadfence();
      if (atomicAdd(&done[o.peer], 1u) + 1 == count[o.peer])
        gin.signal(ncclTeamWorld(comm), o.peer, ncclGin_StrongSignalAdd{ncclGinSignal_t(sig_base + me), count[o.peer] + 1ull});
    }
  }
  if (blockIdx.x == 0) {
    for (int p = threadIdx.x; p < n; p += blockDim.x)
      if (count[p] == 0) gin.signal(ncclTeamWorld(comm), p, ncclGin_StrongSignalAdd{ncclGinSignal_t(sig_base + me), 1ull});
    __syncthreads();
    for (int s = threadIdx.x; s < n; s += blockDim.x) gin.waitSignal(ncclCoopThread(), sig_base + s, expect[s]);
  }
  gin.flush(ncclCoopThread());
}

// Token t of rank r: its first 8 bytes say who it is, the rest stays as filled.
__global__ void fill(uint64_t* src, int tokens, size_t words_per_token, int rank) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < tokens * words_per_token; i += gridDim.x * size_t(blockDim.x)) {
    const size_t t = i / words_per_token, w = i % words_per_token;
    src[i] = w == 0 ? (0x5eed000000000000ull ^ (uint64_t(rank) << 16) ^ t) : (uint64_t(rank) << 40 | t << 16 | w);
  }
}

static int env_int(const char* name, int dflt) {
  const char* v = getenv(name);
  return v ? atoi(v) : dflt;
}

int main() {
  const char* rank_s = getenv("RANK");
  const char* id_file = getenv("GIN_PERF_ID_FILE");
  if (!rank_s || !id_file || !getenv("NRANKS")) {
    fprintf(stderr, "set RANK=0..N-1, NRANKS=N and GIN_PERF_ID_FILE=<shared path>\n");
    return 2;
  }
  const int rank = atoi(rank_s), n = env_int("NRANKS", 0);
  const int hidden = env_int("HIDDEN", 7168), tokens = env_int("TOKENS", 128), topk = env_int("TOPK", 8);
  const int experts = env_int("EXPERTS", 256), chunk = env_int("CHUNK", 16);
  const int iters = env_int("ITERS", 50), warmup = env_int("WARMUP", 5);
  const bool ht = getenv("MODE") && std::string(getenv("MODE")) == "ht";
  const bool hot = getenv("ROUTING") && std::string(getenv("ROUTING")) == "skewed";
  const uint64_t seed = getenv("SEED") ? strtoull(getenv("SEED"), nullptr, 10) : 28;
  if (n < 2 || rank < 0 || rank >= n || experts % n || topk < 1 || topk > experts || hidden % 4 || hidden < 4 ||
      tokens < 1 || chunk < 1 || iters < 1) {
    fprintf(stderr, "bad settings: NRANKS=%d RANK=%d EXPERTS=%d TOPK=%d HIDDEN=%d TOKENS=%d CHUNK=%d ITERS=%d\n", n, rank,
            experts, topk, hidden, tokens, chunk, iters);
    return 2;
  }
  const size_t h = 2 * size_t(hidden);
  const Plan pl = route(n, tokens, experts, topk, hot, seed);

  HIPCHECK(hipSetDevice(0));
  ncclUniqueId id;
  if (rank == 0) {
    NCCLCHECK(ncclGetUniqueId(&id));
    std::ofstream(id_file, std::ios::binary).write(reinterpret_cast<char*>(&id), sizeof id);
  } else {
    for (int tries = 0;; ++tries) {
      std::ifstream f(id_file, std::ios::binary);
      if (f.read(reinterpret_cast<char*>(&id), sizeof id)) break;
      if (tries > 1200) {
        fprintf(stderr, "rank %d: no unique id in %s after 60 s\n", rank, id_file);
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));

  const size_t src_bytes = (tokens + (ht ? pl.comb_slots : 0)) * h;
  const size_t dst_bytes = (pl.recv_slots + pl.comb_slots) * h;
  void *sbuf, *dbuf;
  NCCLCHECK(ncclMemAlloc(&sbuf, src_bytes));
  NCCLCHECK(ncclMemAlloc(&dbuf, dst_bytes));
  ncclWindow_t swin, dwin;
  NCCLCHECK(ncclCommWindowRegister(comm, sbuf, src_bytes, &swin, NCCL_WIN_COLL_SYMMETRIC));
  NCCLCHECK(ncclCommWindowRegister(comm, dbuf, dst_bytes, &dwin, NCCL_WIN_COLL_SYMMETRIC));
  ncclDevComm dev;
  ncclDevCommRequirements reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
  reqs.ginSignalCount = 2 * n;
  reqs.ginConnectionType = NCCL_GIN_CONNECTION_FULL;
  NCCLCHECK(ncclDevCommCreate(comm, &reqs, &dev));
  (void)hipGetLastError();

  hipLaunchKernelGGL(fill, 256, 256, 0, 0, static_cast<uint64_t*>(sbuf), tokens, h / 8, rank);
  // High-throughput: the copies packed per peer once, before timing (a GPU copy, not the network's).
  if (ht)
    for (int p = 0; p < n; ++p)
      for (size_t j = 0; j < pl.sends[rank][p].size(); ++j)
        HIPCHECK(hipMemcpy(static_cast<char*>(sbuf) + (tokens + pl.comb_off[rank][p] + j) * h,
                           static_cast<char*>(sbuf) + pl.sends[rank][p][j] * h, h, hipMemcpyDeviceToDevice));

  // The two phases' operations, counts per peer and (cumulative) signal targets.
  auto build = [&](bool combine, std::vector<Op>& ops, std::vector<uint32_t>& count) {
    count.assign(n, 0);
    for (int i = 1; i <= n; ++i) {
      const int q = (rank + i) % n;
      const size_t c = combine ? pl.sends[q][rank].size() : pl.sends[rank][q].size();
      auto src = [&](size_t j) -> std::pair<int, uint64_t> {
        if (combine) return {1, (pl.recv_off[rank][q] + j) * h};
        if (ht) return {0, (tokens + pl.comb_off[rank][q] + j) * h};
        return {0, uint64_t(pl.sends[rank][q][j]) * h};
      };
      auto dst = [&](size_t j) -> uint64_t {
        return combine ? (pl.recv_slots + pl.comb_off[q][rank] + j) * h : (pl.recv_off[q][rank] + j) * h;
      };
      if (!ht) {
        count[q] = uint32_t(c);
        for (size_t j = 0; j < c; ++j) ops.push_back({q, src(j).first, src(j).second, dst(j), h, 0});
      } else {
        for (size_t j = 0; j < c; j += chunk) {
          const size_t k = std::min<size_t>(chunk, c - j);
          ops.push_back({q, src(j).first, src(j).second, dst(j), k * h, uint32_t(k + (j + k == c))});
        }
        count[q] = c ? 1 : 0;  // only "no token" matters to the kernel in this mode
      }
    }
  };
  std::vector<Op> ops[2];
  std::vector<uint32_t> count[2];
  std::vector<uint64_t> step[2] = {std::vector<uint64_t>(n), std::vector<uint64_t>(n)};  // added to signal s per phase
  for (int c = 0; c < 2; ++c) {
    build(c == 1, ops[c], count[c]);
    for (int s = 0; s < n; ++s) step[c][s] = (c ? pl.sends[rank][s].size() : pl.sends[s][rank].size()) + 1;
  }
  Op* d_ops[2];
  uint32_t *d_count[2], *d_done;
  uint64_t* d_expect;
  for (int c = 0; c < 2; ++c) {
    HIPCHECK(hipMalloc(&d_ops[c], std::max<size_t>(1, ops[c].size()) * sizeof(Op)));
    HIPCHECK(hipMemcpy(d_ops[c], ops[c].data(), ops[c].size() * sizeof(Op), hipMemcpyHostToDevice));
    HIPCHECK(hipMalloc(&d_count[c], n * sizeof(uint32_t)));
    HIPCHECK(hipMemcpy(d_count[c], count[c].data(), n * sizeof(uint32_t), hipMemcpyHostToDevice));
  }
  HIPCHECK(hipMalloc(&d_done, n * sizeof(uint32_t)));
  HIPCHECK(hipMalloc(&d_expect, n * sizeof(uint64_t)));
  float* d_sync;
  HIPCHECK(hipMalloc(&d_sync, sizeof(float)));
  HIPCHECK(hipMemset(d_sync, 0, sizeof(float)));
  std::vector<float> times[2];
  std::vector<uint64_t> expect[2]{std::vector<uint64_t>(n), std::vector<uint64_t>(n)};
  hipEvent_t a, b;
  HIPCHECK(hipEventCreate(&a));
  HIPCHECK(hipEventCreate(&b));
  const int ctas = 32, threads = 256;
  for (int it = 0; it < warmup + iters; ++it) {
    for (int c = 0; c < 2; ++c) {
      NCCLCHECK(ncclAllReduce(d_sync, d_sync, 1, ncclFloat, ncclSum, comm, 0));  // align the ranks
      for (int s = 0; s < n; ++s) expect[c][s] += step[c][s];
      HIPCHECK(hipMemcpy(d_expect, expect[c].data(), n * sizeof(uint64_t), hipMemcpyHostToDevice));
      HIPCHECK(hipMemset(d_done, 0, n * sizeof(uint32_t)));
      HIPCHECK(hipEventRecord(a));
      hipLaunchKernelGGL(phase, ctas, threads, 0, 0, dev, swin, dwin, d_ops[c], int(ops[c].size()), d_count[c], d_done,
                         ht ? 0 : 1, c * n, d_expect);
      HIPCHECK(hipEventRecord(b));
      HIPCHECK(hipEventSynchronize(b));
      float ms = 0;
      HIPCHECK(hipEventElapsedTime(&ms, a, b));
      if (it >= warmup) times[c].push_back(ms * 1000.0f);
    }
  }
  // The slowest rank's time per iteration, then median and p99 over iterations.
  float* d_t;
  HIPCHECK(hipMalloc(&d_t, iters * sizeof(float)));
  for (int c = 0; c < 2; ++c) {
    HIPCHECK(hipMemcpy(d_t, times[c].data(), iters * sizeof(float), hipMemcpyHostToDevice));
    NCCLCHECK(ncclAllReduce(d_t, d_t, iters, ncclFloat, ncclMax, comm, 0));
    HIPCHECK(hipStreamSynchronize(0));
    HIPCHECK(hipMemcpy(times[c].data(), d_t, iters * sizeof(float), hipMemcpyDeviceToHost));
    std::sort(times[c].begin(), times[c].end());
  }
  // Every received token's first word names its sender and token; every combined one is ours.
  std::vector<uint64_t> got(dst_bytes / 8);
  HIPCHECK(hipMemcpy(got.data(), dbuf, dst_bytes, hipMemcpyDeviceToHost));
  long bad = 0;
  for (int s = 0; s < n; ++s)
    for (size_t j = 0; j < pl.sends[s][rank].size(); ++j) {
      bad += got[(pl.recv_off[rank][s] + j) * h / 8] != (0x5eed000000000000ull ^ (uint64_t(s) << 16) ^ pl.sends[s][rank][j]);
      bad += got[(pl.recv_slots + pl.comb_off[rank][s] + j) * h / 8] !=
             (0x5eed000000000000ull ^ (uint64_t(rank) << 16) ^ pl.sends[rank][s][j]);
    }
  if (bad) fprintf(stderr, "rank %d: %ld token copies hold the wrong stamp\n", rank, bad);
  if (rank == 0) {
    size_t copies = 0;
    for (auto& row : pl.sends)
      for (auto& v : row) copies += v.size();
    printf("gin_type,mode,routing,ranks,tokens,hidden,copies,dispatch_median_us,dispatch_p99_us,combine_median_us,combine_p99_us\n");
    const char* type = getenv("NCCL_GIN_TYPE");
    printf("%s,%s,%s,%d,%d,%d,%zu,%.1f,%.1f,%.1f,%.1f\n", type ? type : "default", ht ? "ht" : "ll",
           hot ? "skewed" : "uniform", n, tokens, hidden, copies, times[0][iters / 2], times[0][iters * 99 / 100],
           times[1][iters / 2], times[1][iters * 99 / 100]);
  }
  NCCLCHECK(ncclDevCommDestroy(comm, &dev));
  NCCLCHECK(ncclCommWindowDeregister(comm, swin));
  NCCLCHECK(ncclCommWindowDeregister(comm, dwin));
  NCCLCHECK(ncclMemFree(sbuf));
  NCCLCHECK(ncclMemFree(dbuf));
  NCCLCHECK(ncclCommFinalize(comm));
  NCCLCHECK(ncclCommDestroy(comm));
  return bad ? 1 : 0;
}
