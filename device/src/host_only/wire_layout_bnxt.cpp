// Host-only: the facts of device/include/rust_gin/bnxt/wire.h as the C++
// compiler sees them (sizes, field offsets, every constant), exported as a C
// table for tests/wire_oracle_bnxt.rs, plus the header's builders callable
// from the test. Each row is named after the upstream fact it must equal:
// either a fact of build/bnxt_re_oracle.c (the installed uapi header) or one
// of the cited provider facts the test states; `ours` names the C++
// expression. Not part of the GPU build.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rust_gin/bnxt/wire.h"

using namespace rust_gin::bnxt;

struct rust_gin_wire_fact {
  const char* oracle;  // the name of the upstream fact
  const char* ours;    // the C++ expression
  unsigned long long value;
};

extern "C" {
extern const rust_gin_wire_fact rust_gin_bnxt_wire_facts[];
extern const size_t rust_gin_bnxt_wire_facts_len;
void rust_gin_bnxt_wqe_rdma(uint8_t opcode, uint8_t flags, uint64_t raddr, uint32_t rkey, uint64_t laddr,
                            uint32_t lkey, uint32_t length, uint32_t imm_host, uint8_t out[48]);
void rust_gin_bnxt_wqe_write_inline8(uint8_t flags, uint64_t raddr, uint32_t rkey, uint64_t value, uint32_t len,
                                     uint8_t out[48]);
void rust_gin_bnxt_wqe_atomic(uint8_t opcode, uint8_t flags, uint64_t raddr, uint32_t rkey, uint64_t swap_add,
                              uint64_t compare, uint64_t laddr, uint32_t lkey, uint8_t out[48]);
uint64_t rust_gin_bnxt_db_value(uint32_t index, uint32_t epoch, uint32_t qid, uint32_t type);
uint64_t rust_gin_bnxt_msn_entry(uint32_t start_idx, uint32_t next_psn, uint32_t start_psn);
uint32_t rust_gin_bnxt_packets(uint32_t len, uint32_t mtu);
uint32_t rust_gin_bnxt_wqe_slots(uint32_t num_sge, uint32_t inline_bytes, int is_inline);
int rust_gin_bnxt_cqe_is_valid(uint32_t flg, uint64_t head, uint32_t depth);
}

#define SIZE(o, t) {"sizeof(" #o ")", "sizeof(" #t ")", sizeof(t)}
#define OFF(o, of, t, f) {"offsetof(" #o "." #of ")", "offsetof(" #t ", " #f ")", offsetof(t, f)}
#define CONST(o, c) {#o, #c, static_cast<unsigned long long>(c)}

