/* Facts taken from rdma-core's own infiniband/mlx5dv.h by a C compiler:
 * sizes, field offsets and constants. The wire-format tests compare the
 * Rust (host/mlx5/wire.rs) and C++ (device/include/rust_gin/mlx5/wire.h)
 * definitions against this table, so neither is checked against a copy of
 * our own assumptions. Generated list; edit freely. */
#include <stddef.h>
#include <infiniband/mlx5dv.h>

struct rust_gin_oracle_fact {
  const char *name;
  unsigned long long value;
};

#define SIZE(t) {"sizeof(" #t ")", sizeof(struct t)}
#define OFF(t, f) {"offsetof(" #t "." #f ")", offsetof(struct t, f)}
#define CONST(c) {#c, (unsigned long long)(c)}

const struct rust_gin_oracle_fact rust_gin_mlx5dv_facts[] = {
    SIZE(mlx5_wqe_ctrl_seg),
    SIZE(mlx5_wqe_raddr_seg),
    SIZE(mlx5_wqe_data_seg),
    SIZE(mlx5_wqe_atomic_seg),
    SIZE(mlx5_wqe_inl_data_seg),
    SIZE(mlx5_cqe64),
    SIZE(mlx5_err_cqe),
    OFF(mlx5_wqe_ctrl_seg, opmod_idx_opcode),
    OFF(mlx5_wqe_ctrl_seg, qpn_ds),
    OFF(mlx5_wqe_ctrl_seg, signature),
    OFF(mlx5_wqe_ctrl_seg, dci_stream_channel_id),
    OFF(mlx5_wqe_ctrl_seg, fm_ce_se),
    OFF(mlx5_wqe_ctrl_seg, imm),
    OFF(mlx5_wqe_raddr_seg, raddr),
    OFF(mlx5_wqe_raddr_seg, rkey),
    OFF(mlx5_wqe_raddr_seg, reserved),
    OFF(mlx5_wqe_data_seg, byte_count),
    OFF(mlx5_wqe_data_seg, lkey),
    OFF(mlx5_wqe_data_seg, addr),
    OFF(mlx5_wqe_atomic_seg, swap_add),
    OFF(mlx5_wqe_atomic_seg, compare),
    OFF(mlx5_wqe_inl_data_seg, byte_count),
    OFF(mlx5_cqe64, srqn_uidx),
    OFF(mlx5_cqe64, imm_inval_pkey),
    OFF(mlx5_cqe64, byte_cnt),
    OFF(mlx5_cqe64, timestamp),
    OFF(mlx5_cqe64, sop_drop_qpn),
    OFF(mlx5_cqe64, wqe_counter),
    OFF(mlx5_cqe64, signature),
    OFF(mlx5_cqe64, op_own),
    OFF(mlx5_err_cqe, srqn),
    OFF(mlx5_err_cqe, vendor_err_synd),
    OFF(mlx5_err_cqe, syndrome),
    OFF(mlx5_err_cqe, s_wqe_opcode_qpn),
    OFF(mlx5_err_cqe, wqe_counter),
    OFF(mlx5_err_cqe, signature),
    OFF(mlx5_err_cqe, op_own),
    CONST(MLX5_OPCODE_NOP),
    CONST(MLX5_OPCODE_RDMA_WRITE),
    CONST(MLX5_OPCODE_RDMA_WRITE_IMM),
    CONST(MLX5_OPCODE_SEND),
    CONST(MLX5_OPCODE_RDMA_READ),
    CONST(MLX5_OPCODE_ATOMIC_CS),
    CONST(MLX5_OPCODE_ATOMIC_FA),
    CONST(MLX5_OPCODE_ATOMIC_MASKED_CS),
    CONST(MLX5_OPCODE_ATOMIC_MASKED_FA),
    CONST(MLX5_WQE_CTRL_CQ_UPDATE),
    CONST(MLX5_WQE_CTRL_SOLICITED),
    CONST(MLX5_WQE_CTRL_FENCE),
    CONST(MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE),
    CONST(MLX5_SEND_WQE_BB),
    CONST(MLX5_SEND_WQE_SHIFT),
    CONST(MLX5_INLINE_SEG),
    CONST(MLX5_INVALID_LKEY),
    CONST(MLX5_RCV_DBR),
    CONST(MLX5_SND_DBR),
    CONST(MLX5_CQ_DOORBELL),
    CONST(MLX5_CQE_OWNER_MASK),
    CONST(MLX5_CQE_REQ),
    CONST(MLX5_CQE_RESP_WR_IMM),
    CONST(MLX5_CQE_RESP_SEND),
    CONST(MLX5_CQE_REQ_ERR),
    CONST(MLX5_CQE_RESP_ERR),
    CONST(MLX5_CQE_INVALID),
    CONST(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR),
    CONST(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR),
    CONST(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR),
    CONST(MLX5_CQE_SYNDROME_WR_FLUSH_ERR),
    CONST(MLX5_CQE_SYNDROME_MW_BIND_ERR),
    CONST(MLX5_CQE_SYNDROME_BAD_RESP_ERR),
    CONST(MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR),
    CONST(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR),
    CONST(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR),
    CONST(MLX5_CQE_SYNDROME_REMOTE_OP_ERR),
    CONST(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR),
    CONST(MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR),
    CONST(MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR),
};
const size_t rust_gin_mlx5dv_facts_len = sizeof(rust_gin_mlx5dv_facts) / sizeof(rust_gin_mlx5dv_facts[0]);
