// Host-only: the facts of device/include/rust_gin/ionic/wire.h as the C++
// compiler sees them (sizes, field offsets, every constant), exported as a C
// table for tests/wire_oracle_ionic.rs, plus the header's builders callable
// from the test. Each row is named after the upstream fact it must equal; the
// test states those facts with their rdma-core source lines (ionic's headers
// are not installed here). Not part of the GPU build.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rust_gin/ionic/wire.h"

using namespace rust_gin::ionic;

struct rust_gin_wire_fact {
  const char* oracle;  // the name of the upstream fact
  const char* ours;    // the C++ expression
  unsigned long long value;
};

extern "C" {
extern const rust_gin_wire_fact rust_gin_ionic_wire_facts[];
extern const size_t rust_gin_ionic_wire_facts_len;
void rust_gin_ionic_wqe_rdma(uint8_t op, uint16_t idx, uint16_t flags, uint32_t color, uint64_t raddr, uint32_t rkey,
                             uint64_t laddr, uint32_t lkey, uint32_t length, uint32_t imm_be, uint8_t out[64]);
void rust_gin_ionic_wqe_write_inline8(uint8_t op, uint16_t idx, uint16_t flags, uint32_t color, uint64_t raddr,
                                      uint32_t rkey, uint64_t value, uint32_t len, uint8_t out[64]);
void rust_gin_ionic_wqe_atomic_v2(uint8_t op, uint16_t idx, uint16_t flags, uint32_t color, uint64_t raddr,
                                  uint32_t rkey, uint64_t swap_add, uint64_t compare, uint64_t laddr, uint32_t lkey,
                                  uint8_t out[64]);
void rust_gin_ionic_wqe_atomic_v1(uint8_t op, uint16_t idx, uint16_t flags, uint32_t color, uint64_t raddr,
                                  uint32_t rkey, uint64_t swap_add, uint64_t compare, uint64_t laddr, uint32_t lkey,
                                  uint8_t out[64]);
uint64_t rust_gin_ionic_db_value(uint32_t qid, uint16_t prod);
uint32_t rust_gin_ionic_color_for(uint64_t i, uint32_t depth);
int rust_gin_ionic_cqe_is_valid(uint32_t qtf_stored, uint64_t ci, uint32_t depth);
}

#define SIZE(o, t) {"sizeof(" #o ")", "sizeof(" #t ")", sizeof(t)}
#define OFF(o, of, t, f) {"offsetof(" #o "." #of ")", "offsetof(" #t ", " #f ")", offsetof(t, f)}
#define OFFB(o, of, t, f) {"offsetof(" #o "." #of ")", "16+offsetof(" #t ", " #f ")", 16 + offsetof(t, f)}
#define CONST(o, c) {#o, #c, static_cast<unsigned long long>(c)}

