/* The GIN-level objects a kernel sees, all in GPU-visible memory and filled
 * by the host (createContext, regMrSym), plus the small argument types of the
 * device ABI (rust_gin_device.h). C, for bindgen: host/abi.rs. */
#ifndef RUST_GIN_ABI_GIN_H
#define RUST_GIN_ABI_GIN_H

#include <stdint.h>

#include "rust_gin/abi/mlx5_queue.h"
#include "rust_gin/abi/nic_queue.h"

/* Bumped on any change to the device ABI (the declarations in
 * rust_gin_device.h or the layouts in abi/) once a version has been released;
 * version 1 is the first release. The host reports it as netDeviceVersion;
 * the patch checks it at compile time. */
#define RUST_GIN_DEVICE_ABI_VERSION 7

#define RUST_GIN_HANDLE_MAGIC 0x52474831u /* "RGH1" */
#define RUST_GIN_WINDOW_MAGIC 0x52475731u /* "RGW1" */

/* Signal kinds (RCCL's ncclGinSignalType maps onto these). */
enum {
  RUST_GIN_SIGNAL_NONE = 0,
  RUST_GIN_SIGNAL_INDEXED = 1, /* signal id in the context's signal table */
  RUST_GIN_SIGNAL_VA = 2,      /* a 64-bit word in a registered window */
};
/* What rust_gin_progress brings up to date: the word a wait of RCCL's
 * generic code polls (RCCL's ncclGinProgressTarget, patch 0004). */
enum {
  RUST_GIN_PROGRESS_SIGNAL = 0,  /* an indexed signal's word */
  RUST_GIN_PROGRESS_COUNTER = 1, /* a counter's word */
};
/* Signal operations (RCCL's ncclGinSignalOp_t maps onto these). */
enum {
  RUST_GIN_SIGNAL_OP_INC = 0, /* add 1 */
  RUST_GIN_SIGNAL_OP_ADD = 1, /* add the argument */
};

/* How a context's signals travel (rust_gin_context.signal_mode), one mode per
 * context set, the same on every rank (createContext checks it). */
enum {
  /* An 8-byte RDMA fetch-and-add into the peer's signal word. */
  RUST_GIN_SIGNAL_MODE_ATOMIC = 0,
  /* No remote atomics: an 8-byte inline RDMA WRITE of the sender's running
   * total for (peer, signal) into the sender's own slot at the peer; the
   * receiver folds the slots into the signal word when it reads or waits
   * (gin/signal_slots.h, docs/nic-families.md section 7). VA signals are refused. */
  RUST_GIN_SIGNAL_MODE_WRITE = 1,
};

/* The NIC family of a context set's queues (rust_gin_context.family): which
 * WQE, doorbell and CQE formats its operations use (gin/family.h), and which
 * per-peer descriptor `peers` holds. One family per handle: every rail's NIC
 * is of it (createContext checks). */
enum {
  RUST_GIN_FAMILY_MLX5 = 0,  /* ConnectX: rust_gin_peer / rust_gin_dc_peer */
  RUST_GIN_FAMILY_BNXT = 1,  /* Broadcom Thor2 (bnxt_re): rust_gin_nic_peer */
  RUST_GIN_FAMILY_IONIC = 2, /* AMD Pollara (ionic): rust_gin_nic_peer */
};

/* Flags of the posting functions. */
enum {
  /* More requests follow: publish without ringing (ncclGinOptFlagsAggregateRequests). */
  RUST_GIN_FLAG_AGGREGATE = 1 << 0,
  /* The caller's prior stores must be visible system-wide before the NIC
   * reads the source (RCCL: required == system, given < system). */
  RUST_GIN_FLAG_RELEASE_SYSTEM = 1 << 1,
};

/* What flush_async hands back and wait takes; fits ncclGinRequest_t (16 bytes). */
typedef struct rust_gin_request {
  uint32_t context;
  uint32_t peer;
  uint64_t target; /* completion index to reach on the peer's queue */
} rust_gin_request;

/* A signal argument of the posting functions. */
typedef struct rust_gin_signal {
  uint32_t type;      /* RUST_GIN_SIGNAL_* */
  uint32_t op;        /* RUST_GIN_SIGNAL_OP_* */
  uint64_t value;     /* the addend for RUST_GIN_SIGNAL_OP_ADD */
  uint64_t id;        /* INDEXED: signal id */
  const void* window; /* VA: the signal window (a regMrSym ginHandle) */
  uint64_t offset;    /* VA: byte offset of the 64-bit signal in that window */
} rust_gin_signal;

/* One per (context, peer). */
typedef struct rust_gin_peer {
  rust_gin_mlx5_sq sq;   /* the RC queue pair to that peer */
  /* Where this rank's signals land at the peer, for this context: the peer's
   * signal table (atomic mode), or this rank's row of the peer's slot table
   * (write mode); signal id i is at signal_raddr + 8 * i either way. */
  uint64_t signal_raddr;
  uint32_t signal_rkey;
  uint32_t reserved;
} rust_gin_peer;

