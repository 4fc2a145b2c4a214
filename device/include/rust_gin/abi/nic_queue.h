/* GPU-visible description of one RC send queue and its CQ for the NIC
 * families without a doorbell record (bnxt_re, ionic): one descriptor for
 * both, family-neutral in layout; which family reads it is chosen at compile
 * time by the code that posts (queue/send_queue.h over bnxt/family.h or
 * ionic/family.h). mlx5 keeps its own descriptor (abi/mlx5_queue.h). The
 * producer state is the same for every family (rust_gin_mlx5_sq_state,
 * whose counters are family-neutral despite the name). Fields named as in
 * rust_gin_mlx5_sq mean the same; addresses are as the device sees them. */
#ifndef RUST_GIN_ABI_NIC_QUEUE_H
#define RUST_GIN_ABI_NIC_QUEUE_H

#include <stdint.h>

#include "rust_gin/abi/mlx5_queue.h"

typedef struct rust_gin_nic_sq {
  uint64_t wqe_buf;  /* SQ ring: 2^log_wqe_cnt WQEs (bnxt_re static mode: 128 bytes each; ionic: 64) */
  uint64_t sq_db;    /* the 8-byte SQ doorbell (bnxt_re: the PD's doorbell page; ionic: dbpage[sq_qtype]) */
  uint64_t cq_buf;   /* CQE ring: 2^log_cq_cnt CQEs of 32 bytes (NIC-written) */
  uint64_t cq_db;    /* the 8-byte CQ doorbell (bnxt_re: the doorbell page; ionic: dbpage[cq_qtype]) */
  uint64_t state;    /* rust_gin_mlx5_sq_state*, in device memory */
  uint64_t error;    /* rust_gin_error*, the context's sticky error record */
  uint32_t qpn;      /* the SQ's qid as the doorbell names it */
  uint32_t log_wqe_cnt;
  uint32_t cqn;      /* the CQ's qid as its doorbell names it */
  uint32_t log_cq_cnt;
  uint32_t peer;
  uint32_t log_signal_period;
  uint64_t timeout_ns;
  /* A flush after READs (no DUMP in these families): a 1-byte WRITE from
   * the local byte flush_addr (in the memory READs land in), fenced behind
   * the READs, to the peer's byte flush_raddr. The NIC's read of local
   * memory cannot pass its earlier PCIe writes of READ data, so its
   * completion proves them landed. flush_lkey 0: no flush WQE. */
  uint64_t flush_addr;
  uint32_t flush_lkey;
  uint32_t cq_phase;   /* bnxt_re: the CQ's first phase (create response); ionic: unused (colour 1) */
  uint64_t host_doorbell; /* const rust_gin_host_doorbell*, host build only */
  uint64_t counter_log;
  uint64_t counters;
  /* bnxt_re: the QP's path MTU in bytes; nonzero: the producer writes the
   * MSN search table Thor2 keeps after the ring (one 8-byte entry per WQE:
   * its index and PSN range, for the NIC's retransmissions). 0: no table
   * (ionic; a bnxt_re NIC without UCNTX_MSN_TABLE_ENABLED). */
  uint32_t path_mtu;
  uint32_t flush_rkey;
  uint64_t flush_raddr;
  /* ionic: the firmware's WQE ABI version (the alloc-ucontext response's
   * `version`, libionic's ctx->version), which picks the opcode table and
   * the atomic body: 1 writes enum ionic_v1_op and ionic_v1_atomic_bdy, 2
   * the v2 ones. The two tables overlap (v2's FETCH_ADD 0x05 is v1's
   * WRITE_IMM), so the host sets it from the NIC and refuses any other
   * version (docs/nic-families.md, "Firmware and ABI gates"). 0: 2 (a
   * descriptor built by hand in a test). bnxt_re: unused. */
  uint32_t wqe_abi;
  /* bnxt_re: how the producer rings (a field quirk: batched doorbells hung
   * a Thor2 in torchcomms#2714, per-peer groups ran at line rate in
   * mori#421): 0, one doorbell per WQE; 1, one per published batch of the
   * queue (the queue is the peer's). RCCL_RUST_GIN_BNXT_DOORBELL sets it.
   * ionic: unused (0). */
  uint32_t doorbell_group;
} rust_gin_nic_sq;

#endif
