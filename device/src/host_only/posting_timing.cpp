// Standalone timing of the host build's producer (rust_gin_mlx5_post) with
// nothing else in the process: no Rust crate, no emulated NIC (its hooks are
// stubs that count), so a change to the device code can be timed in seconds
// without a cargo build. Not part of the crate's build. docs/performance.md,
// "Posting core", says what its figures were. EMULATED: x86-64, not a GPU.
//
//   g++ -std=c++17 -O2 -fPIC -x c++ -Idevice/include device/src/rust_gin_device.hip
//       device/src/host_only/lockstep.cpp device/src/host_only/posting_timing.cpp -o /tmp/posting_timing
//   (one command line; -O2 -fPIC as the crate's build compiles the device code)
//   /tmp/posting_timing [rounds=20] [batch=64]
//
// Each round posts 32,000 WQEs (8-byte WRITEs, `batch` per post) into a fresh
// 2^15-WQEBB queue whose ring was written beforehand (resident); per round the
// thread's CPU time per WQE. Printed: the best and the median round. The
// ceiling to compare with is gin-perf's store loop (same clock, same run);
// a C++ loop of volatile stores is no ceiling (g++ makes it slower than that).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "rust_gin/abi/mlx5_queue.h"

extern "C" int rust_gin_mlx5_post(const rust_gin_mlx5_sq* sq, const rust_gin_mlx5_request* reqs, uint32_t n);

extern "C" uint64_t rust_gin_host_clock_ns(void) {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}
extern "C" void rust_gin_host_doorbell_unowned(volatile uint64_t*, uint64_t) {}
// Parking (host/park.rs): never reached while posting into fresh rings, but
// the waits that could park are linked in.
extern "C" uint32_t rust_gin_host_park_begin(const volatile void*) { return 0; }
extern "C" void rust_gin_host_park_end(uint32_t, uint64_t) {}

namespace {

uint64_t g_doorbells = 0;
void ring(const void*, volatile uint64_t* reg, uint64_t value) {
  *reg = value;
  ++g_doorbells;
}
void record(const void*, volatile uint32_t*, uint32_t) {}

double cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 20;
  const uint32_t batch = argc > 2 ? static_cast<uint32_t>(atoi(argv[2])) : 64;
  const uint32_t log = 15, per_round = 32000 / batch * batch;
  if (rounds < 1 || batch < 1 || batch > (1u << log) / 4) {
    fprintf(stderr, "usage: %s [rounds >= 1] [batch 1..%u]\n", argv[0], (1u << log) / 4);
    return 2;
  }
  rust_gin_host_doorbell hooks = {ring, record, nullptr};
  std::vector<rust_gin_mlx5_request> reqs(batch);
  for (uint32_t i = 0; i < batch; ++i) {
    reqs[i] = rust_gin_mlx5_request{};
    reqs[i].opcode = 0x08;  // RDMA WRITE
    reqs[i].length = 8;
    reqs[i].lkey = 1;
    reqs[i].rkey = 2;
    reqs[i].laddr = 64 + 64 * i;
    reqs[i].raddr = 1 << 20;
  }
  std::vector<double> ns;
  for (int r = 0; r < rounds; ++r) {
    void* wq = aligned_alloc(4096, size_t{64} << log);
    void* cq = aligned_alloc(4096, size_t{64} << log);
    if (!wq || !cq) return 1;
    memset(wq, 0, size_t{64} << log);  // resident, as a long-lived ring is
    memset(cq, 0, size_t{64} << log);
    uint32_t dbr[2] = {0, 0}, cq_dbr[2] = {0, 0};
    uint64_t db = 0;
    static rust_gin_mlx5_sq_state st;
    static unsigned char err[256];
    memset(&st, 0, sizeof st);
    memset(err, 0, sizeof err);
    rust_gin_mlx5_sq d;
    memset(&d, 0, sizeof d);
    d.wqe_buf = reinterpret_cast<uint64_t>(wq);
    d.dbrec = reinterpret_cast<uint64_t>(dbr);
    d.uar_db = reinterpret_cast<uint64_t>(&db);
    d.cq_buf = reinterpret_cast<uint64_t>(cq);
    d.cq_dbrec = reinterpret_cast<uint64_t>(cq_dbr);
    d.state = reinterpret_cast<uint64_t>(&st);
    d.error = reinterpret_cast<uint64_t>(err);
    d.qpn = 0x42;
    d.log_wqe_cnt = log;
    d.log_cq_cnt = log;
    d.log_signal_period = log - 2;
    d.timeout_ns = 1000000000;
    d.host_doorbell = reinterpret_cast<uint64_t>(&hooks);
    const double t = cpu_ns();
    for (uint32_t b = 0; b < per_round / batch; ++b) {
      const int s = rust_gin_mlx5_post(&d, reqs.data(), batch);
      if (s) {
        fprintf(stderr, "post failed: %d\n", s);
        return 1;
      }
    }
    ns.push_back((cpu_ns() - t) / per_round);
    free(wq);
    free(cq);
  }
  const double med = median(ns);
  printf("EMULATED (x86-64 host build, stub hooks): batches of %u, %d rounds of %u WQEs, %lu doorbells\n", batch, rounds,
         per_round, static_cast<unsigned long>(g_doorbells));
  printf("  posting: best round %.2f ns CPU/WQE, median %.2f ns (%.1f M WQEs/s)\n", *std::min_element(ns.begin(), ns.end()),
         med, 1e3 / med);
  return 0;
}
