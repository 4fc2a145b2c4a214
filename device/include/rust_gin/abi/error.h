/* The sticky device-side error record: the first error a kernel meets is kept
 * (later ones are only counted), and the host's queryLastError reports it. */
#ifndef RUST_GIN_ABI_ERROR_H
#define RUST_GIN_ABI_ERROR_H

#include <stdint.h>

/* Bound on any device wait when none is configured (RCCL_RUST_GIN_TIMEOUT_MS
 * sets it). Longer than a NIC's own transport-retry timeout, so that a dead
 * link surfaces as its error CQE rather than as our timeout. */
#define RUST_GIN_DEFAULT_TIMEOUT_NS 60000000000ull

/* Status codes returned by device functions and stored in the record. */
enum {
  RUST_GIN_OK = 0,
  RUST_GIN_ERR_CQE = 1,        /* an error completion (syndrome in the record) */
  RUST_GIN_ERR_TIMEOUT = 2,    /* a bounded wait expired (what it waited for in the record) */
  RUST_GIN_ERR_QP_FAILED = 3,  /* the queue is in error after an earlier error CQE */
  RUST_GIN_ERR_INVALID = 4,    /* bad argument (id or offset out of range, null handle) */
  RUST_GIN_ERR_ABORTED = 5,    /* a wait saw RCCL's abort flag; not recorded as an error */
};

/* What a timed-out wait was waiting for. */
enum {
  RUST_GIN_WAIT_NONE = 0,
  RUST_GIN_WAIT_SQ_CREDIT = 1,   /* free WQEBBs: completions from the NIC */
  RUST_GIN_WAIT_SQ_PUBLISH = 2,  /* an earlier producer to publish its WQEs */
  RUST_GIN_WAIT_FLUSH = 3,       /* completion of everything posted */
  RUST_GIN_WAIT_SIGNAL = 4,      /* a signal to reach a value */
  RUST_GIN_WAIT_COUNTER = 5,     /* a counter to reach a value */
};

/* Which argument was invalid (RUST_GIN_ERR_INVALID records it in wait_kind;
 * `observed` holds the value, `expected` the limit it broke). */
enum {
  RUST_GIN_ARG_CONTEXT = 1,
  RUST_GIN_ARG_PEER = 2,
  RUST_GIN_ARG_WINDOW = 3,      /* null, unregistered or deregistered window */
  RUST_GIN_ARG_OFFSET = 4,      /* offset + size past the end of a window */
  RUST_GIN_ARG_SIGNAL = 5,      /* signal id out of range, or a misaligned VA signal */
  RUST_GIN_ARG_COUNTER = 6,     /* counter id out of range */
  RUST_GIN_ARG_SIZE = 7,        /* putValue size not 1, 2, 4 or 8; flush coop size 0 */
  RUST_GIN_ARG_SIGNAL_OP = 8,   /* unknown signal kind or operation */
  RUST_GIN_ARG_PEER_NOT_CONNECTED = 9, /* a rank the context set has no queue pair to (GIN v15 peer array) */
  RUST_GIN_ARG_VA_SIGNAL_WRITE_MODE = 10, /* a VA signal on a context whose signals are writes (no remote atomics) */
  /* a context of a NIC family the call cannot serve: lanes of one call name
   * contexts of different families, or the device library was built without
   * the family (RUST_GIN_NIC_FAMILIES; gin/family.h) */
  RUST_GIN_ARG_FAMILY = 11,
  RUST_GIN_ARG_PROGRESS_TARGET = 12, /* rust_gin_progress: neither a signal nor a counter */
  /* rust_gin_put_exclusive (RCCL: THREAD sharing) on a queue where another
   * producer's post was in flight (the caller does not own it; `expected`
   * 0), or on a DC context, whose initiators serve several peers
   * (`expected`: the DCIs) */
  RUST_GIN_ARG_NOT_EXCLUSIVE = 13,
};

enum {
  RUST_GIN_ERROR_EMPTY = 0,
  RUST_GIN_ERROR_WRITING = 1,
  RUST_GIN_ERROR_VALID = 2,
};

typedef struct rust_gin_error {
  uint32_t state;        /* RUST_GIN_ERROR_*: claimed by CAS, published last */
  uint32_t code;         /* RUST_GIN_ERR_* */
  uint32_t peer;         /* rank at the other end of the queue */
  uint32_t qpn;
  uint32_t wqe_index;    /* WQEBB index (16 bits on the wire) of the failed WQE */
  uint8_t syndrome;      /* MLX5_CQE_SYNDROME_* */
  uint8_t vendor_syndrome;
  uint8_t wqe_opcode;    /* opcode of the failed WQE, from the error CQE */
  uint8_t wait_kind;     /* RUST_GIN_WAIT_* for timeouts, RUST_GIN_ARG_* for invalid arguments */
  uint64_t expected;     /* for timeouts: the value waited for */
  uint64_t observed;     /* for timeouts: the value last seen */
  uint64_t count;        /* errors seen, the first one included */
} rust_gin_error;

#endif
