// Host-only: the facts of device/include/rust_gin/mlx5/wire.h as the C++
// compiler sees them (sizes, field offsets, every constant), exported as a C
// table for tests/wire_oracle.rs. Each row is named after the fact of
// build/mlx5dv_oracle.c (rdma-core's infiniband/mlx5dv.h) it must equal, so
// the test compares the two tables name by name; `ours` says which C++
// expression produced the value. Not part of the GPU build.
//
// Two constants have no counterpart in mlx5dv.h; they are listed apart, with
// where rdma-core states them, and the test checks them against that source.
#include <stddef.h>
#include <stdint.h>

#include "rust_gin/mlx5/wire.h"
#include "rust_gin/abi/error.h"
#include "rust_gin/mlx5/family.h"
#include "rust_gin/mlx5/wqe.h"

using namespace rust_gin::mlx5;

struct rust_gin_wire_fact {
  const char* oracle;  // the name of the matching fact in build/mlx5dv_oracle.c
  const char* ours;    // the C++ expression
  unsigned long long value;
};

struct rust_gin_wire_extra {
  const char* ours;
  unsigned long long value;
  const char* source;  // where rdma-core states it, outside mlx5dv.h
};

extern "C" {
extern const rust_gin_wire_fact rust_gin_wire_facts[];
extern const size_t rust_gin_wire_facts_len;
extern const rust_gin_wire_extra rust_gin_wire_extras[];
extern const size_t rust_gin_wire_extras_len;
int rust_gin_wire_cqe_is_sw_owned(uint8_t op_own, uint32_t ci, uint32_t log_cnt);
uint8_t rust_gin_wire_cqe_opcode(uint8_t op_own);
uint8_t rust_gin_wire_cqe_owner(uint8_t op_own);
int rust_gin_wire_build_listed_wqe(const rust_gin_mlx5_request* req, uint16_t index, uint32_t qpn, int cq_update,
                                   int uniform, void* out64);
int rust_gin_wire_build_dc_wqe(const rust_gin_mlx5_request* req, uint64_t ticket, uint32_t qpn, int cq_update,
                               const void* av48, int by_shape, void* out128);
void rust_gin_wire_set_dgram_seg(void* out48, uint64_t key, uint32_t dqp_dct, uint8_t ext, uint8_t stat_rate_sl,
                                 uint8_t fl_mlid, uint16_t rlid, const uint8_t* rmac, uint8_t tclass,
                                 uint8_t hop_limit, uint32_t grh_gid_fl, const uint8_t* rgid);
void rust_gin_wire_set_dc_addr(void* out48, const void* ah_av48, uint32_t dctn, uint64_t dc_key);
}

#define SIZE(o, t) {"sizeof(" #o ")", "sizeof(" #t ")", sizeof(t)}
#define OFF(o, of, t, f) {"offsetof(" #o "." #of ")", "offsetof(" #t ", " #f ")", offsetof(t, f)}
#define CONST(o, c) {#o, #c, static_cast<unsigned long long>(c)}