const rust_gin_wire_fact rust_gin_bnxt_wire_facts[] = {
    // --- the uapi header (build/bnxt_re_oracle.c)
    SIZE(bnxt_re_uctx_resp, UctxResp),
    SIZE(bnxt_re_pd_resp, PdResp),
    SIZE(bnxt_re_cq_resp, CqResp),
    SIZE(bnxt_re_qp_resp, QpResp),
    OFF(bnxt_re_uctx_resp, comp_mask, UctxResp, comp_mask),
    OFF(bnxt_re_uctx_resp, chip_id0, UctxResp, chip_id0),
    OFF(bnxt_re_uctx_resp, mode, UctxResp, mode),
    OFF(bnxt_re_pd_resp, dpi, PdResp, dpi),
    OFF(bnxt_re_pd_resp, dbr, PdResp, dbr),
    OFF(bnxt_re_cq_resp, cqid, CqResp, cqid),
    OFF(bnxt_re_cq_resp, tail, CqResp, tail),
    OFF(bnxt_re_cq_resp, phase, CqResp, phase),
    OFF(bnxt_re_qp_resp, qpid, QpResp, qpid),
    CONST(BNXT_RE_ABI_VERSION, ABI_VERSION),
    CONST(BNXT_RE_CHIP_ID0_CHIP_NUM_SFT, CHIP_ID0_CHIP_NUM_SFT),
    CONST(BNXT_RE_CHIP_ID0_CHIP_REV_SFT, CHIP_ID0_CHIP_REV_SFT),
    CONST(BNXT_RE_CHIP_ID0_CHIP_MET_SFT, CHIP_ID0_CHIP_MET_SFT),
    CONST(BNXT_RE_UCNTX_CMASK_HAVE_MODE, UCNTX_CMASK_HAVE_MODE),
    CONST(BNXT_QPLIB_WQE_MODE_STATIC, WQE_MODE_STATIC),
    CONST(BNXT_QPLIB_WQE_MODE_VARIABLE, WQE_MODE_VARIABLE),
    // --- provider structures (rdma-core providers/bnxt_re/bnxt_re-abi.h)
    SIZE(bnxt_re_bsqe, Bsqe),
    SIZE(bnxt_re_rdma, RdmaSeg),
    SIZE(bnxt_re_atomic, AtomicSeg),
    SIZE(bnxt_re_sge, Sge),
    SIZE(bnxt_re_db_hdr, DbHdr),
    SIZE(bnxt_re_req_cqe, ReqCqe),
    SIZE(bnxt_re_bcqe, Bcqe),
    OFF(bnxt_re_bsqe, rsv_ws_fl_wt, Bsqe, rsv_ws_fl_wt),
    OFF(bnxt_re_bsqe, key_immd, Bsqe, key_immd),
    OFF(bnxt_re_bsqe, lhdr, Bsqe, lhdr),
    OFF(bnxt_re_rdma, rva, RdmaSeg, rva),
    OFF(bnxt_re_rdma, rkey, RdmaSeg, rkey),
    OFF(bnxt_re_rdma, rsvd2, RdmaSeg, rsvd2),
    OFF(bnxt_re_atomic, swp_dt, AtomicSeg, swp_dt),
    OFF(bnxt_re_atomic, cmp_dt, AtomicSeg, cmp_dt),
    OFF(bnxt_re_sge, pa, Sge, pa),
    OFF(bnxt_re_sge, lkey, Sge, lkey),
    OFF(bnxt_re_sge, length, Sge, length),
    OFF(bnxt_re_db_hdr, indx, DbHdr, indx),
    OFF(bnxt_re_db_hdr, typ_qid, DbHdr, typ_qid),
    OFF(bnxt_re_req_cqe, qp_handle, ReqCqe, qp_handle),
    OFF(bnxt_re_req_cqe, con_indx, ReqCqe, con_indx),
    OFF(bnxt_re_bcqe, flg_st_typ_ph, Bcqe, flg_st_typ_ph),
    OFF(bnxt_re_bcqe, qphi_rwrid, Bcqe, qphi_rwrid),
    // --- geometry
    CONST(sizeof(bnxt_re_sge), SLOT_BYTES),
    CONST(log2(sizeof(bnxt_re_sge)), SLOT_SHIFT),
    CONST(bnxt_re_get_sqe_hdr_sz(), SQE_HDR_BYTES),
    CONST(STATIC_WQE_NUM_SLOTS, STATIC_WQE_SLOTS),
    CONST(BNXT_RE_STATIC_WQE_MAX_SGE, STATIC_WQE_MAX_SGE),
    CONST(BNXT_RE_MAX_INLINE_SIZE, MAX_INLINE),
    CONST(bnxt_re_get_cqe_sz(), CQE_BYTES),
    {"bnxt_re_get_cqe_sz()", "sizeof(Cqe)", sizeof(Cqe)},
    CONST(BNXT_RE_QUEUE_START_PHASE, CQ_START_PHASE),
    CONST(BNXT_RE_COMP_MASK_UCNTX_MSN_TABLE_ENABLED, UCNTX_MSN_TABLE_ENABLED),
    CONST(CHIP_NUM_57608, CHIP_NUM_57608),
    // --- opcodes and flags
    CONST(BNXT_RE_WR_OPCD_SEND, OP_SEND),
    CONST(BNXT_RE_WR_OPCD_SEND_IMM, OP_SEND_IMM),
    CONST(BNXT_RE_WR_OPCD_RDMA_WRITE, OP_RDMA_WRITE),
    CONST(BNXT_RE_WR_OPCD_RDMA_WRITE_IMM, OP_RDMA_WRITE_IMM),
    CONST(BNXT_RE_WR_OPCD_RDMA_READ, OP_RDMA_READ),
    CONST(BNXT_RE_WR_OPCD_ATOMIC_CS, OP_ATOMIC_CS),
    CONST(BNXT_RE_WR_OPCD_ATOMIC_FA, OP_ATOMIC_FA),
    CONST(BNXT_RE_WR_FLAGS_SIGNALED, WR_SIGNALED),
    CONST(BNXT_RE_WR_FLAGS_RD_FENCE, WR_RD_FENCE),
    CONST(BNXT_RE_WR_FLAGS_UC_FENCE, WR_UC_FENCE),
    CONST(BNXT_RE_WR_FLAGS_SE, WR_SE),
    CONST(BNXT_RE_WR_FLAGS_INLINE, WR_INLINE),
    CONST(BNXT_RE_HDR_WT_MASK, HDR_WT_MASK),
    CONST(BNXT_RE_HDR_FLAGS_MASK, HDR_FLAGS_MASK),
    CONST(BNXT_RE_HDR_FLAGS_SHIFT, HDR_FLAGS_SHIFT),
    CONST(BNXT_RE_HDR_WS_MASK, HDR_WS_MASK),
    CONST(BNXT_RE_HDR_WS_SHIFT, HDR_WS_SHIFT),
    // --- doorbell
    CONST(BNXT_RE_DB_INDX_MASK, DB_INDX_MASK),
    CONST(BNXT_RE_DB_EPOCH_SHIFT, DB_EPOCH_SHIFT),
    CONST(BNXT_RE_DB_TOGGLE_SHIFT, DB_TOGGLE_SHIFT),
    CONST(BNXT_RE_DB_QID_MASK, DB_QID_MASK),
    CONST(BNXT_RE_DB_VALID_SHIFT, DB_VALID_SHIFT),
    CONST(BNXT_RE_DB_TYP_MASK, DB_TYP_MASK),
    CONST(BNXT_RE_DB_TYP_SHIFT, DB_TYP_SHIFT),
    CONST(BNXT_RE_QUE_TYPE_SQ, QUE_TYPE_SQ),
    CONST(BNXT_RE_QUE_TYPE_RQ, QUE_TYPE_RQ),
    CONST(BNXT_RE_QUE_TYPE_CQ, QUE_TYPE_CQ),
    CONST(BNXT_RE_QUE_TYPE_CQ_ARMALL, QUE_TYPE_CQ_ARMALL),
    // --- completion
    CONST(BNXT_RE_BCQE_PH_MASK, BCQE_PH_MASK),
    CONST(BNXT_RE_BCQE_TYPE_MASK, BCQE_TYPE_MASK),
    CONST(BNXT_RE_BCQE_TYPE_SHIFT, BCQE_TYPE_SHIFT),
    CONST(BNXT_RE_BCQE_STATUS_MASK, BCQE_STATUS_MASK),
    CONST(BNXT_RE_BCQE_STATUS_SHIFT, BCQE_STATUS_SHIFT),
    CONST(BNXT_RE_WC_TYPE_SEND, WC_TYPE_SEND),
    CONST(BNXT_RE_WC_TYPE_RECV_RC, WC_TYPE_RECV_RC),
    CONST(BNXT_RE_WC_TYPE_TERM, WC_TYPE_TERM),
    CONST(BNXT_RE_WC_TYPE_COFF, WC_TYPE_COFF),
    CONST(BNXT_RE_REQ_ST_OK, REQ_ST_OK),
    CONST(BNXT_RE_REQ_ST_BAD_RESP, REQ_ST_BAD_RESP),
    CONST(BNXT_RE_REQ_ST_LOC_LEN, REQ_ST_LOC_LEN),
    CONST(BNXT_RE_REQ_ST_LOC_QP_OP, REQ_ST_LOC_QP_OP),
    CONST(BNXT_RE_REQ_ST_PROT, REQ_ST_PROT),
    CONST(BNXT_RE_REQ_ST_MEM_OP, REQ_ST_MEM_OP),
    CONST(BNXT_RE_REQ_ST_REM_INVAL, REQ_ST_REM_INVAL),
    CONST(BNXT_RE_REQ_ST_REM_ACC, REQ_ST_REM_ACC),
    CONST(BNXT_RE_REQ_ST_REM_OP, REQ_ST_REM_OP),
    CONST(BNXT_RE_REQ_ST_RNR_NAK_XCED, REQ_ST_RNR_NAK_XCED),
    CONST(BNXT_RE_REQ_ST_TRNSP_XCED, REQ_ST_TRNSP_XCED),
    CONST(BNXT_RE_REQ_ST_WR_FLUSH, REQ_ST_WR_FLUSH),
    // --- MSN table and PSNs
    CONST(BNXT_RE_SQ_MSN_SEARCH_START_PSN_MASK, MSN_START_PSN_MASK),
    CONST(BNXT_RE_SQ_MSN_SEARCH_NEXT_PSN_SHIFT, MSN_NEXT_PSN_SHIFT),
    CONST(BNXT_RE_SQ_MSN_SEARCH_START_IDX_SHIFT, MSN_START_IDX_SHIFT),
    CONST(BNXT_RE_PSNS_NPSN_MASK, PSN_MASK),
};
const size_t rust_gin_bnxt_wire_facts_len = sizeof(rust_gin_bnxt_wire_facts) / sizeof(rust_gin_bnxt_wire_facts[0]);

