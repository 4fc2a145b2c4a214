// mlx5 send-queue and completion wire formats, as the NIC reads and writes
// them (big-endian on the wire). Mirrors rdma-core's infiniband/mlx5dv.h;
// tests/wire_oracle.rs checks every size, offset, constant and whole WQE
// against rdma-core itself. The Rust twin is host/mlx5/wire.rs.
#pragma once

#include "rust_gin/port/port.h"

namespace rust_gin {
namespace mlx5 {

// --- constants (names follow mlx5dv.h without the MLX5_ prefix) -----------
enum : uint32_t {
  SEND_WQE_BB = 64,
  SEND_WQE_SHIFT = 6,
  SEND_DS_BYTES = 16,  // DS counts 16-byte octowords
  MAX_DS = 63,         // 6-bit DS field
  INLINE_SEG = 0x80000000u,
  INVALID_LKEY = 0x100,
  RCV_DBR = 0,
  SND_DBR = 1,
  CQE_SIZE = 64,
  CQE_OWNER_MASK = 1,
  CQ_DOORBELL = 0x20,  // offset of the CQ doorbell in the UAR page
  UAR_DB_OFFSET = 0x800,  // offset of the send doorbell (BlueFlame reg) in the UAR page
};

enum Opcode : uint8_t {
  OP_NOP = 0x00,
  OP_RDMA_WRITE = 0x08,
  OP_RDMA_WRITE_IMM = 0x09,
  OP_SEND = 0x0a,
  OP_RDMA_READ = 0x10,
  OP_ATOMIC_CS = 0x11,
  OP_ATOMIC_FA = 0x12,
  OP_ATOMIC_MASKED_CS = 0x14,
  OP_ATOMIC_MASKED_FA = 0x15,
  // Not in mlx5dv.h: Linux include/linux/mlx5/qp.h. The NIC DMA-reads its
  // local data segment; as a PCIe read it cannot pass the NIC's earlier
  // writes, so its CQE proves READ data landed (NCCL GDAKI's flush, DOCA's
  // doca_gpu_dev_verbs_wqe_prepare_dump: ctrl + one data segment, DS 2).
  OP_DUMP = 0x23,
};

// fm_ce_se byte of the control segment.
enum CtrlFlags : uint8_t {
  CTRL_SOLICITED = 1u << 1,
  CTRL_CQ_UPDATE = 2u << 2,
  CTRL_FENCE = 4u << 5,                 // strong fence: wait for all prior WQEs
  CTRL_INITIATOR_SMALL_FENCE = 1u << 5, // wait for prior RDMA READ/atomics
};

enum CqeOpcode : uint8_t {
  CQE_REQ = 0,
  CQE_RESP_WR_IMM = 1,
  CQE_RESP_SEND = 2,
  CQE_REQ_ERR = 13,
  CQE_RESP_ERR = 14,
  CQE_INVALID = 15,
};

enum CqeSyndrome : uint8_t {
  SYND_LOCAL_LENGTH_ERR = 0x01,
  SYND_LOCAL_QP_OP_ERR = 0x02,
  SYND_LOCAL_PROT_ERR = 0x04,
  SYND_WR_FLUSH_ERR = 0x05,
  SYND_MW_BIND_ERR = 0x06,
  SYND_BAD_RESP_ERR = 0x10,
  SYND_LOCAL_ACCESS_ERR = 0x11,
  SYND_REMOTE_INVAL_REQ_ERR = 0x12,
  SYND_REMOTE_ACCESS_ERR = 0x13,
  SYND_REMOTE_OP_ERR = 0x14,
  SYND_TRANSPORT_RETRY_EXC_ERR = 0x15,
  SYND_RNR_RETRY_EXC_ERR = 0x16,
  SYND_REMOTE_ABORTED_ERR = 0x22,
};

// --- segments ----------------------------------------------------------------
// rdma-core declares the control segment packed because of a be16 at offset 9;
// bytes keep it naturally aligned here without changing a single offset.
struct CtrlSeg {
  uint32_t opmod_idx_opcode;  // be32: opmod<<24 | wqe_index16<<8 | opcode
  uint32_t qpn_ds;            // be32: qpn<<8 | ds
  uint8_t signature;
  uint8_t dci_stream_channel_id[2];
  uint8_t fm_ce_se;
  uint32_t imm;  // immediate data, as given (already in wire order)
};
struct RaddrSeg {
  uint64_t raddr;  // be64
  uint32_t rkey;   // be32
  uint32_t reserved;
};
struct DataSeg {
  uint32_t byte_count;  // be32
  uint32_t lkey;        // be32
  uint64_t addr;        // be64
};
struct InlineSeg {
  uint32_t byte_count;  // be32, with INLINE_SEG set; data follows
};
struct AtomicSeg {
  uint64_t swap_add;  // be64: the add value for FA, the swap value for CS
  uint64_t compare;   // be64
};

static_assert(sizeof(CtrlSeg) == 16, "ctrl seg");
static_assert(offsetof(CtrlSeg, qpn_ds) == 4 && offsetof(CtrlSeg, signature) == 8 &&
                  offsetof(CtrlSeg, fm_ce_se) == 11 && offsetof(CtrlSeg, imm) == 12,
              "ctrl seg offsets");
static_assert(sizeof(RaddrSeg) == 16 && offsetof(RaddrSeg, rkey) == 8, "raddr seg");
static_assert(sizeof(DataSeg) == 16 && offsetof(DataSeg, lkey) == 4 && offsetof(DataSeg, addr) == 8,
              "data seg");
static_assert(sizeof(AtomicSeg) == 16 && offsetof(AtomicSeg, compare) == 8, "atomic seg");

// --- DC (Dynamically Connected) ---------------------------------------------
// The datagram segment a DC initiator's WQE carries right after its control
// segment: struct mlx5_wqe_datagram_seg, which is one struct mlx5_wqe_av.
// rdma-core writes it in mlx5_send_wr_set_dc_addr (providers/mlx5/qp.c): the
// address handle's AV, then dqp_dct |= be32(dctn | MLX5_EXTENDED_UD_AV) and
// key.dc_key = be64(dc_key); mlx5dv_set_dgram_seg (mlx5dv.h) writes every
// field. The DCT number is 24 bits; EXTENDED_UD_AV says the AV is the full
// 48-byte form (with GRH / RoCE fields).
enum : uint32_t {
  EXTENDED_UD_AV = 0x80000000u,
  DATAGRAM_SEG_BYTES = 48,
};
struct WqeAv {
  uint64_t dc_key;  // be64 (key.dc_key; for UD: be32 qkey, be32 reserved)
  uint32_t dqp_dct; // be32: EXTENDED_UD_AV | DCT number (UD: remote QPN)
  uint8_t stat_rate_sl;
  uint8_t fl_mlid;
  uint16_t rlid;  // be16
  uint8_t reserved0[4];
  uint8_t rmac[6];
  uint8_t tclass;
  uint8_t hop_limit;
  uint32_t grh_gid_fl;  // be32
  uint8_t rgid[16];
};
static_assert(sizeof(WqeAv) == DATAGRAM_SEG_BYTES, "mlx5_wqe_av");
static_assert(offsetof(WqeAv, dqp_dct) == 8 && offsetof(WqeAv, stat_rate_sl) == 12 && offsetof(WqeAv, fl_mlid) == 13 &&
                  offsetof(WqeAv, rlid) == 14 && offsetof(WqeAv, rmac) == 20 && offsetof(WqeAv, tclass) == 26 &&
                  offsetof(WqeAv, hop_limit) == 27 && offsetof(WqeAv, grh_gid_fl) == 28 && offsetof(WqeAv, rgid) == 32,
              "mlx5_wqe_av offsets");

// --- CQE ----------------------------------------------------------------------
// Only the fields a requester reads; offsets as in struct mlx5_cqe64 and
// struct mlx5_err_cqe.
struct Cqe64 {
  uint8_t rsvd0[32];
  uint32_t srqn_uidx;       // @32
  uint32_t imm_inval_pkey;  // @36
  uint8_t app;              // @40
  uint8_t app_op;
  uint16_t app_info;
  uint32_t byte_cnt;      // @44 be32
  uint64_t timestamp;     // @48 be64; in an error CQE: hw_err_synd@52, vendor@54, syndrome@55
  uint32_t sop_drop_qpn;  // @56 be32; in an error CQE: s_wqe_opcode_qpn (opcode<<24 | qpn)
  uint16_t wqe_counter;   // @60 be16: WQEBB index of the completed WQE
  uint8_t signature;      // @62
  uint8_t op_own;         // @63: opcode<<4 | format<<2 | se<<1 | owner
};
static_assert(sizeof(Cqe64) == 64, "cqe64");
static_assert(offsetof(Cqe64, byte_cnt) == 44 && offsetof(Cqe64, timestamp) == 48 &&
                  offsetof(Cqe64, sop_drop_qpn) == 56 && offsetof(Cqe64, wqe_counter) == 60 &&
                  offsetof(Cqe64, op_own) == 63,
              "cqe64 offsets");
enum : uint32_t {
  ERR_CQE_VENDOR_SYNDROME_OFFSET = 54,
  ERR_CQE_SYNDROME_OFFSET = 55,
  ERR_CQE_WQE_OPCODE_QPN_OFFSET = 56,
};

RG_INLINE uint8_t cqe_opcode(uint8_t op_own) { return op_own >> 4; }
RG_INLINE uint8_t cqe_owner(uint8_t op_own) { return op_own & CQE_OWNER_MASK; }
// A CQE at consumer index ci (CQ of 2^log_cnt entries) belongs to software
// when its owner bit equals the wrap parity of ci and it is not INVALID.
RG_INLINE bool cqe_is_sw_owned(uint8_t op_own, uint32_t ci, uint32_t log_cnt) {
  return cqe_owner(op_own) == ((ci >> log_cnt) & 1u) && cqe_opcode(op_own) != CQE_INVALID;
}

// --- setters (same arguments and encoding as mlx5dv_set_*_seg) ----------------
// mlx5dv_set_dgram_seg: every field of the datagram segment.
RG_INLINE void set_dgram_seg(WqeAv* seg, uint64_t key, uint32_t dqp_dct, uint8_t ext, uint8_t stat_rate_sl,
                             uint8_t fl_mlid, uint16_t rlid, const uint8_t* rmac, uint8_t tclass, uint8_t hop_limit,
                             uint32_t grh_gid_fl, const uint8_t* rgid) {
  seg->dc_key = bswap64(key);
  seg->dqp_dct = bswap32((static_cast<uint32_t>(ext) << 31) | dqp_dct);
  seg->stat_rate_sl = stat_rate_sl;
  seg->fl_mlid = fl_mlid;
  seg->rlid = bswap16(rlid);
  for (int i = 0; i < 6; ++i) seg->rmac[i] = rmac[i];
  seg->tclass = tclass;
  seg->hop_limit = hop_limit;
  seg->grh_gid_fl = bswap32(grh_gid_fl);
  for (int i = 0; i < 16; ++i) seg->rgid[i] = rgid[i];
}
// mlx5_send_wr_set_dc_addr: the address handle's AV with the DCT number
// (and EXTENDED_UD_AV) or-ed in and the DC key set.
RG_INLINE void set_dc_addr(WqeAv* seg, const WqeAv& ah_av, uint32_t dctn, uint64_t dc_key) {
  *seg = ah_av;
  seg->dqp_dct |= bswap32(dctn | EXTENDED_UD_AV);
  seg->dc_key = bswap64(dc_key);
}

RG_INLINE uint32_t ctrl_opmod_idx_opcode(uint16_t pi, uint8_t opcode, uint8_t opmod) {
  return bswap32((static_cast<uint32_t>(opmod) << 24) | (static_cast<uint32_t>(pi) << 8) | opcode);
}
RG_INLINE uint32_t ctrl_qpn_ds(uint32_t qpn, uint8_t ds) { return bswap32((qpn << 8) | ds); }

// A 64-byte WQE (one WQEBB) assembled in registers and written with four
// 16-byte stores: every WQE this library posts fits one WQEBB.
struct alignas(16) Wqe64 {
  uint32_t w[16];
};
static_assert(sizeof(Wqe64) == SEND_WQE_BB, "one WQEBB");

// One 16-byte segment, as four 32-bit words in memory order.
typedef uint32_t Seg __attribute__((vector_size(16)));
// The same 16 bytes as two little-endian 64-bit halves. The builders below
// assemble each half in a scalar register and join the two: one move per
// half on x86 (four 32-bit inserts cost ~20 instructions per WQE), a
// register pair on a GPU either way.
typedef uint64_t Seg64 __attribute__((vector_size(16)));
RG_INLINE Seg seg_of(uint64_t lo, uint64_t hi) { return (Seg)(Seg64{lo, hi}); }

// Stores a segment into a ring: one 16-byte store on a GPU (the ISA checks
// hold WQE stores to that width); on x86 its two 64-bit halves, straight
// from the general registers the builders assemble them in (joining them in
// an SSE register first costs three more instructions per segment).
RG_INLINE void store_seg(Seg* dst, const Seg& v) {
#if RG_GPU
  *dst = v;
#else
  const Seg64 h = (Seg64)v;
  const uint64_t lo = h[0], hi = h[1];
  __builtin_memcpy(dst, &lo, 8);
  __builtin_memcpy(reinterpret_cast<char*>(dst) + 8, &hi, 8);
#endif
}

RG_INLINE Seg seg_ctrl(uint16_t pi, uint8_t opcode, uint8_t opmod, uint32_t qpn, uint8_t fm_ce_se, uint8_t ds,
                       uint8_t signature, uint32_t imm) {
  // be32 opmod_idx_opcode @0 and be32 qpn_ds @4 are one be64 of the two
  // words swapped; signature @8, dci_stream_channel_id @9..10 (zero),
  // fm_ce_se @11, imm @12.
  const uint64_t words = (static_cast<uint64_t>((static_cast<uint32_t>(opmod) << 24) |
                                                (static_cast<uint32_t>(pi) << 8) | opcode)
                          << 32) |
                         ((qpn << 8) | ds);
  return seg_of(bswap64(words),
                static_cast<uint64_t>(signature) | (static_cast<uint64_t>(fm_ce_se) << 24) |
                    (static_cast<uint64_t>(imm) << 32));
}
RG_INLINE Seg seg_raddr(uint64_t raddr, uint32_t rkey) { return seg_of(bswap64(raddr), bswap32(rkey)); }
RG_INLINE Seg seg_data(uint32_t length, uint32_t lkey, uint64_t addr) {
  // be32 byte_count @0, be32 lkey @4: one be64 of the two words swapped.
  return seg_of(bswap64((static_cast<uint64_t>(length) << 32) | lkey), bswap64(addr));
}
RG_INLINE Seg seg_atomic(uint64_t swap_add, uint64_t compare) { return seg_of(bswap64(swap_add), bswap64(compare)); }
// Inline data of up to 8 bytes (signal and putValue payloads); its segment is
// one octoword: 4-byte header, value, zero padding.
RG_INLINE Seg seg_inline8(uint64_t value, uint32_t len) {
  // Bytes past `len` are padding: zero, as rdma-core leaves them.
  if (len < 8) value &= (uint64_t{1} << (8 * len)) - 1;
  // The value's bytes as they sit in memory, after the 4-byte header.
  return seg_of(bswap32(len | INLINE_SEG) | (value << 32), value >> 32);
}

}  // namespace mlx5
}  // namespace rust_gin