const rust_gin_wire_fact rust_gin_wire_facts[] = {
    // --- sizes
    SIZE(mlx5_wqe_ctrl_seg, CtrlSeg),
    SIZE(mlx5_wqe_raddr_seg, RaddrSeg),
    SIZE(mlx5_wqe_data_seg, DataSeg),
    SIZE(mlx5_wqe_atomic_seg, AtomicSeg),
    SIZE(mlx5_wqe_inl_data_seg, InlineSeg),
    SIZE(mlx5_cqe64, Cqe64),
    SIZE(mlx5_err_cqe, Cqe64),  // an error CQE is a CQE64 read another way
    {"MLX5_SEND_WQE_BB", "sizeof(Wqe64)", sizeof(Wqe64)},
    // --- control segment
    OFF(mlx5_wqe_ctrl_seg, opmod_idx_opcode, CtrlSeg, opmod_idx_opcode),
    OFF(mlx5_wqe_ctrl_seg, qpn_ds, CtrlSeg, qpn_ds),
    OFF(mlx5_wqe_ctrl_seg, signature, CtrlSeg, signature),
    OFF(mlx5_wqe_ctrl_seg, dci_stream_channel_id, CtrlSeg, dci_stream_channel_id),
    OFF(mlx5_wqe_ctrl_seg, fm_ce_se, CtrlSeg, fm_ce_se),
    OFF(mlx5_wqe_ctrl_seg, imm, CtrlSeg, imm),
    // --- remote address, data pointer, atomic, inline header
    OFF(mlx5_wqe_raddr_seg, raddr, RaddrSeg, raddr),
    OFF(mlx5_wqe_raddr_seg, rkey, RaddrSeg, rkey),
    OFF(mlx5_wqe_raddr_seg, reserved, RaddrSeg, reserved),
    OFF(mlx5_wqe_data_seg, byte_count, DataSeg, byte_count),
    OFF(mlx5_wqe_data_seg, lkey, DataSeg, lkey),
    OFF(mlx5_wqe_data_seg, addr, DataSeg, addr),
    OFF(mlx5_wqe_atomic_seg, swap_add, AtomicSeg, swap_add),
    OFF(mlx5_wqe_atomic_seg, compare, AtomicSeg, compare),
    OFF(mlx5_wqe_inl_data_seg, byte_count, InlineSeg, byte_count),
    // --- CQE64
    OFF(mlx5_cqe64, srqn_uidx, Cqe64, srqn_uidx),
    OFF(mlx5_cqe64, imm_inval_pkey, Cqe64, imm_inval_pkey),
    OFF(mlx5_cqe64, byte_cnt, Cqe64, byte_cnt),
    OFF(mlx5_cqe64, timestamp, Cqe64, timestamp),
    OFF(mlx5_cqe64, sop_drop_qpn, Cqe64, sop_drop_qpn),
    OFF(mlx5_cqe64, wqe_counter, Cqe64, wqe_counter),
    OFF(mlx5_cqe64, signature, Cqe64, signature),
    OFF(mlx5_cqe64, op_own, Cqe64, op_own),
    // --- the error CQE: the same 64 bytes, read through struct mlx5_err_cqe
    OFF(mlx5_err_cqe, srqn, Cqe64, srqn_uidx),
    CONST(offsetof(mlx5_err_cqe.vendor_err_synd), ERR_CQE_VENDOR_SYNDROME_OFFSET),
    CONST(offsetof(mlx5_err_cqe.syndrome), ERR_CQE_SYNDROME_OFFSET),
    CONST(offsetof(mlx5_err_cqe.s_wqe_opcode_qpn), ERR_CQE_WQE_OPCODE_QPN_OFFSET),
    OFF(mlx5_err_cqe, s_wqe_opcode_qpn, Cqe64, sop_drop_qpn),
    OFF(mlx5_err_cqe, wqe_counter, Cqe64, wqe_counter),
    OFF(mlx5_err_cqe, signature, Cqe64, signature),
    OFF(mlx5_err_cqe, op_own, Cqe64, op_own),
    // --- the DC datagram segment (struct mlx5_wqe_datagram_seg = struct mlx5_wqe_av)
    SIZE(mlx5_wqe_datagram_seg, WqeAv),
    SIZE(mlx5_wqe_av, WqeAv),
    CONST(sizeof(mlx5_wqe_av), DATAGRAM_SEG_BYTES),
    OFF(mlx5_wqe_av, key.dc_key, WqeAv, dc_key),
    OFF(mlx5_wqe_av, dqp_dct, WqeAv, dqp_dct),
    OFF(mlx5_wqe_av, stat_rate_sl, WqeAv, stat_rate_sl),
    OFF(mlx5_wqe_av, fl_mlid, WqeAv, fl_mlid),
    OFF(mlx5_wqe_av, rlid, WqeAv, rlid),
    OFF(mlx5_wqe_av, reserved0, WqeAv, reserved0),
    OFF(mlx5_wqe_av, rmac, WqeAv, rmac),
    OFF(mlx5_wqe_av, tclass, WqeAv, tclass),
    OFF(mlx5_wqe_av, hop_limit, WqeAv, hop_limit),
    OFF(mlx5_wqe_av, grh_gid_fl, WqeAv, grh_gid_fl),
    OFF(mlx5_wqe_av, rgid, WqeAv, rgid),
    CONST(MLX5_EXTENDED_UD_AV, EXTENDED_UD_AV),
    // --- queue constants
    CONST(MLX5_SEND_WQE_BB, SEND_WQE_BB),
    CONST(MLX5_SEND_WQE_SHIFT, SEND_WQE_SHIFT),
    // A DS is one octoword: exactly one data segment (rdma-core's qp.c counts
    // sizeof(struct mlx5_wqe_data_seg) / 16 DS per data segment).
    CONST(sizeof(mlx5_wqe_data_seg), SEND_DS_BYTES),
    CONST(MLX5_INLINE_SEG, INLINE_SEG),
    CONST(MLX5_INVALID_LKEY, INVALID_LKEY),
    CONST(MLX5_RCV_DBR, RCV_DBR),
    CONST(MLX5_SND_DBR, SND_DBR),
    CONST(sizeof(mlx5_cqe64), CQE_SIZE),
    CONST(MLX5_CQE_OWNER_MASK, CQE_OWNER_MASK),
    CONST(MLX5_CQ_DOORBELL, CQ_DOORBELL),
    // --- send opcodes
    CONST(MLX5_OPCODE_NOP, OP_NOP),
    CONST(MLX5_OPCODE_RDMA_WRITE, OP_RDMA_WRITE),
    CONST(MLX5_OPCODE_RDMA_WRITE_IMM, OP_RDMA_WRITE_IMM),
    CONST(MLX5_OPCODE_SEND, OP_SEND),
    CONST(MLX5_OPCODE_RDMA_READ, OP_RDMA_READ),
    CONST(MLX5_OPCODE_ATOMIC_CS, OP_ATOMIC_CS),
    CONST(MLX5_OPCODE_ATOMIC_FA, OP_ATOMIC_FA),
    CONST(MLX5_OPCODE_ATOMIC_MASKED_CS, OP_ATOMIC_MASKED_CS),
    CONST(MLX5_OPCODE_ATOMIC_MASKED_FA, OP_ATOMIC_MASKED_FA),
    // --- fm_ce_se
    CONST(MLX5_WQE_CTRL_SOLICITED, CTRL_SOLICITED),
    CONST(MLX5_WQE_CTRL_CQ_UPDATE, CTRL_CQ_UPDATE),
    CONST(MLX5_WQE_CTRL_FENCE, CTRL_FENCE),
    CONST(MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE, CTRL_INITIATOR_SMALL_FENCE),
    // --- CQE opcodes
    CONST(MLX5_CQE_REQ, CQE_REQ),
    CONST(MLX5_CQE_RESP_WR_IMM, CQE_RESP_WR_IMM),
    CONST(MLX5_CQE_RESP_SEND, CQE_RESP_SEND),
    CONST(MLX5_CQE_REQ_ERR, CQE_REQ_ERR),
    CONST(MLX5_CQE_RESP_ERR, CQE_RESP_ERR),
    CONST(MLX5_CQE_INVALID, CQE_INVALID),
    // --- error syndromes
    CONST(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, SYND_LOCAL_LENGTH_ERR),
    CONST(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, SYND_LOCAL_QP_OP_ERR),
    CONST(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, SYND_LOCAL_PROT_ERR),
    CONST(MLX5_CQE_SYNDROME_WR_FLUSH_ERR, SYND_WR_FLUSH_ERR),
    CONST(MLX5_CQE_SYNDROME_MW_BIND_ERR, SYND_MW_BIND_ERR),
    CONST(MLX5_CQE_SYNDROME_BAD_RESP_ERR, SYND_BAD_RESP_ERR),
    CONST(MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR, SYND_LOCAL_ACCESS_ERR),
    CONST(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR, SYND_REMOTE_INVAL_REQ_ERR),
    CONST(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, SYND_REMOTE_ACCESS_ERR),
    CONST(MLX5_CQE_SYNDROME_REMOTE_OP_ERR, SYND_REMOTE_OP_ERR),
    CONST(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR, SYND_TRANSPORT_RETRY_EXC_ERR),
    CONST(MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR, SYND_RNR_RETRY_EXC_ERR),
    CONST(MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR, SYND_REMOTE_ABORTED_ERR),
};
const size_t rust_gin_wire_facts_len = sizeof(rust_gin_wire_facts) / sizeof(rust_gin_wire_facts[0]);

