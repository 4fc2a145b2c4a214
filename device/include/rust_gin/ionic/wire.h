// AMD ionic (Pensando Pollara) send-queue, doorbell and completion wire
// formats, as the NIC reads and writes them. The WQE header's index is
// little-endian, everything else big-endian, as in rdma-core. Restated from
// rdma-core's providers/ionic (ionic_fw_types.h, ionic_fw.h, ionic_queue.h,
// ionic_verbs.c, ionic.h) and the kernel uapi <rdma/ionic-abi.h>, which is not
// installed here; the revisions read and every field's source line are in
// docs/nic-families.md. tests/wire_oracle_ionic.rs checks every size, offset
// and constant against a cited table of those definitions, and whole WQEs
// byte for byte. The Rust twin is host/ionic/wire.rs.
//
// The send queue is a ring of power-of-two WQEs (64 bytes at the smallest):
// a 16-byte base header, a 16-byte body header, a 32-byte payload (two SGEs,
// or 32 bytes of inline data). Validity is a colour bit, flipped per pass of
// the ring, in both the WQE flags and the CQE.
#pragma once

#include "rust_gin/port/port.h"

namespace rust_gin {
namespace ionic {

// --- geometry and versions ---------------------------------------------------------
enum : uint32_t {
  WQE_BYTES = 64,       // sizeof(struct ionic_v1_wqe)
  WQE_BASE_BYTES = 16,  // sizeof(struct ionic_v1_base_hdr)
  PLD_OFFSET = 32,      // offsetof(struct ionic_v1_wqe, common.pld)
  PLD_BYTES = 32,       // sizeof(union ionic_v1_pld)
  SGE_BYTES = 16,       // sizeof(struct ionic_sge)
  CQE_BYTES = 32,       // sizeof(struct ionic_v1_cqe)
  EXP_DBELL_SZ = 8,     // IONIC_EXP_DBELL_SZ: the express doorbell at a WQE's end
  MIN_RDMA_VERSION = 1,  // IONIC_MIN_RDMA_VERSION
  MAX_RDMA_VERSION = 2,  // IONIC_MAX_RDMA_VERSION: v2 opcodes from version 2 on
  QUEUE_DEPTH_MAX = 0xFFFF,  // IONIC_QUEUE_DEPTH_MAX: indices are 16 bits
};

// --- send opcodes ---------------------------------------------------------------------
// Version 1 (enum ionic_v1_op), chosen when ctx_resp.version < 2.
enum OpV1 : uint8_t {
  V1_OP_SEND = 0,
  V1_OP_SEND_IMM = 2,
  V1_OP_RDMA_READ = 3,
  V1_OP_RDMA_WRITE = 4,
  V1_OP_RDMA_WRITE_IMM = 5,
  V1_OP_ATOMIC_CS = 6,
  V1_OP_ATOMIC_FA = 7,
};
// Version 2 (enum ionic_v2_op): the low bits name the operation, OPSL_* bits
// say it carries outbound data or an immediate.
enum OpV2 : uint8_t {
  V2_OPSL_OUT = 0x20,
  V2_OPSL_IMM = 0x40,
  V2_OP_SEND = 0x20,
  V2_OP_SEND_IMM = 0x60,
  V2_OP_RDMA_WRITE = 0x21,
  V2_OP_RDMA_WRITE_IMM = 0x61,
  V2_OP_RDMA_READ = 0x02,
  V2_OP_ATOMIC_CS = 0x04,
  V2_OP_ATOMIC_FA = 0x05,
};

// Base-header flags (be16).
enum WqeFlags : uint16_t {
  FLAG_FENCE = 1u << 0,
  FLAG_SOL = 1u << 1,
  FLAG_INL = 1u << 2,
  FLAG_SIG = 1u << 3,
  FLAG_COLOR = 1u << 4,
};

// --- doorbell (ionic_queue.h) -------------------------------------------------------------
// One 64-bit little-endian write of qid << 24 | producer index to
// dbpage[qtype], where qtype is ctx_resp.sq_qtype (or cq_qtype for the CQ).
enum : uint64_t {
  QID_MASK = (1ull << 24) - 1,
  DBELL_QID_SHIFT = 24,
  DBELL_RING_ARM = 1ull << 16,
  DBELL_RING_SONLY = 1ull << 17,
};

// --- completion ------------------------------------------------------------------------------
// qid_type_flags (be32) = qid << 8 | type << 5 | error << 1 | color
enum : uint32_t {
  CQE_COLOR = 1u << 0,
  CQE_ERROR = 1u << 1,
  CQE_TYPE_SHIFT = 5,
  CQE_TYPE_MASK = 0x7,
  CQE_QID_SHIFT = 8,
  CQE_WQE_IDX_MASK = 0xffff,  // of the le64 wqe_idx_timestamp words
  CQE_TIMESTAMP_SHIFT = 16,
};
enum CqeType : uint8_t {
  CQE_TYPE_RECV = 1,
  CQE_TYPE_SEND_MSN = 2,  // remote operations: msg_msn counts completed messages
  CQE_TYPE_SEND_NPG = 3,  // local operations: wqe_idx names the WQE
};
// status_length holds one of these when the error bit is set (enum ionic_status).
enum Status : uint8_t {
  STS_OK = 0,
  STS_LOCAL_LEN_ERR = 1,
  STS_LOCAL_QP_OPER_ERR = 2,
  STS_LOCAL_PROT_ERR = 3,
  STS_WQE_FLUSHED_ERR = 4,
  STS_MEM_MGMT_OPER_ERR = 5,
  STS_BAD_RESP_ERR = 6,
  STS_LOCAL_ACC_ERR = 7,
  STS_REMOTE_INV_REQ_ERR = 8,
  STS_REMOTE_ACC_ERR = 9,
  STS_REMOTE_OPER_ERR = 10,
  STS_RETRY_EXCEEDED = 11,
  STS_RNR_RETRY_EXCEEDED = 12,
  STS_XRC_VIO_ERR = 13,
};

// --- structures ----------------------------------------------------------------------------------
struct Sge {
  uint64_t va;  // be64
  uint32_t len;  // be32
  uint32_t lkey;  // be32
};
struct BaseHdr {
  uint64_t wqe_idx;  // le64: the producer index of this WQE
  uint8_t op;
  uint8_t num_sge_key;
  uint16_t flags;         // be16
  uint32_t imm_data_key;  // be32 (the immediate as given, already in wire order)
};
struct RdmaBody {  // ionic_v1_common_bdy, rdma view
  uint32_t remote_va_high;  // be32
  uint32_t remote_va_low;   // be32
  uint32_t remote_rkey;     // be32
  uint32_t length;          // be32: total payload bytes
  uint8_t pld[PLD_BYTES];   // two Sge, or inline data
};
struct AtomicV1Body {  // ionic_v1_atomic_bdy
  uint32_t remote_va_high;
  uint32_t remote_va_low;
  uint32_t remote_rkey;
  uint32_t swap_add_high;
  uint32_t swap_add_low;
  uint32_t compare_high;
  uint32_t compare_low;
  uint8_t rsvd[4];
  Sge sge;  // the 8-byte result's landing place
};
struct AtomicV2Body {  // ionic_v2_atomic_bdy
  uint32_t remote_va_high;
  uint32_t remote_va_low;
  uint32_t remote_rkey;
  uint32_t swap_add_high;
  uint32_t swap_add_low;
  uint32_t compare_high;
  uint32_t compare_low;
  uint32_t lkey;
  uint64_t local_va;  // be64
  uint8_t rsvd_expdb[8];
};
struct Cqe {  // ionic_v1_cqe, send view
  uint8_t rsvd[4];
  uint32_t msg_msn;  // be32
  uint8_t rsvd2[8];
  uint64_t npg_wqe_idx_timestamp;  // le64
  uint32_t status_length;          // be32
  uint32_t qid_type_flags;         // be32
};

static_assert(sizeof(Sge) == SGE_BYTES && offsetof(Sge, len) == 8 && offsetof(Sge, lkey) == 12, "sge");
static_assert(sizeof(BaseHdr) == WQE_BASE_BYTES && offsetof(BaseHdr, op) == 8 &&
                  offsetof(BaseHdr, num_sge_key) == 9 && offsetof(BaseHdr, flags) == 10 &&
                  offsetof(BaseHdr, imm_data_key) == 12,
              "base hdr");
static_assert(sizeof(RdmaBody) == WQE_BYTES - WQE_BASE_BYTES && offsetof(RdmaBody, remote_rkey) == 8 &&
                  offsetof(RdmaBody, length) == 12 && offsetof(RdmaBody, pld) + WQE_BASE_BYTES == PLD_OFFSET,
              "rdma body");
static_assert(sizeof(AtomicV1Body) == WQE_BYTES - WQE_BASE_BYTES && offsetof(AtomicV1Body, swap_add_high) == 12 &&
                  offsetof(AtomicV1Body, compare_high) == 20 && offsetof(AtomicV1Body, sge) == 32,
              "atomic v1 body");
static_assert(sizeof(AtomicV2Body) == WQE_BYTES - WQE_BASE_BYTES && offsetof(AtomicV2Body, swap_add_high) == 12 &&
                  offsetof(AtomicV2Body, compare_high) == 20 && offsetof(AtomicV2Body, lkey) == 28 &&
                  offsetof(AtomicV2Body, local_va) == 32,
              "atomic v2 body");
static_assert(sizeof(Cqe) == CQE_BYTES && offsetof(Cqe, msg_msn) == 4 && offsetof(Cqe, npg_wqe_idx_timestamp) == 16 &&
                  offsetof(Cqe, status_length) == 24 && offsetof(Cqe, qid_type_flags) == 28,
              "cqe");

// --- colour -----------------------------------------------------------------------------------------
// rdma-core starts both the SQ and the CQ colour at 1 and flips it each time
// the index wraps to 0 (ionic_color_wrap()): the colour of free-running index
// `i` on a ring of `depth` entries is 1 on even passes.
RG_INLINE constexpr uint32_t color_for(uint64_t i, uint32_t depth) {
  return static_cast<uint32_t>(((i / depth) & 1u) ^ 1u);
}
// qid_type_flags as stored (big-endian) -> host order.
RG_INLINE constexpr uint32_t cqe_qtf(uint32_t stored) { return __builtin_bswap32(stored); }
RG_INLINE constexpr uint32_t cqe_color(uint32_t qtf) { return qtf & CQE_COLOR; }
RG_INLINE constexpr bool cqe_error(uint32_t qtf) { return (qtf & CQE_ERROR) != 0; }
RG_INLINE constexpr uint32_t cqe_type(uint32_t qtf) { return (qtf >> CQE_TYPE_SHIFT) & CQE_TYPE_MASK; }
RG_INLINE constexpr uint32_t cqe_qid(uint32_t qtf) { return qtf >> CQE_QID_SHIFT; }
// The CQE at free-running consumer index `ci` is new when its colour is the
// pass colour of `ci` (ionic_next_cqe()).
RG_INLINE constexpr bool cqe_is_valid(uint32_t qtf, uint64_t ci, uint32_t depth) {
  return cqe_color(qtf) == color_for(ci, depth);
}

// --- WQE builders ----------------------------------------------------------------------------------
// A whole 64-byte WQE in registers, written with four 16-byte stores.
struct alignas(16) Wqe64 {
  uint32_t w[16];
};
static_assert(sizeof(Wqe64) == WQE_BYTES, "one WQE");

RG_INLINE constexpr uint16_t wqe_flags(uint16_t flags, uint32_t color) {
  return static_cast<uint16_t>((flags & ~FLAG_COLOR) | (color ? FLAG_COLOR : 0));
}
// Word 0..3 of the base header: wqe_idx le64, then op | num_sge_key | be16 flags.
RG_INLINE void put_base(Wqe64& w, uint16_t idx, uint8_t op, uint8_t num_sge_key, uint16_t flags, uint32_t imm_be) {
  w.w[0] = idx;
  w.w[1] = 0;
  w.w[2] = op | (static_cast<uint32_t>(num_sge_key) << 8) | (static_cast<uint32_t>(bswap16(flags)) << 16);
  w.w[3] = imm_be;
}
RG_INLINE void put_remote(Wqe64& w, uint64_t raddr, uint32_t rkey) {
  w.w[4] = bswap32(static_cast<uint32_t>(raddr >> 32));
  w.w[5] = bswap32(static_cast<uint32_t>(raddr));
  w.w[6] = bswap32(rkey);
}

// RDMA WRITE / WRITE_IMM / READ with one SGE (ionic_v1_prep_rdma +
// ionic_v1_prep_common + ionic_v1_prep_base). `flags` are FENCE/SOL/SIG; the
// colour is the SQ's pass colour at `idx`.
RG_INLINE Wqe64 wqe_rdma(uint8_t op, uint16_t idx, uint16_t flags, uint32_t color, uint64_t raddr, uint32_t rkey,
                         uint64_t laddr, uint32_t lkey, uint32_t length, uint32_t imm_be) {
  Wqe64 w{};
  put_base(w, idx, op, 1, wqe_flags(static_cast<uint16_t>(flags & ~FLAG_INL), color), imm_be);
  put_remote(w, raddr, rkey);
  w.w[7] = bswap32(length);
  const uint64_t va = bswap64(laddr);
  w.w[8] = static_cast<uint32_t>(va);
  w.w[9] = static_cast<uint32_t>(va >> 32);
  w.w[10] = bswap32(length);
  w.w[11] = bswap32(lkey);
  return w;
}
// RDMA WRITE of up to 8 inline bytes: num_sge_key 0, INL set, data at the payload.
RG_INLINE Wqe64 wqe_write_inline8(uint8_t op, uint16_t idx, uint16_t flags, uint32_t color, uint64_t raddr,
                                  uint32_t rkey, uint64_t value, uint32_t len) {
  Wqe64 w{};
  put_base(w, idx, op, 0, wqe_flags(static_cast<uint16_t>(flags | FLAG_INL), color), 0);
  put_remote(w, raddr, rkey);
  w.w[7] = bswap32(len);
  if (len < 8) value &= (uint64_t{1} << (8 * len)) - 1;
  w.w[8] = static_cast<uint32_t>(value);
  w.w[9] = static_cast<uint32_t>(value >> 32);
  return w;
}
// Version-2 atomics (ionic_v1_prep_atomic with ctx->version >= 2): the 8-byte
// result lands at local_va. For FA, compare stays zero.
RG_INLINE Wqe64 wqe_atomic_v2(uint8_t op, uint16_t idx, uint16_t flags, uint32_t color, uint64_t raddr,
                              uint32_t rkey, uint64_t swap_add, uint64_t compare, uint64_t laddr, uint32_t lkey) {
  Wqe64 w{};
  put_base(w, idx, op, 1, wqe_flags(static_cast<uint16_t>(flags & ~(FLAG_INL | FLAG_SOL)), color), 0);
  put_remote(w, raddr, rkey);
  if (op != V2_OP_ATOMIC_CS) compare = 0;
  w.w[7] = bswap32(static_cast<uint32_t>(swap_add >> 32));
  w.w[8] = bswap32(static_cast<uint32_t>(swap_add));
  w.w[9] = bswap32(static_cast<uint32_t>(compare >> 32));
  w.w[10] = bswap32(static_cast<uint32_t>(compare));
  w.w[11] = bswap32(lkey);
  const uint64_t va = bswap64(laddr);
  w.w[12] = static_cast<uint32_t>(va);
  w.w[13] = static_cast<uint32_t>(va >> 32);
  return w;
}
// Version-1 atomics (ionic_v1_prep_atomic with ctx->version < 2): the same
// header and operands, then a reserved word and the result's SGE (va, len 8,
// lkey) at @48.
RG_INLINE Wqe64 wqe_atomic_v1(uint8_t op, uint16_t idx, uint16_t flags, uint32_t color, uint64_t raddr,
                              uint32_t rkey, uint64_t swap_add, uint64_t compare, uint64_t laddr, uint32_t lkey) {
  Wqe64 w = wqe_atomic_v2(op == V1_OP_ATOMIC_CS ? V2_OP_ATOMIC_CS : V2_OP_ATOMIC_FA, idx, flags, color, raddr, rkey,
                          swap_add, compare, laddr, lkey);
  w.w[2] = (w.w[2] & ~0xffu) | op;
  w.w[11] = 0;
  w.w[14] = bswap32(8u);
  w.w[15] = bswap32(lkey);
  return w;
}

// --- doorbell ------------------------------------------------------------------------------------
// ionic_queue_dbell_val(): qid << 24 | prod, prod the index of the next free
// WQE (already masked to the ring). Doorbells must reach the NIC in order; a
// later value covers every earlier WQE (ionic_dv_qp_get_send_dbell_data(3)).
RG_INLINE constexpr uint64_t db_value(uint32_t qid, uint16_t prod) {
  return ((static_cast<uint64_t>(qid) & QID_MASK) << DBELL_QID_SHIFT) | prod;
}
// Byte offset of a queue type's doorbell in the doorbell page (dbpage is a
// uint64_t array indexed by qtype).
RG_INLINE constexpr uint32_t db_offset(uint8_t qtype) { return static_cast<uint32_t>(qtype) * 8u; }

}  // namespace ionic
}  // namespace rust_gin