const rust_gin_wire_fact rust_gin_ionic_wire_facts[] = {
    // --- structures (ionic_fw_types.h); body offsets are within the whole WQE
    SIZE(ionic_sge, Sge),
    SIZE(ionic_v1_base_hdr, BaseHdr),
    SIZE(ionic_v1_wqe, Wqe64),
    SIZE(ionic_v1_cqe, Cqe),
    SIZE(ionic_v1_pld, RdmaBody::pld),
    OFF(ionic_sge, va, Sge, va),
    OFF(ionic_sge, len, Sge, len),
    OFF(ionic_sge, lkey, Sge, lkey),
    OFF(ionic_v1_base_hdr, wqe_idx, BaseHdr, wqe_idx),
    OFF(ionic_v1_base_hdr, op, BaseHdr, op),
    OFF(ionic_v1_base_hdr, num_sge_key, BaseHdr, num_sge_key),
    OFF(ionic_v1_base_hdr, flags, BaseHdr, flags),
    OFF(ionic_v1_base_hdr, imm_data_key, BaseHdr, imm_data_key),
    OFFB(ionic_v1_wqe, common.rdma.remote_va_high, RdmaBody, remote_va_high),
    OFFB(ionic_v1_wqe, common.rdma.remote_va_low, RdmaBody, remote_va_low),
    OFFB(ionic_v1_wqe, common.rdma.remote_rkey, RdmaBody, remote_rkey),
    OFFB(ionic_v1_wqe, common.length, RdmaBody, length),
    OFFB(ionic_v1_wqe, common.pld, RdmaBody, pld),
    OFFB(ionic_v1_wqe, atomic.sge, AtomicV1Body, sge),
    OFFB(ionic_v1_wqe, atomic_v2.remote_va_high, AtomicV2Body, remote_va_high),
    OFFB(ionic_v1_wqe, atomic_v2.remote_va_low, AtomicV2Body, remote_va_low),
    OFFB(ionic_v1_wqe, atomic_v2.remote_rkey, AtomicV2Body, remote_rkey),
    OFFB(ionic_v1_wqe, atomic_v2.swap_add_high, AtomicV2Body, swap_add_high),
    OFFB(ionic_v1_wqe, atomic_v2.swap_add_low, AtomicV2Body, swap_add_low),
    OFFB(ionic_v1_wqe, atomic_v2.compare_high, AtomicV2Body, compare_high),
    OFFB(ionic_v1_wqe, atomic_v2.compare_low, AtomicV2Body, compare_low),
    OFFB(ionic_v1_wqe, atomic_v2.lkey, AtomicV2Body, lkey),
    OFFB(ionic_v1_wqe, atomic_v2.local_va, AtomicV2Body, local_va),
    OFFB(ionic_v1_wqe, atomic_v2.rsvd_expdb, AtomicV2Body, rsvd_expdb),
    OFF(ionic_v1_cqe, send.msg_msn, Cqe, msg_msn),
    OFF(ionic_v1_cqe, send.npg_wqe_idx_timestamp, Cqe, npg_wqe_idx_timestamp),
    OFF(ionic_v1_cqe, status_length, Cqe, status_length),
    OFF(ionic_v1_cqe, qid_type_flags, Cqe, qid_type_flags),
    // --- geometry and versions
    CONST(sizeof(ionic_v1_wqe), WQE_BYTES),
    CONST(sizeof(ionic_v1_base_hdr), WQE_BASE_BYTES),
    CONST(offsetof(ionic_v1_wqe.common.pld), PLD_OFFSET),
    CONST(sizeof(ionic_v1_pld), PLD_BYTES),
    CONST(sizeof(ionic_sge), SGE_BYTES),
    CONST(sizeof(ionic_v1_cqe), CQE_BYTES),
    CONST(IONIC_EXP_DBELL_SZ, EXP_DBELL_SZ),
    CONST(IONIC_MIN_RDMA_VERSION, MIN_RDMA_VERSION),
    CONST(IONIC_MAX_RDMA_VERSION, MAX_RDMA_VERSION),
    CONST(IONIC_QUEUE_DEPTH_MAX, QUEUE_DEPTH_MAX),
    // --- opcodes
    CONST(IONIC_V1_OP_SEND, V1_OP_SEND),
    CONST(IONIC_V1_OP_SEND_IMM, V1_OP_SEND_IMM),
    CONST(IONIC_V1_OP_RDMA_READ, V1_OP_RDMA_READ),
    CONST(IONIC_V1_OP_RDMA_WRITE, V1_OP_RDMA_WRITE),
    CONST(IONIC_V1_OP_RDMA_WRITE_IMM, V1_OP_RDMA_WRITE_IMM),
    CONST(IONIC_V1_OP_ATOMIC_CS, V1_OP_ATOMIC_CS),
    CONST(IONIC_V1_OP_ATOMIC_FA, V1_OP_ATOMIC_FA),
    CONST(IONIC_V2_OPSL_OUT, V2_OPSL_OUT),
    CONST(IONIC_V2_OPSL_IMM, V2_OPSL_IMM),
    CONST(IONIC_V2_OP_SEND, V2_OP_SEND),
    CONST(IONIC_V2_OP_SEND_IMM, V2_OP_SEND_IMM),
    CONST(IONIC_V2_OP_RDMA_WRITE, V2_OP_RDMA_WRITE),
    CONST(IONIC_V2_OP_RDMA_WRITE_IMM, V2_OP_RDMA_WRITE_IMM),
    CONST(IONIC_V2_OP_RDMA_READ, V2_OP_RDMA_READ),
    CONST(IONIC_V2_OP_ATOMIC_CS, V2_OP_ATOMIC_CS),
    CONST(IONIC_V2_OP_ATOMIC_FA, V2_OP_ATOMIC_FA),
    CONST(IONIC_V1_FLAG_FENCE, FLAG_FENCE),
    CONST(IONIC_V1_FLAG_SOL, FLAG_SOL),
    CONST(IONIC_V1_FLAG_INL, FLAG_INL),
    CONST(IONIC_V1_FLAG_SIG, FLAG_SIG),
    CONST(IONIC_V1_FLAG_COLOR, FLAG_COLOR),
    // --- doorbell
    CONST(IONIC_QID_MASK, QID_MASK),
    CONST(IONIC_DBELL_QID_SHIFT, DBELL_QID_SHIFT),
    CONST(IONIC_DBELL_RING_ARM, DBELL_RING_ARM),
    CONST(IONIC_DBELL_RING_SONLY, DBELL_RING_SONLY),
    // --- completion
    CONST(IONIC_V1_CQE_COLOR, CQE_COLOR),
    CONST(IONIC_V1_CQE_ERROR, CQE_ERROR),
    CONST(IONIC_V1_CQE_TYPE_SHIFT, CQE_TYPE_SHIFT),
    CONST(IONIC_V1_CQE_TYPE_MASK, CQE_TYPE_MASK),
    CONST(IONIC_V1_CQE_QID_SHIFT, CQE_QID_SHIFT),
    CONST(IONIC_V1_CQE_WQE_IDX_MASK, CQE_WQE_IDX_MASK),
    CONST(IONIC_V1_CQE_TIMESTAMP_SHIFT, CQE_TIMESTAMP_SHIFT),
    CONST(IONIC_V1_CQE_TYPE_RECV, CQE_TYPE_RECV),
    CONST(IONIC_V1_CQE_TYPE_SEND_MSN, CQE_TYPE_SEND_MSN),
    CONST(IONIC_V1_CQE_TYPE_SEND_NPG, CQE_TYPE_SEND_NPG),
    CONST(IONIC_STS_OK, STS_OK),
    CONST(IONIC_STS_LOCAL_LEN_ERR, STS_LOCAL_LEN_ERR),
    CONST(IONIC_STS_LOCAL_QP_OPER_ERR, STS_LOCAL_QP_OPER_ERR),
    CONST(IONIC_STS_LOCAL_PROT_ERR, STS_LOCAL_PROT_ERR),
    CONST(IONIC_STS_WQE_FLUSHED_ERR, STS_WQE_FLUSHED_ERR),
    CONST(IONIC_STS_MEM_MGMT_OPER_ERR, STS_MEM_MGMT_OPER_ERR),
    CONST(IONIC_STS_BAD_RESP_ERR, STS_BAD_RESP_ERR),
    CONST(IONIC_STS_LOCAL_ACC_ERR, STS_LOCAL_ACC_ERR),
    CONST(IONIC_STS_REMOTE_INV_REQ_ERR, STS_REMOTE_INV_REQ_ERR),
    CONST(IONIC_STS_REMOTE_ACC_ERR, STS_REMOTE_ACC_ERR),
    CONST(IONIC_STS_REMOTE_OPER_ERR, STS_REMOTE_OPER_ERR),
    CONST(IONIC_STS_RETRY_EXCEEDED, STS_RETRY_EXCEEDED),
    CONST(IONIC_STS_RNR_RETRY_EXCEEDED, STS_RNR_RETRY_EXCEEDED),
    CONST(IONIC_STS_XRC_VIO_ERR, STS_XRC_VIO_ERR),
};
const size_t rust_gin_ionic_wire_facts_len = sizeof(rust_gin_ionic_wire_facts) / sizeof(rust_gin_ionic_wire_facts[0]);