// Constants mlx5dv.h does not state. rdma-core's provider sources do, in
// files that are not installed, so the test holds the cited values.
const rust_gin_wire_extra rust_gin_wire_extras[] = {
    {"MAX_DS", MAX_DS, "rdma-core providers/mlx5/qp.c: be32toh(ctrl->qpn_ds) & 0x3F (6-bit DS field)"},
    {"UAR_DB_OFFSET", UAR_DB_OFFSET, "rdma-core providers/mlx5/mlx5.h: MLX5_BF_OFFSET = 0x800"},
    {"OP_DUMP", OP_DUMP, "Linux include/linux/mlx5/qp.h: MLX5_OPCODE_DUMP = 0x23 (not in mlx5dv.h)"},
};
const size_t rust_gin_wire_extras_len = sizeof(rust_gin_wire_extras) / sizeof(rust_gin_wire_extras[0]);

// The owner-bit helpers of wire.h, callable from the test.
int rust_gin_wire_cqe_is_sw_owned(uint8_t op_own, uint32_t ci, uint32_t log_cnt) {
  return cqe_is_sw_owned(op_own, ci, log_cnt) ? 1 : 0;
}
uint8_t rust_gin_wire_cqe_opcode(uint8_t op_own) { return cqe_opcode(op_own); }
uint8_t rust_gin_wire_cqe_owner(uint8_t op_own) { return cqe_owner(op_own); }

