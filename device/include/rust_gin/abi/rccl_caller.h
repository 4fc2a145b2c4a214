/* RCCL's generic GIN device code, run over rust-gin on the CPU (host build
 * only): what a test fills to play RCCL's side. The code is
 * device/src/host_only/rccl_caller/, a restatement of the pinned RCCL's
 * nccl_device/impl/gin__funcs.h as patch 0004 leaves it, calling the patch's
 * own ncclGinApi_* specialisations (gin_rust.h, taken from the patch at build
 * time). Each rust_gin_rccl_* function is one ncclGin method; every thread of
 * the coop calls it, as in a kernel. Layouts only: no C++ here. */
#ifndef RUST_GIN_ABI_RCCL_CALLER_H
#define RUST_GIN_ABI_RCCL_CALLER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ncclDevComm fields gin__funcs.h reads, for one GIN connection. */
typedef struct rust_gin_rccl_comm {
  int32_t rank;
  int32_t n_ranks;
  uint32_t* abort_flag;         /* comm.abortFlag */
  void* gin_handle;             /* comm.ginHandles[0]: ncclNetDeviceHandle.handle of createContext */
  uint32_t gin_backend;         /* comm.ginNetDeviceTypes[0] (8: rust-gin) */
  uint32_t signal_count;        /* comm.ginSignalCount */
  uint64_t* signal_shadows;     /* comm.ginSignalShadows: contexts x signal_count words */
  uint32_t strong_legacy_signals; /* comm.ginStrongLegacySignals */
  /* The ncclGin's resourceSharingMode (NCCL_GIN_RESOURCE_SHARING_*): RCCL
   * keeps it per ncclGin instance, the harness per comm. */
  uint32_t resource_sharing;
} rust_gin_rccl_comm;

/* The ncclWindow_vidmem fields gin__funcs.h reads (one segment, backend 0). */
typedef struct rust_gin_rccl_window {
  const void* gin_win;   /* ginWinsDefaultBackend[connectionId]: the regMrSym handle */
  uint64_t gin_offset_4k; /* ginOffset4K: where this window starts in the GIN registration, in 4 KiB */
  void* local;           /* what ncclGetLocalPointer(win, 0) returns */
} rust_gin_rccl_window;

enum {
  RUST_GIN_RCCL_COOP_THREAD = 0,    /* ncclCoopThread: each thread alone */
  RUST_GIN_RCCL_COOP_WAVE = 1,      /* ncclCoopWarp: the 64 lanes of a wave */
  RUST_GIN_RCCL_COOP_WORKGROUP = 2, /* ncclCoopCta: several waves */
};

/* A coop as one of its threads sees it. */
typedef struct rust_gin_rccl_coop {
  uint32_t kind;
  uint32_t rank;  /* coop.thread_rank() */
  uint32_t size;  /* coop.size() */
  uint32_t pad;
  void* group;    /* WORKGROUP: from rust_gin_rccl_group_new (a barrier across its waves) */
} rust_gin_rccl_coop;

/* The remote action of a put, putValue or signal (ncclGin_SignalInc,
 * _SignalAdd, their Strong/Weak forms and the VA ones). */
enum {
  RUST_GIN_RCCL_ACTION_NONE = 0,
  RUST_GIN_RCCL_ACTION_SIGNAL_INC = 1,
  RUST_GIN_RCCL_ACTION_SIGNAL_ADD = 2,
  RUST_GIN_RCCL_ACTION_VA_SIGNAL_INC = 3,
  RUST_GIN_RCCL_ACTION_VA_SIGNAL_ADD = 4,
};
enum {
  RUST_GIN_RCCL_STRENGTH_LEGACY = 0, /* isStrong = comm.ginStrongLegacySignals */
  RUST_GIN_RCCL_STRENGTH_STRONG = 1,
  RUST_GIN_RCCL_STRENGTH_WEAK = 2,
};
typedef struct rust_gin_rccl_action {
  uint32_t kind;
  uint32_t strength;
  uint32_t signal;                         /* indexed signal id */
  uint32_t pad;
  uint64_t value;                          /* SignalAdd's value */
  const rust_gin_rccl_window* va_window;   /* VA signals */
  uint64_t va_offset;
} rust_gin_rccl_action;

/* What an rust_gin_rccl_* wait returns besides ncclResult_t values: RCCL's
 * loop left through the abort flag (it returns ncclSuccess to RCCL; the
 * harness tells the test, which names the wait that never ended). */
