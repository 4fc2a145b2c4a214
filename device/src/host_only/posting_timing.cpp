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
// thread's CPU time per WQE. Printed: the best and the median round.
//
// Each round also times, just before, the two parts the posting is measured
// against (gin-perf's share of the store loop, split):
//   store loop   64-byte slots of a 2 MiB ring, eight 8-byte stores each
//                (after an untimed pass, as gin-perf's);
//   WQE writes   the list writer's loop alone (Family::batch, the loop
//                SendQueue::post_batches runs) into a fresh resident ring:
//                the same WQE bytes, no list check, ticket, publish or
//                doorbell;
// and prints each one's share of the store loop, the median of the rounds'
// ratios with their range. What lies between the writes' share and the
// posting's is the list check and the per-batch steps.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "rust_gin/abi/mlx5_queue.h"
#include "rust_gin/mlx5/sq.h"

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

// The store loop: CPU ns per 64-byte slot of one pass through `ring`. The
// counter is a local and the barrier is an empty asm, so that g++ emits the
// eight stores and nothing else (volatile stores, or a counter it must
// reload through the ring's aliasing, made it slower than the producer).
double store_pass(uint64_t* ring, size_t slots, uint64_t& next) {
  const double t = cpu_ns();
  uint64_t n = next;
  for (size_t i = 0; i < slots; ++i, ++n) {
    uint64_t* p = ring + ((n & (slots - 1)) << 3);
    p[0] = n, p[1] = n + 1, p[2] = n + 2, p[3] = n + 3, p[4] = n + 4, p[5] = n + 5, p[6] = n + 6, p[7] = n + 7;
    asm volatile("" ::: "memory");
  }
  next = n;
  return (cpu_ns() - t) / slots;
}

// Median, min and max of `v` in "m [lo-hi]" form, scaled by `k`.
void print_spread(const char* what, std::vector<double> v, double k) {
  std::sort(v.begin(), v.end());
  printf("%s %.0f %% [%.0f-%.0f %%]\n", what, k * v[v.size() / 2], k * v.front(), k * v.back());
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
  std::vector<double> ns, store_ns, write_ns, write_share, post_share;
  const size_t slots = size_t{1} << log;
  std::vector<uint64_t> store_ring(slots * 8);
  uint64_t store_next = 0;
  const size_t ring_bytes = size_t{64} << log;
  for (int r = 0; r < rounds; ++r) {
    store_pass(store_ring.data(), slots, store_next);
    const double store = store_pass(store_ring.data(), slots, store_next);
    store_ns.push_back(store);
    void* wring = aligned_alloc(4096, ring_bytes);  // the WQE writes alone
    void* wq = aligned_alloc(4096, ring_bytes);     // the posting
    void* cq = aligned_alloc(4096, ring_bytes);
    if (!wring || !wq || !cq) return 1;
    memset(cq, 0, ring_bytes);
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
    {
      // The WQE writes alone: the loop post_batches runs, with the writer
      // the list's kind picks, into a resident ring of their own.
      memset(wring, 0, ring_bytes);
      rust_gin_mlx5_sq wd = d;
      wd.wqe_buf = reinterpret_cast<uint64_t>(wring);
      const rust_gin::mlx5::SendQueue::Writer w = rust_gin::mlx5::SendQueue(&wd).writer();
      const uint8_t kind = static_cast<uint8_t>(rust_gin::mlx5::list_kind(reqs[0].opcode, reqs[0].flags));
      const double t = cpu_ns();
      for (uint64_t base = 0; base < per_round; base += batch) {
        w.batch(kind, [&](const auto& wr) {
          for (uint32_t i = 0; i < batch; ++i) {
            wr.wqe(base + i, reqs[i], (reqs[i].flags & rust_gin::queue::REQ_SIGNALED) != 0);
          }
        });
        asm volatile("" ::: "memory");
      }
      write_ns.push_back((cpu_ns() - t) / per_round);
      write_share.push_back(store / write_ns.back());
    }
    memset(wq, 0, ring_bytes);  // resident, as a long-lived ring is
    const double t = cpu_ns();
    for (uint32_t b = 0; b < per_round / batch; ++b) {
      const int s = rust_gin_mlx5_post(&d, reqs.data(), batch);
      if (s) {
        fprintf(stderr, "post failed: %d\n", s);
        return 1;
      }
    }
    ns.push_back((cpu_ns() - t) / per_round);
    post_share.push_back(store / ns.back());
    // The comparison means something only if both wrote the same WQEs: they
    // may differ in the CQE request of a batch's last WQE alone (the
    // posting's signalling period, SendQueue::end_wants_cqe).
    for (uint32_t i = 0; i < per_round; ++i) {
      unsigned char* a = static_cast<unsigned char*>(wring) + 64 * i;
      unsigned char* b = static_cast<unsigned char*>(wq) + 64 * i;
      if ((i + 1) % batch == 0) a[11] = b[11] = 0;  // fm_ce_se (mlx5_wqe_ctrl_seg)
      if (memcmp(a, b, 64) != 0) {
        fprintf(stderr, "WQE %u: the WQE writes alone differ from the posting's\n", i);
        return 1;
      }
    }
    free(wring);
    free(wq);
    free(cq);
  }
  const double med = median(ns);
  printf("EMULATED (x86-64 host build, stub hooks): batches of %u, %d rounds of %u WQEs, %lu doorbells\n", batch, rounds,
         per_round, static_cast<unsigned long>(g_doorbells));
  printf("  posting: best round %.2f ns CPU/WQE, median %.2f ns (%.1f M WQEs/s)\n", *std::min_element(ns.begin(), ns.end()),
         med, 1e3 / med);
  printf("  store loop: median pass %.2f ns per 64-byte slot; WQE writes alone: median round %.2f ns per WQE\n",
         median(store_ns), median(write_ns));
  print_spread("  share of the store loop, WQE writes alone:", write_share, 100);
  print_spread("  share of the store loop, posting:", post_share, 100);
  return 0;
}