static void store(const Wqe3& w, uint8_t out[48]) { memcpy(out, &w, sizeof w); }

void rust_gin_bnxt_wqe_rdma(uint8_t opcode, uint8_t flags, uint64_t raddr, uint32_t rkey, uint64_t laddr,
                            uint32_t lkey, uint32_t length, uint32_t imm_host, uint8_t out[48]) {
  store(wqe_rdma(opcode, flags, raddr, rkey, laddr, lkey, length, imm_host), out);
}
void rust_gin_bnxt_wqe_write_inline8(uint8_t flags, uint64_t raddr, uint32_t rkey, uint64_t value, uint32_t len,
                                     uint8_t out[48]) {
  store(wqe_write_inline8(flags, raddr, rkey, value, len), out);
}
void rust_gin_bnxt_wqe_atomic(uint8_t opcode, uint8_t flags, uint64_t raddr, uint32_t rkey, uint64_t swap_add,
                              uint64_t compare, uint64_t laddr, uint32_t lkey, uint8_t out[48]) {
  store(wqe_atomic(opcode, flags, raddr, rkey, swap_add, compare, laddr, lkey), out);
}
uint64_t rust_gin_bnxt_db_value(uint32_t index, uint32_t epoch, uint32_t qid, uint32_t type) {
  return db_value(index, epoch, qid, type);
}
uint64_t rust_gin_bnxt_msn_entry(uint32_t start_idx, uint32_t next_psn, uint32_t start_psn) {
  return msn_entry(start_idx, next_psn, start_psn);
}
uint32_t rust_gin_bnxt_packets(uint32_t len, uint32_t mtu) { return packets(len, mtu); }
uint32_t rust_gin_bnxt_wqe_slots(uint32_t num_sge, uint32_t inline_bytes, int is_inline) {
  return wqe_slots(num_sge, inline_bytes, is_inline != 0);
}
int rust_gin_bnxt_cqe_is_valid(uint32_t flg, uint64_t head, uint32_t depth) {
  return cqe_is_valid(flg, head, depth) ? 1 : 0;
}
