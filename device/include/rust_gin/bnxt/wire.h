// Broadcom bnxt_re (Thor2, BCM576xx) send-queue, doorbell and completion wire
// formats, as the NIC reads and writes them (little-endian on the wire).
// Restated from rdma-core's providers/bnxt_re (bnxt_re-abi.h, main.h, db.c,
// memory.h, verbs.c) and the kernel uapi <rdma/bnxt_re-abi.h>; the revisions
// read and every field's source line are in docs/nic-families.md.
// tests/wire_oracle_bnxt.rs checks every size, offset and constant against the
// installed uapi header (through build/bnxt_re_oracle.c) and against a cited
// table of the provider's definitions, and whole WQEs byte for byte. The Rust
// twin is host/bnxt/wire.rs.
//
// The send queue is a ring of 16-byte slots. A WQE is a header slot (bsqe),
// a second header slot (rdma / atomic), then SGEs or inline data, one slot
// each. In the static WQE mode every WQE occupies 8 slots whatever its size;
// in the variable mode it occupies exactly the slots it uses.
#pragma once

#include "rust_gin/port/port.h"

namespace rust_gin {
namespace bnxt {

// --- queue geometry -------------------------------------------------------------
enum : uint32_t {
  SLOT_BYTES = 16,           // que->stride = sizeof(struct bnxt_re_sge)
  SLOT_SHIFT = 4,            // "que->stride is always 2^4 = 16"
  SQE_HDR_BYTES = 32,        // bnxt_re_get_sqe_hdr_sz(): bsqe + the second header slot
  STATIC_WQE_SLOTS = 8,      // STATIC_WQE_NUM_SLOTS
  STATIC_WQE_MAX_SGE = 6,    // BNXT_RE_STATIC_WQE_MAX_SGE
  MAX_INLINE = 0x60,         // BNXT_RE_MAX_INLINE_SIZE
  CQE_BYTES = 32,            // bnxt_re_get_cqe_sz(): req_cqe + bcqe
  CQ_START_PHASE = 1,        // BNXT_RE_QUEUE_START_PHASE (verbs.c)
};

// The uapi's WQE modes (enum bnxt_re_wqe_mode, <rdma/bnxt_re-abi.h>).
enum WqeMode : uint32_t {
  WQE_MODE_STATIC = 0x00,
  WQE_MODE_VARIABLE = 0x01,
};

// uctx_resp.comp_mask bit: the QP keeps an MSN search table (Thor2).
enum : uint32_t {
  UCNTX_MSN_TABLE_ENABLED = 0x08,
};

// --- send opcodes (bsqe byte 0, enum bnxt_re_wr_opcode) ----------------------------
enum Opcode : uint8_t {
  OP_SEND = 0x00,
  OP_SEND_IMM = 0x01,
  OP_RDMA_WRITE = 0x04,
  OP_RDMA_WRITE_IMM = 0x05,
  OP_RDMA_READ = 0x06,
  OP_ATOMIC_CS = 0x08,
  OP_ATOMIC_FA = 0x0B,
};

// bsqe byte 1 (enum bnxt_re_wr_flags).
enum WrFlags : uint8_t {
  WR_SIGNALED = 0x01,
  WR_RD_FENCE = 0x02,
  WR_UC_FENCE = 0x04,  // what rdma-core sets for IBV_SEND_FENCE
  WR_SE = 0x08,
  WR_INLINE = 0x10,
};

// rsv_ws_fl_wt = opcode | flags << 8 | wqe slots << 16 (enum bnxt_re_hdr_offset).
enum : uint32_t {
  HDR_WT_MASK = 0xFF,
  HDR_FLAGS_MASK = 0xFF,
  HDR_FLAGS_SHIFT = 8,
  HDR_WS_MASK = 0xFF,
  HDR_WS_SHIFT = 16,
};

// --- doorbell (struct bnxt_re_db_hdr, one 64-bit write) -----------------------------
// low word:  index | epoch << 24 (| toggle << 25 for arm doorbells)
// high word: qid | valid << 26 | type << 28
enum : uint32_t {
  DB_INDX_MASK = 0xFFFFFF,
  DB_EPOCH_SHIFT = 24,
  DB_TOGGLE_SHIFT = 25,
  DB_QID_MASK = 0xFFFFF,
  DB_VALID_SHIFT = 26,
  DB_TYP_MASK = 0x0F,
  DB_TYP_SHIFT = 28,
};
enum QueType : uint32_t {
  QUE_TYPE_SQ = 0x00,
  QUE_TYPE_RQ = 0x01,
  QUE_TYPE_CQ = 0x04,
  QUE_TYPE_CQ_ARMALL = 0x06,
};

// --- completion (struct bnxt_re_bcqe after struct bnxt_re_req_cqe) -------------------
// flg_st_typ_ph = phase | type << 1 | status << 8 | flags << 16
enum : uint32_t {
  BCQE_PH_MASK = 0x01,
  BCQE_TYPE_MASK = 0x0F,
  BCQE_TYPE_SHIFT = 0x01,
  BCQE_STATUS_MASK = 0xFF,
  BCQE_STATUS_SHIFT = 0x08,
};
enum WcType : uint8_t {
  WC_TYPE_SEND = 0x00,
  WC_TYPE_RECV_RC = 0x01,
  WC_TYPE_TERM = 0x0E,
  WC_TYPE_COFF = 0x0F,
};
// Requester completion status (enum bnxt_re_req_wc_status).
enum ReqStatus : uint8_t {
  REQ_ST_OK = 0x00,
  REQ_ST_BAD_RESP = 0x01,
  REQ_ST_LOC_LEN = 0x02,
  REQ_ST_LOC_QP_OP = 0x03,
  REQ_ST_PROT = 0x04,
  REQ_ST_MEM_OP = 0x05,
  REQ_ST_REM_INVAL = 0x06,
  REQ_ST_REM_ACC = 0x07,
  REQ_ST_REM_OP = 0x08,
  REQ_ST_RNR_NAK_XCED = 0x09,
  REQ_ST_TRNSP_XCED = 0x0A,
  REQ_ST_WR_FLUSH = 0x0B,
};

// --- MSN search table (Thor2): one 8-byte entry per WQE after the ring ----------------
// start_idx << 48 | next_psn << 24 | start_psn (enum bnxt_re_msns_mask)
enum : uint32_t {
  MSN_START_PSN_MASK = 0xFFFFFF,
  MSN_NEXT_PSN_SHIFT = 24,
  MSN_START_IDX_SHIFT = 48,
  PSN_MASK = 0xFFFFFF,  // BNXT_RE_PSNS_NPSN_MASK: PSNs are 24 bits
};

// --- structures ------------------------------------------------------------------------
struct Bsqe {
  uint32_t rsv_ws_fl_wt;  // le32: opcode | flags << 8 | slots << 16
  uint32_t key_immd;      // le32: immediate (host order), or the rkey for atomics
  uint64_t lhdr;          // le64: payload length, or the remote address for atomics
};
struct RdmaSeg {
  uint64_t rva;  // le64
  uint32_t rkey;  // le32
  uint32_t rsvd2;
};
struct AtomicSeg {
  uint64_t swp_dt;  // le64: swap value (CS) or add value (FA)
  uint64_t cmp_dt;  // le64
};
struct Sge {
  uint64_t pa;  // le64
  uint32_t lkey;
  uint32_t length;
};
struct DbHdr {
  uint32_t indx;     // le32
  uint32_t typ_qid;  // le32
};
struct ReqCqe {
  uint64_t qp_handle;  // le64: the cq_handle / qp_handle given at creation
  uint32_t con_indx;   // le32: 16 bits valid, the consumer index after the WQE
  uint32_t rsvd1;
  uint64_t rsvd2;
};
struct Bcqe {
  uint32_t flg_st_typ_ph;  // le32
  uint32_t qphi_rwrid;     // le32
};
struct Cqe {  // a requester CQE as it sits in the CQ ring
  ReqCqe req;
  Bcqe hdr;
};

static_assert(sizeof(Bsqe) == SLOT_BYTES && offsetof(Bsqe, key_immd) == 4 && offsetof(Bsqe, lhdr) == 8,
              "bsqe");
static_assert(sizeof(RdmaSeg) == SLOT_BYTES && offsetof(RdmaSeg, rkey) == 8, "rdma seg");
static_assert(sizeof(AtomicSeg) == SLOT_BYTES && offsetof(AtomicSeg, cmp_dt) == 8, "atomic seg");
static_assert(sizeof(Sge) == SLOT_BYTES && offsetof(Sge, lkey) == 8 && offsetof(Sge, length) == 12, "sge");
static_assert(sizeof(DbHdr) == 8 && offsetof(DbHdr, typ_qid) == 4, "db hdr");
static_assert(sizeof(ReqCqe) == 24 && offsetof(ReqCqe, con_indx) == 8, "req cqe");
static_assert(sizeof(Bcqe) == 8 && offsetof(Bcqe, qphi_rwrid) == 4, "bcqe");
static_assert(sizeof(Cqe) == CQE_BYTES && offsetof(Cqe, hdr) == 24, "cqe");
static_assert(SQE_HDR_BYTES == sizeof(Bsqe) + sizeof(RdmaSeg), "two header slots");
static_assert(STATIC_WQE_SLOTS * SLOT_BYTES == SQE_HDR_BYTES + STATIC_WQE_MAX_SGE * sizeof(Sge),
              "a static WQE holds the header and six SGEs");

// --- header and segments ------------------------------------------------------------------
RG_INLINE constexpr uint32_t hdr_word(uint8_t opcode, uint8_t flags, uint32_t wqe_slots) {
  return (opcode & HDR_WT_MASK) | ((flags & HDR_FLAGS_MASK) << HDR_FLAGS_SHIFT) |
         ((wqe_slots & HDR_WS_MASK) << HDR_WS_SHIFT);
}
// Slots a WQE's header field counts: the two header slots plus one per SGE,
// or plus the inline bytes rounded up to slots (bnxt_re_required_slots()).
RG_INLINE constexpr uint32_t wqe_slots(uint32_t num_sge, uint32_t inline_bytes, bool is_inline) {
  return is_inline ? (SQE_HDR_BYTES + ((inline_bytes + SLOT_BYTES - 1) & ~(SLOT_BYTES - 1))) >> SLOT_SHIFT
                   : (SQE_HDR_BYTES + num_sge * SLOT_BYTES) >> SLOT_SHIFT;
}
// Slots the producer index advances by for that WQE.
RG_INLINE constexpr uint32_t ring_slots(uint32_t mode, uint32_t slots_used) {
  return mode == WQE_MODE_STATIC ? uint32_t{STATIC_WQE_SLOTS} : slots_used;
}

// One 16-byte slot, as four little-endian 32-bit words in memory order.
typedef uint32_t Slot __attribute__((vector_size(16)));

RG_INLINE Slot slot_bsqe(uint8_t opcode, uint8_t flags, uint32_t wqe_slots, uint32_t key_immd, uint64_t lhdr) {
  return Slot{hdr_word(opcode, flags, wqe_slots), key_immd, static_cast<uint32_t>(lhdr),
              static_cast<uint32_t>(lhdr >> 32)};
}
RG_INLINE Slot slot_rdma(uint64_t rva, uint32_t rkey) {
  return Slot{static_cast<uint32_t>(rva), static_cast<uint32_t>(rva >> 32), rkey, 0};
}
RG_INLINE Slot slot_atomic(uint64_t swap_add, uint64_t compare) {
  return Slot{static_cast<uint32_t>(swap_add), static_cast<uint32_t>(swap_add >> 32), static_cast<uint32_t>(compare),
              static_cast<uint32_t>(compare >> 32)};
}
RG_INLINE Slot slot_sge(uint64_t pa, uint32_t lkey, uint32_t length) {
  return Slot{static_cast<uint32_t>(pa), static_cast<uint32_t>(pa >> 32), lkey, length};
}
// Inline data of up to 8 bytes, at the start of its slot, zero padded.
RG_INLINE Slot slot_inline8(uint64_t value, uint32_t len) {
  if (len < 8) value &= (uint64_t{1} << (8 * len)) - 1;
  return Slot{static_cast<uint32_t>(value), static_cast<uint32_t>(value >> 32), 0, 0};
}

// A whole three-slot WQE: every WQE this library posts is header + one
// second-header slot + one SGE or up to 16 inline bytes.
struct alignas(16) Wqe3 {
  Slot s[3];
};
static_assert(sizeof(Wqe3) == 3 * SLOT_BYTES, "three slots");

// RDMA WRITE / WRITE_IMM / READ with one SGE (verbs.c bnxt_re_post_send()):
// lhdr is the payload length; WRITE_IMM carries the immediate in host order.
RG_INLINE Wqe3 wqe_rdma(uint8_t opcode, uint8_t flags, uint64_t raddr, uint32_t rkey, uint64_t laddr, uint32_t lkey,
                        uint32_t length, uint32_t imm_host) {
  const uint32_t slots = wqe_slots(1, 0, false);
  return Wqe3{{slot_bsqe(opcode, static_cast<uint8_t>(flags & ~WR_INLINE), slots,
                         opcode == OP_RDMA_WRITE_IMM ? imm_host : 0u, length),
               slot_rdma(raddr, rkey), slot_sge(laddr, lkey, length)}};
}
// RDMA WRITE of up to 8 inline bytes.
RG_INLINE Wqe3 wqe_write_inline8(uint8_t flags, uint64_t raddr, uint32_t rkey, uint64_t value, uint32_t len) {
  const uint32_t slots = wqe_slots(0, len, true);
  return Wqe3{{slot_bsqe(OP_RDMA_WRITE, static_cast<uint8_t>(flags | WR_INLINE), slots, 0u, len),
               slot_rdma(raddr, rkey), slot_inline8(value, len)}};
}
// FETCH_ADD / CMP_SWAP (bnxt_re_build_fna_sqe / _cns_sqe): the rkey goes in
// key_immd and the remote address in lhdr; the fetched value lands in the SGE.
RG_INLINE Wqe3 wqe_atomic(uint8_t opcode, uint8_t flags, uint64_t raddr, uint32_t rkey, uint64_t swap_add,
                          uint64_t compare, uint64_t laddr, uint32_t lkey) {
  const uint32_t slots = wqe_slots(1, 0, false);
  return Wqe3{{slot_bsqe(opcode, static_cast<uint8_t>(flags & ~WR_INLINE), slots, rkey, raddr),
               slot_atomic(swap_add, opcode == OP_ATOMIC_CS ? compare : 0), slot_sge(laddr, lkey, 8)}};
}

// --- doorbell --------------------------------------------------------------------------------
// The 64-bit value written (little-endian) to the doorbell page. `index` is
// the producer index after the WQEs: in slots (variable mode) or in WQEs
// (static mode, where rdma-core rings jsqq->start_idx); `epoch` is the wrap
// parity of the ring (flipped each time the slot tail wraps).
RG_INLINE constexpr uint64_t db_value(uint32_t index, uint32_t epoch, uint32_t qid, uint32_t type) {
  const uint32_t lo = (index & DB_INDX_MASK) | ((epoch & 1u) << DB_EPOCH_SHIFT);
  const uint32_t hi = (qid & DB_QID_MASK) | (1u << DB_VALID_SHIFT) | ((type & DB_TYP_MASK) << DB_TYP_SHIFT);
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
// Epoch of a free-running producer count on a ring of `depth` slots.
RG_INLINE constexpr uint32_t db_epoch(uint64_t produced, uint32_t depth) {
  return static_cast<uint32_t>((produced / depth) & 1u);
}

// --- MSN table and PSNs ------------------------------------------------------------------------
// Packets of one message: ceil(len / mtu), and 1 for a zero-length message.
RG_INLINE constexpr uint32_t packets(uint32_t len, uint32_t mtu) { return len == 0 ? 1u : (len + mtu - 1) / mtu; }
RG_INLINE constexpr uint64_t msn_entry(uint32_t start_idx, uint32_t next_psn, uint32_t start_psn) {
  return (static_cast<uint64_t>(start_idx & 0xFFFF) << MSN_START_IDX_SHIFT) |
         (static_cast<uint64_t>(next_psn & PSN_MASK) << MSN_NEXT_PSN_SHIFT) | (start_psn & MSN_START_PSN_MASK);
}

// --- completion ---------------------------------------------------------------------------------
RG_INLINE constexpr uint32_t cqe_phase(uint32_t flg) { return flg & BCQE_PH_MASK; }
RG_INLINE constexpr uint32_t cqe_type(uint32_t flg) { return (flg >> BCQE_TYPE_SHIFT) & BCQE_TYPE_MASK; }
RG_INLINE constexpr uint32_t cqe_status(uint32_t flg) { return (flg >> BCQE_STATUS_SHIFT) & BCQE_STATUS_MASK; }
// The phase software expects at consumer index `head` (free running) of a CQ
// of `depth` entries: the start phase, flipped at every wrap.
RG_INLINE constexpr uint32_t cq_expected_phase(uint64_t head, uint32_t depth) {
  return CQ_START_PHASE ^ static_cast<uint32_t>((head / depth) & 1u);
}
RG_INLINE constexpr bool cqe_is_valid(uint32_t flg, uint64_t head, uint32_t depth) {
  return cqe_phase(flg) == cq_expected_phase(head, depth);
}

// --- the kernel's answers (uapi <rdma/bnxt_re-abi.h>) --------------------------------------
// What the host reads to place a QP for the GPU: the WQE mode and chip of the
// context, the doorbell page of the PD, the CQ's first phase and tail.
enum : uint32_t {
  ABI_VERSION = 1,
  CHIP_ID0_CHIP_NUM_SFT = 0x00,
  CHIP_ID0_CHIP_REV_SFT = 0x10,
  CHIP_ID0_CHIP_MET_SFT = 0x18,
  UCNTX_CMASK_HAVE_MODE = 0x02,
  CHIP_NUM_57608 = 0x1760,  // Thor2 (providers/bnxt_re/main.h), a gen-P7 chip
};
struct UctxResp {
  uint32_t dev_id;
  uint32_t max_qp;
  uint32_t pg_size;
  uint32_t cqe_sz;
  uint32_t max_cqd;
  uint32_t rsvd;
  uint64_t comp_mask;
  uint32_t chip_id0;
  uint32_t chip_id1;
  uint32_t mode;
  uint32_t rsvd1;
};
struct __attribute__((packed, aligned(4))) PdResp {
  uint32_t pdid;
  uint32_t dpi;
  uint64_t dbr;
};
struct CqResp {
  uint32_t cqid;
  uint32_t tail;
  uint32_t phase;
  uint32_t rsvd;
};
struct QpResp {
  uint32_t qpid;
  uint32_t rsvd;
};
static_assert(sizeof(UctxResp) == 48 && offsetof(UctxResp, comp_mask) == 24 && offsetof(UctxResp, mode) == 40,
              "uctx resp");
static_assert(sizeof(PdResp) == 16 && offsetof(PdResp, dbr) == 8, "pd resp");
static_assert(sizeof(CqResp) == 16 && offsetof(CqResp, phase) == 8, "cq resp");
static_assert(sizeof(QpResp) == 8, "qp resp");

}  // namespace bnxt
}  // namespace rust_gin