static void store(const Wqe64& w, uint8_t out[64]) { memcpy(out, &w, sizeof w); }

void rust_gin_ionic_wqe_rdma(uint8_t op, uint16_t idx, uint16_t flags, uint32_t color, uint64_t raddr, uint32_t rkey,
                             uint64_t laddr, uint32_t lkey, uint32_t length, uint32_t imm_be, uint8_t out[64]) {
  store(wqe_rdma(op, idx, flags, color, raddr, rkey, laddr, lkey, length, imm_be), out);
}
void rust_gin_ionic_wqe_write_inline8(uint8_t op, uint16_t idx, uint16_t flags, uint32_t color, uint64_t raddr,
                                      uint32_t rkey, uint64_t value, uint32_t len, uint8_t out[64]) {
  store(wqe_write_inline8(op, idx, flags, color, raddr, rkey, value, len), out);
}
void rust_gin_ionic_wqe_atomic_v2(uint8_t op, uint16_t idx, uint16_t flags, uint32_t color, uint64_t raddr,
                                  uint32_t rkey, uint64_t swap_add, uint64_t compare, uint64_t laddr, uint32_t lkey,
                                  uint8_t out[64]) {
  store(wqe_atomic_v2(op, idx, flags, color, raddr, rkey, swap_add, compare, laddr, lkey), out);
}
void rust_gin_ionic_wqe_atomic_v1(uint8_t op, uint16_t idx, uint16_t flags, uint32_t color, uint64_t raddr,
                                  uint32_t rkey, uint64_t swap_add, uint64_t compare, uint64_t laddr, uint32_t lkey,
                                  uint8_t out[64]) {
  store(wqe_atomic_v1(op, idx, flags, color, raddr, rkey, swap_add, compare, laddr, lkey), out);
}
uint64_t rust_gin_ionic_db_value(uint32_t qid, uint16_t prod) { return db_value(qid, prod); }
uint32_t rust_gin_ionic_color_for(uint64_t i, uint32_t depth) { return color_for(i, depth); }
int rust_gin_ionic_cqe_is_valid(uint32_t qtf_stored, uint64_t ci, uint32_t depth) {
  return cqe_is_valid(cqe_qtf(qtf_stored), ci, depth) ? 1 : 0;
}