// The RC WQE as the list entry points write it (SendQueue::post_list,
// Family::batch), for the oracle: with `uniform`, by the writer of a list
// of requests like this one (its ListKind, mlx5/wqe.h); else by that of a
// mixed list (ShapePolicy::by_shape). rust_gin_mlx5_build_wqe builds as
// the GIN operations post (select).
int rust_gin_wire_build_listed_wqe(const rust_gin_mlx5_request* req, uint16_t index, uint32_t qpn, int cq_update,
                                   int uniform, void* out64) {
  if (!req || !out64 || !request_valid(*req)) return RUST_GIN_ERR_INVALID;
  Family::Slots s = {};
  s.buf = reinterpret_cast<uint64_t>(out64);  // a ring of one WQEBB
  s.qpn = qpn;
  const ListKind kind = uniform ? list_kind(req->opcode, req->flags) : ListKind::mixed;
  Family::batch(s, static_cast<uint8_t>(kind), [&](const auto& w) { w.wqe(index, *req, cq_update != 0); });
  return RUST_GIN_OK;
}

// The DC WQE builder of mlx5/wqe.h (what a DCI's Family::write stores; with
// `by_shape`, as the list entry points build it) and the datagram-segment
// setters of wire.h, for the oracle test.
int rust_gin_wire_build_dc_wqe(const rust_gin_mlx5_request* req, uint64_t ticket, uint32_t qpn, int cq_update,
                               const void* av48, int by_shape, void* out128) {
  if (!req || !av48 || !out128 || !request_valid(*req)) return RUST_GIN_ERR_INVALID;
  Seg* out = static_cast<Seg*>(out128);
  Seg av[3];
  __builtin_memcpy(av, av48, sizeof av);
  if (by_shape) {
    emit_dc_wqe<ShapePolicy::by_shape>(*req, ticket, qpn, cq_update != 0, av, out);
  } else {
    emit_dc_wqe(*req, ticket, qpn, cq_update != 0, av, out);
  }
  return RUST_GIN_OK;
}
void rust_gin_wire_set_dgram_seg(void* out48, uint64_t key, uint32_t dqp_dct, uint8_t ext, uint8_t stat_rate_sl,
                                 uint8_t fl_mlid, uint16_t rlid, const uint8_t* rmac, uint8_t tclass,
                                 uint8_t hop_limit, uint32_t grh_gid_fl, const uint8_t* rgid) {
  WqeAv av = {};  // rdma-core's setter leaves reserved0 as the WQE had it: zero here
  set_dgram_seg(&av, key, dqp_dct, ext, stat_rate_sl, fl_mlid, rlid, rmac, tclass, hop_limit, grh_gid_fl, rgid);
  __builtin_memcpy(out48, &av, sizeof av);
}
void rust_gin_wire_set_dc_addr(void* out48, const void* ah_av48, uint32_t dctn, uint64_t dc_key) {
  WqeAv ah, av;
  __builtin_memcpy(&ah, ah_av48, sizeof ah);
  set_dc_addr(&av, ah, dctn, dc_key);
  __builtin_memcpy(out48, &av, sizeof av);
}