#define RUST_GIN_RCCL_LEFT_BY_ABORT 1000

/* A barrier across the waves of one workgroup coop. */
void* rust_gin_rccl_group_new(uint32_t waves);
void rust_gin_rccl_group_free(void* group);

/* One ncclGin method each; `context` is the contextIndex of ncclGin's
 * constructor. `counter` < 0: no local action (else ncclGin_CounterInc).
 * `timeout_cycles` == UINT64_MAX: the overload without a timeout. */
void rust_gin_rccl_put(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop coop, int32_t peer,
                       const rust_gin_rccl_window* dst, uint64_t dst_off, const rust_gin_rccl_window* src,
                       uint64_t src_off, uint64_t bytes, rust_gin_rccl_action remote, int32_t counter,
                       uint32_t opt_flags);
void rust_gin_rccl_put_value(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop coop, int32_t peer,
                             const rust_gin_rccl_window* dst, uint64_t dst_off, uint64_t value, uint32_t size,
                             rust_gin_rccl_action remote);
void rust_gin_rccl_signal(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop coop, int32_t peer,
                          rust_gin_rccl_action remote);
/* ncclGinBarrierSession::sync over the world, signals signal0 + index * nRanks;
 * `contexts` 0: bound to `context`; k: ncclGinAllContexts over k contexts;
 * `fence`: RUST_GIN_RCCL_FENCE_* bits (ncclGinFenceLevel). */
enum { RUST_GIN_RCCL_FENCE_PUT = 1, RUST_GIN_RCCL_FENCE_GET = 2 };
int rust_gin_rccl_gin_barrier(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop coop,
                              uint32_t signal0, uint32_t index, uint32_t contexts, uint32_t fence);
void rust_gin_rccl_get(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop coop, int32_t peer,
                       const rust_gin_rccl_window* remote, uint64_t remote_off, const rust_gin_rccl_window* local,
                       uint64_t local_off, uint64_t bytes);
int rust_gin_rccl_flush(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop coop,
                        uint64_t timeout_cycles);
void rust_gin_rccl_flush_async(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop coop, int32_t peer,
                               uint64_t request[2]);
int rust_gin_rccl_wait(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop coop, uint64_t request[2],
                       uint64_t timeout_cycles);
uint64_t rust_gin_rccl_read_signal(const rust_gin_rccl_comm* comm, uint32_t context, uint32_t signal, int32_t bits);
uint64_t rust_gin_rccl_read_va_signal(const rust_gin_rccl_comm* comm, uint32_t context,
                                      const rust_gin_rccl_window* window, uint64_t offset, int32_t bits);
int rust_gin_rccl_wait_signal(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop coop,
                              uint32_t signal, uint64_t least, int32_t bits, uint64_t timeout_cycles);
int rust_gin_rccl_wait_va_signal(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop coop,
                                 const rust_gin_rccl_window* window, uint64_t offset, uint64_t least, int32_t bits,
                                 uint64_t timeout_cycles);
int rust_gin_rccl_wait_signal_meet_shadow(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop coop,
                                          uint32_t signal, int32_t bits);
int rust_gin_rccl_wait_signal_follow_shadow(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop coop,
                                            uint32_t signal, uint64_t least_delta, uint64_t* before, uint64_t* delta,
                                            int32_t bits);
void rust_gin_rccl_increase_signal_shadow(const rust_gin_rccl_comm* comm, uint32_t context, uint32_t signal,
                                          uint64_t delta);
uint64_t rust_gin_rccl_read_counter(const rust_gin_rccl_comm* comm, uint32_t context, uint32_t counter, int32_t bits);
int rust_gin_rccl_wait_counter(const rust_gin_rccl_comm* comm, uint32_t context, rust_gin_rccl_coop coop,
                               uint32_t counter, uint64_t least, int32_t bits, uint64_t timeout_cycles);
void rust_gin_rccl_reset_signal(const rust_gin_rccl_comm* comm, uint32_t context, uint32_t signal);
void rust_gin_rccl_reset_va_signal(const rust_gin_rccl_comm* comm, uint32_t context,
                                   const rust_gin_rccl_window* window, uint64_t offset);
void rust_gin_rccl_reset_counter(const rust_gin_rccl_comm* comm, uint32_t context, uint32_t counter);
int rust_gin_rccl_supports_strong_signal(const rust_gin_rccl_comm* comm, uint32_t context);

#ifdef __cplusplus
}
#endif

#endif