/* One per (context, peer) on a bnxt_re or ionic NIC: rust_gin_peer with the
 * family-neutral queue descriptor (RC only). */
typedef struct rust_gin_nic_peer {
  rust_gin_nic_sq sq;
  uint64_t signal_raddr; /* as rust_gin_peer's */
  uint32_t signal_rkey;
  uint32_t reserved;
} rust_gin_nic_peer;

/* One per (context, peer) with the DC transport (RCCL_RUST_GIN_TRANSPORT=dc),
 * in place of rust_gin_peer: no queue of its own, only how to reach the
 * peer's DC target (DCT) from any of the context's DCIs. 64 bytes, the
 * stride RUST_GIN_MLX5_DC_TARGET_STRIDE the DCIs' dc_targets use. */
typedef struct rust_gin_dc_peer {
  uint8_t av[48];        /* datagram segment: address vector, DC key, DCT number (mlx5/wire.h) */
  uint64_t signal_raddr; /* the peer's signal table for this context */
  uint32_t signal_rkey;
  uint32_t connected;    /* 1 when the context set reaches this peer */
} rust_gin_dc_peer;

/* One per RCCL context (config nContexts). */
typedef struct rust_gin_context {
  /* mlx5: rust_gin_peer[nranks] (RC), rust_gin_dc_peer[nranks] (DC: n_dci > 0);
   * bnxt_re, ionic: rust_gin_nic_peer[nranks] */
  uint64_t peers;
  uint64_t signals;        /* uint64_t[n_signals]: the targets of remote atomics */
  uint64_t signal_offsets; /* uint64_t[n_signals]: moved by reset */
  uint64_t counters;       /* uint64_t[n_counters] */
  uint64_t sink;           /* landing place for atomic results nobody reads */
  uint32_t sink_lkey;
  uint32_t n_signals;
  uint32_t n_counters;
  uint32_t rail; /* the NIC this context's queues are on: picks each window's keys */
  /* uint64_t[(nranks + 63) / 64]: peers whose queues hold counted puts not
   * yet credited (counter reads and waits poll those queues). */
  uint64_t counted_peers;
  /* Write mode only (0 otherwise), both uint64_t. signal_slots:
   * [nranks][n_signals], row s written by rank s's NIC only (its running
   * totals), folded into `signals` by readers and waiters; NIC-written and
   * polled, so uncached. signal_totals: [nranks][n_signals], this rank's
   * running total per (peer, signal), advanced in queue order at publish
   * (gin/lanes.h); kernels only. */
  uint64_t signal_slots;
  uint64_t signal_totals;
  /* DC transport: rust_gin_mlx5_sq[n_dci], the context's DC initiators
   * (n_dci a power of two); peer p's requests always go to DCI p % n_dci (docs/architecture.md, "DC
   * transport"). n_dci 0: RC, one queue per peer in `peers`. */
  uint64_t dcis;
  uint32_t signal_mode; /* RUST_GIN_SIGNAL_MODE_*, the same for every context of a handle */
  uint32_t n_dci;
  uint32_t family; /* RUST_GIN_FAMILY_*, the same for every context of a handle */
  uint32_t reserved;
} rust_gin_context;

/* What createContext returns as ncclNetDeviceHandle.handle. */
typedef struct rust_gin_handle {
  uint32_t magic; /* RUST_GIN_HANDLE_MAGIC */
  uint32_t abi_version;
  uint32_t rank;
  uint32_t nranks;
  uint32_t n_contexts;
  uint32_t reserved;
  uint64_t contexts;   /* rust_gin_context[n_contexts] */
  uint64_t error;      /* rust_gin_error*: the sticky error record */
  uint64_t timeout_ns; /* bound on signal and counter waits (RCCL_RUST_GIN_TIMEOUT_MS) */
} rust_gin_handle;

typedef struct rust_gin_window_peer {
  uint64_t base; /* the peer's registration of this window, as its NIC sees it */
  uint32_t rkey;
  uint32_t reserved;
} rust_gin_window_peer;

/* What regMrSym returns as ginHandle: a symmetric window. */
typedef struct rust_gin_window {
  uint32_t magic; /* RUST_GIN_WINDOW_MAGIC */
  uint32_t nranks;
  uint64_t local_base; /* the local registration */
  uint64_t size;
  uint32_t lkey;  /* rail 0's local key */
  uint32_t rails; /* registrations, one per rail (NIC) of the comm, >= 1 */
  uint64_t peers; /* rust_gin_window_peer[rails][nranks]: rail r's table at r * nranks */
  uint64_t lkeys; /* uint32_t[rails]: the local key on each rail */
} rust_gin_window;

#endif
