/* GPU-visible description and state of one mlx5 send queue (an RC QP or a
 * DC initiator) and its completion queue. C, so that bindgen gives the Rust host the very same
 * layout (host/abi.rs); the host fills the descriptor at connect time and
 * kernels read it. Addresses are as the device sees them. */
#ifndef RUST_GIN_ABI_MLX5_QUEUE_H
#define RUST_GIN_ABI_MLX5_QUEUE_H

#include <stdint.h>

#include "rust_gin/abi/host_doorbell.h"

/* Read-only after setup: kernels may cache it in scalar registers. */
typedef struct rust_gin_mlx5_sq {
  uint64_t wqe_buf;   /* SQ ring: 2^log_wqe_cnt WQEBBs of 64 bytes (NIC-read) */
  uint64_t dbrec;     /* QP doorbell record, be32[2]; [1] is the send queue's */
  uint64_t uar_db;    /* the 8-byte send doorbell register (UAR page + 0x800) */
  uint64_t cq_buf;    /* CQE ring: 2^log_cq_cnt CQEs of 64 bytes (NIC-written) */
  uint64_t cq_dbrec;  /* CQ doorbell record, be32[2]; [0] is the consumer index */
  uint64_t state;     /* rust_gin_mlx5_sq_state*, in device memory */
  uint64_t error;     /* rust_gin_error*, the context's sticky error record */
  uint32_t qpn;
  uint32_t log_wqe_cnt;
  uint32_t cqn;
  uint32_t log_cq_cnt;
  uint32_t peer;            /* rank at the other end, for error reports */
  uint32_t log_signal_period; /* a CQE is requested at least every 2^n WQEBBs */
  uint64_t timeout_ns;      /* bound on every wait on this queue; 0 = RUST_GIN_DEFAULT_TIMEOUT_NS */
  /* A local byte a flush after READs has the NIC read (a DUMP WQE), in the
   * memory READs land in; flush_lkey 0: no flush WQE, READ data is then not
   * proven landed by a flush (docs/architecture.md, "gets"). */
  uint64_t flush_addr;
  uint32_t flush_lkey;
  /* log2 of the WQEBBs one ticket (one WQE) occupies: 0 for an RC QP (every
   * WQE one WQEBB), 1 for a DC initiator (every WQE two WQEBBs: the 48-byte
   * datagram segment does not fit one). log_wqe_cnt counts tickets, so the
   * ring holds 2^(log_wqe_cnt + wqe_shift) WQEBBs. */
  uint32_t wqe_shift;
  /* const rust_gin_host_doorbell*: how the host build rings this queue's
   * NIC (its provider's MMIO or the emulated NIC); 0 where only GPU code
   * posts. Never read on the GPU. */
  uint64_t host_doorbell;
  /* Completion counters (0: none): counter_log is uint32_t[2^log_wqe_cnt],
   * 1 + the counter id of the put whose last WQE sits at that index (0:
   * none), written before the put is published; once that WQE completed
   * without error, a counter read or wait adds 1 to counters[id]. */
  uint64_t counter_log;
  uint64_t counters;
  /* DC initiators only (wqe_shift 1): the DC targets a request's dc_target
   * indexes, RUST_GIN_MLX5_DC_TARGET_STRIDE bytes apart, each starting with
   * the 48-byte datagram segment (struct mlx5_wqe_av, wire order) that the
   * WQE carries. 0 for RC. */
  uint64_t dc_targets;
} rust_gin_mlx5_sq;

/* Bytes between two DC targets of rust_gin_mlx5_sq.dc_targets: the datagram
 * segment (48 bytes) and what the GIN layer keeps next to it (abi/gin.h,
 * rust_gin_dc_peer). */
#define RUST_GIN_MLX5_DC_TARGET_STRIDE 64

/* Producer and consumer counters, all in WQEBBs and all 64-bit so they never
 * wrap. Touched by device code only, through atomic read-modify-writes. */
typedef struct rust_gin_mlx5_sq_state {
  uint64_t resv;          /* tickets handed out */
  uint64_t ready;         /* prefix published in ticket order */
  uint64_t rung;          /* producer index last written to the DBR and rung */
  uint64_t done;          /* WQEBBs known complete: the credit */
  uint64_t last_signaled; /* 1 + index of the newest WQE that requests a CQE */
  uint64_t cq_ci;         /* CQEs consumed */
  uint32_t ring_lock;
  uint32_t poll_lock;
  uint32_t failed;        /* nonzero once an error CQE was seen on this queue */
  uint32_t credit_lock;   /* held while counter_log entries are credited */
  uint64_t doorbells;     /* doorbells rung (statistics) */
  uint64_t read_end;      /* end of the newest published batch holding a READ */
  uint64_t dump_end;      /* 1 + index of the newest DUMP (flush after READs) */
  uint64_t counted_end;   /* 1 + index of the newest WQE with a counter_log entry */
  uint64_t credited;      /* counter_log entries below this have been credited */
  uint64_t failed_end;    /* 1 + index of the first WQE that completed in error; 0: none */
  /* bnxt_re: PSNs handed out so far, so the next WQE's first PSN (24 bits
   * on the wire; the QP starts at sq_psn 0). Advanced in ticket order while
   * the publish turn is held (SendQueue::note_psns). */
  uint64_t psn;
  /* Batches an owning wave published without a ticket
   * (rust_gin_put_exclusive; statistics). */
  uint64_t owned_batches;
} rust_gin_mlx5_sq_state;

/* One operation for a send queue: everything its WQE needs except the WQE
 * index, the QP number and whether it requests a CQE. */
enum {
  RUST_GIN_REQ_SIGNALED = 1 << 0,     /* ask for a CQE for this WQE */
  RUST_GIN_REQ_FENCE = 1 << 1,        /* start only after all prior WQEs completed */
  RUST_GIN_REQ_SMALL_FENCE = 1 << 2,  /* start after prior READs and atomics completed */
  RUST_GIN_REQ_INLINE = 1 << 3,       /* WRITE carries operand0 inline (length <= 8) */
  RUST_GIN_REQ_SOLICITED = 1 << 4,
};

typedef struct rust_gin_mlx5_request {
  uint8_t opcode;     /* MLX5_OPCODE_NOP, RDMA_WRITE(_IMM), RDMA_READ, ATOMIC_FA, ATOMIC_CS, DUMP */
  uint8_t flags;      /* RUST_GIN_REQ_* */
  uint16_t reserved;
  uint32_t length;    /* bytes moved (8 for atomics; the inline length with REQ_INLINE) */
  uint32_t lkey;      /* local buffer: source of a WRITE or DUMP, sink of a READ or an atomic */
  uint32_t rkey;
  uint64_t laddr;
  uint64_t raddr;
  uint64_t operand0;  /* FA: add value; CS: swap value; inline WRITE: the bytes as in memory */
  uint64_t operand1;  /* CS: compare value */
  uint32_t imm;       /* WRITE_IMM: immediate, already in wire order */
  uint32_t dc_target; /* DC initiators: the index of the target in the queue's dc_targets; RC: ignored */
} rust_gin_mlx5_request;

#endif
